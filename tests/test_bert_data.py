"""Tests of the BERT pretraining data: generator, discovery, Horovod pipelines, error lines and checks."""

import json
import os
import shutil
from collections import Counter

import numpy as np
import pytest

from models.bert import data, prepare
import tensorflow as tf  # after models: the package sets TF_USE_LEGACY_KERAS first

TINY = dict(vocab_size=64, seq_length=64, max_predictions=10, train_records=120, eval_records=31,
            train_shards=3, eval_shards=3, seed=1)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """64 tokens and 10 predictions: 120 training records in 3 files, 31 eval records in 3 uneven files."""
    return prepare.write_learnable_dataset(tmp_path_factory.mktemp("tiny") / "ds", **TINY)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The MLPerf lengths (512 tokens, 76 predictions), a few records."""
    return prepare.write_learnable_dataset(tmp_path_factory.mktemp("full") / "ds", vocab_size=200,
                                           seq_length=512, max_predictions=76, train_records=6,
                                           eval_records=5, train_shards=2, eval_shards=1, seed=3)


@pytest.fixture
def copy_of(tiny, tmp_path):
    """A writable copy of the tiny dataset."""
    target = tmp_path / "copy"
    shutil.copytree(tiny.data_dir, target)
    return str(target)


def _features(path):
    """Every record of a file as {name: numpy array}."""
    rows = []
    for record in tf.data.TFRecordDataset(path):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        rows.append({name: np.asarray(getattr(feature[name], feature[name].WhichOneof("kind")).value)
                     for name in feature})
    return rows


def _write(path, rows):
    """Writes {name: values} rows as tf.train.Examples (int64 unless the values are floats)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for row in rows:
            feature = {}
            for name, values in row.items():
                values = np.asarray(values)
                feature[name] = (tf.train.Feature(float_list=tf.train.FloatList(value=values.tolist()))
                                 if values.dtype.kind == "f" else
                                 tf.train.Feature(int64_list=tf.train.Int64List(value=values.tolist())))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _batch_keys(features, labels):
    """A hashable identity of each parsed row of a batch: all its values."""
    arrays = [features[k].numpy() for k in data.FEATURE_KEYS] + [labels[k].numpy() for k in data.LABEL_KEYS]
    return [tuple(array[row].tobytes() for array in arrays) for row in range(len(arrays[0]))]


def _keys(dataset):
    return [key for features, labels in dataset for key in _batch_keys(features, labels)]


def _file_keys(info, path):
    return Counter(_keys(data.eval_dataset(dataclass_replace(info, eval_files=(path,)), 7, 0, 1)))


def dataclass_replace(info, **changes):
    import dataclasses
    return dataclasses.replace(info, **changes)


def _one_line_naming(message, *names):
    assert "\n" not in message, message
    for name in names:
        assert name in message, (name, message)


# ---------------------------------------------------------------------------------------------------------
# Generator and schema


def test_feature_spec_is_the_reference_schema():
    spec = data.feature_spec()
    assert list(spec) == ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                          "masked_lm_weights", "next_sentence_labels"]
    assert [s.shape for s in spec.values()] == [[512]] * 3 + [[76]] * 3 + [[1]]
    assert spec["masked_lm_weights"].dtype == tf.float32
    assert all(s.dtype == tf.int64 for name, s in spec.items() if name != "masked_lm_weights")
    assert data.feature_spec(64, 10)["masked_lm_ids"].shape == [10]


def test_generator_layout_metadata_vocab_and_config(tiny):
    names = sorted(os.listdir(tiny.data_dir))
    assert names == ["bert_config.json", "dataset.json", "eval", "train", "vocab.txt"]
    assert [os.path.basename(f) for f in tiny.train_files] == [f"part-0000{i}-of-00003" for i in range(3)]
    meta = data.read_metadata(tiny.data_dir)
    assert (meta["seq_length"], meta["max_predictions"], meta["vocab_size"]) == (64, 10, 64)
    assert (meta["train_records"], meta["eval_records"], meta["train_shards"], meta["eval_shards"]) == \
        (120, 31, 3, 3)
    assert (tiny.train_records, tiny.eval_records, tiny.vocab_size, tiny.generated) == (120, 31, 64, True)
    assert not tiny.mlperf_layout
    with open(tiny.vocab_file) as f:
        vocab = f.read().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and len(vocab) == len(set(vocab)) == 64
    with open(tiny.bert_config_file) as f:
        config = json.load(f)
    assert config["vocab_size"] == 64 and config["max_position_embeddings"] >= 64
    assert config["num_hidden_layers"] == 2 and config["intermediate_size"] == 4 * config["hidden_size"]
    assert config["hidden_size"] % config["num_attention_heads"] == 0
    assert sum(len(_features(f)) for f in tiny.eval_files) == 31


