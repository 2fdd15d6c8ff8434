"""Tests of the ResNet-50 data pipelines, writers, converter, check and command line."""

import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest

from models.resnet50 import data, prepare, data_cli
import tensorflow as tf  # after models: the package sets TF_USE_LEGACY_KERAS first

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES, TRAIN_PER_CLASS, EVAL_PER_CLASS, SIZE = 3, 8, 5, 32


@pytest.fixture(scope="module")
def learnable(tmp_path_factory):
    """24 training records in 3 shards and 15 validation records in 3 shards of 5."""
    out = tmp_path_factory.mktemp("learnable") / "ds"
    return prepare.write_learnable_dataset(out, num_classes=CLASSES, train_per_class=TRAIN_PER_CLASS,
                                           eval_per_class=EVAL_PER_CLASS, image_size=SIZE, train_shards=3,
                                           eval_shards=3, seed=1)


@pytest.fixture
def copy_of(learnable, tmp_path):
    """A writable copy of the learnable dataset."""
    target = tmp_path / "copy"
    shutil.copytree(learnable.data_dir, target)
    return str(target)


def _examples(path):
    for record in tf.data.TFRecordDataset(path):
        yield tf.train.Example.FromString(record.numpy()).features.feature


def _all_examples(files):
    return [example for path in files for example in _examples(path)]


def _boxes(example):
    """The record's image/object/bbox/{xmin, ymin, xmax, ymax} lists."""
    return [list(example[f"image/object/bbox/{k}"].float_list.value)
            for k in ("xmin", "ymin", "xmax", "ymax")]


def _jpeg(pixels, fmt="JPEG", mode=None, quality=95):
    from PIL import Image

    image = Image.fromarray(np.asarray(pixels, np.uint8))
    if mode:
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, fmt, quality=quality) if fmt == "JPEG" else image.save(buffer, fmt)
    return buffer.getvalue()


def _write_records(directory, records_by_file):
    os.makedirs(directory, exist_ok=True)
    for name, records in records_by_file.items():
        with tf.io.TFRecordWriter(os.path.join(directory, name)) as writer:
            for record in records:
                writer.write(record)
    return str(directory)


def _write_dataset(directory, train, evals):
    """One training and one validation shard of the given records, with the dataset.json runs need."""
    _write_records(directory, {"train-00000-of-00001": train, "validation-00000-of-00001": evals})
    prepare._write_metadata(str(directory), train_records=len(train), eval_records=len(evals),
                            num_classes=None, train_shards=1, eval_shards=1, bounding_boxes=False)
    return str(directory)


def _read_metadata_file(directory):
    with open(os.path.join(directory, "dataset.json")) as f:
        return json.load(f)


def _iterate(dataset, limit=100):
    for i, _ in enumerate(dataset):
        if i >= limit:
            break


# ---------------------------------------------------------------------------------------------------------
# Generator and discovery


def test_generator_layout_and_metadata(learnable):
    names = sorted(os.listdir(learnable.data_dir))
    assert names == ["dataset.json"] + [f"train-{i:05d}-of-00003" for i in range(3)] + \
        [f"validation-{i:05d}-of-00003" for i in range(3)]
    with open(os.path.join(learnable.data_dir, "dataset.json")) as f:
        meta = json.load(f)
    assert meta["train_records"] == 24 and meta["eval_records"] == 15 and meta["num_classes"] == 3
    assert meta["bounding_boxes"] is True and learnable.bounding_boxes is True  # one box per record
    assert (learnable.train_records, learnable.eval_records, learnable.num_classes) == (24, 15, 3)

    train = _all_examples(learnable.train_files)
    evals = _all_examples(learnable.eval_files)
    assert len(train) == 24 and len(evals) == 15
    assert Counter(e["image/class/label"].int64_list.value[0] for e in train) == {1: 8, 2: 8, 3: 8}
    assert Counter(e["image/class/label"].int64_list.value[0] for e in evals) == {1: 5, 2: 5, 3: 5}
    shapes = set()
    for example in train + evals:
        label = example["image/class/label"].int64_list.value[0]
        assert example["image/class/synset"].bytes_list.value[0] == f"n{label - 1:08d}".encode()
        image = tf.io.decode_jpeg(example["image/encoded"].bytes_list.value[0]).numpy()
        assert image.shape[2] == 3
        assert image.shape[:2] == (example["image/height"].int64_list.value[0],
                                   example["image/width"].int64_list.value[0])
        shapes.add(image.shape[:2])
        box = [example[f"image/object/bbox/{k}"].float_list.value for k in ("xmin", "ymin", "xmax", "ymax")]
        assert all(len(v) == 1 for v in box)
        xmin, ymin, xmax, ymax = (v[0] for v in box)
        assert 0 <= xmin < xmax <= 1 and 0 <= ymin < ymax <= 1
    # Sizes vary around the nominal size and are not all square.
    assert len(shapes) > 5 and any(h != w for h, w in shapes)
    assert all(0.75 * SIZE - 1 <= s <= 1.25 * SIZE + 1 for shape in shapes for s in shape)


def test_generator_is_deterministic(learnable, tmp_path):
    def generate(name, seed):
        return prepare.write_learnable_dataset(tmp_path / name, num_classes=CLASSES,
                                               train_per_class=TRAIN_PER_CLASS, eval_per_class=EVAL_PER_CLASS,
                                               image_size=SIZE, train_shards=3, eval_shards=3, seed=seed)

    again = generate("again", 1)
    pairs = zip(learnable.train_files + learnable.eval_files, again.train_files + again.eval_files)
    for mine, theirs in pairs:
        with open(mine, "rb") as a, open(theirs, "rb") as b:
            assert a.read() == b.read()
    other = generate("other", 2)
    with open(learnable.train_files[0], "rb") as a, open(other.train_files[0], "rb") as b:
        assert a.read() != b.read()


