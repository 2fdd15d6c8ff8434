"""BERT through its public entry point: `python -m models.bert` alone and under mpirun.

The tiny preset learns the generated task and its log passes the 2.1.0 checker; the BERT-large
code path logs what the closed BERT rules check; an initial TF1 checkpoint loads; bad input ends
in one line naming the culprit, without a hang, with run_stop aborted once the run had started.
"""
import json
import shutil

import pytest

from helpers.failures import (assert_aborted, assert_not_started, assert_one_line_error, assert_ranks_report,
                              rank_lines)
from models.bert.presets import PRESETS
from helpers.running import BERT_PRED as PRED, BERT_SEQ as SEQ, run, train_cmd
from helpers.runs import assert_fails_only_on_accuracy, check_log, read_json, read_log

BERT_LARGE_JSON = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                   "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
                   "max_position_embeddings": 512, "num_attention_heads": 16, "num_hidden_layers": 24,
                   "type_vocab_size": 2, "vocab_size": 30522}


def bert(*args, np=1, timeout=300):
    # Several ranks under mpirun (Horovod's MPI controller, as plain horovodrun runs it, without its check of
    # Horovod's build): BERT is the subject here; `make demo-bert` is the horovodrun command.
    launcher = ("mpirun", "--tag-output") if np > 1 else ()
    return run(train_cmd(*args, launcher=launcher, np=np, module="models.bert"), timeout=timeout)


# One seed for the two backends' runs, so that their loss curves can be set against each other; and a
# step split by subtraction after each run (two pairs of steps), the method both backends share.
SHARED = ("--preset", "tiny_cpu", "--set", "seed=11", "--set", "step_split_steps=2")


