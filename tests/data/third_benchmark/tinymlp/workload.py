"""The third benchmark's pieces for the suite's loop: model, optimizer, generated data, loss, metric."""
import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

from models.tinymlp.presets import BENCHMARK
from suite.common.workload import Block, Division, Job, WorkloadSpec, local_batch_size

DATA_SEED = 7  # every rank draws the same points, then keeps its own share


def _points(config, count, offset):
    """`count` points and labels, the same on every rank: centres from DATA_SEED, noise from offset."""
    import numpy as np
    centres = np.random.default_rng(DATA_SEED).normal(0, 3, (config.classes, config.features))
    noise = np.random.default_rng(DATA_SEED + offset)
    labels = noise.integers(0, config.classes, count)
    points = centres[labels] + noise.normal(0, 1, (count, config.features))
    return points.astype("float32"), labels.astype("int32")


def build_job(config, world, seed):
    import tensorflow as tf

    batch = local_batch_size(config.global_batch_size, world.size)
    steps_per_epoch = config.train_samples // config.global_batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"global_batch_size {config.global_batch_size} exceeds train_samples "
                         f"{config.train_samples}")
    train_points, train_labels = _points(config, config.train_samples, 1)
    eval_points, eval_labels = _points(config, config.eval_samples, 2)
    # Each rank trains and evaluates on its own share; the loop sums evaluation counts over ranks.
    train = (tf.data.Dataset.from_tensor_slices((train_points[world.rank::world.size],
                                                train_labels[world.rank::world.size]))
             .shuffle(config.train_samples, seed=seed).repeat().batch(batch, drop_remainder=True))
    make_eval = lambda: tf.data.Dataset.from_tensor_slices(  # noqa: E731
        (eval_points[world.rank::world.size], eval_labels[world.rank::world.size])).batch(batch)

    tf.keras.utils.set_random_seed(seed)
    model = tf.keras.Sequential([tf.keras.Input((config.features,)),
                                 tf.keras.layers.Dense(config.hidden, activation="relu", name="hidden"),
                                 tf.keras.layers.Dense(config.classes, name="logits")])
    optimizer = tf.keras.optimizers.SGD(config.learning_rate, momentum=0.9)
    blocks = [Block(first_epoch_num=epoch, epoch_count=1, eval_epoch_num=epoch, steps=steps_per_epoch,
                    epochs=((epoch, steps_per_epoch),)) for epoch in range(1, config.epochs + 1)]
    return Job(
        benchmark=BENCHMARK.name, model=model, optimizer=optimizer, train_data=train, eval_data=make_eval,
        loss_fn=_loss, eval_fn=_correct, blocks=blocks, target_accuracy=config.target_accuracy,
        global_batch_size=config.global_batch_size, local_batch_size=batch,
        train_samples=config.train_samples, eval_samples=config.eval_samples,
        division=Division("open", ("not an MLPerf benchmark",)),
        hyperparameters={"global_batch_size": config.global_batch_size, "opt_name": "sgd",
                         "opt_base_learning_rate": config.learning_rate,
                         "train_samples": config.train_samples, "eval_samples": config.eval_samples},
        tensor_names=[variable.name for variable in model.trainable_variables],
        learning_rate=lambda step: config.learning_rate,
        flops_per_sample=6.0 * BENCHMARK.parameter_count)


def _loss(model, points, labels):
    import tensorflow as tf
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        labels, model(points, training=True), from_logits=True))


def _correct(model, points, labels):
    import tensorflow as tf
    predicted = tf.argmax(model(points, training=False), axis=-1, output_type=tf.int32)
    correct = tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float32))
    return correct, tf.cast(tf.shape(labels)[0], tf.float32)


SPEC = WorkloadSpec(benchmark=BENCHMARK, build_job=build_job)
