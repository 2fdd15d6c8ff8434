"""TF_CONFIG from the launcher's world (suite/train/tf_config.py), the tf backend's refusal of horovodrun,
and the step split's arithmetic (suite/train/step_split.py)."""
import json

import pytest

from suite.train import step_split, tf_config


def test_workers_on_one_host_meet_on_loopback():
    one_host = ["node7", "node7"]
    assert tf_config.worker_address("node7", one_host, {"NCCL_SOCKET_IFNAME": "eth0"}) == "localhost"


def test_across_hosts_the_profile_interface_gives_the_address():
    interfaces = {"lo": ["127.0.0.1"], "eth0": ["10.0.0.5"], "ens1f0": ["192.0.2.7"], "ib0": []}
    env = {"NCCL_SOCKET_IFNAME": "ens,eth"}  # NCCL's syntax: prefixes, the first that matches wins
    assert tf_config.worker_address("a", ["a", "b"], env, interfaces) == "192.0.2.7"
    exact = {"NCCL_SOCKET_IFNAME": "=eth0"}
    assert tf_config.worker_address("a", ["a", "b"], exact, interfaces) == "10.0.0.5"
    # An exclusion list names no interface to use; nor does an interface without an IPv4 address.
    assert tf_config.worker_address("a", ["a", "b"], {"NCCL_SOCKET_IFNAME": "^docker"}, interfaces) == "a"
    assert tf_config.worker_address("a", ["a", "b"], {"GLOO_SOCKET_IFNAME": "ib"}, interfaces) == "a"
    assert tf_config.worker_address("a", ["a", "b"], {}, interfaces) == "a"


def test_tf_config_makes_the_rank_the_worker_index():
    workers = ["h1:4001", "h2:4002", "h2:4003"]
    config = json.loads(tf_config.tf_config(workers, 2))
    assert config == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 2}}
    with pytest.raises(ValueError, match="h2:4002"):
        tf_config.tf_config(["h1:4001", "h2:4002", "h2:4002"], 0)
    with pytest.raises(ValueError, match="index 3"):
        tf_config.tf_config(workers, 3)


def test_one_worker_gets_no_tf_config():
    env = {"TF_CONFIG": "left over from another job"}
    assert tf_config.set_tf_config(["localhost:0"], 0, env) is None and "TF_CONFIG" not in env
    assert json.loads(tf_config.set_tf_config(["a:1", "b:2"], 1, env))["task"]["index"] == 1


def test_reserved_ports_differ_while_held():
    held = [tf_config.reserve_port() for _ in range(3)]
    try:
        assert len({sock.getsockname()[1] for sock in held}) == 3
    finally:
        for sock in held:
            sock.close()


def test_the_tf_backend_refuses_horovodrun_in_one_line():
    from suite.train import tf_backend
    with pytest.raises(tf_backend.LaunchError, match="--distribution tf cannot run under horovodrun"):
        tf_backend.TensorFlowBackend().join("horovodrun-gloo")


def test_the_split_by_subtraction_adds_up_to_the_step():
    # Rank 1 computes slower; the real step lasts beyond the slowest local step by the exposed allreduce.
    ranks = [{"full": 130.0, "local": 90.0, "input": 2.0}, {"full": 132.0, "local": 100.0, "input": 4.0}]
    split = step_split.split(ranks)
    assert split["step_ms"] == pytest.approx(131.0 + 3.0)
    assert split["input_wait_ms"] == pytest.approx(3.0)
    assert split["imbalance_ms"] == pytest.approx(100.0 - 95.0)
    assert split["exposed_allreduce_ms"] == pytest.approx(131.0 - 100.0)
    assert split["compute_ms"] == pytest.approx(95.0)
    parts = ("compute_ms", "exposed_allreduce_ms", "input_wait_ms", "imbalance_ms")
    assert sum(split[p] for p in parts) == pytest.approx(split["step_ms"])
    # Timing noise can make the real step faster than a local one: nothing is exposed, nothing negative.
    noisy = step_split.split([{"full": 95.0, "local": 100.0, "input": 0.0}, {"full": 95.0, "local": 90.0,
                                                                             "input": 0.0}])
    assert noisy["exposed_allreduce_ms"] == 0.0 and sum(noisy[p] for p in parts) == pytest.approx(95.0)


def test_the_rank_tensorflow_names_as_gone_is_read_from_its_error():
    from suite.train import tf_backend
    backend = tf_backend.TensorFlowBackend()
    text = ("Error reported from /job:worker/task:1: Task /job:worker/replica:0/task:3 heartbeat timeout. "
            "This indicates that the remote task has failed")
    assert backend.rank_named_in(RuntimeError(text)) == 3
    assert backend.rank_named_in(RuntimeError("/job:worker/replica:0/task:0 is this rank")) is None
    assert backend.rank_named_in(RuntimeError("no task named")) is None


def test_a_tf_run_never_imports_horovod():
    """One process through dist.initialize with the tf backend, a collective included: Horovod stays out,
    so the backend keeps working where Horovod cannot be installed."""
    import subprocess
    import sys
    from helpers.running import REPO, subprocess_env
    code = ("import sys; from suite.train import dist; world = dist.initialize(distribution='tf'); "
            "print(dist.allreduce_sum([2.0], 'x')[0], world.controller, world.distribution, "
            "sorted(m for m in sys.modules if m.startswith('horovod')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=subprocess_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[-2] == "2.0 none tf []"
