"""Before a multi-host launch: every host's link, measured by an agent started over SSH on each host at once.

The agents and the verdict are suite/common/linkprobe.py (the ranks run the same agents themselves
under a raw launcher, suite/train/linkprobe_by_ranks.py); this is the login node's part, beside the host
check of suite/cluster/preflight.py: `python -m suite.cluster.preflight_links` on each host, its command
line built (agent_command) and read (main) here.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from suite.cluster.preflight import start_on
from suite.common.linkprobe import CONNECT_SECONDS, ROUND_SECONDS, agent, listen, measure, offsets

DEFAULT_PORT = 29517
# What starts the agent's one line of answer on its standard output, over SSH.
MARK = "LINKS "


def agent_command(python, hosts, index, port, seconds=ROUND_SECONDS, connect_seconds=CONNECT_SECONDS):
    return [python, "-m", "suite.cluster.preflight_links", "--hosts", ",".join(hosts), "--index", str(index),
            "--port", str(port), "--seconds", str(seconds), "--connect-seconds", str(connect_seconds)]


def check_links(hosts, python=sys.executable, directory=None, profile=None):
    """(the verdict for env.json, one line per named host) for every host of a hostfile, each against
    its ring peers; a second pass when the first suspects a host for its rate."""
    names = [host.name for host in hosts]
    directory = directory or os.getcwd()
    expected = profile.expected_link_gbits if profile is not None else None
    return measure(names, lambda: probe_hosts(names, lambda host, argv: start_on(host, argv, directory),
                                              python=python),
                   expected, measured_by="launcher")


def probe_hosts(hosts, start, python=sys.executable, port=DEFAULT_PORT, seconds=ROUND_SECONDS,
                connect_seconds=CONNECT_SECONDS):
    """Starts an agent on every host at once; `start(host, argv)` gives a Popen (over SSH or here).

    Returns (answers, failures) as verdict() takes them; an agent silent past the bound is killed.
    """
    bound = connect_seconds + len(offsets(len(hosts))) * seconds + 15
    jobs = {host: start(host, agent_command(python, hosts, index, port, seconds, connect_seconds))
            for index, host in enumerate(hosts)}
    answers, failures, deadline = {}, {}, time.monotonic() + bound
    for host, job in jobs.items():
        try:
            out, err = job.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            job.kill()
            job.communicate()
            answers[host], failures[host] = None, f"no answer within {bound:.0f} s"
            continue
        lines = [line for line in out.splitlines() if line.startswith(MARK)]
        answers[host] = json.loads(lines[-1][len(MARK):]) if lines else None
        if not lines:
            failures[host] = (err.strip().splitlines() or [f"exit code {job.returncode}"])[-1]
    return answers, failures


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="One host's part of the link probe (the launcher starts it on every host).")
    parser.add_argument("--hosts", required=True, help="every host of the ring, comma-separated, in order")
    parser.add_argument("--index", type=int, required=True, help="this host's place in --hosts")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--seconds", type=float, default=ROUND_SECONDS, help="length of each round")
    parser.add_argument("--connect-seconds", type=float, default=CONNECT_SECONDS)
    args = parser.parse_args(argv)
    hosts = args.hosts.split(",")
    try:
        answer = agent(hosts, args.index, listen(args.port), [args.port] * len(hosts), args.seconds,
                       args.connect_seconds)
    except OSError as err:
        print(f"error: link probe on {args.hosts.split(',')[args.index]}: {err}", file=sys.stderr)
        return 2
    print(MARK + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
