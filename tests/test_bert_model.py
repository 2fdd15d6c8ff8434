"""Tests for models/bert/model.py: BERT-large size and names; forward pass, loss and metric against NumPy."""
import json
import re

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from helpers.bert_reference import (ATOL, PRED, RTOL, SEQ, TINY, np_erf_gelu, np_forward, np_log_softmax,
                                    random_features, random_labels, random_weights)
from models.bert import model as bert


# ---------------------------------- the reference's names (its NumPy forward pass: helpers/bert_reference.py)

def reference_names(layers):
    """The reference's trainable variable names, spelled out from modeling.py / run_pretraining.py."""
    names = [f"bert/embeddings/{n}" for n in ("word_embeddings", "token_type_embeddings",
                                              "position_embeddings", "LayerNorm/gamma", "LayerNorm/beta")]
    for i in range(layers):
        for part in ("attention/self/query", "attention/self/key", "attention/self/value",
                     "attention/output/dense", "intermediate/dense", "output/dense"):
            names += [f"bert/encoder/layer_{i}/{part}/kernel", f"bert/encoder/layer_{i}/{part}/bias"]
        for part in ("attention/output/LayerNorm", "output/LayerNorm"):
            names += [f"bert/encoder/layer_{i}/{part}/gamma", f"bert/encoder/layer_{i}/{part}/beta"]
    names += ["bert/pooler/dense/kernel", "bert/pooler/dense/bias", "cls/predictions/output_bias",
              "cls/predictions/transform/dense/kernel", "cls/predictions/transform/dense/bias",
              "cls/predictions/transform/LayerNorm/gamma", "cls/predictions/transform/LayerNorm/beta",
              "cls/seq_relationship/output_weights", "cls/seq_relationship/output_bias"]
    return names


def assign(model, weights):
    for name, variable in bert.tf1_variables(model).items():
        variable.assign(weights[name])


@pytest.fixture(scope="module")
def large():
    return bert.build_pretraining_model(bert.BERT_LARGE, 512, 76)


@pytest.fixture(scope="module")
def tiny():
    model = bert.build_pretraining_model(TINY, SEQ, PRED)
    weights = random_weights(TINY)
    assign(model, weights)
    return model, weights


@pytest.fixture
def policy():
    """Sets a global dtype policy for one test and restores float32 after it."""
    yield tf.keras.mixed_precision.set_global_policy
    tf.keras.mixed_precision.set_global_policy("float32")


# ---------------------------------------------------------------- BERT-large size, names, init

@pytest.mark.slow  # BERT-large built at full size (336M parameters): the gate's tier, not the inner loop's
def test_bert_large_has_the_reference_parameter_count(large):
    sizes = {bert.tf1_name(v): int(np.prod(v.shape)) for v in large.trainable_variables}
    assert len(large.trainable_variables) == 398
    assert sum(sizes.values()) == 336_226_108
    assert sum(n for name, n in sizes.items() if name.startswith("bert/embeddings/")) == 31_782_912
    assert sum(n for name, n in sizes.items() if name.startswith("bert/encoder/layer_7/")) == 12_596_224
    assert sum(n for name, n in sizes.items() if name.startswith("cls/predictions/")) == 1_082_170


@pytest.mark.slow  # BERT-large built at full size (336M parameters): the gate's tier, not the inner loop's
def test_bert_large_tensor_names_are_the_reference_398(large):
    names = bert.mlperf_tensor_names(large)
    assert len(names) == len(set(names)) == 398
    assert sorted(names) == sorted(reference_names(24))
    shapes = {name: tuple(v.shape) for name, v in bert.tf1_variables(large).items()}
    assert shapes == bert.tf1_shapes(bert.BERT_LARGE)
    assert shapes["bert/encoder/layer_23/attention/self/query/kernel"] == (1024, 1024)
    assert shapes["cls/seq_relationship/output_weights"] == (2, 1024)
    assert not large.non_trainable_variables


