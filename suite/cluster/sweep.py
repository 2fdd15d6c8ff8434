"""`python -m suite.cluster.sweep`: one model over several scales, N runs each, MLPerf submission layout.

    python -m suite.cluster.sweep --out runs/sweep --profile local-cpu --hostfile hostfiles/localhost \\
        --scales 1,2 \\
        --preset sweep_cpu -- models.resnet50 --data-dir runs/sweep-data

writes (paths relative to --out):

    sweep.json                                      the plan and every run's status (the manifest)
    <submitter>/systems/<system>.json               one system description per scale
    <submitter>/results/<system>/<benchmark>/result_<i>.txt   the MLPerf logs, copied atomically
    <submitter>/benchmarks/<benchmark>/implementations/tensorflow-horovod/README.md
    runs/<system>/run_<i>/                          each run's own directory: result_0.txt, config.json,
                                                    env.json, summary.json, launch.json, output.txt
    runs/<system>/allreduce.json                    with --allreduce: the bandwidth on that scale

A scale is a hostfile and a process count; its system name is <prefix>_n<nodes>_np<processes>.

--dry-run checks everything (each scale's hosts, the profile, the model's flags and preset against its
process count) and prints every command with the variables it sets. Placeholders still in a hostfile
or the profile are printed as <REPLACE-ME-N> and listed at the end with where they come from; the exit
code is then 3 (0 when none is left, 2 for bad input). The 1-, 2- and 4-node study on the shipped
hostfiles and OCI profile (exit 3: both hold placeholders):

    python -m suite.cluster.sweep --out runs/study --profile oci-bm-gpu-gm4-8 \\
        --hostfiles hostfiles/1node,hostfiles/2node,hostfiles/4node \\
        --preset-per-scale 8=closed_8xA100_gbs3264,16=closed_16xA100_gbs3264,32=closed_32xA100_gbs3264 \\
        --allreduce --dry-run -- models.resnet50 --data-dir /data/imagenet

Re-running the same command resumes: a run whose result file holds a run_stop is skipped, anything
else is run again (the earlier attempt is kept beside it, renamed).

Every launch runs under a guardian process (suite/cluster/guardian.py) that stops it when the sweep
dies, even of SIGKILL. Ctrl-C, SIGTERM or SIGHUP stop the running launch (its ranks write run_stop
aborted) and the sweep (exit 130). A resume first stops a launch that an earlier sweep left running,
and removes the temporary files of writes that were cut off. Every file is written atomically; a
write that fails (a full disk) is one line naming the file, and leaves the earlier version as it was.
"""
import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import sys
import time
from dataclasses import dataclass, field

from suite.cluster import guardian, hostfile, launch, preflight, results
from suite.cluster.hostfile import HostfileError
from suite.cluster.launch import LaunchError
from suite.common import modelargs, profiles, runfiles
from suite.common.config import ConfigError
from suite.common.profiles import ProfileError

MANIFEST = "sweep.json"
# Result files per benchmark folder that the MLPerf Training rules (and the package checker) ask for.
REQUIRED_RUNS = {"resnet": 5, "bert": 10}
# submission_status in the logs -> the system description's status (the values package checkers accept).
STATUS = {"onprem": "Available on-premise", "cloud": "Available cloud", "preview": "Preview",
          "research": "Research, Development, or Internal (RDI)"}
IMPLEMENTATION = "tensorflow-horovod"
# Model settings the sweep decides itself; a user value would make runs or systems disagree.
OWNED_SETTINGS = ("seed", "submission_org", "submission_platform", "submission_status")
OWNED_MODEL_FLAGS = ("--preset", "--run-dir")
# Launcher flags that the scales decide.
OWNED_LAUNCH_FLAGS = ("np", "hostfile", "record", "nodes", "ntasks_per_node", "dry_run")
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class SweepError(ValueError):
    """Flags, files or a run that stop the sweep; the message is one line."""


class RunFailed(SweepError):
    """A run or the allreduce benchmark ended badly; the sweep stops (exit 1) and a re-run retries it."""


# A launch that ended because the sweep was told to stop: Ctrl-C, SIGTERM or SIGHUP (128 + number).
INTERRUPTED = (128 + signal.SIGINT, 128 + signal.SIGTERM, 128 + signal.SIGHUP)


class Interrupted(Exception):
    """Ctrl-C during a run: the manifest says so and a re-run resumes."""


class _Parser(argparse.ArgumentParser):
    # One line instead of argparse's usage block.
    def error(self, message):
        raise SweepError(message)


@dataclass
class Scale:
    """One hostfile and process count: a system of its own in the submission."""

    np: int
    hostfile: str
    hosts: list
    preset: str
    system: str
    launch_args: argparse.Namespace = field(repr=False, default=None)

    @property
    def nodes(self):
        return len(self.hosts)

    def to_dict(self):
        return {"system": self.system, "np": self.np, "nodes": self.nodes, "hostfile": self.hostfile,
                "hosts": [{"name": h.name, "slots": h.slots} for h in self.hosts], "preset": self.preset}


