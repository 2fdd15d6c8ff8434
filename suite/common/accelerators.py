"""Named accelerator peaks for MFU: plain data, readable without TensorFlow (the config checks names).

Dense (no structured sparsity) tensor-core peaks in TFLOP/s, per GPU, from NVIDIA's datasheets. A
run's `fp32` precision is counted against the TF32 peak: TensorFlow runs float32 matmuls and
convolutions on Ampere and Hopper tensor cores as TF32 unless told otherwise
(tf.config.experimental.enable_tensor_float_32_execution).
"""

# precision -> TFLOP/s
PEAK_TFLOPS = {
    # A100 SXM4/PCIe, 40 or 80 GB: TF32 156, BF16/FP16 312 (the datasheet's figures without sparsity),
    # https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf
    "a100": {"fp32": 156.0, "fp16": 312.0, "bf16": 312.0},
    # H100 SXM5: the datasheet gives TF32 989 and BF16/FP16 1,979 with sparsity; half of each without,
    # https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet
    "h100-sxm": {"fp32": 494.5, "fp16": 989.5, "bf16": 989.5},
}


def peak_tflops(accelerator, precision):
    """The named accelerator's peak at a run's precision; raises ValueError naming a wrong name."""
    if accelerator not in PEAK_TFLOPS:
        raise ValueError(f"accelerator {accelerator!r} has no peak on record; choose one of "
                         f"{', '.join(sorted(PEAK_TFLOPS))}, or leave it empty to measure a matmul peak")
    return PEAK_TFLOPS[accelerator][precision]
