"""`python -m suite.cluster.deploy`: Slurm, Kubernetes and container files for a model at a scale."""
import argparse
import dataclasses
import datetime
import importlib
import os
import re
import shlex
import signal
import sys
import tempfile
from dataclasses import dataclass, field

import yaml

from suite.cluster import launch
from suite.cluster.launch import LaunchError
from suite.common import profiles
from suite.common.profiles import ProfileError

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TEMPLATES = os.path.join(HERE, "templates")
MODELS = ("models.resnet50", "models.bert")
# The scales the suite is built and documented for (1, 2 and 4 nodes of 8 GPUs).
MAX_NODES = 4
# NGC TensorFlow 24.03 ships TensorFlow 2.15, the last Keras-2 release (docs/gpu-workflow.md).
DEFAULT_NGC_TAG = "24.03-tf2-py3"
DEFAULT_CPU_BASE = "python:3.11-slim-bookworm"
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
# The suite's run-time needs that the NGC image lacks; pinned from requirements.txt. Pillow is left
# out: its pin has no wheel for the image's Python 3.10, and only the data converters need it.
GPU_PINS = ("mpi4py", "mlperf-logging", "pyyaml", "tqdm")
SUITE_DIR, DATA_MOUNT, RESULTS_MOUNT = "/opt/mlperf-hvd-suite", "/data", "/results"
# The renderer sets these model flags itself; the same flags after `--` would contradict it.
OWN_MODEL_FLAGS = ("--preset", "--data-dir", "--run-dir")
# What ranks started over ssh need from the launcher's environment besides the profile's.
FORWARDED = ("PATH", "LD_LIBRARY_PATH")
# Pods are named <job>-worker-<i> and must be DNS labels (63 characters); the job's headless
# Service is the job name itself, a DNS-1035 label (a letter first).
MAX_JOB_NAME = 63 - len(f"-worker-{MAX_NODES - 1}")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
PRESET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Host paths end up unquoted in #SBATCH lines and in Pyxis' comma/colon-separated mount list.
HOST_PATH = re.compile(r"^/[A-Za-z0-9._/+@-]*$")
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,-]+$")
SLURM_TIME = re.compile(r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
# Registry references; Pyxis also takes registry#image:tag and a squashfs file's path.
IMAGE_REF = re.compile(r"^[A-Za-z0-9./][A-Za-z0-9._/:@#+-]*$")
FIELD = re.compile(r"\{\{(\w+)\}\}")


class DeployError(ValueError):
    """Inputs that do not add up to a job; the message is one line naming the flag or file."""


class _Replaced(argparse.Action):
    """A flag that is gone: a one-line error naming what replaced it."""

    def __init__(self, option_strings, dest, replacement, nargs=None, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is gone: {self.replacement}")


# (flags, nargs, what replaces them) of the MPIJob flags before --network-mode.
REPLACED_K8S_FLAGS = (
    (("--rdma-resource",), None, "use --network-mode (oci-host needs no RDMA resource; sriov requests "
                                 f"{SRIOV_RESOURCE})"),
    (("--rdma-count",), None, "use --rdma-vfs with --network-mode sriov"),
    (("--network",), None, f"use --network-mode sriov (the workers join {SRIOV_NETWORK})"),
    (("--host-network",), 0, "use --network-mode oci-host (the default)"),
    (("--no-host-network",), 0, "use --network-mode sriov or --network-mode none"),
)


class Parser(argparse.ArgumentParser):
    """argparse with the suite's one-line errors instead of a usage block."""

    def error(self, message):
        self.exit(2, f"error: {message}\n")


@dataclass
class Job:
    """One benchmark run on a cluster: what runs, where, and with which environment."""

    model: str
    preset: str
    nodes: int
    gpus: int
    profile: profiles.Profile
    env: dict
    image: str
    data: str
    results: str
    run_id: str
    model_args: list
    rendered_by: str
    notes: list = field(default_factory=list)

    @property
    def ranks(self):
        return self.nodes * self.gpus

    @property
    def run_dir(self):
        return f"{RESULTS_MOUNT}/{self.run_id}"

    def model_command(self):
        return ["python", "-m", self.model, "--preset", self.preset, "--data-dir", DATA_MOUNT,
                "--run-dir", self.run_dir, *self.model_args]


# --- flags ---------------------------------------------------------------------------------------

def build_parser():
    parser = Parser(
        prog="python -m suite.cluster.deploy",
        description="Renders the files that run a benchmark on a GPU cluster: an sbatch script "
                    "(Slurm + Pyxis), a Kubeflow MPIJob manifest (Kubernetes), the container "
                    "Dockerfiles. Edit these inputs and render again; never edit the output.",
        epilog="Example:\n"
               "  python -m suite.cluster.deploy slurm --model models.resnet50 \\\n"
               "      --preset closed_16xA100_gbs3264 --nodes 2 --profile oci-bm-gpu-gm4-8 \\\n"
               "      --network-interface eth0 \\\n"
               "      --image registry.example.com/mlperf/mlperf-hvd-suite:TAG --data /shared/imagenet \\\n"
               "      --results /shared/results --out job.sbatch [-- extra model args, e.g. --set xla=true]\n"
               "Subcommand help: python -m suite.cluster.deploy {slurm,k8s,dockerfile,all} --help",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True, metavar="{slurm,k8s,dockerfile,all}",
                                parser_class=Parser)
    job, slurm, k8s, ssh, image = _job_flags(), _slurm_flags(), _k8s_flags(), _ssh_flags(), _image_flags()
    single = "write the file here (atomically) instead of printing it"
    sub.add_parser("slurm", parents=[job, slurm], help="sbatch script: srun --mpi=pmix with a Pyxis "
                   "container").add_argument("--out", metavar="FILE", help=single)
    sub.add_parser("k8s", parents=[job, k8s, ssh], help="Kubeflow MPI Operator MPIJob "
                   "(kubeflow.org/v2beta1)").add_argument("--out", metavar="FILE", help=single)
    docker = sub.add_parser("dockerfile", parents=[image, ssh], help="the GPU (NGC) or CPU Dockerfile")
    docker.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="default: gpu")
    docker.add_argument("--out", metavar="FILE", help=single)
    every = sub.add_parser("all", parents=[job, slurm, k8s, ssh, image],
                           help="slurm.sbatch, mpijob.yaml, Dockerfile.gpu and Dockerfile.cpu in --out DIR")
    every.add_argument("--out", metavar="DIR", required=True, help="folder for the rendered files")
    return parser


def _job_flags():
    flags = Parser(add_help=False)
    what = flags.add_argument_group("the run")
    what.add_argument("--model", required=True, choices=MODELS, help="the benchmark's module")
    what.add_argument("--preset", required=True, help="one of the model's presets (python -m MODEL --help)")
    what.add_argument("--nodes", required=True, type=int, help=f"number of nodes, 1 to {MAX_NODES}")
    what.add_argument("--profile", required=True, help="cluster profile name or YAML file "
                      f"({', '.join(profiles.available())})")
    what.add_argument("--network-interface", metavar="NAME",
                      help="the nodes' front-end interface inside the containers (overrides the profile's "
                           "network_interface): NCCL_SOCKET_IFNAME, Gloo's and Open MPI's TCP interface")
    what.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                      help="set or override one variable of the profile's env; repeatable")
    what.add_argument("--image", required=True, help="the GPU image, as pushed by container/build.sh")
    what.add_argument("--data", required=True, help="dataset: a host path on every node (Kubernetes: "
                      "or pvc:CLAIM), mounted read-only at " + DATA_MOUNT)
    what.add_argument("--results", required=True, help="shared results folder: a host path (Kubernetes: "
                      "or pvc:CLAIM), mounted at " + RESULTS_MOUNT)
    what.add_argument("--run-id", help="the run's folder under --results (default: "
                      "<model>-<preset>-<N>n-<UTC time>); also the job's name")
    tuning = flags.add_argument_group("Horovod tuning (overrides the profile, as in suite.cluster.launch)")
    tuning.add_argument("--fusion-threshold-mb", type=int, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    tuning.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME, in ms")
    tuning.add_argument("--hierarchical-allreduce", action=argparse.BooleanOptionalAction, default=None,
                        help="HOROVOD_HIERARCHICAL_ALLREDUCE")
    tuning.add_argument("--timeline", metavar="FILE", help="HOROVOD_TIMELINE, a path inside the container")
    return flags


def _slurm_flags():
    flags = Parser(add_help=False)
    slurm = flags.add_argument_group("Slurm")
    slurm.add_argument("--time", default="04:00:00", help="time limit (default: 04:00:00)")
    slurm.add_argument("--partition", help="#SBATCH --partition")
    slurm.add_argument("--account", help="#SBATCH --account")
    return flags


def _k8s_flags():
    flags = Parser(add_help=False)
    k8s = flags.add_argument_group("Kubernetes")
    k8s.add_argument("--namespace", help="the MPIJob's namespace (default: kubectl's)")
    k8s.add_argument("--network-mode", choices=NETWORK_MODES, default="oci-host",
                     help="how workers reach the RDMA NICs: oci-host (the nodes' own network and NICs), "
                          "sriov (NVIDIA Network Operator VFs), none (pod network, no RDMA); "
                          "default: oci-host")
    k8s.add_argument("--rdma-vfs", type=int, metavar="N",
                     help=f"--network-mode sriov: VFs per worker (default: {SRIOV_VFS}, one per RDMA port)")
    k8s.add_argument("--operator-wait", action=argparse.BooleanOptionalAction, default=True,
                     help="launcherCreationPolicy: WaitForWorkersReady (MPI Operator v0.5.0 and later); "
                          "--no-operator-wait for older operators (default: on)")
    k8s.add_argument("--host-ipc", action="store_true", help="pods share the node's IPC namespace")
    for names, nargs, replacement in REPLACED_K8S_FLAGS:
        k8s.add_argument(*names, action=_Replaced, nargs=nargs, replacement=replacement)
    k8s.add_argument("--shm-size", metavar="QUANTITY", help="size limit of the /dev/shm emptyDir, e.g. 64Gi")
    return flags


def _ssh_flags():
    flags = Parser(add_help=False)
    flags.add_argument("--ssh-port", type=int, default=DEFAULT_SSH_PORT,
                       help=f"sshd port in the containers (default: {DEFAULT_SSH_PORT}; not 22, which "
                            f"the node's own sshd holds under host networking)")
    return flags


def _image_flags():
    flags = Parser(add_help=False)
    image = flags.add_argument_group("container image")
    image.add_argument("--ngc-tag", default=DEFAULT_NGC_TAG,
                       help=f"tag of nvcr.io/nvidia/tensorflow for the GPU image "
                            f"(default: {DEFAULT_NGC_TAG})")
    image.add_argument("--base-image", default=DEFAULT_CPU_BASE,
                       help=f"Debian + Python 3.11 base of the CPU image and of the GPU image's "
                            f"suite-check stage (default: {DEFAULT_CPU_BASE})")
    return flags


# --- the job -------------------------------------------------------------------------------------

def plan_job(args, model_args, rendered_by):
    """Validates the inputs shared by every renderer and resolves the environment."""
    profile = profiles.load(args.profile)
    if args.network_interface:
        profile = profiles.with_interface(profile, args.network_interface)
    if profile.gpus_per_node <= 0:
        raise DeployError(f"--profile {profile.name}: gpus_per_node is {profile.gpus_per_node}; "
                          f"cluster jobs need a GPU profile")
    if not 1 <= args.nodes <= MAX_NODES:
        raise DeployError(f"--nodes {args.nodes}: must be 1 to {MAX_NODES}")
    _check_model_args(model_args)
    _check_flag("--preset", args.preset, PRESET, "a preset name (python -m MODEL --help lists them)")
    _check_flag("--image", args.image, IMAGE_REF, "an image reference")
    run_id = args.run_id or default_run_id(args.model, args.preset, args.nodes)
    _check_flag("--run-id", run_id, RUN_ID, "letters, digits, '.', '_' or '-' (at most 100)")
    job = Job(args.model, args.preset, args.nodes, profile.gpus_per_node, profile, {}, args.image,
              args.data, args.results, run_id, list(model_args), rendered_by)
    check_preset(job)
    job.env = resolve_env(profile, args, job.run_dir)
    return job


def resolve_env(profile, args, run_dir):
    """The profile's env with --env overrides and the Horovod tuning, refused as suite.cluster.launch does."""
    env = {**profile.env, **launch._env_overrides(args.env)}
    # Same rule as the launcher: a REPLACE-ME value stops the rendering until --env fills it in.
    launch._check_placeholders(profile, env)
    if args.timeline and not args.timeline.startswith("/"):
        raise DeployError(f"--timeline {args.timeline}: give an absolute path inside the container")
    # A profile's `timeline: true` puts the trace in the run directory, as --record does for launch.
    tuning = argparse.Namespace(fusion_threshold_mb=args.fusion_threshold_mb,
                                cycle_time_ms=args.cycle_time_ms,
                                hierarchical_allreduce=args.hierarchical_allreduce,
                                timeline=args.timeline, record=run_dir)
    env.update(launch.tuning_env(profile.horovod, tuning))
    env[profiles.RESOLVED_VARIABLE] = "1"
    if os.path.dirname(profile.path) == profiles.HERE:
        # A shipped profile is in the image too: the ranks load it by name (env.json records it,
        # the pre-run probe takes its expected bus bandwidth). A profile file of the user's own is
        # not in the image, so it is resolved here and left unnamed.
        env[profiles.PROFILE_VARIABLE] = profile.name
    return env


def default_run_id(model, preset, nodes):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{model.rsplit('.', 1)[-1]}-{preset}-{nodes}n-{stamp}"


def _check_model_args(model_args):
    for arg in model_args:
        if arg.split("=", 1)[0] in OWN_MODEL_FLAGS:
            raise DeployError(f"{arg} after --: the renderer sets --preset, --data-dir and --run-dir "
                              f"itself (from --preset, --data and --results/--run-id)")


def _check_flag(flag, value, pattern, wanted):
    if not pattern.match(value):
        raise DeployError(f"{flag} {value!r}: expected {wanted}")


def check_preset(job):
    """The preset must be the model's; its global batch must split evenly over the ranks."""
    presets = model_presets(job.model)
    if presets is None:
        job.notes.append(f"{job.model} has no presets module yet; preset {job.preset!r} is not checked")
        return
    if job.preset not in presets.PRESETS:
        raise DeployError(f"--preset {job.preset}: not a preset of {job.model}; "
                          f"choose one of {', '.join(presets.PRESETS)}")
    preset = presets.PRESETS[job.preset]
    scale = re.match(r"(\d+) nodes? x", preset.hardware)
    if scale and int(scale[1]) != job.nodes:
        job.notes.append(f"preset {job.preset} is meant for {preset.hardware}; rendering it for {job.nodes} "
                         f"node{'s' if job.nodes > 1 else ''}")
    _check_batch(job, presets.CONFIG, preset)


def model_presets(model):
    """The model's presets module (MODEL.presets), imported by name; None when the model has none yet.

    A presets module imports the suite's config machinery only, never TensorFlow, so this is fast.
    """
    name = f"{model}.presets"
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name in (name, model):
            return None
        raise
    return module


def _check_batch(job, config_cls, preset):
    if any("global_batch_size" in arg for arg in job.model_args):
        return  # the model args set their own batch; the model checks it at start-up
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
    batch = preset.overrides.get("global_batch_size", defaults.get("global_batch_size"))
    if isinstance(batch, int) and batch % job.ranks:
        raise DeployError(f"--preset {job.preset}: global batch {batch} does not split over "
                          f"{job.ranks} ranks ({job.nodes} nodes x {job.gpus} GPUs); choose the preset "
                          f"for this scale or add -- --set global_batch_size=N")


def header(job, what):
    nodes = f"{job.nodes} node{'s' if job.nodes > 1 else ''}"
    return "\n".join([
        f"# {what}: {job.model}, preset {job.preset}, {nodes} x {job.gpus} GPUs, "
        f"profile {job.profile.name} (version {job.profile.version}), run {job.run_id}.",
        f"# Rendered by: {job.rendered_by}",
        "# Change those inputs and render again rather than editing this file."])


# --- Slurm ---------------------------------------------------------------------------------------

def render_slurm(job, args):
    """An sbatch script: one srun --mpi=pmix step in a Pyxis container, one task per GPU."""
    data, results = host_path("--data", job.data), host_path("--results", job.results)
    _check_flag("--time", args.time, SLURM_TIME, "a Slurm time limit such as 04:00:00 or 1-00:00:00")
    if job.profile.mpi_args:
        job.notes.append("the profile's mpi_args do not apply under srun")
    extra = []
    for key, value in (("partition", args.partition), ("account", args.account)):
        if value:
            _check_flag(f"--{key}", value, SLURM_NAME, "letters, digits, '_', '.', '-' or ','")
            extra.append(f"#SBATCH --{key}={value}")
    return fill("slurm.sbatch", {
        "header": header(job, "Slurm batch script"), "run_id": job.run_id, "nodes": job.nodes,
        "gpus": job.gpus, "time": args.time, "sbatch_extra": "\n".join(extra),
        "image": shlex.quote(pyxis_image(job.image)), "data": data, "results": results,
        "profile_line": f"Cluster profile {job.profile.name} (version {job.profile.version}), --env "
                        f"overrides and Horovod tuning.",
        "exports": "\n".join(f"export {key}={shell_word(value)}" for key, value in sorted(job.env.items())),
        "container_env": f"--container-env={','.join(sorted(job.env))} \\" if job.env else "",
        "data_mount": DATA_MOUNT, "results_mount": RESULTS_MOUNT, "workdir": SUITE_DIR,
        "command": shlex.join(job.model_command())})


def shell_word(value):
    """A shell word for value; quoted also when it starts with '=' (NCCL_IB_HCA's exact-match form)."""
    word = shlex.quote(value)
    return f"'{value}'" if word == value and value.startswith("=") else word


def host_path(flag, value):
    if not HOST_PATH.match(value):
        raise DeployError(f"{flag} {value}: Slurm needs an absolute host path of letters, digits and "
                          f"'._/+@-' (Pyxis mounts are a ',' and ':' separated list)")
    return value


def pyxis_image(image):
    """Pyxis (enroot) wants registry#image:tag; registry/image:tag would be read as a Docker Hub path."""
    if image.startswith(("/", "./")) or "#" in image:
        return image
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image


# --- Kubernetes ----------------------------------------------------------------------------------

def render_k8s(job, args):
    """A Kubeflow MPI Operator MPIJob: a launcher running mpirun, one worker pod per node."""
    if job.image.startswith(("/", ".")) or "#" in job.image:
        raise DeployError(f"--image {job.image}: Kubernetes pulls a registry reference "
                          f"(registry/name:tag), not a Pyxis URI or squashfs file")
    doc = _skeleton()
    doc["metadata"]["name"] = job_name(job.run_id)
    if args.namespace:
        _check_flag("--namespace", args.namespace, K8S_NAME, "a Kubernetes namespace name")
        doc["metadata"]["namespace"] = args.namespace
    spec = doc["spec"]
    spec["slotsPerWorker"] = job.gpus
    spec["mpiReplicaSpecs"]["Worker"]["replicas"] = job.nodes
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]
    worker = spec["mpiReplicaSpecs"]["Worker"]["template"]
    _check_port(args.ssh_port)
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


