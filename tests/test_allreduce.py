"""The allreduce benchmark: its arithmetic and checks in-process, then real runs under the launchers.

The launcher runs use small sizes (4K-4M) so the file stays well under two minutes; no
assertion depends on how fast this machine is, only on the numbers agreeing with each other.
"""
import math
import re
import sys

import numpy as np
import pytest

from helpers.running import run
from helpers.runs import read_json
from suite.common import busbw as bw
from suite.train import timed_allreduce

BANNER = "WARNING: ALLREDUCE BANDWIDTH FAR BELOW EXPECTATION"
SMALL = ["--min-bytes", "4K", "--max-bytes", "4M", "--iters", "5"]
LAUNCH_TIMEOUT = 180
# TensorFlow/absl start-up noise and launcher tags, stripped before looking at our own lines.
NOISE = re.compile(r"^(\d{4}-\d\d-\d\d[ T]\d|[EWIF]\d{4} |WARNING: All log messages before absl|To enable)")
TAG = re.compile(r"\[(?:\d+,)?\d+\]<(?:stdout|stderr)>:")


def our_lines(text):
    lines = [TAG.sub("", line).strip() for line in text.splitlines()]
    return [line for line in lines if line and not NOISE.match(line)]


def bench(*args, launcher=None):
    prefix = {
        None: [sys.executable],
        "horovodrun": ["horovodrun", "-np", "2", "-H", "localhost:2", "python"],
        "horovodrun-gloo": ["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2", "python"],
        "mpirun": ["mpirun", "--oversubscribe", "-np", "2", "python"],
    }[launcher]
    return run(prefix + ["-m", "suite.train.allreduce", *args], timeout=LAUNCH_TIMEOUT)


def assert_consistent(data, world_size, sizes=(4 << 10, 4 << 20)):
    """Rows in increasing size, every figure positive and finite, bandwidths exactly from the times."""
    rows = data["rows"]
    got = [row["bytes"] for row in rows]
    assert got == bw.message_sizes(sizes[0], sizes[1], 2) and got == sorted(set(got))
    for row in rows:
        assert row["correct"] is True, row
        for key in ("seconds", "time_us", "algbw_gbps", "effective_algbw_gbps"):
            assert math.isfinite(row[key]) and row[key] > 0, (key, row)
        assert row["algbw_gbps"] == row["wire_bytes"] / row["seconds"] / 1e9
        assert row["busbw_gbps"] == row["algbw_gbps"] * (2 * (world_size - 1) / world_size)
        assert row["time_us_min"] <= row["time_us"] <= row["time_us_max"]
        if world_size > 1:
            assert math.isfinite(row["busbw_gbps"]) and row["busbw_gbps"] > 0
        else:
            assert row["busbw_gbps"] == 0.0
    assert data["world_size"] == world_size and data["correct"] is True
    assert data["hosts_count"] == 1 and len(data["hosts"]) == 1
    assert data["peak_busbw_gbps"] == max(row["busbw_gbps"] for row in rows)
    assert data["nccl_built"] is False  # the CPU build of this machine
    table = bw.format_table(rows).splitlines()
    assert len(table) == len(rows) + 1 and table[-1].split()[:2] == [bw.format_size(got[-1]), str(got[-1])]


# ---- in-process: sizes, formulas, the result check, the warning ----

@pytest.mark.parametrize("text, value", [("1K", 1024), ("4k", 4096), ("1M", 1 << 20), ("1G", 1 << 30),
                                         ("256", 256), (" 2M ", 2 << 20)])
def test_parse_size(text, value):
    assert bw.parse_size(text) == value


@pytest.mark.parametrize("text", ["1.5M", "1KB", "-4K", "0", "M", "4T", ""])
def test_parse_size_refuses(text):
    with pytest.raises(Exception, match="invalid size"):
        bw.parse_size(text)


