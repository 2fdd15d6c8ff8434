"""What a real multi-rank run's step split (summary.json's attribution) must satisfy: its four parts add
up to the ranks' own step times, and no exposed allreduce outlasts the timeline's longest."""
import json

import pytest

from suite.train import attribution


PARTS = ("compute_ms", "exposed_allreduce_ms", "input_wait_ms", "imbalance_ms")


def assert_attribution_adds_up(summary):
    """A real multi-rank run's summary.json: the four parts add up to its ranks' own step times.

    Called on the demo's 2-rank run (tests/test_main_job.py) rather than on a run of its own.
    """
    record = summary["attribution"]
    assert record["method"] == "horovod timeline window", record
    timers = summary["ranks"]
    assert record["step_ms"] == pytest.approx(sum(r["step_ms_mean"] for r in timers) / len(timers))
    waits = [r["step_ms_mean"] * r["data_wait_fraction"] for r in timers]
    assert [r["input_wait_ms"] for r in record["ranks"]] == pytest.approx(waits)
    assert sum(record[part] for part in PARTS) == pytest.approx(record["step_ms"])
    assert record["compute_ms"] > 0 and record["exposed_allreduce_ms"] >= 0 and record["imbalance_ms"] >= 0
    window = record["window"]
    assert window["own_file"] and 1 <= window["steps_split"] <= window["steps"] <= attribution.WINDOW_STEPS
    # Read independently of the module: no step's exposed allreduce can be longer than the longest
    # time any tensor took from the end of its negotiation to the end of its allreduce.
    with open(window["path"]) as handle:
        events = json.load(handle)
    longest, negotiated, by_pid = 0, {}, {}
    for event in events:
        stack = by_pid.setdefault(event.get("pid"), [])
        if event["ph"] == "B":
            stack.append(event)
        elif event["ph"] == "E" and stack:
            begun = stack.pop()
            if begun["name"].startswith("NEGOTIATE_"):
                negotiated[event["pid"]] = event["ts"]
            elif not stack and event["pid"] in negotiated:
                longest = max(longest, event["ts"] - negotiated[event["pid"]])
    assert 0 < longest and record["exposed_allreduce_ms"] <= longest / 1000
