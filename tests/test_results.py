"""suite.common.results: one MLPerf log read."""
from suite.common import results
from helpers.report import BENCH, log_text


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
