"""Published times to train of ResNet-50 that the report shows beside its own: never measured here."""
from suite.common.workload import PublishedResult, PublishedScaling

OCI_BLOG_URL = ("https://blogs.oracle.com/cloud-infrastructure/post/"
                "mlperf-benchmark-multi-node-ml-training-on-oci")
OCI_BLOG = (f"Oracle Cloud Infrastructure blog, [\"MLPerf benchmark: multi-node ML training on OCI\"]"
            f"({OCI_BLOG_URL}), 4x BM.GPU.GM4.8: the post gives these times only as points of its line graph "
            f"(its text states no figures), so they are read off the graph and approximate")
MLCOMMONS_TRAINING = "https://mlcommons.org/benchmarks/training/"
RESULTS_V11 = ("https://github.com/mlcommons/training_results_v1.1/tree/main/NVIDIA/results/"
               "dgxa100_ngc21.09_mxnet/resnet")

OCI_1_NODE = PublishedResult("ResNet-50 v1.1 (MLPerf v1.1 rules), OCI BM.GPU.GM4.8, 8x A100-80GB, RoCE", 8, 1,
                             31.5, OCI_BLOG)
OCI_4_NODES = PublishedResult("ResNet-50 v1.1 (MLPerf v1.1 rules), 4x OCI BM.GPU.GM4.8, 32x A100-80GB, RoCE",
                              32, 4, 10.67, OCI_BLOG)
NVIDIA_DGX_A100 = PublishedResult(
    "MLPerf Training v1.1 closed, NVIDIA DGX A100 80GB (MXNet 21.09), 8 GPUs", 8, 1, 29.15,
    f"[MLCommons Training v1.1 results]({MLCOMMONS_TRAINING}); logs: [training_results_v1.1 "
    f"NVIDIA/results/dgxa100_ngc21.09_mxnet/resnet/result_0..4.txt]({RESULTS_V11}): olympic mean "
    f"of run_stop - run_start",
    runs_ms=(1733744, 1747922, 1749323, 1749141, 1749773))

PUBLISHED = (OCI_1_NODE, OCI_4_NODES, NVIDIA_DGX_A100)
PUBLISHED_SCALING = (PublishedScaling("OCI BM.GPU.GM4.8, ResNet-50 v1.1: 1 node → 4 nodes", OCI_1_NODE,
                                      OCI_4_NODES),)
