"""Time to train split from the log alone (suite.common.time_to_train_split), per-scale summaries
(suite.cluster.measured_time_to_train), and the speed-up factored exactly, on
hand-made logs and on the published pairs."""
import json
import math

import pytest

from helpers.made_logs import run_lines, write_folder
from helpers.published import DELL_8, DELL_32, PAIRS
from helpers.summarizer import ranks_and_noise
from suite.cluster import measured_time_to_train
from suite.common import time_to_train_split
from suite.common.results import LogError
from suite.cluster.results_folder import read_folder


def split(tmp_path, lines, **folder):
    return time_to_train_split.split_run(read_folder(write_folder(tmp_path, [lines], **folder)).runs[0])


def test_a_run_split_by_hand(tmp_path):
    # 2 s start-up, 4 blocks of 60 s training + a 5 s evaluation inside the block, 1 s between blocks.
    got = split(tmp_path, run_lines())
    assert got.minutes == pytest.approx(265 / 60)
    assert got.training_minutes == pytest.approx(240 / 60)
    assert got.evaluation_minutes == pytest.approx(20 / 60)
    assert got.other_minutes == pytest.approx(5 / 60)
    assert got.evaluations == 4 and got.evaluated_at == (4, 8, 12, 16)
    assert (got.target_epochs, got.target_samples) == (16.0, 16_000.0)
    assert got.samples_per_second == pytest.approx(16_000 / 240)


def test_duplicate_rank_lines_and_framework_output_change_nothing_but_the_start(tmp_path):
    plain = split(tmp_path / "plain", run_lines())
    noisy = split(tmp_path / "noisy", ranks_and_noise(run_lines()))
    # The other rank's copies come 1 ms later: its run_start counts (as result_summarizer takes it), each
    # interval opens at the first start and closes at the first stop.
    assert noisy.minutes == pytest.approx(plain.minutes - 1 / 60000)
    assert noisy.training_minutes == pytest.approx(plain.training_minutes)
    assert noisy.evaluation_minutes == pytest.approx(plain.evaluation_minutes)
    assert (noisy.evaluations, noisy.target_epochs) == (plain.evaluations, plain.target_epochs)


def test_bert_counts_samples(tmp_path):
    got = split(tmp_path, run_lines(benchmark="bert", epoch_samples=448), benchmark="bert")
    assert got.target_epochs is None
    assert got.target_samples == 16 * 448
    assert got.evaluated_at == (4 * 448, 8 * 448, 12 * 448, 16 * 448)
    assert got.samples_per_second == pytest.approx(16 * 448 / 240)


def test_a_log_without_blocks_trains_in_its_epochs_or_the_whole_run(tmp_path):
    lines = [text for text in run_lines() if '"block_' not in text]
    got = split(tmp_path, lines)
    # No block and no epoch intervals: the whole run less its evaluations is training.
    assert got.training_minutes == pytest.approx((265 - 20) / 60) and got.other_minutes == pytest.approx(0)


def test_what_cannot_be_split_is_one_line(tmp_path):
    no_eval = [text for text in run_lines() if '"eval_accuracy"' not in text]
    with pytest.raises(LogError, match=r"result_0.txt: no epochs to the target") as error:
        split(tmp_path / "a", no_eval)
    assert "\n" not in str(error.value)
    no_samples = [text for text in run_lines() if '"train_samples"' not in text]
    with pytest.raises(LogError, match=r"result_0.txt: no train_samples"):
        split(tmp_path / "b", no_samples)


def scale(tmp_path, block_ms=(60_000, 61_000, 62_000, 63_000, 64_000), **changes):
    runs = [run_lines(block_ms=ms, **changes) for ms in block_ms]
    return measured_time_to_train.summarize(read_folder(write_folder(tmp_path, runs)))


def test_a_scale_is_summarized_over_the_runs_the_olympic_score_keeps(tmp_path):
    summary = scale(tmp_path)
    assert summary.aggregate == "olympic"
    assert [round(s.training_minutes * 60) for s in summary.kept] == [244, 248, 252]
    assert summary.minutes == pytest.approx(read_folder(summary.folder).olympic_minutes)
    assert summary.minutes == pytest.approx(summary.training_minutes + summary.evaluation_minutes
                                            + summary.other_minutes)
    assert summary.samples_per_second == pytest.approx(16_000 / 248)
    record = summary.as_dict()
    assert record["time_to_train_minutes"] == summary.minutes and record["target_epochs"] == 16.0
    for key in record:
        if key not in ("folder", "benchmark", "gpus", "global_batch_size", "aggregate", "runs",
                       "aggregated_runs", "converged_runs", "evaluation_count"):
            assert key.endswith(("_minutes", "_epochs", "_samples", "_samples_per_second", "_fraction")), key