def test_generator_refuses_non_empty_output_and_bad_arguments(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(data.DataError, match="not empty"):
        prepare.write_learnable_dataset(tmp_path / "full", num_classes=2, train_per_class=2, eval_per_class=1)
    assert os.listdir(tmp_path / "full") == ["keep.txt"]
    with pytest.raises(data.DataError, match="train shards"):
        prepare.write_learnable_dataset(tmp_path / "bad", num_classes=2, train_per_class=2, train_shards=5)
    # Nothing half-written is left behind.
    assert sorted(os.listdir(tmp_path)) == ["full"]
    # An existing empty directory is fine.
    (tmp_path / "empty").mkdir()
    info = prepare.write_learnable_dataset(tmp_path / "empty", num_classes=2, train_per_class=2,
                                           eval_per_class=1, image_size=16, train_shards=1, eval_shards=1)
    assert info.train_records == 4 and info.eval_records == 2


def test_dataset_info_without_dataset_json_names_the_check_command(copy_of):
    os.remove(os.path.join(copy_of, "dataset.json"))
    with pytest.raises(data.DataError) as caught:
        data.dataset_info(copy_of)
    message = str(caught.value)
    assert "\n" not in message and f"no dataset.json in {copy_of}" in message
    assert f"`python -m models.resnet50.data_cli check {copy_of}`" in message
    assert "add --small unless this is full ImageNet" in message


def test_full_imagenet_layout_without_dataset_json_is_refused_not_assumed(tmp_path):
    for i in range(1024):
        (tmp_path / f"train-{i:05d}-of-01024").touch()
    for i in range(128):
        (tmp_path / f"validation-{i:05d}-of-00128").touch()
    with pytest.raises(data.DataError, match=f"no dataset.json in {tmp_path}: .*data_cli check {tmp_path}`"):
        data.dataset_info(str(tmp_path))


def test_check_writes_dataset_json_that_dataset_info_accepts(copy_of, capsys):
    os.remove(os.path.join(copy_of, "dataset.json"))
    # Stray files that merely resemble shards are ignored.
    open(os.path.join(copy_of, "train-00000-of-00003.tmp"), "w").close()
    assert data_cli.main(["check", "--small", copy_of, "--sample", "3"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"wrote {copy_of}/dataset.json with the counts found"
    assert out.splitlines()[1].startswith(f"OK: {copy_of}: small dataset, 24 training records in 3 shards")
    assert _read_metadata_file(copy_of) == {
        "train_records": 24, "eval_records": 15, "num_classes": 3, "train_shards": 3, "eval_shards": 3,
        "source": "data_cli check --small", "bounding_boxes": True,
        "train_shard_records": {f"train-{i:05d}-of-00003": 8 for i in range(3)}}
    # No temporary file left (the atomic writer's name is dataset.json.tmp.<pid>).
    assert not [name for name in os.listdir(copy_of) if name.startswith((".", "dataset.json.tmp"))]
    info = data.dataset_info(copy_of)
    assert (info.train_records, info.eval_records, info.num_classes, info.bounding_boxes) == (24, 15, 3, True)
    assert len(info.train_files) == 3 and len(info.eval_files) == 3
    assert info.data_dir == copy_of

    # A second check verifies what the first wrote and leaves it alone.
    written = os.stat(os.path.join(copy_of, "dataset.json")).st_mtime_ns
    assert data_cli.main(["check", "--small", copy_of, "--sample", "0"]) == 0
    assert capsys.readouterr().out.startswith("OK: ")
    assert os.stat(os.path.join(copy_of, "dataset.json")).st_mtime_ns == written


def test_check_with_problems_writes_no_dataset_json(copy_of, capsys):
    os.remove(os.path.join(copy_of, "dataset.json"))
    victim = os.path.join(copy_of, "train-00001-of-00003")
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    assert data_cli.main(["check", "--small", copy_of, "--sample", "0"]) == 1
    assert f"{victim}: unreadable" in capsys.readouterr().out
    assert "dataset.json" not in os.listdir(copy_of)


def test_check_adds_bounding_boxes_to_an_older_dataset_json(copy_of, capsys):
    meta = _read_metadata_file(copy_of)
    del meta["bounding_boxes"]
    with open(os.path.join(copy_of, "dataset.json"), "w") as f:
        json.dump(meta, f)
    assert data.dataset_info(copy_of).bounding_boxes is None
    assert data_cli.main(["check", "--small", copy_of, "--sample", "0"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"added bounding_boxes to {copy_of}/dataset.json"
    assert _read_metadata_file(copy_of) == {**meta, "bounding_boxes": True}


def test_check_adds_per_file_counts_to_an_older_dataset_json_and_runs_read_them(copy_of, capsys):
    meta = _read_metadata_file(copy_of)
    assert meta["train_shard_records"] == {f"train-{i:05d}-of-00003": 8 for i in range(3)}  # the generator's
    del meta["train_shard_records"]
    with open(os.path.join(copy_of, "dataset.json"), "w") as f:
        json.dump(meta, f)
    assert data.dataset_info(copy_of).train_shard_records is None
    assert data_cli.main(["check", "--small", copy_of, "--sample", "0"]) == 0
    assert "added train_shard_records" in capsys.readouterr().out
    assert data.dataset_info(copy_of).train_shard_records == (8, 8, 8)


def test_per_file_counts_that_do_not_describe_the_files_are_refused(copy_of, capsys):
    meta = _read_metadata_file(copy_of)
    meta["train_shard_records"]["train-00001-of-00003"] = 9
    meta["train_records"] = 25
    with open(os.path.join(copy_of, "dataset.json"), "w") as f:
        json.dump(meta, f)
    assert data_cli.main(["check", "--small", copy_of, "--sample", "0"]) == 1
    assert "train_shard_records differs from the records read" in capsys.readouterr().out
    counts = meta["train_shard_records"]
    counts["train-00009-of-00003"] = counts.pop("train-00001-of-00003")
    with open(os.path.join(copy_of, "dataset.json"), "w") as f:
        json.dump(meta, f)
    with pytest.raises(data.DataError, match="train_shard_records names other files"):
        data.dataset_info(copy_of)


def _age_atimes(files):
    """Sets each file's access time days before its modification time, where a read must move it."""
    for path in files:
        modified = os.stat(path).st_mtime
        os.utime(path, (modified - 10 * 86400, modified))
    return _atimes(files)


def _atimes(files):
    return [os.stat(path).st_atime for path in files]


def test_dataset_info_and_building_the_pipelines_open_no_tfrecord(copy_of):
    """Runs call these before run_start, and MLPerf starts the clock before anything touches the data."""
    files = sorted(os.path.join(copy_of, name) for name in os.listdir(copy_of) if name != "dataset.json")
    before = _age_atimes(files)
    with open(files[0], "rb") as f:  # relatime moves an atime older than the mtime on every read
        f.read(1)
    assert _atimes(files)[0] != before[0], "this file system does not record reads"

    before = _age_atimes(files)
    info = data.dataset_info(copy_of)
    iterator = iter(data.train_dataset(info, 4, 16, CLASSES, 0, 1, 0))  # as the loop does before run_start
    data.eval_dataset(info, 4, 16, CLASSES, 0, 1)
    time.sleep(0.5)  # room for any background prefetch to start reading
    assert _atimes(files) == before
    # Without dataset.json the run is refused, still without a read.
    os.remove(os.path.join(copy_of, "dataset.json"))
    with pytest.raises(data.DataError, match="no dataset.json"):
        data.dataset_info(copy_of)
    assert _atimes(files) == before
    next(iterator)
    assert _atimes(files) != before  # the probe does see the pipeline's reads


def test_dataset_info_needs_only_dataset_json_and_the_listing(copy_of):
    for name in os.listdir(copy_of):
        if name != "dataset.json":
            with open(os.path.join(copy_of, name), "wb") as f:
                f.write(b"not a TFRecord")
    info = data.dataset_info(copy_of)
    assert (info.train_records, info.eval_records, info.num_classes) == (24, 15, 3)


def test_dataset_info_errors(tmp_path, copy_of):
    missing = str(tmp_path / "nope")
    with pytest.raises(data.DataError, match=f"data directory not found: {missing}"):
        data.dataset_info(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(data.DataError, match="no training TFRecords matching train-\\*-of-\\* in .*empty"):
        data.dataset_info(str(tmp_path / "empty"))
    (tmp_path / "empty" / "train-00000-of-00001").touch()
    with pytest.raises(data.DataError, match="no validation TFRecords"):
        data.dataset_info(str(tmp_path / "empty"))

    meta_path = os.path.join(copy_of, "dataset.json")
    with open(meta_path, "w") as f:
        f.write("{not json")
    with pytest.raises(data.DataError, match=f"malformed {meta_path}"):
        data.dataset_info(copy_of)
    with open(meta_path, "w") as f:
        json.dump({"train_records": "many", "eval_records": 15}, f)
    with pytest.raises(data.DataError, match="train_records"):
        data.dataset_info(copy_of)
    with open(meta_path, "w") as f:
        json.dump({"train_records": 24, "eval_records": 15, "train_shards": 4}, f)
    with pytest.raises(data.DataError, match="4 training shards"):
        data.dataset_info(copy_of)
    with open(meta_path, "w") as f:
        json.dump({"train_records": 24, "eval_records": 15, "bounding_boxes": "no"}, f)
    with pytest.raises(data.DataError, match="malformed .*: 'bounding_boxes' must be true or false"):
        data.dataset_info(copy_of)


# ---------------------------------------------------------------------------------------------------------
# Training pipeline


def test_train_batches_shapes_labels_and_mean_subtraction(learnable):
    dataset = data.train_dataset(learnable, local_batch=8, image_size=24, num_classes=CLASSES, rank=0,
                                 world_size=1, seed=0)
    # Eight batches of 8 = more than two epochs of 24 records: the stream repeats.
    batches = list(dataset.take(8))
    assert len(batches) == 8
    labels = np.concatenate([y.numpy() for _, y in batches])
    for images, batch_labels in batches:
        assert images.shape == (8, 24, 24, 3) and images.dtype == tf.float32
        assert batch_labels.shape == (8,) and batch_labels.dtype == tf.int32
    assert set(labels) == {0, 1, 2}
    pixels = np.concatenate([x.numpy() for x, _ in batches])
    mean = np.asarray(data.MEAN_RGB, np.float32)
    # Mean subtracted, no std division: each channel lies in [-mean, 255 - mean] and uses much of it.
    assert np.all(pixels >= -mean - 1e-3) and np.all(pixels <= 255 - mean + 1e-3)
    assert pixels.min() < -50 and pixels.max() > 50
    assert abs(float(pixels.mean())) < 100


def test_train_image_is_the_reference_computation_bit_for_bit():
    """However train_image arranges its work, its floats are those of the reference's steps: the sampled
    crop decoded, flipped, resized by the v1 bilinear op, minus the three channel means broadcast."""
    image_bytes = tf.constant(_jpeg(np.random.default_rng(2).integers(0, 255, (40, 56, 3))))
    no_box = tf.zeros([1, 0, 4])
    for i in range(6):
        crop_seed, flip_seed = tf.constant([5, i], tf.int64), tf.constant([6, i], tf.int64)
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.image.extract_jpeg_shape(image_bytes), bounding_boxes=no_box, seed=crop_seed,
            min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], area_range=[0.05, 1.0],
            max_attempts=100, use_image_if_no_bounding_boxes=True)
        crop = tf.image.decode_and_crop_jpeg(image_bytes, tf.concat([begin[:2], size[:2]], 0), channels=3)
        flipped = tf.image.stateless_random_flip_left_right(crop, seed=flip_seed)
        resized = tf.compat.v1.image.resize(flipped, [24, 24], method=tf.image.ResizeMethod.BILINEAR)
        expected = resized.numpy() - np.asarray(data.MEAN_RGB, np.float32)
        found = data.train_image(image_bytes, no_box, 24, crop_seed, flip_seed).numpy()
        assert found.dtype == np.float32 and np.array_equal(found, expected), i


def test_colour_centring_equals_subtracting_the_broadcast_means():
    for shape in ([224, 224, 3], [7, 5, 3]):
        image = tf.random.stateless_uniform(shape, seed=[1, 2], maxval=255.0)
        expected = image.numpy() - np.asarray(data.MEAN_RGB, np.float32)
        assert np.array_equal(data._centre_colours(image).numpy(), expected)


def test_train_channels_first_and_dtype(learnable):
    dataset = data.train_dataset(learnable, 4, 16, CLASSES, 0, 1, seed=3, dtype=tf.float16,
                                 channels_first=True)
    images, labels = next(iter(dataset))
    assert images.shape == (4, 3, 16, 16) and images.dtype == tf.float16
    assert labels.dtype == tf.int32
    # Same pixels as channels-last, only transposed.
    last, _ = next(iter(data.train_dataset(learnable, 4, 16, CLASSES, 0, 1, seed=3, dtype=tf.float16)))
    np.testing.assert_array_equal(images.numpy(), np.transpose(last.numpy(), [0, 3, 1, 2]))


def test_train_is_reproducible_and_depends_on_seed_and_rank(learnable):
    def first_batches(seed, rank, world_size=2):
        dataset = data.train_dataset(learnable, 4, 16, CLASSES, rank, world_size, seed)
        return [x.numpy() for x, _ in dataset.take(3)]

    a, b = first_batches(5, 0), first_batches(5, 0)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], first_batches(6, 0)[0])
    assert not np.array_equal(a[0], first_batches(5, 1)[0])


def test_train_file_and_record_sharding(learnable):
    # 3 files for 2 ranks: files are split; 3 files for 5 ranks: records are split.
    for world_size in (2, 5):
        for rank in range(world_size):
            images, labels = next(iter(data.train_dataset(learnable, 4, 16, CLASSES, rank, world_size, 0)))
            assert images.shape == (4, 16, 16, 3) and labels.shape == (4,)
    with pytest.raises(ValueError, match="rank 2"):
        data.train_dataset(learnable, 4, 16, CLASSES, 2, 2, 0)


def test_the_training_records_split_evenly_by_record_over_any_world_size(learnable):
    """3 files of 8 over 2 ranks: one whole file each, the third read by both, every 2nd record each."""
    files = learnable.train_files
    assert data.train_split(learnable, 0, 2) == [(files[0], 1, 0), (files[2], 2, 0)]
    for world_size in (1, 2, 3, 4, 5, 7):
        shares = [data.train_share(learnable, rank, world_size) for rank in range(world_size)]
        assert sum(shares) == 24 and max(shares) - min(shares) <= 1, (world_size, shares)
        # Together the ranks read every record once: the labels of their first passes add up to the set.
        seen = Counter()
        for rank in range(world_size):
            dataset = data.train_dataset(learnable, 1, 16, CLASSES, rank, world_size, 0)
            seen.update(int(y[0]) for _, y in dataset.take(shares[rank]))
        assert seen == {0: 8, 1: 8, 2: 8}, world_size


def test_imagenet_at_24_ranks_is_balanced_by_record():
    """1,024 shards of 1,251 or 1,252 records over 24 ranks: whole files alone would leave a whole shard's
    difference (43 files against 42); with the 16 left over split by record, shares differ by a few
    records."""
    counts = [1252 if i < 1281167 - 1024 * 1251 else 1251 for i in range(1024)]
    files = tuple(f"train-{i:05d}-of-01024" for i in range(1024))
    info = data.DatasetInfo(files, (), sum(counts), 50000, 1000, False, tuple(counts))
    shares = [data.train_share(info, rank, 24) for rank in range(24)]
    assert sum(shares) == 1281167 and max(shares) - min(shares) < 60
    # Every rank trains 392 steps of 136 per epoch at batch 3264: each share holds one epoch.
    assert min(shares) >= 392 * 136


def test_train_one_epoch_of_a_rank_covers_its_files(learnable):
    """One rank's first epoch is exactly its records: its whole files and its share of the leftover one."""
    rank, world_size = 1, 2
    mine = [example for path, stride, offset in data.train_split(learnable, rank, world_size)
            for example in list(_examples(path))[offset::stride]]
    assert len(mine) == 8 + 4
    expected = Counter(e["image/class/label"].int64_list.value[0] - 1 for e in mine)
    dataset = data.train_dataset(learnable, 1, 16, CLASSES, rank, world_size, 0)
    labels = [int(y[0]) for _, y in dataset.take(sum(expected.values()))]
    assert Counter(labels) == expected


# ---------------------------------------------------------------------------------------------------------
# Evaluation pipeline


def _eval_signatures(info, world_size, batch=4, image_size=SIZE):
    """(label, image checksum) of every record every rank yields, plus the batch sizes."""
    signatures, batch_sizes = [], []
    for rank in range(world_size):
        for images, labels in data.eval_dataset(info, batch, image_size, CLASSES, rank, world_size):
            batch_sizes.append(int(images.shape[0]))
            for image, label in zip(images.numpy(), labels.numpy()):
                signatures.append((int(label), round(float(np.sum(image, dtype=np.float64)), 2)))
    return sorted(signatures), batch_sizes


def test_eval_sees_every_record_exactly_once_for_any_world_size(learnable):
    reference, sizes = _eval_signatures(learnable, 1)
    assert len(reference) == 15 and len(set(reference)) == 15
    assert sizes == [4, 4, 4, 3]  # the last partial batch is kept
    assert Counter(label for label, _ in reference) == {0: 5, 1: 5, 2: 5}
    # 2 ranks: uneven file split (10 + 5); 3 ranks: one file each; 4 ranks: record split (4, 4, 4, 3).
    for world_size in (2, 3, 4):
        signatures, sizes = _eval_signatures(learnable, world_size)
        assert signatures == reference, f"world size {world_size}"
        assert sum(sizes) == 15 and min(sizes) < 4


def test_eval_is_deterministic(learnable):
    def pixels():
        return np.concatenate([x.numpy() for x, _ in data.eval_dataset(learnable, 4, 16, CLASSES, 0, 1)])

    np.testing.assert_array_equal(pixels(), pixels())


def test_eval_dataset_shapes(learnable):
    images, labels = next(iter(data.eval_dataset(learnable, 5, 20, CLASSES, 0, 1, dtype=tf.bfloat16,
                                                 channels_first=True)))
    assert images.shape == (5, 3, 20, 20) and images.dtype == tf.bfloat16 and labels.dtype == tf.int32


def test_eval_image_resizes_shorter_side_and_crops_centre():
    # 64 x 128 with white outer quarters. For 32 px the shorter side becomes round(32 / 0.875) = 37,
    # so the 37 x 74 image is cropped at columns 21..52: the white quarters (columns < 18.5 and
    # >= 55.5 after resizing) fall outside. Squashing the whole image to 32 x 32 would keep them.
    wide = np.zeros((64, 128, 3), np.uint8)
    wide[:, :32] = 255
    wide[:, 96:] = 255
    image = data.eval_image(tf.constant(_jpeg(wide)), 32).numpy() + np.asarray(data.MEAN_RGB)
    assert image.shape == (32, 32, 3)
    assert image.max() < 40
    # A tall image keeps its middle rows: a white band across rows 70..90 of 160 lands mid-crop.
    tall = np.zeros((160, 64, 3), np.uint8)
    tall[70:90] = 255
    image = data.eval_image(tf.constant(_jpeg(tall)), 32).numpy() + np.asarray(data.MEAN_RGB)
    assert image.shape == (32, 32, 3)
    assert image[14:18].min() > 200 and image[:5].max() < 40 and image[-5:].max() < 40


def test_train_crop_respects_bounding_box():
    """With a box only crops touching the box are drawn; without one, crops anywhere in the image."""
    pixels = np.zeros((64, 64, 3), np.uint8)
    pixels[..., 2] = 255
    pixels[:16, :16] = (255, 0, 0)  # red object in the top-left corner
    image_bytes = tf.constant(_jpeg(pixels, quality=100))
    corner = tf.constant([[[0.0, 0.0, 0.25, 0.25]]])  # ymin, xmin, ymax, xmax
    no_box = tf.zeros([1, 0, 4])

    def red_fraction(bbox, i):
        image = data.train_image(image_bytes, bbox, 24, tf.constant([7, i], tf.int64),
                                 tf.constant([8, i], tf.int64)).numpy() + np.asarray(data.MEAN_RGB)
        assert image.shape == (24, 24, 3)
        return float(np.mean((image[..., 0] > 150) & (image[..., 2] < 100)))

    with_box = [red_fraction(corner, i) for i in range(30)]
    without = [red_fraction(no_box, i) for i in range(30)]
    assert min(with_box) > 0
    assert min(without) == 0 and max(without) > 0
    assert np.mean(with_box) > np.mean(without)


def test_train_crop_without_boxes_is_the_references_whole_image_crop(monkeypatch):
    """Closed data has no boxes: crops are drawn against [0, 0, 1, 1] with the reference's arguments."""
    pixels = np.random.default_rng(0).integers(0, 255, (48, 64, 3))
    image_bytes = tf.constant(_jpeg(pixels, quality=100))
    no_box = tf.zeros([1, 0, 4])
    whole = tf.constant([[[0.0, 0.0, 1.0, 1.0]]])
    calls = []
    sample = tf.image.stateless_sample_distorted_bounding_box

    def recording_sample(*args, **kwargs):
        calls.append(kwargs)
        return sample(*args, **kwargs)

    monkeypatch.setattr(tf.image, "stateless_sample_distorted_bounding_box", recording_sample)
    for i in range(20):
        seeds = tf.constant([3, i], tf.int64), tf.constant([4, i], tf.int64)
        np.testing.assert_array_equal(data.train_image(image_bytes, no_box, 16, *seeds).numpy(),
                                      data.train_image(image_bytes, whole, 16, *seeds).numpy())
    # The MLPerf reference's imagenet_preprocessing.py.
    expected = dict(min_object_covered=0.1, aspect_ratio_range=[0.75, 1.33], area_range=[0.05, 1.0],
                    max_attempts=100, use_image_if_no_bounding_boxes=True)
    assert all({key: call[key] for key in expected} == expected for call in calls) and len(calls) == 40


# ---------------------------------------------------------------------------------------------------------
# Synthetic data


def test_synthetic_dataset():
    dataset = data.synthetic_dataset(6, 16, 10, seed=1, dtype=tf.float16, channels_first=True)
    (a, la), (b, lb) = list(dataset.take(2))
    assert a.shape == (6, 3, 16, 16) and a.dtype == tf.float16 and la.shape == (6,) and la.dtype == tf.int32
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # one batch, repeated
    assert la.numpy().min() >= 0 and la.numpy().max() < 10
    last, _ = next(iter(data.synthetic_dataset(6, 16, 10, seed=1)))
    assert last.shape == (6, 16, 16, 3) and last.dtype == tf.float32


# ---------------------------------------------------------------------------------------------------------
# Bad data


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupt_tfrecord_gives_one_line_message(copy_of, damage):
    victim = os.path.join(copy_of, "validation-00001-of-00003")
    if damage == "truncate":
        with open(victim, "r+b") as f:
            f.truncate(os.path.getsize(victim) // 2)
    else:
        with open(victim, "wb") as f:
            f.write(np.random.default_rng(0).bytes(3000))
    info = data.dataset_info(copy_of)  # dataset.json supplies the counts, so no read happens yet
    with pytest.raises(tf.errors.DataLossError) as caught:
        _iterate(data.eval_dataset(info, 4, 16, CLASSES, 0, 1))
    message = data.describe_data_error(caught.value, info)
    assert message and "\n" not in message and copy_of in message
    assert "corrupt" in message
    # The pre-flight check names the file itself.
    problems = prepare.check_imagenet(copy_of, expect_full_imagenet=False, sample_records=0, progress=False)
    assert any(problem.startswith(f"{victim}: unreadable") for problem in problems)


def test_label_out_of_range_gives_one_line_message(learnable):
    for dataset in (data.eval_dataset(learnable, 4, 16, 2, 0, 1),
                    data.train_dataset(learnable, 4, 16, 2, 0, 1, 0)):
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            _iterate(dataset)
        message = data.describe_data_error(caught.value, learnable)
        assert message == f"label out of range 1..2 (found 3) in {learnable.data_dir}"


def test_zero_label_and_bad_jpeg_give_one_line_messages(tmp_path):
    good = prepare._example(_jpeg(np.full((20, 20, 3), 128)), 0, "n0", "zero.JPEG", 20, 20)
    bad = prepare._example(b"this is not a jpeg", 1, "n0", "bad.JPEG", 20, 20)
    zero_dir = _write_dataset(tmp_path / "zero", [good], [good])
    bad_dir = _write_dataset(tmp_path / "bad", [bad], [bad])
    info = data.dataset_info(zero_dir)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _iterate(data.eval_dataset(info, 1, 16, 5, 0, 1))
    assert data.describe_data_error(caught.value, info) == f"label out of range 1..5 (found 0) in {zero_dir}"

    info = data.dataset_info(bad_dir)
    for dataset in (data.train_dataset(info, 1, 16, 5, 0, 1, 0), data.eval_dataset(info, 1, 16, 5, 0, 1)):
        with pytest.raises(tf.errors.InvalidArgumentError) as caught:
            _iterate(dataset)
        message = data.describe_data_error(caught.value, info)
        assert message.startswith(f"undecodable image (not a valid JPEG) in {bad_dir}")
        assert "\n" not in message


def test_missing_required_feature_is_described(tmp_path):
    record = tf.train.Example(features=tf.train.Features(feature={
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))})).SerializeToString()
    directory = _write_dataset(tmp_path / "nofeat", [record], [record])
    info = data.dataset_info(directory)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _iterate(data.eval_dataset(info, 1, 16, 5, 0, 1))
    message = data.describe_data_error(caught.value, info)
    assert message.startswith(f"malformed tf.train.Example in {directory}") and "image/encoded" in message


def test_describe_ignores_unrelated_errors(learnable):
    assert data.describe_data_error(ValueError("nope"), learnable) is None
    shapes = tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2] vs [3]")
    assert data.describe_data_error(shapes, learnable) is None
    assert data.describe_data_error(tf.errors.ResourceExhaustedError(None, None, "OOM"), learnable) is None


