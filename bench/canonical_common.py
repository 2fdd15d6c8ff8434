"""What the two canonical Horovod scripts share: start-up as Horovod's TF2 docs show it, the timed loop
and the JSON they write.

The canonical scripts stand for what a user writes from Horovod's documentation, independently of
the suite: nothing here imports the suite, and nothing tunes threads (TensorFlow's defaults, or the
TF_NUM_INTRAOP_THREADS / TF_NUM_INTEROP_THREADS variables when the caller sets them).
"""
import argparse
import json
import os
import socket
import statistics
import time
from dataclasses import dataclass

# Horovod 0.28.1 works only with Keras 2: tf.keras must be tf-keras, chosen before TensorFlow loads.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import horovod.tensorflow as hvd  # noqa: E402


@dataclass(frozen=True)
class Timing:
    """Untimed steps after the first (which traces and is followed by the broadcast), timed steps, and
    where the JSON goes. The same counting as the suite's throughput_warmup_steps and throughput_steps."""

    warmup_steps: int
    steps: int
    out: str


def positive_int(text):
    return _whole_number(text, 1)


def _whole_number(text, least):
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least {least}, not {text!r}")
    return value


def add_timing_flags(parser, warmup_steps=5, steps=20):
    parser.add_argument("--warmup-steps", type=lambda text: _whole_number(text, 0), default=warmup_steps,
                        help="untimed steps after the first, broadcasting one (default %(default)s)")
    parser.add_argument("--steps", type=positive_int, default=steps,
                        help="timed steps (default %(default)s)")
    parser.add_argument("--out", default="", help="also write the result as JSON to this file (rank 0)")


def timing_from(args, parser):
    """The Timing of parsed flags; an --out whose folder does not exist is refused before TensorFlow works."""
    folder = os.path.dirname(os.path.abspath(args.out)) if args.out else ""
    if folder and not os.path.isdir(folder):
        parser.error(f"--out {args.out}: folder {folder} does not exist")
    return Timing(warmup_steps=args.warmup_steps, steps=args.steps, out=args.out)


def start_horovod():
    """hvd.init() and one GPU per process chosen by the local rank (none on a CPU host)."""
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank()], "GPU")


def train_and_time(train_step, model, optimizer, per_rank_batch, timing, description):
    """Runs the warm-up, broadcasting rank 0's variables after the first step, then the timed steps.

    Returns the result dict (the same keys as the suite's throughput.json where they mean the same);
    rank 0 prints it and writes it to timing.out.
    """
    first_loss = float(train_step())
    # After the first step the optimizer's slots exist, so one broadcast covers model and optimizer.
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer.variables, root_rank=0)
    for _ in range(timing.warmup_steps):
        train_step()
    step_seconds, last_loss, window = _timed_steps(train_step, timing.steps)
    mine = {"rank": hvd.rank(), "host": socket.gethostname(),
            "samples_per_second": per_rank_batch * timing.steps / sum(step_seconds),
            "step_ms_p50": 1000 * statistics.median(step_seconds), "timed_window": window}
    per_rank = hvd.allgather_object(mine)
    result = {"benchmark": description, "samples_per_second": sum(r["samples_per_second"] for r in per_rank),
              "per_rank": per_rank, "world_size": hvd.size(), "per_rank_batch": per_rank_batch,
              "warmup_steps": timing.warmup_steps, "timed_steps": timing.steps,
              "loss_first": first_loss, "loss_last": last_loss,
              "threads_env": {name: os.environ.get(name, "") for name in
                              ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")}}
    if hvd.rank() == 0:
        _report(result, timing.out)
    return result


def _timed_steps(train_step, steps):
    """Per-step wall times, the last loss and the (start, end) wall clock of the timed steps.

    Every step ends with its loss on the host, so a step's time is its whole work; the ranks meet
    first so that no rank times while another still warms up.
    """
    hvd.allreduce(tf.constant(0.0), name="timing_barrier")
    started = time.time()
    step_seconds = []
    loss = None
    for _ in range(steps):
        began = time.perf_counter()
        loss = float(train_step())
        step_seconds.append(time.perf_counter() - began)
    return step_seconds, loss, [started, time.time()]


def _report(result, out):
    text = json.dumps(result, indent=2)
    print(text, flush=True)
    if out:
        partial = out + ".partial"
        with open(partial, "w") as handle:
            handle.write(text + "\n")
        os.replace(partial, out)
