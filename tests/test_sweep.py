"""suite.cluster.sweep: dry runs per scale, bad input one by one, a local sweep through MLPerf's tools."""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

import pytest

from conftest import REPO, read_json, run, subprocess_env
from test_launch_cli import OCI_ENV, node_hostfile
from suite.cluster import hostfile, sweep
from suite.common import profiles

OCI = ["--profile", "oci-bm-gpu-gm4-8", "--network-interface", "eth0"]
CLOSED = "8=closed_8xA100_gbs3264,16=closed_16xA100_gbs3264,32=closed_32xA100_gbs3264"
LOCAL = ["--profile", "local-cpu", "--hostfile", "hostfiles/localhost", "--scales", "1,2",
         "--preset", "sweep_cpu"]
SUBMITTER = "mlperf-hvd-suite"
SYSTEMS = ("local-cpu_n1_np1", "local-cpu_n1_np2")
ENV_LINE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def sweep_cli(*args, timeout=60):
    return run([sys.executable, "-m", "suite.cluster.sweep", *args], timeout=timeout)


def dry_run(*args):
    """[(header, [command argv], {variable: value})] per scale, from --dry-run's output."""
    result = sweep_cli("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    blocks = []
    for line in result.stdout.splitlines():
        if line.startswith("# scale"):
            blocks.append((line, [], {}))
        elif ENV_LINE.match(line):
            key, value = line.split("=", 1)
            blocks[-1][2][key] = value
        else:
            blocks[-1][1].append(shlex.split(line))
    return blocks


def flag(command, name):
    return command[command.index(name) + 1]


def one_line_error(result, *culprits, code=2):
    assert result.returncode == code, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    return lines[0]


# ---- dry runs ----

def test_dry_run_localhost_lists_every_run():
    blocks = dry_run("--out", "/tmp/never-written", *LOCAL, "--", "models.resnet50", "--data-dir", "/data")
    assert [len(commands) for _, commands, _ in blocks] == [5, 5]  # resnet: 5 runs, as MLPerf asks
    for (header, commands, env), np, system in zip(blocks, (1, 2), SYSTEMS):
        assert f"system {system}, {np} processes on 1 host(s), preset sweep_cpu, 5 runs" in header
        for index, command in enumerate(commands):
            assert command[:5] == ["horovodrun", "-np", str(np), "-H", "localhost:2"]
            assert command[command.index("-m") + 1] == "models.resnet50"
            assert flag(command, "--data-dir") == "/data"
            assert flag(command, "--preset") == "sweep_cpu"
            assert flag(command, "--run-dir") == f"/tmp/never-written/runs/{system}/run_{index}"
            sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
            assert sets == [f"submission_org={SUBMITTER}", f"submission_platform={system}",
                            "submission_status=onprem"]
        # local-cpu's one variable, and the profile the launcher applied, for the ranks to record.
        local = profiles.load("local-cpu")
        assert env == {"OMPI_MCA_mpi_yield_when_idle": "1", **local.timeouts.env(),
                       "SUITE_PROFILE": local.path,
                       "SUITE_PROFILE_RESOLVED": "1"}
    assert not os.path.exists("/tmp/never-written")


def test_dry_run_for_1_2_4_nodes_under_the_oci_profile(tmp_path):
    files = ",".join(node_hostfile(tmp_path, n) for n in (1, 2, 4))
    blocks = dry_run("--out", str(tmp_path / "out"), "--hostfiles", files, "--preset-per-scale", CLOSED,
                     *OCI, "--skip-host-check", "--allreduce", "--", "models.resnet50",
                     "--data-dir", "/data/imagenet")
    assert len(blocks) == 3
    for (header, commands, env), nodes in zip(blocks, (1, 2, 4)):
        np, system = 8 * nodes, f"oci-bm-gpu-gm4-8_n{nodes}_np{8 * nodes}"
        assert f"system {system}, {np} processes on {nodes} host(s)" in header
        assert f"preset closed_{np}xA100_gbs3264, 5 runs" in header
        allreduce, runs = commands[0], commands[1:]
        assert len(runs) == 5
        assert allreduce[allreduce.index("-m") + 1] == "suite.train.allreduce"
        # The launcher hands the allreduce benchmark its profile, for the expected bus bandwidth.
        assert flag(allreduce, "--profile") == profiles.load("oci-bm-gpu-gm4-8").path
        for command in commands:
            assert command[0] == "horovodrun" and flag(command, "-np") == str(np)
            assert flag(command, "-H") == ",".join(f"node-{c}:8" for c in "abcd"[:nodes])
            assert flag(command, "--network-interfaces") == "eth0"
        for index, command in enumerate(runs):
            assert flag(command, "--preset") == f"closed_{np}xA100_gbs3264"
            assert flag(command, "--run-dir") == str(tmp_path / "out" / "runs" / system / f"run_{index}")
        for key, value in OCI_ENV.items():
            assert env[key] == value, key
        assert env["OMPI_MCA_btl_tcp_if_include"] == "eth0"
    assert not (tmp_path / "out").exists()


def test_dry_run_with_mpirun_passes_the_launcher_flags(tmp_path):
    blocks = dry_run("--out", str(tmp_path / "o"), "--hostfiles", node_hostfile(tmp_path, 2), "--preset",
                     "closed_16xA100_gbs3264", *OCI, "--skip-host-check", "--launcher", "mpirun",
                     "--runs", "2", "--", "models.resnet50", "--data-dir", "/d")
    (_, commands, env), = blocks
    assert len(commands) == 2 and all(c[0] == "mpirun" and flag(c, "-np") == "16" for c in commands)
    exported = {c[i + 1] for c in commands for i, arg in enumerate(c) if arg == "-x"}
    assert set(env) <= exported


# ---- bad input, one by one: one line, exit 2, nothing written ----

MODEL = ["--", "models.resnet50", "--data-dir", "/data"]
BAD = {
    "unknown_profile": (["--profile", "oci-gm4", "--hostfile", "hostfiles/localhost", "--scales", "1",
                         "--preset", "sweep_cpu"], ["unknown profile 'oci-gm4'"]),
    "np_beyond_slots": ([*LOCAL[:4], "--scales", "1,3", "--preset", "sweep_cpu"],
                        ["-np 3 is more than the 2 slots", "hostfiles/localhost"]),
    "preset_missing_for_a_scale": ([*LOCAL[:6], "--preset-per-scale", "1=sweep_cpu"],
                                   ["no preset for 2 processes"]),
    "unknown_preset": ([*LOCAL[:6], "--preset", "sweep_gpu"], ["unknown preset 'sweep_gpu'"]),
    "both_presets": ([*LOCAL, "--preset-per-scale", "1=sweep_cpu"], ["exactly one"]),
    "bad_scale": ([*LOCAL[:4], "--scales", "1,two", "--preset", "sweep_cpu"], ["'two'"]),
    "np_flag": ([*LOCAL, "-np", "2"], ["-np is not a sweep flag"]),
    "hostfiles_and_scales": ([*LOCAL, "--hostfiles", "hostfiles/localhost"], ["either --hostfiles"]),
    "no_scales": (["--profile", "local-cpu", "--preset", "sweep_cpu"], ["give the scales"]),
    "placeholder_host": (["--profile", "local-cpu", "--hostfiles", "hostfiles/2node",
                          "--preset", "sweep_cpu"], ["hostfiles/2node:1", "placeholder"]),
    "profile_placeholder": (["--profile", "oci-bm-gpu-gm4-8", "--hostfile", "hostfiles/localhost", "--scales",
                             "1", "--preset", "sweep_cpu"], ["network_interface is a placeholder"]),
}
BAD_MODEL = {
    "run_dir_after_dashes": (["--run-dir", "x"], ["--run-dir after --"]),
    "preset_after_dashes": (["--preset=tiny_cpu"], ["--preset after --"]),
    "seed": (["--set", "seed=3"], ["--set seed=3", "own seed"]),
    "platform": (["--set=submission_platform=x"], ["submission_platform"]),
    "dry_run_after_dashes": (["--dry-run"], ["--dry-run belongs before the --"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_flags(case, tmp_path):
    args, culprits = BAD[case]
    one_line_error(sweep_cli("--out", str(tmp_path / "out"), *args, *MODEL), *culprits)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(BAD_MODEL))
def test_model_flags_the_sweep_owns(case, tmp_path):
    extra, culprits = BAD_MODEL[case]
    one_line_error(sweep_cli("--out", str(tmp_path / "out"), *LOCAL, *MODEL, *extra), *culprits)
    assert not (tmp_path / "out").exists()


def test_remote_nodes_need_a_system_description(tmp_path):
    files = node_hostfile(tmp_path, 2)
    base = ["--out", str(tmp_path / "out"), "--hostfiles", files, "--preset", "closed_16xA100_gbs3264", *OCI,
            "--skip-host-check"]
    one_line_error(sweep_cli(*base, *MODEL), "--system-info", "host_processor_model_name",
                   "accelerator_model_name")
    info = tmp_path / "info.yaml"
    info.write_text("host_processor_model_name: REPLACE-ME\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), str(info),
                   "host_processor_model_name")
    info.write_text("system_name: mine\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), "'system_name'")
    info.write_text("host_processor_model_name: EPYC\n")
    one_line_error(sweep_cli(*base, "--system-info", str(info), *MODEL), "lacks", "host_memory_capacity")
    assert not (tmp_path / "out").exists()


def test_the_shipped_system_info_must_be_filled_in(tmp_path):
    shipped = os.path.join(REPO, "docs", "system-info", "oci-bm-gpu-gm4-8.yaml")
    base = ["--out", str(tmp_path / "out"), "--hostfiles", node_hostfile(tmp_path, 2), "--preset",
            "closed_16xA100_gbs3264", *OCI, "--skip-host-check"]
    one_line_error(sweep_cli(*base, "--system-info", shipped, *MODEL), "host_processors_per_node",
                   "REPLACE-ME")
    filled = tmp_path / "gm4.yaml"
    with open(shipped) as handle:
        filled.write_text(re.sub(r"REPLACE-ME", "2", handle.read()))
    args, passthrough, model = sweep.parse([*base, "--system-info", str(filled), *MODEL])
    plan = sweep.plan_sweep(args, passthrough, model)  # plans, runs nothing
    assert plan.system_info["accelerator_model_name"] == "NVIDIA A100-SXM4-80GB"
    desc = sweep.system_description(plan, plan.scales[0], [], {"device": "gpu"})
    assert (desc["accelerators_per_node"], desc["number_of_nodes"], desc["host_processors_per_node"]) == \
        ("8", "2", "2")


def test_a_folder_that_is_not_a_sweep_is_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    one_line_error(sweep_cli("--out", str(out), *LOCAL, *MODEL), "not empty", "no sweep.json")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


# ---- pure functions ----

def test_hosts_used_fill_slots_in_order():
    hosts = [hostfile.Host("a", 8), hostfile.Host("b", 8), hostfile.Host("c", 8)]
    assert [h.name for h in hostfile.hosts_used(hosts, 8)] == ["a"]
    assert [h.name for h in hostfile.hosts_used(hosts, 9)] == ["a", "b"]
    assert [h.name for h in hostfile.hosts_used(hosts, 24)] == ["a", "b", "c"]


def test_system_description_passes_the_checker(tmp_path):
    from mlperf_logging.system_desc_checker import system_desc_checker
    from suite.cluster.results import RunLog
    args, passthrough, model = sweep.parse(["--out", str(tmp_path / "o"), *LOCAL, *MODEL])
    plan = sweep.plan_sweep(args, passthrough, model)
    logs = [RunLog("x", "resnet", "open", "aborted", 0, 60000)]
    env = {"versions": {"tensorflow": "2.18.1", "horovod": "0.28.1", "python": "3.11"}, "device": "cpu",
           "git_revision": "abc", "launcher": "mpirun", "controller": "mpi"}
    desc = sweep.system_description(plan, plan.scales[1], logs, env)
    assert set(desc) == set(sweep.SYSTEM_FIELDS)
    assert (desc["system_name"], desc["number_of_nodes"], desc["division"]) == (SYSTEMS[1], "1", "open")
    assert desc["accelerators_per_node"] == "0" and desc["framework"] == "TensorFlow 2.18.1, Horovod 0.28.1"
    assert int(desc["host_processors_per_node"]) >= 1
    assert desc["host_processor_vcpu_count"] == str(os.cpu_count())
    assert all(isinstance(value, str) for value in desc.values())
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(desc))
    for ruleset in ("2.1.0", "4.1.0"):
        assert system_desc_checker.check_system_desc(str(path), "training", ruleset)[0]


# ---- a real localhost sweep: 2 scales x 5 runs of the sweep_cpu preset ----

@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    data = root / "data"
    made = run([sys.executable, "-m", "models.resnet50.data_cli", "generate", str(data), "--classes", "2",
                "--train-per-class", "32", "--eval-per-class", "8", "--image-size", "32",
                "--train-shards", "2", "--eval-shards", "2", "--seed", "1"], timeout=120)
    assert made.returncode == 0, made.stderr
    out = root / "out"
    args = ["--out", str(out), *LOCAL, "--allreduce", "--allreduce-args",
            "--min-bytes 4K --max-bytes 256K --iters 5", "--", "models.resnet50", "--data-dir", str(data)]
    started = time.time()
    result = sweep_cli(*args, timeout=1800)
    seconds = time.time() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(f"sweep of 2 scales x 5 runs: {seconds:.0f} s")
    return argparse.Namespace(root=root, out=out, args=args, result=result, seconds=seconds)


def results_dir(out, system):
    return out / SUBMITTER / "results" / system / "resnet"


@pytest.mark.slow
def test_sweep_writes_the_submission_layout(swept):
    out = swept.out
    manifest = read_json(out / "sweep.json")
    assert manifest["plan"]["runs"] == 5
    assert [s["system"] for s in manifest["plan"]["scales"]] == list(SYSTEMS)
    assert {record["status"] for record in manifest["runs"].values()} == {"done"}
    assert len(manifest["runs"]) == 10
    for system, np in zip(SYSTEMS, (1, 2)):
        assert sorted(os.listdir(results_dir(out, system))) == [f"result_{i}.txt" for i in range(5)]
        desc = read_json(out / SUBMITTER / "systems" / f"{system}.json")
        assert desc["system_name"] == system and desc["division"] == "open" and desc["number_of_nodes"] == "1"
        seeds = set()
        for index in range(5):
            run_dir = out / "runs" / system / f"run_{index}"
            for name in ("config.json", "env.json", "summary.json", "launch.json", "output.txt"):
                assert (run_dir / name).exists(), (run_dir, name)
            assert read_json(run_dir / "summary.json")["world_size"] == np
            assert read_json(run_dir / "launch.json")["exit_code"] == 0
            seeds.add(read_json(run_dir / "config.json")["seed"])
            with open(results_dir(out, system) / f"result_{index}.txt") as copy, \
                    open(run_dir / "result_0.txt") as original:
                assert copy.read() == original.read()
        assert len(seeds) == 5  # every run drew its own seed
        if np == 2:
            assert_launched_through_the_launcher(out / "runs" / system / "run_0")
        assert read_json(out / "runs" / system / "allreduce.json")["world_size"] == np
    implementation = out / SUBMITTER / "benchmarks" / "resnet" / "implementations" / "tensorflow-horovod"
    assert (implementation / "README.md").exists()


def assert_launched_through_the_launcher(run_dir):
    """A 2-process model run made by `suite.cluster.launch` (as every sweep run is): record and outcome."""
    summary = read_json(run_dir / "summary.json")
    assert summary["world_size"] == 2 and summary["weights_in_sync"]
    env = read_json(run_dir / "env.json")
    # horovodrun without --gloo runs Horovod's MPI controller through mpirun.
    assert (env["launcher"], env["controller"]) == ("mpirun", "mpi")
    record = read_json(run_dir / "launch.json")
    assert record["exit_code"] == 0 and record["np"] == 2 and record["profile"]["name"] == "local-cpu"
    assert record["command"][:5] == ["horovodrun", "-np", "2", "-H", "localhost:2"]


@pytest.mark.slow
def test_package_checker_accepts_the_open_submission(swept, tmp_path):
    result = run([sys.executable, "-m", "mlperf_logging.package_checker", str(swept.out / SUBMITTER),
                  "training", "2.1.0", "--log_output", str(tmp_path / "package_checker.log")], timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "PACKAGE CHECKER FOUND NO ERRORS, SUCCESS" in output, output[-3000:]
    assert not [line for line in output.splitlines() if line.startswith("ERROR")], output[-3000:]
    for system in SYSTEMS:
        assert f"System description checker passed for {system}" in output


@pytest.mark.slow
def test_result_summarizer_scores_every_system(swept, tmp_path):
    from suite.cluster import results
    # It prints a header and writes its table as CSV and JSON (without --csv: summary.json in its
    # working directory, hence the cwd).
    summarize = [sys.executable, "-m", "mlperf_logging.result_summarizer", str(swept.out / SUBMITTER),
                 "training", "2.1.0", "--csv", str(tmp_path / "scores.csv")]
    result = subprocess.run(summarize, cwd=tmp_path, env=subprocess_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Strong Scaling Scores" in result.stdout and "CRITICAL" not in result.stdout, result.stdout
    assert (tmp_path / "scores.csv").exists()
    scores = {row["system"]: row for row in read_json(tmp_path / "scores.json")}
    assert set(scores) == set(SYSTEMS)
    for system in SYSTEMS:
        logs = [results.read_run(str(path), "resnet") for path in
                sorted(results_dir(swept.out, system).glob("result_*.txt"))]
        # Its arithmetic: every compliant run, status not checked, fastest and slowest dropped.
        expected = results.olympic_mean([log.minutes for log in logs])
        assert scores[system]["resnet"] == pytest.approx(expected, abs=1e-9)  # its JSON keeps 10 decimals
        assert scores[system]["division"] == "open" and scores[system]["submitter"] == SUBMITTER


@pytest.mark.slow
def test_report_of_the_sweep(swept):
    from PIL import Image
    result = run([sys.executable, "-m", "suite.cluster.report", str(swept.out)], timeout=300)
    assert result.returncode == 0, result.stderr
    report = swept.out / "report"
    for png in report.glob("*.png"):
        with Image.open(png) as image:
            image.verify()
    text = (report / "report.md").read_text()
    for system in SYSTEMS:
        for path in sorted(results_dir(swept.out, system).glob("result_*.txt")):
            with open(path) as handle:
                events = {e["key"]: e for e in (json.loads(line.split(":::MLLOG ", 1)[1]) for line in handle)}
            minutes = (events["run_stop"]["time_ms"] - events["run_start"]["time_ms"]) / 60000
            start, stop = events["run_start"]["time_ms"], events["run_stop"]["time_ms"]
            assert f"| {start} | {stop} | {minutes:.4f} |" in text
    assert (report / "allreduce.png").exists() and "Projected beside measured" in text


@pytest.mark.slow
def test_other_arguments_on_the_same_folder_are_refused(swept):
    before = _snapshot(swept.out)
    args = [a if a != "1,2" else "1" for a in swept.args]
    one_line_error(sweep_cli(*args), "sweep.json", "another scales")
    assert _snapshot(swept.out) == before


@pytest.mark.slow
def test_resume_redoes_only_the_unfinished_run(swept):
    """Run 1 lost its copied result only (its run finished): copied again, not rerun. Run 3 was cut off
    mid-run (no run_stop, no summary.json) and left a truncated result: rerun. Nothing else is touched."""
    out, first = swept.out, SYSTEMS[0]
    results = results_dir(out, first)
    kept = (results / "result_1.txt").read_bytes()
    (results / "result_1.txt").unlink()
    _truncate(results / "result_3.txt")
    _truncate(out / "runs" / first / "run_3" / "result_0.txt")
    (out / "runs" / first / "run_3" / "summary.json").unlink()
    before = {path: (path.read_bytes(), path.stat().st_mtime_ns) for system in SYSTEMS
              for path in results_dir(out, system).glob("result_*.txt") if path.name != "result_3.txt"
              or system != first}
    result = sweep_cli(*swept.args, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stdout.count("done earlier, skipped") == 8 + 2  # 8 runs and 2 allreduce checks
    assert f"{first} run 1: finished earlier, result copied now" in result.stdout
    assert re.search(rf"{first} run 3: aborted|{first} run 3: success", result.stdout)
    for path, (data, mtime) in before.items():
        assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime, path
    assert (results / "result_1.txt").read_bytes() == kept
    manifest = read_json(out / "sweep.json")
    attempts = {key: record["attempts"] for key, record in manifest["runs"].items()}
    assert attempts.pop(f"{first}/3") == 2 and set(attempts.values()) == {1}
    assert (out / "runs" / first / "run_3.attempt").is_dir()
    assert (out / "runs" / first / "result_3.incomplete.txt").exists()
    assert (results / "result_3.txt").read_text().count('"key": "run_stop"') == 1


def _truncate(path):
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(line for line in lines if '"run_stop"' not in line))


def _snapshot(folder):
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
