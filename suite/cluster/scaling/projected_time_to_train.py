"""The projected time to train: from one measured scale (a measured_time_to_train.ScaleSummary), the
RCP's epochs or samples at each global batch over the projected throughput, plus evaluations and the
rest.
"""
import math
from dataclasses import asdict, dataclass, replace

from suite.cluster.scaling.model import (describe, fmt, gpus_label, link_for, markdown_table, project,
                                         ring_allreduce_seconds)
from suite.cluster import measured_time_to_train

#
# projected minutes(N, G) = target(G) x samples per target unit / throughput(N, G) / 60
#                         + evaluations(G) x minutes per evaluation(N) + other minutes
# target(G): the RCP's reference mean for global batch G (suite.cluster.rcp), in epochs (x the
#   dataset's samples) or samples; throughput(N, G): the ring model above at per-GPU batch G / N,
#   its X the rate table built from a measured scale (compute_rate inverts that scale's own
#   modelled allreduce out of its measured rate); evaluations: on the measured scale's grid of
#   evaluation points, up to the first at or past the target (BERT's rules space evaluations
#   wider at a larger batch, so there the count is an upper bound); minutes per evaluation: the
#   measured scale's, split over N GPUs instead of its own (the evaluation set is fixed); other
#   minutes (start-up and gaps inside run_start..run_stop): the measured scale's, unchanged.


def compute_rate(measured_per_gpu_rate, per_gpu_batch, gpus, scenario):
    """Samples/s of one GPU's compute alone at per_gpu_batch, from a rate measured at `gpus` with the
    allreduce in it: step = b / rate = compute + max((1 - overlap) t, t - compute), solved for compute
    (the branch compute >= overlap t, the only one in which the step says what the compute is)."""
    step = per_gpu_batch / measured_per_gpu_rate
    allreduce = ring_allreduce_seconds(scenario.gradient_bytes, gpus, link_for(scenario, gpus)[1])
    compute = step - (1.0 - scenario.overlap) * allreduce
    if step < allreduce or compute <= 0:
        raise ValueError(f"the measured step at {gpus} GPUs ({step * 1e3:.2f} ms) is shorter than the "
                         f"modelled allreduce ({allreduce * 1e3:.2f} ms): the bus bandwidth given is too low "
                         f"for what was measured")
    return per_gpu_batch / compute


@dataclass(frozen=True)
class MeasuredScale:
    """What a time-to-train projection takes from one measured scale (a ScaleSummary of
    suite.cluster.measured_time_to_train)."""

    folder: str
    benchmark: str
    gpus: int
    global_batch_size: int
    samples_per_second: float  # training samples / training time
    minutes_per_evaluation: float
    other_minutes: float
    first_evaluation: float  # None without two distinct evaluation points
    evaluation_interval: float
    evaluations: float
    samples_per_epoch: float  # None for a benchmark counted in samples


def measured_scale(summary, gpus):
    """The MeasuredScale of a measured_time_to_train.ScaleSummary, at `gpus` GPUs."""
    first, interval = measured_time_to_train.evaluation_grid(summary)
    epochs = summary.target_epochs
    return MeasuredScale(
        folder=summary.folder, benchmark=summary.benchmark, gpus=gpus,
        global_batch_size=summary.global_batch_size, samples_per_second=summary.samples_per_second,
        minutes_per_evaluation=summary.minutes_per_evaluation, other_minutes=summary.other_minutes,
        first_evaluation=first, evaluation_interval=interval, evaluations=summary.evaluations,
        samples_per_epoch=summary.target_samples / epochs if epochs else None)


@dataclass(frozen=True)
class TimeToTrain:
    """A projected time to train at one (GPUs, global batch); None figures where no RCP covers the batch."""

    gpus: int
    global_batch_size: int
    per_gpu_batch: float
    rcp_source: str
    rcp_note: str
    rcp_target: float  # epochs or samples, in rcp_unit
    rcp_unit: str
    projected_samples_per_second: float
    projected_training_minutes: float
    projected_evaluation_count: int
    projected_evaluation_minutes: float
    projected_other_minutes: float
    projected_minutes: float

    def record(self):
        """The JSON record: every figure with its unit in its name."""
        fields = asdict(self)
        target, unit = fields.pop("rcp_target"), fields.pop("rcp_unit")
        fields[f"rcp_target_{unit}"] = target
        return fields


