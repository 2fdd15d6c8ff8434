"""The headline command at its own scale: four namespace hosts on one bridge, named as the shipped
hostfiles/4node names them once its placeholder is filled, eight slots each.

The 32-rank BERT run is the expensive part (about 9 minutes and 21 GB here: 32 TensorFlow start-ups on
two cores), so it runs once per test run, in a module fixture, and is asserted many ways. Everything
else runs at 2 slots per host (8 ranks) from a copy of the same file with slots=2.
"""
import os
import signal
import time

from dataclasses import dataclass

import pytest

from conftest import BIN, REPO, TINY, check_log, filled_hostfile, read_json, read_log, subprocess_env
from jobs import assert_ends_closed, assert_killed_rank_named, long_training, start_long_run
from test_bert_main import bert_data  # noqa: F401 (the session's generated BERT set)
from test_two_hosts import FAULT_BOUND_SECONDS, LAUNCHES, SEEN_AS
from twohosts import LINK
from suite.cluster import hostfile as hostfile_format

# BERT tiny's gradients are a few MB a step and the run takes hundreds of steps: every host's link
# carries far more than this both ways; a host left out of the allreduce carries next to nothing.
MIN_LINK_BYTES = 20 * 2**20


def on_first_host(cluster, command, timeout=900, extra_env=None):
    """`command` run on the first host from the repository, with this test environment."""
    env = subprocess_env(**(extra_env or {}))
    env["PATH"] = BIN + os.pathsep + "/usr/local/bin:/usr/bin:/bin"
    return cluster.run(cluster.names[0], command, timeout=timeout, env=env, cwd=REPO)


@pytest.fixture(scope="module")
def hostfile_8(four_hosts, tmp_path_factory):
    """hostfiles/4node with REPLACE-ME filled in, as is: 8 slots on each of the four hosts."""
    return filled_hostfile(tmp_path_factory.mktemp("hostfile"))


@pytest.fixture(scope="module")
def hostfile_2(four_hosts, tmp_path_factory):
    """The same copy with slots=2: the 8-rank runs."""
    return filled_hostfile(tmp_path_factory.mktemp("hostfile"), slots=2)


@dataclass
class Run:
    run_dir: object
    link_bytes: dict  # host -> (sent, received) during the run
    output: str
    seconds: float


def run_with_counters(cluster, command, run_dir, timeout=1500, extra_env=None):
    before = {name: cluster.link_bytes(name) for name in cluster.names}
    start = time.monotonic()
    result = on_first_host(cluster, command, timeout=timeout, extra_env=extra_env)
    seconds = time.monotonic() - start
    after = {name: cluster.link_bytes(name) for name in cluster.names}
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    moved = {name: (after[name][0] - before[name][0], after[name][1] - before[name][1])
             for name in cluster.names}
    return Run(run_dir, moved, result.stdout + result.stderr, seconds)


@pytest.fixture(scope="module")
def headline(four_hosts, hostfile_8, bert_data, tmp_path_factory):  # noqa: F811
    """The README's command as a user types it, at 32 ranks: the only 32-rank run of the test run."""
    run_dir = tmp_path_factory.mktemp("headline") / "run"
    np = hostfile_format.total_slots(hostfile_format.parse(hostfile_8))
    command = ["horovodrun", "--gloo", "-np", str(np), "-hostfile", hostfile_8, "python", "-m", "models.bert",
               "--preset", "tiny_cpu", "--data-dir", str(bert_data), "--set", "global_batch_size=32",
               "--run-dir", str(run_dir)]
    made = run_with_counters(four_hosts, command, run_dir, timeout=1800)
    print(f"32-rank headline run: {made.seconds:.0f} s")
    return made


@pytest.mark.slow
def test_the_headline_run_trains_32_ranks_in_step_to_its_target(headline):
    summary = read_json(headline.run_dir / "summary.json")
    assert summary["world_size"] == 32, summary
    assert summary["status"] == "success" and summary["accuracy"] >= summary["target_accuracy"], summary
    assert summary["weights_in_sync"], summary["ranks"]


@pytest.mark.slow
def test_the_headline_run_has_local_ranks_0_to_7_on_every_host(headline, four_hosts):
    env = read_json(headline.run_dir / "env.json")
    assert env["hosts"] == list(four_hosts.names)
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (host, local_rank) for host in sorted(four_hosts.names) for local_rank in range(8)]
    assert sorted(r["rank"] for r in env["ranks"]) == list(range(32))
    assert (env["launcher"], env["controller"]) == ("horovodrun-gloo", "gloo")