def _check_port(port):
    if not 1 <= port <= 65535:
        raise DeployError(f"--ssh-port {port}: must be 1 to 65535")


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
        _check_flag("--shm-size", args.shm_size, QUANTITY, "a Kubernetes quantity such as 64Gi")
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
        _check_flag(flag, claim, K8S_NAME, "pvc:<claim name>")
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


# --- Dockerfiles ---------------------------------------------------------------------------------

def render_dockerfile(device, args):
    _check_port(args.ssh_port)
    _check_flag("--ngc-tag", args.ngc_tag, IMAGE_TAG, "an image tag such as " + DEFAULT_NGC_TAG)
    _check_flag("--base-image", args.base_image, IMAGE_REF, "an image reference")
    if device == "gpu":
        command = (f"dockerfile --device gpu --ngc-tag {args.ngc_tag} --ssh-port {args.ssh_port} "
                   f"--base-image {args.base_image}")
        values = {"ngc_tag": args.ngc_tag, "ssh_port": args.ssh_port, "horovod_version": horovod_version(),
                  "pins": " ".join(gpu_pins()), "base_image": args.base_image}
        sources = ("suite/cluster/templates/Dockerfile.gpu, requirements.txt (pins), "
                   "scripts/setup.sh (Horovod)")
    else:
        command = f"dockerfile --device cpu --base-image {args.base_image}"
        values = {"base_image": args.base_image}
        sources = "suite/cluster/templates/Dockerfile.cpu"
    values["header"] = (f"# Rendered by: python -m suite.cluster.deploy {command}\n# Sources: {sources}.\n"
                        f"# Change those and render again rather than editing this file.")
    return fill(f"Dockerfile.{device}", values)


