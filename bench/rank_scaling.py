"""How the suite's overhead grows with the number of ranks: its --throughput efficiency against the
no-communication ceiling of the same number of processes, at 2, 4 and 8 ranks on one host and at 8
ranks across four hosts, for ResNet-50 and the small BERT of bench/ceiling.py.

Each scale is one command as a user types it:

- N ranks on one host: `horovodrun -np N -H localhost:N python -m models.<model> --throughput ...`;
- 8 ranks on four hosts, 2 each: `horovodrun -np 8 -hostfile 4node-2slots ...`, started on the first
  of the four network-namespace hosts the tests use (tests/twohosts.py's BridgedHosts, imported from
  tests/ through sys.path; the hostfile is tests/helpers/four_node.py's filled copy of hostfiles/4node with
  slots=2). The hosts share this machine's cores, so that run's ceiling is the 8-process one;
- the ceiling for N: N independent single-process runs started at once, each with the kernel threads
  one rank of the N-rank run gets (suite/train/dist.py's cpu_threads_per_rank: the host's cores over
  its local ranks, at least 1), given as `--set cpu_threads=K`. Nothing is communicated.

--distributions horovod,tf runs every scale once per backend in the same round, against the same
ceiling (default: horovod alone, the tables as before). The tf backend (`--set distribution=tf`,
TensorFlow's own collectives) refuses horovodrun, so it goes through mpirun with the mapping
horovodrun gives its own mpirun (`--bind-to none --map-by slot`: Open MPI would otherwise bind each rank
to one core wherever a host has a core per rank, unlike Horovod's ranks and the ceiling's processes):
`mpirun --oversubscribe -np N --bind-to none --map-by slot python ...` on one host;
`mpirun -np 8 -hostfile 4node-2slots --bind-to none --map-by slot -x PATH -x PYTHONPATH python ...` on
the four hosts (the ranks there get only what -x hands on; horovodrun forwards the whole environment),
with OMPI_MCA_orte_keep_fqdn_hostnames=1 as the horovodrun run has. Each backend then gets its
efficiency against the ceiling, a "tf / horovod" ratio of the N-rank rates, and a row of its own in
"where the rest goes". Each row's JSON names its backend ("distribution"; None for a ceiling); a row
without one, written before the choice, is Horovod's.

Efficiency = the N-rank run's total samples/s / its ceiling's total samples/s, per round and of the
medians. Rounds alternate the order (the second runs the list backwards), as bench/ceiling.py does,
whose helpers this script reuses. Timed steps shrink with the scale (an N-rank step does N/2 times
the 2-rank step's work on the same cores), so every run times about as long.

Where the rest goes comes from each run's throughput.json alone, not from Horovod's timeline: on a
CPU the timeline's writer thread costs rank 0 a core (BENCHMARKS.md, "Horovod and thread settings
on a CPU"), which would be mixed into the very figure measured. Each scale reports the ranks' median
step against the ceiling processes' (the difference is what communication and negotiation add to a
step), the spread of the ranks' rates (imbalance), and the highest input wait. The ceiling's step is
the compute of a rank's step slowed by sharing the cores, with nothing communicated; what the
ranks' step adds to it is the communication the backward pass did not hide.

    .venv/bin/python bench/rank_scaling.py [--rounds 2] [--models resnet50,bert] [--scales 2,4,8,4x2]
                                           [--distributions horovod,tf]
    .venv/bin/python bench/rank_scaling.py --quick     # a smoke run: 64 px, a 1-layer BERT, few steps
"""
import argparse
import contextlib
import dataclasses
import os
import shlex
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

import ceiling  # bench/ is this script's folder, so it is on sys.path

