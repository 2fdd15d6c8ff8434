"""The scaling ceiling, side by side in one invocation: the suite against the canonical Horovod idiom
(bench/canonical_*.py), 1 process and 2 ranks, its two distribution backends (Horovod, and
TensorFlow's own collectives with and without their all-reduce packs) at 2 ranks, against the
no-communication ceiling, and Horovod's own cost at 1 rank, for ResNet-50 and a small BERT.

Every variant runs once per round; rounds alternate the order (the second runs the list backwards),
so drift in the machine's load falls on both sides of every ratio. Each run is a command as a user
types it, its figure the samples/s the run itself reports over its timed steps (warm-up excluded):

- suite / canonical, 1 process, each at its defaults;
- suite / canonical, 2 ranks: `horovodrun -np 2 -H localhost:2 python ...`, the README's form;
- the suite's tf backend, 2 ranks: `mpirun -np 2 python ... --set distribution=tf` (horovodrun would
  start Horovod's controller), at its default packs (tf_pack_mb) and with one pack (tf_pack_mb=0);
- the ceiling: two independent single-process runs started at once, each with the threads one rank
  of the 2-rank run uses (the suite: --set cpu_threads=1; the canonical script has no thread knob,
  so TF_NUM_INTRAOP_THREADS=1 and TF_NUM_INTEROP_THREADS=1, the pools the suite gives each rank of
  a 2-rank run on 2 cores). Nothing is communicated, so 2-rank total / ceiling total is the 2-rank efficiency;
- the suite at 1 process with --set gradient_allreduce=false (a plain GradientTape): Horovod's cost.

    .venv/bin/python bench/ceiling.py [--rounds 2] [--models resnet50,bert] [--out rows.json]
    .venv/bin/python bench/ceiling.py --quick      # a tiny smoke run: 64 px, a small BERT, few steps
"""
import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
TWO_RANKS = ("horovodrun", "-np", "2", "-H", "localhost:2")
# The tf backend's launcher: the mpirun horovodrun itself runs (unbound, as horovodrun and
# suite.cluster.launch start it: at -np 2 Open MPI would otherwise pin each rank to one core),
# without Horovod's controller.
TWO_RANKS_MPIRUN = ("mpirun", "--oversubscribe", "-np", "2", "--bind-to", "none", "--map-by", "slot")
# The pools one rank of a 2-rank run on this machine uses, given to the canonical ceiling's processes.
CANONICAL_CEILING_ENV = (("TF_NUM_INTRAOP_THREADS", "1"), ("TF_NUM_INTEROP_THREADS", "1"))
RUN_DIRS = ("DIR", "DIR2")  # the run folders of a variant's copies, as the printed commands show them


@dataclass(frozen=True)
class Workload:
    """One benchmark at one size, as the suite's flags and as the canonical script's flags."""

    key: str
    title: str
    unit: str
    module: str
    suite_sets: tuple
    canonical_script: str
    canonical_flags: tuple
    per_rank_batch: int
    files: tuple = ()  # (name, text) of files its commands name, printed with them


@dataclass(frozen=True)
class Variant:
    """One way of running a workload: whose code, how many ranks in one job, how many jobs at once."""

    key: str
    label: str
    side: str  # "suite" or "canonical"
    ranks: int = 1
    copies: int = 1
    suite_sets: tuple = ()
    env: tuple = ()
    launcher: tuple = TWO_RANKS  # for ranks == 2


VARIANTS = (
    Variant("suite_1", "suite, 1 process", "suite"),
    Variant("canonical_1", "canonical, 1 process", "canonical"),
    Variant("suite_2", "suite, 2 ranks (horovodrun)", "suite", ranks=2),
    Variant("canonical_2", "canonical, 2 ranks (horovodrun)", "canonical", ranks=2),
    # Horovod's negotiation cycle 5 times slower than the suite's CPU default (suite/train/dist.py): a
    # cost paid per unit of time, not per step, would shrink with it.
    Variant("suite_2_cycle_100", "suite, 2 ranks (horovodrun), HOROVOD_CYCLE_TIME=100", "suite", ranks=2,
            env=(("HOROVOD_CYCLE_TIME", "100"),)),
    Variant("suite_2_tf", "suite, 2 ranks, tf backend (mpirun)", "suite", ranks=2,
            suite_sets=("distribution=tf",), launcher=TWO_RANKS_MPIRUN),
    Variant("suite_2_tf_one_pack", "suite, 2 ranks, tf backend, one pack (tf_pack_mb=0)", "suite", ranks=2,
            suite_sets=("distribution=tf", "tf_pack_mb=0"), launcher=TWO_RANKS_MPIRUN),
    Variant("suite_ceiling", "suite, 2 independent processes at once, 1 thread each", "suite", copies=2,
            suite_sets=("cpu_threads=1",)),
    Variant("canonical_ceiling", "canonical, 2 independent processes at once, 1 thread each", "canonical",
            copies=2, env=CANONICAL_CEILING_ENV),
    Variant("suite_1_no_allreduce", "suite, 1 process, gradient_allreduce=false", "suite",
            suite_sets=("gradient_allreduce=false",)),
)


