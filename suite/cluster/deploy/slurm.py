"""The sbatch script: a node check on every node, then srun in a Pyxis container or on bare metal."""
import os
import re
import shlex
import sys
import textwrap

from suite.cluster.deploy import dockerfile, nodecheck, slurmsweep
from suite.cluster.deploy.job import (DATA_MOUNT, REPO, RESULTS_MOUNT, SUITE_DIR, DeployError, ask,
                                      check_flag, fill, header, shell_word)

# Host paths end up unquoted in #SBATCH lines and in Pyxis' comma/colon-separated mount list.
HOST_PATH = re.compile(r"^/[A-Za-z0-9._/+@-]*$")
SLURM_NAME = re.compile(r"^[A-Za-z0-9_.,-]+$")
SLURM_TIME = re.compile(r"^([0-9]+-)?[0-9]+(:[0-9]{2}){0,2}$")
MPI_CHOICES = ("auto", "pmix", "pmi2")


def choose_mpi(asked, bare_metal):
    """(srun --mpi type, the reason, for a comment in the script)."""
    if asked != "auto":
        return asked, f"--mpi {asked}, as rendered with --mpi {asked}."
    if bare_metal:
        return "pmix", ("--mpi auto on bare metal: pmix. The host's Open MPI takes PMIx from srun "
                        "(oracle-quickstart/oci-hpc samples/gpu/nccl_run_allreduce_srun.sbatch runs "
                        "srun --mpi=pmix_v3); pmi2 needs Open MPI's s1/s2 components, which Debian's "
                        "build has none of.")
    return "pmi2", ("--mpi auto in a Pyxis container: pmi2, as oracle-quickstart/oci-hpc's container "
                    "samples run (samples/gpu/nccl_run_allreduce_containers_with_ordering.sbatch): its "
                    "file descriptor reaches the container as it is, while pmix there needs enroot's "
                    "50-slurm-pmi.sh hook, which enroot installs disabled and oci-hpc does not enable.")


