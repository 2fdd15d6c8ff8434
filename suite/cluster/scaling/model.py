"""Projected step time and scaling efficiency of data-parallel training, from a ring-allreduce cost model.

Pure Python (no TensorFlow), so the report generator and a laptop can use it. Sources are the
digest ../shared/reference/horovod-nccl-rdma.md, sections 4 (measured busbw) and 5 (cost model).

The model, per scale of N GPUs:

    b(N)     = G / N (strong scaling: the global batch G is fixed, as in the closed presets,
               3264 = 8 x 408 = 16 x 204 = 32 x 102) or b0 (weak scaling: the per-GPU batch is fixed)
    compute  = b(N) / X(b(N))                  (X: per-GPU samples/s of compute alone; one figure
                                                measured at b0, or a table of measured (per-GPU batch,
                                                samples/s) interpolated linearly, flat beyond its ends)
    t        = 2(N-1)/N * S / B                (ring allreduce of S gradient bytes at bus bandwidth B)
    exposed  = max((1 - overlap) * t, t - compute)
    step     = compute + exposed
    samples/s = N * b(N) / step;  speed-up and efficiency against the smallest scale.

`overlap` is the share of the allreduce hidden behind backprop (Horovod starts reducing a
layer's gradient while earlier layers are still being differentiated). It can hide at most the
compute time, hence the max(). 0 (the default) is the digest's "no overlap assumed" bound.

What B is:
- N GPUs in one node (N <= gpus per node): every ring hop is NVLink/NVSwitch, so B is the
  intra-node bus bandwidth; nccl-tests measured 235.5 GB/s busbw on 1 node x 8 A100 (digest §4).
- More than one node: NCCL runs its rings over all of a node's RDMA NICs (multi-rail), so the
  slowest hop, the one between nodes, moves at the node's aggregate NIC rate, not at one NIC's
  (digest §5: "the allreduce cost model needs the per-node rate, not the per-GPU rate"). That
  is what nccl-tests report as busbw across nodes: 185 GB/s is OCI's pass mark for 2 A100
  nodes, 220.9 GB/s was measured with the full 16-HCA list (digest §4).
- Using a busbw in the ring formula is exact by definition: nccl-tests define
  busbw = algbw * 2(N-1)/N and algbw = S / t, so t = 2(N-1)/N * S / busbw. B must be the
  plateau of a measured busbw curve (`plateau`): at small messages busbw only reflects the
  per-message latency, and a B taken there makes a large gradient look far slower than it is.

Left out, on purpose: per-message latency and Horovod's cycle time (no latency term: small
against the 1-14 ms transfers of these models at plateau bandwidth), tensor-fusion passes
(BERT-large fp32 needs about 11 of 128 MB), hierarchical allreduce, a per-sample time that
changes with the per-GPU batch where no rate table gives it, the input pipeline and stragglers.
Measured efficiency far below the projection points at those, or at the network. Bandwidths are
GB/s with GB = 1e9, as nccl-tests and suite.train.allreduce report them.

    python -m suite.cluster.scaling --model resnet50 --per-gpu-throughput 2400 --per-gpu-batch 408 \
        --global-batch 3264 --busbw 185

Time to train (projected_time_to_train.py in this package): from a measured results folder, its throughput,
evaluation time and GPU count, the RCP's epochs or samples to target at each global batch:

    python -m suite.cluster.scaling --from-results DIR --gpus 8 32 --global-batch 3264 13056 \
        --json projection.json
"""
import math
import statistics
from dataclasses import dataclass

from suite.common import benchmarks

GB = 1e9


def model_parameters(model):
    """The trainable parameter count of a benchmark's full-size model, by its folder under models/
    (resnet50) or MLPerf's name for it (resnet); None for a name no benchmark has."""
    for benchmark in benchmarks.discovered().values():
        if model in (benchmarks.folder(benchmark), benchmark.name):
            return benchmark.parameter_count
    return None


def model_names():
    """The names --model takes: each benchmark's folder under models/."""
    return sorted(benchmarks.folder(benchmark) for benchmark in benchmarks.discovered().values())


# Measured busbw on one node of 8 A100 (nccl-tests, 10 GiB, digest §4).
NVLINK_BUSBW_GBPS = 235.0


def gradient_bytes(params, fp16=False):
    """Bytes allreduced per step: one value per parameter, 2 bytes with fp16 gradients, else 4."""
    return params * (2 if fp16 else 4)


def ring_allreduce_seconds(nbytes, gpus, busbw_gbps):
    """t = 2(N-1)/N * S / B; zero on one GPU, where nothing is exchanged."""
    if gpus <= 1:
        return 0.0
    return 2 * (gpus - 1) / gpus * nbytes / (busbw_gbps * GB)


