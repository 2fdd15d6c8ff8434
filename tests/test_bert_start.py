"""BERT under mpirun up to the start line: no record read before run_start, one dropout stream per rank.

One 2-rank run builds the tiny BERT job exactly as the entry point does (data discovery, model,
checkpoint, optimizer, log), then, in place of training, runs one fixed input through the model.
"""
import os

import pytest

from helpers.atimes import age_atimes, first_reads, require_read_atimes
from helpers.running import run
from helpers.runs import read_json


def record_files(data_dir):
    return sorted(os.path.join(data_dir, split, name) for split in ("train", "eval")
                  for name in os.listdir(os.path.join(data_dir, split)))


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    from models.bert import prepare
    root = tmp_path_factory.mktemp("bert_start")
    require_read_atimes(root)
    data_dir = str(root / "data")
    prepare.write_learnable_dataset(data_dir, seq_length=64, max_predictions=10, train_records=128,
                                    eval_records=32, train_shards=2, eval_shards=1, seed=4)
    files = record_files(data_dir)
    age_atimes(files)
    result = run(["mpirun", "--oversubscribe", "-np", "2", "python", "tests/scripts/run_injected.py",
                  "--probe-dropout", "models.bert", "--preset", "tiny_cpu", "--set", "seed=5",
                  "--data-dir", data_dir, "--run-dir", str(root / "run")], timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return read_json(root / "run" / "summary.json"), first_reads(files)


# Two ranks: not in the fast tier (docs/testing.md, "slow").
@pytest.mark.slow
def test_nothing_before_run_start_reads_a_record(probe):
    _, reads = probe
    # Everything up to run_start ran on both ranks, and training never started: no file was read.
    assert reads == {}


@pytest.mark.slow
def test_dropout_masks_differ_between_ranks(probe):
    ranks = probe[0]["ranks"]
    assert len(ranks) == 2
    assert ranks[0]["training_output"] != ranks[1]["training_output"]


@pytest.mark.slow
def test_weights_and_inference_are_the_same_on_every_rank(probe):
    summary, _ = probe
    assert summary["weights_in_sync"]
    assert summary["ranks"][0]["inference_output"] == summary["ranks"][1]["inference_output"]
