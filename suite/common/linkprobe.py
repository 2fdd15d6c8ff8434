"""Which host's link is slow: every host against three peers of the ring, over TCP, in rounds.

The job-wide allreduce probe says how fast the job's network is; one slow link lowers it and it cannot
say where. Here each host runs an agent, all at once: started over SSH by suite.cluster.launch before
a launch (suite/cluster/preflight_links.py), or, under a raw horovodrun, mpirun or srun, by each host's
first rank before run_start (suite/train/linkprobe_by_ranks.py). In each round every
host sends to the host at a fixed offset along the ring for a fixed time while receiving from the
host at the same offset behind it: offsets +1, -1 and +2 (its two neighbours and the host across),
fewer where the ring is smaller. Why this and not every pair: all hosts run each round at once, so
the probe costs three rounds whatever the number of hosts (every pair in rounds costs N-1 of them),
yet each host's sending and its receiving are measured against up to three different peers. A host's
figure in a direction is the best of its peers', so it is named only when every peer sees it slow:
a slow host does not drag its neighbours in, and one transfer slowed by the machine's own noise (a
busy core) does not name a host. With two hosts the peers are one, and a slow direction names the
host that sent (or received) it.

A transfer's rate is the receiver's count of bytes over the time they took (what the sender's kernel
buffered but never delivered does not count). A host is named when its slower direction is below
WARN_BELOW of the profile's expected_link_gbits, or, without that figure, below PEER_FRACTION of the
median of its peers. A host whose agent does not answer (unreachable, a hung probe) is named too,
within connect_seconds + the rounds + a margin.

A host named for its rate alone is measured again before it is named (measure()): a second pass of
the same rounds, and each direction's figure is the best of both passes. A degraded cable is slow in
both; a host whose transfers met a burst of load elsewhere on its cores (a neighbour's job, a
daemon) is not, and a probe that cries wolf teaches users to ignore it. A healthy cluster pays for the
second pass only when a first one suspected a host; a host that gave no answer is named at once, so
the bound on an unreachable or hung host does not double.

The launcher hands its verdict to the ranks through their environment (environment_entry()), and
rank 0 keeps it in env.json, as the ranks' own probe does.
"""
import base64
import json
import socket
import statistics
import threading
import time

from suite.common.busbw import WARN_BELOW

# Without a figure in the profile a host is slow below this share of its peers' median rate.
PEER_FRACTION = 0.5
ROUND_SECONDS = 1.0
CONNECT_SECONDS = 10.0
CHUNK = 256 * 1024


# ---- the agent, on every host ---------------------------------------------------------------------

def listen(port=0):
    """This host's listening socket (port 0: any free one, for ranks that then share theirs)."""
    return socket.create_server(("", port), backlog=8)


def agent(hosts, index, listener, ports, seconds=ROUND_SECONDS, connect_seconds=CONNECT_SECONDS):
    """Both rounds on host hosts[index], listening on `listener`, reaching host i at ports[i].

    Returns {"host", "received": [{round, from, bytes, seconds}], "errors", "unreached": [index]}.
    """
    rounds = offsets(len(hosts))
    received, errors, unreached = [], [], []
    listener.settimeout(connect_seconds + len(rounds) * seconds + 5)
    receivers = [threading.Thread(target=_receive, args=(listener, received, errors), daemon=True)
                 for _ in rounds]
    for thread in receivers:
        thread.start()
    for round_number, offset in enumerate(rounds):
        target = (index + offset) % len(hosts)
        if not _send(hosts[target], ports[target], round_number, index, seconds, connect_seconds, errors):
            unreached.append(target)
    for thread in receivers:
        thread.join(timeout=connect_seconds + len(rounds) * seconds + 10)
    listener.close()
    return {"host": hosts[index], "received": received, "errors": errors, "unreached": unreached}


def offsets(count):
    """The rounds' offsets along a ring of `count` hosts: +1, -1, +2, each distinct peer once."""
    found = []
    for offset in (1, -1, 2):
        offset %= count
        if offset and offset not in found:
            found.append(offset)
    return found


def _send(host, port, round_number, index, seconds, connect_seconds, errors):
    """One round's transfer to host:port; False when no connection could be made to it."""
    deadline = time.monotonic() + connect_seconds
    while True:  # the peer's listener may come up a moment after this one
        try:
            connection = socket.create_connection((host, port), timeout=max(0.5, deadline - time.monotonic()))
            break
        except OSError as err:
            if time.monotonic() > deadline:
                errors.append(f"round {round_number}: cannot reach {host}:{port} ({err})")
                return False
            time.sleep(0.2)
    payload = bytes(CHUNK)
    with connection:
        connection.settimeout(seconds + connect_seconds)
        try:
            connection.sendall(json.dumps({"round": round_number, "from": index}).encode().ljust(64))
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                connection.sendall(payload)
        except OSError as err:
            errors.append(f"round {round_number}: sending to {host} failed ({err})")
    return True


def _receive(listener, received, errors):
    try:
        connection, _ = listener.accept()
    except OSError as err:
        errors.append(f"no peer connected ({err})")
        return
    with connection:
        connection.settimeout(listener.gettimeout())
        try:
            header = json.loads(_read_exactly(connection, 64))
            total, start = 0, None
            while data := connection.recv(4 * CHUNK):
                start = start or time.monotonic()
                total += len(data)
            elapsed = time.monotonic() - (start or time.monotonic())
        except (OSError, ValueError) as err:
            errors.append(f"receiving failed ({err})")
            return
    received.append({"round": header["round"], "from": header["from"], "bytes": total, "seconds": elapsed})