@pytest.mark.parametrize("which", ["tiny", "full"])
def test_records_follow_create_pretraining_data(which, request):
    info = request.getfixturevalue(which)
    seq, pred = info.seq_length, info.max_predictions
    rows = [row for path in info.train_files + info.eval_files for row in _features(path)]
    masked = kept_mask = 0
    for row in rows:
        assert [len(row[k]) for k in data.feature_spec()] == [seq] * 3 + [pred] * 3 + [1]
        length = int(row["input_mask"].sum())
        assert (row["input_mask"] == (np.arange(seq) < length)).all()
        ids, segments = row["input_ids"], row["segment_ids"]
        assert ids[0] == data.CLS_ID and ids[length - 1] == data.SEP_ID and (ids[length:] == 0).all()
        # [CLS] A [SEP] B [SEP]: segment 0 up to the first [SEP], 1 after it (a random replacement may
        # draw [SEP] too, as the reference's does, so the segments locate the real one).
        first_b = int(np.argmax(segments))
        assert ids[first_b - 1] == data.SEP_ID and (segments[:first_b] == 0).all()
        assert (segments[first_b:length] == 1).all() and (segments[length:] == 0).all()
        seps = [first_b - 1, length - 1]
        count = min(pred, max(1, round(length * data.MASKED_LM_PROB)), length - 3)
        assert (row["masked_lm_weights"] == (np.arange(pred) < count)).all()
        positions = row["masked_lm_positions"][:count]
        assert (np.diff(positions) > 0).all() and (row["masked_lm_positions"][count:] == 0).all()
        assert (row["masked_lm_ids"][count:] == 0).all() and (row["masked_lm_ids"][:count] >= 5).all()
        assert not np.isin(positions, [0, *seps]).any()
        masked += count
        kept_mask += int((ids[positions] == data.MASK_ID).sum())
        assert row["next_sentence_labels"][0] in (0, 1)
    assert 0.65 < kept_mask / masked < 0.95  # 80 % become [MASK]


def test_round_trip_through_the_pipeline_at_both_lengths(tiny, full):
    for info in (tiny, full):
        features, labels = next(iter(data.eval_dataset(info, 4, 0, 1)))
        assert set(features) == set(data.FEATURE_KEYS) and set(labels) == set(data.LABEL_KEYS)
        for name in ("input_ids", "input_mask", "segment_ids"):
            assert features[name].shape == (4, info.seq_length) and features[name].dtype == tf.int32
        assert features["masked_lm_positions"].shape == (4, info.max_predictions)
        assert labels["masked_lm_ids"].dtype == tf.int32 and labels["masked_lm_weights"].dtype == tf.float32
        nsp = labels["next_sentence_labels"]
        assert nsp.shape == (4, 1) and nsp.dtype == tf.int32
        first = _features(info.eval_files[0])[0]
        for name in data.FEATURE_KEYS:
            assert (features[name][0].numpy() == first[name]).all()
        for name in data.LABEL_KEYS:
            assert (labels[name][0].numpy() == first[name]).all()


def test_generator_is_deterministic_and_atomic(tiny, tmp_path):
    again = prepare.write_learnable_dataset(tmp_path / "again", **TINY)
    for name in ("dataset.json", "vocab.txt", "bert_config.json"):
        with open(os.path.join(tiny.data_dir, name)) as a, open(os.path.join(again.data_dir, name)) as b:
            assert a.read() == b.read()
    for mine, theirs in zip(tiny.train_files + tiny.eval_files, again.train_files + again.eval_files):
        with open(mine, "rb") as a, open(theirs, "rb") as b:
            assert a.read() == b.read()
    other = prepare.write_learnable_dataset(tmp_path / "other", **{**TINY, "seed": 2})
    with open(tiny.train_files[0], "rb") as a, open(other.train_files[0], "rb") as b:
        assert a.read() != b.read()
    with pytest.raises(data.DataError, match="output directory is not empty"):
        prepare.write_learnable_dataset(tmp_path / "again", **TINY)
    with pytest.raises(data.DataError, match="max predictions"):
        prepare.write_learnable_dataset(tmp_path / "bad", **{**TINY, "max_predictions": 62})
    assert sorted(os.listdir(tmp_path)) == ["again", "other"]  # nothing half-written left


