"""BERT pretraining TFRecord input pipelines in the MLPerf reference format: what runs inside a run.

Finding the data reads only dataset.json, file listings and sizes (the clock rule); checking and
generating data live in models/bert/prepare.py."""

import dataclasses
import functools
import json
import os
import re

import numpy as np

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

# The MLPerf reference data (mlcommons/training language_model/tensorflow/bert, README and dataset.md).
MLPERF_SEQ_LENGTH = 512
MLPERF_MAX_PREDICTIONS = 76
MLPERF_TRAIN_SHARDS = 500
MLPERF_VOCAB_SIZE = 30522
MLPERF_EVAL_FILE = "eval_10k"
CHECKPOINT_STEP = 28252

METADATA_FILE = "dataset.json"
VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "bert_config.json"
TRAIN_DIR, EVAL_DIR = "train", "eval"
FEATURE_KEYS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
LABEL_KEYS = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
# Records per rank held for shuffling; the reference's input_fn uses 1000 after interleaving files.
SHUFFLE_BUFFER = 1000
# Files read concurrently per rank.
READ_CYCLE_LENGTH = 8
# How much data describe_data_error reads to find the file behind an error, before giving up.
SCAN_BUDGET_BYTES = 1 << 30

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
# create_pretraining_data.py flags of the reference.
MASKED_LM_PROB = 0.15
SHORT_SEQ_PROB = 0.1

_SHARD_NAME = re.compile(r"^part-(\d{5})-of-(\d{5})$")
_SKIPPED_SUFFIXES = (".tmp", ".partial", ".lock", ".md5", ".json", ".txt")


class DataError(ValueError):
    """A dataset problem, described in one line that names the offending file or directory."""


def feature_spec(seq_length: int = MLPERF_SEQ_LENGTH, max_predictions: int = MLPERF_MAX_PREDICTIONS) -> dict:
    """The parse spec of run_pretraining.py's input_fn: fixed lengths, int64 everywhere but the weights."""
    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "masked_lm_positions": tf.io.FixedLenFeature([max_predictions], tf.int64),
        "masked_lm_ids": tf.io.FixedLenFeature([max_predictions], tf.int64),
        "masked_lm_weights": tf.io.FixedLenFeature([max_predictions], tf.float32),
        "next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64),
    }


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """The TFRecord files of a pretraining dataset, their record lengths and what dataset.json declares."""

    data_dir: str
    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    seq_length: int
    max_predictions: int
    eval_records: int
    train_records: int | None  # known only from dataset.json: counting 365 GB is not an option
    vocab_size: int | None
    generated: bool  # dataset.json written by write_learnable_dataset, not by `data_cli check`
    vocab_file: str | None = None  # vocab.txt beside the data, if any (generated sets have one)
    bert_config_file: str | None = None  # bert_config.json beside the data, if any (generated sets have one)
    majority_baseline_accuracy: float | None = None
    context_rule_accuracy: float | None = None
    max_token_id: int | None = None  # the largest token id `data_cli check` saw in its sample

    @property
    def mlperf_layout(self) -> bool:
        """The reference's 500 training shards and eval_10k, at 512 tokens and 76 predictions."""
        names = [os.path.basename(f) for f in self.eval_files]
        return (not self.generated and len(self.train_files) == MLPERF_TRAIN_SHARDS
                and all(f.endswith(f"-of-{MLPERF_TRAIN_SHARDS:05d}") for f in self.train_files)
                and names == [MLPERF_EVAL_FILE] and self.seq_length == MLPERF_SEQ_LENGTH
                and self.max_predictions == MLPERF_MAX_PREDICTIONS)


# ---------------------------------------------------------------------------------------------------------
# Discovery


