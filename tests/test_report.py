"""suite.cluster.report on hand-made sweep folders (no TensorFlow): numbers, plots, bad input."""
import json
import os
import re
import sys

import pytest

from conftest import run
from suite.cluster import report, results

BENCH = "resnet"
SUBMITTER = "acme"
# Minutes per run, by process count; the 1-process scale has one run that did not converge.
TIMES = {1: [2.0, 1.5, 1.75, 3.25, 2.5], 2: [1.25, 1.0, 0.875, 1.5, 1.125]}
STATUS = {1: ["success", "success", "aborted", "success", "success"], 2: ["success"] * 5}
START_MS = 1_700_000_000_000
STEPS_TIMED = 40
# A 2-class ResNet-50 as summary.json records it.
GRADIENT = {"trainable_parameters": 23_512_130, "allreduce_dtype": "float32", "gradient_bytes": 94_048_520}


def event(key, value=None, time_ms=START_MS, kind="POINT_IN_TIME", **metadata):
    body = {"namespace": "", "time_ms": time_ms, "event_type": kind, "key": key, "value": value,
            "metadata": {"file": "x.py", "lineno": 1, **metadata}}
    return ":::MLLOG " + json.dumps(body)


def log_text(minutes, status="success", benchmark=BENCH, start=START_MS, stop=True):
    stop_ms = start + round(minutes * 60000)
    lines = [event("cache_clear", False), event("init_start", kind="INTERVAL_START"),
             event("submission_benchmark", benchmark), event("submission_org", SUBMITTER),
             event("submission_division", "open"), event("submission_status", "onprem"),
             event("submission_platform", "x"), event("global_batch_size", 16), event("train_samples", 64),
             event("eval_samples", 16), event("init_stop", kind="INTERVAL_END"),
             event("run_start", time_ms=start, kind="INTERVAL_START"),
             event("eval_accuracy", 0.76 if status == "success" else 0.5, time_ms=stop_ms, epoch_num=1)]
    if stop:
        lines.append(event("run_stop", time_ms=stop_ms, kind="INTERVAL_END", status=status))
    return "\n".join(lines) + "\n"


def system(np):
    return f"test_n1_np{np}"


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def summary(np, index, slow_rank=None, weak=False, steps=None):
    """summary.json of one run: 16 images per step in all (strong scaling) or per rank (weak)."""
    local = 16 if weak else 16 // np
    ranks = []
    for rank in range(np):
        p50 = 100.0 + index + (40.0 if rank == slow_rank else 0.0)
        ranks.append({"rank": rank, "host": "vm", "samples_per_second": local / (p50 / 1000),
                      "step_ms_p50": p50, "step_ms_p90": p50 + 5, "step_ms_max": p50 + 20,
                      "steps_timed": STEPS_TIMED if steps is None else steps})
    total = sum(r["samples_per_second"] for r in ranks)
    return {"samples_per_second_total": total, "samples_per_second_per_rank": total / np, "world_size": np,
            "global_batch_size": local * np, "local_batch_size": local, "ranks": ranks, **GRADIENT}


# Per-rank message sizes and times of the allreduce benchmark: a latency floor (the same time at
# every size, so busbw only climbs) or a curve that flattens to 2 GB/s busbw at its largest sizes.
LATENCY_FLOOR = ((4096, 1.1e-3), (65536, 1.1e-3), (1 << 20, 1.1e-3))
# On 2 ranks busbw = algbw = bytes / time: 0.3, 1.96, 2.0 and 2.04 GB/s; the plateau is 16M-256M.
PLATEAU_BUSBW = 2.0
WITH_PLATEAU = tuple((nbytes, nbytes / (busbw * 1e9))
                     for nbytes, busbw in ((1 << 20, 0.3), (16 << 20, 1.96), (64 << 20, 2.0),
                                           (256 << 20, 2.04)))


def allreduce_record(np, curve=LATENCY_FLOOR):
    rows = []
    for nbytes, seconds in curve:
        algbw = nbytes / seconds / 1e9
        rows.append({"bytes": nbytes, "seconds": seconds, "time_us": seconds * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * 2 * (np - 1) / np, "correct": True})
    return {"world_size": np, "hosts_count": 1, "rows": rows, "expectation": None,
            "peak_busbw_gbps": max(r["busbw_gbps"] for r in rows), "expected_busbw_gbps": None,
            "expected_busbw_source": "profile test gives no expected busbw for 1 node"}


