"""The MLPerf Training rules the suite applies, in one place: the ruleset its logs are written to and
checked against, and what a benchmark's rules say (runs per result, what its convergence counts),
looked up on the benchmark's own description (models/<name>/presets.py, suite.common.benchmarks)."""
from suite.common import benchmarks

# The ruleset the suite's logs are written to, and that the official checkers check them against.
RULESET = "2.1.0"


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
