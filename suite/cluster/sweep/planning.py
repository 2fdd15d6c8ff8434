"""A sweep planned from its flags: the scales, every check before the first run, the commands, the dry run.

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

--distributions horovod,tf runs every scale under each distribution backend, all its runs under each
(every run's model command gets --distribution X): each pair is a system of its own,
<prefix>_n<nodes>_np<processes>_<distribution>, with its own results and run folders, so the report
can set the backends side by side. The default, horovod alone, keeps the names above. tf needs
--launcher mpirun or srun. With more than one backend every run also times its step split after
run_stop (--step-split-steps, default 5 then), the one method both backends share.

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
import os
import shlex
import socket
import sys
from dataclasses import dataclass, field

from suite.cluster import hostfile, launch
from suite.cluster.sweep import rates, rcp_check
from suite.common import benchmarks, mlperf_rules, profiles
from suite.common.config import DISTRIBUTIONS
from suite.common.profiles import ProfileError

# submission_status in the logs -> the system description's status (the values package checkers accept).
STATUS = {"onprem": "Available on-premise", "cloud": "Available cloud", "preview": "Preview",
          "research": "Research, Development, or Internal (RDI)"}
# Model settings the sweep decides itself; a user value would make runs or systems disagree.
OWNED_SETTINGS = ("seed", "submission_org", "submission_platform", "submission_status")
OWNED_MODEL_FLAGS = ("--preset", "--run-dir")
# What the sweep's --distributions decides, and the backends the model entry points take.
DISTRIBUTION_FLAG = "--distribution"
DEFAULT_DISTRIBUTIONS = ("horovod",)
# Steps of the after-run_stop step split per run when the sweep compares backends (--step-split-steps).
STEP_SPLIT_STEPS = 5
# Launcher flags that the scales decide.
OWNED_LAUNCH_FLAGS = ("np", "hostfile", "record", "nodes", "ntasks_per_node", "dry_run")
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


class SweepError(ValueError):
    """Flags, files or a run that stop the sweep; the message is one line."""


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
    distribution: str = "horovod"
    launch_args: argparse.Namespace = field(repr=False, default=None)
    # The link probe's verdict for the scale's hosts, for its runs' environment (linkprobe.environment_entry).
    link_env: dict = field(repr=False, default_factory=dict)

    @property
    def nodes(self):
        return len(self.hosts)

    def to_dict(self):
        return {"system": self.system, "np": self.np, "nodes": self.nodes, "hostfile": self.hostfile,
                "hosts": [{"name": h.name, "slots": h.slots} for h in self.hosts], "preset": self.preset,
                "distribution": self.distribution}


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
    step_split_steps: int = 0  # --set step_split_steps=N added to every run (0: not added)
    measure_rates: bool = False  # --throughput at each scale's per-GPU batch on the smallest scale first
    system_info: dict = field(default_factory=dict)
    system_info_path: str = None
    verbose: bool = False
    # A dry run's markers for what the hostfiles and profile leave to fill in (None: a real sweep).
    placeholders: launch.Placeholders = None

    def plan(self):
        """What must match for a re-run to resume this sweep."""
        plan = {"module": self.model[0], "model_args": self.model[1:], "benchmark": self.benchmark,
                "runs": self.runs, "submitter": self.submitter, "status": self.status,
                "profile": self.profile.name, "scales": [s.to_dict() for s in self.scales]}
        if self.step_split_steps:
            # Only when set, so that a sweep planned before the setting existed still resumes.
            plan["step_split_steps"] = self.step_split_steps
        return plan

    @property
    def distributions(self):
        return list(dict.fromkeys(scale.distribution for scale in self.scales))

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
    what.add_argument("--distributions", metavar="NAME,...",
                      help=f"distribution backends to run every scale under, each a system of its own "
                           f"(default horovod; {','.join(DISTRIBUTIONS)} compares them; tf needs --launcher "
                           f"mpirun or srun)")
    what.add_argument("--step-split-steps", type=_not_negative, metavar="N",
                      help=f"every run times N steps with and N without the collective after run_stop, for "
                           f"the report's step split (--set step_split_steps=N; default "
                           f"{STEP_SPLIT_STEPS} with more than one distribution, else not set)")
    what.add_argument("--runs", type=_positive, help="runs per scale (default: what MLPerf requires for "
                      "the benchmark: " + ", ".join(f"{b.name} {b.required_runs}"
                                                    for b in benchmarks.discovered().values()) + ")")
    what.add_argument("--benchmark", help="MLPerf benchmark name (default: the name in MODULE.presets's "
                      "BENCHMARK)")
    how = parser.add_argument_group("how")
    how.add_argument("--profile", help="cluster profile name or YAML file")
    how.add_argument("--allreduce", action="store_true",
                     help="run python -m suite.train.allreduce once per scale before its training runs")
    how.add_argument("--allreduce-args", default="", metavar="'ARGS'",
                     help="extra suite.train.allreduce flags, one shell-quoted string "
                          "(e.g. '--max-bytes 64M')")
    how.add_argument("--measure-rates", action="store_true",
                     help="first, on the smallest scale, measure --throughput at each per-GPU batch the "
                          "scales will train at (OUT/rates.json, for python -m suite.cluster.scaling "
                          "--rates)")
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


def _not_negative(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
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
    described = benchmarks.of_module(model[0])
    benchmark = args.benchmark or (described.name if described else None)
    if not benchmark:
        raise SweepError(f"cannot tell the MLPerf benchmark of {model[0]} (no "
                         f"{model[0]}.presets.BENCHMARK); pass --benchmark NAME")
    runs = args.runs or mlperf_rules.required_runs(benchmark)
    if not runs:
        raise SweepError(f"no required run count known for benchmark {benchmark!r}; pass --runs N")
    presets = _presets_by_np(args)
    known = described.presets if described else None
    prefix = args.system_prefix or profile.name
    distributions = _distributions(args, _launch_parser().parse_args(passthrough).launcher)
    scales = [_scale(np, path, presets, known, prefix, profile.gpus_per_node or None, distribution,
                     distributions != list(DEFAULT_DISTRIBUTIONS))
              for path, np in _scale_specs(args) for distribution in distributions]
    _check_distinct(scales)
    sweep = Sweep(out=os.path.abspath(args.out), model=model, benchmark=benchmark, runs=runs,
                  submitter=args.submitter, status=args.status, profile=profile, scales=scales,
                  allreduce_args=shlex.split(args.allreduce_args) if args.allreduce else None,
                  step_split_steps=_step_split_steps(args, model, distributions),
                  measure_rates=args.measure_rates,
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
    for flag in (arg.split("=", 1)[0] for arg in model[1:]):
        if flag == DISTRIBUTION_FLAG:
            raise SweepError(f"{flag} after -- : the sweep sets it itself (use the sweep's --distributions)")
    for setting in _settings(model[1:]):
        key = setting.split("=", 1)[0]
        if key == "distribution":
            raise SweepError(f"--set {setting}: the sweep sets the distribution itself (use the sweep's "
                             f"--distributions)")
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


def _distributions(args, launcher):
    """The backends of --distributions, in its order; refuses tf under horovodrun before anything runs."""
    if args.distributions is None:
        return list(DEFAULT_DISTRIBUTIONS)
    names = _split(args.distributions, "--distributions")
    for name in names:
        if name not in DISTRIBUTIONS:
            raise SweepError(f"--distributions: unknown backend {name!r}; choose from "
                             f"{', '.join(DISTRIBUTIONS)}")
    if len(set(names)) < len(names):
        raise SweepError(f"--distributions {args.distributions}: a backend named twice")
    if "tf" in names and launcher == "horovodrun":
        raise SweepError(f"--distributions {args.distributions}: tf needs --launcher mpirun or --launcher "
                         f"srun (horovodrun, the default launcher, starts Horovod's own controller)")
    return names


def _step_split_steps(args, model, distributions):
    """N of the --set step_split_steps=N the sweep adds to every run; 0 adds none (the user's own --set
    after -- is left as it is)."""
    given = any(setting.split("=", 1)[0] == "step_split_steps" for setting in _settings(model[1:]))
    if given:
        if args.step_split_steps is not None:
            raise SweepError("--step-split-steps and --set step_split_steps after -- : give one of them")
        return 0
    if args.step_split_steps is not None:
        return args.step_split_steps
    return STEP_SPLIT_STEPS if len(distributions) > 1 else 0


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


def _scale(np, path, presets, known, prefix, default_slots, distribution, named):
    """The Scale of one hostfile, process count and backend; `named` puts the backend in the system's name."""
    hosts = hostfile.parse(path, default_slots)
    np = hostfile.total_slots(hosts) if np is None else np
    preset = presets.get(None) or presets.get(np)
    if preset is None:
        raise SweepError(f"--preset-per-scale gives no preset for {np} processes ({path}); "
                         f"it has {', '.join(str(n) for n in sorted(presets))}")
    if known is not None and preset not in known:
        raise SweepError(f"unknown preset {preset!r} for {np} processes; available: {', '.join(known)}")
    used = hostfile.hosts_used(hosts, np)
    system = f"{prefix}_n{len(used)}_np{np}" + (f"_{distribution}" if named else "")
    return Scale(np=np, hostfile=path, hosts=used, preset=preset, system=system, distribution=distribution)


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
    command = [*sweep.model, "--preset", scale.preset, "--run-dir", run_dir(sweep, scale, index),
               DISTRIBUTION_FLAG, scale.distribution,
               "--set", f"submission_org={sweep.submitter}", "--set", f"submission_platform={scale.system}",
               "--set", f"submission_status={sweep.status}"]
    if sweep.step_split_steps:
        command += ["--set", f"step_split_steps={sweep.step_split_steps}"]
    return command