@dataclass(frozen=True)
class Ratio:
    """numerator / denominator of two variants' figures; as_cost reports 1 - ratio in per cent."""

    label: str
    numerator: str
    denominator: str
    as_cost: bool = False
    # {workload key: bound}: at least the bound (a cost: at most, in per cent)
    targets: dict = field(default_factory=dict)


RATIOS = (
    Ratio("2-rank efficiency, suite (2 ranks / its ceiling)", "suite_2", "suite_ceiling",
          targets={"resnet50": 0.93}),
    Ratio("2-rank efficiency, canonical (2 ranks / its ceiling)", "canonical_2", "canonical_ceiling"),
    Ratio("2-rank efficiency, suite's tf backend (2 ranks / the suite's ceiling)", "suite_2_tf", "suite_ceiling"),
    Ratio("tf backend / Horovod, 2 ranks", "suite_2_tf", "suite_2"),
    Ratio("Horovod, 100 ms cycle / the suite's 20 ms, 2 ranks", "suite_2_cycle_100", "suite_2"),
    Ratio("tf backend, packs of tf_pack_mb / one pack", "suite_2_tf", "suite_2_tf_one_pack"),
    Ratio("suite / canonical, 1 process", "suite_1", "canonical_1", targets={"resnet50": 1.0}),
    Ratio("suite / canonical, 2 ranks", "suite_2", "canonical_2", targets={"resnet50": 1.3}),
    Ratio("Horovod's cost at 1 rank, suite (1 - with / without allreduce)", "suite_1", "suite_1_no_allreduce",
          as_cost=True, targets={"resnet50": 2.0, "bert": 2.0}),
)


@dataclass(frozen=True)
class Sizes:
    """The workloads' sizes: the benchmark's, or --quick's tiny ones."""

    image_size: int
    bert_layers: int
    bert_hidden: int
    bert_seq: int
    bert_predictions: int
    per_rank_batch: int
    warmup_steps: int
    steps: int


FULL = Sizes(image_size=224, bert_layers=4, bert_hidden=256, bert_seq=128, bert_predictions=20,
             per_rank_batch=16, warmup_steps=5, steps=20)
QUICK = Sizes(image_size=64, bert_layers=1, bert_hidden=64, bert_seq=32, bert_predictions=5,
              per_rank_batch=4, warmup_steps=1, steps=3)


