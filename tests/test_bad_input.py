"""Bad input through the public entry points: one clear line, non-zero exit, no hang, no lost results.

Each case runs `python -m models.resnet50` (alone or under horovodrun) in a subprocess with a
timeout, so a hang fails the test. The culprit must be named in the last line of stderr (after
TensorFlow's start-up noise), no traceback may be printed, and once run_start is logged the MLPerf
log must end with run_stop status aborted.
"""
import json
import os
import re
import shutil
import socket
import time

import pytest

from helpers.failures import (TRACEBACK, assert_aborted, assert_not_started, assert_one_line_error,
                              assert_ranks_report, last_line, rank_lines)
from helpers.running import TINY, run, train_cmd
from helpers.runs import read_log


SINGLE_TIMEOUT = 180
LAUNCH_TIMEOUT = 300


def assert_records_whole(run_dir):
    """summary.json and config.json are absent or whole JSON; no temporary file is left behind."""
    if not os.path.isdir(run_dir):
        return
    for name in ("summary.json", "config.json", "env.json"):
        path = os.path.join(run_dir, name)
        if os.path.exists(path):
            with open(path) as handle:
                json.load(handle)
    leftovers = [name for name in os.listdir(run_dir) if ".tmp." in name]
    assert not leftovers, leftovers


def train(*args, timeout=SINGLE_TIMEOUT):
    return run(train_cmd(*args), timeout=timeout)


def launch(*args, np=2, timeout=LAUNCH_TIMEOUT):
    # mpirun, Horovod's MPI controller as under plain horovodrun, without horovodrun's check of Horovod's
    # build (a TensorFlow process of its own): the subject is the ranks' handling of bad input.
    return run(train_cmd(*args, launcher=("mpirun", "--tag-output"), np=np), timeout=timeout)


def copy_dataset(small_data, tmp_path, name="data"):
    out = tmp_path / name
    shutil.copytree(small_data, out)
    return out


