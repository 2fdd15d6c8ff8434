"""The sbatch script: srun in a Pyxis container, one task per GPU."""
import re
import shlex

from suite.cluster.deploy.job import (DATA_MOUNT, RESULTS_MOUNT, SUITE_DIR, DeployError, check_flag, fill,
                                      header, shell_word)

# Host paths end up unquoted in #SBATCH lines and in Pyxis' comma/colon-separated mount list.
HOST_PATH = re.compile(r"^/[A-Za-z0-9._/+@-]*$")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,-]+$")
SLURM_TIME = re.compile(r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$")


def render(job, args):
    """An sbatch script: one srun --mpi=pmix step in a Pyxis container, one task per GPU."""
    data, results = host_path("--data", job.data), host_path("--results", job.results)
    check_flag("--time", args.time, SLURM_TIME, "a Slurm time limit such as 04:00:00 or 1-00:00:00")
    if job.profile.mpi_args:
        job.notes.append("the profile's mpi_args do not apply under srun")
    extra = []
    for key, value in (("partition", args.partition), ("account", args.account)):
        if value:
            check_flag(f"--{key}", value, SLURM_NAME, "letters, digits, '_', '.', '-' or ','")
            extra.append(f"#SBATCH --{key}={value}")
    return fill("slurm.sbatch", {
        "header": header(job, "Slurm batch script"), "run_id": job.run_id, "nodes": job.nodes,
        "gpus": job.gpus, "time": args.time, "sbatch_extra": "\n".join(extra),
        "image": shlex.quote(pyxis_image(job.image)), "data": data, "results": results,
        "profile_line": f"Cluster profile {job.profile.name} (version {job.profile.version}), --env "
                        f"overrides and Horovod tuning.",
        "exports": "\n".join(f"export {key}={shell_word(value)}" for key, value in sorted(job.env.items())),
        "container_env": f"--container-env={','.join(sorted(job.env))} \\" if job.env else "",
        "data_mount": DATA_MOUNT, "results_mount": RESULTS_MOUNT, "workdir": SUITE_DIR,
        "command": shlex.join(job.model_command())})


def host_path(flag, value):
    if not HOST_PATH.match(value):
        raise DeployError(f"{flag} {value}: Slurm needs an absolute host path of letters, digits and "
                          f"'._/+@-' (Pyxis mounts are a ',' and ':' separated list)")
    return value


def pyxis_image(image):
    """Pyxis (enroot) wants registry#image:tag; registry/image:tag would be read as a Docker Hub path."""
    if image.startswith(("/", "./")) or "#" in image:
        return image
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image
