"""The suite's shared machinery, in three packages by where the code runs.

suite.train    inside every rank, under TensorFlow and Horovod: set-up, the loop, the MLPerf log.
suite.cluster  on a login node or a laptop, never importing TensorFlow or Horovod: hostfiles,
               launch, deploy, sweeps, results, the scaling model and the report.
suite.common   what both import: configs and presets, the workload contract, cluster profiles,
               files, allreduce arithmetic; no TensorFlow, no Horovod.

This file only sets TensorFlow's environment, and what its import leaves out, before any
TensorFlow import.
"""
import contextlib
import importlib.util
import os
import sys


def _legacy_keras_available():
    # find_spec only looks the package up; importing it here would load TensorFlow too early.
    return importlib.util.find_spec("tf_keras") is not None


# Horovod 0.28.1 does not work with Keras 3, so on TensorFlow >= 2.16 `tf.keras` must resolve
# to the tf-keras package. That has to be decided before TensorFlow is first imported, which
# is why it lives in the package __init__ that every entry point imports. TensorFlow 2.15
# (NGC containers) honours the variable too, but only with tf-keras installed; without it,
# 2.15's own tf.keras is Keras 2 already, so the variable is left unset. A user's own
# setting always wins.
if _legacy_keras_available():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
# TensorFlow's C++ start-up and info lines (oneDNN, CPU features, ...) stay hidden: a rank's first line
# is the suite's own. A user's own setting wins, and the entry points' --verbose shows them all.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# tf-keras imports pandas and SciPy at its start when they are installed, for uses no rank has
# (DataFrames given to fit(), sparse inputs, ImageDataGenerator's transforms), and mlperf-logging
# installs both (its result summarizer and RCP checker). Without them a rank's imports took 2.92 s
# against 3.53 (BENCHMARKS.md, "A rank's imports").
TENSORFLOW_EXTRAS_HELD_BACK = ("pandas", "scipy")


@contextlib.contextmanager
def lean_tensorflow_import(held_back=TENSORFLOW_EXTRAS_HELD_BACK):
    """Within it, importing TensorFlow skips the optional packages `held_back` (their imports fail
    as if they were not installed, which tf-keras tolerates); after it, they import as usual."""
    blocked = [name for name in held_back if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # the import system's own "not importable" marker
    try:
        yield
    finally:
        for name in blocked:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]


def show_tensorflow_messages():
    """--verbose: every TensorFlow C++ message; must run before TensorFlow is imported."""
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"


def require_keras2(tf):
    """Fails clearly when tf.keras turned out to be Keras 3, which Horovod 0.28.1 cannot drive."""
    # Keras 3 exposes keras.version(); the Keras 2 packages behind tf.keras do not.
    version = tf.keras.version() if callable(getattr(tf.keras, "version", None)) else "2"
    if not version.startswith("2"):
        minor = ".".join(tf.__version__.split(".")[:2])
        raise ImportError(f"tf.keras is Keras {version}; Horovod needs Keras 2: "
                          f"pip install tf-keras=={minor}.* and set TF_USE_LEGACY_KERAS=1")
