"""`python -m suite.cluster.launch`: one command from a hostfile, a process count and a cluster profile."""
import argparse
import contextlib
import dataclasses
import ipaddress
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

from suite.cluster import hostfile, preflight, preflight_links, slurmcheck
from suite.cluster.hostfile import Host, HostfileError
from suite.common import linkprobe, modelargs, profiles, runfiles
from suite.common.config import ConfigError
from suite.common.profiles import ProfileError

LAUNCHERS = ("horovodrun", "mpirun", "srun")
# Modules that compare what they measure with the profile (suite.train.allreduce: its expected bus
# bandwidth); the launcher hands them its own profile so the user need not name it twice.
PROFILE_AWARE = ("suite.train.allreduce",)
# What remote ranks under plain mpirun need from this shell: a non-interactive SSH login gives
# them the node's default environment, not this one (horovodrun forwards everything itself).
PASS_THROUGH = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH")


# A dry run's exit code while the printed command still holds placeholders (usage errors exit 2).
PLACEHOLDERS_LEFT = 3


class LaunchError(ValueError):
    """Flags that do not add up to a launch; the message is one line."""


@dataclass(frozen=True)
class Placeholder:
    """One value to fill in: its marker in the printed command, where it comes from, what goes there."""

    marker: str
    where: str
    fill: str


class Placeholders:
    """A dry run's stand-ins for what the hostfile or profile still leaves to fill in.

    Each place (file and line, or profile key) gets one marker, <REPLACE-ME-1>, <REPLACE-ME-2>, ...,
    the same every time that place is printed, so a sweep's many commands share the numbers.
    """

    def __init__(self):
        self._by_place = {}

    def mark(self, where, fill):
        if where not in self._by_place:
            marker = f"<{profiles.PLACEHOLDER}-{len(self._by_place) + 1}>"
            self._by_place[where] = Placeholder(marker, where, fill)
        return self._by_place[where].marker

    def __len__(self):
        return len(self._by_place)

    def listing(self):
        """Comment lines for the end of a dry run's output; none when nothing is left to fill in."""
        if not self._by_place:
            return []
        head = (f"# {len(self)} placeholder{'s' if len(self) > 1 else ''} left: fill them in, then run "
                f"without --dry-run (exit {PLACEHOLDERS_LEFT} until none is left)")
        return [head] + [f"# {p.marker} {p.where}: {p.fill}" for p in self._by_place.values()]


