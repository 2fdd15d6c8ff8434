"""RCP look-ups against hand-computed values and against mlperf-logging's own RCP check, and the closed
presets against their RCPs."""
import logging

import pytest
from mlperf_logging.rcp_checker import rcp_checker

from helpers.made_logs import run_lines, write_folder
from suite.cluster import rcp
from suite.common.config import resolve


def olympic(values):
    values = sorted(values)[1:-1]
    return sum(values) / len(values)


# rcps_resnet.json (training_2.1.0), the reference runs' epochs to converge.
RESNET_3264 = [34, 34, 35, 35, 35, 35, 35, 35, 35, 35, 35, 36, 36, 36, 37]
RESNET_4096 = [39, 39, 39, 39, 40, 40, 40, 41, 41, 42]
RESNET_8192 = [41, 41, 41, 41, 42, 42, 42, 43, 43, 44]
RESNET_13056 = [44, 45, 45, 45, 45, 46, 46, 46, 46, 46]


def test_a_record_is_the_olympic_mean_of_its_reference_runs():
    found = rcp.lookup("resnet", "2.1.0", 3264)
    assert (found.source, found.unit, found.covered) == ("record", "epochs", True)
    assert found.mean == pytest.approx(olympic(RESNET_3264)) == pytest.approx(457 / 13)
    assert found.hyperparameters["opt_base_learning_rate"] == 10.5
    assert found.check == "RCP found" and found.check_mean == found.mean


def test_between_two_records_the_mean_is_interpolated_as_the_checker_does():
    found = rcp.lookup("resnet", "2.1.0", 6528)
    low, high = olympic(RESNET_4096), olympic(RESNET_8192)  # 39.875 and 41.875
    assert (low, high) == (39.875, 41.875)
    assert found.source == "interpolated" and found.between == (4096, 8192)
    assert found.mean == pytest.approx(low + (6528 - 4096) / (8192 - 4096) * (high - low))
    assert found.mean == pytest.approx(41.0625)
    assert found.hyperparameters == {}


def test_the_check_uses_the_pruned_records():
    # The checker prunes 4096, 8192 and 13056 (slower than the line between their neighbours), so a
    # submission at 13056 is checked against the line from 3264 to 32768, not against the 13056 record.
    found = rcp.lookup("resnet", "2.1.0", 13056)
    assert found.source == "record" and found.mean == pytest.approx(olympic(RESNET_13056)) == 45.5
    assert found.check == "RCP Interpolation"
    line = olympic(RESNET_3264) + (13056 - 3264) / (32768 - 3264) * (56.0 - olympic(RESNET_3264))
    assert found.check_mean == pytest.approx(line) == pytest.approx(42.0724, abs=1e-4)
    assert found.check_min_mean < found.check_mean


def test_below_every_record_and_above_them():
    small = rcp.lookup("resnet", "2.1.0", 1000)
    assert small.source == "smallest record" and small.mean == 35.0 and small.covered
    assert small.check == "RCP not found but slower convergence on smaller batch size"
    huge = rcp.lookup("resnet", "2.1.0", 100_000)
    assert (huge.source, huge.mean, huge.covered) == ("none", None, False)
    assert huge.note == ("no RCP covers global batch 100000; a result at that batch cannot pass the RCP "
                         "check of a submission")


def test_bert_counts_samples():
    found = rcp.lookup("bert", "2.1.0", 3072)
    assert found.unit == "samples" and found.mean == pytest.approx(2764498.6666, abs=1e-3)
    interpolated = rcp.lookup("bert", "2.1.0", 384)  # between the 256 and 448 records
    assert interpolated.between == (256, 448)
    low, high = 2549219.5556, 2414421.3333  # the olympic means of the 256 and 448 records
    assert interpolated.mean == pytest.approx(low + (384 - 256) / (448 - 256) * (high - low), abs=1e-2)


@pytest.mark.parametrize("benchmark, ruleset, batch", [("resnet", "9.9.9", 3264), ("nope", "2.1.0", 3264),
                                                       ("resnet", "2.1.0", 0)])
def test_what_has_no_table_is_a_value_error(benchmark, ruleset, batch):
    with pytest.raises(ValueError) as error:
        rcp.lookup(benchmark, ruleset, batch)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("batch, epochs", [(3264, 36), (3264, 32), (6528, 40), (6528, 36), (1000, 36),
                                           (13056, 44), (100_000, 90)])
