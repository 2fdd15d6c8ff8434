"""Runs inside every rank, under TensorFlow and Horovod: Horovod set-up, the run, the loop, the MLPerf log,
run directories, checkpoints and the allreduce benchmark. May import suite.common, never suite.cluster."""
