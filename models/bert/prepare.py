"""BERT data preparation, run once before any training: the pre-flight checks of an MLPerf dataset (which
write dataset.json) and of the phase-1 checkpoint, and a learnable generator in the exact format."""

import hashlib
import math
import os

import numpy as np

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from suite.common import runfiles
from suite.common.staging import split_evenly, staged_output
import tensorflow as tf

from models.bert.data import (CHECKPOINT_STEP, CLS_ID, CONFIG_FILE, DataError, dataset_info, DatasetInfo,
                              EVAL_DIR, feature_spec, MASK_ID, MASKED_LM_PROB, METADATA_FILE,
                              MLPERF_MAX_PREDICTIONS,
                              MLPERF_SEQ_LENGTH, MLPERF_TRAIN_SHARDS, MLPERF_VOCAB_SIZE, read_metadata,
                              SEP_ID, SHORT_SEQ_PROB, SPECIAL_TOKENS, TRAIN_DIR, VOCAB_FILE, vocab_problem,
                              _count_records, _file_problem, _is_generated, _list_split,
                              _one_line, _record_schema_problem, _SHARD_NAME, _size)

# The reference's eval_10k: 10,000 records. The README publishes its size but no MD5; a different size
# means different samples.
MLPERF_EVAL_RECORDS = 10000
MLPERF_EVAL_BYTES = 25382591
# (size in bytes, MD5) of the phase-1 checkpoint files, from the reference README's table.
CHECKPOINT_FILES = {
    "bert_config.json": (314, "7f59165e21b7d566db610ff6756c926b"),
    "vocab.txt": (231508, "64800d5d8528ce344256daf115d4965e"),
    f"model.ckpt-{CHECKPOINT_STEP}.index": (17371, "f97de3ae180eb8d479555c939d50d048"),
    f"model.ckpt-{CHECKPOINT_STEP}.meta": (24740228, "dbd16c731e8a8113bc08eeed0326b8e7"),
    f"model.ckpt-{CHECKPOINT_STEP}.data-00000-of-00001": (4034713312, "50797acd537880bfb5a7ade80d976129"),
}


# ---------------------------------------------------------------------------------------------------------
# Pre-flight checks of a data directory and of the phase-1 checkpoint


def token_id_problem(info: DatasetInfo, vocab_size: int, sample: int = 256) -> str | None:
    """A line naming the file when a sampled record (train and eval) holds a token id >= vocab_size."""
    for path, records in _sample_records(info.train_files, sample) + _sample_records(info.eval_files, sample):
        for number, record in enumerate(records):
            ids = _int_values(record, "input_ids") + _int_values(record, "masked_lm_ids")
            if ids and (max(ids) >= vocab_size or min(ids) < 0):
                bad = max(ids) if max(ids) >= vocab_size else min(ids)
                return (f"vocabulary/config mismatch: {path} record {number} holds token id {bad}, outside "
                        f"the model's vocab_size {vocab_size} (does bert_config.json go with this data?)")
    return None


def _sample_records(files, sample, max_files=8):
    """[(path, [serialized records])] for about `sample` records from the heads of up to `max_files` files."""
    if sample <= 0 or not files:
        return []
    # The first and last files and some between: a mixed-up set usually differs across its range.
    picks = sorted({round(i * (len(files) - 1) / max(1, max_files - 1)) for i in range(max_files)})
    per_file = math.ceil(sample / len(picks))
    sampled = []
    for index in picks:
        try:
            records = [r.numpy() for r in tf.data.TFRecordDataset(files[index]).take(per_file)]
        except tf.errors.OpError:
            records = []  # unreadable files are reported by the checks that read them in full
        sampled.append((files[index], records))
    return sampled


def _int_values(serialized, name):
    try:
        feature = tf.train.Example.FromString(serialized).features.feature
    except Exception:  # protobuf's DecodeError has no stable import path across versions
        return []
    return list(feature[name].int64_list.value) if name in feature else []


