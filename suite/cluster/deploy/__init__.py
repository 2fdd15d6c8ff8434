"""`python -m suite.cluster.deploy`: Slurm, Kubernetes and container files for a model at a scale."""
import argparse
import os
import shlex
import sys

from suite.cluster import launch
from suite.cluster.deploy import dockerfile, k8s, slurm
from suite.cluster.deploy.dockerfile import DEFAULT_CPU_BASE, DEFAULT_NGC_TAG
from suite.cluster.deploy.job import (DATA_MOUNT, MAX_NODES, MODELS, RESULTS_MOUNT, DeployError, plan_job,
                                      write_atomic)
from suite.cluster.deploy.k8s import DEFAULT_SSH_PORT, NETWORK_MODES, SRIOV_NETWORK, SRIOV_RESOURCE, SRIOV_VFS
from suite.cluster.launch import LaunchError
from suite.common import profiles
from suite.common.profiles import ProfileError


class _Replaced(argparse.Action):
    """A flag that is gone: a one-line error naming what replaced it."""

    def __init__(self, option_strings, dest, replacement, nargs=None, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, help=argparse.SUPPRESS, **kwargs)
        self.replacement = replacement

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is gone: {self.replacement}")


# (flags, nargs, what replaces them) of the MPIJob flags before --network-mode.
REPLACED_K8S_FLAGS = (
    (("--rdma-resource",), None, "use --network-mode (oci-host needs no RDMA resource; sriov requests "
                                 f"{SRIOV_RESOURCE})"),
    (("--rdma-count",), None, "use --rdma-vfs with --network-mode sriov"),
    (("--network",), None, f"use --network-mode sriov (the workers join {SRIOV_NETWORK})"),
    (("--host-network",), 0, "use --network-mode oci-host (the default)"),
    (("--no-host-network",), 0, "use --network-mode sriov or --network-mode none"),
)


class Parser(argparse.ArgumentParser):
    """argparse with the suite's one-line errors instead of a usage block."""

    def error(self, message):
        self.exit(2, f"error: {message}\n")


# --- flags ---------------------------------------------------------------------------------------

def build_parser():
    parser = Parser(
        prog="python -m suite.cluster.deploy",
        description="Renders the files that run a benchmark on a GPU cluster: an sbatch script "
                    "(Slurm + Pyxis), a Kubeflow MPIJob manifest (Kubernetes), the container "
                    "Dockerfiles. Edit these inputs and render again; never edit the output.",
        epilog="Example:\n"
               "  python -m suite.cluster.deploy slurm --model models.resnet50 \\\n"
               "      --preset closed_16xA100_gbs3264 --nodes 2 --profile oci-bm-gpu-gm4-8 \\\n"
               "      --network-interface eth0 \\\n"
               "      --image registry.example.com/mlperf/mlperf-hvd-suite:TAG --data /shared/imagenet \\\n"
               "      --results /shared/results --out job.sbatch [-- extra model args, e.g. --set xla=true]\n"
               "Subcommand help: python -m suite.cluster.deploy {slurm,k8s,dockerfile,all} --help",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True, metavar="{slurm,k8s,dockerfile,all}",
                                parser_class=Parser)
    job, slurm, k8s, ssh, image = _job_flags(), _slurm_flags(), _k8s_flags(), _ssh_flags(), _image_flags()
    single = "write the file here (atomically) instead of printing it"
    sub.add_parser("slurm", parents=[job, slurm], help="sbatch script: srun --mpi=pmix with a Pyxis "
                   "container").add_argument("--out", metavar="FILE", help=single)
    sub.add_parser("k8s", parents=[job, k8s, ssh], help="Kubeflow MPI Operator MPIJob "
                   "(kubeflow.org/v2beta1)").add_argument("--out", metavar="FILE", help=single)
    docker = sub.add_parser("dockerfile", parents=[image, ssh], help="the GPU (NGC) or CPU Dockerfile")
    docker.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="default: gpu")
    docker.add_argument("--out", metavar="FILE", help=single)
    every = sub.add_parser("all", parents=[job, slurm, k8s, ssh, image],
                           help="slurm.sbatch, mpijob.yaml, Dockerfile.gpu and Dockerfile.cpu in --out DIR")
    every.add_argument("--out", metavar="DIR", required=True, help="folder for the rendered files")
    return parser


def _job_flags():
    flags = Parser(add_help=False)
    what = flags.add_argument_group("the run")
    what.add_argument("--model", required=True, choices=MODELS, help="the benchmark's module")
    what.add_argument("--preset", required=True, help="one of the model's presets (python -m MODEL --help)")
    what.add_argument("--nodes", required=True, type=int, help=f"number of nodes, 1 to {MAX_NODES}")
    what.add_argument("--profile", required=True, help="cluster profile name or YAML file "
                      f"({', '.join(profiles.available())})")
    what.add_argument("--network-interface", metavar="NAME",
                      help="the nodes' front-end interface inside the containers (overrides the profile's "
                           "network_interface): NCCL_SOCKET_IFNAME, Gloo's and Open MPI's TCP interface")
    what.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                      help="set or override one variable of the profile's env; repeatable")
    what.add_argument("--image", required=True, help="the GPU image, as pushed by container/build.sh")
    what.add_argument("--data", required=True, help="dataset: a host path on every node (Kubernetes: "
                      "or pvc:CLAIM), mounted read-only at " + DATA_MOUNT)
    what.add_argument("--results", required=True, help="shared results folder: a host path (Kubernetes: "
                      "or pvc:CLAIM), mounted at " + RESULTS_MOUNT)
    what.add_argument("--run-id", help="the run's folder under --results (default: "
                      "<model>-<preset>-<N>n-<UTC time>); also the job's name")
    tuning = flags.add_argument_group("Horovod tuning (overrides the profile, as in suite.cluster.launch)")
    tuning.add_argument("--fusion-threshold-mb", type=int, help="HOROVOD_FUSION_THRESHOLD, in MiB")
    tuning.add_argument("--cycle-time-ms", type=float, help="HOROVOD_CYCLE_TIME, in ms")
    tuning.add_argument("--hierarchical-allreduce", action=argparse.BooleanOptionalAction, default=None,
                        help="HOROVOD_HIERARCHICAL_ALLREDUCE")
    tuning.add_argument("--timeline", metavar="FILE", help="HOROVOD_TIMELINE, a path inside the container")
    return flags


