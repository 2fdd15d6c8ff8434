"""The Kubeflow MPI Operator MPIJob: a launcher running mpirun, one worker pod per node."""
import os
import re
import shlex

import yaml

from suite.cluster.deploy.job import (DATA_MOUNT, MAX_NODES, RESULTS_MOUNT, TEMPLATES, DeployError,
                                      check_flag, check_port, fill, header)

DEFAULT_SSH_PORT = 2222
# How the MPIJob's workers reach the RDMA NICs; each mode is what Oracle's OKE manifests do
# (oracle-quickstart/oci-hpc-oke docs/using-rdma-network-interfaces-in-manifests.md):
#   oci-host  the nodes' own network and NICs (hostNetwork), as
#             manifests/nccl-tests/kueue/BM.GPU.A100-v2.8.yaml;
#   sriov     SR-IOV virtual functions from the NVIDIA Network Operator, as
#             manifests/nccl-tests/kueue/virtual-functions/BM.GPU.A100-v2.8.yaml;
#   none      the pod network only, no RDMA devices (TCP profiles).
NETWORK_MODES = ("oci-host", "sriov", "none")
# SR-IOV: the NetworkAttachmentDefinition of the stack's SriovNetwork "rdma-vf", which is created in
# the default namespace (terraform/files/nvidia-network-operator/sriov-network.yaml, networkNamespace:
# default; the namespace/name form works from any namespace, as the doc above notes), and its VF
# resource (the VF manifest's limits; resourceName: rdma-vf in sriov-network-node-policy.yaml).
SRIOV_NETWORK = "default/rdma-vf"
SRIOV_RESOURCE = "nvidia.com/rdma-vf"
# One VF per RDMA port: 16 on BM.GPU.A100-v2.8 (= GM4.8), per the doc above and the VF manifest.
SRIOV_VFS = 16
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
# The launcher's bound on waiting for the workers' sshd (templates/wait-for-workers.sh); it covers
# pulling a multi-GB image on a node that does not have it yet.
WORKER_WAIT_SECONDS = 900
# What ranks started over ssh need from the launcher's environment besides the profile's.
FORWARDED = ("PATH", "LD_LIBRARY_PATH")
# Pods are named <job>-worker-<i> and must be DNS labels (63 characters); the job's headless
# Service is the job name itself, a DNS-1035 label (a letter first).
MAX_JOB_NAME = 63 - len(f"-worker-{MAX_NODES - 1}")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


def render(job, args):
    """A Kubeflow MPI Operator MPIJob: a launcher running mpirun, one worker pod per node."""
    if job.image.startswith(("/", ".")) or "#" in job.image:
        raise DeployError(f"--image {job.image}: Kubernetes pulls a registry reference "
                          f"(registry/name:tag), not a Pyxis URI or squashfs file")
    doc = _skeleton()
    doc["metadata"]["name"] = job_name(job.run_id)
    if args.namespace:
        check_flag("--namespace", args.namespace, K8S_NAME, "a Kubernetes namespace name")
        doc["metadata"]["namespace"] = args.namespace
    spec = doc["spec"]
    spec["slotsPerWorker"] = job.gpus
    spec["mpiReplicaSpecs"]["Worker"]["replicas"] = job.nodes
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]
    check_port(args.ssh_port)
    if not args.operator_wait:
        del spec["launcherCreationPolicy"]
    _fill_launcher(launcher["spec"]["containers"][0], job, args)
    _fill_worker(worker, job, args)
    _network_mode(launcher, worker, job, args)
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)
    return header(job, "Kubeflow MPIJob") + "\n" + body


def _skeleton():
    with open(os.path.join(TEMPLATES, "mpijob.yaml")) as handle:
        return yaml.safe_load(handle)


def job_name(run_id):
    """The MPIJob's name: the run id as a DNS label short enough for the operator's pod names."""
    name = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", run_id.lower())).strip("-")
    if not name[:1].isalpha() or len(name) > MAX_JOB_NAME:
        raise DeployError(f"--run-id {run_id}: as a Kubernetes job name ({name!r}) it must start with "
                          f"a letter and have at most {MAX_JOB_NAME} characters; give a shorter --run-id")
    return name


def _fill_launcher(container, job, args):
    container["image"] = job.image
    container["env"] = env_list(job.env)
    container["args"] = [launcher_script(job, args)]


