"""The step split by subtraction: what any backend's communication costs, measured the same way for both.

Horovod's timeline splits a GPU step (suite/train/attribution.py); TensorFlow's collectives keep no
such record, and on a CPU the timeline's writer thread costs a core. So after run_stop, with the
trained model still in place and the MLPerf log closed, every rank times a few steps of the real
step and as many of the same step without its collective (a plain tape), alternating, all ranks at
once. The local step is the compute the real one would take if communication were free, slowed by
sharing the host's cores exactly as in training; what the real step takes beyond the slowest rank's
local step is exposed communication. The parts add up to the measured step:

- input wait: the rank's wait for its next batch;
- compute: the local step, mean over ranks;
- rank imbalance: the slowest rank's local step beyond that mean;
- exposed allreduce: the real step beyond the slowest local step (never below zero).

These steps train on after the run (their weights are not the run's: the digest was taken before),
and the local steps let the ranks' weights drift apart, which no later step depends on.
"""
import statistics
import time

METHOD = "subtraction"


def time_steps(iterator, full_step, local_step, steps):
    """This rank's medians over `steps` alternating pairs, after one untimed call of each (tracing)."""
    for step in (full_step, local_step):
        step(*next(iterator)).numpy()
    timed = {"full": [], "local": [], "input": []}
    for _ in range(steps):
        for name, step in (("full", full_step), ("local", local_step)):
            started = time.perf_counter()
            features, labels = next(iterator)
            fetched = time.perf_counter()
            step(features, labels).numpy()  # the host sync that ends the step
            timed[name].append(1000 * (time.perf_counter() - fetched))
            timed["input"].append(1000 * (fetched - started))
    return {name: statistics.median(values) for name, values in timed.items()}


def split(per_rank):
    """The job's split from every rank's medians (time_steps), in summary.json's attribution shape."""
    local = [r["local"] for r in per_rank]
    full = statistics.mean(r["full"] for r in per_rank)
    input_wait = statistics.mean(r["input"] for r in per_rank)
    compute = statistics.mean(local)
    imbalance = max(local) - compute
    exposed = max(0.0, full - max(local))
    step = full + input_wait
    return {"method": METHOD, "steps": None, "step_ms": step, "input_wait_ms": input_wait,
            "exposed_allreduce_ms": exposed, "imbalance_ms": imbalance,
            "compute_ms": step - input_wait - exposed - imbalance,
            "local_step_ms": local, "full_step_ms": [r["full"] for r in per_rank]}


def measure(job, full_step, local_step, steps, allgather):
    """Every rank times its pairs; returns the job's split (the same on every rank)."""
    mine = time_steps(iter(job.train_data), full_step, local_step, steps)
    record = split(allgather(mine, "step_split"))
    record["steps"] = steps
    return record
