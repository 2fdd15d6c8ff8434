"""python -m suite.cluster.report --compare: published folders beside a sweep, or alone; report.json."""
import json
import os
import shutil
import subprocess

import pytest

from helpers.made_logs import run_lines, write_folder
from helpers.published import BERT_64, BERT_8, DELL_32, DELL_8, FOLDERS
from helpers.report import SUBMITTER, make_sweep, one_line_error, report_cli, snapshot, table_with
from helpers.summarizer import summarizer_arithmetic
from suite.cluster import rcp, report
from suite.cluster.measured_time_to_train import summarize
from suite.cluster.results_folder import read_folder


@pytest.fixture(scope="module")
def compared(tmp_path_factory):
    """The report of the four kept published folders alone, through the command line."""
    out = str(tmp_path_factory.mktemp("compared") / "out")
    result = report_cli("--compare", *(folder for folder, _, _ in FOLDERS), "--out", out)
    assert result.returncode == 0, result.stderr
    with open(os.path.join(out, "report.json")) as handle:
        record = json.load(handle)
    with open(os.path.join(out, "report.md")) as handle:
        return out, record, handle.read()


def test_report_json_scores_every_folder_as_result_summarizer(compared):
    _, record, _ = compared
    scales = {os.path.normpath(s["source"]): s for s in record["scales"]}
    assert len(scales) == len(FOLDERS)
    for folder, ruleset, gpus in FOLDERS:
        scale = scales[os.path.normpath(folder)]
        assert scale["olympic_minutes"] == pytest.approx(summarizer_arithmetic(folder, ruleset), rel=1e-12)
        assert (scale["gpus"], scale["ruleset"]) == (gpus, ruleset)
        assert scale["runs"] == len(os.listdir(folder)) and scale["converged_runs"] == scale["runs"]
        parts = scale["training_minutes"] + scale["evaluation_minutes"] + scale["other_minutes"]
        assert parts == pytest.approx(scale["time_to_train_minutes"])
        assert scale["global_batch_size"] == read_folder(folder, ruleset).runs[0].global_batch_size
    dell = scales[os.path.normpath(DELL_32[0])]
    # The RCP checker's own mean at 13,056 (olympic mean of the reference runs' epochs): 45.5.
    assert dell["median_target_epochs"] == 45
    assert dell["rcp_mean_epochs"] == rcp.lookup("resnet", "1.1.0", 13056).mean == pytest.approx(45.5)


def test_report_json_factors_each_pair_and_they_multiply_to_the_measured_ratio(compared):
    _, record, _ = compared
    pairs = {(p["from"]["gpus"], p["to"]["gpus"]): p for p in record["speedups"]}
    assert set(pairs) == {(DELL_8[2], DELL_32[2]), (BERT_8[2], BERT_64[2])}
    for small, large in ((DELL_8, DELL_32), (BERT_8, BERT_64)):
        pair = pairs[(small[2], large[2])]
        a, b = (read_folder(f, r).olympic_minutes for f, r, _ in (small, large))
        mean_a, mean_b = (summarize(read_folder(f, r)).minutes for f, r, _ in (small, large))
        assert mean_a == pytest.approx(a) and mean_b == pytest.approx(b)
        assert pair["measured_speedup"] == pytest.approx(a / b)
        assert pair["factors_product"] == pytest.approx(pair["measured_speedup"], rel=1e-12)
    # The Dell pair: throughput almost linear, the larger batch's extra epochs cost the rest.
    dell = pairs[(8, 32)]
    assert dell["throughput_speedup"] > 3.8 and dell["convergence_ratio"] == pytest.approx(35 / 45, rel=0.01)


def test_compare_alone_has_the_table_and_one_picture_per_benchmark(compared):
    out, _, markdown = compared
    rows = table_with(markdown, "olympic mean (min)")
    assert sorted(row["GPUs"] for row in rows) == ["32", "64", "8", "8"]
    assert {row["benchmark"] for row in rows} == {"resnet", "bert"}
    assert len(table_with(markdown, "throughput ×")) == 2
    for benchmark in ("resnet", "bert"):
        assert f"(scaling_picture_{benchmark}.png)" in markdown
        assert os.path.getsize(os.path.join(out, f"scaling_picture_{benchmark}.png")) > 1000
        # Published evaluation and overhead are slivers: no split bars for them.
        assert not os.path.exists(os.path.join(out, f"time_to_train_split_{benchmark}.png"))
    html = open(os.path.join(out, "report.html")).read()
    assert html.count("data:image/png;base64,") == 2


