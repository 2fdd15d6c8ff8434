"""suite.cluster.report.figures: time to train, throughput, scaling, stragglers and step splits,
checked against the logs and summaries they come from."""
import os

import pytest

from suite.cluster.report import figures, sweep_folder
from helpers.report import (BENCH, ONE_RANK, PART_COLUMNS, STEPS_TIMED, SUBMITTER, TIMES, WEAK_SPLIT, build,
                            make_sweep, olympic_by_hand, parse_minutes, projection_table, summary, system,
                            table_with)


def test_tables_hold_the_numbers_in_the_logs(built):
    folder, markdown = built
    runs = table_with(markdown, "run_stop (ms)")
    assert len(runs) == 10
    for row in runs:
        minutes, status = parse_minutes(os.path.join(folder, row["log"]))
        assert row["time to train (min)"] == f"{minutes:.4f}" and row["status"] == status
    ttt = {row["processes"]: row for row in table_with(markdown, "converged")}
    for np, minutes in TIMES.items():
        logged = [parse_minutes(os.path.join(folder, SUBMITTER, "results", system(np), BENCH,
                                             f"result_{i}.txt")) for i in range(5)]
        times = [m for m, _ in logged]
        row = ttt[str(np)]
        assert row["olympic mean of run times (min, status ignored)"] == f"{olympic_by_hand(times):.4f}"
        assert row["fastest (min)"] == f"{min(times):.4f}" and row["slowest (min)"] == f"{max(times):.4f}"
        converged = [m for m, status in logged if status == "success"]
        assert row["converged"] == f"{len(converged)} of 5"
        # MLPerf: the one non-converged run is the one dropped; the fastest converged run goes too.
        expected = sorted(converged)[1:] if len(converged) == 4 else sorted(converged)[1:-1]
        cell = row["olympic mean (min, MLPerf: non-converged = ∞)"]
        assert cell == f"{sum(expected) / len(expected):.4f}"


def test_throughput_scaling_and_stragglers(built):
    folder, markdown = built
    rows = {row["processes"]: row for row in table_with(markdown, "speed-up (throughput)")}
    assert rows["1"]["speed-up (throughput)"] == "1.000"
    assert rows["1"]["scaling efficiency (throughput)"] == "100.0%"
    rate = {np: sorted(summary(np, i, 1 if np == 2 else None)["samples_per_second_total"]
                       for i in range(5))[2] for np in TIMES}
    assert rows["2"]["speed-up (throughput)"] == f"{rate[2] / rate[1]:.3f}"
    assert rows["2"]["scaling efficiency (throughput)"] == f"{100 * rate[2] / rate[1] / 2:.1f}%"
    stragglers = [row for row in table_with(markdown, "straggler") if row["system"] == system(2)]
    assert [row["straggler"] for row in stragglers] == ["no", "YES"]
    assert stragglers[1]["p50 (ms)"] == "142.0" and stragglers[1]["max (ms)"] == f"{144 + 20:.1f}"


def test_measured_columns_use_the_median_everywhere(built):
    _, markdown = built
    throughput = {row["processes"]: row for row in table_with(markdown, "speed-up (throughput)")}
    projected = projection_table(markdown)
    for np in TIMES:
        totals = sorted(summary(np, i, 1 if np == 2 else None)["samples_per_second_total"] for i in range(5))
        cell = f"{totals[2]:,.2f}"
        assert throughput[str(np)]["throughput (samples/s, total; median over runs)"] == cell
        assert projected[str(np)]["measured throughput (samples/s, median over runs)"] == cell
        assert throughput[str(np)]["min–max over runs (samples/s)"] == f"{totals[0]:,.2f}–{totals[-1]:,.2f}"
        assert throughput[str(np)]["timed steps per run (min–max)"] == str(STEPS_TIMED)


def test_the_figures_of_a_scale_without_the_document(tmp_path):
    data = sweep_folder.load_sweep(make_sweep(str(tmp_path / "sweep")))
    one, two = data.scales
    ttt = figures.time_to_train(one)
    # Run 2 of the 1-process scale did not converge: it is the one dropped, with the fastest.
    assert (ttt["runs"], ttt["converged"], ttt["min"], ttt["max"]) == (5, 4, 1.5, 3.25)
    assert ttt["olympic"] == pytest.approx((2.0 + 3.25 + 2.5) / 3)
    totals = sorted(summary(2, i)["samples_per_second_total"] for i in range(5))
    assert figures.throughput(two) == {"rate": totals[2], "per_rank": totals[2] / 2, "min": totals[0],
                                       "max": totals[-1], "runs": 5, "steps_min": STEPS_TIMED,
                                       "steps_max": STEPS_TIMED}
    assert [row["np"] for row in figures.scaling_rows([two, one])] == [1, 2]
    assert figures.allreduce_curves(data) == [two]


