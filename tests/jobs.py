"""Watching a job from outside: its processes, its log's progress, a bounded wait."""
import os
import time

import pytest


def processes_of(run_dir):
    """Pids whose command line names the run directory (the launcher, horovodrun, mpirun, the ranks)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if str(run_dir).encode() in handle.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return [pid for pid in found if pid != os.getpid()]


def wait_for(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def started(run_dir):
    log = run_dir / "result_0.txt"
    return log.exists() and '"key": "run_start"' in log.read_text() and (run_dir / "env.json").exists()


def alive(pid):
    """True while pid runs (a zombie, dead but not yet reaped by its new parent, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False
