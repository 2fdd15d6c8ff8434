"""`python -m suite.cluster.report SWEEP`: time to train, throughput, scaling, stragglers, allreduce."""
import argparse
import base64
import dataclasses
import html
import json
import math
import os
import re
import shutil
import statistics
import sys
from dataclasses import dataclass, field

from suite.cluster import results, scaling
from suite.cluster.results import LogError
from suite.cluster.sweep.planning import REQUIRED_RUNS

MANIFEST = "sweep.json"
REPORT_FILES = ("report.md", "report.html", "time_to_train.png", "throughput.png", "scaling.png",
                "stragglers.png", "allreduce.png", "attribution.png")
# The aggregate of several runs' throughput and step times, everywhere in the report: robust to
# the one run that shared the machine with something else.
AGGREGATE = "median over runs"
# A run's throughput rests on its timed steps (the first interval, with tracing and warm-up, is
# left out); below this many the median step is a handful of samples, not a rate.
MIN_TIMED_STEPS = 20
SCALING_MODES = ("auto", "strong", "weak")

OCI_BLOG_URL = ("https://blogs.oracle.com/cloud-infrastructure/post/"
                "mlperf-benchmark-multi-node-ml-training-on-oci")
OCI_BLOG = (f"Oracle Cloud Infrastructure blog, [\"MLPerf benchmark: multi-node ML training on OCI\"]"
            f"({OCI_BLOG_URL}), 4x BM.GPU.GM4.8: the post gives these times only as points of its line graph "
            f"(its text states no figures), so they are read off the graph and approximate")
MLCOMMONS_TRAINING = "https://mlcommons.org/benchmarks/training/"
RESULTS_V11 = ("https://github.com/mlcommons/training_results_v1.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc21.09_mxnet/resnet")
RESULTS_V21 = ("https://github.com/mlcommons/training_results_v2.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc22.09_pytorch/bert")


@dataclass(frozen=True)
class Reference:
    """A published time to train, never measured here."""

    benchmark: str
    system: str
    gpus: int
    nodes: int
    minutes: float
    source: str
    runs_ms: tuple = ()  # run_stop - run_start of each published log, when the row lists its runs


REFERENCES = (
    Reference("resnet", "ResNet-50 v1.1 (MLPerf v1.1 rules), OCI BM.GPU.GM4.8, 8x A100-80GB, RoCE", 8, 1,
              31.5, OCI_BLOG),
    Reference("resnet", "ResNet-50 v1.1 (MLPerf v1.1 rules), 4x OCI BM.GPU.GM4.8, 32x A100-80GB, RoCE", 32, 4,
              10.67, OCI_BLOG),
    Reference("resnet", "MLPerf Training v1.1 closed, NVIDIA DGX A100 80GB (MXNet 21.09), 8 GPUs", 8, 1,
              29.15,
              f"[MLCommons Training v1.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v1.1 "
              f"NVIDIA/results/dgxa100_ngc21.09_mxnet/resnet/result_0..4.txt]({RESULTS_V11}): olympic mean "
              f"of run_stop - run_start",
              runs_ms=(1733744, 1747922, 1749323, 1749141, 1749773)),
    Reference("bert", "MLPerf Training v2.1 closed, NVIDIA dgxa100_ngc22.09_pytorch, 8x A100-80GB", 8, 1,
              16.88,
              f"[MLCommons Training v2.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v2.1 "
              f"NVIDIA/results/dgxa100_ngc22.09_pytorch/bert/result_0..9.txt]({RESULTS_V21}): olympic mean "
              f"of run_stop - run_start",
              runs_ms=(925828, 1049772, 987675, 1111603, 1050027, 1050194, 988610, 991607, 993042, 992503)),
)
# Published scaling, time-to-train ratios between two published rows: (smaller, larger).
PUBLISHED_RATIOS = (("OCI BM.GPU.GM4.8, ResNet-50 v1.1: 1 node → 4 nodes", REFERENCES[0], REFERENCES[1]),)


class ReportError(ValueError):
    """A sweep folder the report cannot use; the message is one line naming the file."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ReportError(message)


# ---- reading the sweep ----

@dataclass
class Run:
    index: int
    log: results.RunLog
    summary: dict = None
    config: dict = None
    env: dict = None


@dataclass
class ScaleData:
    system: str
    np: int
    nodes: int
    preset: str
    planned: int
    ranks_per_node: int
    runs: list = field(default_factory=list)
    allreduce: dict = None


@dataclass
class SweepData:
    folder: str
    benchmark: str
    submitter: str
    profile: str
    scales: list


def load_sweep(folder):
    """Everything the report shows, read and checked before anything is written."""
    if not os.path.isdir(folder):
        raise ReportError(f"sweep folder {folder} does not exist")
    missing = f"{folder} holds no {MANIFEST}: not a sweep folder (python -m suite.cluster.sweep writes one)"
    manifest = _json(os.path.join(folder, MANIFEST), missing=missing)
    try:
        plan = manifest["plan"]
        data = SweepData(folder, plan["benchmark"], plan["submitter"], plan.get("profile", ""),
                         [_scale(folder, plan, entry) for entry in plan["scales"]])
    except (KeyError, TypeError) as err:
        raise ReportError(f"{os.path.join(folder, MANIFEST)}: not a sweep manifest (missing {err})") from None
    if not any(scale.runs for scale in data.scales):
        raise ReportError(f"{os.path.join(folder, data.submitter, 'results')}: no result logs yet; run the "
                          f"sweep first")
    return data


def _scale(folder, plan, entry):
    hosts = entry["hosts"]
    scale = ScaleData(system=entry["system"], np=entry["np"], nodes=entry["nodes"], preset=entry["preset"],
                      planned=plan["runs"], ranks_per_node=min(entry["np"], hosts[0]["slots"]))
    results_dir = os.path.join(folder, plan["submitter"], "results", scale.system, plan["benchmark"])
    runs_dir = os.path.join(folder, "runs", scale.system)
    paths = results.result_files(results_dir) if os.path.isdir(results_dir) else []
    for path in paths:
        index = int(os.path.basename(path)[len("result_"):-len(".txt")])
        run_dir = os.path.join(runs_dir, f"run_{index}")
        scale.runs.append(Run(index, results.read_run(path, plan["benchmark"]),
                              summary=_json(os.path.join(run_dir, "summary.json")),
                              config=_json(os.path.join(run_dir, "config.json")),
                              env=_json(os.path.join(run_dir, "env.json"))))
    scale.allreduce = _json(os.path.join(runs_dir, "allreduce.json"))
    return scale


def _json(path, missing=None):
    """A JSON file's contents; None when absent (ReportError(missing) if given); an error if unreadable."""
    if not os.path.exists(path):
        if missing:
            raise ReportError(missing)
        return None
    try:
        with open(path) as handle:
            return json.load(handle)
    except json.JSONDecodeError as err:
        raise ReportError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    except OSError as err:
        raise ReportError(f"{path}: {err.strerror}") from None


