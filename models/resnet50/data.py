"""ImageNet TFRecord input pipelines (MLPerf reference preprocessing), dataset writers and checks."""

import colorsys
import dataclasses
import io
import json
import logging
import math
import os
import random
import re
import shlex
from concurrent import futures

import numpy as np

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from suite.staging import split_evenly, staged_output
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
_JPEG_MAGIC = b"\xff\xd8\xff"
_BBOX_KEYS = ("ymin", "xmin", "ymax", "xmax")  # the order sample_distorted_bounding_box wants
_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in _BBOX_KEYS},
}
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
_CONVERT_SEED = 0  # fixed so two conversions of the same raw data give identical shards


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
                       meta.get("num_classes"), meta.get("bounding_boxes"))


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
    return meta


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


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
    if len(info.train_files) >= world_size:
        mine = list(info.train_files[rank::world_size])
        files = tf.data.Dataset.from_tensor_slices(mine).shuffle(len(mine), seed=base_seed,
                                                                 reshuffle_each_iteration=True)
        records = _interleave_files(files, len(mine), deterministic)
    else:
        records = tf.data.TFRecordDataset(list(info.train_files)).shard(world_size, rank)
    buffer = max(1, min(SHUFFLE_BUFFER, math.ceil(info.train_records / world_size)))
    # Shuffle before repeat, as the reference does, so every epoch sees each record once.
    records = records.shuffle(buffer, seed=base_seed, reshuffle_each_iteration=True).repeat()
    # The record's position in the stream seeds its augmentation, which makes runs reproducible.
    records = records.enumerate()
    preprocess = _train_map_fn(image_size, num_classes, dtype, base_seed)
    images = records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return _finish_batches(images, local_batch, True, channels_first)


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
    return image - tf.constant(MEAN_RGB, tf.float32)


def eval_image(image_bytes, image_size):
    """MLPerf reference eval view: shorter side to image_size/0.875, central crop, centre the colours."""
    image = tf.io.decode_jpeg(image_bytes, channels=3)
    image = _aspect_preserving_resize(image, int(round(image_size / EVAL_CROP_FRACTION)))
    image = _central_crop(image, image_size)
    image.set_shape([image_size, image_size, 3])
    return image - tf.constant(MEAN_RGB, tf.float32)


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


# ---------------------------------------------------------------------------------------------------------
# Writing TFRecords


def _example(encoded, label, synset, filename, height, width, boxes=()):
    """A tf.train.Example laid out as the TF/TPU imagenet_to_gcs.py scripts do; boxes are (x0, y0, x1, y1)."""
    def floats(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def strings(values):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))

    feature = {
        "image/encoded": strings([encoded]),
        "image/format": strings([b"JPEG"]),
        "image/filename": strings([filename.encode()]),
        "image/class/label": ints([label]),
        "image/class/synset": strings([synset.encode()]),
        "image/height": ints([height]),
        "image/width": ints([width]),
        "image/colorspace": strings([b"RGB"]),
        "image/channels": ints([3]),
    }
    for i, key in enumerate(("xmin", "ymin", "xmax", "ymax")):
        feature[f"image/object/bbox/{key}"] = floats([box[i] for box in boxes])
    feature["image/object/bbox/label"] = ints([label] * len(boxes))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _shard_path(out_dir, prefix, index, count):
    return os.path.join(out_dir, f"{prefix}-{index:05d}-of-{count:05d}")


def _write_metadata(out_dir, **fields):
    path = os.path.join(out_dir, METADATA_FILE)
    # Written beside and renamed over, so a run never reads half a file (`check` writes it in place).
    temporary = os.path.join(out_dir, f".{METADATA_FILE}.{os.getpid()}.tmp")
    try:
        with open(temporary, "w") as f:
            json.dump(fields, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def _write_tfrecords(path, records):
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record)


# ---------------------------------------------------------------------------------------------------------
# A small learnable dataset


