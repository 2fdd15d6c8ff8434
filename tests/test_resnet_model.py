"""ResNet-50 v1.5 structure: parameter count, v1.5 stride placement, MLPerf tensor names."""
import pytest

import suite  # noqa: F401

import numpy as np
import tensorflow as tf

from models.resnet50.model import build_resnet50, mlperf_tensor_names

CHECKER_STAGES = (3, 4, 6, 3)


def checker_names():
    """The 161 names the MLPerf checker lists, spelled out independently of the model code."""
    names = ["conv0_weight", "bn0_gamma", "bn0_beta", "fc1_weight", "fc1_bias"]
    for stage, units in enumerate(CHECKER_STAGES, start=1):
        for unit in range(1, units + 1):
            prefix = f"stage{stage}_unit{unit}"
            for i in (1, 2, 3):
                names += [f"{prefix}_conv{i}_weight", f"{prefix}_bn{i}_gamma", f"{prefix}_bn{i}_beta"]
            if unit == 1:
                names += [f"{prefix}_conv1sc_weight", f"{prefix}_bnsc_gamma", f"{prefix}_bnsc_beta"]
    return names


@pytest.fixture(scope="module")
def full_model():
    tf.keras.mixed_precision.set_global_policy("float32")
    return build_resnet50()


def test_trainable_parameter_count_matches_reference(full_model):
    trainable = sum(int(np.prod(v.shape)) for v in full_model.trainable_variables)
    # The count the login node's scaling model uses, from the benchmark's description, is the built one.
    from models.resnet50.presets import BENCHMARK
    assert trainable == BENCHMARK.parameter_count == 25_557_032
    # BN moving statistics are the only non-trainable weights.
    assert full_model.count_params() == 25_610_152


def test_tensor_names_match_checker_list(full_model):
    names = mlperf_tensor_names(full_model)
    assert len(checker_names()) == 161
    assert sorted(names) == sorted(checker_names())
    assert names["stage1_unit1_conv1sc_weight"].shape == (1, 1, 64, 256)
    assert names["stage4_unit3_conv2_weight"].shape == (3, 3, 512, 512)
    assert names["fc1_weight"].shape == (2048, 1000)


def test_v1_5_stride_sits_on_the_3x3_conv(full_model):
    for layer in ("res3a_branch2b", "res4a_branch2b", "res5a_branch2b", "res3a_branch1"):
        assert full_model.get_layer(layer).strides == (2, 2)
    for layer in ("res3a_branch2a", "res2a_branch2b", "res3b_branch2b"):
        assert full_model.get_layer(layer).strides == (1, 1)


def test_layers_follow_reference_hyperparameters(full_model):
    bn = full_model.get_layer("bn3a_branch2b")
    assert (bn.momentum, bn.epsilon) == (0.9, 1e-5)
    conv = full_model.get_layer("res3a_branch2b")
    assert conv.use_bias is False
    fc = full_model.get_layer("fc1000")
    assert abs(float(np.std(fc.kernel.numpy())) - 0.01) < 0.001
    assert not np.any(fc.bias.numpy())
    first = full_model.get_layer("conv1").kernel.numpy()
    # He-normal in Keras: a truncated normal whose spread after truncation is sqrt(2 / fan_in).
    expected = np.sqrt(2 / (7 * 7 * 3))
    assert 0.95 < np.std(first) / expected < 1.05
    assert np.abs(first).max() <= 2 * expected / 0.87962566 + 1e-6
    assert full_model.output.shape == (None, 1000)


def test_channels_first_model_has_same_parameters():
    tf.keras.mixed_precision.set_global_policy("float32")
    model = build_resnet50(num_classes=10, image_size=64, data_format="channels_first")
    assert model.input.shape == (None, 3, 64, 64)
    assert sorted(mlperf_tensor_names(model)) == sorted(checker_names())


def test_mixed_precision_keeps_float32_logits_and_variables():
    tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = build_resnet50(num_classes=4, image_size=32)
        logits = model(tf.zeros([2, 32, 32, 3]), training=False)
        assert logits.dtype == tf.float32
        assert model.get_layer("res2a_branch2a").compute_dtype == "bfloat16"
        assert all(v.dtype == tf.float32 for v in model.trainable_variables)
    finally:
        tf.keras.mixed_precision.set_global_policy("float32")


def test_unknown_data_format_is_rejected():
    with pytest.raises(ValueError, match="data_format"):
        build_resnet50(data_format="nchw")
