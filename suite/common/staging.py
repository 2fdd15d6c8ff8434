"""Writing a dataset all or nothing: a scratch directory renamed into place, and even shard splits."""
import contextlib
import os
import shutil
import tempfile

import numpy as np


@contextlib.contextmanager
def staged_output(out_dir, error=ValueError):
    """Yields a scratch directory that becomes `out_dir` only if the block succeeds.

    A non-empty `out_dir` is refused with `error` (the caller's own error type).
    """
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise error(f"output directory is not empty: {out_dir}")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".partial-", dir=parent)
    try:
        yield staging
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes it private
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)
        # One rename, so a crash never leaves a half-written dataset under the real name.
        os.rename(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def split_evenly(items, count):
    """`count` contiguous chunks whose sizes differ by at most one (as imagenet_to_gcs.py splits them)."""
    bounds = np.linspace(0, len(items), count + 1).astype(int)
    return [items[bounds[i]:bounds[i + 1]] for i in range(count)]
