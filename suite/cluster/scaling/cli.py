"""`python -m suite.cluster.scaling`: the throughput projection from assumed figures, or the time to train
from a measured results folder (--from-results)."""
import argparse
import json
import sys
from dataclasses import asdict

from suite.cluster.scaling.model import (NVLINK_BUSBW_GBPS, Scenario, beside_measured, format_beside_markdown,
                                         format_markdown, gradient_bytes, model_names, model_parameters,
                                         project)
from suite.cluster import measured_time_to_train
from suite.cluster.scaling.projected_time_to_train import (compute_rate, format_time_to_train, measured_scale,
                                                           project_time_to_train, scenario_for)
from suite.common import mlperf_rules


class UsageError(ValueError):
    """A flag value the projection cannot use."""


class _Parser(argparse.ArgumentParser):
    # One line instead of argparse's usage block.
    def error(self, message):
        raise UsageError(message)


FROM_RESULTS_BUSBW_GBPS = 185.0  # the digest's OCI pass mark for 2 A100 nodes (§4), when --busbw is not given
REQUIRED_WITHOUT_RESULTS = ("--per-gpu-throughput", "--per-gpu-batch", "--busbw")


def build_parser():
    parser = _Parser(prog="python -m suite.cluster.scaling",
                     description="Project step time, throughput and scaling efficiency at several GPU "
                                 "counts from a ring-allreduce cost model, or, with --from-results, the time "
                                 "to train from a measured results folder (figures are projected, not "
                                 "measured).")
    parser.add_argument("--model", choices=model_names(),
                        help="gradient size from the parameter count of a benchmark's full-size model "
                             "(its folder under models/; with --from-results, the results' benchmark by "
                             "default)")
    parser.add_argument("--params", type=int, help="parameter count instead of the model's")
    parser.add_argument("--gradient-bytes", type=int, help="bytes allreduced per step, overriding the rest")
    parser.add_argument("--fp16-gradients", action="store_true", help="2-byte gradients (fp16 allreduce)")
    parser.add_argument("--per-gpu-throughput", type=float,
                        help="samples/s of one GPU at --per-gpu-batch, without communication (required "
                             "without --from-results)")
    parser.add_argument("--per-gpu-batch", type=int,
                        help="the per-GPU batch --per-gpu-throughput was measured at (required without "
                             "--from-results)")
    parser.add_argument("--global-batch", type=int, nargs="+",
                        help="strong scaling: keep this global batch, per-GPU batch = it / GPUs (default: "
                             "weak scaling at --per-gpu-batch); with --from-results, one or more global "
                             "batches to project at (default: weak scaling at the measured per-GPU batch)")
    parser.add_argument("--busbw", type=float,
                        help=f"per-node bus bandwidth across nodes, GB/s (e.g. 185 on OCI GM4.8; required "
                             f"without --from-results, {FROM_RESULTS_BUSBW_GBPS:g} with it)")
    parser.add_argument("--nvlink-busbw", type=float, default=NVLINK_BUSBW_GBPS,
                        help=f"bus bandwidth inside one node, GB/s (default {NVLINK_BUSBW_GBPS:g})")
    parser.add_argument("--gpus-per-node", type=int,
                        help="default 8, or the system description's accelerators_per_node with "
                             "--from-results")
    parser.add_argument("--overlap", type=float, default=0.0,
                        help="share of the allreduce hidden behind backprop, 0..1 (default 0)")
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 16, 32], help="scales (default 8 16 32)")
    parser.add_argument("--measured", metavar="JSON",
                        help="measured rows ([{gpus, samples_per_second}, ...]) to print beside")
    parser.add_argument("--json", metavar="PATH", help="also write the projection as JSON")
    measured = parser.add_argument_group("time to train from measured results")
    measured.add_argument("--from-results", metavar="DIR",
                          help="an MLPerf results folder (results/<system>/<benchmark>/result_*.txt: a sweep "
                               "scale's or a published one) to project the time to train from")
    measured.add_argument("--source-gpus", type=int,
                          help="GPUs of that folder's runs (default: its systems/<system>.json)")
    measured.add_argument("--ruleset", default=mlperf_rules.RULESET,
                          help="MLPerf Training ruleset whose RCP tables give the epochs or samples to "
                               f"target (default {mlperf_rules.RULESET})")
    measured.add_argument("--per-gpu-rate", metavar="BATCH=SAMPLES_PER_SECOND", nargs="+", default=[],
                          help="more measured points of one GPU's samples/s without communication, by "
                               "per-GPU batch, interpolated between (strong scaling shrinks the per-GPU "
                               "batch)")
    measured.add_argument("--rates", metavar="JSON",
                          help="a sweep's rates.json (python -m suite.cluster.sweep --measure-rates): its "
                               "per-GPU rates, measured with their communication on the sweep's smallest "
                               "scale, join the table as rates without it")
    return parser