def test_learnability_numbers(tiny, tmp_path):
    info = prepare.write_learnable_dataset(tmp_path / "bigger", vocab_size=128, seq_length=64,
                                           max_predictions=10, train_records=1024, eval_records=256, seed=0)
    meta = data.read_metadata(info.data_dir)
    assert meta["eval_masked_tokens"] > 2000
    assert meta["majority_baseline_accuracy"] < 0.1
    # A segment's most frequent word, and better the neighbours, predict far above the majority word.
    assert meta["segment_rule_accuracy"] > 0.5 and meta["context_rule_accuracy"] > 0.6
    assert meta["context_rule_accuracy"] > 6 * meta["majority_baseline_accuracy"]
    assert 0.35 < meta["next_sentence_random_fraction"] < 0.65
    assert info.majority_baseline_accuracy == meta["majority_baseline_accuracy"]
    assert info.context_rule_accuracy == meta["context_rule_accuracy"]


# ---------------------------------------------------------------------------------------------------------
# Input pipelines


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_eval_sees_every_record_once_across_ranks(tiny, world_size):
    everything = Counter()
    for path in tiny.eval_files:
        everything += _file_keys(tiny, path)
    assert sum(everything.values()) == 31
    seen, sizes = Counter(), []
    for rank in range(world_size):
        batches = list(data.eval_dataset(tiny, 4, rank, world_size))
        sizes.append(sum(int(f["input_ids"].shape[0]) for f, _ in batches))
        assert all(f["input_ids"].shape[0] == 4 for f, _ in batches[:-1])  # only the last may be short
        seen += Counter(k for f, l in batches for k in _batch_keys(f, l))
    assert seen == everything
    assert max(sizes) - min(sizes) <= 1  # records dealt round-robin


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_train_ranks_read_disjoint_records(tiny, world_size):
    by_file = {path: set(_file_keys(tiny, path)) for path in tiny.train_files}
    everything = set().union(*by_file.values())
    assert len(everything) == 120  # every record differs, so sets identify them
    seen = []
    for rank in range(world_size):
        # 1000 records: the shuffle buffer mixes epochs, so it takes several to see each record.
        mine = set(_keys(data.train_dataset(tiny, 5, rank, world_size, seed=0).take(200)))
        if world_size <= 3:  # whole files per rank
            expected = set().union(*(by_file[p] for p in tiny.train_files[rank::world_size]))
            assert mine == expected
        seen.append(mine)
    for a in range(world_size):
        for b in range(a + 1, world_size):
            assert not seen[a] & seen[b]
    assert set().union(*seen) == everything


def test_train_batches_repeat_are_full_and_follow_the_seed(tiny):
    def first(seed, count=30):
        return [_keys(data.train_dataset(tiny, 8, 0, 1, seed=seed).take(count))]

    batches = list(data.train_dataset(tiny, 8, 0, 1, seed=0).take(30))  # 240 records: the stream repeats
    assert all(f["input_ids"].shape == (8, 64) for f, _ in batches)
    everything = set().union(*(_file_keys(tiny, path) for path in tiny.train_files))
    seen = Counter(k for f, l in batches for k in _batch_keys(f, l))
    assert set(seen) <= everything and max(seen.values()) > 1
    assert first(0) == first(0) and first(0) != first(1)


def test_bad_sharding_arguments_and_too_little_data(tiny, copy_of):
    with pytest.raises(ValueError, match="rank 2 is not in a world of size 2"):
        data.train_dataset(tiny, 4, 2, 2, seed=0)
    with pytest.raises(ValueError, match="batch must be positive"):
        data.eval_dataset(tiny, 0, 0, 1)
    with pytest.raises(data.DataError, match=f"^120 training records in {tiny.data_dir} cannot feed 121"):
        data.train_dataset(tiny, 1, 0, 121, seed=0)
    # An empty file would leave its rank waiting for ever.
    open(os.path.join(copy_of, "train", "part-00002-of-00003"), "w").close()
    with pytest.raises(data.DataError, match=f"^empty training file {copy_of}/train/part-00002-of-00003$"):
        data.dataset_info(copy_of)


