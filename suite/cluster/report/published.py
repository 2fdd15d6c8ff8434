"""Published times to train that the report shows beside its own: never measured here."""
from dataclasses import dataclass

OCI_BLOG_URL = ("https://blogs.oracle.com/cloud-infrastructure/post/"
                "mlperf-benchmark-multi-node-ml-training-on-oci")
OCI_BLOG = (f"Oracle Cloud Infrastructure blog, [\"MLPerf benchmark: multi-node ML training on OCI\"]"
            f"({OCI_BLOG_URL}), 4x BM.GPU.GM4.8: the post gives these times only as points of its line graph "
            f"(its text states no figures), so they are read off the graph and approximate")
MLCOMMONS_TRAINING = "https://mlcommons.org/benchmarks/training/"
RESULTS_V11 = ("https://github.com/mlcommons/training_results_v1.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc21.09_mxnet/resnet")
RESULTS_V21 = ("https://github.com/mlcommons/training_results_v2.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc22.09_pytorch/bert")


@dataclass(frozen=True)
class Reference:
    """A published time to train, never measured here."""

    benchmark: str
    system: str
    gpus: int
    nodes: int
    minutes: float
    source: str
    runs_ms: tuple = ()  # run_stop - run_start of each published log, when the row lists its runs


REFERENCES = (
    Reference("resnet", "ResNet-50 v1.1 (MLPerf v1.1 rules), OCI BM.GPU.GM4.8, 8x A100-80GB, RoCE", 8, 1,
              31.5, OCI_BLOG),
    Reference("resnet", "ResNet-50 v1.1 (MLPerf v1.1 rules), 4x OCI BM.GPU.GM4.8, 32x A100-80GB, RoCE", 32, 4,
              10.67, OCI_BLOG),
    Reference("resnet", "MLPerf Training v1.1 closed, NVIDIA DGX A100 80GB (MXNet 21.09), 8 GPUs", 8, 1,
              29.15,
              f"[MLCommons Training v1.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v1.1 "
              f"NVIDIA/results/dgxa100_ngc21.09_mxnet/resnet/result_0..4.txt]({RESULTS_V11}): olympic mean "
              f"of run_stop - run_start",
              runs_ms=(1733744, 1747922, 1749323, 1749141, 1749773)),
    Reference("bert", "MLPerf Training v2.1 closed, NVIDIA dgxa100_ngc22.09_pytorch, 8x A100-80GB", 8, 1,
              16.88,
              f"[MLCommons Training v2.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v2.1 "
              f"NVIDIA/results/dgxa100_ngc22.09_pytorch/bert/result_0..9.txt]({RESULTS_V21}): olympic mean "
              f"of run_stop - run_start",
              runs_ms=(925828, 1049772, 987675, 1111603, 1050027, 1050194, 988610, 991607, 993042, 992503)),
)
# Published scaling, time-to-train ratios between two published rows: (smaller, larger).
PUBLISHED_RATIOS = (("OCI BM.GPU.GM4.8, ResNet-50 v1.1: 1 node → 4 nodes", REFERENCES[0], REFERENCES[1]),)
