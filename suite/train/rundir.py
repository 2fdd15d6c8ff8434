"""The run directory: the MLPerf log and, beside it, everything the run decided (config, versions, hosts)."""
import os
import platform
import sys
import time

from suite.common.runfiles import LOG_NAME, git_revision, write_json  # noqa: F401  (write_json: for callers)


class RunDirError(RuntimeError):
    """The run directory cannot be used (it already holds a result, or is not writable)."""


def default_run_dir(preset, stamp=None):
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{preset}-{stamp}")


def _holds_a_run(log_path):
    with open(log_path, errors="replace") as handle:
        return any(f'"key": "{key}"' in line for line in handle for key in ("run_start", "run_stop"))


def prepare(path):
    """Creates the run directory; refuses one whose log holds a run, so no result is overwritten.

    A log left by a run that failed before run_start (bad data, say) holds no result and is
    replaced, so the corrected command can be repeated as it is.
    """
    log_path = os.path.join(path, LOG_NAME)
    if os.path.exists(log_path):
        if _holds_a_run(log_path):
            raise RunDirError(f"run directory {path} already holds a run in {LOG_NAME}; "
                              f"choose another --run-dir")
        os.remove(log_path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise RunDirError(f"cannot create run directory {path}: {err.strerror}") from None
    return log_path


def versions():
    import numpy
    import tensorflow as tf
    import horovod
    from importlib import metadata
    found = {"python": sys.version.split()[0], "tensorflow": tf.__version__, "horovod": horovod.__version__,
             "numpy": numpy.__version__, "platform": platform.platform()}
    for package in ("tf-keras", "mlperf-logging", "mpi4py"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def environment(world, ranks):
    """What the run ran on: versions, revision, launcher and where every rank lived."""
    hosts = sorted({r["host"] for r in ranks})
    interesting = ("HOROVOD_", "NCCL_", "UCX_", "OMPI_MCA_", "TF_", "SLURM_JOB", "CUDA_VISIBLE")
    return {
        "versions": versions(),
        "git_revision": git_revision(),
        # The oldest NVIDIA driver the image's CUDA code runs on, as the image states it
        # (container/Dockerfile.gpu-pypi); None outside such an image.
        "min_nvidia_driver": os.environ.get("SUITE_MIN_NVIDIA_DRIVER") or None,
        "launcher": world.launcher,
        "controller": world.controller,
        "distribution": getattr(world, "distribution", "horovod"),
        "device": world.device,
        "world_size": world.size,
        "hosts": hosts,
        "ranks": ranks,
        "command": sys.argv,
        "environment": {k: v for k, v in sorted(os.environ.items()) if k.startswith(interesting)},
    }
