"""Cluster profiles: named, versioned YAML files of NCCL/UCX/Open MPI settings and Horovod tuning."""
import dataclasses
import os
import re
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
PLACEHOLDER = "REPLACE-ME"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A network interface name as `ip link` shows it (placeholders included, so they reach the launcher's
# one-line refusal); Linux allows up to 15 characters, NCCL and Open MPI take it as it is.
INTERFACE = re.compile(r"^[A-Za-z0-9_.:@-]{1,40}$")
# What each launcher and library reads to pick the network for its own traffic. Horovod's runner sets
# the same four from --network-interfaces (horovod/runner/gloo_run.py, horovod/runner/mpi_run.py);
# oob_tcp_if_include keeps Open MPI's daemons on it too. One setting drives them all, so no launch
# path can end up with NCCL's bootstrap on one NIC and MPI on another.
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "OMPI_MCA_btl_tcp_if_include",
                       "OMPI_MCA_oob_tcp_if_include")
# An OCI shape name as the instance metadata gives it (BM.GPU4.8, BM.GPU.A100-v2.8).
SHAPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$")
# The variable through which a job's processes learn their profile (horovodrun and the suite's
# launcher forward the environment to every rank).
PROFILE_VARIABLE = "SUITE_PROFILE"

# key: (type(s) accepted, required). bool is checked apart: YAML `yes` must not pass as a number.
TOP_KEYS = {
    "name": (str, True),
    "version": (int, True),
    "description": (str, True),
    "gpus_per_node": (int, True),
    "network_interface": (str, False),
    "shapes": (list, False),
    "env": (dict, False),
    "mpi_args": (list, False),
    "horovod": (dict, False),
    "expected_busbw_gbps": (dict, False),
    "expected_link_gbits": ((int, float), False),
    "timeouts": (dict, False),
}
HOROVOD_KEYS = {
    "fusion_threshold_mb": int,
    "cycle_time_ms": (int, float),
    "hierarchical_allreduce": bool,
    "timeline": bool,
}