def tiny(bert_data, tmp_path_factory, *flags):
    run_dir = tmp_path_factory.mktemp("bert_tiny") / "run"
    result = bert(*SHARED, "--data-dir", str(bert_data), "--run-dir", str(run_dir), *flags, np=2, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def tiny_run(bert_data, tmp_path_factory):
    return tiny(bert_data, tmp_path_factory)


@pytest.fixture(scope="module")
def tiny_tf_run(bert_data, tmp_path_factory):
    """The same run under TensorFlow's own collectives (MultiWorkerMirroredStrategy), no Horovod."""
    return tiny(bert_data, tmp_path_factory, "--distribution", "tf")


@pytest.mark.slow
def test_tiny_preset_on_two_ranks_passes_the_checker_and_learns(tiny_run, bert_data):
    passed, output = check_log(tiny_run / "result_0.txt", "2.1.0")
    assert passed, output
    summary = read_json(tiny_run / "summary.json")
    baseline = read_json(bert_data / "dataset.json")["majority_baseline_accuracy"]
    assert summary["status"] == "success" and summary["world_size"] == 2
    target = PRESETS["tiny_cpu"].overrides["target_accuracy"]
    assert summary["target_accuracy"] == target >= 0.35
    assert summary["accuracy"] >= target and summary["accuracy"] > 10 * baseline
    assert summary["weights_in_sync"]


@pytest.mark.slow
def test_the_tf_backend_trains_to_the_target_with_horovods_loss_curve(tiny_run, tiny_tf_run):
    """Same seed, same data, same model: at 2 ranks each gradient is the mean of two addends, a sum that
    is the same in either order and a halving that is exact, so the two backends' gradients and losses
    agree to the bit. The tolerance (1e-6 relative) is there for kernels, not for the reduction: at more
    ranks the order of a ring's additions differs and the curves would part by rounding."""
    passed, output = check_log(tiny_tf_run / "result_0.txt", "2.1.0")
    assert passed, output
    summary, reference = read_json(tiny_tf_run / "summary.json"), read_json(tiny_run / "summary.json")
    assert (summary["distribution"], reference["distribution"]) == ("tf", "horovod")
    assert summary["status"] == "success" and summary["weights_in_sync"] and summary["world_size"] == 2
    env = read_json(tiny_tf_run / "env.json")
    assert (env["launcher"], env["controller"]) == ("mpirun", "grpc")
    curve, horovods = summary["loss_curve"], reference["loss_curve"]
    assert len(curve) >= 3 and [step for step, _ in curve] == [step for step, _ in horovods]
    assert [loss for _, loss in curve] == pytest.approx([loss for _, loss in horovods], rel=1e-6)
    assert summary["steps"] == reference["steps"]
    assert summary["accuracy"] == pytest.approx(reference["accuracy"])


@pytest.mark.slow
def test_both_backends_split_the_step_by_subtraction(tiny_run, tiny_tf_run):
    for run_dir in (tiny_run, tiny_tf_run):
        record = read_json(run_dir / "summary.json")["attribution"]
        assert record["method"] == "subtraction" and record["steps"] == 2
        parts = [record[p] for p in ("compute_ms", "exposed_allreduce_ms", "input_wait_ms", "imbalance_ms")]
        assert sum(parts) == pytest.approx(record["step_ms"]) and min(parts) >= 0 and parts[0] > 0
        assert len(record["local_step_ms"]) == len(record["full_step_ms"]) == 2  # every rank timed its own


@pytest.mark.slow
def test_tiny_log_counts_samples_and_names_every_tensor(tiny_run):
    events = read_log(tiny_run / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    evals = [e for e in events if e["key"] == "eval_accuracy"]
    # Evaluation every 3200 samples (100 steps of 32); epoch_num is samples trained.
    assert [e["metadata"]["epoch_num"] for e in evals] == [3200 * (i + 1) for i in range(len(evals))]
    steps = read_json(tiny_run / "summary.json")["steps"]
    assert values["train_samples"] == steps * 32 == evals[-1]["metadata"]["epoch_num"]
    assert values["eval_samples"] == 512
    assert values["opt_epsilon"] == values["opt_lamb_epsilon"] == 1e-6
    assert values["submission_benchmark"] == "bert" and values["submission_division"] == "open"
    tensors = [e["metadata"]["tensor"] for e in events if e["key"] == "weights_initialization"]
    assert len(tensors) == len(set(tensors)) == 5 + 16 * 2 + 2 + 5 + 2  # the tiny model has 2 layers
    keys = [e["key"] for e in events]
    assert keys.index("train_samples") < keys.index("run_stop") == len(keys) - 1


@pytest.mark.slow
def test_tiny_summary_splits_its_time_to_train_from_its_own_log(tiny_run):
    """summary.json's time_to_train, set against the log's own events read here."""
    events = read_log(tiny_run / "result_0.txt")
    at = {e["key"]: e["time_ms"] for e in events if e["key"] in ("run_start", "run_stop")}
    split = read_json(tiny_run / "summary.json")["time_to_train"]
    assert split["time_to_train_minutes"] == pytest.approx((at["run_stop"] - at["run_start"]) / 60000)
    parts = split["training_minutes"] + split["evaluation_minutes"] + split["other_minutes"]
    assert parts == pytest.approx(split["time_to_train_minutes"])
    assert min(split["training_minutes"], split["evaluation_minutes"]) > 0 and split["converged"]
    evals = [e for e in events if e["key"] == "eval_start"]
    assert split["evaluation_count"] == len(evals) and split["target_epochs"] is None
    assert split["target_samples"] == [e["value"] for e in events if e["key"] == "train_samples"][-1]
    rate = split["target_samples"] / (split["training_minutes"] * 60)
    assert split["training_samples_per_second"] == pytest.approx(rate)


@pytest.fixture(scope="module")
def large_run(bert_data, tmp_path_factory):
    """The BERT-large code path: 24 layers of 1024, 2 micro-batches of 2, two LAMB steps, one process.

    One process, because a BERT-large rank with LAMB slots and accumulated gradients peaks at about
    14 GB on the CPU; two would not fit the 24 GB test machine. The tiny runs cover two ranks.
    """
    root = tmp_path_factory.mktemp("bert_large")
    config = root / "bert_config.json"
    config.write_text(json.dumps(BERT_LARGE_JSON))
    data_dir = root / "data"
    shutil.copytree(bert_data, data_dir, ignore=shutil.ignore_patterns("eval"))
    _small_eval_set(bert_data, data_dir, records=16)
    run_dir = root / "run"
    # One evaluation, after the second step, where the preset evaluates after each: the closed rules'
    # checks need one, and each BERT-large evaluation costs seconds of both cores.
    result = bert("--preset", "closed_path_cpu", "--data-dir", str(data_dir), "--run-dir", str(run_dir),
                  "--set", f"bert_config={config}", "--set", "eval_interval_samples=8", timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return run_dir


def _small_eval_set(source, data_dir, records):
    """A 16-record eval set, so BERT-large evaluates in seconds on a CPU (dataset.json says so too)."""
    import tensorflow as tf
    (data_dir / "eval").mkdir()
    rows = list(tf.data.TFRecordDataset(sorted(str(p) for p in (source / "eval").iterdir())).take(records))
    with tf.io.TFRecordWriter(str(data_dir / "eval" / "part-00000-of-00001")) as writer:
        for row in rows:
            writer.write(row.numpy())
    meta = read_json(source / "dataset.json")
    meta.update(eval_records=records, eval_shards=1,
                eval_bytes=(data_dir / "eval" / "part-00000-of-00001").stat().st_size)
    (data_dir / "dataset.json").write_text(json.dumps(meta))


@pytest.mark.slow
def test_bert_large_code_path_fails_the_closed_rules_only_on_accuracy(large_run):
    assert_fails_only_on_accuracy(large_run / "result_0.txt", "2.1.0", "training_2.1.0/closed_bert.yaml")


@pytest.mark.slow
def test_bert_large_log_holds_the_398_tensors_and_the_lamb_keys(large_run):
    events = read_log(large_run / "result_0.txt")
    values = {e["key"]: e["value"] for e in events}
    tensors = [e["metadata"]["tensor"] for e in events if e["key"] == "weights_initialization"]
    assert len(tensors) == len(set(tensors)) == 398
    assert "cls/predictions/output_bias" in tensors
    assert "bert/encoder/layer_23/output/LayerNorm/beta" in tensors
    assert values["opt_name"] == "lamb" and values["opt_base_learning_rate"] == 0.000425
    assert values["gradient_accumulation_steps"] == 2 and values["global_batch_size"] == 4
    assert values["train_samples"] == 8  # two steps of 4
    config = read_json(large_run / "config.json")
    assert config["model"]["num_hidden_layers"] == 24 and config["micro_batch_size"] == 2


def _tiny_checkpoint(bert_data, prefix, **config_changes):
    """A TF1 checkpoint with the reference names, written from a model of the data's tiny config."""
    from models.bert.checkpoint import model_values, write_tf1_checkpoint
    from models.bert.model import BertConfig, build_pretraining_model
    config = BertConfig.from_dict({**read_json(bert_data / "bert_config.json"), **config_changes})
    values = model_values(build_pretraining_model(config, SEQ, PRED))
    write_tf1_checkpoint(values, str(prefix), extra={"global_step": 28252})
    return values


@pytest.mark.slow  # a TensorFlow run of 10 s or more: the gate's tier, not the inner loop's
def test_an_initial_tf1_checkpoint_is_loaded_by_name(bert_data, tmp_path):
    _tiny_checkpoint(bert_data, tmp_path / "ckpt" / "model.ckpt-28252")
    run_dir = tmp_path / "run"
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(run_dir),
                  "--set", f"init_checkpoint={tmp_path / 'ckpt'}", "--set", "train_steps=2",
                  "--set", "eval_interval_samples=64")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert read_json(run_dir / "config.json")["init_checkpoint_variables"] == 46


def test_a_checkpoint_that_does_not_match_the_config_is_named(bert_data, tmp_path):
    _tiny_checkpoint(bert_data, tmp_path / "ckpt" / "model.ckpt-28252", hidden_size=32, intermediate_size=64)
    run_dir = tmp_path / "run"
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(run_dir),
                  "--set", f"init_checkpoint={tmp_path / 'ckpt'}")
    assert_one_line_error(result, "model.ckpt-28252", "mis-shaped")
    assert_not_started(run_dir)


def test_a_vocabulary_smaller_than_the_token_ids_is_refused(bert_data, tmp_path):
    config = {**read_json(bert_data / "bert_config.json"), "vocab_size": 64}
    (tmp_path / "bert_config.json").write_text(json.dumps(config))
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(tmp_path / "run"),
                  "--set", f"bert_config={tmp_path / 'bert_config.json'}")
    assert_one_line_error(result, "64")
    assert "vocab" in result.stderr.splitlines()[-1].lower()


