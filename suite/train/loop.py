"""The training loop: blocks of epochs, the one train step, exact evaluation, stop at the target."""
import hashlib
import math
import os
import time
from dataclasses import dataclass, field

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import numpy as np
import tensorflow as tf

from suite.train import attribution, dist, step_split
from suite.train.checkpoints import TrainingCheckpoints, blocks_after
from suite.train.mlperf import ABORTED, SUCCESS


def make_train_step(job, fp16_allreduce=False, xla=False, allreduce=True):
    """Returns step(features, labels) -> loss: one synchronous data-parallel update.

    allreduce=False leaves the distribution backend out of the step (a plain tape, no collective): one
    process only, the control that measures what the backend itself costs.

    With job.accumulation_steps = k > 1 the per-rank batch is split into k micro-batches whose
    gradients are summed locally; one allreduce then averages them over ranks, and the optimizer
    takes one step for the whole global batch.
    """
    model, optimizer = job.model, job.optimizer
    scales_loss = isinstance(optimizer, tf.keras.mixed_precision.LossScaleOptimizer)
    micro_batches = job.accumulation_steps

    def compute_loss(features, labels):
        return job.loss_fn(model, features, labels)

    # XLA compiles the forward/backward computation; the allreduce stays outside it, since
    # Horovod's ops are not XLA kernels on every build (and so both backends reduce alike).
    forward = tf.function(compute_loss, jit_compile=True) if xla else compute_loss

    def scaled_loss_and_tape(features, labels):
        with tf.GradientTape() as tape:
            loss = forward(features, labels)
            scaled = optimizer.get_scaled_loss(loss) if scales_loss else loss
        return loss, scaled, tape

    def apply(grads):
        if scales_loss:
            grads = optimizer.get_unscaled_gradients(grads)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    # No Python control flow over tensors here (Keras layers use tf.cond themselves): AutoGraph would
    # only rewrite the model's code, which was most of the step's tracing time.
    @tf.function(autograph=False)
    def step(features, labels):
        loss, scaled, tape = scaled_loss_and_tape(features, labels)
        variables = model.trainable_variables
        if allreduce:
            apply(dist.gradients(tape, scaled, variables, fp16_allreduce))
        else:
            apply(tape.gradient(scaled, variables))
        return loss

    @tf.function
    def accumulating_step(features, labels):
        split = tf.nest.map_structure(
            lambda t: tf.reshape(t, [micro_batches, -1, *t.shape[1:]]), (features, labels))
        sums = [tf.zeros_like(v) for v in model.trainable_variables]
        loss_sum = tf.constant(0.0)
        for index in tf.range(micro_batches):
            micro_features, micro_labels = tf.nest.map_structure(lambda t: t[index], split)
            loss, scaled, tape = scaled_loss_and_tape(micro_features, micro_labels)
            grads = tape.gradient(scaled, model.trainable_variables)
            sums = [total + tf.convert_to_tensor(grad) for total, grad in zip(sums, grads)]
            loss_sum += tf.cast(loss, tf.float32)
        grads = [total / micro_batches for total in sums]
        if allreduce:
            grads = dist.allreduce_gradients(grads, fp16_allreduce)
        apply(grads)
        return loss_sum / micro_batches

    return accumulating_step if micro_batches > 1 else step


def set_precision_policy(precision):
    """Keras global dtype policy for fp32, fp16 (mixed_float16) or bf16 (mixed_bfloat16)."""
    policy = {"fp32": "float32", "fp16": "mixed_float16", "bf16": "mixed_bfloat16"}[precision]
    tf.keras.mixed_precision.set_global_policy(policy)


def make_eval_step(job):
    @tf.function(reduce_retracing=True, autograph=False)
    def step(features, labels):
        return job.eval_fn(job.model, features, labels)
    return step


def weights_digest(model):
    """A short hash of every model variable, to show that all ranks hold the same model."""
    digest = hashlib.sha256()
    for variable in model.variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()[:16]


def evaluate(job, eval_step, name):
    """Exact accuracy over the whole eval set: every rank counts its shard, then one sum.

    Batch-norm moving statistics are local to each rank (each sees its own batches), so they
    are averaged first: every rank then evaluates the same model.
    """
    dist.average_variables(job.model.non_trainable_variables, name=f"{name}_stats")
    correct = tf.constant(0.0, tf.float64)
    count = tf.constant(0.0, tf.float64)
    for features, labels in job.eval_data():
        batch_correct, batch_count = eval_step(features, labels)
        correct += tf.cast(batch_correct, tf.float64)
        count += tf.cast(batch_count, tf.float64)
    total_correct, total_count = dist.allreduce_sum([correct.numpy(), count.numpy()], name=name)
    if total_count == 0:
        raise ValueError("the evaluation set is empty on every rank")
    return total_correct / total_count, int(total_count)


