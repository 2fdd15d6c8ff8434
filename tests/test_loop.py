"""The training loop's pieces on a tiny Keras model, in process (Horovod with one rank)."""
import json
from types import SimpleNamespace

import numpy as np
import pytest

import suite  # noqa: F401

import tensorflow as tf

from models.resnet50.optim import LARS
from suite.train import dist, loop
from suite.train.checkpoints import blocks_after
from suite.train.mlperf import MLPerfLog
from suite.common.workload import Block, Division, Job


@pytest.fixture(scope="module")
def world():
    return dist.initialize()


def tiny_job(optimizer, features=8, classes=3, blocks=(), target=1.1, eval_batches=None, batch_norm=True,
             accumulation_steps=1):
    tf.keras.utils.set_random_seed(0)
    inputs = tf.keras.Input((features,))
    hidden = tf.keras.layers.Dense(16, activation="relu")(inputs)
    if batch_norm:
        hidden = tf.keras.layers.BatchNormalization()(hidden)
    logits = tf.keras.layers.Activation("linear", dtype="float32")(tf.keras.layers.Dense(classes)(hidden))
    model = tf.keras.Model(inputs, logits)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, features)).astype("float32")
    y = (x[:, 0] > 0).astype("int32") + (x[:, 1] > 1).astype("int32")
    train = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
    eval_data = eval_batches or (lambda: tf.data.Dataset.from_tensor_slices((x, y)).batch(10))

    def loss_fn(model, features, labels):
        logits = model(features, training=True)
        losses = tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        return tf.reduce_mean(losses)

    def eval_fn(model, features, labels):
        predicted = tf.argmax(model(features, training=False), axis=-1, output_type=tf.int32)
        return tf.reduce_sum(tf.cast(predicted == labels, tf.float32)), tf.cast(tf.size(labels), tf.float32)

    return Job(benchmark="test", model=model, optimizer=optimizer, train_data=train, eval_data=eval_data,
               loss_fn=loss_fn, eval_fn=eval_fn, blocks=list(blocks), target_accuracy=target,
               global_batch_size=16, local_batch_size=16, train_samples=64, eval_samples=64,
               division=Division("open"), hyperparameters={}, tensor_names=[],
               accumulation_steps=accumulation_steps)


def loop_config(**overrides):
    settings = dict(fp16_allreduce=False, xla=False, log_every=2, save_checkpoints=False, resume_from="",
                    poison_weights_at_step=0, gradient_allreduce=True, step_split_steps=0)
    return SimpleNamespace(**{**settings, **overrides})


def test_fp16_loss_scaling_step_trains_and_skips_overflowing_steps(world):
    previous = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(LARS(0.5, weight_decay=1e-4))
        job = tiny_job(optimizer)
        step = loop.make_train_step(job)
        batches = iter(job.train_data)
        losses = [float(step(*next(batches))) for _ in range(30)]
        assert losses[-1] < losses[0]
        # An overflowing loss must leave the weights alone and halve the loss scale.
        before = [v.numpy().copy() for v in job.model.trainable_variables]
        scale = float(optimizer.loss_scale)
        features, labels = next(batches)
        step(features * np.float32(1e30), labels)
        assert float(optimizer.loss_scale) == scale / 2
        for old, new in zip(before, job.model.trainable_variables):
            np.testing.assert_array_equal(old, new.numpy())
    finally:
        tf.keras.mixed_precision.set_global_policy(previous)


def test_evaluate_counts_every_sample_including_a_short_last_batch(world):
    job = tiny_job(tf.keras.optimizers.SGD(0.1))
    accuracy, count = loop.evaluate(job, loop.make_eval_step(job), name="eval_test")
    assert count == 64  # batches of 10: six full and one of 4
    x, y = next(iter(job.eval_data().unbatch().batch(64)))
    expected = np.mean(np.argmax(job.model(x, training=False).numpy(), axis=-1) == y.numpy())
    assert accuracy == pytest.approx(expected)


def test_empty_evaluation_set_is_an_error(world):
    job = tiny_job(tf.keras.optimizers.SGD(0.1),
                   eval_batches=lambda: tf.data.Dataset.from_tensor_slices(
                       (np.zeros((0, 8), "float32"), np.zeros(0, "int32"))).batch(4))
    with pytest.raises(ValueError, match="evaluation set is empty"):
        loop.evaluate(job, loop.make_eval_step(job), name="eval_empty")


