"""Published times to train of BERT that the report shows beside its own: never measured here."""
from suite.common.workload import PublishedResult

MLCOMMONS_TRAINING = "https://mlcommons.org/benchmarks/training/"
RESULTS_V21 = ("https://github.com/mlcommons/training_results_v2.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc22.09_pytorch/bert")

PUBLISHED = (
    PublishedResult(
        "MLPerf Training v2.1 closed, NVIDIA dgxa100_ngc22.09_pytorch, 8x A100-80GB", 8, 1, 16.88,
        f"[MLCommons Training v2.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v2.1 "
        f"NVIDIA/results/dgxa100_ngc22.09_pytorch/bert/result_0..9.txt]({RESULTS_V21}): olympic mean "
        f"of run_stop - run_start",
        runs_ms=(925828, 1049772, 987675, 1111603, 1050027, 1050194, 988610, 991607, 993042, 992503)),
)
