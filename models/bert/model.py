"""BERT pretraining in Keras with the MLPerf reference's math and TF1 variable names (single-device code)."""
import dataclasses
import json
import math
import re

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import tensorflow as tf

LAYER_NORM_EPSILON = 1e-12
# The reference adds this to the attention scores of padded positions (not -inf, so an
# all-padding row still gives a finite softmax).
ATTENTION_MASK_ADDER = -10000.0
MLM_DENOMINATOR_EPSILON = 1e-5
ACTIVATIONS = ("gelu", "relu", "tanh", "linear")

# The model's inputs; the data pipeline's other features are the labels of `pretraining_loss`.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
LABEL_NAMES = ("masked_lm_ids", "masked_lm_weights", "next_sentence_labels")

_INT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
               "max_position_embeddings", "type_vocab_size")
_FLOAT_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
# A TF1 name inside a Keras variable name, which may carry an outer scope and a ":0" suffix.
_TF1_NAME = re.compile(r"(?:^|/)((?:bert|cls)/.+?)(?::\d+)?$")


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """The fields of the reference's bert_config.json."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02

    @classmethod
    def from_dict(cls, values: dict) -> "BertConfig":
        """Checks the type of every known field; unknown keys are ignored, as the reference does."""
        known = {}
        for field in dataclasses.fields(cls):
            if field.name in values:
                known[field.name] = _checked_field(field.name, values[field.name])
            elif field.default is dataclasses.MISSING:
                raise ValueError(f"missing field '{field.name}'")
        return cls(**known)

    @classmethod
    def from_json_file(cls, path) -> "BertConfig":
        """Reads bert_config.json; any problem is one ValueError line naming the file."""
        try:
            with open(path) as handle:
                values = json.load(handle)
        except OSError as err:
            raise ValueError(f"{path}: cannot read the BERT config: {err.strerror or err}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}: not valid JSON: {err}") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a JSON object of BERT config fields")
        try:
            config = cls.from_dict(values)
        except ValueError as err:
            raise ValueError(f"{path}: {err}") from None
        problems = config.problems()
        if problems:
            raise ValueError(f"{path}: " + "; ".join(problems))
        return config

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    def problems(self) -> list[str]:
        """Reasons this config cannot build a model; empty when it can."""
        problems = [f"{name} must be > 0, got {getattr(self, name)}" for name in _INT_FIELDS
                    if getattr(self, name) <= 0]
        if self.num_attention_heads > 0 and self.hidden_size % self.num_attention_heads:
            problems.append(f"hidden_size {self.hidden_size} is not a multiple of "
                            f"num_attention_heads {self.num_attention_heads}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                problems.append(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.initializer_range <= 0:
            problems.append(f"initializer_range must be > 0, got {self.initializer_range}")
        if self.hidden_act not in ACTIVATIONS:
            problems.append(f"hidden_act '{self.hidden_act}' is not one of {', '.join(ACTIVATIONS)}")
        return problems


def _checked_field(name, value):
    if name in _INT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"field '{name}' must be an integer, got {value!r}")
    elif name in _FLOAT_FIELDS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"field '{name}' must be a number, got {value!r}")
        value = float(value)
    elif not isinstance(value, str):
        raise ValueError(f"field '{name}' must be a string, got {value!r}")
    return value


# bert_config.json of the MLPerf reference (md5 7f59165e21b7d566db610ff6756c926b).
BERT_LARGE = BertConfig(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                        intermediate_size=4096)


def tf1_shapes(config: BertConfig) -> dict[str, tuple]:
    """The reference's trainable variables {TF1 name: shape}, in the reference's order."""
    h, i = config.hidden_size, config.intermediate_size
    shapes = {
        "bert/embeddings/word_embeddings": (config.vocab_size, h),
        "bert/embeddings/token_type_embeddings": (config.type_vocab_size, h),
        "bert/embeddings/position_embeddings": (config.max_position_embeddings, h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
    }
    for n in range(config.num_hidden_layers):
        layer = f"bert/encoder/layer_{n}/"
        for part in ("query", "key", "value"):
            shapes.update(_dense_shapes(f"{layer}attention/self/{part}", h, h))
        shapes.update(_dense_shapes(f"{layer}attention/output/dense", h, h))
        shapes.update(_layer_norm_shapes(f"{layer}attention/output/LayerNorm", h))
        shapes.update(_dense_shapes(f"{layer}intermediate/dense", h, i))
        shapes.update(_dense_shapes(f"{layer}output/dense", i, h))
        shapes.update(_layer_norm_shapes(f"{layer}output/LayerNorm", h))
    shapes.update(_dense_shapes("bert/pooler/dense", h, h))
    shapes["cls/predictions/output_bias"] = (config.vocab_size,)
    shapes.update(_dense_shapes("cls/predictions/transform/dense", h, h))
    shapes.update(_layer_norm_shapes("cls/predictions/transform/LayerNorm", h))
    shapes["cls/seq_relationship/output_weights"] = (2, h)
    shapes["cls/seq_relationship/output_bias"] = (2,)
    return shapes


def _dense_shapes(scope, fan_in, fan_out):
    return {f"{scope}/kernel": (fan_in, fan_out), f"{scope}/bias": (fan_out,)}


def _layer_norm_shapes(scope, width):
    return {f"{scope}/gamma": (width,), f"{scope}/beta": (width,)}


# ---------------------------------------------------------------- the reference's math

def gelu(x):
    """The reference's tanh approximation of GELU (not the exact erf form)."""
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def activation(name):
    return {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": tf.identity}[name]


def layer_norm(x, gamma, beta, dtype):
    """LayerNorm over the last axis, computed in float32 whatever the compute dtype (as Keras does)."""
    x = tf.cast(x, tf.float32)
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    y = (x - mean) * tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * gamma + beta
    return tf.cast(y, dtype)


class _Tf1Layer(tf.keras.layers.Layer):
    """A layer named after a TF1 scope, whose weights are named <scope>/<TF1 suffix>.

    Weights are float32 under every dtype policy and never auto-cast: call() casts them to
    the compute dtype itself, so LayerNorm parameters and output biases can stay float32.
    """

    def __init__(self, config: BertConfig, name: str, **kwargs):
        super().__init__(name=name, **kwargs)
        self.config = config

    def _weight(self, suffix, shape, init="normal"):
        # A fresh initializer per weight: Keras 2 gives an unseeded instance fixed values.
        initializer = {"normal": lambda: tf.keras.initializers.TruncatedNormal(
                           stddev=self.config.initializer_range),
                       "zeros": tf.keras.initializers.Zeros, "ones": tf.keras.initializers.Ones}[init]()
        return self.add_weight(name=suffix, shape=shape, dtype=tf.float32, initializer=initializer,
                               trainable=True, experimental_autocast=False)

    def _dense_weights(self, scope, fan_in, fan_out):
        kernel = self._weight(f"{scope}/kernel", (fan_in, fan_out))
        return kernel, self._weight(f"{scope}/bias", (fan_out,), "zeros")

    def _layer_norm_weights(self, scope, width):
        gamma = self._weight(f"{scope}/gamma", (width,), "ones")
        return gamma, self._weight(f"{scope}/beta", (width,), "zeros")

    def _cast(self, weight):
        return tf.cast(weight, self.compute_dtype)

    def _dense(self, x, kernel, bias):
        return tf.tensordot(x, self._cast(kernel), axes=1) + self._cast(bias)

    def _layer_norm(self, x, gamma_beta):
        return layer_norm(x, gamma_beta[0], gamma_beta[1], self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        return cls(BertConfig.from_dict(config.pop("config")), **config)


class Embeddings(_Tf1Layer):
    """bert/embeddings: word + token type + position embeddings, LayerNorm, dropout."""

    def __init__(self, config, name="bert/embeddings", **kwargs):
        super().__init__(config, name, **kwargs)
        self.dropout = tf.keras.layers.Dropout(config.hidden_dropout_prob)

    def build(self, input_shape):
        c = self.config
        self.word_embeddings = self._weight("word_embeddings", (c.vocab_size, c.hidden_size))
        self.token_type_embeddings = self._weight("token_type_embeddings", (c.type_vocab_size, c.hidden_size))
        self.position_embeddings = self._weight("position_embeddings",
                                                (c.max_position_embeddings, c.hidden_size))
        self.norm = self._layer_norm_weights("LayerNorm", c.hidden_size)
        super().build(input_shape)

    def call(self, inputs, training=None):
        input_ids, segment_ids = inputs
        seq_length = tf.shape(input_ids)[1]
        # Summed in float32 (the tables are float32); the LayerNorm casts to the compute dtype.
        x = (tf.gather(self.word_embeddings, input_ids) + tf.gather(self.token_type_embeddings, segment_ids)
             + self.position_embeddings[tf.newaxis, :seq_length])
        return self.dropout(self._layer_norm(x, self.norm), training=training)


class TransformerLayer(_Tf1Layer):
    """bert/encoder/layer_N: self-attention and feed-forward blocks, post-LayerNorm, as the reference."""

    def __init__(self, config, index=0, name=None, **kwargs):
        super().__init__(config, name or f"bert/encoder/layer_{index}", **kwargs)
        self.index = index
        self.attention_dropout = tf.keras.layers.Dropout(config.attention_probs_dropout_prob)
        self.attention_output_dropout = tf.keras.layers.Dropout(config.hidden_dropout_prob)
        self.output_dropout = tf.keras.layers.Dropout(config.hidden_dropout_prob)

    def build(self, input_shape):
        h, i = self.config.hidden_size, self.config.intermediate_size
        # Q/K/V kernels are stored 2-D [H, H] as in the reference and split into heads in call().
        self.query = self._dense_weights("attention/self/query", h, h)
        self.key = self._dense_weights("attention/self/key", h, h)
        self.value = self._dense_weights("attention/self/value", h, h)
        self.attention_output = self._dense_weights("attention/output/dense", h, h)
        self.attention_norm = self._layer_norm_weights("attention/output/LayerNorm", h)
        self.intermediate = self._dense_weights("intermediate/dense", h, i)
        self.output_dense = self._dense_weights("output/dense", i, h)
        self.output_norm = self._layer_norm_weights("output/LayerNorm", h)
        super().build(input_shape)

    def _heads(self, x, kernel_bias):
        """[B, S, H] -> [B, S, heads, head_size]."""
        c = self.config
        y = self._dense(x, *kernel_bias)
        return tf.reshape(y, [tf.shape(x)[0], tf.shape(x)[1], c.num_attention_heads, c.head_size])

    def _attention(self, x, input_mask, training):
        q, k, v = self._heads(x, self.query), self._heads(x, self.key), self._heads(x, self.value)
        scores = tf.einsum("bfnd,btnd->bnft", q, k) * (1.0 / math.sqrt(self.config.head_size))
        # Padded key positions get -10000 added before the softmax ([B, 1, 1, T] broadcast).
        mask = tf.cast(input_mask[:, tf.newaxis, tf.newaxis, :], scores.dtype)
        scores += (1.0 - mask) * ATTENTION_MASK_ADDER
        probs = self.attention_dropout(tf.nn.softmax(scores), training=training)
        context = tf.einsum("bnft,btnd->bfnd", probs, v)
        return tf.reshape(context, tf.shape(x))

    def call(self, inputs, training=None):
        x, input_mask = inputs
        attention = self._dense(self._attention(x, input_mask, training), *self.attention_output)
        attention = self._layer_norm(self.attention_output_dropout(attention, training=training) + x,
                                     self.attention_norm)
        hidden = activation(self.config.hidden_act)(self._dense(attention, *self.intermediate))
        output = self.output_dropout(self._dense(hidden, *self.output_dense), training=training)
        return self._layer_norm(output + attention, self.output_norm)

    def get_config(self):
        return {**super().get_config(), "index": self.index}


class Pooler(_Tf1Layer):
    """bert/pooler: tanh dense layer on the first token."""

    def __init__(self, config, name="bert/pooler", **kwargs):
        super().__init__(config, name, **kwargs)

    def build(self, input_shape):
        self.dense = self._dense_weights("dense", self.config.hidden_size, self.config.hidden_size)
        super().build(input_shape)

    def call(self, sequence):
        return tf.tanh(self._dense(sequence[:, 0], *self.dense))


class MaskedLMHead(_Tf1Layer):
    """cls/predictions: transform (dense, activation, LayerNorm), then logits tied to the word embeddings."""

    def __init__(self, config, embeddings: Embeddings, name="cls/predictions", **kwargs):
        super().__init__(config, name, **kwargs)
        self.embeddings = embeddings

    def build(self, input_shape):
        h = self.config.hidden_size
        self.output_bias = self._weight("output_bias", (self.config.vocab_size,), "zeros")
        self.transform = self._dense_weights("transform/dense", h, h)
        self.transform_norm = self._layer_norm_weights("transform/LayerNorm", h)
        super().build(input_shape)

    def call(self, inputs):
        sequence, positions = inputs
        # Only the masked positions go through the head, as in the reference (gather_indexes).
        x = tf.gather(sequence, positions, batch_dims=1)
        x = activation(self.config.hidden_act)(self._dense(x, *self.transform))
        x = self._layer_norm(x, self.transform_norm)
        logits = tf.einsum("bph,vh->bpv", x, self._cast(self.embeddings.word_embeddings))
        return tf.cast(logits, tf.float32) + self.output_bias


class NextSentenceHead(_Tf1Layer):
    """cls/seq_relationship: 2-way logits from the pooled output."""

    def __init__(self, config, name="cls/seq_relationship", **kwargs):
        super().__init__(config, name, **kwargs)

    def build(self, input_shape):
        self.output_weights = self._weight("output_weights", (2, self.config.hidden_size))
        self.output_bias = self._weight("output_bias", (2,), "zeros")
        super().build(input_shape)

    def call(self, pooled):
        logits = tf.matmul(pooled, self._cast(self.output_weights), transpose_b=True)
        return tf.cast(logits, tf.float32) + self.output_bias


def build_pretraining_model(bert_config: BertConfig, seq_length: int, max_predictions: int) -> tf.keras.Model:
    """The BERT pretraining model: features dict -> (mlm_logits [B, P, vocab], nsp_logits [B, 2]).

    Features are int32 input_ids, input_mask, segment_ids [B, seq_length] and
    masked_lm_positions [B, max_predictions]. Both logits are float32 under any global
    dtype policy; dropout is active only for model(features, training=True).
    """
    problems = bert_config.problems()
    if seq_length > bert_config.max_position_embeddings:
        problems.append(f"seq_length {seq_length} exceeds max_position_embeddings "
                        f"{bert_config.max_position_embeddings}")
    if problems:
        raise ValueError("cannot build BERT: " + "; ".join(problems))
    lengths = {"input_ids": seq_length, "input_mask": seq_length, "segment_ids": seq_length,
               "masked_lm_positions": max_predictions}
    inputs = {name: tf.keras.Input((lengths[name],), dtype=tf.int32, name=name) for name in INPUT_NAMES}
    embeddings = Embeddings(bert_config)
    x = embeddings([inputs["input_ids"], inputs["segment_ids"]])
    for index in range(bert_config.num_hidden_layers):
        x = TransformerLayer(bert_config, index)([x, inputs["input_mask"]])
    pooled = Pooler(bert_config)(x)
    mlm_logits = MaskedLMHead(bert_config, embeddings)([x, inputs["masked_lm_positions"]])
    nsp_logits = NextSentenceHead(bert_config)(pooled)
    return tf.keras.Model(inputs, [mlm_logits, nsp_logits], name="bert_pretraining")


def model_inputs(features: dict) -> dict:
    """The four model inputs out of a full feature dict (the model warns about extra keys)."""
    return {name: features[name] for name in INPUT_NAMES}


# ---------------------------------------------------------------- TF1 names

def tf1_name(variable) -> str:
    """The reference's TF1 name inside a Keras variable name ("bert/.../kernel" from "bert/.../kernel:0")."""
    match = _TF1_NAME.search(variable.name)
    if match is None:
        raise ValueError(f"variable {variable.name} has no TF1 (bert/... or cls/...) name")
    return match.group(1)


def tf1_variables(model: tf.keras.Model) -> dict[str, tf.Variable]:
    """{TF1 name: variable} for every trainable variable, in model order (the tied decoder once)."""
    variables = {}
    for variable in model.trainable_variables:
        name = tf1_name(variable)
        if name in variables:
            raise ValueError(f"two trainable variables are named {name}")
        variables[name] = variable
    return variables


def mlperf_tensor_names(model: tf.keras.Model) -> list[str]:
    """The tensor names of the `weights_initialization` log lines (398 for BERT-large)."""
    return list(tf1_variables(model))


# ---------------------------------------------------------------- loss and metric

def pretraining_losses(mlm_logits, nsp_logits, labels) -> tuple[tf.Tensor, tf.Tensor]:
    """(masked-LM loss, next-sentence loss) as the reference computes them, in float32.

    MLM = Σ w·nll / (Σ w + 1e-5) over the masked positions; NSP = mean cross-entropy.
    """
    weights = tf.cast(labels["masked_lm_weights"], tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels["masked_lm_ids"], tf.int32), logits=tf.cast(mlm_logits, tf.float32))
    mlm_loss = tf.reduce_sum(weights * nll) / (tf.reduce_sum(weights) + MLM_DENOMINATOR_EPSILON)
    nsp_labels = tf.reshape(tf.cast(labels["next_sentence_labels"], tf.int32), [-1])
    nsp_loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=nsp_labels, logits=tf.cast(nsp_logits, tf.float32)))
    return mlm_loss, nsp_loss


