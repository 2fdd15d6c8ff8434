"""The scaling model: the ring formula against the digest's table, efficiency, BERT-large's size, the CLI."""
import json
import math
import sys

import pytest

from helpers.running import run
from suite.cluster import scaling
from suite.cluster.scaling import Scenario, beside_measured, project, ring_allreduce_seconds

RESNET_FP32 = scaling.gradient_bytes(scaling.model_parameters("resnet50"))
RESNET_FP16 = scaling.gradient_bytes(scaling.model_parameters("resnet50"), fp16=True)
# The digest rounds BERT-large to 340M parameters (1.36 GB fp32, 0.68 GB fp16); its table uses that.
BERT_DIGEST_FP32 = 1.36e9
BERT_DIGEST_FP16 = 0.68e9


# horovod-nccl-rdma.md §5: (gradient bytes, GPUs, GB/s, the table's ms, the table's decimals).
DIGEST_TABLE = [
    (RESNET_FP32, 8, 235, 0.76, 2), (RESNET_FP32, 16, 200, 0.96, 2), (RESNET_FP32, 16, 185, 1.04, 2),
    (RESNET_FP32, 32, 200, 0.99, 2), (RESNET_FP32, 32, 185, 1.07, 2), (RESNET_FP32, 16, 25, 7.7, 1),
    (RESNET_FP16, 8, 235, 0.38, 2), (RESNET_FP16, 16, 200, 0.48, 2), (RESNET_FP16, 16, 185, 0.52, 2),
    (RESNET_FP16, 32, 200, 0.50, 2), (RESNET_FP16, 32, 185, 0.54, 2), (RESNET_FP16, 16, 25, 3.8, 1),
    (RESNET_FP16, 16, 12.5, 7.7, 1),
    (BERT_DIGEST_FP32, 8, 235, 10.1, 1), (BERT_DIGEST_FP32, 16, 200, 12.8, 1),
    (BERT_DIGEST_FP32, 16, 185, 13.8, 1), (BERT_DIGEST_FP32, 32, 200, 13.2, 1),
    (BERT_DIGEST_FP32, 32, 185, 14.2, 1), (BERT_DIGEST_FP32, 16, 25, 102, 0),
    (BERT_DIGEST_FP32, 16, 12.5, 204, 0),
    (BERT_DIGEST_FP16, 8, 235, 5.1, 1), (BERT_DIGEST_FP16, 16, 200, 6.4, 1),
    (BERT_DIGEST_FP16, 16, 185, 6.9, 1), (BERT_DIGEST_FP16, 32, 200, 6.6, 1),
    (BERT_DIGEST_FP16, 32, 185, 7.1, 1), (BERT_DIGEST_FP16, 16, 25, 51, 0),
    (BERT_DIGEST_FP16, 16, 12.5, 102, 0),
]
# Left out: ResNet-50 fp32 over one 12.5 GB/s NIC, which the digest gives as 15.4 ms; the formula
# gives 1.875 * 102.228 MB / 12.5 GB/s = 15.33 ms.


@pytest.mark.parametrize("nbytes, gpus, gbps, table_ms, decimals", DIGEST_TABLE)
def test_ring_formula_reproduces_the_digest_table(nbytes, gpus, gbps, table_ms, decimals):
    assert round(ring_allreduce_seconds(nbytes, gpus, gbps) * 1e3, decimals) == pytest.approx(table_ms)


def test_ring_formula_by_hand():
    # ResNet-50 fp32 over 16 GPUs at 200 GB/s: 2 * 15/16 * 102,228,128 B / 200e9 B/s = 0.958 ms.
    assert RESNET_FP32 == 102_228_128
    expected = 1.875 * 102_228_128 / 200e9
    assert ring_allreduce_seconds(RESNET_FP32, 16, 200) == pytest.approx(expected, rel=1e-15)
    assert ring_allreduce_seconds(RESNET_FP32, 16, 200) * 1e3 == pytest.approx(0.9584, abs=1e-4)
    assert ring_allreduce_seconds(RESNET_FP32, 1, 200) == 0.0


