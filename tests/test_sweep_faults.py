"""Faults around the sweep: the guardian under each launch, cut-off writes, a full disk.

The kill -9 series and the SIGTERM/SIGINT stops of a real sweep share the expensive sweep of
test_sweep.py (its `swept` fixture); the tests here are fast.
"""
import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.jobs import alive, wait_for
from helpers.running import REPO, run, subprocess_env
from helpers.sweep import STOP_BOUND_SECONDS, temp_files
from suite.cluster import guardian
from suite.cluster.sweep import planning, running, submission
from suite.common import runfiles

LOCAL = ["--profile", "local-cpu", "--hostfile", "hostfiles/localhost", "--scales", "1,2",
         "--preset", "sweep_cpu", "--", "models.resnet50", "--data-dir", "/data"]
NO_SPACE = os.strerror(28)


def test_the_default_grace_fits_the_stop_bound():
    # Room after the grace for SIGKILL to land and the processes to be reaped.
    assert guardian.GRACE_SECONDS + 5 <= STOP_BOUND_SECONDS


# ---- the guardian ----

# A parent (the sweep's part) that starts a launch under a guardian, says what it started, and waits.
PARENT = """
import json, os, sys, time
from suite.cluster import guardian
process = guardian.start(json.loads(sys.argv[1]), dict(os.environ), sys.argv[2], grace=float(sys.argv[3]))
print(json.dumps({"guardian": process.pid, "group": guardian.launcher_group(process)}), flush=True)
time.sleep(600)
"""
# Background children in the launcher's group, and one in a session of its own that only the
# guardian's search below itself finds.
SLEEPERS = "sleep 300 & setsid sleep 301 & echo started; wait"
# A launcher that outlives SIGTERM and SIGINT: only SIGKILL ends it.
STUBBORN = "trap '' TERM INT HUP; echo started; while :; do sleep 0.2; done"


def start_parent(command, output, grace=guardian.GRACE_SECONDS):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, json.dumps(command), str(output), str(grace)],
                              cwd=REPO, env=subprocess_env(), stdout=subprocess.PIPE, text=True)
    job = json.loads(parent.stdout.readline())
    wait_for(lambda: "started" in output.read_text(), 30, "the launcher's first line")
    return parent, job


def under(job):
    return set(guardian.descendants(job["guardian"])) | set(guardian.group_members({job["group"]}))


def test_a_killed_parent_takes_the_launch_with_it(tmp_path):
    """SIGKILL to the sweep's side: the kernel tells the guardian, which stops the launcher's group and
    the child that left it, within the default bound."""
    output = tmp_path / "output.txt"
    parent, job = start_parent(["sh", "-c", SLEEPERS], output)
    try:
        sleepers = under(job)
        assert len(sleepers) >= 3, sleepers  # sh, sleep, sleep (setsid may show as its own process too)
        killed = time.time()
        parent.kill()
        parent.wait()
        wait_for(lambda: not alive(job["guardian"]) and not [p for p in sleepers if alive(p)],
                 STOP_BOUND_SECONDS, "the guardian and the launch to end")
        print(f"launch gone {time.time() - killed:.1f} s after its parent's SIGKILL")
    finally:
        _kill(job, parent)


def test_a_launcher_that_ignores_sigterm_is_killed_when_the_grace_is_over(tmp_path):
    output = tmp_path / "output.txt"
    process = guardian.start(["sh", "-c", STUBBORN], subprocess_env(), str(output), grace=1)
    group = guardian.launcher_group(process)
    try:
        wait_for(lambda: "started" in output.read_text(), 30, "the launcher's first line")
        stopped = time.time()
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(timeout=STOP_BOUND_SECONDS) == 128 + signal.SIGKILL
        assert time.time() - stopped >= 1  # it had its grace
        assert not guardian.group_members({group})
    finally:
        guardian.signal_group(group, signal.SIGKILL)
        guardian.signal_group(process.pid, signal.SIGKILL)


def _blocked_signals(pid):
    """{thread id: the signals it blocks} of every thread of pid, from /proc."""
    blocked = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as handle:
            mask = int(next(line.split()[1] for line in handle if line.startswith("SigBlk:")), 16)
        blocked[int(tid)] = {signum for signum in guardian.STOP_SIGNALS if mask >> (signum - 1) & 1}
    return blocked


def test_only_the_guardians_main_thread_takes_stop_signals(tmp_path):
    """The kernel gives a process's signal to any thread that does not block it; Python runs the
    handler in the main thread only, which sits in waitpid until the launcher ends: a signal taken by
    the output copier or the grace timer would never be passed on (seen once in ten stops)."""
    output = tmp_path / "output.txt"
    process = guardian.start(["sh", "-c", STUBBORN], subprocess_env(), str(output), grace=5)
    group = guardian.launcher_group(process)
    try:
        wait_for(lambda: "started" in output.read_text(), 30, "the launcher's first line")
        os.killpg(process.pid, signal.SIGTERM)

        # The main thread blocks them for a moment while it starts a thread, which inherits that mask.
        def settled():
            blocked = _blocked_signals(process.pid)
            return len(blocked) == 3 and not blocked[process.pid]

        wait_for(settled, 5, "the copier and the grace timer, and the main thread taking signals again")
        blocked = _blocked_signals(process.pid)
        del blocked[process.pid]
        assert list(blocked.values()) == [set(guardian.STOP_SIGNALS)] * 2
        assert process.wait(timeout=STOP_BOUND_SECONDS) == 128 + signal.SIGKILL
    finally:
        guardian.signal_group(group, signal.SIGKILL)
        guardian.signal_group(process.pid, signal.SIGKILL)


