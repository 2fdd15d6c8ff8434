"""Faults on this machine: a SIGTERM to the suite's launcher ends the job with a closed log.

The faults that involve a second host (a rank killed there) are in test_two_hosts.py.
"""
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.jobs import alive, assert_ends_closed, long_training, start_long_run
from helpers.running import REPO, TINY, run, subprocess_env, train_cmd
from helpers.runs import read_json, read_log

# How long the job may take to end once the launcher was told to stop.
STOP_BOUND_SECONDS = 30


# The main thread blocks in a C call that does not return when a signal arrives, as a rank does
# inside a TensorFlow op waiting for a collective: glibc's system() retries its wait after EINTR, and
# ctypes releases the GIL meanwhile. A Python-level handler would never run; the watcher must act.
BLOCKED = """
import ctypes, sys
from suite.train import signals
def closed(signum):
    with open(sys.argv[1], "w") as handle:
        handle.write(signals.name(signum))
signals.Watcher(closed).start()
print("ready", flush=True)
ctypes.CDLL(None).system(b"sleep 60")
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_the_watcher_acts_while_the_main_thread_is_blocked_in_c(signum, tmp_path):
    marker = tmp_path / "closed"
    process = subprocess.Popen([sys.executable, "-c", BLOCKED, str(marker)], cwd=REPO, env=subprocess_env(),
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert process.stdout.readline() == "ready\n"
        time.sleep(0.5)  # into system()
        process.send_signal(signum)
        assert process.wait(timeout=10) == 128 + signum
        assert marker.read_text() == signal.Signals(signum).name
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the orphaned `sleep 60`


@pytest.mark.slow
@pytest.mark.serial  # the 30 s stop bound, with the job training on both cores
def test_sigterm_to_the_launcher_stops_the_job_with_run_stop(small_data, tmp_path):
    """A batch system's SIGTERM reaches suite.cluster.launch only: it passes it on, rank 0 closes the log."""
    run_dir = tmp_path / "run"
    launch = [sys.executable, "-m", "suite.cluster.launch", "--hostfile", "hostfiles/localhost",
              "--profile", "local-cpu"]
    job = start_long_run([*launch, "--", "models.resnet50", *long_training(small_data, run_dir)], run_dir)
    pids = [rank["pid"] for rank in read_json(run_dir / "env.json")["ranks"]]
    job.send_signal(signal.SIGTERM)
    code, last, output = assert_ends_closed(job, run_dir, time.time(), STOP_BOUND_SECONDS)
    assert code == 128 + signal.SIGTERM, output[-3000:]
    assert last["metadata"]["reason"].startswith("stopped by SIGTERM from the launcher")
    assert "rank 0: stopped by SIGTERM (run_stop aborted written)" in output
    assert not [pid for pid in pids if alive(pid)]


@pytest.mark.slow
def test_a_nan_loss_ends_the_run_on_every_rank_at_the_same_step(small_data, tmp_path):
    """Weights poisoned after step 1: step 2's loss is NaN on both ranks, and both stop there."""
    run_dir = tmp_path / "run"
    result = run(train_cmd(*TINY, "--set", "poison_weights_at_step=1", "--data-dir", small_data,
                           "--run-dir", str(run_dir), launcher=("horovodrun", "--gloo"), np=2), timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    last = read_log(run_dir / "result_0.txt")[-1]
    cause = "the loss is not finite (NaN or infinite) at step 2 on 2 rank(s)"
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"
    assert last["metadata"]["reason"].startswith(cause), last
    # One line for the job, from rank 0; the other rank reached the same verdict and stops quietly.
    errors = [line for line in output.splitlines() if "error (rank" in line]
    assert len(errors) == 1 and f"error (rank 0): {cause}" in errors[0], output[-3000:]
    assert read_json(run_dir / "config.json")["division"] == "open"
