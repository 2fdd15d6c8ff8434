"""The link probe's verdict from its agents' answers, and the agents themselves on this machine's loopback."""
import threading

import pytest

from helpers.running import REPO
from suite.common import linkprobe, profiles

HOSTS = ["a", "b", "c", "d"]


def answers(rate_gbits, slow=None, slow_gbits=0.1):
    """What four agents say after both rounds: every transfer at rate_gbits, those to or from `slow` at
    slow_gbits (a degraded cable both ways)."""
    found = {host: {"host": host, "received": [], "errors": []} for host in HOSTS}
    for round_number, step in enumerate((1, -1)):
        for index, host in enumerate(HOSTS):
            target = HOSTS[(index + step) % len(HOSTS)]
            gbits = slow_gbits if slow in (host, target) else rate_gbits
            found[target]["received"].append({"round": round_number, "from": index, "seconds": 1.0,
                                              "bytes": gbits * 1e9 / 8})
    return found


def test_an_even_cluster_names_no_host():
    record, lines = linkprobe.verdict(HOSTS, answers(5.0))
    assert lines == [] and record["slow_hosts"] == []
    assert all(h["send_gbits"] == pytest.approx(5.0) for h in record["hosts"].values())


def test_a_slow_cable_names_its_host_and_not_its_neighbours():
    record, lines = linkprobe.verdict(HOSTS, answers(5.0, slow="c"))
    assert record["slow_hosts"] == ["c"]
    assert len(lines) == 1 and lines[0].startswith("host c: its link measured 0.1 Gbit/s")
    assert "50% of its peers' median 5 Gbit/s" in lines[0]


def test_the_profiles_figure_is_the_bar_when_it_has_one():
    # Every host at 5 Gbit/s against 100 expected: all named; at 90 against 100: none.
    _, lines = linkprobe.verdict(HOSTS, answers(5.0), expected_gbits=100)
    assert [line.split(":")[0] for line in lines] == [f"host {h}" for h in HOSTS]
    assert "80% of the profile's 100 Gbit/s" in lines[0]
    assert linkprobe.verdict(HOSTS, answers(90.0), expected_gbits=100)[1] == []


def passes_of(*passes):
    """A run_pass for linkprobe.measure that answers `passes` in turn, and the list of calls made."""
    calls = []

    def run_pass():
        calls.append(len(calls))
        return passes[len(calls) - 1], {}
    return run_pass, calls


def test_a_healthy_cluster_is_measured_once():
    run_pass, calls = passes_of(answers(5.0))
    record, lines = linkprobe.measure(HOSTS, run_pass)
    assert (lines, len(calls), record["passes"]) == ([], 1, 1)


def test_a_host_slow_in_one_pass_only_is_measured_again_and_not_named():
    # The first pass met a burst of load on b's cores; the second found its cable as fast as the rest.
    run_pass, calls = passes_of(answers(5.0, slow="b", slow_gbits=1.9), answers(5.0))
    record, lines = linkprobe.measure(HOSTS, run_pass)
    assert (lines, record["slow_hosts"], len(calls), record["passes"]) == ([], [], 2, 2)
    assert record["hosts"]["b"]["receive_gbits"] == pytest.approx(5.0)  # the best of both passes


def test_a_host_slow_in_both_passes_is_named():
    second = answers(4.0, slow="c", slow_gbits=0.2)
    for row in second["b"]["received"]:
        row["bytes"] /= 4  # b's receiving met a burst of load in the second pass only: its first counts
    run_pass, calls = passes_of(answers(5.0, slow="c"), second)
    record, lines = linkprobe.measure(HOSTS, run_pass, measured_by="launcher")
    assert record["slow_hosts"] == ["c"] and len(calls) == 2
    assert len(lines) == 1 and lines[0].startswith("host c: its link measured 0.2 Gbit/s")


def test_a_host_without_an_answer_is_named_after_one_pass():
    # Its bound (an unreachable or hung host) must not double; a slow host beside it is named as found.
    first = answers(5.0, slow="a")
    first["b"] = None
    run_pass, calls = passes_of(first, answers(5.0))
    record, lines = linkprobe.measure(HOSTS, run_pass)
    assert len(calls) == 1 and record["slow_hosts"] == ["a", "b"]


def test_a_host_without_an_answer_is_named_with_why():
    found = answers(5.0)
    found["b"] = None
    record, lines = linkprobe.verdict(HOSTS, found, failures={"b": "no answer within 27 s"})
    assert record["slow_hosts"] == ["b"]
    assert lines == ["host b: the link probe got no answer from it (no answer within 27 s)"]


