"""The Kubeflow MPI Operator MPIJob: a launcher running mpirun, one worker pod per node."""
import json
import os
import re
import shlex

import yaml

from suite.cluster.deploy import dockerfile, nodecheck
from suite.cluster.deploy.job import (DATA_MOUNT, MAX_NODES, RESULTS_MOUNT, TEMPLATES, DeployError, ask,
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
QUANTITY = re.compile(r"^(?P<number>[0-9]+(\.[0-9]+)?)(?P<unit>Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
         "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
# A label value (node.kubernetes.io/instance-type: BM.GPU4.8).
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# MPI carries only Horovod's control traffic (the gradients go over NCCL): Open MPI's ob1 over TCP,
# as the MPI Operator's own Horovod example passes `-mca pml ob1 -mca btl ^openib` (kubeflow/
# mpi-operator examples/v2beta1/horovod/tensorflow-mnist.yaml) and Oracle's OKE manifests keep UCX on
# TCP and eth0 (oracle-quickstart/oci-hpc-oke manifests/nccl-tests/kueue/BM.GPU.A100-v2.8.yaml:
# UCX_TLS=tcp, UCX_NET_DEVICES=eth0). Without it Open MPI may pick pml ucx on UCX_NET_DEVICES' RDMA
# NIC. The btl list leaves out the verbs ones (openib, and uct, UCX's); excluding a component that is
# not built is harmless. --env overrides either.
MPIJOB_MPI_ENV = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "^openib,uct"}
# Worker requests = limits (the pod is Guaranteed, not BestEffort): the figures Oracle gives a training
# pod on these nodes (oracle-quickstart/oci-hpc-oke docs/running-pytorch-jobs-on-oke-using-hostnetwork-
# with-rdma.md: cpu 64, memory 512Gi) and its /dev/shm bound (sizeLimit: 32Gi, as in every manifest of
# manifests/nccl-tests/kueue/). A memory-backed /dev/shm counts against the memory limit.
DEFAULT_WORKER_CPU, DEFAULT_WORKER_MEMORY, DEFAULT_SHM = "64", "512Gi", "32Gi"


def render(job, args):
    """A Kubeflow MPI Operator MPIJob: a launcher running mpirun, one worker pod per node."""
    if job.image.startswith(("/", ".")) or "#" in job.image:
        raise DeployError(f"--image {job.image}: Kubernetes pulls a registry reference "
                          f"(registry/name:tag), not a Pyxis URI or squashfs file")
    env = {**job.env, **{key: value for key, value in MPIJOB_MPI_ENV.items() if key not in job.overrides}}
    job.env = env
    doc = _skeleton()
    doc["metadata"]["name"] = job_name(job.run_id)
    if args.namespace:
        check_flag("--namespace", args.namespace, K8S_NAME, "a Kubernetes namespace name")
        doc["metadata"]["namespace"] = args.namespace
    spec = doc["spec"]
    spec["slotsPerWorker"] = job.tasks
    spec["mpiReplicaSpecs"]["Worker"]["replicas"] = job.nodes
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]
    check_port(args.ssh_port)
    if not args.operator_wait:
        del spec["launcherCreationPolicy"]
    _fill_launcher(launcher["spec"]["containers"][0], job, args)
    _fill_worker(worker, job, args)
    _network_mode(launcher, worker, job, args)
    _placement(launcher["spec"], worker["spec"], job, args)
    _check_shared_claims(job, args)
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
    # NUMA: each rank bound to a NUMA domain, spread over the node's domains, as Oracle's OKE manifests
    # bind (--bind-to numa, oracle-quickstart/oci-hpc-oke manifests/nccl-tests/kueue/*.yaml); the
    # A100 shapes have 8 domains, one for each rank. --no-numa-bind: none, by slot.
    numa = args.numa_bind is not False
    binding = "--map-by numa --bind-to numa" if numa else "--bind-to none --map-by slot"
    parts = [f"mpirun --allow-run-as-root -np {job.ranks} {binding}",
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
    container["args"] = [worker_script(job, args)]
    container["env"] = env_list(job.env)
    container["readinessProbe"]["tcpSocket"]["port"] = args.ssh_port
    cpu = quantity("--worker-cpu", args.worker_cpu)
    memory = quantity("--worker-memory", args.worker_memory)
    shm = quantity("--shm-size", args.shm_size)
    if size(shm) >= size(memory):
        raise DeployError(f"--shm-size {shm}: /dev/shm lives in the worker's memory, which is "
                          f"--worker-memory {memory}; give it less")
    # Requests = limits for every resource: a Guaranteed pod, the last the kubelet evicts.
    resources = {"cpu": cpu, "memory": memory, "nvidia.com/gpu": job.gpus}
    container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    container["volumeMounts"] += [{"name": "data", "mountPath": DATA_MOUNT, "readOnly": True},
                                  {"name": "results", "mountPath": RESULTS_MOUNT}]
    volumes = template["spec"]["volumes"]
    volumes[0]["emptyDir"]["sizeLimit"] = shm
    volumes += [volume("data", "--data", job.data), volume("results", "--results", job.results)]


def worker_script(job, args):
    """The node check (shape, GPUs, RDMA devices), then sshd in the foreground for mpirun."""
    needs = nodecheck.Needs(min_driver=dockerfile.min_nvidia_driver(job.image))
    check = nodecheck.render(job.profile, needs, job.env)
    return check + f"exec /usr/local/bin/mlperf-sshd {args.ssh_port}\n"


def quantity(flag, value):
    check_flag(flag, value, QUANTITY, "a Kubernetes quantity such as 64Gi")
    return value


def size(value):
    match = QUANTITY.match(value)
    return float(match["number"]) * UNITS[match["unit"]]


def _placement(launcher_pod, worker_pod, job, args):
    """Workers on the profile's shape (OKE labels nodes by instance type), and pull secrets on both pods."""
    shape = args.instance_type if args.instance_type is not None else next(iter(job.profile.shapes), "")
    if shape:
        check_flag("--instance-type", shape, LABEL_VALUE, "an instance type such as BM.GPU4.8")
        worker_pod["nodeSelector"] = {INSTANCE_TYPE_LABEL: shape}
    if args.launcher_instance_type:
        check_flag("--launcher-instance-type", args.launcher_instance_type, LABEL_VALUE,
                   "an instance type such as VM.Standard.E4.Flex")
        launcher_pod["nodeSelector"] = {INSTANCE_TYPE_LABEL: args.launcher_instance_type}
    _check_launcher_interface(job, args, shape)
    for name in args.image_pull_secret:
        check_flag("--image-pull-secret", name, K8S_NAME, "a Secret name in the job's namespace")
    if args.image_pull_secret:
        for pod in (launcher_pod, worker_pod):
            pod["imagePullSecrets"] = [{"name": name} for name in args.image_pull_secret]


def _check_launcher_interface(job, args, worker_shape):
    """A host-network launcher on another kind of node may lack the workers' NIC name: mpirun aborts."""
    oob = job.env.get("OMPI_MCA_oob_tcp_if_include", "")
    pinned_alike = args.launcher_instance_type and args.launcher_instance_type == worker_shape
    if args.network_mode != "oci-host" or pinned_alike or not oob or "/" in oob:
        return
    pin = worker_shape or "<the workers' instance type>"
    raise DeployError(f"OMPI_MCA_oob_tcp_if_include={oob} names an interface, but the host-network launcher "
                      f"may run on a node without it (mpirun then aborts): give --mpi-subnet <the nodes' "
                      f"subnet, e.g. 10.0.0.0/16>, or --launcher-instance-type {pin}")


def _check_shared_claims(job, args):
    """Every worker mounts the claims: with 2+ nodes a ReadWriteOnce claim attaches to one node only."""
    if job.nodes < 2:
        return
    for flag, value, shared in (("--data", job.data, ("ReadOnlyMany", "ReadWriteMany")),
                                ("--results", job.results, ("ReadWriteMany",))):
        if not value.startswith("pvc:"):
            continue
        modes = claim_access_modes(value[len("pvc:"):], args.namespace)
        if modes is None:
            job.notes.append(f"{flag} {value}: every worker mounts it, so it must be {' or '.join(shared)} "
                             f"(OCI File Storage; docs/gpu-workflow.md); kubectl could not tell here")
        elif not set(modes) & set(shared):
            raise DeployError(f"{flag} {value}: the claim is {', '.join(modes)}, which attaches to one node "
                              f"only: the other workers never become Ready and the launcher is never "
                              f"created; use a {' or '.join(shared)} claim (OCI File Storage)")


def claim_access_modes(claim, namespace):
    """The claim's accessModes as kubectl sees them; None where it cannot tell (no kubectl, no cluster)."""
    argv = ["kubectl", "get", "pvc", claim, "-o", "jsonpath={.spec.accessModes}"]
    out = ask([*argv, *(["--namespace", namespace] if namespace else [])])
    try:
        modes = json.loads(out) if out else None
    except ValueError:
        return None
    return modes if isinstance(modes, list) and modes else None


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
        for kind in worker["spec"]["containers"][0]["resources"].values():
            kind[SRIOV_RESOURCE] = vfs
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
