#!/usr/bin/env bash
# make image-gpu-test: the GPU image from PyPI (container/Dockerfile.gpu-pypi) built for real with
# buildah on the debootstrapped base of make image-test, and checked as far as a machine without a
# GPU can: horovodrun --check-build lists NCCL, Horovod says NCCL, TensorFlow is a CUDA build, one
# TensorFlow distribution, the minimum driver in the image's label and environment, and the image's
# own command (make demo, one epoch) trains on the CPU and writes a log the 2.1.0 checker passes.
#
# Not part of .ci/run: a cold build downloads 2.5 GB and compiles Horovod's CUDA kernels. Everything
# runs at the lowest CPU and I/O priority (other work shares the machine) and with one make job.
# Caches: buildah's layers, and in $SUITE_CACHE_DIR the PyPI wheelhouse (pypi/) and the Horovod
# wheel (wheels/), which container/build.sh mounts into the build. Knobs: those of make image-test.
set -euo pipefail

# shellcheck source=scripts/image-test.sh
source "$(dirname "${BASH_SOURCE[0]}")/image-test.sh"

# What the run stage must say about the driver it needs.
min_driver_problems() {
  local image=$1
  buildah inspect --type image "$image" | python3 -c '
import json, sys
config = json.load(sys.stdin)["Docker"]["config"]
label = (config.get("Labels") or {}).get("org.mlperf-hvd-suite.min-nvidia-driver")
env = dict(item.split("=", 1) for item in config.get("Env") or [])
stated = env.get("SUITE_MIN_NVIDIA_DRIVER")
if not label or stated != label:
    print(f"minimum driver: label {label!r}, SUITE_MIN_NVIDIA_DRIVER {stated!r}")
else:
    print(f"ok {label}")'
}

test_gpu_pypi_image() {
  local base=$1 revision=$2
  local started=$SECONDS
  build --device gpu-pypi --base-image "$base"
  local build_seconds=$((SECONDS - started))
  log "GPU image (PyPI) built in $build_seconds s ($(grep -c '^--> Using cache' "$work_dir/build.log" || true) steps from cache): $tag"
  local driver; driver=$(min_driver_problems "$tag")
  [[ $driver == ok\ * ]] || die "$driver"
  new_container "$tag"
  local ctr=$container
  buildah run --isolation chroot "$ctr" -- env TF_CPP_MIN_LOG_LEVEL=3 horovodrun --check-build 2>/dev/null \
    | tee "$work_dir/check-build.txt" >&2
  grep -q '\[X\] NCCL' "$work_dir/check-build.txt" || die "horovodrun --check-build in the image does not list NCCL"
  buildah run --isolation chroot "$ctr" -- bash container/gpu-build.sh check \
    || die "the image fails container/gpu-build.sh check"
  # TensorFlow's CUDA build prints its start-up lines whatever TF_CPP_MIN_LOG_LEVEL says.
  run_and_check_demo "$ctr" "$tag" "$revision" --cuda-build
  local size; size=$(buildah images --format '{{.Size}}' "$tag" | head -n 1)
  log "GPU image (PyPI) passed: $tag, $size, built in $build_seconds s, minimum driver ${driver#ok }"
}

gpu_main() {
  local started=$SECONDS
  renice -n 19 -p $$ >/dev/null
  ionice -c3 -p $$
  export MAKEFLAGS=-j1
  local revision; revision=$(expected_revision)
  prepare image-gpu-test
  test_gpu_pypi_image "$base" "$revision"
  log "passed in $((SECONDS - started)) s"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  gpu_main "$@"
fi
