"""Tests of the BERT data command line: generate and check, as a subprocess and in process."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from models.bert import data, prepare, data_cli

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = ["--seq-length", "64", "--max-predictions", "10", "--train-records", "40", "--eval-records", "12",
         "--train-shards", "2", "--eval-shards", "2", "--vocab-size", "64", "--seed", "5"]


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-m", "models.bert.data_cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """A small dataset written by `generate` in a subprocess, and that subprocess's result."""
    out = str(tmp_path_factory.mktemp("cli") / "ds")
    return out, _cli("generate", out, *SMALL)


def test_generate_prints_a_summary_with_the_baselines(generated):
    out, result = generated
    assert result.returncode == 0, result.stderr
    meta = data.read_metadata(out)
    lines = result.stdout.splitlines()
    assert lines[0] == (f"wrote 40 training records (2 files) and 12 eval records (2 files) of 64 tokens, "
                        f"10 predictions, vocabulary 64, to {out}")
    assert lines[1] == (f"eval masked-LM accuracy of simple predictors: majority word "
                        f"{meta['majority_baseline_accuracy']:.4f}, segment's most frequent word "
                        f"{meta['segment_rule_accuracy']:.4f}, neighbour rule "
                        f"{meta['context_rule_accuracy']:.4f}")


def test_check_passes_on_generated_data_and_says_which_rules_applied(generated):
    out, _ = generated
    result = _cli("check", "--data-dir", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"rules: generated data ({out}/dataset.json): 64 tokens, 10 predictions, 40 training and 12 eval "
        f"records as declared",
        f"OK: {out}: 40 training records in 2 files, 12 eval records, 64 tokens, 10 predictions (generated)"]


def test_check_lists_problems_one_per_line_and_exits_1(generated, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(generated[0], broken)
    os.remove(broken / "eval" / "part-00001-of-00002")
    result = _cli("check", "--data-dir", str(broken), "--sample", "4")
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"rules: generated data ({broken}/dataset.json): 64 tokens, 10 predictions, 40 training and 12 eval "
        f"records as declared",
        f"{broken}/eval: missing shards part-00001-of-00002",
        f"{broken}/eval: 6 eval records, {broken}/dataset.json declares 12"]
    assert "Traceback" not in result.stderr


def test_check_cross_checks_the_generated_vocabulary(generated, tmp_path, capsys):
    broken = tmp_path / "vocab"
    shutil.copytree(generated[0], broken)
    with open(broken / "vocab.txt", "a") as f:
        f.write("extra\n")
    assert data_cli.main(["check", "--data-dir", str(broken)]) == 1
    assert capsys.readouterr().out.splitlines()[1:] == [
        f"vocabulary/config mismatch: {broken}/vocab.txt has 65 tokens but the model config's "
        f"vocab_size is 64"]
    with open(broken / "bert_config.json") as f:
        config = json.load(f)
    with open(broken / "bert_config.json", "w") as f:
        json.dump({**config, "vocab_size": 40}, f)
    assert data_cli.main(["check", "--data-dir", str(broken), "--sample", "8"]) == 1
    line = capsys.readouterr().out.splitlines()[1]
    assert line.startswith("vocabulary/config mismatch: ") and "vocab_size 40" in line


def test_bad_input_exits_2_with_one_line(tmp_path, capsys, generated):
    missing = str(tmp_path / "nope")
    assert data_cli.main(["check", "--data-dir", missing]) == 2
    assert capsys.readouterr().err == f"error: data directory not found: {missing}\n"
    assert data_cli.main(["check", "--checkpoint-dir", missing]) == 2
    assert capsys.readouterr().err == f"error: checkpoint directory not found: {missing}\n"
    assert data_cli.main(["generate", generated[0], *SMALL]) == 2
    assert capsys.readouterr().err == f"error: output directory is not empty: {generated[0]}\n"
    assert data_cli.main(["generate", str(tmp_path / "x"), "--max-predictions", "200"]) == 2
    assert capsys.readouterr().err == "error: max predictions 200 must be between 1 and seq length - 3\n"
    assert not os.path.exists(tmp_path / "x")
    for argv in (["check"], ["generate", "x", "--seq-length", "0"], []):
        with pytest.raises(SystemExit) as err:
            data_cli.main(argv)
        assert err.value.code == 2
    assert "check needs --data-dir, --checkpoint-dir or both" in capsys.readouterr().err