def render(job, args):
    """An sbatch script: srun --mpi=list checked, the node check on every node, then the job's step."""
    data, results = host_path("--data", job.data), host_path("--results", job.results)
    check_flag("--time", args.time, SLURM_TIME, "a Slurm time limit such as 04:00:00 or 1-00:00:00")
    if job.profile.mpi_args:
        job.notes.append("the profile's mpi_args do not apply under srun")
    bare_metal = args.bare_metal
    if args.sweep:
        slurmsweep.check(job, args)
    mpi, mpi_reason = choose_mpi(args.mpi, bare_metal)
    extra = [f"#SBATCH --{key}={value}" for key, value in cluster_names(args)]
    check_partition_size(job.nodes, args.partition)
    numa = numa_binding(job, args)
    values = {
        "header": header(job, "Slurm batch script" + (" (bare metal)" if bare_metal else "")),
        "run_id": job.run_id, "nodes": job.nodes, "tasks": job.tasks, "time": args.time,
        "gpus_line": f"#SBATCH --gpus-per-node={job.gpus}" if job.gpus else "",
        "sbatch_extra": "\n".join(extra), "data": data, "results": results,
        "mpi": mpi, "mpi_reason": comment(mpi_reason),
        "exports": "\n".join(f"export {key}={shell_word(value)}" for key, value in sorted(job.env.items())),
        "cpu_bind": "ldoms" if numa else "none",
    }
    profile_line = (f"Cluster profile {job.profile.name} (version {job.profile.version}), --env overrides "
                    f"and Horovod tuning. srun hands this environment to every task (--export=ALL).")
    if bare_metal:
        suite_dir, python = bare_metal_paths(job, args)
        job.python = python
        where = BARE_METAL_WHERE.format(suite_dir=shlex.quote(suite_dir), python=shlex.quote(python))
        # The interpreter and paths by the variables above, which the node check also looks at.
        command = " ".join(['"$PYTHON"', shlex.join(["-m", job.model, "--preset", job.preset]),
                            '--data-dir "$DATA_DIR" --run-dir "$RUN_DIR"', shlex.join(job.model_args)])
        values.update(where=where, env_note=comment(profile_line),
                      launch=_lines(['--chdir="$SUITE_DIR"', command.rstrip()]))
        if args.sweep:
            values["main_step"] = slurmsweep.render_step(job, args, numa)
    else:
        suite_dir = python = ""
        launch = ['--container-image="$IMAGE"']
        if job.env:
            launch.append(f"--container-env={','.join(sorted(job.env))}")
        launch += [f'--container-mounts="$DATA_DIR":{DATA_MOUNT}:ro,"$RESULTS_DIR":{RESULTS_MOUNT}',
                   f"--container-workdir={SUITE_DIR}", shlex.join(job.model_command())]
        values.update(where=CONTAINER_WHERE.format(image=shlex.quote(pyxis_image(job.image))),
                      env_note=comment(profile_line + CONTAINER_ENV_NOTE), launch=_lines(launch))
    checks = nodecheck.Needs(pyxis=not bare_metal, pmix_hook=not bare_metal and mpi == "pmix",
                             suite_dir=suite_dir, python=python,
                             min_driver=dockerfile.min_nvidia_driver(job.image))
    looked_at = nodecheck.summary(job.profile, checks, job.env)
    values.update(node_check=nodecheck.render(job.profile, checks, job.env).rstrip("\n"),
                  node_checks=comment(f"Step 2, one task on every node: what the main step needs of each "
                                      f"node ({looked_at}), in seconds; the first problem stops the job "
                                      f"with one line naming the node and the fix."),
                  layout=comment(f"Step 3, the {'sweep' if args.sweep else 'job'}: {_layout(job)} "
                                 f"{NUMA_REASON if numa else NO_NUMA_REASON[bool(job.gpus)]}"))
    values.setdefault("main_step", f'srun --mpi="$MPI" --ntasks-per-node={job.tasks} '
                                   f'--cpu-bind={values["cpu_bind"]} --export=ALL '
                                   f'--wait={job.profile.timeouts.task_exit_seconds} \\\n{values["launch"]}')
    return fill("slurm.sbatch", values)


CONTAINER_WHERE = """\
# Pyxis image (an enroot URI, registry#image:tag, or a squashfs file on the shared file system, made
# once with `enroot import`: docs/gpu-workflow.md) and host paths on the shared file system.
readonly IMAGE={image}"""
BARE_METAL_WHERE = """\
# Bare metal, no container: the suite and its environment on the shared file system, as recorded when
# this was rendered (--suite-dir, --python); every node runs them from there.
readonly SUITE_DIR={suite_dir}
readonly PYTHON={python}"""
CONTAINER_ENV_NOTE = (" Inside the container, Pyxis lets the image's own value of a variable win over the "
                      "host's, except for the variables named in --container-env (NVIDIA/pyxis README.md, "
                      "--container-env; tests/env.bats; Pyxis 0.15.0 and later): srun below names every "
                      "one of these, so the values here are the ones the ranks see.")
NUMA_REASON = ("--cpu-bind=ldoms: each task bound to a NUMA locality domain (srun's ldoms), as "
               "oracle-quickstart/oci-hpc binds its GPU runs (--bind-to numa in "
               "samples/gpu/nccl_run_allreduce.sbatch); the A100 shapes have 8 domains, one for each task, "
               "and a rank's input pipeline keeps its domain's cores and memory. --no-numa-bind renders "
               "--cpu-bind=none.")
NO_NUMA_REASON = {
    True: "--cpu-bind=none, as rendered with --no-numa-bind: every task may run on every core.",
    False: "--cpu-bind=none: a CPU profile's ranks share the node's cores (--numa-bind binds each task "
           "to a NUMA domain).",
}