@dataclass
class StepTimer:
    """Per-rank timing, sampled every `every` steps at a host sync point outside the step."""

    every: int
    samples_per_step: int
    intervals: list = field(default_factory=list)
    _start: float = 0.0
    _steps: int = 0
    _data_wait: float = 0.0

    def begin(self):
        self._start, self._steps, self._data_wait = time.perf_counter(), 0, 0.0

    def add_wait(self, seconds):
        self._data_wait += seconds

    def tick(self, loss):
        """Counts a step; returns the interval's record when this step closes one."""
        self._steps += 1
        return self.flush(loss) if self._steps >= self.every else None

    def flush(self, loss):
        """Closes the current interval early (before an evaluation); None if it is empty."""
        if not self._steps:
            return None
        loss.numpy()  # the host sync that makes the interval's wall time real
        seconds = time.perf_counter() - self._start
        interval = {"steps": self._steps, "seconds": seconds, "data_wait": self._data_wait}
        self.intervals.append(interval)
        self.begin()
        return interval

    def summary(self):
        """Throughput and step-time statistics, leaving out the first interval (tracing, warm-up)."""
        steady = self.intervals[1:] or self.intervals
        steps = sum(i["steps"] for i in steady)
        seconds = sum(i["seconds"] for i in steady)
        step_ms = [1000 * i["seconds"] / i["steps"] for i in steady]
        if not steps:
            return {}
        return {
            "steps_timed": steps,
            "samples_per_second": self.samples_per_step * steps / seconds,
            "step_ms_mean": 1000 * seconds / steps,
            "step_ms_p50": float(np.percentile(step_ms, 50)),
            "step_ms_p90": float(np.percentile(step_ms, 90)),
            "step_ms_max": float(max(step_ms)),
            "data_wait_fraction": sum(i["data_wait"] for i in steady) / seconds,
        }


@dataclass
class RunOutcome:
    status: str
    accuracy: float
    weights_digest: str
    evals: list
    steps: int
    train_seconds: float
    timing: dict
    window: dict = None  # attribution: the timeline window's record (suite/train/attribution.py)
    loss_curve: list = field(default_factory=list)  # [step, rank 0's loss] at every timing interval
    step_split: dict = None  # the split by subtraction, timed after run_stop (suite/train/step_split.py)