@dataclass(frozen=True)
class Timeouts:
    """How long a job waits on a silent peer before it ends. The defaults are the suite's, for every
    profile that does not set its own; RELIABILITY.md lists the time each fault takes to end a job."""

    # The suite's rank watch (suite/train/peers.py): a rank that sends nothing this long (stopped,
    # host frozen, link down) ends the job. A death is seen at once, whatever this says.
    peer_seconds: int = 20
    # Gloo's wait on any transfer (HOROVOD_GLOO_TIMEOUT_SECONDS; Horovod's default, 30 s, kept).
    gloo_seconds: int = 30
    # Horovod's stall inspector: a warning naming the ranks that have not submitted a tensor the
    # others wait on (HOROVOD_STALL_CHECK_TIME_SECONDS, Horovod's default 60 s) ...
    stall_check_seconds: int = 60
    # ... and the end of the job when the stall lasts this long (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS;
    # Horovod's default, 0, never ends it). Catches a rank that is alive but stuck (a dead file system).
    stall_shutdown_seconds: int = 300
    # Open MPI's daemons (mpirun, orted) probe each other's TCP line after this much silence, every
    # half of it, three times (oob_tcp_keepalive_time/intvl/probes; Open MPI's defaults 300 s, 20 s
    # and 9 probes, 8 minutes in all), and mpirun's ssh to each remote daemon probes its host the
    # same way. Longer than peer_seconds, so that rank 0 names the lost ranks before mpirun gives up.
    mpi_keepalive_seconds: int = 20
    # Open MPI's wait between its SIGTERM and its SIGKILL to a rank (odls_base_sigkill_timeout; its
    # default, 1 s, is tight for rank 0's closing run_stop on a loaded node). A rank ends at once on
    # SIGTERM (suite/train/signals.py), so this bounds only a rank that does not.
    kill_grace_seconds: int = 5
    # Under srun no mpirun sits above the ranks to end the job when one of them dies, and a rank that
    # dies before the rank watch is up (a crash inside MPI_Init) leaves the others waiting there until
    # the job's time limit. srun --wait ends the remaining tasks this long after the first one ended:
    # room for rank 0's closing lines after the others have finished (or have named a dead rank).
    task_exit_seconds: int = 120

    def env(self):
        return {
            "HOROVOD_GLOO_TIMEOUT_SECONDS": str(self.gloo_seconds),
            "HOROVOD_STALL_CHECK_TIME_SECONDS": str(self.stall_check_seconds),
            "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": str(self.stall_shutdown_seconds),
            "OMPI_MCA_oob_tcp_keepalive_time": str(self.mpi_keepalive_seconds),
            "OMPI_MCA_oob_tcp_keepalive_intvl": str(self._probe_interval()),
            "OMPI_MCA_oob_tcp_keepalive_probes": "3",
            "OMPI_MCA_odls_base_sigkill_timeout": str(self.kill_grace_seconds),
            # mpirun starts each remote daemon through ssh and gives up on a daemon whose ssh has
            # ended: with these options ssh ends once the remote host has not answered for the same
            # bound. Without them mpirun waits on a dead link for TCP's own retransmission timeout,
            # about 15 minutes (net.ipv4.tcp_retries2).
            "OMPI_MCA_plm_rsh_agent": f"ssh -o ServerAliveInterval={self._probe_interval()} "
                                      f"-o ServerAliveCountMax=3",
        }

    def mpi_daemon_seconds(self):
        """How long Open MPI's daemons take to give up on a dead line, by the keepalive settings."""
        return self.mpi_keepalive_seconds + 3 * self._probe_interval()

    def _probe_interval(self):
        return max(1, self.mpi_keepalive_seconds // 2)


class ProfileError(ValueError):
    """A profile that is unknown or malformed; the message is one line naming the file and key."""


@dataclass(frozen=True)
class Horovod:
    """Horovod tuning; None leaves Horovod's own default in place."""

    fusion_threshold_mb: int | None = None
    cycle_time_ms: float | None = None
    hierarchical_allreduce: bool | None = None
    timeline: bool = False


@dataclass(frozen=True)
class Profile:
    name: str
    version: int
    description: str
    gpus_per_node: int
    path: str
    # The nodes' front-end interface: Gloo, MPI's TCP traffic and NCCL's bootstrap sockets use it.
    network_interface: str | None = None
    # The OCI shapes the profile's values are for (empty: any node); the node check refuses others.
    shapes: tuple = ()
    # The YAML's env plus the variables that network_interface implies.
    env: dict = field(default_factory=dict)
    mpi_args: tuple = ()
    horovod: Horovod = Horovod()
    # Bus bandwidth in GB/s (bytes, as nccl-tests report it) by node count.
    expected_busbw_gbps: dict = field(default_factory=dict)
    # One node's link to the others in Gbit/s (as a NIC is sold), for the per-host link probe; None:
    # a host is compared with its peers instead.
    expected_link_gbits: float | None = None
    timeouts: Timeouts = Timeouts()

    def placeholders(self):
        """Env variables whose value the user still has to fill in."""
        return sorted(key for key, value in self.env.items() if PLACEHOLDER in value)


def available():
    """Names of the profiles shipped in this folder (and any a user dropped in)."""
    return sorted(os.path.splitext(name)[0] for name in os.listdir(HERE) if name.endswith((".yaml", ".yml")))


def load(name_or_path):
    """A profile by name (a file in this folder) or by path to a YAML file."""
    if name_or_path.endswith((".yaml", ".yml")) or os.sep in name_or_path:
        return _load_file(name_or_path, expect_name=None)
    for ext in (".yaml", ".yml"):
        path = os.path.join(HERE, name_or_path + ext)
        if os.path.isfile(path):
            return _load_file(path, expect_name=name_or_path)
    raise ProfileError(f"unknown profile {name_or_path!r}; available: {', '.join(available())} "
                       f"(or pass a path to a .yaml file)")


def _load_file(path, expect_name):
    data = read_yaml(path)
    _check_keys(path, data)
    interface = _interface(path, data.get("network_interface"))
    timeouts = _timeouts(path, data.get("timeouts") or {})
    env = _with_interface(path, _env(path, data.get("env") or {}), interface)
    profile = Profile(
        name=data["name"], version=data["version"], description=data["description"],
        gpus_per_node=data["gpus_per_node"], path=os.path.abspath(path), network_interface=interface,
        shapes=_shapes(path, data.get("shapes") or []),
        env=_with_timeouts(path, env, timeouts), timeouts=timeouts,
        mpi_args=_mpi_args(path, data.get("mpi_args") or []),
        horovod=_horovod(path, data.get("horovod") or {}),
        expected_busbw_gbps=_busbw(path, data.get("expected_busbw_gbps") or {}),
        expected_link_gbits=_positive(path, "expected_link_gbits", data.get("expected_link_gbits")))
    if expect_name and profile.name != expect_name:
        # `--profile NAME` finds the file by its name, so the two must agree.
        raise ProfileError(f"profile {path}: name {profile.name!r} differs from the file name "
                           f"{expect_name!r}")
    if profile.gpus_per_node < 0:
        raise ProfileError(f"profile {path}: gpus_per_node must be 0 (CPU) or more, "
                           f"not {profile.gpus_per_node}")
    return profile


def read_yaml(path):
    import yaml
    try:
        with open(path) as handle:
            data = yaml.safe_load(handle)
    except OSError as err:
        raise ProfileError(f"profile {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(err, "problem", None) or err
        raise ProfileError(f"profile {path}{where}: not valid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ProfileError(f"profile {path}: expected a mapping of settings")
    return data


def _check_keys(path, data):
    for key in data:
        if key not in TOP_KEYS:
            raise ProfileError(f"profile {path}: unknown key {key!r} (allowed: {', '.join(TOP_KEYS)})")
    for key, (kind, required) in TOP_KEYS.items():
        if key not in data:
            if required:
                raise ProfileError(f"profile {path}: missing key {key!r}")
        elif data[key] is not None or required:
            _check_type(path, key, data[key], kind)


def _check_type(path, key, value, kind):
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        wanted = " or ".join(k.__name__ for k in kinds)
        raise ProfileError(f"profile {path}: {key} must be {wanted}, not {type(value).__name__} {value!r}")


def _env(path, env):
    result = {}
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            raise ProfileError(f"profile {path}: env key {key!r} is not a variable name")
        # Numbers are fine (NCCL_IB_TC: 41); booleans are not, since yes/true would become "True".
        _check_type(path, f"env.{key}", value, (str, int))
        result[key] = str(value)
    return result


def _interface(path, name):
    if name is not None and not INTERFACE.match(name):
        raise ProfileError(f"profile {path}: network_interface {name!r} is not an interface name "
                           f"(one name, e.g. eth0, as `ip link` shows it)")
    return name


def _with_interface(path, env, interface):
    if interface is None:
        return env
    for key in INTERFACE_VARIABLES:
        if key in env and env[key] != interface:
            raise ProfileError(f"profile {path}: env.{key} ({env[key]}) contradicts network_interface "
                               f"({interface}); set only network_interface")
    return {**env, **{key: interface for key in INTERFACE_VARIABLES}}


def with_interface(profile, name):
    """The profile with another front-end interface (the launchers' --network-interface)."""
    name = _interface("--network-interface", name)
    own = {key: value for key, value in profile.env.items() if key not in INTERFACE_VARIABLES}
    return dataclasses.replace(profile, network_interface=name, env=_with_interface(profile.path, own, name))


def placeholder_problem(profile, key, fix):
    """The one-line refusal for a variable still holding REPLACE-ME; fix says how to set it."""
    if key in INTERFACE_VARIABLES and PLACEHOLDER in (profile.network_interface or ""):
        return (f"profile {profile.name} ({profile.path}): network_interface is a placeholder "
                f"({profile.network_interface}); edit the profile or {fix('--network-interface', '<name>')}")
    return (f"profile {profile.name} ({profile.path}): {key} is a placeholder ({profile.env.get(key)}); "
            f"edit the profile or {fix('--env', f'{key}=<value>')}")


def horovod_env(fusion_threshold_mb=None, cycle_time_ms=None, hierarchical_allreduce=None, timeline=None):
    """Horovod's variables for its tuning, with the conversions horovodrun applies to its own flags
    (horovod/runner/common/util/config_parser.py); None leaves Horovod's default."""
    env = {}
    if fusion_threshold_mb is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(fusion_threshold_mb * 1024 * 1024)
    if cycle_time_ms is not None:
        env["HOROVOD_CYCLE_TIME"] = str(float(cycle_time_ms))
    if hierarchical_allreduce is not None:
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if hierarchical_allreduce else "0"
    if timeline:
        env["HOROVOD_TIMELINE"] = os.path.abspath(timeline)
    return env


def horovodrun_flags(env):
    """horovod_env the other way round: horovodrun's own flags for the tuning in env, which horovodrun
    turns back into the same HOROVOD_* values."""
    flags = []
    if "HOROVOD_FUSION_THRESHOLD" in env:
        flags += ["--fusion-threshold-mb", str(int(env["HOROVOD_FUSION_THRESHOLD"]) // (1024 * 1024))]
    if "HOROVOD_CYCLE_TIME" in env:
        flags += ["--cycle-time-ms", env["HOROVOD_CYCLE_TIME"]]
    if "HOROVOD_HIERARCHICAL_ALLREDUCE" in env:
        flags.append("--hierarchical-allreduce" if env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
                     else "--no-hierarchical-allreduce")
    if "HOROVOD_TIMELINE" in env:
        flags += ["--timeline-filename", env["HOROVOD_TIMELINE"]]
    return flags


def _shapes(path, shapes):
    for index, shape in enumerate(shapes):
        _check_type(path, f"shapes[{index}]", shape, str)
        if not SHAPE.match(shape):
            raise ProfileError(f"profile {path}: shapes[{index}] {shape!r} is not a shape name "
                               f"(as the instance metadata gives it, e.g. BM.GPU4.8)")
    return tuple(shapes)


def rdma_devices(env):
    """The RDMA devices an exact NCCL_IB_HCA list names (=mlx5_1,mlx5_2:1,...); () for a prefix or none."""
    hca = env.get("NCCL_IB_HCA", "")
    if not hca.startswith("=") or PLACEHOLDER in hca:
        return ()
    return tuple(name.split(":", 1)[0] for name in hca[1:].split(",") if name)


def _mpi_args(path, args):
    for index, arg in enumerate(args):
        _check_type(path, f"mpi_args[{index}]", arg, str)
    return tuple(args)


def _horovod(path, section):
    for key, value in section.items():
        if key not in HOROVOD_KEYS:
            raise ProfileError(f"profile {path}: unknown key 'horovod.{key}' "
                               f"(allowed: {', '.join(HOROVOD_KEYS)})")
        _check_type(path, f"horovod.{key}", value, HOROVOD_KEYS[key])
    if section.get("fusion_threshold_mb", 0) < 0 or section.get("cycle_time_ms", 1) <= 0:
        raise ProfileError(f"profile {path}: horovod.fusion_threshold_mb must be >= 0 and "
                           f"horovod.cycle_time_ms > 0")
    tuning = dict(section)
    if "cycle_time_ms" in tuning:
        tuning["cycle_time_ms"] = float(tuning["cycle_time_ms"])
    return Horovod(**tuning)


def _timeouts(path, section):
    allowed = [f.name for f in dataclasses.fields(Timeouts)]
    for key, value in section.items():
        if key not in allowed:
            raise ProfileError(f"profile {path}: unknown key 'timeouts.{key}' "
                               f"(allowed: {', '.join(allowed)})")
        _check_type(path, f"timeouts.{key}", value, int)
        if value <= 0:
            raise ProfileError(f"profile {path}: timeouts.{key} must be a positive number of seconds, "
                               f"not {value}")
    return Timeouts(**section)


def _with_timeouts(path, env, timeouts):
    derived = timeouts.env()
    for key in derived:
        if key in env:
            raise ProfileError(f"profile {path}: env.{key} is set by the timeouts section; set it there")
    return {**env, **derived}


def _positive(path, key, value):
    if value is None:
        return None
    if value <= 0:
        raise ProfileError(f"profile {path}: {key} must be a positive number, not {value}")
    return float(value)


def _busbw(path, table):
    result = {}
    for nodes, value in table.items():
        _check_type(path, f"expected_busbw_gbps key {nodes!r}", nodes, int)
        _check_type(path, f"expected_busbw_gbps.{nodes}", value, (int, float))
        result[nodes] = float(value)
    return result


# Set by the suite's own launchers, which have already resolved the profile and the user's --env
# overrides into the job's environment; the ranks then only record the profile.
RESOLVED_VARIABLE = "SUITE_PROFILE_RESOLVED"


def job_env(profile):
    """Every variable the profile gives a job: its env (interface included) and its Horovod tuning."""
    tuning = profile.horovod
    return {**profile.env, **horovod_env(tuning.fusion_threshold_mb, tuning.cycle_time_ms,
                                         tuning.hierarchical_allreduce)}


def apply(profile, environ):
    """Puts the profile into a rank's own environment, before Horovod, MPI or NCCL read it.

    A variable already set is kept (the user exported it, or a launcher passed it), except the
    interface variables: horovodrun fills those from its own probe of every host's interfaces
    (all RDMA netdevs included), and the profile's front-end interface must win over that guess.
    Returns what was done, for env.json.
    """
    done = {"name": profile.name, "version": profile.version, "path": profile.path,
            "applied_by": "launcher" if environ.get(RESOLVED_VARIABLE) == "1" else "rank",
            "set": [], "kept": {}, "replaced": {}}
    if done["applied_by"] == "launcher":
        return done
    for key, value in sorted(job_env(profile).items()):
        current = environ.get(key)
        if current == value:
            continue
        if PLACEHOLDER in value and (current is None or PLACEHOLDER in current):
            raise ProfileError(placeholder_problem(profile, key, _export))
        if current is None or key in INTERFACE_VARIABLES and PLACEHOLDER not in value:
            if current is not None:
                done["replaced"][key] = current
            environ[key] = value
            done["set"].append(key)
        else:
            done["kept"][key] = current
    environ[PROFILE_VARIABLE] = profile.path
    return done


def _export(flag, value):
    # A rank has no launcher flags: the fix is an exported variable.
    if flag == "--network-interface":
        return f"export {' '.join(f'{key}={value}' for key in INTERFACE_VARIABLES)}"
    return f"export {value}"
