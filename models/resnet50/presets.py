"""ResNet-50 settings and named presets: plain data, readable without TensorFlow (the login node's view)."""
from dataclasses import dataclass

from models.resnet50.published import PUBLISHED, PUBLISHED_SCALING
from suite.common.config import CommonConfig, Preset
from suite.common.workload import Benchmark

TARGET_TOP1 = 0.759
IMAGENET_COUNTS = (1_281_167, 50_000)  # train, validation records


@dataclass(frozen=True, kw_only=True)
class ResNetConfig(CommonConfig):
    """ResNet-50 v1.5 hyperparameters; the defaults are the closed 8-GPU convergence point (batch 3264)."""

    global_batch_size: int = 3264
    image_size: int = 224
    """Training crop size; the closed rules fix it at 224."""
    num_classes: int = 1000
    data_format: str = "channels_last"
    """channels_last, or channels_first (GPU only: TensorFlow's CPU convolutions are NHWC)."""
    eval_batch_size: int = 0
    """Per-rank evaluation batch; 0 means the per-rank training batch."""
    optimizer: str = "lars"
    """lars or sgd (momentum), the two closed options."""
    base_lr: float = 10.5
    warmup_epochs: float = 2.0
    end_lr: float = 0.0001
    poly_power: float = 2.0
    momentum: float = 0.9
    weight_decay: float = 5e-5
    lars_eeta: float = 0.001
    lars_epsilon: float = 0.0
    label_smoothing: float = 0.1
    epochs: int = 37
    """Length of the learning-rate decay in epochs; training goes on at end_lr up to the first
    evaluation at or after it (evaluations stay on the grid)."""
    epochs_between_evals: int = 4
    eval_offset: int = 3
    """First evaluation after this epoch (0 means after epochs_between_evals); MLPerf allows 0-3."""
    target_accuracy: float = TARGET_TOP1
    synthetic_epoch_samples: int = 0
    """Samples per epoch with synthetic data; 0 means ImageNet's 1,281,167."""

    def problems(self):
        found = super().problems()
        if self.data_format not in ("channels_last", "channels_first"):
            found.append(f"data_format must be channels_last or channels_first, not {self.data_format!r}")
        if self.optimizer not in ("lars", "sgd"):
            found.append(f"optimizer must be lars or sgd, not {self.optimizer!r}")
        for name in ("image_size", "num_classes", "epochs", "epochs_between_evals"):
            if getattr(self, name) <= 0:
                found.append(f"{name} must be positive, not {getattr(self, name)}")
        if not 0 <= self.eval_offset <= self.epochs_between_evals:
            found.append(f"eval_offset must be within 0..epochs_between_evals, not {self.eval_offset}")
        if self.warmup_epochs < 0 or self.warmup_epochs > self.epochs:
            found.append(f"warmup_epochs must be within 0..epochs, not {self.warmup_epochs}")
        if not 0 < self.target_accuracy <= 1:
            found.append(f"target_accuracy is a fraction in (0, 1], not {self.target_accuracy}")
        return found


def _closed(gpus, per_gpu, **hparams):
    return dict(global_batch_size=gpus * per_gpu, precision="fp16", **hparams)


# The closed presets take their hyperparameters from the MLPerf v1.1 reference convergence
# points (RCPs) for their global batch; the per-GPU batch is what makes them fit a scale.
RCP_3264 = dict(base_lr=10.5, warmup_epochs=2.0, weight_decay=5e-5, momentum=0.9, epochs=37, eval_offset=3)
RCP_4096 = dict(base_lr=10.0, warmup_epochs=5.0, weight_decay=2e-4, momentum=0.9, epochs=42, eval_offset=2)
# 4710 decay steps x 13056 / 1,281,167 = 48.0 epochs. The RCP carries no evaluation offset: its ten
# reference runs converged at epochs 44-46, and offset 2 puts an evaluation at 46 (2, 6, ..., 46, 50).
RCP_13056 = dict(base_lr=12.8, warmup_epochs=9.0, weight_decay=2.5e-5, momentum=0.9, epochs=48, eval_offset=2)

