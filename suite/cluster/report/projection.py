"""The projection beside the measured figures, and the banners that say what makes figures unfit for use."""
import dataclasses
from dataclasses import dataclass

from suite.cluster import scaling
from suite.cluster.report.figures import (MIN_TIMED_STEPS, batch_sizes, run_throughputs, scaling_mode,
                                          throughput)
from suite.cluster.report.formats import size, step_range
from suite.cluster.report.sweep_folder import SystemResults
from suite.common import mlperf_rules
from suite.common.busbw import PLATEAU_BYTES


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
    base: SystemResults
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
    batches = sorted(batch_sizes(base), key=str)
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


def banners(data, asked="auto"):
    """Loud warnings for the top of the report, one string each."""
    found = []
    required = mlperf_rules.required_runs(data.benchmark)
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
                         f"{step_range(min(n for _, n in found_runs), max(n for _, n in found_runs))} steps"
                         for name, found_runs in thin.items())
        count = sum(len(found_runs) for found_runs in thin.values())
        found.append(f"THROUGHPUT FROM TOO FEW STEPS: {count} run(s) timed fewer than {MIN_TIMED_STEPS} "
                     f"steps ({runs}). Their samples/s, the speed-ups and the projection built on them are "
                     f"noise-level; train longer (more steps per run) before reading them.")
    inputs, _ = projection_inputs(data, asked)
    for link, (scale, plateau) in sorted((inputs.plateaus if inputs else {}).items()):
        if not plateau.reached:
            found.append(f"ALLREDUCE CURVE NEVER REACHED ITS PLATEAU ({scale.system}): "
                         + no_plateau(plateau, inputs.gradient[0]))
        elif stops_short(plateau, inputs.gradient[0]):
            found.append(f"ALLREDUCE CURVE STOPS BELOW THE GRADIENT ({scale.system}): "
                         + short_of_gradient(plateau, inputs.gradient[0]))
    return found


def no_plateau(plateau, gradient_bytes):
    used = f"The projection uses the largest size's {plateau.busbw_gbps:.3f} GB/s"
    if plateau.rise >= 0:
        shape = (f"bus bandwidth still rose {100 * plateau.rise:.0f}% between the two largest sizes (up to "
                 f"{size(plateau.largest_bytes)}), so those times are per-message latency, not bandwidth. "
                 f"{used}, a lower bound: its allreduce times are upper bounds.")
    else:
        shape = (f"bus bandwidth fell {100 * -plateau.rise:.0f}% between the two largest sizes (up to "
                 f"{size(plateau.largest_bytes)}): the end of the curve is noise, not a plateau. {used}.")
    return f"{shape} {_rerun(plateau, gradient_bytes)}"


def stops_short(plateau, gradient_bytes):
    """A flat curve whose largest size is below the gradient and below PLATEAU_BYTES (256M, under which
    even a healthy network rarely plateaus): its flat stretch may be latency. A curve up to 256M or
    more is trusted for a larger gradient (BERT-large's 1.34 GB against nccl-tests' usual 1G)."""
    return plateau.reached and plateau.largest_bytes < min(gradient_bytes, PLATEAU_BYTES)


def short_of_gradient(plateau, gradient_bytes):
    """Why a flat stretch measured far below the gradient's size is no plateau to project from."""
    return (f"bus bandwidth is flat from {size(plateau.sizes[0])} to {size(plateau.largest_bytes)}, but the "
            f"training allreduces a {gradient_bytes / 1e6:.1f} MB gradient. A flat stretch of small messages "
            f"can be a step of per-message latency rather than the link's bandwidth, so the projection's "
            f"{plateau.busbw_gbps:.3f} GB/s is unconfirmed at the gradient's size. "
            f"{_rerun(plateau, gradient_bytes)}")


def _rerun(plateau, gradient_bytes):
    return (f"Rerun the sweep with --allreduce-args \"--max-bytes "
            f"{size(scaling.max_bytes_for(gradient_bytes, plateau.largest_bytes))}\" (at least the "
            f"{gradient_bytes / 1e6:.1f} MB gradient).")