def write_learnable_dataset(out_dir, num_classes=4, train_per_class=64, eval_per_class=16, image_size=64,
                            train_shards=4, eval_shards=2, seed=0) -> DatasetInfo:
    """Writes an ImageNet-shaped dataset of synthetic JPEGs whose class shows in colour and pattern."""
    _check_learnable_args(num_classes, train_per_class, eval_per_class, image_size, train_shards, eval_shards)
    rng = np.random.default_rng(seed)
    train = [_learnable_record(rng, k, num_classes, image_size, f"train_{k}_{i}")
             for k in range(num_classes) for i in range(train_per_class)]
    evals = [_learnable_record(rng, k, num_classes, image_size, f"val_{k}_{i}")
             for k in range(num_classes) for i in range(eval_per_class)]
    # Mixed classes in every shard, as in the ImageNet conversion.
    train = [train[i] for i in rng.permutation(len(train))]
    with staged_output(out_dir, DataError) as staging:
        for i, chunk in enumerate(split_evenly(train, train_shards)):
            _write_tfrecords(_shard_path(staging, "train", i, train_shards), chunk)
        for i, chunk in enumerate(split_evenly(evals, eval_shards)):
            _write_tfrecords(_shard_path(staging, "validation", i, eval_shards), chunk)
        _write_metadata(staging, train_records=len(train), eval_records=len(evals), num_classes=num_classes,
                        train_shards=train_shards, eval_shards=eval_shards, source="learnable",
                        bounding_boxes=True, image_size=image_size, seed=seed)
    return dataset_info(out_dir)


def _check_learnable_args(num_classes, train_per_class, eval_per_class, image_size, train_shards,
                          eval_shards):
    if num_classes < 1 or train_per_class < 1 or eval_per_class < 1:
        raise DataError("classes, train-per-class and eval-per-class must all be at least 1")
    if image_size < 8:
        raise DataError(f"image size {image_size} is too small; use at least 8 pixels")
    if not 1 <= train_shards <= num_classes * train_per_class:
        raise DataError(f"train shards must be between 1 and the {num_classes * train_per_class} "
                        f"training images")
    if not 1 <= eval_shards <= num_classes * eval_per_class:
        raise DataError(f"eval shards must be between 1 and the {num_classes * eval_per_class} "
                        f"validation images")


def _learnable_record(rng, k, num_classes, image_size, name):
    pixels, box = _learnable_image(rng, k, num_classes, image_size)
    height, width = pixels.shape[:2]
    return _example(_encode_jpeg(pixels), k + 1, f"n{k:08d}", f"{name}.JPEG", height, width, [box])


def _learnable_image(rng, k, num_classes, image_size):
    """An image with noise over a greyish background and a class-coloured, class-patterned object."""
    height, width = (int(image_size * rng.uniform(0.75, 1.25)) for _ in range(2))
    image = np.empty((height, width, 3), np.float32)
    image[:] = rng.uniform(70, 180) + rng.uniform(-20, 20, 3)
    # The object covers most of the image, so random crops (>= 10% of the box) still show it.
    obj_h, obj_w = int(height * rng.uniform(0.55, 0.9)), int(width * rng.uniform(0.55, 0.9))
    top, left = rng.integers(0, height - obj_h + 1), rng.integers(0, width - obj_w + 1)
    colour = 255.0 * np.asarray(colorsys.hsv_to_rgb(k / num_classes, 0.85, 0.9)) * rng.uniform(0.7, 1.15)
    mask = _class_pattern(k, obj_h, obj_w, image_size, rng)
    shade = np.where(mask, 1.0, 0.55)[..., np.newaxis]
    image[top:top + obj_h, left:left + obj_w] = colour * shade
    image += rng.normal(0.0, 12.0, image.shape)
    box = (left / width, top / height, (left + obj_w) / width, (top + obj_h) / height)
    return np.clip(image, 0, 255).astype(np.uint8), box