def horovod_version():
    """HOROVOD_VERSION of scripts/setup.sh, the one place that pins Horovod."""
    text = _source_file(os.path.join("scripts", "setup.sh"))
    match = re.search(r"^HOROVOD_VERSION=([0-9][0-9.]*)\s*$", text, re.MULTILINE)
    if not match:
        raise DeployError("scripts/setup.sh: no HOROVOD_VERSION=<version> line")
    return match[1]


def gpu_pins():
    """The pins of GPU_PINS in requirements.txt, in that order."""
    pins = {}
    for line in _source_file("requirements.txt").splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower()] = f"{name}=={version}"
    missing = [name for name in GPU_PINS if name not in pins]
    if missing:
        raise DeployError(f"requirements.txt: no name==version pin for {', '.join(missing)}")
    return [pins[name] for name in GPU_PINS]


def _source_file(relative):
    try:
        with open(os.path.join(REPO, relative)) as handle:
            return handle.read()
    except OSError as err:
        raise DeployError(f"{relative}: {err.strerror}; rendering Dockerfiles needs the suite's source "
                          f"checkout") from None


# --- templates and output ------------------------------------------------------------------------

def fill(template, values):
    """The template with every {{field}} replaced; a line holding only an empty field is dropped."""
    with open(os.path.join(TEMPLATES, template)) as handle:
        text = handle.read()
    unknown = sorted(set(FIELD.findall(text)) - set(values))
    if unknown:
        raise DeployError(f"suite/cluster/templates/{template}: no value for {', '.join(unknown)}")
    lines = [line for line in text.splitlines(keepends=True)
             if not (FIELD.fullmatch(line.strip()) and values[line.strip()[2:-2]] == "")]
    return FIELD.sub(lambda match: str(values[match[1]]), "".join(lines))


