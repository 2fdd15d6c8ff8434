"""Horovod set-up in one place: init, device pinning, the gradient tape, broadcasts and reductions."""
import os
import socket
from dataclasses import dataclass

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd


class LaunchError(RuntimeError):
    """The processes were started in a way the run cannot use (e.g. more ranks than GPUs on a host)."""


@dataclass(frozen=True)
class World:
    """Where this process sits in the job."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_size: int
    host: str
    launcher: str
    controller: str
    device: str

    @property
    def is_root(self):
        return self.rank == 0


# Launchers that start MPI ranks: Horovod must join their MPI_COMM_WORLD, not start a job of its own.
MPI_LAUNCHERS = ("mpirun", "srun", "mpiexec")


def detect_launcher(env=None):
    """Names what started this process, from the variables each launcher sets."""
    env = os.environ if env is None else env
    if "HOROVOD_GLOO_RENDEZVOUS_ADDR" in env:
        return "horovodrun-gloo"
    if "OMPI_COMM_WORLD_SIZE" in env:
        # Also `horovodrun --mpi`, which execs mpirun and leaves no mark of its own.
        return "mpirun"
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return "srun"
    if "PMI_RANK" in env or "PMIX_RANK" in env:
        # MPICH / Intel MPI (Hydra) set PMI_*, a PMIx server PMIX_*.
        return "mpiexec"
    return "single"


def launcher_size(env=None):
    """The process count the MPI launcher announced, or None where it announces none."""
    env = os.environ if env is None else env
    for key in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE"):
        if env.get(key, "").isdigit():
            return int(env[key])
    return None


def _start_horovod(launcher):
    """hvd.init on the launcher's MPI_COMM_WORLD under an MPI launch; Horovod's own set-up otherwise."""
    if launcher in MPI_LAUNCHERS:
        try:
            # Importing mpi4py.MPI initialises MPI with THREAD_MULTIPLE (mpi4py's default), the level
            # Horovod's background thread needs; Horovod then adopts (duplicates) the communicator.
            from mpi4py import MPI
        except ImportError:
            MPI = None  # Horovod initialises MPI itself, on COMM_WORLD all the same
        if MPI is not None:
            # Horovod: join the ranks the MPI launcher started.
            hvd.init(comm=MPI.COMM_WORLD)
            return
    # Horovod: Gloo rendezvous (horovodrun --gloo) or a single process.
    hvd.init()


def _check_size(launcher):
    # An mpi4py or Horovod built against another MPI than the launcher's sees a world of one in
    # every process: N copies of a one-rank run, all writing the same run directory.
    expected = launcher_size()
    if expected is not None and expected != hvd.size():
        raise LaunchError(f"{launcher} started {expected} processes but Horovod sees {hvd.size()}; "
                          f"Horovod and mpi4py must use the MPI library of the launcher")


def gpus_visible():
    """True when TensorFlow sees a GPU (callable before Horovod starts)."""
    return bool(tf.config.list_physical_devices("GPU"))


def initialize(cpu_threads=0):
    """Starts Horovod and gives this process its device; call before building any model.

    cpu_threads: TensorFlow threads per rank on a CPU; 0 lets cpu_threads_per_rank choose.
    """
    suite.require_keras2(tf)
    launcher = detect_launcher()
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        cpu_horovod_defaults(os.environ)  # Horovod reads them in hvd.init
    _start_horovod(launcher)
    _check_size(launcher)
    if gpus:
        _pin_gpu(gpus)
        device = "gpu"
    else:
        cores = os.cpu_count() or 1
        threads = cpu_threads or cpu_threads_per_rank(cores, hvd.local_size())
        _set_thread_pools(threads, inter_op_threads(threads, cores, os.environ))
        device = "cpu"
    return World(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                 local_size=hvd.local_size(), cross_size=hvd.cross_size(),
                 host=socket.gethostname(), launcher=launcher,
                 controller="gloo" if hvd.gloo_enabled() else "mpi", device=device)


# What a CPU job's Horovod and MPI get unless its environment says otherwise, so that a raw
# `horovodrun -np 2 python -m models.<model>` runs as fast as the suite's launcher. Chosen from
# side-by-side runs on the 2-core development machine (BENCHMARKS.md, "Horovod and thread settings
# on a CPU"): there the kernels, Horovod's background thread and MPI share the same cores, and every
# cycle spent polling takes a core from a convolution. Both are read when Horovod and MPI start
# in this process, so setting them here reaches every launcher.
CPU_DEFAULTS = {
    # A cycle every 20 ms instead of every 1 ms: a CPU step takes seconds, so waiting up to 20 ms
    # for the last gradient costs under 1% while the background thread wakes 20 times less often.
    "HOROVOD_CYCLE_TIME": "20",
    # A rank waiting in MPI yields its core instead of spinning on it (Open MPI's
    # mpi_yield_when_idle, `ompi_info`). Open MPI turns it on only when it sees more ranks than
    # slots; here each rank runs TensorFlow threads as well, so the cores are oversubscribed all the
    # same. Ignored by other MPIs and by Gloo.
    "OMPI_MCA_mpi_yield_when_idle": "1",
}


def cpu_horovod_defaults(environ):
    """Puts CPU_DEFAULTS into environ where it has no value; returns what it set."""
    chosen = {key: value for key, value in CPU_DEFAULTS.items() if key not in environ}
    environ.update(chosen)
    return chosen


def cpu_threads_per_rank(cores, local_ranks):
    """TensorFlow intra-op threads for each of a host's local ranks: its share of the cores."""
    return max(1, cores // local_ranks)


def inter_op_threads(threads, cores, environ):
    """How many ops a rank runs at once, each on its pool of `threads` kernel threads.

    A rank that has the whole host runs two or more at once, to fill its cores. A rank that shares
    the host (fewer threads than cores) runs one: with two, two ops ran at once on its share of the
    cores and competed for them. Measured side by side on ResNet-50 (BENCHMARKS.md): 2 ranks on 2
    cores went faster with one inter-op thread each, 1 rank on 2 cores slower. TF_NUM_INTEROP_THREADS,
    where set, wins.
    """
    if environ.get("TF_NUM_INTEROP_THREADS", "").isdigit():
        return int(environ["TF_NUM_INTEROP_THREADS"])
    return 1 if threads < cores else max(2, threads)


def _set_thread_pools(threads, inter_op):
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)
    except RuntimeError:
        pass  # TensorFlow already ran ops in this process (a caller's choice); keep its pools


