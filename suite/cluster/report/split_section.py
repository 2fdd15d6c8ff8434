"""The report's time-to-train split: its table, the factored speed-ups, one plot per benchmark, and
report.json; also the whole document when the report is built from --compare folders alone."""
import os

from suite.cluster.report import headline
from suite.cluster.report.formats import fmt, pct
from suite.cluster.report.splits import batch_choices, speedup_record, speedups

INTRO = (
    "Each scale's MLPerf logs alone, read as a results folder and scored as "
    "mlperf_logging.result_summarizer scores it (olympic mean of run_stop − run_start; a run that did not "
    "converge is the one dropped). Its time to train splits into training (inside block_start → "
    "block_stop, or the epochs, less the evaluations inside them), evaluation (eval_start → eval_stop) "
    "and the rest (start-up after run_start, gaps); means over the runs the olympic mean keeps, so the "
    "three add up to it. The target is the epochs (or samples, where the RCPs count samples) at the last "
    "evaluation; training samples/s is the target samples over the training time. Rows from --compare "
    "folders are published (or earlier) results, not measured here.")
GPU_HOURS = (
    "What a result costs: GPU-hours per result are the olympic mean's minutes times the GPUs; GPU-hours "
    "of all runs add every run's run_start → run_stop, the ones the olympic mean drops included, as a "
    "study pays for them (start-up before run_start is not in the logs, so not in these figures).")
FACTORS = (
    "Between two scales of one source, the speed-up in time to train factors exactly: throughput speed-up "
    "(training samples/s, larger over smaller) × convergence ratio (target samples, smaller over larger: "
    "< 1 when the larger batch needs more epochs) × evaluation and overhead (the training share of the "
    "time to train, larger over smaller). Efficiency is the speed-up over the GPU ratio.")


def image_name(benchmark):
    return f"time_to_train_split_{benchmark}.png"


def blocks(scales, images, price_per_gpu_hour=None):
    if not scales:
        return []
    results_header = ["source", "benchmark", "GPUs", "global batch", "runs (converged)",
                      "olympic mean (min)", "GPU-h per result", "GPU-h of all runs"]
    if price_per_gpu_hour is not None:
        results_header.append(f"cost per result (user's price {price_per_gpu_hour:g}/GPU-h)")
    split_header = ["source", "training (min)", "evaluation (min)", "other (min)", "evaluations",
                    "target (epochs or samples)", "RCP mean", "training samples/s"]
    doc = [("h2", "Time to train split: throughput × convergence × evaluation"), ("p", INTRO),
           ("p", GPU_HOURS), ("table", results_header, [_result_row(s, price_per_gpu_hour) for s in scales]),
           ("table", split_header, [_split_row(scale) for scale in scales])]
    doc += [("p", f"{s.label}: {s.problem}.") for s in scales if s.problem]
    pairs = speedups(scales)
    if pairs:
        doc += [("p", FACTORS), ("table", ["benchmark", "source", "GPUs", "global batch",
                                           "speed-up (time to train)", "throughput ×", "convergence ×",
                                           "evaluation and overhead ×", "efficiency"],
                                 [_factor_row(*pair) for pair in pairs])]
    doc += _batch_choice_blocks(batch_choices(scales))
    for benchmark in sorted({s.benchmark for s in scales}):
        if image_name(benchmark) in images:
            doc.append(("img", image_name(benchmark), f"Time to train split, {benchmark}"))
    doc += [("p", "Sources:"), ("list", [f"{label}: {path}" for label, path in _sources(scales)])]
    return doc


def _sources(scales):
    """(label, folder) of each scale, once each: the tables name the label only."""
    seen = {}
    for scale in scales:
        seen.setdefault(scale.label, os.path.abspath(scale.folder.path))
    return sorted(seen.items())


def _batch_choice_blocks(choices):
    if not choices:
        return []
    text = ("Two global batches at one GPU count: the published practice raises the batch with the GPUs "
            "(weak scaling, e.g. 3,264 at 8 and 16 GPUs, 13,056 at 32), the strong path keeps one batch "
            "everywhere. Which reaches the lower time to train, factored the same way (slower over "
            "faster); only a comparison within one system credits the batch alone:")
    return [("p", text), *(("p", _batch_choice_text(*choice)) for choice in choices)]


