"""The throughput mode: its arithmetic, its FLOP counts, and that it runs training's own step."""
import os

import pytest

from helpers.running import TINY, run, train_cmd
from helpers.runs import read_json
from suite.common.accelerators import PEAK_TFLOPS, peak_tflops
from suite.common.config import ConfigError, resolve


def _record(step_seconds, waits=0.0, digest="d"):
    return {"steps": len(step_seconds), "step_seconds": step_seconds, "input_wait_seconds": waits,
            "final_loss": 1.0, "weights_digest": digest}


def test_rates_total_spread_and_mfu_from_hand_made_step_times():
    from suite.train.throughput import summarize
    # Rank 0: 4 steps of 0.5 s with 8 samples each = 16 samples/s; rank 1: 4 x 1.0 s = 8 samples/s.
    records = [_record([0.5] * 4, waits=0.2), _record([1.0, 1.0, 1.0, 1.0])]
    result = summarize(records, ["h1", "h2"], local_batch=8, flops_per_sample=1e12, peaks=[32.0, 16.0],
                       peak_source="test peaks")
    assert result["samples_per_second"] == pytest.approx(24.0)
    spread = result["per_rank_samples_per_second"]
    assert (spread["mean"], spread["min"], spread["max"]) == pytest.approx((12.0, 8.0, 16.0))
    assert spread["spread"] == pytest.approx(8.0 / 12.0)
    # 16 samples/s x 1 TFLOP = 16 TFLOP/s against a 32 TFLOP/s peak (0.5); rank 1 8 against 16 (0.5).
    assert [r["achieved_tflops"] for r in result["per_rank"]] == pytest.approx([16.0, 8.0])
    assert result["mfu"] == pytest.approx(0.5)
    assert result["achieved_tflops_total"] == pytest.approx(24.0)
    assert result["per_rank"][0]["input_wait_fraction"] == pytest.approx(0.2 / 2.0)
    assert result["per_rank"][1]["host"] == "h2" and result["weights_in_sync"]


def test_step_percentiles_and_ranks_out_of_sync():
    from suite.train.throughput import summarize
    records = [_record([0.1, 0.2, 0.3, 0.4, 1.0], digest="a"), _record([0.2] * 5, digest="b")]
    result = summarize(records, ["h", "h"], local_batch=4, flops_per_sample=0.0, peaks=[0.0, 0.0],
                       peak_source="none")
    assert result["per_rank"][0]["step_ms_p50"] == pytest.approx(300.0)
    assert result["mfu"] is None and not result["weights_in_sync"]


def test_named_peaks_are_the_datasheet_figures_and_a_wrong_name_is_refused():
    assert peak_tflops("a100", "bf16") == 312.0 and peak_tflops("a100", "fp32") == 156.0
    with pytest.raises(ValueError, match="accelerator 'a10' has no peak"):
        peak_tflops("a10", "fp16")
    from models.resnet50.presets import CONFIG, PRESETS
    with pytest.raises(ConfigError, match="accelerator must be one of"):
        resolve(CONFIG, PRESETS, "tiny_cpu", sets=["accelerator=v100", "synthetic=true"])
    assert set(PEAK_TFLOPS) >= {"a100", "h100-sxm"}


def _profiled_forward_flops(model, inputs):
    """Floating-point operations of the model's forward pass as TensorFlow's profiler counts them."""
    import tensorflow as tf
    from tensorflow.python.profiler import model_analyzer, option_builder
    concrete = tf.function(lambda x: model(x, training=False)).get_concrete_function(inputs)
    options = option_builder.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    return model_analyzer.profile(concrete.graph, options=options).total_float_ops


def test_resnet_flops_formula_matches_the_profiled_graph():
    import tensorflow as tf
    from models.resnet50.model import build_resnet50, training_flops_per_image
    model = build_resnet50(num_classes=10, image_size=64)
    counted = _profiled_forward_flops(model, tf.TensorSpec([1, 64, 64, 3], tf.float32))
    formula_forward = training_flops_per_image(64, 10) / 3
    # The profiler also counts batch norm, ReLU and the additions, which the formula leaves out.
    assert formula_forward <= counted <= 1.03 * formula_forward
    assert training_flops_per_image(224, 1000) / 6 == pytest.approx(4.09e9, rel=0.01)


