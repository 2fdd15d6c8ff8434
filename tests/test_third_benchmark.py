"""A third benchmark is one folder under models/: tests/data/third_benchmark/tinymlp, copied into a
models/ package of its own beside a copy of the repository's, runs through every public entry point with
the repository's suite/ as it is (nothing in suite/ names it; it is found by looking in models/).

One real launch serves the run-time half: a sweep of one 2-rank scale, which starts
`horovodrun -np 2 ... python -m models.tinymlp` through suite.cluster.launch and writes the MLPerf results
folder the report reads. The official checkers know only MLPerf's own benchmarks, so they are not run
on this one's log.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers.running import REPO, subprocess_env

pytestmark = pytest.mark.slow

THIRD = os.path.join(REPO, "tests", "data", "third_benchmark", "tinymlp")
MODULE = "models.tinymlp"
HOSTFILE = os.path.join(REPO, "hostfiles", "localhost")
GPU_PROFILE = ["--profile", "oci-bm-gpu-gm4-8", "--network-interface", "eth0", "--mpi-subnet", "10.0.0.0/16"]


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A folder whose models/ holds the repository's benchmarks and the third; suite/ stays the
    repository's."""
    root = tmp_path_factory.mktemp("third")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(os.path.join(REPO, "models"), root / "models", ignore=ignore)
    shutil.copytree(THIRD, root / "models" / "tinymlp", ignore=ignore)
    return root


def run_there(root, *args, timeout=120):
    # From the copy (python -m puts the working directory first on the path), the suite from the repository.
    return subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(PYTHONPATH=f"{root}{os.pathsep}{REPO}"))


@pytest.fixture(scope="module")
def sweep(root):
    out = root / "sweep"
    result = run_there(root, "-m", "suite.cluster.sweep", "--out", str(out), "--profile", "local-cpu",
                       "--hostfile", HOSTFILE, "--scales", "2", "--runs", "1", "--preset", "tiny_cpu", "--",
                       MODULE, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return out, result


def test_the_third_benchmark_is_not_in_the_repository(root):
    # Otherwise the rest would prove nothing: the suite can only have found it in the copy.
    assert not os.path.exists(os.path.join(REPO, "models", "tinymlp"))
    found = run_there(root, "-c", "import suite; from suite.common import benchmarks; "
                                  "print(suite.__file__, sorted(benchmarks.discovered()))")
    assert found.returncode == 0, found.stderr
    suite_file, names = found.stdout.split(" ", 1)
    assert suite_file.startswith(os.path.join(REPO, "suite"))
    assert "'tiny_mlp'" in names and "'resnet'" in names and "'bert'" in names


def test_trained_under_horovodrun_through_the_sweep(sweep):
    out, result = sweep
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["plan"]["benchmark"] == "tiny_mlp" and manifest["plan"]["module"] == MODULE
    launched = json.loads((out / "runs" / "local-cpu_n1_np2" / "run_0" / "launch.json").read_text())
    command = " ".join(launched["command"])
    assert command.startswith("horovodrun -np 2 ") and f"-m {MODULE} --preset tiny_cpu" in command
    logs = list((out / "mlperf-hvd-suite" / "results").glob("*/tiny_mlp/result_0.txt"))
    assert len(logs) == 1
    text = logs[0].read_text()
    assert '"key": "submission_benchmark", "value": "tiny_mlp"' in text
    assert '"key": "run_stop"' in text and '"status": "success"' in text
    # The benchmark's required runs (3) come from its description: one run is one too few twice over.
    assert "MLPerf requires 3 for tiny_mlp" in result.stderr + result.stdout


def test_the_report_reads_its_results(root, sweep):
    out, _ = sweep
    result = run_there(root, "-m", "suite.cluster.report", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    markdown = (out / "report" / "report.md").read_text()
    assert markdown.startswith("# Scaling report: tiny_mlp, 1 scale(s)")
    assert "mlperf-hvd-suite/results/local-cpu_n1_np2/tiny_mlp/result_0.txt" in markdown
    assert (out / "report" / "time_to_train_split_tiny_mlp.png").is_file()


def test_launch_and_sweep_plan_it_dry(root):
    launch = run_there(root, "-m", "suite.cluster.launch", "--hostfile", HOSTFILE, "-np", "2", "--profile",
                       "local-cpu", "--dry-run", "--", MODULE, "--preset", "tiny_cpu")
    assert launch.returncode == 0, launch.stderr
    assert f"-m {MODULE} --preset tiny_cpu" in launch.stdout
    # The launcher refuses what every rank would: a preset written for 16 processes, on 2.
    wrong = run_there(root, "-m", "suite.cluster.launch", "--hostfile", HOSTFILE, "-np", "2", "--profile",
                      "local-cpu", "--dry-run", "--", MODULE, "--preset", "closed_16x")
    assert wrong.returncode != 0 and "preset closed_16x is for 16 processes" in wrong.stderr
    plan = run_there(root, "-m", "suite.cluster.sweep", "--dry-run", "--out", str(root / "planned"),
                     "--profile", "local-cpu", "--hostfile", HOSTFILE, "--scales", "1,2", "--preset",
                     "tiny_cpu", "--", MODULE)
    assert plan.returncode == 0, plan.stderr
    scales = [line for line in plan.stdout.splitlines() if line.startswith("# scale")]
    assert len(scales) == 2 and all(line.endswith("preset tiny_cpu, 3 runs") for line in scales)
    # Its RCP pre-flight says plainly that MLPerf has no reference for it, and goes on.
    assert "mlperf-logging has no RCP table for benchmark tiny_mlp under ruleset 2.1.0" in plan.stdout


@pytest.mark.parametrize("kind, where", [
    ("slurm", ["--data", "/shared/data", "--results", "/shared/results"]),
    ("k8s", ["--data", "/mnt/data", "--results", "pvc:results"])])
def test_deploy_renders_its_jobs(root, kind, where):
    job = ["-m", "suite.cluster.deploy", kind, "--model", MODULE, "--nodes", "2", *GPU_PROFILE,
           "--image", "registry.example.com/suite:1", *where, "--run-id", "tiny"]
    rendered = run_there(root, *job, "--preset", "closed_16x")
    assert rendered.returncode == 0, rendered.stderr
    assert f"python -m {MODULE} --preset closed_16x" in rendered.stdout
    refused = run_there(root, *job, "--preset", "closed_8xA100_gbs3264")
    assert refused.returncode != 0
    assert f"not a preset of {MODULE}; choose one of tiny_cpu, closed_16x" in refused.stderr


def test_the_scaling_model_takes_its_parameter_count(root):
    result = run_there(root, "-m", "suite.cluster.scaling", "--model", "tinymlp", "--per-gpu-throughput",
                       "1000", "--per-gpu-batch", "16", "--busbw", "10",
                       "--json", str(root / "projection.json"))
    assert result.returncode == 0, result.stderr
    projection = json.loads((root / "projection.json").read_text())
    # 16 x 32 + 32 + 32 x 4 + 4 weights of fp32.
    assert projection["scenario"]["gradient_bytes"] == 4 * 676