def test_the_experiment_is_read_from_the_batches(tmp_path):
    strong = sweep_folder.load_sweep(make_sweep(str(tmp_path / "strong"))).scales
    weak = sweep_folder.load_sweep(make_sweep(str(tmp_path / "weak"), weak=True)).scales
    assert figures.scaling_mode(strong)[0] == "strong" and "kept the global batch at 16" in \
        figures.scaling_mode(strong)[1]
    assert figures.scaling_mode(weak)[0] == "weak" and "kept the per-rank batch at 16" in \
        figures.scaling_mode(weak)[1]
    assert figures.scaling_mode(strong[:1]) == figures.scaling_mode(strong[:1], "auto")
    assert figures.scaling_mode(strong[:1])[0] == "strong"
    assert figures.scaling_mode(weak, "strong") == ("strong", "strong scaling as asked (--scaling strong)")


# ---- where the efficiency went ----

def lost_points(row):
    return {part: float(row[f"{part} (points)"]) for part in PART_COLUMNS}


def test_weak_scaling_lost_points_split_between_the_parts(tmp_path):
    rows = table_with(build(str(tmp_path / "sweep"), weak=True, split=WEAK_SPLIT), "lost points")
    base, two = rows
    assert (base["run"], base["step (ms)"], base["lost points"]) == ("2", "100.0", "0.0")
    assert (two["run"], two["step (ms)"], two["efficiency (these step times)"]) == ("2", "125.0", "80.0%")
    assert [two[f"{part} (ms)"] for part in PART_COLUMNS] == ["92.0", "15.0", "10.0", "8.0"]
    assert lost_points(two) == {"compute": 1.6, "exposed allreduce": 12.0, "input wait": 0.0,
                                "rank imbalance": 6.4}
    assert sum(lost_points(two).values()) == pytest.approx(float(two["lost points"]))


def test_strong_scaling_compares_each_part_with_its_base_scaled_to_the_per_rank_batch(built):
    _, markdown = built
    two = table_with(markdown, "lost points")[1]
    assert (two["per-rank batch"], two["efficiency (these step times)"], two["lost points"]) == \
        ("8", "83.3%", "16.7")
    assert lost_points(two) == {"compute": 3.3, "exposed allreduce": 13.3, "input wait": -1.7,
                                "rank imbalance": 1.7}
    assert sum(lost_points(two).values()) == pytest.approx(float(two["lost points"]), abs=0.2)
    assert "The per-rank batch changes between scales (16, 8)" in markdown


def test_exact_split_on_any_step_times():
    base = figures.StepSplit("a", 1, 0, 32, 100.0, {"compute_ms": 70.0, "exposed_allreduce_ms": 0.0,
                                                    "input_wait_ms": 30.0, "imbalance_ms": 0.0}, "")
    other = figures.StepSplit("b", 4, 3, 8, 41.0, {"compute_ms": 19.5, "exposed_allreduce_ms": 11.25,
                                                   "input_wait_ms": 2.0, "imbalance_ms": 8.25}, "")
    loss = figures.efficiency_loss(base, other)
    assert loss["efficiency"] == pytest.approx(0.25 * 100 / 41)
    assert sum(loss["points"].values()) == pytest.approx(100 * (1 - loss["efficiency"]))
    assert loss["points"]["input_wait_ms"] == pytest.approx(100 * (2.0 - 7.5) / 41)


def test_a_scale_without_a_split_says_why(tmp_path):
    no_timeline = {"method": "none", "step_ms": 120.0,
                   "reason": "no timeline split: the run had no step after its first timing interval"}
    markdown = build(str(tmp_path / "sweep"), weak=True, split={1: ONE_RANK, 2: no_timeline})
    assert [row["system"] for row in table_with(markdown, "lost points")] == [system(1)]
    assert (f"{system(2)} has no split: no timeline split: the run had no step after its first timing "
            f"interval") in markdown
    older = build(str(tmp_path / "older"), weak=True)
    assert f"No run has a split: {system(1)}: no attribution in summary.json (a run of an older suite)" \
        in older