def _class_pattern(k, height, width, image_size, rng):
    """Horizontal stripes, vertical stripes, checkerboard or disc: patterns that survive flips and resizes."""
    period = max(4, int(image_size / 8 * rng.uniform(0.8, 1.25)))
    rows = (np.arange(height)[:, None] + rng.integers(period)) // (period // 2)
    cols = (np.arange(width)[None, :] + rng.integers(period)) // (period // 2)
    kind = k % 4
    if kind == 0:
        return np.broadcast_to(rows % 2 == 0, (height, width))
    if kind == 1:
        return np.broadcast_to(cols % 2 == 0, (height, width))
    if kind == 2:
        return (rows + cols) % 2 == 0
    y = (np.arange(height)[:, None] + 0.5) / height - 0.5
    x = (np.arange(width)[None, :] + 0.5) / width - 0.5
    return x * x + y * y < 0.16


def _encode_jpeg(pixels, quality=90):
    from PIL import Image  # only the writers need Pillow

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------------------
# Converting raw ImageNet


@dataclasses.dataclass(frozen=True, slots=True)  # slots: 1.3 million of them
class _RawImage:
    path: str
    label: int
    synset: str
    boxes: tuple = ()  # (x0, y0, x1, y1) in pixels


def convert_imagenet(raw_dir, out_dir, train_shards=IMAGENET_TRAIN_SHARDS, eval_shards=IMAGENET_EVAL_SHARDS,
                     num_workers=None, progress=True, bounding_boxes=False) -> DatasetInfo:
    """Converts raw ImageNet (train/<wnid>/*.JPEG, val/*.JPEG plus labels) to TFRecords in `out_dir`.

    Labels are 1 + the index of the wnid among the sorted training folders. Validation labels come from
    LOC_val_solution.csv (preferred), imagenet_2012_validation_synset_labels.txt or the devkit's
    ILSVRC2012_validation_ground_truth.txt, whose class numbers are mapped through the devkit's meta.mat
    beside it; without meta.mat they are ASSUMED to follow the sorted wnid order (refused for 1000 classes,
    where that assumption is known to be wrong). `num_workers` defaults to the CPU count.

    Like the reference's imagenet_to_gcs.py, the records hold no bounding boxes, so training crops are
    taken against the whole image. `bounding_boxes` adds the boxes of LOC_train_solution.csv and
    LOC_val_solution.csv: information the reference data lacks, so that data is open division only.
    """
    root = _raw_root(raw_dir)
    synsets = _raw_synsets(root)
    train = _raw_train_images(root, synsets, _train_boxes(raw_dir, root) if bounding_boxes else {})
    evals = _raw_eval_images(raw_dir, root, synsets)
    random.Random(_CONVERT_SEED).shuffle(train)
    train_shards, eval_shards = min(train_shards, len(train)), min(eval_shards, len(evals))
    with staged_output(out_dir, DataError) as staging:
        jobs = ([(_shard_path(staging, "train", i, train_shards), chunk)
                 for i, chunk in enumerate(split_evenly(train, train_shards))]
                + [(_shard_path(staging, "validation", i, eval_shards), chunk)
                   for i, chunk in enumerate(split_evenly(evals, eval_shards))])
        boxed = _run_conversion(jobs, len(train) + len(evals), num_workers or os.cpu_count() or 1, progress,
                                bounding_boxes)
        _write_metadata(staging, train_records=len(train), eval_records=len(evals), num_classes=len(synsets),
                        train_shards=train_shards, eval_shards=eval_shards, source="imagenet",
                        bounding_boxes=boxed > 0)
    return dataset_info(out_dir)


def _raw_root(raw_dir):
    if not os.path.isdir(raw_dir):
        raise DataError(f"raw ImageNet directory not found: {raw_dir}")
    kaggle = os.path.join(raw_dir, "ILSVRC", "Data", "CLS-LOC")
    if not os.path.isdir(os.path.join(raw_dir, "train")) and os.path.isdir(os.path.join(kaggle, "train")):
        return kaggle  # the Kaggle download keeps the images three levels down
    return raw_dir


