"""The MLPerf clock: no rank touches the dataset before run_start, and cache_clear speaks for every host.

One 2-rank horovodrun run whose rank 0 is slow to write its files (as on a busy login node or a slow
shared file system) and slow again right before it writes run_start, and whose second "host" cannot drop
its page cache. Horovod takes
`localhost` and `127.0.0.1` for two hosts, so each rank is local rank 0 of its own host.
"""
import os
import shutil
from types import SimpleNamespace

import pytest

from helpers.atimes import age_atimes, first_reads, require_read_atimes
from helpers.running import TINY, run
from helpers.runs import read_log
from suite.train.session import cleared_on_every_host

ROOT_DELAY_SECONDS = 3  # per file: config.json and env.json before run_start
# Between the start line and rank 0's run_start line: a rank let go before run_start is written (the
# ranks once left one barrier together and rank 0 then wrote run_start) reads its shards in this gap.
RUN_START_DELAY_SECONDS = 2


def record_files(data_dir):
    return sorted(os.path.join(data_dir, name) for name in os.listdir(data_dir)
                  if name.startswith(("train-", "validation-")))


@pytest.fixture(scope="module")
def slow_root_run(small_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("start_line")
    require_read_atimes(root)
    data_dir = root / "data"
    shutil.copytree(small_data, data_dir)
    files = record_files(data_dir)
    age_atimes(files)
    run_dir = root / "run"
    result = run(["horovodrun", "--gloo", "-np", "2", "-H", "localhost:1,127.0.0.1:1",
                  "python", "tests/scripts/run_injected.py",
                  "--slow-root-writes", str(ROOT_DELAY_SECONDS), "--slow-run-start",
                  str(RUN_START_DELAY_SECONDS), "--cache-clear-fails-on", "1",
                  "models.resnet50", *TINY, "--set", "clear_cache=true",
                  "--data-dir", str(data_dir), "--run-dir", str(run_dir)], timeout=420)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return SimpleNamespace(events=read_log(run_dir / "result_0.txt"), reads=first_reads(files), files=files)


@pytest.mark.slow
def test_no_rank_reads_the_dataset_before_run_start(slow_root_run):
    run_start = [e for e in slow_root_run.events if e["key"] == "run_start"][0]["time_ms"]
    # Every training shard is read by one of the ranks, and the evaluation shards at the evaluation.
    assert sorted(slow_root_run.reads) == slow_root_run.files
    early = {os.path.basename(path): f"{run_start - ms:.0f} ms early"
             for path, ms in slow_root_run.reads.items() if ms < run_start}
    assert not early, early


@pytest.mark.slow
def test_cache_clear_is_true_only_when_every_host_dropped_its_cache(slow_root_run):
    values = [e["value"] for e in slow_root_run.events if e["key"] == "cache_clear"]
    # Rank 0 (host localhost) may drop it as root; rank 1 (host 127.0.0.1) reports that it could not.
    assert values == [False]


def test_cache_clear_combines_one_attempt_per_host():
    # One entry per rank: local rank 0 of each host reports its attempt, the other ranks None.
    assert cleared_on_every_host([True, None, True, None])
    assert not cleared_on_every_host([True, None, False, None])
    assert not cleared_on_every_host([None, None])
