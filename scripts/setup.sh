#!/usr/bin/env bash
# Sets up everything the suite needs on a fresh Debian + Python 3.11 machine:
# Debian packages (Open MPI, cmake, g++; for the tests shellcheck, openssh-server and iproute2 for the
# two-host cluster of network namespaces, Slurm 22.05 and munge for the Slurm cluster on those hosts, and
# chromium to render the report's HTML), a virtual environment with the pinned
# dependencies, and Horovod built from source with TensorFlow, Gloo and MPI.
#
# Idempotent: the environment is cached outside the clone, keyed on the pinned
# versions, so a repeat run takes seconds. The clone gets a `.venv` symlink to it.
#
# Environment knobs:
#   SUITE_CACHE_DIR   where environments and the Horovod wheel are cached
#                     (default: ~/.cache/mlperf-hvd-suite); container/build.sh mounts its wheels/
#                     into the CPU image's build, whose set-up reuses a wheel of the same key
#   SUITE_DEVICE      cpu | gpu (default: gpu when nvidia-smi works, else cpu);
#                     gpu installs `tensorflow` and builds Horovod with NCCL.
#   SUITE_PYTHON      interpreter used to create the environment (default: python3.11)
#   SUITE_SKIP_APT=1  do not touch Debian packages (e.g. inside a prepared image)
#   SUITE_REQUIREMENTS  pinned requirements file (default: requirements.txt); e.g.
#                     requirements-tf2.15.txt for the TensorFlow 2.15 (NGC-era) environment
#   SUITE_ENV_LINK    name of the link to the environment in the clone (default: .venv)
set -euo pipefail

HOROVOD_VERSION=0.28.1
SETUP_REVISION=2   # bump to invalidate cached environments after changing this script

repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${SUITE_CACHE_DIR:-$HOME/.cache/mlperf-hvd-suite}
python_bin=${SUITE_PYTHON:-python3.11}
requirements=$repo_dir/${SUITE_REQUIREMENTS:-requirements.txt}
env_link=$repo_dir/${SUITE_ENV_LINK:-.venv}

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

detect_device() {
  if [[ -n ${SUITE_DEVICE:-} ]]; then echo "$SUITE_DEVICE"; return; fi
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo gpu
  else
    echo cpu
  fi
}