def test_without_an_olympic_score_the_converged_runs_are_averaged(tmp_path):
    summary = scale(tmp_path, block_ms=(60_000, 62_000))
    assert summary.aggregate == "mean of converged runs" and len(summary.kept) == 2
    assert summary.training_minutes == pytest.approx(244 / 60)


def test_a_scale_with_no_converged_run_is_one_line(tmp_path):
    with pytest.raises(LogError, match=r"no converged run \(no run_stop with status success in its 5 "):
        scale(tmp_path, status="aborted")


def test_the_speed_up_factors_multiply_to_the_measured_ratio(tmp_path):
    # Four times the GPUs: blocks train 3.5x faster over 1.25x the epochs; evaluations 4x faster.
    small = scale(tmp_path / "small", epochs_per_block=4)
    faster = [ms / 3.5 * 1.25 for ms in (60_000, 61_000, 62_000, 63_000, 64_000)]
    large = scale(tmp_path / "large", block_ms=faster, epochs_per_block=5, eval_ms=1_250)
    factors = measured_time_to_train.factor_speedup(small, large)
    product = factors.throughput_speedup * factors.convergence_ratio * factors.evaluation_and_overhead_ratio
    assert product == pytest.approx(factors.measured_speedup, rel=1e-12)
    assert factors.throughput_speedup == pytest.approx(3.5)
    assert factors.convergence_ratio == pytest.approx(16 / 20)
    assert factors.measured_speedup == pytest.approx(small.minutes / large.minutes)


@pytest.mark.parametrize("small, large", PAIRS, ids=["resnet-dell", "bert-nvidia"])
def test_the_published_pairs_factor_exactly(small, large):
    a, b = (measured_time_to_train.summarize(read_folder(folder, ruleset))
            for folder, ruleset, _ in (small, large))
    factors = measured_time_to_train.factor_speedup(a, b)
    product = factors.throughput_speedup * factors.convergence_ratio * factors.evaluation_and_overhead_ratio
    assert math.isclose(product, factors.measured_speedup, rel_tol=1e-12)
    assert factors.measured_speedup == pytest.approx(read_folder(small[0], small[1]).olympic_minutes
                                                     / read_folder(large[0], large[1]).olympic_minutes)
    json.dumps(a.as_dict())  # plain data


def test_dells_pair_computed_from_its_logs():
    # From the logs' own events (rounded as quoted): 35 and 45 epochs, 0.25 and 0.04 min of evaluation,
    # 3.88x the throughput on 4x the GPUs, 3.03x the time to train.
    small, large = (measured_time_to_train.summarize(read_folder(folder, ruleset))
                    for folder, ruleset, _ in (DELL_8, DELL_32))
    assert (small.global_batch_size, large.global_batch_size) == (3264, 13056)
    assert small.as_dict()["median_target_epochs"] == 35 and large.as_dict()["median_target_epochs"] == 45
    assert round(small.as_dict()["median_evaluation_minutes"], 2) == 0.25
    assert round(large.as_dict()["median_evaluation_minutes"], 2) == 0.04
    assert round(small.samples_per_second) == 23478 and round(large.samples_per_second) == 91183
    assert round(small.as_dict()["median_logged_samples_per_second"]) == 23499
    assert round(large.as_dict()["median_logged_samples_per_second"]) == 91405
    factors = measured_time_to_train.factor_speedup(small, large)
    assert round(factors.measured_speedup, 2) == 3.03
    assert round(factors.throughput_speedup, 2) == 3.88
    assert round(factors.convergence_ratio, 4) == round(35 / 45, 4)
    assert round(factors.evaluation_and_overhead_ratio, 3) == 1.003


def test_the_evaluation_grid_of_a_scale(tmp_path):
    assert measured_time_to_train.evaluation_grid(scale(tmp_path)) == (4, 4)
    dell = measured_time_to_train.summarize(read_folder(*DELL_32[:2]))
    assert measured_time_to_train.evaluation_grid(dell) == (1, 4)  # Dell evaluated at epochs 1, 5, 9, ..., 45