def dataset_info(data_dir: str, metadata: dict | None = None) -> DatasetInfo:
    """Finds `data_dir`/train and /eval and describes them from dataset.json, without reading a record.

    MLPerf starts the clock before anything touches the data, so a run may use only dataset.json, file
    listings and file sizes until run_start; the records themselves are vouched for by `data_cli check`,
    which writes dataset.json for the MLPerf data. `metadata` stands in for a dataset.json not written yet.
    """
    data_dir = os.fspath(data_dir)
    if not tf.io.gfile.isdir(data_dir):
        raise DataError(f"data directory not found: {data_dir}")
    train_files = _split_files(data_dir, TRAIN_DIR)
    eval_files = _split_files(data_dir, EVAL_DIR)
    meta = metadata if metadata is not None else read_metadata(data_dir)
    if meta is None:
        raise DataError(f"{os.path.join(data_dir, METADATA_FILE)} not found: run `{check_command(data_dir)}` "
                        f"once after preparing the data (it checks the records and writes that file)")
    _check_metadata_shards(meta, data_dir, train_files, eval_files)
    _check_eval_bytes(meta, data_dir, eval_files)
    # A rank whose files are all empty would wait forever for its first batch.
    empty = [path for path in train_files if _size(path) == 0]
    if empty:
        more = f" and {len(empty) - 1} more" if len(empty) > 1 else ""
        raise DataError(f"empty training file {empty[0]}{more}")
    return _info(data_dir, train_files, eval_files, meta)


def check_command(data_dir) -> str:
    """The pre-flight check that vouches for the records of `data_dir` and writes its dataset.json."""
    return f"python -m models.bert.data_cli check --data-dir {data_dir}"


def _info(data_dir, train_files, eval_files, meta):
    beside = {name: os.path.join(data_dir, name) for name in (VOCAB_FILE, CONFIG_FILE)}
    present = {name: path if tf.io.gfile.exists(path) else None for name, path in beside.items()}
    return DatasetInfo(
        data_dir=data_dir, train_files=train_files, eval_files=eval_files, seq_length=meta["seq_length"],
        max_predictions=meta["max_predictions"], eval_records=meta["eval_records"],
        train_records=meta.get("train_records"), vocab_size=meta.get("vocab_size"),
        generated=_is_generated(meta), vocab_file=present[VOCAB_FILE], bert_config_file=present[CONFIG_FILE],
        majority_baseline_accuracy=meta.get("majority_baseline_accuracy"),
        context_rule_accuracy=meta.get("context_rule_accuracy"), max_token_id=meta.get("max_token_id"))


def _is_generated(meta):
    # Generated sets written before the field existed have none; `data_cli check` writes false.
    return meta.get("generated", True)


def _size(path):
    return tf.io.gfile.stat(path).length


def _is_record_file(name):
    if name.startswith(".") or name.endswith(_SKIPPED_SUFFIXES):
        return False
    return bool(_SHARD_NAME.match(name)) or name == MLPERF_EVAL_FILE or ".tfrecord" in name


def _list_split(data_dir, split):
    """The record files of `data_dir`/`split` (None when the directory is missing)."""
    folder = os.path.join(data_dir, split)
    if not tf.io.gfile.isdir(folder):
        return None
    names = sorted(name for name in tf.io.gfile.listdir(folder) if _is_record_file(name.rstrip("/")))
    return tuple(os.path.join(folder, name) for name in names)


def _split_files(data_dir, split):
    files = _list_split(data_dir, split)
    folder = os.path.join(data_dir, split)
    if files is None:
        raise DataError(f"{split} directory not found: {folder} (expected {data_dir}/{TRAIN_DIR}/ "
                        f"and {data_dir}/{EVAL_DIR}/)")
    if not files:
        raise DataError(f"no TFRecord files in {folder} (expected part-NNNNN-of-NNNNN, {MLPERF_EVAL_FILE} "
                        f"or *.tfrecord*)")
    return files