def network_env(index):
    """env.json's network check for a 2-rank, 2-node GPU run; in run 1 rank 1's NCCL fell back to sockets."""
    fallback = index == 1
    return {"profile": {"name": "test", "applied_by": "rank"},
            "network": {"library": "nccl", "nodes": 2, "rdma": not fallback,
                        "ranks": [{"network": "IB"}, {"network": "Socket" if fallback else "IB"}],
                        "probe": {"bytes": 2**30, "busbw_gbps": 12.5 if fallback else 190.25},
                        "expected_busbw_gbps": 185.0,
                        "status": "below expectation" if fallback else "ok"}}


# The step split of summary.json's "attribution" (ms), per process count: weak scaling keeps 16 images
# per rank, strong scaling 16 in all (8 per rank on 2). The runs of a scale scale it by RUN_FACTORS,
# so run 2 is each scale's median by step time.
#   1 process: 100 ms = compute 90 + input wait 10 (no allreduce or imbalance on one rank).
#   weak, 2 processes: 125 ms = compute 92 + exposed allreduce 15 + input wait 10 + imbalance 8:
#     efficiency 100 / 125 = 80 %; the 20 lost points are compute 2/125 = 1.6, exposed 15/125 = 12.0,
#     input wait 0/125 = 0.0 and imbalance 8/125 = 6.4.
#   strong, 2 processes: 60 ms = 47 + 8 + 4 + 1, against a base scaled by s = 8/16: efficiency
#     0.5 * 100 / 60 = 83.3 %; the 16.7 lost points are compute (47 - 45)/60 = 3.3, exposed 8/60 = 13.3,
#     input wait (4 - 5)/60 = -1.7 and imbalance 1/60 = 1.7.
ONE_RANK = {"compute_ms": 90.0, "exposed_allreduce_ms": 0.0, "input_wait_ms": 10.0, "imbalance_ms": 0.0}
WEAK_SPLIT = {1: ONE_RANK, 2: {"compute_ms": 92.0, "exposed_allreduce_ms": 15.0, "input_wait_ms": 10.0,
                               "imbalance_ms": 8.0}}
STRONG_SPLIT = {1: ONE_RANK, 2: {"compute_ms": 47.0, "exposed_allreduce_ms": 8.0, "input_wait_ms": 4.0,
                                 "imbalance_ms": 1.0}}
RUN_FACTORS = (1.2, 0.9, 1.0, 1.1, 0.8)


def attribution_record(parts, index):
    if "method" in parts:
        return parts  # given whole (a run without a split)
    scaled = {key: value * RUN_FACTORS[index] for key, value in parts.items()}
    return {"method": "horovod timeline window", "step_ms": sum(scaled.values()), **scaled}


def make_sweep(folder, slow_rank=None, allreduce=True, runs=None, weak=False, steps=None,
               curve=LATENCY_FLOOR, times=None, status=None, split=None):
    """A sweep folder as suite.cluster.sweep leaves it, with known times.

    runs: {np: how many of the planned 5 runs are there}; the 1-process scale gets an allreduce
    record too when allreduce is "every scale" (the sweep measures each scale). split: {np: the step's
    parts} for summary.json's attribution (none for a process count it leaves out).
    """
    times, status = times or TIMES, status or STATUS
    scales = []
    for np, minutes in times.items():
        scales.append({"system": system(np), "np": np, "nodes": 1, "hostfile": "hostfiles/localhost",
                       "hosts": [{"name": "localhost", "slots": 2}], "preset": "sweep_cpu"})
        for index, value in enumerate(minutes[:(runs or {}).get(np, len(minutes))]):
            write(os.path.join(folder, SUBMITTER, "results", system(np), BENCH, f"result_{index}.txt"),
                  log_text(value, status[np][index], start=START_MS + index * 3_600_000))
            run_dir = os.path.join(folder, "runs", system(np), f"run_{index}")
            recorded = summary(np, index, slow_rank if np == 2 else None, weak=weak, steps=steps)
            if np in (split or {}):
                recorded["attribution"] = attribution_record(split[np], index)
            write(os.path.join(run_dir, "summary.json"), json.dumps(recorded))
            write(os.path.join(run_dir, "config.json"), json.dumps({"config": {"fp16_allreduce": False}}))
            if np > 1:
                write(os.path.join(run_dir, "env.json"), json.dumps(network_env(index)))
        if allreduce and (np > 1 or allreduce == "every scale"):
            write(os.path.join(folder, "runs", system(np), "allreduce.json"),
                  json.dumps(allreduce_record(np, curve)))
    plan = {"module": "models.resnet50", "model_args": [], "benchmark": BENCH, "runs": 5,
            "submitter": SUBMITTER, "status": "onprem", "profile": "test", "scales": scales}
    write(os.path.join(folder, "sweep.json"), json.dumps({"plan": plan, "runs": {}}))
    return folder


