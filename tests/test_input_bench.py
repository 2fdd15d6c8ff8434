"""The input-pipeline benchmark (bench/input_pipeline.py): its JPEGs, arithmetic, cache and command."""
import importlib.util
import io
import json
import os
import sys

import numpy as np
import pytest

from helpers.running import REPO, run

SCRIPT = os.path.join(REPO, "bench", "input_pipeline.py")


def _load_bench():
    spec = importlib.util.spec_from_file_location("input_pipeline_bench", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def _decoded_size(jpeg):
    from PIL import Image

    with Image.open(io.BytesIO(jpeg)) as image:
        return image.size, image.mode


def test_generated_jpegs_are_imagenet_sized():
    rng = np.random.default_rng(5)
    jpegs = [bench.encode_jpeg(bench.natural_image(rng, 375, 500), 90) for _ in range(6)]
    assert all(_decoded_size(jpeg) == ((500, 375), "RGB") for jpeg in jpegs)
    mean_kb = np.mean([len(jpeg) for jpeg in jpegs]) / 1000
    assert 95 <= mean_kb <= 125, mean_kb


def test_generated_images_are_smooth_like_photos_not_noise():
    # Neighbouring pixels of a photo are strongly correlated (about 0.9); those of random noise are not.
    image = bench.natural_image(np.random.default_rng(7), 375, 500).astype(float)
    left, right = image[:, :-1].ravel(), image[:, 1:].ravel()
    assert np.corrcoef(left, right)[0, 1] > 0.75
    assert 20 < image.std() < 90  # neither flat nor saturated


def test_generated_images_differ_and_follow_the_seed():
    first = bench.natural_image(np.random.default_rng(1), 60, 80)
    again = bench.natural_image(np.random.default_rng(1), 60, 80)
    other = bench.natural_image(np.random.default_rng(2), 60, 80)
    assert first.shape == (60, 80, 3) and first.dtype == np.uint8
    assert np.array_equal(first, again)
    assert np.abs(first.astype(int) - other.astype(int)).mean() > 10


def test_cores_per_gpu_and_ratio_arithmetic():
    assert bench.cores_per_gpu_needed(3000, 250) == pytest.approx(12.0)
    assert bench.cores_per_gpu_needed(2500, 400) == pytest.approx(6.25)
    assert bench.ratio(240, 300) == pytest.approx(0.8)
    assert bench.shape_cores_per_gpu(128, 8) == 16
    with pytest.raises(ValueError, match="per core"):
        bench.cores_per_gpu_needed(2500, 0)
    with pytest.raises(ValueError, match="decode rate"):
        bench.ratio(100, 0)


def test_tables_show_the_projection_and_the_ratio():
    cores = "\n".join(bench.cores_table(200.0, targets=(2500, 3000)))
    assert "| 2,500 | 12.5 | 13 | 16 | 78% |" in cores
    assert "| 3,000 | 15.0 | 15 | 16 | 94% |" in cores
    assert "projected" in cores
    spread = bench.Spread.of([90.0, 110.0, 100.0, 500.0])
    assert (spread.median, spread.low, spread.high) == (105.0, 90.0, 500.0)
    decode, pipeline = bench.Spread.of([100.0, 120.0, 110.0]), bench.Spread.of([88.0])
    rates = bench.rate_table([("decode", decode, decode), ("pipeline", pipeline, bench.Spread.of([50.0]))],
                             decode)
    assert rates[-2] == "| decode | 110.0 | 100.0 | 120.0 | 110.0 | 1.00 |"
    assert rates[-1] == "| pipeline | 88.0 | 88.0 | 88.0 | 50.0 | 0.80 |"


def test_dataset_is_generated_once_then_reused_and_a_foreign_one_refused(tmp_path):
    spec = bench.PhotoSpec(images=3, height=30, width=40, shards=2)
    info, cached = bench.cached_dataset(spec, str(tmp_path / "ds"))
    assert not cached and info.train_records == 3 and len(info.train_files) == 2
    mean_bytes, smallest, largest, shapes = bench.jpeg_stats(info)
    assert shapes == [(30, 40)] and smallest <= mean_bytes <= largest
    again, cached = bench.cached_dataset(spec, str(tmp_path / "ds"))
    assert cached and again.train_files == info.train_files
    with pytest.raises(bench.BenchError, match="--data-dir .* another dataset"):
        bench.cached_dataset(bench.PhotoSpec(images=4, height=30, width=40, shards=2), str(tmp_path / "ds"))


def test_both_pipelines_yield_what_they_should(tmp_path):
    info, _ = bench.cached_dataset(bench.PhotoSpec(images=4, height=30, width=40, shards=2), str(tmp_path))
    images, labels = next(iter(bench.training_pipeline(info, 2)))
    assert images.shape == (2, 224, 224, 3) and labels.shape == (2,)
    decoded, _ = next(iter(bench.decode_only_pipeline(info, 3)))
    assert decoded.shape == (3, 30, 40, 3)
    sample = bench.time_batches(lambda: bench.decode_only_pipeline(info, 2), bench.Timing(2, 1, 2, 1))
    assert sample.cpu > 0 and sample.wall > 0


def test_command_measures_both_pipelines_on_one_core(tmp_path):
    out = tmp_path / "figures.json"
    args = [sys.executable, SCRIPT, "--images", "8", "--batch", "4", "--warmup", "1", "--batches", "2",
            "--rounds", "2", "--data-dir", str(tmp_path / "ds"), "--json", str(out), "--compare-with", "HEAD"]
    result = run(args, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "(generated); pinned to core" in result.stdout
    figures = json.loads(out.read_text())
    assert [len(figures["samples"][name]) for name in ("decode", "pipeline", "baseline")] == [2, 2, 2]
    assert figures["labels"]["baseline"] == "suite training pipeline at HEAD"
    cpu = figures["cpu"]
    assert figures["ratio"] == pytest.approx(cpu["pipeline"]["median"] / cpu["decode"]["median"])
    needed = figures["cores_per_gpu_needed"]
    assert needed["3000"] == pytest.approx(3000 / cpu["pipeline"]["median"])
    assert (figures["width"], figures["height"]) == (500, 375)
    assert 80_000 < figures["jpeg_mean_bytes"] < 140_000
    assert f"{figures['ratio']:.2f}" in result.stdout and "projected" in result.stdout


@pytest.mark.parametrize("flags, named", [(["--core", "9999"], "--core 9999"),
                                          (["--data-dir", SCRIPT], "--data-dir"),
                                          (["--compare-with", "no-such-revision"], "--compare-with"),
                                          (["--json", "/no/such/folder/out.json"], "--json"),
                                          (["--rounds", "0"], "--rounds")])
def test_bad_flags_are_one_line_errors(flags, named):
    result = run([sys.executable, SCRIPT, *flags], timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert named in lines[-1], result.stderr
    assert "Traceback" not in result.stderr
