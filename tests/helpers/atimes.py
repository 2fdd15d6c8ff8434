"""When a rank first read a file, from its access time: old atimes set, then read back, on a file
system that records reads."""
import os

import pytest


OLD_ATIME = 1_000_000_000  # 2001: older than any mtime, so the first read after it moves the atime


def age_atimes(paths):
    for path in paths:
        os.utime(path, ns=(OLD_ATIME * 10**9, os.stat(path).st_mtime_ns))


def first_reads(paths):
    """path -> time of its first read in ms since the epoch, for the files read since age_atimes."""
    reads = {}
    for path in paths:
        atime = os.stat(path).st_atime_ns
        if atime != OLD_ATIME * 10**9:
            reads[path] = atime / 1e6
    return reads


def require_read_atimes(tmp_path):
    """The proof rests on the file system moving an old atime on a read (relatime or strictatime)."""
    probe = tmp_path / "atime-probe"
    probe.write_bytes(b"x" * 4096)
    age_atimes([str(probe)])
    probe.read_bytes()
    if not first_reads([str(probe)]):
        pytest.fail(f"{tmp_path} does not record read times (mounted noatime?): this test cannot tell "
                    f"when ranks first read the dataset")