def test_sizes_and_bandwidth_formulas():
    assert bw.message_sizes(1024, 8192, 2) == [1024, 2048, 4096, 8192]
    assert bw.message_sizes(1024, 10000, 4) == [1024, 4096]
    assert bw.bus_factor(1) == 0.0 and bw.bus_factor(2) == 1.0 and bw.bus_factor(16) == 1.875
    algbw, busbw = bw.bandwidths(2_000_000_000, 0.01, 16)
    assert algbw == 200.0 and busbw == 375.0
    assert bw.bandwidths(4096, 1e-3, 1)[1] == 0.0
    assert bw.format_size(4096) == "4K" and bw.format_size(3 << 30) == "3G" and bw.format_size(100) == "100"


@pytest.mark.parametrize("world", [1, 2, 3, 8, 32])
@pytest.mark.parametrize("op", ["sum", "average"])
def test_check_accepts_the_true_result_and_rejects_wrong_ones(world, op):
    count = 1001
    total = sum(np.float64(r + 1) * (np.arange(count) % bw.PERIOD + 1) for r in range(world))
    good = (total if op == "sum" else total / world).astype(np.float32)
    want = bw.expected_values(count, 0, world, op)
    rel = bw.tolerance(world, op, "float32")
    assert bw.check_values(good, want, rel)
    # One rank missing, one element off by one unit, a NaN, a shifted buffer, a short buffer.
    missing = good - (np.arange(count) % bw.PERIOD + 1) * (world if op == "sum" else 1.0)
    off = good.copy()
    off[777] += 1.0
    nan = good.copy()
    nan[3] = np.nan
    for bad in (missing, off, nan, np.roll(good, 1), good[:-1]):
        assert not bw.check_values(bad, want, rel)


def test_float16_sums_are_exact_up_to_36_ranks():
    # At 37 ranks the sum reaches 3 * 703 = 2109 and odd integers above 2048 have no float16.
    assert bw.tolerance(32, "sum", "float16") == bw.tolerance(36, "sum", "float16") == 0.0
    assert bw.tolerance(37, "sum", "float16") > 0.0
    assert bw.tolerance(1024, "sum", "float32") == 0.0
    assert bw.tolerance(2, "average", "float32") > 0.0


def test_expected_values_follow_offsets():
    whole = bw.expected_values(10, 0, 2, "sum")
    assert whole.tolist() == [3, 6, 9, 12, 3, 6, 9, 12, 3, 6]
    assert bw.expected_values(5, 3, 2, "sum").tolist() == whole[3:8].tolist()


def test_check_tensor_walks_every_slice(monkeypatch):
    """A wrong value in the last of several slices is found (the slices must line up with the pattern)."""
    import tensorflow as tf
    monkeypatch.setattr(timed_allreduce, "CHECK_CHUNK", 8)
    good = bw.expected_values(30, 0, 2, "sum")
    assert timed_allreduce.check_tensor(tf.constant(good), 2, "sum", "float32")
    bad = good.copy()
    bad[29] = 0.0
    assert not timed_allreduce.check_tensor(tf.constant(bad), 2, "sum", "float32")
    # The buffer every rank sends: rank r holds (r + 1) * pattern.
    assert timed_allreduce.make_buffer(tf, 6, 1, "float32").numpy().tolist() == [2, 4, 6, 8, 2, 4]


def rows_with_busbw(*busbw):
    return [{"bytes": 1 << (20 + i), "busbw_gbps": value} for i, value in enumerate(busbw)]