# A launcher that notes every stop signal it gets, and exits as a shell would a second later.
COUNTING = """
import signal, sys, time
def note(signum, frame):
    with open(sys.argv[1], "a") as handle:
        handle.write(signal.Signals(signum).name + "\\n")
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, note)
print("started", flush=True)
deadline = time.time() + 60
while time.time() < deadline and not open(sys.argv[1]).read():
    time.sleep(0.05)
time.sleep(1)
sys.exit(130)
"""


def test_the_first_stop_signal_is_passed_on_once_as_sigterm(tmp_path):
    """A second signal would make mpirun kill its ranks before they close their logs; a SIGINT would
    reach them only after mpirun's kill grace."""
    output, notes = tmp_path / "output.txt", tmp_path / "notes"
    notes.write_text("")
    process = guardian.start([sys.executable, "-c", COUNTING, str(notes)], subprocess_env(), str(output))
    group = guardian.launcher_group(process)
    try:
        wait_for(lambda: "started" in output.read_text(), 30, "the launcher's first line")
        for signum in (signal.SIGINT, signal.SIGINT, signal.SIGTERM):
            os.killpg(process.pid, signum)
        assert process.wait(timeout=STOP_BOUND_SECONDS) == 130
        assert notes.read_text() == "SIGTERM\n"
    finally:
        guardian.signal_group(group, signal.SIGKILL)


def test_the_output_goes_to_the_file_and_with_tee_to_stdout_too(tmp_path):
    output = tmp_path / "output.txt"
    process = guardian.start(["sh", "-c", "echo one; echo two >&2; exit 3"], subprocess_env(), str(output),
                             tee=True)
    assert guardian.launcher_group(process) > 0
    assert process.stdout.read() == "one\ntwo\n" and process.wait(timeout=30) == 3
    assert output.read_text() == "one\ntwo\n"


