"""The run's place in the job and its collectives: the launcher, the device, and the backend behind them.

initialize() finds the launcher, joins the job through the chosen distribution backend
(suite/train/backend.py: horovod or tf), pins this rank's device and sizes its thread pools; the
functions below are what the loop, the evaluation and the session call, whichever backend is in use.
"""
import os
import socket
from dataclasses import dataclass

import suite  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

import tensorflow as tf

from suite.train.backend import DISTRIBUTIONS, LaunchError

_backend = None  # set by initialize()


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
    distribution: str = "horovod"

    @property
    def is_root(self):
        return self.rank == 0


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


def _check_size(launcher, backend, size):
    # An mpi4py or Horovod built against another MPI than the launcher's sees a world of one in
    # every process: N copies of a one-rank run, all writing the same run directory.
    expected = launcher_size()
    if expected is not None and expected != size:
        library = "Horovod" if backend == "horovod" else "mpi4py"
        raise LaunchError(f"{launcher} started {expected} processes but {library} sees {size}; "
                          f"Horovod and mpi4py must use the MPI library of the launcher")


def make_backend(distribution, tf_pack_mb=0.0):
    """The backend named by the distribution setting; each is imported only when chosen, so that a tf
    run never loads Horovod."""
    if distribution == "horovod":
        from suite.train.horovod_backend import HorovodBackend
        return HorovodBackend()
    if distribution == "tf":
        from suite.train.tf_backend import TensorFlowBackend
        return TensorFlowBackend(bytes_per_pack=int(tf_pack_mb * 2**20))
    raise LaunchError(f"distribution must be one of {', '.join(DISTRIBUTIONS)}, not {distribution!r}")


def gpus_visible():
    """True when TensorFlow sees a GPU (callable before Horovod starts)."""
    return bool(tf.config.list_physical_devices("GPU"))


def initialize(cpu_threads=0, distribution="horovod", tf_pack_mb=0.0):
    """Joins the job through the named backend and gives this process its device; call before building
    any model.

    cpu_threads: TensorFlow threads per rank on a CPU; 0 lets cpu_threads_per_rank choose.
    tf_pack_mb: the tf backend's all-reduce pack size (the tf_pack_mb setting).
    """
    global _backend
    suite.require_keras2(tf)
    launcher = detect_launcher()
    backend = make_backend(distribution, tf_pack_mb)
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        cpu_horovod_defaults(os.environ)  # Horovod and MPI read them when they start
    member = backend.join(launcher)
    _check_size(launcher, distribution, member.size)
    if gpus:
        _pin_gpu(gpus, member.local_rank, member.local_size)
        device = "gpu"
    else:
        cores = os.cpu_count() or 1
        threads = cpu_threads or cpu_threads_per_rank(cores, member.local_size)
        _set_thread_pools(threads, inter_op_threads(threads, cores, os.environ))
        device = "cpu"
    backend.connect(device)
    _backend = backend
    return World(rank=member.rank, size=member.size, local_rank=member.local_rank,
                 local_size=member.local_size, cross_size=member.cross_size,
                 host=socket.gethostname(), launcher=launcher, controller=member.controller,
                 device=device, distribution=distribution)


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


def _pin_gpu(gpus, local_rank, local_size):
    """One GPU per process, chosen by the local rank (the device policy of both backends)."""
    if len(gpus) == 1:
        # The launcher bound one GPU to this process already (Slurm --gpus-per-task, a
        # per-rank CUDA_VISIBLE_DEVICES), so the local rank no longer indexes the host's GPUs.
        chosen = gpus[0]
    elif local_size > len(gpus):
        raise LaunchError(f"host {socket.gethostname()} runs {local_size} ranks but has "
                          f"{len(gpus)} GPUs; lower -np or the hostfile's slots")
    else:
        chosen = gpus[local_rank]
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    # Horovod: pin one GPU per process, chosen by the local rank (TensorFlow's strategy then sees one).
    tf.config.set_visible_devices(chosen, "GPU")


def gradients(tape, loss, variables, fp16_allreduce=False):
    """tape.gradient(loss, variables), averaged over all ranks; inside the train step."""
    return _backend.gradients(tape, loss, variables, fp16_allreduce)


def allreduce_gradients(gradients, fp16_allreduce=False):
    """Averages a list of dense gradients over all ranks (used after local gradient accumulation)."""
    return _backend.reduce_mean(list(gradients), fp16_allreduce)


def optimizer_variables(optimizer):
    # Keras 2.11+ optimizers expose `variables` as a property, older ones as a method.
    variables = optimizer.variables
    return variables() if callable(variables) else variables


def broadcast_state(model, optimizer):
    """Copies rank 0's model and optimizer state to every rank (after the first train step, when the
    optimizer's slots exist)."""
    _backend.broadcast_variables(model.variables)
    _backend.broadcast_variables(optimizer_variables(optimizer))


def average_variables(variables, name):
    """Replaces each variable by its mean over ranks (e.g. BN moving statistics before evaluation)."""
    variables = list(variables)
    if variables:
        _backend.average_variables(variables, name)


def allreduce_sum(values, name):
    """Sums a small float vector over all ranks, in float64 so counts stay exact."""
    return _backend.sum(values, name)


def broadcast_value(value, name):
    """Rank 0's Python object on every rank."""
    return _backend.broadcast_object(value, name)


def allgather_object(value, name):
    """A list with every rank's Python object, in rank order."""
    return _backend.allgather_object(value, name)


def allreduce_ops():
    """The backend's allreduce in Horovod's signature, for the timed allreduce probe."""
    return _backend.allreduce_ops()


def seed_per_rank(seed, rank):
    """Seeds Python, NumPy and TensorFlow with the run seed plus the rank: one random stream per rank."""
    tf.keras.utils.set_random_seed((seed + rank) % 2**31)


def failed_in_a_peer(err):
    """True for the error a collective raises because another rank failed or left."""
    return _backend is not None and _backend.failed_in_a_peer(err)


def rank_named_in(err):
    """The rank a backend's error names as the one that failed, or None."""
    return _backend.rank_named_in(err) if _backend is not None else None


def end_after_failure(code):
    """After a failure is reported: ends the process at once where the backend's exit could hang."""
    if _backend is not None:
        _backend.end_after_failure(code)


def nccl_built():
    return _backend.nccl_built()


def barrier(name):
    """Returns once every rank has reached it."""
    _backend.barrier(name)


def shutdown():
    """Frees ranks blocked in a collective with this one, where the backend can."""
    if _backend is not None:
        _backend.shutdown()
