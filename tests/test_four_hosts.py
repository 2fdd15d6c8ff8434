"""The headline command at its own scale: four namespace hosts on one bridge, named as the shipped
hostfiles/4node names them once its placeholder is filled, eight slots each.

The 32-rank BERT run is the expensive part (32 TensorFlow start-ups on two cores, about 20 GB), so it
runs once per test run, in a module fixture, for a dozen steps, and is asserted many ways. Everything
else runs at 2 slots per host (8 ranks) from a copy of the same file with slots=2.
"""
import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time

from dataclasses import dataclass

import pytest

from helpers.failures import TAG
from helpers.four_node import filled_hostfile
from helpers.jobs import (assert_ends_closed, assert_every_link_carried_the_gradients,
                          assert_killed_rank_named, long_training, run_watching_links, start_long_run)
from helpers.launch_paths import FAULT_BOUND_SECONDS, LAUNCHES, SEEN_AS
from helpers.report import table_with
from helpers.running import REPO, SHORT_BERT, host_env, on_first_host, run
from helpers.runs import check_log, read_json, read_log
from helpers.sweep import ASK_FOR_TIMELINE, SUBMITTER
from twohosts import LINK
from suite.cluster import hostfile as hostfile_format
from suite.cluster.launch import FQDN_VARIABLE

# Every test here needs the four namespace hosts (or runs ranks on them): none belongs in make test-fast.
pytestmark = pytest.mark.slow


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
    link_bytes: dict  # host -> (sent, received) from the run's run_start to its run_stop
    output: str
    seconds: float


def link_counters(cluster):
    return {name: cluster.link_bytes(name) for name in cluster.names}


def run_with_counters(cluster, command, run_dir, timeout=1500, extra_env=None):
    """Runs `command` on the first host, the link counters read over run_dir's training."""
    env = host_env(**(extra_env or {}))
    start = time.monotonic()
    code, said, moved = run_watching_links(cluster.wrap(cluster.names[0], command), run_dir, env,
                                           lambda: link_counters(cluster), timeout)
    assert code == 0, said[-6000:]
    return Run(run_dir, moved, said, time.monotonic() - start)


# 32 ranks import TensorFlow on two cores, so the last reaches hvd.init a minute or more after the first,
# and Gloo's rendezvous gives up on a missing rank after HOROVOD_GLOO_TIMEOUT_SECONDS (30 s by default):
# rank 0 then aborts in hvd.init ("Wait timeout after ... for key(s)"). The user's environment raises
# it, as docs/scaling-study.md says for an oversubscribed machine; horovodrun forwards it to every rank.
SLOW_RENDEZVOUS = {"HOROVOD_GLOO_TIMEOUT_SECONDS": "300"}


@pytest.fixture(scope="module")
def headline(four_hosts, hostfile_8, bert_data, tmp_path_factory):
    """The README's command as a user types it, at 32 ranks: the only 32-rank run of the test run. It
    trains a dozen steps: what only shows at 32 ranks (Gloo's rendezvous, local ranks 0-7, horovodrun's
    fan-out, the rank watch with 31 peers) is all there by the first step, and each further step costs
    0.7 s of both cores (its 200 steps to the target and their evaluations took 4.3 of the run's
    8.7 minutes here)."""
    run_dir = tmp_path_factory.mktemp("headline") / "run"
    np = hostfile_format.total_slots(hostfile_format.parse(hostfile_8))
    command = ["horovodrun", "--gloo", "-np", str(np), "-hostfile", hostfile_8, "python", "-m", "models.bert",
               *SHORT_BERT, "--data-dir", str(bert_data), "--set", "global_batch_size=32",
               "--run-dir", str(run_dir)]
    made = run_with_counters(four_hosts, command, run_dir, timeout=1800, extra_env=SLOW_RENDEZVOUS)
    print(f"32-rank headline run: {made.seconds:.0f} s")
    return made


