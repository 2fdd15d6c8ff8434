"""`python -m suite.cluster.sweep`: one model over several scales, N runs each, MLPerf submission layout.

planning.py   the flags, the scales and every check before the first run; the dry run
running.py    the launches under their guardians, the manifest, resuming
submission.py the system descriptions, the result logs and the implementation README
cli.py        the command line
"""


def main(argv=None):
    """The command line (the console script mlperf-sweep names this function)."""
    # Imported here, not at the top: the package itself imports none of its modules, so they import
    # each other in one direction only.
    from suite.cluster.sweep.cli import main as run
    return run(argv)
