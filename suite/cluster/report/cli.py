"""`python -m suite.cluster.report SWEEP`: the command line, and the report folder written all or nothing."""
import argparse
import math
import os
import shutil
import sys

from suite.cluster.report.document import build_document, render_html, render_markdown
from suite.cluster.report.figures import SCALING_MODES
from suite.cluster.report.plots import make_plots
from suite.cluster.report.projection import banners
from suite.cluster.report.sweep_folder import ReportError, load_sweep
from suite.common.results import LogError

REPORT_FILES = ("report.md", "report.html", "time_to_train.png", "throughput.png", "scaling.png",
                "stragglers.png", "allreduce.png", "attribution.png")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ReportError(message)


def write_report(data, out, threshold_pct, scaling_mode="auto"):
    """Builds the whole report in a temporary folder beside `out`, then swaps it in."""
    _check_out(out)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.tmp.{os.getpid()}")
    os.makedirs(tmp)
    try:
        images = make_plots(data, tmp, threshold_pct, scaling_mode)
        doc = build_document(data, threshold_pct, images, scaling_mode)
        _write_text(os.path.join(tmp, "report.md"), render_markdown(doc))
        _write_text(os.path.join(tmp, "report.html"), render_html(doc, tmp))
        _swap(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _check_out(out):
    """Only a folder of an earlier report may be replaced; anything else there is somebody's data."""
    if not os.path.exists(out):
        return
    if not os.path.isdir(out) or not set(os.listdir(out)) <= set(REPORT_FILES):
        raise ReportError(f"--out {out} exists and is not a report folder (it holds other files); "
                          f"choose another --out")


def _swap(tmp, out):
    old = None
    if os.path.exists(out):
        old = f"{tmp}.old"
        os.rename(out, old)
    os.rename(tmp, out)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def _write_text(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def build_parser():
    parser = _Parser(prog="python -m suite.cluster.report",
                     description="Report of a sweep folder (python -m suite.cluster.sweep): report.md, "
                                 "report.html "
                                 "and PNG plots. Times come from the MLPerf logs; throughput and step times "
                                 "from each run's summary.json; projected figures are labelled.")
    parser.add_argument("sweep", help="the sweep folder (the --out of python -m suite.cluster.sweep)")
    parser.add_argument("--out", help="report folder (default: SWEEP/report); replaced as a whole")
    parser.add_argument("--straggler-threshold", type=float, default=10.0, metavar="PCT",
                        help="flag ranks whose p50 step time is more than PCT%% above the median rank's "
                             "(default 10)")
    parser.add_argument("--scaling", choices=SCALING_MODES, default="auto",
                        help="the experiment the projection models: strong (fixed global batch), weak (fixed "
                             "per-rank batch) or auto (read from the runs' batch sizes; default)")
    return parser


def main(argv=None):
    try:
        args = build_parser().parse_args(argv)
        if not (math.isfinite(args.straggler_threshold) and args.straggler_threshold >= 0):
            raise ReportError(f"--straggler-threshold {args.straggler_threshold} must be >= 0")
        data = load_sweep(args.sweep)
        out = write_report(data, args.out or os.path.join(args.sweep, "report"), args.straggler_threshold,
                           args.scaling)
        for text in banners(data, args.scaling):
            print(f"WARNING: {text}", file=sys.stderr, flush=True)
    except (ReportError, LogError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        print(f"error: {err.filename}: {err.strerror}", file=sys.stderr, flush=True)
        return 2
    print(f"report: {os.path.join(out, 'report.md')}, {os.path.join(out, 'report.html')}")
    return 0
