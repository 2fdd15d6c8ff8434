"""suite.cluster.report's command line on hand-made sweep folders (no TensorFlow): bad logs, bad flags,
the package's main; the folders are tests/helpers/report.py's."""
import os

import pytest

from helpers.report import (SUBMITTER, log_text, make_sweep, one_line_error, report_cli, result_file,
                            snapshot, write)
from suite.cluster import report


BAD_LOGS = {
    "truncated": (lambda: log_text(1.0, stop=False), ["truncated log: no run_stop"]),
    "foreign": (lambda: "epoch 1 loss 0.3\nepoch 2 loss 0.2\n", ["not an MLPerf log"]),
    "other_benchmark": (lambda: log_text(1.0, benchmark="bert"),
                        [":3:", "benchmark 'bert'", "expected 'resnet'"]),
    "broken_line": (lambda: log_text(1.0).replace('"key": "eval_samples"', '"key": eval_samples'),
                    [":10:", "not an MLPerf log line"]),
}


@pytest.mark.parametrize("case", sorted(BAD_LOGS))
def test_bad_log_leaves_the_earlier_report_alone(case, tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    assert report.main([folder]) == 0
    before = snapshot(os.path.join(folder, "report"))
    text, culprits = BAD_LOGS[case]
    write(result_file(folder), text())
    one_line_error(report_cli(folder), result_file(folder), *culprits)
    assert snapshot(os.path.join(folder, "report")) == before
    assert not [name for name in os.listdir(folder) if name.startswith(".report")]


def test_bad_log_writes_no_partial_report(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    write(result_file(folder), log_text(1.0, stop=False))
    one_line_error(report_cli(folder), "truncated")
    assert sorted(os.listdir(folder)) == [SUBMITTER, "runs", "sweep.json"]


def test_out_that_is_not_a_report_folder_is_refused(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    one_line_error(report_cli(folder, "--out", str(precious)), str(precious), "not a report folder")
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]


def test_a_negative_or_unknown_threshold_is_refused(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    one_line_error(report_cli(folder, "--straggler-threshold", "-1"),
                   "--straggler-threshold -1.0 must be >= 0")
    one_line_error(report_cli(folder, "--straggler-threshold", "nan"), "must be >= 0")
    one_line_error(report_cli(folder, "--scaling", "sideways"), "--scaling", "invalid choice")
    assert sorted(os.listdir(folder)) == [SUBMITTER, "runs", "sweep.json"]


def test_the_package_main_is_the_command_line(tmp_path, capsys):
    # mlperf-report and python -m suite.cluster.report both end in suite.cluster.report.main.
    folder = make_sweep(str(tmp_path / "sweep"))
    assert report.main([folder, "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.strip() == (f"report: {tmp_path / 'out' / 'report.md'}, "
                                               f"{tmp_path / 'out' / 'report.html'}, "
                                               f"{tmp_path / 'out' / 'report.json'}")
    assert report.main([str(tmp_path / "nowhere")]) == 2
