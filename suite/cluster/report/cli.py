"""`python -m suite.cluster.report [SWEEP] [--compare DIR ...]`: the command line, and the report folder
written all or nothing."""
import argparse
import json
import math
import os
import re
import shutil
import sys

from suite.cluster.report.document import build_document, render_html, render_markdown
from suite.cluster.report.figures import SCALING_MODES
from suite.cluster.report.plots import make_plots, make_scaling_pictures, make_split_plots
from suite.cluster.report.projection import banners
from suite.cluster.report.split_section import compare_document, report_json
from suite.cluster.report.splits import compare_scales, sweep_scales, unique_labels
from suite.cluster.report.sweep_folder import ReportError, load_sweep
from suite.common.results import LogError

REPORT_FILES = ("report.md", "report.html", "report.json", "time_to_train.png", "throughput.png",
                "scaling.png", "stragglers.png", "allreduce.png", "attribution.png")
SPLIT_PLOT = re.compile(r"(time_to_train_split|scaling_picture)_[A-Za-z0-9_]+\.png")


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ReportError(message)


def write_report(data, out, threshold_pct, scaling_mode="auto", splits=(), price_per_gpu_hour=None):
    """Builds the whole report in a temporary folder beside `out`, then swaps it in. data: the sweep, or
    None for a report of --compare folders alone; splits: the split_section Scales."""
    _check_out(out)
    parent = os.path.dirname(os.path.abspath(out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.tmp.{os.getpid()}")
    os.makedirs(tmp)
    try:
        images = make_split_plots(splits, tmp) + make_scaling_pictures(splits, tmp)
        if data is None:
            doc = compare_document(splits, images, price_per_gpu_hour)
        else:
            images += make_plots(data, tmp, threshold_pct, scaling_mode)
            doc = build_document(data, threshold_pct, images, scaling_mode, splits, price_per_gpu_hour)
        _write_text(os.path.join(tmp, "report.json"), json.dumps(report_json(splits), indent=1) + "\n")
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
    if not os.path.isdir(out) or any(name not in REPORT_FILES and not SPLIT_PLOT.fullmatch(name)
                                     for name in os.listdir(out)):
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
    parser.add_argument("sweep", nargs="?",
                        help="the sweep folder (the --out of python -m suite.cluster.sweep); optional with "
                             "--compare and --out")
    parser.add_argument("--compare", nargs="+", metavar="DIR", default=[],
                        help="MLPerf results folders (results/<system>/<benchmark>/ of result_*.txt, GPU "
                             "count from the systems/ JSON beside results/), earlier sweep folders, or a "
                             "folder holding results folders (a submitter's folder, a clone of "
                             "training_results_vX.Y), searched for each of them; beside the sweep at their "
                             "GPU counts")
    parser.add_argument("--benchmark", metavar="NAME",
                        help="only this benchmark's results folders of a searched --compare folder "
                             "(MLPerf's name: resnet, bert, ...)")
    parser.add_argument("--price-per-gpu-hour", type=float, metavar="PRICE",
                        help="your price of one GPU-hour: each result's cost beside its GPU-hours, labelled "
                             "as your figure")
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
        if args.sweep is None and not (args.compare and args.out):
            raise ReportError("give a SWEEP folder, or --compare DIR [DIR ...] with --out OUT")
        data = load_sweep(args.sweep) if args.sweep else None
        price = args.price_per_gpu_hour
        if price is not None and not (math.isfinite(price) and price >= 0):
            raise ReportError(f"--price-per-gpu-hour {price} must be a number >= 0")
        found = compare_scales(args.compare, args.benchmark, say=lambda line: print(line, flush=True))
        splits = unique_labels((sweep_scales(data) if data else []) + found)
        out = write_report(data, args.out or os.path.join(args.sweep, "report"), args.straggler_threshold,
                           args.scaling, splits, price)
        for text in banners(data, args.scaling) if data else ():
            print(f"WARNING: {text}", file=sys.stderr, flush=True)
    except (ReportError, LogError) as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        print(f"error: {err.filename}: {err.strerror}", file=sys.stderr, flush=True)
        return 2
    print(f"report: {os.path.join(out, 'report.md')}, {os.path.join(out, 'report.html')}, "
          f"{os.path.join(out, 'report.json')}")
    return 0
