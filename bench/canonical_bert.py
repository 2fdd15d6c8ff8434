"""A small BERT-like masked-LM encoder trained the canonical Horovod TF2 way, on synthetic data, timed:
the BERT baseline the suite is measured against.

Written in plain Keras layers from Horovod's documented TF2 pattern, not from the suite: word
(30,522-word vocabulary), position and segment embeddings; N transformer layers with
MultiHeadAttention; a masked-LM head on the masked positions only, its output tied to the word
embeddings; Adam with the learning rate scaled by the process count; hvd.DistributedGradientTape
with sparse_as_dense=True (the embedding's gradient joins the dense allreduce). The defaults match
the suite's small BERT of the benchmarks: 4 layers, hidden 256, sequence 128, 20 predictions, 16
sequences per process. No thread tuning.

    python bench/canonical_bert.py [--layers 4] [--hidden 256] [--seq-length 128] [--out result.json]
    horovodrun -np 2 -H localhost:2 python bench/canonical_bert.py
"""
import argparse
from dataclasses import dataclass

import numpy as np

from canonical_common import (add_timing_flags, hvd, positive_int, start_horovod, tf, timing_from,
                              train_and_time)

VOCAB_SIZE = 30522
HEAD_WIDTH = 64
DROPOUT = 0.1
NORM_EPSILON = 1e-12
# Per-process Adam learning rate, scaled by the process count.
BASE_LR = 1e-4