def train(job, world, log, config, say=print, run_dir=None):
    """Runs the blocks until the target is reached or the budget is spent.

    Logs init_stop and run_start itself, so everything before this call is untimed init.
    `say` prints a progress line (already rank-0 gated by the caller).
    """
    train_step = make_train_step(job, fp16_allreduce=config.fp16_allreduce, xla=config.xla,
                                 allreduce=config.gradient_allreduce)
    eval_step = make_eval_step(job)
    timer = StepTimer(every=config.log_every, samples_per_step=job.local_batch_size)
    window = attribution.Window(world, timer, run_dir)  # attribution: a few steady steps' timeline
    checkpoints = TrainingCheckpoints(job.model, job.optimizer,
                                      os.path.join(run_dir, "checkpoints") if run_dir else None)
    # The optimizer's slots are made now, before a checkpoint fills them: a step that made them
    # while tracing would be traced a second time, since tf.function retraces a function that
    # created variables.
    job.optimizer.build(job.model.trainable_variables)
    step = checkpoints.restore(config.resume_from) if config.resume_from else 0
    blocks = blocks_after(job.blocks, step)
    if step:
        say(f"resumed from {config.resume_from} after {step} steps; {len(blocks)} block(s) to go")
    # Tracing the step builds the graph without touching data or weights: initialisation,
    # which MLPerf lets happen before run_start. (XLA still compiles at the first call.)
    traced = time.perf_counter()
    train_step.get_concrete_function(*job.train_data.element_spec)
    trace_seconds = round(time.perf_counter() - traced, 2)

    # The clock starts before any rank touches the dataset: every rank waits here for the slowest,
    # rank 0 then writes run_start, and only after that are the ranks let go (a second barrier), so no
    # rank's input pipeline, started below, can open a file before run_start is in the log.
    if job.log_samples_trained:
        log.track_samples(step * job.global_batch_size)
    dist.barrier("init_done")
    log.end("init_stop")
    log.start("run_start")
    dist.barrier("start_line")
    run_started = time.perf_counter()
    iterator = iter(job.train_data)
    evals, accuracy, status, loss, synced, curve = [], float("nan"), ABORTED, None, False, []
    timer.begin()
    for block in blocks:
        log.block_start(block.first_epoch_num, block.epoch_count)
        for epoch_num, epoch_steps in block.epochs or ((None, block.steps),):
            if epoch_num is not None:
                log.epoch_start(epoch_num)
            for _ in range(epoch_steps):
                window.before_step()  # attribution
                fetched = time.perf_counter()
                features, labels = next(iterator)
                timer.add_wait(time.perf_counter() - fetched)
                loss = train_step(features, labels)
                if not synced:
                    # Start every rank from rank 0's state, once the optimizer's slots exist.
                    # Done eagerly rather than behind a flag in the step, which would trace the
                    # whole step twice.
                    dist.broadcast_state(job.model, job.optimizer)
                    synced = True
                step += 1
                log.samples_trained(step * job.global_batch_size)
                if step == config.poison_weights_at_step:
                    poison(job.model)
                interval = timer.tick(loss)
                window.after_step(interval)  # attribution: stops before any other collective
                if interval:
                    check_finite(loss, step)
                    curve.append([step, float(loss)])
                    _report_progress(say, job, world, step, loss, interval)
            if epoch_num is not None:
                log.epoch_stop(epoch_num)
        window.stop()  # attribution: before the evaluation's collectives
        if timer.flush(loss):
            check_finite(loss, step)
            curve.append([step, float(loss)])
        log.eval_start(block.eval_epoch_num)
        accuracy, counted = evaluate(job, eval_step, name=f"eval_{block.eval_epoch_num}")
        log.eval_result(block.eval_epoch_num, accuracy)
        log.block_stop(block.first_epoch_num, block.epoch_count)
        evals.append({"epoch_num": block.eval_epoch_num, "accuracy": accuracy, "samples": counted,
                      "step": step})
        say(f"eval at epoch_num {block.eval_epoch_num}: accuracy {accuracy:.4f} over {counted} "
            f"{job.eval_unit} (target {job.target_accuracy})")
        if config.save_checkpoints and world.is_root:
            say(f"checkpoint: {checkpoints.save(step)}")
        timer.begin()  # evaluation time is not training time
        if accuracy >= job.target_accuracy:
            status = SUCCESS
            break
    log.run_stop(status)  # after train_samples, when the workload logs it
    outcome = RunOutcome(status=status, accuracy=accuracy, weights_digest=weights_digest(job.model),
                         evals=evals, steps=step,
                         train_seconds=time.perf_counter() - run_started,
                         timing={**timer.summary(), "trace_seconds": trace_seconds},
                         window=window.record(), loss_curve=curve)
    if config.step_split_steps and world.size > 1:
        say(f"step split: {config.step_split_steps} steps with and without the collective, after run_stop")
        local_step = make_train_step(job, xla=config.xla, allreduce=False)
        outcome.step_split = step_split.measure(job, train_step, local_step, config.step_split_steps,
                                                dist.allgather_object)
    return outcome


class NonFiniteLoss(ValueError):
    """A NaN or infinite loss: training cannot recover, so the run ends as aborted."""

    on_every_rank = True  # decided by one allreduce, so every rank stops at the same step


def check_finite(loss, step):
    """Raises NonFiniteLoss on every rank when any rank's loss is NaN or infinite.

    Checked where the loss is already on the host (each timing interval), so it costs one tiny
    allreduce there. fp16 loss-scale overflows do not count: they make the scaled gradients
    infinite, and the optimizer skips that step, while the loss itself stays finite.
    """
    bad = dist.allreduce_sum([0.0 if math.isfinite(float(loss)) else 1.0], name="loss_finite")[0]
    if bad:
        raise NonFiniteLoss(f"the loss is not finite (NaN or infinite) at step {step} on {int(bad)} "
                            f"rank(s); lower the learning rate or check the data")


def poison(model):
    """The poison_weights_at_step testing aid: one weight becomes NaN on this rank.

    The last variable (an output bias): NaN reaches the logits directly, where an early one could be
    flattened to zeros by a ReLU.
    """
    variable = model.trainable_variables[-1]
    variable.assign(tf.fill(variable.shape, float("nan")))


def _report_progress(say, job, world, step, loss, interval):
    per_rank = job.local_batch_size * interval["steps"] / interval["seconds"]
    lr = f" lr {job.learning_rate(step):.5g}" if job.learning_rate else ""
    say(f"step {step}: loss {float(loss):.4f}{lr} | {per_rank * world.size:,.1f} samples/s total, "
        f"{per_rank:,.1f} per rank (rank 0), {1000 * interval['seconds'] / interval['steps']:.0f} ms/step")
