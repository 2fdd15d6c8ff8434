"""`python -m suite.cluster.report` runs the command line of suite/cluster/report/cli.py."""
import sys

from suite.cluster.report.cli import main

if __name__ == "__main__":
    sys.exit(main())