class RecordingLog:
    def __init__(self):
        self.events = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.events.append((name, args))


def test_train_stops_at_the_target_and_logs_blocks_in_order(world):
    blocks = [Block(first_epoch_num=e, epoch_count=1, eval_epoch_num=e, steps=4, epochs=((e, 4),))
              for e in (1, 2, 3, 4, 5, 6)]
    job = tiny_job(tf.keras.optimizers.SGD(0.2, momentum=0.9), blocks=blocks, target=0.6)
    log = RecordingLog()
    config = loop_config()
    outcome = loop.train(job, world, log, config, say=lambda message: None)
    names = [name for name, _ in log.events]
    assert names[:4] == ["end", "start", "block_start", "epoch_start"]
    assert names.count("run_stop") == 1
    assert outcome.status == "success" and outcome.accuracy >= 0.6
    assert outcome.steps == 4 * len(outcome.evals) < 24  # stopped before the budget
    assert outcome.timing["steps_timed"] > 0 and outcome.timing["samples_per_second"] > 0


@pytest.mark.parametrize("make_optimizer, accumulation_steps", [
    (lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9), 1),
    (lambda: tf.keras.mixed_precision.LossScaleOptimizer(LARS(0.5)), 1),
    (lambda: tf.keras.optimizers.SGD(0.1, momentum=0.9), 2),
], ids=["momentum", "loss-scaled-lars", "accumulating"])
def test_the_step_is_traced_once_and_before_run_start(world, make_optimizer, accumulation_steps):
    """A second trace (the optimizer making its slots inside the first) would cost start-up time and,
    were it at the first call, timed seconds after run_start."""
    log = RecordingLog()
    job = tiny_job(make_optimizer(), blocks=_three_blocks(), accumulation_steps=accumulation_steps)
    traced_loss = job.loss_fn

    def loss_fn(model, features, labels):
        log.events.append(("trace", ()))  # Python runs only while the step is being traced
        return traced_loss(model, features, labels)

    job.loss_fn = loss_fn
    outcome = loop.train(job, world, log, loop_config(), say=lambda message: None)
    names = [name for name, _ in log.events]
    assert outcome.steps == 12 and names.count("trace") == 1
    assert names.index("trace") < names.index("start")


def test_train_runs_the_whole_budget_when_the_target_is_out_of_reach(world):
    blocks = [Block(first_epoch_num=1, epoch_count=2, eval_epoch_num=2, steps=6, epochs=((1, 3), (2, 3)))]
    job = tiny_job(tf.keras.optimizers.SGD(0.1), blocks=blocks, target=1.1)
    log = RecordingLog()
    config = loop_config(fp16_allreduce=True, log_every=50)
    outcome = loop.train(job, world, log, config, say=lambda message: None)
    assert outcome.status == "aborted" and outcome.steps == 6
    assert [args for name, args in log.events if name == "run_stop"] == [("aborted",)]
    assert [args[0] for name, args in log.events if name == "epoch_start"] == [1, 2]


def test_step_timer_leaves_out_the_first_interval():
    timer = loop.StepTimer(every=2, samples_per_step=10)
    timer.intervals = [{"steps": 2, "seconds": 10.0, "data_wait": 0.0},
                       {"steps": 2, "seconds": 1.0, "data_wait": 0.5},
                       {"steps": 2, "seconds": 3.0, "data_wait": 0.0}]
    summary = timer.summary()
    assert summary["steps_timed"] == 4
    assert summary["samples_per_second"] == pytest.approx(40 / 4.0)
    assert summary["step_ms_max"] == pytest.approx(1500.0)
    assert summary["data_wait_fraction"] == pytest.approx(0.5 / 4.0)


