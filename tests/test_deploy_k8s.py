"""mlperf-deploy k8s: the rendered MPIJobs against the MPI Operator's and Kubernetes' rules
(helpers/mpijob.py), their shape in each network mode, the launcher's script run by bash with stand-in
ssh and mpirun, and the results claim checked where kubectl answers."""
import subprocess

import pytest
import yaml

from helpers.deploy import (CASES, K8S_PATHS, PRESETS, assert_one_line_error, bash_syntax, cluster_tools,
                            deploy_cli, job, launcher_of, mpirun_words, oci_env, pods_of, render, shellcheck,
                            workers_of)
from helpers.mpijob import validate_mpijob
from suite.cluster.deploy import job as deploy_job, k8s


pytestmark = pytest.mark.usefixtures("no_cluster_tools")


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
