"""What an entry point does before Horovod starts: its rank from the launcher, the cluster profile applied."""
import os

from suite.common import profiles


def env_rank():
    """This process's rank from the launcher's variables, for gating messages before Horovod starts."""
    for key in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(key, "").isdigit():
            return int(os.environ[key])
    return 0


def apply_profile(name_or_path, environ=os.environ):
    """(profile, what applying it did), or (None, None); before Horovod, MPI or NCCL read anything."""
    if not name_or_path:
        return None, None
    profile = profiles.load(name_or_path)
    return profile, profiles.apply(profile, environ)
