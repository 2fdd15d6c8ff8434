"""Typed, frozen run configuration: defaults, then a named preset, then a file, then --set overrides."""
import dataclasses
import json
import os
import types
import typing
from dataclasses import dataclass

from suite.common.accelerators import PEAK_TFLOPS


class ConfigError(ValueError):
    """A bad preset, key, value or config file; the message is one line naming the culprit."""


PRECISIONS = ("fp32", "fp16", "bf16")
# The distribution backends (suite/train/backend.py), by the names the distribution setting takes.
DISTRIBUTIONS = ("horovod", "tf")


@dataclass(frozen=True, kw_only=True)
class CommonConfig:
    """Settings every benchmark shares. Benchmarks subclass this with their hyperparameters."""

    global_batch_size: int = 32
    """Samples per optimizer step summed over all ranks; must divide evenly by the world size."""
    seed: int = -1
    """Run seed; -1 draws a fresh one per run on rank 0 (MLPerf wants distinct seeds across runs)."""
    precision: str = "fp32"
    """fp32, fp16 (mixed_float16 with dynamic loss scaling) or bf16 (mixed_bfloat16)."""
    xla: bool = False
    """Compile the forward and backward pass with XLA (jit_compile)."""
    fp16_allreduce: bool = False
    """Compress gradients to fp16 for the allreduce (either backend)."""
    data_dir: str = ""
    """Dataset directory (TFRecords); ignored when synthetic is set."""
    synthetic: bool = False
    """Random tensors instead of a dataset, for throughput runs (always open division)."""
    log_every: int = 50
    """Steps between host-synchronised timing samples (throughput, per-rank step times)."""
    submission_org: str = "mlperf-hvd-suite"
    submission_platform: str = ""
    """MLPerf system name; empty means '<ranks>x<device>' of this run."""
    submission_status: str = "onprem"
    clear_cache: bool = True
    """Try to drop the OS page cache before the run (MLPerf asks for a cold cache): local rank 0 of
    every host tries, and the log's cache_clear is true only if every host managed it. A cache left
    warm makes the run open division, unless system_restarted says the nodes were restarted."""
    system_restarted: bool = False
    """The operator's statement that every node was restarted right before this run (the rules' other
    way to a cold cache, for containers that cannot drop it): a run whose cache_clear is false then
    stays closed, and config.json records the statement."""
    save_checkpoints: bool = False
    """Save model, optimizer and step after every evaluation in <run-dir>/checkpoints (last 2 kept)."""
    resume_from: str = ""
    """A checkpoint saved by save_checkpoints (its directory or prefix): training goes on after the
    evaluation it was saved at. Every rank reads it, so multi-node jobs need it on a shared file system."""
    cpu_threads: int = 0
    """TensorFlow kernel (intra-op) threads per rank on a CPU; 0 lets the suite choose: the host's cores
    shared between its local ranks. A rank with fewer than the host's cores runs one inter-op thread
    (suite/train/dist.py, inter_op_threads)."""
    distribution: str = "horovod"
    """What distributes the run: horovod (Horovod's allreduce) or tf (TensorFlow's own collectives,
    MultiWorkerMirroredStrategy; under mpirun, srun or suite.cluster.launch, not horovodrun). The model,
    optimizer, data, evaluation and MLPerf log are the same under both (suite/train/backend.py)."""
    tf_pack_mb: float = 4.0
    """distribution=tf: gradients go to TensorFlow's all-reduce in packs of at least this many MiB
    (CommunicationOptions.bytes_per_pack), so that a pack is reduced while the backward pass computes
    the next; 0 sends them all as one after the backward pass. On a 2-core CPU host packs of 4 made a
    64 px ResNet-50 run 1.19 times faster than one pack and changed nothing at 224 px (BENCHMARKS.md,
    "The two backends"); unmeasured on GPUs. Horovod ignores it."""
    gradient_allreduce: bool = True
    """Average gradients over ranks through the distribution backend. false (one process only) runs the
    same step with a plain GradientTape: the control that measures the backend's own cost."""
    step_split_steps: int = 0
    """After run_stop, time this many steps with the collective and as many without it, alternating, on
    every rank at once: summary.json's step split by subtraction (compute, exposed communication, input
    wait, imbalance) for runs without a Horovod timeline, the same method under both backends
    (suite/train/step_split.py). 0: not measured. One process: nothing to split."""
    throughput_warmup_steps: int = 5
    """--throughput: untimed steps first (tracing, allocator and cache warm-up)."""
    throughput_steps: int = 20
    """--throughput: timed steps, each ending at a host sync."""
    accelerator: str = ""
    """--throughput: the peak that MFU is taken against: a name from suite/common/accelerators.py's
    PEAK_TFLOPS (e.g. a100, h100-sxm), or empty for a matmul peak measured on this rank's device."""
    poison_weights_at_step: int = 0
    """Testing aid (0: never): after this step every rank sets one weight to NaN, so the next loss is
    not finite and the run must end as aborted. Makes the run open division."""

    def problems(self):
        """Returns one-line descriptions of invalid settings (an empty list when valid)."""
        found = []
        if self.global_batch_size <= 0:
            found.append(f"global_batch_size must be positive, not {self.global_batch_size}")
        if self.precision not in PRECISIONS:
            found.append(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        if self.distribution not in DISTRIBUTIONS:
            found.append(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, not {self.distribution!r}")
        if self.tf_pack_mb < 0:
            found.append(f"tf_pack_mb must be 0 or more, not {self.tf_pack_mb}")
        if self.log_every <= 0:
            found.append(f"log_every must be positive, not {self.log_every}")
        if self.poison_weights_at_step < 0:
            found.append(f"poison_weights_at_step must be 0 (never) or a step number, "
                         f"not {self.poison_weights_at_step}")
        for name in ("cpu_threads", "throughput_warmup_steps", "step_split_steps"):
            if getattr(self, name) < 0:
                found.append(f"{name} must be 0 or more, not {getattr(self, name)}")
        if self.throughput_steps <= 0:
            found.append(f"throughput_steps must be positive, not {self.throughput_steps}")
        if self.accelerator and self.accelerator not in PEAK_TFLOPS:
            found.append(f"accelerator must be one of {', '.join(sorted(PEAK_TFLOPS))} or empty (a measured "
                         f"matmul peak), not {self.accelerator!r}")
        if self.submission_status not in ("cloud", "onprem", "preview", "research"):
            found.append(f"submission_status must be cloud, onprem, preview or research, "
                         f"not {self.submission_status!r}")
        if not self.synthetic and not self.data_dir:
            found.append("data_dir is empty: pass --data-dir or set synthetic=true")
        return found


@dataclass(frozen=True)
class Preset:
    """A named starting point that says what hardware it is for and how its batch adds up."""

    hardware: str
    batch_arithmetic: str
    overrides: typing.Mapping[str, object]
    note: str = ""
    # The process counts batch_arithmetic is written for; empty: any count the batch divides over.
    ranks: tuple = ()

    def describe(self):
        text = f"{self.hardware}; {self.batch_arithmetic}"
        return f"{text}. {self.note}" if self.note else text


def field_types(config_cls):
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_cls)}


