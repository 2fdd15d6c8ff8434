"""Two hosts for real: network namespaces h1 and h2 joined by a veth link, an SSH server on each.

The launchers a user types run on h1 and start ranks on both hosts (one launch with two ranks on each,
the others with one): the runs train with identical weights, their logs pass the checker, env.json
names both hosts, and the link's byte counters show the gradients crossed it. These runs are also the
suite's plain-mpirun test (its single-host case is the README demo, whose horovodrun execs mpirun).
The allreduce benchmark runs across the hosts too. The host pre-flight passes on this cluster and
names the host at fault when a host name resolves to loopback or two hosts share one name.
"""
import os
import re
import shutil
import signal
import subprocess
import time

from dataclasses import dataclass

import pytest

from helpers.jobs import (assert_ends_closed, assert_every_link_carried_the_gradients,
                          assert_killed_rank_named, long_training, run_watching_links, start_long_run)
from helpers.launch_paths import FAULT_BOUND_SECONDS, LAUNCHES, SEEN_AS, launch_args
from helpers.running import TINY, host_env, on_first_host
from helpers.runs import check_log, read_json, read_log
from twohosts import LINK, ClusterUnavailable, TwoHosts
from suite.common import profiles

# Namespace hosts (mlh-h1, mlh-h2; a worker's number after mlh under pytest-xdist): `make test`'s second
# phase. --dist loadfile keeps every test of the module on one worker (Makefile), so the module's
# cluster is built once.
pytestmark = pytest.mark.serial

# No veth pair reaches this (GB/s): the profile's expectation that the pre-run probe must miss.
UNREACHABLE_GBPS = 10000