def scenario_for(measured, template, extra_rates=()):
    """template (a Scenario) with the measured scale's per-GPU batch and compute rate as its table;
    extra_rates ((per-GPU batch, samples/s of compute alone), ...) add points, and win at the same batch."""
    batch = measured.global_batch_size / measured.gpus
    if batch != int(batch):
        raise ValueError(f"{measured.folder}: global batch {measured.global_batch_size} does not split over "
                         f"{measured.gpus} GPUs")
    batch = int(batch)
    rate = compute_rate(measured.samples_per_second / measured.gpus, batch, measured.gpus, template)
    table = tuple(sorted({batch: rate, **dict(extra_rates)}.items()))
    return replace(template, per_gpu_throughput=rate, per_gpu_batch=batch, global_batch=0,
                   rate_table=table).validate()


def project_time_to_train(measured, scenario, gpus, global_batch, ruleset):
    """The TimeToTrain at `gpus` GPUs and `global_batch`, from a MeasuredScale and its scenario_for."""
    from suite.cluster import rcp  # the RCP checker loads scipy: only a time-to-train projection needs it
    found = rcp.lookup(measured.benchmark, ruleset, global_batch)
    empty = dict(rcp_target=None, projected_samples_per_second=None, projected_training_minutes=None,
                 projected_evaluation_count=None, projected_evaluation_minutes=None,
                 projected_other_minutes=None, projected_minutes=None)
    common = dict(gpus=gpus, global_batch_size=global_batch, per_gpu_batch=global_batch / gpus,
                  rcp_source=found.source, rcp_note=found.note, rcp_unit=found.unit)
    if found.mean is None:
        return TimeToTrain(**common, **empty)
    samples = found.mean * (measured.samples_per_epoch or 1.0)  # a samples benchmark's mean is samples
    rate = project(replace(scenario, global_batch=global_batch), [gpus]).point(gpus).samples_per_second
    training = samples / rate / 60.0
    count = evaluations_to(found.mean, measured)
    evaluation = count * measured.minutes_per_evaluation * measured.gpus / gpus
    return TimeToTrain(**common, rcp_target=found.mean, projected_samples_per_second=rate,
                       projected_training_minutes=training, projected_evaluation_count=count,
                       projected_evaluation_minutes=evaluation,
                       projected_other_minutes=measured.other_minutes,
                       projected_minutes=training + evaluation + measured.other_minutes)


def evaluations_to(target, measured):
    """Evaluations on the measured grid up to the first at or past `target` (its own count without a grid)."""
    if measured.first_evaluation is None:
        return round(measured.evaluations)
    return max(0, math.ceil((target - measured.first_evaluation) / measured.evaluation_interval)) + 1


def format_time_to_train(measured, scenario, points):
    """Markdown: a title naming what was measured, a table of projected figures, a line per batch no
    RCP covers."""
    unit = points[0].rcp_unit
    title = (f"Projected time to train (not measured) from {measured.folder}: measured at "
             f"{gpus_label(measured.gpus)}, global batch {measured.global_batch_size}, "
             f"{measured.samples_per_second:,.0f} samples/s in training, "
             f"{measured.minutes_per_evaluation:.3f} min per evaluation, {measured.other_minutes:.3f} min "
             f"other; throughput by the ring model for {describe(scenario)}; {unit} to target from the RCP "
             f"tables.")
    header = ["GPUs", "global batch", "per-GPU batch", f"RCP {unit} to target",
              "projected throughput (samples/s)", "projected training (min)", "projected evaluations",
              "projected evaluation (min)", "projected other (min)", "projected time to train (min)"]
    target_spec = ",.2f" if unit == "epochs" else ",.0f"
    rows = [[str(p.gpus), str(p.global_batch_size), f"{p.per_gpu_batch:g}",
             fmt(p.rcp_target, target_spec), fmt(p.projected_samples_per_second, ",.0f"),
             fmt(p.projected_training_minutes, ".2f"), fmt(p.projected_evaluation_count, "d"),
             fmt(p.projected_evaluation_minutes, ".3f"), fmt(p.projected_other_minutes, ".3f"),
             fmt(p.projected_minutes, ".2f")] for p in points]
    notes = sorted({f"global batch {p.global_batch_size}: {p.rcp_note}" for p in points if p.rcp_note})
    return "\n".join([title, "", markdown_table(header, rows), *([""] + notes if notes else [])])