def test_assess_warns_only_below_the_threshold():
    rows = rows_with_busbw(1.0, 50.0, 80.0, 95.0, 100.0)  # 1M .. 16M; "large" is 1M and up
    summary, warning = bw.assess(rows, 185.0, 0.5, 16, True, {})
    assert summary["status"] == "ok" and warning is None and summary["large_message_busbw_gbps"] == 100.0
    summary, warning = bw.assess(rows, 250.0, 0.5, 16, True, {"NCCL_IB_HCA": "=mlx5_1"})
    assert summary["status"] == "below expectation"
    assert "40.0% of the expected 250" in warning and "NCCL_IB_HCA==mlx5_1" in warning
    for cause in ("TCP", "NCCL_IB_GID_INDEX", "one NIC", "--max-bytes 1G"):
        assert cause in warning
    assert "built without NCCL" not in warning
    assert "built without NCCL" in bw.assess(rows, 250.0, 0.5, 16, False, {})[1]
    # One rank moves nothing: no network to judge, so no warning.
    summary, warning = bw.assess(rows_with_busbw(0.0, 0.0), 185.0, 0.5, 1, True, {})
    assert warning is None and summary["status"].startswith("not compared")
    assert bw.assess(rows, None, 0.5, 16, True, {}) == (None, None)
    banner = bw.banner("line one\nline two").splitlines()
    assert len(banner) == 5 and banner[1] == "!! " + BANNER and banner[0] == banner[-1] == "!" * 100


def test_expectation_comes_from_the_profile_for_the_node_count():
    from suite.common import profiles
    oci = profiles.load("oci-bm-gpu-gm4-8")
    assert bw.expectation(None, oci, 2) == (185.0, "profile oci-bm-gpu-gm4-8, 2 nodes")
    assert bw.expectation(None, oci, 1) == (235.0, "profile oci-bm-gpu-gm4-8, 1 node")
    value, why = bw.expectation(None, oci, 8)
    assert value is None and "no expected busbw for 8 nodes" in why and "node counts: 1, 2, 4" in why
    # The flag wins over the profile; without either there is nothing to compare.
    assert bw.expectation(150.0, oci, 2) == (150.0, "--expect-busbw")
    assert bw.expectation(None, None, 2) == (None, None)


def test_the_launcher_hands_the_benchmark_its_profile():
    from suite.common import profiles
    path = profiles.load("local-cpu").path
    launch = [sys.executable, "-m", "suite.cluster.launch", "--hostfile", "hostfiles/localhost", "--profile",
              "local-cpu", "--dry-run", "--", "suite.train.allreduce", "--max-bytes", "1M"]
    command = run(launch, timeout=60).stdout.splitlines()[0].split()
    assert command[-3:] == ["1M", "--profile", path]
    # A profile given to the benchmark itself is left as it is.
    command = run(launch + ["--profile=tcp-only"], timeout=60).stdout.splitlines()[0].split()
    assert command[-1] == "--profile=tcp-only" and path not in command


# ---- real runs ----

@pytest.mark.slow
def test_horovodrun_two_processes(tmp_path):
    out = tmp_path / "out.json"
    result = bench(*SMALL, "--json", str(out), launcher="horovodrun")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = read_json(out)
    assert_consistent(data, 2)
    assert data["dtype"] == data["wire_dtype"] == "float32" and data["op"] == "sum"
    assert all(row["wire_bytes"] == row["bytes"] for row in data["rows"])
    assert data["warning"] is None and BANNER not in result.stderr
    # Rank 0 alone prints the table.
    assert sum("algbw (GB/s)" in line for line in our_lines(result.stdout)) == 1


@pytest.mark.slow
def test_mpirun_two_processes(tmp_path):
    out = tmp_path / "out.json"
    result = bench(*SMALL, "--json", str(out), launcher="mpirun")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = read_json(out)
    assert_consistent(data, 2)
    assert (data["launcher"], data["controller"]) == ("mpirun", "mpi")


@pytest.mark.slow
def test_low_bandwidth_warns_loudly_but_succeeds(tmp_path):
    """Gloo, fp16 compression and hvd.Average: the warning path, and a wire half the buffer's size."""
    out = tmp_path / "out.json"
    result = bench(*SMALL, "--json", str(out), "--expect-busbw", "100000", "--fp16-compression", "--op",
                   "average", launcher="horovodrun-gloo")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = read_json(out)
    assert_consistent(data, 2)
    assert data["controller"] == "gloo" and data["wire_dtype"] == "float16"
    assert all(row["wire_bytes"] * 2 == row["bytes"] for row in data["rows"])
    assert data["expectation"]["status"] == "below expectation"
    assert "TCP" in data["warning"] and "NCCL_IB_HCA" in data["warning"]
    banner = [line for line in our_lines(result.stderr) if line.startswith("!!")]
    assert len(banner) >= 6 and BANNER in banner[1], result.stderr[-3000:]