# ---------------------------------------------------------------------------------------------------------
# Converting raw ImageNet

WNIDS = ("n01000003", "n01000001", "n01000002")  # deliberately unsorted: labels follow the sorted order


def _make_raw_imagenet(root, val_labels="csv"):
    """3 classes x 3 images (one a PNG named .JPEG, one CMYK) and 3 validation images."""
    rng = np.random.default_rng(0)
    for wnid in WNIDS:
        os.makedirs(root / "train" / wnid)
        for i in range(3):
            pixels = rng.integers(0, 255, (30, 40, 3))
            if (wnid, i) == ("n01000002", 1):
                content = _jpeg(pixels, fmt="PNG")
            elif (wnid, i) == ("n01000003", 2):
                content = _jpeg(pixels, mode="CMYK")
            else:
                content = _jpeg(pixels)
            (root / "train" / wnid / f"{wnid}_{i}.JPEG").write_bytes(content)
    os.makedirs(root / "val")
    truth = {"ILSVRC2012_val_00000001": "n01000002", "ILSVRC2012_val_00000002": "n01000003",
             "ILSVRC2012_val_00000003": "n01000001"}
    for stem in truth:
        (root / "val" / f"{stem}.JPEG").write_bytes(_jpeg(rng.integers(0, 255, (30, 40, 3))))
    if val_labels == "csv":
        lines = ["ImageId,PredictionString"] + [f"{stem},{wnid} 1 2 30 20 {wnid} 5 5 9 9"
                                                for stem, wnid in truth.items()]
        (root / "LOC_val_solution.csv").write_text("\n".join(lines) + "\n")
        (root / "LOC_train_solution.csv").write_text(
            "ImageId,PredictionString\nn01000001_0,n01000001 4 3 20 15 n01000001 0 0 80 90\n")
    elif val_labels == "sorted":
        numbers = {wnid: i for i, wnid in enumerate(sorted(WNIDS), start=1)}
        (root / "ILSVRC2012_validation_ground_truth.txt").write_text(
            "".join(f"{numbers[truth[stem]]}\n" for stem in sorted(truth)))
    else:
        # The real devkit: class numbers in its own order, mapped to wnids by meta.mat.
        devkit = root / "ILSVRC2012_devkit_t12" / "data"
        devkit.mkdir(parents=True)
        numbers = {wnid: i for i, wnid in enumerate(WNIDS, start=1)}
        (devkit / "ILSVRC2012_validation_ground_truth.txt").write_text(
            "".join(f"{numbers[truth[stem]]}\n" for stem in sorted(truth)))
        _write_meta_mat(devkit / "meta.mat", numbers)
    return truth