@pytest.mark.slow
def test_the_headline_log_passes_the_checker_with_one_run_start_and_stop(headline):
    passed, output = check_log(headline.run_dir / "result_0.txt", "2.1.0")
    assert passed, output
    keys = [e["key"] for e in read_log(headline.run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert [p.name for p in headline.run_dir.glob("result_*") if not p.name.startswith("result_0.txt")] == []


@pytest.mark.slow
def test_the_gradients_crossed_every_hosts_link(headline):
    for host, (sent, received) in headline.link_bytes.items():
        assert sent > MIN_LINK_BYTES and received > MIN_LINK_BYTES, (host, sent, received)


# ---- the other launch paths and ResNet-50, at 2 slots per host (8 ranks) ---------------------------

@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The cluster's profile: CPU nodes whose front-end interface is the bridge link."""
    path = tmp_path_factory.mktemp("profile") / "cpu-four-hosts.yaml"
    path.write_text(f"name: cpu-four-hosts\nversion: 1\ndescription: four network namespaces on a bridge\n"
                    f"gpus_per_node: 0\nnetwork_interface: {LINK}\n"
                    f"env: {{NCCL_DEBUG: WARN, OMPI_MCA_mpi_yield_when_idle: 1}}\n")
    return str(path)


# BERT tiny cut to a few steps (the launch path is under test, not the learning); its run_stop is then
# "aborted" (the target not reached), which the checker accepts as for any run out of budget.
SHORT_BERT = ["--preset", "tiny_cpu", "--set", "train_steps=12", "--set", "warmup_steps=2", "--set",
              "eval_interval_samples=384", "--set", "log_every=4"]
# Which model each 8-rank path trains: ResNet-50 under the suite's launcher, BERT under the raw ones.
EIGHT_RANK_PATHS = {"horovodrun-mpi": "models.bert", "mpirun": "models.bert",
                    "suite.launch": "models.resnet50"}


@pytest.fixture(scope="module", params=sorted(EIGHT_RANK_PATHS))
def eight_rank_run(request, four_hosts, hostfile_2, profile, bert_data, small_data,  # noqa: F811
                   tmp_path_factory):
    name, module = request.param, EIGHT_RANK_PATHS[request.param]
    run_dir = tmp_path_factory.mktemp(name) / "run"
    launcher, model_flags, env = LAUNCHES[name](hostfile_2, profile)
    model = [module] if name == "suite.launch" else ["-m", module]
    if module == "models.bert":
        flags = [*SHORT_BERT, "--data-dir", str(bert_data)]
    else:
        flags = [*TINY, "--set", "seed=9", "--data-dir", small_data]
    made = run_with_counters(four_hosts, [*launcher, *model, *flags, "--run-dir", str(run_dir), *model_flags],
                             run_dir, timeout=1200, extra_env=env)
    print(f"8-rank {name} ({module}): {made.seconds:.0f} s")
    return name, made


@pytest.mark.slow
def test_eight_ranks_two_on_each_host_train_in_step(eight_rank_run, four_hosts, profile):
    name, made = eight_rank_run
    summary = read_json(made.run_dir / "summary.json")
    assert summary["world_size"] == 8 and summary["weights_in_sync"], summary["ranks"]
    assert summary["status"] in ("success", "aborted") and summary["steps"] > 0, summary
    env = read_json(made.run_dir / "env.json")
    assert env["hosts"] == list(four_hosts.names)
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (host, local_rank) for host in sorted(four_hosts.names) for local_rank in range(2)]
    assert (env["launcher"], env["controller"]) == SEEN_AS[name]
    assert env["profile"]["path"] == profile
    assert env["environment"]["HOROVOD_GLOO_IFACE"] == LINK


@pytest.mark.slow
def test_eight_rank_logs_pass_the_checker_and_every_link_carried_gradients(eight_rank_run):
    name, made = eight_rank_run
    passed, output = check_log(made.run_dir / "result_0.txt", "2.1.0")
    assert passed, output
    keys = [e["key"] for e in read_log(made.run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    # A ring over four hosts crosses every host's link both ways, whatever the launcher.
    for host, (sent, received) in made.link_bytes.items():
        assert sent > 2**20 and received > 2**20, (name, host, sent, received)


# ---- a fault on the third host ---------------------------------------------------------------------

@pytest.mark.slow
def test_a_rank_killed_on_the_third_host_ends_the_job_on_every_host(four_hosts, hostfile_2, profile,
                                                                    small_data, tmp_path):
    run_dir = tmp_path / "run"
    launcher, model_flags, extra = LAUNCHES["horovodrun-gloo"](hostfile_2, profile)
    env = subprocess_env(**extra)
    env["PATH"] = BIN + os.pathsep + "/usr/local/bin:/usr/bin:/bin"
    command = [*launcher, "-m", "models.resnet50", *long_training(small_data, run_dir), *model_flags]
    job = start_long_run(four_hosts.wrap(four_hosts.names[0], command), run_dir, env)
    third = four_hosts.names[2]
    victim = next(r for r in read_json(run_dir / "env.json")["ranks"] if r["host"] == third)
    os.kill(victim["pid"], signal.SIGKILL)
    code, last, output = assert_ends_closed(job, run_dir, time.time(), FAULT_BOUND_SECONDS)
    assert_killed_rank_named(code, last, output, victim["rank"], third)
