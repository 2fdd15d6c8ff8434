"""ResNet-50 input pipeline per CPU core: the suite's MLPerf training preprocessing against JPEG decode alone.

Generates (once, then cached) TFRecords in the suite's ImageNet format holding ImageNet-sized JPEGs,
pins this process to one CPU core before TensorFlow loads (so TensorFlow and tf.data size their thread
pools for one core), and times, round after round, alternating:

  (a) the training input pipeline exactly as a training run builds it
      (models/resnet50/data.py train_dataset: read, shuffle, parse, fused decode-and-crop of the
      distorted box, flip, bilinear resize to 224, mean subtraction, batch, prefetch);
  (b) JPEG decode alone of the same records (parse + tf.io.decode_jpeg of the whole image, batch).

It prints each one's images per CPU-second of the process (the cost per core, which other jobs on
a shared machine barely move) and its wall-clock images/s on the core, median and spread over the
rounds, warm-up excluded; their ratio; and the cores per GPU a training input pipeline would need at
given GPU rates next to a BM.GPU.GM4.8's cores per GPU: a projection, since this CPU is not that one.
`--compare-with REV` adds the training pipeline of models/resnet50/data.py as it was at a git revision.

    .venv/bin/python bench/input_pipeline.py [--rounds 7] [--compare-with REV] [--data-dir DIR] [--json F]
"""
import argparse
import dataclasses
import importlib.util
import io
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One GPU's ResNet-50 training rates the input pipeline must keep up with (the project's targets).
TARGET_RATES = (2500, 3000)
# OCI BM.GPU.GM4.8 (= BM.GPU.A100-v2.8): 128 OCPUs (an OCPU is one physical core) and 8 A100-80GB,
# https://docs.oracle.com/en-us/iaas/Content/Compute/References/computeshapes.htm (bare metal GPU shapes).
GM4_CORES, GM4_GPUS = 128, 8
TARGET_RATIO = 0.8  # the pipeline should run at >= 0.8 of decode alone


class BenchError(Exception):
    """Bad input, described in one line that names the flag or file at fault."""


@dataclasses.dataclass(frozen=True)
class PhotoSpec:
    """What the generated dataset holds; every field is part of its cache key."""

    images: int = 256
    height: int = 375
    width: int = 500
    quality: int = 90
    shards: int = 8
    seed: int = 0
    version: int = 2  # bump when natural_image() changes, so an old cache is not reused

    def cache_name(self) -> str:
        return (f"rn50-input-bench-v{self.version}-{self.images}x{self.width}x{self.height}"
                f"-q{self.quality}-s{self.shards}-seed{self.seed}")


@dataclasses.dataclass(frozen=True)
class Timing:
    """How much to time: batches of `batch` images, `warmup` batches untimed, then `batches` per round."""

    batch: int = 64
    warmup: int = 4
    batches: int = 8
    rounds: int = 7