def _write_meta_mat(path, numbers):
    from scipy import io as scipy_io

    fields = [("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"), ("num_children", "O")]
    rows = [(number, wnid, wnid, 0) for wnid, number in numbers.items()]
    rows.append((len(rows) + 1, "n00000099", "a parent synset", 2))
    scipy_io.savemat(str(path), {"synsets": np.array(rows, dtype=fields).reshape(-1, 1)})


def test_convert_imagenet_tiny(tmp_path):
    raw = tmp_path / "raw"
    truth = _make_raw_imagenet(raw)
    info = prepare.convert_imagenet(str(raw), str(tmp_path / "out"), train_shards=2, eval_shards=1,
                                    num_workers=2, progress=False)
    assert (info.train_records, info.eval_records, info.num_classes) == (9, 3, 3)
    assert [os.path.basename(f) for f in info.train_files] == ["train-00000-of-00002", "train-00001-of-00002"]
    assert [os.path.basename(f) for f in info.eval_files] == ["validation-00000-of-00001"]
    labels = {wnid: i for i, wnid in enumerate(sorted(WNIDS), start=1)}

    train = _all_examples(info.train_files)
    assert len(train) == 9
    for example in train:
        name = example["image/filename"].bytes_list.value[0].decode()
        wnid = name.split("_")[0]
        assert example["image/class/label"].int64_list.value[0] == labels[wnid]
        assert example["image/class/synset"].bytes_list.value[0].decode() == wnid
        encoded = example["image/encoded"].bytes_list.value[0]
        assert encoded.startswith(b"\xff\xd8\xff"), name  # the PNG and the CMYK file were re-encoded
        image = tf.io.decode_jpeg(encoded).numpy()
        assert image.shape == (30, 40, 3), name
    # LOC_train_solution.csv and LOC_val_solution.csv have boxes, but the reference data has none.
    assert [_boxes(e) for e in train + _all_examples(info.eval_files)] == [[[], [], [], []]] * 12
    assert _read_metadata_file(info.data_dir)["bounding_boxes"] is False and info.bounding_boxes is False
    evals = _all_examples(info.eval_files)
    assert [e["image/filename"].bytes_list.value[0].decode() for e in evals] == \
        [f"{stem}.JPEG" for stem in sorted(truth)]
    for example, stem in zip(evals, sorted(truth)):
        assert example["image/class/label"].int64_list.value[0] == labels[truth[stem]]
    with open(os.path.join(info.data_dir, "dataset.json")) as f:
        assert json.load(f)["num_classes"] == 3

    # The pipelines read the converted records.
    images, batch_labels = next(iter(data.train_dataset(info, 4, 16, 3, 0, 1, 0)))
    assert images.shape == (4, 16, 16, 3) and set(batch_labels.numpy()) <= {0, 1, 2}
    signatures, _ = _eval_signatures(info, 1, batch=2, image_size=16)
    assert sorted(label for label, _ in signatures) == sorted(labels[w] - 1 for w in truth.values())


