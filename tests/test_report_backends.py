"""The report of a sweep run under two distribution backends: each scale's backends side by side, one
headline sentence per step on which loses fewer points of linear scaling, and the backend in the
labels and report.json; a sweep that recorded no backend is Horovod's, a published folder has none."""
import json
import os
import statistics

import pytest

from helpers.made_logs import run_lines, write_folder
from helpers.report import PART_COLUMNS, RUN_FACTORS, STRONG_SPLIT, TIMES, build, olympic_by_hand, summary, \
    table_with

# tf a little faster on one process and slower on two: each backend's own scaling differs from the
# other's, and from what a scaling against the other backend's smallest scale would give.
SLOWDOWN = {"horovod": {}, "tf": {1: 0.9, 2: 1.3}}
ALL_CONVERGED = {np: ["success"] * 5 for np in TIMES}
PARTS = ("compute_ms", "exposed_allreduce_ms", "input_wait_ms", "imbalance_ms")


def factor(backend, np):
    return SLOWDOWN[backend].get(np, 1.0)


def median_rate(backend, np):
    rates = [summary(np, i)["samples_per_second_total"] for i in range(5)]
    return statistics.median(rates) / factor(backend, np)


def olympic(backend, np):
    return olympic_by_hand([minutes * factor(backend, np) for minutes in TIMES[np]])


@pytest.fixture(scope="module")
def two_backends(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("backends") / "sweep")
    markdown = build(folder, split=STRONG_SPLIT, status=ALL_CONVERGED, backends=SLOWDOWN)
    with open(os.path.join(folder, "report", "report.json")) as handle:
        return markdown, json.load(handle)


def test_each_scale_sets_its_backends_side_by_side(two_backends):
    markdown, _ = two_backends
    rows = table_with(markdown, "backend")
    assert [(row["processes"], row["backend"]) for row in rows] == [
        ("1", "horovod"), ("1", "tf"), ("2", "horovod"), ("2", "tf")]
    for row in rows:
        backend, np = row["backend"], int(row["processes"])
        assert row["system"] == f"test_n1_np{np}_{backend}"
        assert float(row["throughput (samples/s, median over runs)"].replace(",", "")) == \
            pytest.approx(median_rate(backend, np), abs=0.01)
        own = median_rate(backend, np) / median_rate(backend, 1) / np
        assert row["scaling efficiency (throughput, vs the backend's smallest scale)"] == f"{100 * own:.1f}%"
        assert float(row["olympic time to train (min)"]) == pytest.approx(olympic(backend, np), abs=1e-4)
        # The median run by step time is run 2 (RUN_FACTORS), its parts the backend's slowdown of the split.
        parts = {key: value * RUN_FACTORS[2] * factor(backend, np) for key, value in STRONG_SPLIT[np].items()}
        assert float(row["step (ms)"]) == pytest.approx(sum(parts.values()), abs=0.05)
        for key, column in zip(PARTS, PART_COLUMNS):
            assert float(row[f"{column} (ms)"]) == pytest.approx(parts[key], abs=0.05)
        assert row["split (method, run)"] == "horovod timeline window, run 2"


def test_the_headline_says_which_backend_loses_fewer_points_per_step(two_backends):
    markdown, _ = two_backends
    # The time-to-train efficiency of 1 -> 2 processes under each backend, from the made times alone.
    kept = {backend: olympic(backend, 1) / olympic(backend, 2) / 2 for backend in SLOWDOWN}
    worse, better = sorted(kept, key=kept.get)
    line, = [line for line in markdown.splitlines() if line.startswith("- resnet, this sweep, 1 → 2 GPUs: ")
             and " kept " in line and " of linear, " in line]
    assert line.startswith(f"- resnet, this sweep, 1 → 2 GPUs: {worse} kept {kept[worse]:.2f} of linear, "
                           f"{better} {kept[better]:.2f}: {better} loses "
                           f"{100 * (kept[better] - kept[worse]):.1f} points fewer than {worse} (throughput ")
    # Each backend's own sentence is there too, its source named with the backend.
    for backend in SLOWDOWN:
        own = f"- resnet, this sweep · {backend}, 1 → 2 GPUs: {100 * kept[backend]:.1f} % of linear."
        assert own in markdown


def test_labels_and_report_json_name_the_backend(two_backends):
    _, record = two_backends
    found = {(scale["system"], scale["distribution"], scale["label"]) for scale in record["scales"]}
    assert found == {(f"test_n1_np{np}_{b}", b, f"this sweep · {b} · test_n1_np{np}_{b}")
                     for np in TIMES for b in SLOWDOWN}
    # Speed-ups are factored within a backend, never across.
    assert {(s["from"]["system"], s["to"]["system"]) for s in record["speedups"]} == {
        (f"test_n1_np1_{b}", f"test_n1_np2_{b}") for b in SLOWDOWN}


def test_a_sweep_that_recorded_no_backend_is_horovods_and_published_folders_have_none(tmp_path):
    made = write_folder(str(tmp_path), [run_lines()] * 5, system="dgx", nodes=1)
    markdown = build(str(tmp_path / "sweep"), "--compare", made)
    with open(tmp_path / "sweep" / "report" / "report.json") as handle:
        scales = json.load(handle)["scales"]
    assert {(s["label"], s["distribution"]) for s in scales} == {
        ("this sweep · test_n1_np1", "horovod"), ("this sweep · test_n1_np2", "horovod"),
        ("made · dgx", None)}
    assert "side by side" not in markdown and " of linear, " not in markdown