def launcher_script(job, args):
    """Waits for every worker's sshd, then mpirun over the operator's hostfile (slotsPerWorker slots each)."""
    wait = fill("wait-for-workers.sh", {"ssh_port": args.ssh_port, "wait_seconds": WORKER_WAIT_SECONDS})
    # On the command line, so it wins over the operator's own OMPI_MCA_plm_rsh_args variable (whose
    # ConnectionAttempts retries the wait above makes unnecessary).
    parts = [f"mpirun --allow-run-as-root -np {job.ranks} --bind-to none --map-by slot",
             f"--mca plm_rsh_args {shlex.quote(f'-p {args.ssh_port}')}"]
    # Ranks started over ssh see none of the pod's env: -x hands them the launcher's values.
    parts += [f"-x {key}" for key in [*sorted(job.env), *FORWARDED]]
    if job.profile.mpi_args:
        parts.append(shlex.join(job.profile.mpi_args))
    parts.append(shlex.join(job.model_command()))
    return wait + "exec " + " \\\n  ".join(parts) + "\n"


def _fill_worker(template, job, args):
    container = template["spec"]["containers"][0]
    container["image"] = job.image
    container["args"] = [str(args.ssh_port)]
    container["env"] = env_list(job.env)
    container["readinessProbe"]["tcpSocket"]["port"] = args.ssh_port
    container["resources"]["limits"] = {"nvidia.com/gpu": job.gpus}
    container["volumeMounts"] += [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
                                  {"name": "results", "mountPath": RESULTS_MOUNT}]
    volumes = template["spec"]["volumes"]
    if args.shm_size:
        check_flag("--shm-size", args.shm_size, QUANTITY, "a Kubernetes quantity such as 64Gi")
        volumes[0]["emptyDir"]["sizeLimit"] = args.shm_size
    volumes += [volume("data", "--data", job.data), volume("results", "--results", job.results)]


def _network_mode(launcher, worker, job, args):
    """The pods' network and RDMA devices for --network-mode (sources at NETWORK_MODES)."""
    if args.rdma_vfs is not None and args.network_mode != "sriov":
        raise DeployError(f"--rdma-vfs {args.rdma_vfs}: only with --network-mode sriov")
    for pod in (launcher["spec"], worker["spec"]):
        if args.network_mode == "oci-host":
            pod["hostNetwork"] = True
            # Without it a host-network pod gets the node's resolver, which cannot resolve the
            # operator's <job>-worker-<i>.<job>.<namespace>.svc names in the hostfile (the operator
            # sets it too on hostNetwork pods; saying it here keeps older operators right).
            pod["dnsPolicy"] = "ClusterFirstWithHostNet"
        if args.host_ipc:
            pod["hostIPC"] = True
    if args.network_mode == "sriov":
        vfs = SRIOV_VFS if args.rdma_vfs is None else args.rdma_vfs
        if not 1 <= vfs <= SRIOV_VFS:
            raise DeployError(f"--rdma-vfs {vfs}: must be 1 to {SRIOV_VFS} (a GM4.8 node has {SRIOV_VFS} "
                              f"VFs; asking for more leaves the pod unschedulable)")
        worker["metadata"]["annotations"] = {NETWORKS_ANNOTATION: ",".join([SRIOV_NETWORK] * vfs)}
        worker["spec"]["containers"][0]["resources"]["limits"][SRIOV_RESOURCE] = vfs
        _note_sriov_devices(job)
    if args.network_mode != "none":
        _rdma_devices(worker["spec"])


def _rdma_devices(pod_spec):
    """The RDMA device files and rights, in both modes as Oracle's manifests give them."""
    container = pod_spec["containers"][0]
    # Privileged for the verbs devices; IPC_LOCK because RDMA pins (registers) memory.
    container["securityContext"] = {"privileged": True, "capabilities": {"add": ["IPC_LOCK"]}}
    container["volumeMounts"].append({"name": "devinf", "mountPath": "/dev/infiniband"})
    # type Directory: a node without RDMA devices fails the pod at once instead of running it on TCP.
    pod_spec["volumes"].append({"name": "devinf",
                                "hostPath": {"path": "/dev/infiniband", "type": "Directory"}})


def _note_sriov_devices(job):
    hca = job.env.get("NCCL_IB_HCA", "")
    if hca.startswith("="):
        job.notes.append(f"NCCL_IB_HCA={hca[:24]}... names the nodes' own devices exactly, but an SR-IOV pod "
                         f"sees its VFs under other names; Oracle's VF manifests use --env NCCL_IB_HCA=mlx5")


def volume(name, flag, value):
    """pvc:CLAIM is a PersistentVolumeClaim; an absolute path is a directory on every node."""
    if value.startswith("pvc:"):
        claim = value[len("pvc:"):]
        check_flag(flag, claim, K8S_NAME, "pvc:<claim name>")
        return {"name": name, "persistentVolumeClaim": {"claimName": claim}}
    if not value.startswith("/"):
        raise DeployError(f"{flag} {value}: expected an absolute host path or pvc:<claim name>")
    return {"name": name, "hostPath": {"path": value, "type": "Directory"}}


def env_list(env):
    return [{"name": key, "value": value} for key, value in sorted(env.items())]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the launcher's script) as readable literal blocks."""


def _literal_blocks(dumper, text):
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _literal_blocks)