def test_convert_with_bounding_boxes_is_open_division_data(tmp_path):
    raw = tmp_path / "raw"
    _make_raw_imagenet(raw)
    out = tmp_path / "boxed"
    run = _cli("convert", raw, out, "--train-shards", 2, "--eval-shards", 1, "--workers", 1,
               "--bounding-boxes")
    assert run.returncode == 0, run.stderr
    info = data.dataset_info(str(out))
    assert info.bounding_boxes is True and _read_metadata_file(out)["bounding_boxes"] is True
    train = {e["image/filename"].bytes_list.value[0].decode(): _boxes(e)
             for e in _all_examples(info.train_files)}
    # Pixel boxes normalised by 40 x 30 and clipped to the image.
    np.testing.assert_allclose(train.pop("n01000001_0.JPEG"),
                               [[0.1, 0.0], [0.1, 0.0], [0.5, 1.0], [0.5, 1.0]], atol=1e-6)
    assert all(boxes == [[], [], [], []] for boxes in train.values())
    assert all(len(_boxes(e)[0]) == 2 for e in _all_examples(info.eval_files))  # LOC_val_solution.csv's

    # Closed-rule check: the records themselves are scanned, not only dataset.json.
    problems = prepare.check_imagenet(str(out), sample_records=0, progress=False)
    boxed = [p for p in problems if "bounding boxes" in p]
    assert len(boxed) == 1 and boxed[0].startswith(f"{out}/")
    assert "(image/object/bbox/*; 4 in 2 files): not closed-division data" in boxed[0]
    assert "--bounding-boxes" in boxed[0]
    assert prepare.check_imagenet(str(out), expect_full_imagenet=False, sample_records=0,
                                  progress=False) == []
    meta = _read_metadata_file(out)
    with open(out / "dataset.json", "w") as f:
        json.dump({**meta, "bounding_boxes": False}, f)
    assert prepare.check_imagenet(str(out), expect_full_imagenet=False, sample_records=0, progress=False) == [
        f"{out}/dataset.json says bounding_boxes false, but 4 records hold boxes"]