def bert_config(sizes, path):
    """The suite's bert_config.json for the small BERT (the same model the canonical flags describe)."""
    config = {"vocab_size": 30522, "hidden_size": sizes.bert_hidden, "num_hidden_layers": sizes.bert_layers,
              "num_attention_heads": max(1, sizes.bert_hidden // 64),
              "intermediate_size": 4 * sizes.bert_hidden,
              "max_position_embeddings": max(512, sizes.bert_seq), "type_vocab_size": 2}
    with open(path, "w") as handle:
        json.dump(config, handle)
    return json.dumps(config)


def workloads(sizes, bert_config_path, bert_config_text):
    steps = (f"throughput_warmup_steps={sizes.warmup_steps}", f"throughput_steps={sizes.steps}")
    timing = ("--warmup-steps", str(sizes.warmup_steps), "--steps", str(sizes.steps),
              "--batch-size", str(sizes.per_rank_batch))
    resnet = Workload(
        "resnet50", f"ResNet-50, {sizes.image_size} px, 1000 classes, fp32, synthetic, "
        f"{sizes.per_rank_batch} images per rank", "img/s", "models.resnet50",
        ("synthetic=true", f"image_size={sizes.image_size}", "num_classes=1000", *steps),
        "bench/canonical_resnet50.py", ("--image-size", str(sizes.image_size), *timing), sizes.per_rank_batch)
    bert = Workload(
        "bert", f"BERT, {sizes.bert_layers} layers, hidden {sizes.bert_hidden}, vocabulary 30522, sequence "
        f"{sizes.bert_seq}, {sizes.bert_predictions} predictions, fp32, synthetic, {sizes.per_rank_batch} "
        f"sequences per rank", "seq/s", "models.bert",
        ("synthetic=true", f"bert_config={bert_config_path}", f"max_seq_length={sizes.bert_seq}",
         f"max_predictions_per_seq={sizes.bert_predictions}", *steps),
        "bench/canonical_bert.py",
        ("--layers", str(sizes.bert_layers), "--hidden", str(sizes.bert_hidden), "--seq-length",
         str(sizes.bert_seq), "--predictions", str(sizes.bert_predictions), *timing), sizes.per_rank_batch,
        files=(("bert_config.json", bert_config_text),))
    return {"resnet50": resnet, "bert": bert}


def command(workload, variant, run_dir):
    """The argv of one job of a variant; it leaves its result in run_dir/throughput.json."""
    launcher = list(variant.launcher) if variant.ranks == 2 else []
    if variant.side == "canonical":
        return launcher + ["python", workload.canonical_script, *workload.canonical_flags,
                           "--out", os.path.join(run_dir, "throughput.json")]
    return launcher + suite_command(workload, variant.ranks, variant.suite_sets, run_dir)


def suite_command(workload, ranks, extra_sets, run_dir):
    """`python -m <model> --throughput ...` for one process of a job of `ranks` ranks (no launcher)."""
    sets = [*workload.suite_sets, f"global_batch_size={workload.per_rank_batch * ranks}", *extra_sets]
    return ["python", "-m", workload.module, "--throughput", "--preset", "tiny_cpu",
            *[arg for item in sets for arg in ("--set", item)], "--run-dir", run_dir]


def shown(argv, env=(), placeholders=None):
    """The command as a user types it from the repository root, {temporary path: placeholder} replaced."""
    text = shlex.join(argv)
    for path, placeholder in (placeholders or {}).items():
        text = text.replace(path, placeholder)
    return " ".join([*(f"{name}={value}" for name, value in env), text])


def job_env(extra=()):
    """This environment with the venv's commands first on PATH and the repository importable, then extra."""
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""), PYTHONPATH=REPO)
    # Open MPI refuses root without these (horovodrun's MPI controller).
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.update(extra)
    return env


class BenchError(RuntimeError):
    """A run that failed or left no result; the message is one line naming the command."""


def run_variant(workload, variant, round_index, work, timeout, env=()):
    """Starts the variant's copies at once, waits for all; returns their results, argvs and run folders."""
    run_dirs = [os.path.join(work, f"{workload.key}-{variant.key}-{round_index}-{copy}")
                for copy in range(variant.copies)]
    argvs = [command(workload, variant, run_dir) for run_dir in run_dirs]
    return run_at_once(argvs, run_dirs, job_env((*env, *variant.env)), timeout), argvs, run_dirs


def run_at_once(argvs, run_dirs, env, timeout, wrap=None):
    """Starts every argv at once (each through wrap(argv), if given), waits for all; returns the
    throughput.json each left in its run folder."""
    for run_dir in run_dirs:
        os.makedirs(run_dir)
    # Each job in a session of its own, so that ending it ends horovodrun's ranks with it.
    jobs = [subprocess.Popen(wrap(argv) if wrap else argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True) for argv in argvs]
    try:
        errors = [_finish(job, timeout) for job in jobs]
    finally:
        _end_unfinished(jobs)  # after an error or an interruption: no job is left running
    for argv, error in zip(argvs, errors):
        if error is not None:
            raise BenchError(f"{shlex.join(argv)} failed: {error}")
    return [_read_result(run_dir, argv) for run_dir, argv in zip(run_dirs, argvs)]


def _finish(job, timeout):
    """None when the job ended well, else its last error line."""
    try:
        _, stderr = job.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_unfinished([job])
        return f"no result after {timeout} s"
    if job.returncode == 0:
        return None
    lines = [line for line in stderr.splitlines() if line.strip()]
    return f"exit {job.returncode}: {lines[-1] if lines else 'no output'}"


