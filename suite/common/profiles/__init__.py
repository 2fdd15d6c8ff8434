"""Cluster profiles: named, versioned YAML files of NCCL/UCX/Open MPI settings and Horovod tuning."""
import os
import re
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
PLACEHOLDER = "REPLACE-ME"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# key: (type(s) accepted, required). bool is checked apart: YAML `yes` must not pass as a number.
TOP_KEYS = {
    "name": (str, True),
    "version": (int, True),
    "description": (str, True),
    "gpus_per_node": (int, True),
    "env": (dict, False),
    "mpi_args": (list, False),
    "horovod": (dict, False),
    "expected_busbw_gbps": (dict, False),
}
HOROVOD_KEYS = {
    "fusion_threshold_mb": int,
    "cycle_time_ms": (int, float),
    "hierarchical_allreduce": bool,
    "timeline": bool,
}


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
    env: dict = field(default_factory=dict)
    mpi_args: tuple = ()
    horovod: Horovod = Horovod()
    # Bus bandwidth in GB/s (bytes, as nccl-tests report it) by node count.
    expected_busbw_gbps: dict = field(default_factory=dict)

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
    profile = Profile(
        name=data["name"], version=data["version"], description=data["description"],
        gpus_per_node=data["gpus_per_node"], path=path,
        env=_env(path, data.get("env") or {}),
        mpi_args=_mpi_args(path, data.get("mpi_args") or []),
        horovod=_horovod(path, data.get("horovod") or {}),
        expected_busbw_gbps=_busbw(path, data.get("expected_busbw_gbps") or {}))
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


def _busbw(path, table):
    result = {}
    for nodes, value in table.items():
        _check_type(path, f"expected_busbw_gbps key {nodes!r}", nodes, int)
        _check_type(path, f"expected_busbw_gbps.{nodes}", value, (int, float))
        result[nodes] = float(value)
    return result
