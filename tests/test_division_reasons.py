"""What a run directory's config.json says about the division, for rules no checker looks at.

One 2-rank run (the throughput mode: it builds the job and writes config.json exactly as training does,
then times two steps) that breaks three closed rules at once: the SGD warmup is half an epoch, one
host cannot drop its page cache, and 3 training files without per-file counts are split over 2 ranks.
"""
import json

import pytest

from helpers.running import run
from helpers.runs import read_json, read_log


@pytest.fixture(scope="module")
def three_rule_run(tmp_path_factory):
    from models.resnet50 import prepare
    root = tmp_path_factory.mktemp("division")
    data_dir = root / "data"
    prepare.write_learnable_dataset(str(data_dir), num_classes=2, train_per_class=24, eval_per_class=2,
                                    image_size=32, train_shards=3, eval_shards=1, seed=2)
    meta = read_json(data_dir / "dataset.json")
    del meta["train_shard_records"]  # as written before the field existed
    (data_dir / "dataset.json").write_text(json.dumps(meta))
    run_dir = root / "run"
    result = run(["mpirun", "--oversubscribe", "-np", "2", "python", "tests/scripts/run_injected.py",
                  "--cache-clear-fails-on", "0", "models.resnet50", "--throughput", "--preset", "tiny_cpu",
                  "--set", "image_size=32", "--set", "num_classes=2", "--set", "optimizer=sgd",
                  "--set", "warmup_epochs=0.5", "--set", "clear_cache=true", "--set", "throughput_steps=1",
                  "--set", "throughput_warmup_steps=0", "--data-dir", str(data_dir),
                  "--run-dir", str(run_dir)], timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return read_json(run_dir / "config.json"), run_dir


@pytest.mark.slow
def test_fractional_sgd_warmup_opens_the_run(three_rule_run):
    config, _ = three_rule_run
    assert "sgd warmup_epochs 0.5 is not a whole number of epochs" in config["open_reasons"]


@pytest.mark.slow
def test_a_page_cache_left_warm_opens_the_run(three_rule_run):
    config, run_dir = three_rule_run
    assert any(reason.startswith("cache_clear false: a host could not drop its page cache")
               for reason in config["open_reasons"]), config["open_reasons"]
    assert config["operator_statements"] == []
    # A throughput run writes no MLPerf log; the verdict is config.json's alone.
    assert not (run_dir / "result_0.txt").exists() or not read_log(run_dir / "result_0.txt")


@pytest.mark.slow
def test_uneven_files_without_per_file_counts_open_the_run(three_rule_run):
    config, _ = three_rule_run
    assert any(reason.startswith("3 training files over 2 ranks") and "data_cli check" in reason
               for reason in config["open_reasons"]), config["open_reasons"]
    assert config["division"] == "open"