@dataclass
class Plan:
    """Everything the launch decided: the command, the variables it sets, and where from."""

    launcher: str
    command: list
    env: dict
    np: int
    hosts: list
    profile: profiles.Profile
    notes: list = field(default_factory=list)


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python -m suite.cluster.launch",
        usage="python -m suite.cluster.launch [--hostfile FILE] [-np N] --profile NAME|FILE [options] "
              "-- MODULE [model args]",
        description="Validates a hostfile, a process count and a cluster profile, then runs "
                    "`python -m MODULE [model args]` under horovodrun, mpirun or srun with the profile's "
                    "NCCL/UCX/Open MPI environment and Horovod tuning.",
        epilog="Profiles: " + ", ".join(profiles.available()) + " (or a path to a .yaml file).\n"
               f"Dry run of the shipped 2-node hostfile and OCI profile (exit {PLACEHOLDERS_LEFT}: both "
               "hold placeholders):\n"
               "  python -m suite.cluster.launch --hostfile hostfiles/2node -np 16 "
               "--profile oci-bm-gpu-gm4-8 --dry-run \\\n"
               "      -- models.resnet50 --preset closed_16xA100_gbs3264 --data-dir /data/imagenet\n"
               f"Exit codes: a dry run 0 (nothing left to fill in) or {PLACEHOLDERS_LEFT} (placeholders "
               "left, listed at the end);\n2 bad input (one line naming the file, flag or host); a launch "
               "otherwise the job's own.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_argument_group("where")
    where.add_argument("--hostfile",
                       help="hosts in Horovod's '<host> slots=<N>' format ('#' comments allowed)")
    where.add_argument("-np", "--np", type=int, dest="np", help="number of processes (default: all slots)")
    where.add_argument("--skip-host-check", action="store_true",
                       help="skip the host checks: names resolved here, and before a multi-host launch the "
                            "probe of every host over SSH")
    where.add_argument("--check-hosts", action="store_true",
                       help="only check the hosts (SSH, same Python and suite, distinct names that resolve "
                            "to link addresses, slots against GPUs), print what each said, and exit")
    where.add_argument("--require-links", action="store_true",
                       help="stop before the launch (exit 2) when the link probe names a host whose link "
                            "is slow (below 80%% of the profile's expected_link_gbits, or half its peers' "
                            "median without it) or that it cannot reach; without it such a host is warned "
                            "about")
    where.add_argument("--network-interface", metavar="NAME",
                       help="the nodes' front-end interface (overrides the profile's network_interface): "
                            "horovodrun --network-interfaces, NCCL_SOCKET_IFNAME, Gloo's and Open MPI's "
                            "TCP interface")
    where.add_argument("--nodes", type=int, help="srun without a hostfile: number of nodes")
    where.add_argument("--ntasks-per-node", type=int, help="srun without a hostfile: processes per node")
    how = parser.add_argument_group("how")
    how.add_argument("--profile", help="cluster profile name or YAML file")
    how.add_argument("--launcher", choices=LAUNCHERS, default="horovodrun", help="default: horovodrun")
    how.add_argument("--controller", choices=("gloo", "mpi"),
                     help="horovodrun only: Horovod controller (default: horovodrun's, MPI when built in)")
    how.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                     help="set or override one variable of the profile's env; repeatable")
    how.add_argument("--launcher-args", default="", metavar="'ARGS'",
                     help="extra arguments for the launcher itself, one shell-quoted string")
    how.add_argument("--python", default=sys.executable,
                     help="interpreter on every node (default: this one; nodes share the same paths)")
    add_tuning_flags(parser.add_argument_group("Horovod tuning (overrides the profile)"),
                     timeline_help="HOROVOD_TIMELINE: rank 0 writes a Chrome trace")
    out = parser.add_argument_group("output")
    out.add_argument("--dry-run", action="store_true",
                     help="check everything, the model's flags included, then print the command (one line) "
                          "and the variables it sets (KEY=VALUE) and exit; a placeholder still in the "
                          f"hostfile or profile is printed as <{profiles.PLACEHOLDER}-N>, listed at the end "
                          f"with where it comes from, and makes the exit code {PLACEHOLDERS_LEFT}")
    out.add_argument("--record", metavar="DIR", help="write DIR/launch.json: command, env, profile, hosts")
    return parser


def split_argv(argv):
    """Launcher flags before `--`, the model command after it."""
    if "--" not in argv:
        return argv, []
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def plan_launch(args, model, placeholders=None):
    """Validates everything and builds the command and environment, without running anything.

    With placeholders (a dry run), REPLACE-ME values are marked in the command instead of refused.
    """
    if not model:
        raise LaunchError("no model given; end the flags with -- MODULE [model args], "
                          "e.g. -- models.resnet50")
    if "--dry-run" in model:
        # After `--` it would go to the model, and the job would really start.
        raise LaunchError("--dry-run belongs before the --, with the launcher's flags")
    if not args.profile:
        raise LaunchError(f"choose a cluster profile with --profile: {', '.join(profiles.available())}")
    profile = profiles.load(args.profile)
    if args.network_interface:
        profile = profiles.with_interface(profile, args.network_interface)
    hosts, source = _hosts(args, profile)
    np = args.np if args.np is not None else hostfile.total_slots(hosts)
    hostfile.validate(hosts, np, source, check_names=args.hostfile is not None and not args.skip_host_check,
                      placeholders_allowed=placeholders is not None)
    _check_gpus(hosts, profile)
    used = _marked_hosts(hostfile.hosts_used(hosts, np), source, placeholders)
    env = {**profile.env, **_env_overrides(args.env)}
    if placeholders is None:
        _check_placeholders(profile, env)
    else:
        profile, env = _marked_profile(profile, env, placeholders)
    env.update(tuning_env(profile.horovod, args))
    if any(_is_qualified(host.name) for host in used):
        # Open MPI cuts gpu-node-01.cluster.test to gpu-node-01 and starts its daemon there over ssh,
        # which fails where only the hostfile's names resolve; keep the names as written.
        env.setdefault(FQDN_VARIABLE, "1")
    if not args.check_hosts:
        # What every rank would refuse at start-up, refused before any node is allocated (--check-hosts
        # starts no model).
        _check_distribution(args, modelargs.check(model, np))
    # The ranks learn their profile (env.json records it) and that this launcher has applied it.
    env.update({profiles.PROFILE_VARIABLE: profile.path, profiles.RESOLVED_VARIABLE: "1"})
    plan = Plan(args.launcher, [], env, np, used, profile)
    worker = worker_command(args.python, with_profile(model, profile))
    builders = {"horovodrun": _horovodrun, "mpirun": _mpirun, "srun": _srun}
    plan.command = builders[args.launcher](plan, args, worker)
    return plan


