"""Time to train split per scale, for the sweep's scales and the folders given with --compare.

Each scale is read as an MLPerf results folder (suite.cluster.results_folder, scored as
result_summarizer scores it) and split by suite.cluster.measured_time_to_train into training, evaluation
and the rest; two scales of one source (one sweep, one submitter's results) are factored, the smaller
against the next larger: speed-up = throughput x convergence x evaluation and overhead, exactly.
"""
import dataclasses
import os
import re
from dataclasses import dataclass

from suite.cluster import rcp, results_folder
from suite.cluster.measured_time_to_train import ScaleSummary, factor_speedup, summarize
from suite.cluster.report import compare_folders
from suite.cluster.report.sweep_folder import ReportError, load_sweep
from suite.common import mlperf_rules
from suite.common.results import LogError

THIS_SWEEP = "this sweep"
# A folder from an MLCommons results repository names its round; its logs follow that round's rules.
ROUND = re.compile(r"training_results_v(\d+)\.(\d+)")


@dataclass(frozen=True)
class Scale:
    """One scale: where it comes from, its scored folder and its split (None when nothing converged)."""

    source: str  # THIS_SWEEP, or the --compare folder it was read from
    group: str  # scales of one group are factored against each other
    system: str
    folder: results_folder.ResultsFolder
    summary: ScaleSummary
    rcp: rcp.Rcp  # None for a benchmark or ruleset with no RCP table
    problem: str = None  # why summary is None
    name: str = None  # the label, when unique_labels had to tell two alike apart
    # The distribution backend of a sweep's scale (None for a published folder: its logs do not say);
    # named in the label and the source name when its sweep ran more than one, or not Horovod's.
    distribution: str = None
    named_distribution: bool = False

    @property
    def benchmark(self):
        return self.folder.benchmark

    @property
    def label(self):
        """What a person reads: "Dell · 16xXE8545x4A100-SXM-40GB · v2.1" for a published folder (its
        submitter, system and round, from its path), "this sweep · <system>" for the sweep's own."""
        if self.name:
            return self.name
        if self.source == THIS_SWEEP:
            return " · ".join([THIS_SWEEP, *self._backend(), self.system])
        who, round_ = self._origin()
        return " · ".join([who, *self._backend(), self.system, *round_])

    @property
    def source_name(self):
        """The label without the system: "this sweep" (and its backend, "this sweep · tf", when it ran
        more than one), or a published folder's submitter and round."""
        if self.source == THIS_SWEEP:
            return " · ".join([THIS_SWEEP, *self._backend()])
        who, round_ = self._origin()
        return " · ".join([who, *self._backend(), *round_])

    def _backend(self):
        return [self.distribution] if self.named_distribution else []

    def _origin(self):
        """(submitter, or the earlier sweep's folder; [round] or []) of a --compare scale, from its path."""
        parts = os.path.abspath(self.folder.path).split(os.sep)
        submitter = parts[-4] if len(parts) >= 4 and parts[-3] == "results" else None
        round_ = ROUND.search(os.path.abspath(self.folder.path))
        return (submitter or f"sweep {os.path.basename(os.path.abspath(self.source))}",
                [f"v{round_.group(1)}.{round_.group(2)}"] if round_ else [])

    @property
    def gpu_hours_per_result(self):
        """GPU-hours of one result: the olympic time to train times the GPUs; None unscored."""
        minutes = self.folder.olympic_minutes
        return None if minutes is None or not self.folder.gpus else minutes * self.folder.gpus / 60.0

    @property
    def gpu_hours_of_runs(self):
        """GPU-hours of every run of the scale, the ones the olympic mean drops included (run_start to
        run_stop; start-up before run_start is not in the logs)."""
        if not self.folder.gpus:
            return None
        return sum(run.minutes for run in self.folder.runs) * self.folder.gpus / 60.0

    def record(self):
        """report.json's record of this scale: every figure with its unit in its key."""
        found = {"source": self.source, "label": self.label, "system": self.system,
                 "distribution": self.distribution, "folder": self.folder.path,
                 "benchmark": self.benchmark, "ruleset": self.folder.ruleset, "gpus": self.folder.gpus,
                 "global_batch_size": self.folder.global_batch_size, "runs": len(self.folder.runs),
                 "converged_runs": sum(run.converged for run in self.folder.runs),
                 "olympic_minutes": self.folder.olympic_minutes,
                 "gpu_hours_per_result": self.gpu_hours_per_result,
                 "gpu_hours_of_runs": self.gpu_hours_of_runs}
        if self.summary:
            found.update({k: v for k, v in self.summary.as_dict().items() if k not in found})
        if self.rcp and self.rcp.mean is not None:
            found[f"rcp_mean_{self.rcp.unit}"] = self.rcp.mean
        if self.problem:
            found["problem"] = self.problem
        return found


def sweep_scales(data, source=THIS_SWEEP):
    """The Scales of a loaded sweep (sweep_folder.load_sweep); a scale without logs is left out, one
    with no converged run is kept with its problem stated."""
    found = []
    backends = {scale.distribution for scale in data.scales}
    named = backends != {"horovod"}
    for scale in data.scales:
        folder = scale.results  # read once, with the sweep
        if folder is None:
            continue
        try:
            summary, problem = summarize(folder), None
        except LogError as err:
            summary, problem = None, str(err)
        # Scales of different backends are two sources of one sweep: each factored against its own.
        group = f"sweep {os.path.abspath(data.folder)}" + (f" · {scale.distribution}" if named else "")
        found.append(Scale(source, group, scale.system, folder, summary, _rcp(folder, strict=False), problem,
                           distribution=scale.distribution, named_distribution=named))
    return found