install_debian_packages() {
  [[ ${SUITE_SKIP_APT:-0} == 1 ]] && return
  # The tests run their own munged, slurmctld and slurmds (tests/slurmcluster.py), never the packages' services.
  local wanted=(openmpi-bin libopenmpi-dev cmake g++ make git shellcheck openssh-server openssh-client iproute2
              chromium slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge)
  local missing=()
  for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  ((${#missing[@]} == 0)) && return
  command -v apt-get >/dev/null || die "Debian packages missing (${missing[*]}) and no apt-get to install them"
  local sudo=
  [[ $(id -u) -ne 0 ]] && sudo=sudo
  log "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Requirements for this device: on GPU hosts the CPU-only TensorFlow wheel is swapped
# for the full one of the same version.
device_requirements() {
  if [[ $1 == gpu ]]; then
    sed -e 's/^tensorflow-cpu==/tensorflow==/' "$requirements"
  else
    cat "$requirements"
  fi
}

# Packages installed without their own requirements. tf-keras asks for `tensorflow`, which next to
# `tensorflow-cpu` would make two distributions writing one tensorflow/ folder (the CUDA build's
# start-up errors on every CPU rank, and removing either breaks the other); TensorFlow itself is
# pinned above, and tf-keras needs nothing else.
NO_DEPS='^tf-keras=='

tensorflow_pin() { grep -E '^tensorflow(-cpu)?==' "$requirements" | sed 's/.*==//'; }

environment_key() {
  local device=$1
  { device_requirements "$device"; echo "horovod=$HOROVOD_VERSION device=$device rev=$SETUP_REVISION";
    "$python_bin" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-12
}

# What the compiled Horovod depends on besides its sources, one word per part, so that two machines
# (or the host and the image built on it) share a wheel exactly when it fits both: the TensorFlow it
# is compiled against, the device (NCCL or not), the Python ABI of its extension modules (SOABI:
# 3.11.7 and 3.11.2 are one ABI, the micro version is not part of it), the C library and C++
# compiler it was linked with, and the MPI it links (its upstream version: Debian's rebuilds of
# Open MPI 4.1.4 keep libmpi.so.40's ABI). On GPU hosts, CUDA's compiler too.
wheel_key() {
  local venv=$1 device=$2
  local soabi glibc gxx mpi
  soabi=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("SOABI"))')
  glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | sed -n 's/^glibc //p')
  gxx=$(g++ -dumpfullversion 2>/dev/null || true)
  mpi=$(mpirun --version 2>/dev/null | head -n 1 || true)
  if [[ $mpi =~ ^mpirun\ \(Open\ MPI\)\ ([0-9][0-9.]*)$ ]]; then
    mpi=ompi${BASH_REMATCH[1]}
  elif [[ -n $mpi ]]; then  # another MPI: its own banner, shortened
    mpi=mpi$(sha256sum <<<"$mpi" | cut -c1-8)
  fi
  local key
  key=horovod-$HOROVOD_VERSION-tf$(tensorflow_pin)-$device-$soabi-glibc${glibc:-none}-gcc${gxx:-none}-${mpi:-nompi}
  if [[ $device == gpu ]]; then
    key+=-cuda$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)
  fi
  printf '%s' "$key"
}

# Builds the Horovod wheel once per wheel_key and keeps it in the cache, which container/build.sh
# mounts into the CPU image's build: an image that matches the host's key installs the host's wheel.
build_horovod_wheel() {
  local venv=$1 device=$2
  local wheel_dir; wheel_dir=$cache_dir/wheels/$(wheel_key "$venv" "$device")
  local wheel; wheel=$(compgen -G "$wheel_dir/horovod-*.whl" | head -n 1 || true)
  if [[ -n $wheel ]]; then
    log "reusing the Horovod wheel $wheel"
  else
    log "building Horovod $HOROVOD_VERSION from source into $wheel_dir (a few minutes)"
    # A name of its own (mktemp): the host and an image build may compile beside each other.
    mkdir -p "$cache_dir/wheels"
    local tmp_dir; tmp_dir=$(mktemp -d "$wheel_dir.partial.XXXXXX")
    local gpu_ops=()
    [[ $device == gpu ]] && gpu_ops=(HOROVOD_GPU_OPERATIONS=NCCL)
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 \
        HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 "${gpu_ops[@]}" \
        MAKEFLAGS="-j$(nproc)" \
      "$venv/bin/pip" wheel --no-deps --no-build-isolation --no-cache-dir \
        -w "$tmp_dir" "horovod==$HOROVOD_VERSION" >"$tmp_dir.log" 2>&1 \
      || { tail -n 40 "$tmp_dir.log" >&2; die "Horovod build failed (full log: $tmp_dir.log)"; }
    rm -rf "$wheel_dir"; mv "$tmp_dir" "$wheel_dir"; rm -f "$tmp_dir.log"
    wheel=$(compgen -G "$wheel_dir/horovod-*.whl" | head -n 1) || die "pip wheel left no wheel in $wheel_dir"
  fi
  printf '%s\n' "$wheel"
}

# pip's output goes to a log beside the environment; its last lines are shown on failure.
quiet_pip() {
  local venv=$1; shift
  "$venv/bin/pip" "$@" >>"$venv.pip.log" 2>&1 || { tail -n 30 "$venv.pip.log" >&2; die "pip $* failed (log: $venv.pip.log)"; }
}

# horovodrun --check-build's report (stdin) on one line, "frameworks: TensorFlow; controllers: MPI
# Gloo; ...", and whether it has what the suite needs. --check-build exits 0 whatever it finds; it
# loads each extension, so a wheel that does not fit the environment (a reused one) shows here as
# TensorFlow missing.
check_build_summary() {
  local summary
  summary=$(awk '
    /^Available / {if (line) {out = out sep line; sep = "; "}; line = tolower(substr($0, 11, length($0) - 11)) ":"}
    /\[X\]/ {line = line " " $2}
    END {print out sep line}')
  printf '%s\n' "$summary"
  [[ $summary =~ (^|; )frameworks:\ ([A-Za-z]+\ )*TensorFlow(\ |;|$) && $summary == *"; controllers: MPI Gloo"* ]]
}

create_environment() {
  local venv=$1 device=$2
  log "creating environment $venv"
  rm -rf "$venv" "$venv.pip.log"
  "$python_bin" -m venv "$venv"
  quiet_pip "$venv" install --upgrade pip setuptools wheel
  # cloudpickle, psutil, packaging and cffi are Horovod's own run-time needs.
  device_requirements "$device" | grep -Ev "$NO_DEPS" >"$venv.requirements.txt"
  quiet_pip "$venv" install -r "$venv.requirements.txt" cloudpickle psutil packaging cffi
  local no_deps; no_deps=$(device_requirements "$device" | grep -E "$NO_DEPS" || true)
  if [[ -n $no_deps ]]; then
    # shellcheck disable=SC2086  # one pin per word
    quiet_pip "$venv" install --no-deps $no_deps
  fi
  local wheel; wheel=$(build_horovod_wheel "$venv" "$device")
  quiet_pip "$venv" install --no-deps "$wheel"
  # --check-build imports TensorFlow; keep its start-up chatter out of the way. Once per environment:
  # it starts three TensorFlow processes (about 15 s on two cores), too much for every `make demo`.
  local built summary
  built=$(TF_CPP_MIN_LOG_LEVEL=3 "$venv/bin/horovodrun" --check-build 2>/dev/null) \
    || die "horovodrun --check-build failed in $venv"
  summary=$(check_build_summary <<<"$built") \
    || die "horovodrun --check-build in $venv: Horovod without TensorFlow, MPI or Gloo ($summary)"
  log "horovodrun --check-build passed: $summary"
  touch "$venv/.complete"
}

# What the editable install of the suite depends on: this clone's path and its packaging files.
suite_install_key() {
  local file
  { echo "$repo_dir"
    for file in setup.cfg setup.py pyproject.toml; do
      [[ -f $repo_dir/$file ]] && cat "$repo_dir/$file"
    done
    true; } | sha256sum | cut -c1-12
}

main() {
  [[ -f $requirements ]] || die "requirements file not found: $requirements"
  install_debian_packages
  command -v "$python_bin" >/dev/null || die "$python_bin not found (set SUITE_PYTHON)"
  local device; device=$(detect_device)
  [[ $device == cpu || $device == gpu ]] || die "SUITE_DEVICE must be cpu or gpu, not '$device'"
  local venv=$cache_dir/env-$(environment_key "$device")
  mkdir -p "$cache_dir"
  if [[ ! -f $venv/.complete ]]; then
    create_environment "$venv" "$device"
  fi
  # Relinked only when it points elsewhere: `make demo` runs this while other processes (a test run
  # beside it) start from the link, which `ln -sfn` removes for a moment.
  [[ $(readlink "$env_link" 2>/dev/null) == "$venv" ]] || ln -sfn "$venv" "$env_link"
  # The suite itself, editable, so console scripts point at this clone; reinstalled only when the
  # clone or its packaging changed since the last install into this environment.
  local key; key=$(suite_install_key)
  if [[ $(cat "$venv/.suite-install" 2>/dev/null) != "$key" ]]; then
    (cd "$repo_dir" && quiet_pip "$venv" install --no-deps --no-build-isolation -e .)
    echo "$key" >"$venv/.suite-install"
  fi
  log "ready: $env_link -> $venv ($device)"
}

# Sourced (tests/test_container.py), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