def _raw_synsets(root):
    train_dir = os.path.join(root, "train")
    if not os.path.isdir(train_dir):
        raise DataError(f"training folder not found: {train_dir} (expected train/<wnid>/*.JPEG)")
    synsets = sorted(e.name for e in os.scandir(train_dir) if e.is_dir())
    if not synsets:
        raise DataError(f"no class folders (train/<wnid>/) in {train_dir}")
    return synsets


def _image_names(folder):
    return sorted(e.name for e in os.scandir(folder)
                  if e.is_file() and e.name.lower().endswith(_IMAGE_SUFFIXES))


def _raw_train_images(root, synsets, boxes):
    images = []
    for label, wnid in enumerate(synsets, start=1):
        folder = os.path.join(root, "train", wnid)
        for name in _image_names(folder):
            stem = os.path.splitext(name)[0]
            images.append(_RawImage(os.path.join(folder, name), label, wnid, boxes.get(stem, ())))
    if not images:
        raise DataError(f"no training images (*.JPEG) under {os.path.join(root, 'train')}")
    return images


def _raw_eval_images(raw_dir, root, synsets):
    candidates = [os.path.join(root, d) for d in ("val", "validation")]
    folder = next((c for c in candidates if os.path.isdir(c)), None)
    if folder is None:
        raise DataError(f"validation folder not found: {os.path.join(root, 'val')} (or validation/)")
    names = _image_names(folder)
    if not names:
        raise DataError(f"no validation images (*.JPEG) in {folder}")
    labels, boxes = _eval_labels(raw_dir, root, names, synsets)
    index = {wnid: i for i, wnid in enumerate(synsets, start=1)}
    images = []
    for name in names:
        stem = os.path.splitext(name)[0]
        if stem not in labels:
            raise DataError(f"no label for validation image {os.path.join(folder, name)}")
        wnid = labels[stem]
        if wnid not in index:
            raise DataError(f"validation image {os.path.join(folder, name)} has class {wnid}, "
                            f"which has no training folder")
        images.append(_RawImage(os.path.join(folder, name), index[wnid], wnid, boxes.get(stem, ())))
    return images


def _find_label_file(raw_dir, root, name):
    devkit = os.path.join(raw_dir, "ILSVRC2012_devkit_t12", "data")
    for folder in dict.fromkeys((raw_dir, root, devkit)):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    return None


def _eval_labels(raw_dir, root, names, synsets):
    """Maps validation image stem -> wnid (and -> boxes when the Kaggle CSV provides them)."""
    csv_path = _find_label_file(raw_dir, root, "LOC_val_solution.csv")
    if csv_path:
        boxes = _read_loc_csv(csv_path)
        return {stem: rows[0][0] for stem, rows in boxes.items() if rows}, _pixel_boxes(boxes)
    synset_path = _find_label_file(raw_dir, root, "imagenet_2012_validation_synset_labels.txt")
    if synset_path:
        return _ordered_labels(synset_path, names, lambda token: token), {}
    truth_path = _find_label_file(raw_dir, root, "ILSVRC2012_validation_ground_truth.txt")
    if truth_path:
        to_wnid = _devkit_mapping(truth_path, synsets)
        return _ordered_labels(truth_path, names, to_wnid), {}
    raise DataError(f"no validation labels in {raw_dir}: add LOC_val_solution.csv "
                    f"or ILSVRC2012_validation_ground_truth.txt")


def _devkit_mapping(truth_path, synsets):
    """Turns the devkit's class numbers into wnids.

    The devkit numbers classes by its own ILSVRC2012_ID, which is NOT the sorted wnid order; meta.mat
    beside the ground truth holds the mapping. Without it we assume sorted wnid order, which only a
    hand-made label file satisfies, so for 1000 classes (the real devkit) we refuse rather than guess.
    """
    meta_path = os.path.join(os.path.dirname(truth_path), "meta.mat")
    if os.path.isfile(meta_path):
        ids = _devkit_ids(meta_path)
        return lambda token: _devkit_wnid(token, ids, truth_path)
    if len(synsets) == IMAGENET_CLASSES:
        raise DataError(f"{truth_path} numbers classes in devkit order, not sorted wnid order: "
                        f"put the devkit's meta.mat beside it, or use LOC_val_solution.csv")
    log.warning("%s: no meta.mat beside it, so assuming its class numbers follow the sorted wnid order",
                truth_path)
    ids = {i: wnid for i, wnid in enumerate(synsets, start=1)}
    return lambda token: _devkit_wnid(token, ids, truth_path)