@pytest.mark.slow
def test_the_headline_run_trains_32_ranks_in_step(headline):
    summary = read_json(headline.run_dir / "summary.json")
    assert summary["world_size"] == 32 and summary["local_batch_size"] == 1, summary
    # Every step ran, and one evaluation after the last; a dozen steps seldom reach the target
    # (run_stop aborted, which the checker accepts).
    assert summary["steps"] == 12 and len(summary["evals"]) == 1, summary
    assert summary["status"] in ("success", "aborted"), summary
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
def test_the_headline_run_records_every_ranks_start_up_and_peak_memory(headline):
    """What docs/testing.md quotes: where each rank's start-up went and how much memory it peaked at."""
    start_up = read_json(headline.run_dir / "env.json")["startup_seconds"]
    phases = ("imports", "horovod_init", "run_directory_and_log", "workload_build", "network_check")
    assert sorted(r["rank"] for r in start_up["ranks"]) == list(range(32))
    for rank in start_up["ranks"]:
        assert rank["imports"] > 0 and all(rank[phase] >= 0 for phase in phases), rank
    ranks = read_json(headline.run_dir / "summary.json")["ranks"]
    # A TensorFlow rank holds far more than its interpreter (about 12 MB) once it has trained.
    assert len(ranks) == 32 and all(r["peak_memory_mb"] > 100 for r in ranks), ranks
    peaks = sorted(r["peak_memory_mb"] for r in ranks)
    print(f"32 ranks: start-up of the slowest rank by phase {start_up['slowest']}; peak memory per rank "
          f"{peaks[0]:.0f}-{peaks[-1]:.0f} MB (median {peaks[16]:.0f}), {sum(peaks) / 1024:.1f} GB in all")


@pytest.mark.slow
def test_the_gradients_crossed_every_hosts_link(headline):
    assert_every_link_carried_the_gradients(headline.run_dir, headline.link_bytes)


@pytest.mark.slow
def test_the_headline_ranks_probed_every_hosts_link(headline, four_hosts):
    """No launcher probed the links (a raw horovodrun): the first rank of each host did, before run_start."""
    links = read_json(headline.run_dir / "env.json")["network"]["links"]
    assert links["measured_by"] == "ranks" and sorted(links["hosts"]) == sorted(four_hosts.names)
    assert all(h["send_gbits"] > 0 and h["receive_gbits"] > 0 for h in links["hosts"].values()), links
    assert links["slow_hosts"] == [] and "warning: link probe" not in headline.output


# ---- the other launch paths and ResNet-50, at 2 slots per host (8 ranks) ---------------------------

@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    """The cluster's profile: CPU nodes whose front-end interface is the bridge link."""
    path = tmp_path_factory.mktemp("profile") / "cpu-four-hosts.yaml"
    path.write_text(f"name: cpu-four-hosts\nversion: 1\ndescription: four network namespaces on a bridge\n"
                    f"gpus_per_node: 0\nnetwork_interface: {LINK}\n"
                    f"env: {{NCCL_DEBUG: WARN, OMPI_MCA_mpi_yield_when_idle: 1}}\n")
    return str(path)


# The three 8-rank launch paths, each training BERT: its tiny preset starts and steps faster than
# ResNet-50's on two cores (ResNet-50 crosses the four hosts at 8 ranks in the fault test below). The
# suite.cluster.launch run is the sweep's 4-host scale (the sweep launches each run through it): one run
# asserted both ways rather than a fourth 8-rank run.
RAW_EIGHT_RANK_PATHS = ("horovodrun-mpi", "mpirun")
SWEEP_PATH = "suite.launch"
# The raw launch whose run has the third host's link shaped: the ranks' link probe must name it.
SHAPED_PATH = "horovodrun-mpi"


