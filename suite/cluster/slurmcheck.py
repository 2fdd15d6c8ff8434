"""What srun and the MPI under it can do, checked before suite.cluster.launch starts a job step.

Each check answers in one line, or None when it finds nothing wrong or cannot tell (no srun or
ompi_info to ask, or they fail): srun itself then reports what it meets.
"""
import re
import shutil
import subprocess

# Open MPI's clients of Slurm's PMI-1 and PMI-2 (its pmix framework's s1 and s2 components, built only
# with --with-pmi); Open MPI 5 has neither, only PMIx.
OPEN_MPI_PMI2_CLIENTS = ("s1", "s2")


def mpi_type(command):
    """The MPI plugin an srun command asks for: its last --mpi (srun's own rule), None for the default."""
    chosen = None
    for index, arg in enumerate(command):
        if arg.startswith("--mpi="):
            chosen = arg.split("=", 1)[1]
        elif arg == "--mpi" and index + 1 < len(command):
            chosen = command[index + 1]
    return chosen


def offered_types(env=None):
    """The plugins `srun --mpi=list` names (pmix, pmi2, none, pmix_v4, ...); None when it cannot say."""
    result = _ask(["srun", "--mpi=list"], env)
    if result is None:
        return None
    types = []
    # Under a header line, one type a line after a tab, then the PMIx versions, comma-separated:
    # "specific pmix plugin versions available: pmix_v4" (plugrack_print_mpi_plugins, 22.05).
    for line in result.stdout.splitlines():
        if line.startswith("\t") and line.strip():
            types.append(line.strip())
        elif "versions available:" in line:
            types += [word for word in re.split(r"[,\s]+", line.split(":", 1)[1]) if word]
    return types or None


def open_mpi_pmi_components(env=None):
    """(Open MPI version, its pmix-framework components) from `ompi_info --parsable`; None without it."""
    result = _ask(["ompi_info", "--parsable"], env)
    if result is None:
        return None
    version, components = None, set()
    for line in result.stdout.splitlines():
        fields = line.split(":")
        if fields[:3] == ["ompi", "version", "full"] and len(fields) > 3:
            version = fields[3]
        elif fields[:2] == ["mca", "pmix"] and len(fields) > 2:
            components.add(fields[2])
    return (version, sorted(components)) if version else None


def mpi_problem(command, env=None):
    """One line when the srun command's MPI plugin cannot start this suite's ranks; None otherwise."""
    kind = mpi_type(command)
    if kind in (None, "none"):
        return None
    offered = offered_types(env)
    if offered is not None and kind not in offered:
        advice = ("ask the cluster's admins for Slurm's PMIx plugin (Debian: slurm-wlm-basic-plugins; a "
                  "Slurm of one's own: configure --with-pmix), or start the ranks with mpirun inside the "
                  "allocation (--launcher mpirun)") if kind.startswith("pmix") else "use --mpi=pmix"
        return (f"srun --mpi={kind}: this Slurm has no such plugin (srun --mpi=list offers "
                f"{', '.join(offered)}); {advice}")
    if kind == "pmi2":
        found = open_mpi_pmi_components(env)
        if found is not None:
            version, components = found
            clients = [] if int(version.split(".")[0]) >= 5 else [
                c for c in components if c in OPEN_MPI_PMI2_CLIENTS]
            if not clients:
                return (f"srun --mpi=pmi2: Open MPI {version} here (ompi_info) has no PMI-2 client (its PMI "
                        f"components: {', '.join(components) or 'none'}), so every rank would stop in "
                        f"MPI_Init; use --mpi=pmix")
    return None


def allocation_problem(nodes, env):
    """One line when srun is to span more nodes than the allocation it runs in has; None otherwise."""
    have = env.get("SLURM_JOB_NUM_NODES", "")
    if not env.get("SLURM_JOB_ID") or not have.isdigit() or nodes <= int(have):
        return None
    return (f"srun -N {nodes}: job {env['SLURM_JOB_ID']} has {have} node{'s' if int(have) > 1 else ''} "
            f"({env.get('SLURM_JOB_NODELIST', '?')}); submit it with --nodes={nodes}, or launch on {have}")


def _ask(command, env):
    if shutil.which(command[0], path=(env or {}).get("PATH")) is None:
        return None
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result if result.returncode == 0 else None