def test_cli_convert_without_the_flag_writes_no_boxes(tmp_path, capsys):
    raw = tmp_path / "raw"
    _make_raw_imagenet(raw)
    assert data_cli.main(["convert", str(raw), str(tmp_path / "plain"), "--train-shards", "1",
                          "--eval-shards", "1"]) == 0
    info = data.dataset_info(str(tmp_path / "plain"))
    assert info.bounding_boxes is False
    assert all(_boxes(e) == [[], [], [], []] for e in _all_examples(info.train_files + info.eval_files))
    with pytest.raises(SystemExit):
        data_cli.main(["convert", "--help"])
    assert "makes the data open division only" in " ".join(capsys.readouterr().out.split())


def test_division_is_open_for_data_with_bounding_boxes(learnable):
    from models.resnet50.presets import PRESETS, ResNetConfig
    from models.resnet50.workload import division
    from suite.common.config import resolve

    config = resolve(ResNetConfig, PRESETS, "closed_8xA100_gbs3264", extra={"data_dir": "/data"})
    imagenet = dataclasses.replace(learnable, train_records=1281167, eval_records=50000, num_classes=1000)
    assert division(config, dataclasses.replace(imagenet, bounding_boxes=False)).name == "closed"
    boxed = division(config, imagenet)
    assert boxed.name == "open"
    assert boxed.reasons == ("bounding_boxes true in dataset.json (closed: false, no boxes, as in the "
                             "reference data)",)
    unknown = division(config, dataclasses.replace(imagenet, bounding_boxes=None))
    assert unknown.reasons == ("bounding_boxes unknown in dataset.json (closed: false, no boxes, as in the "
                               "reference data)",)


