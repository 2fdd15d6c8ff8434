"""`python -m suite.cluster.deploy`: Slurm, Kubernetes and container files for a model at a scale."""
import argparse
import os
import shlex
import sys

from suite.cluster import launch
from suite.cluster.deploy import dockerfile, k8s, slurm
from suite.cluster.deploy.dockerfile import DEFAULT_CPU_BASE, DEFAULT_NGC_TAG
from suite.cluster.deploy.job import (DATA_MOUNT, MAX_NODES, REPO, RESULTS_MOUNT, DeployError,
                                      plan_job, write_out)
from suite.cluster.deploy.k8s import (DEFAULT_SSH_PORT, NETWORK_MODES, SRIOV_NETWORK, SRIOV_RESOURCE,
                                      SRIOV_VFS)
from suite.cluster.launch import LaunchError
from suite.common import benchmarks, profiles
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
    job_f, slurm_f, k8s_f = _job_flags(), _slurm_flags(), _k8s_flags()
    ssh_f, image_f = _ssh_flags(), _image_flags()
    single = "write the file here (atomically) instead of printing it"
    sub.add_parser("slurm", parents=[job_f, slurm_f], help="sbatch script: srun in a Pyxis "
                   "container, or --bare-metal").add_argument("--out", metavar="FILE", help=single)
    sub.add_parser("k8s", parents=[job_f, k8s_f, ssh_f], help="Kubeflow MPI Operator MPIJob "
                   "(kubeflow.org/v2beta1)").add_argument("--out", metavar="FILE", help=single)
    docker = sub.add_parser("dockerfile", parents=[image_f, ssh_f],
                            help="the GPU (NGC or PyPI) or CPU Dockerfile")
    docker.add_argument("--device", choices=("gpu", "cpu"), default="gpu", help="default: gpu")
    docker.add_argument("--base", choices=dockerfile.GPU_BASES, default="ngc",
                        help="the GPU image's TensorFlow: ngc (NGC's TensorFlow 2.15 image, the default) or "
                             "pypi (TensorFlow 2.18 with CUDA wheels from PyPI: Dockerfile.gpu-pypi)")
    docker.add_argument("--out", metavar="FILE", help=single)
    every = sub.add_parser("all", parents=[job_f, slurm_f, k8s_f, ssh_f, image_f],
                           help="slurm.sbatch, mpijob.yaml, Dockerfile.gpu and Dockerfile.cpu in --out DIR")
    every.add_argument("--out", metavar="DIR", required=True, help="folder for the rendered files")
    return parser


def _job_flags():
    flags = Parser(add_help=False)
    what = flags.add_argument_group("the run")
    what.add_argument("--model", required=True, choices=benchmarks.modules(),
                      help="the benchmark's module (a folder under models/)")
    what.add_argument("--preset", required=True, help="one of the model's presets (python -m MODEL --help)")
    what.add_argument("--nodes", required=True, type=int, help=f"number of nodes, 1 to {MAX_NODES}")
    what.add_argument("--profile", required=True, help="cluster profile name or YAML file "
                      f"({', '.join(profiles.available())})")
    what.add_argument("--network-interface", metavar="NAME",
                      help="the nodes' front-end interface inside the containers (overrides the profile's "
                           "network_interface): NCCL_SOCKET_IFNAME, Gloo's and Open MPI's TCP interface")
    what.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                      help="set or override one variable of the profile's env; repeatable")
    what.add_argument("--image", help="the GPU image, as pushed by container/build.sh (Slurm: or a squashfs "
                      "file made with enroot import); required except for slurm --bare-metal")
    what.add_argument("--data", required=True, help="dataset: a host path on every node (Kubernetes: "
                      "or pvc:CLAIM), mounted read-only at " + DATA_MOUNT)
    what.add_argument("--results", required=True, help="shared results folder: a host path (Kubernetes: "
                      "or pvc:CLAIM), mounted at " + RESULTS_MOUNT)
    what.add_argument("--run-id", help="the run's folder under --results (default: "
                      "<model>-<preset>-<N>n-<UTC time>); also the job's name")
    what.add_argument("--mpi-subnet", metavar="CIDR",
                      help="Open MPI's TCP traffic (btl and oob tcp_if_include) by subnet instead of the "
                           "interface name, for nodes whose NIC names differ")
    what.add_argument("--numa-bind", action=argparse.BooleanOptionalAction, default=None,
                      help="bind each rank to a NUMA domain: srun --cpu-bind=ldoms, mpirun --map-by numa "
                           "--bind-to numa (default: on for a GPU profile, off for a CPU one)")
    launch.add_tuning_flags(flags.add_argument_group("Horovod tuning (overrides the profile, as in "
                                                     "suite.cluster.launch)"),
                            timeline_help="HOROVOD_TIMELINE, a path inside the container")
    return flags


