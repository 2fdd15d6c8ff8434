"""Tests for models/bert/checkpoint.py: real TF1 name-based checkpoints written, checked and loaded."""
import os

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np
import pytest
import tensorflow as tf

from helpers.bert_reference import ATOL, PRED, RTOL, SEQ, TINY, np_forward, random_features, random_weights
from models.bert import checkpoint
from models.bert import model as bert

PHASE1 = "model.ckpt-28252"
# What a LAMB-trained reference checkpoint carries besides the weights.
EXTRA = {"global_step": np.int64(28252),
         "bert/encoder/layer_0/attention/self/query/kernel/adam_m": np.ones((16, 16), np.float32),
         "bert/encoder/layer_0/attention/self/query/kernel/adam_v": np.ones((16, 16), np.float32)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """A TINY phase-1-like checkpoint: (directory, prefix, written values)."""
    directory = tmp_path_factory.mktemp("phase1")
    values = random_weights(TINY, seed=11)
    prefix = checkpoint.write_tf1_checkpoint(values, directory / PHASE1, extra=EXTRA)
    return directory, prefix, values


@pytest.fixture(scope="module")
def fresh_model():
    return bert.build_pretraining_model(TINY, SEQ, PRED)


def test_written_checkpoint_is_a_tf1_name_based_checkpoint(written):
    directory, prefix, values = written
    assert sorted(os.listdir(directory)) == ["checkpoint", PHASE1 + ".data-00000-of-00001", PHASE1 + ".index"]
    listed = dict(tf.train.list_variables(str(prefix)))
    assert set(listed) == set(values) | set(EXTRA)
    assert tuple(listed["bert/encoder/layer_1/intermediate/dense/kernel"]) == (16, 24)
    reader = tf.train.load_checkpoint(str(prefix))
    assert reader.get_tensor("global_step") == 28252
    assert tf.train.latest_checkpoint(str(directory)) == str(prefix)


def test_load_assigns_every_trainable_variable(written, fresh_model):
    directory, _, values = written
    assert checkpoint.load_tf1_checkpoint(fresh_model, directory) == len(values)
    loaded = checkpoint.model_values(fresh_model)
    assert set(loaded) == set(values)
    for name, value in values.items():
        np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_loaded_model_computes_the_reference_outputs(written, fresh_model):
    _, prefix, values = written
    checkpoint.load_tf1_checkpoint(fresh_model, prefix)
    features = random_features(TINY, seed=4)
    mlm, nsp = fresh_model(features, training=False)
    want_mlm, want_nsp = np_forward(values, TINY, features)
    np.testing.assert_allclose(mlm.numpy(), want_mlm, rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(nsp.numpy(), want_nsp, rtol=RTOL, atol=ATOL)


def test_prefix_file_and_directory_forms_resolve_alike(written):
    directory, prefix, _ = written
    for form in (directory, prefix, str(prefix) + ".index", str(prefix) + ".data-00000-of-00001"):
        assert checkpoint.resolve_prefix(form) == str(prefix)
    os.remove(directory / "checkpoint")
    try:
        assert checkpoint.resolve_prefix(directory) == str(prefix)  # the single *.index
    finally:
        checkpoint._write_state_file(str(prefix))


def test_optimizer_slots_and_global_step_are_not_loaded(written, fresh_model):
    _, prefix, _ = written
    checkpoint.load_tf1_checkpoint(fresh_model, prefix)
    names = {v.name for v in fresh_model.variables}
    assert not any("adam" in name or "global_step" in name for name in names)


def test_checkpoint_problems_empty_for_a_good_checkpoint(written):
    directory, prefix, _ = written
    assert checkpoint.checkpoint_problems(prefix, TINY) == []
    assert checkpoint.checkpoint_problems(directory, TINY) == []


def test_expected_shapes_of_bert_large():
    shapes = checkpoint.expected_shapes(bert.BERT_LARGE)
    assert len(shapes) == 398
    assert shapes["bert/embeddings/word_embeddings"] == (30522, 1024)
    assert shapes["bert/encoder/layer_23/intermediate/dense/kernel"] == (1024, 4096)
    assert sum(int(np.prod(s)) for s in shapes.values()) == 336_226_108


# ---------------------------------------------------------------- mismatches

def test_missing_variable_is_named(tmp_path, fresh_model):
    values = random_weights(TINY)
    del values["bert/encoder/layer_1/output/LayerNorm/beta"]
    prefix = checkpoint.write_tf1_checkpoint(values, tmp_path / PHASE1)
    before = checkpoint.model_values(fresh_model)
    with pytest.raises(checkpoint.CheckpointMismatch) as info:
        checkpoint.load_tf1_checkpoint(fresh_model, prefix)
    message = str(info.value)
    assert message == (f"{prefix}: 1 variables missing or mis-shaped: "
                       "bert/encoder/layer_1/output/LayerNorm/beta (missing)")
    # Nothing was assigned.
    after = checkpoint.model_values(fresh_model)
    assert all(np.array_equal(before[name], after[name]) for name in before)
    problems = checkpoint.checkpoint_problems(prefix, TINY)
    assert problems == [f"{prefix}: bert/encoder/layer_1/output/LayerNorm/beta (missing)"]


def test_wrong_hidden_size_is_one_line_with_the_first_culprits(written):
    _, prefix, _ = written
    wider = bert.BertConfig(**{**TINY.to_dict(), "hidden_size": 24, "num_attention_heads": 4})
    model = bert.build_pretraining_model(wider, SEQ, PRED)
    with pytest.raises(checkpoint.CheckpointMismatch) as info:
        checkpoint.load_tf1_checkpoint(model, prefix)
    message = str(info.value)
    assert "\n" not in message and isinstance(info.value, ValueError)
    differing = sum(a != b for a, b in zip(checkpoint.expected_shapes(TINY).values(),
                                           checkpoint.expected_shapes(wider).values()))
    assert differing == 42  # all but the intermediate biases and the two output biases
    assert message.startswith(f"{prefix}: 42 variables missing or mis-shaped: "
                              "bert/embeddings/word_embeddings (expected [37,24], found [37,16]), ")
    assert message.endswith(", ...")
    problems = checkpoint.checkpoint_problems(prefix, wider)
    culprit = "bert/encoder/layer_1/intermediate/dense/kernel (expected [24,24], found [16,24])"
    assert f"{prefix}: {culprit}" in problems


def test_more_layers_than_the_checkpoint(written):
    _, prefix, _ = written
    deeper = bert.BertConfig(**{**TINY.to_dict(), "num_hidden_layers": 3})
    problems = checkpoint.checkpoint_problems(prefix, deeper)
    assert len(problems) == 16
    assert all("bert/encoder/layer_2/" in p and p.endswith("(missing)") for p in problems)


def test_directory_without_checkpoint(tmp_path, fresh_model):
    (tmp_path / "notes.txt").write_text("no checkpoint here")
    with pytest.raises(checkpoint.CheckpointMismatch, match="no single checkpoint in this directory") as info:
        checkpoint.load_tf1_checkpoint(fresh_model, tmp_path)
    assert str(tmp_path) in str(info.value)
    assert checkpoint.checkpoint_problems(tmp_path, TINY) == [str(info.value)]


def test_unreadable_prefix_is_one_problem_naming_the_path(tmp_path, fresh_model):
    missing = tmp_path / "model.ckpt-1"
    problems = checkpoint.checkpoint_problems(missing, TINY)
    assert len(problems) == 1 and problems[0].startswith(f"{missing}: cannot read the checkpoint")
    (tmp_path / "model.ckpt-2.index").write_bytes(b"not a checkpoint index")
    with pytest.raises(ValueError, match="model.ckpt-2: cannot read the checkpoint"):
        checkpoint.load_tf1_checkpoint(fresh_model, tmp_path / "model.ckpt-2")
