"""The ResNet-50 workload: closed-rule checks, the evaluation plan and the pieces the suite's loop runs."""
import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

from models.resnet50.presets import BENCHMARK, IMAGENET_COUNTS, TARGET_TOP1
from suite.common.workload import Block, Division, Job, WorkloadSpec, local_batch_size


def _eval_epochs(config):
    """Epochs after which to evaluate: offset, offset + period, ..., up to the first at or after `epochs`.

    Only points on this grid: the rules fix when a closed run evaluates. A budget that ends between
    two of them (37 epochs at offset 3: 35 and 39) trains on, at end_lr, to the next one instead of
    adding an evaluation of its own; the reference convergence points for batch 3264 include runs
    that converged at epochs 36 and 37, which stopping at 35 would lose.
    """
    first = config.eval_offset or config.epochs_between_evals
    period = config.epochs_between_evals
    last = first + max(0, -(-(config.epochs - first) // period)) * period
    return list(range(first, last + 1, period))


def plan_blocks(config, steps_per_epoch):
    """MLPerf blocks: each ends with an evaluation; epochs are numbered from 1."""
    blocks, previous = [], 0
    for last in _eval_epochs(config):
        epochs = tuple((epoch, steps_per_epoch) for epoch in range(previous + 1, last + 1))
        blocks.append(Block(first_epoch_num=previous + 1, epoch_count=last - previous, eval_epoch_num=last,
                            steps=steps_per_epoch * len(epochs), epochs=epochs))
        previous = last
    return blocks


def division(config, info):
    """closed when the run follows the closed ResNet-50 rules, else open with the reasons."""
    from models.resnet50 import optim
    reasons = []
    if config.synthetic:
        reasons.append("synthetic data")
    elif info and (info.train_records, info.eval_records) != IMAGENET_COUNTS:
        reasons.append(f"dataset is not ImageNet-1k ({info.train_records} train / "
                       f"{info.eval_records} eval records)")
    elif info and info.bounding_boxes is not False:  # None: a dataset.json older than the field
        reasons.append(f"bounding_boxes {'true' if info.bounding_boxes else 'unknown'} in dataset.json "
                       f"(closed: false, no boxes, as in the reference data)")
    if config.image_size != 224:
        reasons.append(f"image_size {config.image_size} (closed: 224)")
    if config.num_classes not in (1000, 1001):
        reasons.append(f"num_classes {config.num_classes} (closed: 1000 or 1001)")
    if config.label_smoothing not in (0.0, 0.1):
        reasons.append(f"label_smoothing {config.label_smoothing} (closed: 0 or 0.1)")
    if config.epochs_between_evals != 4 or config.eval_offset > 3:
        reasons.append("evaluation must be every 4 epochs with offset 0-3")
    if config.target_accuracy != TARGET_TOP1:
        reasons.append(f"target_accuracy {config.target_accuracy} (closed: {TARGET_TOP1})")
    reasons += optim.closed_rule_violations(
        config.optimizer, base_lr=config.base_lr, weight_decay=config.weight_decay, end_lr=config.end_lr,
        power=config.poly_power, epsilon=config.lars_epsilon, momentum=config.momentum,
        global_batch_size=config.global_batch_size, eeta=config.lars_eeta, warmup_epochs=config.warmup_epochs)
    return Division("open" if reasons else "closed", tuple(reasons))


def epoch_coverage_reason(info, world_size, rank_epoch_samples):
    """Why an epoch would show some rank a record twice (closed: each record once per epoch), or None.

    Every rank trains steps_per_epoch x its local batch per epoch, so its share of the training records
    (models/resnet50/data.py, train_split) must hold that many. dataset.json's per-file counts give the
    shares exactly; without them, only a file count that divides evenly over the ranks is taken on trust
    (the reference's near-equal shards, one file list per rank).
    """
    if info is None:
        return None
    from models.resnet50 import data
    shares = [data.train_share(info, rank, world_size) for rank in range(world_size)]
    if None in shares:
        if len(info.train_files) % world_size == 0:
            return None
        return (f"{len(info.train_files)} training files over {world_size} ranks, and {info.data_dir}'s "
                f"dataset.json has no per-file record counts to show that every rank's share holds an "
                f"epoch (run `{data.check_command(info.data_dir)}` to add them)")
    short = [(rank, share) for rank, share in enumerate(shares) if share < rank_epoch_samples]
    if not short:
        return None
    rank, share = short[0]
    return (f"rank {rank}'s share of the training records is {share}, fewer than the {rank_epoch_samples} it "
            f"trains per epoch: it would see some records twice in an epoch (closed: each record once)")


def _datasets(config, world, seed, batch, eval_batch):
    """(info, train dataset, eval dataset factory, train records, eval records)."""
    import tensorflow as tf
    from models.resnet50 import data
    kwargs = dict(image_size=config.image_size, num_classes=config.num_classes,
                  channels_first=config.data_format == "channels_first")
    if config.synthetic:
        train = data.synthetic_dataset(batch, seed=seed + world.rank, **kwargs)
        eval_batches = 4
        epoch_samples = config.synthetic_epoch_samples or data.IMAGENET_TRAIN_RECORDS
        return (None, train, lambda: train.take(eval_batches), epoch_samples,
                eval_batches * batch * world.size)
    info = data.dataset_info(config.data_dir)
    if info.num_classes and info.num_classes > config.num_classes:
        raise ValueError(f"{config.data_dir} has {info.num_classes} classes but num_classes is "
                         f"{config.num_classes}")
    train = data.train_dataset(info, batch, rank=world.rank, world_size=world.size, seed=seed,
                               dtype=tf.float32, **kwargs)
    make_eval = lambda: data.eval_dataset(info, eval_batch, rank=world.rank,  # noqa: E731
                                          world_size=world.size, dtype=tf.float32, **kwargs)
    return info, train, make_eval, info.train_records, info.eval_records


def build_job(config, world, seed):
    """Builds model, optimizer, data and schedule for one run (all of it untimed init)."""
    import tensorflow as tf
    from models.resnet50 import data, optim
    from models.resnet50.model import build_resnet50, mlperf_tensor_names, training_flops_per_image
    from suite.train.loop import set_precision_policy

    batch = local_batch_size(config.global_batch_size, world.size)
    info, train, make_eval, train_records, eval_records = _datasets(
        config, world, seed, batch, config.eval_batch_size or batch)
    steps_per_epoch = train_records // config.global_batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"global_batch_size {config.global_batch_size} exceeds the {train_records} "
                         f"training records in {config.data_dir}")
    total_steps = steps_per_epoch * config.epochs
    warmup_steps = int(round(config.warmup_epochs * steps_per_epoch))

    tf.keras.utils.set_random_seed(seed)  # same initial weights on every rank before the broadcast
    set_precision_policy(config.precision)
    model = build_resnet50(config.num_classes, config.image_size, config.data_format)
    optimizer, schedule = optim.build_optimizer(
        config.optimizer, base_lr=config.base_lr, warmup_steps=warmup_steps, total_steps=total_steps,
        momentum=config.momentum, weight_decay=config.weight_decay, end_lr=config.end_lr,
        power=config.poly_power, eeta=config.lars_eeta, epsilon=config.lars_epsilon)
    if config.precision == "fp16":
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)

    hyperparameters = {
        "global_batch_size": config.global_batch_size,
        "train_samples": train_records,
        "eval_samples": eval_records,
        "model_bn_span": batch,
        "gradient_accumulation_steps": 1,
        **optim.mlperf_hyperparameters(
            config.optimizer, base_lr=config.base_lr, warmup_epochs=config.warmup_epochs,
            decay_steps_logged=int(schedule.decay_steps), momentum=config.momentum,
            weight_decay=config.weight_decay, end_lr=config.end_lr, power=config.poly_power,
            epsilon=config.lars_epsilon),
    }
    verdict = division(config, info)
    coverage = epoch_coverage_reason(info, world.size, steps_per_epoch * batch)
    if coverage:
        verdict = Division("open", (*verdict.reasons, coverage))
    return Job(
        benchmark=BENCHMARK.name, model=model, optimizer=optimizer, train_data=train, eval_data=make_eval,
        loss_fn=_loss_fn(config), eval_fn=_top1, blocks=plan_blocks(config, steps_per_epoch),
        target_accuracy=config.target_accuracy, global_batch_size=config.global_batch_size,
        local_batch_size=batch, train_samples=train_records, eval_samples=eval_records,
        division=verdict, hyperparameters=hyperparameters,
        tensor_names=list(mlperf_tensor_names(model)),
        learning_rate=lambda step: float(schedule(step)),
        describe_error=(lambda err: data.describe_data_error(err, info)) if info else None,
        flops_per_sample=training_flops_per_image(config.image_size, config.num_classes),
        details={"steps_per_epoch": steps_per_epoch, "total_steps": total_steps,
                 "warmup_steps": warmup_steps, "local_batch_size": batch})


def _loss_fn(config):
    import tensorflow as tf
    from models.resnet50 import optim

    def loss_fn(model, images, labels):
        logits = model(images, training=True)
        one_hot = tf.one_hot(labels, config.num_classes)
        loss = tf.reduce_mean(tf.keras.losses.categorical_crossentropy(
            one_hot, logits, from_logits=True, label_smoothing=config.label_smoothing))
        if config.optimizer == "sgd":
            # LARS applies weight decay itself; plain SGD takes it as an L2 term, as the reference.
            loss += optim.l2_regularization(optim.l2_decayed_variables(model), config.weight_decay)
        return loss
    return loss_fn


def _top1(model, images, labels):
    import tensorflow as tf
    logits = model(images, training=False)
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    correct = tf.reduce_sum(tf.cast(tf.equal(predicted, tf.cast(labels, tf.int32)), tf.float32))
    return correct, tf.cast(tf.shape(labels)[0], tf.float32)


SPEC = WorkloadSpec(benchmark=BENCHMARK, build_job=build_job)
