"""GPU-path switches that also run on a CPU: bf16 mixed precision with XLA, through the entry point.

fp16 loss scaling is tested in process (tests/test_loop.py): TensorFlow's float16 CPU kernels
take seconds a step even on the tiny preset. fp16 gradient compression rides on the Gloo
launcher test (tests/test_launch.py).
"""
import pytest

from helpers.running import TINY, run, train_cmd
from helpers.runs import check_log, read_json


def _train_ok(run_dir, *sets, launcher=(), np=1):
    args = [*TINY, "--data-dir", run_dir.parent.joinpath("data").as_posix(), "--run-dir", str(run_dir)]
    for item in sets:
        args += ["--set", item]
    return run(train_cmd(*args, launcher=launcher, np=np), timeout=420)


@pytest.fixture
def data_link(small_data, tmp_path):
    (tmp_path / "data").symlink_to(small_data)
    return tmp_path


@pytest.mark.slow
def test_bf16_with_xla_trains_and_logs(data_link):
    run_dir = data_link / "run"
    result = _train_ok(run_dir, "precision=bf16", "xla=true")
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["steps"] == 2 and summary["evals"][0]["samples"] == 40
    assert read_json(run_dir / "config.json")["config"]["xla"] is True
    passed, output = check_log(run_dir / "result_0.txt", "2.1.0")
    assert passed, output
