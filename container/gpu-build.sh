#!/usr/bin/env bash
# The steps of container/Dockerfile.gpu-pypi, one per RUN, and the checks that stop its build.
#
#   bash container/gpu-build.sh environment   # /opt/venv: requirements-gpu.txt, mpi4py on Open MPI
#   bash container/gpu-build.sh compiler      # /opt/cuda: CUDA's nvcc from requirements-gpu-build.txt
#   bash container/gpu-build.sh horovod       # Horovod with NCCL, MPI and Gloo into /opt/venv
#   bash container/gpu-build.sh check         # the finished image: NCCL, a CUDA TensorFlow, one TensorFlow
#
# Wheels: PyPI's downloads are kept in $SUITE_WHEELHOUSE and the Horovod wheel in $SUITE_WHEELS/<key>;
# container/build.sh mounts $SUITE_CACHE_DIR's pypi/ and wheels/ there, so a rebuild on the same host
# downloads and compiles nothing it already has (without the mounts they are plain folders of the
# build stage, which the run stage does not copy). Every refusal is one line starting "error:".
# Sourced (tests/test_gpu_image.py), it only defines its functions.
set -euo pipefail

VENV=${SUITE_VENV:-/opt/venv}
CUDA_DIR=${SUITE_CUDA_DIR:-/opt/cuda}
CUDA_WHEELS=${SUITE_CUDA_WHEELS:-/opt/cuda-wheels}
WHEELHOUSE=${SUITE_WHEELHOUSE:-/root/.cache/mlperf-hvd-suite/pypi}
WHEELS=${SUITE_WHEELS:-/root/.cache/mlperf-hvd-suite/wheels}
LOG_DIR=${SUITE_BUILD_LOGS:-/tmp}

