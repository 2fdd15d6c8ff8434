"""suite.common.results: the olympic mean and one MLPerf log read."""
import pytest

from suite.common import results
from test_report import BENCH, log_text


def test_olympic_mean():
    assert results.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0]) == 3.0
    assert results.olympic_mean([10.0, 1.0, 2.0, 3.0, 100.0]) == 5.0
    # A non-converged run counts as infinitely slow: it is the one dropped, not the slowest time.
    assert results.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [False, True, True, True, True]) == 4.0
    assert results.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [True, True, True, True, False]) == 3.0
    # Two non-converged runs leave the scale unscored; so do fewer than three runs.
    assert results.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [False, True, True, True, False]) is None
    assert results.olympic_mean([1.0, 2.0]) is None
    assert results.olympic_mean([]) is None
    with pytest.raises(ValueError):
        results.olympic_mean([1.0, 2.0, 3.0], [True])


def test_read_run(tmp_path):
    path = tmp_path / "result_0.txt"
    path.write_text("some launcher noise\n" + log_text(2.5, "aborted"))
    log = results.read_run(str(path), BENCH)
    assert log.minutes == 2.5 and log.status == "aborted" and not log.converged
    assert log.division == "open" and log.global_batch_size == 16 and log.accuracies == [(1, 0.5)]
    assert results.has_run_stop(str(path))
    path.write_text(log_text(2.5, stop=False))
    assert not results.has_run_stop(str(path))
    assert not results.has_run_stop(str(tmp_path / "missing.txt"))