def test_check_checkpoint_dir_with_stand_in_files(tmp_path, capsys, monkeypatch, generated):
    import models.bert.checkpoint as checkpoint

    folder = tmp_path / "ckpt"
    folder.mkdir()
    with open(folder / "bert_config.json", "w") as f:
        json.dump(prepare.tiny_bert_config(64, 64), f)
    shutil.copy(os.path.join(generated[0], "vocab.txt"), folder / "vocab.txt")
    for suffix in ("index", "meta", "data-00000-of-00001"):
        (folder / f"model.ckpt-28252.{suffix}").write_bytes(suffix.encode())
    monkeypatch.setattr(prepare, "CHECKPOINT_FILES", {name: (os.path.getsize(folder / name),
                                                             prepare.file_md5(str(folder / name)))
                                                      for name in prepare.CHECKPOINT_FILES})
    monkeypatch.setattr(checkpoint, "checkpoint_problems", lambda prefix, config: [])
    assert data_cli.main(["check", "--checkpoint-dir", str(folder), "--data-dir", generated[0]]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (f"OK: {generated[0]}: 40 training records in 2 files, 12 eval records, 64 tokens, "
                       f"10 predictions (generated); {folder}: phase-1 checkpoint files present, sizes and "
                       f"MD5s, vocabulary and variables match")
    monkeypatch.setattr(checkpoint, "checkpoint_problems",
                        lambda prefix, config: [f"{prefix}: bert/pooler/dense/kernel missing"])
    assert data_cli.main(["check", "--checkpoint-dir", str(folder), "--skip-md5"]) == 1
    assert capsys.readouterr().out == f"{folder}/model.ckpt-28252: bert/pooler/dense/kernel missing\n"


def test_check_writes_dataset_json_for_mlperf_data_and_runs_accept_it(tmp_path, capsys, monkeypatch):
    """Data without dataset.json gets the MLPerf rules; after a clean check it has a dataset.json (generated
    false) that dataset_info accepts. With problems nothing is written. (A 5-record eval set stands in for
    eval_10k: the rules' count and size are patched to fit it.)"""
    root = tmp_path / "mlperf"
    prepare.write_learnable_dataset(str(root), vocab_size=200, seq_length=512, max_predictions=76,
                                    train_records=6, eval_records=5, train_shards=2, eval_shards=1, seed=3)
    for name in ("dataset.json", "vocab.txt", "bert_config.json"):
        os.remove(root / name)
    os.rename(root / "eval" / "part-00000-of-00001", root / "eval" / "eval_10k")
    eval_bytes = os.path.getsize(root / "eval" / "eval_10k")
    monkeypatch.setattr(prepare, "MLPERF_EVAL_RECORDS", 5)

    assert data_cli.main(["check", "--data-dir", str(root), "--sample", "8"]) == 1  # eval_10k's size
    assert f"{root}/eval/eval_10k: {eval_bytes:,} bytes" in capsys.readouterr().out
    assert sorted(os.listdir(root)) == ["eval", "train"]

    monkeypatch.setattr(prepare, "MLPERF_EVAL_BYTES", eval_bytes)
    assert data_cli.main(["check", "--data-dir", str(root), "--sample", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith(f"wrote {root}/dataset.json") for line in out), out
    assert out[-1] == f"OK: {root}: training records in 2 files, 5 eval records, 512 tokens, 76 predictions"
    assert sorted(os.listdir(root)) == ["dataset.json", "eval", "train"]  # no temporary file left
    meta = data.read_metadata(str(root))
    expected = {"generated": False, "seq_length": 512, "max_predictions": 76, "eval_records": 5,
                "train_records": None, "train_shards": 2, "eval_shards": 1, "vocab_size": 30522,
                "eval_bytes": eval_bytes}
    assert {key: meta[key] for key in expected} == expected
    assert 5 <= meta["max_token_id"] < 200
    info = data.dataset_info(str(root))
    assert (info.eval_records, info.train_records, info.vocab_size, info.generated) == (5, None, 30522, False)

    # Run again, it verifies the file it wrote and leaves it alone.
    written = os.stat(root / "dataset.json").st_mtime_ns
    assert data_cli.main(["check", "--data-dir", str(root), "--sample", "8"]) == 0
    assert "wrote" not in capsys.readouterr().out
    assert os.stat(root / "dataset.json").st_mtime_ns == written

    # A dataset.json that no longer describes the files is a problem, with the way out.
    meta_path = root / "dataset.json"
    meta_path.write_text(json.dumps({**meta, "eval_records": 4}))
    assert data_cli.main(["check", "--data-dir", str(root), "--sample", "8"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"{meta_path} does not describe the data any more: eval_records 4 (the data: 5); delete it and run "
        f"this check again")
