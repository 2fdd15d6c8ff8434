"""The container Dockerfiles: the GPU image on NGC's TensorFlow or from PyPI, the CPU image by setup.sh."""
import os
import re

from suite.cluster.deploy.job import REPO, IMAGE_REF, DeployError, check_flag, check_port, fill

# NGC TensorFlow 24.03 ships TensorFlow 2.15, the last Keras-2 release (docs/gpu-workflow.md).
DEFAULT_NGC_TAG = "24.03-tf2-py3"
DEFAULT_CPU_BASE = "python:3.11-slim-bookworm"
# The suite's run-time needs that the NGC image lacks; pinned from requirements.txt. Pillow is left
# out: its pin has no wheel for the image's Python 3.10, and only the data converters need it.
GPU_PINS = ("mpi4py", "mlperf-logging", "pyyaml", "tqdm")
# The GPU image from PyPI (--base pypi): Horovod's CUDA kernels for A100 and H100, compiled by CUDA
# 13.0, whose code needs an R580 driver (CUDA 13.0's release notes: 580.65.06 or newer on Linux).
PYPI_CUDA_CC_LIST = "80,90"
PYPI_MIN_DRIVER = "580.65.06"
GPU_BASES = ("ngc", "pypi")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


def file_name(device, base):
    """container/Dockerfile.<this>: gpu (NGC), gpu-pypi or cpu."""
    return f"Dockerfile.{device}-pypi" if device == "gpu" and base == "pypi" else f"Dockerfile.{device}"


def render(device, args):
    check_port(args.ssh_port)
    if device == "gpu" and getattr(args, "base", "ngc") == "pypi":
        return _render_pypi(args)
    check_flag("--ngc-tag", args.ngc_tag, IMAGE_TAG, "an image tag such as " + DEFAULT_NGC_TAG)
    check_flag("--base-image", args.base_image, IMAGE_REF, "an image reference")
    if device == "gpu":
        command = (f"dockerfile --device gpu --ngc-tag {args.ngc_tag} --ssh-port {args.ssh_port} "
                   f"--base-image {args.base_image}")
        values = {"ngc_tag": args.ngc_tag, "ssh_port": args.ssh_port, "horovod_version": horovod_version(),
                  "pins": " ".join(gpu_pins()), "base_image": args.base_image}
        sources = ("suite/cluster/templates/Dockerfile.gpu, requirements.txt (pins), "
                   "scripts/setup.sh (Horovod)")
    else:
        command = f"dockerfile --device cpu --base-image {args.base_image}"
        values = {"base_image": args.base_image}
        sources = "suite/cluster/templates/Dockerfile.cpu"
    values["header"] = (f"# Rendered by: python -m suite.cluster.deploy {command}\n# Sources: {sources}.\n"
                        f"# Change those and render again rather than editing this file.")
    return fill(f"Dockerfile.{device}", values)


def _render_pypi(args):
    check_flag("--base-image", args.base_image, IMAGE_REF, "an image reference")
    command = f"dockerfile --device gpu --base pypi --ssh-port {args.ssh_port} --base-image {args.base_image}"
    sources = ("suite/cluster/templates/Dockerfile.gpu-pypi, requirements-gpu.txt (TensorFlow), "
               "scripts/setup.sh (Horovod)")
    values = {"ssh_port": args.ssh_port, "horovod_version": horovod_version(), "base_image": args.base_image,
              "tensorflow_version": pypi_tensorflow_version(), "cuda_cc_list": PYPI_CUDA_CC_LIST,
              "min_driver": PYPI_MIN_DRIVER,
              "header": (f"# Rendered by: python -m suite.cluster.deploy {command}\n# Sources: {sources}.\n"
                         f"# Change those and render again rather than editing this file.")}
    return fill("Dockerfile.gpu-pypi", values)


def pypi_tensorflow_version():
    """The version of tensorflow[and-cuda] in requirements-gpu.txt."""
    match = re.search(r"^tensorflow\[and-cuda\]==([0-9][0-9.]*)\s*$", _source_file("requirements-gpu.txt"),
                      re.MULTILINE)
    if not match:
        raise DeployError("requirements-gpu.txt: no tensorflow[and-cuda]==<version> line")
    return match[1]


def min_nvidia_driver(image):
    """The oldest NVIDIA driver an image needs, told by its tag: container/build.sh tags the PyPI GPU
    image ...-gpu-pypi (a squashfs file that enroot imported from it keeps the name); "" for others."""
    return PYPI_MIN_DRIVER if image and re.search(r"-gpu-pypi(\.sqsh)?$", image) else ""


def horovod_version():
    """HOROVOD_VERSION of scripts/setup.sh, the one place that pins Horovod."""
    text = _source_file(os.path.join("scripts", "setup.sh"))
    match = re.search(r"^HOROVOD_VERSION=([0-9][0-9.]*)\s*$", text, re.MULTILINE)
    if not match:
        raise DeployError("scripts/setup.sh: no HOROVOD_VERSION=<version> line")
    return match[1]


def gpu_pins():
    """The pins of GPU_PINS in requirements.txt, in that order."""
    pins = {}
    for line in _source_file("requirements.txt").splitlines():
        name, sep, version = line.split("#", 1)[0].strip().partition("==")
        if sep:
            pins[name.lower()] = f"{name}=={version}"
    missing = [name for name in GPU_PINS if name not in pins]
    if missing:
        raise DeployError(f"requirements.txt: no name==version pin for {', '.join(missing)}")
    return [pins[name] for name in GPU_PINS]


def _source_file(relative):
    try:
        with open(os.path.join(REPO, relative)) as handle:
            return handle.read()
    except OSError as err:
        raise DeployError(f"{relative}: {err.strerror}; rendering Dockerfiles needs the suite's source "
                          f"checkout") from None
