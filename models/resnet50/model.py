"""ResNet-50 v1.5 in Keras, as the MLPerf reference builds it (single-device code, no Horovod)."""
import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import tensorflow as tf

BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5
STAGE_UNITS = (3, 4, 6, 3)
STAGE_FILTERS = ((64, 64, 256), (128, 128, 512), (256, 256, 1024), (512, 512, 2048))
UNIT_LETTERS = "abcdef"


def _conv(filters, kernel, strides, name, data_format):
    # The reference's convs have no bias (BN follows) and He-normal init, which in Keras is
    # a truncated normal with stddev sqrt(2 / fan_in).
    return tf.keras.layers.Conv2D(filters, kernel, strides=strides, padding="same", use_bias=False,
                                  kernel_initializer="he_normal", data_format=data_format, name=name)


def _bn(name, data_format):
    axis = 1 if data_format == "channels_first" else -1
    return tf.keras.layers.BatchNormalization(axis=axis, momentum=BN_MOMENTUM, epsilon=BN_EPSILON, name=name)


def _bottleneck(x, filters, stage, unit, strides, data_format):
    """One bottleneck unit, named like the reference (res2a_branch2a, bn2a_branch2a, ...)."""
    prefix = f"{stage + 2}{UNIT_LETTERS[unit]}"
    f1, f2, f3 = filters
    shortcut = x
    if unit == 0:
        # The first unit of each stage projects the shortcut with a strided 1x1 conv + BN.
        shortcut = _conv(f3, 1, strides, f"res{prefix}_branch1", data_format)(x)
        shortcut = _bn(f"bn{prefix}_branch1", data_format)(shortcut)
    y = _conv(f1, 1, 1, f"res{prefix}_branch2a", data_format)(x)
    y = _bn(f"bn{prefix}_branch2a", data_format)(y)
    y = tf.keras.layers.Activation("relu")(y)
    # v1.5: the stride sits on the 3x3 conv, not on the first 1x1 as in v1.
    y = _conv(f2, 3, strides, f"res{prefix}_branch2b", data_format)(y)
    y = _bn(f"bn{prefix}_branch2b", data_format)(y)
    y = tf.keras.layers.Activation("relu")(y)
    y = _conv(f3, 1, 1, f"res{prefix}_branch2c", data_format)(y)
    y = _bn(f"bn{prefix}_branch2c", data_format)(y)
    y = tf.keras.layers.Add()([y, shortcut])
    return tf.keras.layers.Activation("relu")(y)


def build_resnet50(num_classes=1000, image_size=224, data_format="channels_last"):
    """Returns a Keras model mapping images to float32 logits.

    Mixed precision follows the global Keras policy set by the caller; the logits are cast
    to float32 so the loss and softmax stay in full precision.
    """
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(f"data_format must be channels_last or channels_first, not {data_format!r}")
    shape = (3, image_size, image_size) if data_format == "channels_first" else (image_size, image_size, 3)
    inputs = tf.keras.Input(shape=shape, name="images")
    x = tf.keras.layers.ZeroPadding2D(3, data_format=data_format, name="conv1_pad")(inputs)
    x = tf.keras.layers.Conv2D(64, 7, strides=2, padding="valid", use_bias=False,
                               kernel_initializer="he_normal", data_format=data_format, name="conv1")(x)
    x = _bn("bn_conv1", data_format)(x)
    x = tf.keras.layers.Activation("relu")(x)
    x = tf.keras.layers.MaxPooling2D(3, strides=2, padding="same", data_format=data_format)(x)
    for stage, (units, filters) in enumerate(zip(STAGE_UNITS, STAGE_FILTERS)):
        for unit in range(units):
            strides = 2 if unit == 0 and stage > 0 else 1
            x = _bottleneck(x, filters, stage, unit, strides, data_format)
    x = tf.keras.layers.GlobalAveragePooling2D(data_format=data_format)(x)
    x = tf.keras.layers.Dense(num_classes, kernel_initializer=tf.keras.initializers.RandomNormal(stddev=0.01),
                              name="fc1000")(x)
    logits = tf.keras.layers.Activation("linear", dtype="float32", name="logits")(x)
    return tf.keras.Model(inputs, logits, name="resnet50_v1_5")


def mlperf_tensor_names(model):
    """Maps each trainable variable to the tensor name the MLPerf checker expects.

    The checker lists the 161 MXNet-style names of NVIDIA's implementation (conv0_weight,
    stage1_unit1_conv1_weight, stage1_unit1_bnsc_gamma, fc1_bias, ...). Returns a dict
    {checker name: variable}; every trainable variable must map to exactly one name.
    """
    names = {}
    for variable in model.trainable_variables:
        layer, _, kind = variable.name.rpartition(":")[0].rpartition("/")
        layer = layer.rsplit("/", 1)[-1]
        name = _checker_name(layer, kind)
        if name is None or name in names:
            raise ValueError(f"no unique MLPerf tensor name for variable {variable.name}")
        names[name] = variable
    return names


_BRANCH_TO_INDEX = {"branch2a": "1", "branch2b": "2", "branch2c": "3", "branch1": "sc"}
_KIND_SUFFIX = {"kernel": "weight", "gamma": "gamma", "beta": "beta", "bias": "bias"}


def _checker_name(layer, kind):
    suffix = _KIND_SUFFIX.get(kind)
    if suffix is None:
        return None
    if layer == "conv1":
        return f"conv0_{suffix}"
    if layer == "bn_conv1":
        return f"bn0_{suffix}"
    if layer == "fc1000":
        return f"fc1_{suffix}"
    for prefix, part in (("res", "conv"), ("bn", "bn")):
        if layer.startswith(prefix) and "_" in layer:
            unit_id, branch = layer[len(prefix):].split("_", 1)
            stage = int(unit_id[:-1]) - 1
            unit = UNIT_LETTERS.index(unit_id[-1]) + 1
            index = _BRANCH_TO_INDEX[branch]
            # MXNet names the shortcut conv "conv1sc" but its BN "bnsc".
            if index == "sc" and part == "conv":
                index = "1sc"
            return f"stage{stage}_unit{unit}_{part}{index}_{suffix}"
    return None


def training_flops_per_image(image_size=224, num_classes=1000):
    """Floating-point operations to train on one image: 3 x the forward pass's multiply-adds x 2.

    Counted from the architecture above, as the model builds it: every convolution and the classifier
    cost (output positions) x (kernel height x width x input channels) x (output channels)
    multiply-adds; batch norm, ReLU, pooling and the additions are left out (under 1% of the
    total). A multiply-add is 2 operations, and training costs 3 forward passes: the forward
    pass, then the backward pass's gradients for activations and for weights, each as large.
    At 224 px this gives 4.09 G multiply-adds forward, the figure usually quoted for v1.5.
    """
    size = (image_size + 6 - 7) // 2 + 1          # conv1: 7x7 stride 2 on the 3-padded image
    macs = size * size * 7 * 7 * 3 * 64
    size = -(-size // 2)                            # 3x3 max pool, stride 2, "same"
    channels = 64
    for stage, (units, (f1, f2, f3)) in enumerate(zip(STAGE_UNITS, STAGE_FILTERS)):
        for unit in range(units):
            strides = 2 if unit == 0 and stage > 0 else 1
            out = -(-size // strides)
            if unit == 0:
                macs += out * out * channels * f3                                  # projection shortcut
            macs += size * size * channels * f1 + out * out * (9 * f1 * f2 + f2 * f3)  # 1x1, 3x3, 1x1
            size, channels = out, f3
    macs += channels * num_classes                  # after global average pooling
    return 3 * 2 * macs