# ---- figures ----

def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def time_to_train(scale):
    """Per-scale time-to-train figures from the logs (minutes)."""
    minutes = [run.log.minutes for run in scale.runs]
    converged = [run.log.converged for run in scale.runs]
    return {
        "runs": len(minutes), "planned": scale.planned, "converged": sum(converged),
        "olympic": results.olympic_mean(minutes, converged),
        "olympic_all": results.olympic_mean(minutes),
        "min": min(minutes) if minutes else None, "max": max(minutes) if minutes else None,
    }


def run_throughputs(scale):
    """Per run with a summary.json throughput: (index, samples/s total, per rank, timed steps).

    Timed steps are the fewest any rank timed (each rank's steady-state intervals); None when the
    summary does not say.
    """
    found = []
    for run in scale.runs:
        summary = run.summary or {}
        if not summary.get("samples_per_second_total"):
            continue
        steps = [rank.get("steps_timed") for rank in summary.get("ranks", [])]
        steps = [s for s in steps if s is not None]
        found.append((run.index, summary["samples_per_second_total"],
                      summary.get("samples_per_second_per_rank"),
                      min(steps) if steps else None))
    return found


def throughput(scale):
    """The scale's throughput: the median over runs (total and per rank), its min-max and timed steps."""
    found = run_throughputs(scale)
    totals = [total for _, total, _, _ in found]
    steps = [s for *_, s in found if s is not None]
    return {"rate": median(totals), "per_rank": median([per_rank for _, _, per_rank, _ in found]),
            "min": min(totals) if totals else None, "max": max(totals) if totals else None,
            "runs": len(found), "steps_min": min(steps) if steps else None,
            "steps_max": max(steps) if steps else None}


def scaling_rows(scales):
    """Speed-up and efficiency against the smallest scale, from throughput and from the olympic means."""
    base = min(scales, key=lambda s: s.np)
    base_rate = throughput(base)["rate"]
    base_ttt = time_to_train(base)["olympic"]
    rows = []
    for scale in sorted(scales, key=lambda s: s.np):
        rate = throughput(scale)
        ttt = time_to_train(scale)["olympic"]
        speedup = rate["rate"] / base_rate if rate["rate"] and base_rate else None
        rows.append({"system": scale.system, "np": scale.np, "nodes": scale.nodes, **rate, "speedup": speedup,
                     "efficiency": speedup * base.np / scale.np if speedup else None,
                     "ttt_speedup": base_ttt / ttt if base_ttt and ttt else None})
    return rows


def stragglers(scale, threshold_pct):
    """Per rank: p50/p90 (median over runs), max (over runs), host, and whether it lags the median rank."""
    per_rank = {}
    for run in scale.runs:
        for rank in (run.summary or {}).get("ranks", []):
            if "step_ms_p50" in rank:
                per_rank.setdefault(rank["rank"], []).append(rank)
    rows = []
    for rank, entries in sorted(per_rank.items()):
        rows.append({"rank": rank, "host": entries[0].get("host", ""), "runs": len(entries),
                     "p50": median([e["step_ms_p50"] for e in entries]),
                     "p90": median([e.get("step_ms_p90") for e in entries]),
                     "max": max(e.get("step_ms_max", 0.0) for e in entries)})
    middle = median([row["p50"] for row in rows])
    for row in rows:
        row["slower_pct"] = 100.0 * (row["p50"] / middle - 1.0) if middle else 0.0
        row["straggler"] = row["slower_pct"] > threshold_pct
    return rows


# The parts of a step in summary.json's "attribution" (suite/train/attribution.py): they add up to
# its step time, which is what lets the lost efficiency be split between them exactly.
STEP_PARTS = (("compute_ms", "compute"), ("exposed_allreduce_ms", "exposed allreduce"),
              ("input_wait_ms", "input wait"), ("imbalance_ms", "rank imbalance"))


@dataclass(frozen=True)
class StepSplit:
    """One run's step time and its four parts (ms), for one scale of the report."""

    system: str
    np: int
    run: int
    local_batch: int
    step_ms: float
    parts: dict  # {key of STEP_PARTS: ms}
    method: str


