"""MLPerf result log written with mlperf_logging.mllog, from rank 0 only."""
import logging
import os
import threading

from mlperf_logging import mllog
from mlperf_logging.mllog import mllog as mllog_impl

SUCCESS = "success"
ABORTED = "aborted"


class MLPerfLog:
    """The run's MLPerf log. Every rank may call it; only the root rank writes.

    Values come from the caller (the loop and the workload); this class knows the event
    names and their metadata, not the benchmark.
    """

    def __init__(self, path, enabled):
        self.path = path
        self.enabled = enabled
        self._stopped = False
        self._samples_trained = None  # an int once track_samples is called
        self._lock = threading.RLock()
        self._logger = None
        if enabled:
            # A logger of our own, so repeated runs in one process do not stack handlers on
            # mllog's shared one, and the log goes to its file without flooding stdout.
            py_logger = logging.getLogger(f"mlperf_hvd_suite.mllog.{os.path.abspath(path)}")
            py_logger.propagate = False
            py_logger.setLevel(logging.INFO)
            for handler in list(py_logger.handlers):
                py_logger.removeHandler(handler)
                handler.close()
            handler = logging.FileHandler(path, mode="a")
            handler.setLevel(logging.INFO)
            py_logger.addHandler(handler)
            self._handler = handler
            self._logger = mllog_impl.MLLogger(logger=py_logger, default_stack_offset=2)

    def event(self, key, value=None, metadata=None):
        if self._logger:
            self._logger.event(key=key, value=value, metadata=metadata)
            self._handler.flush()

    def start(self, key, value=None, metadata=None):
        if self._logger:
            self._logger.start(key=key, value=value, metadata=metadata)
            self._handler.flush()

    def end(self, key, value=None, metadata=None):
        if self._logger:
            self._logger.end(key=key, value=value, metadata=metadata)
            self._handler.flush()

    # Standard groups of events -------------------------------------------------------------

    def submission(self, benchmark, org, division, platform, status):
        self.event(mllog.constants.SUBMISSION_BENCHMARK, benchmark)
        self.event(mllog.constants.SUBMISSION_ORG, org)
        self.event(mllog.constants.SUBMISSION_DIVISION, division)
        self.event(mllog.constants.SUBMISSION_STATUS, status)
        self.event(mllog.constants.SUBMISSION_PLATFORM, platform)

    def hyperparameters(self, values):
        """Logs a mapping of MLPerf keys (global_batch_size, opt_name, lars_*, ...) in order."""
        for key, value in values.items():
            self.event(key, value)

    def weights_initialization(self, tensor_names):
        for name in tensor_names:
            self.event(mllog.constants.WEIGHTS_INITIALIZATION, metadata={"tensor": name})

    def block_start(self, first_epoch_num, epoch_count):
        self.start(mllog.constants.BLOCK_START, metadata={"first_epoch_num": first_epoch_num,
                                                          "epoch_count": epoch_count})

    def block_stop(self, first_epoch_num, epoch_count):
        self.end(mllog.constants.BLOCK_STOP, metadata={"first_epoch_num": first_epoch_num,
                                                       "epoch_count": epoch_count})

    def epoch_start(self, epoch_num):
        self.start(mllog.constants.EPOCH_START, metadata={"epoch_num": epoch_num})

    def epoch_stop(self, epoch_num):
        self.end(mllog.constants.EPOCH_STOP, metadata={"epoch_num": epoch_num})

    def eval_start(self, epoch_num):
        self.start(mllog.constants.EVAL_START, metadata={"epoch_num": epoch_num})

    def eval_result(self, epoch_num, accuracy):
        self.end(mllog.constants.EVAL_STOP, metadata={"epoch_num": epoch_num})
        self.event(mllog.constants.EVAL_ACCURACY, float(accuracy), metadata={"epoch_num": epoch_num})

    def track_samples(self, trained=0):
        """From now on every end of the run, normal or aborted, logs train_samples right before run_stop.

        BERT's convergence unit: the 2.1.0 checker wants it exactly once, and an aborted run (NaN loss,
        a lost rank, a signal) is an allowed non-converged result only if its log passes.
        """
        self._samples_trained = trained

    def samples_trained(self, count):
        """The samples trained so far (the loop calls it after every step)."""
        if self._samples_trained is not None:
            self._samples_trained = count

    def run_stop(self, status, reason=None):
        """Closes the run once; later calls are ignored so an abort after success cannot overwrite it.

        Also called from the signal watcher's and the rank watch's threads while the main thread may be
        logging.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            if self._samples_trained is not None:
                self.event("train_samples", self._samples_trained)
            metadata = {"status": status}
            if reason:
                metadata["reason"] = reason
            self.end(mllog.constants.RUN_STOP, metadata=metadata)

    def close(self):
        with self._lock:
            if self._logger:
                self._handler.close()
                self._logger.logger.removeHandler(self._handler)
                self._logger = None