@pytest.fixture(scope="module", params=sorted([*RAW_EIGHT_RANK_PATHS, SWEEP_PATH]))
def eight_rank_run(request, four_hosts, hostfile_2, profile, bert_data, tmp_path_factory):
    name = request.param
    if name == SWEEP_PATH:
        return name, request.getfixturevalue("swept").four_host_run, None
    run_dir = tmp_path_factory.mktemp(name) / "run"
    launcher, model_flags, env = LAUNCHES[name](hostfile_2, profile)
    # Under a raw Open MPI launch the user keeps the hostfile's qualified names as docs/scaling-study.md
    # says (suite.cluster.launch sets this itself): Open MPI would otherwise ssh to gpu-node-02.
    env = {**env, FQDN_VARIABLE: "1"}
    command = [*launcher, "-m", "models.bert", *SHORT_BERT, "--data-dir", str(bert_data), "--run-dir",
               str(run_dir), *model_flags]
    shaped = None
    if name == SHAPED_PATH:
        # The ranks' own link probe (no launcher probed) is to name this host: its cable at a tenth of
        # the slowest unshaped figure. BERT tiny's gradients are small, so the run itself hardly slows.
        figures, _ = request.getfixturevalue("even_links")
        shaped = four_hosts.names[2]
        four_hosts.shape(shaped, 1000 * min(min(pair) for pair in figures.values()) / 10)
    try:
        made = run_with_counters(four_hosts, command, run_dir, timeout=1200, extra_env=env)
    finally:
        if shaped:
            four_hosts.unshape(shaped)
    print(f"8-rank {name}: {made.seconds:.0f} s")
    return name, made, shaped


@pytest.mark.slow
def test_eight_ranks_two_on_each_host_train_in_step(eight_rank_run, four_hosts, profile):
    name, made, _ = eight_rank_run
    summary = read_json(made.run_dir / "summary.json")
    assert summary["world_size"] == 8 and summary["weights_in_sync"], summary["ranks"]
    assert summary["status"] in ("success", "aborted") and summary["steps"] > 0, summary
    env = read_json(made.run_dir / "env.json")
    assert env["hosts"] == list(four_hosts.names)
    assert sorted((r["host"], r["local_rank"]) for r in env["ranks"]) == [
        (host, local_rank) for host in sorted(four_hosts.names) for local_rank in range(2)]
    assert (env["launcher"], env["controller"]) == SEEN_AS[name]
    assert env["profile"]["path"] == profile
    # suite.cluster.launch applies the profile before launching; under the raw launchers every rank does.
    assert env["profile"]["applied_by"] == ("launcher" if name == "suite.launch" else "rank")
    # One interface setting reached NCCL, Gloo and Open MPI alike, whatever the launcher probed.
    for key in ("NCCL_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE", "OMPI_MCA_btl_tcp_if_include",
                "OMPI_MCA_oob_tcp_if_include"):
        assert env["environment"][key] == LINK, key
    # The network check ran before run_start over four nodes, on the launch's controller, without RDMA.
    net = env["network"]
    assert (net["library"], net["nodes"], net["rdma"]) == (SEEN_AS[name][1], 4, False)
    assert net["probe"]["correct"] and net["probe"]["busbw_gbps"] > 0