FQDN_VARIABLE = "OMPI_MCA_orte_keep_fqdn_hostnames"


def _check_distribution(args, checked):
    """TensorFlow's collectives build their cluster from the MPI world of mpirun or srun; horovodrun
    starts Horovod's own controller (Gloo, or an MPI world a rank cannot tell from mpirun's), so the
    tf backend is refused under it rather than left to hang or to fail in every rank."""
    if checked is None or args.launcher != "horovodrun":
        return
    model_args, config = checked
    if config.distribution == "tf":
        raise LaunchError(f"{modelargs.origin(model_args, 'distribution', 'tf')} needs --launcher mpirun "
                          f"or --launcher srun: horovodrun (the default launcher) starts Horovod's own "
                          f"controller, which TensorFlow's collectives do not run under")


def _is_qualified(name):
    try:
        ipaddress.ip_address(name)
        return False
    except ValueError:
        return "." in name


def _hosts(args, profile):
    if args.hostfile:
        if args.nodes or args.ntasks_per_node:
            raise LaunchError("give either --hostfile or --nodes/--ntasks-per-node, not both")
        # A bare host line (Open MPI's form) gets one slot per GPU of the profile.
        return hostfile.parse(args.hostfile, profile.gpus_per_node or None), args.hostfile
    if args.launcher != "srun":
        raise LaunchError(f"{args.launcher} needs --hostfile (only srun can take its hosts from Slurm)")
    if not args.nodes or not args.ntasks_per_node:
        raise LaunchError("srun without --hostfile needs --nodes and --ntasks-per-node")
    if args.nodes <= 0 or args.ntasks_per_node <= 0:
        raise LaunchError("--nodes and --ntasks-per-node must be positive")
    # Slurm picks the nodes; they stay unnamed here.
    return [Host(f"slurm-node-{i}", args.ntasks_per_node) for i in range(args.nodes)], "the Slurm allocation"


def _check_gpus(hosts, profile):
    """One GPU per rank: a host with more slots than the profile's GPUs would fail at start-up."""
    if profile.gpus_per_node <= 0:
        return
    for host in hosts:
        if host.slots > profile.gpus_per_node:
            raise LaunchError(f"host {host.name} has {host.slots} slots but profile {profile.name} has "
                              f"{profile.gpus_per_node} GPUs a node; lower its slots")


def _env_overrides(items):
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not profiles.ENV_NAME.match(key):
            raise LaunchError(f"--env {item}: expected KEY=VALUE")
        env[key] = value
    return env


def _check_placeholders(profile, env):
    for key, value in sorted(env.items()):
        if profiles.PLACEHOLDER in value:
            raise LaunchError(profiles.placeholder_problem(profile, key, lambda flag, v: f"pass {flag} {v}"))


def _marked_hosts(hosts, source, placeholders):
    """The hosts with each placeholder name replaced by its dry-run marker."""
    if placeholders is None:
        return hosts
    fill = (f"a node's host name in place of {profiles.PLACEHOLDER} (edit {source}; every node must reach "
            f"the others by it over SSH without a password)")
    return [dataclasses.replace(host, name=placeholders.mark(f"{hostfile.location(source, host)} host "
                                                             f"{host.name}", fill))
            if profiles.PLACEHOLDER in host.name else host for host in hosts]