def _devkit_ids(meta_path):
    try:
        from scipy import io as scipy_io

        synsets = scipy_io.loadmat(meta_path, squeeze_me=True)["synsets"]
        # Leaf synsets (no children) are the classification classes.
        return {int(row["ILSVRC2012_ID"]): str(row["WNID"])
                for row in synsets if int(row["num_children"]) == 0}
    except ImportError:
        raise DataError(f"reading {meta_path} needs scipy (pip install scipy)") from None
    except (ValueError, KeyError, IndexError, TypeError, OSError) as err:
        raise DataError(f"malformed devkit file {meta_path}: {_one_line(str(err))}") from None


def _devkit_wnid(token, ids, path):
    if not token.isdigit() or int(token) not in ids:
        raise DataError(f"{path}: label {token!r} is not a devkit class number (1..{len(ids)})")
    return ids[int(token)]


def _ordered_labels(path, names, to_wnid):
    """Labels listed one per line in validation-image order (line n belongs to ILSVRC2012_val_0000000n)."""
    with open(path) as f:
        tokens = [line.strip() for line in f if line.strip()]
    stems = [os.path.splitext(name)[0] for name in names]
    numbers = [re.search(r"(\d+)$", stem) for stem in stems]
    labels = {}
    for position, (stem, number) in enumerate(zip(stems, numbers)):
        # The number in the file name is the line; sorted position is the fallback for other names.
        line = int(number.group(1)) - 1 if number else position
        if 0 <= line < len(tokens):
            labels[stem] = to_wnid(tokens[line])
    return labels


def _read_loc_csv(path):
    """Reads a Kaggle LOC_*_solution.csv: ImageId -> [(wnid, x0, y0, x1, y1), ...] in pixels."""
    rows = {}
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            image_id, _, prediction = line.strip().partition(",")
            if (number == 1 and image_id == "ImageId") or not image_id:
                continue
            tokens = prediction.split()
            try:
                rows[image_id] = [(tokens[i], *map(float, tokens[i + 1:i + 5]))
                                  for i in range(0, len(tokens), 5)]
            except (ValueError, IndexError):
                raise DataError(f"{path}: line {number} is not 'ImageId,wnid x0 y0 x1 y1 ...'") from None
    return rows


def _pixel_boxes(rows):
    return {stem: tuple(row[1:] for row in boxes) for stem, boxes in rows.items()}


def _train_boxes(raw_dir, root):
    path = _find_label_file(raw_dir, root, "LOC_train_solution.csv")
    return _pixel_boxes(_read_loc_csv(path)) if path else {}


def _run_conversion(jobs, total, num_workers, progress, keep_boxes):
    """Writes the shards; returns how many records got bounding boxes."""
    from tqdm import tqdm

    # Threads suffice: the work is file reads, header parsing and TFRecord writes, mostly outside the GIL.
    with tqdm(total=total, disable=not progress, unit="img", desc="convert") as bar, \
            futures.ThreadPoolExecutor(max_workers=num_workers) as pool:
        pending = [pool.submit(_write_raw_shard, path, images, keep_boxes, bar.update)
                   for path, images in jobs]
        try:
            return sum(done.result() for done in futures.as_completed(pending))
        except BaseException:
            for job in pending:
                job.cancel()
            raise


