"""Runs a model entry point (`python -m MODULE ARGS`) with test-only changes to one rank's behaviour.

Usage: python tests/scripts/run_injected.py [--slow-root-writes SECONDS] [--slow-run-start SECONDS]
                                            [--cache-clear-fails-on RANK] [--probe-dropout] MODULE [ARGS...]

--slow-root-writes   rank 0 sleeps before each JSON file it writes (config.json, env.json): a slow
                     rank 0, so the other ranks would run ahead if nothing held them at the start line.
--slow-run-start     rank 0 sleeps right before it writes run_start into the MLPerf log: a rank let go
                     from the start line before run_start is written would read its shards meanwhile.
--cache-clear-fails-on  that rank's attempt to drop the page cache reports failure, as on a host
                     where /proc/sys/vm/drop_caches is read-only.
--probe-dropout      instead of training, each rank runs its model once in training mode and once in
                     inference mode on the same fixed input; digests of both outputs go into the
                     per-rank rows of summary.json (dropout masks show as different training outputs).
"""
import argparse
import hashlib
import os
import runpy
import sys
import time


def rank_from_launcher():
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def slow_root_writes(seconds):
    from suite.train import rundir
    write_json = rundir.write_json

    def slow(path, data):
        time.sleep(seconds)
        write_json(path, data)
    rundir.write_json = slow


def slow_run_start(seconds):
    from suite.train import mlperf
    start = mlperf.MLPerfLog.start

    def slow(self, key, value=None, metadata=None):
        if key == "run_start":
            time.sleep(seconds)
        start(self, key, value, metadata)
    mlperf.MLPerfLog.start = slow


def failing_cache_clear():
    from suite.train import session
    session._clear_page_cache = lambda: False


def probe_dropout():
    import tensorflow as tf
    from suite.train import loop, session

    def digest(outputs):
        hashed = hashlib.sha256()
        for tensor in tf.nest.flatten(outputs):
            hashed.update(tf.cast(tensor, tf.float32).numpy().tobytes())
        return hashed.hexdigest()[:16]

    def probe(job, world, log, config, say=print, run_dir=None):
        # The same input on every rank: any difference between ranks comes from dropout alone.
        features = tf.nest.map_structure(lambda spec: tf.ones([1, *spec.shape[1:]], spec.dtype),
                                         job.train_data.element_spec[0])
        training = tf.function(lambda f: job.model(f, training=True))
        inference = tf.function(lambda f: job.model(f, training=False))
        timing = {"training_output": digest(training(features)),
                  "inference_output": digest(inference(features))}
        return loop.RunOutcome(status="aborted", accuracy=0.0, weights_digest=loop.weights_digest(job.model),
                               evals=[], steps=0, train_seconds=0.0, timing=timing)
    session.train = probe


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow-root-writes", type=float, default=0.0)
    parser.add_argument("--slow-run-start", type=float, default=0.0)
    parser.add_argument("--cache-clear-fails-on", type=int, default=None)
    parser.add_argument("--probe-dropout", action="store_true")
    parser.add_argument("module")
    parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    rank = rank_from_launcher()
    if args.slow_root_writes and rank == 0:
        slow_root_writes(args.slow_root_writes)
    if args.slow_run_start and rank == 0:
        slow_run_start(args.slow_run_start)
    if args.cache_clear_fails_on == rank:
        failing_cache_clear()
    if args.probe_dropout:
        probe_dropout()
    sys.argv = [args.module, *args.rest]
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
