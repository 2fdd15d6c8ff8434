"""ImageNet preparation, run once before any training: the learnable generator, the raw ImageNet converter
and the pre-flight check that writes dataset.json. Nothing here runs inside a timed run."""

import colorsys
import dataclasses
import io
import json
import math
import os
import random
import re
from concurrent import futures

import numpy as np

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from suite.common import runfiles
from suite.common.staging import split_evenly, staged_output
import tensorflow as tf

from models.resnet50.data import (DataError, dataset_info, DatasetInfo, EVAL_PATTERN, IMAGENET_CLASSES,
                                  IMAGENET_EVAL_RECORDS, IMAGENET_EVAL_SHARDS, IMAGENET_TRAIN_RECORDS,
                                  IMAGENET_TRAIN_SHARDS, log, METADATA_FILE, TRAIN_PATTERN, _BBOX_KEYS,
                                  _check_metadata_shards, _FEATURES, _list_shards, _one_line, _read_metadata,
                                  _SHARD_NAME, _tf_message)

_JPEG_MAGIC = b"\xff\xd8\xff"
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")
_CONVERT_SEED = 0  # fixed so two conversions of the same raw data give identical shards


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
    # Atomic, so a run never reads half a file (`check` writes it into a live data directory).
    runfiles.write_json(os.path.join(out_dir, METADATA_FILE), fields)


def _shard_records(prefix, chunks):
    """dataset.json's train_shard_records: {file name: records}, which runs balance the ranks by."""
    return {os.path.basename(_shard_path("", prefix, i, len(chunks))): len(chunk)
            for i, chunk in enumerate(chunks)}


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
    return write_dataset(out_dir, train, evals, train_shards, eval_shards, num_classes=num_classes,
                         source="learnable", bounding_boxes=True, image_size=image_size, seed=seed)


def write_dataset(out_dir, train, evals, train_shards, eval_shards, **metadata) -> DatasetInfo:
    """Writes serialized Examples as ImageNet-named shards plus their dataset.json, all or nothing.

    `metadata` adds to the counts dataset.json gets anyway (records and shards of each split).
    """
    with staged_output(out_dir, DataError) as staging:
        train_chunks = split_evenly(train, train_shards)
        for i, chunk in enumerate(train_chunks):
            _write_tfrecords(_shard_path(staging, "train", i, train_shards), chunk)
        for i, chunk in enumerate(split_evenly(evals, eval_shards)):
            _write_tfrecords(_shard_path(staging, "validation", i, eval_shards), chunk)
        _write_metadata(staging, train_records=len(train), eval_records=len(evals), train_shards=train_shards,
                        eval_shards=eval_shards, train_shard_records=_shard_records("train", train_chunks),
                        **metadata)
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
        train_chunks = split_evenly(train, train_shards)
        jobs = ([(_shard_path(staging, "train", i, train_shards), chunk)
                 for i, chunk in enumerate(train_chunks)]
                + [(_shard_path(staging, "validation", i, eval_shards), chunk)
                   for i, chunk in enumerate(split_evenly(evals, eval_shards))])
        boxed = _run_conversion(jobs, len(train) + len(evals), num_workers or os.cpu_count() or 1, progress,
                                bounding_boxes)
        _write_metadata(staging, train_records=len(train), eval_records=len(evals), num_classes=len(synsets),
                        train_shards=train_shards, eval_shards=eval_shards, source="imagenet",
                        bounding_boxes=boxed > 0, train_shard_records=_shard_records("train", train_chunks))
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
    measured["train_shard_records"] = {os.path.basename(path): scans[path].records for path in train_files}
    problems += _shard_record_problems(data_dir, meta, measured["train_shard_records"])
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


def _shard_record_problems(data_dir, meta, counted):
    """dataset.json's per-file counts against the records read: runs balance the ranks by them."""
    declared = (meta or {}).get("train_shard_records")
    if declared is None or declared == counted:
        return []
    differ = sorted(name for name in set(declared) | set(counted) if declared.get(name) != counted.get(name))
    return [f"{os.path.join(data_dir, METADATA_FILE)}: train_shard_records differs from the records read for "
            f"{len(differ)} file(s), first {differ[0]} ({declared.get(differ[0])} declared, "
            f"{counted.get(differ[0])} read)"]


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