TESTS = os.path.join(ceiling.REPO, "tests")
# The namespace prefix of this script's four hosts: the tests' clusters use mlh, mls, mlq and mlr.
NAMESPACE_PREFIX = "mlz"
HOSTFILE_NAME = "4node-2slots"  # as the commands show the filled copy of hostfiles/4node
# What the hosts' commands find on PATH: the venv, then the system's (the tests' on_first_host does the same).
HOST_PATH = ceiling.BIN + os.pathsep + "/usr/local/bin:/usr/bin:/bin"
CORES = len(os.sched_getaffinity(0))
# A raw Open MPI launch keeps the hostfile's qualified names only when told (docs/scaling-study.md):
# otherwise it would ssh to the short name, which the hosts do not resolve.
KEEP_QUALIFIED_NAMES = (("OMPI_MCA_orte_keep_fqdn_hostnames", "1"),)
# The distribution backends (the models' distribution setting) and what launches each: the tf
# backend refuses horovodrun, which would start Horovod's controller.
LAUNCHERS = {"horovod": "horovodrun", "tf": "mpirun"}
DISTRIBUTIONS = tuple(LAUNCHERS)
# horovodrun runs mpirun with these; the tf backend's mpirun gets them too, so that the two differ in
# the backend alone. Without them Open MPI binds each rank to one core wherever a host has a core per
# rank (at 2 ranks here, and on every four-host host), while the ceiling's processes are unbound.
HOROVODRUN_MAPPING = ("--bind-to", "none", "--map-by", "slot")
# What a raw mpirun hands to the ranks it starts on other hosts (horovodrun forwards everything).
FORWARDED = ("PATH", "PYTHONPATH")


@dataclass(frozen=True)
class Scale:
    """One job size: `ranks` ranks on one host (hosts=1) or spread evenly over the namespace hosts."""

    key: str
    ranks: int
    hosts: int = 1

    @property
    def label(self):
        if self.hosts == 1:
            return f"{self.ranks} ranks, one host"
        return f"{self.ranks} ranks, {self.hosts} hosts x {self.ranks // self.hosts}"


SCALES = {"2": Scale("2", 2), "4": Scale("4", 4), "8": Scale("8", 8), "4x2": Scale("4x2", 8, hosts=4)}
# Timed steps at 2 ranks; an N-rank run times 2/N as many (at least MIN_STEPS). ResNet-50's 2-rank
# step is about 2.1 s, BERT's about 0.5 s on this machine's 2 cores (BENCHMARKS.md, ceiling table).
DEFAULT_STEPS = {"resnet50": 12, "bert": 48}
DEFAULT_WARMUP = 4
MIN_STEPS = 3
MIN_WARMUP = 2
# ResNet-50's per-rank batch at 8 processes: one process of 16 images at 224 px holds 2.7 GB resident
# (measured: VmRSS over its timed steps), 8 of them 21.8 GB of this machine's 23.5 GiB, with other
# jobs running beside them. 8 images each fit; --resnet50-batch-at-8 16 asks for the full size.
RESNET50_BATCH_AT_8 = 8
TARGETS = {("4x2", "resnet50"): 0.90, ("4x2", "bert"): 0.90, ("2", "bert"): 0.95}
ROUND_AGREEMENT = {("2", "bert"): 3.0}  # the most two rounds' efficiencies may differ, in per cent


