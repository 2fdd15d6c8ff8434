"""Training throughput of the suite's BERT step on a small BERT, measured side by side in one invocation.

Runs `python -m models.bert` on synthetic data for each variant below, one after the other, and
prints a Markdown table of samples/s from each run's summary.json. The rows that matter are the
ratios: two ranks against one, gradient accumulation against one large micro-batch at the same
global batch, fp16 gradient compression, bf16.

    .venv/bin/python bench/bert_throughput.py [--layers 4] [--hidden 256] [--seq 128] [--steps 40]
"""
import argparse
import json
import os
import tempfile

from throughput import print_table, run_entry_point

# name, processes, accumulation steps, extra settings
VARIANTS = (
    ("1 process, fp32", 1, 1, ()),
    ("2 processes (horovodrun), fp32", 2, 1, ()),
    ("2 processes, 2 micro-batches accumulated", 2, 2, ()),
    ("2 processes, fp16 allreduce", 2, 1, ("fp16_allreduce=true",)),
    ("1 process, bf16", 1, 1, ("precision=bf16",)),
)


def bert_config(layers, hidden, seq):
    return {"vocab_size": 30522, "hidden_size": hidden, "num_hidden_layers": layers,
            "num_attention_heads": max(1, hidden // 64), "intermediate_size": 4 * hidden,
            "max_position_embeddings": max(512, seq), "type_vocab_size": 2}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--predictions", type=int, default=20)
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        config_path = os.path.join(work, "bert_config.json")
        with open(config_path, "w") as handle:
            json.dump(bert_config(args.layers, args.hidden, args.seq), handle)
        for name, processes, accumulation, settings in VARIANTS:
            sets = [f"bert_config={config_path}", "synthetic=true", f"max_seq_length={args.seq}",
                    f"max_predictions_per_seq={args.predictions}", f"global_batch_size={args.global_batch}",
                    f"accumulation_steps={accumulation}", f"train_steps={args.steps}",
                    f"eval_interval_samples={args.steps * args.global_batch}",
                    f"log_every={max(1, args.steps // 4)}", "base_lr=0.001", *settings]
            summary = run_entry_point("models.bert", "tiny_cpu", processes, sets, work)
            rows.append({"variant": name, "processes": processes,
                         "samples_per_second": summary["samples_per_second_total"],
                         "step_ms_p50": summary["ranks"][0]["step_ms_p50"]})
    print(f"BERT ({args.layers} layers, hidden {args.hidden}, vocab 30522), synthetic, sequence {args.seq}, "
          f"{args.predictions} predictions, global batch {args.global_batch}, {args.steps} steps "
          f"(first interval excluded)\n")
    print_table(rows)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