def run_dir(sweep, scale, index):
    return os.path.join(sweep.runs_dir(scale), f"run_{index}")


def result_path(sweep, scale, index):
    return os.path.join(sweep.results_dir(scale), f"result_{index}.txt")


def allreduce_json(sweep, scale):
    return os.path.join(sweep.runs_dir(scale), "allreduce.json")


def allreduce_command(sweep, scale):
    # suite.cluster.launch adds the profile (its expected bus bandwidth) itself.
    return ["suite.train.allreduce", "--json", allreduce_json(sweep, scale), *sweep.allreduce_args]


def with_record(args, directory):
    # The launcher puts a profile's default timeline next to its record: here, the run directory.
    return argparse.Namespace(**{**vars(args), "record": directory})


def too_few_runs(benchmark, runs):
    """The warning for a sweep of fewer runs per scale than MLPerf requires, or None."""
    required = mlperf_rules.required_runs(benchmark)
    if not required or runs >= required:
        return None
    return (f"warning: {runs} run(s) per scale, MLPerf requires {required} for {benchmark}: the olympic "
            f"means are not MLPerf scores and the package checker will fail this folder "
            f"(\"found {runs}, expected {required}\")")


# ---- what --system-info may set ----

# The fields of a system description (submission.py writes them all): a --system-info file gives
# those this machine cannot know.
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
    if not all(is_local(host.name) for scale in sweep.scales for host in scale.hosts):
        needed.update(HOST_FIELDS)
    if sweep.profile.gpus_per_node > 0:
        needed.update(ACCELERATOR_FIELDS)
    missing = sorted(needed - set(sweep.system_info))
    if missing:
        where = f"--system-info {sweep.system_info_path} lacks" if sweep.system_info_path else \
            "pass --system-info FILE with"
        raise SweepError(f"the nodes are not this machine or have GPUs: {where} {', '.join(missing)} "
                         f"(see docs/scaling-study.md)")