def threads_per_rank(ranks_on_host, cores=CORES):
    """suite/train/dist.py's cpu_threads_per_rank (not imported: that module loads TensorFlow)."""
    return max(1, cores // ranks_on_host)


def scaled_steps(steps_at_two, ranks, minimum):
    """Steps for an N-rank run that take about as long as `steps_at_two` at 2 ranks."""
    return max(minimum, round(steps_at_two * 2 / ranks))


def ranks_key(scale, distribution="horovod"):
    """ranks_2 for Horovod (as before there was a choice), ranks_2_tf for the tf backend."""
    return f"ranks_{scale.key}" + ("" if distribution == "horovod" else f"_{distribution}")


def ceiling_key(ranks):
    return f"ceiling_{ranks}"


def ranks_variant(scale, rank_env=(), distribution="horovod"):
    """The N-rank run on one backend; rank_env: (name, value) pairs its command sets (--rank-env), to
    try a setting."""
    env = (KEEP_QUALIFIED_NAMES if scale.hosts > 1 else ()) + tuple(rank_env)
    if distribution == "horovod":
        return ceiling.Variant(ranks_key(scale), scale.label + " (horovodrun)", "suite", ranks=scale.ranks,
                               env=env)
    return ceiling.Variant(ranks_key(scale, distribution), f"{scale.label}, {distribution} backend "
                           f"({LAUNCHERS[distribution]})", "suite", ranks=scale.ranks, env=env,
                           suite_sets=(f"distribution={distribution}",))


def distribution_of(variant):
    """The backend an N-rank variant runs on: the distribution it sets, else Horovod (the default)."""
    for item in variant.suite_sets:
        name, _, value = item.partition("=")
        if name == "distribution":
            return value
    return "horovod"


def ceiling_variant(ranks):
    threads = threads_per_rank(ranks)
    return ceiling.Variant(ceiling_key(ranks), f"ceiling: {ranks} independent processes at once, "
                           f"{threads} thread(s) each", "suite", copies=ranks,
                           suite_sets=(f"cpu_threads={threads}",))


def efficiency_ratio(scale, distribution="horovod"):
    return ceiling.Ratio(f"{scale.label}: efficiency", ranks_key(scale, distribution),
                         ceiling_key(scale.ranks))


def backend_ratio(scale, distribution="tf"):
    """One backend's N-rank rate over Horovod's at the same scale (the same ceiling beneath both)."""
    return ceiling.Ratio(f"{scale.label}: {distribution} / horovod", ranks_key(scale, distribution),
                         ranks_key(scale))


def run_list(scales, rank_env=(), distributions=("horovod",)):
    """Each scale's runs, one per backend, with its ceiling just before them; a ceiling shared by two
    scales runs once."""
    runs, seen = [], set()
    for scale in scales:
        if scale.ranks not in seen:
            seen.add(scale.ranks)
            runs.append(ceiling_variant(scale.ranks))
        runs += [ranks_variant(scale, rank_env, distribution) for distribution in distributions]
    return runs


# ---------------------------------------------------------------- the runs

def workload_for(sizes, model, ranks, steps_at_two, warmup_at_two, config_path, config_text,
                 resnet50_batch_at_8=RESNET50_BATCH_AT_8):
    """bench/ceiling.py's workload of `model` with the steps (and ResNet-50's batch) of an N-rank run."""
    quick = sizes is ceiling.QUICK
    steps = sizes.steps if quick else scaled_steps(steps_at_two, ranks, MIN_STEPS)
    warmup = sizes.warmup_steps if quick else scaled_steps(warmup_at_two, ranks, MIN_WARMUP)
    batch = sizes.per_rank_batch
    if model == "resnet50" and ranks >= 8 and not quick:
        batch = resnet50_batch_at_8
    chosen = dataclasses.replace(sizes, steps=steps, warmup_steps=warmup, per_rank_batch=batch)
    return ceiling.workloads(chosen, config_path, config_text)[model]


def job_argvs(workload, variant, scale, run_dirs, hostfile):
    """The argv of each process started at once: one horovodrun or mpirun, or the ceiling's copies."""
    if variant.copies > 1:
        return [ceiling.suite_command(workload, 1, variant.suite_sets, run_dir) for run_dir in run_dirs]
    launcher = launcher_argv(variant, scale, hostfile)
    return [launcher + ceiling.suite_command(workload, scale.ranks, variant.suite_sets, run_dirs[0])]


def launcher_argv(variant, scale, hostfile):
    """horovodrun for Horovod; mpirun for the tf backend, which on other hosts is handed the variables
    the ranks need (PATH, PYTHONPATH, --rank-env's) with -x."""
    np = ["-np", str(scale.ranks)]
    if distribution_of(variant) == "horovod":
        hosts = ["-H", f"localhost:{scale.ranks}"] if scale.hosts == 1 else ["-hostfile", hostfile]
        return ["horovodrun", *np, *hosts]
    if scale.hosts == 1:
        return ["mpirun", "--oversubscribe", *np, *HOROVODRUN_MAPPING]
    # Open MPI hands its own settings (OMPI_MCA_*) to its daemons itself.
    names = [*FORWARDED, *(name for name, _ in variant.env if not name.startswith("OMPI_MCA_"))]
    return ["mpirun", *np, "-hostfile", hostfile, *HOROVODRUN_MAPPING,
            *(arg for name in names for arg in ("-x", name))]


def run_one(workload, variant, scale, round_index, work, cluster, hostfile, timeout):
    """One run's JSON row (bench/ceiling.py's row, plus the scale)."""
    run_dirs = [os.path.join(work, f"{workload.key}-{variant.key}-{round_index}-{copy}")
                for copy in range(variant.copies)]
    argvs = job_argvs(workload, variant, scale, run_dirs, hostfile)
    on_hosts = scale.hosts > 1 and variant.copies == 1
    if on_hosts:
        env = ceiling.job_env({**dict(variant.env), "PATH": HOST_PATH})
        wrap = lambda argv: cluster.wrap(cluster.names[0], argv)  # noqa: E731
    else:
        env, wrap = ceiling.job_env(variant.env), None
    results = ceiling.run_at_once(argvs, run_dirs, env, timeout, wrap)
    # The first process's command stands for the ceiling's copies, which differ only in their folder.
    commands = [ceiling.shown(argvs[0], variant.env, placeholders(run_dirs, hostfile, workload))]
    row = ceiling.row_of(workload, variant, round_index, results, commands)
    row["scale"] = scale.key if variant.copies == 1 else None
    # The ceiling communicates nothing, so it has no backend; a row without the key is Horovod's.
    row["distribution"] = distribution_of(variant) if variant.copies == 1 else None
    row["steps"] = results[0]["timed_steps"]
    row["per_rank_batch"] = results[0]["per_rank_batch"]
    return row


def placeholders(run_dirs, hostfile, workload):
    """{path: as the printed command names it}: DIR (DIR$i for the ceiling's copies), the hostfile,
    bert_config.json."""
    named = {run_dir: "DIR$i" if len(run_dirs) > 1 else "DIR" for run_dir in run_dirs}
    if hostfile:
        named[hostfile] = HOSTFILE_NAME
    for name, _ in workload.files:
        named[os.path.join(os.path.dirname(run_dirs[0]), name)] = name
    return named


def measure(chosen_models, scales, rounds, make_workload, work, cluster, hostfile, timeout, log, rank_env=(),
            distributions=("horovod",)):
    """Yields each run's row as it ends."""
    by_ranks = {scale.ranks: scale for scale in reversed(scales)}  # a ceiling's scale: the first of its size
    by_key = {ranks_key(scale, d): scale for scale in scales for d in distributions}
    for round_index in range(1, rounds + 1):
        for model in chosen_models:
            for variant in ceiling.round_order(round_index, run_list(scales, rank_env, distributions)):
                scale = by_key.get(variant.key) or by_ranks[variant.copies]
                workload = make_workload(model, scale.ranks)
                started = time.monotonic()
                row = run_one(workload, variant, scale, round_index, work, cluster, hostfile, timeout)
                log(f"round {round_index} {model} {variant.key}: {row['samples_per_second']:.2f} "
                    f"{workload.unit}, {row['steps']} timed steps ({time.monotonic() - started:.0f} s, "
                    f"load {os.getloadavg()[0]:.2f})")
                yield row


@contextlib.contextmanager
def four_hosts(work, needed):
    """The four namespace hosts and the filled 2-slot hostfile (None, None when no scale needs them);
    torn down on leaving, also after a failure or an interruption."""
    if not needed:
        yield None, None
        return
    sys.path[:0] = [TESTS, ceiling.REPO]  # tests/helpers and twohosts; the suite they import
    from helpers.four_node import filled_hostfile
    from twohosts import BridgedHosts, ClusterUnavailable
    from suite.cluster import hostfile as hostfile_format
    folder = os.path.join(work, "fourhosts")
    os.makedirs(folder)
    path = filled_hostfile(folder, slots=2)
    names = [host.name for host in hostfile_format.parse(path)]
    try:
        cluster = BridgedHosts(folder, names, prefix=NAMESPACE_PREFIX).__enter__()
    except ClusterUnavailable as error:
        raise ceiling.BenchError(f"no four-host cluster on this machine: {error}") from None
    try:
        yield cluster, path
    finally:
        cluster.close()


# ---------------------------------------------------------------- arithmetic on rows

def rows_of(rows, model, variant_key):
    return [row for row in rows if row["model"] == model and row["variant"] == variant_key]


def round_disagreement(values):
    """How far the rounds' efficiencies lie apart, in per cent of their median (0 for one round)."""
    return ceiling.spread(values)[3] if values else None


def median_step_ms(rows):
    """The median over every process of every given run of its median step, in ms."""
    steps = [value for row in rows for value in row["step_ms_p50"] if value is not None]
    return statistics.median(steps) if steps else None


def rank_spread(rows):
    """The widest (fastest - slowest) / mean of the ranks' rates within one run, in per cent."""
    widest = 0.0
    for row in rows:
        rates = [rank["samples_per_second"] for rank in row["per_process"]]
        widest = max(widest, 100.0 * (max(rates) - min(rates)) / statistics.fmean(rates))
    return widest


def highest_input_wait(rows):
    """The largest share of its timed steps any process waited for its batch, in per cent."""
    waits = [rank.get("input_wait_fraction") for row in rows for rank in row["per_process"]]
    known = [wait for wait in waits if wait is not None]
    return 100.0 * max(known) if known else None


def target_text(scale_key, model, value, per_round):
    """'at least 0.95: met' (and the rounds' agreement where one is asked for), or '-'."""
    bound = TARGETS.get((scale_key, model))
    if bound is None:
        return "-"
    parts = [f"at least {bound:g}: {'met' if value >= bound else 'NOT met'}"]
    agreement = ROUND_AGREEMENT.get((scale_key, model))
    if agreement is not None and len(per_round) > 1:
        apart = round_disagreement(per_round)
        parts.append(f"rounds within {agreement:g} %: {'met' if apart <= agreement else 'NOT met'}")
    return "; ".join(parts)


# ---------------------------------------------------------------- the report

def markdown(rows, models, scales, facts, invocation, rounds, workloads_by_model, complete=True,
             distributions=("horovod",)):
    cut = "" if complete else f" Interrupted after {len(rows)} run(s): the tables hold those alone."
    lines = [f"Measured {facts['date_utc']} with `{invocation}`: {rounds} round(s), alternating order.{cut}",
             ceiling.machine_line(facts),
             *ceiling._load_warning(rows, facts["nproc"]), ""]
    for model in models:
        lines += model_tables(rows, workloads_by_model[model], scales, distributions)
    return "\n".join(lines)


def model_tables(rows, workload, scales, distributions=("horovod",)):
    """The efficiency, backend and split tables and the commands of one model. With one backend the
    tables are as they were before there was a choice; with several each row names its backend."""
    model, unit = workload.key, workload.unit
    several = len(distributions) > 1
    backend = " backend |" if several else ""
    lines = [f"### {workload.title} (at 2 ranks)", "",
             f"| scale |{backend} per rank | timed steps | {unit}, N ranks (median) | "
             f"{unit}, ceiling (median) | efficiency, of medians | per round | rounds apart | target |",
             "|---|" + ("---|" if several else "") + "---:|---:|---:|---:|---:|---|---:|---|"]
    for scale in scales:
        for distribution in distributions:
            lines += _efficiency_line(rows, model, scale, distribution, several)
    lines += _backend_lines(rows, model, scales, distributions)
    added = "added per step: exposed communication" if several else "added per step"
    lines += ["", "Where the rest goes, from the runs' throughput.json (every round):", "",
              f"| scale |{backend} median step, ranks (ms) | median step, ceiling processes (ms) | {added} | "
              "ranks' rate spread, widest | ceiling processes' spread, widest | input wait, highest |",
              "|---|" + ("---|" if several else "") + "---:|---:|---:|---:|---:|---:|"]
    for scale in scales:
        for distribution in distributions:
            lines += _split_line(rows, model, scale, distribution, several)
    lines += ["", "Commands (from the repository root, `.venv/bin` first on PATH; DIR new folders; the "
              "ceiling's copies `for i in $(seq N)`):", ""]
    lines += _command_lines(rows, model, scales, distributions)
    lines += [f"- {name}: `{text}`" for name, text in workload.files]
    return lines + [""]


def _efficiency_line(rows, model, scale, distribution="horovod", several=False):
    ratio = efficiency_ratio(scale, distribution)
    value = ceiling.ratio_of_medians(ratio, rows, model)
    if value is None:
        return []
    ranks_rows = rows_of(rows, model, ranks_key(scale, distribution))
    ceiling_rows = rows_of(rows, model, ceiling_key(scale.ranks))
    per_round = ceiling.ratio_per_round(ratio, rows, model)
    backend = f" {distribution} |" if several else ""
    return [f"| {scale.label} |{backend} {ranks_rows[0]['per_rank_batch']} | {ranks_rows[0]['steps']} | "
            f"{_median_rate(ranks_rows):.2f} | {_median_rate(ceiling_rows):.2f} | {value:.3f} | "
            f"{', '.join(f'{v:.3f}' for v in per_round)} | {round_disagreement(per_round):.1f} % | "
            f"{target_text(scale.key, model, value, per_round)} |"]


def _backend_lines(rows, model, scales, distributions):
    """Each other backend's rate over Horovod's, per scale (the same rounds, the same ceiling)."""
    others = [d for d in distributions if d != "horovod"] if "horovod" in distributions else []
    lines = []
    for distribution in others:
        for scale in scales:
            ratio = backend_ratio(scale, distribution)
            value = ceiling.ratio_of_medians(ratio, rows, model)
            if value is not None:
                per_round = ceiling.ratio_per_round(ratio, rows, model)
                lines.append(f"| {scale.label} | {distribution} / horovod | {value:.3f} | "
                             f"{', '.join(f'{v:.3f}' for v in per_round)} |")
    if not lines:
        return []
    return ["", "The backends against each other (N-rank rates; above 1 the other backend is faster):", "",
            "| scale | ratio | of medians | per round |", "|---|---|---:|---|", *lines]


def _median_rate(rows):
    return statistics.median(row["samples_per_second"] for row in rows)


def _split_line(rows, model, scale, distribution="horovod", several=False):
    ranks_rows = rows_of(rows, model, ranks_key(scale, distribution))
    ceiling_rows = rows_of(rows, model, ceiling_key(scale.ranks))
    if not ranks_rows or not ceiling_rows:
        return []
    ranks_step, ceiling_step = median_step_ms(ranks_rows), median_step_ms(ceiling_rows)
    added = ranks_step - ceiling_step
    wait = highest_input_wait(ranks_rows)
    wait_text = "-" if wait is None else f"{wait:.2f} %"
    backend = f" {distribution} |" if several else ""
    return [f"| {scale.label} |{backend} {ranks_step:.0f} | {ceiling_step:.0f} | {added:+.0f} ms "
            f"({100 * added / ranks_step:+.1f} %) | {rank_spread(ranks_rows):.1f} % | "
            f"{rank_spread(ceiling_rows):.1f} % | {wait_text} |"]


def _command_lines(rows, model, scales, distributions=("horovod",)):
    lines = []
    for variant in run_list(scales, distributions=distributions):
        found = rows_of(rows, model, variant.key)
        if not found:
            continue
        text = found[0]["commands"][0]
        if variant.copies > 1:
            text = f"for i in $(seq {variant.copies}); do {text} & done; wait"
        lines.append(f"- {variant.label}: `{text}`")
    return lines


# ---------------------------------------------------------------- entry point

def parse_counts(text, flag, parser):
    """'resnet50=12,bert=60' -> {'resnet50': 12, 'bert': 60}."""
    counts = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if name not in DEFAULT_STEPS or not value.isdigit() or int(value) < 1:
            parser.error(f"{flag} {text}: give model=count, models resnet50, bert, counts at least 1")
        counts[name] = int(value)
    return counts


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, help="alternating rounds (default 2, with --quick 1)")
    parser.add_argument("--models", default="resnet50,bert", help="comma-separated: resnet50, bert")
    parser.add_argument("--scales", help="comma-separated: 2, 4, 8 (ranks on one host), 4x2 (8 ranks "
                        "on four hosts); default 2,4,8,4x2, with --quick 2,4x2")
    parser.add_argument("--steps", default="",
                        help="timed steps at 2 ranks, e.g. resnet50=12,bert=48 (the defaults); an N-rank "
                             f"run times 2/N as many, at least {MIN_STEPS}")
    parser.add_argument("--warmup-steps", type=int, default=DEFAULT_WARMUP,
                        help=f"untimed steps at 2 ranks, scaled as --steps, at least {MIN_WARMUP} "
                             f"(default {DEFAULT_WARMUP})")
    parser.add_argument("--resnet50-batch-at-8", type=int, default=RESNET50_BATCH_AT_8,
                        help=f"ResNet-50's images per rank at 8 processes (default {RESNET50_BATCH_AT_8}: "
                             f"16 would need about 22 GB)")
    parser.add_argument("--rank-env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the N-rank runs' environment only (repeatable), e.g. "
                             "HOROVOD_CYCLE_TIME=5 to try a setting against the same ceiling")
    parser.add_argument("--distributions", default="horovod",
                        help="comma-separated backends each scale runs on, in the same round against the "
                             "same ceiling: horovod (horovodrun), tf (mpirun); default horovod")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 64 px, a 1-layer BERT, 4 per rank, 1 + 3 steps at every scale, "
                             "1 round")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one run may take (default 1800)")
    parser.add_argument("--out", default="", help="also write the machine facts and every row as JSON here")
    args = parser.parse_args(argv)
    args.models = [name.strip() for name in args.models.split(",") if name.strip()]
    if not args.models or any(name not in DEFAULT_STEPS for name in args.models):
        parser.error(f"--models {','.join(args.models)}: choose from resnet50, bert")
    if args.scales is None:
        # --quick's smoke run: one host and the four hosts, without the slow middle scales.
        args.scales = "2,4x2" if args.quick else ",".join(SCALES)
    keys = [key.strip() for key in args.scales.split(",") if key.strip()]
    if not keys or any(key not in SCALES for key in keys):
        parser.error(f"--scales {args.scales}: choose from {', '.join(SCALES)}")
    args.scales = [SCALES[key] for key in keys]
    names = [name.strip() for name in args.distributions.split(",") if name.strip()]
    if not names or any(name not in DISTRIBUTIONS for name in names) or len(set(names)) < len(names):
        parser.error(f"--distributions {args.distributions}: choose from {', '.join(DISTRIBUTIONS)}, "
                     f"each once")
    args.distributions = tuple(names)
    if any("=" not in item or not item.split("=", 1)[0] for item in args.rank_env):
        parser.error(f"--rank-env {' '.join(args.rank_env)}: give NAME=VALUE")
    args.rank_env = tuple(tuple(item.split("=", 1)) for item in args.rank_env)
    args.steps = {**DEFAULT_STEPS, **parse_counts(args.steps, "--steps", parser)}
    if args.rounds is None:
        args.rounds = 1 if args.quick else 2
    for flag, value in (("--rounds", args.rounds), ("--warmup-steps", args.warmup_steps),
                        ("--timeout", args.timeout), ("--resnet50-batch-at-8", args.resnet50_batch_at_8)):
        if value < 1:
            parser.error(f"{flag} {value}: must be at least 1")
    if args.out and not os.path.isdir(os.path.dirname(os.path.abspath(args.out))):
        parser.error(f"--out {args.out}: its folder does not exist")
    return args