def _batch_choice_text(slower, faster, factors):
    def named(scale):
        return f"global batch {scale.folder.global_batch_size:,} ({scale.label})"

    fast, slow = faster.summary, slower.summary
    terms = [("throughput", factors.throughput_speedup,
              f"training samples/s {fast.samples_per_second:,.1f} against {slow.samples_per_second:,.1f}"),
             ("convergence", factors.convergence_ratio,
              f"target samples {fast.target_samples:,.0f} against {slow.target_samples:,.0f}"),
             ("evaluation and overhead", factors.evaluation_and_overhead_ratio,
              f"training share {100 * fast.training_share:.1f}% against {100 * slow.training_share:.1f}%")]
    parts = "; ".join(f"{name} ×{value:.3f} ({why})" for name, value, why in terms)
    # A batch comparison within one system isolates the batch; across two systems both differ.
    both = ("" if slower.system == faster.system else
            f"These two are different systems as well as different batches ({slower.system} against "
            f"{faster.system}): the ratio mixes the two and does not credit the batch alone. ")
    return (f"{both}At {faster.folder.gpus} GPUs, {named(faster)} reaches the lower time to train: "
            f"{faster.summary.minutes:.2f} min against {slower.summary.minutes:.2f} min for {named(slower)}, "
            f"×{factors.measured_speedup:.3f} = {parts}.")


def _result_row(scale, price):
    f = scale.folder
    row = [scale.label, scale.benchmark, fmt(f.gpus, "d"), str(f.global_batch_size),
           f"{len(f.runs)} ({sum(r.converged for r in f.runs)})", fmt(f.olympic_minutes, ".2f"),
           fmt(scale.gpu_hours_per_result, ",.2f"), fmt(scale.gpu_hours_of_runs, ",.2f")]
    if price is not None:
        row.append(fmt(None if scale.gpu_hours_per_result is None else scale.gpu_hours_per_result * price,
                       ",.2f"))
    return row


def _split_row(scale):
    s = scale.summary
    target = None if s is None else (s.target_epochs if s.target_epochs is not None else s.target_samples)
    unit = "" if scale.rcp is None else f" {scale.rcp.unit}"
    return [scale.label,
            *(fmt(None if s is None else getattr(s, key), ".3f")
              for key in ("training_minutes", "evaluation_minutes", "other_minutes")),
            fmt(None if s is None else s.evaluations, ".1f"), fmt(target, ",.1f"),
            "no RCP" if scale.rcp is None or scale.rcp.mean is None else f"{scale.rcp.mean:,.1f}{unit}",
            fmt(None if s is None else s.samples_per_second, ",.1f")]


def _factor_row(small, large, factors):
    efficiency = factors.measured_speedup / factors.gpus_ratio if factors.gpus_ratio else None
    source = small.label if small.label == large.label else f"{small.label} → {large.label}"
    return [small.benchmark, source,
            f"{small.folder.gpus} → {large.folder.gpus}",
            f"{small.folder.global_batch_size} → {large.folder.global_batch_size}",
            f"{factors.measured_speedup:.3f}", f"{factors.throughput_speedup:.3f}",
            f"{factors.convergence_ratio:.3f}", f"{factors.evaluation_and_overhead_ratio:.3f}",
            pct(efficiency)]


def report_json(scales):
    """report.json: per folder and scale its figures, and the factored speed-ups."""
    return {"scales": [scale.record() for scale in scales],
            "speedups": [speedup_record(*pair) for pair in speedups(scales)],
            "batch_choices": [{**speedup_record(*choice), "faster_global_batch_size":
                               choice[1].folder.global_batch_size} for choice in batch_choices(scales)]}


def compare_document(scales, images, price_per_gpu_hour=None):
    """The report of --compare folders alone (no sweep): the headline, the scaling picture, the split and
    its factors."""
    benchmarks = sorted({s.benchmark for s in scales})
    return [("h1", f"Time-to-train report: {', '.join(benchmarks)}, {len(scales)} scale(s)"),
            ("p", "Built from results folders alone (no sweep): every figure is published (or from an "
                  "earlier run), not measured by this suite; their folders are listed under Sources."),
            *headline.blocks(scales, None, price_per_gpu_hour),
            *picture_blocks(scales, images),
            *blocks(scales, images, price_per_gpu_hour)]


def picture_name(benchmark):
    return f"scaling_picture_{benchmark}.png"


def picture_blocks(scales, images):
    """The scaling picture of each benchmark that has one (plots.make_scaling_pictures)."""
    return [("img", picture_name(benchmark), f"Speed-up against GPUs, {benchmark}")
            for benchmark in sorted({s.benchmark for s in scales}) if picture_name(benchmark) in images]
