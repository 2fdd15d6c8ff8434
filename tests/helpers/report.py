"""Hand-made sweep folders for suite.cluster.report (no TensorFlow), and the parsers and builders of
what it writes, which every tests/test_report*.py shares."""
import json
import os
import sys

from helpers.running import run
from suite.cluster import report

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


# The four parts of a step, as the report's columns name them.
PART_COLUMNS = ("compute", "exposed allreduce", "input wait", "rank imbalance")


def attribution_record(parts, index):
    if "method" in parts:
        return parts  # given whole (a run without a split)
    scaled = {key: value * RUN_FACTORS[index] for key, value in parts.items()}
    return {"method": "horovod timeline window", "step_ms": sum(scaled.values()), **scaled}


def make_sweep(folder, slow_rank=None, allreduce=True, runs=None, weak=False, steps=None,
               curve=LATENCY_FLOOR, times=None, status=None, split=None, backends=None):
    """A sweep folder as suite.cluster.sweep leaves it, with known times.

    runs: {np: how many of the planned 5 runs are there}; the 1-process scale gets an allreduce
    record too when allreduce is "every scale" (the sweep measures each scale). split: {np: the step's
    parts} for summary.json's attribution (none for a process count it leaves out). backends: {name:
    {np: slowdown}} for a sweep run under each distribution backend (--distributions): every scale once
    per backend, system <system>_<name>, its runs, step parts and samples/s `slowdown` times as long and
    as slow (1 for a process count not given); without it the plan records no backend, as a sweep of a
    suite with Horovod alone.
    """
    times, status = times or TIMES, status or STATUS
    scales = []
    for np, minutes in times.items():
        for backend, slowdown in (backends or {None: {}}).items():
            name = system(np) + (f"_{backend}" if backend else "")
            factor = slowdown.get(np, 1.0)
            scales.append({"system": name, "np": np, "nodes": 1, "hostfile": "hostfiles/localhost",
                           "hosts": [{"name": "localhost", "slots": 2}], "preset": "sweep_cpu",
                           **({"distribution": backend} if backend else {})})
            for index, value in enumerate(minutes[:(runs or {}).get(np, len(minutes))]):
                write(os.path.join(folder, SUBMITTER, "results", name, BENCH, f"result_{index}.txt"),
                      log_text(value * factor, status[np][index], start=START_MS + index * 3_600_000))
                run_dir = os.path.join(folder, "runs", name, f"run_{index}")
                recorded = summary(np, index, slow_rank if np == 2 else None, weak=weak, steps=steps)
                recorded["samples_per_second_total"] /= factor
                recorded["samples_per_second_per_rank"] /= factor
                if np in (split or {}):
                    parts = split[np] if "method" in split[np] else \
                        {key: value * factor for key, value in split[np].items()}
                    recorded["attribution"] = attribution_record(parts, index)
                if backend:
                    recorded["distribution"] = backend
                write(os.path.join(run_dir, "summary.json"), json.dumps(recorded))
                write(os.path.join(run_dir, "config.json"), json.dumps({"config": {"fp16_allreduce": False}}))
                if np > 1:
                    write(os.path.join(run_dir, "env.json"), json.dumps(network_env(index)))
            if allreduce and (np > 1 or allreduce == "every scale"):
                write(os.path.join(folder, "runs", name, "allreduce.json"),
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
    """Time to train straight from a log, independently of suite.common.results."""
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


def top_of(markdown):
    """What comes before the first section."""
    return markdown.split("\n## ", 1)[0]


# ---- bad input: one line, exit 2, nothing already written damaged ----
