"""ImageNet TFRecord input pipelines with the MLPerf reference preprocessing: what runs inside a run.

Finding the data reads only dataset.json and the file listing (the clock rule); generating, converting
and checking data live in models/resnet50/prepare.py."""

import dataclasses
import json
import logging
import math
import os
import re
import shlex

import numpy as np

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
import tensorflow as tf

log = logging.getLogger(__name__)

IMAGENET_TRAIN_RECORDS = 1281167
IMAGENET_EVAL_RECORDS = 50000
IMAGENET_CLASSES = 1000
IMAGENET_TRAIN_SHARDS = 1024
IMAGENET_EVAL_SHARDS = 128
MEAN_RGB = (123.68, 116.78, 103.94)
TRAIN_PATTERN = "train-*-of-*"
EVAL_PATTERN = "validation-*-of-*"
METADATA_FILE = "dataset.json"
# The reference resizes the shorter side to 256 before a 224 central crop.
EVAL_CROP_FRACTION = 0.875
SHUFFLE_BUFFER = 10000
# Files read concurrently per rank; the reference uses 10.
READ_CYCLE_LENGTH = 16

_SHARD_NAME = re.compile(r"^(train|validation)-(\d+)-of-(\d+)$")
_BBOX_KEYS = ("ymin", "xmin", "ymax", "xmax")  # the order sample_distorted_bounding_box wants
_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in _BBOX_KEYS},
}


class DataError(ValueError):
    """A dataset problem, described in one line that names the offending file or directory."""


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """The TFRecord files of a dataset and what its dataset.json says they hold."""

    train_files: tuple[str, ...]
    eval_files: tuple[str, ...]
    train_records: int
    eval_records: int
    num_classes: int | None
    bounding_boxes: bool | None = None
    """Whether records carry image/object/bbox/* boxes; None when dataset.json predates the field."""
    train_shard_records: tuple[int, ...] | None = None
    """Records in each of train_files, in that order; None when dataset.json predates the field."""

    @property
    def data_dir(self) -> str:
        files = self.train_files or self.eval_files
        return os.path.dirname(files[0]) if files else ""


# ---------------------------------------------------------------------------------------------------------
# Discovery


def dataset_info(data_dir: str) -> DatasetInfo:
    """Finds the shards in `data_dir` and reads their counts from its dataset.json.

    MLPerf starts the clock before anything touches the dataset, and runs call this before run_start,
    so it opens no TFRecord: it uses the file listing and dataset.json (written by the generator, the
    converter, or `data_cli check` after reading every record).
    """
    if not tf.io.gfile.isdir(data_dir):
        raise DataError(f"data directory not found: {data_dir}")
    train_files = _list_shards(data_dir, TRAIN_PATTERN)
    eval_files = _list_shards(data_dir, EVAL_PATTERN)
    if not train_files:
        raise DataError(f"no training TFRecords matching {TRAIN_PATTERN} in {data_dir}")
    if not eval_files:
        raise DataError(f"no validation TFRecords matching {EVAL_PATTERN} in {data_dir}")
    meta = _read_metadata(data_dir)
    if meta is None:
        raise DataError(f"no {METADATA_FILE} in {data_dir}: check the records once with "
                        f"`{check_command(data_dir)}`, which writes it (add --small unless this is "
                        f"full ImageNet)")
    _check_metadata_shards(meta, data_dir, train_files, eval_files)
    return DatasetInfo(train_files, eval_files, meta["train_records"], meta["eval_records"],
                       meta.get("num_classes"), meta.get("bounding_boxes"),
                       _shard_records(meta, data_dir, train_files))


def check_command(data_dir: str, small: bool = False) -> str:
    """The pre-flight command for `data_dir`, as a user would type it."""
    return f"python -m models.resnet50.data_cli check {'--small ' if small else ''}{shlex.quote(data_dir)}"


def _list_shards(data_dir, pattern):
    paths = tf.io.gfile.glob(os.path.join(data_dir, pattern))
    # The regex keeps stray files such as `train-00000-of-00004.tmp` out.
    return tuple(sorted(p for p in paths if _SHARD_NAME.match(os.path.basename(p))))