def read_metadata(data_dir) -> dict | None:
    """dataset.json of `data_dir` (None when absent), checked field by field."""
    path = os.path.join(data_dir, METADATA_FILE)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            meta = json.load(f)
    except (ValueError, tf.errors.OpError) as err:
        raise DataError(f"malformed {path}: {_one_line(str(err))}") from None
    if not isinstance(meta, dict):
        raise DataError(f"malformed {path}: expected a JSON object")
    for key in ("seq_length", "max_predictions"):
        if not (_is_count(meta.get(key)) and meta[key] > 0):
            raise DataError(f"malformed {path}: '{key}' must be a positive integer")
    if not _is_count(meta.get("eval_records")):
        raise DataError(f"malformed {path}: 'eval_records' must be a non-negative integer")
    # train_records is null when nobody counted them (`data_cli check` does not read 365 GB).
    for key in ("train_records", "max_token_id", "train_shards", "eval_shards", "eval_bytes"):
        if meta.get(key) is not None and not _is_count(meta[key]):
            raise DataError(f"malformed {path}: '{key}' must be a non-negative integer or null")
    vocab_size = meta.get("vocab_size")
    if vocab_size is not None and not (_is_count(vocab_size) and vocab_size > 0):
        raise DataError(f"malformed {path}: 'vocab_size' must be a positive integer or null")
    if not isinstance(meta.get("generated", True), bool):
        raise DataError(f"malformed {path}: 'generated' must be true or false")
    return meta


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_metadata_shards(meta, data_dir, train_files, eval_files):
    # A stale dataset.json (files added or deleted afterwards) would give wrong epoch sizes.
    path = os.path.join(data_dir, METADATA_FILE)
    for key, files, split in (("train_shards", train_files, TRAIN_DIR),
                              ("eval_shards", eval_files, EVAL_DIR)):
        if meta.get(key) is not None and meta[key] != len(files):
            raise DataError(f"{path} lists {meta[key]} {split} files but {os.path.join(data_dir, split)} "
                            f"holds {len(files)}")


def _check_eval_bytes(meta, data_dir, eval_files):
    # The eval count comes from dataset.json: eval files changed after it was written would be miscounted.
    expected = meta.get("eval_bytes")
    found = sum(_size(path) for path in eval_files)
    if expected is not None and found != expected:
        raise DataError(f"{os.path.join(data_dir, EVAL_DIR)} holds {found:,} bytes of records but "
                        f"{os.path.join(data_dir, METADATA_FILE)} was written for {expected:,} "
                        f"({meta['eval_records']} eval records): run `{check_command(data_dir)}`")


def _count_records(files):
    total = 0
    for path in files:
        try:
            # Batching keeps eager iteration cheap.
            for batch in tf.data.TFRecordDataset(path).batch(4096):
                total += int(batch.shape[0])
        except tf.errors.OpError as err:
            raise DataError(f"cannot read {path}: {_tf_message(err)}") from None
    return total


def _record_schema_problem(serialized, seq_length, max_predictions, where=""):
    """What makes one serialized record differ from feature_spec (a phrase), or None."""
    try:
        features = tf.train.Example.FromString(serialized).features.feature
    except Exception:  # protobuf's DecodeError has no stable import path across versions
        return f"{where}not a tf.train.Example"
    for name, spec in feature_spec(seq_length, max_predictions).items():
        if name not in features:
            return f"{where}feature {name} is missing"
        kind = features[name].WhichOneof("kind")
        expected_kind = "float_list" if spec.dtype == tf.float32 else "int64_list"
        if kind != expected_kind:
            return f"{where}feature {name} is a {kind}, expected {expected_kind}"
        found = len(getattr(features[name], kind).value)
        if found != spec.shape[0]:
            return f"{where}feature {name} has length {found}, expected {spec.shape[0]}"
    return None


# ---------------------------------------------------------------------------------------------------------
# Input pipelines


