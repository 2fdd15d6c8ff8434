"""Reads a sweep folder for the report: each scale's MLPerf logs and what its runs recorded beside them.

The folder is a sweep's (python -m suite.cluster.sweep), whose sweep.json names the systems and
their scales. The MLPerf part of each scale, <submitter>/results/<system>/<benchmark>/result_<i>.txt,
is an MLPerf results folder, read once here by suite.cluster.results_folder (read_results, which
needs no sweep); the report's figures and its time-to-train split both take it from the scale.
"""
import json
import os
from dataclasses import dataclass, field

from suite.cluster import results_folder
from suite.common import results

MANIFEST = "sweep.json"


class ReportError(ValueError):
    """A sweep folder the report cannot use; the message is one line naming the file."""


@dataclass
class Run:
    """One result log, and the records its run directory holds beside it (None for each it lacks)."""

    index: int
    log: results.RunLog
    summary: dict = None
    config: dict = None
    env: dict = None


@dataclass
class SystemResults:
    """One system of the folder, a scale of the sweep: its size, its results folder (None before its first
    log), its runs and its allreduce curve."""

    system: str
    np: int
    nodes: int
    preset: str
    planned: int
    ranks_per_node: int
    # The distribution backend (horovod or tf) that ran it: the sweep's plan, else its runs' summary.json,
    # else horovod (a sweep of a suite that had only Horovod recorded nothing).
    distribution: str = "horovod"
    results: results_folder.ResultsFolder = None
    runs: list = field(default_factory=list)
    allreduce: dict = None


@dataclass
class SweepFolder:
    """What the report reads from a sweep folder: the benchmark, who submitted it, and its systems."""

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
        data = SweepFolder(folder, plan["benchmark"], plan["submitter"], plan.get("profile", ""),
                           [_sweep_system(folder, plan, entry) for entry in plan["scales"]])
    except (KeyError, TypeError) as err:
        raise ReportError(f"{os.path.join(folder, MANIFEST)}: not a sweep manifest (missing {err})") from None
    if not any(scale.runs for scale in data.scales):
        raise ReportError(f"{os.path.join(folder, data.submitter, 'results')}: no result logs yet; run the "
                          f"sweep first")
    return data


def _sweep_system(folder, plan, entry):
    """One scale of the sweep's plan, with the logs the sweep copied into the submission layout."""
    hosts = entry["hosts"]
    scale = SystemResults(system=entry["system"], np=entry["np"], nodes=entry["nodes"],
                          preset=entry["preset"], planned=plan["runs"],
                          ranks_per_node=min(entry["np"], hosts[0]["slots"]))
    records = os.path.join(folder, "runs", scale.system)
    scale.results = read_results(results_dir(folder, plan["submitter"], scale.system, plan["benchmark"]),
                                 plan["benchmark"], gpus=scale.np)
    scale.runs = read_runs(scale.results, records)
    scale.allreduce = _json(os.path.join(records, "allreduce.json"))
    recorded = [run.summary.get("distribution") for run in scale.runs if run.summary]
    scale.distribution = entry.get("distribution") or next(filter(None, recorded), "horovod")
    return scale


def results_dir(folder, submitter, system, benchmark):
    """Where the MLPerf submission layout keeps one system's logs of one benchmark."""
    return os.path.join(folder, submitter, "results", system, benchmark)


def read_results(logs, benchmark, gpus=None):
    """The MLPerf results folder `logs` of `benchmark`'s logs, read and scored by
    results_folder.read_folder (at `gpus` GPUs when given); None while it holds no result log."""
    if not os.path.isdir(logs) or not results.result_files(logs):
        return None
    return results_folder.read_folder(logs, gpus=gpus, benchmark=benchmark)


def read_runs(folder, records=None):
    """The runs of a results folder (read_results; None for none), in run order, each with the records
    of its run directory (records/run_<i>/: summary.json, config.json, env.json) when records is given."""
    runs = []
    for log in folder.runs if folder else ():
        index = int(os.path.basename(log.path)[len("result_"):-len(".txt")])
        run_dir = os.path.join(records, f"run_{index}") if records else None
        runs.append(Run(index, log, summary=_record(run_dir, "summary.json"),
                        config=_record(run_dir, "config.json"), env=_record(run_dir, "env.json")))
    return runs


def _record(run_dir, name):
    return _json(os.path.join(run_dir, name)) if run_dir else None


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