def test_bert_large_parameter_count_from_its_config():
    # 335,141,888 is the encoder with pooler (the usual BertModel figure); the heads add 1,084,220.
    from models.bert.size import BERT_LARGE_SHAPE, parameter_count
    assert parameter_count(**BERT_LARGE_SHAPE, heads=False) == 335_141_888
    # The scaling model finds the count through the benchmark's description, by folder or MLPerf name.
    assert scaling.model_parameters("bert") == 336_226_108
    assert scaling.model_parameters("resnet50") == scaling.model_parameters("resnet") == 25_557_032
    assert scaling.gradient_bytes(scaling.model_parameters("bert")) == 1_344_904_432
    assert scaling.model_parameters("no-such-model") is None
    # BERT-base (h 768, 12 layers, 3072) as a second check of the formula: 109,482,240 without heads.
    assert parameter_count(768, 12, 3072, 30522, 512, 2, heads=False) == 109_482_240


def resnet(**changes):
    values = dict(model="resnet50", per_gpu_throughput=2400.0, per_gpu_batch=256, gradient_bytes=RESNET_FP32,
                  busbw_gbps=185.0, nvlink_busbw_gbps=235.0, gpus_per_node=8, overlap=0.0)
    values.update(changes)
    return Scenario(**values)


def test_projection_by_hand():
    projection = project(resnet(busbw_gbps=200.0, overlap=0.5), gpus=(8, 16, 32))
    compute = 256 / 2400
    steps = {}
    for gpus, link, gbps in ((8, "nvlink", 235.0), (16, "network", 200.0), (32, "network", 200.0)):
        point = projection.point(gpus)
        t = 2 * (gpus - 1) / gpus * RESNET_FP32 / (gbps * 1e9)
        steps[gpus] = compute + 0.5 * t
        assert (point.link, point.bandwidth_gbps, point.nodes) == (link, gbps, gpus // 8)
        assert point.allreduce_ms == pytest.approx(t * 1e3)
        assert point.exposed_ms == pytest.approx(0.5 * t * 1e3)
        assert point.step_ms == pytest.approx(steps[gpus] * 1e3)
        assert point.samples_per_second == pytest.approx(gpus * 256 / steps[gpus])
    assert projection.point(16).efficiency == pytest.approx(steps[8] / steps[16])
    assert projection.point(32).speedup == pytest.approx(4 * steps[8] / steps[32])


def test_efficiency_is_one_at_the_base_and_falls_with_exposed_communication():
    points = project(resnet(), gpus=(32, 8, 16)).points
    assert [p.gpus for p in points] == [8, 16, 32]
    assert points[0].efficiency == 1.0 and points[0].speedup == 1.0
    assert points[0].efficiency > points[1].efficiency > points[2].efficiency
    # A slower network exposes more communication and costs efficiency.
    slow = project(resnet(busbw_gbps=12.5)).point(32)
    assert slow.exposed_ms > points[2].exposed_ms and slow.efficiency < points[2].efficiency
    # More overlap hides more of it.
    assert project(resnet(overlap=0.5)).point(32).efficiency > points[2].efficiency


def test_full_overlap_gives_perfect_scaling():
    for point in project(resnet(overlap=1.0), gpus=(1, 8, 16, 32)).points:
        assert point.exposed_ms == 0.0
        assert point.efficiency == pytest.approx(1.0, rel=1e-12)
        assert point.speedup == pytest.approx(point.gpus, rel=1e-12)


def test_overlap_cannot_hide_more_than_the_compute():
    # 1 sample at 1e6 samples/s is 1 us of compute; over 12.5 GB/s the allreduce takes ~16 ms.
    point = project(resnet(per_gpu_throughput=1e6, per_gpu_batch=1, busbw_gbps=12.5, overlap=1.0)).point(16)
    assert point.exposed_ms == pytest.approx(point.allreduce_ms - point.compute_ms)
    assert point.exposed_ms > 0


@pytest.mark.parametrize("changes, word", [({"overlap": 1.5}, "overlap"), ({"busbw_gbps": 0.0}, "busbw_gbps"),
                                           ({"per_gpu_batch": 0}, "per_gpu_batch"),
                                           ({"per_gpu_throughput": math.nan}, "per_gpu_throughput")])
def test_bad_scenario_is_refused(changes, word):
    with pytest.raises(ValueError, match=word):
        project(resnet(**changes))


def test_markdown_labels_every_figure_projected():
    text = scaling.format_markdown(project(resnet()))
    assert "not measured" in text
    header = [cell.strip() for cell in text.splitlines()[2].strip("|").split("|")]
    computed = [cell for cell in header if cell not in ("GPUs", "nodes", "allreduce link")]
    assert len(computed) == 7 and all(cell.startswith("projected") for cell in computed)
    assert "| 16 | 2 | network (185 GB/s) |" in text


def test_beside_measured_compares_like_with_like():
    projection = project(resnet(), gpus=(8, 16, 32))
    measured = [{"gpus": 8, "samples_per_second": 18000.0}, {"gpus": 16, "samples_per_second": 34000.0},
                {"gpus": 16, "samples_per_second": 36000.0}, {"gpus": 4, "samples_per_second": 9100.0}]
    rows = {row.gpus: row for row in beside_measured(projection, measured)}
    assert sorted(rows) == [4, 8, 16, 32]
    # The base is the smallest measured scale (4), for both columns.
    assert rows[4].measured_efficiency == 1.0 and rows[4].projected_efficiency == 1.0
    assert rows[16].measured_samples_per_second == 35000.0 and rows[16].measured_runs == 2
    assert rows[16].measured_efficiency == pytest.approx(35000 / 9100 * 4 / 16)
    assert rows[16].measured_over_projected == pytest.approx(35000 / projection.point(16).samples_per_second)
    assert rows[32].measured_samples_per_second is None and rows[32].measured_efficiency is None
    assert rows[32].projected_samples_per_second == projection.point(32).samples_per_second
    table = scaling.format_beside_markdown(list(rows.values()))
    assert "projected efficiency" in table and "measured efficiency" in table and "—" in table
    with pytest.raises(ValueError, match="samples_per_second"):
        beside_measured(projection, [{"gpus": 8}])


def test_cli_prints_the_projection(tmp_path):
    measured = tmp_path / "measured.json"
    measured.write_text(json.dumps([{"gpus": 8, "samples_per_second": 18000}]))
    out = tmp_path / "projection.json"
    result = run([sys.executable, "-m", "suite.cluster.scaling", "--model", "resnet50",
                  "--per-gpu-throughput",
                  "2400", "--per-gpu-batch", "256", "--busbw", "185", "--nvlink-busbw", "235", "--overlap",
                  "0.5", "--gpus", "8", "16", "32", "--fp16-gradients", "--measured", str(measured),
                  "--json", str(out)], timeout=60)
    assert result.returncode == 0, result.stderr
    assert "projected step (ms)" in result.stdout and "measured throughput" in result.stdout
    assert "51.1 MB (fp16)" in result.stdout
    data = json.loads(out.read_text())
    assert [p["gpus"] for p in data["points"]] == [8, 16, 32]
    assert data["scenario"]["gradient_bytes"] == RESNET_FP16


@pytest.mark.parametrize("args, culprit", [(["--overlap", "2"], "overlap"), (["--gpus", "0"], "GPU counts"),
                                           (["--model", "vgg"], "--model"), (["--busbw", "fast"], "--busbw")])
def test_cli_bad_input_is_one_line(args, culprit):
    base = ["--model", "resnet50", "--per-gpu-throughput", "2400", "--per-gpu-batch", "256", "--busbw", "185"]
    result = run([sys.executable, "-m", "suite.cluster.scaling", *base, *args], timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and culprit in lines[0], result.stderr


# ---- strong and weak scaling, recomputed by hand ----

def cpu_sweep(**changes):
    """A 1 -> 2 process CPU sweep: 82.68 samples/s on one process at batch 16, a 94 MB gradient."""
    values = dict(model="resnet50", per_gpu_throughput=82.68, per_gpu_batch=16, gradient_bytes=94_000_000,
                  busbw_gbps=1.5, nvlink_busbw_gbps=1.5, gpus_per_node=2, overlap=0.0)
    values.update(changes)
    return Scenario(**values)


def test_strong_scaling_splits_the_global_batch():
    projection = project(cpu_sweep(global_batch=16), gpus=(1, 2))
    one, two = projection.point(1), projection.point(2)
    compute_1 = 16 / 82.68
    compute_2 = 8 / 82.68  # the global batch of 16 split over 2 ranks
    ring = 2 * (2 - 1) / 2 * 94_000_000 / 1.5e9
    assert (one.batch, two.batch) == (16, 8)
    assert one.step_ms == pytest.approx(compute_1 * 1e3) and one.allreduce_ms == 0.0
    assert two.compute_ms == pytest.approx(compute_2 * 1e3)
    assert two.step_ms == pytest.approx((compute_2 + ring) * 1e3)
    # The sweep trains 16 samples per step at both scales.
    assert two.samples_per_second == pytest.approx(16 / (compute_2 + ring))
    assert two.efficiency == pytest.approx((16 / (compute_2 + ring)) / (82.68 * 2))
    # Weak-scaling arithmetic (2 x 16 samples per step) would claim far more: c / (c + t) > c / (c + 2t).
    assert two.efficiency == pytest.approx(compute_1 / (compute_1 + 2 * ring))
    assert two.efficiency < compute_1 / (compute_1 + ring) - 0.1


def test_weak_scaling_keeps_the_per_gpu_batch():
    projection = project(cpu_sweep(), gpus=(1, 2, 4))
    compute = 16 / 82.68
    for gpus in (2, 4):
        ring = 2 * (gpus - 1) / gpus * 94_000_000 / 1.5e9
        point = projection.point(gpus)
        assert point.batch == 16 and point.compute_ms == pytest.approx(compute * 1e3)
        assert point.samples_per_second == pytest.approx(gpus * 16 / (compute + ring))
        assert point.efficiency == pytest.approx(compute / (compute + ring))


def test_strong_scaling_of_the_closed_presets():
    # 3264 images: 408, 204 and 102 per GPU at 8, 16 and 32 GPUs.
    projection = project(resnet(per_gpu_batch=408, global_batch=3264), gpus=(8, 16, 32))
    assert [p.batch for p in projection.points] == [408, 204, 102]
    for point in projection.points:
        ring = ring_allreduce_seconds(RESNET_FP32, point.gpus, point.bandwidth_gbps)
        assert point.step_ms == pytest.approx((point.batch / 2400 + ring) * 1e3)
        assert point.samples_per_second == pytest.approx(3264 / (point.batch / 2400 + ring))


def test_the_formula_names_the_batch_rule():
    strong = scaling.formula(cpu_sweep(global_batch=16))
    assert strong[0] == "b(N) = 16 / N (strong scaling: fixed global batch)"
    assert "S = 94,000,000 bytes" in strong[2] and "no latency term" in strong[2]
    assert scaling.formula(cpu_sweep())[0] == "b(N) = 16 (weak scaling: fixed per-GPU batch)"
    with pytest.raises(ValueError, match="global_batch"):
        project(cpu_sweep(global_batch=-1))


# ---- the plateau of a measured busbw curve ----

def curve(pairs):
    return [{"bytes": nbytes, "busbw_gbps": busbw} for nbytes, busbw in pairs]


def test_a_latency_floor_never_reaches_a_plateau():
    # ~1.1 ms at every size from 1 KiB to 1 MiB: busbw doubles with each size.
    rows = curve((1 << k, (1 << k) / 1.1e-3 / 1e9) for k in range(10, 21))
    found = scaling.plateau(rows)
    assert not found.reached and found.sizes == (1 << 20,)
    assert found.busbw_gbps == rows[-1]["busbw_gbps"] and found.rise == pytest.approx(1.0)
    assert scaling.max_bytes_for(94_000_000, 1 << 20) == 128 << 20


def test_a_flat_top_is_the_plateau():
    rows = curve([(1 << 20, 0.4), (4 << 20, 1.2), (16 << 20, 1.9), (64 << 20, 2.0), (256 << 20, 2.05)])
    found = scaling.plateau(rows)
    assert found.reached and found.sizes == (16 << 20, 64 << 20, 256 << 20)
    assert found.busbw_gbps == 2.0 and found.largest_bytes == 256 << 20
    # One rank moves nothing over a link: no plateau to read.
    assert scaling.plateau(curve([(1024, 0.0), (2048, 0.0)])) is None


def test_cli_projects_strong_scaling_at_a_global_batch():
    result = run([sys.executable, "-m", "suite.cluster.scaling", "--model", "resnet50",
                  "--per-gpu-throughput", "2400", "--per-gpu-batch", "408", "--global-batch", "3264",
                  "--busbw", "185", "--gpus", "8", "16"],
                 timeout=60)
    assert result.returncode == 0, result.stderr
    assert "strong scaling at global batch 3264" in result.stdout
    expected = project(resnet(per_gpu_batch=408, global_batch=3264), gpus=(8, 16)).point(16)
    assert f"| {expected.samples_per_second:,.0f} |" in result.stdout
