"""The BERT-large workload: config, presets, evaluation schedule, closed-rule checks and the loop's pieces."""
import glob
import os
from dataclasses import dataclass

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

from suite.config import CommonConfig, Preset
from suite.workload import Block, Division, Job, WorkloadSpec, local_batch_size

BENCHMARK = "bert"
TARGET_MLM_ACCURACY = 0.720
MLPERF_EVAL_RECORDS = 10_000
SYNTHETIC_EVAL_BATCHES = 4


@dataclass(frozen=True, kw_only=True)
class BertRunConfig(CommonConfig):
    """BERT-large phase-2 pretraining hyperparameters; the defaults are the closed 8-GPU point (batch 448)."""

    global_batch_size: int = 448
    accumulation_steps: int = 1
    """Micro-batches per optimizer step on each rank (MLPerf's gradient_accumulation_steps)."""
    bert_config: str = ""
    """bert_config.json of the model. Empty: the one beside init_checkpoint, else the one in data_dir
    (generated datasets carry theirs), else BERT-large."""
    init_checkpoint: str = ""
    """The MLPerf phase-1 TF1 checkpoint (model.ckpt-28252 prefix or its directory); empty starts from
    random weights (open division)."""
    max_seq_length: int = 512
    max_predictions_per_seq: int = 76
    eval_batch_size: int = 0
    """Per-rank evaluation batch; 0 means the per-rank micro-batch."""
    base_lr: float = 0.000425
    train_steps: int = 6700
    """Optimizer steps in the budget; also the length of the learning-rate decay."""
    warmup_steps: int = 0
    start_warmup_step: int = 0
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    weight_decay: float = 0.01
    eval_interval_samples: int = 0
    """Samples between evaluations; 0 means the rules' FLOOR(0.05*(230.23*GBS + 3,000,000), 25,000).
    The k-th evaluation comes at the first step whose trained samples reach k times it."""
    target_accuracy: float = TARGET_MLM_ACCURACY

    def problems(self):
        found = super().problems()
        for name in ("accumulation_steps", "max_seq_length", "max_predictions_per_seq", "train_steps"):
            if getattr(self, name) <= 0:
                found.append(f"{name} must be positive, not {getattr(self, name)}")
        for name in ("warmup_steps", "eval_interval_samples", "eval_batch_size"):
            if getattr(self, name) < 0:
                found.append(f"{name} must not be negative, not {getattr(self, name)}")
        if self.base_lr <= 0:
            found.append(f"base_lr must be positive, not {self.base_lr}")
        for name in ("beta_1", "beta_2"):
            if not 0 <= getattr(self, name) < 1:
                found.append(f"{name} must be within [0, 1), not {getattr(self, name)}")
        if not 0 < self.target_accuracy <= 1:
            found.append(f"target_accuracy is a fraction in (0, 1], not {self.target_accuracy}")
        return found


