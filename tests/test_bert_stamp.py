"""BERT's closed label rests on the stamp `data_cli check` writes after verifying the data and checkpoint.

A stand-in for the MLPerf data (512 tokens, 76 predictions, no generated dataset.json) and for the phase-1
checkpoint (a tiny model saved under the reference's file names), with the reference's sizes and MD5s
replaced by the stand-in's own for the test: the check writes the stamp, a run on those files is closed,
and any other checkpoint of the right shapes, a changed file or a missing stamp makes it open.
"""
import json
import os
import shutil
from types import SimpleNamespace

import pytest

from models.bert import data_cli, prepare, stamp
from models.bert.workload import division, stamp_problem
from suite.common.config import resolve

EVAL_RECORDS = 32


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    """(data folder, checkpoint folder, the reference table of the stand-ins) as a verified pair."""
    import tensorflow as tf
    from models.bert.checkpoint import model_values, write_tf1_checkpoint
    from models.bert.model import BertConfig, build_pretraining_model

    root = tmp_path_factory.mktemp("stamp")
    data_dir = root / "data"
    prepare.write_learnable_dataset(str(data_dir), seq_length=512, max_predictions=76, train_records=16,
                                    eval_records=EVAL_RECORDS, train_shards=2, eval_shards=2, seed=1)
    os.remove(data_dir / "dataset.json")  # as downloaded: the check describes it
    ckpt = root / "phase1"
    ckpt.mkdir()
    # The MLPerf vocabulary's size (the check holds the data to it), in a 2-layer model.
    config = prepare.tiny_bert_config(prepare.MLPERF_VOCAB_SIZE, 512)
    (ckpt / "bert_config.json").write_text(json.dumps(config))
    words = (data_dir / "vocab.txt").read_text().splitlines()
    words += [f"[unused{i}]" for i in range(prepare.MLPERF_VOCAB_SIZE - len(words))]
    (ckpt / "vocab.txt").write_text("\n".join(words) + "\n")
    os.remove(data_dir / "vocab.txt")
    os.remove(data_dir / "bert_config.json")
    model = build_pretraining_model(BertConfig.from_dict(config), 512, 76)
    write_tf1_checkpoint(model_values(model), str(ckpt / "model.ckpt-28252"), extra={"global_step": 28252})
    (ckpt / "model.ckpt-28252.meta").write_bytes(b"graph")
    tf.keras.backend.clear_session()
    table = {name: (os.path.getsize(path), prepare.file_md5(path))
             for name, path in prepare.checkpoint_layout(str(ckpt)).items()}
    return data_dir, ckpt, table


@pytest.fixture
def reference(verified, monkeypatch):
    """The stand-ins' sizes and MD5s as the reference table, and their eval count as MLPerf's."""
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", dict(verified[2]))
    monkeypatch.setattr(prepare, "MLPERF_EVAL_RECORDS", EVAL_RECORDS)
    return verified


def verdict(data_dir, init_checkpoint):
    """The division a run on these folders gets (BERT-large and the MLPerf eval count stood in for)."""
    from models.bert import data
    from models.bert.model import BERT_LARGE
    from models.bert.presets import CONFIG, PRESETS
    config = resolve(CONFIG, PRESETS, "closed_8xA100_gbs448", None, [], {
        "data_dir": str(data_dir), "init_checkpoint": str(init_checkpoint)})
    info = data.dataset_info(str(data_dir))
    as_mlperf = SimpleNamespace(generated=info.generated, eval_records=10_000)
    return division(config, BERT_LARGE, as_mlperf, stamp_problem(config, info))


def check(data_dir, ckpt, *extra):
    return data_cli.main(["check", "--data-dir", str(data_dir), "--checkpoint-dir", str(ckpt), *extra])


def test_data_checked_alone_and_a_checkpoint_of_the_right_shapes_are_not_enough(reference, tmp_path):
    """What made a run closed before: MLPerf-shaped data with its dataset.json and a loadable checkpoint."""
    data_dir, ckpt, _ = reference
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy, ignore=shutil.ignore_patterns(stamp.STAMP_FILE, "dataset.json"))
    assert data_cli.main(["check", "--data-dir", str(copy)]) == 0  # writes dataset.json, not the stamp
    assert (copy / "dataset.json").exists() and not (copy / stamp.STAMP_FILE).exists()
    result = verdict(copy, ckpt)
    assert result.name == "open"
    assert any(f"no {copy}/{stamp.STAMP_FILE}" in reason for reason in result.reasons), result.reasons


def test_the_check_stamps_the_pair_and_a_run_on_it_is_closed(reference, capsys):
    data_dir, ckpt, _ = reference
    assert check(data_dir, ckpt, "--skip-md5") == 0
    assert f"no {stamp.STAMP_FILE} written: --skip-md5" in capsys.readouterr().out
    assert not (data_dir / stamp.STAMP_FILE).exists()
    assert check(data_dir, ckpt) == 0
    assert f"wrote {data_dir}/{stamp.STAMP_FILE}" in capsys.readouterr().out
    result = verdict(data_dir, ckpt)
    assert (result.name, result.reasons) == ("closed", ())
    # The checkpoint given by its prefix, or by the folder, is the same checkpoint.
    assert verdict(data_dir, ckpt / "model.ckpt-28252").name == "closed"


def test_another_checkpoint_of_the_right_shapes_makes_the_run_open(reference, tmp_path):
    """A copy of the same variables is not the file the check digested: a run's own later checkpoint, say."""
    data_dir, ckpt, _ = reference
    assert check(data_dir, ckpt) == 0
    other = tmp_path / "later"
    shutil.copytree(ckpt, other)
    result = verdict(data_dir, other)
    assert result.name == "open"
    assert any("is not the checkpoint" in reason and str(other) in reason for reason in result.reasons)


def test_a_changed_file_after_the_check_makes_the_run_open(reference):
    data_dir, ckpt, _ = reference
    assert check(data_dir, ckpt) == 0
    index = ckpt / "model.ckpt-28252.index"
    stat = index.stat()
    os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    try:
        result = verdict(data_dir, ckpt)
        assert result.name == "open" and any("changed since" in reason for reason in result.reasons)
    finally:
        os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    shard = sorted((data_dir / "train").iterdir())[0]
    moved = data_dir / "train" / "part-00009-of-00002"
    shard.rename(moved)
    try:
        result = verdict(data_dir, ckpt)
        assert any("other data files" in reason for reason in result.reasons), result.reasons
    finally:
        moved.rename(shard)
    assert verdict(data_dir, ckpt).name == "closed"


def test_a_checkpoint_with_other_digests_gets_no_stamp(reference, monkeypatch, capsys):
    data_dir, ckpt, table = reference
    name = "model.ckpt-28252.index"
    monkeypatch.setitem(prepare.CHECKPOINT_FILES, name, (table[name][0], "0" * 32))
    if (data_dir / stamp.STAMP_FILE).exists():
        os.remove(data_dir / stamp.STAMP_FILE)
    assert check(data_dir, ckpt) == 1
    assert f"MD5 {table[name][1]}, the reference's is {'0' * 32}" in capsys.readouterr().out
    assert not (data_dir / stamp.STAMP_FILE).exists()
