"""The report at a glance: the headline's arithmetic on the kept published pairs, short labels, GPU-hours,
and --compare on a submitter's folder or a whole training_results clone."""
import json
import math
import os
import shutil

import pytest

from helpers.published import BERT_64, BERT_8, DELL_32, DELL_8, ROOT
from helpers.report import report_cli
from suite.cluster.report import headline, splits


@pytest.fixture(scope="module")
def pairs():
    scales = splits.compare_scales([DELL_8[0], DELL_32[0], BERT_8[0], BERT_64[0]])
    return scales, splits.speedups(scales)


def test_the_points_add_up_to_the_lost_efficiency_for_the_published_pairs(pairs):
    _, found = pairs
    assert [(small.folder.gpus, large.folder.gpus) for small, large, _ in found] == [(8, 32), (8, 64)]
    for small, large, factors in found:
        lost = headline.apportion(factors)
        speedup = small.summary.minutes / large.summary.minutes
        measured = 100 * (1 - speedup / (large.folder.gpus / small.folder.gpus))
        assert lost.lost == pytest.approx(measured, abs=1e-9)
        assert lost.throughput + lost.convergence + lost.evaluation == pytest.approx(lost.lost, abs=1e-9)


def test_each_share_is_its_logarithm_of_the_lost_points(pairs):
    # Dell, 8 -> 32 GPUs at 408 per GPU: 35 epochs to the target at 3,264, 45 at 13,056.
    _, found = pairs
    small, large, factors = found[0]
    assert small.summary.target_epochs == 35 and large.summary.target_epochs == 45
    lost = headline.apportion(factors)
    efficiency = factors.measured_speedup / 4
    per_log = 100 * (1 - efficiency) / math.log(efficiency)
    assert lost.convergence == pytest.approx(per_log * math.log(35 / 45))
    assert lost.throughput == pytest.approx(per_log * math.log(factors.throughput_speedup / 4))
    text = headline.sentence(small, large, factors, "epochs")
    assert text.startswith(f"8 → 32 GPUs: {100 * efficiency:.1f} % of linear.")
    assert "needed 45.0 epochs instead of 35.0" in text and f"cost {lost.convergence:.1f} points" in text


def test_a_step_without_loss_costs_nothing_and_a_gain_is_negative():
    class Factors:
        throughput_speedup, gpus_ratio = 2.2, 2.0
        convergence_ratio, evaluation_and_overhead_ratio = 1 / 1.1, 1.0
    lost = headline.apportion(Factors)
    assert lost.efficiency == pytest.approx(1.0)
    assert lost.throughput == pytest.approx(-lost.convergence) and lost.throughput < 0
    assert lost.evaluation == 0


def test_labels_name_submitter_system_and_round(pairs):
    scales, _ = pairs
    assert [scale.label for scale in scales] == [
        "Dell · 2xR750xax4A100-PCIE-80GB · v1.1", "Dell · 8xR750xax4A100-PCIE-80GB · v1.1",
        "NVIDIA · dgxa100_ngc22.09_pytorch · v2.1", "NVIDIA · dgxa100_n8_ngc22.09_pytorch · v2.1"]
    dell = scales[0]
    assert dell.gpu_hours_per_result == pytest.approx(dell.folder.olympic_minutes * 8 / 60)
    assert dell.gpu_hours_of_runs == pytest.approx(sum(run.minutes for run in dell.folder.runs) * 8 / 60)
    assert dell.gpu_hours_of_runs > dell.gpu_hours_per_result * 3  # five runs, three of them kept


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """The kept folders laid out as in the public repositories: training_results_vX.Y/<Submitter>/..."""
    root = tmp_path_factory.mktemp("clones")
    for release in ("training_results_v1.1", "training_results_v2.1"):
        shutil.copytree(os.path.join(ROOT, release), root / release)
    return root


def test_compare_finds_the_systems_of_a_submitter_folder(clone, tmp_path):
    out = tmp_path / "report"
    result = report_cli("--compare", str(clone / "training_results_v1.1" / "Dell"), "--out", str(out),
                        "--price-per-gpu-hour", "2")
    assert result.returncode == 0, result.stderr
    line, = [line for line in result.stdout.splitlines() if line.startswith("--compare")]
    assert line.endswith(": 2 results folder(s): 2xR750xax4A100-PCIE-80GB/resnet, "
                         "8xR750xax4A100-PCIE-80GB/resnet")
    record = json.loads((out / "report.json").read_text())
    assert [scale["label"] for scale in record["scales"]] == ["Dell · 2xR750xax4A100-PCIE-80GB · v1.1",
                                                              "Dell · 8xR750xax4A100-PCIE-80GB · v1.1"]
    markdown = (out / "report.md").read_text()
    assert "## Headline" in markdown and "resnet, Dell · v1.1, 8 → 32 GPUs:" in markdown
    assert "at the user's price of 2 per GPU-hour" in markdown
    assert (out / "scaling_picture_resnet.png").is_file()
    # Published bars of slivers are not drawn; the picture tells the story.
    assert not (out / "time_to_train_split_resnet.png").exists()


def test_compare_searches_a_whole_clone_for_one_benchmark(clone, tmp_path):
    result = report_cli("--compare", str(clone), "--benchmark", "bert", "--out", str(tmp_path / "bert"))
    assert result.returncode == 0, result.stderr
    assert ": 2 results folder(s) of bert: dgxa100_n8_ngc22.09_pytorch/bert, dgxa100_ngc22.09_pytorch/bert" \
        in result.stdout
    nothing = report_cli("--compare", str(clone), "--benchmark", "ssd", "--out", str(tmp_path / "none"))
    assert nothing.returncode == 2 and not (tmp_path / "none").exists()
    error, = nothing.stderr.strip().splitlines()
    assert error.startswith(f"error: --compare {clone}: no results/<system>/<benchmark>/ folder")
    assert "of benchmark ssd" in error


def test_a_batch_comparison_across_two_systems_says_both_differ(tmp_path):
    from helpers.made_logs import run_lines, write_folder
    dgx = write_folder(str(tmp_path), [run_lines(batch=3264, blocks=4, block_ms=60_000)] * 5, system="dgx",
                       nodes=4)
    xe = write_folder(str(tmp_path), [run_lines(batch=1632, blocks=4, block_ms=70_000)] * 5, system="xe8545",
                      nodes=4)
    result = report_cli("--compare", dgx, xe, "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "out" / "report.md").read_text()
    assert "These two are different systems as well as different batches (xe8545 against dgx)" in text


def test_the_sweeps_own_step_splits_its_throughput_points_between_the_measured_causes(built):
    import re
    _, markdown = built
    line, = [line for line in markdown.splitlines() if line.startswith("- resnet, this sweep, 1 → 2 GPUs:")]
    found = re.search(r"Throughput kept [\d.]+ % \((cost|gained) ([\d.]+) points: (.*?)\);", line)
    assert found, line
    named = "|".join(re.escape(name) for name in headline.CAUSES.values())
    causes = {name: float(value) for name, value in re.findall(rf"({named}) ([+-][\d.]+)", found.group(3))}
    assert set(causes) == set(headline.CAUSES.values())
    throughput = float(found.group(2)) * (1 if found.group(1) == "cost" else -1)
    assert sum(causes.values()) == pytest.approx(throughput, abs=0.25)
