"""suite.common.mlperf_rules: the olympic mean, and the rules looked up on the benchmarks' descriptions."""
import pytest

from suite.common import mlperf_rules


def test_olympic_mean():
    assert mlperf_rules.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0]) == 3.0
    assert mlperf_rules.olympic_mean([10.0, 1.0, 2.0, 3.0, 100.0]) == 5.0
    # A non-converged run counts as infinitely slow: it is the one dropped, not the slowest time.
    assert mlperf_rules.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [False, True, True, True, True]) == 4.0
    assert mlperf_rules.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [True, True, True, True, False]) == 3.0
    # Two non-converged runs leave the scale unscored; so do fewer than three runs.
    assert mlperf_rules.olympic_mean([1.0, 2.0, 3.0, 4.0, 5.0], [False, True, True, True, False]) is None
    assert mlperf_rules.olympic_mean([1.0, 2.0]) is None
    assert mlperf_rules.olympic_mean([]) is None
    with pytest.raises(ValueError):
        mlperf_rules.olympic_mean([1.0, 2.0, 3.0], [True])


def test_the_olympic_mean_keeps_the_runs_between_the_dropped_ends_fastest_first():
    minutes = [5.0, 1.0, 4.0, 2.0, 3.0]
    assert mlperf_rules.olympic_kept(minutes) == [3, 4, 2]
    # The run that did not converge ranks last, whatever its time.
    assert mlperf_rules.olympic_kept(minutes, [True, False, True, True, True]) == [4, 2, 0]
    # result_summarizer drops four at each end for unet3d: with nine runs, four may fail.
    assert mlperf_rules.olympic_drop("unet3d") == 4 and mlperf_rules.olympic_drop("resnet") == 1
    nine = [float(m) for m in range(9, 0, -1)]
    assert mlperf_rules.olympic_kept(nine, [False] * 4 + [True] * 5, drop=4) == [4]
    assert mlperf_rules.olympic_kept(nine, [False] * 5 + [True] * 4, drop=4) is None


def test_the_rules_of_a_benchmark_come_from_its_description():
    assert mlperf_rules.required_runs("resnet") == 5 and mlperf_rules.required_runs("bert") == 10
    assert mlperf_rules.required_runs("unet3d") is None
    assert mlperf_rules.convergence_unit("bert") == "samples"
    assert mlperf_rules.convergence_unit("resnet") == "epochs"
