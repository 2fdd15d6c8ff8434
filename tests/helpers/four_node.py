"""hostfiles/4node with its placeholder filled in, as the headline command's dry run asks: the names the
four-host namespace cluster (conftest.py's four_hosts) and bench/rank_scaling.py give their hosts."""
import os

from helpers.running import REPO

# The shipped hostfile of the headline command, and what its dry run asks a user to put for REPLACE-ME.
FOUR_NODE_HOSTFILE = os.path.join(REPO, "hostfiles", "4node")
CLUSTER_DOMAIN = "cluster.test"


def filled_hostfile(folder, slots=None):
    """A copy of hostfiles/4node with its placeholder replaced, as the dry run says; optionally with
    every host's slots=8 set to `slots` (the 8-rank copy)."""
    from suite.common.profiles import PLACEHOLDER
    with open(FOUR_NODE_HOSTFILE) as handle:
        text = handle.read().replace(PLACEHOLDER, CLUSTER_DOMAIN)
    if slots is not None:
        text = text.replace("slots=8", f"slots={slots}")
    path = os.path.join(str(folder), "4node" if slots is None else f"4node-{slots}slots")
    with open(path, "w") as handle:
        handle.write(text)
    return path