def test_accumulated_micro_batches_make_the_same_update_as_one_full_batch(world):
    whole = tiny_job(tf.keras.optimizers.SGD(0.5), batch_norm=False)
    split = tiny_job(tf.keras.optimizers.SGD(0.5), batch_norm=False, accumulation_steps=4)
    for job in (whole, split):
        step = loop.make_train_step(job)
        batches = iter(job.train_data)
        losses = [float(step(*next(batches))) for _ in range(3)]
    # The mean of equal micro-batch mean losses is the full-batch mean loss, and so are the gradients.
    for a, b in zip(whole.model.trainable_variables, split.model.trainable_variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    assert not np.allclose(whole.model.trainable_variables[0].numpy(),
                           tiny_job(tf.keras.optimizers.SGD(0.5), batch_norm=False).model
                           .trainable_variables[0].numpy())  # the steps did change the weights


def _three_blocks():
    # 4 steps of 16 = the 64 training samples once, so a resumed run sees the same batches.
    return [Block(first_epoch_num=16 * 4 * i, epoch_count=64, eval_epoch_num=64 * (i + 1), steps=4)
            for i in range(3)]


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(world, tmp_path):
    whole = tiny_job(tf.keras.optimizers.SGD(0.1, momentum=0.9), blocks=_three_blocks())
    saved = loop.train(whole, world, RecordingLog(), loop_config(save_checkpoints=True),
                       say=lambda message: None, run_dir=str(tmp_path))
    assert saved.steps == 12
    checkpoint = tmp_path / "checkpoints" / "ckpt-8"
    assert (tmp_path / "checkpoints" / "ckpt-8.index").exists()

    resumed_job = tiny_job(tf.keras.optimizers.SGD(0.1, momentum=0.9), blocks=_three_blocks())
    log = RecordingLog()
    resumed = loop.train(resumed_job, world, log, loop_config(resume_from=str(checkpoint)),
                         say=lambda message: None)
    assert resumed.steps == 12
    assert [args[0] for name, args in log.events if name == "block_start"] == [128]
    for a, b in zip(whole.model.variables, resumed_job.model.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)


def test_resuming_needs_a_checkpoint_that_fits(world, tmp_path):
    job = tiny_job(tf.keras.optimizers.SGD(0.1), blocks=_three_blocks())
    with pytest.raises(ValueError, match="no suite checkpoint found"):
        loop.train(job, world, RecordingLog(), loop_config(resume_from=str(tmp_path)), say=lambda m: None)
    with pytest.raises(ValueError, match="step 5, which is not an evaluation boundary"):
        blocks_after(_three_blocks(), 5)
    assert blocks_after(_three_blocks(), 12) == []


def _logged(path):
    with open(path) as handle:
        return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in handle if ":::MLLOG " in line]


def test_samples_trained_are_logged_before_run_stop_when_asked(world, tmp_path):
    job = tiny_job(tf.keras.optimizers.SGD(0.1), blocks=_three_blocks()[:1])
    job.log_samples_trained = True
    log = MLPerfLog(str(tmp_path / "result_0.txt"), enabled=True)
    loop.train(job, world, log, loop_config(), say=lambda message: None)
    events = _logged(tmp_path / "result_0.txt")
    assert [(e["key"], e["value"]) for e in events[-2:]] == [("train_samples", 64), ("run_stop", None)]


def test_an_aborted_run_logs_the_samples_trained_once_before_run_stop(world, tmp_path):
    """A run ended by a NaN loss, a lost rank or a signal closes its log from wherever it is: run_stop
    then carries the samples trained up to that step (the 2.1.0 checker wants train_samples once)."""
    job = tiny_job(tf.keras.optimizers.SGD(0.1), blocks=_three_blocks()[:1])
    job.log_samples_trained = True
    log = MLPerfLog(str(tmp_path / "result_0.txt"), enabled=True)
    with pytest.raises(loop.NonFiniteLoss):
        loop.train(job, world, log, loop_config(poison_weights_at_step=2, log_every=1), say=lambda m: None)
    log.run_stop("aborted", reason="the loss is not finite")  # what the session does with the error
    log.run_stop("aborted", reason="a second closing")  # the signal watcher's, later: ignored
    keys = [e["key"] for e in _logged(tmp_path / "result_0.txt")]
    assert keys.count("train_samples") == 1 and keys[-2:] == ["train_samples", "run_stop"]
    assert _logged(tmp_path / "result_0.txt")[-2]["value"] == 3 * 16  # NaN seen at step 3
