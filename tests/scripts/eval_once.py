"""Evaluates one fixed set of weights with the suite's loop; run under mpirun at any world size.

Usage: python tests/scripts/eval_once.py DATA_DIR EVAL_BATCH WEIGHTS OUT_JSON
The first call (one process) trains a few steps and saves WEIGHTS; later calls load them.
"""
import os
import json
import sys

import suite

with suite.lean_tensorflow_import():  # as a rank imports TensorFlow
    from models.resnet50.presets import PRESETS, ResNetConfig
    from models.resnet50.workload import build_job
    from suite.train import dist, loop
    from suite.common.config import resolve


def main(data_dir, eval_batch, weights, out_path):
    config = resolve(ResNetConfig, PRESETS, "tiny_cpu", extra={"data_dir": data_dir},
                     sets=["image_size=32", f"eval_batch_size={eval_batch}", "global_batch_size=12"])
    world = dist.initialize()
    job = build_job(config, world, seed=11)  # same seed, so the same initial weights at any size
    if os.path.exists(weights):
        job.model.load_weights(weights)
    else:
        # A few real steps, so predictions depend on the image (an untrained net predicts one class).
        step, batches = loop.make_train_step(job), iter(job.train_data)
        for _ in range(60):
            step(*next(batches))
        job.model.save_weights(weights)
    accuracy, count = loop.evaluate(job, loop.make_eval_step(job), name="eval_once")
    if world.is_root:
        with open(out_path, "w") as handle:
            json.dump({"accuracy": accuracy, "count": count, "world_size": world.size}, handle)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4])
