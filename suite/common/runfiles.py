"""Files both sides write and read, without TensorFlow: the MLPerf log's name, atomic writes, git revision.

Every file is written whole or not at all: into a hidden temporary file beside it, named after the
writing process (`.<name>.tmp.<pid>`), flushed to disk, then renamed over the old one. A writer killed
halfway leaves the old file as it was and its temporary file behind; remove_stale_temp_files clears
those once their writer is gone.
"""
import contextlib
import json
import os
import re
import shutil
import subprocess

LOG_NAME = "result_0.txt"
# NCCL's own log of each process, in the run directory: NCCL expands %h (host) and %p (process id)
# itself (NCCL's environment variables documentation, NCCL_DEBUG_FILE). The network check before
# run_start reads it from there, and it outlives the container or pod the rank ran in.
NCCL_LOG_NAME = "nccl.%h.%p.log"
# `.<name>.tmp.<pid>`, and `<name>.tmp.<pid>` as earlier versions of write_json named them.
TEMP_NAME = re.compile(r"^\.?.+\.tmp\.(?P<pid>\d+)$")


def nccl_debug_file(run_dir):
    """NCCL_DEBUG_FILE for a run directory: one file per process, beside the run's MLPerf log."""
    return os.path.join(run_dir, NCCL_LOG_NAME)


def temp_path(path):
    """The temporary file this process writes before renaming it to path."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.tmp.{os.getpid()}")


def write_atomic(path, fill, binary=False):
    """Writes path through fill(handle) all at once, or not at all.

    On any error the temporary file is removed and the old path is left as it was. An OSError names
    path: a write that fails for a full disk names no file by itself.
    """
    tmp = temp_path(path)
    try:
        with open(tmp, "wb" if binary else "w") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        if err.filename not in (None, tmp):
            raise
        raise OSError(err.errno, err.strerror, path) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)


def write_json(path, data):
    def fill(handle):
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
        handle.write("\n")
    write_atomic(path, fill)


def write_text(path, text):
    write_atomic(path, lambda handle: handle.write(text))


def read_json(path):
    """A JSON file's contents, or None when it is missing or not JSON (a record a run never wrote)."""
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def copy_atomic(source, target):
    """Copies source to target byte for byte, all at once or not at all."""
    with open(source, "rb") as original:
        write_atomic(target, lambda handle: shutil.copyfileobj(original, handle), binary=True)


def remove_stale_temp_files(folder):
    """Removes the temporary files under folder whose writer is gone; returns their paths.

    A writer is gone when no process has its pid, or the process with that pid started after the
    file was last written to (pids are reused, and soon on a busy machine).
    """
    removed = []
    for root, _, names in os.walk(folder):
        for name in names:
            match = TEMP_NAME.match(name)
            path = os.path.join(root, name)
            if match and not _may_be_writing(int(match["pid"]), path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
                removed.append(path)
    return removed


def _may_be_writing(pid, path):
    started = process_start_time(pid)
    try:
        written = os.stat(path).st_mtime
    except FileNotFoundError:
        return True  # its writer renamed it just now
    # The boot time is known to the second only.
    return started is not None and started <= written + 1


def process_start_time(pid):
    """When a live process started (seconds since the epoch), or None when there is none (or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/stat") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
    except (OSError, IndexError, StopIteration, ValueError):
        return None
    if fields[0] == "Z":
        return None
    # Field 22 of /proc/<pid>/stat (the 20th after the command name): clock ticks after boot.
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def git_revision():
    """HEAD of the suite's checkout (-dirty with uncommitted changes). A container image holds no .git:
    there it is SUITE_GIT_REVISION, which container/build.sh sets to the revision the image was built
    from; "unknown" when neither says."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return os.environ.get("SUITE_GIT_REVISION") or "unknown"
