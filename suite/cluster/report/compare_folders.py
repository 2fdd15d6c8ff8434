"""What --compare points at, expanded to results folders: one results/<system>/<benchmark>/ folder, an
earlier sweep, or a folder that holds many of them — a submitter's folder (Dell/) or a whole clone of
mlcommons/training_results_vX.Y — searched for every results/<system>/<benchmark>/ of result_*.txt."""
import glob
import os
from dataclasses import dataclass, field

from suite.cluster.report.sweep_folder import MANIFEST, ReportError

RESULT_LOGS = "result_*.txt"


@dataclass
class Expanded:
    """The folders one --compare argument stands for: `sweeps` and `results` to read; `found` says
    what the search found, for its one line."""

    given: str
    sweeps: list = field(default_factory=list)
    results: list = field(default_factory=list)
    searched: bool = False  # True when `given` was searched rather than read as it is

    def summary(self, benchmark=None):
        """One line: what a searched folder held."""
        which = f" of {benchmark}" if benchmark else ""
        names = ", ".join(f"{_parent(path)}/{os.path.basename(path)}" for path in self.results)
        return f"--compare {self.given}: {len(self.results)} results folder(s){which}: {names}"


def expand(path, benchmark=None):
    """The Expanded of one --compare argument; ReportError naming it when it holds nothing usable."""
    if not os.path.isdir(path):
        raise ReportError(f"--compare {path}: not a folder")
    if os.path.isfile(os.path.join(path, MANIFEST)):
        return Expanded(path, sweeps=[path])
    if glob.glob(os.path.join(path, RESULT_LOGS)):
        return Expanded(path, results=[path])
    found = Expanded(path, results=_search(path, benchmark), searched=True)
    if not found.results:
        which = f" of benchmark {benchmark}" if benchmark else ""
        raise ReportError(f"--compare {path}: no results/<system>/<benchmark>/ folder of {RESULT_LOGS}"
                          f"{which} in it, and it is neither one nor a sweep folder")
    return found


def _search(root, benchmark):
    """Every <...>/results/<system>/<benchmark>/ below root that holds result logs, sorted."""
    found = []
    for here, folders, files in os.walk(root):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        parts = os.path.normpath(here).split(os.sep)
        if len(parts) < 3 or parts[-3] != "results" or not any(_is_log(name) for name in files):
            continue
        if benchmark is None or parts[-1] == benchmark:
            found.append(here)
        folders[:] = []  # nothing below a benchmark folder is another one
    return found


def _is_log(name):
    return name.startswith("result_") and name.endswith(".txt")


def _parent(path):
    return os.path.basename(os.path.dirname(os.path.normpath(path)))
