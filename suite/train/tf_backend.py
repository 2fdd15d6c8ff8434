"""The tf backend: TensorFlow's own collectives through MultiWorkerMirroredStrategy, no Horovod.

The strategy is used for its collectives only. The model and the optimizer stay plain Keras objects
built outside its scope, exactly as under Horovod; the train step hands its gradients to
strategy.run, whose one replica per process (this rank's CPU or its one pinned GPU) all-reduces them
with the other workers: gRPC rings between CPUs, NCCL between GPUs. Rank 0's initial state reaches
the others as a sum in which every other rank adds zeros, which is exact.

The launcher's MPI communicator (mpi4py) carries what is not a tensor: the workers' addresses for
TF_CONFIG (suite/train/tf_config.py) and the small Python objects the session exchanges. Horovod is
never imported, so a tf run does not depend on Horovod's build (which TensorFlow >= 2.19 breaks
without patches); the suite's Keras code still needs Keras 2 (tf-keras) either way.
"""
import contextlib
import os
import re
import sys

import numpy as np
import tensorflow as tf

from suite.train import tf_config
from suite.train.backend import MPI_LAUNCHERS, Backend, LaunchError, Membership
SUM, MEAN = tf.distribute.ReduceOp.SUM, tf.distribute.ReduceOp.MEAN