def train_dataset(info: DatasetInfo, batch: int, rank: int, world_size: int, seed: int, *,
                  deterministic: bool = True) -> tf.data.Dataset:
    """Endless shuffled (features, labels) batches for one Horovod rank, as the reference's input_fn.

    Ranks read disjoint files (disjoint records when there are fewer files than ranks). `deterministic`
    False lets the interleave hand out records as soon as they are ready, as the reference's sloppy mode.
    """
    _check_sharding(batch, rank, world_size)
    if info.train_records is not None and info.train_records < world_size:
        raise DataError(f"{info.train_records} training records in {info.data_dir} cannot feed "
                        f"{world_size} ranks")
    rank_seed = seed * 1000003 + rank  # distinct per rank, and per seed for any rank
    if len(info.train_files) >= world_size:
        mine = list(info.train_files[rank::world_size])
        files = tf.data.Dataset.from_tensor_slices(mine)
        # Repeating the file list rather than the records keeps the reader busy across epochs.
        files = files.shuffle(len(mine), seed=rank_seed, reshuffle_each_iteration=True).repeat()
        records = files.interleave(_read_tfrecords, cycle_length=min(len(mine), READ_CYCLE_LENGTH),
                                   block_length=1, num_parallel_calls=tf.data.AUTOTUNE,
                                   deterministic=deterministic)
        records = records.shuffle(SHUFFLE_BUFFER, seed=rank_seed, reshuffle_each_iteration=True)
    else:
        records = tf.data.TFRecordDataset(list(info.train_files)).shard(world_size, rank)
        records = records.shuffle(SHUFFLE_BUFFER, seed=rank_seed, reshuffle_each_iteration=True).repeat()
    return _finish(records, info, batch, drop_remainder=True)


def eval_dataset(info: DatasetInfo, batch: int, rank: int, world_size: int) -> tf.data.Dataset:
    """One pass over this rank's share of the eval records, in file order; the last batch may be short.

    Records (not files) are dealt round-robin, so rank shares differ by at most one record: eval_10k is
    a single file, and the slowest rank sets the pace of a Horovod evaluation.
    """
    _check_sharding(batch, rank, world_size)
    records = tf.data.TFRecordDataset(list(info.eval_files)).shard(world_size, rank)
    return _finish(records, info, batch, drop_remainder=False)


def synthetic_dataset(batch: int, seq_length: int = MLPERF_SEQ_LENGTH,
                      max_predictions: int = MLPERF_MAX_PREDICTIONS, vocab_size: int = MLPERF_VOCAB_SIZE,
                      seed: int = 0) -> tf.data.Dataset:
    """One random batch shaped like real data, made once on the host and repeated, for throughput runs.

    As in create_pretraining_data.py, 90 % of the sequences fill seq_length and the rest are shorter; each
    predicts min(max_predictions, round(15 % of its tokens)) positions.
    """
    _check_sharding(batch, 0, 1)
    rng = np.random.default_rng(seed)
    rows = [_synthetic_row(rng, seq_length, max_predictions, vocab_size) for _ in range(batch)]
    stacked = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    features = {key: tf.constant(stacked[key], tf.int32) for key in FEATURE_KEYS}
    labels = {key: tf.constant(stacked[key], tf.float32 if key == "masked_lm_weights" else tf.int32)
              for key in LABEL_KEYS}
    return tf.data.Dataset.from_tensors((features, labels)).repeat()


