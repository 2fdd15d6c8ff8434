"""The report's section on each host's link: what the link probe measured before each run.

suite.cluster.launch probes every host against its ring neighbours before a multi-host launch
(suite/cluster/preflight_links.py); under a raw launcher the ranks run the same probe themselves
(suite/train/linkprobe_by_ranks.py). Either way the verdict is in env.json (network.links). A host
named there is named here, with its figures, so that a low scaling figure can be traced to one node.
"""
from suite.cluster.report.formats import fmt


def blocks(data):
    """The section's blocks: a table of every run's hosts, or none when no run probed its links."""
    rows = [row for scale in data.scales for run in scale.runs for row in _rows(scale, run)]
    if not rows:
        return []
    named = sorted({row[2] for row in rows if row[-1] != "ok"})
    intro = ("Before each multi-host launch every host sent to and received from up to three peers of the "
             "ring over TCP (a round each); a host's figure is the best of its peers in each direction, and "
             "it is named when its slower direction falls below the profile's expected_link_gbits (80 % "
             "of it) or half its peers' median, in a second pass too when the first suspected it. ")
    intro += (f"Named: {', '.join(named)}." if named else "No host was named.")
    header = ["system", "run", "host", "sends (Gbit/s)", "receives (Gbit/s)", "verdict"]
    return [("h2", "Links per host (measured before the launch)"), ("p", intro), ("table", header, rows)]


def _rows(scale, run):
    links = ((run.env or {}).get("network") or {}).get("links")
    if not links:
        return []
    return [[scale.system, str(run.index), host, fmt(figures.get("send_gbits"), ".3g"),
             fmt(figures.get("receive_gbits"), ".3g"), "SLOW" if figures.get("named") else "ok"]
            for host, figures in links.get("hosts", {}).items()]
