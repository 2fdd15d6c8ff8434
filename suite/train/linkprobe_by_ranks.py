"""Each host's link, measured by the ranks themselves before run_start when no launcher probed it.

suite.cluster.launch probes every host's link over SSH before it launches and hands the verdict to
the ranks through their environment. A raw `horovodrun`, `mpirun` or `srun` has no such step, so
there the first rank of each host runs the same agent (suite/common/linkprobe.py): it listens on a
free port, the ranks exchange the ports, every agent sends to its ring peers while the other ranks
wait in the next exchange, and every rank gets the same verdict (and so runs a confirming second pass
alike). About three seconds at the default round length, six when a host is suspected; a peer that
cannot be reached costs at most the agent's connect bound.
"""
import itertools

from suite.common import linkprobe
from suite.train.network import NetworkError


def probe(world, ranks, allgather_object, expected_gbits=None, seconds=linkprobe.ROUND_SECONDS,
          connect_seconds=linkprobe.CONNECT_SECONDS):
    """(the env.json record, one line per named host). ranks: every rank's {"rank", "host"}, in order.

    The hosts are named as the ranks see themselves (their host name), which is also how a peer
    reaches them: a launcher that started ranks on a host by that name has it resolved everywhere.
    """
    first_rank = {}
    for rank in ranks:
        first_rank.setdefault(rank["host"], rank["rank"])
    hosts = list(first_rank)
    agent_here = first_rank[world.host] == world.rank
    pass_numbers = itertools.count()

    def run_pass():
        tag = f"link_probe_{next(pass_numbers)}"
        listener = linkprobe.listen(0) if agent_here else None
        # Horovod: every rank takes part in both exchanges, so that all of them wait for the probe.
        ports = allgather_object(listener.getsockname()[1] if listener else None, f"{tag}_ports")
        answer = None
        if agent_here:
            answer = linkprobe.agent(hosts, hosts.index(world.host), listener,
                                     [ports[first_rank[host]] for host in hosts], seconds, connect_seconds)
        answers = allgather_object(answer, f"{tag}_answers")
        return {host: answers[first_rank[host]] for host in hosts}, None

    return linkprobe.measure(hosts, run_pass, expected_gbits, measured_by="ranks")


def check_required(lines):
    """--require-links: raises NetworkError (a verdict every rank reaches alike) naming every named host."""
    if lines:
        raise NetworkError("--require-links: " + "; ".join(lines))