def _synthetic_row(rng, seq_length, max_predictions, vocab_size):
    length = seq_length if rng.random() >= SHORT_SEQ_PROB else int(rng.integers(min(5, seq_length),
                                                                                seq_length + 1))
    ids = np.zeros(seq_length, np.int64)
    ids[:length] = rng.integers(0, vocab_size, length)
    mask = (np.arange(seq_length) < length).astype(np.int64)
    segments = ((np.arange(seq_length) >= length // 2) & (mask == 1)).astype(np.int64)
    count = min(max_predictions, max(1, round(length * MASKED_LM_PROB)), max(1, length - 1))
    positions = np.zeros(max_predictions, np.int64)
    positions[:count] = np.sort(rng.choice(np.arange(1, max(2, length)), count, replace=False))
    weights = (np.arange(max_predictions) < count).astype(np.float32)
    labels = np.where(weights > 0, rng.integers(0, vocab_size, max_predictions), 0)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments, "masked_lm_positions": positions,
            "masked_lm_ids": labels, "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, 1)}


def _check_sharding(batch, rank, world_size):
    if batch < 1:
        raise ValueError(f"batch must be positive, got {batch}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of size {world_size}")


def _read_tfrecords(path):
    return tf.data.TFRecordDataset(path, buffer_size=8 * 1024 * 1024)


def _finish(records, info, batch, drop_remainder):
    # Parsing whole batches is several times faster than one record at a time.
    parse = functools.partial(parse_batch, seq_length=info.seq_length, max_predictions=info.max_predictions)
    batches = records.batch(batch, drop_remainder=drop_remainder)
    batches = batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Records are already split by Horovod rank; a tf.distribute strategy must not split them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batches.with_options(options)


def parse_batch(records, seq_length=MLPERF_SEQ_LENGTH, max_predictions=MLPERF_MAX_PREDICTIONS):
    """Serialized records [B] -> (features, labels) dicts; ints become int32, as in the reference."""
    parsed = tf.io.parse_example(records, feature_spec(seq_length, max_predictions))
    parsed = {key: tf.cast(value, tf.int32) if value.dtype == tf.int64 else value
              for key, value in parsed.items()}
    return {key: parsed[key] for key in FEATURE_KEYS}, {key: parsed[key] for key in LABEL_KEYS}


# ---------------------------------------------------------------------------------------------------------
# Turning TensorFlow errors into one-line messages

_FEATURE_IN_ERROR = re.compile(r"(?:Feature|Key): (\w+)")
_OUT_OF_RANGE = re.compile(r"indices\[[\d,]*\] = (-?\d+) is not in \[0, (\d+)\)")


def describe_data_error(err: Exception, info: DatasetInfo) -> str | None:
    """One line naming the file and feature behind a TensorFlow error reading `info`; None if unrelated.

    TensorFlow's messages name neither the file nor the record, so this reads the files (up to
    SCAN_BUDGET_BYTES, eval set first) to find the first one at fault.
    """
    if not isinstance(err, tf.errors.OpError):
        return None
    text = _tf_message(err)
    hint = f"`{check_command(info.data_dir)}` samples every split"
    if isinstance(err, tf.errors.DataLossError):
        culprit = _first_bad_file(info)
        if culprit:
            return f"corrupt or truncated TFRecord {culprit[0]}: {culprit[1]}"
        return f"corrupt or truncated TFRecord under {info.data_dir}: {text} ({hint})"
    if isinstance(err, tf.errors.NotFoundError) and info.data_dir in text:
        return f"TFRecord file vanished while reading {info.data_dir}: {text}"
    if not isinstance(err, tf.errors.InvalidArgumentError):
        return None
    out_of_range = _OUT_OF_RANGE.search(text)
    if out_of_range:
        return _out_of_range_line(int(out_of_range.group(1)), int(out_of_range.group(2)), info)
    feature = _FEATURE_IN_ERROR.search(text)
    if not feature or feature.group(1) not in feature_spec():
        return None
    culprit = _first_bad_file(info)
    if culprit:
        return f"malformed record in {culprit[0]}: {culprit[1]}"
    return f"malformed record (feature {feature.group(1)}) under {info.data_dir}: {text} ({hint})"


def _out_of_range_line(value, bound, info):
    """An embedding or position lookup failed on CPU: say which input, by the bound it broke."""
    if bound == info.seq_length and bound != info.vocab_size:
        return f"masked_lm_positions value {value} in {info.data_dir} is not below seq_length {bound}"
    if bound <= 2:
        return (f"vocabulary/config mismatch: segment id {value} in {info.data_dir} is not below the "
                f"model's type_vocab_size {bound}")
    return (f"vocabulary/config mismatch: token id {value} in {info.data_dir} is not below the model's "
            f"vocab_size {bound}")


def _first_bad_file(info):
    """(path, problem) of the first file that does not parse, or None."""
    # The session asks more than once; the modification times make a rewritten file count as new.
    return _first_bad_file_cached(info, tuple(_stamp(path) for path in info.eval_files + info.train_files))


def _stamp(path):
    try:
        status = os.stat(path)  # nanoseconds; gfile rounds local times to whole seconds
        return status.st_mtime_ns, status.st_size
    except OSError:
        status = tf.io.gfile.stat(path)  # gs://, s3:// and other remote file systems
        return status.mtime_nsec, status.length


@functools.lru_cache(maxsize=4)
def _first_bad_file_cached(info, stamps):
    spent = 0
    for path in info.eval_files + info.train_files:
        problem = _file_problem(path, info.seq_length, info.max_predictions)
        if problem:
            return path, problem
        spent += tf.io.gfile.stat(path).length
        if spent > SCAN_BUDGET_BYTES:
            return None
    return None


def _file_problem(path, seq_length, max_predictions):
    """The first record of `path` that does not parse, as a phrase; or None."""
    spec = feature_spec(seq_length, max_predictions)
    seen = 0
    try:
        for batch in tf.data.TFRecordDataset(path).batch(512):
            try:
                tf.io.parse_example(batch, spec)
            except tf.errors.InvalidArgumentError:
                for offset, record in enumerate(batch.numpy()):
                    problem = _record_schema_problem(record, seq_length, max_predictions)
                    if problem:
                        return f"record {seen + offset}: {problem}"
            seen += int(batch.shape[0])
    except tf.errors.OpError as err:
        return f"unreadable after {seen} records: {_tf_message(err)}"
    return None


def _tf_message(err):
    text = getattr(err, "message", None) or str(err)
    text = re.sub(r"\{\{[^}]*\}\}", " ", text)  # {{function_node ...}} prefixes
    text = re.sub(r"\[\[.*?\]\]", " ", text, flags=re.S)  # [[{{node ...}}]] graph locations
    text = re.sub(r"\[Op:[^\]]*\]", " ", text)
    text = re.sub(r"Error in user-defined function passed to \w+:\d+ transformation with iterator: "
                  r"[\w:]+: ", "", text)
    text = re.sub(r"\bname:\s*$", " ", text.strip())
    return _one_line(text)


def _one_line(text, limit=300):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------------------------------------------------
# Vocabulary and token-id checks


def vocab_problem(vocab_path: str, vocab_size: int) -> str | None:
    """A line when `vocab_path` is missing or its line count differs from the model's vocab_size."""
    try:
        with tf.io.gfile.GFile(vocab_path, "r") as f:
            lines = sum(1 for _ in f)
    except tf.errors.NotFoundError:
        return f"vocabulary file not found: {vocab_path}"
    except (tf.errors.OpError, UnicodeDecodeError) as err:
        return f"cannot read {vocab_path}: {_one_line(str(err))}"
    if lines != vocab_size:
        return (f"vocabulary/config mismatch: {vocab_path} has {lines} tokens but the model config's "
                f"vocab_size is {vocab_size}")
    return None


def vocabulary_problem(info: DatasetInfo, vocab_size: int) -> str | None:
    """A line when the model's vocab_size cannot cover the data's token ids, by dataset.json alone.

    dataset.json's vocab_size, or else the largest token id `data_cli check` saw, stands for the data:
    a run may not read records before run_start to find out.
    """
    path = os.path.join(info.data_dir, METADATA_FILE)
    if info.vocab_size is not None and vocab_size < info.vocab_size:
        return (f"vocabulary/config mismatch: the model's vocab_size {vocab_size} is smaller than the "
                f"vocab_size {info.vocab_size} of {path} (does bert_config.json go with this data?)")
    if info.max_token_id is not None and vocab_size <= info.max_token_id:
        return (f"vocabulary/config mismatch: {path} records token id {info.max_token_id}, outside the "
                f"model's vocab_size {vocab_size} (does bert_config.json go with this data?)")
    return None