def test_synthetic_dataset_is_shaped_like_the_data():
    dataset = data.synthetic_dataset(6, 512, 76, 30522, seed=0)
    (features, labels), again = list(dataset.take(2))
    assert features["input_ids"].shape == (6, 512) and labels["masked_lm_weights"].shape == (6, 76)
    assert labels["next_sentence_labels"].shape == (6, 1) and labels["masked_lm_ids"].dtype == tf.int32
    lengths = features["input_mask"].numpy().sum(axis=1)
    weights = labels["masked_lm_weights"].numpy()
    for length, row in zip(lengths, weights):
        assert row.sum() == min(76, max(1, round(length * 0.15)))
        assert (row == (np.arange(76) < row.sum())).all()
    positions = features["masked_lm_positions"].numpy()
    assert ((positions < lengths[:, None]) | (weights == 0)).all()
    assert features["input_ids"].numpy().max() < 30522
    assert (again[0]["input_ids"].numpy() == features["input_ids"].numpy()).all()


# ---------------------------------------------------------------------------------------------------------
# Discovery errors, one at a time


def test_dataset_info_takes_lengths_and_counts_from_dataset_json(tiny, full):
    assert (tiny.seq_length, tiny.max_predictions, tiny.train_records, tiny.eval_records) == (64, 10, 120, 31)
    assert (full.seq_length, full.max_predictions) == (512, 76)


def test_empty_or_missing_directories(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(data.DataError, match=f"^data directory not found: {missing}$"):
        data.dataset_info(missing)
    with pytest.raises(data.DataError, match=f"train directory not found: {tmp_path}/train"):
        data.dataset_info(str(tmp_path))
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "part-00000-of-00001.tmp").touch()  # stray files are not records
    with pytest.raises(data.DataError) as err:
        data.dataset_info(str(tmp_path))
    _one_line_naming(str(err.value), "no TFRecord files in", str(tmp_path / "train"))


def test_a_missing_feature_is_named_by_check_and_during_training(copy_of):
    path = os.path.join(copy_of, "train", "part-00000-of-00003")
    rows = _features(path)
    del rows[0]["masked_lm_weights"]
    _write(path, rows)
    info = data.dataset_info(copy_of)  # reads no record: `check` and the training error line name the file
    assert prepare.check_mlperf_dataset(copy_of, sample_records=16) == [
        f"{path}: record 0: feature masked_lm_weights is missing"]
    err = _first_error(data.train_dataset(info, 8, 0, 1, seed=0).take(40))
    _one_line_naming(data.describe_data_error(err, info), path, "record 0", "masked_lm_weights is missing")


def test_wrong_feature_length_is_named_by_check(copy_of):
    os.remove(os.path.join(copy_of, "dataset.json"))  # now the MLPerf lengths apply: 512 / 76
    new_metadata = {}
    problems = prepare.check_mlperf_dataset(copy_of, sample_records=8, new_metadata=new_metadata)
    train_file = os.path.join(copy_of, "train", "part-00000-of-00003")
    assert f"{train_file}: record 0: feature input_ids has length 64, expected 512" in problems
    assert new_metadata == {}  # nothing to write for data with problems


def test_eval_set_of_the_wrong_size_is_named_by_check(copy_of, full, tmp_path):
    meta_path = os.path.join(copy_of, "dataset.json")
    with open(meta_path) as f:
        meta = json.load(f)
    with open(meta_path, "w") as f:
        json.dump({**meta, "eval_records": 30}, f)
    problems = prepare.check_mlperf_dataset(copy_of)
    assert problems == [f"{copy_of}/eval: 31 eval records, {meta_path} declares 30"]

    mlperf_like = tmp_path / "mlperf_like"
    shutil.copytree(full.data_dir, mlperf_like)
    os.remove(mlperf_like / "dataset.json")
    problems = prepare.check_mlperf_dataset(str(mlperf_like))
    assert f"{mlperf_like}/eval: 5 eval records, MLPerf requires 10000" in problems


