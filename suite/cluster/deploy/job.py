"""The parts every renderer shares: the job's inputs checked, its environment resolved, templates."""
import argparse
import dataclasses
import datetime
import ipaddress
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from suite.cluster import launch
from suite.common import benchmarks, profiles, runfiles

# suite/cluster/deploy/ -> suite/cluster/templates/ and the repository root.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(HERE))
TEMPLATES = os.path.join(HERE, "templates")
# The scales the suite is built and documented for (1, 2 and 4 nodes of 8 GPUs).
MAX_NODES = 4
SUITE_DIR, DATA_MOUNT, RESULTS_MOUNT = "/opt/mlperf-hvd-suite", "/data", "/results"
# The renderer sets these model flags itself; the same flags after `--` would contradict it.
OWN_MODEL_FLAGS = ("--preset", "--data-dir", "--run-dir")
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
PRESET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Registry references; Pyxis also takes registry#image:tag and a squashfs file's path.
IMAGE_REF = re.compile(r"^[A-Za-z0-9./][A-Za-z0-9._/:@#+-]*$")
FIELD = re.compile(r"\{\{(\w+)\}\}")
# How long a look-up of the cluster (sinfo, sacctmgr, kubectl) may take; where none answers, the
# renderer cannot tell and refuses nothing on that account. SUITE_CLUSTER_TOOLS: where to look for
# those tools instead of PATH (the tests point it at stand-ins, or at nothing).
QUERY_SECONDS = 10
QUERY_PATH = os.environ.get("SUITE_CLUSTER_TOOLS")


class DeployError(ValueError):
    """Inputs that do not add up to a job; the message is one line naming the flag or file."""


@dataclass
class Job:
    """One benchmark run on a cluster: what runs, where, and with which environment.

    data_dir and results_dir are the paths as the ranks see them: the container's mounts, or on bare
    metal the host paths themselves; python is the interpreter the ranks run.
    """

    model: str
    preset: str
    nodes: int
    gpus: int
    tasks: int
    profile: profiles.Profile
    env: dict
    image: str | None
    data: str
    results: str
    run_id: str
    model_args: list
    rendered_by: str
    data_dir: str = DATA_MOUNT
    results_dir: str = RESULTS_MOUNT
    python: str = "python"
    overrides: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    @property
    def ranks(self):
        return self.nodes * self.tasks

    @property
    def run_dir(self):
        return f"{self.results_dir}/{self.run_id}"

    def model_command(self):
        return [self.python, "-m", self.model, "--preset", self.preset, "--data-dir", self.data_dir,
                "--run-dir", self.run_dir, *self.model_args]


def plan_job(args, model_args, rendered_by):
    """Validates the inputs shared by every renderer and resolves the environment."""
    profile = profiles.load(args.profile)
    if args.network_interface:
        profile = profiles.with_interface(profile, args.network_interface)
    if profile.gpus_per_node <= 0 and args.what != "slurm":
        raise DeployError(f"--profile {profile.name}: gpus_per_node is {profile.gpus_per_node}; "
                          f"the MPIJob needs a GPU profile (a CPU profile renders for Slurm only)")
    if not 1 <= args.nodes <= MAX_NODES:
        raise DeployError(f"--nodes {args.nodes}: must be 1 to {MAX_NODES}")
    _check_model_args(model_args)
    check_flag("--preset", args.preset, PRESET, "a preset name (python -m MODEL --help lists them)")
    bare_metal = getattr(args, "bare_metal", False)
    if args.image is None and not bare_metal:
        raise DeployError("--image is required (the image container/build.sh pushed), except for "
                          "slurm --bare-metal")
    if args.image is not None:
        check_flag("--image", args.image, IMAGE_REF, "an image reference")
    run_id = args.run_id or default_run_id(args.model, args.preset, args.nodes)
    check_flag("--run-id", run_id, RUN_ID, "letters, digits, '.', '_' or '-' (at most 100)")
    job = Job(args.model, args.preset, args.nodes, profile.gpus_per_node,
              tasks_per_node(profile, getattr(args, "ntasks_per_node", None)), profile, {},
              None if bare_metal else args.image, args.data, args.results, run_id, list(model_args),
              rendered_by)
    if bare_metal:
        job.data_dir, job.results_dir = args.data, args.results
    check_preset(job)
    job.overrides = launch._env_overrides(args.env)
    job.env = resolve_env(profile, args, job.run_dir)
    subnet = getattr(args, "mpi_subnet", None)
    if subnet:
        job.env.update(mpi_subnet(subnet, job.overrides))
    if profile.gpus_per_node > 0:
        # NCCL's log of every process in the run directory, which outlives the container or pod and
        # a run that fails before run_start; the network check reads it there (suite/train/network.py).
        job.env.setdefault("NCCL_DEBUG_FILE", runfiles.nccl_debug_file(job.run_dir))
    return job