def test_compare_beside_a_sweep(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    # The sweep describes its CPU systems as it does (suite/cluster/sweep/submission.py): no accelerators.
    for np in (1, 2):
        path = os.path.join(folder, SUBMITTER, "systems", f"test_n1_np{np}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            json.dump({"number_of_nodes": "1", "accelerators_per_node": "0"}, handle)
    assert report.main([folder, "--compare", DELL_8[0]]) == 0
    with open(os.path.join(folder, "report", "report.json")) as handle:
        record = json.load(handle)
    sources = [scale["source"] for scale in record["scales"]]
    assert sources.count("this sweep") == 2 and sources[-1] == DELL_8[0]
    markdown = open(os.path.join(folder, "report", "report.md")).read()
    rows = table_with(markdown, "olympic mean (min)")
    assert [row["GPUs"] for row in rows] == ["1", "2", "8"]
    assert [row["source"] for row in rows] == ["this sweep · test_n1_np1", "this sweep · test_n1_np2",
                                               "Dell · 2xR750xax4A100-PCIE-80GB · v1.1"]
    # The sweep's own time-to-train table is still there, and its scales are factored against each other.
    assert table_with(markdown, "olympic mean (min, MLPerf: non-converged = ∞)")
    assert [(p["from"]["gpus"], p["to"]["gpus"]) for p in record["speedups"]] == [(1, 2)]


def bad_published(tmp_path, case):
    if case == "not a results folder":
        os.makedirs(tmp_path / "empty")
        return str(tmp_path / "empty"), ["empty", "neither one nor a sweep folder"]
    if case == "unparsable log":
        folder = str(tmp_path / "Dell" / "results" / "sys" / "resnet")
        shutil.copytree(DELL_8[0], folder)
        path = os.path.join(folder, "result_2.txt")
        text = open(path).read().replace('"key": "run_start"', '"key": run_start', 1)
        open(path, "w").write(text)
        return folder, ["result_2.txt"]
    if case == "no converged run":
        folder = write_folder(str(tmp_path), [run_lines(status="aborted")] * 5)
        return folder, [folder, "no converged run"]
    folder = write_folder(str(tmp_path), [run_lines(batch=200_000)] * 5)
    return folder, [folder, "no RCP covers global batch 200000"]


def in_process(capsys, *args):
    """report.main in this interpreter (no start-up to pay), as a CompletedProcess for one_line_error."""
    code = report.main(list(args))
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


@pytest.mark.parametrize("case", ["not a results folder", "unparsable log", "no converged run", "no RCP"])
def test_bad_compare_folder_is_one_line_and_nothing_is_written(case, tmp_path, capsys):
    folder, culprits = bad_published(tmp_path, case)
    out = tmp_path / "out"
    one_line_error(in_process(capsys, "--compare", DELL_32[0], folder, "--out", str(out)), *culprits)
    assert not out.exists() and not [p for p in os.listdir(tmp_path) if p.startswith(".out")]


def test_a_bad_compare_folder_leaves_the_sweeps_report_alone(tmp_path):
    folder, culprits = bad_published(tmp_path, "no converged run")
    sweep = make_sweep(str(tmp_path / "sweep"))
    assert report.main([sweep]) == 0
    before = snapshot(os.path.join(sweep, "report"))
    one_line_error(report_cli(sweep, "--compare", folder), *culprits)
    assert snapshot(os.path.join(sweep, "report")) == before


def test_compare_without_out_or_sweep_is_refused(capsys):
    one_line_error(in_process(capsys, "--compare", DELL_8[0]), "--out")
    one_line_error(in_process(capsys), "SWEEP")


def test_the_weak_and_the_strong_path_at_one_gpu_count_are_factored_term_by_term(tmp_path, capsys):
    # 32 GPUs either way. At 3,264: 4 blocks of 4 epochs, 60 s each; at 13,056: 5 blocks of 4 epochs,
    # 40 s each (more epochs, faster ones); 5 s of evaluation per block, 2 s start-up, 1 s between blocks.
    # One system, two folders (two sweeps of it): a batch comparison within one system.
    strong = write_folder(str(tmp_path / "strong"), [run_lines(batch=3264, blocks=4, block_ms=60_000)] * 5,
                          system="gm4", nodes=4)
    weak = write_folder(str(tmp_path / "weak"), [run_lines(batch=13056, blocks=5, block_ms=40_000)] * 5,
                        system="gm4", nodes=4)
    out = tmp_path / "out"
    assert report.main(["--compare", strong, weak, "--out", str(out)]) == 0
    minutes_strong, minutes_weak = (2 + 4 * 65 + 3) / 60, (2 + 5 * 45 + 4) / 60
    choice, = json.loads((out / "report.json").read_text())["batch_choices"]
    assert choice["faster_global_batch_size"] == 13056
    assert choice["measured_speedup"] == pytest.approx(minutes_strong / minutes_weak)
    assert choice["throughput_speedup"] == pytest.approx((20_000 / 200) / (16_000 / 240))
    assert choice["convergence_ratio"] == pytest.approx(16 / 20)
    assert choice["evaluation_and_overhead_ratio"] == pytest.approx((200 / 231) / (240 / 265))
    text = (out / "report.md").read_text()
    assert "different systems" not in text
    assert (f"At 32 GPUs, global batch 13,056 (made · gm4 (2)) reaches the lower time to train: "
            f"{minutes_weak:.2f} min against {minutes_strong:.2f} min for global batch 3,264") in text
    assert f"×{minutes_strong / minutes_weak:.3f} = throughput ×1.500" in text
    assert "convergence ×0.800 (target samples 20,000 against 16,000)" in text
