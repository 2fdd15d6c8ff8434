"""The report's headline: one sentence per step between two scales of one source, saying how much of
linear scaling the step kept and what each factor cost, in points of efficiency.

A step's efficiency is its time-to-train speed-up over the GPU ratio, and it factors exactly
(splits.py): efficiency = (throughput speed-up / GPU ratio) x convergence ratio x evaluation and
overhead ratio. The lost points, 100 x (1 - efficiency), are shared between the three factors in
proportion to their logarithms: the logarithm turns the product into a sum, so the shares add up to
the lost points exactly, a factor above 1 (a gain) gets negative points, and no factor's share depends
on the order the factors are taken in (taking them one after another, as a waterfall does, would charge
whichever comes first with the interactions). Inside the throughput factor a sweep's runs also split
their steady step into compute, exposed allreduce, input wait and rank imbalance (figures.py); the
throughput factor's points are shared between those four in proportion to each part's own lost points.

A sweep run under more than one distribution backend is one source per backend; each step that two
backends both ran gets one more sentence: the efficiency each kept, which loses fewer points and by how
much, and the difference factor by factor (the same shares, so the differences add up too).
"""
import dataclasses
import math
from dataclasses import dataclass

from suite.cluster.report.figures import efficiency_loss, step_splits
from suite.cluster.report.splits import THIS_SWEEP, source_groups, speedups
from suite.common import mlperf_rules

# The causes a step split names, as the headline says them.
CAUSES = {"compute_ms": "the framework (compute)", "exposed_allreduce_ms": "the network (exposed allreduce)",
          "input_wait_ms": "the input pipeline", "imbalance_ms": "rank imbalance"}


@dataclass(frozen=True)
class LostPoints:
    """One step's efficiency and its lost points by factor; the three points add up to `lost`."""

    efficiency: float
    throughput: float
    convergence: float
    evaluation: float
    causes: dict  # {STEP_PARTS key: points} inside `throughput`, {} without a step split

    @property
    def lost(self):
        return 100.0 * (1.0 - self.efficiency)


def apportion(factors, cause_points=None):
    """LostPoints of a splits SpeedupFactors; cause_points ({part: points}, figures.efficiency_loss's)
    share the throughput factor's points between the causes of a sweep's step split."""
    kept_throughput = factors.throughput_speedup / factors.gpus_ratio
    terms = (kept_throughput, factors.convergence_ratio, factors.evaluation_and_overhead_ratio)
    efficiency = math.prod(terms)
    logarithm = math.log(efficiency)
    # Points per unit of logarithm: lost / ln(efficiency), whose limit at efficiency 1 is -100.
    per_log = -100.0 if abs(logarithm) < 1e-12 else 100.0 * (1.0 - efficiency) / logarithm
    throughput, convergence, evaluation = (per_log * math.log(term) for term in terms)
    return LostPoints(efficiency, throughput, convergence, evaluation,
                      _share(throughput, cause_points or {}))


def _share(points, cause_points):
    """`points` shared between the causes in proportion to theirs; {} when they give no proportion."""
    total = sum(cause_points.values())
    if not cause_points or abs(total) < 1e-9:
        return {}
    return {key: points * value / total for key, value in cause_points.items()}


def sentence(small, large, factors, unit, cause_points=None):
    """The headline sentence of one step; small and large are splits Scales of one source."""
    lost = apportion(factors, cause_points)
    gpus = f"{small.folder.gpus} → {large.folder.gpus} GPUs"
    text = (f"{gpus}: {100 * lost.efficiency:.1f} % of linear. Throughput kept "
            f"{100 * factors.throughput_speedup / factors.gpus_ratio:.1f} % ({_cost(lost.throughput)}"
            f"{_causes(lost.causes)})")
    text += "; " + _convergence(small, large, unit, lost.convergence)
    text += f"; evaluation and overhead {_cost(lost.evaluation)}."
    return text


def _cost(points):
    return f"cost {points:.1f} points" if points >= 0.05 else (
        f"gained {-points:.1f} points" if points <= -0.05 else "cost nothing")


def _causes(causes):
    if not causes:
        return ""
    ranked = sorted(causes.items(), key=lambda item: -abs(item[1]))
    return ": " + ", ".join(f"{CAUSES[key]} {points:+.1f}" for key, points in ranked)


def _convergence(small, large, unit, points):
    before, after = _target(small.summary, unit), _target(large.summary, unit)
    batches = f"global batch {small.folder.global_batch_size:,} → {large.folder.global_batch_size:,}"
    if before is None or after is None:
        return f"{batches}: convergence {_cost(points)}"
    return (f"{batches} needed {after:,.1f} {unit} instead of {before:,.1f} (convergence {_cost(points)})")


def _target(summary, unit):
    return summary.target_epochs if unit == "epochs" else summary.target_samples