def scenario_from_args(args):
    global_batch = args.global_batch or [0]
    if len(global_batch) > 1:
        raise UsageError("one --global-batch without --from-results")
    model = args.model
    nbytes = args.gradient_bytes
    if nbytes is None:
        params = args.params if args.params is not None else model_parameters(model)
        if params is None:
            raise UsageError("no gradient size: give --model (" + ", ".join(model_names()) + "), --params "
                             "or --gradient-bytes")
        nbytes = gradient_bytes(params, args.fp16_gradients)
    return Scenario(model=model or "a model of the given size", per_gpu_throughput=args.per_gpu_throughput,
                    per_gpu_batch=args.per_gpu_batch, gradient_bytes=nbytes, busbw_gbps=args.busbw,
                    nvlink_busbw_gbps=args.nvlink_busbw,
                    gpus_per_node=args.gpus_per_node or 8, overlap=args.overlap, global_batch=global_batch[0])


def _load_measured(path):
    with open(path) as handle:
        data = json.load(handle)
    return data["rows"] if isinstance(data, dict) else data


def _write_json(path, projection, beside):
    with open(path, "w") as handle:
        json.dump({"note": "projected by suite.cluster.scaling, not measured",
                   "scenario": asdict(projection.scenario), "points": [asdict(p) for p in projection.points],
                   "beside_measured": [asdict(r) for r in beside] if beside else None}, handle, indent=2)
        handle.write("\n")


def _throughput_main(args):
    missing = [flag for flag in REQUIRED_WITHOUT_RESULTS if getattr(args, flag[2:].replace("-", "_")) is None]
    if missing:
        raise UsageError(f"the following arguments are required: {', '.join(missing)}")
    projection = project(scenario_from_args(args), args.gpus)
    beside = beside_measured(projection, _load_measured(args.measured)) if args.measured else None
    if args.json:
        _write_json(args.json, projection, beside)
    text = format_markdown(projection)
    if beside is not None:
        text += "\n\nProjected beside measured:\n\n" + format_beside_markdown(beside)
    return text


def _per_gpu_rates(values):
    rates = []
    for value in values:
        try:
            batch, rate = value.split("=")
            rates.append((int(batch), float(rate)))
        except ValueError:
            raise UsageError(f"--per-gpu-rate takes BATCH=SAMPLES_PER_SECOND, not {value!r}") from None
    return rates


def _sweep_rates(path, template):
    """(per-GPU batch, samples/s of compute alone) from a sweep's rates.json: each point was measured
    with the allreduce of its GPU count, which compute_rate takes out."""
    try:
        with open(path) as handle:
            points = json.load(handle)["points"]
        return [(int(p["per_gpu_batch"]), compute_rate(float(p["samples_per_second_per_gpu"]),
                                                       int(p["per_gpu_batch"]), int(p["gpus"]), template))
                for p in points]
    except (KeyError, TypeError, ValueError) as err:
        raise UsageError(f"--rates {path}: not a sweep's rates.json (points of per_gpu_batch, gpus, "
                         f"samples_per_second_per_gpu): {err}") from None


def _from_results_main(args):
    from suite.cluster import results_folder  # its compliance checker loads YAML rules: only this needs it
    for flag in ("per_gpu_throughput", "per_gpu_batch", "measured"):
        if getattr(args, flag) is not None:
            raise UsageError(f"--{flag.replace('_', '-')} is not used with --from-results (--per-gpu-rate "
                             f"adds measured rates)")
    folder = results_folder.read_folder(args.from_results, ruleset=args.ruleset, gpus=args.source_gpus)
    if folder.gpus is None:
        raise ValueError(f"{folder.path}: its GPU count is unknown (no "
                         f"{results_folder.system_description_path(folder.path, folder.system)}): give "
                         f"--source-gpus")
    measured = measured_scale(measured_time_to_train.summarize(folder), folder.gpus)
    model = args.model or folder.benchmark
    params = args.params if args.params is not None else model_parameters(model)
    if params is None and args.gradient_bytes is None:
        raise UsageError(f"no gradient size known for benchmark {folder.benchmark!r}: give --params or "
                         f"--gradient-bytes")
    template = Scenario(
        model=model, per_gpu_throughput=1.0, per_gpu_batch=1,
        gradient_bytes=args.gradient_bytes or gradient_bytes(params, args.fp16_gradients),
        busbw_gbps=args.busbw if args.busbw is not None else FROM_RESULTS_BUSBW_GBPS,
        nvlink_busbw_gbps=args.nvlink_busbw, gpus_per_node=args.gpus_per_node or folder.gpus_per_node or 8,
        overlap=args.overlap).validate()
    extra = _sweep_rates(args.rates, template) if args.rates else []
    scenario = scenario_for(measured, template, extra + _per_gpu_rates(args.per_gpu_rate))
    if any(not isinstance(n, int) or n < 1 for n in args.gpus):
        raise ValueError(f"GPU counts must be positive integers, not {args.gpus!r}")
    per_gpu = scenario.per_gpu_batch
    points = [project_time_to_train(measured, scenario, n, batch, args.ruleset)
              for n in args.gpus for batch in (args.global_batch or [per_gpu * n])]
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([point.record() for point in points], handle, indent=2)
            handle.write("\n")
    return format_time_to_train(measured, scenario, points)


def main(argv=None):
    """Prints the projection (and measured rows beside it); returns the exit code."""
    try:
        args = build_parser().parse_args(argv)
        text = _from_results_main(args) if args.from_results else _throughput_main(args)
    except (UsageError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