def test_malformed_or_stale_dataset_json(copy_of):
    meta_path = os.path.join(copy_of, "dataset.json")
    with open(meta_path) as f:
        meta = json.load(f)
    for bad, message in ((None, "malformed"), ({**meta, "seq_length": "long"}, "'seq_length' must be"),
                         ({**meta, "train_shards": 4}, "lists 4 train files but")):
        with open(meta_path, "w") as f:
            f.write("{oops" if bad is None else json.dumps(bad))
        with pytest.raises(data.DataError) as err:
            data.dataset_info(copy_of)
        _one_line_naming(str(err.value), meta_path, message)


def test_mlperf_layout_without_dataset_json(full, tmp_path, monkeypatch):
    """10,000 eval records at 512/76 and no dataset.json: the MLPerf rules, nothing counted in train/."""
    root = tmp_path / "mlperf"
    record = next(iter(tf.data.TFRecordDataset(full.eval_files[0]))).numpy()
    os.makedirs(root / "eval")
    with tf.io.TFRecordWriter(str(root / "eval" / "eval_10k")) as writer:
        for _ in range(10000):
            writer.write(record)
    shutil.copytree(os.path.dirname(full.train_files[0]), root / "train")
    with pytest.raises(data.DataError, match="data_cli check"):
        data.dataset_info(str(root))
    notes, new_metadata = [], {}
    problems = prepare.check_mlperf_dataset(str(root), sample_records=8, notes=notes,
                                            new_metadata=new_metadata)
    assert notes[0].startswith("rules: MLPerf reference data")
    assert any("holds 2 training files, not the reference's 500" in note for note in notes)
    assert len(problems) == 1 and new_metadata == {}
    _one_line_naming(problems[0], str(root / "eval" / "eval_10k"), "25,382,591")

    monkeypatch.setattr(prepare, "MLPERF_EVAL_BYTES", os.path.getsize(root / "eval" / "eval_10k"))
    assert prepare.check_mlperf_dataset(str(root), sample_records=8, new_metadata=new_metadata) == []
    info = data.dataset_info(str(root), metadata=new_metadata)
    assert (info.eval_records, info.train_records, info.vocab_size) == (10000, None, 30522)
    assert not info.generated and not info.mlperf_layout  # 2 training files, not 500
    assert [os.path.basename(f) for f in info.train_files] == ["part-00000-of-00002", "part-00001-of-00002"]


# ---------------------------------------------------------------------------------------------------------
# Vocabulary and token ids


def test_token_ids_against_the_model_vocabulary(tiny):
    assert prepare.token_id_problem(tiny, 64) is None
    problem = prepare.token_id_problem(tiny, 40, sample=16)
    _one_line_naming(problem, "vocabulary/config mismatch", tiny.train_files[0], "vocab_size 40")


def test_vocab_file_line_count(tiny, tmp_path):
    assert data.vocab_problem(tiny.vocab_file, 64) is None
    _one_line_naming(data.vocab_problem(tiny.vocab_file, 30522), "vocabulary/config mismatch",
                     tiny.vocab_file, "64 tokens", "30522")
    missing = str(tmp_path / "vocab.txt")
    _one_line_naming(data.vocab_problem(missing, 64), "not found", missing)


# ---------------------------------------------------------------------------------------------------------
# TensorFlow errors while iterating


def _first_error(dataset):
    with pytest.raises(tf.errors.OpError) as err:
        for _ in dataset:
            pass
    return err.value


def test_describe_missing_feature_or_wrong_length_in_a_later_record(tiny, copy_of):
    path = os.path.join(copy_of, "train", "part-00001-of-00003")
    rows = _features(path)
    del rows[7]["segment_ids"]
    _write(path, rows)
    info = data.dataset_info(copy_of)  # first records are fine
    err = _first_error(data.train_dataset(info, 8, 0, 1, seed=0).take(40))
    _one_line_naming(data.describe_data_error(err, info), path, "record 7", "segment_ids is missing")

    rows = _features(path.replace(copy_of, tiny.data_dir))
    rows[3]["masked_lm_ids"] = rows[3]["masked_lm_ids"][:9]
    _write(path, rows)
    info = data.dataset_info(copy_of)
    err = _first_error(data.train_dataset(info, 8, 0, 1, seed=0).take(40))
    _one_line_naming(data.describe_data_error(err, info), path, "record 3",
                     "masked_lm_ids has length 9, expected 10")


