"""An MLPerf results folder (results/<system>/<benchmark>/result_*.txt), scored as result_summarizer does.

Works for any submitter's folder, whatever framework wrote the logs: each log is read by
mlperf_logging's own parser (results.parsed_events), which takes every line from ':::MLLOG' on
and skips everything else, so launcher and framework output between the MLLOG lines and rank
prefixes do no harm; duplicate lines from several ranks are taken the way result_summarizer
takes them (results.run_start_stop).

The score is result_summarizer's (`_compute_strong_score_standalone` in
mlperf_logging/result_summarizer/result_summarizer.py): time to train per run is
(run_stop - run_start) / 60000; a run it cannot score is dropped, and dropping counts as the
slowest, so with one dropped only the fastest other run goes, with more than one (more than four
for unet3d) the folder is not scored; the mean is then multiplied by the factor of the folder's
scaling.json, if the review committee gave it one. result_summarizer drops a run whose log fails
the compliance checker; this reader, by default, drops a run whose run_stop status is not
success, which needs no checker and drops the same runs wherever the installed checker accepts
the converged logs (a closed-division log that did not converge fails it). `compliance=True` runs
the installed checker the way result_summarizer does and drops exactly what it drops; its rules
can be newer than a published log (the installed 2.1.0 BERT rules reject NVIDIA's v2.1 logs, whose
LAMB epsilon key has the name of their round's rules). A log the parser cannot read is an error
here (LogError naming it), where result_summarizer would print it and drop the run.

The GPU count is number_of_nodes x accelerators_per_node from systems/<system>.json, beside
the results/ folder (two levels above the benchmark folder's parent), or given by the caller.
"""
import json
import logging
import os
from dataclasses import dataclass

from mlperf_logging.compliance_checker import mlp_compliance

from suite.common import mlperf_rules, results
from suite.common.results import LogError

USAGE = "training"


class FolderError(LogError):
    """A folder that is not an MLPerf results folder, or that cannot be scored; one line naming it."""


@dataclass(frozen=True)
class ResultsFolder:
    """The runs of one benchmark folder and what the score needs."""

    path: str
    system: str
    benchmark: str
    ruleset: str
    runs: tuple  # results.RunLog per result_*.txt, by index, with its events
    gpus: int  # None when neither the system description nor the caller gave it
    gpus_per_node: int  # accelerators_per_node, None without a system description
    scaling_factor: float = 1.0  # scaling.json's; result_summarizer multiplies the score by it
    checked: bool = False  # the compliance checker ran (read_folder's compliance=True)
    rejected: tuple = ()  # (path, the checker's first message) per log it rejected

    @property
    def global_batch_size(self):
        return self.runs[0].global_batch_size

    def counted(self, run):
        """Whether the score counts this run: it passed the checker when that ran, else it converged."""
        if self.checked:
            return run.path not in {path for path, _ in self.rejected}
        return run.converged

    @property
    def olympic_runs(self):
        """The runs result_summarizer's olympic mean averages, fastest first; None when too many runs
        were dropped to score."""
        minutes, scored = [run.minutes for run in self.runs], [self.counted(run) for run in self.runs]
        kept = mlperf_rules.olympic_kept(minutes, scored, mlperf_rules.olympic_drop(self.benchmark))
        return None if kept is None else tuple(self.runs[i] for i in kept)

    @property
    def olympic_minutes(self):
        """The score: result_summarizer's olympic mean of the minutes, times the scaling factor; None
        when too many runs were dropped to score."""
        kept = self.olympic_runs
        return None if kept is None else sum(run.minutes for run in kept) / len(kept) * self.scaling_factor

    def converged_runs(self):
        """The converged runs; FolderError when there is none (nothing to take a time to train from)."""
        found = [run for run in self.runs if run.converged]
        if not found:
            raise FolderError(f"{self.path}: no converged run (no run_stop with status success in its "
                              f"{len(self.runs)} logs)")
        return found