def _end_unfinished(jobs):
    for job in jobs:
        if job.poll() is None:
            try:
                os.killpg(job.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it ended meanwhile
            job.communicate()


def _read_result(run_dir, argv):
    path = os.path.join(run_dir, "throughput.json")
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError) as error:
        raise BenchError(f"{shlex.join(argv)} left no readable {path}: {error}") from None


def row_of(workload, variant, round_index, results, commands):
    """One measured run as a JSON row; a ceiling's figure is the sum of its independent processes."""
    per_process = [rank for result in results for rank in result["per_rank"]]
    return {"model": workload.key, "variant": variant.key, "label": variant.label, "round": round_index,
            "unit": workload.unit, "samples_per_second": sum(r["samples_per_second"] for r in results),
            "per_process": per_process, "step_ms_p50": [rank.get("step_ms_p50") for rank in per_process],
            "timed_overlap": timed_overlap(per_process) if variant.copies > 1 else None,
            "commands": commands,
            "copies": variant.copies, "ranks": variant.ranks, "load_average_after": list(os.getloadavg())}


def timed_overlap(per_process):
    """The share of the longest timed window during which every process was timing (None if unknown).

    The ceiling holds only while both processes work at once: one timing alone would have the
    machine to itself.
    """
    windows = [rank.get("timed_window") for rank in per_process]
    if not all(windows):
        return None
    shared = min(end for _, end in windows) - max(start for start, _ in windows)
    longest = max(end - start for start, end in windows)
    return max(0.0, shared) / longest if longest > 0 else None


def round_order(round_index, variants=VARIANTS):
    """Odd rounds run the variants forwards, even rounds backwards."""
    return tuple(variants) if round_index % 2 else tuple(reversed(variants))


def measure(chosen, rounds, timeout, work, bert_config_path, log, variants=VARIANTS, env=()):
    """Yields each run's row as it ends; env is added to every job's environment."""
    for round_index in range(1, rounds + 1):
        for workload in chosen:
            for variant in round_order(round_index, variants):
                started = time.monotonic()
                results, argvs, run_dirs = run_variant(workload, variant, round_index, work, timeout, env)
                placeholders = [{run_dir: name, bert_config_path: "bert_config.json"}
                                for run_dir, name in zip(run_dirs, RUN_DIRS)]
                commands = [shown(argv, (*env, *variant.env), names) for argv, names in zip(argvs, placeholders)]
                row = row_of(workload, variant, round_index, results, commands)
                log(f"round {round_index} {workload.key} {variant.key}: {row['samples_per_second']:.2f} "
                    f"{workload.unit} ({time.monotonic() - started:.0f} s, load {os.getloadavg()[0]:.2f})")
                yield row


# ---------------------------------------------------------------- arithmetic on rows

def figures(rows, model):
    """{variant key: [samples/s of each round, in round order]} for one model."""
    found = {}
    for row in sorted((r for r in rows if r["model"] == model), key=lambda r: r["round"]):
        found.setdefault(row["variant"], []).append(row["samples_per_second"])
    return found


def spread(values):
    """(median, min, max, (max - min) / median in per cent)."""
    middle = statistics.median(values)
    return middle, min(values), max(values), 100.0 * (max(values) - min(values)) / middle


def ratio_value(ratio, numerator, denominator):
    value = numerator / denominator
    return 100.0 * (1.0 - value) if ratio.as_cost else value


def ratio_per_round(ratio, rows, model):
    """The ratio within each round that measured both sides, in round order."""
    by_round = {}
    for row in rows:
        if row["model"] == model:
            by_round.setdefault(row["round"], {})[row["variant"]] = row["samples_per_second"]
    return [ratio_value(ratio, sides[ratio.numerator], sides[ratio.denominator])
            for _, sides in sorted(by_round.items())
            if ratio.numerator in sides and ratio.denominator in sides]


def ratio_of_medians(ratio, rows, model):
    found = figures(rows, model)
    if ratio.numerator not in found or ratio.denominator not in found:
        return None
    return ratio_value(ratio, statistics.median(found[ratio.numerator]),
                       statistics.median(found[ratio.denominator]))


def verdict(ratio, model, value):
    """'at least 0.93: met' (or '-' without a target for this model)."""
    bound = ratio.targets.get(model)
    if bound is None:
        return "-"
    if ratio.as_cost:
        return f"at most {bound:g} %: {'met' if value <= bound else 'NOT met'}"
    return f"at least {bound:g}: {'met' if value >= bound else 'NOT met'}"


