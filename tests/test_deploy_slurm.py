"""mlperf-deploy slurm: the rendered sbatch scripts' shape, run by bash with a stand-in srun, the sweep
script, Pyxis image names, and the partition and account checked where Slurm answers."""
import json
import os
import re
import socket
import subprocess
import sys

import pytest

from helpers.deploy import (CASES, HOROVOD, IMAGE, PRESETS, SLURM_PATHS, assert_one_line_error, bash_syntax,
                            cluster_tools, deploy_cli, job, oci_env, render, replace, shellcheck, without)
from helpers.running import REPO
from suite.cluster.deploy import job as deploy_job, slurm


pytestmark = pytest.mark.usefixtures("no_cluster_tools")


@pytest.mark.parametrize("name", sorted(n for n in CASES if n.endswith(".sbatch")))
def test_sbatch_scripts_pass_bash_and_shellcheck(name, tmp_path):
    path = tmp_path / name
    path.write_text(render(CASES[name]))
    bash_syntax(path)
    shellcheck(path)


def sbatch_directives(text):
    """{option: value} of the #SBATCH lines; a flag such as --exclusive has the value ''."""
    options = [line[len("#SBATCH --"):].partition("=") for line in text.splitlines()
               if line.startswith("#SBATCH --")]
    return {name: value for name, _, value in options}


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_sbatch_shape(nodes):
    text = render(CASES[f"slurm-{nodes}n.sbatch"])
    directives = sbatch_directives(text)
    assert directives["nodes"] == str(nodes)
    # One task per GPU, all 8 GPUs visible to every task: suite/dist.py pins by local rank.
    assert directives["ntasks-per-node"] == "8" and directives["gpus-per-node"] == "8"
    assert "gpus-per-task" not in directives and directives["exclusive"] == ""
    assert directives["job-name"] == f"rn50-{nodes}n" and directives["output"].startswith("/shared/results/")
    assert (directives["partition"], directives["account"]) == ("gpu", "mlperf")
    srun = text[text.index('\nsrun --mpi="$MPI"'):]
    # A Pyxis container: pmi2 by default (no enroot hook needed), the reason written above it.
    assert "readonly MPI=pmi2\n" in text and "# --mpi auto in a Pyxis container: pmi2" in text
    assert "--ntasks-per-node=8" in srun and "--cpu-bind=ldoms" in srun
    assert '--container-image="$IMAGE"' in srun
    named = sorted(set(oci_env()) | HOROVOD | {"SUITE_PROFILE", "SUITE_PROFILE_RESOLVED", "NCCL_DEBUG_FILE"})
    assert f"--container-env={','.join(named)} " in srun
    assert f"export NCCL_DEBUG_FILE=/results/rn50-{nodes}n/nccl.%h.%p.log\n" in text
    assert "readonly IMAGE='registry.example.com#mlperf/mlperf-hvd-suite:0.1.0-gabc1234-gpu'" in text
    assert '"$DATA_DIR":/data:ro,"$RESULTS_DIR":/results' in srun
    assert srun.rstrip().endswith(f"python -m models.resnet50 --preset {PRESETS[nodes]} --data-dir /data "
                                  f"--run-dir /results/rn50-{nodes}n")


def stand_in_srun(bin_dir, record, offers="pmi2 pmix"):
    """An srun that lists `offers` for --mpi=list, passes the node check and records the main step."""
    (bin_dir / "srun").write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                                  f"if sys.argv[1:] == ['--mpi=list']:\n"
                                  f"    print('MPI plugin types are...')\n"
                                  f"    print('\\n'.join({offers.split()!r}))\n"
                                  f"    sys.exit(0)\n"
                                  f"if '--mpi=none' in sys.argv:\n"
                                  f"    checks = open({str(record)!r} + '.checks', 'a')\n"
                                  f"    checks.write(' '.join(sys.argv[1:4]) + '\\n')\n"
                                  f"    sys.exit(0)\n"
                                  f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, "
                                  f"open({str(record)!r}, 'w'))\n")
    (bin_dir / "srun").chmod(0o755)