class _OneProcess:
    """The MPI calls this backend makes, for a job of one process started without a launcher."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 1

    def bcast(self, value, root=0):
        return value

    def allgather(self, value):
        return [value]


def _communicator(launcher):
    if launcher == "horovodrun-gloo":
        raise LaunchError("--distribution tf cannot run under horovodrun: it starts Horovod's own "
                          "controller; launch with mpirun, srun or suite.cluster.launch --launcher mpirun")
    if launcher not in MPI_LAUNCHERS:
        return _OneProcess(), None
    from mpi4py import MPI
    return MPI.COMM_WORLD, MPI


class TensorFlowBackend(Backend):
    name = "tf"

    def __init__(self, bytes_per_pack=0):
        self._bytes_per_pack = bytes_per_pack
        self._comm = self._strategy = self._options = None
        self._rank = 0
        self._port = None
        self._workers = []
        self._compiled = {}

    def join(self, launcher):
        self._comm, mpi = _communicator(launcher)
        comm = self._comm
        self._rank, size = comm.Get_rank(), comm.Get_size()
        host = mpi.Get_processor_name() if mpi else os.uname().nodename
        hosts = comm.allgather(host)
        if mpi is not None:
            local = comm.Split_type(mpi.COMM_TYPE_SHARED, key=self._rank)
            local_rank, local_size = local.Get_rank(), local.Get_size()
            local.Free()
        else:
            local_rank, local_size = 0, 1
        if size > 1:
            # The port stays held until connect(), so that two ranks of one host cannot draw the same.
            self._port = tf_config.reserve_port()
            address = tf_config.worker_address(host, hosts, os.environ)
            self._workers = [f"{a}:{p}" for a, p in comm.allgather((address, self._port.getsockname()[1]))]
        return Membership(rank=self._rank, size=size, local_rank=local_rank, local_size=local_size,
                          cross_size=len(set(hosts)), controller="grpc" if size > 1 else "none")

    def connect(self, device):
        """TF_CONFIG, then the strategy, which starts this worker's server and meets the others."""
        tf_config.set_tf_config(self._workers or ["localhost:0"], self._rank)
        if self._port is not None:
            self._port.close()  # TensorFlow's server binds it next
        implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if device == "gpu"
                          else tf.distribute.experimental.CommunicationImplementation.RING)
        # Packs let a pack's all-reduce start once its gradients exist, while the backward pass goes on;
        # with none (0) TensorFlow concatenates every gradient first, after the whole backward pass.
        self._options = tf.distribute.experimental.CommunicationOptions(
            implementation=implementation, bytes_per_pack=self._bytes_per_pack)
        with _start_up_lines_hidden():
            # TensorFlow: the workers of TF_CONFIG, one replica each (this rank's CPU, or its pinned GPU).
            self._strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=self._options)

    def _all_reduce(self, op, tensors):
        """The tensors reduced over every worker, one batched collective per dtype (a batch is packed
        into one buffer, which takes a single dtype: the optimizer's step counter is an int64)."""
        def replica(*values):
            # TensorFlow: collective all-reduces over every worker. The identity places each value
            # on this replica's device, which the collective takes as its destination.
            context = tf.distribute.get_replica_context()
            out = [None] * len(values)
            for dtype in sorted({v.dtype for v in values}, key=lambda d: d.name):
                where = [i for i, v in enumerate(values) if v.dtype == dtype]
                placed = [tf.identity(values[i]) for i in where]
                reduced = context.all_reduce(op, placed, options=self._options)
                for i, value in zip(where, reduced):
                    out[i] = value
            return out
        return list(self._strategy.run(replica, args=tuple(tensors)))

    def _eager(self, op, tensors):
        """_all_reduce from eager code, through one tf.function per operation and list of shapes: each
        is traced once (eagerly, every collective would be a round trip of its own)."""
        key = (op, tuple((t.dtype, tuple(t.shape)) for t in tensors))
        if key not in self._compiled:
            self._compiled[key] = tf.function(lambda values: self._all_reduce(op, values), autograph=False)
        return self._compiled[key](list(tensors))

    def _summing(self, tensors):
        return self._eager(SUM, tensors)

    def _averaging(self, tensors):
        return self._eager(MEAN, tensors)

    def _reduce(self, op, tensors, fp16):
        tensors = [tf.convert_to_tensor(t) for t in tensors]  # IndexedSlices (embeddings) made dense
        if not fp16:
            return self._all_reduce(op, tensors)
        wide = [t.dtype for t in tensors]
        # As Horovod's fp16 compression: floats go over the wire in half precision, back in their dtype.
        narrow = [tf.cast(t, tf.float16) if t.dtype.is_floating else t for t in tensors]
        reduced = self._all_reduce(op, narrow)
        return [tf.cast(r, dtype) for r, dtype in zip(reduced, wide)]

    def gradients(self, tape, loss, variables, fp16):
        grads = tape.gradient(loss, variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        reduced = self._reduce(MEAN, [grads[i] for i in present], fp16) if present else []
        out = list(grads)
        for i, value in zip(present, reduced):
            out[i] = value
        return out

    def reduce_mean(self, tensors, fp16):
        return self._reduce(MEAN, list(tensors), fp16)

    def broadcast_variables(self, variables):
        variables = list(variables)
        # Rank 0 adds its values, every other rank zeros: the sum is rank 0's state, bit for bit.
        mine = [v.read_value() if self._rank == 0 else tf.zeros_like(v) for v in variables]
        for variable, value in zip(variables, self._summing(mine)):
            variable.assign(value)

    def average_variables(self, variables, name):
        variables = list(variables)
        for variable, value in zip(variables, self._averaging([v.read_value() for v in variables])):
            variable.assign(value)

    def sum(self, values, name):
        return self._summing([tf.constant(np.asarray(values, dtype=np.float64))])[0].numpy()

    def broadcast_object(self, value, name):
        return self._comm.bcast(value, root=0)

    def allgather_object(self, value, name):
        return self._comm.allgather(value)

    def barrier(self, name):
        self._summing([tf.constant(0.0)])[0].numpy()

    def allreduce_ops(self):
        return _AllreduceOps(self)

    def nccl_built(self):
        return bool(tf.config.list_logical_devices("GPU"))  # TensorFlow's GPU builds bring NCCL

    def rank_named_in(self, err):
        # TensorFlow names a worker as /job:worker/replica:0/task:N, and the task index is the rank.
        named = re.search(r"/job:worker/replica:\d+/task:(\d+)", str(err))
        rank = int(named.group(1)) if named else None
        return rank if rank is not None and rank != self._rank else None

    def end_after_failure(self, code):
        # TensorFlow's runtime, torn down at exit, waits for the other workers (the coordination
        # service's shutdown), which a failed job may never answer: a rank stopped (SIGSTOP) kept rank 0
        # waiting there for minutes after run_stop was written. Everything is written by now.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def failed_in_a_peer(self, err):
        # A collective whose peer died fails as unavailable (its connection) or aborted (the
        # coordination service's verdict), or is cancelled when this process's collectives are stopped.
        return isinstance(err, (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError))


@contextlib.contextmanager
def _start_up_lines_hidden():
    """Hides the info lines TensorFlow's server and coordination service print as they start.

    They go through absl's logging, which TF_CPP_MIN_LOG_LEVEL does not reach and which writes to the
    process's stderr directly, so the file descriptor itself is pointed at /dev/null for the start-up.
    A failure still reaches the user: it is raised as an exception, reported after this has ended.
    --verbose (TF_CPP_MIN_LOG_LEVEL=0) or a user's own lower level shows them.
    """
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") in ("", "0"):
        yield
        return
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class _AllreduceOps:
    """Horovod's allreduce signature over TensorFlow's collectives, for the timed allreduce."""

    Sum, Average, Max = "sum", "average", "max"

    class Compression:
        none, fp16 = False, True

    def __init__(self, backend):
        self._backend = backend
        self._gather = tf.function(self._all_gather, autograph=False)

    def allreduce(self, tensor, op="average", compression=False, name=None):
        if op == self.Max:
            return tf.reduce_max(self._gather(tensor), axis=0)
        reduced = self._backend._summing if op == self.Sum else self._backend._averaging
        if compression:
            return tf.cast(reduced([tf.cast(tensor, tf.float16)])[0], tensor.dtype)
        return reduced([tensor])[0]

    def _all_gather(self, tensor):
        def replica(value):
            context = tf.distribute.get_replica_context()
            return context.all_gather(tf.identity(value)[None], axis=0, options=self._backend._options)
        return self._backend._strategy.run(replica, args=(tensor,))
