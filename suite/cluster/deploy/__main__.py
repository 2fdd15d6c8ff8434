"""`python -m suite.cluster.deploy`."""
import signal
import sys

from suite.cluster.deploy import main

if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends quietly
    sys.exit(main())