@dataclass(frozen=True)
class BertSize:
    layers: int
    hidden: int
    seq_length: int
    predictions: int

    @property
    def heads(self):
        return max(1, self.hidden // HEAD_WIDTH)


class EncoderLayer(tf.keras.layers.Layer):
    """Self-attention and a feed-forward block, each followed by dropout, a residual and LayerNorm."""

    def __init__(self, size: BertSize, **kwargs):
        super().__init__(**kwargs)
        self.attention = tf.keras.layers.MultiHeadAttention(size.heads, size.hidden // size.heads,
                                                            dropout=DROPOUT)
        self.attention_dropout = tf.keras.layers.Dropout(DROPOUT)
        self.attention_norm = tf.keras.layers.LayerNormalization(epsilon=NORM_EPSILON)
        self.intermediate = tf.keras.layers.Dense(4 * size.hidden, activation="gelu")
        self.output_dense = tf.keras.layers.Dense(size.hidden)
        self.output_dropout = tf.keras.layers.Dropout(DROPOUT)
        self.output_norm = tf.keras.layers.LayerNormalization(epsilon=NORM_EPSILON)

    def call(self, x, attention_mask, training=False):
        attended = self.attention(x, x, attention_mask=attention_mask, training=training)
        x = self.attention_norm(x + self.attention_dropout(attended, training=training))
        feed_forward = self.output_dense(self.intermediate(x))
        return self.output_norm(x + self.output_dropout(feed_forward, training=training))


class MaskedLM(tf.keras.Model):
    """(input_ids, segment_ids, input_mask, masked_positions) -> logits [batch, predictions, vocabulary]."""

    def __init__(self, size: BertSize, **kwargs):
        super().__init__(**kwargs)
        self.word_embeddings = tf.keras.layers.Embedding(VOCAB_SIZE, size.hidden)
        self.position_embeddings = tf.keras.layers.Embedding(size.seq_length, size.hidden)
        self.segment_embeddings = tf.keras.layers.Embedding(2, size.hidden)
        self.embedding_norm = tf.keras.layers.LayerNormalization(epsilon=NORM_EPSILON)
        self.embedding_dropout = tf.keras.layers.Dropout(DROPOUT)
        self.encoder = [EncoderLayer(size) for _ in range(size.layers)]
        self.transform = tf.keras.layers.Dense(size.hidden, activation="gelu")
        self.transform_norm = tf.keras.layers.LayerNormalization(epsilon=NORM_EPSILON)
        self.output_bias = self.add_weight(name="output_bias", shape=(VOCAB_SIZE,), initializer="zeros")

    def call(self, inputs, training=False):
        input_ids, segment_ids, input_mask, positions = inputs
        where = tf.range(tf.shape(input_ids)[1])
        x = (self.word_embeddings(input_ids) + self.position_embeddings(where)[tf.newaxis]
             + self.segment_embeddings(segment_ids))
        x = self.embedding_dropout(self.embedding_norm(x), training=training)
        # Every query may attend to the key positions the sequence really has.
        attention_mask = tf.cast(input_mask[:, tf.newaxis, :], tf.bool)
        for layer in self.encoder:
            x = layer(x, attention_mask, training=training)
        masked = tf.gather(x, positions, batch_dims=1)
        masked = self.transform_norm(self.transform(masked))
        return tf.matmul(masked, self.word_embeddings.embeddings, transpose_b=True) + self.output_bias


def synthetic_batch(size: BertSize, batch: int, seed: int):
    """One random batch made once and fed every step: full-length sequences, `predictions` masked each."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, VOCAB_SIZE, (batch, size.seq_length))
    segment_ids = (np.arange(size.seq_length) >= size.seq_length // 2).astype(np.int64)[np.newaxis]
    positions = np.sort(np.stack([rng.choice(np.arange(1, size.seq_length), size.predictions, replace=False)
                                  for _ in range(batch)]), axis=1)
    segments = np.repeat(segment_ids, batch, axis=0)
    features = (input_ids, segments, np.ones((batch, size.seq_length)), positions)
    labels = rng.integers(0, VOCAB_SIZE, (batch, size.predictions))
    return tuple(tf.constant(f, tf.int32) for f in features), tf.constant(labels, tf.int32)


def make_train_step(model, optimizer, features, labels):
    @tf.function
    def train_step():
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.reduce_mean(losses)
        # Horovod: averages the gradients over all processes; the embedding's sparse gradient is made
        # dense so that it is fused with the others.
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=True)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return train_step


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=positive_int, default=4, help="transformer layers (default 4)")
    parser.add_argument("--hidden", type=positive_int, default=256,
                        help=f"hidden width, a multiple of {HEAD_WIDTH} above it (default 256)")
    parser.add_argument("--seq-length", type=positive_int, default=128,
                        help="tokens a sequence (default 128)")
    parser.add_argument("--predictions", type=positive_int, default=20, help="masked positions a sequence")
    parser.add_argument("--batch-size", type=positive_int, default=16, help="sequences per process and step")
    add_timing_flags(parser)
    args = parser.parse_args(argv)
    if args.hidden > HEAD_WIDTH and args.hidden % HEAD_WIDTH:
        parser.error(f"--hidden {args.hidden}: not a multiple of the head width {HEAD_WIDTH}")
    if args.predictions >= args.seq_length:
        parser.error(f"--predictions {args.predictions}: must be fewer than --seq-length {args.seq_length}")
    size = BertSize(layers=args.layers, hidden=args.hidden, seq_length=args.seq_length,
                    predictions=args.predictions)
    return size, args.batch_size, timing_from(args, parser)


def main(argv=None):
    size, batch, timing = parse_args(argv)
    start_horovod()
    model = MaskedLM(size)
    optimizer = tf.keras.optimizers.Adam(learning_rate=BASE_LR * hvd.size())
    features, labels = synthetic_batch(size, batch, seed=hvd.rank())
    train_step = make_train_step(model, optimizer, features, labels)
    description = (f"canonical masked-LM encoder (plain Keras), {size.layers} layers, hidden {size.hidden}, "
                   f"vocabulary {VOCAB_SIZE}, sequence {size.seq_length}, {size.predictions} predictions, "
                   f"fp32")
    train_and_time(train_step, model, optimizer, batch, timing, description)


if __name__ == "__main__":
    main()
