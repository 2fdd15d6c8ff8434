"""The benchmark contract, both halves: what a benchmark is without TensorFlow (`Benchmark`, read on the
login node and in the ranks), and what it hands the training loop (`WorkloadSpec` builds a `Job`: model,
optimizer, data, loss, metric, schedule, log keys). docs/adding-a-benchmark.md walks through both."""
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

# The units of an MLPerf reference convergence point (RCP): epochs or samples to converge.
CONVERGENCE_UNITS = ("epochs", "samples")


@dataclass(frozen=True)
class PublishedResult:
    """A published time to train of a benchmark, never measured here; `source` cites it with a link."""

    system: str
    gpus: int
    nodes: int
    minutes: float
    source: str
    runs_ms: tuple = ()
    """run_stop - run_start of each published log, when the source lists its runs."""


@dataclass(frozen=True)
class PublishedScaling:
    """Two published results of one system at two scales: their time-to-train ratio is published scaling."""

    label: str
    smaller: PublishedResult
    larger: PublishedResult


@dataclass(frozen=True)
class Benchmark:
    """A benchmark as the whole suite sees it, plain data: each models/<name>/presets.py exports one
    as BENCHMARK, and suite.common.benchmarks finds them by looking in models/.

    rcp_hyperparameters(config, ranks) -> the config's values under the names of an RCP record's
    Hyperparams (mlperf-logging's rcps_<name>.json), or None for a benchmark without RCPs.
    """

    name: str
    """MLPerf's name for it, as result logs (submission_benchmark) and results folders spell it."""
    module: str
    """The entry point's package, `python -m <module>` (its folder under models/)."""
    title: str
    config_cls: type
    presets: Mapping[str, object]
    default_preset: str
    sample_unit: str
    """What one sample is, in throughput lines: images, sequences."""
    parameter_count: int
    """Trainable parameters of the full-size model: the gradient every step allreduces."""
    required_runs: int
    """Runs per result in the closed division (the MLPerf rules' table); the olympic mean drops one
    fastest and one slowest of them."""
    converges_in: str = "epochs"
    """What its RCPs count to converge: epochs, or samples (BERT)."""
    rcp_hyperparameters: Callable = None
    published: tuple = ()
    """PublishedResults the report shows beside its own (models/<name>/published.py)."""
    published_scaling: tuple = ()

    def __post_init__(self):
        if self.converges_in not in CONVERGENCE_UNITS:
            raise ValueError(f"{self.module}: converges_in must be one of {CONVERGENCE_UNITS}, "
                             f"not {self.converges_in!r}")
        if self.default_preset not in self.presets:
            raise ValueError(f"{self.module}: default_preset {self.default_preset!r} is not one of its "
                             f"presets")


@dataclass(frozen=True)
class Block:
    """Training between two evaluations, in MLPerf's terms.

    `first_epoch_num` and `epoch_count` go into block_start/stop as they are (epochs for
    ResNet-50, samples for BERT); `eval_epoch_num` labels the evaluation that ends the block.
    `epochs` lists (epoch_num, steps) for epoch_start/stop events; benchmarks without
    epochs leave it empty and give `steps` directly.
    """

    first_epoch_num: int
    epoch_count: int
    eval_epoch_num: int
    steps: int
    epochs: tuple = ()


@dataclass(frozen=True)
class Division:
    """closed or open, with the reasons a run left the closed rules, and what a closed label rests on
    that the suite could not check itself (an operator's statement), so that a reviewer sees it."""

    name: str
    reasons: tuple = ()
    statements: tuple = ()


@dataclass
class Job:
    """Everything the loop needs for one run of one benchmark, built by the workload.

    loss_fn(model, features, labels) -> scalar training loss (regularisation included).
    eval_fn(model, features, labels) -> (number correct, number counted) for this batch; the
    loop sums both over batches and ranks, so accuracy is exact at any world size.
    describe_error(exception) -> a one-line message, or None, for errors the data pipeline
    raises while training (corrupt records, labels out of range).
    """

    benchmark: str
    model: object
    optimizer: object
    train_data: object
    eval_data: Callable[[], object]
    loss_fn: Callable
    eval_fn: Callable
    blocks: Sequence[Block]
    target_accuracy: float
    global_batch_size: int
    local_batch_size: int
    train_samples: int
    eval_samples: int
    division: Division
    hyperparameters: Mapping[str, object]
    tensor_names: Sequence[str]
    learning_rate: Callable[[int], float] = None
    accumulation_steps: int = 1
    """Micro-batches per optimizer step on each rank; local_batch_size must divide by it."""
    log_samples_trained: bool = False
    """Log `train_samples`, the samples actually trained, before run_stop at every end of the run
    (BERT's convergence unit)."""
    eval_unit: str = "samples"
    """What eval_fn's count counts, for progress lines (BERT counts masked tokens)."""
    describe_error: Callable[[BaseException], str] = None
    flops_per_sample: float = 0.0
    """Floating-point operations to train on one sample (forward and backward), from the model's
    own formula; the throughput mode's MFU is taken from it."""
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class WorkloadSpec:
    """A benchmark as the ranks run it; each models/<name>/workload.py defines one as SPEC.

    build_job(config, world, seed) -> Job builds everything for a run (untimed init).
    """

    benchmark: Benchmark
    build_job: Callable


def local_batch_size(global_batch_size, world_size, accumulation_steps=1):
    """Per-rank batch for one optimizer step; refuses batches that do not split evenly."""
    if global_batch_size % world_size:
        raise ValueError(f"global_batch_size {global_batch_size} is not divisible by {world_size} ranks")
    local = global_batch_size // world_size
    if local % accumulation_steps:
        raise ValueError(f"the per-rank batch {local} (global_batch_size {global_batch_size} / {world_size} "
                         f"ranks) is not divisible by accumulation_steps {accumulation_steps}")
    return local
