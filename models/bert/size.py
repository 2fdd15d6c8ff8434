"""BERT's trainable parameter count from its configuration, without TensorFlow: the size of the
gradient every step allreduces, for the scaling model on the login node."""

# BERT-large (google-research/bert bert_config.json, the MLPerf reference's vocabulary).
BERT_LARGE_SHAPE = {"hidden": 1024, "layers": 24, "intermediate": 4096, "vocab": 30522, "positions": 512,
                    "token_types": 2}


def parameter_count(hidden, layers, intermediate, vocab, positions, token_types, heads=True):
    """Trainable parameters of BERT (BertForPreTraining with `heads`), from its configuration.

    For BERT-large (h 1024, 24 layers, intermediate 4096, vocab 30522, 512 positions, 2 types):
      embeddings   30522*1024 + 512*1024 + 2*1024 + LayerNorm 2*1024     =  31,782,912
      per layer    Q, K, V, output: 4 * (1024*1024 + 1024)                =   4,198,400
                   LayerNorm after attention: 2*1024                     =       2,048
                   intermediate 1024*4096 + 4096, output 4096*1024 + 1024 =   8,393,728
                   LayerNorm after the feed-forward: 2*1024              =       2,048
                   together 12,596,224; times 24                         = 302,309,376
      pooler       1024*1024 + 1024                                      =   1,049,600
      encoder total                                                      = 335,141,888
      MLM head     transform 1024*1024 + 1024, LayerNorm 2*1024, output
                   bias 30522 (the output weights are the tied word
                   embeddings, counted once)                             =   1,082,170
      NSP head     1024*2 + 2                                            =       2,050
      total                                                              = 336,226,108
    The often quoted "340M" is this figure rounded; an fp32 gradient of it is 1.34 GB.
    """
    embeddings = (vocab + positions + token_types) * hidden + 2 * hidden
    attention = 4 * (hidden * hidden + hidden) + 2 * hidden
    feed_forward = (hidden * intermediate + intermediate) + (intermediate * hidden + hidden) + 2 * hidden
    pooler = hidden * hidden + hidden
    count = embeddings + layers * (attention + feed_forward) + pooler
    if heads:
        masked_lm = (hidden * hidden + hidden) + 2 * hidden + vocab
        next_sentence = hidden * 2 + 2
        count += masked_lm + next_sentence
    return count