def main(argv=None):
    args = parse_args(argv)
    given = argv if argv is not None else sys.argv[1:]
    invocation = shlex.join([".venv/bin/python", "bench/rank_scaling.py", *given])
    facts = ceiling.machine_facts()
    rows, status = [], 0
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, ceiling._interrupt)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="rank-scaling-") as work:
        sizes = ceiling.QUICK if args.quick else ceiling.FULL
        config_path = os.path.join(work, "bert_config.json")
        config_text = ceiling.bert_config(sizes, config_path)

        def make_workload(model, ranks):
            return workload_for(sizes, model, ranks, args.steps[model], args.warmup_steps, config_path,
                                config_text, args.resnet50_batch_at_8)

        try:
            with four_hosts(work, any(scale.hosts > 1 for scale in args.scales)) as (cluster, hostfile):
                for row in measure(args.models, args.scales, args.rounds, make_workload, work, cluster,
                                   hostfile, args.timeout, log, args.rank_env, args.distributions):
                    rows.append(row)
                    ceiling._write_rows(args.out, facts, invocation, rows)  # a cut run keeps its rows
        except ceiling.BenchError as error:
            print(f"rank_scaling.py: {error}", file=sys.stderr)
            status = 1
        except (KeyboardInterrupt, ceiling.Interrupted) as stop:
            status = 128 + (stop.signum if isinstance(stop, ceiling.Interrupted) else signal.SIGINT)
            print(f"rank_scaling.py: interrupted after {len(rows)} run(s); the report covers those",
                  file=sys.stderr)
        workloads_by_model = {model: make_workload(model, 2) for model in args.models}
    facts["load_average_end"] = list(os.getloadavg())
    ceiling._write_rows(args.out, facts, invocation, rows)
    print(markdown(rows, args.models, args.scales, facts, invocation, args.rounds, workloads_by_model,
                   complete=status == 0, distributions=args.distributions))
    return status


if __name__ == "__main__":
    sys.exit(main())
