"""The sweep inside one allocation: the main step of a `deploy slurm --sweep` script.

suite.cluster.sweep runs in the batch script with --launcher srun on a hostfile of the allocation's
nodes, so each scale is an srun step of its own node count (-N and --nodelist from the hostfile);
the report of every scale is then built in the same job.
"""
import os
import shlex

from suite.cluster.deploy.job import DeployError


def node_counts(text):
    """--sweep 1,2,4 as [1, 2, 4]: distinct positive node counts, in increasing order."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts) or counts != sorted(set(counts)):
        raise DeployError(f"--sweep {text}: expected increasing node counts such as 1,2")
    return counts


def check(job, args):
    """Refuses, before anything is rendered, a sweep the allocation cannot hold or that needs a container."""
    if not args.bare_metal:
        raise DeployError("--sweep runs suite.cluster.sweep from the shared file system: add --bare-metal")
    too_many = [n for n in node_counts(args.sweep) if n > job.nodes]
    if too_many:
        raise DeployError(f"--sweep {args.sweep}: {too_many[0]} nodes is more than the allocation's "
                          f"--nodes {job.nodes}; render with --nodes {too_many[-1]} or drop "
                          f"{', '.join(map(str, too_many))} from --sweep")
    if args.system_info and not os.path.isfile(args.system_info):
        raise DeployError(f"--system-info {args.system_info}: no such file")


def render_step(job, args, numa):
    """The hostfile of the allocation, the sweep over its scales, then the report."""
    scales = ",".join(str(n * job.tasks) for n in node_counts(args.sweep))
    launcher_args = '"--mpi=$MPI' + (' --cpu-bind=ldoms"' if numa else '"')
    profile = os.path.abspath(args.profile) if os.path.isfile(args.profile) else job.profile.name
    sweep = ["--profile", profile, "--hostfile", '"$HOSTFILE"', "--scales", scales,
             "--preset", job.preset]
    if args.runs:
        sweep += ["--runs", str(args.runs)]
    if args.system_info:
        sweep += ["--system-info", shlex.quote(os.path.abspath(args.system_info))]
    model = ["--", job.model, '--data-dir "$DATA_DIR"', shlex.join(job.model_args)]
    lines = [
        "# The sweep's hostfile: the allocation's nodes, each with this job's tasks a node.",
        'readonly HOSTFILE="$RESULTS_DIR"/' + job.run_id + ".hosts",
        f'scontrol show hostnames "$SLURM_JOB_NODELIST" | sed "s/\\$/ slots={job.tasks}/" > "$HOSTFILE"',
        'cd "$SUITE_DIR"',
        f"# One srun step a scale, on {args.sweep} node(s) ({scales} processes); the node check above",
        "# stands in for the sweep's own host check (--skip-host-check).",
        '"$PYTHON" -m suite.cluster.sweep --out "$RUN_DIR" --launcher srun --launcher-args=' + launcher_args
        + " --skip-host-check \\",
        "    " + " ".join(sweep) + " \\",
        "    " + " ".join(part for part in model if part),
        "# The report of every scale, built in this job: $RUN_DIR/report.",
        '"$PYTHON" -m suite.cluster.report "$RUN_DIR"',
    ]
    return "\n".join(line.rstrip() for line in lines)
