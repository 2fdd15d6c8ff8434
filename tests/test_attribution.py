"""Scaling-loss attribution (suite/train/attribution.py) on hand-made timelines and timer intervals.

The timelines are written the way Horovod 0.28.1 writes them (horovod/common/timeline.cc): one
"process" per tensor, a NEGOTIATE_ALLREDUCE span (with one instant per rank while the coordinator
negotiates, none once the response is cached), then the ALLREDUCE span with its activities; µs.
"""
import json
import os
from types import SimpleNamespace

import pytest

from suite.train import attribution

ORIGIN_US = 1_700_000_000_000_000  # the timeline's ts 0 on the wall clock

# Two ranks, three gradient tensors, two steps: per tensor, when each rank had it ready and the
# allreduce's (start, end).
#
# Step 1: c is the last tensor ready (7000, rank 0); rank 1 had it at 5000.
#   exposed allreduce = last end 9000 - last ready 7000 = 2000
#   imbalance = 7000 - 5000 = 2000 (rank 0 waited 0, rank 1 waited 2000)
# Step 2: c is the last ready (25500, rank 1); rank 0 had it at 25000.
#   exposed = 28500 - 25500 = 3000; imbalance = 500 (rank 0 waited 500, rank 1 0)
# Over the window: exposed 2.5 ms, imbalance 1.25 ms; rank 0 waited 0.25 ms, rank 1 1.0 ms.
STEP_1 = {"a": ({0: 1000, 1: 1500}, (1510, 2500)),
          "b": ({0: 3000, 1: 4000}, (4010, 5000)),
          "c": ({0: 7000, 1: 5000}, (7010, 9000))}
STEP_2 = {"a": ({0: 20000, 1: 20400}, (20410, 21000)),
          "b": ({0: 22000, 1: 23000}, (23010, 24000)),
          "c": ({0: 25000, 1: 25500}, (25510, 28500))}
EXPOSED_MS, IMBALANCE_MS, WAITS_MS = 2.5, 1.25, {0: 0.25, 1: 1.0}

# Every rank's timer over the steady intervals: rank 0 20 ms steps, 10 % of them waiting for input
# (2 ms); rank 1 20.4 ms, 5 % (1.02 ms).
TIMERS = [{"steps_timed": 10, "step_ms_mean": 20.0, "data_wait_fraction": 0.1},
          {"steps_timed": 10, "step_ms_mean": 20.4, "data_wait_fraction": 0.05}]
# Compute is the rest: rank 0 20 - 2 - 2.5 - 0.25 = 15.25; rank 1 20.4 - 1.02 - 2.5 - 1.0 = 15.88.
# The job: step 20.2, input wait 1.51, so compute = 20.2 - 1.51 - 2.5 - 1.25 = 14.94.
COMPUTE_MS = {0: 15.25, 1: 15.88}
JOB = {"step_ms": 20.2, "input_wait_ms": 1.51, "exposed_allreduce_ms": 2.5, "imbalance_ms": 1.25,
       "compute_ms": 14.94}


def tensor_events(name, ready, reduce, per_rank=True, waits_for_data=None):
    """(ts, event) pairs of one tensor in one step, as the coordinator records them."""
    events = [(min(ready.values()), {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "tensor": name})]
    if per_rank:
        events += [(ts, {"ph": "X", "name": str(rank), "dur": 0, "tensor": name})
                   for rank, ts in ready.items()]
    start, end = reduce
    events += [(max(ready.values()), {"ph": "E", "tensor": name}),
               (start, {"ph": "B", "name": "ALLREDUCE", "tensor": name})]
    inner = start + 1
    if waits_for_data:
        events += [(inner, {"ph": "B", "name": "WAIT_FOR_DATA", "tensor": name}),
                   (waits_for_data, {"ph": "E", "tensor": name})]
        inner = waits_for_data + 1
    events += [(inner, {"ph": "B", "name": "MEMCPY_IN_FUSION_BUFFER", "tensor": name}),
               (inner + 1, {"ph": "E", "tensor": name}),
               (inner + 2, {"ph": "B", "name": "GLOO_ALLREDUCE", "tensor": name}),
               (end - 1, {"ph": "E", "tensor": name}),
               (end, {"ph": "E", "tensor": name, "args": {"dtype": "float32", "shape": "[4]"}})]
    return events


def step_events(step, per_rank=True, **options):
    return [pair for name, (ready, reduce) in step.items()
            for pair in tensor_events(name, ready, reduce, per_rank, **options.get(name, {}))]