def test_the_check_is_what_mlperf_loggings_rcp_checker_decides(tmp_path, batch, epochs):
    runs = [run_lines(batch=batch, blocks=epochs, epochs_per_block=1, block_ms=10) for _ in range(5)]
    folder = write_folder(tmp_path, runs)
    logging.disable(logging.CRITICAL)
    try:
        passed, message, _ = rcp_checker.check_directory(folder, "training", "2.1.0", False, False,
                                                         rcp_pass="pruned_rcps")
    finally:
        logging.disable(logging.NOTSET)
    found = rcp.lookup("resnet", "2.1.0", batch)
    assert found.check == message
    assert passed == (found.covered and epochs >= found.check_min_mean)


def test_compare_hyperparameters_lists_what_differs():
    record = rcp.lookup("resnet", "2.1.0", 3264)
    values = dict(record.hyperparameters, opt_base_learning_rate=10.0)
    del values["model_bn_span"]
    assert rcp.compare_hyperparameters(values, record) == [
        rcp.Difference("opt_base_learning_rate", 10.0, 10.5), rcp.Difference("model_bn_span", None, 204)]
    assert rcp.compare_hyperparameters(record.hyperparameters, record) == []
    interpolated = rcp.lookup("resnet", "2.1.0", 6528)
    assert rcp.compare_hyperparameters({"opt_base_learning_rate": 11}, interpolated) == [
        rcp.Difference("opt_base_learning_rate", 11, None)]


def closed(module):
    return {name: (resolve(module.CONFIG, module.PRESETS, name, extra={"data_dir": "/data"}), preset.ranks[0])
            for name, preset in module.PRESETS.items() if name.startswith("closed_") and "cpu" not in name}


@pytest.mark.parametrize("ruleset", ["1.1.0", "2.1.0"])
def test_the_resnet_presets_against_their_rcps(ruleset):
    from models.resnet50 import presets
    found = {}
    for name, (config, ranks) in closed(presets).items():
        record = rcp.lookup("resnet", ruleset, config.global_batch_size)
        assert record.source == "record", name
        found[name] = rcp.compare_hyperparameters(presets.rcp_hyperparameters(config, ranks), record)
    # Every optimizer hyperparameter is the RCP's; the batch-norm span is the per-GPU batch, which only at
    # 16 GPUs x 204 matches the reference's span.
    assert found == {
        "closed_8xA100_gbs3264": [rcp.Difference("model_bn_span", 408, 204)],
        "closed_16xA100_gbs3264": [],
        "closed_32xA100_gbs3264": [rcp.Difference("model_bn_span", 102, 204)],
        "closed_32xA100_gbs4096": [rcp.Difference("model_bn_span", 128, 64)],
        "closed_32xA100_gbs13056": [rcp.Difference("model_bn_span", 408, 204)],
    }


def test_the_13056_preset_evaluates_where_the_reference_converged():
    from models.resnet50 import presets
    config, _ = closed(presets)["closed_32xA100_gbs13056"]
    assert config.global_batch_size == 32 * 408
    # The reference runs converged at epochs 44-46; evaluations at 2, 6, ..., 46 catch them all by 46.
    first = config.eval_offset or config.epochs_between_evals
    grid = range(first, config.epochs + config.epochs_between_evals, config.epochs_between_evals)
    assert 46 in grid and max(RESNET_13056) == 46


def test_the_bert_presets_against_their_rcps():
    from models.bert import presets
    found = {}
    for name, (config, ranks) in closed(presets).items():
        record = rcp.lookup("bert", "2.1.0", config.global_batch_size)
        assert record.source == "record", name
        found[name] = rcp.compare_hyperparameters(presets.rcp_hyperparameters(config, ranks), record)
    # The LAMB hyperparameters are the RCP's; only how the batch is accumulated differs.
    assert found == {
        "closed_8xA100_gbs448": [], "closed_16xA100_gbs448": [], "closed_32xA100_gbs448": [],
        "closed_16xA100_gbs1536": [rcp.Difference("gradient_accumulation_steps", 2, 1)],
        "closed_32xA100_gbs3072": [rcp.Difference("gradient_accumulation_steps", 2, 96)],
    }