def is_local(name):
    return name in LOCAL_NAMES or name.split(".")[0] == socket.gethostname().split(".")[0]


# ---- dry run ----

def print_dry_run(sweep, out=sys.stdout):
    """Every command the sweep would run, scale by scale, with the variables each scale sets, then
    the placeholders left; returns the exit code (launch.PLACEHOLDERS_LEFT while any is left)."""
    if sweep.measure_rates:
        scale = rates.smallest(sweep)
        out.write(f"# per-GPU rates first, on {scale.system}: --throughput at per-GPU batch "
                  f"{', '.join(map(str, rates.per_gpu_batches(sweep)))}\n")
        for batch in rates.per_gpu_batches(sweep):
            plan = launch.plan_launch(with_record(scale.launch_args, rates.rate_dir(sweep, batch)),
                                      rates.rate_command(sweep, batch), sweep.placeholders)
            out.write(shlex.join(plan.command) + "\n")
    for number, scale in enumerate(sweep.scales, start=1):
        backend = "" if sweep.distributions == list(DEFAULT_DISTRIBUTIONS) else \
            f", distribution {scale.distribution}"
        out.write(f"# scale {number}/{len(sweep.scales)}: system {scale.system}, {scale.np} processes on "
                  f"{scale.nodes} host(s), preset {scale.preset}{backend}, {sweep.runs} runs\n")
        for line in rcp_check.scale_lines(sweep, scale):
            out.write(f"# {line}\n")
        if sweep.allreduce_args is not None:
            plan = launch.plan_launch(scale.launch_args, allreduce_command(sweep, scale), sweep.placeholders)
            out.write(shlex.join(plan.command) + "\n")
        for index in range(sweep.runs):
            directory = run_dir(sweep, scale, index)
            plan = launch.plan_launch(with_record(scale.launch_args, directory),
                                      model_command(sweep, scale, index), sweep.placeholders)
            out.write(shlex.join(plan.command) + "\n")
        for key in sorted(plan.env):
            out.write(f"{key}={plan.env[key]}\n")
    for line in sweep.placeholders.listing():
        out.write(line + "\n")
    return launch.PLACEHOLDERS_LEFT if sweep.placeholders else 0
