"""One package per MLPerf benchmark; each holds model, input pipeline, optimizer and workload."""
import suite  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