def test_sbatch_script_runs_with_a_stand_in_srun(tmp_path):
    """The rendered script executed by bash: srun gets the profile's variables and the model command."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "srun.json"
    stand_in_srun(bin_dir, record)
    results = tmp_path / "results"
    script = tmp_path / "job.sbatch"
    script.write_text(render(["slurm", *job(2, "--data", "/shared/data", "--results", str(results))]))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2"}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert (results / "rn50-2n").is_dir()
    # The node check ran first, one task on every node, outside any container and PMI.
    assert (tmp_path / "srun.json.checks").read_text() == "--ntasks-per-node=1 --mpi=none --cpu-bind=none\n"
    seen = json.loads(record.read_text())
    for key, value in oci_env().items():
        assert seen["env"][key] == value, key
    # A shipped profile is in the image: the ranks are told its name, and that it is applied.
    assert (seen["env"]["SUITE_PROFILE"], seen["env"]["SUITE_PROFILE_RESOLVED"]) == ("oci-bm-gpu-gm4-8", "1")
    assert seen["env"]["HOROVOD_FUSION_THRESHOLD"] == str(128 * 1024 * 1024)
    assert seen["env"]["NCCL_DEBUG_FILE"] == "/results/rn50-2n/nccl.%h.%p.log"
    argv = seen["argv"]
    assert argv[:4] == ["--mpi=pmi2", "--ntasks-per-node=8", "--cpu-bind=ldoms", "--export=ALL"]
    # Pyxis lets the image's value of a variable win unless srun names it in --container-env: every
    # variable the script exports (the profile's, --env's, Horovod's) must be named, and be set.
    named = next(arg for arg in argv if arg.startswith("--container-env=")).split("=", 1)[1].split(",")
    exported = re.findall(r"^export (\w+)=", script.read_text(), re.MULTILINE)
    assert sorted(named) == sorted(exported) and set(oci_env()) | HOROVOD <= set(named)
    assert all(name in seen["env"] for name in named)
    assert f"--container-image={IMAGE.replace('example.com/', 'example.com#', 1)}" in argv
    assert "--container-mounts=/shared/data:/data:ro," + str(results) + ":/results" in argv
    assert argv[-9:] == ["python", "-m", "models.resnet50", "--preset", PRESETS[2], "--data-dir", "/data",
                         "--run-dir", "/results/rn50-2n"]


def test_sbatch_stops_when_srun_does_not_offer_its_pmi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in_srun(bin_dir, tmp_path / "srun.json", offers="none pmix")
    script = tmp_path / "job.sbatch"
    script.write_text(render(["slurm", *job(2, "--data", "/shared/data", "--results", str(tmp_path))]))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "2"}
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and not (tmp_path / "srun.json").exists()
    assert result.stderr == (f"error: node {socket.gethostname()}: srun --mpi=list does not offer pmi2; "
                             f"render with --mpi and one it lists (pmix or pmi2)\n")


def test_bare_metal_cpu_script_for_a_slurm_without_pyxis_or_gpus(tmp_path):
    """What a CPU Slurm cluster runs as it is: no GPUs asked or checked, pmix, the suite from its folder."""
    text = render(CASES["slurm-2n-bare-metal-cpu.sbatch"])
    directives = sbatch_directives(text)
    assert "gpus-per-node" not in directives and directives["ntasks-per-node"] == "2"
    assert "readonly MPI=pmix\n" in text and "# --mpi auto on bare metal: pmix" in text
    assert "--container" not in text.split("NODE_CHECK_END\n)", 1)[1] and "NCCL_DEBUG_FILE" not in text
    srun = text[text.index('\nsrun --mpi="$MPI"'):]
    assert '--chdir="$SUITE_DIR"' in srun and "--cpu-bind=none" in srun
    assert srun.rstrip().endswith('"$PYTHON" -m models.resnet50 --preset tiny_cpu --data-dir "$DATA_DIR" '
                                  '--run-dir "$RUN_DIR"')
    assert "readonly PYTHON=/shared/mlperf-hvd-suite/.venv/bin/python\n" in text
    assert "readonly DATA_DIR=/shared/data/imagenet\n" in text
    assert "want_gpus=0\n" in text and "want_rdma=''\n" in text and "need_pyxis=no\n" in text
    # By default the suite and interpreter this renderer runs from.
    default = render(without(CASES["slurm-2n-bare-metal-cpu.sbatch"], "--suite-dir", "--python"))
    assert f"readonly SUITE_DIR={REPO}\n" in default and f"readonly PYTHON={sys.executable}\n" in default


def test_a_sweep_script_runs_each_scale_as_an_srun_step_then_the_report():
    text = render(CASES["slurm-2n-bare-metal-sweep.sbatch"])
    assert sbatch_directives(text)["nodes"] == "2"
    main = text.split("NODE_CHECK_END\n)", 1)[1]
    assert 'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\\$/ slots=2/" > "$HOSTFILE"' in main
    sweep = main[main.index('"$PYTHON" -m suite.cluster.sweep'):].replace("\\\n", " ")
    # Process counts on the hostfile: 1 and 2 nodes of 2 tasks each.
    assert '--launcher srun --launcher-args="--mpi=$MPI"' in sweep and "--scales 2,4 " in sweep
    assert '--out "$RUN_DIR"' in sweep and "--runs 1 " in sweep
    assert main.rstrip().endswith('"$PYTHON" -m suite.cluster.report "$RUN_DIR"')
    assert '\nsrun --mpi="$MPI"' not in main  # the sweep's launches are the steps


@pytest.mark.parametrize("flags,said", [
    (["--sweep", "1,4"], "--sweep 1,4: 4 nodes is more than the allocation's --nodes 2; render with --nodes "
                         "4 or drop 4 from --sweep"),
    (["--sweep", "2,1"], "--sweep 2,1: expected increasing node counts such as 1,2"),
    (["--sweep", "1,x"], "--sweep 1,x: expected increasing node counts such as 1,2"),
    (["--sweep", "1,2", "--system-info", "/nonexistent.yaml"],
     "--system-info /nonexistent.yaml: no such file"),
])
def test_a_sweep_the_allocation_cannot_hold_is_refused_in_one_line(flags, said):
    argv = without(CASES["slurm-2n-bare-metal-sweep.sbatch"], "--sweep")
    assert_one_line_error(deploy_cli(*argv, *flags), said)


def test_a_sweep_needs_bare_metal():
    assert_one_line_error(deploy_cli(*CASES["slurm-2n.sbatch"], "--sweep", "1,2"),
                          "--sweep runs suite.cluster.sweep from the shared file system: add --bare-metal")


def test_more_nodes_than_the_partition_has_are_refused_where_sinfo_tells(tmp_path):
    tools = cluster_tools(tmp_path, sinfo="gpu* 1\ngpu 1\nbig 8\n")
    argv = without(CASES["slurm-4n.sbatch"], "--partition", "--account")
    assert_one_line_error(deploy_cli(*argv, SUITE_CLUSTER_TOOLS=tools),
                          "--nodes 4: partition gpu has 2 node(s) (sinfo); render with --nodes 2 or fewer, "
                          "or --partition big")
    ok = deploy_cli(*argv, "--partition", "big", SUITE_CLUSTER_TOOLS=tools)
    assert ok.returncode == 0, ok.stderr


def test_tuning_flags_and_model_args_reach_the_job():
    text = render(CASES["slurm-2n-tcp.sbatch"])
    assert "export HOROVOD_FUSION_THRESHOLD=67108864" in text
    assert "export HOROVOD_HIERARCHICAL_ALLREDUCE=1" in text
    assert "export HOROVOD_TIMELINE=/results/rn50-2n/timeline.json" in text
    assert "export NCCL_IB_DISABLE=1" in text and "export NCCL_SOCKET_IFNAME=ens3" in text
    assert sbatch_directives(text)["time"] == "1-00:00:00"
    assert text.rstrip().endswith("--run-dir /results/rn50-2n --set fp16_allreduce=true")


@pytest.mark.parametrize("image,expected", [
    ("registry.example.com/mlperf/suite:1", "registry.example.com#mlperf/suite:1"),
    ("localhost:5000/suite:1", "localhost:5000#suite:1"),
    ("nvcr.io#nvidia/tensorflow:24.03-tf2-py3", "nvcr.io#nvidia/tensorflow:24.03-tf2-py3"),
    ("/shared/images/suite.sqsh", "/shared/images/suite.sqsh"),
    ("myuser/suite:1", "myuser/suite:1"),
])
def test_pyxis_image_names(image, expected):
    assert slurm.pyxis_image(image) == expected


def test_slurm_takes_a_squashfs_image():
    text = render(["slurm", *replace(job(1, *SLURM_PATHS), "--image", "/shared/images/suite.sqsh")])
    assert "readonly IMAGE=/shared/images/suite.sqsh\n" in text


def test_partition_and_account_are_checked_where_slurm_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy_job, "QUERY_PATH", cluster_tools(tmp_path, sinfo="gpu\ncpu\ngpu",
                                                                sacctmgr="mlperf|\nother|"))
    monkeypatch.setenv("USER", "alice")
    assert "#SBATCH --partition=gpu\n#SBATCH --account=mlperf\n" in render(CASES["slurm-2n.sbatch"])
    for flag, value, known in (("--partition", "a100", "cpu, gpu"), ("--account", "ml", "mlperf, other")):
        result = deploy_cli(*replace(CASES["slurm-2n.sbatch"], flag, value),
                            SUITE_CLUSTER_TOOLS=str(tmp_path / "cluster-tools"), USER="alice")
        assert_one_line_error(result, f"{flag} {value}: not a {flag[2:]} this cluster knows ({known})")