def read_folder(folder, ruleset=mlperf_rules.RULESET, gpus=None, compliance=False, benchmark=None):
    """The ResultsFolder at `folder`; FolderError (or LogError for one log) with one line otherwise.

    gpus: the GPU count when the folder has no system description (it wins over one).
    compliance: run the installed compliance checker on every log, as result_summarizer does.
    benchmark: the MLPerf benchmark its logs must be of, when the caller knows it.
    """
    if ruleset not in mlp_compliance.rule_choices():
        raise ValueError(f"unknown ruleset {ruleset!r}: the installed mlperf-logging has "
                         f"{', '.join(sorted(mlp_compliance.rule_choices()))}")
    folder = os.path.normpath(folder)
    if not os.path.isdir(folder):
        raise FolderError(f"{folder}: not an MLPerf results folder (no such directory)")
    paths = results.result_files(folder)
    if not paths:
        raise FolderError(f"{folder}: not an MLPerf results folder (no result_<i>.txt in it)")
    runs = tuple(results.run_from_events(path, results.parsed_events(path, ruleset), benchmark)
                 for path in paths)
    _check_alike(folder, runs)
    system = os.path.basename(os.path.dirname(folder))
    try:
        found_gpus, per_node = _system_gpus(folder, system)
    except FolderError:
        if gpus is None:
            raise
        # The caller knows the count: a description that gives none (a CPU sweep's zero accelerators)
        # is no obstacle.
        found_gpus, per_node = None, None
    rejected = tuple(_rejections(paths, ruleset)) if compliance else ()
    return ResultsFolder(path=folder, system=system, benchmark=runs[0].benchmark, ruleset=ruleset, runs=runs,
                         gpus=gpus if gpus is not None else found_gpus, gpus_per_node=per_node,
                         scaling_factor=_scaling_factor(folder), checked=compliance, rejected=rejected)


def system_description_path(folder, system):
    """<org>/systems/<system>.json for <org>/results/<system>/<benchmark>."""
    org = os.path.dirname(os.path.dirname(os.path.dirname(folder)))
    return os.path.join(org, "systems", f"{system}.json")


def _check_alike(folder, runs):
    # The RCP check and the score are per benchmark and global batch: a folder mixing them is not one scale.
    for name in ("benchmark", "global_batch_size"):
        values = sorted({str(getattr(run, name)) for run in runs})
        if len(values) > 1:
            raise FolderError(f"{folder}: its logs differ in {name} ({', '.join(values)}); one folder is one "
                              f"benchmark at one scale")
    if not isinstance(runs[0].global_batch_size, int) or runs[0].global_batch_size <= 0:
        raise FolderError(f"{runs[0].path}: no usable global_batch_size ({runs[0].global_batch_size!r})")


def _system_gpus(folder, system):
    """(number_of_nodes x accelerators_per_node, accelerators_per_node), or (None, None) without the file."""
    path = system_description_path(folder, system)
    if not os.path.isfile(path):
        return None, None
    try:
        with open(path) as handle:
            desc = json.load(handle)
        nodes, per_node = int(desc["number_of_nodes"]), int(desc["accelerators_per_node"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise FolderError(f"{path}: not a usable system description (number_of_nodes and "
                          f"accelerators_per_node as integers): {err}") from None
    if nodes < 1 or per_node < 1:
        raise FolderError(f"{path}: number_of_nodes {nodes} and accelerators_per_node {per_node} must be "
                          f"positive")
    return nodes * per_node, per_node


def _scaling_factor(folder):
    path = os.path.join(folder, "scaling.json")
    if not os.path.isfile(path):
        return 1.0
    try:
        with open(path) as handle:
            return float(json.load(handle)["scaling_factor"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise FolderError(f"{path}: no usable scaling_factor: {err}") from None


def _rejections(paths, ruleset):
    """(path, first message) for each log the installed checker rejects, run as result_summarizer runs it."""
    config = f"{USAGE}_{ruleset}/common.yaml"
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the checker logs every finding; the message we keep is enough
    try:
        for path in paths:
            checker = mlp_compliance.make_checker(usage=USAGE, ruleset=ruleset, quiet=True, werror=False)
            valid, _, _, _ = mlp_compliance.main(path, config, checker)
            if not valid:
                messages = [*checker.overwritable.values(), *checker.not_overwritable]
                yield path, " ".join(str(messages[0]).split()) if messages else "failed the compliance check"
    finally:
        logging.disable(previous)
