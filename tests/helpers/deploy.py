"""suite.cluster.deploy from the tests: the cases its goldens are rendered from, rendering in process and
through its CLI, the golden check, the one-line error, the shell checks of what it renders, stand-in
cluster tools, and the parts of a rendered MPIJob the tests look into."""
import difflib
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from helpers.running import REPO, run
from suite.cluster import deploy, launch
from suite.cluster.deploy import job as deploy_job
from suite.common import profiles

GOLDEN = os.path.join(REPO, "tests", "golden", "deploy")
CONTAINER = os.path.join(REPO, "container")
REGENERATE = os.environ.get("DEPLOY_REGENERATE") == "1"
IMAGE = "registry.example.com/mlperf/mlperf-hvd-suite:0.1.0-gabc1234-gpu"
PRESETS = {1: "closed_8xA100_gbs3264", 2: "closed_16xA100_gbs3264", 4: "closed_32xA100_gbs3264"}
# The front-end interface the OCI profile leaves open, and Open MPI's TCP traffic by subnet rather
# than by interface name (--mpi-subnet), which a host-network launcher on any node needs.
OCI = ["--profile", "oci-bm-gpu-gm4-8", "--network-interface", "eth0", "--mpi-subnet", "10.0.0.0/16"]
GPU4 = ["--profile", "oci-bm-gpu4-8", "--network-interface", "eth0", "--mpi-subnet", "10.0.0.0/16"]


