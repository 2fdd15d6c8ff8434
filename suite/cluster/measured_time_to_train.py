"""The measured time to train of a scale: its runs' splits (suite.common.time_to_train_split) averaged
over the runs its olympic score keeps, and the speed-up between two scales factored. The projection
to other scales is suite.cluster.scaling.projected_time_to_train.

Per scale (summarize): means over the runs the olympic score keeps (the results folder's
olympic_runs, suite.common.mlperf_rules.olympic_kept), so the three times add up to the olympic
mean; without an olympic score (fewer than three runs, or two that did not converge), means over
the converged runs, and `aggregate` says which. The samples/s of a scale is its mean target
samples over its mean training time, the training share its mean training time over its mean
time to train. Medians over the converged runs are given beside them.

Between two scales (factor_speedup), exactly:
    minutes = target samples / samples/s / training share          (time_to_train_split's terms)
    speed-up = minutes(small) / minutes(large)
             = throughput speed-up     samples/s(large) / samples/s(small)
             x convergence ratio       target samples(small) / target samples(large)  (= the epochs ratio)
             x evaluation and overhead training share(large) / training share(small)
"""
import statistics
from dataclasses import asdict, dataclass

from suite.common.time_to_train_split import split_run


@dataclass(frozen=True)
class ScaleSummary:
    """One scale's runs summarized; `as_dict` names every figure with its unit."""

    folder: str
    benchmark: str
    gpus: int
    global_batch_size: int
    aggregate: str  # "olympic" or "mean of converged runs"
    runs: tuple  # RunSplit of every run
    kept: tuple  # the RunSplits the means are over
    minutes: float
    training_minutes: float
    evaluation_minutes: float
    other_minutes: float
    evaluations: float
    target_epochs: float  # None for a samples benchmark
    target_samples: float
    samples_per_second: float

    @property
    def training_share(self):
        return self.training_minutes / self.minutes

    @property
    def minutes_per_evaluation(self):
        return self.evaluation_minutes / self.evaluations if self.evaluations else 0.0

    def as_dict(self):
        converged = [r for r in self.runs if r.converged]
        logged = [r.logged_samples_per_second for r in converged if r.logged_samples_per_second]
        return {
            "folder": self.folder, "benchmark": self.benchmark, "gpus": self.gpus,
            "global_batch_size": self.global_batch_size, "aggregate": self.aggregate, "runs": len(self.runs),
            "aggregated_runs": len(self.kept), "converged_runs": len(converged),
            "time_to_train_minutes": self.minutes, "training_minutes": self.training_minutes,
            "evaluation_minutes": self.evaluation_minutes, "other_minutes": self.other_minutes,
            "evaluation_count": self.evaluations, "target_epochs": self.target_epochs,
            "target_samples": self.target_samples, "training_samples_per_second": self.samples_per_second,
            "training_share_fraction": self.training_share,
            "median_target_epochs": _median([r.target_epochs for r in converged]),
            "median_target_samples": _median([r.target_samples for r in converged]),
            "median_training_samples_per_second": _median([r.samples_per_second for r in converged]),
            "median_logged_samples_per_second": _median(logged),
            "median_evaluation_minutes": _median([r.evaluation_minutes for r in converged]),
        }


def summarize(folder):
    """The ScaleSummary of a results_folder.ResultsFolder; LogError when no run converged."""
    folder.converged_runs()
    splits = tuple(split_run(run) for run in folder.runs)
    olympic = folder.olympic_runs
    if olympic is not None:
        of_path = {split.path: split for split in splits}
        kept, aggregate = [of_path[run.path] for run in olympic], "olympic"
    else:
        kept, aggregate = [s for s in splits if s.converged], "mean of converged runs"
    training = statistics.fmean(s.training_minutes for s in kept)
    samples = statistics.fmean(s.target_samples for s in kept)
    epochs = [s.target_epochs for s in kept]
    return ScaleSummary(
        folder=folder.path, benchmark=folder.benchmark, gpus=folder.gpus,
        global_batch_size=folder.global_batch_size, aggregate=aggregate, runs=splits, kept=tuple(kept),
        minutes=statistics.fmean(s.minutes for s in kept), training_minutes=training,
        evaluation_minutes=statistics.fmean(s.evaluation_minutes for s in kept),
        other_minutes=statistics.fmean(s.other_minutes for s in kept),
        evaluations=statistics.fmean(s.evaluations for s in kept),
        target_epochs=None if None in epochs else statistics.fmean(epochs),
        target_samples=samples, samples_per_second=samples / (training * 60.0))


@dataclass(frozen=True)
class SpeedupFactors:
    """minutes(small) / minutes(large) = throughput x convergence x evaluation_and_overhead, exactly."""

    measured_speedup: float
    throughput_speedup: float
    convergence_ratio: float
    evaluation_and_overhead_ratio: float
    gpus_ratio: float

    def as_dict(self):
        return asdict(self)


def factor_speedup(small, large):
    """The factors of the time-to-train speed-up from ScaleSummary `small` to `large` (module docstring)."""
    return SpeedupFactors(
        measured_speedup=small.minutes / large.minutes,
        throughput_speedup=large.samples_per_second / small.samples_per_second,
        convergence_ratio=small.target_samples / large.target_samples,
        evaluation_and_overhead_ratio=large.training_share / small.training_share,
        gpus_ratio=large.gpus / small.gpus if small.gpus and large.gpus else None)


def evaluation_grid(summary):
    """(first evaluation, evaluations apart) in the scale's convergence unit, from its kept runs' logs;
    (None, None) when no run evaluated twice at distinct points."""
    firsts, steps = [], []
    for split in summary.kept:
        points = split.evaluated_at
        if points:
            firsts.append(points[0])
        steps += [b - a for a, b in zip(points, points[1:]) if b > a]
    if not firsts or not steps:
        return None, None
    return statistics.median(firsts), statistics.median(steps)


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None
