"""Projected step time, scaling efficiency and time to train of data-parallel training (pure Python, no
TensorFlow). The model and its sources are in model.py's docstring.

model.py                    the throughput model (Scenario with its per-GPU rate table, the ring
                            allreduce, the projection, its formula, the busbw plateau, the tables
                            beside measured rows)
projected_time_to_train.py  the time-to-train projection from a measured scale (the scale's own
                            figures are suite.cluster.measured_time_to_train)
cli.py                      the command line (python -m suite.cluster.scaling, mlperf-scaling)
"""
from suite.cluster.scaling.model import *  # noqa: F401,F403  (the package's names, as before the split)
from suite.cluster.scaling.projected_time_to_train import *  # noqa: F401,F403
from suite.cluster.scaling.cli import main  # noqa: F401  (the console script mlperf-scaling)