@pytest.mark.parametrize("source", ["meta", "sorted"])
def test_convert_imagenet_devkit_ground_truth(tmp_path, source):
    raw = tmp_path / "raw"
    truth = _make_raw_imagenet(raw, val_labels=source)
    info = prepare.convert_imagenet(str(raw), str(tmp_path / "out"), train_shards=3, eval_shards=2,
                                    progress=False)
    labels = {wnid: i for i, wnid in enumerate(sorted(WNIDS), start=1)}
    found = {e["image/filename"].bytes_list.value[0].decode(): e["image/class/label"].int64_list.value[0]
             for e in _all_examples(info.eval_files)}
    assert found == {f"{stem}.JPEG": labels[wnid] for stem, wnid in truth.items()}


def test_devkit_numbers_without_meta_mat_are_refused_for_full_imagenet(tmp_path):
    truth_path = tmp_path / "ILSVRC2012_validation_ground_truth.txt"
    truth_path.write_text("490\n")
    synsets = [f"n{i:08d}" for i in range(1000)]
    with pytest.raises(data.DataError, match="meta.mat"):
        prepare._devkit_mapping(str(truth_path), synsets)
    _write_meta_mat(tmp_path / "meta.mat", {"n00000007": 490})
    assert prepare._devkit_mapping(str(truth_path), synsets)("490") == "n00000007"