PRESETS = {
    "closed_8xA100_gbs3264": Preset(
        "1 node x 8 A100-80GB", "8 GPUs x 408 = 3264",
        _closed(8, 408, **RCP_3264),
        "RCP 3264: LR 10.5, warmup 2, wd 5e-5, decay over 37 epochs; the reference converged in 34-37 "
        "epochs (evals at 3, 7, ..., 35, 39).", ranks=(8,)),
    "closed_16xA100_gbs3264": Preset(
        "2 nodes x 8 A100-80GB", "16 GPUs x 204 = 3264",
        _closed(16, 204, **RCP_3264),
        "Same RCP as 8 GPUs: the global batch stays, the per-GPU batch halves.", ranks=(16,)),
    "closed_32xA100_gbs3264": Preset(
        "4 nodes x 8 A100-80GB", "32 GPUs x 102 = 3264",
        _closed(32, 102, **RCP_3264),
        "Same convergence as 8 GPUs; small per-GPU batch, so communication weighs more.", ranks=(32,)),
    "closed_32xA100_gbs4096": Preset(
        "4 nodes x 8 A100-80GB", "32 GPUs x 128 = 4096",
        _closed(32, 128, **RCP_4096),
        "RCP 4096: LR 10, warmup 5, wd 2e-4; ~40 epochs.", ranks=(32,)),
    "closed_32xA100_gbs13056": Preset(
        "4 nodes x 8 A100-80GB", "32 GPUs x 408 = 13056",
        _closed(32, 408, **RCP_13056),
        "RCP 13056: LR 12.8, warmup 9, wd 2.5e-5, decay over 48 epochs; weak scaling from 8 GPUs at 408 "
        "per GPU. The reference converged in 44-46 epochs (evals at 2, 6, ..., 46, 50).", ranks=(32,)),
    "tiny_cpu": Preset(
        "2 CPU processes", "2 ranks x 16 = 32",
        dict(global_batch_size=32, image_size=64, num_classes=4, base_lr=2.0, warmup_epochs=1.0,
             weight_decay=1e-4, epochs=8, epochs_between_evals=1, eval_offset=1, target_accuracy=0.9,
             log_every=5, clear_cache=False),
        "Open division: the learnable generated dataset (4 classes, 64 px) of `make demo`; "
        "evaluates every epoch and usually reaches 0.9 at epoch 6 or 7 of 8."),
    "closed_path_cpu": Preset(
        "2 CPU processes", "2 ranks x 2 = 4",
        dict(global_batch_size=4, epochs=1, eval_offset=1, warmup_epochs=0.5, log_every=1, clear_cache=False),
        "The closed code path (224 px, 1000 classes, LARS) at a tiny batch, for tests."),
    # Training and evaluation take a few seconds; launch start-up (TensorFlow import, model build,
    # tracing, the first step's graph optimisation) is most of each run's 25-120 s on two cores.
    "sweep_cpu": Preset(
        "1 or 2 CPU processes", "1 x 16 or 2 ranks x 8 = 16",
        dict(global_batch_size=16, image_size=32, num_classes=2, base_lr=2.0, warmup_epochs=0.5,
             weight_decay=1e-4, epochs=1, epochs_between_evals=1, eval_offset=1, target_accuracy=0.9,
             log_every=1, clear_cache=False),
        "Open division, for sweep tests: the generated dataset at 32 px with 2 classes (64 train "
        "images: 4 steps), one epoch, one evaluation. Far too short to reach its 0.9 target, so runs "
        "end not converged (run_stop aborted), still valid MLPerf result rows."),
}


def rcp_hyperparameters(config, ranks):
    """The config's values under the names of an RCP record's Hyperparams (rcps_resnet.json), for
    suite.cluster.rcp.compare_hyperparameters. Decay steps come from the decay epochs as the closed
    presets were made from the RCPs (epochs x ImageNet's training images / global batch, rounded);
    model_bn_span is what the workload logs, the per-rank batch."""
    return {
        "optimizer": config.optimizer,
        "opt_base_learning_rate": config.base_lr,
        "opt_learning_rate_warmup_epochs": config.warmup_epochs,
        "opt_momentum": config.momentum,
        "opt_weight_decay": config.weight_decay,
        "opt_learning_rate_decay_steps": round(config.epochs * IMAGENET_COUNTS[0] / config.global_batch_size),
        "model_bn_span": config.global_batch_size // ranks,
        "opt_end_learning_rate": config.end_lr,
        "opt_learning_rate_decay_poly_power": config.poly_power,
        "epsilon": config.lars_epsilon,
    }


CONFIG = ResNetConfig
DEFAULT_PRESET = "closed_8xA100_gbs3264"
# Trainable parameters of ResNet-50 v1.5 as models/resnet50/model.py builds it (tests/test_resnet_model.py
# counts them on the built model).
PARAMETER_COUNT = 25_557_032

BENCHMARK = Benchmark(
    name="resnet", module=__package__, title="ResNet-50 v1.5", config_cls=CONFIG, presets=PRESETS,
    default_preset=DEFAULT_PRESET, sample_unit="images", parameter_count=PARAMETER_COUNT,
    # MLPerf Training rules v2.1, "Benchmark Results": 5 runs for image classification.
    required_runs=5, converges_in="epochs", rcp_hyperparameters=rcp_hyperparameters,
    published=PUBLISHED, published_scaling=PUBLISHED_SCALING)
