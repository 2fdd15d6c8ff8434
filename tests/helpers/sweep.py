"""What the sweep tests share: the suite's submitter name, the variable that asks a CPU run for its
timeline, the bound on a stopped sweep's end, and the temporary files cut-off writes leave."""
from suite.common import runfiles

# The submitter a sweep writes when none is given.
SUBMITTER = "mlperf-hvd-suite"
# On a CPU the runs record the timeline window of their step split only when asked for (it costs a
# core on rank 0; suite/train/attribution.py): the shared sweep asks, so its report can split.
ASK_FOR_TIMELINE = {"HOROVOD_TIMELINE": "DYNAMIC"}
# The reliability requirement: a stopped job is gone within 30 s.
STOP_BOUND_SECONDS = 30


def temp_files(folder):
    return [str(p) for p in folder.rglob("*") if runfiles.TEMP_NAME.match(p.name)]
