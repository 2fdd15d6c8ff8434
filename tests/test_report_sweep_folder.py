"""suite.cluster.report.sweep_folder: a sweep folder read as its systems and their runs."""
import os

import pytest

from suite.cluster.report import cli, sweep_folder
from suite.common import results
from helpers.report import BENCH, SUBMITTER, TIMES, make_sweep, one_line_error, report_cli, system, write


def test_missing_and_non_sweep_folders(tmp_path):
    one_line_error(report_cli(str(tmp_path / "nowhere")), "nowhere", "does not exist")
    (tmp_path / "plain").mkdir()
    one_line_error(report_cli(str(tmp_path / "plain")), "no sweep.json", "not a sweep folder")
    write(str(tmp_path / "broken" / "sweep.json"), "{\n  \"plan\": \n")
    one_line_error(report_cli(str(tmp_path / "broken")), "sweep.json:3", "not valid JSON")


def test_a_sweep_folder_reads_as_its_systems_and_their_runs(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"), runs={1: 5, 2: 3})
    data = sweep_folder.load_sweep(folder)
    assert (data.folder, data.benchmark, data.submitter, data.profile) == (folder, BENCH, SUBMITTER, "test")
    one, two = data.scales
    assert [(s.system, s.np, s.nodes, s.planned, s.ranks_per_node) for s in data.scales] == \
        [(system(1), 1, 1, 5, 1), (system(2), 2, 1, 5, 2)]
    assert [run.index for run in two.runs] == [0, 1, 2]
    assert [run.log.minutes for run in one.runs] == TIMES[1]
    # Each run's records come from its own run directory; only the 2-process runs checked a network.
    assert all(run.summary["world_size"] == 2 and run.env["network"] for run in two.runs)
    assert all(run.config and run.env is None for run in one.runs)
    assert one.allreduce is None and two.allreduce["world_size"] == 2


def test_the_logs_of_a_system_read_without_a_sweep(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    logs = sweep_folder.results_dir(folder, SUBMITTER, system(2), BENCH)
    assert logs == os.path.join(folder, SUBMITTER, "results", system(2), BENCH)
    read = sweep_folder.read_results(logs, BENCH)
    assert read.path == logs and read.benchmark == BENCH
    runs = sweep_folder.read_runs(read)
    assert [run.log.minutes for run in runs] == TIMES[2]
    assert all(run.summary is None and run.config is None and run.env is None for run in runs)
    assert sweep_folder.read_results(str(tmp_path / "nothing"), BENCH) is None
    assert sweep_folder.read_runs(None) == []


def test_a_sweep_without_logs_or_with_a_broken_record_is_refused(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"), runs={1: 0, 2: 0})
    with pytest.raises(sweep_folder.ReportError, match="no result logs yet; run the sweep first"):
        sweep_folder.load_sweep(folder)
    folder = make_sweep(str(tmp_path / "broken"))
    summary = os.path.join(folder, "runs", system(2), "run_1", "summary.json")
    write(summary, "{\n")
    with pytest.raises(sweep_folder.ReportError, match=f"^{summary}:2: not valid JSON"):
        sweep_folder.load_sweep(folder)


def test_the_report_reads_each_log_once(tmp_path, monkeypatch):
    # The figures and the time-to-train split take one results folder per scale, read with the sweep.
    reads = []

    def counted(read):
        return lambda path, *args: reads.append(path) or read(path, *args)

    monkeypatch.setattr(results, "events", counted(results.events))
    monkeypatch.setattr(results, "parsed_events", counted(results.parsed_events))
    folder = make_sweep(str(tmp_path / "sweep"), runs={1: 5, 2: 3})
    assert cli.main([folder]) == 0
    logs = [sweep_folder.results_dir(folder, SUBMITTER, system(n), BENCH) for n in (1, 2)]
    assert sorted(reads) == sorted(results.result_files(logs[0]) + results.result_files(logs[1]))
    assert len(reads) == 5 + 3