def write_timeline(path, pairs, truncate_at=None):
    """Horovod's file: a header, each tensor named ("process_name") where it first appears, then its events.

    Events are written in time order, each closing the JSON array (Horovod seeks back over the ']').
    """
    records = [{"name": "process_name", "ph": "M", "pid": 0,
                "args": {"start_time_since_epoch_in_micros": ORIGIN_US}},
               {"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}}]
    pids = {}
    for ts, event in sorted(pairs, key=lambda pair: pair[0]):
        event = dict(event)
        name = event.pop("tensor")
        if name not in pids:
            pids[name] = len(pids) + 1
            records += [{"name": "process_name", "ph": "M", "pid": pids[name], "args": {"name": name}},
                        {"name": "process_sort_index", "ph": "M", "pid": pids[name],
                         "args": {"sort_index": pids[name]}}]
        records.append({**event, "ts": ts, "pid": pids[name]})
    text = "[\n" + ",\n".join(json.dumps(r) for r in records) + "]"
    with open(path, "w") as handle:
        handle.write(text[:truncate_at])
    return str(path)


def window_record(path, own_file=True, **extra):
    return {"recorded": True, "reason": None, "after_timed_steps": 5, "steps": 2, "path": str(path),
            "own_file": own_file, **extra}


# ---- the timeline arithmetic ----

def test_per_rank_timeline_splits_each_step():
    """While the coordinator negotiates (first step, or no response cache) it names every rank."""
    splits, why = attribution.window_splits(_events(step_events(STEP_1) + step_events(STEP_2)), 2)
    assert why is None
    assert [(s.exposed, s.imbalance) for s in splits] == [(2000, 2000), (3000, 500)]
    assert [s.waits for s in splits] == [{0: 0, 1: 2000}, {0: 500, 1: 0}]


def test_cached_timeline_gives_the_job_figures_but_no_rank_of_its_own():
    """With Horovod's response cache the timeline only marks the first and the last rank ready."""
    pairs = step_events(STEP_1, per_rank=False) + step_events(STEP_2, per_rank=False)
    splits, _ = attribution.window_splits(_events(pairs), 2)
    assert [(s.exposed, s.imbalance, s.waits) for s in splits] == [(2000, 2000, None), (3000, 500, None)]


def test_steps_cut_at_either_edge_of_the_window_are_left_out(tmp_path):
    """Step 0 began before the window (c's negotiation has lost its start); step 3 is still negotiating.

    c is cut in step 0, so its first complete occurrence is step 1's; counted as step 0's, every step
    after would mix two steps.
    """
    step_0 = [pair for name, (ready, reduce) in {"a": ({0: 100, 1: 150}, (160, 300)),
                                                 "b": ({0: 310, 1: 320}, (330, 400))}.items()
              for pair in tensor_events(name, ready, reduce, per_rank=False)]
    c_cut = [pair for pair in tensor_events("c", {0: 450, 1: 500}, (510, 900), per_rank=False)
             if pair[1]["ph"] != "B" or pair[1]["name"] != "NEGOTIATE_ALLREDUCE"]
    step_3 = [(40000, {"ph": "B", "name": "NEGOTIATE_ALLREDUCE", "tensor": "a"})]
    path = write_timeline(tmp_path / "tl.json", step_0 + c_cut + step_events(STEP_1, per_rank=False)
                          + step_events(STEP_2, per_rank=False) + step_3)
    splits, why = attribution.window_splits(attribution.read_events(path), 2)
    assert why is None
    assert [(s.exposed, s.imbalance) for s in splits] == [(2000, 2000), (3000, 500)]


def test_a_gpu_tensor_still_computing_is_not_counted_as_exposed_allreduce():
    """Step 2's c reached Horovod at 25500 but its data was ready only at 27000 (WAIT_FOR_DATA)."""
    pairs = step_events(STEP_1) + step_events(STEP_2, c={"waits_for_data": 27000})
    splits, _ = attribution.window_splits(_events(pairs), 2)
    assert [s.exposed for s in splits] == [2000, 28500 - 27000]


def test_a_window_without_a_complete_step_says_why():
    nothing = attribution.window_splits(_events([]), 2)
    assert nothing == ([], "the timeline window holds no complete allreduce")
    only_a = [pair for pair in step_events(STEP_1) if pair[1]["tensor"] == "a"]
    half = only_a + [pair for pair in step_events(STEP_2) if pair[1]["tensor"] != "c"]
    assert attribution.window_splits(_events(half), 2)[1] == \
        "the timeline window holds no complete step (every tensor once)"


def test_a_file_still_being_written_is_read_as_far_as_it_is_complete(tmp_path):
    pairs = step_events(STEP_1) + step_events(STEP_2)
    whole = attribution.read_events(write_timeline(tmp_path / "whole.json", pairs))
    text = (tmp_path / "whole.json").read_text()
    cut_at = text.index('"ts": 25510')  # in the middle of step 2's last allreduce
    partial = attribution.read_events(write_timeline(tmp_path / "partial.json", pairs, truncate_at=cut_at))
    assert 0 < len(partial) < len(whole) and partial == whole[:len(partial)]
    splits, _ = attribution.window_splits(partial, 2)
    assert [(s.exposed, s.imbalance) for s in splits] == [(2000, 2000)]
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(attribution.TimelineError, match="list.json: not a Horovod timeline"):
        attribution.read_events(str(tmp_path / "list.json"))


# ---- summary.json's record ----

def test_attribute_adds_the_timer_and_the_timeline_up(tmp_path):
    path = write_timeline(tmp_path / "tl.json", step_events(STEP_1) + step_events(STEP_2))
    record = attribution.attribute(window_record(path), TIMERS, world_size=2)
    assert record["method"] == "horovod timeline window"
    assert record["window"] == {"after_timed_steps": 5, "steps": 2, "path": path, "own_file": True,
                                "steps_split": 2}
    for key, value in JOB.items():
        assert record[key] == pytest.approx(value), key
    for rank in record["ranks"]:
        assert rank["imbalance_ms"] == pytest.approx(WAITS_MS[rank["rank"]])
        assert rank["compute_ms"] == pytest.approx(COMPUTE_MS[rank["rank"]])
        parts = ("compute_ms", "exposed_allreduce_ms", "input_wait_ms", "imbalance_ms")
        assert sum(rank[part] for part in parts) == pytest.approx(rank["step_ms"])


def test_cached_timeline_leaves_each_ranks_own_wait_unknown(tmp_path):
    path = write_timeline(tmp_path / "tl.json", step_events(STEP_1, False) + step_events(STEP_2, False))
    record = attribution.attribute(window_record(path), TIMERS, world_size=2)
    assert record["imbalance_ms"] == pytest.approx(IMBALANCE_MS)
    assert record["exposed_allreduce_ms"] == pytest.approx(EXPOSED_MS)
    assert [(r["imbalance_ms"], r["compute_ms"]) for r in record["ranks"]] == [(None, None), (None, None)]
    assert [r["input_wait_ms"] for r in record["ranks"]] == pytest.approx([2.0, 1.02])


def test_a_users_whole_run_timeline_is_read_over_the_window_only(tmp_path):
    """HOROVOD_TIMELINE named a file: the run's whole timeline, of which the window is steps 1 and 2."""
    # Step 3, after the window (exposed 3000, imbalance 500), and a tensor just before it.
    later = {name: ({r: ts + 30000 for r, ts in ready.items()}, (s + 30000, e + 30000))
             for name, (ready, (s, e)) in STEP_2.items()}
    earlier = {name: ({r: ts - 900 for r, ts in ready.items()}, (s - 900, e - 900))  # overlaps step 1
               for name, (ready, (s, e)) in {"a": ({0: 1000, 1: 1010}, (1020, 1030))}.items()}
    path = write_timeline(tmp_path / "run.json", step_events(earlier) + step_events(STEP_1)
                          + step_events(STEP_2) + step_events(later))
    window = window_record(path, own_file=False, started_epoch_s=(ORIGIN_US + 950) / 1e6,
                           stopped_epoch_s=(ORIGIN_US + 29000) / 1e6)
    record = attribution.attribute(window, TIMERS, world_size=2)
    assert record["window"]["steps_split"] == 2
    assert record["exposed_allreduce_ms"] == pytest.approx(EXPOSED_MS)
    assert record["imbalance_ms"] == pytest.approx(IMBALANCE_MS)


def test_one_rank_is_compute_and_input_wait_only():
    window = {"recorded": False, "reason": "one rank: nothing is negotiated or reduced"}
    record = attribution.attribute(window, TIMERS[:1], world_size=1)
    assert record["method"].startswith("one rank") and "window" not in record
    assert (record["exposed_allreduce_ms"], record["imbalance_ms"]) == (0.0, 0.0)
    assert record["compute_ms"] == pytest.approx(20.0 - 2.0)


def test_without_a_window_the_run_still_reports_step_and_input_wait(tmp_path):
    window = {"recorded": False, "reason": "the run had no step after its first timing interval (tracing and "
                                           "warm-up)"}
    record = attribution.attribute(window, TIMERS, world_size=2)
    assert record["method"] == "none" and "no step after its first timing interval" in record["reason"]
    assert record["step_ms"] == pytest.approx(20.2) and record["input_wait_ms"] == pytest.approx(1.51)
    assert [record[key] for key in ("compute_ms", "exposed_allreduce_ms", "imbalance_ms")] == [None] * 3
    missing = attribution.attribute(window_record(tmp_path / "gone.json"), TIMERS, world_size=2)
    assert missing["method"] == "none" and "gone.json" in missing["reason"]


def test_a_failing_analysis_never_fails_the_run():
    record = attribution.summarize({"recorded": True}, TIMERS, world_size=2)
    assert record["method"] == "none" and record["reason"].startswith("attribution failed: KeyError")


# ---- before hvd.init, and the window inside the loop ----

@pytest.mark.parametrize("env, expected", [
    ({"HOROVOD_SIZE": "2"}, "DYNAMIC"),
    ({"HOROVOD_SIZE": "2", "on": "cpu"}, None),  # the writer thread's spin would take a core
    ({"HOROVOD_SIZE": "2", "on": "cpu", "HOROVOD_TIMELINE": "DYNAMIC"}, "DYNAMIC"),  # asked for
    ({"OMPI_COMM_WORLD_SIZE": "4"}, "DYNAMIC"),
    ({"HOROVOD_SIZE": "1"}, None),
    ({"SLURM_NTASKS": "8"}, None),  # an sbatch script's lone process: srun sets the step's own count
    ({}, None),
    ({"HOROVOD_SIZE": "2", "HOROVOD_TIMELINE": "/results/tl.json"}, "/results/tl.json"),
])
def test_the_dynamic_timeline_is_enabled_for_multi_rank_gpu_jobs_only(env, expected):
    attribution.enable_timeline(env, gpu=env.pop("on", "gpu") == "gpu")
    assert env.get("HOROVOD_TIMELINE") == expected


class FakeHorovod:
    def __init__(self):
        self.calls = []

    def start_timeline(self, path, mark_cycles):
        self.calls.append(("start", path, mark_cycles))

    def stop_timeline(self):
        self.calls.append(("stop",))


def drive(window, timer, steps, evaluate_after=None):
    """The loop's calls: before_step, the timer's tick, after_step; stop() where a block ends."""
    for step in range(1, steps + 1):
        window.before_step()
        timer.add_wait(0.0)
        interval = timer.tick(SimpleNamespace(numpy=lambda: None))
        window.after_step(interval)
        if step == evaluate_after:
            window.stop()
            timer.flush(SimpleNamespace(numpy=lambda: None))


def make_window(tmp_path, every, size=2, root=True, env=None, cap=attribution.WINDOW_STEPS):
    from suite.train.loop import StepTimer
    timer = StepTimer(every=every, samples_per_step=16)
    hvd = FakeHorovod()
    world = SimpleNamespace(size=size, is_root=root)
    env = {"HOROVOD_TIMELINE": "DYNAMIC"} if env is None else env
    return attribution.Window(world, timer, str(tmp_path), steps=cap, env=env, horovod=hvd), timer, hvd


def test_the_window_is_the_second_timing_interval(tmp_path):
    """Intervals of 3 steps: the window opens before step 4 and closes with the interval after step 6."""
    window, timer, hvd = make_window(tmp_path, every=3)
    drive(window, timer, steps=9)
    path = str(tmp_path / attribution.TIMELINE_FILE)
    assert hvd.calls == [("start", path, False), ("stop",)]
    record = window.record()
    assert [record[key] for key in ("recorded", "after_timed_steps", "steps", "path")] == [True, 3, 3, path]


def test_the_window_is_capped_and_closes_before_an_evaluation(tmp_path):
    window, timer, hvd = make_window(tmp_path, every=5, cap=2)
    drive(window, timer, steps=12)
    assert window.record()["steps"] == 2 and len(hvd.calls) == 2
    window, timer, hvd = make_window(tmp_path, every=5)
    drive(window, timer, steps=7, evaluate_after=7)  # block ends at step 7 with 2 steps in the window
    assert window.record()["steps"] == 2 and [c[0] for c in hvd.calls] == ["start", "stop"]


def test_only_rank_0_records_and_one_rank_or_a_short_run_records_nothing(tmp_path):
    window, timer, hvd = make_window(tmp_path, every=2, root=False)
    drive(window, timer, steps=6)
    assert hvd.calls == [] and window.record()["steps"] == 2
    window, timer, hvd = make_window(tmp_path, every=2, size=1)
    drive(window, timer, steps=6)
    assert hvd.calls == [] and window.record()["reason"].startswith("one rank")
    window, timer, hvd = make_window(tmp_path, every=5)
    drive(window, timer, steps=5)
    assert hvd.calls == [] and "no step after its first timing interval" in window.record()["reason"]


def test_a_users_timeline_file_is_left_to_horovod(tmp_path):
    window, timer, hvd = make_window(tmp_path, every=2, env={"HOROVOD_TIMELINE": "/results/tl.json"})
    drive(window, timer, steps=6)
    record = window.record()
    assert hvd.calls == [] and (record["path"], record["own_file"]) == ("/results/tl.json", False)
    assert record["started_epoch_s"] < record["stopped_epoch_s"]


def _events(pairs):
    """The events as read back from a file written the way Horovod writes it."""
    import tempfile
    with tempfile.TemporaryDirectory() as folder:
        return attribution.read_events(write_timeline(os.path.join(folder, "tl.json"), pairs))


# ---- a real run ----