def mpi_subnet(value, overrides):
    """Open MPI's TCP interface variables as a subnet (Open MPI's *_tcp_if_include take CIDRs too)."""
    try:
        cidr = str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise DeployError(f"--mpi-subnet {value}: expected a subnet such as 10.0.0.0/16") from None
    keys = ("OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")
    clash = [key for key in keys if key in overrides]
    if clash:
        raise DeployError(f"--mpi-subnet {value} and --env {clash[0]}: give one of the two")
    return {key: cidr for key in keys}


def tasks_per_node(profile, asked):
    """One task per GPU; a CPU profile's count comes from --ntasks-per-node."""
    if profile.gpus_per_node == 0:
        if asked is None:
            raise DeployError(f"--profile {profile.name} has no GPUs: give --ntasks-per-node N, the "
                              f"processes on each node")
        if asked < 1:
            raise DeployError(f"--ntasks-per-node {asked}: must be 1 or more")
        return asked
    if asked not in (None, profile.gpus_per_node):
        raise DeployError(f"--ntasks-per-node {asked}: profile {profile.name} has {profile.gpus_per_node} "
                          f"GPUs a node, and the job runs one task per GPU; leave the flag out")
    return profile.gpus_per_node


def resolve_env(profile, args, run_dir):
    """The profile's env with --env overrides and the Horovod tuning, refused as suite.cluster.launch does."""
    env = {**profile.env, **launch._env_overrides(args.env)}
    # Same rule as the launcher: a REPLACE-ME value stops the rendering until --env fills it in.
    launch._check_placeholders(profile, env)
    if args.timeline and not args.timeline.startswith("/"):
        raise DeployError(f"--timeline {args.timeline}: give an absolute path as the ranks see it")
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


def check_flag(flag, value, pattern, wanted):
    if not pattern.match(value):
        raise DeployError(f"{flag} {value!r}: expected {wanted}")


def check_preset(job):
    """The preset must be the model's; its global batch must split evenly over the ranks."""
    benchmark = benchmarks.of_module(job.model)
    if benchmark is None:
        job.notes.append(f"{job.model} has no presets module yet; preset {job.preset!r} is not checked")
        return
    if job.preset not in benchmark.presets:
        raise DeployError(f"--preset {job.preset}: not a preset of {job.model}; "
                          f"choose one of {', '.join(benchmark.presets)}")
    preset = benchmark.presets[job.preset]
    scale = re.match(r"(\d+) nodes? x", preset.hardware)
    if scale and int(scale[1]) != job.nodes:
        job.notes.append(f"preset {job.preset} is meant for {preset.hardware}; rendering it for {job.nodes} "
                         f"node{'s' if job.nodes > 1 else ''}")
    _check_batch(job, benchmark.config_cls, preset)


def _check_batch(job, config_cls, preset):
    if any("global_batch_size" in arg for arg in job.model_args):
        return  # the model args set their own batch; the model checks it at start-up
    defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
    batch = preset.overrides.get("global_batch_size", defaults.get("global_batch_size"))
    if isinstance(batch, int) and batch % job.ranks:
        raise DeployError(f"--preset {job.preset}: global batch {batch} does not split over "
                          f"{job.ranks} ranks ({job.nodes} nodes x {job.tasks} tasks); choose the preset "
                          f"for this scale or add -- --set global_batch_size=N")


def header(job, what):
    nodes = f"{job.nodes} node{'s' if job.nodes > 1 else ''}"
    per_node = f"{job.gpus} GPUs" if job.gpus else f"{job.tasks} CPU tasks"
    return "\n".join([
        f"# {what}: {job.model}, preset {job.preset}, {nodes} x {per_node}, "
        f"profile {job.profile.name} (version {job.profile.version}), run {job.run_id}.",
        f"# Rendered by: {job.rendered_by}",
        "# Change those inputs and render again rather than editing this file."])


def ask(argv):
    """What a cluster tool prints; None where it is missing, fails or does not answer in time."""
    tool = shutil.which(argv[0], path=QUERY_PATH)
    if tool is None:
        return None
    try:
        result = subprocess.run([tool, *argv[1:]], capture_output=True, text=True, timeout=QUERY_SECONDS)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout if result.returncode == 0 else None


def shell_word(value):
    """A shell word for value; quoted also when it starts with '=' (NCCL_IB_HCA's exact-match form)."""
    word = shlex.quote(value)
    return f"'{value}'" if word == value and value.startswith("=") else word


def check_port(port):
    if not 1 <= port <= 65535:
        raise DeployError(f"--ssh-port {port}: must be 1 to 65535")


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


def write_out(path, text):
    """Writes one --out file whole or not at all (runfiles.write_text), making its folder first."""
    if os.path.isdir(path):
        raise DeployError(f"--out {path}: is a folder; give a file name")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    runfiles.write_text(path, text)