def _slurm_flags():
    flags = Parser(add_help=False)
    slurm = flags.add_argument_group("Slurm")
    slurm.add_argument("--time", default="04:00:00", help="time limit (default: 04:00:00)")
    slurm.add_argument("--partition", help="#SBATCH --partition")
    slurm.add_argument("--account", help="#SBATCH --account")
    return flags


def _k8s_flags():
    flags = Parser(add_help=False)
    k8s = flags.add_argument_group("Kubernetes")
    k8s.add_argument("--namespace", help="the MPIJob's namespace (default: kubectl's)")
    k8s.add_argument("--network-mode", choices=NETWORK_MODES, default="oci-host",
                     help="how workers reach the RDMA NICs: oci-host (the nodes' own network and NICs), "
                          "sriov (NVIDIA Network Operator VFs), none (pod network, no RDMA); "
                          "default: oci-host")
    k8s.add_argument("--rdma-vfs", type=int, metavar="N",
                     help=f"--network-mode sriov: VFs per worker (default: {SRIOV_VFS}, one per RDMA port)")
    k8s.add_argument("--operator-wait", action=argparse.BooleanOptionalAction, default=True,
                     help="launcherCreationPolicy: WaitForWorkersReady (MPI Operator v0.5.0 and later); "
                          "--no-operator-wait for older operators (default: on)")
    k8s.add_argument("--host-ipc", action="store_true", help="pods share the node's IPC namespace")
    for names, nargs, replacement in REPLACED_K8S_FLAGS:
        k8s.add_argument(*names, action=_Replaced, nargs=nargs, replacement=replacement)
    k8s.add_argument("--shm-size", metavar="QUANTITY", help="size limit of the /dev/shm emptyDir, e.g. 64Gi")
    return flags


def _ssh_flags():
    flags = Parser(add_help=False)
    flags.add_argument("--ssh-port", type=int, default=DEFAULT_SSH_PORT,
                       help=f"sshd port in the containers (default: {DEFAULT_SSH_PORT}; not 22, which "
                            f"the node's own sshd holds under host networking)")
    return flags


def _image_flags():
    flags = Parser(add_help=False)
    image = flags.add_argument_group("container image")
    image.add_argument("--ngc-tag", default=DEFAULT_NGC_TAG,
                       help=f"tag of nvcr.io/nvidia/tensorflow for the GPU image "
                            f"(default: {DEFAULT_NGC_TAG})")
    image.add_argument("--base-image", default=DEFAULT_CPU_BASE,
                       help=f"Debian + Python 3.11 base of the CPU image and of the GPU image's "
                            f"suite-check stage (default: {DEFAULT_CPU_BASE})")
    return flags


# --- output ---------------------------------------------------------------------------------------

def rendered_by(argv):
    """The command that rendered a file, without where it was written to."""
    own, model = launch.split_argv(argv)
    kept, skip = [], False
    for arg in own:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    return shlex.join(["python", "-m", "suite.cluster.deploy", *kept, *(["--", *model] if model else [])])


def render(args, model_args, argv):
    """{file name: text} for the subcommand, and the notes for the user."""
    if args.what == "dockerfile":
        if model_args:
            raise DeployError("dockerfile takes no model arguments after --")
        return {f"Dockerfile.{args.device}": dockerfile.render(args.device, args)}, []
    planned = plan_job(args, model_args, rendered_by(argv))
    if args.what == "slurm":
        files = {"slurm.sbatch": slurm.render(planned, args)}
    elif args.what == "k8s":
        files = {"mpijob.yaml": k8s.render(planned, args)}
    else:
        files = {"slurm.sbatch": slurm.render(planned, args), "mpijob.yaml": k8s.render(planned, args),
                 "Dockerfile.gpu": dockerfile.render("gpu", args),
                 "Dockerfile.cpu": dockerfile.render("cpu", args)}
    return files, planned.notes


def emit(files, args):
    if args.what == "all":
        for name, text in files.items():
            write_atomic(os.path.join(args.out, name), text)
            print(os.path.join(args.out, name))
    elif args.out:
        write_atomic(args.out, next(iter(files.values())))
    else:
        sys.stdout.write(next(iter(files.values())))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    own, model_args = launch.split_argv(argv)
    args = build_parser().parse_args(own)
    try:
        files, notes = render(args, model_args, argv)
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
        emit(files, args)
    except (DeployError, ProfileError, LaunchError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0
