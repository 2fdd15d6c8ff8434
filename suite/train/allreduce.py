"""Horovod allreduce bandwidth on the live job: time, algbw and busbw per message size, as a table and JSON.

Run it the way the training entry points run, so it measures the same path the gradients take:

    horovodrun -np 16 -hostfile hostfiles/2node python -m suite.train.allreduce --expect-busbw 185
    mpirun -np 2 python -m suite.train.allreduce --min-bytes 4K --max-bytes 64M --json runs/ar.json

Conventions (those of NVIDIA's nccl-tests, so the figures compare with `all_reduce_perf`):

- sizes are bytes of one rank's buffer; K, M and G are binary (1K = 1024);
- time is, per iteration, the slowest rank's wall time (the collective is only as fast as its
  slowest member), then the median over the timed iterations;
- algbw = bytes / time and busbw = algbw * 2(n-1)/n, in GB/s with GB = 1e9. busbw is what each
  rank's links carry in a ring allreduce, so it does not depend on n and is the figure to hold
  against a cluster's expected bandwidth. On one rank 2(n-1)/n = 0, so busbw is 0: nothing
  crosses a link;
- with --fp16-compression the bandwidths count the bytes on the wire (half of a float32
  buffer); `effective_algbw_gbps` in the JSON counts the uncompressed bytes.

How one size is timed, and the values that check it: suite/train/timed_allreduce.py. A wrong result
makes the run exit 1 even though the table is printed.

Exit codes: 0 (also when bandwidth is below expectation: a warning, not a failure), 1 wrong
results, 2 bad input (reported in one line by rank 0 before Horovod starts).
"""
import argparse
import math
import os
import sys
import time

from suite.common.busbw import (ITEMSIZE, TABLE_HEAD, WARN_BELOW, assess, banner, bus_factor, expectation,
                                format_row, format_size, message_sizes, parse_size, peak, wire_dtype)
from suite.train.startup import apply_profile, env_rank
from suite.train.timed_allreduce import measure

# Defaults for --max-bytes: a GPU job goes to 1 GiB like nccl-tests; on CPU (tests, laptops)
# 256 MiB keeps two ranks' buffers well inside a small machine's memory.
DEFAULT_MAX = {"gpu": 1 << 30, "cpu": 256 << 20}
# Host memory a CPU rank needs per byte of its largest message: input, output and the
# controller's scratch. Measured: 2 ranks under Gloo at 1 GiB peaked at 5.9 GB each (TF itself 0.55).
MEMORY_FACTOR = 6
ENV_PREFIXES = ("NCCL_", "HOROVOD_", "UCX_", "OMPI_MCA_")


class UsageError(ValueError):
    """A flag value the benchmark cannot run with."""


class _Parser(argparse.ArgumentParser):
    # One line instead of argparse's usage block; main() decides who prints it.
    def error(self, message):
        raise UsageError(message)