@pytest.mark.slow  # a TensorFlow run of 10 s or more: the gate's tier, not the inner loop's
def test_sequence_lengths_that_differ_from_the_data_are_refused(bert_data, tmp_path):
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(tmp_path / "run"),
                  "--set", "max_seq_length=32")
    assert_one_line_error(result, str(bert_data), "max_seq_length=32")
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(tmp_path / "run"),
                  "--set", "max_seq_length=128")
    assert_one_line_error(result, "max_seq_length 128", "max_position_embeddings 64",
                          str(bert_data / "bert_config.json"))


def test_an_eval_set_of_the_wrong_size_is_refused(bert_data, tmp_path):
    data_dir = tmp_path / "data"
    shutil.copytree(bert_data, data_dir)
    shard = sorted((data_dir / "eval").iterdir())[-1]
    _keep_records(shard, 100)
    result = bert("--preset", "tiny_cpu", "--data-dir", str(data_dir), "--run-dir", str(tmp_path / "run"))
    # Told by the files' sizes against dataset.json: nothing reads a record before run_start.
    assert_one_line_error(result, str(data_dir / "eval"), "512 eval records", str(data_dir / "dataset.json"),
                          f"data_cli check --data-dir {data_dir}")


def _keep_records(path, count):
    import tensorflow as tf
    rows = [r.numpy() for r in tf.data.TFRecordDataset(str(path)).take(count)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for row in rows:
            writer.write(row)


@pytest.mark.slow
def test_a_bad_record_mid_training_aborts_both_ranks_with_the_file_named(bert_data, tmp_path):
    import tensorflow as tf
    data_dir = tmp_path / "data"
    shutil.copytree(bert_data, data_dir)
    shard = sorted((data_dir / "train").iterdir())[1]
    rows = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(shard))]
    del rows[5].features.feature["masked_lm_weights"]
    with tf.io.TFRecordWriter(str(shard)) as writer:
        for row in rows:
            writer.write(row.SerializeToString())
    run_dir = tmp_path / "run"
    result = bert("--preset", "tiny_cpu", "--data-dir", str(data_dir), "--run-dir", str(run_dir),
                  "--set", "seed=3", np=2, timeout=300)
    assert_ranks_report(result, shard.name, "masked_lm_weights", failing=())
    assert any(line.startswith("error") and shard.name in line and "masked_lm_weights" in line
               for lines in rank_lines(result.stderr).values() for line in lines), result.stderr[-3000:]
    reason = assert_aborted(run_dir)
    assert "another rank" in reason or shard.name in reason
    # Aborted before its first evaluation: no checker passes a log without one, but it still says
    # once how far it trained.
    assert_train_samples_once_before_run_stop(run_dir)


