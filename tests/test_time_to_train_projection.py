"""The projected time to train: by hand on a made folder, against the published pairs (within 10 % of the
larger scale's olympic mean), the per-GPU rate table, and the --from-results command line."""
import json
import math
import sys

import pytest

from helpers.made_logs import run_lines, write_folder
from helpers.published import BERT_64, BERT_8, DELL_32, DELL_8
from helpers.running import run
from suite.cluster import scaling
from suite.cluster import measured_time_to_train
from suite.cluster.results_folder import read_folder
from suite.cluster.scaling import Scenario

RESNET_FP32 = scaling.gradient_bytes(scaling.model_parameters("resnet"))


def template(**changes):
    values = dict(model="resnet50", per_gpu_throughput=1.0, per_gpu_batch=1, gradient_bytes=RESNET_FP32,
                  busbw_gbps=185.0, nvlink_busbw_gbps=235.0, gpus_per_node=8, overlap=0.0)
    values.update(changes)
    return Scenario(**values)


def projected(folder, ruleset, gpus, batch):
    """The projection the command line makes: the benchmark's fp32 gradient, its system's GPUs per node."""
    read = read_folder(folder, ruleset)
    measured = scaling.measured_scale(measured_time_to_train.summarize(read), read.gpus)
    model = read.benchmark
    base = template(model=model, gradient_bytes=scaling.gradient_bytes(scaling.model_parameters(model)),
                    gpus_per_node=read.gpus_per_node)
    return scaling.project_time_to_train(measured, scaling.scenario_for(measured, base), gpus, batch, ruleset)


def test_a_projection_by_hand(tmp_path):
    # Measured: 8 GPUs in one node at global batch 3264 (408 each), 16 epochs of 1,000 samples in 240 s of
    # training, an evaluation of 5 s every 4 epochs from epoch 4, 5 s of other time.
    folder = write_folder(tmp_path, [run_lines()] * 5, nodes=1, per_node=8)
    point = projected(folder, "2.1.0", 32, 13056)
    step_measured = 408 / (16_000 / 240 / 8)
    compute = step_measured - 2 * 7 / 8 * RESNET_FP32 / 235e9  # the one-node allreduce taken out
    step = compute + 2 * 31 / 32 * RESNET_FP32 / 185e9  # 32 GPUs in 4 nodes, 408 each again
    rate = 32 * 408 / step
    assert point.projected_samples_per_second == pytest.approx(rate, rel=1e-12)
    assert point.rcp_target == 45.5  # the RCP record for 13056
    assert point.projected_training_minutes == pytest.approx(45.5 * 1000 / rate / 60, rel=1e-12)
    assert point.projected_evaluation_count == 12  # evaluations at 4, 8, ..., 48: the first past 45.5
    assert point.projected_evaluation_minutes == pytest.approx(12 * 5 / 60 * 8 / 32)
    assert point.projected_other_minutes == pytest.approx(5 / 60)
    expected = point.projected_training_minutes + 12 * 5 / 60 / 4 + 5 / 60
    assert point.projected_minutes == pytest.approx(expected)


def test_compute_rate_inverts_the_model():
    scenario = template(per_gpu_throughput=2400.0, per_gpu_batch=256, busbw_gbps=25.0, overlap=0.3)
    for gpus in (1, 8, 16, 32):
        rate = scaling.project(scenario, [gpus]).point(gpus).samples_per_second
        assert scaling.compute_rate(rate / gpus, 256, gpus, scenario) == pytest.approx(2400.0, rel=1e-12)
    with pytest.raises(ValueError, match="shorter than the modelled allreduce"):
        scaling.compute_rate(1e9, 1, 32, template(busbw_gbps=0.1))


def test_the_rate_depends_on_the_per_gpu_batch_through_the_table():
    table = template(per_gpu_throughput=2000.0, per_gpu_batch=408, rate_table=((102, 1500.0), (408, 2000.0)))
    assert table.rate_at(408) == 2000.0 and table.rate_at(102) == 1500.0
    assert table.rate_at(255) == pytest.approx(1750.0)
    assert table.rate_at(50) == 1500.0 and table.rate_at(1000) == 2000.0  # flat beyond the ends
    # Strong scaling to 32 GPUs shrinks the per-GPU batch to 102: its compute runs at the 102 rate.
    strong = scaling.project(scaling.replace(table, global_batch=3264), [32]).point(32)
    assert strong.compute_ms == pytest.approx(102 / 1500.0 * 1e3)
    with pytest.raises(ValueError, match="rate_table"):
        scaling.project(template(rate_table=((102, 0.0),)))


def published_minutes(folder, ruleset):
    return read_folder(folder, ruleset).olympic_minutes


@pytest.mark.parametrize("small, large, batch", [(DELL_8, DELL_32, 13056), (BERT_8, BERT_64, 3072)],
                         ids=["resnet-dell-weak-scaling-408", "bert-nvidia"])
def test_the_projection_from_the_smaller_scale_lands_within_10_percent_of_the_larger(small, large, batch):
    point = projected(small[0], small[1], large[2], batch)
    published = published_minutes(large[0], large[1])
    assert point.rcp_note is None and point.rcp_source == "record"
    assert abs(point.projected_minutes / published - 1) < 0.10, (point.projected_minutes, published)


def cli(*args, timeout=120):
    return run([sys.executable, "-m", "suite.cluster.scaling", *args], timeout=timeout)


