"""SIGTERM, SIGINT and SIGHUP end a rank at once, and rank 0's MLPerf log still gets its run_stop.

Launchers end a job by signalling its ranks: mpirun sends SIGTERM to every rank once one has failed
and SIGKILL a second later (Open MPI's odls_base_sigkill_timeout), horovodrun sends SIGTERM and then
SIGKILL, Slurm does the same after KillWait. A rank is then usually blocked inside a TensorFlow op
waiting for a collective, where Python's own signal handlers cannot run until the op returns, which
it never does. So the work is done by a thread: Python's C-level handler writes the signal number to
a pipe (signal.set_wakeup_fd) whichever thread the kernel picked, and the watcher thread, blocked on
that pipe with the GIL released, wakes at once, closes the log and ends the process.
"""
import os
import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Watcher:
    """Calls on_signal(signum) in its own thread when a termination signal arrives, then exits.

    on_signal must be quick (the launcher's SIGKILL follows): write run_stop, flush, return.
    The process then ends with 128 + signum, the shell's convention for a signal.
    """

    def __init__(self, on_signal):
        self.on_signal = on_signal
        self.thread = None

    def start(self):
        """Installs the handlers; must run in the main thread (Python's rule for signal handlers)."""
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        for signum in SIGNALS:
            # A Python-level handler must exist for the C-level one to write to the wakeup pipe; it
            # does nothing itself, since the main thread may never get to run it.
            signal.signal(signum, _ignore)
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self.thread = threading.Thread(target=self._watch, args=(read_end,), name="suite-signals",
                                       daemon=True)
        self.thread.start()
        return self

    def _watch(self, read_end):
        signum = 0
        while signum not in SIGNALS:
            # Another library's Python-level handler would write its signals here too.
            signum = os.read(read_end, 1)[0]
        try:
            self.on_signal(signum)
        finally:
            # Not sys.exit: that only ends this thread. Nothing else may run after the log is closed.
            os._exit(128 + signum)


def _ignore(signum, frame):
    pass


def name(signum):
    return signal.Signals(signum).name