# ---------------------------------------------------------------- the report

def machine_facts():
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": len(os.sched_getaffinity(0)), "cpu_model": _cpu_model(), "cpu_vectors": cpu_vectors(),
            "memory_gib": _memory_gib(), "python": platform.python_version(),
            "tensorflow": _version("tensorflow-cpu", "tensorflow"), "horovod": _version("horovod"),
            "git_revision": _git_revision(), "load_average_start": list(os.getloadavg())}


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_vectors(flags=None):
    """The CPU's widest vector instructions, as /proc/cpuinfo's flags say: what TensorFlow's CPU kernels
    run on, and one of what decides whether it turns its oneDNN kernels on by default (on an AVX2-only
    EPYC, TensorFlow 2.18's IsMklEnabled() said no). Two machines with the same model name can differ
    here by a factor of three in a ResNet-50 step."""
    if flags is None:
        try:
            with open("/proc/cpuinfo") as handle:
                flags = next((line.split(":", 1)[1].split() for line in handle
                              if line.startswith("flags")), [])
        except OSError:
            return "unknown"
    flags = set(flags)
    if "avx512f" not in flags:
        return "AVX2, no AVX-512" if "avx2" in flags else "no AVX2"
    extras = [name for flag, name in (("avx512_vnni", "VNNI"), ("avx512_bf16", "BF16"), ("amx_tile", "AMX"))
              if flag in flags]
    return "AVX-512" + (f" with {', '.join(extras)}" if extras else "")


def machine_line(facts):
    """The benches' line on where and on what they measured."""
    cpu = facts["cpu_model"] + (f" ({facts['cpu_vectors']})" if facts.get("cpu_vectors") else "")
    return (f"Machine: nproc {facts['nproc']}, {cpu}, {facts['memory_gib']} GiB; Python {facts['python']}, "
            f"TensorFlow {facts['tensorflow']}, Horovod {facts['horovod']}; "
            f"revision {facts['git_revision']}. "
            f"Load average (1, 5, 15 min) at the start {_load(facts['load_average_start'])}, at the end "
            f"{_load(facts['load_average_end'])}.")


def _memory_gib():
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2 ** 20, 1)
    except OSError:
        pass
    return None


def _version(*distributions):
    for name in distributions:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def _git_revision():
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return (result.stdout.strip() or "unknown") + (" (with uncommitted changes)" if dirty else "")


def markdown(rows, chosen, facts, invocation, rounds, complete=True):
    cut = "" if complete else f" Interrupted after {len(rows)} run(s): the tables hold those alone."
    lines = [f"Measured {facts['date_utc']} with `{invocation}`: {rounds} round(s), alternating order.{cut}",
             machine_line(facts),
             *_load_warning(rows, facts["nproc"]), ""]
    for workload in chosen:
        lines += _workload_tables(rows, workload)
    return "\n".join(lines)


def _load_warning(rows, cores):
    """A line when the 1-minute load after some run was above the core count: other work shared the cores."""
    loads = [row["load_average_after"][0] for row in rows if row.get("load_average_after")]
    if not loads or max(loads) <= cores:
        return []
    busy = sum(load > cores for load in loads)
    return [f"The 1-minute load average after {busy} of {len(loads)} runs was above the {cores} cores "
            f"(highest {max(loads):.2f}): other work shared the machine, so these figures are its, not "
            f"an idle machine's."]


def _load(values):
    return ", ".join(f"{value:.2f}" for value in values)


def _workload_tables(rows, workload):
    found = figures(rows, workload.key)
    lines = [f"### {workload.title}", "",
             f"| variant | {workload.unit} (median) | min - max | spread | per process {workload.unit} |",
             "|---|---:|---:|---:|---|"]
    for variant in VARIANTS:
        if variant.key not in found:
            continue
        middle, low, high, percent = spread(found[variant.key])
        lines.append(f"| {variant.label} | {middle:.2f} | {low:.2f} - {high:.2f} | {percent:.1f} % | "
                     f"{_per_process(rows, workload.key, variant.key)} |")
    lines += ["", "| ratio | of medians | per round | target |", "|---|---:|---|---|"]
    for ratio in RATIOS:
        value = ratio_of_medians(ratio, rows, workload.key)
        if value is None:
            continue
        rounds = ", ".join(_ratio_text(ratio, v) for v in ratio_per_round(ratio, rows, workload.key))
        target = verdict(ratio, workload.key, value)
        lines.append(f"| {ratio.label} | {_ratio_text(ratio, value)} | {rounds} | {target} |")
    lines += _step_split_lines(rows, workload)
    lines += ["", "Commands (from the repository root, `.venv/bin` first on PATH; DIR, DIR2 new folders):",
              ""]
    lines += [f"- {variant.label}: `{_command_of(rows, workload.key, variant)}`"
              for variant in VARIANTS if variant.key in found]
    lines += [f"- {name}: `{text}`" for name, text in workload.files]
    return lines + ["", *_overlap_lines(rows, workload.key), ""]


