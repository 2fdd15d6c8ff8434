"""The per-GPU rate at each per-GPU batch the sweep's scales will train at, measured first on its smallest
scale (`--measure-rates`): strong scaling shrinks the per-GPU batch, and what that costs per sample is
measured here rather than taken for the network's doing.

Each point is one launch of the model with --throughput on the smallest scale, its global batch set to
the per-GPU batch times that scale's processes; SWEEP/rates.json lists the points, which
`python -m suite.cluster.scaling --from-results ... --rates SWEEP/rates.json` takes into its
per-GPU rate table.
"""
import os

from suite.cluster.sweep import rcp_check
from suite.common import benchmarks

RATES_JSON = "rates.json"


def per_gpu_batches(sweep):
    """The distinct per-GPU batches of the sweep's scales, from each scale's resolved preset."""
    benchmark = benchmarks.of_module(sweep.model[0])
    if benchmark is None:
        return []
    found = set()
    for scale in sweep.scales:
        config = rcp_check.scale_config(sweep, scale, benchmark)
        found.add(config.global_batch_size // scale.np)
    return sorted(found)


def smallest(sweep):
    return min(sweep.scales, key=lambda scale: scale.np)


def rate_dir(sweep, batch):
    return sweep.path("rates", f"per_gpu_batch_{batch}")


def rate_command(sweep, batch):
    """MODULE [model args] measuring the throughput at `batch` per GPU on the smallest scale."""
    scale = smallest(sweep)
    return [*sweep.model, "--preset", scale.preset, "--run-dir", rate_dir(sweep, batch), "--throughput",
            "--distribution", scale.distribution, "--set", f"global_batch_size={batch * scale.np}"]


def point(sweep, batch, record):
    """rates.json's point of one throughput.json (the run's own record)."""
    scale = smallest(sweep)
    return {"per_gpu_batch": batch, "gpus": scale.np, "system": scale.system,
            "samples_per_second_per_gpu": record["samples_per_second"] / record["world_size"],
            "throughput_json": os.path.relpath(os.path.join(rate_dir(sweep, batch), "throughput.json"),
                                               sweep.out)}