log() { printf '[gpu-build] %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# pip's output to a log; its last lines and one error line on failure.
quiet() {
  local name=$1; shift
  "$@" >>"$LOG_DIR/$name.log" 2>&1 || { tail -n 30 "$LOG_DIR/$name.log" >&2; die "$name: $* failed"; }
}

# The pins of requirements-gpu.txt that come as wheels (mpi4py is compiled against the image's MPI).
wheel_pins() { grep -Ev '^(#|$|mpi4py==)' requirements-gpu.txt; }

environment() {
  python3 -m venv --upgrade-deps "$VENV"
  # Horovod's setup.py builds its wheel with the wheel package, as scripts/setup.sh installs it.
  quiet pip-install "$VENV/bin/pip" install --no-cache-dir wheel
  mkdir -p "$WHEELHOUSE"
  log "downloading requirements-gpu.txt into $WHEELHOUSE (files already there are kept)"
  quiet pip-download "$VENV/bin/pip" download --dest "$WHEELHOUSE" -r <(wheel_pins)
  quiet pip-install "$VENV/bin/pip" install --no-cache-dir --no-index --find-links "$WHEELHOUSE" -r <(wheel_pins)
  quiet mpi4py "$VENV/bin/pip" install --no-cache-dir --no-binary=mpi4py \
    "$(grep -E '^mpi4py==' requirements-gpu.txt)"
}

# The nvcc wheels all unpack into nvidia/cu13; CMake's CUDA support wants a toolkit's layout.
compiler() {
  quiet cuda-wheels "$VENV/bin/pip" install --no-cache-dir --no-deps --target "$CUDA_WHEELS" \
    -r requirements-gpu-build.txt
  local root; root=$(compgen -G "$CUDA_WHEELS/nvidia/cu*" | head -n 1)
  [[ -x $root/bin/nvcc ]] || die "requirements-gpu-build.txt installed no nvcc under $CUDA_WHEELS/nvidia"
  ln -sfn "$root" "$CUDA_DIR"
  [[ -e $CUDA_DIR/lib64 ]] || ln -s lib "$CUDA_DIR/lib64"
  mkdir -p "$CUDA_DIR/targets/x86_64-linux"
  ln -sfn ../../include "$CUDA_DIR/targets/x86_64-linux/include"
  ln -sfn ../../lib "$CUDA_DIR/targets/x86_64-linux/lib"
  local so
  for so in "$CUDA_DIR"/lib/libcudart.so.*; do
    [[ -e $CUDA_DIR/lib/libcudart.so ]] || ln -s "$(basename "$so")" "$CUDA_DIR/lib/libcudart.so"
  done
  log "nvcc: $("$CUDA_DIR/bin/nvcc" --version | tail -n 2 | head -n 1)"
}

# NCCL comes with TensorFlow's CUDA wheels (nvidia-nccl-cu12), which ship only libnccl.so.2: CMake
# looks for libnccl.so.
nccl_home() {
  local home; home=$(compgen -G "$VENV/lib/python3*/site-packages/nvidia/nccl" | head -n 1)
  [[ -f $home/include/nccl.h ]] || die "no NCCL (nvidia/nccl/include/nccl.h) in $VENV: TensorFlow's and-cuda wheels are missing"
  [[ -e $home/lib/libnccl.so ]] || ln -s libnccl.so.2 "$home/lib/libnccl.so"
  printf '%s' "$home"
}

# Every nvcc that the build's log names must be the image's own: one on the build machine's PATH would
# make a Horovod that fits that machine, not the image.
check_cuda_compiler() {
  local build_log=$1 expected=$2
  local found
  found=$(grep -oE '(/[^ ":]+)*/nvcc\b' "$build_log" | sort -u || true)
  [[ -n $found ]] || die "Horovod's build log names no nvcc: CMake found no CUDA compiler, so no NCCL operations ($build_log)"
  local path
  while read -r path; do
    # The same file by another name (/opt/cuda is a link into the wheels) is the image's own.
    [[ $(readlink -m "$path") == "$(readlink -m "$expected")" ]] \
      || die "Horovod's CMake used the CUDA compiler $path, not the image's $expected"
  done <<<"$found"
}

# The key of the Horovod wheel: everything it is compiled from (the Python ABI, the compute
# capabilities, the TensorFlow pin, which fixes its CUDA and NCCL wheels too, and the compiler's pins),
# and nothing else, so that a new run-time pin such as Pillow's does not compile it again.
horovod_key() {
  local soabi; soabi=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')
  printf 'horovod-%s-%s-cc%s-%s\n' "$HOROVOD_VERSION" "$soabi" "${HOROVOD_BUILD_CUDA_CC_LIST//,/.}" \
    "$({ grep -E '^tensorflow' requirements-gpu.txt; cat requirements-gpu-build.txt; } | sha256sum | cut -c1-12)"
}

horovod() {
  : "${HOROVOD_VERSION:?}" "${HOROVOD_BUILD_CUDA_CC_LIST:?}"
  local dir; dir=$WHEELS/$(horovod_key)-gpu
  local wheel; wheel=$(compgen -G "$dir/horovod-*.whl" | head -n 1 || true)
  if [[ -n $wheel ]]; then
    log "reusing the Horovod wheel $wheel"
  else
    local nccl; nccl=$(nccl_home)
    mkdir -p "$WHEELS"
    local tmp; tmp=$(mktemp -d "$dir.partial.XXXXXX")
    local build_log=$LOG_DIR/horovod-build.log
    log "building Horovod $HOROVOD_VERSION with NCCL for compute capabilities $HOROVOD_BUILD_CUDA_CC_LIST (minutes)"
    # Only the image's compiler on PATH; one make job at a time (the build machine has other work).
    env PATH="$CUDA_DIR/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        CUDA_HOME="$CUDA_DIR" HOROVOD_CUDA_HOME="$CUDA_DIR" CUDACXX="$CUDA_DIR/bin/nvcc" \
        HOROVOD_NCCL_HOME="$nccl" HOROVOD_GPU_OPERATIONS=NCCL \
        HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="${MAKEFLAGS:--j1}" \
      "$VENV/bin/pip" wheel --verbose --no-deps --no-build-isolation --no-cache-dir -w "$tmp" \
        "horovod==$HOROVOD_VERSION" >"$build_log" 2>&1 \
      || { tail -n 30 "$build_log" >&2; die "Horovod $HOROVOD_VERSION did not build with NCCL ($build_log)"; }
    check_cuda_compiler "$build_log" "$CUDA_DIR/bin/nvcc"
    rm -rf "$dir"; mv "$tmp" "$dir"
    wheel=$(compgen -G "$dir/horovod-*.whl" | head -n 1) || die "pip wheel left no Horovod wheel in $dir"
  fi
  quiet horovod-install "$VENV/bin/pip" install --no-cache-dir --no-deps "$wheel"
}

# horovodrun --check-build's [X] lines must include TensorFlow, MPI, Gloo and NCCL.
check_build_report() {
  local report=$1 want
  for want in TensorFlow MPI Gloo NCCL; do
    grep -qE "\[X\] $want\b" <<<"$report" \
      || die "horovodrun --check-build does not list $want: Horovod would fall back to $( \
        [[ $want == NCCL ]] && echo 'CPU allreduce on GPUs' || echo "running without $want")"
  done
}

check() {
  local report
  report=$(TF_CPP_MIN_LOG_LEVEL=3 horovodrun --check-build 2>/dev/null) || die "horovodrun --check-build failed"
  check_build_report "$report"
  local verdict
  verdict=$(TF_CPP_MIN_LOG_LEVEL=3 python - <<'EOF' 2>"$LOG_DIR/check.log"
import importlib.metadata as metadata

import horovod
import horovod.tensorflow as hvd
import tensorflow as tf

names = sorted(d.metadata["Name"] for d in metadata.distributions())
tensorflows = [n for n in names if n.lower().replace("_", "-") in (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tf-nightly", "intel-tensorflow")]
if tensorflows != ["tensorflow"]:
    print(f"error: TensorFlow distributions {tensorflows}, not exactly ['tensorflow']")
if not tf.test.is_built_with_cuda():
    print("error: TensorFlow is not a CUDA build")
if not hvd.nccl_built():
    print("error: Horovod has no NCCL: it would fall back to CPU allreduce on GPUs")
info = tf.sysconfig.get_build_info()
print(f"TensorFlow {tf.__version__} (CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}), "
      f"Horovod {horovod.__version__} with NCCL {hvd.nccl_built()}, one TensorFlow distribution")
EOF
  ) || { tail -n 20 "$LOG_DIR/check.log" >&2; die "the image's Python cannot import TensorFlow and Horovod"; }
  local problem; problem=$(grep -m1 '^error:' <<<"$verdict" || true)
  [[ -z $problem ]] || die "${problem#error: }"
  log "$verdict"
}

main() {
  case ${1-} in
    environment | compiler | horovod | check) "$1" ;;
    *) die "usage: gpu-build.sh environment|compiler|horovod|check" ;;
  esac
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