def check_mlperf_dataset(data_dir: str, sample_records: int = 256, notes: list | None = None,
                         new_metadata: dict | None = None) -> list[str]:
    """Problems that would stop or invalidate a run on `data_dir` (empty when none), one line each.

    Without dataset.json, or with the one `data_cli check` wrote (generated false), the MLPerf rules apply:
    512/76 records, eval set of exactly 10,000 records (eval_10k of the reference's size), training shards
    part-NNNNN-of-00500; a written dataset.json must still describe the files. With a generated set's
    dataset.json the lengths and counts it declares apply instead. Which rules applied, and warnings that
    are not problems (a re-packed training set), are appended to `notes`. Without dataset.json and without
    problems, `new_metadata` (a dict, when given) receives the dataset.json that `data_cli check` writes.
    """
    data_dir = os.fspath(data_dir)
    notes = [] if notes is None else notes
    if not tf.io.gfile.isdir(data_dir):
        raise DataError(f"data directory not found: {data_dir}")
    problems = []
    try:
        meta = read_metadata(data_dir)
    except DataError as err:
        return [str(err)]
    rules = meta if meta is not None and _is_generated(meta) else None  # None: the MLPerf rules
    seq_length, max_predictions = ((rules["seq_length"], rules["max_predictions"]) if rules
                                   else (MLPERF_SEQ_LENGTH, MLPERF_MAX_PREDICTIONS))
    vocab_size = rules.get("vocab_size") if rules else MLPERF_VOCAB_SIZE
    notes.append(_rules_note(data_dir, meta, seq_length, max_predictions))
    splits = {}
    for split in (TRAIN_DIR, EVAL_DIR):
        splits[split] = _list_split(data_dir, split)
        if not splits[split]:
            where = os.path.join(data_dir, split)
            found = ("directory not found" if splits[split] is None
                     else "no TFRecord files (part-NNNNN-of-NNNNN, eval_10k or *.tfrecord*)")
            problems.append(f"{where}: {found}")
    train_files, eval_files = splits[TRAIN_DIR] or (), splits[EVAL_DIR] or ()
    problems += _train_layout_problems(data_dir, train_files, rules, notes)
    eval_problems, eval_records = _eval_problems(data_dir, eval_files, rules, seq_length, max_predictions)
    problems += eval_problems
    if rules and train_files and rules.get("train_records") is not None:
        count = _count_or_problem(train_files, problems)
        if count is not None and count != rules["train_records"]:
            problems.append(f"{os.path.join(data_dir, TRAIN_DIR)}: {count} training records, "
                            f"{os.path.join(data_dir, METADATA_FILE)} declares {rules['train_records']}")
    sampled = _sample_records(train_files, sample_records) + _sample_records(eval_files, sample_records)
    for path, records in sampled:
        problems += _sampled_record_problems(path, records, seq_length, max_predictions, vocab_size)
    described = {"seq_length": seq_length, "max_predictions": max_predictions, "vocab_size": vocab_size,
                 "eval_records": eval_records, "train_shards": len(train_files),
                 "eval_shards": len(eval_files), "eval_bytes": sum(_size(path) for path in eval_files)}
    if meta is None:
        if not problems and new_metadata is not None:
            new_metadata.update(_checked_metadata(described, sampled))
    elif not rules:
        problems += _stale_metadata_problems(data_dir, meta, described)
    elif not eval_problems:  # a generated set's counts were checked above; reported eval files say it all
        problems += _stale_metadata_problems(data_dir, meta, {"eval_bytes": described["eval_bytes"]})
    return problems


def _rules_note(data_dir, meta, seq_length, max_predictions):
    path = os.path.join(data_dir, METADATA_FILE)
    if meta and _is_generated(meta):
        train = meta["train_records"] if meta.get("train_records") is not None else "uncounted"
        return (f"rules: generated data ({path}): {seq_length} tokens, {max_predictions} predictions, "
                f"{train} training and {meta['eval_records']} eval records as declared")
    return (f"rules: MLPerf reference data: {MLPERF_SEQ_LENGTH} tokens, {MLPERF_MAX_PREDICTIONS} "
            f"predictions, vocab_size {MLPERF_VOCAB_SIZE}, exactly {MLPERF_EVAL_RECORDS} eval records"
            f"{f', and {path} as written by check' if meta else ''}")


