"""The node check every job runs on each node before it starts (templates/node-check.sh), filled in."""
import shlex
from dataclasses import dataclass

from suite.cluster.deploy.job import fill
from suite.common import profiles

# OCI's instance metadata, as Oracle's own scripts read the shape (oracle-quickstart/oci-hpc
# playbooks/roles/nccl-conf/tasks/main.yml: curl -H "Authorization: Bearer Oracle" ...). Only the
# rendered script on a node contacts it; the tests point SUITE_METADATA_URL at a stand-in on 127.0.0.1.
METADATA_URL = "http://169.254.169.254/opc/v2/instance/"


@dataclass(frozen=True)
class Needs:
    """What the launch needs of a node besides the profile's shape, GPUs and RDMA devices."""

    pyxis: bool = False
    pmix_hook: bool = False
    suite_dir: str = ""
    python: str = ""
    # The oldest NVIDIA driver the job's image needs (dockerfile.min_nvidia_driver); empty: not checked.
    min_driver: str = ""


def render(profile, needs, env):
    """The node check as a bash script for this profile and launch; env is the job's (NCCL_IB_HCA)."""
    return fill("node-check.sh", {
        "profile": shlex.quote(profile.name), "shapes": shlex.quote(" ".join(profile.shapes)),
        "gpus": profile.gpus_per_node, "rdma_devices": shlex.quote(" ".join(profiles.rdma_devices(env))),
        "need_pyxis": "yes" if needs.pyxis else "no", "need_pmix_hook": "yes" if needs.pmix_hook else "no",
        "suite_dir": shlex.quote(needs.suite_dir), "suite_python": shlex.quote(needs.python),
        "min_driver": shlex.quote(needs.min_driver), "metadata_url": METADATA_URL,
        "profile_cases": _profile_cases()})


def summary(profile, needs, env):
    """What the check looks at, for the comment above it."""
    parts = []
    if profile.shapes:
        parts.append(f"the shape, {' or '.join(profile.shapes)}")
    if needs.pyxis:
        parts.append("Pyxis in srun")
    if needs.pmix_hook:
        parts.append("enroot's PMIx hook")
    if needs.python:
        parts.append("the suite and its Python")
    if profile.gpus_per_node:
        parts.append(f"{profile.gpus_per_node} GPUs")
    if needs.min_driver:
        parts.append(f"an NVIDIA driver of {needs.min_driver} or newer")
    if profiles.rdma_devices(env):
        parts.append("the RDMA devices of NCCL_IB_HCA")
    return ", ".join(parts) or "nothing beyond the node answering"


def _profile_cases():
    """`case` arms naming the shipped profile written for each shape."""
    arms = []
    for name in profiles.available():
        shapes = profiles.load(name).shapes
        if shapes:
            arms.append(f"    {'|'.join(shapes)}) echo {name} ;;")
    return "\n".join(arms)
