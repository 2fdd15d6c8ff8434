"""Throughput mode: the training step alone, timed on every rank, with its spread and MFU.

The step is the one training runs (loop.make_train_step) on the data the config names, real or
synthetic. Warm-up steps come first and are not timed (tracing, allocator and cache warm-up); every
rank then meets at a barrier, and each timed step ends at a host sync (the loss read back), so a
step's time is the time its result took to exist, not the time to queue it.
"""
import statistics
import time

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import numpy as np
import tensorflow as tf

from suite.common.accelerators import peak_tflops
from suite.train import dist
from suite.train.loop import make_train_step, weights_digest

# Square matmuls for the measured peak: large enough to reach the device's steady rate, small enough
# to time within a second or so on a 2-core CPU.
PEAK_MATMUL_SIZE = {"cpu": 1024, "gpu": 8192}
PEAK_SECONDS = 1.0
MATMUL_DTYPES = {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}


def measure(job, config):
    """This rank's timed steps: {steps, step_seconds, input_wait_seconds, final_loss, weights_digest}."""
    step_fn = make_train_step(job, fp16_allreduce=config.fp16_allreduce, xla=config.xla,
                              allreduce=config.gradient_allreduce)
    job.optimizer.build(job.model.trainable_variables)  # slots now, so the step is traced once
    step_fn.get_concrete_function(*job.train_data.element_spec)
    iterator = iter(job.train_data)
    loss = step_fn(*next(iterator))
    # Horovod: every rank starts from rank 0's state, as in training.
    dist.broadcast_state(job.model, job.optimizer)
    for _ in range(config.throughput_warmup_steps):
        loss = step_fn(*next(iterator))
    loss.numpy()
    dist.barrier("throughput_start")
    step_seconds, waits = [], 0.0
    for _ in range(config.throughput_steps):
        started = time.perf_counter()
        features, labels = next(iterator)
        fetched = time.perf_counter()
        loss = step_fn(features, labels)
        loss.numpy()  # the host sync that ends the step
        step_seconds.append(time.perf_counter() - started)
        waits += fetched - started
    return {"steps": config.throughput_steps, "step_seconds": step_seconds, "input_wait_seconds": waits,
            "final_loss": float(loss), "weights_digest": weights_digest(job.model)}


def measured_peak_tflops(precision, device):
    """TFLOP/s of square matmuls at the run's precision on this rank's device, all ranks at once.

    Every rank measures at the same time (after a barrier), so a rank's peak is what it gets while
    the others compute too: on a shared CPU, its share of the cores.
    """
    size = PEAK_MATMUL_SIZE[device]
    dtype = MATMUL_DTYPES[precision]
    a = tf.random.normal((size, size), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    tf.linalg.matmul(a, b).numpy()  # warm-up: kernels chosen, memory allocated
    dist.barrier("matmul_peak")
    count, started = 0, time.perf_counter()
    while time.perf_counter() - started < PEAK_SECONDS:
        product = tf.linalg.matmul(a, b)
        count += 1
        if count % 4 == 0:
            product[0, 0].numpy()  # keeps the queue short on a GPU
    product[0, 0].numpy()
    seconds = time.perf_counter() - started
    return 2 * size ** 3 * count / seconds / 1e12


def peak_for_run(config, device):
    """(TFLOP/s per rank, how it was obtained)."""
    if config.accelerator:
        return (peak_tflops(config.accelerator, config.precision),
                f"{config.accelerator} datasheet peak at {config.precision} (dense)")
    size = PEAK_MATMUL_SIZE[device]
    return (measured_peak_tflops(config.precision, device),
            f"measured: {size}x{size} {config.precision} matmuls on each rank's {device}, all ranks at once")


def summarize(records, hosts, local_batch, flops_per_sample, peaks, peak_source):
    """The job's throughput from every rank's record (rank order), its spread and its MFU.

    A rank's rate is its samples over its timed steps' wall time; the total is the sum over ranks
    (each rank trains its own samples). MFU is the achieved training FLOP/s over the peak, per rank,
    then averaged.
    """
    per_rank = []
    for rank, (record, host, peak) in enumerate(zip(records, hosts, peaks)):
        seconds = sum(record["step_seconds"])
        rate = local_batch * record["steps"] / seconds
        achieved = rate * flops_per_sample / 1e12
        step_ms = [1000 * s for s in record["step_seconds"]]
        per_rank.append({
            "rank": rank, "host": host, "samples_per_second": rate,
            "step_ms_p50": float(np.percentile(step_ms, 50)),
            "step_ms_p90": float(np.percentile(step_ms, 90)),
            "input_wait_fraction": record["input_wait_seconds"] / seconds,
            "achieved_tflops": achieved, "peak_tflops": peak, "mfu": achieved / peak if peak else None,
            "weights_digest": record["weights_digest"]})
    rates = [r["samples_per_second"] for r in per_rank]
    mean = statistics.fmean(rates)
    mfus = [r["mfu"] for r in per_rank if r["mfu"] is not None]
    return {
        "samples_per_second": sum(rates),
        "world_size": len(records),
        "per_rank_batch": local_batch,
        "timed_steps": records[0]["steps"],
        "per_rank_samples_per_second": {"mean": mean, "min": min(rates), "max": max(rates),
                                        "spread": (max(rates) - min(rates)) / mean},
        "flops_per_sample": flops_per_sample,
        "achieved_tflops_total": sum(r["achieved_tflops"] for r in per_rank),
        "mfu": statistics.fmean(mfus) if mfus else None,
        "peak_source": peak_source,
        "weights_in_sync": len({r["weights_digest"] for r in per_rank}) == 1,
        "per_rank": per_rank,
    }


def describe(result, unit):
    """The lines rank 0 prints."""
    spread = result["per_rank_samples_per_second"]
    mfu = f", MFU {100 * result['mfu']:.1f}% ({result['peak_source']})" if result["mfu"] is not None else ""
    return [f"throughput: {result['samples_per_second']:,.1f} {unit}/s total over {result['world_size']} "
            f"rank(s), {result['timed_steps']} timed steps of {result['per_rank_batch']} per rank",
            f"per rank: mean {spread['mean']:,.1f}, min {spread['min']:,.1f}, max {spread['max']:,.1f} "
            f"({100 * spread['spread']:.1f}% spread); {result['achieved_tflops_total']:.3g} TFLOP/s "
            f"achieved{mfu}"]