@pytest.mark.slow  # BERT-large built at full size (336M parameters): the gate's tier, not the inner loop's
def test_bert_large_initialisation(large):
    v = bert.tf1_variables(large)
    table = v["bert/embeddings/word_embeddings"].numpy()
    # A normal(0, 0.02) truncated at 2 stddev has stddev 0.02·0.8796.
    assert abs(table.std() - 0.02 * 0.8796) < 2e-4 and np.abs(table).max() <= 0.04 + 1e-6
    kernel = v["bert/encoder/layer_3/intermediate/dense/kernel"].numpy()
    assert abs(kernel.std() - 0.02 * 0.8796) < 2e-4
    assert not np.array_equal(kernel[:1024], v["bert/encoder/layer_3/attention/self/query/kernel"].numpy())
    np.testing.assert_array_equal(v["bert/encoder/layer_0/output/LayerNorm/gamma"].numpy(), 1.0)
    for name in ("bert/encoder/layer_0/output/LayerNorm/beta", "cls/predictions/output_bias",
                 "bert/pooler/dense/bias", "cls/seq_relationship/output_bias"):
        np.testing.assert_array_equal(v[name].numpy(), 0.0)


def test_keras_variable_names_carry_the_tf1_path(tiny):
    model, _ = tiny
    for name, variable in bert.tf1_variables(model).items():
        assert variable.name == name + ":0"
    # So LAMB's name rules, applied to var.name, pick exactly the reference's variables.
    excluded = {v.name[:-2] for v in model.trainable_variables
                if any(re.search(p, v.name) for p in ("LayerNorm", "layer_norm", "bias"))}
    expected = {n for n in reference_names(TINY.num_hidden_layers)
                if n.endswith(("/gamma", "/beta", "/bias")) or n.endswith("output_bias")}
    assert excluded == expected
    assert "cls/seq_relationship/output_weights" not in excluded


def test_tied_decoder_is_the_word_embedding_variable(tiny):
    model, _ = tiny
    decoder = [layer for layer in model.layers if isinstance(layer, bert.MaskedLMHead)][0]
    assert decoder.embeddings.word_embeddings is bert.tf1_variables(model)["bert/embeddings/word_embeddings"]
    assert len(model.trainable_variables) == len(reference_names(TINY.num_hidden_layers))


# ---------------------------------------------------------------- forward pass

