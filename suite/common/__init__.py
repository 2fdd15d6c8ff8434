"""What both sides import: configs and presets, the workload contract, cluster profiles, run files,
staged output and allreduce arithmetic. Imports nothing of the suite's other packages, never TensorFlow
or Horovod."""