@pytest.mark.slow
def test_single_process_has_no_bus_bandwidth(tmp_path):
    out = tmp_path / "sub" / "out.json"
    result = bench(*SMALL, "--json", str(out), "--expect-busbw", "100")
    assert result.returncode == 0, result.stderr[-3000:]
    data = read_json(out)
    assert_consistent(data, 1)
    assert data["launcher"] == "single" and data["warning"] is None
    assert data["expectation"]["status"].startswith("not compared")
    assert "busbw is 0 by definition" in result.stdout


@pytest.mark.parametrize("args, culprit", [
    (["--min-bytes", "8M", "--max-bytes", "4M"], "larger than --max-bytes"),
    (["--min-bytes", "4X"], "invalid size '4X'"),
    (["--iters", "0"], "--iters"),
    (["--warmup", "-1"], "--warmup"),
    (["--factor", "1"], "--factor"),
    (["--min-bytes", "6", "--max-bytes", "64"], "not a whole number of float32"),
    (["--dtype", "int8"], "--dtype"),
    (["--expect-busbw", "-5"], "--expect-busbw"),
    (["--frobnicate"], "unrecognized arguments"),
    (["--profile", "oci-gm4"], "--profile: unknown profile 'oci-gm4'"),
])
def test_bad_flags_give_one_line_and_exit_2(args, culprit):
    result = bench(*args)
    assert result.returncode == 2, result.stderr
    lines = our_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: ") and culprit in lines[0], result.stderr


@pytest.mark.slow
def test_bad_flag_under_horovodrun_exits_2_on_every_rank():
    result = bench("--max-bytes", "2Q", launcher="horovodrun")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in our_lines(result.stdout + result.stderr) if line.startswith("error:")]
    # One line from rank 0 only; rank 1 exits with the same code in silence.
    assert len(errors) == 1 and "--max-bytes: invalid size '2Q'" in errors[0], errors


@pytest.mark.slow
def test_unusable_json_path_stops_every_rank_before_measuring(tmp_path):
    """Found after Horovod starts (rank 0 checks, then broadcasts), so no rank is left waiting.

    Under mpirun, which passes the ranks' exit code on; horovodrun --gloo turns any failure into 1.
    """
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = bench(*SMALL, "--json", str(blocker / "out.json"), launcher="mpirun")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in our_lines(result.stderr) if line.startswith("error:")]
    assert len(errors) == 1 and "--json" in errors[0], result.stderr[-2000:]
    assert "algbw" not in result.stdout


@pytest.mark.slow
def test_profile_expectation_through_the_launcher(tmp_path):
    """A profile that expects far more than loopback gives: the warning names the profile and node count."""
    profile = tmp_path / "slow-net.yaml"
    profile.write_text("name: slow-net\nversion: 1\ndescription: test\ngpus_per_node: 0\n"
                       "expected_busbw_gbps: {1: 100000}\n")
    out = tmp_path / "out.json"
    result = run([sys.executable, "-m", "suite.cluster.launch", "--hostfile", "hostfiles/localhost",
                  "-np", "2",
                  "--profile", str(profile), "--", "suite.train.allreduce", *SMALL, "--json", str(out)],
                 timeout=LAUNCH_TIMEOUT)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = read_json(out)
    assert_consistent(data, 2)
    assert data["expected_busbw_gbps"] == 100000.0 and data["profile"]["name"] == "slow-net"
    assert data["expected_busbw_source"] == "profile slow-net, 1 node"
    assert data["expectation"]["status"] == "below expectation"
    assert BANNER in result.stderr