def test_forward_matches_numpy_reference(tiny):
    model, weights = tiny
    features = random_features(TINY)
    mlm, nsp = model(features, training=False)
    want_mlm, want_nsp = np_forward(weights, TINY, features)
    assert mlm.dtype == tf.float32 and mlm.shape == (3, PRED, TINY.vocab_size)
    assert nsp.dtype == tf.float32 and nsp.shape == (3, 2)
    np.testing.assert_allclose(mlm.numpy(), want_mlm, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(nsp.numpy(), want_nsp, rtol=RTOL, atol=ATOL)


def test_forward_under_xla_matches_numpy_reference(tiny):
    model, weights = tiny
    features = random_features(TINY, seed=7)
    mlm, nsp = tf.function(lambda f: model(f, training=False), jit_compile=True)(features)
    want_mlm, want_nsp = np_forward(weights, TINY, features)
    np.testing.assert_allclose(mlm.numpy(), want_mlm, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(nsp.numpy(), want_nsp, rtol=RTOL, atol=ATOL)


def test_numpy_reference_comparison_can_fail(tiny):
    """The weights and inputs are such that the erf GELU or a missing attention mask show."""
    model, weights = tiny
    features = random_features(TINY)
    mlm = model(features, training=False)[0].numpy()
    tolerance = ATOL + RTOL * np.abs(mlm).max()
    swapped = dict(weights)
    swapped["bert/encoder/layer_1/attention/self/query/kernel"] = weights[
        "bert/encoder/layer_1/attention/self/query/kernel"].T
    for variant in (dict(act=np_erf_gelu), dict(use_mask=False), dict(w=swapped)):
        other = np_forward(**{"w": weights, "config": TINY, "features": features, **variant})[0]
        assert np.abs(other - mlm).max() > 5 * tolerance, list(variant)


def test_extra_features_and_int64_inputs(tiny):
    model, weights = tiny
    features = random_features(TINY)
    full = {**{k: v.astype(np.int64) for k, v in features.items()}, **random_labels(TINY)}
    mlm = model(bert.model_inputs(full), training=False)[0]
    np.testing.assert_allclose(mlm.numpy(), np_forward(weights, TINY, features)[0], rtol=RTOL, atol=ATOL)


def test_dropout_only_when_training(tiny):
    model, _ = tiny
    features = random_features(TINY)
    a, b = model(features, training=False)[0], model(features, training=False)[0]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(a.numpy(), model(features)[0].numpy())
    tf.random.set_seed(3)
    trained = model(features, training=True)[0].numpy()
    assert np.abs(trained - a.numpy()).max() > 1e-3


def test_no_dropout_config_trains_like_inference():
    config = bert.BertConfig(**{**TINY.to_dict(), "hidden_dropout_prob": 0.0,
                                "attention_probs_dropout_prob": 0.0})
    model = bert.build_pretraining_model(config, SEQ, PRED)
    features = random_features(config)
    np.testing.assert_allclose(model(features, training=True)[0].numpy(),
                               model(features, training=False)[0].numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name,tolerance", [("mixed_float16", 0.05), ("mixed_bfloat16", 0.3)])
def test_mixed_precision_policy_keeps_float32_weights_and_logits(policy, name, tolerance):
    policy(name)
    model = bert.build_pretraining_model(TINY, SEQ, PRED)
    weights = random_weights(TINY)
    assign(model, weights)
    assert all(v.dtype == tf.float32 for v in model.trainable_variables)
    features = random_features(TINY)
    mlm, nsp = model(features, training=False)
    assert mlm.dtype == tf.float32 and nsp.dtype == tf.float32
    want_mlm, want_nsp = np_forward(weights, TINY, features)
    scale = np.abs(want_mlm).max()
    assert np.abs(mlm.numpy() - want_mlm).max() < tolerance * scale
    assert np.abs(nsp.numpy() - want_nsp).max() < tolerance * np.abs(want_nsp).max() + tolerance


def test_build_refuses_bad_shapes():
    with pytest.raises(ValueError, match="seq_length 13 exceeds max_position_embeddings 12"):
        bert.build_pretraining_model(TINY, 13, PRED)
    bad = bert.BertConfig(**{**TINY.to_dict(), "num_attention_heads": 5})
    with pytest.raises(ValueError, match="hidden_size 16 is not a multiple of num_attention_heads 5"):
        bert.build_pretraining_model(bad, SEQ, PRED)


# ---------------------------------------------------------------- loss and metric

def np_losses(mlm_logits, nsp_logits, labels):
    log_probs = np_log_softmax(np.asarray(mlm_logits, np.float64))
    ids, weights = labels["masked_lm_ids"], labels["masked_lm_weights"].astype(np.float64)
    nll = -np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    mlm = (weights * nll).sum() / (weights.sum() + 1e-5)
    nsp_log_probs = np_log_softmax(np.asarray(nsp_logits, np.float64))
    nsp = -nsp_log_probs[np.arange(len(nsp_log_probs)), labels["next_sentence_labels"][:, 0]].mean()
    return mlm, nsp


def test_pretraining_loss_matches_numpy():
    rng = np.random.default_rng(5)
    mlm_logits = rng.standard_normal((3, PRED, TINY.vocab_size)).astype(np.float32) * 3
    nsp_logits = rng.standard_normal((3, 2)).astype(np.float32)
    labels = random_labels(TINY)
    mlm, nsp = np_losses(mlm_logits, nsp_logits, labels)
    got_mlm, got_nsp = bert.pretraining_losses(mlm_logits, nsp_logits, labels)
    np.testing.assert_allclose([float(got_mlm), float(got_nsp)], [mlm, nsp], rtol=1e-5)
    total = bert.pretraining_loss(tf.constant(mlm_logits, tf.float16), nsp_logits, labels)
    assert total.dtype == tf.float32 and total.shape == ()
    total = float(bert.pretraining_loss(mlm_logits, nsp_logits, labels))
    np.testing.assert_allclose(total, mlm + nsp, rtol=1e-5)
    # Zero-weight positions do not count, whatever their labels.
    ids = np.where(labels["masked_lm_weights"] > 0, labels["masked_lm_ids"], 0)
    got = bert.pretraining_losses(mlm_logits, nsp_logits, dict(labels, masked_lm_ids=ids))[0]
    np.testing.assert_allclose(float(got), mlm, rtol=1e-5)


def test_loss_with_no_masked_positions_is_finite():
    labels = dict(random_labels(TINY), masked_lm_weights=np.zeros((3, PRED), np.float32))
    logits = np.zeros((3, PRED, TINY.vocab_size), np.float32)
    mlm, _ = bert.pretraining_losses(logits, np.zeros((3, 2), np.float32), labels)
    assert float(mlm) == 0.0


def test_masked_lm_counts_match_numpy():
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((3, PRED, TINY.vocab_size)).astype(np.float32)
    labels = random_labels(TINY)
    labels["masked_lm_ids"][0, 0] = logits[0, 0].argmax()
    labels["masked_lm_ids"][1, :] = logits[1].argmax(-1)
    weights = labels["masked_lm_weights"]
    correct, total = bert.masked_lm_counts(logits, labels)
    want_correct = (weights * (logits.argmax(-1) == labels["masked_lm_ids"])).sum()
    assert float(total) == pytest.approx(weights.sum())
    assert float(correct) == pytest.approx(want_correct) and want_correct >= 1


# ---------------------------------------------------------------- config

REFERENCE_JSON = {"attention_probs_dropout_prob": 0.1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 4096,
                  "max_position_embeddings": 512, "num_attention_heads": 16, "num_hidden_layers": 24,
                  "type_vocab_size": 2, "vocab_size": 30522}


def write_json(tmp_path, values, text=None):
    path = tmp_path / "bert_config.json"
    path.write_text(text if text is not None else json.dumps(values))
    return path


def test_reference_bert_config_file_is_bert_large(tmp_path):
    path = write_json(tmp_path, {**REFERENCE_JSON, "comment": "extra keys are tolerated"})
    config = bert.BertConfig.from_json_file(path)
    assert config == bert.BERT_LARGE
    assert config.to_dict() == REFERENCE_JSON
    assert bert.BertConfig.from_dict(config.to_dict()) == config
    assert config.problems() == [] and config.head_size == 64


@pytest.mark.parametrize("change,message", [
    ({"hidden_size": None}, "missing field 'hidden_size'"),
    ({"hidden_size": "1024"}, "field 'hidden_size' must be an integer, got '1024'"),
    ({"num_hidden_layers": 24.0}, "field 'num_hidden_layers' must be an integer"),
    ({"vocab_size": True}, "field 'vocab_size' must be an integer"),
    ({"hidden_dropout_prob": "0.1"}, "field 'hidden_dropout_prob' must be a number"),
    ({"hidden_act": 3}, "field 'hidden_act' must be a string"),
    ({"hidden_act": "swish"}, "hidden_act 'swish' is not one of gelu, relu, tanh, linear"),
    ({"num_attention_heads": 15}, "hidden_size 1024 is not a multiple of num_attention_heads 15"),
    ({"intermediate_size": 0}, "intermediate_size must be > 0, got 0"),
    ({"attention_probs_dropout_prob": 1.0}, r"attention_probs_dropout_prob must be in \[0, 1\), got 1.0"),
])
def test_bad_config_file_names_the_file_and_field(tmp_path, change, message):
    values = {k: v for k, v in {**REFERENCE_JSON, **change}.items() if v is not None}
    path = write_json(tmp_path, values)
    with pytest.raises(ValueError, match=message) as info:
        bert.BertConfig.from_json_file(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unreadable_config_files(tmp_path):
    with pytest.raises(ValueError, match="not valid JSON"):
        bert.BertConfig.from_json_file(write_json(tmp_path, None, text="{vocab_size: 3"))
    with pytest.raises(ValueError, match="expected a JSON object"):
        bert.BertConfig.from_json_file(write_json(tmp_path, [1, 2]))
    with pytest.raises(ValueError, match="cannot read the BERT config") as info:
        bert.BertConfig.from_json_file(tmp_path / "missing.json")
    assert "missing.json" in str(info.value)