def blocks(scales, data=None, price_per_gpu_hour=None):
    """The headline section: per benchmark and source, one sentence per step and where a result costs
    least. scales: the splits Scales; data: the loaded sweep, whose step splits name the causes inside
    the throughput factor of its own steps."""
    groups = sorted(source_groups(scales).items(), key=lambda item: item[0][1])
    if not groups:
        return []
    lines = []
    for (_, benchmark), group in groups:
        unit = mlperf_rules.convergence_unit(benchmark)
        name = group[0].source_name
        for small, large, factors in speedups(group):
            causes = _causes_of(data, small, large)
            lines.append(f"{benchmark}, {name}, {sentence(small, large, factors, unit, causes)}")
        lines.append(f"{benchmark}, {name}: {_cost_line(group, price_per_gpu_hour)}")
    return [("h2", "Headline"), ("p", INTRO), ("list", lines + backend_lines(scales))]


def backend_lines(scales):
    """Per benchmark and sweep run under more than one backend, per step in GPUs that two or more of
    them ran: which loses fewer points of linear scaling (backend_sentence)."""
    sweeps = {}
    for (_, benchmark), group in source_groups(scales).items():
        first = group[0]
        if first.named_distribution:
            sweep = dataclasses.replace(first, named_distribution=False).source_name
            sweeps.setdefault((benchmark, sweep), {})[first.distribution] = group
    lines = []
    for (benchmark, sweep), backends in sorted(sweeps.items()):
        steps = {}
        for backend, group in sorted(backends.items()):
            for small, large, factors in speedups(group):
                steps.setdefault((small.folder.gpus, large.folder.gpus), {})[backend] = apportion(factors)
        lines += [f"{benchmark}, {sweep}, {backend_sentence(small, large, lost)}"
                  for (small, large), lost in sorted(steps.items()) if len(lost) > 1]
    return lines


def backend_sentence(small_gpus, large_gpus, lost):
    """"8 → 16 GPUs: tf kept 0.91 of linear, horovod 0.95: horovod loses 4.0 points fewer (throughput
    +3.1, ...)": lost is {backend: LostPoints} of one step; the differences are against the next best."""
    ranked = sorted(lost.items(), key=lambda item: (-item[1].lost, item[0]))  # the most lost first
    kept = f"{ranked[0][0]} kept {ranked[0][1].efficiency:.2f} of linear" + "".join(
        f", {name} {points.efficiency:.2f}" for name, points in ranked[1:])
    (next_name, next_best), (best_name, best) = ranked[-2], ranked[-1]
    fewer = next_best.lost - best.lost
    if fewer < 0.05:
        return f"{small_gpus} → {large_gpus} GPUs: {kept}: {best_name} and {next_name} lose the same points."
    parts = ", ".join(f"{what} {getattr(next_best, key) - getattr(best, key):+.1f}"
                      for key, what in (("throughput", "throughput"), ("convergence", "convergence"),
                                        ("evaluation", "evaluation and overhead")))
    return (f"{small_gpus} → {large_gpus} GPUs: {kept}: {best_name} loses {fewer:.1f} points fewer "
            f"than {next_name} ({parts}).")


INTRO = ("Each step between two scales of one source: its efficiency (time-to-train speed-up over the GPU "
         "ratio) and the points of it each factor cost, shared by logarithms so that they add up to the "
         "points lost (the time-to-train split below gives the factors).")


def _causes_of(data, small, large):
    """figures.efficiency_loss's points per step part, for two scales of the sweep; None otherwise."""
    if data is None or small.source != THIS_SWEEP or large.source != THIS_SWEEP:
        return None
    by_system = {scale.system: scale for scale in data.scales}
    splits = [step_splits(by_system[scale.system])[0] if scale.system in by_system else None
              for scale in (small, large)]
    if None in splits:
        return None
    loss = efficiency_loss(*splits)
    return loss["points"] if loss else None


def _cost_line(group, price):
    fastest = min(group, key=lambda s: s.summary.minutes)
    fast = f"the lowest time to train at {fastest.folder.gpus} GPUs ({fastest.summary.minutes:,.2f} min)"
    scored = [scale for scale in group if scale.gpu_hours_per_result is not None]
    if not scored:
        return f"no scale has an olympic mean to price a result by (too few runs); {fast}."
    cheapest = min(scored, key=lambda s: s.gpu_hours_per_result)
    return (f"the lowest GPU-hours per result at {cheapest.folder.gpus} GPUs "
            f"({cheapest.gpu_hours_per_result:,.2f} GPU-h{_money(cheapest.gpu_hours_per_result, price)}), "
            f"{fast}.")


def _money(gpu_hours, price):
    if price is None:
        return ""
    return f", {gpu_hours * price:,.2f} at the user's price of {price:g} per GPU-hour"
