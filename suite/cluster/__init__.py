"""Runs on a login node or a laptop: hostfiles, launch, deploy templates, sweeps, results, the scaling
model and the report. May import suite.common; never TensorFlow, Horovod or suite.train."""