def _stale_metadata_problems(data_dir, meta, described):
    """One line when dataset.json no longer describes the files (runs trust it without reading them)."""
    path = os.path.join(data_dir, METADATA_FILE)
    differ = [f"{key} {meta[key]} (the data: {value})" for key, value in described.items()
              if value is not None and meta.get(key) is not None and meta[key] != value]
    if not differ:
        return []
    remedy = ("delete it and run this check again" if not _is_generated(meta)
              else "generate the set again")
    return [f"{path} does not describe the data any more: {', '.join(differ)}; {remedy}"]


def _checked_metadata(described, sampled):
    """dataset.json for MLPerf data that passed the check: runs take their description from it."""
    ids = [max(_int_values(record, "input_ids") + _int_values(record, "masked_lm_ids"), default=0)
           for _, records in sampled for record in records]
    return {"source": "MLPerf reference data, described by `python -m models.bert.data_cli check`",
            "generated": False, **described, "train_records": None, "max_token_id": max(ids, default=None),
            "max_token_id_sample": sum(len(records) for _, records in sampled)}


def write_metadata(data_dir: str, fields: dict) -> str:
    """Writes `data_dir`/dataset.json whole or not at all (a temporary file, then a rename); its path."""
    path = os.path.join(os.fspath(data_dir), METADATA_FILE)
    runfiles.write_json(path, fields)
    return path


def _count_or_problem(files, problems):
    try:
        return _count_records(files)
    except DataError as err:
        problems.append(str(err))
        return None