@dataclass
class Sweep:
    """The whole plan, decided and checked before anything runs."""

    out: str
    model: list
    benchmark: str
    runs: int
    submitter: str
    status: str
    profile: profiles.Profile
    scales: list
    allreduce_args: list = None  # None: no allreduce benchmark
    system_info: dict = field(default_factory=dict)
    system_info_path: str = None
    verbose: bool = False
    # A dry run's markers for what the hostfiles and profile leave to fill in (None: a real sweep).
    placeholders: launch.Placeholders = None

    def plan(self):
        """What must match for a re-run to resume this sweep."""
        return {"module": self.model[0], "model_args": self.model[1:], "benchmark": self.benchmark,
                "runs": self.runs, "submitter": self.submitter, "status": self.status,
                "profile": self.profile.name, "scales": [s.to_dict() for s in self.scales]}

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def results_dir(self, scale):
        return self.path(self.submitter, "results", scale.system, self.benchmark)

    def runs_dir(self, scale):
        return self.path("runs", scale.system)


# ---- flags ----

def build_parser():
    parser = _Parser(
        prog="python -m suite.cluster.sweep", allow_abbrev=False,
        usage="python -m suite.cluster.sweep --out DIR --profile NAME|FILE (--hostfile FILE --scales N,... | "
              "--hostfiles FILE,...) (--preset NAME | --preset-per-scale NP=NAME,...) [options] "
              "[launcher options] -- MODULE [model args]",
        description="Runs MODULE at each scale N times through suite.cluster.launch and writes the results "
                    "in "
                    "the MLPerf submission layout. Flags of python -m suite.cluster.launch (--launcher, "
                    "--controller, --env, --launcher-args, --python, --skip-host-check, "
                    "--fusion-threshold-mb, --cycle-time-ms, --[no-]hierarchical-allreduce, --timeline) "
                    "pass through to every launch.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    where = parser.add_argument_group("scales")
    where.add_argument("--hostfile", help="one hostfile for every scale of --scales")
    where.add_argument("--scales", metavar="N,...", help="process counts on --hostfile, e.g. 1,2 or 8,16,32")
    where.add_argument("--hostfiles", metavar="FILE,...",
                       help="one scale per hostfile, each on all its slots (e.g. hostfiles/1node,...)")
    what = parser.add_argument_group("what")
    what.add_argument("--preset", help="the model preset at every scale")
    what.add_argument("--preset-per-scale", metavar="NP=NAME,...",
                      help="the preset for each process count, e.g. 8=closed_8xA100_gbs3264,16=...")
    what.add_argument("--runs", type=_positive, help="runs per scale (default: what MLPerf requires for "
                      "the benchmark: " + ", ".join(f"{k} {v}" for k, v in REQUIRED_RUNS.items()) + ")")
    what.add_argument("--benchmark", help="MLPerf benchmark name (default: BENCHMARK of MODULE.presets)")
    how = parser.add_argument_group("how")
    how.add_argument("--profile", help="cluster profile name or YAML file")
    how.add_argument("--allreduce", action="store_true",
                     help="run python -m suite.train.allreduce once per scale before its training runs")
    how.add_argument("--allreduce-args", default="", metavar="'ARGS'",
                     help="extra suite.train.allreduce flags, one shell-quoted string "
                          "(e.g. '--max-bytes 64M')")
    out = parser.add_argument_group("output")
    out.add_argument("--out", help="sweep folder (new, empty, or an earlier sweep with the same plan)")
    out.add_argument("--submitter", default="mlperf-hvd-suite", help="MLPerf submitter (organisation) name")
    out.add_argument("--system-prefix", help="system names are PREFIX_n<nodes>_np<N> (default: the profile)")
    out.add_argument("--status", choices=sorted(STATUS), default="onprem",
                     help="submission status, logged by every run and written to the systems "
                          "(default onprem)")
    out.add_argument("--system-info", metavar="FILE",
                     help="YAML/JSON of system-description fields (host CPUs, memory, accelerators, ...); "
                          "required for remote hosts and GPUs, which this machine cannot describe")
    out.add_argument("--dry-run", action="store_true", help="print every command of the sweep; run nothing")
    out.add_argument("--verbose", action="store_true", help="also stream each run's output here")
    return parser


def _positive(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not positive")
    return value


def _launch_parser():
    parser = launch.build_parser()
    parser.error = lambda message: _raise(SweepError(message))
    return parser


def _raise(err):
    raise err


def parse(argv):
    """(sweep flags, launcher flags, model command); raises SweepError."""
    own, model = launch.split_argv(list(argv))
    args, passthrough = build_parser().parse_known_args(own)
    given = _launch_parser().parse_args(passthrough)
    defaults = _launch_parser().parse_args([])
    for name in OWNED_LAUNCH_FLAGS:
        if getattr(given, name) != getattr(defaults, name):
            flag = "-np" if name == "np" else "--" + name.replace("_", "-")
            raise SweepError(f"{flag} is not a sweep flag: the scales (--scales, --hostfiles) decide it")
    return args, passthrough, model


# ---- the plan ----

def plan_sweep(args, passthrough, model):
    """Checks everything that can be checked before the first run and returns the Sweep."""
    for name in ("out", "profile"):
        if not getattr(args, name):
            raise SweepError(f"--{name} is required")
    _check_model(model)
    profile = profiles.load(args.profile)
    model_presets = modelargs.presets_of(model[0])
    benchmark = args.benchmark or getattr(model_presets, "BENCHMARK", None)
    if not benchmark:
        raise SweepError(f"cannot tell the MLPerf benchmark of {model[0]} (no "
                         f"{model[0]}.presets.BENCHMARK); pass --benchmark NAME")
    runs = args.runs or REQUIRED_RUNS.get(benchmark)
    if not runs:
        raise SweepError(f"no required run count known for benchmark {benchmark!r}; pass --runs N")
    presets = _presets_by_np(args)
    known = getattr(model_presets, "PRESETS", None)
    prefix = args.system_prefix or profile.name
    scales = [_scale(np, path, presets, known, prefix, profile.gpus_per_node or None)
              for path, np in _scale_specs(args)]
    _check_distinct(scales)
    sweep = Sweep(out=os.path.abspath(args.out), model=model, benchmark=benchmark, runs=runs,
                  submitter=args.submitter, status=args.status, profile=profile, scales=scales,
                  allreduce_args=shlex.split(args.allreduce_args) if args.allreduce else None,
                  verbose=args.verbose, placeholders=launch.Placeholders() if args.dry_run else None)
    _check_name("--submitter", sweep.submitter)
    for scale in scales:
        scale.launch_args = _launch_args(passthrough, scale, args.profile)
        # The launcher's own checks (hosts, slots, profile placeholders, GPUs, the model's flags and
        # preset against the process count), once per scale, now.
        launch.plan_launch(scale.launch_args, model_command(sweep, scale, 0), sweep.placeholders)
    if args.system_info:
        sweep.system_info = read_system_info(args.system_info, sweep.placeholders)
        sweep.system_info_path = args.system_info
    if not args.dry_run:
        _check_describable(sweep)
    return sweep


def _check_model(model):
    if not model:
        raise SweepError("no model given; end the flags with -- MODULE [model args], e.g. -- models.resnet50")
    if "--dry-run" in model:
        # After `--` it would go to the model, and every run would really start.
        raise SweepError("--dry-run belongs before the --, with the sweep's flags")
    for flag in (arg.split("=", 1)[0] for arg in model[1:]):
        if flag in OWNED_MODEL_FLAGS:
            raise SweepError(f"{flag} after -- : the sweep sets it itself (use the sweep's --preset or "
                             f"--preset-per-scale; run directories live under --out)")
    for setting in _settings(model[1:]):
        key = setting.split("=", 1)[0]
        if key in OWNED_SETTINGS:
            raise SweepError(f"--set {setting}: the sweep sets {key} itself (each run draws its own seed, "
                             f"as MLPerf asks; the names come from --submitter, --status and the scale)")


def _settings(args):
    """The KEY=VALUE items of every --set (as `--set K=V` or `--set=K=V`)."""
    found = []
    for i, arg in enumerate(args):
        if arg == "--set" and i + 1 < len(args):
            found.append(args[i + 1])
        elif arg.startswith("--set="):
            found.append(arg[len("--set="):])
    return found


def _scale_specs(args):
    """[(hostfile, process count or None for all slots)] from --scales or --hostfiles."""
    if args.hostfiles and (args.hostfile or args.scales):
        raise SweepError("give either --hostfiles or --hostfile with --scales, not both")
    if args.hostfiles:
        return [(path, None) for path in _split(args.hostfiles, "--hostfiles")]
    if not args.hostfile or not args.scales:
        raise SweepError("give the scales: --hostfile FILE --scales N,... or --hostfiles FILE,...")
    return [(args.hostfile, _count(text, "--scales")) for text in _split(args.scales, "--scales")]


def _split(text, flag):
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise SweepError(f"{flag} {text}: empty item in the comma-separated list")
    return items


def _count(text, flag):
    if not text.isdigit() or int(text) <= 0:
        raise SweepError(f"{flag}: {text!r} is not a positive process count")
    return int(text)


def _presets_by_np(args):
    """{np: preset} from --preset-per-scale, or {None: preset} from --preset."""
    if bool(args.preset) == bool(args.preset_per_scale):
        raise SweepError("give either --preset NAME or --preset-per-scale NP=NAME,... (exactly one)")
    if args.preset:
        return {None: args.preset}
    table = {}
    for item in _split(args.preset_per_scale, "--preset-per-scale"):
        np, sep, name = item.partition("=")
        if not sep or not name:
            raise SweepError(f"--preset-per-scale: {item!r} is not NP=PRESET")
        table[_count(np, "--preset-per-scale")] = name
    return table


def _scale(np, path, presets, known, prefix, default_slots):
    hosts = hostfile.parse(path, default_slots)
    np = hostfile.total_slots(hosts) if np is None else np
    preset = presets.get(None) or presets.get(np)
    if preset is None:
        raise SweepError(f"--preset-per-scale gives no preset for {np} processes ({path}); "
                         f"it has {', '.join(str(n) for n in sorted(presets))}")
    if known is not None and preset not in known:
        raise SweepError(f"unknown preset {preset!r} for {np} processes; available: {', '.join(known)}")
    used = hostfile.hosts_used(hosts, np)
    return Scale(np=np, hostfile=path, hosts=used, preset=preset, system=f"{prefix}_n{len(used)}_np{np}")


def _check_distinct(scales):
    seen = {}
    for scale in scales:
        if scale.system in seen:
            raise SweepError(f"two scales are the same system {scale.system} ({seen[scale.system]} and "
                             f"{scale.hostfile} with {scale.np} processes)")
        seen[scale.system] = scale.hostfile
        _check_name("system name", scale.system)


def _check_name(what, name):
    # Names become folder names in the submission.
    if not name or any(c in name for c in "/\\ ") or name.startswith("."):
        raise SweepError(f"{what} {name!r} cannot be a folder name (no '/', '\\', spaces or leading '.')")


def _launch_args(passthrough, scale, profile):
    return _launch_parser().parse_args(passthrough + ["--hostfile", scale.hostfile, "-np", str(scale.np),
                                                      "--profile", profile])


def model_command(sweep, scale, index):
    """MODULE [model args] with what the sweep decides for run `index` at this scale."""
    return [*sweep.model, "--preset", scale.preset, "--run-dir", run_dir(sweep, scale, index),
            "--set", f"submission_org={sweep.submitter}", "--set", f"submission_platform={scale.system}",
            "--set", f"submission_status={sweep.status}"]


def run_dir(sweep, scale, index):
    return os.path.join(sweep.runs_dir(scale), f"run_{index}")


def result_path(sweep, scale, index):
    return os.path.join(sweep.results_dir(scale), f"result_{index}.txt")


def allreduce_json(sweep, scale):
    return os.path.join(sweep.runs_dir(scale), "allreduce.json")


def allreduce_command(sweep, scale):
    # suite.cluster.launch adds the profile (its expected bus bandwidth) itself.
    return ["suite.train.allreduce", "--json", allreduce_json(sweep, scale), *sweep.allreduce_args]


# ---- the system description ----

SYSTEM_FIELDS = (
    "submitter", "division", "status", "system_name", "number_of_nodes", "host_processors_per_node",
    "host_processor_model_name", "host_processor_core_count", "host_processor_vcpu_count",
    "host_processor_frequency", "host_processor_caches", "host_processor_interconnect",
    "host_memory_capacity",
    "host_storage_type", "host_storage_capacity", "host_networking", "host_networking_topology",
    "host_memory_configuration", "accelerators_per_node", "accelerator_model_name",
    "accelerator_host_interconnect", "accelerator_frequency", "accelerator_on-chip_memories",
    "accelerator_memory_configuration", "accelerator_memory_capacity", "accelerator_interconnect",
    "accelerator_interconnect_topology", "cooling", "hw_notes", "framework", "other_software_stack",
    "operating_system", "sw_notes")
# Decided by the sweep and its logs, so a file cannot contradict them.
SWEEP_FIELDS = ("submitter", "division", "status", "system_name", "number_of_nodes", "accelerators_per_node")
# What this machine cannot know about remote nodes, or about GPUs it does not have.
HOST_FIELDS = ("host_processors_per_node", "host_processor_model_name", "host_processor_core_count",
               "host_processor_vcpu_count", "host_memory_capacity")
ACCELERATOR_FIELDS = ("accelerator_model_name", "accelerator_memory_capacity")
SOFTWARE = ("python", "tf-keras", "numpy", "mpi4py", "mlperf-logging")


def read_system_info(path, placeholders=None):
    """System-description fields from a YAML or JSON file; refuses unknown keys, and placeholders
    unless a dry run lists them (placeholders)."""
    try:
        # The profiles' reader: the same one-line errors for unreadable files, bad YAML, non-mappings.
        data = profiles.read_yaml(path)
    except ProfileError as err:
        raise SweepError(f"--system-info {str(err).removeprefix('profile ')}") from None
    for key, value in data.items():
        if key not in SYSTEM_FIELDS or key in SWEEP_FIELDS:
            raise SweepError(f"--system-info {path}: {key!r} is not a field it may set (the sweep sets "
                             f"{', '.join(SWEEP_FIELDS)})")
        if isinstance(value, (dict, list)) or profiles.PLACEHOLDER in str(value) and placeholders is None:
            raise SweepError(f"--system-info {path}: {key} is {value!r}; give the real value")
        if profiles.PLACEHOLDER in str(value):
            # Not in any command, but the sweep will refuse it: the dry run lists it with the others.
            placeholders.mark(f"{path}:{launch.yaml_line(path, key)} {key}",
                              "its real value (the comment beside it says where to read it); not in any "
                              "command, but a real sweep refuses the file until then")
    return {key: value for key, value in data.items()}


def _check_describable(sweep):
    """Remote nodes and GPUs need --system-info: a submission must not describe the wrong machine."""
    needed = set()
    if not all(_is_local(host.name) for scale in sweep.scales for host in scale.hosts):
        needed.update(HOST_FIELDS)
    if sweep.profile.gpus_per_node > 0:
        needed.update(ACCELERATOR_FIELDS)
    missing = sorted(needed - set(sweep.system_info))
    if missing:
        where = f"--system-info {sweep.system_info_path} lacks" if sweep.system_info_path else \
            "pass --system-info FILE with"
        raise SweepError(f"the nodes are not this machine or have GPUs: {where} {', '.join(missing)} "
                         f"(see docs/scaling-study.md)")


def _is_local(name):
    return name in LOCAL_NAMES or name.split(".")[0] == socket.gethostname().split(".")[0]


def local_host_facts():
    """This machine's CPUs and memory from /proc, for localhost sweeps."""
    cpuinfo = _proc_fields("/proc/cpuinfo")
    meminfo = _proc_fields("/proc/meminfo")
    sockets = len(set(cpuinfo.get("physical id", []))) or 1
    vcpus = os.cpu_count() or 1
    cores = int(cpuinfo["cpu cores"][0]) if cpuinfo.get("cpu cores") else vcpus // sockets
    memory_kb = int(meminfo["MemTotal"][0].split()[0]) if meminfo.get("MemTotal") else 0
    return {
        "host_processors_per_node": sockets,
        "host_processor_model_name": (cpuinfo.get("model name") or ["unknown"])[0],
        "host_processor_core_count": cores,
        "host_processor_vcpu_count": vcpus,
        "host_processor_frequency": f"{float(cpuinfo['cpu MHz'][0]):.0f} MHz" if "cpu MHz" in cpuinfo else "",
        "host_processor_caches": (cpuinfo.get("cache size") or [""])[0],
        "host_memory_capacity": f"{memory_kb / 1024 ** 2:.0f} GB" if memory_kb else "",
    }


def _proc_fields(path):
    fields = {}
    try:
        with open(path) as handle:
            for line in handle:
                key, sep, value = line.partition(":")
                if sep:
                    fields.setdefault(key.strip(), []).append(value.strip())
    except OSError:
        pass
    return fields


def system_description(sweep, scale, logs, env):
    """One scale's <system>.json: the checker's fields from flags, logs, env.json and --system-info."""
    versions = env.get("versions", {})
    cpu = env.get("device") == "cpu" or sweep.profile.gpus_per_node == 0
    desc = {name: "" for name in SYSTEM_FIELDS}
    desc.update({
        "submitter": sweep.submitter,
        "division": "closed" if logs and all(log.division == "closed" for log in logs) else "open",
        "status": STATUS[sweep.status],
        "system_name": scale.system,
        "number_of_nodes": scale.nodes,
        "host_networking": sweep.profile.description,
        # One GPU a rank; the first host gets the most ranks when the processes fill slots in order.
        "accelerators_per_node": 0 if cpu else min(scale.np, scale.hosts[0].slots),
        "accelerator_model_name": "N/A" if cpu else "",
        "hw_notes": f"{scale.np} process(es) on {scale.nodes} host(s) "
                    f"({', '.join(h.name for h in scale.hosts)}); cluster profile {sweep.profile.name} "
                    f"v{sweep.profile.version}",
        "framework": f"TensorFlow {versions.get('tensorflow', '?')}, Horovod {versions.get('horovod', '?')}",
        "other_software_stack": ", ".join(f"{k} {versions[k]}" for k in SOFTWARE if versions.get(k)),
        "operating_system": versions.get("platform", ""),
        "sw_notes": f"mlperf-hvd-suite {env.get('git_revision', 'unknown')}; launched by "
                    f"{env.get('launcher')} ({env.get('controller')} controller)",
    })
    if all(_is_local(host.name) for host in scale.hosts):
        desc.update(local_host_facts())
    desc.update(sweep.system_info)
    # Strings throughout, as in published systems files: the checker joins some fields as text.
    return {key: str(value) for key, value in desc.items()}


# ---- running ----

def load_manifest(sweep):
    """The manifest of an earlier attempt with the same plan, or a new one; refuses other folders."""
    path = sweep.path(MANIFEST)
    if not os.path.exists(path):
        if os.path.isdir(sweep.out) and os.listdir(sweep.out):
            raise SweepError(f"--out {sweep.out} is not empty and holds no {MANIFEST}; choose a new folder")
        return {"tool": "suite.sweep", "created": _now(), "plan": sweep.plan(), "runs": {}, "allreduce": {}}
    try:
        with open(path) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError) as err:
        raise SweepError(f"{path}: cannot read the manifest ({err})") from None
    old = manifest.get("plan", {})
    for key, value in sweep.plan().items():
        if old.get(key) != value:
            raise SweepError(f"{path}: this folder holds a sweep with another {key} ({old.get(key)!r}, now "
                             f"{value!r}); re-run with the same arguments, or choose another --out")
    return manifest


def save(sweep, manifest):
    os.makedirs(sweep.out, exist_ok=True)
    manifest["updated"] = _now()
    runfiles.write_json(sweep.path(MANIFEST), manifest)


def execute(sweep, say):
    """Runs what is not done yet; returns 0, or raises SweepError / Interrupted."""
    manifest = load_manifest(sweep)
    _warn_too_few_runs(sweep)
    _remove_stale_temp_files(sweep, say)
    save(sweep, manifest)
    for scale in sweep.scales:
        _check_hosts(sweep, scale)
    total, done = len(sweep.scales) * sweep.runs, 0
    for scale in sweep.scales:
        os.makedirs(sweep.results_dir(scale), exist_ok=True)
        if sweep.allreduce_args is not None:
            _allreduce(sweep, scale, manifest, say)
        for index in range(sweep.runs):
            done += 1
            _one_run(sweep, scale, index, manifest, say, f"[{done}/{total}]")
        _write_system(sweep, scale)
    _write_implementation_readme(sweep)
    say(f"done: {total} runs in {sweep.path(sweep.submitter)}; "
        f"report: python -m suite.cluster.report {sweep.out}")
    _warn_too_few_runs(sweep)
    return 0


def too_few_runs(benchmark, runs):
    """The warning for a sweep of fewer runs per scale than MLPerf requires, or None."""
    required = REQUIRED_RUNS.get(benchmark)
    if not required or runs >= required:
        return None
    return (f"warning: {runs} run(s) per scale, MLPerf requires {required} for {benchmark}: the olympic "
            f"means are not MLPerf scores and the package checker will fail this folder "
            f"(\"found {runs}, expected {required}\")")


def _warn_too_few_runs(sweep):
    warning = too_few_runs(sweep.benchmark, sweep.runs)
    if warning:
        print(warning, file=sys.stderr, flush=True)


def _remove_stale_temp_files(sweep, say):
    """The temporary files of writes cut off by a kill: the package checker would trip on them."""
    if os.path.isdir(sweep.out):
        for path in runfiles.remove_stale_temp_files(sweep.out):
            say(f"removed {os.path.relpath(path, sweep.out)}, left by a write that was cut off")


def _check_hosts(sweep, scale):
    """The launcher's pre-flight of every host of a multi-host scale (under srun, the allocation and the
    MPI plugin), before any run of the sweep starts."""
    args = scale.launch_args
    plan = launch.plan_launch(args, model_command(sweep, scale, 0))
    # Under srun, a scale larger than the allocation or an MPI plugin the ranks cannot use would
    # otherwise fail only when its turn comes, after every smaller scale has run.
    problem = launch.srun_problem(plan) if plan.launcher == "srun" else None
    if problem:
        raise SweepError(f"scale {scale.system}: {problem}")
    if not launch.needs_host_check(args, plan):
        return
    _, problems = preflight.check_hosts(plan.hosts, python=args.python, profile=plan.profile)
    if problems:
        more = f" (and {len(problems) - 1} more: python -m suite.cluster.launch --check-hosts lists them)" \
            if len(problems) > 1 else ""
        raise SweepError(f"scale {scale.system}: {problems[0]}{more}")


def _one_run(sweep, scale, index, manifest, say, counter):
    key = f"{scale.system}/{index}"
    result, directory = result_path(sweep, scale, index), run_dir(sweep, scale, index)
    record = manifest["runs"].setdefault(key, {"system": scale.system, "index": index, "attempts": 0})
    record.update(result=os.path.relpath(result, sweep.out), run_dir=os.path.relpath(directory, sweep.out))
    if record.get("status") == "running":
        _stop_leftover(record, directory, _rank_pids(directory), say, f"{counter} {scale.system} run {index}")
    if results.has_run_stop(result):
        record["status"] = "done"
        save(sweep, manifest)
        say(f"{counter} {scale.system} run {index}: done earlier, skipped")
        return
    if os.path.exists(result):
        # A result without run_stop is no result; keep it beside the runs, out of the results folder.
        _set_aside(result, os.path.join(sweep.runs_dir(scale), f"result_{index}.incomplete.txt"))
    if _finished(directory):
        say(f"{counter} {scale.system} run {index}: finished earlier, result copied now")
    else:
        if os.path.exists(directory):
            _set_aside(directory, directory + ".attempt")
        _launch_run(sweep, scale, index, record, manifest, say, counter)
    copy_result(os.path.join(directory, runfiles.LOG_NAME), result)
    record["status"] = "done"
    save(sweep, manifest)


def _stop_leftover(record, marker, ranks, say, what):
    """A launch that an earlier sweep recorded as running may still be running (that sweep was killed
    too hard for its guardian to act, or its guardian is still stopping it): it is stopped before its
    directory is set aside, so that no two jobs write there or share the CPUs."""
    found = guardian.stop_leftover(record.get("job") or {}, marker, ranks)
    if found:
        say(f"{what}: stopped {found} process(es) an earlier sweep left running")
    record.pop("job", None)


def _rank_pids(directory):
    env = _read_json(os.path.join(directory, "env.json")) or {}
    return [rank["pid"] for rank in env.get("ranks", []) if isinstance(rank, dict) and rank.get("pid")]


def _finished(directory):
    """A run that ended normally: its log has run_stop and rank 0 wrote summary.json after it."""
    return (results.has_run_stop(os.path.join(directory, runfiles.LOG_NAME))
            and os.path.exists(os.path.join(directory, "summary.json")))


def _launch_run(sweep, scale, index, record, manifest, say, counter):
    directory = run_dir(sweep, scale, index)
    os.makedirs(directory)
    plan = launch.plan_launch(_with_record(scale.launch_args, directory), model_command(sweep, scale, index))
    record.update(status="running", attempts=record["attempts"] + 1, started=_now(), exit_code=None)
    save(sweep, manifest)
    launch.record(plan, directory, dry_run=False)
    started = time.time()
    code = run_logged(plan, os.path.join(directory, "output.txt"), sweep.verbose,
                      on_job=lambda job: _save_job(sweep, manifest, record, job))
    seconds = round(time.time() - started, 1)
    launch.record(plan, directory, False, code, seconds)
    record.pop("job", None)
    record.update(exit_code=code, seconds=seconds, finished=_now())
    if code in INTERRUPTED:
        record["status"] = "interrupted"
        save(sweep, manifest)
        raise Interrupted()
    if code != 0 or not _finished(directory):
        record["status"] = "failed"
        save(sweep, manifest)
        raise RunFailed(f"{scale.system} run {index} failed (exit {code}); its output: "
                        f"{os.path.join(directory, 'output.txt')}; re-run the same command to retry")
    log = results.read_run(os.path.join(directory, runfiles.LOG_NAME), sweep.benchmark)
    record.update(run_stop_status=log.status, time_to_train_minutes=log.minutes)
    say(f"{counter} {scale.system} run {index}: {log.status}, {log.minutes:.3f} min from run_start to "
        f"run_stop ({seconds:.0f} s with start-up)")


def _save_job(sweep, manifest, record, job):
    # The pids a resume needs to stop this launch, should the sweep die without its guardian.
    record["job"] = job
    save(sweep, manifest)


def _with_record(args, directory):
    # The launcher puts a profile's default timeline next to its record: here, the run directory.
    return argparse.Namespace(**{**vars(args), "record": directory})


def _allreduce(sweep, scale, manifest, say):
    path = allreduce_json(sweep, scale)
    entry = manifest["allreduce"].setdefault(scale.system, {"json": os.path.relpath(path, sweep.out)})
    if entry.get("status") == "running":
        _stop_leftover(entry, path, (), say, f"{scale.system} allreduce")
    if os.path.exists(path):
        entry["status"] = "done"
        say(f"{scale.system} allreduce: done earlier, skipped")
        return
    os.makedirs(sweep.runs_dir(scale), exist_ok=True)
    plan = launch.plan_launch(scale.launch_args, allreduce_command(sweep, scale))
    entry.update(status="running", exit_code=None)
    save(sweep, manifest)
    code = run_logged(plan, os.path.join(sweep.runs_dir(scale), "allreduce-output.txt"), sweep.verbose,
                      on_job=lambda job: _save_job(sweep, manifest, entry, job))
    entry.pop("job", None)
    entry.update(exit_code=code, finished=_now(), status=_status(code, os.path.exists(path)))
    save(sweep, manifest)
    if code in INTERRUPTED:
        raise Interrupted()
    if code != 0 or not os.path.exists(path):
        raise RunFailed(f"{scale.system}: the allreduce benchmark failed (exit {code}); its output: "
                        f"{os.path.join(sweep.runs_dir(scale), 'allreduce-output.txt')}")
    _allreduce_verdict(path, scale, say)


def _status(code, finished):
    if code in INTERRUPTED:
        return "interrupted"
    return "done" if code == 0 and finished else "failed"


def _allreduce_verdict(path, scale, say):
    from suite.common.busbw import banner
    data = _read_json(path) or {}
    if data.get("warning"):
        # The run's own banner went to its output file; this one reaches the person at the terminal.
        print(banner(f"{scale.system}:\n{data['warning']}"), file=sys.stderr, flush=True)
    status = (data.get("expectation") or {}).get("status") or data.get("expected_busbw_source") \
        or "no expected bandwidth"
    say(f"{scale.system} allreduce: peak busbw {data.get('peak_busbw_gbps', 0):.3g} GB/s ({status})")


def run_logged(plan, output, verbose, on_job=None):
    """Runs the launch plan under a guardian, its output in a file (and on stdout when verbose); returns
    the exit code.

    The guardian stops the launch should this process die, even of SIGKILL. Ctrl-C, SIGTERM or SIGHUP
    to the sweep is passed on (as SIGTERM) to the guardian, which passes it on to the launcher's process
    group, whose ranks close their logs; it gives 128 + the signal's number: the run is then redone on resume.
    on_job(job) gets the pids to record: {"guardian": pid}, then with "launcher_group" too.
    """
    if shutil.which(plan.command[0]) is None:
        raise SweepError(f"{plan.command[0]} not found on PATH")
    process = guardian.start(plan.command, {**os.environ, **plan.env}, output, tee=verbose)
    group = None
    with launch.forwarding_signals(process) as received:
        try:
            job = {"guardian": process.pid}
            if on_job:
                on_job(job)
            group = guardian.launcher_group(process)
            if on_job and group:
                on_job({**job, "launcher_group": group})
            for line in process.stdout:
                sys.stdout.write(line)  # only with --tee, i.e. verbose
            process.wait()
        except BaseException:
            # Whatever stops this side (a full disk while saving the manifest) stops the launch too.
            guardian.stop(process, group)
            raise
    if received:
        return 128 + received[0]
    code = process.returncode
    return 128 - code if code < 0 else code


def copy_result(source, target):
    """Copies a finished log into the results folder atomically; never replaces a finished result."""
    if results.has_run_stop(target):
        raise SweepError(f"{target} already holds a finished run; it is never overwritten")
    runfiles.copy_atomic(source, target)


def _set_aside(path, base):
    """Renames an unfinished attempt out of the way, keeping earlier ones: base, base.2, base.3, ..."""
    target, n = base, 1
    while os.path.exists(target):
        n += 1
        target = f"{base}.{n}"
    os.rename(path, target)


def _write_system(sweep, scale):
    files = results.result_files(sweep.results_dir(scale))
    logs = [results.read_run(path, sweep.benchmark) for path in files]
    envs = (_read_json(os.path.join(run_dir(sweep, scale, i), "env.json")) for i in range(sweep.runs))
    env = next((e for e in envs if e), {})
    path = sweep.path(sweep.submitter, "systems", f"{scale.system}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    runfiles.write_json(path, system_description(sweep, scale, logs, env))


def _write_implementation_readme(sweep):
    folder = sweep.path(sweep.submitter, "benchmarks", sweep.benchmark, "implementations", IMPLEMENTATION)
    os.makedirs(folder, exist_ok=True)
    text = (f"# {sweep.benchmark}: TensorFlow + Horovod (mlperf-hvd-suite)\n\n"
            f"The code is the suite at git revision {runfiles.git_revision()}; the entry point is "
            f"`python -m {sweep.model[0]}`.\n\nEach run was started as\n\n"
            f"    python -m suite.cluster.launch ... -- {shlex.join(sweep.model)} --preset PRESET "
            f"--run-dir DIR\n\n"
            f"with the preset and launcher command of each scale recorded in `sweep.json` and in each run "
            f"directory's `launch.json` (under `runs/` of the sweep folder).\n")
    runfiles.write_text(os.path.join(folder, "README.md"), text)


def _read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _now():
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


# ---- dry run ----

def print_dry_run(sweep, out=sys.stdout):
    """Every command the sweep would run, scale by scale, with the variables each scale sets, then
    the placeholders left; returns the exit code (launch.PLACEHOLDERS_LEFT while any is left)."""
    for number, scale in enumerate(sweep.scales, start=1):
        out.write(f"# scale {number}/{len(sweep.scales)}: system {scale.system}, {scale.np} processes on "
                  f"{scale.nodes} host(s), preset {scale.preset}, {sweep.runs} runs\n")
        if sweep.allreduce_args is not None:
            plan = launch.plan_launch(scale.launch_args, allreduce_command(sweep, scale), sweep.placeholders)
            out.write(shlex.join(plan.command) + "\n")
        for index in range(sweep.runs):
            directory = run_dir(sweep, scale, index)
            plan = launch.plan_launch(_with_record(scale.launch_args, directory),
                                      model_command(sweep, scale, index), sweep.placeholders)
            out.write(shlex.join(plan.command) + "\n")
        for key in sorted(plan.env):
            out.write(f"{key}={plan.env[key]}\n")
    for line in sweep.placeholders.listing():
        out.write(line + "\n")
    return launch.PLACEHOLDERS_LEFT if sweep.placeholders else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, passthrough, model = parse(argv)
        sweep = plan_sweep(args, passthrough, model)
        if args.dry_run:
            return print_dry_run(sweep)
        with _interruptible():
            return execute(sweep, _say)
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    except (SweepError, HostfileError, ProfileError, LaunchError, ConfigError, results.LogError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        print(f"error: {err.filename or ''}: {err.strerror}".replace("error: : ", "error: "), file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt):
        print("interrupted: re-run the same command to resume the sweep", file=sys.stderr, flush=True)
        return 130


@contextlib.contextmanager
def _interruptible():
    """SIGTERM and SIGHUP between launches end the sweep as Ctrl-C does (exit 130, temporary file
    removed); during a launch they are passed on to it instead (run_logged)."""
    def interrupt(signum, frame):
        raise Interrupted()

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say(message):
    print(f"sweep: {message}", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dry-run | head` ends quietly
    sys.exit(main())