def test_bert_flops_formula_matches_the_profiled_graph():
    import tensorflow as tf
    from models.bert.model import BertConfig, build_pretraining_model, training_flops_per_sequence
    config = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=64)
    model = build_pretraining_model(config, 32, 5)
    counted = _profiled_forward_flops(model, {
        "input_ids": tf.TensorSpec([1, 32], tf.int32), "input_mask": tf.TensorSpec([1, 32], tf.int32),
        "segment_ids": tf.TensorSpec([1, 32], tf.int32),
        "masked_lm_positions": tf.TensorSpec([1, 5], tf.int32)})
    formula_forward = training_flops_per_sequence(config, 32, 5) / 3
    # TensorFlow's profiler has no count for batched matmuls, so attention's scores and weighted sum
    # (2 x T^2 x h multiply-adds per layer) are compared apart: only the rest is in its total. It also
    # counts softmax, layer norm, GELU and the masks, which the formula leaves out.
    attention = 2 * config.num_hidden_layers * 2 * 32 * 32 * config.hidden_size
    assert formula_forward - attention <= counted <= 1.10 * (formula_forward - attention)


THROUGHPUT = [*TINY, "--set", "synthetic=true", "--set", "synthetic_epoch_samples=64",
              "--set", "global_batch_size=16", "--set", "seed=7", "--set", "log_every=2"]


@pytest.mark.slow
def test_throughput_mode_trains_with_the_training_step(tmp_path):
    """The same seed and data: 4 training steps and 1 + 1 warm-up + 2 timed throughput steps end on the
    same weights, so the throughput mode times the step training runs."""
    trained = run(train_cmd(*THROUGHPUT, "--run-dir", str(tmp_path / "train")))
    assert trained.returncode == 0, trained.stderr[-2000:]
    timed = run(train_cmd(*THROUGHPUT, "--throughput", "--set", "throughput_warmup_steps=1",
                          "--set", "throughput_steps=2", "--run-dir", str(tmp_path / "timed")))
    assert timed.returncode == 0, timed.stderr[-2000:]
    summary = read_json(tmp_path / "train" / "summary.json")
    result = read_json(tmp_path / "timed" / "throughput.json")
    assert summary["steps"] == 4
    assert result["per_rank"][0]["weights_digest"] == summary["ranks"][0]["weights_digest"]
    assert result["timed_steps"] == 2 and result["per_rank_batch"] == 16
    assert 0 < result["mfu"] < 1, result
    assert "throughput:" in timed.stdout and "MFU" in timed.stdout
    # Not an MLPerf run: no result log.
    assert not os.path.exists(tmp_path / "timed" / "result_0.txt")


@pytest.mark.slow
def test_throughput_over_two_ranks_reports_each_rank_and_their_sum(tmp_path):
    result = run(train_cmd(*THROUGHPUT, "--set", "global_batch_size=32", "--throughput",
                           "--set", "throughput_warmup_steps=1", "--set", "throughput_steps=3",
                           "--run-dir", str(tmp_path / "t"), launcher=("horovodrun",), np=2))
    assert result.returncode == 0, result.stderr[-2000:]
    measured = read_json(tmp_path / "t" / "throughput.json")
    rates = [r["samples_per_second"] for r in measured["per_rank"]]
    assert len(rates) == 2 and measured["samples_per_second"] == pytest.approx(sum(rates))
    assert measured["weights_in_sync"] and measured["per_rank_batch"] == 16
    env = read_json(tmp_path / "t" / "env.json")
    # The CPU defaults reach a raw horovodrun launch from inside the process.
    assert env["environment"]["HOROVOD_CYCLE_TIME"] == "20"
    assert env["environment"]["OMPI_MCA_mpi_yield_when_idle"] == "1"


@pytest.mark.slow  # two ranks under mpirun
def test_gradient_allreduce_off_is_refused_on_more_than_one_rank(tmp_path):
    result = run(train_cmd(*THROUGHPUT, "--set", "global_batch_size=32", "--throughput",
                           "--set", "gradient_allreduce=false", "--run-dir", str(tmp_path / "t"),
                           launcher=("mpirun",), np=2), timeout=300)
    assert result.returncode != 0
    assert "gradient_allreduce=false is for one process" in result.stdout + result.stderr
