"""The measured figures of a results folder: time to train, throughput, scaling, stragglers, step splits."""
import statistics
from dataclasses import dataclass

from suite.common import mlperf_rules

# The aggregate of several runs' throughput and step times, everywhere in the report: robust to
# the one run that shared the machine with something else.
AGGREGATE = "median over runs"
# A run's throughput rests on its timed steps (the first interval, with tracing and warm-up, is
# left out); below this many the median step is a handful of samples, not a rate.
MIN_TIMED_STEPS = 20
SCALING_MODES = ("auto", "strong", "weak")


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def time_to_train(scale):
    """Per-scale time-to-train figures from the logs (minutes)."""
    minutes = [run.log.minutes for run in scale.runs]
    converged = [run.log.converged for run in scale.runs]
    return {
        "runs": len(minutes), "planned": scale.planned, "converged": sum(converged),
        "olympic": mlperf_rules.olympic_mean(minutes, converged),
        "olympic_all": mlperf_rules.olympic_mean(minutes),
        "min": min(minutes) if minutes else None, "max": max(minutes) if minutes else None,
    }


def run_throughputs(scale):
    """Per run with a summary.json throughput: (index, samples/s total, per rank, timed steps).

    Timed steps are the fewest any rank timed (each rank's steady-state intervals); None when the
    summary does not say.
    """
    found = []
    for run in scale.runs:
        summary = run.summary or {}
        if not summary.get("samples_per_second_total"):
            continue
        steps = [rank.get("steps_timed") for rank in summary.get("ranks", [])]
        steps = [s for s in steps if s is not None]
        found.append((run.index, summary["samples_per_second_total"],
                      summary.get("samples_per_second_per_rank"),
                      min(steps) if steps else None))
    return found


def throughput(scale):
    """The scale's throughput: the median over runs (total and per rank), its min-max and timed steps."""
    found = run_throughputs(scale)
    totals = [total for _, total, _, _ in found]
    steps = [s for *_, s in found if s is not None]
    return {"rate": median(totals), "per_rank": median([per_rank for _, _, per_rank, _ in found]),
            "min": min(totals) if totals else None, "max": max(totals) if totals else None,
            "runs": len(found), "steps_min": min(steps) if steps else None,
            "steps_max": max(steps) if steps else None}


def scaling_rows(scales):
    """Speed-up and efficiency against the smallest scale of the same distribution backend, from
    throughput and from the olympic means; by backend, then processes."""
    rows = []
    for scale in sorted(scales, key=lambda s: (s.distribution, s.np)):
        base = base_of(scales, scale)
        base_rate = throughput(base)["rate"]
        base_ttt = time_to_train(base)["olympic"]
        rate = throughput(scale)
        ttt = time_to_train(scale)["olympic"]
        speedup = rate["rate"] / base_rate if rate["rate"] and base_rate else None
        rows.append({"system": scale.system, "np": scale.np, "nodes": scale.nodes,
                     "distribution": scale.distribution, **rate, "speedup": speedup,
                     "efficiency": speedup * base.np / scale.np if speedup else None,
                     "ttt_speedup": base_ttt / ttt if base_ttt and ttt else None})
    return rows


def base_of(items, item):
    """The smallest in processes of the items (scales or step splits) run under item's backend: what a
    scale's scaling is measured against, so that two backends are never compared as one scaling."""
    return min((other for other in items if other.distribution == item.distribution), key=lambda o: o.np)


def stragglers(scale, threshold_pct):
    """Per rank: p50/p90 (median over runs), max (over runs), host, and whether it lags the median rank."""
    per_rank = {}
    for run in scale.runs:
        for rank in (run.summary or {}).get("ranks", []):
            if "step_ms_p50" in rank:
                per_rank.setdefault(rank["rank"], []).append(rank)
    rows = []
    for rank, entries in sorted(per_rank.items()):
        rows.append({"rank": rank, "host": entries[0].get("host", ""), "runs": len(entries),
                     "p50": median([e["step_ms_p50"] for e in entries]),
                     "p90": median([e.get("step_ms_p90") for e in entries]),
                     "max": max(e.get("step_ms_max", 0.0) for e in entries)})
    middle = median([row["p50"] for row in rows])
    for row in rows:
        row["slower_pct"] = 100.0 * (row["p50"] / middle - 1.0) if middle else 0.0
        row["straggler"] = row["slower_pct"] > threshold_pct
    return rows


