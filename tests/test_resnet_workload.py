"""The ResNet-50 workload's closed-division verdict on the LARS eeta and its SGD loss's L2 term."""
from types import SimpleNamespace

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from models.resnet50.model import build_resnet50
from models.resnet50.presets import PRESETS, ResNetConfig
from models.resnet50.workload import _loss_fn, division
from suite.common.config import resolve

IMAGENET = SimpleNamespace(train_records=1_281_167, eval_records=50_000, bounding_boxes=False)
CLOSED = "closed_8xA100_gbs3264"


def make(preset, *sets):
    return resolve(ResNetConfig, PRESETS, preset, sets=list(sets), extra={"data_dir": "/data"})


def test_lars_eeta_other_than_0_001_makes_the_run_open():
    assert division(make(CLOSED, "lars_eeta=0.001"), IMAGENET).name == "closed"
    verdict = division(make(CLOSED, "lars_eeta=0.002"), IMAGENET)
    assert verdict.name == "open"
    assert verdict.reasons == ("lars eeta (trust coefficient) 0.002 is not 0.001",)


def test_sgd_loss_adds_l2_of_every_weight_but_batch_norm_gamma_and_beta():
    lars = make("tiny_cpu", "image_size=32", "weight_decay=0.001")
    sgd = make("tiny_cpu", "image_size=32", "weight_decay=0.001", "optimizer=sgd")
    model = build_resnet50(lars.num_classes, lars.image_size)
    rng = np.random.default_rng(7)
    for v in model.trainable_variables:
        if v.name.endswith(("/bias:0", "/beta:0")):  # zeros at init, so their decay would not show
            v.assign(rng.standard_normal(v.shape).astype(np.float32))
    bias = model.get_layer("fc1000").bias
    bias.assign(10.0 * bias)  # large enough that leaving it out misses by far more than rounding
    images = tf.constant(rng.standard_normal((2, 32, 32, 3)).astype(np.float32))
    labels = tf.constant([0, 3])
    # Same inputs and batch statistics both times: the difference is the L2 term alone.
    l2 = float(_loss_fn(sgd)(model, images, labels)) - float(_loss_fn(lars)(model, images, labels))
    want = 0.001 * sum(np.sum(np.square(v.numpy().astype(np.float64))) for v in model.trainable_variables
                       if not v.name.endswith(("/gamma:0", "/beta:0")))
    assert l2 == pytest.approx(want, rel=1e-5)
