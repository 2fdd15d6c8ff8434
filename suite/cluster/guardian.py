"""The guardian: a small process between the sweep and each launch, so that no launch outlives the sweep.

    python -I suite/cluster/guardian.py --parent PID --output FILE [--tee] [--grace SECONDS] -- COMMAND...

It starts COMMAND (the launcher) in a process group of its own, since horovodrun runs mpirun through
/bin/sh, which dies of a signal without passing it on: only a signal to the whole group reaches
mpirun, which passes it to its ranks. Then:

- the kernel sends it SIGTERM when its parent dies, even of SIGKILL (PR_SET_PDEATHSIG); a parent that
  died before it asked is noticed by its parent pid, and then no launcher is started;
- the first SIGINT, SIGTERM or SIGHUP (a signal the sweep passes on, or its parent's death) is passed
  to the launcher's group once, as SIGTERM: mpirun passes a SIGINT on only after its kill grace, and
  a second signal makes it kill its ranks before they close their logs (launch.forwarding_signals);
- GRACE_SECONDS later, the group and every process left under the guardian get SIGKILL. It is a child
  subreaper (PR_SET_CHILD_SUBREAPER): a rank whose mpirun died (each rank is a group of its own)
  becomes its child rather than init's, and is found;
- when the launcher ends, whatever it left running gets SIGTERM, and SIGKILL at the end of the grace.

Its first line on stdout is `launcher-group <pgid>`, for the sweep's manifest; the launcher's output
goes to FILE (with --tee to stdout as well). It exits with the launcher's code (128 + N for signal N).
It needs nothing but the standard library and runs as a script, with no import path to set up.

The sweep's side is at the end: start, launcher_group, stop, and stop_leftover for a launch that an
earlier sweep, killed too hard for its guardian to act, left running.
"""
import argparse
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time

# From the first stop signal to SIGKILL: ranks need a moment to write run_stop and mpirun to see them
# go. Below the 30 s in which the reliability requirement wants a stopped job gone.
GRACE_SECONDS = 20
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FIRST_LINE = "launcher-group"
POLL_SECONDS = 0.1


class Guard:
    """The launcher and the one stop it gets: the first signal passed on, SIGKILL when the grace is over."""

    def __init__(self, grace):
        self.grace = grace
        self.process = None
        self.requested = None  # the first stop signal, even one that came before the launcher started
        self.deadline = None
        self._passed = threading.Lock()

    def request(self, signum, frame=None):
        if self.requested is None:
            self.requested, self.deadline = signum, time.monotonic() + self.grace
        self.pass_on()

    def pass_on(self):
        # Signal handlers run between any two bytecodes, in here too: the lock lets one call through.
        if self.process is None or self.requested is None or not self._passed.acquire(blocking=False):
            return
        signal_group(self.process.pid, signal.SIGTERM)  # whichever came: see the module's docstring
        start_thread(self._kill_all_at_deadline)

    def _kill_all_at_deadline(self):
        time.sleep(max(0.0, self.deadline - time.monotonic()))
        self.kill_all()

    def kill_all(self):
        signal_group(self.process.pid, signal.SIGKILL)
        for pid in descendants(os.getpid()):
            signal_process(pid, signal.SIGKILL)

    def finish(self):
        """After the launcher: what it left under the guardian ends too; then the zombies are reaped."""
        left = descendants(os.getpid())
        if left:
            if self.requested is None:
                self.deadline = time.monotonic() + self.grace
            # Those outside the launcher's group (a rank whose mpirun died, a new session) had no
            # signal yet; mpirun, which would pass one on twice, is gone.
            for pid in left:
                signal_process(pid, signal.SIGTERM)
            wait_until(lambda: not descendants(os.getpid()), self.deadline)
            self.kill_all()
            wait_until(lambda: not descendants(os.getpid()), time.monotonic() + 5)
        _reap()


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    guard = Guard(args.grace)
    for signum in STOP_SIGNALS:
        signal.signal(signum, guard.request)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != args.parent:
        guard.request(signal.SIGTERM)  # the parent died before the kernel was asked to tell
    if guard.requested is not None:
        return 128 + guard.requested
    try:
        sink = open(args.output, "wb", buffering=0)
    except OSError as err:
        print(f"error: {args.output}: {err.strerror}", file=sys.stderr, flush=True)
        return 2
    try:
        guard.process = subprocess.Popen(args.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         process_group=0)
    except OSError as err:
        print(f"error: {args.command[0]}: {err.strerror}", file=sys.stderr, flush=True)
        return 127
    guard.pass_on()  # a signal that came while the launcher was starting
    _announce(guard.process.pid)
    copier = start_thread(copy_output, guard.process.stdout, sink, args.output, args.tee)
    code = guard.process.wait()
    guard.finish()
    copier.join(timeout=5)  # the pipe ends once everything that held it has ended
    return 128 - code if code < 0 else code