def test_three_agents_on_loopback_measure_every_direction():
    listeners = [linkprobe.listen(0) for _ in range(3)]
    ports = [listener.getsockname()[1] for listener in listeners]
    names = ["localhost"] * 3
    found = {}

    def run(index):
        found[f"h{index}"] = {**linkprobe.agent(names, index, listeners[index], ports, seconds=0.3),
                              "host": f"h{index}"}

    threads = [threading.Thread(target=run, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(not answer["errors"] for answer in found.values()), found
    assert sorted(row["from"] for row in found["h1"]["received"]) == [0, 2]
    record, _ = linkprobe.verdict(["h0", "h1", "h2"], found)
    assert all(h["send_gbits"] > 0 and h["receive_gbits"] > 0 for h in record["hosts"].values())


def test_an_unreachable_peer_is_an_error_within_the_connect_bound():
    listener = linkprobe.listen(0)
    closed = linkprobe.listen(0)
    dead_port = closed.getsockname()[1]
    closed.close()
    answer = linkprobe.agent(["localhost", "localhost"], 0, listener, [0, dead_port], seconds=0.2,
                             connect_seconds=1)
    assert any(f"cannot reach localhost:{dead_port}" in error for error in answer["errors"]), answer


def test_the_verdict_survives_the_trip_through_the_environment():
    record, _ = linkprobe.verdict(HOSTS, answers(5.0, slow="d"))
    environ = linkprobe.environment_entry(record)
    assert linkprobe.from_environment(environ) == record
    assert linkprobe.from_environment({}) is None
    assert linkprobe.from_environment({linkprobe.ENVIRONMENT_VARIABLE: "not base64 json"}) is None


def test_the_agent_answers_when_started_the_way_the_launcher_starts_it():
    # `python -m suite.cluster.preflight_links` from the launch's directory, as over SSH on each host
    # (here `sh -c` for this machine's loopback name); one host, so no rounds, only the answer's trip.
    from suite.cluster import preflight, preflight_links
    answers, failures = preflight_links.probe_hosts(
        ["localhost"], lambda host, argv: preflight.start_on(host, argv, REPO), port=0)
    assert failures == {} and answers["localhost"]["host"] == "localhost", (answers, failures)


@pytest.mark.parametrize("value, said", [("-1", "must be a positive number"),
                                         ("fast", "must be int or float")])
def test_a_bad_expected_link_rate_is_named(value, said, tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(f"name: p\nversion: 1\ndescription: d\ngpus_per_node: 0\nexpected_link_gbits: {value}\n")
    with pytest.raises(profiles.ProfileError, match=f"expected_link_gbits {said}"):
        profiles.load(str(path))


# ---- the ranks' own probe, under a raw launcher (suite/train/linkprobe_by_ranks.py) ----------------

class FakeWorld:
    def __init__(self, rank, host):
        self.rank, self.host = rank, host


def ranks_probe(hosts_of_ranks, expected_gbits=None, **agent_bounds):
    """Every rank of a job whose rank r runs on hosts_of_ranks[r] (loopback names), one thread each,
    exchanging objects the way dist.allgather_object does: [(record, lines)] in rank order."""
    from suite.train import linkprobe_by_ranks
    size = len(hosts_of_ranks)
    table = [{"rank": rank, "host": host} for rank, host in enumerate(hosts_of_ranks)]
    exchanges, barrier, results = {}, threading.Barrier(size), [None] * size

    def allgather_object(value, name):
        exchanges.setdefault(name, [None] * size)[rank_of[threading.get_ident()]] = value
        barrier.wait(timeout=60)
        return list(exchanges[name])

    rank_of = {}

    def run(rank):
        rank_of[threading.get_ident()] = rank
        results[rank] = linkprobe_by_ranks.probe(FakeWorld(rank, hosts_of_ranks[rank]), table,
                                                 allgather_object, expected_gbits, **agent_bounds)

    threads = [threading.Thread(target=run, args=(rank,)) for rank in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_the_first_rank_of_each_host_probes_and_every_rank_gets_the_verdict():
    # Two "hosts" that both reach this machine's loopback, two ranks each.
    results = ranks_probe(["127.0.0.1", "127.0.0.1", "localhost", "localhost"], seconds=0.3)
    record, lines = results[0]
    assert all(result == results[0] for result in results)
    assert lines == [] and record["slow_hosts"] == [] and record["measured_by"] == "ranks"
    assert sorted(record["hosts"]) == ["127.0.0.1", "localhost"]
    assert all(h["send_gbits"] > 0 and h["receive_gbits"] > 0 for h in record["hosts"].values()), record


def test_a_host_no_peer_can_reach_is_named_and_require_links_stops():
    from suite.train import linkprobe_by_ranks, network
    # A name that resolves nowhere: its peer cannot connect to it, whatever it sends itself.
    results = ranks_probe(["127.0.0.1", "no-such-host.invalid"], seconds=0.2, connect_seconds=1)
    record, lines = results[0]
    assert record["slow_hosts"] == ["no-such-host.invalid"]
    assert lines == ["host no-such-host.invalid: the link probe could not connect to it from 127.0.0.1"]
    with pytest.raises(network.NetworkError, match="^--require-links: host no-such-host.invalid: "):
        linkprobe_by_ranks.check_required(lines)
    linkprobe_by_ranks.check_required([])  # nothing named: the run goes on