def test_a_guardian_whose_parent_is_already_gone_starts_nothing(tmp_path):
    """The parent died between starting it and its asking the kernel: it can no longer be told."""
    marker = tmp_path / "started"
    gone = subprocess.Popen(["true"])
    gone.wait()
    result = subprocess.run([sys.executable, "-I", guardian.__file__, "--parent", str(gone.pid), "--output",
                             str(tmp_path / "output.txt"), "--", "touch", str(marker)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert not marker.exists() and result.stdout == ""


def test_a_leftover_launch_is_stopped_only_where_it_names_the_run_directory(tmp_path):
    """Recorded groups are stopped when they name the run directory: run_1, not run_10."""
    mine = _sleeper_naming(tmp_path / "runs" / "run_1")
    other = _sleeper_naming(tmp_path / "runs" / "run_10")
    try:
        job = {"guardian": other.pid, "launcher_group": mine.pid}
        assert guardian.stop_leftover(job, str(tmp_path / "runs" / "run_1")) == 1
        assert mine.wait(timeout=5) == -signal.SIGTERM
        assert other.poll() is None
        assert guardian.stop_leftover({"guardian": 4194304}, str(tmp_path)) == 0  # no such process
    finally:
        for process in (mine, other):
            process.kill()
            process.wait()


def test_a_resume_stops_the_launch_an_earlier_sweep_left_before_setting_its_directory_aside(
        tmp_path, monkeypatch):
    """The manifest says running and names a live group whose processes name the run directory (its
    guardian was killed too): stopped first, then the directory set aside and the run redone."""
    plan = planned(tmp_path / "out")
    scale = plan.scales[0]
    run_dir = planning.run_dir(plan, scale, 0)
    os.makedirs(run_dir)
    os.makedirs(plan.results_dir(scale))
    leftover = _sleeper_naming(run_dir)
    record = {"system": scale.system, "index": 0, "attempts": 1, "status": "running",
              "job": {"guardian": 4194304, "launcher_group": leftover.pid}}
    manifest = {"plan": plan.plan(), "runs": {f"{scale.system}/0": record}, "allreduce": {}}
    launched, said = [], []

    def launch_run(sweep_, scale_, index, record_, manifest_, say, counter):
        launched.append(leftover.poll())  # the leftover must be gone by now
        os.makedirs(run_dir)
        with open(os.path.join(run_dir, runfiles.LOG_NAME), "w") as handle:
            handle.write(':::MLLOG {"key": "run_stop", "time_ms": 1}\n')
        runfiles.write_json(os.path.join(run_dir, "summary.json"), {})

    monkeypatch.setattr(running, "_launch_run", launch_run)
    try:
        running._one_run(plan, scale, 0, manifest, said.append, "[1/10]")
    finally:
        leftover.kill()
        leftover.wait()
    assert launched == [-signal.SIGTERM]
    assert os.path.isdir(run_dir + ".attempt") and record["status"] == "done" and "job" not in record
    assert any("stopped 1 process(es) an earlier sweep left running" in line for line in said), said


def _sleeper_naming(run_dir):
    command = [sys.executable, "-c", "import time; time.sleep(300)", "--run-dir", str(run_dir)]
    return subprocess.Popen(command, process_group=0)


def _kill(job, parent):
    if parent.poll() is None:
        parent.kill()
        parent.wait()
    for pid in under(job) | {job["guardian"]}:
        guardian.signal_process(pid, signal.SIGKILL)


# ---- writes cut off by a kill ----

def test_temporary_files_of_gone_writers_are_removed(tmp_path):
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = tmp_path / "out" / "results"
    folder.mkdir(parents=True)
    stale = [folder / f".result_0.txt.tmp.{gone.pid}", tmp_path / "out" / f"sweep.json.tmp.{gone.pid}"]
    kept = [folder / f".result_1.txt.tmp.{os.getpid()}", folder / "result_2.txt", folder / "notes.tmp"]
    for path in stale + kept:
        path.write_text("half")
    # A live process with that pid, started after the file was last written to: a reused pid.
    later = subprocess.Popen(["sleep", "30"])
    try:
        reused = folder / f".README.md.tmp.{later.pid}"
        reused.write_text("half")
        os.utime(reused, (time.time() - 3600, time.time() - 3600))
        removed = runfiles.remove_stale_temp_files(str(tmp_path / "out"))
    finally:
        later.kill()
        later.wait()
    assert sorted(removed) == sorted(str(path) for path in stale + [reused])
    assert all(path.exists() for path in kept) and not any(path.exists() for path in stale + [reused])


# ---- a full disk ----

@pytest.fixture
def full_disk(tmp_path):
    """A small tmpfs (root only) and a function that fills it up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], check=True)

    def fill():
        with open(mount / "filler", "ab") as handle:
            free = os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize
            with contextlib.suppress(OSError):
                handle.write(b"\0" * free)
                handle.flush()
    try:
        yield mount, fill
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def planned(out):
    args, passthrough, model = planning.parse(["--out", str(out), *LOCAL])
    return planning.plan_sweep(args, passthrough, model)


def snapshot(folder):
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_full_disk_leaves_every_earlier_file_as_it_was(full_disk, tmp_path):
    """Manifest, result copy, system description and README: each fails naming its file, removes its
    temporary file, and the earlier version stays."""
    mount, fill = full_disk
    plan = planned(mount / "out")
    manifest = {"plan": plan.plan(), "runs": {}, "allreduce": {}}
    result = planning.result_path(plan, plan.scales[0], 1)
    os.makedirs(os.path.dirname(result))
    running.save(plan, manifest)
    submission.write_system(plan, plan.scales[0])
    submission.write_implementation_readme(plan)
    log = tmp_path / "result_0.txt"
    log.write_text(":::MLLOG {}\n" * 2000)  # 26 KB, more room than the disk has left
    before = snapshot(mount / "out")
    fill()
    writes = {mount / "out" / "sweep.json": lambda: running.save(plan, manifest),
              result: lambda: submission.copy_result(str(log), result),
              mount / "out" / plan.submitter / "systems" / f"{plan.scales[0].system}.json":
                  lambda: submission.write_system(plan, plan.scales[0]),
              mount / "out" / plan.submitter / "benchmarks" / "resnet" / "implementations" /
              submission.IMPLEMENTATION / "README.md": lambda: submission.write_implementation_readme(plan)}
    for path, write in writes.items():
        with pytest.raises(OSError) as excinfo:
            write()
        assert (excinfo.value.filename, excinfo.value.strerror) == (str(path), NO_SPACE)
    assert snapshot(mount / "out") == before
    assert not temp_files(mount)


def test_a_full_disk_is_one_line_and_a_resume_finds_everything_as_it_was(full_disk):
    """The resume's first write (the manifest) fails: one line, exit 2, the folder as it was."""
    mount, fill = full_disk
    out = mount / "out"
    plan = planned(out)
    running.save(plan, {"plan": plan.plan(), "runs": {}, "allreduce": {}})
    result_0 = planning.result_path(plan, plan.scales[0], 0)
    os.makedirs(os.path.dirname(result_0))
    runfiles.write_text(result_0, ':::MLLOG {"key": "run_stop", "time_ms": 1}\n')
    before = snapshot(out)
    fill()
    result = run([sys.executable, "-m", "suite.cluster.sweep", "--out", str(out), *LOCAL], timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [f"error: {out / 'sweep.json'}: {NO_SPACE}"], result.stderr
    assert snapshot(out) == before and not temp_files(mount)
