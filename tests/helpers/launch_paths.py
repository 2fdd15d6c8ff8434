"""The launch paths a namespace cluster trains through (horovodrun with Gloo or MPI, mpirun,
suite.cluster.launch), how env.json names each, and the bound on a job's end after a rank is killed."""
import sys

from suite.cluster import hostfile as hostfile_format


def launch_args(hostfile, profile="local-cpu"):
    return [sys.executable, "-m", "suite.cluster.launch", "--hostfile", hostfile, "--profile", profile]


def _np(path):
    """Every slot of the hostfile gets a rank."""
    return ["-np", str(hostfile_format.total_slots(hostfile_format.parse(path)))]


# Each launcher gets the profile another way: the model's --profile flag, the SUITE_PROFILE
# variable (horovodrun forwards the environment; plain mpirun needs -x), and suite.cluster.launch.
LAUNCHES = {
    "horovodrun-gloo": lambda hf, pf: (["horovodrun", "--gloo", *_np(hf), "-hostfile", hf, "python"],
                                       ["--profile", pf], {}),
    "horovodrun-mpi": lambda hf, pf: (["horovodrun", "--mpi", *_np(hf), "-hostfile", hf, "python"], [],
                                      {"SUITE_PROFILE": pf}),
    "mpirun": lambda hf, pf: (["mpirun", "--allow-run-as-root", *_np(hf), "-hostfile", hf, "-x", "PATH",
                               "-x", "PYTHONPATH", "-x", "SUITE_PROFILE", sys.executable], [],
                              {"SUITE_PROFILE": pf}),
    "suite.launch": lambda hf, pf: ([*launch_args(hf, pf), "--"], [], {}),
    # The same mpirun, the ranks distributed by TensorFlow's own collectives instead of Horovod.
    "mpirun-tf": lambda hf, pf: (["mpirun", "--allow-run-as-root", *_np(hf), "-hostfile", hf, "-x", "PATH",
                                  "-x", "PYTHONPATH", "-x", "SUITE_PROFILE", sys.executable],
                                 ["--distribution", "tf"], {"SUITE_PROFILE": pf}),
}
# What env.json records: horovodrun --mpi and suite.launch (horovodrun underneath) exec mpirun.
SEEN_AS = {"horovodrun-gloo": ("horovodrun-gloo", "gloo"), "horovodrun-mpi": ("mpirun", "mpi"),
           "mpirun": ("mpirun", "mpi"), "suite.launch": ("mpirun", "mpi"), "mpirun-tf": ("mpirun", "grpc")}
# Every process of a job must be gone this long after one of its ranks was killed.
FAULT_BOUND_SECONDS = 60