def _read_metadata(data_dir):
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
    for key in ("train_records", "eval_records"):
        if not _is_count(meta.get(key)):
            raise DataError(f"malformed {path}: '{key}' must be a non-negative integer")
    num_classes = meta.get("num_classes")
    if num_classes is not None and not (_is_count(num_classes) and num_classes > 0):
        raise DataError(f"malformed {path}: 'num_classes' must be a positive integer or null")
    if not isinstance(meta.get("bounding_boxes", False), bool):
        raise DataError(f"malformed {path}: 'bounding_boxes' must be true or false")
    counts = meta.get("train_shard_records", {})
    if not (isinstance(counts, dict) and all(_is_count(count) for count in counts.values())):
        raise DataError(f"malformed {path}: 'train_shard_records' must map file names to record counts")
    return meta


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shard_records(meta, data_dir, train_files):
    """Each training file's record count from dataset.json, in train_files' order; None if it has none."""
    counts = meta.get("train_shard_records")
    if counts is None:
        return None
    names = [os.path.basename(path) for path in train_files]
    path = os.path.join(data_dir, METADATA_FILE)
    if sorted(counts) != names:
        raise DataError(f"{path}: train_shard_records names other files than the {len(names)} training "
                        f"shards in {data_dir}; run `{check_command(data_dir)}` again")
    if sum(counts.values()) != meta["train_records"]:
        raise DataError(f"{path}: train_shard_records add up to {sum(counts.values())}, not the "
                        f"{meta['train_records']} train_records it declares")
    return tuple(counts[name] for name in names)


def _check_metadata_shards(meta, data_dir, train_files, eval_files):
    # A stale dataset.json (shards added or deleted afterwards) would give wrong epoch sizes.
    path = os.path.join(data_dir, METADATA_FILE)
    splits = (("train_shards", train_files, "training"), ("eval_shards", eval_files, "validation"))
    for key, files, kind in splits:
        if key in meta and meta[key] != len(files):
            raise DataError(f"{path} lists {meta[key]} {kind} shards but {data_dir} holds {len(files)}")


# ---------------------------------------------------------------------------------------------------------
# Input pipelines