def write_atomic(path, text):
    """Writes a file whole or not at all: a temporary file beside it, then a rename."""
    if os.path.isdir(path):
        raise DeployError(f"--out {path}: is a folder; give a file name")
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=".deploy-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def rendered_by(argv):
    """The command that rendered a file, without where it was written to."""
    own, model = launch.split_argv(argv)
    kept, skip = [], False
    for arg in own:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    return shlex.join(["python", "-m", "suite.cluster.deploy", *kept, *(["--", *model] if model else [])])


def render(args, model_args, argv):
    """{file name: text} for the subcommand, and the notes for the user."""
    if args.what == "dockerfile":
        if model_args:
            raise DeployError("dockerfile takes no model arguments after --")
        return {f"Dockerfile.{args.device}": render_dockerfile(args.device, args)}, []
    job = plan_job(args, model_args, rendered_by(argv))
    if args.what == "slurm":
        files = {"slurm.sbatch": render_slurm(job, args)}
    elif args.what == "k8s":
        files = {"mpijob.yaml": render_k8s(job, args)}
    else:
        files = {"slurm.sbatch": render_slurm(job, args), "mpijob.yaml": render_k8s(job, args),
                 "Dockerfile.gpu": render_dockerfile("gpu", args),
                 "Dockerfile.cpu": render_dockerfile("cpu", args)}
    return files, job.notes


def emit(files, args):
    if args.what == "all":
        for name, text in files.items():
            write_atomic(os.path.join(args.out, name), text)
            print(os.path.join(args.out, name))
    elif args.out:
        write_atomic(args.out, next(iter(files.values())))
    else:
        sys.stdout.write(next(iter(files.values())))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, model_args = launch.split_argv(argv)
    args = build_parser().parse_args(own)
    try:
        files, notes = render(args, model_args, argv)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        emit(files, args)
    except (DeployError, ProfileError, LaunchError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends quietly
    sys.exit(main())
