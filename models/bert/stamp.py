"""The closed-division stamp of a BERT data folder: written by `data_cli check` once it has verified the
MLPerf dataset and the phase-1 checkpoint (sizes and MD5s), matched by a run without reading a record.

The MLPerf clock starts before anything touches the data, so a run cannot verify 4 GB of checkpoint or
the records itself. The check writes what it verified into `<data-dir>/mlperf_checked.json`: every data
and checkpoint file by real path with its size and modification time, and the checkpoint's MD5s. A run
is closed only when its data folder and its init_checkpoint are the stamped ones and every stamped file
still has its size and modification time (os.stat only), so a checkpoint of the right shapes that is
not the phase-1 one (the run's own later output, say) makes it open.
"""
import json
import os
import time

from suite.common import runfiles

STAMP_FILE = "mlperf_checked.json"
STAMP_VERSION = 1


def _stat(path):
    found = os.stat(path)
    return {"bytes": found.st_size, "mtime_ns": found.st_mtime_ns}


def write(data_dir, data_files, checkpoint_files, checkpoint_md5):
    """Records a clean full check; data_files, checkpoint_files: paths; checkpoint_md5: {name: md5}."""
    record = {
        "version": STAMP_VERSION,
        "written_by": "python -m models.bert.data_cli check --data-dir DIR --checkpoint-dir DIR",
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "data_files": {os.path.realpath(path): _stat(path) for path in data_files},
        "checkpoint_files": {os.path.realpath(path): _stat(path) for path in checkpoint_files},
        "checkpoint_md5": dict(checkpoint_md5),
    }
    path = os.path.join(os.fspath(data_dir), STAMP_FILE)
    runfiles.write_json(path, record)
    return path


def problem(data_dir, data_files, checkpoint_files):
    """Why this run's data and checkpoint are not the stamped ones (one line), or None when they are.

    data_files: the files the run would read; checkpoint_files: the TF1 files of its init_checkpoint.
    """
    path = os.path.join(os.fspath(data_dir), STAMP_FILE)
    remedy = (f"run `python -m models.bert.data_cli check --data-dir {data_dir} --checkpoint-dir "
              f"<phase-1 checkpoint>` (without --skip-md5), which writes it after verifying both")
    try:
        with open(path) as handle:
            record = json.load(handle)
    except FileNotFoundError:
        return f"no {path}: the MLPerf data and phase-1 checkpoint are not verified; {remedy}"
    except (OSError, ValueError) as err:
        return f"{path} cannot be read ({err}); {remedy}"
    if not isinstance(record, dict) or record.get("version") != STAMP_VERSION:
        return f"{path} is not a stamp this suite wrote; {remedy}"
    for kind, files in (("data_files", data_files), ("checkpoint_files", checkpoint_files)):
        stamped = record.get(kind) or {}
        mine = {os.path.realpath(file) for file in files}
        if kind == "data_files" and mine != set(stamped):
            return (f"{path} was written for other data files than {data_dir} holds now "
                    f"({len(stamped)} stamped, {len(mine)} here); {remedy}")
        unstamped = sorted(mine - set(stamped))
        if unstamped:
            return f"{unstamped[0]} is not the checkpoint {path} verified; {remedy}"
        for file in sorted(mine):
            try:
                now = _stat(file)
            except OSError:
                return f"{file}, stamped in {path}, is missing; {remedy}"
            if now != stamped[file]:
                return f"{file} changed since {path} was written (size or modification time); {remedy}"
    return None
