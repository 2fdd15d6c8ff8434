"""What a run needs of the library that distributes it: one small interface, two implementations.

The training loop, the evaluation and the session call these through suite.train.dist and never ask
which library is underneath. Only the gradient reduction, the broadcast of the initial state, the
barriers and the exchange of small Python objects differ between them:

- horovod (suite/train/horovod_backend.py): Horovod's fused allreduce, over MPI, Gloo or NCCL;
- tf (suite/train/tf_backend.py): TensorFlow's own collectives, through MultiWorkerMirroredStrategy
  (gRPC rings on CPUs, NCCL on GPUs), with the ranks' TF_CONFIG built from the launcher's MPI world.

Everything else (the model, the optimizer, data sharding, evaluation, checkpoints, mixed precision,
the device each rank pins, the MLPerf log) is the same code under both.
"""
import abc
from dataclasses import dataclass

from suite.common.config import DISTRIBUTIONS  # noqa: F401  (the names, kept with the setting)

# Launchers that start MPI ranks: a backend joins their MPI_COMM_WORLD instead of a job of its own.
MPI_LAUNCHERS = ("mpirun", "srun", "mpiexec")


class LaunchError(RuntimeError):
    """The processes were started in a way the run cannot use (e.g. more ranks than GPUs on a host)."""


@dataclass(frozen=True)
class Membership:
    """Where this process sits in the job, as the backend learnt it when it joined."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    cross_size: int
    controller: str  # what carries the collectives on a CPU: mpi, gloo, grpc (or none for one process)


class Backend(abc.ABC):
    """One distribution library. join() and connect() are called once, in that order, by dist.initialize."""

    name = ""

    @abc.abstractmethod
    def join(self, launcher):
        """Starts the library's membership in the launcher's world and returns the Membership.

        Runs before TensorFlow's runtime starts, so that thread pools and the visible GPU can still be
        chosen from the local rank and size."""

    def connect(self, device):
        """Starts the library's communication once the device is set ("cpu" or "gpu")."""

    # Inside the train step (a tf.function) ----------------------------------------------------------

    @abc.abstractmethod
    def gradients(self, tape, loss, variables, fp16):
        """tape.gradient(loss, variables), averaged over all ranks (sparse gradients made dense)."""

    @abc.abstractmethod
    def reduce_mean(self, tensors, fp16):
        """Dense tensors averaged over all ranks, as one group (accumulated gradients)."""

    # Eager, outside the step ------------------------------------------------------------------------

    @abc.abstractmethod
    def broadcast_variables(self, variables):
        """Every rank's variables take rank 0's values."""

    @abc.abstractmethod
    def average_variables(self, variables, name):
        """Each variable becomes its mean over ranks."""

    @abc.abstractmethod
    def sum(self, values, name):
        """A small float64 NumPy vector summed over ranks, exactly."""

    @abc.abstractmethod
    def broadcast_object(self, value, name):
        """Rank 0's Python object, on every rank."""

    @abc.abstractmethod
    def allgather_object(self, value, name):
        """Every rank's Python object, in rank order."""

    @abc.abstractmethod
    def barrier(self, name):
        """Returns once every rank has reached it."""

    @abc.abstractmethod
    def allreduce_ops(self):
        """An object with Horovod's allreduce signature (allreduce(tensor, op, compression, name), Sum,
        Average, Max, Compression.none/fp16), for the timed allreduce of the network check."""

    def nccl_built(self):
        return False

    def failed_in_a_peer(self, err):
        """True for the error a collective raises because another rank failed or left."""
        return False

    def rank_named_in(self, err):
        """The rank the library's error names as the one that failed, or None."""
        return None

    def end_after_failure(self, code):
        """Called once a failure has been reported and the log closed; returns to a normal exit."""

    def shutdown(self):
        """Frees ranks blocked in a collective with this one, where the library can; best effort."""
