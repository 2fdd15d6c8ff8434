"""How a failed run must look from outside: one error line and no traceback, each rank's tagged lines
ending on an error, and the MLPerf log aborted, or never started."""
import os
import re

from helpers.runs import read_log

# TensorFlow/absl start-up noise: "2026-11-29 23:08:42.877123: I ...", "E0000 00:00:...".
NOISE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d|[EWIF]\d{4} |WARNING: All log messages before absl)")
# Launchers tag each rank's lines: mpirun "[1,0]<stderr>:", horovodrun (Gloo) "[0]<stderr>:".
# mpirun sometimes also appends a stray tag after the text, so tags are split out anywhere.
TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<(stdout|stderr)>:")
TRACEBACK = "Traceback (most recent call last)"


def meaningful(lines):
    return [line for line in lines if line.strip() and not NOISE.match(line)]


def last_line(stderr):
    lines = meaningful(stderr.splitlines())
    assert lines, "nothing on stderr"
    return lines[-1]


def rank_lines(output, stream="stderr"):
    """{rank: [lines]} from a launcher's tagged output (untagged lines, the launcher's own, are dropped)."""
    ranks = {}
    for raw in output.splitlines():
        parts = TAG.split(raw)
        # re.split with two groups: [before, rank, stream, text, rank, stream, text, ...]
        for i in range(1, len(parts) - 2, 3):
            if parts[i + 1] == stream and parts[i + 2].strip():
                ranks.setdefault(int(parts[i]), []).append(parts[i + 2])
    return {rank: meaningful(lines) for rank, lines in ranks.items()}


def assert_one_line_error(result, *culprits, code=None):
    """One process: non-zero (or the given) exit, no traceback, last stderr line an error naming culprits."""
    shown = result.stdout[-2000:] + result.stderr[-3000:]
    assert result.returncode != 0, shown
    if code is not None:
        assert result.returncode == code, shown
    assert TRACEBACK not in result.stderr, shown
    line = last_line(result.stderr)
    assert line.startswith("error"), shown
    for culprit in culprits:
        assert culprit in line, f"{culprit!r} not named in: {line}"
    return line


def assert_ranks_report(result, *culprits, failing=(0,)):
    """Launcher: non-zero exit, no traceback from any rank, and the ranks in `failing` end on an error.

    A rank that hit the problem prints `error ...` naming the culprits; one that noticed through
    Horovod says it stopped because another rank failed, rank 0 (told by the rank watch) which rank on
    which host failed and why; one the launcher stopped first says it was stopped by SIGTERM, or
    nothing of its own (or the shell's "Terminated").
    """
    shown = result.stdout[-2000:] + result.stderr[-4000:]
    assert result.returncode != 0, shown
    per_rank = rank_lines(result.stderr)
    for rank, lines in per_rank.items():
        assert not any(TRACEBACK in line for line in lines), shown
        line = lines[-1] if lines else ""
        if line.startswith("error") or rank in failing:
            assert line.startswith("error"), f"rank {rank} did not end on an error:\n{shown}"
            for culprit in culprits:
                assert culprit in line, f"{culprit!r} not named by rank {rank}: {line}"
        else:
            assert line in ("", "Terminated", f"rank {rank}: stopped because another rank failed") \
                or line.startswith(f"rank {rank}: stopped by SIGTERM") \
                or re.match(rf"rank {rank}: stopped because rank \d+ on host \S+ failed: .+", line), shown
    assert set(failing) <= set(per_rank), shown


def assert_aborted(run_dir):
    """The run had started: the MLPerf log ends with exactly one run_stop, status aborted."""
    events = read_log(os.path.join(run_dir, "result_0.txt"))
    keys = [e["key"] for e in events]
    assert keys.count("run_start") == 1, keys
    assert keys.count("run_stop") == 1, keys
    assert keys[-1] == "run_stop", keys
    assert events[-1]["metadata"]["status"] == "aborted", events[-1]
    return events[-1]["metadata"].get("reason", "")


def assert_not_started(run_dir):
    """Failed before run_start: no run_start or run_stop in the log, if there is a log at all."""
    path = os.path.join(run_dir, "result_0.txt")
    if os.path.exists(path):
        keys = [e["key"] for e in read_log(path)]
        assert "run_start" not in keys and "run_stop" not in keys, keys
