"""ResNet-50 trained the canonical Horovod TF2 way, on synthetic data, timed: the baseline the suite is
measured against.

Written from Horovod's documented TF2 pattern, not from the suite: hvd.init(), a GPU per local rank,
tf.keras.applications.ResNet50(weights=None), momentum SGD with the learning rate scaled by the
number of processes, hvd.DistributedGradientTape, rank 0's variables broadcast after the first step.
No thread tuning: a process runs at TensorFlow's defaults, as a user would type the command.

    python bench/canonical_resnet50.py [--image-size 224] [--batch-size 16] [--out result.json]
    horovodrun -np 2 -H localhost:2 python bench/canonical_resnet50.py
"""
import argparse

from canonical_common import (add_timing_flags, hvd, positive_int, start_horovod, tf, timing_from,
                              train_and_time)

# Horovod's Keras ImageNet example's per-process learning rate, scaled by the process count.
BASE_LR = 0.0125
MOMENTUM = 0.9


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=positive_int, default=224, help="pixels a side (default 224)")
    parser.add_argument("--num-classes", type=positive_int, default=1000, help="default 1000")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="images per process and step")
    add_timing_flags(parser)
    args = parser.parse_args(argv)
    if args.image_size < 32:
        parser.error(f"--image-size {args.image_size}: keras.applications.ResNet50 needs at least 32")
    return args, timing_from(args, parser)


def make_train_step(model, optimizer, images, labels):
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        # Horovod: the tape averages the gradients over all processes.
        tape = hvd.DistributedGradientTape(tape)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return train_step


def main(argv=None):
    args, timing = parse_args(argv)
    start_horovod()
    size = args.image_size
    model = tf.keras.applications.ResNet50(weights=None, input_shape=(size, size, 3),
                                           classes=args.num_classes)
    optimizer = tf.keras.optimizers.SGD(learning_rate=BASE_LR * hvd.size(), momentum=MOMENTUM)
    # One random batch made once and fed every step: no input pipeline in the measurement.
    images = tf.random.uniform((args.batch_size, size, size, 3), 0.0, 255.0)
    labels = tf.random.uniform((args.batch_size,), 0, args.num_classes, dtype=tf.int64)
    train_step = make_train_step(model, optimizer, images, labels)
    description = f"canonical ResNet-50 (keras.applications), {size} px, {args.num_classes} classes, fp32"
    train_and_time(train_step, model, optimizer, args.batch_size, timing, description)


if __name__ == "__main__":
    main()