def _marked_profile(profile, env, placeholders):
    """(profile, env) with every placeholder value replaced by its dry-run marker."""
    where = f"profile {profile.name} ({_shown_path(profile.path)}"
    interface = None
    if profiles.PLACEHOLDER in (profile.network_interface or ""):
        # One marker for the interface and the four variables the profile derives from it.
        interface = placeholders.mark(
            f"{where}:{yaml_line(profile.path, 'network_interface')}) network_interface",
            "the nodes' front-end interface as `ip -br addr` shows it on a node, e.g. eth0 (edit the "
            "profile or pass --network-interface NAME)")
        profile = dataclasses.replace(profile, network_interface=interface)
    marked = {}
    for key, value in env.items():
        if interface and key in profiles.INTERFACE_VARIABLES and profiles.PLACEHOLDER in value:
            value = interface
        elif profiles.PLACEHOLDER in value:
            value = placeholders.mark(f"{where}:{yaml_line(profile.path, key)}) env.{key}",
                                      f"its value (edit the profile or pass --env {key}=VALUE)")
        marked[key] = value
    return profile, marked


def _shown_path(path):
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def yaml_line(path, key):
    """The line of `key:` in a YAML file, for pointing the user at it; '?' when not found."""
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*:")
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            if pattern.match(line):
                return number
    return "?"


