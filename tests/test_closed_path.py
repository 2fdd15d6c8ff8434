"""The closed code path (224 px, 1000 classes, LARS) logs everything the closed ResNet rules check."""
import pytest

from helpers.running import run, train_cmd
from helpers.runs import assert_fails_only_on_accuracy, check_log, read_json, read_log


@pytest.fixture(scope="module")
def closed_run(tmp_path_factory):
    """A 2-process run of the closed_path_cpu preset on a tiny generated 224 px dataset, under mpirun: the
    rules are the subject, not horovodrun (whose launches test_launch.py and the demo cover)."""
    from models.resnet50 import prepare
    root = tmp_path_factory.mktemp("closed")
    data_dir = root / "data"
    prepare.write_learnable_dataset(str(data_dir), num_classes=4, train_per_class=4, eval_per_class=2,
                                    image_size=224, train_shards=2, eval_shards=2, seed=3)
    run_dir = root / "run"
    result = run(train_cmd("--preset", "closed_path_cpu", "--data-dir", str(data_dir), "--run-dir",
                           str(run_dir), launcher=("mpirun",), np=2), timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir


@pytest.mark.slow
def test_closed_rules_fail_only_on_the_accuracy_target(closed_run):
    log = closed_run / "result_0.txt"
    for ruleset in ("1.1.0", "2.1.0"):
        assert_fails_only_on_accuracy(log, ruleset, f"training_{ruleset}/closed_resnet.yaml")


@pytest.mark.slow
def test_closed_run_logs_lars_keys_and_all_161_tensors(closed_run):
    events = read_log(closed_run / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    assert values["opt_name"] == "lars"
    assert values["lars_epsilon"] == 0.0
    assert values["lars_opt_end_learning_rate"] == 0.0001
    assert values["lars_opt_learning_rate_decay_poly_power"] == 2
    assert values["global_batch_size"] == 4
    assert values["gradient_accumulation_steps"] == 1
    tensors = [e["metadata"]["tensor"] for e in events if e["key"] == "weights_initialization"]
    assert len(tensors) == len(set(tensors)) == 161
    stop = [e for e in events if e["key"] == "run_stop"]
    assert len(stop) == 1 and stop[0]["metadata"]["status"] == "aborted"  # target not reached
    # The generated data is not ImageNet, and the preset leaves the machine's page cache alone, so the run
    # itself says open, and says why.
    assert values["submission_division"] == "open"
    config = read_json(closed_run / "config.json")
    assert config["open_reasons"][0] == "dataset is not ImageNet-1k (16 train / 8 eval records)"
    assert config["open_reasons"][1].startswith("cache_clear false: clear_cache is false")
    assert len(config["open_reasons"]) == 2


@pytest.mark.slow
def test_closed_run_passes_the_open_rules_in_full(closed_run):
    for ruleset in ("1.1.0", "2.1.0"):
        passed, output = check_log(closed_run / "result_0.txt", ruleset)
        assert passed, output