def _write_raw_shard(path, images, keep_boxes, advance):
    boxed = 0
    with tf.io.TFRecordWriter(path) as writer:
        for image in images:
            encoded, height, width = _jpeg_bytes(image.path)
            # Validation labels may come with boxes (LOC_val_solution.csv): dropped too unless asked for.
            boxes = _normalised_boxes(image.boxes, height, width) if keep_boxes else []
            boxed += bool(boxes)
            name = os.path.basename(image.path)
            writer.write(_example(encoded, image.label, image.synset, name, height, width, boxes))
            advance(1)
    return boxed


def _jpeg_bytes(path):
    """The file's bytes, re-encoded as RGB JPEG if it is a PNG or CMYK JPEG (a few ImageNet files are)."""
    from PIL import Image

    with open(path, "rb") as f:
        data = f.read()
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if image.format != "JPEG" or image.mode not in ("RGB", "L"):
                buffer = io.BytesIO()
                # Quality 100, as the reference conversion scripts use for these files.
                image.convert("RGB").save(buffer, "JPEG", quality=100)
                data = buffer.getvalue()
    except (OSError, ValueError, Image.DecompressionBombError) as err:
        raise DataError(f"cannot read image {path}: {_one_line(str(err))}") from None
    return data, height, width


def _normalised_boxes(boxes, height, width):
    result = []
    for x0, y0, x1, y1 in boxes:
        box = (min(max(x0 / width, 0.0), 1.0), min(max(y0 / height, 0.0), 1.0),
               min(max(x1 / width, 0.0), 1.0), min(max(y1 / height, 0.0), 1.0))
        if box[2] > box[0] and box[3] > box[1]:  # drop boxes that clipping left empty
            result.append(box)
    return result


# ---------------------------------------------------------------------------------------------------------
# Pre-flight check


@dataclasses.dataclass(frozen=True)
class DatasetCheck:
    """What a full read of a dataset found."""

    data_dir: str
    problems: list[str]  # empty when the dataset is usable
    metadata: dict | None  # its dataset.json as read, None when absent
    measured: dict  # the dataset.json fields, as the records and the listing give them


def check_imagenet(data_dir, expect_full_imagenet=True, sample_records=200, progress=True) -> list[str]:
    """Reads every record of `data_dir` and lists the problems found (empty when the dataset is usable)."""
    return check_dataset(data_dir, expect_full_imagenet, sample_records, progress).problems


def check_dataset(data_dir, expect_full_imagenet=True, sample_records=200, progress=True) -> DatasetCheck:
    """Reads every record of `data_dir`: the problems found and what its dataset.json should say."""
    if not tf.io.gfile.isdir(data_dir):
        raise DataError(f"data directory not found: {data_dir}")
    train_files = _list_shards(data_dir, TRAIN_PATTERN)
    eval_files = _list_shards(data_dir, EVAL_PATTERN)
    problems = _layout_problems(data_dir, train_files, eval_files, expect_full_imagenet)
    meta = None
    try:
        meta = _read_metadata(data_dir)
        if meta is not None:
            _check_metadata_shards(meta, data_dir, train_files, eval_files)
    except DataError as err:
        problems.append(str(err))
    num_classes = IMAGENET_CLASSES if expect_full_imagenet else (meta or {}).get("num_classes")
    scans = _scan_files(train_files + eval_files, num_classes, problems, progress)
    train_scan = [scans[f] for f in train_files]
    eval_scan = [scans[f] for f in eval_files]
    problems += _count_problems(data_dir, train_scan, eval_scan, meta, expect_full_imagenet)
    if expect_full_imagenet:
        problems += _coverage_problems(data_dir, train_scan, "training", TRAIN_PATTERN)
        problems += _coverage_problems(data_dir, eval_scan, "validation", EVAL_PATTERN)
    problems += _box_problems(data_dir, scans, meta, expect_full_imagenet)
    problems += _sample_problems(train_files + eval_files, sample_records)
    measured = _measured_metadata(train_scan, eval_scan, expect_full_imagenet)
    return DatasetCheck(data_dir, problems, meta, measured)