# The 2-rank variants whose step the ceiling splits, and the ceiling of the same code.
SPLIT = (("suite_2", "suite_ceiling"), ("suite_2_cycle_100", "suite_ceiling"), ("suite_2_tf", "suite_ceiling"),
         ("suite_2_tf_one_pack", "suite_ceiling"), ("canonical_2", "canonical_ceiling"))


def step_split(rows, model, variant, ceiling):
    """(step ms, compute ms with the cores shared, exposed communication ms): medians over rounds.

    A rank's step against a ceiling process's step: the same code on the same share of the cores, with
    nothing communicated. What the 2-rank step takes beyond it is the communication the backward pass
    did not hide (and the ranks' waits on each other)."""
    def median_step(key):
        steps = [statistics.mean(r["step_ms_p50"]) for r in rows if r["model"] == model and r["variant"] == key
                 and r.get("step_ms_p50") and all(r["step_ms_p50"])]
        return statistics.median(steps) if steps else None
    step, compute = median_step(variant), median_step(ceiling)
    if step is None or compute is None:
        return None
    return step, compute, step - compute


def _step_split_lines(rows, workload):
    split_rows = []
    for variant_key, ceiling_key in SPLIT:
        found = step_split(rows, workload.key, variant_key, ceiling_key)
        if found:
            label = next(v.label for v in VARIANTS if v.key == variant_key)
            step, compute, exposed = found
            split_rows.append(f"| {label} | {step:.0f} | {compute:.0f} | {exposed:.0f} | "
                              f"{100 * exposed / step:.1f} % |")
    if not split_rows:
        return []
    return ["", "Step split (medians of the per-rank step p50 over rounds; compute is the ceiling's step, "
                "the same code on the same share of the cores with nothing communicated):", "",
            "| variant | step (ms) | compute, cores shared (ms) | exposed communication (ms) | of the step |",
            "|---|---:|---:|---:|---:|", *split_rows]


def _overlap_lines(rows, model):
    """Whether each ceiling's independent processes really timed at once, as far as they tell."""
    lines = []
    for variant in VARIANTS:
        overlaps = [row["timed_overlap"] for row in rows if row["model"] == model
                    and row["variant"] == variant.key and row["copies"] > 1]
        if not overlaps:
            continue
        known = [value for value in overlaps if value is not None]
        if known:
            lines.append(f"{variant.label}: the two processes timed at once for {100 * min(known):.0f} % of "
                         f"the longer timed span at the least (over {len(known)} round(s)).")
        else:
            lines.append(f"{variant.label}: its results give no timing window, so whether the two "
                         f"processes timed at once is not checked.")
    return lines


def _ratio_text(ratio, value):
    """Three decimals for a ratio, so that one just under a target does not print as on it; a cost in %."""
    return f"{value:.1f} %" if ratio.as_cost else f"{value:.3f}"


def _per_process(rows, model, variant_key):
    """The last round's per-process figures of a variant, 'a + b' for two."""
    last = [row for row in rows if row["model"] == model and row["variant"] == variant_key][-1]
    return " + ".join(f"{rank['samples_per_second']:.2f}" for rank in last["per_process"])


def _command_of(rows, model, variant):
    """One command, or the copies started at once: `a & b; wait`."""
    commands = next(row["commands"] for row in rows
                    if row["model"] == model and row["variant"] == variant.key)
    return " & ".join(commands) + ("; wait" if len(commands) > 1 else "")


