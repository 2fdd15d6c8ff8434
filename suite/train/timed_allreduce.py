"""One allreduce size timed and checked on the live job, for the benchmark and the pre-run probe.

Why eager and not a tf.function: each timed iteration is one `hvd.allreduce` call followed by a
one-element read of its output, which waits for the collective (on a GPU it also waits for the
NCCL stream) without copying the whole buffer to the host. Eager dispatch costs tens of
microseconds, well under Horovod's own negotiation cycle (HOROVOD_CYCLE_TIME, 1 ms by default),
which is the latency floor at small sizes in training as well. A tf.function would only pay
off by putting several allreduces in one graph, and Horovod would then fuse them into one
message, so the size measured would no longer be the size asked for, and a per-iteration time
(needed for the median and the max over ranks) would be lost.

Every size is also checked: rank r contributes (r + 1) * [1, 2, 3, 4, 1, 2, ...], so the sum is
n(n+1)/2 times the pattern, exact in float32 and, up to 36 ranks, in float16.
"""
import statistics
import time

import numpy as np

from suite.common.busbw import (GB, ITEMSIZE, PERIOD, bandwidths, check_values, expected_values, tolerance,
                                wire_dtype)

CHECK_CHUNK = 1 << 22  # elements compared at a time (a multiple of PERIOD), so the check needs no full copy


def measure(hvd, args, world, nbytes):
    """One message size: warm-up, timed iterations, the check, and the times agreed over ranks."""
    import tensorflow as tf
    count = nbytes // ITEMSIZE[args.dtype]
    wire = wire_dtype(args.dtype, args.fp16_compression)
    # Allocated once per size and reused by every iteration.
    buf = make_buffer(tf, count, world.rank, args.dtype)
    op = hvd.Sum if args.op == "sum" else hvd.Average
    compression = hvd.Compression.fp16 if args.fp16_compression else hvd.Compression.none
    name = f"allreduce_bench.{nbytes}"

    def once():
        # Horovod: the collective under test; one name per size so the response cache is reused.
        out = hvd.allreduce(buf, op=op, compression=compression, name=name)
        # Reading one element waits for the collective without a full device-to-host copy.
        out[-1].numpy()
        return out

    # An extra untimed first call, checked on its own: a wrong result shows up before any timing.
    correct = check_tensor(once(), world.size, args.op, wire)
    for _ in range(args.warmup):
        once()
    times, last = [], None
    for _ in range(args.iters):
        # Drop the previous output first, so at most one output buffer exists besides the input.
        last = None
        start = time.perf_counter()
        last = once()
        times.append(time.perf_counter() - start)
    # Checked outside the timed loop: the last timed result must be right too.
    correct = correct and check_tensor(last, world.size, args.op, wire)
    slowest, correct = _agree(hvd, tf, times, correct, nbytes)
    return make_row(nbytes, count * ITEMSIZE[wire], count, slowest, correct, world.size)


def _agree(hvd, tf, times, correct, nbytes):
    """Per-iteration times maxed over ranks, and whether every rank got the right values."""
    local = tf.constant(times + [0.0 if correct else 1.0], dtype=tf.float64)
    # Horovod: the slowest rank defines each iteration's time; a wrong rank makes the size wrong.
    agreed = hvd.allreduce(local, op=hvd.Max, name=f"allreduce_bench.agree.{nbytes}").numpy()
    return [float(t) for t in agreed[:-1]], agreed[-1] == 0.0


def make_row(nbytes, wire_bytes, count, times, correct, world_size):
    """A table row: the median of the per-iteration times and the bandwidths it gives."""
    seconds = statistics.median(times)
    algbw, busbw = bandwidths(wire_bytes, seconds, world_size)
    return {"bytes": nbytes, "wire_bytes": wire_bytes, "elements": count, "seconds": seconds,
            "time_us": seconds * 1e6, "time_us_min": min(times) * 1e6, "time_us_max": max(times) * 1e6,
            "algbw_gbps": algbw, "busbw_gbps": busbw, "effective_algbw_gbps": nbytes / seconds / GB,
            "correct": bool(correct)}


# ---- the values each rank sends, and the check of what comes back ----

def check_tensor(tensor, world_size, op, wire):
    """A whole allreduce output against the closed form, one slice at a time (no full host copy)."""
    count = int(tensor.shape[0])
    rel = tolerance(world_size, op, wire)
    # Slices start at multiples of CHECK_CHUNK, itself a multiple of PERIOD: one expected slice serves all.
    want = expected_values(min(count, CHECK_CHUNK), 0, world_size, op)
    for start in range(0, count, CHECK_CHUNK):
        values = tensor[start:start + CHECK_CHUNK].numpy()
        if not check_values(values, want[:values.size], rel):
            return False
    return True


def make_buffer(tf, count, rank, dtype):
    """One rank's message: (rank + 1) * [1, 2, 3, 4, 1, ...], built on the rank's device."""
    base = tf.constant(np.arange(1, PERIOD + 1) * (rank + 1), dtype=dtype)
    reps = -(-count // PERIOD)
    buf = tf.tile(base, [reps])
    return buf if reps * PERIOD == count else buf[:count]