def pretraining_loss(mlm_logits, nsp_logits, labels) -> tf.Tensor:
    """The reference's total loss: masked-LM loss + next-sentence loss (a float32 scalar)."""
    mlm_loss, nsp_loss = pretraining_losses(mlm_logits, nsp_logits, labels)
    return mlm_loss + nsp_loss


def masked_lm_counts(mlm_logits, labels) -> tuple[tf.Tensor, tf.Tensor]:
    """(Σ w·[argmax == id], Σ w): sum both over batches and ranks; accuracy is their ratio."""
    weights = tf.cast(labels["masked_lm_weights"], tf.float32)
    predictions = tf.argmax(mlm_logits, axis=-1, output_type=tf.int32)
    correct = tf.cast(tf.equal(predictions, tf.cast(labels["masked_lm_ids"], tf.int32)), tf.float32)
    return tf.reduce_sum(weights * correct), tf.reduce_sum(weights)


def training_flops_per_sequence(config: BertConfig, seq_length, max_predictions):
    """Floating-point operations to train on one sequence: 3 x the forward pass's multiply-adds x 2.

    Per encoder layer, with T tokens of width h and feed-forward width i: the Q, K, V and output
    projections 4·T·h², the two feed-forward matmuls 2·T·h·i, and attention's scores (QKᵀ) and
    weighted sum (AV) T²·h each. Then the pooler (h² on the first token) and the next-sentence
    head (2h), and the masked-LM head on the P masked positions only (the reference gathers them):
    its transform P·h² and its logits against the tied word embeddings P·h·V. Embedding lookups,
    softmax, layer norm and GELU are left out (a few % at most). A multiply-add is 2 operations;
    the backward pass costs twice the forward one (gradients for activations and for weights).
    """
    t, h, i = seq_length, config.hidden_size, config.intermediate_size
    layer = 4 * t * h * h + 2 * t * h * i + 2 * t * t * h
    heads = h * h + 2 * h + max_predictions * (h * h + h * config.vocab_size)
    return 3 * 2 * (config.num_hidden_layers * layer + heads)
