"""Runs inside every rank, under TensorFlow and Horovod: Horovod set-up, the run, the loop, the MLPerf log,
run directories, checkpoints, the allreduce benchmark and a GPU node's self-test (gpu_selftest). May import
suite.common, never suite.cluster."""