@pytest.mark.slow
def test_eight_rank_logs_pass_the_checker_and_every_link_carried_gradients(eight_rank_run):
    name, made, _ = eight_rank_run
    passed, output = check_log(made.run_dir / "result_0.txt", "2.1.0")
    assert passed, output
    keys = [e["key"] for e in read_log(made.run_dir / "result_0.txt")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1
    assert_every_link_carried_the_gradients(made.run_dir, made.link_bytes)


@pytest.mark.slow
def test_every_launch_path_measures_every_hosts_link_and_names_only_the_shaped_one(
        eight_rank_run, four_hosts):
    """suite.cluster.launch probes the links before it launches; under horovodrun and mpirun the ranks
    probe them themselves. The run with the third host shaped names it, and only it, in env.json and in
    rank 0's one warning line; the others name none."""
    name, made, shaped = eight_rank_run
    links = read_json(made.run_dir / "env.json")["network"]["links"]
    assert links["measured_by"] == ("launcher" if name == "suite.launch" else "ranks"), links
    assert sorted(links["hosts"]) == sorted(four_hosts.names)
    # mpirun and horovodrun tag each rank's lines ([1,0]<stderr>:); the launcher's own are untagged.
    untagged = (TAG.sub("", line) for line in made.output.splitlines())
    warnings = [line for line in untagged if line.startswith("warning: link probe: ")]
    if shaped:
        assert links["slow_hosts"] == [shaped], links
        assert len(warnings) == 1 and warnings[0].startswith(f"warning: link probe: host {shaped}: its link "
                                                             "measured"), made.output[-3000:]
    else:
        assert links["slow_hosts"] == [] and warnings == [], (links, warnings)
    measured = [h for host, h in links["hosts"].items() if host != shaped]
    assert all(h["send_gbits"] > 0 and h["receive_gbits"] > 0 for h in measured), links


# ---- a fault on the third host ---------------------------------------------------------------------

@pytest.mark.slow
def test_a_rank_killed_on_the_third_host_ends_the_job_on_every_host(four_hosts, hostfile_2, profile,
                                                                    small_data, tmp_path):
    run_dir = tmp_path / "run"
    launcher, model_flags, extra = LAUNCHES["horovodrun-gloo"](hostfile_2, profile)
    # 8 ranks import TensorFlow on two cores beside the other test worker: Gloo's rendezvous must not
    # give up on the last one (the kill, after run_start, is seen by the rank watch, not by Gloo).
    env = host_env(**extra, **SLOW_RENDEZVOUS)
    command = [*launcher, "-m", "models.resnet50", *long_training(small_data, run_dir), *model_flags]
    job = start_long_run(four_hosts.wrap(four_hosts.names[0], command), run_dir, env)
    third = four_hosts.names[2]
    victim = next(r for r in read_json(run_dir / "env.json")["ranks"] if r["host"] == third)
    os.kill(victim["pid"], signal.SIGKILL)
    code, last, output = assert_ends_closed(job, run_dir, time.time(), FAULT_BOUND_SECONDS)
    assert_killed_rank_named(code, last, output, victim["rank"], third)


# ---- the sweep from one host to four ---------------------------------------------------------------

# The cheapest preset that still times enough steps: BERT tiny, 24 steps at every scale (its global batch
# of 32 splits over 2, 4 and 8 ranks) and one evaluation after the last. ResNet-50's sweep_cpu preset
# spent 5.7 s a step at 8 ranks here, its 100 MB of gradients over the bridge on two cores.
SWEEP_BERT = ["--set", "train_steps=24", "--set", "warmup_steps=2", "--set", "eval_interval_samples=768",
              "--set", "log_every=4"]
SWEEP_SCALES = (2, 4, 8)


@pytest.fixture(scope="module")
def swept(four_hosts, hostfile_2, profile, bert_data, tmp_path_factory):
    """One run at each of 1, 2 and 4 hosts (2, 4, 8 ranks), then the report of the folder. The 4-host
    run is also the suite.cluster.launch path's 8-rank run, its link counters read while it trains."""
    from suite.cluster.sweep import planning
    folder = tmp_path_factory.mktemp("sweep")
    info = folder / "system.yaml"
    info.write_text("".join(f"{field}: '2'\n" for field in planning.HOST_FIELDS))
    out = folder / "out"
    four_host_dir = out / "runs" / sweep_systems()[-1] / "run_0"
    start = time.monotonic()
    made = run_with_counters(four_hosts, [
        sys.executable, "-m", "suite.cluster.sweep", "--out", str(out), "--profile", profile, "--hostfile",
        hostfile_2, "--scales", ",".join(map(str, SWEEP_SCALES)), "--preset", "tiny_cpu", "--runs", "1",
        "--system-info", str(info), "--allreduce", "--allreduce-args",
        "--min-bytes 64K --max-bytes 1M --iters 3", "--", "models.bert", "--data-dir", str(bert_data),
        *SWEEP_BERT], four_host_dir, timeout=1800, extra_env=ASK_FOR_TIMELINE)
    report = on_first_host(four_hosts, [sys.executable, "-m", "suite.cluster.report", str(out)], timeout=300)
    assert report.returncode == 0, report.stderr
    print(f"1 -> 2 -> 4 host sweep and its report: {time.monotonic() - start:.0f} s")
    # The 4-host run as the other 8-rank paths are asserted: its own launch's output and the sweep's.
    made.output = (four_host_dir / "output.txt").read_text() + made.output
    return argparse.Namespace(out=out, four_host_run=made)


def sweep_systems():
    return [f"cpu-four-hosts_n{nodes}_np{np}" for nodes, np in zip((1, 2, 4), SWEEP_SCALES)]


@pytest.mark.slow
def test_the_sweep_report_has_three_scales_in_every_table(swept):
    markdown = (swept.out / "report" / "report.md").read_text()
    scales = {row["system"]: row for row in table_with(markdown, "fastest (min)")}
    assert sorted(scales) == sorted(sweep_systems())
    assert [scales[system]["nodes"] for system in sweep_systems()] == ["1", "2", "4"]
    # Every scale timed at least 20 steps, and its step time is split (the attribution).
    for system in sweep_systems():
        summary = read_json(swept.out / "runs" / system / "run_0" / "summary.json")
        assert summary["steps"] >= 20, (system, summary["steps"])
    split = markdown.split("## Where the efficiency went (measured)", 1)[1].split("\n## ", 1)[0]
    assert all(f"| {system} |" in split for system in sweep_systems()), split


@pytest.mark.slow
def test_the_allreduce_benchmark_measured_across_the_hosts_at_each_scale(swept, four_hosts):
    """The allreduce benchmark under suite.cluster.launch on one, two and four hosts: every rank took part,
    from every host of its scale, and the sums were right."""
    for system, np, hosts in zip(sweep_systems(), SWEEP_SCALES, (1, 2, 4)):
        data = read_json(swept.out / "runs" / system / "allreduce.json")
        assert data["world_size"] == np and data["correct"], data
        assert sorted(data["hosts"]) == sorted(four_hosts.names[:hosts]), data["hosts"]
        assert data["peak_busbw_gbps"] > 0


@pytest.mark.slow
def test_the_sweep_launched_every_run_through_horovodrun(swept):
    """The sweep's default launcher, across hosts: each scale's run went through horovodrun."""
    for system, np in zip(sweep_systems(), SWEEP_SCALES):
        record = read_json(swept.out / "runs" / system / "run_0" / "launch.json")
        command = record["command"]
        assert command[0] == "horovodrun" and command[command.index("-np") + 1] == str(np), command
        assert record["exit_code"] == 0


@pytest.mark.slow
def test_the_sweep_report_has_the_allreduce_benchmark_and_the_network_check_per_scale(swept):
    markdown = (swept.out / "report" / "report.md").read_text()
    one, two, four = sweep_systems()
    # The allreduce benchmark ran on each scale: on one host, then across two and four.
    hosts = {(row["system"], row["hosts"]) for row in table_with(markdown, "busbw (GB/s)")}
    assert hosts == {(one, "1"), (two, "2"), (four, "4")}
    # The network check ran where there is a network: over MPI (the launcher's horovodrun), no RDMA.
    network = {row["system"]: row for row in table_with(markdown, "network (per rank)")}
    assert sorted(network) == [two, four], network
    for row in network.values():
        assert (row["profile"], row["carried by"], row["RDMA"]) == ("cpu-four-hosts", "mpi", "NO"), row
        assert float(row["probe busbw (GB/s)"].split()[0]) > 0


@pytest.mark.slow
def test_the_sweep_report_has_every_hosts_link(swept, four_hosts):
    """The launcher probed the links before the 2- and 4-host runs; the report has each host's figures."""
    markdown = (swept.out / "report" / "report.md").read_text()
    rows = table_with(markdown, "sends (Gbit/s)")
    one, two, four = sweep_systems()
    assert sorted(row["host"] for row in rows if row["system"] == four) == sorted(four_hosts.names)
    assert sorted(row["host"] for row in rows if row["system"] == two) == sorted(four_hosts.names[:2])
    assert not [row for row in rows if row["system"] == one]  # one host: no link to probe
    assert all(float(row["sends (Gbit/s)"]) > 0 and row["verdict"] == "ok" for row in rows), rows
    assert "No host was named." in markdown


@pytest.mark.slow
def test_the_package_checkers_verdict_on_the_four_host_sweep(swept, tmp_path):
    """One run per scale: the checker passes every system description and every log, and refuses the
    folder for its run count alone (BERT wants 10 logs a system)."""
    result = run([sys.executable, "-m", "mlperf_logging.package_checker", str(swept.out / SUBMITTER),
                  "training", "2.1.0", "--log_output", str(tmp_path / "package_checker.log")], timeout=300)
    output = result.stdout + result.stderr
    for system in sweep_systems():
        assert f"System description checker passed for {system}" in output
    errors = [line for line in output.splitlines() if line.lstrip().startswith("ERROR")]
    assert errors and all("Incorrect number of files in dir" in line and "found 1, expected 10" in line
                          for line in errors), output[-3000:]
    assert len(errors) == len(sweep_systems())


# ---- the slow host named: the link probe ----------------------------------------------------------

LINK_LINE = re.compile(r"^link (?P<host>\S+): sends (?P<send>[\d.e+-]+) Gbit/s, "
                       r"receives (?P<receive>[\d.e+-]+) Gbit/s$")


def check_hosts(cluster, hostfile, profile, *flags, timeout=180):
    """`suite.cluster.launch --check-hosts` on the first host: (result, {host: (send, receive)}, warnings)."""
    result = on_first_host(cluster, [sys.executable, "-m", "suite.cluster.launch", "--hostfile", hostfile,
                                     "--profile", profile, "--check-hosts", *flags, "--", "models.bert"],
                           timeout=timeout)
    figures = {m["host"]: (float(m["send"]), float(m["receive"]))
               for m in map(LINK_LINE.match, result.stdout.splitlines()) if m}
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: link probe: ")]
    return result, figures, warnings


@pytest.fixture(scope="module")
def even_links(four_hosts, hostfile_2, profile):
    """The unshaped cluster's figures, measured once: what a tenth is taken of."""
    result, figures, warnings = check_hosts(four_hosts, hostfile_2, profile)
    assert result.returncode == 0, result.stdout + result.stderr
    return figures, warnings


def test_the_unshaped_cluster_names_no_host(even_links, four_hosts):
    figures, warnings = even_links
    assert sorted(figures) == sorted(four_hosts.names)
    assert all(send > 0 and receive > 0 for send, receive in figures.values()), figures
    assert warnings == []


@pytest.fixture
def third_host_shaped(four_hosts, even_links):
    """The third host's cable at a tenth of the slowest unshaped figure, both ways."""
    figures, _ = even_links
    slowest_mbit = 1000 * min(min(pair) for pair in figures.values())
    third = four_hosts.names[2]
    four_hosts.shape(third, slowest_mbit / 10)
    try:
        yield third, slowest_mbit / 10
    finally:
        four_hosts.unshape(third)


def test_a_host_shaped_to_a_tenth_is_named_and_only_it(four_hosts, hostfile_2, profile, third_host_shaped):
    third, mbit = third_host_shaped
    result, figures, warnings = check_hosts(four_hosts, hostfile_2, profile)
    assert result.returncode == 0, result.stderr  # a warning, not a stop, without --require-links
    named = f"warning: link probe: host {third}: its link measured"
    assert len(warnings) == 1 and warnings[0].startswith(named), result.stderr
    assert "of its peers' median" in warnings[0]  # the profile has no expected_link_gbits
    # What the probe measured of it is about what it was shaped to, far below the others.
    assert min(figures[third]) < 2 * mbit / 1000, (figures, mbit)


def test_the_profiles_expected_link_rate_names_the_host_and_require_links_stops_the_launch(
        four_hosts, hostfile_2, profile, bert_data, third_host_shaped, tmp_path):
    third, mbit = third_host_shaped
    expecting = tmp_path / "expecting.yaml"
    with open(profile) as handle:
        # Twice what the shaped host gets, a fifth of the unshaped ones' slowest: its 80 % is missed by
        # the shaped host alone, whatever the machine's noise does to the others.
        expecting.write_text(handle.read() + f"expected_link_gbits: {2 * mbit / 1000:.4f}\n")
    run_dir = tmp_path / "run"
    result = on_first_host(four_hosts, [
        sys.executable, "-m", "suite.cluster.launch", "--hostfile", hostfile_2, "--profile", str(expecting),
        "--require-links", "--", "models.bert", *SHORT_BERT, "--data-dir", str(bert_data), "--run-dir",
        str(run_dir)], timeout=180)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: --require-links: ")]
    assert len(errors) == 1 and f"host {third}: its link measured" in errors[0], result.stderr
    assert "of the profile's" in errors[0]
    assert "launch:" not in result.stderr and not run_dir.exists()  # nothing started, no run_start


def test_require_links_stops_a_raw_horovodrun_before_run_start(
        four_hosts, profile, bert_data, third_host_shaped, tmp_path):
    """No launcher probed: the ranks do, name the shaped host, and --require-links ends every rank
    with one error line before run_start (one rank a host: the check, not the training, is tested)."""
    third, _ = third_host_shaped
    hostfile_1 = filled_hostfile(tmp_path, slots=1)
    run_dir = tmp_path / "run"
    launcher, model_flags, extra = LAUNCHES["horovodrun-gloo"](hostfile_1, profile)
    command = [*launcher, "-m", "models.bert", *SHORT_BERT, "--data-dir", str(bert_data), "--run-dir",
               str(run_dir), "--require-links", *model_flags]
    result = on_first_host(four_hosts, command, timeout=300, extra_env=extra)
    assert result.returncode != 0, result.stdout[-2000:] + result.stderr[-2000:]
    lines = [TAG.sub("", line) for line in (result.stdout + result.stderr).splitlines()]
    errors = [line for line in lines if line.startswith("error (rank 0): --require-links: ")]
    assert len(errors) == 1 and f"host {third}: its link measured" in errors[0], lines[-30:]
    assert not [line for line in lines if line.startswith("error (rank ") and line not in errors], lines[-30:]
    keys = [e["key"] for e in read_log(run_dir / "result_0.txt")]
    assert "run_start" not in keys and not (run_dir / "summary.json").exists()


def test_a_hung_probe_on_a_host_is_named_within_its_bound(four_hosts, hostfile_2, profile):
    """The fourth host's agent stopped as soon as it starts: it answers nothing, its peers' connections
    to it stall. The host is named in one line, the others are not, all within the probe's bound."""
    from suite.common import linkprobe
    fourth = four_hosts.names[3]
    command = four_hosts.wrap(four_hosts.names[0], [
        sys.executable, "-m", "suite.cluster.launch", "--hostfile", hostfile_2, "--profile", profile,
        "--check-hosts", "--", "models.bert"])
    env = host_env()
    start = time.monotonic()
    job = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    stopped = []
    try:
        marker = b"--index 3"
        while not stopped and job.poll() is None and time.monotonic() - start < 60:
            for pid in agent_pids(marker):
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
            time.sleep(0.05)
        out, err = job.communicate(timeout=120)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):  # ended with its SSH session already
                os.kill(pid, signal.SIGKILL)
        if job.poll() is None:
            job.kill()
    elapsed = time.monotonic() - start
    assert stopped, "the fourth host's agent never started"
    rounds = len(linkprobe.offsets(len(four_hosts.names)))
    bound = linkprobe.CONNECT_SECONDS + rounds * linkprobe.ROUND_SECONDS + 15 + 30  # + the SSH host check
    assert elapsed < bound, elapsed
    warnings = [line for line in err.splitlines() if line.startswith("warning: link probe: ")]
    assert len(warnings) == 1 and f"host {fourth}: the link probe got no answer from it" in warnings[0], err
    print(f"a hung probe named after {elapsed:.1f} s")


def agent_pids(marker):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                line = handle.read().replace(b"\0", b" ")
        except OSError:
            continue
        if b"suite.cluster.preflight_links" in line and marker in line and b"sh -c" not in line:
            found.append(int(entry))
    return found