def test_cli_from_results_writes_one_record_per_scale_and_batch(tmp_path):
    out = tmp_path / "projection.json"
    result = cli("--from-results", DELL_8[0], "--ruleset", "1.1.0", "--gpus", "8", "32", "--global-batch",
                 "3264", "13056", "100000", "--json", str(out))
    assert result.returncode == 0, result.stderr
    records = json.loads(out.read_text())
    assert [(r["gpus"], r["global_batch_size"]) for r in records] == [
        (8, 3264), (8, 13056), (8, 100000), (32, 3264), (32, 13056), (32, 100000)]
    weak = records[4]
    terms = ("projected_training_minutes", "projected_evaluation_minutes", "projected_other_minutes")
    assert weak["projected_minutes"] == pytest.approx(sum(weak[term] for term in terms))
    assert weak["rcp_target_epochs"] == 45.5 and weak["rcp_note"] is None
    assert abs(weak["projected_minutes"] / published_minutes(*DELL_32[:2]) - 1) < 0.10
    for key in weak:
        if key.startswith("projected_") and key != "projected_evaluation_count":
            assert key.endswith(("_minutes", "_samples_per_second")), key
    uncovered = records[2]
    assert uncovered["projected_minutes"] is None
    assert uncovered["rcp_note"] == ("no RCP covers global batch 100000; a result at that batch cannot pass "
                                     "the RCP check of a submission")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Projected time to train (not measured)")
    header = [cell.strip() for cell in lines[2].strip("|").split("|")]
    assert all(cell.startswith("projected") for cell in header[4:])
    assert sum("no RCP covers global batch 100000" in text for text in lines) == 1


def test_cli_from_results_without_global_batch_projects_weak_scaling(tmp_path):
    result = cli("--from-results", BERT_8[0], "--gpus", "64", "--fp16-gradients")
    assert result.returncode == 0, result.stderr
    assert "| 64 | 3584 | 56 |" in result.stdout  # 56 per GPU, as measured


@pytest.mark.parametrize("args, culprit", [
    (["--from-results", "/nonexistent/results/x/resnet"], "not an MLPerf results folder"),
    (["--from-results", DELL_8[0], "--per-gpu-throughput", "2400"], "--per-gpu-throughput is not used"),
    (["--from-results", DELL_8[0], "--per-gpu-rate", "204:2800"], "BATCH=SAMPLES_PER_SECOND"),
    (["--from-results", DELL_8[0], "--busbw", "0.001"], "shorter than the modelled allreduce"),
    (["--from-results", DELL_8[0], "--ruleset", "9.9.9"], "unknown ruleset '9.9.9'"),
    (["--per-gpu-throughput", "2400", "--per-gpu-batch", "256"], "required: --busbw"),
    (["--per-gpu-throughput", "2400", "--per-gpu-batch", "256", "--busbw", "185", "--global-batch", "1", "2"],
     "one --global-batch without --from-results"),
    (["--per-gpu-throughput", "2400", "--per-gpu-batch", "256", "--busbw", "185"],
     "give --model (bert, resnet50)"),
])
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, args, culprit):
    out = tmp_path / "projection.json"
    result = cli(*args, "--json", str(out))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and culprit in lines[0], result.stderr
    assert not out.exists()


def test_cli_needs_the_gpu_count_of_a_folder_without_a_system_description(tmp_path):
    folder = write_folder(tmp_path, [run_lines()] * 3, nodes=None)
    result = cli("--from-results", folder, "--gpus", "16")
    assert result.returncode == 2 and "give --source-gpus" in result.stderr
    result = cli("--from-results", folder, "--gpus", "16", "--source-gpus", "8")
    assert result.returncode == 0, result.stderr
    assert math.isfinite(float(result.stdout.splitlines()[-1].strip("|").split("|")[-1].replace(",", "")))


def test_cli_per_gpu_rates_feed_the_table(tmp_path):
    # Strong scaling of Dell's 8-GPU point to 32 GPUs at 3264: 102 per GPU, computing at the given 2,500/s.
    out = tmp_path / "projection.json"
    result = cli("--from-results", DELL_8[0], "--ruleset", "1.1.0", "--gpus", "32", "--global-batch", "3264",
                 "--per-gpu-rate", "102=2500", "--json", str(out))
    assert result.returncode == 0, result.stderr
    step = 102 / 2500 + 2 * 31 / 32 * RESNET_FP32 / 185e9  # 8 nodes of 4 GPUs: across the network
    [record] = json.loads(out.read_text())
    assert record["projected_samples_per_second"] == pytest.approx(32 * 102 / step, rel=1e-12)
    assert "102: 2,500.0" in result.stdout


def test_cli_takes_a_sweeps_measured_rates(tmp_path):
    # A sweep's rates.json: 2,000/s per GPU at 102 per GPU, measured on 8 GPUs (2 of Dell's 4-GPU nodes,
    # so with an allreduce across the network, which the table's compute rate leaves out).
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"points": [{"per_gpu_batch": 102, "gpus": 8,
                                             "samples_per_second_per_gpu": 2000.0}]}))
    out = tmp_path / "projection.json"
    result = cli("--from-results", DELL_8[0], "--ruleset", "1.1.0", "--gpus", "32", "--global-batch", "3264",
                 "--rates", str(rates), "--json", str(out))
    assert result.returncode == 0, result.stderr
    compute = 102 / 2000 - 2 * 7 / 8 * RESNET_FP32 / 185e9
    step = compute + 2 * 31 / 32 * RESNET_FP32 / 185e9
    [record] = json.loads(out.read_text())
    assert record["projected_samples_per_second"] == pytest.approx(32 * 102 / step, rel=1e-12)
    rates.write_text(json.dumps({"points": [{"per_gpu_batch": 102}]}))
    result = cli("--from-results", DELL_8[0], "--gpus", "32", "--rates", str(rates))
    assert result.returncode == 2 and f"--rates {rates}: not a sweep's rates.json" in result.stderr
