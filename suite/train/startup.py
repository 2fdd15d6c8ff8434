"""What an entry point does before Horovod starts: its rank from the launcher, the cluster profile applied."""
import os
import resource
import time

from suite.common import profiles


def env_rank():
    """This process's rank from the launcher's variables, for gating messages before Horovod starts."""
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def apply_profile(name_or_path, environ=os.environ):
    """(profile, what applying it did), or (None, None); before Horovod, MPI or NCCL read anything."""
    if not name_or_path:
        return None, None
    profile = profiles.load(name_or_path)
    return profile, profiles.apply(profile, environ)


def process_age(stat_path="/proc/self/stat"):
    """Seconds since this process started (the interpreter's own start, imports included), or None
    where /proc does not say."""
    try:
        with open(stat_path) as handle:
            started_ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as handle:
            uptime = float(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 2)


def peak_memory_mb():
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


class Phases:
    """Where a rank's start-up went, phase by phase, for env.json: process start to the session (the
    interpreter, TensorFlow's and Horovod's imports), then each named phase up to run_start."""

    def __init__(self):
        self.seconds = {"imports": process_age()}
        self._last = time.monotonic()

    def mark(self, name):
        now = time.monotonic()
        self.seconds[name] = round(now - self._last, 2)
        self._last = now

    def record(self):
        return {**self.seconds, "peak_memory_mb": peak_memory_mb()}


def summarize(per_rank):
    """env.json's start-up section: every rank's phases and, per phase, the slowest rank's figure."""
    keys = [key for key in per_rank[0] if key != "rank"] if per_rank else []
    slowest = {key: max((r[key] for r in per_rank if r.get(key) is not None), default=None) for key in keys}
    return {"slowest": slowest, "ranks": per_rank}
