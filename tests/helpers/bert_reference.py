"""BERT's pretraining forward pass in float64 NumPy, spelled out from the reference's modeling.py: what
the Keras model is checked against, with a tiny config and random weights, inputs and labels for it."""
import math

import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

import numpy as np

from models.bert import model as bert

TINY = bert.BertConfig(vocab_size=37, hidden_size=16, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=24, max_position_embeddings=12, type_vocab_size=2)
SEQ, PRED = 9, 4
# float32 TensorFlow against float64 NumPy through two layers of O(1) activations (seen: 2.4e-6 on
# logits up to 9.4).
RTOL, ATOL = 1e-5, 2e-5


def np_gelu(x):
    return x * 0.5 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * np.power(x, 3))))


def np_erf_gelu(x):
    return x * 0.5 * (1.0 + np.vectorize(math.erf)(x / np.sqrt(2.0)))


def np_layer_norm(x, gamma, beta):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + 1e-12) * gamma + beta


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_log_softmax(x):
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def np_forward(w, config, features, act=np_gelu, use_mask=True):
    """The reference pretraining forward pass (inference) in float64 from {TF1 name: array}."""
    w = {k: np.asarray(v, np.float64) for k, v in w.items()}
    ids, mask, seg, pos = (np.asarray(features[k]) for k in bert.INPUT_NAMES)
    b, s = ids.shape
    h, n = config.hidden_size, config.num_attention_heads
    d = h // n

    def dense(x, scope):
        return x @ w[f"{scope}/kernel"] + w[f"{scope}/bias"]

    def norm(x, scope):
        return np_layer_norm(x, w[f"{scope}/gamma"], w[f"{scope}/beta"])

    def heads(x):  # [B, S, H] -> [B, N, S, D]
        return x.reshape(b, s, n, d).transpose(0, 2, 1, 3)

    x = (w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/token_type_embeddings"][seg]
         + w["bert/embeddings/position_embeddings"][:s])
    x = norm(x, "bert/embeddings/LayerNorm")
    adder = (1.0 - mask[:, None, None, :].astype(np.float64)) * -10000.0 if use_mask else 0.0
    for i in range(config.num_hidden_layers):
        p = f"bert/encoder/layer_{i}/"
        q, k, v = (heads(dense(x, p + f"attention/self/{name}")) for name in ("query", "key", "value"))
        probs = np_softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d) + adder)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        attention = norm(dense(context, p + "attention/output/dense") + x, p + "attention/output/LayerNorm")
        x = norm(dense(act(dense(attention, p + "intermediate/dense")), p + "output/dense") + attention,
                 p + "output/LayerNorm")
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    # gather_indexes: flat positions into the [B*S, H] sequence.
    flat = (pos + np.arange(b)[:, None] * s).reshape(-1)
    masked = x.reshape(b * s, h)[flat]
    masked = norm(act(dense(masked, "cls/predictions/transform/dense")),
                  "cls/predictions/transform/LayerNorm")
    mlm = masked @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]
    nsp = pooled @ w["cls/seq_relationship/output_weights"].T + w["cls/seq_relationship/output_bias"]
    return mlm.reshape(b, pos.shape[1], -1), nsp


def random_weights(config, seed=0):
    """O(1)-scale weights, so GELU, the head split, the mask or the tied decoder visibly matter."""
    rng = np.random.default_rng(seed)
    weights = {}
    for name, shape in bert.tf1_shapes(config).items():
        if name.endswith("gamma"):
            value = 1.0 + 0.3 * rng.standard_normal(shape)
        elif len(shape) == 2:
            value = rng.standard_normal(shape) * (1.5 / math.sqrt(shape[0]) if "kernel" in name else 0.7)
        else:
            value = 0.3 * rng.standard_normal(shape)
        weights[name] = value.astype(np.float32)
    return weights


def random_features(config, seq=SEQ, pred=PRED, batch=3, seed=1):
    rng = np.random.default_rng(seed)
    lengths = [seq, seq - 3, 2][:batch]
    mask = np.array([[1] * n + [0] * (seq - n) for n in lengths], np.int32)
    return {
        "input_ids": (rng.integers(1, config.vocab_size, (batch, seq)) * mask).astype(np.int32),
        "input_mask": mask,
        "segment_ids": (rng.integers(0, 2, (batch, seq)) * mask).astype(np.int32),
        "masked_lm_positions": np.stack([rng.choice(seq, pred, replace=False) for _ in range(batch)]).astype(
            np.int32),
    }


def random_labels(config, batch=3, pred=PRED, seed=2):
    rng = np.random.default_rng(seed)
    weights = (rng.random((batch, pred)) < 0.7).astype(np.float32)
    weights[0, 0] = 1.0
    return {"masked_lm_ids": rng.integers(0, config.vocab_size, (batch, pred)).astype(np.int32),
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32)}
