"""The sweep's command line: plan, then the dry run or the runs; a failure is one line and an exit code."""
import contextlib
import signal
import sys

from suite.common import results
from suite.cluster.hostfile import HostfileError
from suite.cluster.launch import LaunchError
from suite.cluster.sweep.planning import SweepError, parse, plan_sweep, print_dry_run
from suite.cluster.sweep.running import Interrupted, RunFailed, execute
from suite.common.config import ConfigError
from suite.common.profiles import ProfileError


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args, passthrough, model = parse(argv)
        sweep = plan_sweep(args, passthrough, model)
        if args.dry_run:
            return print_dry_run(sweep)
        with _interruptible():
            return execute(sweep, _say)
    except RunFailed as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    except (SweepError, HostfileError, ProfileError, LaunchError, ConfigError, results.LogError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        print(f"error: {err.filename or ''}: {err.strerror}".replace("error: : ", "error: "), file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt):
        print("interrupted: re-run the same command to resume the sweep", file=sys.stderr, flush=True)
        return 130


@contextlib.contextmanager
def _interruptible():
    """SIGTERM and SIGHUP between launches end the sweep as Ctrl-C does (exit 130, temporary file
    removed); during a launch they are passed on to it instead (run_logged)."""
    def interrupt(signum, frame):
        raise Interrupted()

    previous = {signum: signal.signal(signum, interrupt) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _say(message):
    print(f"sweep: {message}", flush=True)
