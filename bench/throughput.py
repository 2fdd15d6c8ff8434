"""Training throughput of the suite's ResNet-50 step, measured side by side in one invocation.

Runs the public entry point on synthetic data (no decode) for each variant below, one after
the other, and prints a Markdown table of samples/s from each run's summary.json. Ratios
between rows of one table are the figures to quote: absolute numbers move with machine load.

    .venv/bin/python bench/throughput.py [--image-size 64] [--steps 30] [--out bench/results.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)

# name, processes, extra settings
VARIANTS = (
    ("1 process, fp32", 1, ()),
    ("2 processes (horovodrun), fp32", 2, ()),
    ("2 processes, fp16 allreduce", 2, ("fp16_allreduce=true",)),
    ("1 process, bf16", 1, ("precision=bf16",)),
    ("1 process, fp32 + XLA", 1, ("xla=true",)),
)


def run_entry_point(module, preset, processes, settings, work):
    """Runs `python -m <module>` (under horovodrun for more than one process); returns its summary.json."""
    run_dir = tempfile.mkdtemp(dir=work)
    os.rmdir(run_dir)
    command = [sys.executable if processes == 1 else "python", "-m", module, "--preset", preset,
               "--run-dir", run_dir]
    for item in settings:
        command += ["--set", item]
    if processes > 1:
        command = ["horovodrun", "-np", str(processes), "-H", f"localhost:{processes}"] + command
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ["PATH"])
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True, text=True)
    with open(os.path.join(run_dir, "summary.json")) as handle:
        return json.load(handle)


def print_table(rows):
    """A Markdown table of the rows, each against the first."""
    base = rows[0]["samples_per_second"]
    print(f"| variant | samples/s | p50 step (ms) | vs {rows[0]['variant']} |")
    print("|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['variant']} | {row['samples_per_second']:.1f} | {row['step_ms_p50']:.0f} | "
              f"{row['samples_per_second'] / base:.2f}x |")


def run_variant(processes, settings, image_size, steps, per_rank_batch, work):
    global_batch = per_rank_batch * processes
    sets = [f"image_size={image_size}", f"global_batch_size={global_batch}", "synthetic=true",
            f"synthetic_epoch_samples={steps * global_batch}", "epochs=1", "eval_offset=1",
            "epochs_between_evals=1", f"log_every={max(1, steps // 3)}", *settings]
    return run_entry_point("models.resnet50", "tiny_cpu", processes, sets, work)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--per-rank-batch", type=int, default=16)
    parser.add_argument("--out", help="also write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name, processes, settings in VARIANTS:
            summary = run_variant(processes, settings, args.image_size, args.steps, args.per_rank_batch, work)
            rows.append({"variant": name, "processes": processes,
                         "samples_per_second": summary["samples_per_second_total"],
                         "step_ms_p50": summary["ranks"][0]["step_ms_p50"]})
    print(f"ResNet-50, synthetic {args.image_size}x{args.image_size}, {args.per_rank_batch} images per rank "
          f"per step, {args.steps} steps (first interval excluded)\n")
    print_table(rows)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
