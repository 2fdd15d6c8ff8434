"""`python -m suite.cluster.sweep` runs the command line of suite/cluster/sweep/cli.py."""
import signal
import sys

from suite.cluster.sweep.cli import main

if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--dry-run | head` ends quietly
    sys.exit(main())
