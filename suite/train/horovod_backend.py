"""The horovod backend: Horovod's init, fused allreduce, broadcasts and object collectives."""
import numpy as np
import tensorflow as tf
import horovod.tensorflow as hvd

from suite.train.backend import MPI_LAUNCHERS, Backend, Membership


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


def _compression(fp16_allreduce):
    return hvd.Compression.fp16 if fp16_allreduce else hvd.Compression.none


class HorovodBackend(Backend):
    name = "horovod"

    def join(self, launcher):
        _start_horovod(launcher)
        return Membership(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                          local_size=hvd.local_size(), cross_size=hvd.cross_size(),
                          controller="gloo" if hvd.gloo_enabled() else "mpi")

    def gradients(self, tape, loss, variables, fp16):
        # Horovod: average gradients across ranks with a (fused) allreduce. Embedding lookups give
        # sparse gradients, which Horovod would allgather; as dense they join the fused allreduce.
        tape = hvd.DistributedGradientTape(tape, compression=_compression(fp16), sparse_as_dense=True)
        return tape.gradient(loss, variables)

    def reduce_mean(self, tensors, fp16):
        # Horovod: one grouped (fused) allreduce for every tensor, as DistributedGradientTape does.
        return hvd.grouped_allreduce(list(tensors), op=hvd.Average, compression=_compression(fp16),
                                     name="accumulated_gradients")

    def broadcast_variables(self, variables):
        # Horovod: rank 0's values, to every rank.
        hvd.broadcast_variables(list(variables), root_rank=0)

    def average_variables(self, variables, name):
        # Horovod: one fused allreduce for the whole group.
        averaged = hvd.grouped_allreduce([v.read_value() for v in variables], op=hvd.Average, name=name)
        for variable, value in zip(variables, averaged):
            variable.assign(value)

    def sum(self, values, name):
        tensor = tf.constant(np.asarray(values, dtype=np.float64))
        # Horovod: exact sums (not averages) for evaluation counts.
        return hvd.allreduce(tensor, op=hvd.Sum, name=name).numpy()

    def broadcast_object(self, value, name):
        # Horovod: one decision (seed, run id) shared by all ranks.
        return hvd.broadcast_object(value, root_rank=0, name=name)

    def allgather_object(self, value, name):
        # Horovod: collect per-rank measurements on all ranks.
        return hvd.allgather_object(value, name=name)

    def barrier(self, name):
        # Horovod: a one-element allreduce completes only when every rank has submitted it.
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name=name).numpy()

    def allreduce_ops(self):
        return hvd

    def nccl_built(self):
        return bool(hvd.nccl_built())

    def failed_in_a_peer(self, err):
        return "Horovod has been shut down" in str(err)

    def shutdown(self):
        # Horovod: ranks blocked in a collective with this one fail instead of hanging.
        try:
            hvd.shutdown()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
