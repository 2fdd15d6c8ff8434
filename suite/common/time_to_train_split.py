"""One MLPerf run's time to train split, from its log alone, into training, evaluation and the rest: what
the run measured (a scale's runs summarized are suite.cluster.measured_time_to_train).

From the log's own events (split_run; run_record for the run's summary.json):
- total: run_stop - run_start, the time result_summarizer scores;
- evaluation: the time inside eval_start -> eval_stop;
- training: the time inside block_start -> block_stop (epoch_start -> epoch_stop when a log has
  no blocks, the whole run when it has neither), less the evaluations inside those blocks (MXNet
  and this suite evaluate inside the block);
- other: total - training - evaluation (start-up after run_start, gaps between blocks).
Intervals are paired start -> first stop after it, so the same start or stop from several ranks
counts once; all are clipped to run_start..run_stop.
- target: epochs for ResNet-style logs (epoch_num of the last evaluation, the one at which the
  target was reached, as the RCP checker takes it) or samples for BERT (train_samples, or the last
  evaluation's epoch_num, which BERT logs in samples); target samples = epochs x the dataset's
  train_samples, or the samples themselves;
- samples/s: target samples / training time, the rate the log's own timestamps imply.
"""
import math
import statistics
from dataclasses import dataclass

from suite.common import mlperf_rules, results
from suite.common.results import LogError


@dataclass(frozen=True)
class RunSplit:
    """One run's time to train and what it was spent on; times in minutes."""

    path: str
    converged: bool
    minutes: float
    training_minutes: float
    evaluation_minutes: float
    other_minutes: float
    evaluations: int
    evaluated_at: tuple  # epoch_num of each evaluation (epochs, or samples for BERT), in log order
    target_epochs: float  # None for a samples benchmark
    target_samples: float
    samples_per_second: float
    logged_samples_per_second: float = None  # median of the log's own `throughput` lines, if any

    def as_dict(self):
        """The split with its units in the key names (summary.json's "time_to_train")."""
        return {
            "converged": self.converged, "time_to_train_minutes": self.minutes,
            "training_minutes": self.training_minutes, "evaluation_minutes": self.evaluation_minutes,
            "other_minutes": self.other_minutes, "evaluation_count": self.evaluations,
            "target_epochs": self.target_epochs, "target_samples": self.target_samples,
            "training_samples_per_second": self.samples_per_second,
            "logged_samples_per_second": self.logged_samples_per_second,
        }


def split_run(run):
    """The RunSplit of a results.RunLog read with its events; LogError for a log it cannot split."""
    found = [event for _, event in run.events]
    window = (run.run_start_ms, run.run_stop_ms)
    eval_pairs = _clip(_intervals(found, "eval_start", "eval_stop"), window)
    evals = _merge(eval_pairs)
    trained = (_intervals(found, "block_start", "block_stop")
               or _intervals(found, "epoch_start", "epoch_stop") or [window])
    trained = _merge(_clip(trained, window))
    evaluation_ms = _length(evals)
    training_ms = _length(trained) - _overlap(trained, evals)
    total_ms = run.run_stop_ms - run.run_start_ms
    if training_ms <= 0:
        raise LogError(f"{run.path}: no training time between run_start and run_stop")
    evaluated_at = tuple(epoch for epoch, _ in _distinct_evaluations(found))
    target_epochs, target_samples = _target(run, found, evaluated_at)
    throughput = [e["value"] for e in found if e["key"] == "throughput" and _number(e.get("value"))]
    return RunSplit(
        path=run.path, converged=run.converged, minutes=total_ms / 60000.0,
        training_minutes=training_ms / 60000.0, evaluation_minutes=evaluation_ms / 60000.0,
        other_minutes=(total_ms - training_ms - evaluation_ms) / 60000.0,
        evaluations=len(eval_pairs) if eval_pairs else len(evaluated_at), evaluated_at=evaluated_at,
        target_epochs=target_epochs, target_samples=target_samples,
        samples_per_second=target_samples / (training_ms / 1000.0),
        logged_samples_per_second=statistics.median(throughput) if throughput else None)


def run_record(path, benchmark=None):
    """summary.json's "time_to_train" of the run whose MLPerf log is `path`: RunSplit.as_dict, or
    {"error": why} when the log cannot be split (the run's other records still count)."""
    try:
        return split_run(results.read_run(path, benchmark)).as_dict()
    except (LogError, OSError) as err:
        return {"error": str(err)}


def _intervals(found, start_key, stop_key):
    """(start, stop) ms pairs: a start opens one, the first stop after it closes it; repeats are ignored."""
    pairs, opened = [], None
    for event in found:
        if event["key"] == start_key and opened is None:
            opened = event["time_ms"]
        elif event["key"] == stop_key and opened is not None:
            pairs.append((opened, event["time_ms"]))
            opened = None
    return pairs


def _clip(intervals, window):
    low, high = window
    return [(max(a, low), min(b, high)) for a, b in intervals if min(b, high) > max(a, low)]


def _merge(intervals):
    merged = []
    for a, b in sorted(intervals):
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    return merged


def _length(intervals):
    return sum(b - a for a, b in intervals)


def _overlap(first, second):
    return sum(max(0, min(b, d) - max(a, c)) for a, b in first for c, d in second)


def _distinct_evaluations(found):
    """(epoch_num, accuracy) of each eval_accuracy, a line repeated by another rank counted once."""
    seen, distinct = set(), []
    for event in found:
        if event["key"] != "eval_accuracy":
            continue
        point = ((event.get("metadata") or {}).get("epoch_num"), event.get("value"))
        if point not in seen:
            seen.add(point)
            distinct.append(point)
    return distinct


def _target(run, found, evaluated_at):
    """(target epochs or None, target samples) of a run."""
    logged = [e["value"] for e in found if e["key"] == "train_samples" and _number(e.get("value"))]
    if mlperf_rules.counts_samples(run.benchmark):
        # train_samples at the end is the samples trained; else BERT's eval epoch_num counts samples.
        samples = logged[-1] if logged else (evaluated_at[-1] if evaluated_at else None)
        if not _number(samples) or samples <= 0:
            raise LogError(f"{run.path}: no samples to the target (no train_samples, no evaluation in "
                           f"samples)")
        return None, float(samples)
    if not evaluated_at or not _number(evaluated_at[-1]):
        raise LogError(f"{run.path}: no epochs to the target (no eval_accuracy with an epoch_num)")
    if not logged:
        raise LogError(f"{run.path}: no train_samples (the samples in an epoch), so no samples to the target")
    return float(evaluated_at[-1]), float(evaluated_at[-1]) * logged[0]


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