def parse_value(key, text, kind):
    """Parses a command-line string into the field's type, naming the key on failure."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        if text.lower() in ("none", "null", ""):
            return None
        kind = options[0]
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
        if kind is str:
            return text
    except ValueError:
        raise ConfigError(f"--set {key}={text}: not a valid {kind.__name__}") from None
    raise ConfigError(f"--set {key}: unsupported field type {kind}")


def _check_type(key, value, kind, origin):
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        if value is None:
            return None
        kind = [k for k in typing.get_args(kind) if k is not type(None)][0]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    raise ConfigError(f"{origin}: {key} must be {kind.__name__}, not {type(value).__name__} {value!r}")


def _apply(values, updates, kinds, origin):
    for key, value in updates.items():
        if key not in kinds:
            raise ConfigError(f"{origin}: unknown setting {key!r}")
        values[key] = _check_type(key, value, kinds[key], origin)


def load_file(path):
    """Reads a JSON or YAML mapping of settings."""
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path) as handle:
            data = _load_yaml(handle) if path.endswith((".yaml", ".yml")) else json.load(handle)
    except (ValueError, ImportError, OSError) as err:
        first_line = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError(f"config file {path}: {first_line}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of settings")
    return data


def _load_yaml(handle):
    import yaml
    try:
        return yaml.safe_load(handle)
    except yaml.YAMLError as err:
        # Not a ValueError, and its first line ("while parsing a flow node") does not say where.
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"{getattr(err, 'problem', None) or err}{where}") from None


def resolve(config_cls, presets, preset, config_file=None, sets=(), extra=None):
    """Builds a frozen, validated config.

    Precedence, lowest first: class defaults, the named preset, the config file, `extra`
    (first-class flags such as --data-dir), then each `--set key=value`.
    """
    if preset not in presets:
        raise ConfigError(f"unknown preset {preset!r}; choose one of: {', '.join(sorted(presets))}")
    kinds = field_types(config_cls)
    values = {}
    _apply(values, presets[preset].overrides, kinds, f"preset {preset}")
    if config_file:
        _apply(values, load_file(config_file), kinds, config_file)
    _apply(values, extra or {}, kinds, "flags")
    for item in sets:
        key, sep, text = item.partition("=")
        if not sep:
            raise ConfigError(f"--set {item}: expected key=value")
        if key not in kinds:
            raise ConfigError(f"--set {item}: unknown setting {key!r}")
        values[key] = parse_value(key, text, kinds[key])
    config = config_cls(**values)
    problems = config.problems()
    if problems:
        raise ConfigError(f"invalid config (preset {preset}): {problems[0]}")
    return config


def to_dict(config):
    return dataclasses.asdict(config)


def describe_fields(config_cls):
    """Lines documenting every setting, from the attribute docstrings in the source."""
    import ast
    import inspect
    docs = {}
    for cls in reversed(config_cls.__mro__):
        if not dataclasses.is_dataclass(cls):
            continue
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for node, following in zip(body, body[1:] + [None]):
            if (isinstance(node, ast.AnnAssign) and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)):
                docs[node.target.id] = following.value.value
    defaults = config_cls()
    return [f"  {f.name} = {getattr(defaults, f.name)!r}" + (f"  # {docs[f.name]}" if f.name in docs else "")
            for f in dataclasses.fields(config_cls)]