@dataclasses.dataclass(frozen=True)
class Spread:
    """The median of some rates and their range."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values):
        return cls(statistics.median(values), min(values), max(values))


# ---------------------------------------------------------------------------------------------------------
# ImageNet-sized JPEGs


def natural_image(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """A photo-like RGB image: 1/f texture (natural images' spectrum), a colour gradient, soft-edged
    shapes and a little sensor noise. Random noise alone would compress far worse than a photo."""
    texture = _one_over_f_field(rng, height, width)
    rows = np.linspace(0.0, 1.0, height)[:, None, None]
    cols = np.linspace(0.0, 1.0, width)[None, :, None]
    image = (120.0 + rng.uniform(-30, 30, 3) + rng.uniform(44, 58) * texture
             + rows * rng.uniform(-60, 60, 3) + cols * rng.uniform(-60, 60, 3))
    for _ in range(rng.integers(3, 7)):
        _blend_ellipse(rng, image, rows[..., 0], cols[..., 0])
    image += rng.normal(0.0, 3.0, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def _one_over_f_field(rng, height, width):
    """Three correlated channels of noise whose amplitude falls as 1/frequency, normalised to unit std."""
    freq = np.hypot(np.fft.fftfreq(height)[:, None], np.fft.rfftfreq(width)[None, :])
    freq[0, 0] = 1.0
    amplitude = 1.0 / freq
    amplitude[0, 0] = 0.0

    def spectrum():
        return rng.normal(size=amplitude.shape) + 1j * rng.normal(size=amplitude.shape)

    shared = spectrum()  # colour channels of a photo move together
    channels = [np.fft.irfft2((shared + 0.5 * spectrum()) * amplitude, s=(height, width)) for _ in range(3)]
    field = np.stack(channels, axis=-1)
    return (field - field.mean()) / field.std()


def _blend_ellipse(rng, image, rows, cols):
    centre_y, centre_x = rng.uniform(0, 1, 2)
    radius_y, radius_x = rng.uniform(0.05, 0.3, 2)
    inside = ((rows - centre_y) / radius_y) ** 2 + ((cols - centre_x) / radius_x) ** 2 < 1.0
    image[inside] = 0.5 * image[inside] + 0.5 * rng.uniform(0, 255, 3)


def encode_jpeg(pixels: np.ndarray, quality: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=quality)
    return buffer.getvalue()


def photo_records(spec: PhotoSpec) -> list[bytes]:
    """`spec.images` serialized tf.train.Examples in the suite's ImageNet layout, without boxes as in the
    reference conversion (so training crops are taken against the whole image)."""
    from models.resnet50 import prepare

    rng = np.random.default_rng(spec.seed)
    records = []
    for i in range(spec.images):
        encoded = encode_jpeg(natural_image(rng, spec.height, spec.width), spec.quality)
        label = 1 + i % 1000
        records.append(prepare._example(encoded, label, f"n{label:08d}", f"bench_{i}.JPEG", spec.height,
                                        spec.width))
    return records


def cached_dataset(spec: PhotoSpec, data_dir: str):
    """The dataset of `spec` in `data_dir`, generated there first if it is not there yet."""
    from models.resnet50 import data, prepare

    if os.path.exists(os.path.join(data_dir, data.METADATA_FILE)):
        info = data.dataset_info(data_dir)
        meta = data._read_metadata(data_dir)
        if meta.get("bench_spec") != dataclasses.asdict(spec):
            raise BenchError(f"--data-dir {data_dir} holds another dataset than this one: "
                             f"use an empty or new directory")
        return info, True
    records = photo_records(spec)
    # One small validation shard: the suite's dataset layout requires one; the bench never reads it.
    info = prepare.write_dataset(data_dir, records, records[:1], spec.shards, 1, num_classes=1000,
                                 source="input pipeline bench", bounding_boxes=False,
                                 bench_spec=dataclasses.asdict(spec))
    return info, False


def jpeg_stats(info):
    """(mean bytes, smallest, largest, the distinct (height, width) pairs) of the training JPEGs."""
    import tensorflow as tf
    from models.resnet50 import data

    sizes, shapes = [], set()
    for record in tf.data.TFRecordDataset(list(info.train_files)):
        image_bytes, _, _ = data.parse_record(record)
        sizes.append(len(image_bytes.numpy()))
        height, width, _ = tf.image.extract_jpeg_shape(image_bytes).numpy()
        shapes.add((int(height), int(width)))
    return statistics.mean(sizes), min(sizes), max(sizes), sorted(shapes)


# ---------------------------------------------------------------------------------------------------------
# The pipelines and their timing


def training_pipeline(info, batch, data_module=None, seed=0):
    """The training dataset exactly as models/resnet50/workload.py builds it for one rank at 224 px
    (`data_module`: another version of models/resnet50/data.py, see data_module_at)."""
    import tensorflow as tf
    from models.resnet50 import data

    return (data_module or data).train_dataset(info, batch, image_size=224, num_classes=1000, rank=0,
                                               world_size=1, seed=seed, dtype=tf.float32)


def decode_only_pipeline(info, batch):
    """The same records, parsed and fully decoded, nothing else (all images share one size, so they batch)."""
    import tensorflow as tf
    from models.resnet50 import data

    def decode(record):
        image_bytes, label, _ = data.parse_record(record)
        return tf.io.decode_jpeg(image_bytes, channels=3), label

    records = tf.data.TFRecordDataset(list(info.train_files), buffer_size=8 * 1024 * 1024).repeat()
    images = records.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    return images.batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


@dataclasses.dataclass(frozen=True)
class Sample:
    """One timed round of one pipeline."""

    cpu: float
    """Images per CPU-second of this process, all its threads: the cost per core, which other jobs on
    the same core do not change."""
    wall: float
    """Images per wall-clock second on the one core: lower than `cpu` when others share the core."""


def time_batches(make_dataset, timing: Timing) -> Sample:
    """A fresh iterator, `timing.warmup` batches untimed, then `timing.batches` timed.

    Each round gets its own iterator, dropped afterwards, so no pipeline keeps working in the
    background while another one is timed."""
    iterator = iter(make_dataset())
    for _ in range(timing.warmup):
        next(iterator)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(timing.batches):
        next(iterator)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    del iterator
    images = timing.batches * timing.batch
    return Sample(images / cpu, images / wall)


def measure(variants, timing: Timing, progress=print) -> dict:
    """Times each (name, dataset factory) once per round, alternating, so slow spells of a shared
    machine fall on all of them alike; returns name -> the Samples of every round."""
    samples = {name: [] for name, _ in variants}
    for round_number in range(1, timing.rounds + 1):
        for name, make_dataset in variants:
            samples[name].append(time_batches(make_dataset, timing))
        progress(f"round {round_number}/{timing.rounds}, images per CPU-second: "
                 + ", ".join(f"{name} {found[-1].cpu:.1f}" for name, found in samples.items()))
    return samples


def data_source_at(revision: str) -> str:
    """The text of models/resnet50/data.py at a git revision of this repository."""
    shown = subprocess.run(["git", "-C", REPO, "show", f"{revision}:models/resnet50/data.py"],
                           capture_output=True, text=True)
    if shown.returncode != 0:
        reason = (shown.stderr.strip().splitlines() or ["git failed"])[-1]
        raise BenchError(f"--compare-with {revision}: {reason}")
    return shown.stdout


def data_module_at(revision: str, source: str, work_dir: str):
    """Loads `source` (models/resnet50/data.py at `revision`) as a module of its own, beside today's."""
    path = os.path.join(work_dir, "data_at_revision.py")
    with open(path, "w") as handle:
        handle.write(source)
    spec = importlib.util.spec_from_file_location(f"resnet50_data_at_{revision}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------
# Arithmetic


def ratio(pipeline_rate: float, decode_rate: float) -> float:
    """The training pipeline's rate as a fraction of decode alone."""
    if decode_rate <= 0:
        raise ValueError(f"decode rate must be positive, got {decode_rate}")
    return pipeline_rate / decode_rate


def cores_per_gpu_needed(gpu_rate: float, per_core_rate: float) -> float:
    """CPU cores one GPU needs for its input pipeline, if the rate per core scales linearly."""
    if per_core_rate <= 0:
        raise ValueError(f"rate per core must be positive, got {per_core_rate}")
    return gpu_rate / per_core_rate


def shape_cores_per_gpu(cores: int = GM4_CORES, gpus: int = GM4_GPUS) -> float:
    return cores / gpus


# ---------------------------------------------------------------------------------------------------------
# Report


def rate_table(rows, decode_cpu: Spread) -> list[str]:
    """rows: (label, CPU Spread, wall Spread), the decode-alone row among them."""
    lines = ["| pipeline (one core) | images per CPU-second, median | min | max | wall images/s, median "
             "| vs decode alone |",
             "|---|---:|---:|---:|---:|---:|"]
    for label, cpu, wall in rows:
        lines.append(f"| {label} | {cpu.median:.1f} | {cpu.low:.1f} | {cpu.high:.1f} | {wall.median:.1f} | "
                     f"{ratio(cpu.median, decode_cpu.median):.2f} |")
    return lines


def cores_table(per_core_rate: float, targets=TARGET_RATES) -> list[str]:
    available = shape_cores_per_gpu()
    lines = ["| GPU rate (images/s) | cores per GPU needed (projected) | whole cores | "
             "BM.GPU.GM4.8 cores per GPU | share of them |",
             "|---:|---:|---:|---:|---:|"]
    for target in targets:
        needed = cores_per_gpu_needed(target, per_core_rate)
        lines.append(f"| {target:,} | {needed:.1f} | {math.ceil(needed)} | {available:.0f} | "
                     f"{needed / available:.0%} |")
    return lines


def report(spec, stats, samples, labels, timing) -> dict:
    """Prints the tables; returns the figures for --json. `labels`: variant name -> table label."""
    cpu = {name: Spread.of([s.cpu for s in found]) for name, found in samples.items()}
    wall = {name: Spread.of([s.wall for s in found]) for name, found in samples.items()}
    found = ratio(cpu["pipeline"].median, cpu["decode"].median)
    mean_bytes, smallest, largest, shapes = stats
    dims = ", ".join(f"{w} x {h}" for h, w in shapes)
    lines = [f"{spec.images} distinct JPEGs, {dims} px, quality {spec.quality}, "
             f"mean {mean_bytes / 1000:.1f} KB ({smallest / 1000:.1f}-{largest / 1000:.1f} KB); "
             f"batches of {timing.batch}, {timing.warmup} untimed, then {timing.batches} timed per round, "
             f"{timing.rounds} rounds; one core", "",
             *rate_table([(labels[name], cpu[name], wall[name]) for name in samples], cpu["decode"]), "",
             f"target >= {TARGET_RATIO} of decode alone: {'met' if found >= TARGET_RATIO else 'NOT met'} "
             f"({found:.2f})", "",
             *cores_table(cpu["pipeline"].median), "",
             "Projected: cores per GPU = GPU rate / this core's training-pipeline images per CPU-second; "
             "another CPU (BM.GPU.GM4.8: AMD EPYC) runs at another rate per core."]
    print("\n".join(lines))
    return {"images": spec.images, "height": spec.height, "width": spec.width, "quality": spec.quality,
            "jpeg_mean_bytes": mean_bytes, "jpeg_min_bytes": smallest, "jpeg_max_bytes": largest,
            "timing": dataclasses.asdict(timing), "labels": labels,
            "samples": {name: [dataclasses.asdict(s) for s in found] for name, found in samples.items()},
            "cpu": {name: dataclasses.asdict(s) for name, s in cpu.items()},
            "wall": {name: dataclasses.asdict(s) for name, s in wall.items()},
            "ratio": found, "target_ratio": TARGET_RATIO,
            "cores_per_gpu_needed": {str(t): cores_per_gpu_needed(t, cpu["pipeline"].median)
                                     for t in TARGET_RATES},
            "gm4_cores_per_gpu": shape_cores_per_gpu()}


# ---------------------------------------------------------------------------------------------------------
# Command line


def pin_to_one_core(core):
    """Pins this process to `core` (default: the last one it may use); must run before TensorFlow loads."""
    allowed = sorted(os.sched_getaffinity(0))
    core = allowed[-1] if core is None else core
    if core not in allowed:
        raise BenchError(f"--core {core} is not one of this process's cores {allowed}")
    os.sched_setaffinity(0, {core})
    return core


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="where the generated TFRecords are cached "
                        "(default: a folder named after the dataset in the temp directory)")
    parser.add_argument("--images", type=int, default=PhotoSpec.images, help="distinct JPEGs to generate")
    parser.add_argument("--batch", type=int, default=Timing.batch)
    parser.add_argument("--warmup", type=int, default=Timing.warmup, help="untimed batches per round")
    parser.add_argument("--batches", type=int, default=Timing.batches, help="timed batches per round")
    parser.add_argument("--rounds", type=int, default=Timing.rounds)
    parser.add_argument("--core", type=int, help="the CPU core to pin to (default: the last one allowed)")
    parser.add_argument("--compare-with", metavar="REV",
                        help="also time the training pipeline of models/resnet50/data.py at this git "
                        "revision")
    parser.add_argument("--json", help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    for flag in ("images", "batch", "batches", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be 0 or more, got {args.warmup}")
    return args


def variants(info, batch, baseline=None, revision=None):
    """(name, dataset factory) pairs and their table labels; the baseline is the pipeline at `revision`."""
    chosen = [("decode", lambda: decode_only_pipeline(info, batch)),
              ("pipeline", lambda: training_pipeline(info, batch))]
    labels = {"decode": "JPEG decode alone (parse + decode_jpeg)",
              "pipeline": "suite training pipeline (full MLPerf preprocessing)"}
    if baseline is not None:
        chosen.append(("baseline", lambda: training_pipeline(info, batch, baseline)))
        labels["baseline"] = f"suite training pipeline at {revision}"
    return chosen, labels


def run(args):
    spec = PhotoSpec(images=args.images)
    timing = Timing(args.batch, args.warmup, args.batches, args.rounds)
    data_dir = args.data_dir or os.path.join(tempfile.gettempdir(), spec.cache_name())
    if os.path.exists(data_dir) and not os.path.isdir(data_dir):
        raise BenchError(f"--data-dir {data_dir} is not a directory")
    if args.json and not os.path.isdir(os.path.dirname(os.path.abspath(args.json))):
        raise BenchError(f"--json {args.json}: its folder does not exist")
    baseline_source = data_source_at(args.compare_with) if args.compare_with else None
    core = pin_to_one_core(args.core)
    sys.path.insert(0, REPO)
    from models.resnet50 import data  # TensorFlow loads here, after the pinning

    try:
        info, cached = cached_dataset(spec, data_dir)
    except data.DataError as err:
        raise BenchError(f"--data-dir: {err}") from None
    print(f"dataset: {data_dir} ({'cached' if cached else 'generated'}); pinned to core {core}", flush=True)
    stats = jpeg_stats(info)
    with tempfile.TemporaryDirectory() as work_dir:
        baseline = baseline_source and data_module_at(args.compare_with, baseline_source, work_dir)
        chosen, labels = variants(info, timing.batch, baseline, args.compare_with)
        samples = measure(chosen, timing)
    print()
    result = report(spec, stats, samples, labels, timing)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)


def main(argv=None):
    args = parse_args(argv)
    try:
        run(args)
    except BenchError as err:
        sys.exit(f"input_pipeline: {err}")


if __name__ == "__main__":
    main()
