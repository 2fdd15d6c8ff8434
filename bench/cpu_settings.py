"""Which Horovod and TensorFlow settings make 2 CPU ranks fastest: side by side, in one invocation.

Every row is the README's raw command, `horovodrun -np 2 -H localhost:2 python -m models.resnet50
--throughput ...` (ResNet-50, 224 px, 1000 classes, fp32, synthetic, 16 images per rank), with the
controller, Horovod's cycle time and TensorFlow's inter-op threads set from outside as a user would.
The last row is the ceiling: two single-process runs at once, one kernel thread each, no Horovod
collective between them. Rounds alternate the rows so that a drift in machine load hits them alike.

    .venv/bin/python bench/cpu_settings.py [--rounds 1] [--steps 8] [--out rows.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from ceiling import REPO, job_env  # run as `python bench/cpu_settings.py`: bench/ is on the path
RESNET_224 = ["--preset", "tiny_cpu", "--set", "synthetic=true", "--set", "image_size=224",
              "--set", "num_classes=1000", "--set", "optimizer=lars"]
# What the processes run with when nothing is set: Horovod's 1 ms cycle, TensorFlow's 2 inter-op
# threads (the suite's choice before, for a rank with 1 kernel thread), Open MPI not yielding.
UPSTREAM = {"HOROVOD_CYCLE_TIME": "1", "TF_NUM_INTEROP_THREADS": "2", "OMPI_MCA_mpi_yield_when_idle": "0"}
NO_YIELD = {"OMPI_MCA_mpi_yield_when_idle": "0"}
# name, horovodrun controller flag, environment (the suite's own defaults fill in what is not set)
ROWS = (
    ("MPI (horovodrun's default), upstream defaults: cycle 1 ms, 2 inter-op threads, no yield", (), UPSTREAM),
    ("MPI, cycle 20 ms, 2 inter-op threads, no yield", (), {**NO_YIELD, "TF_NUM_INTEROP_THREADS": "2"}),
    ("MPI, cycle 1 ms, 1 inter-op thread, no yield", (), {**NO_YIELD, "HOROVOD_CYCLE_TIME": "1"}),
    ("MPI, cycle 20 ms, 1 inter-op thread, no yield", (), NO_YIELD),
    ("MPI, the suite's defaults: cycle 20 ms, 1 inter-op thread, waiting ranks yield the core", (), {}),
    ("MPI, the suite's defaults + Horovod's timeline enabled (HOROVOD_TIMELINE=DYNAMIC, not recording)", (),
     {"HOROVOD_TIMELINE": "DYNAMIC"}),
    ("Gloo, upstream defaults", ("--gloo",), UPSTREAM),
    ("Gloo, the suite's defaults", ("--gloo",), {}),
)
CEILING = "ceiling: 2 independent processes at once, 1 kernel + 1 inter-op thread each"


def model_command(per_rank_batch, ranks, steps, run_dir, extra=()):
    return ["python", "-m", "models.resnet50", "--throughput", *RESNET_224,
            "--set", f"global_batch_size={per_rank_batch * ranks}", "--set", "throughput_warmup_steps=2",
            "--set", f"throughput_steps={steps}", "--run-dir", run_dir, *extra]


def read_rate(run_dir):
    with open(os.path.join(run_dir, "throughput.json")) as handle:
        return json.load(handle)["samples_per_second"]


def run_two_ranks(flags, env, steps, work):
    run_dir = tempfile.mkdtemp(dir=work)
    command = ["horovodrun", *flags, "-np", "2", "-H", "localhost:2", *model_command(16, 2, steps, run_dir)]
    subprocess.run(command, cwd=REPO, env=job_env(env), check=True, capture_output=True, text=True)
    return read_rate(run_dir)


def run_ceiling(steps, work):
    """Two one-process runs started together, each with the threads one rank of the 2-rank job has."""
    dirs = [tempfile.mkdtemp(dir=work) for _ in range(2)]
    procs = [subprocess.Popen(model_command(16, 1, steps, d, ("--set", "cpu_threads=1")), cwd=REPO,
                              env=job_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for d in dirs]
    for proc in procs:
        if proc.wait() != 0:
            raise RuntimeError(proc.stderr.read()[-2000:])
    return sum(read_rate(d) for d in dirs)


def measure(rounds, steps, work):
    """{row name: [images/s per round]}, rows alternating within every round."""
    rates = {name: [] for name, _, _ in ROWS}
    rates[CEILING] = []
    for _ in range(rounds):
        for name, flags, env in ROWS:
            rates[name].append(run_two_ranks(flags, env, steps, work))
        rates[CEILING].append(run_ceiling(steps, work))
    return rates


def table(rates):
    ceiling = statistics.median(rates[CEILING])
    lines = ["| 2 ranks on 2 cores | images/s (median) | range | of the ceiling |", "|---|---:|---:|---:|"]
    for name, values in rates.items():
        median = statistics.median(values)
        lines.append(f"| {name} | {median:.2f} | {min(values):.2f}–{max(values):.2f} | "
                     f"{median / ceiling:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per run (after 1 + 2 warm-up)")
    parser.add_argument("--out", help="also write the measurements as JSON here")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M")
    with tempfile.TemporaryDirectory() as work:
        rates = measure(args.rounds, args.steps, work)
    print(f"{started}, {os.cpu_count()} cores, load average at the end {os.getloadavg()[0]:.1f}\n")
    print(table(rates))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(rates, handle, indent=2)


if __name__ == "__main__":
    main()