def assert_train_samples_once_before_run_stop(run_dir):
    events = read_log(run_dir / "result_0.txt")
    keys = [e["key"] for e in events]
    assert keys.count("train_samples") == 1 and keys[-2:] == ["train_samples", "run_stop"], keys[-5:]
    assert events[-1]["metadata"]["status"] == "aborted"
    return events


@pytest.mark.slow
def test_a_nan_loss_ends_bert_with_a_log_the_checker_passes(bert_data, tmp_path):
    """Weights poisoned after step 101, past the first evaluation (step 100): step 102's loss is NaN and
    the run ends there, aborted, a non-converged result whose log the 2.1.0 checker accepts."""
    run_dir = tmp_path / "run"
    result = bert("--preset", "tiny_cpu", "--data-dir", str(bert_data), "--run-dir", str(run_dir),
                  "--set", "poison_weights_at_step=101", "--set", "log_every=1", "--set", "seed=2",
                  "--set", "target_accuracy=0.99")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the loss is not finite (NaN or infinite) at step 102" in result.stderr
    events = assert_train_samples_once_before_run_stop(run_dir)
    assert [e["value"] for e in events if e["key"] == "train_samples"] == [102 * 32]
    assert [e["key"] for e in events].count("eval_accuracy") == 1
    passed, output = check_log(run_dir / "result_0.txt", "2.1.0")
    assert passed, output