def write_checked_metadata(check: DatasetCheck) -> list[str]:
    """Records a clean check in dataset.json: writes it when absent, adds the fields an older one lacks.

    Returns the names of the fields written. Fields already in dataset.json keep their values: the
    check has just verified them.
    """
    if check.problems:
        raise DataError(f"{check.data_dir} has problems, so its {METADATA_FILE} is left alone")
    present = check.metadata or {}
    added = [key for key in check.measured if key not in present]
    if added:
        _write_metadata(check.data_dir, **{**check.measured, **present})
    return added


def _measured_metadata(train_scan, eval_scan, expect_full):
    labels = {label for scan in train_scan + eval_scan for label in scan.labels if label != -1}
    return {
        "train_records": sum(s.records for s in train_scan),
        "eval_records": sum(s.records for s in eval_scan),
        # Labels run 1..num_classes; a subset keeps ImageNet's numbers, so the largest label bounds them.
        "num_classes": IMAGENET_CLASSES if expect_full else max(labels, default=None),
        "train_shards": len(train_scan),
        "eval_shards": len(eval_scan),
        "source": "data_cli check" if expect_full else "data_cli check --small",
        "bounding_boxes": any(s.boxed for s in train_scan + eval_scan),
    }


def _layout_problems(data_dir, train_files, eval_files, expect_full):
    problems = []
    expected = ((train_files, TRAIN_PATTERN, IMAGENET_TRAIN_SHARDS, "training"),
                (eval_files, EVAL_PATTERN, IMAGENET_EVAL_SHARDS, "validation"))
    for files, pattern, full_count, kind in expected:
        if not files:
            problems.append(f"{data_dir}: no {kind} TFRecords matching {pattern}")
        elif expect_full and (len(files) != full_count
                              or not all(f.endswith(f"-of-{full_count:05d}") for f in files)):
            problems.append(f"{data_dir}: {len(files)} {kind} shards matching {pattern}, "
                            f"expected {full_count} named *-of-{full_count:05d}")
        else:
            problems += _missing_shard_problems(data_dir, files)
    return problems


