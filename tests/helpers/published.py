"""The published MLPerf result folders kept under tests/data/published (their READMEs name the sources)."""
import os

from helpers.running import REPO

ROOT = os.path.join(REPO, "tests", "data", "published")
DELL = os.path.join(ROOT, "training_results_v1.1", "Dell", "results")
NVIDIA = os.path.join(ROOT, "training_results_v2.1", "NVIDIA", "results")
# (folder, ruleset, GPUs): Dell's ResNet-50 on 2 and 8 nodes of 4 A100 at 408 per GPU, NVIDIA's BERT on
# 1 and 8 DGX A100.
DELL_8 = (os.path.join(DELL, "2xR750xax4A100-PCIE-80GB", "resnet"), "1.1.0", 8)
DELL_32 = (os.path.join(DELL, "8xR750xax4A100-PCIE-80GB", "resnet"), "1.1.0", 32)
BERT_8 = (os.path.join(NVIDIA, "dgxa100_ngc22.09_pytorch", "bert"), "2.1.0", 8)
BERT_64 = (os.path.join(NVIDIA, "dgxa100_n8_ngc22.09_pytorch", "bert"), "2.1.0", 64)
FOLDERS = (DELL_8, DELL_32, BERT_8, BERT_64)
PAIRS = ((DELL_8, DELL_32), (BERT_8, BERT_64))
