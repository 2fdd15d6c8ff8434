"""Published times to train that the report shows beside its own (never measured here), from each
benchmark's description (models/<name>/published.py)."""
from suite.common import benchmarks


def references():
    """(MLPerf benchmark name, PublishedResult) of every benchmark under models/."""
    return [(benchmark.name, result) for benchmark in benchmarks.discovered().values()
            for result in benchmark.published]


def scaling_pairs():
    """Every benchmark's PublishedScaling pairs."""
    return [pair for benchmark in benchmarks.discovered().values() for pair in benchmark.published_scaling]