def _checked(kind, noun, accept, complaint):
    """An argparse type: parse with `kind`, then keep only values `accept` allows."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid {noun} {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"{text} {complaint}")
        return value
    return parse


_positive_int = _checked(int, "integer", lambda v: v > 0, "is not positive")
_non_negative_int = _checked(int, "integer", lambda v: v >= 0, "is negative")
_positive_float = _checked(float, "number", lambda v: math.isfinite(v) and v > 0, "is not a positive number")


def build_parser():
    parser = _Parser(prog="python -m suite.train.allreduce",
                     description="Horovod allreduce time, algorithm and bus bandwidth per message size, "
                                 "on the job this runs in (horovodrun, mpirun, srun or one process).")
    parser.add_argument("--min-bytes", type=parse_size, default=parse_size("1K"),
                        help="smallest message per rank (default 1K; K/M/G are binary)")
    parser.add_argument("--max-bytes", type=parse_size, default=None,
                        help="largest message per rank (default 1G on GPU, 256M on CPU)")
    parser.add_argument("--factor", type=_positive_int, default=2,
                        help="size multiplier per step (default 2)")
    parser.add_argument("--dtype", choices=sorted(ITEMSIZE), default="float32")
    parser.add_argument("--op", choices=("sum", "average"), default="sum",
                        help="hvd.Sum (what nccl-tests measure, default) or hvd.Average (what "
                             "DistributedGradientTape uses: a sum plus a scaling pass)")
    parser.add_argument("--warmup", type=_non_negative_int, default=5, help="untimed allreduces per size")
    parser.add_argument("--iters", type=_positive_int, default=20, help="timed allreduces per size")
    parser.add_argument("--fp16-compression", action="store_true",
                        help="hvd.Compression.fp16, as the fp16_allreduce setting of the training runs")
    parser.add_argument("--json", metavar="PATH", help="write the results here (rank 0)")
    parser.add_argument("--expect-busbw", type=_positive_float, metavar="GBPS",
                        help="bus bandwidth (GB/s) the cluster should reach at large sizes, "
                             "e.g. 185 on 2 OCI GM4.8 nodes; a loud warning when far below")
    parser.add_argument("--profile", metavar="NAME|FILE",
                        help="cluster profile: its expected_busbw_gbps for the job's node count is the "
                             "expectation (--expect-busbw wins); suite.cluster.launch passes its own profile")
    parser.add_argument("--warn-below", type=_positive_float, default=WARN_BELOW, metavar="FRACTION",
                        help="warn when large-message busbw is below this share of --expect-busbw "
                             f"(default {WARN_BELOW}, as the models' pre-run probe)")
    return parser


def parse_args(argv=None, quiet=False):
    """Flags, validated as far as they can be before Horovod starts; raises UsageError."""
    parser = build_parser()
    if quiet:
        # Only rank 0 talks (--help included); the other ranks exit with the same code.
        parser._print_message = lambda *a, **k: None
    args = parser.parse_args(argv)
    itemsize = ITEMSIZE[args.dtype]
    if args.factor < 2:
        raise UsageError(f"--factor {args.factor} must be at least 2")
    if args.min_bytes % itemsize:
        raise UsageError(f"--min-bytes {args.min_bytes} is not a whole number of {args.dtype} "
                         f"elements ({itemsize} bytes)")
    if args.max_bytes is not None and args.min_bytes > args.max_bytes:
        raise UsageError(f"--min-bytes {format_size(args.min_bytes)} is larger than "
                         f"--max-bytes {format_size(args.max_bytes)}")
    if args.warn_below > 1:
        raise UsageError(f"--warn-below {args.warn_below} must be a fraction in (0, 1]")
    args.cluster_profile = _load_profile(args.profile)
    return args


def _load_profile(name):
    if not name:
        return None
    from suite.common import profiles
    try:
        # As the models do: the profile's NCCL/Open MPI/Horovod settings reach this process before
        # Horovod starts, also under a raw horovodrun or mpirun.
        profile, _ = apply_profile(name)
        return profile
    except profiles.ProfileError as err:
        raise UsageError(f"--profile: {err}") from None


# ---- the run ----

def main(argv=None):
    """Parses flags, runs the benchmark on this job and returns the exit code."""
    rank = env_rank()
    try:
        args = parse_args(argv, quiet=rank != 0)
    except UsageError as err:
        # Every rank sees the same argv and exits here, before any collective, so none waits.
        if rank == 0:
            print(f"error: {err}", file=sys.stderr, flush=True)
        return 2
    from suite.train import dist
    try:
        world = dist.initialize()
    except dist.LaunchError as err:
        # Raised alike on every rank (more ranks than GPUs, a launcher/MPI mismatch).
        if rank == 0:
            print(f"error: {err}", file=sys.stderr, flush=True)
        dist.shutdown()
        return 1
    try:
        return _benchmark(args, world, dist)
    finally:
        dist.shutdown()


def _benchmark(args, world, dist):
    import horovod.tensorflow as hvd
    hosts = sorted(set(dist.allgather_object(world.host, "allreduce_bench.hosts")))
    # Rank 0 decides the sizes and checks the output path; one broadcast keeps every rank in step.
    plan = dist.broadcast_value(_plan(args, world) if world.is_root else None, "allreduce_bench.plan")
    if plan["error"]:
        if world.is_root:
            print(f"error: {plan['error']}", file=sys.stderr, flush=True)
        return 2
    say = _say if world.is_root else _silent
    nccl = bool(hvd.nccl_built())
    say(f"allreduce benchmark: {world.size} rank(s) on {len(hosts)} host(s) via {world.launcher}, "
        f"controller {world.controller}, device {world.device}, NCCL built: {'yes' if nccl else 'no'}")
    say(f"dtype {args.dtype}, op {args.op}, fp16 compression {'on' if args.fp16_compression else 'off'}, "
        f"warmup {args.warmup}, iters {args.iters}; time = median over iters of the slowest rank; "
        f"busbw = algbw * 2(n-1)/n = algbw * {bus_factor(world.size):g}")
    say(TABLE_HEAD)
    rows = []
    for nbytes in plan["sizes"]:
        rows.append(measure(hvd, args, world, nbytes))
        say(format_row(rows[-1]))
    if not world.is_root:
        return 0 if all(row["correct"] for row in rows) else 1
    return _report(args, world, hosts, nccl, rows)


def _plan(args, world):
    """Message sizes and output checks, decided once on rank 0."""
    max_bytes = args.max_bytes or max(args.min_bytes, DEFAULT_MAX[world.device])
    sizes = message_sizes(args.min_bytes, max_bytes, args.factor)
    error = _output_problem(args.json) or _memory_problem(world, sizes[-1])
    return {"sizes": sizes, "error": error}


def _output_problem(path):
    if not path:
        return None
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:
        return f"cannot create the directory of --json {path}: {err.strerror}"
    if not os.access(parent, os.W_OK):
        return f"--json {path}: directory {parent} is not writable"
    return None


def _memory_problem(world, max_bytes):
    """On CPU every local rank holds its buffers in host memory; refuse a size that cannot fit."""
    if world.device != "cpu":
        return None
    available = _available_memory()
    needed = world.local_size * MEMORY_FACTOR * max_bytes
    if available is not None and needed > available:
        return (f"--max-bytes {format_size(max_bytes)} needs about {needed / 2**30:.1f} GiB on this host "
                f"({world.local_size} ranks x {MEMORY_FACTOR} buffers) but {available / 2**30:.1f} GiB "
                f"is available; lower --max-bytes")
    return None


def _available_memory():
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _report(args, world, hosts, nccl, rows):
    """Rank 0: peak, the comparison with the expectation, the JSON, the exit code."""
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
    best = peak(rows)
    if world.size == 1:
        _say("one rank: busbw is 0 by definition (2(n-1)/n = 0); algbw is a local copy rate")
    else:
        _say(f"peak busbw {best['busbw_gbps']:.3f} GB/s at {format_size(best['bytes'])}")
    expected, source = expectation(args.expect_busbw, args.cluster_profile, len(hosts))
    verdict, warning = assess(rows, expected, args.warn_below, world.size, nccl, env)
    if verdict:
        verdict["source"] = source
    if verdict and not warning:
        _say(f"expected busbw {expected:g} GB/s ({source}): {verdict['status']}")
    elif source and expected is None:
        _say(f"no comparison: {source}")
    if warning:
        print(banner(warning), file=sys.stderr, flush=True)
    wrong = [format_size(row["bytes"]) for row in rows if not row["correct"]]
    if args.json:
        from suite.train import rundir
        record = _record(args, world, hosts, nccl, rows, (expected, verdict, source), warning, env)
        rundir.write_json(args.json, record)
        _say(f"results: {args.json}")
    if wrong:
        print(f"error: allreduce returned wrong values at {', '.join(wrong)}", file=sys.stderr, flush=True)
        return 1
    return 0


def _record(args, world, hosts, nccl, rows, compared, warning, env):
    from suite.train import rundir
    best = peak(rows)
    expected, verdict, source = compared
    profile = args.cluster_profile
    return {
        "tool": "suite.allreduce", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "world_size": world.size, "hosts": hosts, "hosts_count": len(hosts), "local_size": world.local_size,
        "launcher": world.launcher, "controller": world.controller, "device": world.device,
        "nccl_built": nccl, "dtype": args.dtype, "wire_dtype": wire_dtype(args.dtype, args.fp16_compression),
        "op": args.op, "fp16_compression": args.fp16_compression, "warmup": args.warmup, "iters": args.iters,
        "conventions": {"time": "median over iterations of the slowest rank's time",
                        "algbw_gbps": "wire_bytes / seconds / 1e9",
                        "busbw_gbps": "algbw_gbps * 2(n-1)/n; 0 on one rank",
                        "sizes": "bytes per rank; K/M/G binary"},
        "bus_factor": bus_factor(world.size),
        "rows": rows, "correct": all(row["correct"] for row in rows),
        "peak_busbw_gbps": best["busbw_gbps"], "peak_busbw_bytes": best["bytes"],
        "expected_busbw_gbps": expected, "expected_busbw_source": source, "expectation": verdict,
        "warning": warning,
        "profile": {"name": profile.name, "version": profile.version, "path": profile.path}
        if profile else None,
        "environment": env, "versions": rundir.versions(), "git_revision": rundir.git_revision(),
        "command": sys.argv,
    }


def _say(message):
    print(message, flush=True)


def _silent(message):
    pass


if __name__ == "__main__":
    sys.exit(main())