@dataclass(frozen=True)
class Scenario:
    """What the projection starts from: one GPU's speed, the gradient, and the links."""

    model: str
    per_gpu_throughput: float  # samples/s of one GPU at per_gpu_batch, without communication
    per_gpu_batch: int
    gradient_bytes: int
    busbw_gbps: float  # per-node bus bandwidth across nodes (nccl-tests busbw)
    nvlink_busbw_gbps: float = NVLINK_BUSBW_GBPS  # bus bandwidth inside one node
    gpus_per_node: int = 8
    overlap: float = 0.0  # share of the allreduce hidden behind backprop
    global_batch: int = 0  # > 0: strong scaling, per-GPU batch = global_batch / N; 0: weak scaling
    # ((per-GPU batch, samples/s of one GPU's compute alone), ...): when given, X depends on the
    # per-GPU batch (rate_at); per_gpu_throughput is then the rate at per_gpu_batch, for the title.
    rate_table: tuple = ()

    @property
    def strong(self):
        return self.global_batch > 0

    def rate_at(self, batch):
        """X at this per-GPU batch: the table interpolated linearly, flat beyond its ends; without a
        table, per_gpu_throughput whatever the batch."""
        if not self.rate_table:
            return self.per_gpu_throughput
        table = sorted(self.rate_table)
        if batch <= table[0][0]:
            return table[0][1]
        for (b0, x0), (b1, x1) in zip(table, table[1:]):
            if batch <= b1:
                return x0 + (x1 - x0) * (batch - b0) / (b1 - b0)
        return table[-1][1]

    def batch_at(self, gpus):
        """Per-GPU batch at this scale: the global batch split N ways, or the fixed per-GPU batch."""
        return self.global_batch / gpus if self.strong else self.per_gpu_batch

    def validate(self):
        """Raises ValueError naming the first unusable field."""
        for name in ("per_gpu_throughput", "busbw_gbps", "nvlink_busbw_gbps"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a positive number, not {value!r}")
        for name in ("per_gpu_batch", "gradient_bytes", "gpus_per_node"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"overlap must be between 0 and 1, not {self.overlap!r}")
        if not (isinstance(self.global_batch, int) and self.global_batch >= 0):
            raise ValueError(f"global_batch must be 0 (weak scaling) or a positive integer, not "
                             f"{self.global_batch!r}")
        batches = [batch for batch, _ in self.rate_table]
        if len(set(batches)) != len(batches) or not all(
                _positive(batch) and _positive(rate) for batch, rate in self.rate_table):
            raise ValueError(f"rate_table needs distinct positive per-GPU batches with positive samples/s, "
                             f"not {self.rate_table!r}")
        return self


def _positive(value):
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class ScalePoint:
    """The projection at one scale; times in milliseconds."""

    gpus: int
    nodes: int
    batch: float  # per-GPU batch at this scale
    link: str  # "none" (one GPU), "nvlink" (one node) or "network" (across nodes)
    bandwidth_gbps: float
    compute_ms: float
    allreduce_ms: float
    exposed_ms: float
    step_ms: float
    samples_per_second: float
    speedup: float
    efficiency: float


@dataclass(frozen=True)
class Projection:
    scenario: Scenario
    points: tuple

    def point(self, gpus):
        return next(p for p in self.points if p.gpus == gpus)


def link_for(scenario, gpus):
    """(link name, bus bandwidth GB/s) the ring runs at for this many GPUs; see the module docstring."""
    if gpus == 1:
        return "none", 0.0
    if gpus <= scenario.gpus_per_node:
        return "nvlink", scenario.nvlink_busbw_gbps
    return "network", scenario.busbw_gbps


def _step(scenario, gpus):
    """(nodes, link, bandwidth, compute, allreduce, exposed, step) in seconds for one scale."""
    link, bandwidth = link_for(scenario, gpus)
    compute = scenario.batch_at(gpus) / scenario.rate_at(scenario.batch_at(gpus))
    allreduce = ring_allreduce_seconds(scenario.gradient_bytes, gpus, bandwidth)
    # Overlap hides a share of the allreduce, but never more than the compute it runs behind.
    exposed = max((1.0 - scenario.overlap) * allreduce, allreduce - compute)
    nodes = -(-gpus // scenario.gpus_per_node)
    return nodes, link, bandwidth, compute, allreduce, exposed, compute + exposed


def project(scenario, gpus=(8, 16, 32)):
    """The projection at each GPU count; speed-up and efficiency are against the smallest."""
    scenario.validate()
    scales = sorted(set(gpus))
    if not scales or any(not isinstance(n, int) or n < 1 for n in scales):
        raise ValueError(f"GPU counts must be positive integers, not {list(gpus)!r}")
    base = scales[0]
    base_rate = base * scenario.batch_at(base) / _step(scenario, base)[-1]
    points = []
    for n in scales:
        nodes, link, bandwidth, compute, allreduce, exposed, step = _step(scenario, n)
        rate = n * scenario.batch_at(n) / step
        points.append(ScalePoint(gpus=n, nodes=nodes, batch=scenario.batch_at(n), link=link,
                                 bandwidth_gbps=bandwidth,
                                 compute_ms=compute * 1e3, allreduce_ms=allreduce * 1e3,
                                 exposed_ms=exposed * 1e3, step_ms=step * 1e3, samples_per_second=rate,
                                 speedup=rate / base_rate, efficiency=(rate / base_rate) * base / n))
    return Projection(scenario=scenario, points=tuple(points))


def describe(scenario):
    """One sentence of the inputs, for the line above a table."""
    params = model_parameters(scenario.model)
    width = {params * 2: " (fp16)", params * 4: " (fp32)"}.get(scenario.gradient_bytes, "") if params else ""
    if scenario.rate_table:
        table = ", ".join(f"{batch:g}: {rate:,.1f}" for batch, rate in sorted(scenario.rate_table))
        speed = (f"per-GPU batch G/N, one GPU's compute alone at per-GPU batch b {{{table}}} samples/s "
                 f"(interpolated, flat beyond)")
    else:
        batch = (f"strong scaling at global batch {scenario.global_batch} "
                 f"(per-GPU batch {scenario.global_batch}/N)"
                 if scenario.strong else f"weak scaling at per-GPU batch {scenario.per_gpu_batch}")
        speed = (f"{batch}: {scenario.per_gpu_throughput:g} samples/s per GPU measured at batch "
                 f"{scenario.per_gpu_batch}")
    return (f"{scenario.model}, {speed}, gradient {scenario.gradient_bytes / 1e6:.1f} MB{width}, busbw "
            f"{scenario.busbw_gbps:g} GB/s per node across nodes, {scenario.nvlink_busbw_gbps:g} GB/s inside "
            f"a node, {scenario.gpus_per_node} GPUs per node, overlap {scenario.overlap:g}")


def formula(scenario):
    """The model as the report prints it, with this scenario's batch rule."""
    batch = (f"b(N) = {scenario.global_batch} / N (strong scaling: fixed global batch)" if scenario.strong
             else f"b(N) = {scenario.per_gpu_batch} (weak scaling: fixed per-GPU batch)")
    return [batch,
            f"compute(N) = b(N) / X, X = {scenario.per_gpu_throughput:g} samples/s per GPU of compute at "
            f"batch {scenario.per_gpu_batch}",
            f"allreduce(N) = 2(N-1)/N × S / B, S = {scenario.gradient_bytes:,} bytes (ring; no latency "
            f"term; 0 on one GPU)",
            f"step(N) = compute(N) + max((1 - {scenario.overlap:g}) × allreduce(N), "
            f"allreduce(N) - compute(N))",
            "throughput(N) = N × b(N) / step(N); efficiency(N) = throughput(N) / (throughput(N0) × N / N0)"]


# Two sizes' busbw within this share of each other count as flat: the plateau.
PLATEAU_TOLERANCE = 0.10


@dataclass(frozen=True)
class Plateau:
    """The bandwidth a large gradient sees, read off a measured busbw curve."""

    reached: bool
    busbw_gbps: float  # median busbw of the plateau sizes; if not reached, the largest size's busbw
    sizes: tuple  # bytes of the sizes it rests on
    largest_bytes: int
    rise: float  # busbw of the largest size over the one before it, minus 1


def plateau(rows, tolerance=PLATEAU_TOLERANCE):
    """The plateau of a busbw curve: the largest sizes whose busbw is within `tolerance` of the largest's.

    Reached when at least two sizes qualify. Otherwise busbw still climbs at the largest size (the
    times are latency, not bandwidth), and the largest size's busbw is only a lower bound.
    None for a curve with fewer than two sizes or no bus traffic (one rank).
    """
    rows = sorted((r for r in rows if r.get("busbw_gbps")), key=lambda r: r["bytes"])
    if len(rows) < 2:
        return None
    top = rows[-1]["busbw_gbps"]
    flat = [rows[-1]]
    for row in reversed(rows[:-1]):
        if abs(row["busbw_gbps"] - top) > tolerance * top:
            break
        flat.append(row)
    reached = len(flat) >= 2
    busbw = statistics.median(r["busbw_gbps"] for r in flat) if reached else top
    return Plateau(reached=reached, busbw_gbps=busbw, sizes=tuple(sorted(r["bytes"] for r in flat)),
                   largest_bytes=rows[-1]["bytes"], rise=top / rows[-2]["busbw_gbps"] - 1.0)


def max_bytes_for(gradient_bytes, largest_bytes):
    """A --max-bytes that covers the gradient: the next power of two, at least 4x the largest measured."""
    return 1 << max(int(gradient_bytes - 1).bit_length(), int(4 * largest_bytes - 1).bit_length())


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def gpus_label(count):
    return f"{count} GPU" + ("" if count == 1 else "s")


def format_markdown(projection):
    """A Markdown table in which every computed figure is labelled projected."""
    header = ["GPUs", "nodes", "allreduce link", "projected compute (ms)", "projected allreduce (ms)",
              "projected exposed comm (ms)", "projected step (ms)", "projected throughput (samples/s)",
              "projected speed-up", "projected efficiency"]
    rows = [[str(p.gpus), str(p.nodes), f"{p.link} ({p.bandwidth_gbps:g} GB/s)" if p.gpus > 1 else "none",
             f"{p.compute_ms:.2f}", f"{p.allreduce_ms:.3f}", f"{p.exposed_ms:.3f}", f"{p.step_ms:.2f}",
             f"{p.samples_per_second:,.0f}", f"{p.speedup:.2f}x", f"{100 * p.efficiency:.1f}%"]
            for p in projection.points]
    title = (f"Projected (ring-allreduce model, not measured) for {describe(projection.scenario)}; "
             f"speed-up and efficiency against {gpus_label(projection.points[0].gpus)}.")
    return title + "\n\n" + markdown_table(header, rows)


@dataclass(frozen=True)
class BesideRow:
    """Projected and measured throughput and efficiency at one scale (None where not measured)."""

    gpus: int
    projected_samples_per_second: float
    measured_samples_per_second: float
    measured_runs: int
    projected_efficiency: float
    measured_efficiency: float
    measured_over_projected: float


def _measured_medians(measured_rows):
    """{gpus: (median samples/s, runs)}: a sweep has several runs per scale."""
    found = {}
    for i, row in enumerate(measured_rows):
        try:
            gpus, rate = int(row["gpus"]), float(row["samples_per_second"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"measured row {i} needs numeric 'gpus' and 'samples_per_second': "
                             f"{row!r}") from None
        if gpus < 1 or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"measured row {i} has gpus {gpus} and samples_per_second {rate}")
        found.setdefault(gpus, []).append(rate)
    return {gpus: (statistics.median(rates), len(rates)) for gpus, rates in found.items()}


def beside_measured(projection, measured_rows):
    """Projected and measured figures per scale, both efficiencies against the same base.

    measured_rows: dicts with `gpus` and `samples_per_second` (several runs per scale: their
    median, the aggregate the report uses everywhere). The base is the smallest measured scale
    (the projection's smallest without measurements), so the two efficiency columns compare like
    with like; below the base the efficiencies are None. Scales only one side has are projected
    from the same scenario.
    """
    measured = _measured_medians(measured_rows)
    scales = sorted({p.gpus for p in projection.points} | set(measured))
    base = min(measured) if measured else projection.points[0].gpus
    projected = project(projection.scenario, scales)
    base_projected = projected.point(base).samples_per_second
    rows = []
    for n in scales:
        rate = projected.point(n).samples_per_second
        got, runs = measured.get(n, (None, 0))
        above = n >= base
        rows.append(BesideRow(
            gpus=n, projected_samples_per_second=rate, measured_samples_per_second=got, measured_runs=runs,
            projected_efficiency=rate / base_projected * base / n if above else None,
            measured_efficiency=got / measured[base][0] * base / n if got is not None and above else None,
            measured_over_projected=got / rate if got is not None else None))
    return rows


def fmt(value, spec, suffix=""):
    """A number as the tables write it (the report's too): a dash for one missing or not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec) + suffix


def _percent(fraction):
    return fmt(None if fraction is None else 100 * fraction, ".1f", "%")


def format_beside_markdown(rows):
    """Projected and measured columns side by side; each header says which it is."""
    header = ["GPUs", "projected throughput (samples/s)", "measured throughput (samples/s)", "runs",
              "projected efficiency", "measured efficiency", "measured / projected"]
    body = [[str(r.gpus), fmt(r.projected_samples_per_second, ",.0f"),
             fmt(r.measured_samples_per_second, ",.0f"), str(r.measured_runs),
             _percent(r.projected_efficiency), _percent(r.measured_efficiency),
             fmt(r.measured_over_projected, ".2f")] for r in rows]
    return markdown_table(header, body)
