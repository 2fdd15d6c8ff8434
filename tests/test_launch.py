"""The entry point trains unchanged under horovodrun (Gloo, MPI), mpirun and a single process.

Plain `horovodrun -np 2` (Horovod's MPI controller) is the README's main job: tests/test_main_job.py
asserts the same things on that run. Plain `mpirun` runs across two hosts in tests/test_two_hosts.py.
"""
import os

import pytest

from helpers.running import TINY, run, train_cmd
from helpers.runs import check_log, read_json, read_log

# The Gloo run also compresses its gradients to fp16 for the allreduce.
EXTRA = {"horovodrun-gloo": ["--set", "fp16_allreduce=true"]}
LAUNCHERS = {
    "horovodrun-gloo": ("horovodrun", "--gloo"),
}
# What env.json records: the launcher seen from inside (horovodrun --mpi execs mpirun) and
# the Horovod controller in use.
SEEN_AS = {
    "horovodrun-gloo": ("horovodrun-gloo", "gloo"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_two_process_run_trains_and_keeps_ranks_identical(name, small_data, tmp_path):
    run_dir = tmp_path / "run"
    result = run(train_cmd(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir), "--set", "seed=7",
                           *EXTRA.get(name, []), launcher=LAUNCHERS[name], np=2), timeout=420)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["world_size"] == 2 and len(summary["ranks"]) == 2
    assert summary["weights_in_sync"], summary["ranks"]
    assert summary["steps"] == 2  # 64 records / global batch 32, one epoch
    env = read_json(run_dir / "env.json")
    assert (env["launcher"], env["controller"]) == SEEN_AS[name]
    assert [r["local_rank"] for r in env["ranks"]] == [0, 1]
    # Rank 0 alone writes the log: one run_start, one run_stop.
    keys = [e["key"] for e in read_log(run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert not [p for p in os.listdir(run_dir) if p.startswith("result_") and p != "result_0.txt"
                and not p.endswith(".txt.check-2.1.0.txt")]
    passed, output = check_log(run_dir / "result_0.txt", "2.1.0")
    assert passed, output


def test_single_process_run_matches_closed_batch_split(small_data, tmp_path):
    """One process, no launcher: the same command works and records the launcher as 'single'."""
    run_dir = tmp_path / "run"
    result = run(train_cmd(*TINY, "--data-dir", small_data, "--run-dir", str(run_dir),
                           "--set", "clear_cache=true"), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert read_json(run_dir / "env.json")["launcher"] == "single"
    # The log says what dropping the page cache really did on this machine (root can, here).
    cache_clear = [e["value"] for e in read_log(run_dir / "result_0.txt") if e["key"] == "cache_clear"]
    assert cache_clear == [os.access("/proc/sys/vm/drop_caches", os.W_OK)]
    summary = read_json(run_dir / "summary.json")
    assert summary["local_batch_size"] == 32 and summary["world_size"] == 1
    for ruleset in ("1.1.0", "2.1.0"):
        passed, output = check_log(run_dir / "result_0.txt", ruleset)
        assert passed, output
