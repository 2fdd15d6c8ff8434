"""Reading MLPerf results folders of other submitters: the score equals result_summarizer's, logs of other
frameworks and ranks are read, and bad input is one line naming the file or folder."""
import json
import logging
import os

import pytest
from mlperf_logging.result_summarizer import result_summarizer

from helpers.made_logs import line, run_lines, write_folder
from helpers.published import BERT_8, BERT_64, DELL_8, DELL_32, FOLDERS
from helpers.summarizer import ranks_and_noise, summarizer_arithmetic
from suite.common.results import LogError
from suite.cluster.results_folder import FolderError, read_folder


def summarizer_score(folder, ruleset):
    """What result_summarizer scores for the folder: its own function, compliance check included."""
    benchmark, system = os.path.basename(folder), os.path.basename(os.path.dirname(folder))
    score, _, _ = result_summarizer._compute_strong_score_standalone(benchmark, system, False, folder,
                                                                     "training", ruleset)
    return score


@pytest.mark.parametrize("folder, ruleset, gpus", FOLDERS, ids=lambda v: os.path.basename(str(v)))
def test_the_score_of_every_kept_folder_is_what_result_summarizer_scores(folder, ruleset, gpus, capsys):
    checked = read_folder(folder, ruleset, compliance=True)
    assert checked.olympic_minutes == summarizer_score(folder, ruleset)
    # Without the checker, the same arithmetic on the same runs.
    unchecked = read_folder(folder, ruleset).olympic_minutes
    assert unchecked == pytest.approx(summarizer_arithmetic(folder, ruleset), rel=1e-12)
    assert checked.gpus == gpus


def test_the_published_scores():
    # Dell's pair passes the installed checker: the summarizer scores it, and so does the reader.
    assert read_folder(DELL_8[0], "1.1.0", compliance=True).olympic_minutes == pytest.approx(32.08695)
    assert read_folder(DELL_32[0], "1.1.0", compliance=True).olympic_minutes == pytest.approx(10.5857111,
                                                                                              rel=1e-8)
    # NVIDIA's v2.1 BERT logs name the LAMB epsilon opt_epsilon, as the rules of their round did; the
    # installed 2.1.0 rules want opt_lamb_epsilon, so the checker rejects all 20 and neither scale is scored.
    for folder, ruleset, _ in (BERT_8, BERT_64):
        checked = read_folder(folder, ruleset, compliance=True)
        assert checked.olympic_minutes is None
        assert len(checked.rejected) == 10
        assert {reason for _, reason in checked.rejected} == {
            "Required EXACTLY_ONE occurrence of 'opt_lamb_epsilon' but found 0"}
    assert read_folder(BERT_8[0], "2.1.0").olympic_minutes == pytest.approx(16.8821458, rel=1e-8)
    assert read_folder(BERT_64[0], "2.1.0").olympic_minutes == pytest.approx(2.4974229, rel=1e-7)


def test_system_description_gives_the_gpus_and_the_caller_can_override_it():
    dell = read_folder(DELL_32[0], "1.1.0")
    assert (dell.gpus, dell.gpus_per_node, dell.system, dell.benchmark, dell.global_batch_size) == (
        32, 4, "8xR750xax4A100-PCIE-80GB", "resnet", 13056)
    assert read_folder(DELL_32[0], "1.1.0", gpus=16).gpus == 16


def test_logs_with_rank_prefixes_duplicates_and_framework_output_are_read(tmp_path):
    plain = run_lines()
    folder = write_folder(tmp_path, [ranks_and_noise(plain)] * 3 + [plain] * 2)
    read = read_folder(folder)
    # The first rank's run_start and the second's... result_summarizer keeps the last run_start before
    # the first run_stop: the other rank's copy, a millisecond later.
    assert [round(run.minutes * 60000) for run in read.runs] == [265_000 - 1] * 3 + [265_000] * 2
    assert read.olympic_minutes == pytest.approx(summarizer_arithmetic(folder, "2.1.0"), rel=1e-12)
    assert read.gpus == 8 and all(run.converged for run in read.runs)


def test_a_run_that_did_not_converge_is_dropped_as_the_slowest(tmp_path):
    runs = [run_lines(block_ms=ms) for ms in (60_000, 61_000, 62_000, 63_000)]
    runs.append(run_lines(block_ms=10_000, status="aborted"))
    read = read_folder(write_folder(tmp_path, runs))
    minutes = sorted(run.minutes for run in read.runs if run.converged)
    assert read.olympic_minutes == pytest.approx(sum(minutes[1:]) / 3)


def test_scaling_json_multiplies_the_score(tmp_path):
    folder = write_folder(tmp_path, [run_lines()] * 3)
    plain = read_folder(folder).olympic_minutes
    with open(os.path.join(folder, "scaling.json"), "w") as handle:
        json.dump({"scaling_factor": 1.25}, handle)
    assert read_folder(folder).olympic_minutes == pytest.approx(1.25 * plain)


