"""The MLPerf Training rules the suite applies, in one place: the ruleset its logs are written to and
checked against, how the olympic mean scores a benchmark's runs, and what a benchmark's rules say (runs
per result, what its convergence counts), looked up on the benchmark's own description
(models/<name>/presets.py, suite.common.benchmarks)."""
import math

from suite.common import benchmarks

# The ruleset the suite's logs are written to, and that the official checkers check them against.
RULESET = "2.1.0"

# How many runs the olympic mean drops at each end: one, except where result_summarizer's
# max_dropped_scores says more.
OLYMPIC_DROP = 1
OLYMPIC_DROP_OF = {"unet3d": 4}


def required_runs(benchmark):
    """Runs per result the closed division asks of MLPerf benchmark `benchmark`, or None when the
    suite has no such benchmark (a results folder of another)."""
    found = benchmarks.named(benchmark)
    return found.required_runs if found else None


def counts_samples(benchmark):
    """True when the benchmark's convergence (and its RCPs) count samples rather than epochs."""
    found = benchmarks.named(benchmark)
    return bool(found) and found.converges_in == "samples"


def convergence_unit(benchmark):
    """epochs or samples: what `benchmark`'s reference convergence points count."""
    return "samples" if counts_samples(benchmark) else "epochs"


def olympic_drop(benchmark):
    """Runs the olympic mean of MLPerf benchmark `benchmark` drops at each end."""
    return OLYMPIC_DROP_OF.get(benchmark, OLYMPIC_DROP)


def olympic_kept(minutes, scored=None, drop=OLYMPIC_DROP):
    """The indexes of the runs the olympic mean averages, fastest first; None when it has no score.

    Runs are ranked by time, a run not scored (it did not converge) counting as infinitely slow
    (MLPerf Training rules), and `drop` go at each end (result_summarizer drops 4 for unet3d), so
    as many runs may fail to converge. With more such runs, or too few runs to leave one between
    the ends, there is no score: None.
    """
    scored = [True] * len(minutes) if scored is None else list(scored)
    if len(scored) != len(minutes):
        raise ValueError("minutes and scored differ in length")
    ranked = sorted(range(len(minutes)), key=lambda i: minutes[i] if scored[i] else math.inf)
    kept = ranked[drop:len(ranked) - drop]
    if not kept or not all(scored[i] for i in kept):
        return None
    return kept


def olympic_mean(minutes, scored=None, drop=OLYMPIC_DROP):
    """MLPerf's olympic mean of the runs' minutes: the mean over olympic_kept, None without a score."""
    kept = olympic_kept(minutes, scored, drop)
    return None if kept is None else sum(minutes[i] for i in kept) / len(kept)