def unavailable(err):
    """CI runs as root and must run these tests; elsewhere a machine without namespaces skips them."""
    if os.environ.get("CI"):
        pytest.fail(f"the two-host cluster is required in CI: {err}")
    pytest.skip(f"no two-host cluster on this machine: {err}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        with TwoHosts(tmp_path_factory.mktemp("twohosts")) as made:
            yield made
    except ClusterUnavailable as err:
        unavailable(err)


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The cluster's profile: CPU nodes whose front-end interface is the link between them.

    Its expected bus bandwidth for two nodes is far beyond a veth pair, so the pre-run probe must
    warn: the warning proves the comparison ran against this profile's figure for this node count.
    """
    path = tmp_path_factory.mktemp("profile") / "two-hosts.yaml"
    path.write_text(f"name: two-hosts\nversion: 1\ndescription: two network namespaces\ngpus_per_node: 0\n"
                    f"network_interface: {LINK}\nenv: {{NCCL_DEBUG: WARN, OMPI_MCA_mpi_yield_when_idle: 1}}\n"
                    f"expected_busbw_gbps: {{2: {UNREACHABLE_GBPS}}}\n")
    return str(path)


@pytest.fixture(scope="module")
def hostfile(tmp_path_factory):
    path = tmp_path_factory.mktemp("hostfile") / "two_hosts"
    path.write_text("h1 slots=2\nh2 slots=2\n")
    return str(path)


@pytest.fixture(scope="module")
def one_rank_each(tmp_path_factory):
    """For the faults that need a rank on each side and nothing more: half the start-up of four ranks
    on this machine's two cores."""
    path = tmp_path_factory.mktemp("hostfile") / "one_rank_each"
    path.write_text("h1 slots=1\nh2 slots=1\n")
    return str(path)


on_h1 = on_first_host  # h1 is the two-host cluster's first host


# ---- the pre-flight --------------------------------------------------------------------------------

def test_host_check_passes_and_reports_both_hosts(cluster, hostfile):
    result = on_h1(cluster, [*launch_args(hostfile), "--check-hosts", "--", "models.resnet50"], timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"host h1: h1, resolves to {cluster.addresses['h1']}, Python")
    assert lines[1].startswith(f"host h2: h2, resolves to {cluster.addresses['h2']}, Python")


def test_a_host_name_resolving_to_loopback_is_named_before_the_launch(cluster, hostfile):
    hosts = f"/etc/netns/{cluster.namespaces['h2']}/hosts"
    with open(hosts) as handle:
        original = handle.read()
    try:
        # As a stock /etc/hosts does; rewritten in place, since h2's sshd sees this very file.
        with open(hosts, "r+") as handle:
            handle.truncate()
            handle.write(original.replace(f"{cluster.addresses['h2']} h2", "127.0.1.1 h2"))
        result = on_h1(cluster, [*launch_args(hostfile), "--", "models.resnet50", *TINY, "--data-dir", "/d"],
                       timeout=120)
    finally:
        with open(hosts, "r+") as handle:
            handle.truncate()
            handle.write(original)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: host h2:")]
    assert len(errors) == 1 and "resolves to 127.0.1.1" in errors[0], result.stderr
    assert "launch:" not in result.stderr  # nothing was started


def test_a_profile_interface_missing_on_the_hosts_is_named(cluster, hostfile, profile, tmp_path):
    other = tmp_path / "other.yaml"
    with open(profile) as handle:
        other.write_text(handle.read().replace(f"network_interface: {LINK}", "network_interface: eth9"))
    result = on_h1(cluster, [*launch_args(hostfile, str(other)), "--check-hosts", "--", "models.resnet50"],
                   timeout=120)
    assert result.returncode == 2
    for host in ("h1", "h2"):
        assert f"error: host {host}: has no interface eth9 with an IPv4" in result.stderr, result.stderr


def test_two_hosts_with_one_name_are_named(cluster, hostfile):
    cluster.set_hostname("h2", "h1")
    try:
        result = on_h1(cluster, [*launch_args(hostfile), "--check-hosts", "--", "models.resnet50"],
                       timeout=120)
    finally:
        cluster.set_hostname("h2", "h2")
    assert result.returncode == 2
    assert "error: hosts h1, h2 all call themselves h1; give each node its own host name" in result.stderr


# ---- training across the two hosts ----------------------------------------------------------------


# The launch that runs two ranks on each host (local ranks 0 and 1, as on a node of GPUs); the others
# run one rank on each, which crosses the link just the same for half the start-up on two cores.
TWO_PER_HOST = "suite.launch"


# The launch paths trained on two hosts here. horovodrun --mpi, mpirun and suite.cluster.launch train at
# 8 ranks over four hosts in tests/test_four_hosts.py with the same assertions (profile, interfaces, the
# network check, the checker, the link counters); Gloo's launch stays here, where its profile comes by
# the model's --profile flag and the network check is held against an unreachable expectation. mpirun-tf
# is the tf backend (TensorFlow's collectives, TF_CONFIG built from mpirun's world) across the hosts.
TWO_HOST_RUNS = ("horovodrun-gloo", "mpirun-tf")


@pytest.fixture(scope="module", params=TWO_HOST_RUNS)
def two_host_run(request, cluster, hostfile, one_rank_each, profile, small_data, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp(request.param) / "run"
    slots = hostfile if request.param == TWO_PER_HOST else one_rank_each
    launcher, model_flags, extra = LAUNCHES[request.param](slots, profile)
    model = ["-m", "models.resnet50"] if request.param != "suite.launch" else ["models.resnet50"]
    env = host_env(**extra)
    command = [*launcher, *model, *TINY, "--set", "seed=9", "--data-dir", small_data, "--run-dir",
               str(run_dir), *model_flags]
    code, output, moved = run_watching_links(cluster.wrap("h1", command), run_dir, env,
                                             lambda: {"h1": cluster.link_bytes("h1")}, timeout=900)
    assert code == 0, output[-6000:]
    return TwoHostRun(run_dir, moved, request.param, output)


@dataclass
class TwoHostRun:
    run_dir: object
    link_bytes: dict  # {"h1": (sent, received)} from run_start to run_stop
    name: str
    output: str  # stdout and stderr: horovodrun and mpirun tag the ranks' lines ([1,0]<stderr>:...)


@pytest.mark.slow
def test_ranks_on_both_hosts_train_in_step(two_host_run):
    run_dir, name = two_host_run.run_dir, two_host_run.name
    per_host = 2 if name == TWO_PER_HOST else 1
    summary = read_json(run_dir / "summary.json")
    assert summary["world_size"] == 2 * per_host and summary["weights_in_sync"], summary["ranks"]
    assert summary["steps"] == 2 and summary["status"] in ("success", "aborted")
    env = read_json(run_dir / "env.json")
    assert env["hosts"] == ["h1", "h2"]
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (host, local_rank) for host in ("h1", "h2") for local_rank in range(per_host)]
    assert (env["launcher"], env["controller"]) == SEEN_AS[name]


@pytest.mark.slow
def test_the_log_passes_the_checker(two_host_run):
    run_dir = two_host_run.run_dir
    passed, output = check_log(run_dir / "result_0.txt", "2.1.0")
    assert passed, output
    # Rank 0 alone writes the log: one run_start, one run_stop, and no other result file.
    keys = [e["key"] for e in read_log(run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert [p.name for p in run_dir.glob("result_*") if not p.name.startswith("result_0.txt")] == []


@pytest.mark.slow
def test_the_gradients_crossed_the_link_between_the_hosts(two_host_run):
    """Read from run_start to run_stop: the ranks' link probe before it sends more than any short run."""
    assert_every_link_carried_the_gradients(two_host_run.run_dir, two_host_run.link_bytes)


@pytest.mark.slow
def test_every_launch_path_applies_the_profile(two_host_run, cluster, profile):
    env = read_json(two_host_run.run_dir / "env.json")
    applied = env["profile"]
    assert (applied["name"], applied["path"]) == ("two-hosts", profile)
    # suite.cluster.launch applies it before launching; under the raw launchers every rank does.
    assert applied["applied_by"] == ("launcher" if two_host_run.name == "suite.launch" else "rank")
    # One interface setting reached NCCL, Gloo and Open MPI alike, whatever horovodrun probed.
    for key in ("NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "OMPI_MCA_btl_tcp_if_include",
                "OMPI_MCA_oob_tcp_if_include"):
        assert env["environment"][key] == LINK, key
    assert env["environment"]["NCCL_DEBUG"] == "WARN"


@pytest.mark.slow
def test_the_network_check_ran_before_run_start(two_host_run):
    env = read_json(two_host_run.run_dir / "env.json")
    net = env["network"]
    controller = SEEN_AS[two_host_run.name][1]
    assert (net["library"], net["nodes"], net["rdma"]) == (controller, 2, False)
    assert net["probe"]["correct"] and net["probe"]["busbw_gbps"] > 0
    assert net["expected_busbw_gbps"] == UNREACHABLE_GBPS and net["status"] == "below expectation"
    warnings = [line for line in two_host_run.output.splitlines() if "warning: " in line]
    assert any("allreduce probe" in line and f"{UNREACHABLE_GBPS} GB/s expected" in line for line in warnings)
    assert any(f"no RDMA: the gradients go over {controller}" in line for line in warnings)
    assert not any("no cluster profile" in line for line in warnings)


@pytest.mark.slow
def test_require_rdma_stops_a_run_without_it_before_run_start(cluster, hostfile, small_data, tmp_path):
    """No profile and no RDMA: a warning about the missing profile, then a one-line stop."""
    run_dir = tmp_path / "run"
    result = on_h1(cluster, ["horovodrun", "--gloo", "-np", "4", "-hostfile", hostfile, "python", "-m",
                             "models.resnet50", *TINY, "--data-dir", small_data, "--run-dir", str(run_dir),
                             "--require-rdma"], timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "warning: a multi-host run with no cluster profile" in output
    stops = [line for line in output.splitlines() if "error (rank 0): --require-rdma: no RDMA" in line]
    assert len(stops) == 1, output[-6000:]
    keys = [e["key"] for e in read_log(run_dir / "result_0.txt")]
    assert "init_start" in keys and "run_start" not in keys


# ---- faults ---------------------------------------------------------------------------------------


# Every launch path but horovodrun --mpi, which execs the same mpirun as the "mpirun" path (env.json records
# both as mpirun): from the kill on, one path. horovodrun --mpi keeps its own run on four hosts.
KILL_PATHS = sorted(set(LAUNCHES) - {"horovodrun-mpi"})


@pytest.mark.slow
@pytest.mark.parametrize("launch", KILL_PATHS)
def test_a_rank_killed_on_the_second_host_ends_the_job_with_a_closed_log(
        launch, cluster, one_rank_each, profile, small_data, tmp_path):
    run_dir = tmp_path / "run"
    job = start_fault_run(launch, cluster, one_rank_each, profile, small_data, run_dir)
    victim = next(r for r in read_json(run_dir / "env.json")["ranks"] if r["host"] == "h2")
    os.kill(victim["pid"], signal.SIGKILL)
    code, last, output = assert_ends_closed(job, run_dir, time.time(), FAULT_BOUND_SECONDS)
    assert_killed_rank_named(code, last, output, victim["rank"], "h2")


def start_fault_run(launch, cluster, hostfile, profile, small_data, run_dir):
    launcher, model_flags, extra = LAUNCHES[launch](hostfile, profile)
    model = ["-m", "models.resnet50"] if launch != "suite.launch" else ["models.resnet50"]
    env = host_env(**extra)
    command = [*launcher, *model, *long_training(small_data, run_dir), *model_flags]
    return start_long_run(cluster.wrap("h1", command), run_dir, env)


# The suite's defaults, as every shipped profile and the cluster's own profile have them.
DEFAULTS = profiles.Timeouts()
# A stopped rank: the watch's silence bound, then the launcher's teardown (20 s alone; a minute of
# room for a loaded machine, still far below a hang's "never").
STOP_BOUND_SECONDS = DEFAULTS.peer_seconds + 60
# A dead link: rank 0 names the silent ranks after the watch's bound and ends (with the Open MPI
# daemon above it, which would wait on the dead link); on the far side the ranks end when rank 0 has
# been silent as long. 32 s alone, in RELIABILITY.md.
LINK_BOUND_SECONDS = DEFAULTS.peer_seconds + 60


@pytest.mark.slow
def test_a_rank_stopped_on_the_second_host_is_named_and_the_job_ends(
        cluster, one_rank_each, profile, small_data, tmp_path):
    """SIGSTOP: alive to the kernel, silent to everyone. Horovod's MPI controller would wait for ever."""
    run_dir = tmp_path / "run"
    job = start_fault_run("mpirun", cluster, one_rank_each, profile, small_data, run_dir)
    victim = next(r for r in read_json(run_dir / "env.json")["ranks"] if r["host"] == "h2")
    os.kill(victim["pid"], signal.SIGSTOP)
    code, last, output = assert_ends_closed(job, run_dir, time.time(), STOP_BOUND_SECONDS)
    assert code != 0, output[-3000:]
    assert last["metadata"]["reason"].startswith(
        f"rank {victim['rank']} on host h2 sent nothing for {DEFAULTS.peer_seconds} s (stopped"), last


@pytest.mark.slow
def test_the_link_going_down_ends_the_job_on_both_hosts(cluster, hostfile, profile, small_data, tmp_path):
    run_dir = tmp_path / "run"
    job = start_fault_run("suite.launch", cluster, hostfile, profile, small_data, run_dir)
    cluster.set_link("h2", up=False)
    try:
        code, last, output = assert_ends_closed(job, run_dir, time.time(), LINK_BOUND_SECONDS)
    finally:
        cluster.set_link("h2", up=True)
    assert code != 0, output[-3000:]
    reason = last["metadata"]["reason"]
    assert re.match(r"rank [23] on host h2 sent nothing for \d+ s \(stopped, hung, or its host or the link "
                    r"to it is down\) \(and 1 more rank\)$", reason), reason


def test_the_cluster_is_torn_down_with_nothing_left(tmp_path):
    try:
        with TwoHosts(tmp_path, prefix="mltd") as made:
            namespaces = list(made.namespaces.values())
    except ClusterUnavailable as err:
        unavailable(err)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in namespaces if ns in listed]
    assert not [ns for ns in namespaces if os.path.exists(f"/etc/netns/{ns}")]
    assert shutil.which("ip")