def _read_exactly(connection, size):
    data = b""
    while len(data) < size:
        more = connection.recv(size - len(data))
        if not more:
            raise ValueError("the peer closed before its header")
        data += more
    return data


# ---- the verdict, where the agents' answers come together -----------------------------------------

def measure(hosts, run_pass, expected_gbits=None, measured_by=None):
    """(record, lines) of one pass of run_pass() -> (answers, failures), and of a second when the first
    named a host for its rate alone (never for a missing answer). Whoever calls it on several machines
    gets the same verdict from the same answers, so all of them run the second pass or none does."""
    answers, failures = run_pass()
    record, lines = verdict(hosts, answers, expected_gbits, failures, measured_by)
    if not record["slow_hosts"] or not all(_named_for_rate(record, host) for host in record["slow_hosts"]):
        return record, lines
    again, failures = run_pass()
    record, lines = verdict(hosts, _both_passes(answers, again), expected_gbits, failures, measured_by)
    record["passes"] = 2
    return record, lines


def _named_for_rate(record, host):
    figures = record["hosts"][host]
    return figures["send_gbits"] is not None and figures["receive_gbits"] is not None


def _both_passes(first, second):
    """The second pass's answers, each with the first pass's transfers too (rates() keeps the best)."""
    both = {}
    for host, answer in second.items():
        earlier = first.get(host)
        both[host] = answer if answer is None or earlier is None else {
            **answer, "received": earlier["received"] + answer["received"]}
    return both


def rates(hosts, answers):
    """{host: {"send_gbits", "receive_gbits"}}: each direction's best figure over its peers."""
    found = {host: {"send": [], "receive": []} for host in hosts}
    for answer in answers.values():
        for row in answer["received"] if answer else []:
            gbits = 8 * row["bytes"] / max(row["seconds"], 1e-6) / 1e9
            found[answer["host"]]["receive"].append(gbits)
            found[hosts[row["from"]]]["send"].append(gbits)
    return {host: {"send_gbits": max(f["send"], default=None),
                   "receive_gbits": max(f["receive"], default=None)} for host, f in found.items()}


def verdict(hosts, answers, expected_gbits=None, failures=None, measured_by=None):
    """The record for env.json and the report, and one line per named host.

    answers: {host: an agent's answer, or None where it gave none}; failures: {host: why not};
    measured_by: who ran the agents ("launcher" or "ranks"), kept in the record."""
    measured = rates(hosts, answers)
    slowest = {host: min([v for v in m.values() if v is not None], default=None)
               for host, m in measured.items()}
    lines, slow = [], []
    for host in hosts:
        if answers.get(host) is None:
            why = (failures or {}).get(host, "no reply")
            lines.append(f"host {host}: the link probe got no answer from it ({why})")
            slow.append(host)
            continue
        unreachable_from = _unreachable_from(hosts, answers, host)
        if unreachable_from and measured[host]["receive_gbits"] is None:
            # No peer got through to it: its name does not resolve there, a firewall, a wrong address.
            lines.append(f"host {host}: the link probe could not connect to it from "
                         f"{', '.join(unreachable_from)}")
            slow.append(host)
            continue
        rate = slowest[host]
        bar, against = _bar(host, slowest, expected_gbits)
        if rate is None or bar is None or rate >= bar:
            continue
        direction = "sending" if measured[host]["send_gbits"] == rate else "receiving"
        lines.append(f"host {host}: its link measured {rate:.3g} Gbit/s {direction}, below {bar:.3g} Gbit/s "
                     f"({against})")
        slow.append(host)
    record = {"method": f"ring peers at offsets {offsets(len(hosts))}, a round each",
              "expected_link_gbits": expected_gbits,
              "hosts": {host: {**measured[host], "named": host in slow} for host in hosts},
              "slow_hosts": slow, "lines": lines, "measured_by": measured_by, "passes": 1}
    return record, lines


def _unreachable_from(hosts, answers, host):
    """The hosts whose agent could not connect to `host`."""
    target = hosts.index(host)
    return [answer["host"] for answer in answers.values()
            if answer and target in answer.get("unreached", ())]


def _bar(host, slowest, expected_gbits):
    if expected_gbits:
        bar = WARN_BELOW * expected_gbits
        return bar, f"{100 * WARN_BELOW:.0f}% of the profile's {expected_gbits:g} Gbit/s"
    peers = [rate for other, rate in slowest.items() if other != host and rate is not None]
    if not peers:
        return None, None
    median = statistics.median(peers)
    return PEER_FRACTION * median, f"{100 * PEER_FRACTION:.0f}% of its peers' median {median:.3g} Gbit/s"


# ---- the launcher's verdict, handed to the ranks through their environment ------------------------
# horovodrun forwards the launcher's environment to every rank, and rank 0 keeps the verdict in
# env.json beside the job's own allreduce probe. Base64, so that no launcher has to quote it on its way.

ENVIRONMENT_VARIABLE = "SUITE_LINK_PROBE"


def environment_entry(record):
    """{variable: value} that hands the verdict `record` to the ranks, for a launch's environment."""
    return {ENVIRONMENT_VARIABLE: base64.urlsafe_b64encode(
        json.dumps(record, separators=(",", ":")).encode()).decode()}


def from_environment(environ):
    """The launcher's verdict, or None when it ran no link probe (or the value is not one of its own)."""
    try:
        return json.loads(base64.urlsafe_b64decode(environ[ENVIRONMENT_VARIABLE].encode()))
    except (KeyError, ValueError):
        return None
