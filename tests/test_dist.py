"""GPU pinning by local rank, checked on the CPU with TensorFlow's device calls recorded."""
import pytest

from suite.train import dist


@pytest.fixture
def recorded(monkeypatch):
    calls = {"visible": [], "growth": []}
    monkeypatch.setattr(dist.tf.config, "set_visible_devices",
                        lambda device, kind: calls["visible"].append((device, kind)))
    monkeypatch.setattr(dist.tf.config.experimental, "set_memory_growth",
                        lambda device, on: calls["growth"].append((device, on)))
    return calls


def test_each_local_rank_gets_its_own_gpu(monkeypatch, recorded):
    gpus = [f"gpu{i}" for i in range(8)]
    dist._pin_gpu(gpus, 5, 8)
    assert recorded["visible"] == [("gpu5", "GPU")]
    assert recorded["growth"] == [(g, True) for g in gpus]


def test_a_gpu_bound_by_the_launcher_is_used_whatever_the_local_rank(monkeypatch, recorded):
    dist._pin_gpu(["gpu0"], 3, 8)  # e.g. srun --gpus-per-task=1: each task sees one GPU
    assert recorded["visible"] == [("gpu0", "GPU")]


def test_more_ranks_than_gpus_on_a_host_is_refused_naming_the_host(monkeypatch, recorded):
    with pytest.raises(dist.LaunchError, match=r"runs 8 ranks but has 4 GPUs"):
        dist._pin_gpu(["gpu0", "gpu1", "gpu2", "gpu3"], 0, 8)
    assert recorded["visible"] == []