def add_tuning_flags(group, timeline_help):
    """The Horovod tuning flags, each overriding its key of the profile's horovod: section (tuning_env);
    the launcher's and mlperf-deploy's alike, but for where the timeline's path is seen."""
    group.add_argument("--fusion-threshold-mb", type=int, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    group.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME, in ms")
    group.add_argument("--hierarchical-allreduce", action=argparse.BooleanOptionalAction, default=None,
                       help="HOROVOD_HIERARCHICAL_ALLREDUCE")
    group.add_argument("--timeline", metavar="FILE", help=timeline_help)


def tuning_env(horovod, args):
    """Horovod's variables from the profile's tuning, each overridden by its flag when given."""
    fusion = _pick(args.fusion_threshold_mb, horovod.fusion_threshold_mb)
    cycle = _pick(args.cycle_time_ms, horovod.cycle_time_ms)
    hierarchical = _pick(args.hierarchical_allreduce, horovod.hierarchical_allreduce)
    timeline = args.timeline or (_default_timeline(args) if horovod.timeline else None)
    if fusion is not None and fusion < 0 or cycle is not None and cycle <= 0:
        raise LaunchError("--fusion-threshold-mb must be >= 0 and --cycle-time-ms > 0")
    return profiles.horovod_env(fusion, cycle, hierarchical, timeline)


def _pick(flag, profile_value):
    return profile_value if flag is None else flag


def _default_timeline(args):
    # Absolute, so rank 0 writes it in the same place whatever its working directory.
    return os.path.join(args.record or os.getcwd(), "horovod_timeline.json")


def with_profile(model, profile):
    """The model command, with --profile added for a profile-aware module that was not given one."""
    given = any(arg == "--profile" or arg.startswith("--profile=") for arg in model[1:])
    if model[0] in PROFILE_AWARE and not given:
        return [*model, "--profile", profile.path]
    return model


def worker_command(python, model):
    """What every rank runs: `python -m MODULE args`, or `python script.py args`."""
    target, rest = model[0], model[1:]
    return [python, target, *rest] if target.endswith(".py") else [python, "-m", target, *rest]


def _horovodrun(plan, args, worker):
    command = ["horovodrun", "-np", str(plan.np), "-H", hostfile.host_list(plan.hosts)]
    if args.controller:
        command.append(f"--{args.controller}")
    if plan.profile.network_interface and not all(_is_this_machine(h.name) for h in plan.hosts):
        # Without it horovodrun probes every interface of every host over SSH and puts its own pick
        # on mpirun's command line, where it beats the profile's variables. On this machine alone
        # horovodrun wants loopback instead, and refuses an interface without 127.0.0.1
        # (horovod/runner/driver/driver_service.py, get_local_interfaces).
        command += ["--network-interfaces", plan.profile.network_interface]
    if args.controller != "gloo" and any(key.startswith("UCX_") for key in plan.env):
        plan.notes.append("horovodrun's MPI path forces Open MPI's pml ob1 (TCP), so the UCX_* settings "
                          "do not apply; --launcher mpirun lets Open MPI use UCX")
    if plan.profile.mpi_args:
        if args.controller == "gloo":
            plan.notes.append("the profile's mpi_args do not apply under --controller gloo")
        else:
            # horovodrun wants the `=` form: its value starts with a dash.
            command.append("--mpi-args=" + shlex.join(plan.profile.mpi_args))
    command += profiles.horovodrun_flags(plan.env)
    return command + shlex.split(args.launcher_args) + worker


def _is_this_machine(name):
    # A dry run's marker is some node still to be named, and no name to look up.
    return profiles.PLACEHOLDER not in name and preflight.is_this_machine(name)


def _mpirun(plan, args, worker):
    _no_gloo(args)
    command = ["mpirun"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-run-as-root")
    # No binding: each rank's input pipeline needs many cores (horovodrun does the same).
    command += ["-np", str(plan.np), "-H", hostfile.host_list(plan.hosts), "--bind-to", "none",
                "--map-by", "slot"]
    exported = sorted(plan.env) + [key for key in PASS_THROUGH if key in os.environ and key not in plan.env]
    for key in exported:
        command += ["-x", key]
    return command + list(plan.profile.mpi_args) + shlex.split(args.launcher_args) + worker


def _srun(plan, args, worker):
    _no_gloo(args)
    slots = {host.slots for host in plan.hosts}
    if len(slots) != 1:
        raise LaunchError(f"srun runs the same number of tasks on every node; {args.hostfile} gives "
                          f"slots {', '.join(str(s) for s in sorted(slots))}")
    if plan.profile.mpi_args:
        plan.notes.append("the profile's mpi_args do not apply under srun")
    # plan.hosts are the nodes this process count fills: Slurm spreads --ntasks over every node -N
    # gives, so a 1-node point of a 4-node hostfile must say -N 1.
    command = ["srun", "--mpi=pmix", "-N", str(len(plan.hosts)), f"--ntasks-per-node={slots.pop()}",
               f"--ntasks={plan.np}", "--cpu-bind=none", "--export=ALL",
               f"--wait={plan.profile.timeouts.task_exit_seconds}"]
    if args.hostfile:
        command.append("--nodelist=" + ",".join(host.name for host in plan.hosts))
    return command + shlex.split(args.launcher_args) + worker


def _no_gloo(args):
    if args.controller == "gloo":
        raise LaunchError(f"--controller gloo needs --launcher horovodrun; {args.launcher} starts MPI ranks")


def record(plan, directory, dry_run, exit_code=None, seconds=None):
    """DIR/launch.json, written atomically; rewritten with the exit code once the job ends."""
    os.makedirs(directory, exist_ok=True)
    runfiles.write_json(os.path.join(directory, "launch.json"), {
        "launcher": plan.launcher,
        "command": plan.command,
        "command_line": shlex.join(plan.command),
        "env": plan.env,
        "np": plan.np,
        "hosts": [{"name": host.name, "slots": host.slots} for host in plan.hosts],
        "profile": {"name": plan.profile.name, "version": plan.profile.version, "path": plan.profile.path},
        "dry_run": dry_run,
        "exit_code": exit_code,
        "seconds": seconds,
    })


def run(plan):
    """Runs the command with the profile's variables added to this environment; returns its exit code."""
    if shutil.which(plan.command[0]) is None:
        raise LaunchError(f"{plan.command[0]} not found on PATH")
    process = subprocess.Popen(plan.command, env={**os.environ, **plan.env}, process_group=0)
    with forwarding_signals(process) as received:
        code = process.wait()
    if received:
        return 128 + received[0]
    return 128 + -code if code < 0 else code


@contextlib.contextmanager
def forwarding_signals(process, signums=(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)):
    """Passes the first SIGINT, SIGTERM or SIGHUP on to the launcher's whole process group, as SIGTERM
    and once; yields the signals received.

    The launcher runs in a process group of its own (Popen(process_group=0)): horovodrun starts
    mpirun through /bin/sh, which would die of a SIGTERM without passing it on, leaving mpirun and
    its ranks running. Ctrl-C at the terminal reaches this process alone for the same reason.
    SIGTERM is the one stop every launcher acts on at once: Open MPI's mpirun passes a SIGINT on to
    its ranks only after its kill grace (odls_base_sigkill_timeout, 5 s in the suite's profiles), by
    which time a short run may have ended; srun takes one SIGINT as a request for status. A second
    signal would make mpirun kill its ranks before they close the log, so none follows.
    """
    received = []

    def forward(signum, frame):
        received.append(signum)
        if len(received) == 1:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)

    previous = {signum: signal.signal(signum, forward) for signum in signums}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, model = split_argv(argv)
    args = build_parser().parse_args(own)
    placeholders = Placeholders() if args.dry_run else None
    try:
        plan = plan_launch(args, model, placeholders)
        for note in plan.notes:
            print(f"note: {note}", file=sys.stderr)
        if args.record:
            record(plan, args.record, args.dry_run)
        if args.dry_run:
            print(shlex.join(plan.command))
            for key in sorted(plan.env):
                print(f"{key}={plan.env[key]}")
            for line in placeholders.listing():
                print(line)
            return PLACEHOLDERS_LEFT if placeholders else 0
        if args.check_hosts:
            return check_hosts(plan, args, verbose=True)
        if needs_host_check(args, plan):
            code = check_hosts(plan, args, verbose=False)
            if code:
                return code
        if plan.launcher == "srun":
            problem = srun_problem(plan)
            if problem:
                raise LaunchError(problem)
        print(f"launch: {shlex.join(plan.command)}", file=sys.stderr, flush=True)
        started = time.time()
        code = run(plan)
    except (HostfileError, ProfileError, LaunchError, ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.record:
        record(plan, args.record, False, code, round(time.time() - started, 1))
    return code


def srun_problem(plan):
    """What Slurm can tell before any rank starts: more nodes than the allocation, an MPI plugin that
    Slurm or the ranks' Open MPI lack (srun would start every rank only for each to fail in MPI_Init)."""
    return (slurmcheck.allocation_problem(len(plan.hosts), os.environ)
            or slurmcheck.mpi_problem(plan.command, {**os.environ, **plan.env}))


def needs_host_check(args, plan):
    """Before a real launch on hosts named by a hostfile other than this one alone."""
    return not args.skip_host_check and bool(args.hostfile) and preflight.is_multi_host(plan.hosts)


def check_hosts(plan, args, verbose):
    """The pre-flight probe of every host; prints each problem in one line and returns 0 or 2."""
    reports, problems = preflight.check_hosts(plan.hosts, python=args.python, profile=plan.profile)
    if verbose:
        for report in reports:
            if report.found:
                found = report.found
                print(f"host {report.name}: {found['hostname']}, resolves to {found['resolves_to']}, Python "
                      f"{found['python']}, suite {found.get('revision')}")
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if problems:
        print("error: host check failed; fix the hosts above (or --skip-host-check to launch anyway)",
              file=sys.stderr)
        return 2
    return check_links(plan, args, verbose) if len(plan.hosts) > 1 else 0


def check_links(plan, args, verbose):
    """The link probe of every host against its ring neighbours; a named host warns, or stops the launch
    with --require-links. The verdict goes to the ranks, which keep it in env.json."""
    links, lines = preflight_links.check_links(plan.hosts, python=args.python, profile=plan.profile)
    if verbose:
        for name, figures in links["hosts"].items():
            print(f"link {name}: " + ", ".join(
                f"{what} {figures[key]:.3g} Gbit/s" if figures[key] is not None else f"{what} not measured"
                for what, key in (("sends", "send_gbits"), ("receives", "receive_gbits"))))
    if lines and args.require_links:
        for line in lines:
            print(f"error: --require-links: {line}", file=sys.stderr)
        return 2
    for line in lines:
        print(f"warning: link probe: {line}", file=sys.stderr)
    plan.env.update(linkprobe.environment_entry(links))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dry-run | head` ends quietly
    sys.exit(main())
