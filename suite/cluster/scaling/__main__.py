"""`python -m suite.cluster.scaling` runs the command line of suite/cluster/scaling/cli.py."""
import sys

from suite.cluster.scaling.cli import main

if __name__ == "__main__":
    sys.exit(main())