def test_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "_write_metadata", crash)
    with pytest.raises(KeyboardInterrupt):
        prepare.write_learnable_dataset(tmp_path / "ds", num_classes=2, train_per_class=2, eval_per_class=1,
                                        image_size=16, train_shards=1, eval_shards=1)
    with pytest.raises(KeyboardInterrupt):
        prepare.convert_imagenet(str(_make_raw(tmp_path)), str(tmp_path / "conv"), 1, 1, progress=False)
    assert sorted(os.listdir(tmp_path)) == ["raw"]


def _make_raw(tmp_path):
    _make_raw_imagenet(tmp_path / "raw")
    return tmp_path / "raw"


def test_convert_imagenet_errors(tmp_path):
    with pytest.raises(data.DataError, match="raw ImageNet directory not found"):
        prepare.convert_imagenet(str(tmp_path / "nothing"), str(tmp_path / "out"), progress=False)
    (tmp_path / "raw").mkdir()
    with pytest.raises(data.DataError, match="training folder not found: .*raw/train"):
        prepare.convert_imagenet(str(tmp_path / "raw"), str(tmp_path / "out"), progress=False)
    (tmp_path / "raw" / "train" / "n01000001").mkdir(parents=True)
    with pytest.raises(data.DataError, match="no training images"):
        prepare.convert_imagenet(str(tmp_path / "raw"), str(tmp_path / "out"), progress=False)

    raw = tmp_path / "raw2"
    _make_raw_imagenet(raw)
    csv = raw / "LOC_val_solution.csv"
    csv.write_text("".join(line + "\n" for line in csv.read_text().splitlines() if "00000003" not in line))
    with pytest.raises(data.DataError, match="no label for validation image .*ILSVRC2012_val_00000003.JPEG"):
        prepare.convert_imagenet(str(raw), str(tmp_path / "out"), train_shards=1, eval_shards=1,
                                 progress=False)
    csv.unlink()
    with pytest.raises(data.DataError, match="no validation labels"):
        prepare.convert_imagenet(str(raw), str(tmp_path / "out"), train_shards=1, eval_shards=1,
                                 progress=False)
    (raw / "train" / "n01000001" / "n01000001_0.JPEG").write_bytes(b"broken")
    (raw / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "".join(
        f"ILSVRC2012_val_0000000{i},n01000001 1 1 2 2\n" for i in (1, 2, 3)))
    with pytest.raises(data.DataError, match="cannot read image .*n01000001_0.JPEG"):
        prepare.convert_imagenet(str(raw), str(tmp_path / "out"), train_shards=1, eval_shards=1,
                                 progress=False)
    # Failed conversions leave no output behind.
    assert not (tmp_path / "out").exists()
    assert not [name for name in os.listdir(tmp_path) if "partial" in name]


# ---------------------------------------------------------------------------------------------------------
# Pre-flight check


def test_check_small_dataset_passes_and_full_imagenet_check_fails(learnable):
    assert prepare.check_imagenet(learnable.data_dir, expect_full_imagenet=False, sample_records=20,
                                  progress=False) == []
    problems = prepare.check_imagenet(learnable.data_dir, expect_full_imagenet=True, sample_records=5,
                                      progress=False)
    text = "\n".join(problems)
    assert "expected 1024" in text and "expected 128" in text
    assert "expects 1281167" in text and "expects 50000" in text
    assert "997 of 1000 labels never occur" in text
    assert "not closed-division data" in text  # the generated records have boxes
    assert all(learnable.data_dir in problem for problem in problems)


def test_check_reports_damaged_files(copy_of):
    victim = os.path.join(copy_of, "train-00002-of-00003")
    with open(victim, "r+b") as f:
        f.truncate(100)
    good = prepare._example(_jpeg(np.zeros((8, 8, 3))), 9, "n9", "x.JPEG", 8, 8)
    png = prepare._example(_jpeg(np.zeros((8, 8, 3)), fmt="PNG"), 1, "n1", "y.JPEG", 8, 8)
    _write_records(copy_of, {"validation-00001-of-00003": [good, png]})
    os.remove(os.path.join(copy_of, "validation-00002-of-00003"))
    problems = prepare.check_imagenet(copy_of, expect_full_imagenet=False, sample_records=100, progress=False)
    text = "\n".join(problems)
    assert f"{victim}: unreadable" in text
    assert "validation-00001-of-00003: labels outside 1..3: 9" in text
    assert "validation-00001-of-00003: record 1: image/encoded is not a JPEG" in text
    assert "missing shards validation-00002-of-00003" in text
    assert "expects 24" in text
    with pytest.raises(data.DataError, match="data directory not found"):
        prepare.check_imagenet(os.path.join(copy_of, "nope"), progress=False)


# ---------------------------------------------------------------------------------------------------------
# Command line


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "models.resnet50.data_cli", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)


def test_cli_generate_and_check(tmp_path):
    out = tmp_path / "gen"
    run = _cli("generate", out, "--classes", 2, "--train-per-class", 4, "--eval-per-class", 3,
               "--image-size", 16, "--train-shards", 2, "--eval-shards", 2, "--seed", 3)
    assert run.returncode == 0, run.stderr
    assert "wrote 8 training and 6 validation records (2 classes)" in run.stdout
    assert len(os.listdir(out)) == 5

    run = _cli("check", out, "--small", "--sample", 10)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("OK: ") and "8 training records" in run.stdout

    run = _cli("check", tmp_path / "missing")
    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr.strip().splitlines()[-1] == f"error: data directory not found: {tmp_path / 'missing'}"
    assert "Traceback" not in run.stderr


def test_cli_exit_codes_in_process(learnable, tmp_path, capsys):
    assert data_cli.main(["check", learnable.data_dir, "--sample", "2"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) >= 4 and all(learnable.data_dir in line for line in lines)

    assert data_cli.main(["generate", learnable.data_dir]) == 2
    assert capsys.readouterr().err.startswith("error: output directory is not empty")

    assert data_cli.main(["convert", str(tmp_path / "no-raw"), str(tmp_path / "out")]) == 2
    assert "raw ImageNet directory not found" in capsys.readouterr().err

    for bad in (["generate"], ["generate", str(tmp_path / "x"), "--classes", "0"], ["frobnicate"]):
        with pytest.raises(SystemExit) as caught:
            data_cli.main(bad)
        assert caught.value.code == 2