def tables(markdown):
    """{first header cell + second: [row dicts]} of every Markdown table."""
    found, lines = [], markdown.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            header = [c.strip() for c in line.strip("|").split("|")]
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(dict(zip(header, [c.strip() for c in row.strip("|").split("|")])))
            found.append((header, rows))
    return found


def table_with(markdown, column):
    return next(rows for header, rows in tables(markdown) if column in header)


def parse_minutes(path):
    """Time to train straight from a log, independently of suite.cluster.results."""
    times = {}
    with open(path) as handle:
        for line in handle:
            body = json.loads(line.split(":::MLLOG ", 1)[1])
            times.setdefault(body["key"], body)
    return ((times["run_stop"]["time_ms"] - times["run_start"]["time_ms"]) / 60000,
            times["run_stop"]["metadata"]["status"])


def olympic_by_hand(values):
    ordered = sorted(values)
    return sum(ordered[1:-1]) / (len(ordered) - 2)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    folder = make_sweep(str(tmp_path_factory.mktemp("built") / "sweep"), slow_rank=1, split=STRONG_SPLIT)
    assert report.main([folder]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        return folder, handle.read()


# ---- the arithmetic ----

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


# ---- the report on a good sweep ----

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


def test_the_network_of_every_run_is_shown(built):
    _, markdown = built
    rows = table_with(markdown, "network (per rank)")
    # Only the 2-process runs recorded a network check; one row each.
    assert [(r["system"], r["run"]) for r in rows] == [(system(2), str(i)) for i in range(5)]
    healthy, fallback = rows[0], rows[1]
    assert (healthy["network (per rank)"], healthy["RDMA"], healthy["verdict"]) == ("IB", "yes", "ok")
    assert healthy["probe busbw (GB/s)"] == "190.250 at 1G" and healthy["expected (GB/s)"] == "185"
    assert fallback["network (per rank)"] == "IB on ranks 0; Socket on ranks 1"
    assert (fallback["RDMA"], fallback["verdict"]) == ("NO", "below expectation")
    assert fallback["profile"] == "test" and fallback["carried by"] == "nccl"


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


def test_projected_figures_are_labelled(built):
    folder, markdown = built
    section = markdown.split("## Projected beside measured", 1)[1].split("\n## ", 1)[0]
    assert "PROJECTED" in section and "not from runs" in section
    header, _ = tables(section)[0]
    for cell in header:
        assert cell in ("processes", "measured runs", "per-rank batch (the sweep's)") \
            or cell.startswith(("projected", "measured")), cell
    # No table outside that section has a projected column: measured tables stay measured.
    before = markdown.split("## Projected beside measured", 1)[0]
    assert not [cell for header, _ in tables(before) for cell in header if "projected" in cell.lower()]


def test_published_references_carry_their_sources(built):
    _, markdown = built
    rows = table_with(markdown, "published system")
    assert {row["time to train (min)"] for row in rows} == {"31.5", "10.67", "29.15", "16.88"}
    assert all(row["source"] for row in rows)
    assert "not measured here" in markdown


def test_plots_are_valid_pngs_and_the_html_embeds_them(built):
    from PIL import Image
    folder, markdown = built
    out = os.path.join(folder, "report")
    names = sorted(name for name in os.listdir(out) if name.endswith(".png"))
    assert names == ["allreduce.png", "attribution.png", "scaling.png", "stragglers.png", "throughput.png",
                     "time_to_train.png"]
    for name in names:
        with Image.open(os.path.join(out, name)) as image:
            image.verify()
        with Image.open(os.path.join(out, name)) as image:
            assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 350, (name, image.size)
        assert f"]({name})" in markdown
    with open(os.path.join(out, "report.html")) as handle:
        page = handle.read()
    assert page.count('src="data:image/png;base64,') == len(names)
    assert not re.search(r'src="(?!data:)', page)


def test_without_allreduce_there_is_no_projection(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"), allreduce=False)
    assert report.main([folder]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        markdown = handle.read()
    assert "no projection" in markdown and "PROJECTED" not in markdown
    assert not os.path.exists(os.path.join(folder, "report", "allreduce.png"))


# ---- bad input: one line, exit 2, nothing already written damaged ----

def report_cli(*args):
    return run([sys.executable, "-m", "suite.cluster.report", *args], timeout=120)


def snapshot(folder):
    found = {}
    for root, _, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                found[os.path.relpath(os.path.join(root, name), folder)] = handle.read()
    return found


def one_line_error(result, *culprits):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for culprit in culprits:
        assert culprit in lines[0], lines[0]
    return lines[0]


def result_file(folder, np=2, index=3):
    return os.path.join(folder, SUBMITTER, "results", system(np), BENCH, f"result_{index}.txt")


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


def test_missing_and_non_sweep_folders(tmp_path):
    one_line_error(report_cli(str(tmp_path / "nowhere")), "nowhere", "does not exist")
    (tmp_path / "plain").mkdir()
    one_line_error(report_cli(str(tmp_path / "plain")), "no sweep.json", "not a sweep folder")
    write(str(tmp_path / "broken" / "sweep.json"), "{\n  \"plan\": \n")
    one_line_error(report_cli(str(tmp_path / "broken")), "sweep.json:3", "not valid JSON")


def test_out_that_is_not_a_report_folder_is_refused(tmp_path):
    folder = make_sweep(str(tmp_path / "sweep"))
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    one_line_error(report_cli(folder, "--out", str(precious)), str(precious), "not a report folder")
    assert [p.name for p in precious.iterdir()] == ["notes.txt"]


# ---- the projection, recomputed by hand from the report's own inputs ----

def projection_table(markdown):
    return {row["processes"]: row for row in table_with(markdown, "projected throughput (samples/s)")}


def per_rank_median(np, weak=False):
    rates = sorted(summary(np, i, weak=weak)["samples_per_second_per_rank"] for i in range(5))
    return rates[2]


def build(folder, *args, **changes):
    make_sweep(folder, **changes)
    assert report.main([folder, *args]) == 0
    with open(os.path.join(folder, "report", "report.md")) as handle:
        return handle.read()


def test_projection_of_a_strong_scaling_sweep_by_hand(tmp_path):
    # The runs kept 16 images per step: 16 on 1 rank, 8 + 8 on 2. The curve flattens at 2 GB/s.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU)
    x = per_rank_median(1)  # samples/s of one rank at batch 16
    ring = 2 * (2 - 1) / 2 * GRADIENT["gradient_bytes"] / (PLATEAU_BUSBW * 1e9)
    step_2 = 8 / x + ring
    rows = projection_table(markdown)
    assert rows["2"]["per-rank batch (the sweep's)"] == "8"
    assert rows["2"]["projected compute (ms)"] == f"{8 / x * 1e3:.2f}"
    assert rows["2"]["projected allreduce (ms)"] == f"{ring * 1e3:.3f}"
    assert rows["2"]["projected throughput (samples/s)"] == f"{16 / step_2:,.2f}"
    assert rows["2"]["projected efficiency"] == f"{100 * (16 / step_2) / (2 * x):.1f}%"
    # The weak-scaling arithmetic (2 x 16 images per step) gives another figure: not this sweep's.
    assert rows["2"]["projected throughput (samples/s)"] != f"{2 * 16 / (16 / x + ring):,.2f}"
    assert "b(N) = 16 / N (strong scaling: fixed global batch)" in markdown
    assert f"S = {GRADIENT['gradient_bytes']:,} bytes" in markdown
    assert "the plateau is their median, 2.000 GB/s" in markdown and "NO PLATEAU" not in markdown
    assert "stands in" not in markdown


def test_projection_of_a_weak_scaling_sweep_by_hand(tmp_path):
    # The runs kept 16 images per rank: 16 on 1 rank, 2 x 16 on 2.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU, weak=True)
    x = per_rank_median(1, weak=True)
    ring = GRADIENT["gradient_bytes"] / (PLATEAU_BUSBW * 1e9)
    rows = projection_table(markdown)
    assert rows["2"]["per-rank batch (the sweep's)"] == "16"
    assert rows["2"]["projected throughput (samples/s)"] == f"{2 * 16 / (16 / x + ring):,.2f}"
    assert rows["2"]["projected efficiency"] == f"{100 * (16 / x) / (16 / x + ring):.1f}%"
    assert "b(N) = 16 (weak scaling: fixed per-GPU batch)" in markdown
    assert "weak scaling: the runs kept the per-rank batch at 16" in markdown
    # --scaling overrides what the runs say.
    strong = build(str(tmp_path / "again"), "--scaling", "strong", curve=WITH_PLATEAU, weak=True)
    # At the smallest scale's global batch: 16 images on one rank.
    assert "b(N) = 16 / N (strong scaling: fixed global batch)" in strong
    assert "as asked (--scaling strong)" in strong


def test_a_base_scale_of_several_ranks_has_its_own_allreduce_taken_out(tmp_path):
    # 2 and 4 ranks, 16 images per step: the 2-rank base's measured step already holds an allreduce.
    markdown = build(str(tmp_path / "sweep"), curve=WITH_PLATEAU, times={2: TIMES[2], 4: TIMES[2]},
                     status={2: STATUS[2], 4: STATUS[2]})
    busbw = PLATEAU_BUSBW * 2 * (4 - 1) / 4  # the plateau of the largest (4-rank) curve

    def ring(n):
        return 2 * (n - 1) / n * GRADIENT["gradient_bytes"] / (busbw * 1e9)

    compute_2 = 8 / per_rank_median(2) - ring(2)
    rows = projection_table(markdown)
    # The base is reproduced, not charged its allreduce twice.
    assert rows["2"]["projected throughput (samples/s)"] == \
        rows["2"]["measured throughput (samples/s, median over runs)"] == f"{16 / (compute_2 + ring(2)):,.2f}"
    assert rows["4"]["projected compute (ms)"] == f"{compute_2 / 2 * 1e3:.2f}"
    assert rows["4"]["projected throughput (samples/s)"] == f"{16 / (compute_2 / 2 + ring(4)):,.2f}"
    assert "with its own allreduce taken out" in markdown
    # 4 ranks do not fit the 2 slots of a node; no curve was measured across nodes.
    assert "the one-node plateau stands in for the network" in markdown


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


# ---- banners ----

def top_of(markdown):
    """What comes before the first section."""
    return markdown.split("\n## ", 1)[0]


def test_no_banner_for_a_sweep_fit_for_its_use(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU)
    assert report.banners(report.load_sweep(folder)) == []


def test_banner_for_too_few_runs(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU, runs={1: 5, 2: 3})
    found = report.banners(report.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith("NOT VALID FOR SUBMISSION")
    assert "requires 5 runs" in found[0] and f"{system(2)} 3" in found[0] and system(1) not in found[0]
    assert "found 3, expected 5" in found[0]
    result = report_cli(folder)
    assert result.returncode == 0 and "WARNING: NOT VALID FOR SUBMISSION" in result.stderr
    with open(os.path.join(folder, "report", "report.md")) as handle:
        assert "> **WARNING: NOT VALID FOR SUBMISSION" in top_of(handle.read())
    with open(os.path.join(folder, "report", "report.html")) as handle:
        page = handle.read()
    assert page.index('<div class="banner">') < page.index("<h2>")


def test_banner_for_too_few_timed_steps(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=WITH_PLATEAU, steps=report.MIN_TIMED_STEPS - 1)
    found = report.banners(report.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith("THROUGHPUT FROM TOO FEW STEPS")
    assert f"10 run(s) timed fewer than {report.MIN_TIMED_STEPS}" in found[0]
    assert f"{system(2)} run(s) 0, 1, 2, 3, 4: {report.MIN_TIMED_STEPS - 1} steps" in found[0]
    make_sweep(str(tmp_path / "enough"), curve=WITH_PLATEAU, steps=report.MIN_TIMED_STEPS)
    assert report.banners(report.load_sweep(str(tmp_path / "enough"))) == []


def test_banner_for_an_allreduce_curve_without_a_plateau(built):
    folder, markdown = built
    found = report.banners(report.load_sweep(folder))
    assert len(found) == 1 and found[0].startswith(f"ALLREDUCE CURVE NEVER REACHED ITS PLATEAU ({system(2)})")
    # 1.1 ms at 64K and at 1M: busbw rose 16x; the gradient of 94 MB wants --max-bytes 128M.
    assert "rose 1500%" in found[0] and '--max-bytes 128M' in found[0]
    assert "> **WARNING: ALLREDUCE CURVE NEVER REACHED" in top_of(markdown)


def test_a_curve_that_falls_at_its_end_is_not_called_rising(tmp_path):
    folder = str(tmp_path / "sweep")
    make_sweep(folder, curve=((1 << 19, 1.1e-3), (1 << 20, 4.8e-3)))
    found, = report.banners(report.load_sweep(folder))
    assert "bus bandwidth fell 54% between the two largest sizes" in found and "rose" not in found


# ---- plots: like with like ----

def legend_of(axes):
    return [text.get_text() for text in axes.get_legend().get_texts()]


def test_plots_show_what_they_label(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    # Two runs of the 1-process scale did not converge: it is unscored.
    status = {1: ["aborted", "success", "aborted", "success", "success"], 2: ["success"] * 5}
    folder = str(tmp_path / "sweep")
    make_sweep(folder, allreduce="every scale", status=status)
    data = report.load_sweep(folder)
    ttt = report._plot_ttt(plt, data, 10.0, "auto").axes[0]
    labels = legend_of(ttt)
    for label in labels:
        drawn = [line for line in ttt.get_lines() if line.get_label() == label]
        assert len(drawn) == 1 and len(drawn[0].get_xdata()) == 1, label
    assert "olympic mean (MLPerf)" in labels and "run (not converged)" in labels
    assert any(label.startswith("unscored") for label in labels)
    assert [t.get_text() for t in ttt.texts] == ["unscored"]
    scaling_axes = report._plot_scaling(plt, data, 10.0, "auto").axes
    assert not [label for axes in scaling_axes for label in legend_of(axes) if "published" in label.lower()]
    allreduce = report._plot_allreduce(plt, data, 10.0, "auto").axes[0]
    assert [line.get_label() for line in allreduce.get_lines()] == [system(2)]
    plt.close("all")


def test_ttt_legend_has_no_entry_for_what_is_not_drawn(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = str(tmp_path / "sweep")
    make_sweep(folder, status={1: ["success"] * 5, 2: ["success"] * 5})
    labels = legend_of(report._plot_ttt(plt, report.load_sweep(folder), 10.0, "auto").axes[0])
    assert labels == ["run (converged)", "olympic mean (MLPerf)",
                      "olympic mean of run times (status ignored)"]
    plt.close("all")


def test_a_single_process_scale_has_no_allreduce_rows(tmp_path):
    markdown = build(str(tmp_path / "sweep"), allreduce="every scale")
    rows = table_with(markdown, "busbw (GB/s)")
    assert rows and {row["system"] for row in rows} == {system(2)}
    assert f"{system(1)}: one process, so nothing crosses a link" in markdown


# ---- where the efficiency went ----

PART_COLUMNS = ("compute", "exposed allreduce", "input wait", "rank imbalance")


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
    base = report.StepSplit("a", 1, 0, 32, 100.0, {"compute_ms": 70.0, "exposed_allreduce_ms": 0.0,
                                                   "input_wait_ms": 30.0, "imbalance_ms": 0.0}, "")
    other = report.StepSplit("b", 4, 3, 8, 41.0, {"compute_ms": 19.5, "exposed_allreduce_ms": 11.25,
                                                  "input_wait_ms": 2.0, "imbalance_ms": 8.25}, "")
    loss = report.efficiency_loss(base, other)
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


def test_the_attribution_plot_stacks_what_the_table_says(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    folder = make_sweep(str(tmp_path / "sweep"), split=STRONG_SPLIT)
    step, lost = report._plot_attribution(plt, report.load_sweep(folder), 10.0, "auto").axes
    assert legend_of(step) == list(PART_COLUMNS)
    heights = [(bar.get_x(), bar.get_height()) for bar in step.patches]
    assert sum(h for x, h in heights if x > 0.5) == pytest.approx(60.0)  # the 2-process bar: its step
    points = {part: bar for part, bar in zip(PART_COLUMNS, lost.patches[1::2])}  # the 2-process bars
    assert points["input wait"].get_height() == pytest.approx(-100 / 60) and points["input wait"].get_y() == 0
    assert sum(bar.get_height() for bar in points.values()) == pytest.approx(100 * (1 - 0.5 * 100 / 60))
    plt.close("all")


# ---- published rows ----

def test_published_rows_link_public_sources_and_recompute_from_their_runs(built):
    _, markdown = built
    rows = table_with(markdown, "published system")
    for row in rows:
        assert re.search(r"\]\(https://[^)]+\)", row["source"]), row["source"]
    listed = [row for row in rows if row["runs (min, run_stop − run_start)"] != "not listed"]
    assert len(listed) == 2
    for row in listed:
        runs = [float(v) for v in row["runs (min, run_stop − run_start)"].split(", ")]
        assert len(runs) == {"resnet": 5, "bert": 10}[row["benchmark"]]
        assert f"{olympic_by_hand(runs):.2f}" == row["time to train (min)"]
    for reference in report.REFERENCES:
        if reference.runs_ms:
            minutes = [ms / 60000 for ms in reference.runs_ms]
            assert round(olympic_by_hand(minutes), 2) == reference.minutes
    assert "tracker" not in markdown.lower()


def test_published_ratios_are_a_table_of_their_own(built):
    _, markdown = built
    ratio, = table_with(markdown, "time-to-train ratio")
    assert ratio["time-to-train ratio"] == f"31.5 / 10.67 = {31.5 / 10.67:.2f}x"
    assert ratio["GPUs"] == "8 → 32"


# ---- report.html in a real browser ----

# Appended to a copy of the page: after load, what the browser made of every image and table.
RENDER_CHECK = """<script>
window.addEventListener("load", function () {
  var images = Array.prototype.map.call(document.images, function (img) {
    return {alt: img.alt, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight};
  });
  var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (table) {
    var cells = table.querySelectorAll("thead th");
    return {header: Array.prototype.map.call(cells, function (th) { return th.textContent; }),
            rows: table.querySelectorAll("tbody tr").length};
  });
  var banners = document.querySelectorAll("div.banner").length;
  var out = document.createElement("pre");
  out.id = "render-check";
  out.textContent = JSON.stringify({images: images, tables: tables, banners: banners});
  document.body.appendChild(out);
});
</script>
"""


def chromium():
    """Debian's chromium; CI must have it (scripts/setup.sh installs it), elsewhere its absence skips."""
    import shutil
    found = shutil.which("chromium")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("chromium is required in CI to render report.html (scripts/setup.sh installs it)")
    pytest.skip("no chromium on this machine (apt-get install chromium)")


def render(page_path, tmp_path):
    """What headless chromium saw once the page loaded: {images, tables, banners}."""
    import html as htmllib
    with open(page_path) as handle:
        page = handle.read()
    checked = tmp_path / "checked.html"
    checked.write_text(page.replace("</body>", RENDER_CHECK + "</body>"))
    result = run([chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                  f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
                  checked.as_uri()], timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="render-check">(.*?)</pre>', result.stdout, re.S)
    assert found, "the page's load handler never ran: " + result.stdout[-2000:]
    return json.loads(htmllib.unescape(found.group(1)))


def test_report_html_renders_in_a_browser(built, tmp_path):
    folder, markdown = built
    out = os.path.join(folder, "report")
    seen = render(os.path.join(out, "report.html"), tmp_path)
    pngs = sorted(name for name in os.listdir(out) if name.endswith(".png"))
    assert len(seen["images"]) == len(pngs) == 6
    for image in seen["images"]:
        assert image["complete"] and image["width"] >= 600 and image["height"] >= 350, image
    # Every table of report.md is in the page, in order, with its header and its rows.
    assert [(t["header"], t["rows"]) for t in seen["tables"]] == \
        [(header, len(rows)) for header, rows in tables(markdown)]
    assert seen["banners"] == len(report.banners(report.load_sweep(folder))) == 1


def test_the_browser_check_sees_a_broken_image(built, tmp_path):
    folder, _ = built
    with open(os.path.join(folder, "report", "report.html")) as handle:
        page = handle.read()
    broken = tmp_path / "broken.html"
    broken.write_text(page.replace('src="data:image/png;base64,', 'src="data:image/png;base64,AAAA', 1))
    seen = render(str(broken), tmp_path)
    assert [image["width"] for image in seen["images"]].count(0) == 1
