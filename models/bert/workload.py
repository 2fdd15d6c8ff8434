"""The BERT-large workload: evaluation schedule, closed-rule checks and the pieces the suite's loop runs."""
import glob
import os

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

from models.bert.presets import BENCHMARK, TARGET_MLM_ACCURACY
from suite.common.workload import Block, Division, Job, WorkloadSpec, local_batch_size

MLPERF_EVAL_RECORDS = 10_000
SYNTHETIC_EVAL_BATCHES = 4


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


def checkpoint_files(init_checkpoint):
    """The TF1 files (index and data) of an init_checkpoint given as a folder or a prefix."""
    path = init_checkpoint_path(init_checkpoint)
    prefix = os.path.join(path, "*") if os.path.isdir(path) else path
    return sorted(glob.glob(prefix + ".index") + glob.glob(prefix + ".data-*"))


def stamp_problem(config, info):
    """Why the data and checkpoint are not those `data_cli check` verified (models/bert/stamp.py), or None.

    Only os.stat: the run may not read the records before run_start, nor afford to digest 4 GB.
    """
    from models.bert import stamp
    if config.synthetic or info is None or not config.init_checkpoint:
        return None  # open for its own reasons already
    return stamp.problem(config.data_dir, info.train_files + info.eval_files,
                         checkpoint_files(config.init_checkpoint))


def division(config, model_config, info, unverified=None):
    """closed when the run follows the closed BERT rules, else open with the reasons.

    unverified: stamp_problem's line, when the MLPerf data and phase-1 checkpoint are not the verified ones.
    """
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
    elif unverified and not config.synthetic and not (info is not None and info.generated):
        reasons.append(unverified)
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
    from models.bert.model import build_pretraining_model, mlperf_tensor_names, training_flops_per_sequence
    from suite.train.loop import set_precision_policy

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
        benchmark=BENCHMARK.name, model=model, optimizer=optimizer, train_data=train, eval_data=make_eval,
        loss_fn=_loss, eval_fn=_masked_lm_counts, blocks=plan_blocks(config),
        target_accuracy=config.target_accuracy, global_batch_size=config.global_batch_size,
        local_batch_size=batch, train_samples=0, eval_samples=eval_records,
        division=division(config, model_config, info, stamp_problem(config, info)),
        hyperparameters=hyperparameters,
        tensor_names=list(mlperf_tensor_names(model)),
        learning_rate=lambda step: float(schedule(step)),
        accumulation_steps=config.accumulation_steps, log_samples_trained=True, eval_unit="masked tokens",
        describe_error=(lambda err: data.describe_data_error(err, info)) if info else None,
        flops_per_sample=training_flops_per_sequence(model_config, config.max_seq_length,
                                                     config.max_predictions_per_seq),
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


SPEC = WorkloadSpec(benchmark=BENCHMARK, build_job=build_job)