def test_without_a_system_description_the_gpus_are_unknown(tmp_path):
    read = read_folder(write_folder(tmp_path, [run_lines()] * 3, nodes=None))
    assert read.gpus is None and read.gpus_per_node is None


def one_line(error):
    text = str(error.value)
    assert "\n" not in text
    return text


def test_not_a_results_folder(tmp_path):
    with pytest.raises(FolderError) as error:
        read_folder(str(tmp_path / "missing"))
    assert one_line(error).startswith(str(tmp_path / "missing")) and "no such directory" in one_line(error)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a result\n")
    with pytest.raises(FolderError) as error:
        read_folder(str(tmp_path / "empty"))
    assert "not an MLPerf results folder (no result_<i>.txt" in one_line(error)


def test_a_log_that_cannot_be_parsed_names_the_file(tmp_path):
    broken = run_lines()
    broken.insert(3, ':::MLLOG {"key": "global_batch_size", "time_ms": 1')
    folder = write_folder(tmp_path, [run_lines(), broken])
    with pytest.raises(LogError) as error:
        read_folder(folder)
    assert one_line(error).startswith(os.path.join(folder, "result_1.txt") + ":4: not an MLPerf log line")
    no_metadata = run_lines()
    no_metadata.insert(3, ':::MLLOG {"key": "seed", "value": 1, "time_ms": 1}')
    folder = write_folder(tmp_path / "two", [no_metadata])
    with pytest.raises(LogError, match=r"result_0.txt: an MLLOG line has no 'metadata' field") as error:
        read_folder(folder)
    one_line(error)
    folder = write_folder(tmp_path / "three", [["epoch 1 loss 2.0", "no marker anywhere"]])
    with pytest.raises(LogError, match=r"result_0.txt: not an MLPerf log \(no ':::MLLOG' lines\)"):
        read_folder(folder)


def test_a_scale_with_no_converged_run(tmp_path):
    read = read_folder(write_folder(tmp_path, [run_lines(status="aborted")] * 3))
    assert read.olympic_minutes is None
    with pytest.raises(FolderError) as error:
        read.converged_runs()
    assert one_line(error) == f"{read.path}: no converged run (no run_stop with status success in its 3 logs)"


def test_logs_of_different_scales_in_one_folder(tmp_path):
    folder = write_folder(tmp_path, [run_lines(batch=3264), run_lines(batch=4096)])
    with pytest.raises(FolderError, match=r"its logs differ in global_batch_size \(3264, 4096\)") as error:
        read_folder(folder)
    one_line(error)


def test_a_broken_system_description(tmp_path):
    folder = write_folder(tmp_path, [run_lines()], nodes="two")
    with pytest.raises(FolderError, match=r"made_system.json: not a usable system description") as error:
        read_folder(folder)
    one_line(error)


def test_a_truncated_log(tmp_path):
    folder = write_folder(tmp_path, [run_lines()[:-1]])
    with pytest.raises(LogError, match=r"result_0.txt: truncated log: no run_stop"):
        read_folder(folder)


def test_mllog_lines_as_the_library_writes_them(tmp_path):
    # The helper's lines are what mlperf_logging.mllog itself prints (its own format, one event), through a
    # logger of this test's, so the library's shared logger is left as it was.
    from mlperf_logging import mllog
    shared = mllog.get_mllogger()
    previous = shared.logger
    mine = logging.getLogger("made_logs_format_check")
    handler = logging.FileHandler(tmp_path / "mllog.txt")
    mine.addHandler(handler)
    mine.setLevel(logging.INFO)
    mine.propagate = False
    mllog.config(logger=mine)
    try:
        shared.event(key="global_batch_size", value=3264, metadata={"file": "made.py", "lineno": 1},
                     time_ms=7)
    finally:
        shared.logger = previous
        mine.removeHandler(handler)
        handler.close()
    written = json.loads((tmp_path / "mllog.txt").read_text().split(":::MLLOG ", 1)[1])
    assert written == json.loads(line("global_batch_size", 7, 3264).split(":::MLLOG ", 1)[1])


def test_the_logs_milliseconds_stay_integers_as_written():
    # mlperf_logging's parser hands back floats; the report's runs table prints them as the log wrote them.
    folder = read_folder(BERT_8[0], BERT_8[1])
    with open(folder.runs[0].path) as handle:
        written = next(json.loads(text.split(":::MLLOG ", 1)[1])["time_ms"] for text in handle
                       if '"key": "run_start"' in text)
    assert folder.runs[0].run_start_ms == written and type(folder.runs[0].run_start_ms) is int
