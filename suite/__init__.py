"""Shared machinery of the benchmark suite: config, Horovod set-up, MLPerf logging, the training loop."""
import os

# Horovod 0.28.1 does not work with Keras 3, so TensorFlow >= 2.16 must resolve
# `tf.keras` to the tf-keras package. This has to happen before TensorFlow is first
# imported, which is why it lives in the package __init__ that every entry point imports.
# On TensorFlow 2.15 (NGC containers) tf.keras is Keras 2 already and the variable is ignored.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# Quieter TensorFlow start-up; a user's own setting wins.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
