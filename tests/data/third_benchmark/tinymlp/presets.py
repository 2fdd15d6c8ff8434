"""The third benchmark's settings, presets and description: plain data, read without TensorFlow."""
from dataclasses import dataclass

from suite.common.config import CommonConfig, Preset
from suite.common.workload import Benchmark


@dataclass(frozen=True, kw_only=True)
class TinyMlpConfig(CommonConfig):
    """A two-layer perceptron classifying points drawn around one centre per class."""

    features: int = 16
    hidden: int = 32
    classes: int = 4
    train_samples: int = 512
    eval_samples: int = 128
    learning_rate: float = 0.1
    epochs: int = 3
    target_accuracy: float = 0.9

    def problems(self):
        found = super().problems()
        for name in ("features", "hidden", "classes", "train_samples", "eval_samples", "epochs"):
            if getattr(self, name) <= 0:
                found.append(f"{name} must be positive, not {getattr(self, name)}")
        return found


def parameter_count(features, hidden, classes):
    """Weights and biases of both layers."""
    return features * hidden + hidden + hidden * classes + classes


PRESETS = {
    "tiny_cpu": Preset(
        "1 or 2 CPU processes", "2 ranks x 16 = 32",
        dict(global_batch_size=32, synthetic=True, log_every=4, clear_cache=False),
        "Generated points (512 to train, 128 to evaluate), 3 epochs, an evaluation after each."),
    "closed_16x": Preset(
        "2 nodes x 8 GPUs", "16 GPUs x 64 = 1024",
        dict(global_batch_size=1024, train_samples=65536, synthetic=True),
        "A larger scale, to render jobs for.", ranks=(16,)),
}

BENCHMARK = Benchmark(
    name="tiny_mlp", module=__package__, title="Tiny MLP", config_cls=TinyMlpConfig, presets=PRESETS,
    default_preset="tiny_cpu", sample_unit="points", parameter_count=parameter_count(
        TinyMlpConfig.features, TinyMlpConfig.hidden, TinyMlpConfig.classes),
    required_runs=3, converges_in="epochs")