def rules_eval_interval(global_batch_size):
    """Samples between evaluations under the v2.1 rules: FLOOR(0.05*(230.23*GBS + 3,000,000), 25,000)."""
    return int(0.05 * (230.23 * global_batch_size + 3_000_000) // 25_000) * 25_000


def eval_interval_samples(config):
    """Samples between evaluations: the setting, or the rules' formula when it is 0."""
    return config.eval_interval_samples or rules_eval_interval(config.global_batch_size)


def eval_steps(config):
    """Optimizer steps after which to evaluate: the k-th at the first step whose samples reach k x interval.

    Each point is rounded up on its own, so the grid does not drift (rounding the interval up once
    would move every evaluation 80 samples later than the previous one at batch 448). The budget ends
    at the last point within train_steps: a closed run evaluates on the grid only.
    """
    interval, batch = eval_interval_samples(config), config.global_batch_size
    steps, k = [], 1
    while (step := -(-k * interval // batch)) <= config.train_steps:
        steps.append(step)
        k += 1
    if not steps:
        raise ValueError(f"train_steps {config.train_steps} ends before the first evaluation at step "
                         f"{-(-interval // batch)} ({interval} samples at batch {batch})")
    return steps


def plan_blocks(config):
    """One block per evaluation; MLPerf BERT counts epochs in samples, so epoch_num = samples trained."""
    batch, blocks, done = config.global_batch_size, [], 0
    for step in eval_steps(config):
        blocks.append(Block(first_epoch_num=done * batch, epoch_count=(step - done) * batch,
                            eval_epoch_num=step * batch, steps=step - done))
        done = step
    return blocks


def _closed(gpus, per_gpu, accumulation, **hparams):
    return dict(global_batch_size=gpus * per_gpu * accumulation, accumulation_steps=accumulation,
                precision="fp16", **hparams)


# Hyperparameters of the MLPerf v2.1 reference convergence points (mlperf-logging
# rcp_checker/training_2.1.0/rcps_bert.json) for each global batch.
RCP_448 = dict(base_lr=0.000425, train_steps=6700, warmup_steps=0, start_warmup_step=0, beta_1=0.9,
               beta_2=0.999, weight_decay=0.01)
RCP_1536 = dict(base_lr=0.002, train_steps=2254, warmup_steps=0, start_warmup_step=0, beta_1=0.66,
                beta_2=0.996, weight_decay=0.01)
RCP_3072 = dict(base_lr=0.002, train_steps=1141, warmup_steps=100, start_warmup_step=0, beta_1=0.66,
                beta_2=0.998, weight_decay=0.01)

PRESETS = {
    "closed_8xA100_gbs448": Preset(
        "1 node x 8 A100-80GB", "8 GPUs x 56 = 448",
        _closed(8, 56, 1, **RCP_448),
        "RCP 448 (LR 0.000425, 6700 steps, no warmup); NVIDIA's v2.1 8-GPU batch. Evaluates at the "
        "first step past each 150,000 samples (steps 335, 670, 1005, ..., 6697)."),
    "closed_16xA100_gbs448": Preset(
        "2 nodes x 8 A100-80GB", "16 GPUs x 28 = 448",
        _closed(16, 28, 1, **RCP_448),
        "Strong scaling at the 8-GPU convergence point: same steps, half the per-GPU batch."),
    "closed_32xA100_gbs448": Preset(
        "4 nodes x 8 A100-80GB", "32 GPUs x 14 = 448",
        _closed(32, 14, 1, **RCP_448),
        "Strong scaling at the 8-GPU convergence point; a small per-GPU batch, communication-heavy."),
    "closed_16xA100_gbs1536": Preset(
        "2 nodes x 8 A100-80GB", "16 GPUs x 48 x 2 accumulation = 1536",
        _closed(16, 48, 2, **RCP_1536),
        "RCP 1536 (LR 0.002, 2254 steps, beta 0.66/0.996); evaluates at the first step past each "
        "150,000 samples (steps 98, 196, 293, ...)."),
    "closed_32xA100_gbs3072": Preset(
        "4 nodes x 8 A100-80GB", "32 GPUs x 48 x 2 accumulation = 3072",
        _closed(32, 48, 2, **RCP_3072),
        "RCP 3072 (LR 0.002, 1141 steps, warmup 100, beta 0.66/0.998); evaluates at the first step "
        "past each 175,000 samples (steps 57, 114, 171, ...)."),
    "tiny_cpu": Preset(
        "2 CPU processes", "2 ranks x 16 = 32",
        dict(global_batch_size=32, max_seq_length=64, max_predictions_per_seq=10, base_lr=0.05,
             train_steps=800, warmup_steps=50, beta_1=0.9, beta_2=0.999, weight_decay=0.01,
             eval_interval_samples=3200, target_accuracy=0.35, log_every=50, clear_cache=False),
        "Open division: the learnable generated dataset of `make demo-bert` (64 tokens, 10 predictions, "
        "the 2-layer model of its bert_config.json); evaluates every 100 steps and stops at 0.35 masked-LM "
        "accuracy, about 20x the majority-word baseline (0.017), usually after 300-400 steps."),
    "closed_path_cpu": Preset(
        "1 CPU process", "1 rank x 2 x 2 accumulation = 4",
        dict(global_batch_size=4, accumulation_steps=2, max_seq_length=64, max_predictions_per_seq=10,
             train_steps=2, eval_interval_samples=4, log_every=1, clear_cache=False),
        "The BERT-large code path (24 layers, LAMB, RCP-448 settings, gradient accumulation) at a tiny "
        "batch and short sequences, for tests; about 14 GB of memory per process on a CPU."),
}


def resolve_bert_config_path(config):
    """The bert_config.json to use: explicit, beside the checkpoint, in the data folder, or none (large)."""
    if config.bert_config:
        return config.bert_config
    candidates = []
    if config.init_checkpoint:
        checkpoint = init_checkpoint_path(config.init_checkpoint)
        folder = checkpoint if os.path.isdir(checkpoint) else os.path.dirname(checkpoint)
        # The download keeps bert_config.json one level above its tf1_ckpt/ folder.
        candidates += [os.path.join(folder, "bert_config.json"),
                       os.path.join(os.path.dirname(folder.rstrip(os.sep)), "bert_config.json")]
    if config.data_dir and not config.synthetic:
        candidates.append(os.path.join(config.data_dir, "bert_config.json"))
    return next((path for path in candidates if os.path.isfile(path)), "")


def init_checkpoint_path(path):
    """The TF1 checkpoint at `path`: the path itself, or the tf1_ckpt/ folder inside it (as downloaded)."""
    nested = os.path.join(path, "tf1_ckpt")
    if os.path.isdir(path) and not glob.glob(os.path.join(path, "*.index")) and os.path.isdir(nested):
        return nested
    return path


def load_model_config(config):
    from models.bert.model import BERT_LARGE, BertConfig
    path = resolve_bert_config_path(config)
    if config.bert_config and not os.path.isfile(path):
        raise ValueError(f"bert_config {path}: no such file")
    return (BertConfig.from_json_file(path) if path else BERT_LARGE), path


def division(config, model_config, info):
    """closed when the run follows the closed BERT rules, else open with the reasons."""
    from models.bert import optim
    from models.bert.model import BERT_LARGE
    reasons = []
    if config.synthetic:
        reasons.append("synthetic data")
    elif info is not None and (info.generated or info.eval_records != MLPERF_EVAL_RECORDS):
        reasons.append(f"dataset is not the MLPerf Wikipedia 2020/01/01 set ({info.eval_records} eval records"
                       f"{', generated' if info.generated else ''})")
    if model_config != BERT_LARGE:
        reasons.append("model is not BERT-large")
    if not config.init_checkpoint:
        reasons.append("no initial checkpoint (closed: the MLPerf phase-1 checkpoint)")
    if (config.max_seq_length, config.max_predictions_per_seq) != (512, 76):
        reasons.append(f"sequence length {config.max_seq_length} / {config.max_predictions_per_seq} "
                       f"predictions (closed: 512 / 76)")
    required_interval = rules_eval_interval(config.global_batch_size)
    if config.eval_interval_samples not in (0, required_interval):
        reasons.append(f"eval_interval_samples {config.eval_interval_samples} (closed: "
                       f"{required_interval} at batch {config.global_batch_size})")
    if config.target_accuracy != TARGET_MLM_ACCURACY:
        reasons.append(f"target_accuracy {config.target_accuracy} (closed: {TARGET_MLM_ACCURACY})")
    reasons += optim.closed_rule_violations(power=1.0, end_lr=0.0, clip_norm=1.0)
    return Division("open" if reasons else "closed", tuple(reasons))


def _datasets(config, world, seed, batch, eval_batch, vocab_size):
    """(info, train dataset, eval dataset factory, eval record count)."""
    from models.bert import data
    if config.synthetic:
        train = data.synthetic_dataset(batch, config.max_seq_length, config.max_predictions_per_seq,
                                       vocab_size, seed=seed + world.rank)
        return None, train, lambda: train.take(SYNTHETIC_EVAL_BATCHES), \
            SYNTHETIC_EVAL_BATCHES * batch * world.size
    # Before run_start only dataset.json, listings and sizes: MLPerf's clock starts before data is touched.
    info = data.dataset_info(config.data_dir)
    if (info.seq_length, info.max_predictions) != (config.max_seq_length, config.max_predictions_per_seq):
        raise ValueError(f"{os.path.join(config.data_dir, data.METADATA_FILE)} declares sequences of "
                         f"{info.seq_length} tokens with {info.max_predictions} predictions, but the config "
                         f"asks for max_seq_length={config.max_seq_length}, max_predictions_per_seq="
                         f"{config.max_predictions_per_seq}")
    problem = data.vocabulary_problem(info, vocab_size)
    if problem:
        raise ValueError(problem)
    train = data.train_dataset(info, batch, rank=world.rank, world_size=world.size, seed=seed)
    make_eval = lambda: data.eval_dataset(info, eval_batch, rank=world.rank,  # noqa: E731
                                          world_size=world.size)
    return info, train, make_eval, info.eval_records


def _check_vocab_file(config, model_config, config_path):
    """vocab.txt beside the model config must have vocab_size lines (else a vocabulary/config mismatch)."""
    from models.bert import data
    if not config_path:
        return
    vocab = os.path.join(os.path.dirname(config_path), "vocab.txt")
    if os.path.isfile(vocab):
        problem = data.vocab_problem(vocab, model_config.vocab_size)
        if problem:
            raise ValueError(problem)


def build_job(config, world, seed):
    """Builds model, optimizer, data and schedule for one run (all of it untimed init)."""
    import tensorflow as tf
    from models.bert import checkpoint, data, optim
    from models.bert.model import build_pretraining_model, mlperf_tensor_names
    from suite.loop import set_precision_policy

    batch = local_batch_size(config.global_batch_size, world.size, config.accumulation_steps)
    micro_batch = batch // config.accumulation_steps
    model_config, config_path = load_model_config(config)
    if config.max_seq_length > model_config.max_position_embeddings:
        raise ValueError(f"max_seq_length {config.max_seq_length} exceeds max_position_embeddings "
                         f"{model_config.max_position_embeddings} of {config_path or 'BERT-large'}")
    _check_vocab_file(config, model_config, config_path)
    info, train, make_eval, eval_records = _datasets(
        config, world, seed, batch, config.eval_batch_size or micro_batch, model_config.vocab_size)

    tf.keras.utils.set_random_seed(seed)  # same initial weights on every rank before the broadcast
    set_precision_policy(config.precision)
    model = build_pretraining_model(model_config, config.max_seq_length, config.max_predictions_per_seq)
    loaded = (checkpoint.load_tf1_checkpoint(model, init_checkpoint_path(config.init_checkpoint))
              if config.init_checkpoint else 0)
    optimizer, schedule = optim.build_optimizer(
        base_lr=config.base_lr, train_steps=config.train_steps, warmup_steps=config.warmup_steps,
        start_warmup_step=config.start_warmup_step, beta_1=config.beta_1, beta_2=config.beta_2,
        epsilon=config.epsilon, weight_decay=config.weight_decay)
    if config.precision == "fp16":
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)

    hyperparameters = {
        "global_batch_size": config.global_batch_size,
        "eval_samples": eval_records,
        "gradient_accumulation_steps": config.accumulation_steps,
        "max_sequence_length": config.max_seq_length,
        **optim.mlperf_hyperparameters(
            base_lr=config.base_lr, train_steps=config.train_steps, warmup_steps=config.warmup_steps,
            start_warmup_step=config.start_warmup_step, beta_1=config.beta_1, beta_2=config.beta_2,
            epsilon=config.epsilon, weight_decay=config.weight_decay),
    }
    return Job(
        benchmark=BENCHMARK, model=model, optimizer=optimizer, train_data=train, eval_data=make_eval,
        loss_fn=_loss, eval_fn=_masked_lm_counts, blocks=plan_blocks(config),
        target_accuracy=config.target_accuracy, global_batch_size=config.global_batch_size,
        local_batch_size=batch, train_samples=0, eval_samples=eval_records,
        division=division(config, model_config, info), hyperparameters=hyperparameters,
        tensor_names=list(mlperf_tensor_names(model)),
        learning_rate=lambda step: float(schedule(step)),
        accumulation_steps=config.accumulation_steps, log_samples_trained=True, eval_unit="masked tokens",
        describe_error=(lambda err: data.describe_data_error(err, info)) if info else None,
        details={"bert_config": config_path or "built-in BERT-large", "model": model_config.to_dict(),
                 "init_checkpoint_variables": loaded, "eval_steps": eval_steps(config),
                 "local_batch_size": batch, "micro_batch_size": micro_batch})


def _loss(model, features, labels):
    from models.bert.model import pretraining_loss
    mlm_logits, nsp_logits = model(features, training=True)
    return pretraining_loss(mlm_logits, nsp_logits, labels)


def _masked_lm_counts(model, features, labels):
    from models.bert.model import masked_lm_counts
    mlm_logits, _ = model(features, training=False)
    return masked_lm_counts(mlm_logits, labels)


SPEC = WorkloadSpec(name="bert", title="BERT pretraining", config_cls=BertRunConfig, presets=PRESETS,
                    default_preset="closed_8xA100_gbs448", build_job=build_job)