def test_describe_corrupt_record(copy_of):
    path = os.path.join(copy_of, "eval", "part-00001-of-00003")
    with open(path, "rb") as f:
        raw = f.read()
    info = data.dataset_info(copy_of)
    with open(path, "wb") as f:
        f.write(raw[:-40])  # the last record loses its end
    err = _first_error(data.eval_dataset(info, 4, 0, 1))
    assert isinstance(err, tf.errors.DataLossError)
    _one_line_naming(data.describe_data_error(err, info), "corrupt or truncated TFRecord", path)


def test_describe_ignores_unrelated_errors_and_names_out_of_vocabulary_ids(tiny):
    assert data.describe_data_error(RuntimeError("boom"), tiny) is None
    assert data.describe_data_error(tf.errors.ResourceExhaustedError(None, None, "OOM"), tiny) is None
    gather = tf.errors.InvalidArgumentError(None, None,
                                            "indices[3,17] = 70 is not in [0, 64) [Op:ResourceGather]")
    _one_line_naming(data.describe_data_error(gather, tiny), "vocabulary/config mismatch", "token id 70",
                     "vocab_size 64", tiny.data_dir)
    segment = tf.errors.InvalidArgumentError(None, None, "indices[0,5] = 2 is not in [0, 2)")
    _one_line_naming(data.describe_data_error(segment, tiny), "segment id 2", "type_vocab_size 2")
    tiny_seq = dataclass_replace(tiny, seq_length=48)
    position = tf.errors.InvalidArgumentError(None, None, "indices[1,3] = 50 is not in [0, 48)")
    _one_line_naming(data.describe_data_error(position, tiny_seq), "masked_lm_positions value 50",
                     "seq_length 48")


# ---------------------------------------------------------------------------------------------------------
# Pre-flight checks


def test_check_generated_data(copy_of):
    notes = []
    assert prepare.check_mlperf_dataset(copy_of, notes=notes) == []
    assert notes == [f"rules: generated data ({copy_of}/dataset.json): 64 tokens, 10 predictions, "
                     f"120 training and 31 eval records as declared"]
    os.remove(os.path.join(copy_of, "train", "part-00001-of-00003"))
    path = os.path.join(copy_of, "eval", "part-00000-of-00003")
    rows = _features(path)
    rows[2]["input_ids"][5] = 99
    _write(path, rows)
    problems = prepare.check_mlperf_dataset(copy_of)
    assert problems == [
        f"{copy_of}/train: missing shards part-00001-of-00003",
        f"{copy_of}/train: 80 training records, {copy_of}/dataset.json declares 120",
        f"{path}: record 2: vocabulary/config mismatch: input_ids holds token id 99, outside vocab_size 64"]
    with pytest.raises(data.DataError, match="data directory not found"):
        prepare.check_mlperf_dataset(copy_of + "-nope")


