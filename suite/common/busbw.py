"""Allreduce bandwidth arithmetic, result checks and verdicts: no TensorFlow, no Horovod.

Shared by the benchmark that runs in every rank (suite.train.allreduce) and by the sweep and the
report on the login node. The conventions are those of NVIDIA's nccl-tests; the benchmark's module
docstring spells them out.
"""
import argparse
import re

import numpy as np

GB = 1e9
ITEMSIZE = {"float32": 4, "float16": 2}
SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# The value pattern each rank multiplies by (rank + 1); see the module docstring.
PERIOD = 4
# "Large" messages, where busbw should have reached its plateau: the largest size and the
# sizes down to 1/16 of it.
LARGE_SPAN = 16
# Below this largest size a plateau is unlikely even on a healthy network.
PLATEAU_BYTES = 256 << 20

# Below this share of the expected bus bandwidth a measurement warns (the allreduce benchmark and the
# models' pre-run probe alike). It leaves room for run-to-run noise, while a fall-back to TCP sockets,
# several times slower, lands far below it.
WARN_BELOW = 0.8


def parse_size(text):
    """'4K' -> 4096: a positive integer with an optional binary K, M or G suffix."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", str(text), flags=re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (a whole number with optional K, M or G)")
    value = int(match.group(1)) * SUFFIX[match.group(2).upper()]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (must be positive)")
    return value


def format_size(nbytes):
    """4096 -> '4K': the shortest exact binary spelling."""
    for suffix in ("G", "M", "K"):
        if nbytes % SUFFIX[suffix] == 0:
            return f"{nbytes // SUFFIX[suffix]}{suffix}"
    return str(nbytes)


def message_sizes(min_bytes, max_bytes, factor):
    """min, min*factor, ... up to max (inclusive when hit), as nccl-tests steps -b/-e/-f."""
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def bus_factor(world_size):
    """2(n-1)/n: the share of the buffer each rank sends (and receives) in a ring allreduce."""
    return 2 * (world_size - 1) / world_size


def bandwidths(nbytes, seconds, world_size):
    """(algbw, busbw) in GB/s for one allreduce of nbytes per rank taking seconds."""
    algbw = nbytes / seconds / GB
    return algbw, algbw * bus_factor(world_size)


def expectation(expect_busbw, profile, nodes):
    """(expected busbw in GB/s or None, where it comes from or why there is none)."""
    if expect_busbw is not None:
        return expect_busbw, "--expect-busbw"
    if profile is None:
        return None, None
    counted = f"{nodes} node" + ("" if nodes == 1 else "s")
    value = profile.expected_busbw_gbps.get(nodes)
    if value is None:
        known = ", ".join(str(n) for n in sorted(profile.expected_busbw_gbps)) or "none"
        return None, (f"profile {profile.name} gives no expected busbw for {counted} "
                      f"(it has node counts: {known})")
    return value, f"profile {profile.name}, {counted}"


def wire_dtype(dtype, fp16_compression):
    # hvd.Compression.fp16 casts every floating tensor to float16 for the transfer.
    return "float16" if fp16_compression else dtype


def expected_scale(world_size, op):
    """What the pattern is multiplied by in the result: sum of (r + 1) over ranks, or its mean."""
    total = world_size * (world_size + 1) / 2
    return total if op == "sum" else total / world_size


def sums_exact(world_size, wire):
    """True when every partial sum a reduction can form, p * k (p a pattern value, k up to
    n(n+1)/2), is representable in the wire dtype, so the result must match exactly."""
    total = world_size * (world_size + 1) // 2
    if total * PERIOD <= 2 ** (np.finfo(wire).nmant + 1):
        return True
    if total > 1 << 20:
        return False
    sums = np.arange(1, total + 1, dtype=np.float64)[:, None] * np.arange(1, PERIOD + 1)
    return bool(np.all(sums.astype(wire).astype(np.float64) == sums))


def tolerance(world_size, op, wire):
    """Allowed relative error: zero for exactly representable sums, else a few ulps per rank."""
    if op == "sum" and sums_exact(world_size, wire):
        return 0.0
    return 4 * world_size * float(np.finfo(wire).eps)


def expected_values(count, offset, world_size, op):
    """The closed-form result for count elements starting at element offset, in float32.

    float32 holds every expected value exactly: small integers, or such integers over n.
    """
    pattern = np.arange(1, PERIOD + 1, dtype=np.float32) * np.float32(expected_scale(world_size, op))
    start = np.roll(pattern, -(offset % PERIOD))
    return np.tile(start, -(-count // PERIOD))[:count]


def check_values(values, want, rel):
    """True when values equal want, exactly (rel 0) or within a relative tolerance."""
    got = np.asarray(values).reshape(-1).astype(np.float32, copy=False)
    if got.shape != want.shape:
        return False
    if rel == 0:
        return bool(np.array_equal(got, want))
    # NaN compares false, so a poisoned buffer fails too.
    return bool(np.all(np.abs(got - want) <= np.float32(rel) * want))


def large_rows(rows):
    largest = rows[-1]["bytes"]
    return [row for row in rows if row["bytes"] * LARGE_SPAN >= largest]


def likely_causes(nccl_built, largest_bytes, env):
    """Why busbw can fall far short on a RoCE/InfiniBand cluster, most specific first."""
    causes = []
    if not nccl_built:
        causes.append("Horovod was built without NCCL (hvd.nccl_built() is false): allreduce runs over "
                      "Gloo/MPI in host memory and TCP; rebuild with HOROVOD_GPU_OPERATIONS=NCCL")
    if env.get("HOROVOD_HIERARCHICAL_ALLREDUCE", "0") not in ("", "0"):
        causes.append("HOROVOD_HIERARCHICAL_ALLREDUCE is on: its cross-node step uses host MPI, "
                      "which under horovodrun runs over TCP")
    causes += [
        "NCCL fell back to TCP sockets: rerun with NCCL_DEBUG=INFO and look for 'NET/Socket' instead of "
        "'NET/IB'; NCCL_IB_DISABLE must be unset or 0 "
        f"(NCCL_IB_DISABLE={env.get('NCCL_IB_DISABLE', 'unset')}, NCCL_NET={env.get('NCCL_NET', 'unset')})",
        "wrong NCCL_IB_HCA list or NCCL_IB_GID_INDEX (RoCEv2 is usually 3; check ibdev2netdev/show_gids) "
        f"(NCCL_IB_HCA={env.get('NCCL_IB_HCA', 'unset')}, "
        f"NCCL_IB_GID_INDEX={env.get('NCCL_IB_GID_INDEX', 'unset')})",
        "only one NIC carries the rings (a one-device HCA list, or ports down): one 100 Gb/s port "
        "gives about 12.5 GB/s; check every port with ib_write_bw",
    ]
    if largest_bytes < PLATEAU_BYTES:
        causes.append(f"the largest message was only {format_size(largest_bytes)}: busbw plateaus near "
                      f"1G; rerun with --max-bytes 1G")
    return causes


def assess(rows, expected_gbps, warn_below, world_size, nccl_built, env):
    """(summary dict, warning text or None) for the large-message busbw against the expectation."""
    if expected_gbps is None:
        return None, None
    large = large_rows(rows)
    measured = max(row["busbw_gbps"] for row in large)
    summary = {"expected_busbw_gbps": expected_gbps, "warn_below": warn_below,
               "large_message_bytes": [row["bytes"] for row in large],
               "large_message_busbw_gbps": measured, "ratio": measured / expected_gbps}
    if world_size == 1:
        # busbw is 0 by definition on one rank, so there is no network to judge.
        summary["status"] = "not compared: one rank moves no bytes between ranks"
        return summary, None
    if measured >= warn_below * expected_gbps:
        summary["status"] = "ok"
        return summary, None
    summary["status"] = "below expectation"
    lines = [f"allreduce bus bandwidth is {measured:.3g} GB/s at messages of "
             f"{format_size(large[0]['bytes'])}-{format_size(large[-1]['bytes'])}, "
             f"{100 * measured / expected_gbps:.1f}% of the expected {expected_gbps:g} GB/s "
             f"(warning threshold {100 * warn_below:g}%).",
             "Likely causes:"]
    lines += [f"  - {cause}" for cause in likely_causes(nccl_built, rows[-1]["bytes"], env)]
    return summary, "\n".join(lines)


def banner(text):
    """A block nobody scrolls past: the text framed in '!' lines."""
    rule = "!" * 100
    lines = ["WARNING: ALLREDUCE BANDWIDTH FAR BELOW EXPECTATION", *text.splitlines()]
    body = [f"!! {line}" for line in lines]
    return "\n".join([rule, *body, rule])


TABLE_HEAD = f"{'size':>8} {'bytes':>12} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}  correct"


def format_row(row):
    return (f"{format_size(row['bytes']):>8} {row['bytes']:>12} {row['time_us']:>12.1f} "
            f"{row['algbw_gbps']:>13.3f} {row['busbw_gbps']:>13.3f}  {'yes' if row['correct'] else 'NO'}")


def format_table(rows):
    """The printed table again, from JSON rows (for reports)."""
    return "\n".join([TABLE_HEAD, *map(format_row, rows)])


def peak(rows):
    return max(rows, key=lambda row: row["busbw_gbps"])
