"""The launcher's link-probe verdict, handed to the ranks through their environment.

suite.cluster.launch probes every host's link before the launch (suite.cluster.linkprobe); horovodrun
forwards the launcher's environment to every rank, and rank 0 keeps the verdict in env.json beside
the job's own allreduce probe. Base64, so that no launcher has to quote it on its way.
"""
import base64
import json

VARIABLE = "SUITE_LINK_PROBE"


def to_environment(record):
    return base64.urlsafe_b64encode(json.dumps(record, separators=(",", ":")).encode()).decode()


def from_environment(environ):
    """The launcher's verdict, or None when it ran no link probe (or the value is not one of its own)."""
    try:
        return json.loads(base64.urlsafe_b64decode(environ[VARIABLE].encode()))
    except (KeyError, ValueError):
        return None