def _stand_in_checkpoint(folder, config):
    """bert_config.json, vocab.txt and three small files named like the phase-1 checkpoint."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bert_config.json"), "w") as f:
        json.dump(config, f)
    with open(os.path.join(folder, "vocab.txt"), "w") as f:
        f.writelines(f"t{i}\n" for i in range(config["vocab_size"]))
    for suffix in ("index", "meta", "data-00000-of-00001"):
        with open(os.path.join(folder, f"model.ckpt-28252.{suffix}"), "wb") as f:
            f.write(suffix.encode())
    return {name: (os.path.getsize(os.path.join(folder, name)), prepare.file_md5(os.path.join(folder, name)))
            for name in prepare.CHECKPOINT_FILES}


def test_check_checkpoint_dir_with_a_stand_in_for_the_variable_check(tmp_path, monkeypatch):
    import models.bert.checkpoint as checkpoint

    config = prepare.tiny_bert_config(64, 64)
    folder = str(tmp_path / "ckpt")
    digests = _stand_in_checkpoint(folder, config)
    calls = []

    def stand_in(prefix, cfg):
        calls.append((prefix, cfg.vocab_size))
        return ["stand-in: bad variable"]

    monkeypatch.setattr(checkpoint, "checkpoint_problems", stand_in)
    # The reference's sizes: every small stand-in file differs.
    problems = prepare.check_checkpoint_dir(folder)
    assert problems[:5] == [f"{folder}/{name}: {digests[name][0]:,} bytes, the reference's file has "
                            f"{prepare.CHECKPOINT_FILES[name][0]:,}" for name in prepare.CHECKPOINT_FILES]
    assert problems[5:] == ["stand-in: bad variable"]
    assert calls == [(f"{folder}/model.ckpt-28252", 64)]

    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", digests)
    monkeypatch.setattr(checkpoint, "checkpoint_problems", lambda prefix, cfg: [])
    assert prepare.check_checkpoint_dir(folder) == []
    wrong = {**digests, "vocab.txt": (digests["vocab.txt"][0], "0" * 32)}
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", wrong)
    assert prepare.check_checkpoint_dir(folder) == [
        f"{folder}/vocab.txt: MD5 {digests['vocab.txt'][1]}, the reference's is {'0' * 32}"]
    assert prepare.check_checkpoint_dir(folder, verify_md5=False) == []

    with open(os.path.join(folder, "vocab.txt"), "a") as f:
        f.write("extra\n")
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", {**digests, "vocab.txt": (os.path.getsize(
        os.path.join(folder, "vocab.txt")), prepare.file_md5(os.path.join(folder, "vocab.txt")))})
    problems = prepare.check_checkpoint_dir(folder)
    assert len(problems) == 1
    _one_line_naming(problems[0], "vocabulary/config mismatch", f"{folder}/vocab.txt", "65 tokens", "64")
    os.remove(os.path.join(folder, "model.ckpt-28252.meta"))
    assert f"missing {folder}/model.ckpt-28252.meta" in prepare.check_checkpoint_dir(folder)
    with pytest.raises(data.DataError, match="checkpoint directory not found"):
        prepare.check_checkpoint_dir(str(tmp_path / "nope"))


def test_check_checkpoint_dir_reads_variables_and_tf1_ckpt_folder(tmp_path, monkeypatch):
    """A real (tiny) TF1 checkpoint in tf1_ckpt/, checked by models.bert.checkpoint."""
    from models.bert import checkpoint
    from models.bert.model import BertConfig, build_pretraining_model

    config = prepare.tiny_bert_config(64, 64)
    folder = tmp_path / "ckpt"
    _stand_in_checkpoint(str(folder), config)
    for suffix in ("index", "data-00000-of-00001"):
        os.remove(folder / f"model.ckpt-28252.{suffix}")
    os.rename(folder / "model.ckpt-28252.meta", tmp_path / "meta")
    os.makedirs(folder / "tf1_ckpt")
    os.rename(tmp_path / "meta", folder / "tf1_ckpt" / "model.ckpt-28252.meta")
    model = build_pretraining_model(BertConfig.from_dict(config), 64, 10)
    prefix = str(folder / "tf1_ckpt" / "model.ckpt-28252")
    checkpoint.write_tf1_checkpoint(checkpoint.model_values(model), prefix)
    paths = prepare.checkpoint_layout(str(folder))
    assert paths["model.ckpt-28252.index"] == str(folder / "tf1_ckpt" / "model.ckpt-28252.index")
    assert paths["vocab.txt"] == str(folder / "vocab.txt")
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", {
        name: (os.path.getsize(path), prepare.file_md5(path)) for name, path in paths.items()})
    assert prepare.check_checkpoint_dir(str(folder)) == []

    with open(folder / "bert_config.json", "w") as f:
        json.dump({**config, "hidden_size": 32, "intermediate_size": 128}, f)
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", {
        name: (os.path.getsize(path), prepare.file_md5(path)) for name, path in paths.items()})
    problems = prepare.check_checkpoint_dir(str(folder))
    assert problems and all(str(folder / "tf1_ckpt" / "model.ckpt-28252") in p for p in problems)


# ---------------------------------------------------------------------------------------------------------
# Before run_start: dataset.json, listings and sizes only (MLPerf starts the clock before the data is touched)

DAY_NS = 86400 * 10**9


def _record_files(data_dir):
    return sorted(os.path.join(data_dir, split, name) for split in ("train", "eval")
                  for name in os.listdir(os.path.join(data_dir, split)))


def _age_atimes(paths):
    """Puts each file's access time a day before its modification time, so that any read moves it
    (relatime); returns the access times."""
    for path in paths:
        mtime = os.stat(path).st_mtime_ns
        os.utime(path, ns=(mtime - DAY_NS, mtime))
    return _atimes(paths)


def _atimes(paths):
    return {path: os.stat(path).st_atime_ns for path in paths}


def test_dataset_info_and_the_run_set_up_read_no_record(copy_of, tmp_path):
    from types import SimpleNamespace

    from models.bert.presets import PRESETS, BertRunConfig
    from models.bert.workload import _datasets
    from suite.common.config import resolve

    probe = tmp_path / "probe"
    probe.write_bytes(b"x" * 4096)
    before = _age_atimes([str(probe)])
    probe.read_bytes()
    assert _atimes([str(probe)]) != before  # the file system records reads, so this test can fail

    records = _record_files(copy_of)
    before = _age_atimes(records)
    info = data.dataset_info(copy_of)
    config = resolve(BertRunConfig, PRESETS, "tiny_cpu", extra={"data_dir": copy_of})
    _, train, make_eval, eval_records = _datasets(config, SimpleNamespace(rank=0, size=1), 0, 8, 8, 64)
    make_eval()
    assert _atimes(records) == before
    assert (info.eval_records, eval_records, info.seq_length) == (31, 31, 64)


def test_dataset_info_trusts_dataset_json_and_training_names_a_bad_file(copy_of):
    """Records overwritten with garbage of the same size: the run's set-up cannot tell (it reads none);
    `check` and the error line during training name the file."""
    for path in _record_files(copy_of):
        size = os.path.getsize(path)
        with open(path, "wb") as f:
            f.write(b"\x07" * size)
    info = data.dataset_info(copy_of)
    assert (info.train_records, info.eval_records, len(info.train_files)) == (120, 31, 3)
    problems = prepare.check_mlperf_dataset(copy_of, sample_records=8)
    assert any(info.eval_files[0] in problem for problem in problems), problems
    err = _first_error(data.eval_dataset(info, 4, 0, 1))
    _one_line_naming(data.describe_data_error(err, info), "corrupt or truncated TFRecord", info.eval_files[0])


def test_a_missing_dataset_json_names_the_check_command(full, tmp_path):
    root = tmp_path / "mlperf"
    shutil.copytree(full.data_dir, root)
    os.remove(root / "dataset.json")
    with pytest.raises(data.DataError) as err:
        data.dataset_info(str(root))
    _one_line_naming(str(err.value), str(root / "dataset.json"),
                     f"python -m models.bert.data_cli check --data-dir {root}")


def test_generated_is_an_explicit_field_and_older_sets_read_as_generated(tiny, copy_of):
    assert data.read_metadata(tiny.data_dir)["generated"] is True
    meta_path = os.path.join(copy_of, "dataset.json")
    with open(meta_path) as f:
        meta = json.load(f)
    del meta["generated"]
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    assert data.dataset_info(copy_of).generated
    with open(meta_path, "w") as f:
        json.dump({**meta, "generated": False}, f)
    assert not data.dataset_info(copy_of).generated


def test_changed_eval_files_are_refused_by_size(copy_of):
    """dataset.json gives the eval count; eval files rewritten since no longer match its eval_bytes."""
    path = os.path.join(copy_of, "eval", "part-00002-of-00003")
    rows = _features(path)
    _write(path, rows[:-1])
    with pytest.raises(data.DataError) as err:
        data.dataset_info(copy_of)
    _one_line_naming(str(err.value), os.path.join(copy_of, "eval"), os.path.join(copy_of, "dataset.json"),
                     f"python -m models.bert.data_cli check --data-dir {copy_of}")


def test_the_model_vocabulary_is_checked_against_dataset_json_alone(tiny):
    assert data.vocabulary_problem(tiny, 64) is None and data.vocabulary_problem(tiny, 30522) is None
    _one_line_naming(data.vocabulary_problem(tiny, 40), "vocabulary/config mismatch", "vocab_size 40",
                     os.path.join(tiny.data_dir, "dataset.json"), "64")
    checked = dataclass_replace(tiny, vocab_size=None, max_token_id=90)
    assert data.vocabulary_problem(checked, 91) is None
    _one_line_naming(data.vocabulary_problem(checked, 64), "vocabulary/config mismatch", "token id 90",
                     "vocab_size 64")