def oci_env():
    """What the OCI job's ranks must see: the profile with eth0, Open MPI's TCP by subnet."""
    oci = profiles.with_interface(profiles.load("oci-bm-gpu-gm4-8"), "eth0")
    subnet = {key: "10.0.0.0/16" for key in ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")}
    return {**oci.env, **subnet}


TCP_ONLY = ["--profile", "tcp-only", "--network-interface", "eth0"]


def job(nodes, *where, model="models.resnet50", preset=None, profile=OCI):
    return ["--model", model, "--preset", preset or PRESETS[nodes], "--nodes", str(nodes), *profile,
            "--image", IMAGE, *where, "--run-id", f"rn50-{nodes}n"]


def replace(argv, flag, value):
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def without(argv, *flags):
    argv = list(argv)
    for flag in flags:
        i = argv.index(flag)
        del argv[i:i + 2]
    return argv


# The variables the profile's Horovod tuning adds to every job's environment.
HOROVOD = {"HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD", "HOROVOD_HIERARCHICAL_ALLREDUCE"}
SLURM_PATHS = ["--data", "/shared/data/imagenet", "--results", "/shared/results"]
K8S_PATHS = ["--data", "/mnt/data/imagenet", "--results", "pvc:mlperf-results"]
CASES = {
    **{f"slurm-{n}n.sbatch": ["slurm", *job(n, *SLURM_PATHS), "--partition", "gpu", "--account", "mlperf"]
       for n in (1, 2, 4)},
    **{f"mpijob-{n}n.yaml": ["k8s", *job(n, *K8S_PATHS)] for n in (1, 2, 4)},
    # The explicit network modes (the default, oci-host, is mpijob-<n>n.yaml). SR-IOV VFs through the
    # Network Operator, with NCCL_IB_HCA for the VFs' names and every other k8s option.
    "mpijob-2n-sriov.yaml": ["k8s", *job(2, "--data", "pvc:imagenet", "--results", "/mnt/results",
                                         profile=[*OCI, "--env", "NCCL_IB_HCA=mlx5"]),
                             "--network-mode", "sriov", "--host-ipc", "--shm-size", "64Gi",
                             "--namespace", "mlperf", "--ssh-port", "2022", "--", "--set", "xla=true"],
    # The pod network only (TCP), for an MPI Operator older than v0.5.0.
    "mpijob-2n-none.yaml": ["k8s", *job(2, *K8S_PATHS, profile=TCP_ONLY),
                            "--network-mode", "none", "--no-operator-wait"],
    # TCP only, with the Horovod tuning flags and extra model arguments.
    "slurm-2n-tcp.sbatch": ["slurm", *job(2, *SLURM_PATHS, profile=["--profile", "tcp-only",
                                                                    "--network-interface", "ens3"]),
                            "--fusion-threshold-mb", "64", "--hierarchical-allreduce", "--timeline",
                            "/results/rn50-2n/timeline.json", "--time", "1-00:00:00",
                            "--", "--set", "fp16_allreduce=true"],
    # BM.GPU4.8 in a container with PMIx (the node check then looks for enroot's hook), from a squashfs
    # file on the shared file system, without NUMA binding.
    "slurm-2n-gpu4-pmix.sbatch": ["slurm", *replace(job(2, *SLURM_PATHS, profile=GPU4), "--image",
                                                    "/shared/images/mlperf-hvd-suite.sqsh"),
                                  "--mpi", "pmix", "--no-numa-bind"],
    # Bare metal with a CPU profile: what a Slurm cluster without Pyxis or GPUs runs.
    "slurm-2n-bare-metal-cpu.sbatch": ["slurm", *without(job(2, *SLURM_PATHS, preset="tiny_cpu",
                                                             profile=["--profile", "local-cpu"]), "--image"),
                                       "--bare-metal", "--ntasks-per-node", "2", "--suite-dir",
                                       "/shared/mlperf-hvd-suite", "--python",
                                       "/shared/mlperf-hvd-suite/.venv/bin/python"],
    # The sweep over 1 and 2 nodes inside one 2-node allocation, then its report.
    "slurm-2n-bare-metal-sweep.sbatch": ["slurm", *without(job(2, *SLURM_PATHS, preset="tiny_cpu",
                                                               profile=["--profile", "local-cpu"]),
                                                           "--image"),
                                         "--bare-metal", "--ntasks-per-node", "2", "--suite-dir",
                                         "/shared/mlperf-hvd-suite", "--python",
                                         "/shared/mlperf-hvd-suite/.venv/bin/python", "--sweep", "1,2",
                                         "--runs", "1"],
    # BM.GPU4.8 on OKE: a launcher pinned to the workers' shape (names then match, no subnet needed),
    # a private registry, bounded workers, no NUMA binding.
    "mpijob-2n-gpu4.yaml": ["k8s", *job(2, *K8S_PATHS, profile=["--profile", "oci-bm-gpu4-8",
                                                                "--network-interface", "eth0"]),
                            "--launcher-instance-type", "BM.GPU4.8", "--image-pull-secret", "ocir-pull",
                            "--worker-cpu", "96", "--worker-memory", "1Ti", "--shm-size", "64Gi",
                            "--no-numa-bind"],
}
DOCKERFILES = {"Dockerfile.gpu": ["dockerfile"], "Dockerfile.cpu": ["dockerfile", "--device", "cpu"],
               "Dockerfile.gpu-pypi": ["dockerfile", "--device", "gpu", "--base", "pypi"]}


def render(argv):
    """The rendered text, in process (fast); the CLI itself is tested through subprocesses below."""
    own, model = launch.split_argv(argv)
    args = deploy.build_parser().parse_args(own)
    files, _ = deploy.render(args, model, argv)
    return next(iter(files.values()))


def deploy_cli(*args, **env):
    return run([sys.executable, "-m", "suite.cluster.deploy", *args], timeout=60, **env)


def check_golden(path, text):
    if REGENERATE:
        deploy_job.write_out(path, text)
        return
    assert os.path.exists(path), (f"no golden {path}; create it with DEPLOY_REGENERATE=1 "
                                  f"(tests/test_deploy.py's module doc)")
    with open(path) as handle:
        expected = handle.read()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), path,
                                            "rendered"))
        pytest.fail(f"rendering drifted from {path} (DEPLOY_REGENERATE=1 to accept):\n{diff[:4000]}")


def assert_one_line_error(result, *culprits):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    assert result.stdout == ""
    return lines[0]


def shellcheck(path):
    """shellcheck is part of the set-up (scripts/setup.sh installs it); its absence is a failure."""
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck is not installed: run `make setup` (scripts/setup.sh installs it) "
                    "or apt-get install shellcheck")
    result = subprocess.run(["shellcheck", "--shell=bash", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def bash_syntax(path):
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def cluster_tools(tmp_path, **outputs):
    """Stand-in sinfo, sacctmgr or kubectl printing the given text, in a folder of their own."""
    bin_dir = tmp_path / "cluster-tools"
    bin_dir.mkdir()
    for name, text in outputs.items():
        (bin_dir / name).write_text(f"#!/bin/bash\nprintf '%s\\n' {shlex.quote(text)}\n")
        (bin_dir / name).chmod(0o755)
    return str(bin_dir)


def workers_of(doc):
    return doc["spec"]["mpiReplicaSpecs"]["Worker"]["template"]


def launcher_of(doc):
    return doc["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]


def pods_of(doc):
    replicas = doc["spec"]["mpiReplicaSpecs"]
    return [replicas[kind]["template"]["spec"] for kind in ("Launcher", "Worker")]


def mpirun_words(doc):
    script = launcher_of(doc)["args"][0]
    return shlex.split(script[script.index("exec mpirun"):].replace("\\\n", " "))