def train_dataset(info: DatasetInfo, local_batch: int, image_size: int, num_classes: int, rank: int,
                  world_size: int, seed: int, dtype=tf.float32, channels_first: bool = False, *,
                  deterministic: bool = True) -> tf.data.Dataset:
    """Infinite shuffled, augmented training batches of (images, 0-based int32 labels) for one rank.

    With `deterministic` (the default) a given (seed, rank) always yields the same batches; passing False
    lets tf.data hand out records as soon as they are ready, which is faster when some reads are slow.
    """
    _check_sharding(local_batch, rank, world_size)
    if info.train_records < world_size:
        raise DataError(f"{info.train_records} training records in {info.data_dir} "
                        f"cannot feed {world_size} ranks")
    base_seed = seed + rank
    paths, strides, offsets = (list(column) for column in zip(*train_split(info, rank, world_size)))
    sources = tf.data.Dataset.from_tensor_slices((paths, tf.constant(strides, tf.int64),
                                                  tf.constant(offsets, tf.int64)))
    sources = sources.shuffle(len(paths), seed=base_seed, reshuffle_each_iteration=True)
    records = sources.interleave(lambda path, stride, offset: _read_tfrecords(path).shard(stride, offset),
                                 cycle_length=max(1, min(len(paths), READ_CYCLE_LENGTH)), block_length=1,
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    buffer = max(1, min(SHUFFLE_BUFFER, math.ceil(info.train_records / world_size)))
    # Shuffle before repeat, as the reference does, so every epoch sees each record once.
    records = records.shuffle(buffer, seed=base_seed, reshuffle_each_iteration=True).repeat()
    # The record's position in the stream seeds its augmentation, which makes runs reproducible.
    records = records.enumerate()
    preprocess = _train_map_fn(image_size, num_classes, dtype, base_seed)
    images = records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return _finish_batches(images, local_batch, True, channels_first)


def train_split(info: DatasetInfo, rank: int, world_size: int) -> list[tuple[str, int, int]]:
    """This rank's training records as (file, stride, offset): it reads every stride-th record from offset.

    Balanced by record, so that in an epoch every rank has about the same number of records to train
    on (the rules: each record once per epoch). The files that split evenly over the ranks go whole,
    round robin; each of the len(files) mod world_size files left over is read by every rank, which
    keeps its own records of it (24 ranks on ImageNet's 1,024 shards: 42 whole files each, and 1/24
    of the other 16). With fewer files than ranks every file is split that way. The leftover files'
    records are dealt out as one stream, continuing from file to file (the offsets follow dataset.json's
    per-file counts), so shares differ by one record at most there; without the counts each file
    starts the deal one rank later.
    """
    files, counts = info.train_files, info.train_shard_records
    whole = len(files) // world_size * world_size
    split, dealt = [], 0
    for index in range(whole, len(files)):
        split.append((files[index], world_size, (rank - dealt) % world_size))
        dealt += counts[index] if counts else 1
    return [(path, 1, 0) for path in files[:whole][rank::world_size]] + split


def train_share(info: DatasetInfo, rank: int, world_size: int) -> int | None:
    """The number of training records train_split gives `rank`; None without per-file counts."""
    if info.train_shard_records is None:
        return None
    counts = dict(zip(info.train_files, info.train_shard_records))
    return sum(len(range(offset, counts[path], stride)) for path, stride, offset in
               train_split(info, rank, world_size))


def eval_dataset(info: DatasetInfo, local_batch: int, image_size: int, num_classes: int, rank: int,
                 world_size: int, dtype=tf.float32, channels_first: bool = False) -> tf.data.Dataset:
    """One deterministic pass over this rank's share of the validation records; the last batch may be short.

    Ranks may get different numbers of records (and batches), but together they see each record once.
    """
    _check_sharding(local_batch, rank, world_size)
    if len(info.eval_files) >= world_size:
        mine = list(info.eval_files[rank::world_size])
        records = _interleave_files(tf.data.Dataset.from_tensor_slices(mine), len(mine), True)
    else:
        # Fewer files than ranks: every rank reads everything and keeps every world_size-th record.
        records = tf.data.TFRecordDataset(list(info.eval_files)).shard(world_size, rank)
    preprocess = _eval_map_fn(image_size, num_classes, dtype)
    images = records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _finish_batches(images, local_batch, False, channels_first)


def synthetic_dataset(local_batch: int, image_size: int, num_classes: int, seed: int, dtype=tf.float32,
                      channels_first: bool = False) -> tf.data.Dataset:
    """One random batch made once on the host and repeated forever, for throughput runs without I/O."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(0.0, 255.0, (local_batch, image_size, image_size, 3)).astype(np.float32)
    images -= np.asarray(MEAN_RGB, np.float32)
    if channels_first:
        images = np.ascontiguousarray(images.transpose(0, 3, 1, 2))
    labels = rng.integers(0, num_classes, local_batch, dtype=np.int32)
    batch = (tf.cast(tf.constant(images), dtype), tf.constant(labels))
    return tf.data.Dataset.from_tensors(batch).repeat()


def _check_sharding(local_batch, rank, world_size):
    if local_batch < 1:
        raise ValueError(f"local_batch must be positive, got {local_batch}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a world of size {world_size}")


def _interleave_files(files, num_files, deterministic):
    return files.interleave(_read_tfrecords, cycle_length=max(1, min(num_files, READ_CYCLE_LENGTH)),
                            block_length=1, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)


def _read_tfrecords(path):
    return tf.data.TFRecordDataset(path, buffer_size=8 * 1024 * 1024)


def _finish_batches(images, local_batch, drop_remainder, channels_first):
    batches = images.batch(local_batch, drop_remainder=drop_remainder)
    if channels_first:
        # One transpose per batch is cheaper than one per image.
        batches = batches.map(lambda x, y: (tf.transpose(x, [0, 3, 1, 2]), y),
                              num_parallel_calls=tf.data.AUTOTUNE)
    batches = batches.prefetch(tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Records are already split by Horovod rank; a tf.distribute strategy must not split them again.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return batches.with_options(options)


def _train_map_fn(image_size, num_classes, dtype, base_seed):
    def preprocess(index, record):
        image_bytes, label, bbox = parse_record(record)
        # Two seed pairs per record so the crop and the flip are independent.
        crop_seed = tf.stack([tf.constant(base_seed, tf.int64), 2 * index])
        flip_seed = tf.stack([tf.constant(base_seed, tf.int64), 2 * index + 1])
        image = train_image(image_bytes, bbox, image_size, crop_seed, flip_seed)
        return tf.cast(image, dtype), _checked_label(label, num_classes)
    return preprocess


def _eval_map_fn(image_size, num_classes, dtype):
    def preprocess(record):
        image_bytes, label, _ = parse_record(record)
        return tf.cast(eval_image(image_bytes, image_size), dtype), _checked_label(label, num_classes)
    return preprocess


def parse_record(record):
    """Splits a serialized tf.train.Example into (JPEG bytes, 1-based label, boxes [1, N, 4] as y/x/y/x)."""
    features = tf.io.parse_single_example(record, _FEATURES)
    boxes = tf.stack([features[f"image/object/bbox/{k}"].values for k in _BBOX_KEYS], axis=-1)
    return features["image/encoded"], features["image/class/label"], boxes[tf.newaxis]


def _checked_label(label, num_classes):
    in_range = tf.logical_and(label >= 1, label <= num_classes)
    # describe_data_error() recognises this message.
    check = tf.debugging.Assert(in_range, [f"label out of range 1..{num_classes}, found", label])
    with tf.control_dependencies([check]):
        return tf.cast(label, tf.int32) - 1


def train_image(image_bytes, bbox, image_size, crop_seed, flip_seed):
    """MLPerf reference training view: distorted box around the labelled object, flip, squash, centre."""
    begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(image_bytes), bounding_boxes=bbox, seed=crop_seed,
        min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], area_range=[0.05, 1.0],
        max_attempts=100, use_image_if_no_bounding_boxes=True)
    offset_y, offset_x, _ = tf.unstack(begin)
    height, width, _ = tf.unstack(size)
    # The fused op decodes only the crop window.
    image = tf.image.decode_and_crop_jpeg(image_bytes, tf.stack([offset_y, offset_x, height, width]),
                                          channels=3)
    image = tf.image.stateless_random_flip_left_right(image, seed=flip_seed)
    image = _resize_bilinear(image, image_size, image_size)
    image.set_shape([image_size, image_size, 3])
    return _centre_colours(image)


def eval_image(image_bytes, image_size):
    """MLPerf reference eval view: shorter side to image_size/0.875, central crop, centre the colours."""
    image = tf.io.decode_jpeg(image_bytes, channels=3)
    image = _aspect_preserving_resize(image, int(round(image_size / EVAL_CROP_FRACTION)))
    image = _central_crop(image, image_size)
    image.set_shape([image_size, image_size, 3])
    return _centre_colours(image)


def _centre_colours(image):
    """image - MEAN_RGB for a float image of static shape.

    The mean is given as a whole image, not as three values to broadcast: the floats are the same, but
    TensorFlow's CPU broadcast over a 3-wide last axis is slow (about 115 us a 224 px image on the
    development machine, a tenth of the whole training preprocessing) and a plain subtraction is not.
    """
    mean = np.broadcast_to(np.asarray(MEAN_RGB, np.float32), image.shape.as_list())
    return image - tf.constant(mean)


def _resize_bilinear(image, height, width):
    # The reference's v1 resize (half_pixel_centers=False) rather than tf.image.resize, to match it exactly.
    return tf.compat.v1.image.resize(image, [height, width], method=tf.image.ResizeMethod.BILINEAR,
                                     align_corners=False)


def _aspect_preserving_resize(image, shorter_side):
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = shorter_side / tf.reduce_min(shape)
    # Truncation, as in the reference's _smallest_size_at_least.
    new_size = tf.cast(shape * scale, tf.int32)
    return _resize_bilinear(image, new_size[0], new_size[1])


def _central_crop(image, size):
    shape = tf.shape(image)
    top = (shape[0] - size) // 2
    left = (shape[1] - size) // 2
    return tf.slice(image, [top, left, 0], [size, size, -1])


# ---------------------------------------------------------------------------------------------------------
# Turning TensorFlow errors into one-line messages

_JPEG_ERRORS = ("jpeg", "image file format", "decode", "crop window")
_EXAMPLE_ERRORS = ("is required but could not be found", "could not parse example", "feature:")


def describe_data_error(err: Exception, info: DatasetInfo) -> str | None:
    """One-line description of a TensorFlow error raised reading `info`'s records; None if unrelated."""
    if not isinstance(err, tf.errors.OpError):
        return None
    text = _tf_message(err)
    where = _named_file(text, info) or info.data_dir
    if isinstance(err, tf.errors.DataLossError):
        return (f"corrupt or truncated TFRecord in {where}: {text} "
                f"(`{check_command(info.data_dir, small=True)}` names the file)")
    if isinstance(err, tf.errors.NotFoundError) and where != info.data_dir:
        return f"TFRecord file vanished while reading {info.data_dir}: {text}"
    if not isinstance(err, tf.errors.InvalidArgumentError):
        return None
    lowered = text.lower()
    found = re.search(r"label out of range 1\.\.(\d+), found\]? *\[?(-?\d+)", text)
    if found:
        return f"label out of range 1..{found.group(1)} (found {found.group(2)}) in {where}"
    if "label out of range" in lowered:
        return f"{text} in {where}"
    if any(key in lowered for key in _JPEG_ERRORS):
        return f"undecodable image (not a valid JPEG) in {where}: {text}"
    if any(key in lowered for key in _EXAMPLE_ERRORS):
        return f"malformed tf.train.Example in {where}: {text}"
    return None


def _tf_message(err):
    text = getattr(err, "message", None) or str(err)
    text = re.sub(r"\{\{[^}]*\}\}", " ", text)  # {{function_node ...}} prefixes
    text = re.sub(r"\[\[.*?\]\]", " ", text, flags=re.S)  # [[{{node ...}}]] graph locations
    text = re.sub(r"\[Op:[^\]]*\]", " ", text)
    text = re.sub(r"\bname:\s*$", " ", text.strip())
    return _one_line(text)


def _one_line(text, limit=300):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _named_file(text, info):
    for path in info.train_files + info.eval_files:
        if os.path.basename(path) in text:
            return path
    return None