def step_splits(scale):
    """(the scale's median run's split or None, why there is none): the median by step time.

    Of the runs whose summary.json splits the step into all four parts; for an even count the lower
    of the two middle runs, so that the figures are one run's and still add up.
    """
    found, reasons = [], set()
    for run in scale.runs:
        summary = run.summary or {}
        record = summary.get("attribution") or {}
        if record.get("step_ms") and all(record.get(key) is not None for key, _ in STEP_PARTS):
            found.append(StepSplit(scale.system, scale.np, run.index, summary.get("local_batch_size"),
                                   record["step_ms"], {key: record[key] for key, _ in STEP_PARTS},
                                   record.get("method", "")))
        else:
            reasons.add(record.get("reason") or "no attribution in summary.json (a run of an older suite)")
    if found:
        return sorted(found, key=lambda split: (split.step_ms, split.run))[(len(found) - 1) // 2], None
    return None, "; ".join(sorted(reasons)) or "no run"


def efficiency_loss(base, split):
    """{"efficiency", "scale_factor", "points": {part: lost points}} of split against base.

    Efficiency is per-rank throughput against the base's: (b_N / T_N) / (b_0 / T_0) = s·T_0/T_N with
    s = b_N / b_0 the per-rank batch ratio (1 when the per-rank batch is kept, weak scaling). As the
    parts add up to the step, 1 − s·T_0/T_N = Σ_k (c_k,N − s·c_k,0) / T_N: each part's share of the
    lost points is how far it exceeds its base value scaled to this per-rank batch.
    """
    factor = split.local_batch / base.local_batch if split.local_batch and base.local_batch else None
    if factor is None:
        return None
    points = {key: 100.0 * (split.parts[key] - factor * base.parts[key]) / split.step_ms
              for key, _ in STEP_PARTS}
    return {"efficiency": factor * base.step_ms / split.step_ms, "scale_factor": factor, "points": points}


def _batches(scale):
    """{(global batch, per-rank batch)} the scale's runs trained with, from summary.json."""
    return {(run.summary.get("global_batch_size"), run.summary.get("local_batch_size"))
            for run in scale.runs if run.summary and run.summary.get("local_batch_size")}


def scaling_mode(scales, asked="auto"):
    """('strong' | 'weak', why): the experiment the runs were, unless --scaling names one."""
    if asked != "auto":
        return asked, f"{asked} scaling as asked (--scaling {asked})"
    batches = set().union(*(_batches(s) for s in scales))
    global_batches = {g for g, _ in batches}
    local_batches = {b for _, b in batches}
    if len(global_batches) == 1 and len(local_batches) > 1:
        per_rank = ", ".join(map(str, sorted(local_batches)))
        return "strong", (f"strong scaling: the runs kept the global batch at {global_batches.pop()} and "
                          f"split it over the ranks (per-rank batch {per_rank})")
    if len(local_batches) == 1 and len(global_batches) > 1:
        return "weak", (f"weak scaling: the runs kept the per-rank batch at {local_batches.pop()} "
                        f"(global batch {', '.join(map(str, sorted(global_batches)))})")
    if len(batches) == 1:
        return "strong", ("strong scaling: one batch size was measured, so the experiment is projected at "
                          "its global batch (--scaling weak projects a fixed per-rank batch)")
    return "strong", ("strong scaling at the smallest scale's global batch: the runs kept neither the "
                      "global nor the per-rank batch fixed")


def link_plateaus(data):
    """{"network": (scale, Plateau), "one node": (scale, Plateau)}: each from its largest measured scale."""
    found = {}
    for link, chosen in (("network", lambda s: s.nodes > 1), ("one node", lambda s: s.nodes == 1)):
        curves = [s for s in data.scales if chosen(s) and s.np > 1 and s.allreduce]
        curves = [(s, scaling.plateau(s.allreduce.get("rows", []))) for s in curves]
        curves = [(s, p) for s, p in curves if p]
        if curves:
            found[link] = max(curves, key=lambda pair: pair[0].np)
    return found


def _gradient(base):
    """(bytes, dtype, parameters) of the trained model, as its runs recorded them; None if they did not."""
    for run in base.runs:
        summary = run.summary or {}
        if summary.get("gradient_bytes"):
            return (summary["gradient_bytes"], summary.get("allreduce_dtype"),
                    summary.get("trainable_parameters"))
    return None


@dataclass(frozen=True)
class ProjectionInputs:
    scenario: scaling.Scenario
    mode_reason: str
    plateaus: dict  # as link_plateaus
    gradient: tuple  # (bytes, dtype, parameters)
    base: ScaleData
    compute_note: str  # how X, the compute-only rate, came from the base scale's measurement


def projection_inputs(data, asked="auto"):
    """(ProjectionInputs, None) for the experiment this sweep ran, or (None, why there is no projection)."""
    measured = [s for s in data.scales if throughput(s)["rate"]]
    if not measured:
        return None, "no projection: no run recorded its throughput"
    base = min(measured, key=lambda s: s.np)
    gradient = _gradient(base)
    if not gradient:
        return None, ("no projection: the runs' summary.json does not record the trained model's gradient "
                      "bytes (runs of an older suite); rerun the sweep")
    plateaus = link_plateaus(data)
    if not plateaus:
        return None, ("no projection: this sweep has no allreduce measurement on more than one rank "
                      "(python -m suite.cluster.sweep --allreduce)")
    batches = sorted(_batches(base), key=str)
    if not batches or None in batches[0]:
        return None, f"no projection: the runs of {base.system} do not record their global and per-rank batch"
    mode, why = scaling_mode(measured, asked)
    global_batch, per_rank = batches[0]
    inter = plateaus.get("network", plateaus.get("one node"))[1].busbw_gbps
    intra = plateaus.get("one node", plateaus.get("network"))[1].busbw_gbps
    scenario = scaling.Scenario(
        model=data.benchmark, per_gpu_throughput=throughput(base)["per_rank"], per_gpu_batch=int(per_rank),
        gradient_bytes=int(gradient[0]), busbw_gbps=inter, nvlink_busbw_gbps=intra,
        gpus_per_node=max(s.ranks_per_node for s in data.scales), overlap=0.0,
        global_batch=int(global_batch) if mode == "strong" else 0)
    scenario, compute_note = _compute_only(scenario, base)
    return ProjectionInputs(scenario, why, plateaus, gradient, base, compute_note), None


def _compute_only(scenario, base):
    """(scenario, how X was found): X is compute only, so the base scale's own allreduce comes out.

    The model assumes no overlap, so the base's measured step b0 / X_measured is its compute plus
    its ring allreduce; without taking that out, the allreduce would count twice at every scale.
    """
    measured = scenario.per_gpu_throughput
    if base.np == 1:
        return scenario, (f"X is the one-process rate of {base.system} ({measured:.4g} samples/s): no "
                          f"allreduce in it.")
    step = scenario.per_gpu_batch / measured
    allreduce = scaling.ring_allreduce_seconds(scenario.gradient_bytes, base.np,
                                               scaling.link_for(scenario, base.np)[1])
    if allreduce >= step:
        return scenario, (f"X is {base.system}'s measured per-rank rate ({measured:.4g} samples/s), "
                          f"allreduce included: the modelled allreduce ({allreduce * 1e3:.3f} ms) is longer "
                          f"than the measured step ({step * 1e3:.3f} ms), so the two cannot be told apart.")
    compute = dataclasses.replace(scenario, per_gpu_throughput=scenario.per_gpu_batch / (step - allreduce))
    return compute, (f"X = b0 / (b0 / X_measured − allreduce(N0)) = {scenario.per_gpu_batch} / "
                     f"({step * 1e3:.3f} ms − {allreduce * 1e3:.3f} ms): {base.system}'s measured per-rank "
                     f"rate ({measured:.4g} samples/s) with its own allreduce taken out.")


def projection_rows(data, asked="auto"):
    """((inputs, projection, rows beside measured), None), or (None, why there is no projection)."""
    inputs, why = projection_inputs(data, asked)
    if inputs is None:
        return None, why
    measured = [s for s in data.scales if throughput(s)["rate"]]
    rows = [{"gpus": s.np, "samples_per_second": total}
            for s in measured for _, total, _, _ in run_throughputs(s)]
    scales = sorted({s.np for s in data.scales})
    projection = scaling.project(inputs.scenario, scales)
    return (inputs, projection, scaling.beside_measured(projection, rows)), None


# ---- banners: what makes the figures below unfit for their obvious use ----

def banners(data, asked="auto"):
    """Loud warnings for the top of the report, one string each."""
    found = []
    required = REQUIRED_RUNS.get(data.benchmark)
    short = [s for s in data.scales if required and len(s.runs) < required]
    if short:
        counts = ", ".join(f"{s.system} {len(s.runs)}" for s in short)
        found.append(f"NOT VALID FOR SUBMISSION: MLPerf requires {required} runs per system for "
                     f"{data.benchmark}; this sweep has {counts}. Those olympic means are not MLPerf "
                     f"scores, and mlperf_logging.package_checker fails the folder "
                     f"(\"found {len(short[0].runs)}, expected {required}\").")
    thin = {s.system: [(index, steps) for index, _, _, steps in run_throughputs(s)
                       if steps is not None and steps < MIN_TIMED_STEPS] for s in data.scales}
    thin = {name: found_runs for name, found_runs in thin.items() if found_runs}
    if thin:
        runs = "; ".join(f"{name} run(s) {', '.join(str(i) for i, _ in found_runs)}: "
                         f"{_steps(min(n for _, n in found_runs), max(n for _, n in found_runs))} steps"
                         for name, found_runs in thin.items())
        count = sum(len(found_runs) for found_runs in thin.values())
        found.append(f"THROUGHPUT FROM TOO FEW STEPS: {count} run(s) timed fewer than {MIN_TIMED_STEPS} "
                     f"steps ({runs}). Their samples/s, the speed-ups and the projection built on them are "
                     f"noise-level; train longer (more steps per run) before reading them.")
    inputs, _ = projection_inputs(data, asked)
    for link, (scale, plateau) in sorted((inputs.plateaus if inputs else {}).items()):
        if not plateau.reached:
            found.append(f"ALLREDUCE CURVE NEVER REACHED ITS PLATEAU ({scale.system}): "
                         + _no_plateau(plateau, inputs.gradient[0]))
    return found


def _no_plateau(plateau, gradient_bytes):
    used = f"The projection uses the largest size's {plateau.busbw_gbps:.3f} GB/s"
    if plateau.rise >= 0:
        shape = (f"bus bandwidth still rose {100 * plateau.rise:.0f}% between the two largest sizes (up to "
                 f"{_size(plateau.largest_bytes)}), so those times are per-message latency, not bandwidth. "
                 f"{used}, a lower bound: its allreduce times are upper bounds.")
    else:
        shape = (f"bus bandwidth fell {100 * -plateau.rise:.0f}% between the two largest sizes (up to "
                 f"{_size(plateau.largest_bytes)}): the end of the curve is noise, not a plateau. {used}.")
    return (f"{shape} Rerun the sweep with --allreduce-args \"--max-bytes "
            f"{_size(scaling.max_bytes_for(gradient_bytes, plateau.largest_bytes))}\" (at least the "
            f"{gradient_bytes / 1e6:.1f} MB gradient).")


# ---- the document: blocks rendered as Markdown and as HTML ----

def _fmt(value, spec):
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    return format(value, spec)


def build_document(data, threshold_pct, images, scaling_mode="auto"):
    """Blocks: ("h1"|"h2"|"p"|"banner"|"code", text), ("table", header, rows), ("img", file, caption)."""
    doc = [("h1", f"Scaling report: {data.benchmark}, {len(data.scales)} scale(s)")]
    doc += [("banner", text) for text in banners(data, scaling_mode)]
    doc += [("p", f"Sweep folder {os.path.abspath(data.folder)}; submitter {data.submitter}; cluster profile "
                  f"{data.profile}. Every figure below is measured on this sweep unless its column or "
                  f"row says projected or published. Throughput and step times aggregate several runs "
                  f"one way throughout: the {AGGREGATE}, with the min–max over runs beside it; time to "
                  f"train is MLPerf's olympic mean.")]
    doc += _ttt_section(data, images)
    doc += _runs_section(data)
    doc += _throughput_section(data, images)
    doc += _attribution_section(data, images)
    doc += _straggler_section(data, threshold_pct, images)
    doc += _network_section(data)
    doc += _allreduce_section(data, images)
    doc += _projection_section(data, scaling_mode)
    doc += _reference_section(data)
    return doc


def _ttt_section(data, images):
    header = ["system", "processes", "nodes", "preset", "runs", "converged",
              "olympic mean (min, MLPerf: non-converged = ∞)",
              "olympic mean of run times (min, status ignored)",
              "fastest (min)", "slowest (min)"]
    rows = []
    for scale in data.scales:
        t = time_to_train(scale)
        runs = f"{t['runs']}" + ("" if t["runs"] == t["planned"] else f" of {t['planned']} planned")
        rows.append([scale.system, str(scale.np), str(scale.nodes), scale.preset, runs,
                     f"{t['converged']} of {t['runs']}",
                     *(_fmt(t[key], ".4f") for key in ("olympic", "olympic_all", "min", "max"))])
    return [("h2", "Time to train (measured)"),
            ("p", "Time to train is run_stop − run_start in each MLPerf log, in minutes. The olympic mean "
                  "drops the fastest and the slowest run and averages the rest. Under the MLPerf rules a "
                  "run that does not reach the target counts as infinitely slow, so one such run is the one "
                  "dropped and two or more leave the scale unscored (—). The next column is the same "
                  "arithmetic over every run time whatever its status, which is what "
                  "mlperf_logging.result_summarizer prints (it does not look at run_stop's status)."),
            ("table", header, rows), *_image(images, "time_to_train.png", "Time to train per run and scale")]


def _runs_section(data):
    header = ["system", "run", "status", "run_start (ms)", "run_stop (ms)", "time to train (min)",
              "last accuracy", "log"]
    rows = []
    for scale in data.scales:
        for run in scale.runs:
            accuracy = run.log.accuracies[-1][1] if run.log.accuracies else None
            rows.append([scale.system, str(run.index), run.log.status, str(run.log.run_start_ms),
                         str(run.log.run_stop_ms), f"{run.log.minutes:.4f}", _fmt(accuracy, ".4f"),
                         os.path.relpath(run.log.path, data.folder)])
    return [("h2", "Runs (measured, from the MLPerf logs)"), ("table", header, rows)]


def _throughput_section(data, images):
    header = ["system", "processes", "nodes", f"throughput (samples/s, total; {AGGREGATE})",
              "min–max over runs (samples/s)", f"per rank (samples/s; {AGGREGATE})", "runs",
              "timed steps per run (min–max)", "speed-up (throughput)", "scaling efficiency (throughput)",
              "speed-up (olympic time to train)"]
    rows = [[r["system"], str(r["np"]), str(r["nodes"]), _fmt(r["rate"], ",.2f"), _spread(r["min"], r["max"]),
             _fmt(r["per_rank"], ",.2f"), str(r["runs"]), _steps(r["steps_min"], r["steps_max"]),
             _fmt(r["speedup"], ".3f"), _pct(r["efficiency"]), _fmt(r["ttt_speedup"], ".3f")]
            for r in scaling_rows(data.scales)]
    return [("h2", "Throughput and scaling (measured)"),
            ("p", f"Throughput is the {AGGREGATE} of summary.json's training samples/s (steady state: the "
                  f"first timing interval, with tracing and warm-up, is left out; evaluation is not training "
                  f"time). Timed steps are the steps behind each run's figure (the fewest any rank timed); "
                  f"under {MIN_TIMED_STEPS} the figure is flagged at the top. Speed-up and efficiency are "
                  f"against the smallest scale; efficiency = speed-up × smallest processes / processes."),
            ("table", header, rows), *_image(images, "throughput.png", "Throughput, total and per rank"),
            *_image(images, "scaling.png", "Speed-up and efficiency: measured, ideal and projected")]


ATTRIBUTION_INTRO = (
    "Every run splits its steady step time (the steps behind its throughput) into four parts that add up "
    "to it, per rank and for the job (summary.json, \"attribution\"): input wait (the wait for the next "
    "batch), exposed allreduce (from the moment the last rank had submitted its last gradient to the end "
    "of the step's last allreduce, read from Horovod's timeline over a few steady steps), rank imbalance "
    "(how long the first rank ready waited for the last one) and compute (the rest, with the optimizer's "
    "apply). One rank has no allreduce or imbalance by definition. Each scale shows its median run by step "
    "time.")


def _attribution_section(data, images):
    """Per scale, the median run's step split into four parts and each part's share of the lost points."""
    found = [(scale, *step_splits(scale)) for scale in sorted(data.scales, key=lambda s: s.np)]
    splits = [split for _, split, _ in found if split]
    if not splits:
        why = "; ".join(f"{scale.system}: {reason}" for scale, _, reason in found)
        return [("h2", "Where the efficiency went"), ("p", f"{ATTRIBUTION_INTRO} No run has a split: {why}.")]
    header = ["system", "processes", "run", "per-rank batch", "step (ms)",
              *(f"{label} (ms)" for _, label in STEP_PARTS), "efficiency (these step times)", "lost points",
              *(f"{label} (points)" for _, label in STEP_PARTS)]
    rows = [_attribution_row(splits[0], split) for split in splits]
    notes = [("p", f"{scale.system} has no split: {reason}.") for scale, split, reason in found if not split]
    return [("h2", "Where the efficiency went (measured)"), ("p", ATTRIBUTION_INTRO),
            ("p", _split_text(splits)), ("table", header, rows), *notes,
            *_image(images, "attribution.png", "Step time split and lost efficiency per scale")]


def _attribution_row(base, split):
    loss = efficiency_loss(base, split)
    parts = [f"{split.parts[key]:.1f}" for key, _ in STEP_PARTS]
    if loss is None:
        shares = ["—"] * (2 + len(STEP_PARTS))
    else:
        shares = [_pct(loss["efficiency"]), f"{100 * (1 - loss['efficiency']):.1f}",
                  *(f"{loss['points'][key]:+.1f}" for key, _ in STEP_PARTS)]
    return [split.system, str(split.np), str(split.run), str(split.local_batch), f"{split.step_ms:.1f}",
            *parts, *shares]


def _split_text(splits):
    base = splits[0]
    text = (f"Against the smallest scale ({base.system}): efficiency = s·T₀/T_N with s the per-rank batch "
            f"ratio, and as the parts add up to the step, the lost points 100·(1 − s·T₀/T_N) split exactly "
            f"into 100·(c_N − s·c₀)/T_N per part; a negative share is a part that shrank. The efficiency "
            f"here comes from the same step times, so it can differ a little from the throughput table's "
            f"({AGGREGATE} of samples/s).")
    batches = sorted({split.local_batch for split in splits}, key=str)
    if len(batches) > 1:
        text += (f" The per-rank batch changes between scales ({', '.join(map(str, batches))}): linear "
                 f"scaling would keep every part at s times its base value, so compute's share also holds "
                 f"what the smaller per-rank batch costs per sample.")
    return text


def _spread(low, high):
    return "—" if low is None else f"{low:,.2f}–{high:,.2f}"


def _steps(low, high):
    if low is None:
        return "—"
    return str(low) if low == high else f"{low}–{high}"


def _straggler_section(data, threshold_pct, images):
    blocks = [("h2", "Per-rank step time (measured): stragglers"),
              ("p", f"Per rank, from summary.json: the median over runs of each run's p50 and p90 step time, "
                    f"and the largest step over all runs. A rank whose p50 is more than {threshold_pct:g}% "
                    f"above the median rank's p50 is flagged.")]
    header = ["system", "rank", "host", "runs", "p50 (ms)", "p90 (ms)", "max (ms)", "vs median rank",
              "straggler"]
    rows = []
    for scale in data.scales:
        for row in stragglers(scale, threshold_pct):
            rows.append([scale.system, str(row["rank"]), row["host"], str(row["runs"]),
                         *(_fmt(row[key], ".1f") for key in ("p50", "p90", "max")),
                         f"{row['slower_pct']:+.1f}%", "YES" if row["straggler"] else "no"])
    return blocks + [("table", header, rows), *_image(images, "stragglers.png", "Per-rank step time")]


def _network_section(data):
    from suite.common.busbw import WARN_BELOW
    header = ["system", "run", "profile", "carried by", "network (per rank)", "RDMA", "probe busbw (GB/s)",
              "expected (GB/s)", "verdict"]
    rows = [_network_row(scale, run) for scale in data.scales for run in scale.runs]
    rows = [row for row in rows if row]
    intro = ("Before run_start (untimed) every run records which transport NCCL chose on each rank, read "
             "from NCCL's own INFO lines, and times one allreduce of a large message; its bus bandwidth is "
             f"compared with the cluster profile's expected figure for the node count and warned about "
             f"below {WARN_BELOW} of it. A CPU run's gradients go over Gloo or MPI, never RDMA.")
    if not rows:
        return [("h2", "Network per run"),
                ("p", intro + " No run of this sweep recorded it (one host on the CPU has no network to "
                              "check).")]
    return [("h2", "Network per run (measured before run_start)"), ("p", intro), ("table", header, rows)]


def _network_row(scale, run):
    env = run.env or {}
    net, profile = env.get("network"), env.get("profile")
    if not net:
        return None
    probe = net.get("probe") or {}
    rdma = {True: "yes", False: "NO", None: "n/a (one node)" if net.get("nodes") == 1 else "unknown"}
    return [scale.system, str(run.index), (profile or {}).get("name", "none"), net.get("library", "?"),
            _networks(net), rdma[net.get("rdma")],
            f"{probe['busbw_gbps']:.3f} at {_size(probe['bytes'])}" if probe else "—",
            _fmt(net.get("expected_busbw_gbps"), "g"), net.get("status", "?")]


def _networks(net):
    """'IB' when every rank agrees, else each network with the ranks that chose it."""
    ranks = net.get("ranks") or []
    if not any(ranks):
        return "—"
    by_network = {}
    for rank, found in enumerate(ranks):
        if found is not None:
            by_network.setdefault(found.get("network") or "unknown", []).append(rank)
    if len(by_network) == 1:
        return next(iter(by_network))
    return "; ".join(f"{name} on ranks {_ranks(found)}" for name, found in sorted(by_network.items()))


def _ranks(ranks):
    return ", ".join(str(r) for r in ranks[:8]) + (" ..." if len(ranks) > 8 else "")


def _allreduce_curves(data):
    """Scales whose allreduce moved bytes between ranks: a one-rank curve is 0 by definition."""
    return [s for s in data.scales if s.allreduce and s.allreduce.get("rows")
            and (s.allreduce.get("world_size") or s.np) > 1]


def _allreduce_section(data, images):
    measured = _allreduce_curves(data)
    single = [s.system for s in data.scales if s.allreduce and s not in measured]
    alone = (f" {', '.join(single)}: one process, so nothing crosses a link (busbw is 0 by definition); "
             f"its curve is left out." if single else "")
    if not measured:
        return [("h2", "Allreduce bandwidth"),
                ("p", "Not measured on more than one rank in this sweep (python -m suite.cluster.sweep "
                      "--allreduce runs it once a scale)." + alone)]
    header = ["system", "ranks", "hosts", "size", "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)"]
    rows = [[s.system, str(s.allreduce.get("world_size")), str(s.allreduce.get("hosts_count")),
             _size(row["bytes"]), str(row["bytes"]), f"{row['time_us']:.1f}", f"{row['algbw_gbps']:.3f}",
             f"{row['busbw_gbps']:.3f}"] for s in measured for row in s.allreduce.get("rows", [])]
    verdicts = [f"{s.system}: peak busbw {s.allreduce.get('peak_busbw_gbps', 0):.3f} GB/s; "
                f"{_verdict(s.allreduce)}" for s in measured]
    return [("h2", "Allreduce bandwidth (measured)"),
            ("p", "suite.train.allreduce on each scale's job: time is the median over iterations of the "
                  "slowest rank; busbw = algbw × 2(n−1)/n. " + " ".join(verdicts) + alone),
            ("table", header, rows), *_image(images, "allreduce.png", "Allreduce bus bandwidth per size")]


def _verdict(record):
    expectation = record.get("expectation")
    if not expectation:
        return record.get("expected_busbw_source") or "no expected bandwidth to compare with"
    source = expectation.get("source") or "flag"
    return f"expected {expectation.get('expected_busbw_gbps')} GB/s ({source}): {expectation.get('status')}"


def _size(nbytes):
    from suite.common.busbw import format_size
    return format_size(nbytes)


def _projection_section(data, scaling_mode):
    found, why = projection_rows(data, scaling_mode)
    if found is None:
        return [("h2", "Projected beside measured"), ("p", why + ".")]
    inputs, projection, rows = found
    header = ["processes", "per-rank batch (the sweep's)", "projected compute (ms)",
              "projected allreduce (ms)",
              "projected throughput (samples/s)", f"measured throughput (samples/s, {AGGREGATE})",
              "measured runs", "projected efficiency", "measured efficiency", "measured / projected"]
    points = {p.gpus: p for p in projection.points}
    body = [[str(r.gpus), f"{points[r.gpus].batch:g}", f"{points[r.gpus].compute_ms:.2f}",
             f"{points[r.gpus].allreduce_ms:.3f}", _fmt(r.projected_samples_per_second, ",.2f"),
             _fmt(r.measured_samples_per_second, ",.2f"), str(r.measured_runs),
             _pct(r.projected_efficiency), _pct(r.measured_efficiency),
             _fmt(r.measured_over_projected, ".2f")] for r in rows]
    nbytes, dtype, params = inputs.gradient
    return [("h2", "Projected beside measured"),
            ("p", f"PROJECTED figures come from suite.cluster.scaling's ring-allreduce model, not from runs. "
                  f"It models the experiment this sweep ran: {inputs.mode_reason}. Its inputs are measured "
                  f"here: the per-rank throughput of the smallest scale ({inputs.base.system}, {AGGREGATE}), "
                  f"the trained model's gradient ({params:,} trainable parameters × {dtype} = {nbytes:,} "
                  f"bytes, from summary.json) and the plateau bus bandwidth of the allreduce curve; "
                  f"{inputs.scenario.gpus_per_node} ranks per node, no overlap. The formula:"),
            ("code", "\n".join(scaling.formula(inputs.scenario))),
            ("p", inputs.compute_note),
            ("p", " ".join([_plateau_text(link, scale, plateau, nbytes)
                            for link, (scale, plateau) in sorted(inputs.plateaus.items())]
                           + _stand_in(data, inputs))),
            ("p", f"Every projected column says so; the measured columns are the same runs as above "
                  f"({AGGREGATE})."),
            ("table", header, body)]


def _stand_in(data, inputs):
    """A sentence when one link's bandwidth stands in for the other's, which nothing measured."""
    gpus_per_node = inputs.scenario.gpus_per_node
    if "network" not in inputs.plateaus and any(s.np > gpus_per_node for s in data.scales):
        return ["No allreduce was measured across nodes: the one-node plateau stands in for the network, "
                "so the projection beyond one node is optimistic."]
    if "one node" not in inputs.plateaus and any(1 < s.np <= gpus_per_node for s in data.scales):
        return ["No allreduce was measured inside one node: the network plateau stands in for it, so the "
                "projection inside a node is pessimistic."]
    return []


def _plateau_text(link, scale, plateau, gradient_bytes):
    where = "across nodes" if link == "network" else "inside a node"
    if not plateau.reached:
        return f"Bandwidth {where}, from {scale.system}: NO PLATEAU: " + _no_plateau(plateau, gradient_bytes)
    return (f"Bandwidth {where}, from {scale.system}: busbw is flat within "
            f"{100 * scaling.PLATEAU_TOLERANCE:g}% of the largest size's from {_size(plateau.sizes[0])} to "
            f"{_size(plateau.sizes[-1])}; the plateau is their median, {plateau.busbw_gbps:.3f} GB/s.")


def _pct(fraction):
    return _fmt(None if fraction is None else 100 * fraction, ".1f") + ("" if fraction is None else "%")


def _reference_section(data):
    header = ["benchmark", "published system", "GPUs", "nodes", "time to train (min)",
              "runs (min, run_stop − run_start)", "source"]
    rows = [[r.benchmark, r.system, str(r.gpus), str(r.nodes), f"{r.minutes:g}", _published_runs(r), r.source]
            for r in REFERENCES]
    ratio_header = ["published pair", "GPUs", "time-to-train ratio", "efficiency (ratio / GPU factor)",
                    "source"]
    ratios = [[label, f"{small.gpus} → {large.gpus}",
               f"{small.minutes:g} / {large.minutes:g} = {small.minutes / large.minutes:.2f}x",
               _pct(small.minutes / large.minutes * small.gpus / large.gpus), large.source]
              for label, small, large in PUBLISHED_RATIOS]
    return [("h2", "Published results (reference, not measured here)"),
            ("p", f"Reference rows for the benchmarks this suite runs; this sweep ran {data.benchmark}. "
                  f"A row that lists its runs gives each run's time to 4 decimals; its time to train is "
                  f"their olympic mean."),
            ("table", header, rows),
            ("p", "Published scaling is a ratio of times to train on GPUs, a different experiment from this "
                  "sweep's throughput: it stays in its own table, off the measured plots."),
            ("table", ratio_header, ratios)]


def _published_runs(reference):
    return ", ".join(f"{ms / 60000:.4f}" for ms in reference.runs_ms) or "not listed"


def _image(images, name, caption):
    return [("img", name, caption)] if name in images else []


def render_markdown(doc):
    out = []
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2"):
            out.append(("#" if kind == "h1" else "##") + " " + block[1])
        elif kind == "p":
            out.append(block[1])
        elif kind == "banner":
            out.append(f"> **WARNING: {block[1]}**")
        elif kind == "code":
            out.append(f"```\n{block[1]}\n```")
        elif kind == "table":
            cells = lambda row: "| " + " | ".join(c.replace("|", "\\|") for c in row) + " |"  # noqa: E731
            out.append("\n".join([cells(block[1]), "|" + "---|" * len(block[1]), *map(cells, block[2])]))
        elif kind == "img":
            out.append(f"![{block[2]}]({block[1]})")
    return "\n\n".join(out) + "\n"


def render_html(doc, folder):
    """One self-contained page: the PNGs are embedded as data URIs."""
    body = []
    for block in doc:
        kind = block[0]
        if kind in ("h1", "h2", "p"):
            body.append(f"<{kind}>{_inline(block[1])}</{kind}>")
        elif kind == "banner":
            body.append(f'<div class="banner"><strong>WARNING:</strong> {_inline(block[1])}</div>')
        elif kind == "code":
            body.append(f"<pre>{html.escape(block[1])}</pre>")
        elif kind == "table":
            head = "".join(f"<th>{html.escape(c)}</th>" for c in block[1])
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>"
                           for row in block[2])
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        elif kind == "img":
            with open(os.path.join(folder, block[1]), "rb") as handle:
                encoded = base64.b64encode(handle.read()).decode("ascii")
            body.append(f'<figure><img alt="{html.escape(block[2])}" src="data:image/png;base64,{encoded}">'
                        f"<figcaption>{html.escape(block[2])}</figcaption></figure>")
    style = ("body{font-family:sans-serif;max-width:1200px;margin:auto}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #999;padding:3px 6px;font-size:90%}img{max-width:100%}"
             ".banner{border:3px solid #c00;background:#fee;color:#700;padding:8px 12px;margin:8px 0}"
             "pre{background:#f4f4f4;padding:8px}")
    title = html.escape(doc[0][1])
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


