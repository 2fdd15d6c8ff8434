"""Watching a job from outside: its processes, its log's progress, a bounded wait."""
import os
import subprocess
import tempfile
import time

import pytest

from helpers.running import REPO, TINY, subprocess_env
from helpers.runs import read_json, read_log


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


def link_bytes_while_training(read_counters, run_dir, job):
    """{host: (sent, received)} on the hosts' links from run_dir's run_start to its run_stop, read with
    read_counters() (host -> (sent, received) so far) while `job` runs. Not around the whole command:
    the link probe before run_start sends at the link's full rate for seconds, more than a short run's
    gradients, and would hide a host the allreduce left out. None when the run never started."""
    log = run_dir / "result_0.txt"
    before = after = None
    while after is None:
        ended = job.poll() is not None
        text = log.read_text() if log.exists() else ""
        if before is None and '"key": "run_start"' in text:
            before = read_counters()
        if before is not None and ('"key": "run_stop"' in text or ended):
            after = read_counters()
        elif ended:
            return None
        time.sleep(0.2)
    return {host: (after[host][0] - before[host][0], after[host][1] - before[host][1]) for host in after}


def run_watching_links(command, run_dir, env, read_counters, timeout):
    """Runs `command` from the repository to its end: (exit code, its output, the link bytes of
    link_bytes_while_training)."""
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as output:
        job = subprocess.Popen(command, cwd=REPO, env=env, stdout=output, stderr=subprocess.STDOUT, text=True)
        try:
            moved = link_bytes_while_training(read_counters, run_dir, job)
            job.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
        output.seek(0)
        return job.returncode, output.read(), moved


def assert_every_link_carried_the_gradients(run_dir, link_bytes):
    """However an allreduce over several hosts is done (a ring, halving and doubling, a tree), each
    host's share of the sum leaves it and the others' shares reach it: every step moves at least the
    gradient's size out of and into every host (link_bytes: host -> (sent, received) over the run's
    training). A host the allreduce left out moves next to nothing. One step is allowed for the
    counters being read every 0.2 s."""
    summary = read_json(run_dir / "summary.json")
    least = summary["gradient_bytes"] * (summary["steps"] - 1)
    assert link_bytes and least > 0, (link_bytes, summary["steps"])
    for host, (sent, received) in link_bytes.items():
        assert sent > least and received > least, (host, sent, received, least)


def start_long_run(command, run_dir, env=None):
    """A job that trains far longer than any test waits; returns once its run has started."""
    job = subprocess.Popen(command, cwd=REPO, env=env or subprocess_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: started(run_dir) or job.poll() is not None, 600, "run_start")
        assert job.poll() is None, _not_noise(job.stdout.read())[-3000:]
    except BaseException:
        if job.poll() is None:
            job.kill()
        raise
    return job


def long_training(small_data, run_dir):
    return [*TINY, "--set", "epochs=500", "--set", "epochs_between_evals=500", "--data-dir", small_data,
            "--run-dir", str(run_dir)]


def assert_ends_closed(job, run_dir, since, bound):
    """The job exits non-zero within bound seconds of `since`, its log closed as aborted, nothing left."""
    try:
        output, _ = job.communicate(timeout=bound)
    finally:
        if job.poll() is None:
            job.kill()
    wait_for(lambda: not processes_of(run_dir), bound - (time.time() - since), "every process to end")
    elapsed = time.time() - since
    assert elapsed < bound
    print(f"every process of the job ended {elapsed:.1f} s after the fault (bound {bound:.0f} s)")
    last = read_log(run_dir / "result_0.txt")[-1]
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted", (last, output[-3000:])
    return job.returncode, last, output


def _not_noise(output):
    """A failed start's output without TensorFlow's CUDA start-up lines, which bury the error."""
    noise = ("cuda", "absl::InitializeLog", "oneDNN", "TF_ENABLE_ONEDNN_OPTS", "cpu_feature_guard")
    return "\n".join(line for line in output.splitlines() if not any(word in line for word in noise))


def assert_killed_rank_named(code, last, output, rank, host):
    """A job ended by a killed rank: non-zero, and rank 0 names the rank and its host, in the log's
    run_stop and in its one error line."""
    assert code != 0, output[-3000:]
    named = f"rank {rank} on host {host} ended without a word (killed, or crashed)"
    assert last["metadata"]["reason"] == named, last
    errors = [line for line in output.splitlines() if "error (rank 0)" in line]
    assert len(errors) == 1 and named in errors[0], output[-3000:]