def garble(path, how):
    """Damages a TFRecord shard: zeros over its middle bytes, or its second half cut off."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    if how == "garbled":
        data[middle:middle + 64] = bytes(64)
    else:
        del data[middle:]
    path.write_bytes(bytes(data))


# --------------------------------------------------------------------------------------------
# Flags, presets, settings and config files: refused before TensorFlow loads, exit code 2


def test_help_lists_presets_quickly():
    started = time.monotonic()
    result = train("--help", timeout=60)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 30
    from models.resnet50.presets import PRESETS
    for name in PRESETS:
        assert name in result.stdout
    assert "--set KEY=VALUE" in result.stdout


def test_unknown_preset_names_it_and_lists_choices(tmp_path):
    result = train("--preset", "nope", "--run-dir", str(tmp_path / "run"), timeout=60)
    line = assert_one_line_error(result, "'nope'", "tiny_cpu", "closed_8xA100_gbs3264", code=2)
    assert "preset" in line
    assert not (tmp_path / "run").exists()


def test_unknown_flag_is_an_argparse_error(tmp_path):
    result = train("--bogus", "--run-dir", str(tmp_path / "run"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert TRACEBACK not in result.stderr
    line = last_line(result.stderr)
    # argparse's own form, "<prog>: error: ...", keeps the program name in front.
    assert re.match(r"^(python -m models\.resnet50: )?error: ", line), line
    assert "--bogus" in line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("setting, culprits", [
    ("bogus=1", ["bogus", "unknown setting"]),
    ("epochs=abc", ["epochs", "abc", "int"]),
    ("xla=maybe", ["xla", "maybe", "bool"]),
    ("epochs", ["epochs", "key=value"]),
    ("precision=fp64", ["precision", "fp64"]),
    ("epochs=0", ["epochs", "positive"]),
])
def test_bad_set_names_the_key(setting, culprits, small_data, tmp_path):
    result = train(*TINY, "--data-dir", small_data, "--run-dir", str(tmp_path / "run"), "--set", setting,
                   timeout=60)
    assert_one_line_error(result, *culprits, code=2)
    assert not (tmp_path / "run").exists()


def test_missing_config_file_is_named(small_data, tmp_path):
    path = tmp_path / "absent.json"
    result = train(*TINY, "--data-dir", small_data, "--config", str(path), timeout=60)
    assert_one_line_error(result, str(path), "not found", code=2)


@pytest.mark.parametrize("name, text, culprits", [
    ("broken.json", '{"epochs": ', []),
    ("list.json", "[1, 2]", ["mapping"]),
    ("unknown.json", '{"epochz": 2}', ["epochz"]),
    ("typed.json", '{"epochs": "two"}', ["epochs", "int"]),
    ("broken.yaml", "epochs: [1,\n", []),
])
def test_bad_config_file_is_named(name, text, culprits, small_data, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    result = train(*TINY, "--data-dir", small_data, "--config", str(path), timeout=60)
    assert_one_line_error(result, str(path), *culprits, code=2)


# --------------------------------------------------------------------------------------------
# Data and run directories: refused during init, before run_start


@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_bad_data_directory_is_named(kind, tmp_path):
    data_dir = tmp_path / "data"
    if kind == "empty":
        data_dir.mkdir()
    run_dir = tmp_path / "run"
    result = train(*TINY, "--data-dir", str(data_dir), "--run-dir", str(run_dir))
    line = assert_one_line_error(result, str(data_dir))
    assert ("not found" if kind == "missing" else "no training TFRecords") in line
    assert_not_started(run_dir)
    assert_records_whole(run_dir)


def test_run_directory_with_a_result_is_refused_untouched(small_data, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    previous = b':::MLLOG {"key": "run_stop", "metadata": {"status": "success"}}\n\x00 earlier bytes\n'
    (run_dir / "result_0.txt").write_bytes(previous)
    result = train(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir))
    assert_one_line_error(result, str(run_dir), "result_0.txt")
    assert (run_dir / "result_0.txt").read_bytes() == previous
    assert sorted(os.listdir(run_dir)) == ["result_0.txt"]


def test_run_directory_that_is_a_file_is_refused(small_data, tmp_path):
    run_dir = tmp_path / "not_a_dir"
    run_dir.write_text("keep me\n")
    result = train(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir))
    assert_one_line_error(result, str(run_dir))
    assert run_dir.read_text() == "keep me\n"


def test_more_classes_than_num_classes_is_refused_before_training(tmp_path):
    from models.resnet50 import prepare
    data_dir = tmp_path / "six"
    prepare.write_learnable_dataset(str(data_dir), num_classes=6, train_per_class=11, eval_per_class=4,
                                    image_size=32, train_shards=2, eval_shards=2, seed=3)
    run_dir = tmp_path / "run"
    result = train(*TINY, "--data-dir", str(data_dir), "--run-dir", str(run_dir))
    assert_one_line_error(result, str(data_dir), "6 classes", "num_classes")
    assert_not_started(run_dir)
    assert_records_whole(run_dir)


# --------------------------------------------------------------------------------------------
# Problems found while training: run_stop aborted, records whole


@pytest.mark.slow  # a TensorFlow run of 10 s or more: the gate's tier, not the inner loop's
def test_label_out_of_range_in_records_aborts_the_run(tmp_path):
    """dataset.json claims 4 classes but records carry labels 5 and 6: the pipeline's check fires."""
    from models.resnet50 import data, prepare
    data_dir = tmp_path / "mislabelled"
    prepare.write_learnable_dataset(str(data_dir), num_classes=6, train_per_class=11, eval_per_class=4,
                                    image_size=32, train_shards=2, eval_shards=2, seed=3)
    meta_path = data_dir / data.METADATA_FILE
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "num_classes": 4}))
    run_dir = tmp_path / "run"
    result = train(*TINY, "--data-dir", str(data_dir), "--run-dir", str(run_dir))
    line = assert_one_line_error(result, "label", "1..4", str(data_dir))
    assert "label" in assert_aborted(run_dir)
    assert_records_whole(run_dir)
    assert not (run_dir / "summary.json").exists(), line


@pytest.mark.slow  # a TensorFlow run of 10 s or more: the gate's tier, not the inner loop's
@pytest.mark.parametrize("how", ["garbled", "truncated"])
def test_corrupt_shard_aborts_a_single_process_run(how, small_data, tmp_path):
    data_dir = copy_dataset(small_data, tmp_path)
    garble(data_dir / "train-00001-of-00004", how)
    run_dir = tmp_path / "run"
    result = train(*TINY, "--data-dir", str(data_dir), "--run-dir", str(run_dir))
    line = assert_one_line_error(result, str(data_dir), "data_cli check")
    assert "corrupt or truncated TFRecord" in line
    assert "corrupt or truncated TFRecord" in assert_aborted(run_dir)
    assert_records_whole(run_dir)
    assert not (run_dir / "summary.json").exists()