MARKDOWN_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")


def _inline(text):
    """Escaped text with its Markdown links as <a> elements."""
    escaped = html.escape(text, quote=False)
    return MARKDOWN_LINK.sub(lambda m: f'<a href="{m.group(2)}">{m.group(1)}</a>', escaped)


# ---- plots ----

def make_plots(data, folder, threshold_pct, scaling_mode="auto"):
    """Writes the PNGs into folder; returns the names written."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    for name, draw in (("time_to_train.png", _plot_ttt), ("throughput.png", _plot_throughput),
                       ("scaling.png", _plot_scaling), ("stragglers.png", _plot_stragglers),
                       ("allreduce.png", _plot_allreduce), ("attribution.png", _plot_attribution)):
        figure = draw(plt, data, threshold_pct, scaling_mode)
        if figure is not None:
            figure.savefig(os.path.join(folder, name), dpi=100)
            plt.close(figure)
            written.append(name)
    return written


def _plot_ttt(plt, data, threshold_pct, scaling_mode):
    figure, axes = plt.subplots(figsize=(7, 4.5))
    top = max((run.log.minutes for scale in data.scales for run in scale.runs), default=1.0)
    labelled = set()

    def label(text):
        """The legend text the first time a kind of mark is drawn; matplotlib leaves "_..." out."""
        first = text not in labelled
        labelled.add(text)
        return text if first else "_" + text

    for scale in data.scales:
        t = time_to_train(scale)
        for run in scale.runs:
            kind = "run (converged)" if run.log.converged else "run (not converged)"
            axes.plot(scale.np, run.log.minutes, "o" if run.log.converged else "x", color="C0",
                      label=label(kind))
        if t["olympic"] is not None:
            axes.plot(scale.np, t["olympic"], "_", color="C3", markersize=30, mew=2,
                      label=label("olympic mean (MLPerf)"))
        elif scale.runs:
            axes.annotate("unscored", (scale.np, 1.08 * top), ha="center", color="C3", fontsize=9)
            axes.plot(scale.np, 1.04 * top, "v", color="C3",
                      label=label("unscored (MLPerf: too few runs, or 2+ not converged)"))
        if t["olympic_all"] is not None:
            axes.plot(scale.np, t["olympic_all"], "_", color="C2", markersize=22, mew=2,
                      label=label("olympic mean of run times (status ignored)"))
    _axes(axes, "processes", "minutes, run_start to run_stop", "Time to train (measured)", data)
    axes.set_ylim(0, 1.15 * top)
    axes.legend(fontsize=8)
    return figure


def _plot_throughput(plt, data, threshold_pct, scaling_mode):
    rows = [r for r in scaling_rows(data.scales) if r["rate"]]
    if not rows:
        return None
    figure, (total, per_rank) = plt.subplots(1, 2, figsize=(10, 4))
    total.errorbar([r["np"] for r in rows], [r["rate"] for r in rows],
                   yerr=[[r["rate"] - r["min"] for r in rows], [r["max"] - r["rate"] for r in rows]],
                   fmt="o-", capsize=4, label=f"measured ({AGGREGATE}; bars: min–max)")
    base = rows[0]
    total.plot([r["np"] for r in rows], [base["rate"] * r["np"] / base["np"] for r in rows], "k--", lw=1,
               label="ideal (linear from the smallest scale)")
    per_rank.plot([r["np"] for r in rows], [r["per_rank"] for r in rows], "o-", color="C1",
                  label=f"measured ({AGGREGATE})")
    _axes(total, "processes", "samples/s", "Throughput, total (measured)", data)
    _axes(per_rank, "processes", "samples/s per rank", "Throughput per rank (measured)", data)
    total.legend(fontsize=8)
    per_rank.set_ylim(bottom=0)
    figure.tight_layout()
    return figure


def _plot_scaling(plt, data, threshold_pct, scaling_mode):
    """Measured throughput scaling beside the ideal and the projection of the same experiment only."""
    rows = [r for r in scaling_rows(data.scales) if r["speedup"]]
    if not rows:
        return None
    base = rows[0]["np"]
    figure, (speed, eff) = plt.subplots(1, 2, figsize=(10, 4))
    factors = [r["np"] / base for r in rows]
    speed.plot(factors, [r["speedup"] for r in rows], "o-", label=f"measured (throughput, {AGGREGATE})")
    speed.plot([1, max(factors)], [1, max(factors)], "k--", lw=1, label="ideal")
    eff.plot(factors, [100 * r["efficiency"] for r in rows], "o-",
             label=f"measured (throughput, {AGGREGATE})")
    found, _ = projection_rows(data, scaling_mode)
    if found:
        projected = [(p.gpus / base, p.samples_per_second) for p in found[1].points if p.gpus >= base]
        rate0 = projected[0][1]
        label = f"PROJECTED (ring model, {'strong' if found[0].scenario.strong else 'weak'} scaling)"
        speed.plot([p[0] for p in projected], [p[1] / rate0 for p in projected], "^--", color="C1",
                   label=label)
        eff.plot([p[0] for p in projected], [100 * p[1] / rate0 / p[0] for p in projected], "^--", color="C1",
                 label=label)
    speed.set(xlabel="scale factor (processes / smallest)", ylabel="speed-up", title="Speed-up")
    eff.set(xlabel="scale factor (processes / smallest)", ylabel="efficiency (%)", title="Scaling efficiency")
    eff.set_ylim(0, 110)
    for axes in (speed, eff):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
    figure.tight_layout()
    return figure


def _plot_stragglers(plt, data, threshold_pct, scaling_mode):
    scales = [(s, stragglers(s, threshold_pct)) for s in data.scales]
    scales = [(s, rows) for s, rows in scales if rows]
    if not scales:
        return None
    figure, axes = plt.subplots(1, len(scales), figsize=(4 * len(scales) + 1, 4), squeeze=False)
    for ax, (scale, rows) in zip(axes[0], scales):
        ranks = [r["rank"] for r in rows]
        colors = ["C3" if r["straggler"] else "C0" for r in rows]
        ax.bar(ranks, [r["p50"] for r in rows], color=colors, label="p50")
        spread = [[0] * len(rows), [r["p90"] - r["p50"] for r in rows]]
        ax.errorbar(ranks, [r["p50"] for r in rows], yerr=spread, fmt="none", ecolor="k", capsize=4,
                    label="to p90")
        ax.plot(ranks, [r["max"] for r in rows], "v", color="k", label="max")
        ax.set(xlabel="rank", ylabel="step time (ms)", title=f"{scale.system}", xticks=ranks)
        ax.legend(fontsize=7)
    figure.suptitle(f"Per-rank step time (measured); red: > {threshold_pct:g}% above the median rank")
    figure.tight_layout()
    return figure


def _plot_attribution(plt, data, threshold_pct, scaling_mode):
    """Left: each scale's step split into its parts (ms). Right: each part's share of the lost points."""
    splits = [split for split, _ in map(step_splits, sorted(data.scales, key=lambda s: s.np)) if split]
    if not splits:
        return None
    figure, (step, lost) = plt.subplots(1, 2, figsize=(10, 4))
    labels = [f"{split.np}" for split in splits]
    below = [0.0] * len(splits)
    for color, (key, label) in enumerate(STEP_PARTS):
        heights = [split.parts[key] for split in splits]
        step.bar(labels, heights, bottom=below, color=f"C{color}", label=label)
        below = [b + h for b, h in zip(below, heights)]
    losses = [efficiency_loss(splits[0], split) for split in splits]
    up, down = [0.0] * len(splits), [0.0] * len(splits)
    for color, (key, label) in enumerate(STEP_PARTS):
        points = [loss["points"][key] if loss else 0.0 for loss in losses]
        bottoms = [u if p >= 0 else d for p, u, d in zip(points, up, down)]
        lost.bar(labels, points, bottom=bottoms, color=f"C{color}", label=label)
        up = [u + max(p, 0.0) for p, u in zip(points, up)]
        down = [d + min(p, 0.0) for p, d in zip(points, down)]
    total = [100 * (1 - loss["efficiency"]) if loss else 0.0 for loss in losses]
    lost.plot(labels, total, "k_", markersize=30, mew=2, label="lost points (sum)")
    lost.axhline(0, color="k", lw=0.8)
    step.set(xlabel="processes", ylabel="ms per step", title="Step time split (measured, median run)")
    lost.set(xlabel="processes", ylabel="points of efficiency lost",
             title=f"Lost efficiency vs {splits[0].np} process{'es' if splits[0].np > 1 else ''}")
    for axes in (step, lost):
        axes.grid(alpha=0.3, axis="y")
        axes.legend(fontsize=7)
    figure.tight_layout()
    return figure


def _plot_allreduce(plt, data, threshold_pct, scaling_mode):
    measured = _allreduce_curves(data)
    if not measured:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for scale in measured:
        rows = scale.allreduce["rows"]
        axes.plot([r["bytes"] for r in rows], [r["busbw_gbps"] for r in rows], "o-", label=scale.system)
        expected = scale.allreduce.get("expected_busbw_gbps")
        if expected:
            axes.axhline(expected, ls="--", color="C3", label=f"expected ({scale.system})")
    axes.set_xscale("log", base=2)
    _axes(axes, "message size per rank (bytes)", "busbw (GB/s)", "Allreduce bus bandwidth (measured)", None)
    axes.legend(fontsize=8)
    return figure


def _axes(axes, xlabel, ylabel, title, data):
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if data is not None:
        axes.set_xticks(sorted({s.np for s in data.scales}))
    axes.grid(alpha=0.3)


# ---- writing, all or nothing ----

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


if __name__ == "__main__":
    sys.exit(main())