def _pin_gpu(gpus):
    """One GPU per process, chosen by the local rank."""
    if len(gpus) == 1:
        # The launcher bound one GPU to this process already (Slurm --gpus-per-task, a
        # per-rank CUDA_VISIBLE_DEVICES), so the local rank no longer indexes the host's GPUs.
        chosen = gpus[0]
    elif hvd.local_size() > len(gpus):
        raise LaunchError(f"host {socket.gethostname()} runs {hvd.local_size()} ranks but has "
                          f"{len(gpus)} GPUs; lower -np or the hostfile's slots")
    else:
        chosen = gpus[hvd.local_rank()]
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    # Horovod: pin one GPU per process, chosen by the local rank.
    tf.config.set_visible_devices(chosen, "GPU")


def distributed_tape(tape, fp16_allreduce=False):
    """Wraps a GradientTape so gradient() returns gradients averaged over all ranks."""
    # Horovod: average gradients across ranks with a (fused) allreduce. Embedding lookups give
    # sparse gradients, which Horovod would allgather; as dense they join the fused allreduce.
    return hvd.DistributedGradientTape(tape, compression=_compression(fp16_allreduce), sparse_as_dense=True)


def allreduce_gradients(gradients, fp16_allreduce=False):
    """Averages a list of dense gradients over all ranks (used after local gradient accumulation)."""
    # Horovod: one grouped (fused) allreduce for every gradient, as DistributedGradientTape does.
    return hvd.grouped_allreduce(list(gradients), op=hvd.Average, compression=_compression(fp16_allreduce),
                                 name="accumulated_gradients")


def _compression(fp16_allreduce):
    return hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none


def optimizer_variables(optimizer):
    # Keras 2.11+ optimizers expose `variables` as a property, older ones as a method.
    variables = optimizer.variables
    return variables() if callable(variables) else variables


def broadcast_state(model, optimizer):
    """Copies rank 0's model and optimizer state to every rank (inside the first train step)."""
    # Horovod: broadcast after the first gradient step, when the optimizer slots exist.
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(optimizer_variables(optimizer), root_rank=0)


def average_variables(variables, name):
    """Replaces each variable by its mean over ranks (e.g. BN moving statistics before evaluation)."""
    variables = list(variables)
    if not variables:
        return
    # Horovod: one fused allreduce for the whole group.
    averaged = hvd.grouped_allreduce([v.read_value() for v in variables], op=hvd.Average, name=name)
    for variable, value in zip(variables, averaged):
        variable.assign(value)


def allreduce_sum(values, name):
    """Sums a small float vector over all ranks, in float64 so counts stay exact."""
    tensor = tf.constant(np.asarray(values, dtype=np.float64))
    # Horovod: exact sums (not averages) for evaluation counts.
    return hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()


def broadcast_value(value, name):
    """Rank 0's Python object on every rank."""
    # Horovod: one decision (seed, run id) shared by all ranks.
    return hvd.broadcast_object(value, root_rank=0, name=name)


def allgather_object(value, name):
    """A list with every rank's Python object, in rank order."""
    # Horovod: collect per-rank measurements on all ranks.
    return hvd.allgather_object(value, name=name)


def seed_per_rank(seed, rank):
    """Seeds Python, NumPy and TensorFlow with the run seed plus the rank: one random stream per rank."""
    tf.keras.utils.set_random_seed((seed + rank) % 2**31)


def nccl_built():
    return bool(hvd.nccl_built())


def barrier(name):
    """Returns once every rank has reached it."""
    # Horovod: a one-element allreduce completes only when every rank has submitted it.
    hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name=name).numpy()


def shutdown():
    """Stops Horovod so ranks blocked in a collective with this one fail instead of hanging."""
    try:
        hvd.shutdown()
    except Exception:  # noqa: BLE001 - best effort on the way out
        pass