def comment(text):
    """text as comment lines of at most 100 characters."""
    return textwrap.fill(text, 100, initial_indent="# ", subsequent_indent="# ", break_on_hyphens=False,
                         break_long_words=False)


def _lines(parts):
    return " \\\n".join(f"    {part}" for part in parts)


def _layout(job):
    if job.gpus:
        return (f"one task per GPU, {job.tasks} a node. Every task sees the node's {job.gpus} GPUs and "
                f"pins the one of its local rank (suite/train/dist.py), so NCCL keeps NVLink between them.")
    return f"{job.tasks} CPU task(s) a node (--ntasks-per-node); no GPU is requested or checked."


def numa_binding(job, args):
    """On unless --no-numa-bind: GPU ranks bound to NUMA domains; a CPU profile's only with --numa-bind."""
    return bool(job.gpus) if args.numa_bind is None else args.numa_bind


def bare_metal_paths(job, args):
    """The suite checkout and the interpreter every node runs, as absolute host paths."""
    suite_dir = host_path("--suite-dir", args.suite_dir or REPO)
    python = host_path("--python", args.python or os.path.abspath(sys.executable))
    # Where this machine sees them (the login node usually mounts the shared file system too), they
    # must be what they claim; elsewhere the node check looks on every node.
    if os.path.isdir(suite_dir) and not os.path.isfile(os.path.join(suite_dir, "suite", "__init__.py")):
        raise DeployError(f"--suite-dir {suite_dir}: holds no suite (no suite/__init__.py)")
    if os.path.exists(python) and not os.access(python, os.X_OK):
        raise DeployError(f"--python {python}: not an executable")
    return suite_dir, python


def cluster_names(args):
    """(key, value) of --partition and --account, refused where this machine's Slurm says they are unknown."""
    found = []
    for key, value, known in (("partition", args.partition, partitions),
                              ("account", args.account, accounts)):
        if not value:
            continue
        check_flag(f"--{key}", value, SLURM_NAME, "letters, digits, '_', '.', '-' or ','")
        names = known()
        if names is not None and value not in names:
            raise DeployError(f"--{key} {value}: not a {key} this cluster knows ({', '.join(sorted(names))})")
        found.append((key, value))
    return found


def partitions():
    """The partitions sinfo lists here; None where it cannot tell (no Slurm client, no answer)."""
    return _query(["sinfo", "--noheader", "--format=%R"])


def check_partition_size(nodes, partition):
    """Refuses more nodes than the partition has where sinfo tells: Slurm would queue the job for ever
    (EnforcePartLimits=NO, its default) and say why only in `scontrol show job`."""
    sizes, default = partition_sizes()
    name = partition or default
    size = sizes.get(name)
    if size is None or nodes <= size:
        return
    larger = sorted(other for other, count in sizes.items() if count >= nodes)
    instead = f", or --partition {' or '.join(larger)}" if larger else ""
    raise DeployError(f"--nodes {nodes}: partition {name} has {size} node(s) (sinfo); render with "
                      f"--nodes {size} or fewer{instead}")


def partition_sizes():
    """({partition: node count}, the default partition) as sinfo tells; ({}, None) where it cannot."""
    sizes, default = {}, None
    for line in (ask(["sinfo", "--noheader", "--format=%P %D"]) or "").splitlines():
        fields = line.split()
        if len(fields) != 2 or not fields[1].isdigit():
            continue
        name = fields[0].rstrip("*")
        if fields[0].endswith("*"):
            default = name
        # sinfo prints a line for each state the partition's nodes are in.
        sizes[name] = sizes.get(name, 0) + int(fields[1])
    return sizes, default


def accounts():
    """The accounts sacctmgr lists for this user; None where it cannot tell (no accounting, no answer)."""
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    return _query(["sacctmgr", "--noheader", "--parsable2", "show", "associations", f"user={user}",
                   "format=Account"]) if user else None


def _query(argv):
    names = {line.split()[0].rstrip("|*") for line in (ask(argv) or "").splitlines() if line.strip()}
    return names or None


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
