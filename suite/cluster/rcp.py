"""Reference convergence points (RCPs) from mlperf-logging's own tables, looked up as its rcp_checker does.

The tables are mlperf_logging/rcp_checker/training_<ruleset>/rcps_<benchmark>.json; the numbers
come from the checker's own RCP_Checker (mlperf_logging/rcp_checker/rcp_checker.py), not from a
copy of its arithmetic: a record's mean is the olympic mean of its reference runs' epochs to
converge (samples for BERT), its stdev their population stdev, and `Min Epochs` the lowest
submission mean its t-test accepts. Two views of one batch:

- reference (`mean`): what the reference runs took at that batch, for projecting a time to train.
  The table's record when it has one; between two records, the checker's interpolation
  (_create_interp_rcp: numpy.interp of mean and stdev between the nearest smaller and larger
  batch); below every record, the smallest record; above every record, none.
- check (`check_mean`, `check_min_mean`, `check`): what the RCP check of a submission at that
  batch compares with, as check_directory does it with the pruned records the package checker
  and result_summarizer use (`rcp_pass='pruned_rcps'`): the pruning drops records that converge
  slower than the interpolation of their neighbours (and every record below the fastest), so the
  check can be laxer than the reference at a batch whose own record was pruned. Above the largest
  record there is nothing to compare with: the note says so and `covered` is False.
"""
import functools
import logging
import math
from dataclasses import dataclass, field

from mlperf_logging.rcp_checker import rcp_checker

from suite.common import mlperf_rules

USAGE = "training"
PASS = "pruned_rcps"
NO_RCP = ("no RCP covers global batch {batch}; a result at that batch cannot pass the RCP check of a "
          "submission")


@dataclass(frozen=True)
class Rcp:
    """The RCP view of one global batch; means in `unit` (epochs or samples)."""

    benchmark: str
    ruleset: str
    global_batch_size: int
    unit: str
    source: str  # "record", "interpolated", "smallest record" or "none"
    mean: float  # reference mean to converge; None when source is "none"
    stdev: float
    hyperparameters: dict = field(default_factory=dict)  # the record's; {} when interpolated
    between: tuple = ()  # (smaller, larger) record batches an interpolation is between
    check: str = ""  # check_directory's own message for this batch
    check_mean: float = None  # the mean the RCP check compares a submission's mean with
    check_min_mean: float = None  # the smallest submission mean the check accepts
    note: str = None  # NO_RCP when no RCP covers the batch

    @property
    def covered(self):
        return self.note is None


@functools.lru_cache(maxsize=None)
def checker(benchmark, ruleset):
    """mlperf-logging's RCP_Checker for this benchmark and ruleset (statistics computed, records pruned)."""
    try:
        return rcp_checker.RCP_Checker(USAGE, ruleset, benchmark, verbose=False)
    except KeyError:  # a benchmark mlperf-logging has no RCPs for (one of the suite's own, say)
        raise ValueError(f"mlperf-logging has no RCP table for benchmark {benchmark} under ruleset "
                         f"{ruleset}") from None
    except Exception as err:  # a bare Exception for an unknown ruleset
        raise ValueError(f"no RCP table for {benchmark} under ruleset {ruleset}: {err}") from None


def lookup(benchmark, ruleset, global_batch_size):
    """The Rcp for this batch; ValueError for a benchmark or ruleset mlperf-logging has no table for."""
    if not isinstance(global_batch_size, int) or global_batch_size <= 0:
        raise ValueError(f"global batch must be a positive integer, not {global_batch_size!r}")
    table = checker(benchmark, ruleset)
    # A benchmark whose RCPs count samples holds samples in their "Epochs to converge".
    unit = mlperf_rules.convergence_unit(benchmark)
    source, record, between = _reference(table, global_batch_size)
    check, check_record = _check(table, global_batch_size)
    return Rcp(
        benchmark=benchmark, ruleset=ruleset, global_batch_size=global_batch_size, unit=unit, source=source,
        mean=_float(record, "RCP Mean"), stdev=_float(record, "RCP Stdev"),
        hyperparameters=dict(record.get("Hyperparams") or {}) if record else {}, between=between,
        check=check, check_mean=_float(check_record, "RCP Mean"),
        check_min_mean=_float(check_record, "Min Epochs"),
        note=None if check_record else NO_RCP.format(batch=global_batch_size))


def _reference(table, batch):
    """(source, record, between) from the full table, interpolated as the checker interpolates."""
    exact = table._find_rcp(batch, "full_rcps")
    if exact:
        return "record", exact, ()
    low, high = table._find_top_min_rcp(batch, "full_rcps"), table._find_bottom_max_rcp(batch, "full_rcps")
    if low and high:
        record = _quietly(table._create_interp_rcp, batch, low, high)[1]
        return "interpolated", record, (low["BS"], high["BS"])
    if high:
        return "smallest record", table._find_min_rcp("full_rcps"), ()
    return "none", None, ()


def _check(table, batch):
    """(message, record) exactly as check_directory chooses them from the pruned records."""
    found = table._find_rcp(batch, PASS)
    if found:
        return "RCP found", found
    low, high = table._find_top_min_rcp(batch, PASS), table._find_bottom_max_rcp(batch, PASS)
    if low and high:
        return "RCP Interpolation", _quietly(table._create_interp_rcp, batch, low, high)[1]
    if high:
        # A submission below every pruned RCP passes if it converges no faster than the smallest.
        return "RCP not found but slower convergence on smaller batch size", table._find_min_rcp(PASS)
    if low:
        return f"Missing RCP, please submit RCP with BS = {batch}", None
    return "Cannot find any RCPs", None


def _quietly(function, *args):
    previous = logging.root.manager.disable
    logging.disable(logging.INFO)  # the checker logs each interpolation at info level
    try:
        return function(*args)
    finally:
        logging.disable(previous)


def _float(record, key):
    return float(record[key]) if record and key in record else None


@dataclass(frozen=True)
class Difference:
    """One hyperparameter where a preset and its RCP disagree; None where one side does not set it."""

    name: str
    preset: object
    rcp: object


def compare_hyperparameters(values, rcp):
    """Differences between `values` (RCP key names, e.g. models.resnet50.presets.rcp_hyperparameters)
    and the RCP record's hyperparameters, in the record's order; an interpolated or missing RCP has
    no hyperparameters to compare with, so everything the preset sets is listed against None."""
    if not rcp.hyperparameters:
        return [Difference(name, value, None) for name, value in values.items()]
    found = []
    for name, expected in rcp.hyperparameters.items():
        got = values.get(name)
        if not _same(got, expected):
            found.append(Difference(name, got, expected))
    return found


def _same(got, expected):
    if isinstance(got, (int, float)) and isinstance(expected, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, expected, rel_tol=1e-9, abs_tol=0.0)
    return got == expected