def _slurm_flags():
    flags = Parser(add_help=False)
    group = flags.add_argument_group("Slurm")
    group.add_argument("--time", default="04:00:00", help="time limit (default: 04:00:00)")
    group.add_argument("--partition", help="#SBATCH --partition (checked against sinfo where it answers)")
    group.add_argument("--account", help="#SBATCH --account (checked against sacctmgr where it answers)")
    group.add_argument("--mpi", choices=slurm.MPI_CHOICES, default="auto",
                       help="srun's PMI type: pmix or pmi2; auto picks pmi2 in a Pyxis container (no enroot "
                            "hook needed) and pmix on bare metal; the script says why (default: auto)")
    group.add_argument("--ntasks-per-node", type=int, metavar="N",
                       help="processes per node; required with a CPU profile (a GPU profile runs one per "
                            "GPU)")
    sweep = flags.add_argument_group("a sweep inside one allocation (with --bare-metal)")
    sweep.add_argument("--sweep", metavar="N,...",
                       help="node counts, each at most --nodes: the job runs python -m suite.cluster.sweep "
                            "--launcher srun over them (one srun step a scale), then the report")
    sweep.add_argument("--runs", type=int, metavar="N", help="--sweep: runs per scale (default: the "
                       "sweep's, what MLPerf requires)")
    sweep.add_argument("--system-info", metavar="FILE",
                       help="--sweep: the nodes' description for the submission (the sweep's --system-info)")
    bare = flags.add_argument_group("Slurm without a container")
    bare.add_argument("--bare-metal", action="store_true",
                      help="no Pyxis container: srun runs the suite from the shared file system with its "
                           "own interpreter (no --image)")
    bare.add_argument("--suite-dir", metavar="DIR",
                      help=f"--bare-metal: the suite checkout on the nodes (default: this one, {REPO})")
    bare.add_argument("--python", metavar="PATH",
                      help=f"--bare-metal: the interpreter of the suite's environment on the nodes "
                           f"(default: this one, {sys.executable})")
    return flags


def _k8s_flags():
    flags = Parser(add_help=False)
    group = flags.add_argument_group("Kubernetes")
    group.add_argument("--namespace", help="the MPIJob's namespace (default: kubectl's)")
    group.add_argument("--network-mode", choices=NETWORK_MODES, default="oci-host",
                       help="how workers reach the RDMA NICs: oci-host (the nodes' own network and NICs), "
                            "sriov (NVIDIA Network Operator VFs), none (pod network, no RDMA); "
                            "default: oci-host")
    group.add_argument("--rdma-vfs", type=int, metavar="N",
                       help=f"--network-mode sriov: VFs per worker (default: {SRIOV_VFS}, one per RDMA "
                            f"port)")
    group.add_argument("--operator-wait", action=argparse.BooleanOptionalAction, default=True,
                       help="launcherCreationPolicy: WaitForWorkersReady (MPI Operator v0.5.0 and later); "
                            "--no-operator-wait for older operators (default: on)")
    group.add_argument("--host-ipc", action="store_true", help="pods share the node's IPC namespace")
    for names, nargs, replacement in REPLACED_K8S_FLAGS:
        group.add_argument(*names, action=_Replaced, nargs=nargs, replacement=replacement)
    group.add_argument("--shm-size", metavar="QUANTITY", default=k8s.DEFAULT_SHM,
                       help=f"size limit of the workers' memory-backed /dev/shm (default: "
                            f"{k8s.DEFAULT_SHM}, as Oracle's OKE manifests)")
    group.add_argument("--worker-cpu", metavar="QUANTITY", default=k8s.DEFAULT_WORKER_CPU,
                       help=f"each worker's CPU request and limit (default: {k8s.DEFAULT_WORKER_CPU})")
    group.add_argument("--worker-memory", metavar="QUANTITY", default=k8s.DEFAULT_WORKER_MEMORY,
                       help=f"each worker's memory request and limit, /dev/shm included (default: "
                            f"{k8s.DEFAULT_WORKER_MEMORY}); requests = limits makes the workers Guaranteed")
    group.add_argument("--instance-type", metavar="NAME",
                       help="the workers' nodeSelector node.kubernetes.io/instance-type (default: the "
                            "profile's first shape; '' for none)")
    group.add_argument("--launcher-instance-type", metavar="NAME",
                       help="pin the launcher to nodes of this instance type too (default: unpinned)")
    group.add_argument("--image-pull-secret", action="append", default=[], metavar="NAME",
                       help="imagePullSecrets of both pods, a docker-registry Secret in the job's "
                            "namespace; repeatable")
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
        if args.base != "ngc" and args.device != "gpu":
            raise DeployError("--base chooses the GPU image's base; the CPU image has one")
        return {dockerfile.file_name(args.device, args.base): dockerfile.render(args.device, args)}, []
    if args.what == "all" and args.bare_metal:
        raise DeployError("--bare-metal is for the slurm subcommand alone (the MPIJob runs the image)")
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
            write_out(os.path.join(args.out, name), text)
            print(os.path.join(args.out, name))
    elif args.out:
        write_out(args.out, next(iter(files.values())))
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