def _missing_shard_problems(data_dir, files):
    """Shards absent from a numbered set, e.g. train-00002-of-00004 when the other three exist."""
    totals = {}
    for path in files:
        prefix, index, total = _SHARD_NAME.match(os.path.basename(path)).groups()
        totals.setdefault((prefix, total), set()).add(int(index))
    problems = []
    for (prefix, total), seen in sorted(totals.items()):
        missing = sorted(set(range(int(total))) - seen)
        if missing:
            names = ", ".join(f"{prefix}-{i:05d}-of-{total}" for i in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            problems.append(f"{data_dir}: missing shards {names}{more}")
    return problems


@dataclasses.dataclass
class _FileScan:
    records: int = 0
    labels: dict = dataclasses.field(default_factory=dict)  # label -> count
    boxed: int = 0  # records with a non-empty image/object/bbox/* list


def _scan_files(files, num_classes, problems, progress):
    from tqdm import tqdm

    scans = {}
    for path in tqdm(files, disable=not progress, unit="file", desc="check"):
        scans[path] = _scan_file(path, num_classes, problems)
    return scans


_SCAN_FEATURES = {
    "image/class/label": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    **{f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in _BBOX_KEYS},
}


def _scan_file(path, num_classes, problems):
    scan = _FileScan()
    try:
        for batch in tf.data.TFRecordDataset(path).batch(1024):
            parsed = tf.io.parse_example(batch, _SCAN_FEATURES)
            labels = parsed["image/class/label"].numpy()
            scan.records += len(labels)
            scan.boxed += _records_with_boxes(parsed)
            for label, count in zip(*np.unique(labels, return_counts=True)):
                scan.labels[int(label)] = scan.labels.get(int(label), 0) + int(count)
    except tf.errors.OpError as err:
        problems.append(f"{path}: unreadable after {scan.records} records: {_tf_message(err)}")
        return scan
    if -1 in scan.labels:
        problems.append(f"{path}: {scan.labels[-1]} records without image/class/label")
    upper = num_classes or max(scan.labels, default=1)
    bad = sorted(label for label in scan.labels if label != -1 and not 1 <= label <= upper)
    if bad:
        problems.append(f"{path}: labels outside 1..{upper}: {', '.join(map(str, bad[:5]))}")
    return scan


def _records_with_boxes(parsed):
    # A sparse value's first index is its record's position in the batch.
    rows = [parsed[f"image/object/bbox/{k}"].indices[:, 0].numpy() for k in _BBOX_KEYS]
    return len(np.unique(np.concatenate(rows)))


def _count_problems(data_dir, train_scan, eval_scan, meta, expect_full):
    found = {"train_records": sum(s.records for s in train_scan),
             "eval_records": sum(s.records for s in eval_scan)}
    sources = []
    if expect_full:
        sources.append(("full ImageNet", {"train_records": IMAGENET_TRAIN_RECORDS,
                                          "eval_records": IMAGENET_EVAL_RECORDS}))
    if meta is not None:
        # Runs take their epoch sizes from dataset.json, so it must match the records as well.
        sources.append((os.path.join(data_dir, METADATA_FILE), {key: meta[key] for key in found}))
    patterns = {"train_records": TRAIN_PATTERN, "eval_records": EVAL_PATTERN}
    return [f"{os.path.join(data_dir, patterns[key])}: {found[key]} records, {source} expects {expected[key]}"
            for source, expected in sources for key in found if found[key] != expected[key]]


def _coverage_problems(data_dir, scans, kind, pattern):
    seen = set()
    for scan in scans:
        seen.update(scan.labels)
    missing = sorted(set(range(1, IMAGENET_CLASSES + 1)) - seen)
    if not missing:
        return []
    examples = ", ".join(map(str, missing[:5]))
    return [f"{os.path.join(data_dir, pattern)}: {len(missing)} of {IMAGENET_CLASSES} labels never occur "
            f"in the {kind} records (e.g. {examples})"]


def _box_problems(data_dir, scans, meta, expect_full):
    boxed = {path: scan.boxed for path, scan in scans.items() if scan.boxed}
    total = sum(boxed.values())
    problems = []
    if expect_full and boxed:
        problems.append(f"{min(boxed)}: records with bounding boxes (image/object/bbox/*; {total} in "
                        f"{len(boxed)} files): not closed-division data, whose records have none "
                        f"(convert without --bounding-boxes)")
    declared = (meta or {}).get("bounding_boxes")
    if declared is not None and declared != bool(boxed):
        problems.append(f"{os.path.join(data_dir, METADATA_FILE)} says bounding_boxes "
                        f"{json.dumps(declared)}, but {total} records hold boxes")
    return problems


def _sample_problems(files, sample_records):
    """Decodes about `sample_records` records spread over the files."""
    if sample_records <= 0 or not files:
        return []
    step = max(1, len(files) // sample_records)
    chosen = files[::step][:sample_records]
    per_file = math.ceil(sample_records / len(chosen))
    problems = []
    for path in chosen:
        try:
            for number, record in enumerate(tf.data.TFRecordDataset(path).take(per_file)):
                problem = _record_problem(record)
                if problem:
                    problems.append(f"{path}: record {number}: {problem}")
        except tf.errors.OpError:
            continue  # the full scan has reported this file already
    return problems


def _record_problem(record):
    try:
        spec = {"image/encoded": _FEATURES["image/encoded"]}
        encoded = tf.io.parse_single_example(record, spec)["image/encoded"]
    except tf.errors.InvalidArgumentError as err:
        return f"no image/encoded: {_tf_message(err)}"
    if not encoded.numpy().startswith(_JPEG_MAGIC):
        return "image/encoded is not a JPEG"
    try:
        shape = tf.io.decode_jpeg(encoded, channels=3).shape
    except tf.errors.InvalidArgumentError as err:
        return f"JPEG does not decode: {_tf_message(err)}"
    if shape[0] == 0 or shape[1] == 0 or shape[2] != 3:
        return f"JPEG decodes to shape {tuple(shape)}, expected height x width x 3"
    return None
