"""GPU-path switches that also run on a CPU: mixed precision, XLA and fp16 gradient compression."""
import pytest

from conftest import TINY, check_log, read_json, read_log, run, train_cmd


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


@pytest.mark.slow
def test_fp16_loss_scaling_with_fp16_allreduce_on_two_ranks(data_link):
    run_dir = data_link / "run"
    result = _train_ok(run_dir, "precision=fp16", "fp16_allreduce=true", launcher=("horovodrun",), np=2)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_json(run_dir / "summary.json")
    assert summary["weights_in_sync"], summary["ranks"]
    losses = [line for line in result.stdout.splitlines() if "loss" in line]
    assert losses and "nan" not in " ".join(losses)
    assert read_log(run_dir / "result_0.txt")[-1]["key"] == "run_stop"
