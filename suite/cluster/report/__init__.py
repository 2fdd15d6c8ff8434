"""`python -m suite.cluster.report [SWEEP] [--compare DIR ...]`: time to train and its split, throughput,
scaling, stragglers, allreduce.

sweep_folder.py    reads a sweep folder: each scale's MLPerf results folder and its runs' records
figures.py         the measured figures: time to train, throughput, scaling, stragglers, step splits
projection.py      the projection beside them, and the banners on what the figures are unfit for
published.py       published times to train (models/<name>/published.py), shown for reference
splits.py          each scale's time-to-train split (the sweep's and --compare folders'), factored
split_section.py   the split's table, factors and plot in the document, and report.json
backends.py        a sweep of several distribution backends: each scale's backends side by side
links_section.py   the table of each host's link, as the link probe measured it before each run
formats.py         how numbers are written
document.py        the document's blocks, rendered as Markdown and as HTML
plots.py           the PNG plots
cli.py             the command line; the report folder written all or nothing
"""


def main(argv=None):
    """The command line (the console script mlperf-report names this function)."""
    # Imported here, not at the top: the package itself imports none of its modules, so they import
    # each other in one direction only.
    from suite.cluster.report.cli import main as run
    return run(argv)