def start_thread(target, *args):
    """A daemon thread that never takes a stop signal.

    The kernel hands a signal sent to the process to any thread that does not block it, and Python
    runs its handler only once the main thread runs again: a signal taken by this thread would wait,
    unseen, for the main thread's waitpid to return, that is for the launcher it should stop. The
    thread inherits the mask it starts with; a signal that comes meanwhile waits for the main thread.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return thread


def _parse(argv):
    parser = argparse.ArgumentParser(prog="guardian", description=__doc__.split("\n\n")[0])
    parser.add_argument("--parent", type=int, required=True, help="the pid whose death stops the launch")
    parser.add_argument("--output", required=True, help="the file that gets the launcher's output")
    parser.add_argument("--tee", action="store_true", help="and stdout too")
    parser.add_argument("--grace", type=float, default=GRACE_SECONDS,
                        help=f"seconds from the first stop signal to SIGKILL (default {GRACE_SECONDS})")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        parser.error("no command given after --")
    return args


def _prctl(option, value):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _announce(group):
    with contextlib.suppress(OSError):
        print(f"{FIRST_LINE} {group}", flush=True)


def copy_output(source, sink, path, tee):
    """The launcher's output into the file (and stdout); a full disk or a gone reader stops that side only,
    and the pipe is still drained so that the launcher never blocks on it."""
    out = sys.stdout.buffer if tee else None
    with sink:
        while chunk := os.read(source.fileno(), 65536):
            if sink is not None:
                try:
                    sink.write(chunk)
                except OSError as err:
                    print(f"error: {path}: {err.strerror}", file=sys.stderr, flush=True)
                    sink = None
            if out is not None:
                try:
                    out.write(chunk)
                    out.flush()
                except OSError:
                    out = None


def _reap():
    """Collects the exit status of orphans that became this subreaper's children."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


# ---- processes, from /proc ----

def processes():
    """{pid: (state, parent pid, process group)} of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                table[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    return table


def descendants(root, table=None):
    """The live processes under root: its children, theirs and so on (zombies left out)."""
    table = processes() if table is None else table
    children = {}
    for pid, (_, parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            todo.append(child)
            if table[child][0] != "Z":
                found.append(child)
    return found


def group_members(groups, table=None):
    """The live processes of the given process groups."""
    table = processes() if table is None else table
    return [pid for pid, (state, _, group) in table.items() if group in groups and state != "Z"]


def names(pid, path):
    """True when the command line of pid names path itself or something under it (not path + "0")."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            cmdline = handle.read()
    except OSError:
        return False
    return re.search(re.escape(os.fsencode(path)) + rb"(?=$|[/\x00\s'\"])", cmdline) is not None


def signal_group(group, signum):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signum)


def signal_process(pid, signum):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def wait_until(done, deadline):
    while not done() and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    return done()


# ---- the sweep's side ----

def start(command, env, output, tee=False, grace=GRACE_SECONDS):
    """Starts command under a guardian, in a process group of its own; returns the guardian's Popen.

    Read its first line with launcher_group, then its stdout (text) to the end.
    """
    argv = [sys.executable, "-I", os.path.abspath(__file__), "--parent", str(os.getpid()), "--output", output,
            "--grace", str(grace), *(["--tee"] if tee else []), "--", *command]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, errors="replace",
                            process_group=0)


def launcher_group(guardian):
    """The launcher's process group from the guardian's first line; None when it started no launcher."""
    word, _, value = guardian.stdout.readline().partition(" ")
    return int(value) if word == FIRST_LINE and value.strip().isdigit() else None


def stop(guardian, group=None, grace=GRACE_SECONDS):
    """Stops a launch from this side: SIGTERM to the guardian, which passes it on; SIGKILL if that hangs."""
    signal_group(guardian.pid, signal.SIGTERM)
    try:
        guardian.wait(timeout=grace + 10)
    except subprocess.TimeoutExpired:
        for target in (guardian.pid, group):
            if target:
                signal_group(target, signal.SIGKILL)
        guardian.wait()


def stop_leftover(job, marker, ranks=(), grace=GRACE_SECONDS):
    """Stops what is left of a launch that an earlier sweep recorded; returns how many processes it found.

    job holds that sweep's record ({"guardian": pid, "launcher_group": pgid}); ranks are the ranks'
    pids from the run's env.json (under mpirun each is a process group of its own). A group counts
    only while one of its processes names marker (the run directory) on its command line: after a
    reboot the numbers belong to others. A live guardian gets the SIGTERM and passes it on itself;
    without one, every group gets it. SIGKILL follows after the grace.
    """
    table = processes()
    recorded = {g for g in (job.get("guardian"), job.get("launcher_group"), *ranks) if g}
    groups = {g for g in recorded if any(names(pid, marker) for pid in group_members({g}, table))}
    if not groups:
        return 0
    found = len(group_members(groups, table))
    for group in [job["guardian"]] if job.get("guardian") in groups else sorted(groups):
        signal_group(group, signal.SIGTERM)
    if not wait_until(lambda: not group_members(groups), time.monotonic() + grace + 5):
        for group in groups:
            signal_group(group, signal.SIGKILL)
        wait_until(lambda: not group_members(groups), time.monotonic() + 5)
    return found


if __name__ == "__main__":
    sys.exit(main())
