"""suite.cluster.deploy as a whole: every rendering against its golden, and the command line (files
written whole, one-line errors, no TensorFlow). What each renderer writes is tested by subject:
test_deploy_slurm.py, test_deploy_k8s.py, test_dockerfile.py.

Goldens: tests/golden/deploy/ (sbatch scripts, MPIJob manifests) and container/Dockerfile.gpu and .cpu
(the files build.sh builds). After an intended change to a template or an input, regenerate them and
review the diff before committing:
    DEPLOY_REGENERATE=1 .venv/bin/python -m pytest tests/test_deploy.py
Without the variable, any drift between a fresh rendering and its golden fails.
"""
import os
import re
import shlex
import sys

import pytest
import yaml

from helpers.deploy import (CASES, CONTAINER, DOCKERFILES, GOLDEN, K8S_PATHS, SLURM_PATHS,
                            assert_one_line_error, bash_syntax, check_golden, deploy_cli, job, render,
                            replace, without)
from helpers.mpijob import DNS_LABEL, validate_mpijob
from helpers.running import run
from suite.cluster.deploy import job as deploy_job, k8s


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