# The parts of a step in summary.json's "attribution" (suite/train/attribution.py): they add up to
# its step time, which is what lets the lost efficiency be split between them exactly.
STEP_PARTS = (("compute_ms", "compute"), ("exposed_allreduce_ms", "exposed allreduce"),
              ("input_wait_ms", "input wait"), ("imbalance_ms", "rank imbalance"))


@dataclass(frozen=True)
class StepSplit:
    """One run's step time and its four parts (ms), for one scale of the report."""

    system: str
    np: int
    run: int
    local_batch: int
    step_ms: float
    parts: dict  # {key of STEP_PARTS: ms}
    method: str
    distribution: str = "horovod"


def step_splits(scale):
    """(the scale's median run's split or None, why there is none): the median by step time.

    Of the runs whose summary.json splits the step into all four parts; for an even count the lower
    of the two middle runs, so that the figures are one run's and still add up.
    """
    found, reasons = [], set()
    for run in scale.runs:
        summary = run.summary or {}
        record = summary.get("attribution") or {}
        if record.get("step_ms") and all(record.get(key) is not None for key, _ in STEP_PARTS):
            found.append(StepSplit(scale.system, scale.np, run.index, summary.get("local_batch_size"),
                                   record["step_ms"], {key: record[key] for key, _ in STEP_PARTS},
                                   record.get("method", ""), scale.distribution))
        else:
            reasons.add(record.get("reason") or "no attribution in summary.json (a run of an older suite)")
    if found:
        return sorted(found, key=lambda split: (split.step_ms, split.run))[(len(found) - 1) // 2], None
    return None, "; ".join(sorted(reasons)) or "no run"


def efficiency_loss(base, split):
    """{"efficiency", "scale_factor", "points": {part: lost points}} of split against base.

    Efficiency is per-rank throughput against the base's: (b_N / T_N) / (b_0 / T_0) = s·T_0/T_N with
    s = b_N / b_0 the per-rank batch ratio (1 when the per-rank batch is kept, weak scaling). As the
    parts add up to the step, 1 − s·T_0/T_N = Σ_k (c_k,N − s·c_k,0) / T_N: each part's share of the
    lost points is how far it exceeds its base value scaled to this per-rank batch.
    """
    factor = split.local_batch / base.local_batch if split.local_batch and base.local_batch else None
    if factor is None:
        return None
    points = {key: 100.0 * (split.parts[key] - factor * base.parts[key]) / split.step_ms
              for key, _ in STEP_PARTS}
    return {"efficiency": factor * base.step_ms / split.step_ms, "scale_factor": factor, "points": points}


def batch_sizes(scale):
    """{(global batch, per-rank batch)} the scale's runs trained with, from summary.json."""
    return {(run.summary.get("global_batch_size"), run.summary.get("local_batch_size"))
            for run in scale.runs if run.summary and run.summary.get("local_batch_size")}


def scaling_mode(scales, asked="auto"):
    """('strong' | 'weak', why): the experiment the runs were, unless --scaling names one."""
    if asked != "auto":
        return asked, f"{asked} scaling as asked (--scaling {asked})"
    batches = set().union(*(batch_sizes(s) for s in scales))
    global_batches = {g for g, _ in batches}
    local_batches = {b for _, b in batches}
    if len(global_batches) == 1 and len(local_batches) > 1:
        per_rank = ", ".join(map(str, sorted(local_batches)))
        return "strong", (f"strong scaling: the runs kept the global batch at {global_batches.pop()} and "
                          f"split it over the ranks (per-rank batch {per_rank})")
    if len(local_batches) == 1 and len(global_batches) > 1:
        return "weak", (f"weak scaling: the runs kept the per-rank batch at {local_batches.pop()} "
                        f"(global batch {', '.join(map(str, sorted(global_batches)))})")
    if len(batches) == 1:
        return "strong", ("strong scaling: one batch size was measured, so the experiment is projected at "
                          "its global batch (--scaling weak projects a fixed per-rank batch)")
    return "strong", ("strong scaling at the smallest scale's global batch: the runs kept neither the "
                      "global nor the per-rank batch fixed")


def allreduce_curves(data):
    """Scales whose allreduce moved bytes between ranks: a one-rank curve is 0 by definition."""
    return [s for s in data.scales if s.allreduce and s.allreduce.get("rows")
            and (s.allreduce.get("world_size") or s.np) > 1]