# ---------------------------------------------------------------- entry point

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 2, with --quick 1)")
    parser.add_argument("--models", default="resnet50,bert", help="comma-separated: resnet50, bert")
    parser.add_argument("--quick", action="store_true",
                        help="tiny smoke run: 64 px, a 1-layer BERT, 4 per rank, 1 + 3 steps, 1 round")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--out", default="", help="also write the machine facts and every row as JSON here")
    parser.add_argument("--steps", type=int, help="timed steps per run (default 20, with --quick 3)")
    parser.add_argument("--image-size", type=int, help="ResNet-50's image size (default 224, with --quick 64)")
    parser.add_argument("--per-rank-batch", type=int, help="samples per rank (default 16, with --quick 4)")
    parser.add_argument("--warmup-steps", type=int, help="untimed steps first (default 5, with --quick 1)")
    parser.add_argument("--variants", default="",
                        help=f"comma-separated subset of: {', '.join(v.key for v in VARIANTS)} (default: all)")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="set in every job's environment, e.g. TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's Eigen "
                             "kernels, its default on an AVX2-only CPU); repeatable")
    args = parser.parse_args(argv)
    known_variants = {v.key for v in VARIANTS}
    args.variants = [k.strip() for k in args.variants.split(",") if k.strip()] or [v.key for v in VARIANTS]
    if set(args.variants) - known_variants:
        parser.error(f"--variants: unknown {', '.join(sorted(set(args.variants) - known_variants))}")
    bad = [item for item in args.env if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        parser.error(f"--env {bad[0]}: expected KEY=VALUE")
    args.env = tuple(tuple(item.split("=", 1)) for item in args.env)
    chosen = [name.strip() for name in args.models.split(",") if name.strip()]
    unknown = [name for name in chosen if name not in ("resnet50", "bert")]
    if unknown or not chosen:
        parser.error(f"--models {args.models}: choose from resnet50, bert")
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: must be at least 1")
    for flag, value in (("--steps", args.steps), ("--warmup-steps", args.warmup_steps),
                        ("--image-size", args.image_size), ("--per-rank-batch", args.per_rank_batch)):
        if value is not None and value < 1:
            parser.error(f"{flag} {value}: must be at least 1")
    if args.timeout < 1:
        parser.error(f"--timeout {args.timeout}: must be positive")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        parser.error(f"--out {args.out}: its folder does not exist")
    return args, chosen


def main(argv=None):
    args, chosen_keys = parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    invocation = shlex.join([".venv/bin/python", "bench/ceiling.py", *given])
    facts = machine_facts()
    rows, status = [], 0
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    with tempfile.TemporaryDirectory(prefix="ceiling-") as work:
        config_path = os.path.join(work, "bert_config.json")
        sizes = QUICK if args.quick else FULL
        sizes = dataclasses.replace(sizes, steps=args.steps or sizes.steps,
                                    warmup_steps=args.warmup_steps or sizes.warmup_steps,
                                    image_size=args.image_size or sizes.image_size,
                                    per_rank_batch=args.per_rank_batch or sizes.per_rank_batch)
        known = workloads(sizes, config_path, bert_config(sizes, config_path))
        chosen = [known[key] for key in chosen_keys]
        try:
            variants = tuple(v for v in VARIANTS if v.key in args.variants)
            for row in measure(chosen, args.rounds, args.timeout, work, config_path,
                               lambda text: print(text, file=sys.stderr, flush=True), variants, args.env):
                rows.append(row)
                _write_rows(args.out, facts, invocation, rows)  # a run cut short keeps what it measured
        except BenchError as error:
            print(f"ceiling.py: {error}", file=sys.stderr)
            return 1
        except (KeyboardInterrupt, Interrupted) as stop:
            status = 128 + (stop.signum if isinstance(stop, Interrupted) else signal.SIGINT)
            print(f"ceiling.py: interrupted after {len(rows)} run(s); the report covers those",
                  file=sys.stderr)
    facts["load_average_end"] = list(os.getloadavg())
    _write_rows(args.out, facts, invocation, rows)
    print(markdown(rows, chosen, facts, invocation, args.rounds, complete=status == 0))
    return status


class Interrupted(Exception):
    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _interrupt(signum, frame):
    raise Interrupted(signum)


def _write_rows(out, facts, invocation, rows):
    if not out:
        return
    partial = out + ".partial"
    with open(partial, "w") as handle:
        json.dump({"machine": facts, "invocation": invocation, "rows": rows}, handle, indent=2)
    os.replace(partial, out)


if __name__ == "__main__":
    sys.exit(main())