def compare_scales(dirs, benchmark=None, say=None):
    """The Scales of every --compare argument (compare_folders.expand): a results/<system>/<benchmark>/
    folder of result_*.txt, an earlier sweep's folder, or a folder searched for such results folders
    (only `benchmark`'s, when given). ReportError (one line naming the folder) for an unusable folder
    given as it is; one found by a search is left out with its reason, and `say` gets one line per
    searched argument of what it found and what it left out."""
    found = []
    for path in dirs:
        expanded = compare_folders.expand(path, benchmark)
        for sweep in expanded.sweeps:
            found += sweep_scales(load_sweep(sweep), source=sweep)
        left_out = []
        for folder in expanded.results:
            try:
                found.append(_compare_scale(folder))
            except ReportError as err:
                if not expanded.searched:
                    raise
                left_out.append(str(err))
        if expanded.searched and say:
            say(expanded.summary(benchmark))
            for reason in left_out:
                say(f"  left out: {reason}")
    return found


def _compare_scale(path):
    folder = _read(path, ruleset_of(path))
    if folder.gpus is None:
        described = results_folder.system_description_path(folder.path, folder.system)
        raise ReportError(f"{path}: no GPU count (no {described} with number_of_nodes and "
                          f"accelerators_per_node)")
    try:
        summary = summarize(folder)
    except LogError as err:
        raise ReportError(f"{err} (--compare {path})") from None
    org = os.path.dirname(os.path.dirname(os.path.dirname(folder.path)))
    return Scale(path, f"results {org}", folder.system, folder, summary, _rcp(folder, strict=True))


def unique_labels(scales):
    """The scales with labels that tell each apart: two alike (two made folders of one system) get
    " (1)", " (2)", ... in the order given."""
    counts = {}
    for scale in scales:
        counts[scale.label] = counts.get(scale.label, 0) + 1
    seen, found = {}, []
    for scale in scales:
        label = scale.label
        if counts[label] > 1:
            seen[label] = seen.get(label, 0) + 1
            scale = dataclasses.replace(scale, name=f"{label} ({seen[label]})")
        found.append(scale)
    return found


def ruleset_of(path):
    """The ruleset of a folder from an MLCommons results repository (training_results_vX.Y), else the
    suite's own."""
    match = ROUND.search(os.path.abspath(path))
    return f"{match.group(1)}.{match.group(2)}.0" if match else mlperf_rules.RULESET


def source_groups(scales):
    """{(group, benchmark): its scored scales by GPUs, then global batch}: the scales of one source
    and benchmark, which the factors, the headline and the scaling picture compare with each other."""
    groups = {}
    for scale in scales:
        if scale.summary and scale.folder.gpus:
            groups.setdefault((scale.group, scale.benchmark), []).append(scale)
    return {key: sorted(members, key=lambda s: (s.folder.gpus, s.folder.global_batch_size))
            for key, members in groups.items()}


def speedups(scales):
    """(smaller, larger, SpeedupFactors) for each two scales of one group and benchmark next in GPUs."""
    return [(small, large, factor_speedup(small.summary, large.summary))
            for members in source_groups(scales).values() for small, large in zip(members, members[1:])]


def batch_choices(scales):
    """(slower, faster, SpeedupFactors of slower -> faster) for each two scales of one benchmark at the
    same GPU count and different global batches: the weak path (a larger batch at more GPUs) against
    the strong one (the same batch everywhere), where the folders hold both."""
    found = []
    at = {}
    for scale in scales:
        if scale.summary and scale.folder.gpus:
            at.setdefault((scale.benchmark, scale.folder.gpus), []).append(scale)
    for (_, _), members in sorted(at.items()):
        members.sort(key=lambda s: s.folder.global_batch_size)
        for i, first in enumerate(members):
            for second in members[i + 1:]:
                if first.folder.global_batch_size == second.folder.global_batch_size:
                    continue
                slower, faster = sorted((first, second), key=lambda s: -s.summary.minutes)
                found.append((slower, faster, factor_speedup(slower.summary, faster.summary)))
    return found


def speedup_record(small, large, factors):
    return {"benchmark": small.benchmark, "group": small.group,
            "from": {"source": small.source, "system": small.system, "gpus": small.folder.gpus,
                     "global_batch_size": small.folder.global_batch_size},
            "to": {"source": large.source, "system": large.system, "gpus": large.folder.gpus,
                   "global_batch_size": large.folder.global_batch_size},
            **factors.as_dict(),
            "factors_product": (factors.throughput_speedup * factors.convergence_ratio
                                * factors.evaluation_and_overhead_ratio)}


def _read(path, ruleset):
    try:
        return results_folder.read_folder(path, ruleset=ruleset)
    except LogError as err:
        raise ReportError(str(err)) from None


def _rcp(folder, strict):
    """The RCP at the folder's global batch; with strict, ReportError when none covers it."""
    try:
        found = rcp.lookup(folder.benchmark, folder.ruleset, folder.global_batch_size)
    except ValueError as err:
        if strict:
            raise ReportError(f"{folder.path}: {err}") from None
        return None
    if strict and not found.covered:
        raise ReportError(f"{folder.path}: ruleset {folder.ruleset}: {found.note}")
    return found
