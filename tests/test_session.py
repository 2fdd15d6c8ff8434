"""The error path of a run: one line for the user, the traceback kept for a bug, the log closed."""
import json

from suite.train import session
from suite.train.mlperf import MLPerfLog


def _state(tmp_path, started):
    state = session._Run()
    state.run_dir = str(tmp_path)
    state.log = MLPerfLog(str(tmp_path / "result_0.txt"), enabled=True)
    state.log.start("run_start")
    state.started = started
    return state


def _raise(err):
    try:
        raise err
    except type(err) as caught:
        return caught


def test_a_bug_keeps_its_traceback_beside_the_log(tmp_path, capsys):
    state = _state(tmp_path, started=True)
    assert session._abort(None, state, _raise(RuntimeError("unexpected state"))) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error (rank 0): RuntimeError: unexpected state (traceback: ")
    saved = (tmp_path / "traceback-rank0.txt").read_text()
    assert "Traceback (most recent call last)" in saved and "_raise" in saved
    last = json.loads((tmp_path / "result_0.txt").read_text().splitlines()[-1].split(":::MLLOG ")[1])
    assert last["key"] == "run_stop" and last["metadata"]["status"] == "aborted"


def test_bad_input_is_one_line_without_a_traceback_file(tmp_path, capsys):
    state = _state(tmp_path, started=False)
    session._abort(None, state, _raise(ValueError("global_batch_size 33 is not divisible by 2 ranks")))
    err = capsys.readouterr().err
    assert err.strip() == "error (rank 0): ValueError: global_batch_size 33 is not divisible by 2 ranks"
    assert not list(tmp_path.glob("traceback-*"))
    # Not started: no run_stop is written.
    assert "run_stop" not in (tmp_path / "result_0.txt").read_text()


def test_a_resumed_run_is_open_division_and_says_why():
    from suite.common.config import CommonConfig
    from suite.common.workload import Division
    resumed = session.division_of_run(Division("closed"), CommonConfig(resume_from="runs/a/checkpoints"),
                                      True)
    assert resumed.name == "open"
    assert resumed.reasons == ("resumed from runs/a/checkpoints (closed: one uninterrupted run)",)
    already_open = session.division_of_run(Division("open", ("synthetic data",)),
                                           CommonConfig(resume_from="ckpt"), True)
    assert already_open.reasons[0] == "synthetic data" and len(already_open.reasons) == 2
    fresh = session.division_of_run(Division("closed"), CommonConfig(), True)
    assert (fresh.name, fresh.reasons, fresh.statements) == ("closed", (), ())
    poisoned = session.division_of_run(Division("closed"), CommonConfig(poison_weights_at_step=3), True)
    assert poisoned.name == "open" and "poison_weights_at_step" in poisoned.reasons[0]


def test_a_warm_page_cache_opens_the_run_unless_the_operator_states_a_restart():
    """The rules: flush the cache or restart the system before benchmarking (Data State at Start of Run)."""
    from suite.common.config import CommonConfig
    from suite.common.workload import Division
    failed = session.division_of_run(Division("closed"), CommonConfig(), cache_cleared=False)
    assert failed.name == "open" and failed.reasons[0].startswith("cache_clear false: a host could not drop")
    not_asked = session.division_of_run(Division("closed"), CommonConfig(clear_cache=False), False)
    assert not_asked.name == "open" and "clear_cache is false" in not_asked.reasons[0]
    restarted = session.division_of_run(Division("closed"), CommonConfig(system_restarted=True), False)
    assert (restarted.name, restarted.reasons) == ("closed", ())
    assert "operator states that every node was restarted" in restarted.statements[0]


def test_summary_records_the_gradient_of_the_trained_model():
    import tensorflow as tf
    # 4 -> 3 dense (12 weights + 3 biases) and a frozen 3 -> 2 layer that sends no gradient.
    frozen = tf.keras.layers.Dense(2, trainable=False)
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3), frozen])
    assert session.gradient_record(model, fp16_allreduce=False) == {
        "trainable_parameters": 15, "allreduce_dtype": "float32", "gradient_bytes": 60}
    assert session.gradient_record(model, fp16_allreduce=True) == {
        "trainable_parameters": 15, "allreduce_dtype": "float16", "gradient_bytes": 30}


def test_rank_0_names_a_verdict_of_every_rank_without_waiting_for_its_input(tmp_path, monkeypatch):
    """The other ranks exit once rank 0 says `done`, and their exit makes the launcher end rank 0: its
    line must not wait behind the freeing of tf.data's threads, which took seconds on a loaded machine.
    A bad record, on the other hand, stops its decoding threads before the line, so that no libjpeg
    warning lands after it."""
    from types import SimpleNamespace

    from suite.train.loop import NonFiniteLoss
    events = []
    monkeypatch.setattr(session, "_stop_input_threads", lambda err: events.append("input stopped"))
    monkeypatch.setattr(session, "_write", lambda stream, line: events.append(line))
    monkeypatch.setattr(session.dist, "shutdown", lambda: None)
    for err, expected in ((NonFiniteLoss("the loss is not finite at step 2 on 2 rank(s)"),
                           ["error (rank 0): the loss is not finite at step 2 on 2 rank(s)", "done"]),
                          (ValueError("corrupt record in train-00001"),
                           ["input stopped", "error (rank 0): ValueError: corrupt record in train-00001",
                            "done"])):
        events.clear()
        state = _state(tmp_path, started=True)
        state.world = SimpleNamespace(rank=0, is_root=True)
        state.watch = SimpleNamespace(done=lambda: events.append("done"))
        assert session._abort(None, state, _raise(err)) == 1
        assert events == expected
        assert state.closed.is_set()