def _missing_shard_problems(folder, files):
    """Shards absent from a numbered set, e.g. part-00002-of-00004 when the other three are there."""
    numbered = {}
    for path in files:
        match = _SHARD_NAME.match(os.path.basename(path))
        if match:
            numbered.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
    problems = []
    for total, seen in sorted(numbered.items()):
        missing = sorted(set(range(total)) - seen)
        if missing:
            names = ", ".join(_shard_name(i, total) for i in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            problems.append(f"{folder}: missing shards {names}{more}")
    return problems


def _train_layout_problems(data_dir, files, meta, notes):
    """Missing shards; a layout other than the reference's 500 shards is only a note (re-packing is fine)."""
    folder = os.path.join(data_dir, TRAIN_DIR)
    problems = _missing_shard_problems(folder, files)
    reference = (len(files) == MLPERF_TRAIN_SHARDS
                 and all(f.endswith(f"-of-{MLPERF_TRAIN_SHARDS:05d}") for f in files))
    if files and not meta and not reference and not problems:
        notes.append(f"warning: {folder} holds {len(files)} training files, not the reference's "
                     f"{MLPERF_TRAIN_SHARDS} part-NNNNN-of-{MLPERF_TRAIN_SHARDS:05d} shards: fine if "
                     f"re-packed from them (MLPerf allows re-sharding), but not checked against them")
    return problems


def _eval_problems(data_dir, files, meta, seq_length, max_predictions):
    """(problems, record count or None) of the eval files; `meta` None means the MLPerf rules."""
    if not files:
        return [], None
    folder = os.path.join(data_dir, EVAL_DIR)
    problems = _missing_shard_problems(folder, files)
    count = _count_or_problem(files, problems)
    expected = meta["eval_records"] if meta else MLPERF_EVAL_RECORDS
    if count is not None and count != expected:
        source = f"{os.path.join(data_dir, METADATA_FILE)} declares" if meta else "MLPerf requires"
        problems.append(f"{folder}: {count} eval records, {source} {expected}")
    if not meta and count == MLPERF_EVAL_RECORDS and len(files) == 1:
        size = tf.io.gfile.stat(files[0]).length
        if size != MLPERF_EVAL_BYTES:
            problems.append(f"{files[0]}: {size:,} bytes, the reference's eval_10k has "
                            f"{MLPERF_EVAL_BYTES:,}: other samples (the reference makes it with "
                            f"create_pretraining_data.py --random_seed=12345 and pick_eval_samples.py)")
    for path in files:
        problem = _file_problem(path, seq_length, max_predictions)
        if problem and "unreadable" not in problem:  # unreadable files were reported by the count
            problems.append(f"{path}: {problem}")
    return problems, count


def _sampled_record_problems(path, records, seq_length, max_predictions, vocab_size, limit=3):
    problems = []
    for number, record in enumerate(records):
        problem = (_record_schema_problem(record, seq_length, max_predictions)
                   or _record_value_problem(record, seq_length, vocab_size))
        if problem:
            problems.append(f"{path}: record {number}: {problem}")
            if len(problems) == limit:
                break
    return problems


def _record_value_problem(serialized, seq_length, vocab_size):
    """Values outside what the model accepts (token ids, positions, 0/1 masks and labels), or None."""
    features = tf.train.Example.FromString(serialized).features.feature
    values = {name: np.asarray(getattr(features[name], features[name].WhichOneof("kind")).value)
              for name in feature_spec(1, 1)}
    binary = ("input_mask", "segment_ids", "masked_lm_weights", "next_sentence_labels")
    for name in binary:
        if not np.isin(values[name], (0, 1)).all():
            return f"{name} holds values other than 0 and 1"
    if ((values["masked_lm_positions"] < 0) | (values["masked_lm_positions"] >= seq_length)).any():
        return f"masked_lm_positions outside 0..{seq_length - 1}"
    for name in ("input_ids", "masked_lm_ids"):
        if (values[name] < 0).any() or (vocab_size and (values[name] >= vocab_size).any()):
            return (f"vocabulary/config mismatch: {name} holds token id {int(values[name].max())}, "
                    f"outside vocab_size {vocab_size}")
    return None


def checkpoint_layout(ckpt_dir: str) -> dict:
    """{file name: path} of the phase-1 checkpoint in `ckpt_dir`; the TF1 files may sit in tf1_ckpt/."""
    nested = os.path.join(ckpt_dir, "tf1_ckpt")
    index = f"model.ckpt-{CHECKPOINT_STEP}.index"
    ckpt_folder = nested if (not tf.io.gfile.exists(os.path.join(ckpt_dir, index))
                             and tf.io.gfile.exists(os.path.join(nested, index))) else ckpt_dir
    return {name: os.path.join(ckpt_dir if name in (CONFIG_FILE, VOCAB_FILE) else ckpt_folder, name)
            for name in CHECKPOINT_FILES}


def check_checkpoint_dir(ckpt_dir: str, verify_md5: bool = True) -> list[str]:
    """Problems with the MLPerf phase-1 checkpoint in `ckpt_dir`, one line each (empty when none).

    Checks that the files are there with the reference's sizes and MD5s, that vocab.txt has vocab_size
    lines, and that the checkpoint holds every variable of bert_config.json's model with the right shape.
    """
    ckpt_dir = os.fspath(ckpt_dir)
    if not tf.io.gfile.isdir(ckpt_dir):
        raise DataError(f"checkpoint directory not found: {ckpt_dir}")
    paths = checkpoint_layout(ckpt_dir)
    problems = [f"missing {path}" for path in paths.values() if not tf.io.gfile.exists(path)]
    for name, path in paths.items():
        if tf.io.gfile.exists(path):
            problems += _digest_problems(path, *CHECKPOINT_FILES[name], verify_md5)
    if not tf.io.gfile.exists(paths[CONFIG_FILE]):
        return problems
    from models.bert.model import BertConfig  # another module's model code, needed only here

    try:
        config = BertConfig.from_json_file(paths[CONFIG_FILE])
    except (ValueError, OSError) as err:
        return problems + [_one_line(str(err))]
    if tf.io.gfile.exists(paths[VOCAB_FILE]):
        problem = vocab_problem(paths[VOCAB_FILE], config.vocab_size)
        problems += [problem] if problem else []
    prefix = paths[f"model.ckpt-{CHECKPOINT_STEP}.index"][:-len(".index")]
    if tf.io.gfile.exists(prefix + ".index"):
        from models.bert.checkpoint import checkpoint_problems

        problems += checkpoint_problems(prefix, config)
    return problems


def _digest_problems(path, size, md5, verify_md5):
    found = tf.io.gfile.stat(path).length
    if found != size:
        return [f"{path}: {found:,} bytes, the reference's file has {size:,}"]
    found = file_md5(path) if verify_md5 else md5
    return [f"{path}: MD5 {found}, the reference's is {md5}"] if found != md5 else []


def file_md5(path: str) -> str:
    """Hex MD5 of a file, read in 8 MB pieces (4 GB take about ten seconds)."""
    digest = hashlib.md5()
    with tf.io.gfile.GFile(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------
# Writing records


def _example(tokens, segment_ids, positions, labels, next_is_random, seq_length, max_predictions):
    """One record laid out exactly as create_pretraining_data.py writes it (padding with zeros)."""
    def ints(values, length):
        return tf.train.Feature(int64_list=tf.train.Int64List(
            value=list(values) + [0] * (length - len(values))))

    count = len(positions)
    weights = [1.0] * count + [0.0] * (max_predictions - count)
    feature = {
        "input_ids": ints(tokens, seq_length),
        "input_mask": ints([1] * len(tokens), seq_length),
        "segment_ids": ints(segment_ids, seq_length),
        "masked_lm_positions": ints(positions, max_predictions),
        "masked_lm_ids": ints(labels, max_predictions),
        "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=weights)),
        "next_sentence_labels": ints([int(next_is_random)], 1),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _shard_name(index, count):
    return f"part-{index:05d}-of-{count:05d}"


def _write_split(folder, records, shards):
    """Writes the records in `shards` numbered files; returns their total size in bytes."""
    os.makedirs(folder)
    paths = [os.path.join(folder, _shard_name(index, shards)) for index in range(shards)]
    for path, chunk in zip(paths, split_evenly(records, shards)):
        with tf.io.TFRecordWriter(path) as writer:
            for record in chunk:
                writer.write(record)
    return sum(os.path.getsize(path) for path in paths)


# ---------------------------------------------------------------------------------------------------------
# A small learnable dataset
#
# Words come in topics of TOPIC_WORDS; each topic's words form a cycle, and a document walks the cycle of
# its topic: the next word is the successor, except that a document lingers on its own favourite word (it
# repeats it with probability LINGER) and that NOISE of the steps jump to a random word of the topic. So a
# masked word is predictable from its neighbours (the successor rule), and, less well, from the words of
# its segment alone (the favourite word dominates). A tiny BERT learns the second within several hundred
# steps; rules that need positions take it far longer. A random next sentence comes from another topic.

TOPIC_WORDS = 3
LINGER = 0.8
NOISE = 0.1
_CONSONANTS, _VOWELS = "bdfgklmnprstvz", "aeiou"


def _topics(rng, vocab_size):
    """The topics: word ids, each topic in successor order."""
    words = rng.permutation(np.arange(len(SPECIAL_TOKENS), vocab_size))
    return tuple(np.asarray(t) for t in np.array_split(words, max(1, len(words) // TOPIC_WORDS)))


def _document(rng, cycle, length):
    """`length` words walking `cycle` from a random word, lingering on a random favourite."""
    favourite = rng.integers(len(cycle))
    jumps, stays = rng.random(length) < NOISE, rng.random(length) < LINGER
    targets = rng.integers(0, len(cycle), length)
    index, out = rng.integers(len(cycle)), np.empty(length, np.int64)
    for n in range(length):
        out[n] = cycle[index]
        if jumps[n]:
            index = targets[n]
        elif not (index == favourite and stays[n]):
            index = (index + 1) % len(cycle)
    return out


def _word(index):
    """A pronounceable word for an index: two or more consonant-vowel syllables."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    parts = []
    while index or len(parts) < 2:
        index, digit = divmod(index, len(syllables))
        parts.append(syllables[digit])
    return "".join(reversed(parts))


def _instance(rng, topics, seq_length, max_predictions, vocab_size):
    """(tokens, segment ids, masked positions, original ids, next-is-random) for one record."""
    max_tokens = seq_length - 3  # [CLS] A [SEP] B [SEP]
    total = max_tokens if rng.random() >= SHORT_SEQ_PROB else int(rng.integers(2, max_tokens + 1))
    a_length = int(rng.integers(1, total))
    topic = int(rng.integers(len(topics)))
    text = _document(rng, topics[topic], total)
    first, second = text[:a_length], text[a_length:]
    next_is_random = bool(rng.random() < 0.5)
    if next_is_random:
        # A different document, from another topic when there is one, as the reference picks another one.
        other = (topic + int(rng.integers(1, len(topics)))) % len(topics) if len(topics) > 1 else topic
        second = _document(rng, topics[other], total - a_length)
    tokens = np.concatenate([[CLS_ID], first, [SEP_ID], second, [SEP_ID]]).astype(np.int64)
    segments = np.zeros(len(tokens), np.int64)
    segments[a_length + 2:] = 1
    positions, labels = _mask(rng, tokens, max_predictions, vocab_size)
    return tokens, segments, positions, labels, next_is_random


def _mask(rng, tokens, max_predictions, vocab_size):
    """create_pretraining_data.py's masking: 15 % of the words, 80 % [MASK], 10 % random, 10 % kept."""
    candidates = np.flatnonzero((tokens != CLS_ID) & (tokens != SEP_ID))
    count = min(max_predictions, max(1, int(round(len(tokens) * MASKED_LM_PROB))), len(candidates))
    positions = np.sort(rng.permutation(candidates)[:count])
    labels = tokens[positions].copy()
    for position in positions:
        if rng.random() < 0.8:
            tokens[position] = MASK_ID
        elif rng.random() >= 0.5:
            tokens[position] = rng.integers(0, vocab_size)  # the reference draws from the whole vocabulary
    return positions, labels


def write_learnable_dataset(out_dir, *, vocab_size=128, seq_length=128, max_predictions=20,
                            train_records=4096, eval_records=512, train_shards=4, eval_shards=2,
                            seed=0) -> DatasetInfo:
    """Writes train/ and eval/ TFRecords in the MLPerf format, vocab.txt, a tiny bert_config.json and
    dataset.json, whose text a small BERT learns in minutes; deterministic per seed, written atomically.

    dataset.json records the eval masked-LM accuracy of three predictors: the most common masked word
    (the baseline a trained model must beat by far), the most frequent other word of the segment, and
    the word seen most often between the same two neighbours in the training text.
    """
    _check_learnable_args(vocab_size, seq_length, max_predictions, train_records, eval_records,
                          train_shards, eval_shards)
    rng = np.random.default_rng(seed)
    topics = _topics(rng, vocab_size)
    train = [_instance(rng, topics, seq_length, max_predictions, vocab_size) for _ in range(train_records)]
    evals = [_instance(rng, topics, seq_length, max_predictions, vocab_size) for _ in range(eval_records)]
    stats = _learnability(train, evals, vocab_size)

    def serialize(instances):
        return [_example(*instance, seq_length, max_predictions) for instance in instances]

    with staged_output(out_dir, DataError) as staging:
        _write_split(os.path.join(staging, TRAIN_DIR), serialize(train), train_shards)
        eval_bytes = _write_split(os.path.join(staging, EVAL_DIR), serialize(evals), eval_shards)
        with open(os.path.join(staging, VOCAB_FILE), "w") as f:
            f.writelines(f"{token}\n" for token in _vocabulary(vocab_size))
        runfiles.write_json(os.path.join(staging, CONFIG_FILE), tiny_bert_config(vocab_size, seq_length))
        runfiles.write_json(os.path.join(staging, METADATA_FILE), {
            "source": "learnable", "generated": True, "format": "MLPerf BERT pretraining TFRecords",
            "seed": seed, "seq_length": seq_length, "max_predictions": max_predictions,
            "vocab_size": vocab_size, "train_records": train_records, "eval_records": eval_records,
            "train_shards": train_shards, "eval_shards": eval_shards, "eval_bytes": eval_bytes,
            "masked_lm_prob": MASKED_LM_PROB, "short_seq_prob": SHORT_SEQ_PROB, "noise": NOISE,
            "linger": LINGER, "topics": len(topics), "vocab_file": VOCAB_FILE,
            "bert_config_file": CONFIG_FILE, **stats})
    return dataset_info(out_dir)


def _check_learnable_args(vocab_size, seq_length, max_predictions, train_records, eval_records,
                          train_shards, eval_shards):
    if not 16 <= vocab_size <= 100000:
        raise DataError(f"vocab size {vocab_size} is out of range 16..100000")
    if seq_length < 8:
        raise DataError(f"seq length {seq_length} is too short; use at least 8")
    if not 1 <= max_predictions <= seq_length - 3:
        raise DataError(f"max predictions {max_predictions} must be between 1 and seq length - 3")
    if train_records < 1 or eval_records < 1:
        raise DataError("train records and eval records must both be at least 1")
    if not 1 <= train_shards <= train_records:
        raise DataError(f"train shards must be between 1 and the {train_records} training records")
    if not 1 <= eval_shards <= eval_records:
        raise DataError(f"eval shards must be between 1 and the {eval_records} eval records")


def _vocabulary(vocab_size):
    return list(SPECIAL_TOKENS) + [_word(i) for i in range(vocab_size - len(SPECIAL_TOKENS))]


def tiny_bert_config(vocab_size, seq_length) -> dict:
    """A 2-layer, 64-wide bert_config.json (the reference's keys) that fits the generated data."""
    return {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "hidden_size": 64, "initializer_range": 0.02, "intermediate_size": 256,
            "max_position_embeddings": seq_length, "num_attention_heads": 2, "num_hidden_layers": 2,
            "type_vocab_size": 2, "vocab_size": vocab_size}


def _learnability(train, evals, vocab_size):
    """Eval masked-LM accuracy of three simple predictors, weighted as the MLPerf metric."""
    tables = _context_tables(train, vocab_size)
    masked = np.concatenate([labels for _, _, _, labels, _ in evals])
    majority = int(np.bincount(masked, minlength=vocab_size).argmax())
    neighbour = segment = 0
    for tokens, segments, positions, labels, _ in evals:
        for position, label in zip(positions, labels):
            neighbour += _neighbour_guess(tokens, position, tables, majority) == label
            segment += _segment_guess(tokens, segments, position, majority) == label
    return {"eval_masked_tokens": int(len(masked)), "majority_token": _vocabulary(vocab_size)[majority],
            "majority_baseline_accuracy": round(float(np.mean(masked == majority)), 4),
            "context_rule": "the word seen most often between the same two neighbours in the training text "
                            "(else after the left one, else before the right one, else the majority word)",
            "context_rule_accuracy": round(int(neighbour) / len(masked), 4),
            "segment_rule": "the most frequent other word of the masked position's segment",
            "segment_rule_accuracy": round(int(segment) / len(masked), 4),
            "next_sentence_random_fraction": round(float(np.mean([e[4] for e in evals])), 4)}


def _context_tables(train, vocab_size):
    """({left * V + right: word}, {left: word}, {right: word}, V): the most frequent word at each such spot
    in the unmasked training text."""
    lefts, centres, rights = [], [], []
    for tokens, _, positions, labels, _ in train:
        text = tokens.copy()
        text[positions] = labels
        lefts.append(text[:-2])
        centres.append(text[1:-1])
        rights.append(text[2:])
    left, centre, right = (np.concatenate(parts) for parts in (lefts, centres, rights))
    first_word = len(SPECIAL_TOKENS)
    words = centre >= first_word
    both = words & (left >= first_word) & (right >= first_word)
    after, before = words & (left >= first_word), words & (right >= first_word)
    return (_most_common(left[both] * vocab_size + right[both], centre[both], vocab_size),
            _most_common(left[after], centre[after], vocab_size),
            _most_common(right[before], centre[before], vocab_size), vocab_size)


def _most_common(keys, values, vocab_size):
    """{key: the value seen most often with it}."""
    pairs, counts = np.unique(keys * vocab_size + values, return_counts=True)
    order = np.lexsort((-counts, pairs // vocab_size))  # by key, most frequent first
    best = {}
    for pair in pairs[order]:
        best.setdefault(int(pair // vocab_size), int(pair % vocab_size))
    return best


def _neighbour_guess(tokens, position, tables, majority):
    both, after, before, vocab_size = tables
    first_word = len(SPECIAL_TOKENS)
    left = int(tokens[position - 1])
    right = int(tokens[position + 1]) if position + 1 < len(tokens) else -1
    if left >= first_word and right >= first_word and left * vocab_size + right in both:
        return both[left * vocab_size + right]
    if left >= first_word and left in after:
        return after[left]
    if right >= first_word and right in before:
        return before[right]
    return majority


def _segment_guess(tokens, segments, position, majority):
    words = (tokens >= len(SPECIAL_TOKENS)) & (segments == segments[position])
    words[position] = False
    return np.bincount(tokens[words]).argmax() if words.any() else majority