def test_undecodable_image_aborts_the_run_with_the_error_last(small_data, tmp_path):
    """Whole TFRecords, bad JPEG bytes: libjpeg warnings from the input threads must not follow the error."""
    import tensorflow as tf
    from models.resnet50 import prepare
    data_dir = copy_dataset(small_data, tmp_path)
    shard = str(data_dir / "train-00002-of-00004")
    records = []
    for record in tf.data.TFRecordDataset(shard):
        example = tf.train.Example.FromString(record.numpy())
        example.features.feature["image/encoded"].bytes_list.value[0] = b"\xff\xd8\xff" + b"x" * 100
        records.append(example.SerializeToString())
    prepare._write_tfrecords(shard, records)
    run_dir = tmp_path / "run"
    result = train(*TINY, "--data-dir", str(data_dir), "--run-dir", str(run_dir))
    assert_one_line_error(result, "not a valid JPEG", str(data_dir))
    assert "JPEG" in assert_aborted(run_dir)
    assert_records_whole(run_dir)


@pytest.mark.slow
@pytest.mark.parametrize("launcher, rank, how", [
    (("mpirun", "--tag-output"), 1, "garbled"),
    (("horovodrun", "--gloo"), 0, "truncated"),
], ids=["mpirun-rank1-garbled", "horovodrun-gloo-rank0-truncated"])
def test_corrupt_shard_on_one_rank_aborts_every_rank(launcher, rank, how, small_data, tmp_path):
    """One rank alone reads the damaged shard; rank 0 must still close the log as aborted, and nobody hangs.

    When rank 1 fails, rank 0 may still be tracing its first step: it learns of the failure only at
    its next collective, so rank 1 has to stay up until then.
    """
    data_dir = copy_dataset(small_data, tmp_path)
    # With 4 training shards and 2 ranks, rank r reads shards r and r + 2.
    garble(data_dir / f"train-0000{rank}-of-00004", how)
    run_dir = tmp_path / "run"
    result = run(train_cmd(*TINY, "--set", "epochs=2", "--data-dir", str(data_dir), "--run-dir", str(run_dir),
                           launcher=launcher, np=2), timeout=LAUNCH_TIMEOUT)
    assert_ranks_report(result, str(data_dir), "data_cli check", failing=(rank,))
    # Rank 0 writes the log: the cause itself, or, told by the rank watch, rank 1's own error line.
    reason = assert_aborted(run_dir)
    assert "corrupt or truncated TFRecord" in reason, reason
    if rank == 1:
        assert f"rank 1 on host {socket.gethostname()} failed: " in reason, reason
    assert_records_whole(run_dir)
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_horovodrun_is_refused_for_the_tf_backend_before_run_start(small_data, tmp_path):
    """horovodrun --gloo starts Horovod's own controller, which the tf backend has no use for. Every rank
    refuses; horovodrun ends the others once the first has exited, so a rank may be cut off first."""
    run_dir = tmp_path / "run"
    result = run(train_cmd(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir), "--distribution", "tf",
                           launcher=("horovodrun", "--gloo"), np=2), timeout=LAUNCH_TIMEOUT)
    refusal = "--distribution tf cannot run under horovodrun"
    assert_ranks_report(result, refusal, "mpirun", failing=())
    said = {rank: lines[-1] for rank, lines in rank_lines(result.stderr).items()
            if lines and refusal in lines[-1]}
    assert said and all(line.startswith(f"error (rank {rank}): ") for rank, line in said.items()), said
    assert not run_dir.exists() or "result_0.txt" not in os.listdir(run_dir)


@pytest.mark.slow
def test_batch_not_divisible_by_ranks_stops_both(small_data, tmp_path):
    run_dir = tmp_path / "run"
    result = launch(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir),
                    "--set", "global_batch_size=33", timeout=120)
    assert_ranks_report(result, "global_batch_size", "33", "2 ranks")
    assert_not_started(run_dir)
    assert_records_whole(run_dir)


@pytest.mark.slow  # a TensorFlow run of 10 s or more: the gate's tier, not the inner loop's
def test_corrected_command_reuses_a_run_directory_that_never_started(small_data, tmp_path):
    """A log from a run that failed before run_start holds no result; repeating the fixed command works."""
    run_dir = tmp_path / "run"
    failed = train(*TINY, "--data-dir", str(tmp_path / "typo"), "--run-dir", str(run_dir))
    assert failed.returncode != 0
    fixed = train(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir))
    assert fixed.returncode == 0, fixed.stderr[-2000:]
    keys = [e["key"] for e in read_log(run_dir / "result_0.txt")]
    assert keys.count("init_start") == 1 and keys.count("run_stop") == 1


def test_keras_3_behind_tf_keras_is_refused_with_the_fix(small_data, tmp_path):
    """Horovod 0.28.1 cannot drive Keras 3: a user who turns the legacy switch off is told what to install."""
    result = run(train_cmd(*TINY, "--data-dir", small_data, "--run-dir", str(tmp_path / "run")),
                 timeout=SINGLE_TIMEOUT, TF_USE_LEGACY_KERAS="0")
    assert_one_line_error(result, "Keras 3", "tf-keras")
