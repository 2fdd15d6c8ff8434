"""The README's main job (`make demo`): 2 Horovod processes learn the generated set; the log passes."""
import pytest

from conftest import REPO, check_log, read_json, read_log, run

STATED_ACCURACY = 0.9  # README: the tiny learnable preset reaches 0.9 top-1 (4 classes, chance 0.25)


@pytest.mark.slow
def test_make_demo_learns_and_passes_the_checker(tmp_path):
    demo = tmp_path / "demo"
    result = run(["make", "-C", REPO, "demo", f"DEMO={demo}"], timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"MLPerf log: {demo}/run/result_0.txt" in result.stdout
    summary = read_json(demo / "run" / "summary.json")
    assert summary["world_size"] == 2 and summary["weights_in_sync"]
    assert summary["status"] == "success" and summary["accuracy"] >= STATED_ACCURACY, summary["evals"]
    events = read_log(demo / "run" / "result_0.txt")
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "success"
    assert [e for e in events if e["key"] == "submission_division"][0]["value"] == "open"
    for ruleset in ("1.1.0", "2.1.0"):
        passed, output = check_log(demo / "run" / "result_0.txt", ruleset)
        assert passed, output
