#!/usr/bin/env bash
# Builds the suite's container images, tagged with the suite version and git revision, and pushes them.
#
# Usage: container/build.sh [--device gpu|cpu|all] [--engine docker|buildah] [--base-image IMAGE]
#                           [--target STAGE] [--registry REGISTRY] [--push] [--ngc-tag TAG]
#                           [--name NAME] [--dry-run]
#   --device      which image (default: all = gpu and cpu): gpu = container/Dockerfile.gpu (NGC base),
#                 gpu-pypi = container/Dockerfile.gpu-pypi (TensorFlow 2.18 and CUDA from PyPI),
#                 cpu = container/Dockerfile.cpu (the set-up of make setup)
#   --engine      docker (default) or buildah (Debian's; RUN steps under chroot isolation, layers
#                 cached, and make setup's Horovod wheel cache $SUITE_CACHE_DIR/wheels mounted in;
#                 for gpu-pypi also the wheelhouse $SUITE_CACHE_DIR/pypi of its PyPI downloads)
#   --base-image  build argument BASE_IMAGE: the Debian + Python 3.11 image under the CPU image and
#                 the GPU image's suite-check stage (default: the Dockerfiles')
#   --target      build up to this stage only, e.g. --device gpu --target suite-check (no NGC base)
#   --registry    prefix of the tags, e.g. registry.example.com/mlperf (needed for --push)
#   --push        push every tag after the build
#   --ngc-tag     build argument NGC_TAG of the GPU image (default: the Dockerfile's)
#   --name        image name (default: mlperf-hvd-suite)
#   --dry-run     print the engine's commands and the tags; needs no engine
# Tags: [REGISTRY/]NAME:<version>-g<short sha>[-dirty]-<device>[-<target>], e.g.
# mlperf-hvd-suite:0.1.0-g1a2b3c4-gpu; the version comes from setup.cfg, -dirty marks a tree with
# uncommitted or untracked files. SUITE_CACHE_DIR defaults to ~/.cache/mlperf-hvd-suite, as for make setup.
set -euo pipefail

repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
device=all
engine=docker
base_image=
target=
registry=
push=0
ngc_tag=
name=mlperf-hvd-suite
dry_run=0

die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 2; }

value_of() {
  [[ -n ${2-} && ${2-} != --* ]] || die "$1 needs a value"
  printf '%s' "$2"
}

parse_args() {
  while (($#)); do
    case $1 in
      --device) device=$(value_of "$1" "${2-}"); shift 2 ;;
      --engine) engine=$(value_of "$1" "${2-}"); shift 2 ;;
      --base-image) base_image=$(value_of "$1" "${2-}"); shift 2 ;;
      --target) target=$(value_of "$1" "${2-}"); shift 2 ;;
      --registry) registry=$(value_of "$1" "${2-}"); shift 2 ;;
      --ngc-tag) ngc_tag=$(value_of "$1" "${2-}"); shift 2 ;;
      --name) name=$(value_of "$1" "${2-}"); shift 2 ;;
      --push) push=1; shift ;;
      --dry-run) dry_run=1; shift ;;
      -h | --help) sed -n '2,22s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; exit 0 ;;
      *) die "unknown argument '$1' (see --help)" ;;
    esac
  done
  [[ $device =~ ^(gpu|gpu-pypi|cpu|all)$ ]] || die "--device must be gpu, gpu-pypi, cpu or all, not '$device'"
  [[ $engine == docker || $engine == buildah ]] || die "--engine must be docker or buildah, not '$engine'"
  [[ -z $target || $device != all ]] || die "--target names a stage of one Dockerfile: give --device gpu or cpu"
  ((push == 0)) || [[ -n $registry ]] || die "--push needs --registry (where to push)"
}

suite_version() {
  local version
  version=$(sed -n 's/^version *= *//p' "$repo_dir/setup.cfg" | head -n 1)
  [[ -n $version ]] || die "no 'version = ...' line in $repo_dir/setup.cfg"
  printf '%s' "$version"
}

# Short sha, with -dirty when the build context differs from the commit.
git_revision() {
  git -C "$repo_dir" rev-parse --git-dir >/dev/null 2>&1 \
    || die "$repo_dir is not a git checkout; the image tag needs the git revision"
  local sha
  sha=$(git -C "$repo_dir" rev-parse --short HEAD)
  if [[ -n $(git -C "$repo_dir" status --porcelain --untracked-files=normal) ]]; then
    sha+=-dirty
  fi
  printf '%s' "$sha"
}

# The engine must answer, not just the client be installed: `docker build` needs both.
require_docker() {
  command -v docker >/dev/null 2>&1 \
    || die "docker not found; build on a machine with Docker, or pass --engine buildah (or --dry-run to print the commands)"
  docker info >/dev/null 2>&1 \
    || die "the Docker engine does not answer (docker info failed); start it or build elsewhere (--dry-run prints the commands)"
}

require_buildah() {
  command -v buildah >/dev/null 2>&1 || die "buildah not found; apt-get install buildah (or use --engine docker)"
}

# Prints a command (shell-quoted) in dry-run mode, runs it otherwise.
run() {
  if ((dry_run)); then
    local line
    printf -v line '%q ' "$@"
    printf '%s\n' "${line% }"
  else
    "$@"
  fi
}

# buildah: docker's image format (it keeps SHELL), RUN steps chrooted (no runtime needed), every
# step's layer cached as docker does, and the Horovod wheel cache of make setup on this host mounted
# where the image's setup.sh looks: setup.sh keys a wheel on everything the binary depends on, so the
# image installs the host's wheel when it fits and compiles (into the same cache) only when it does
# not, and a build whose set-up layer changed compiles nothing the host has. pip in the build trusts
# the host's CA bundle, so a build behind a TLS-inspecting proxy reaches the package index as the
# host does: a copy of it and a pip.conf naming it, mounted as pip's site-wide configuration. The
# gpu-pypi image's 2.5 GB of PyPI wheels are kept in a wheelhouse mounted where container/gpu-build.sh
# looks, so a rebuild downloads only what it lacks.
buildah_build() {
  local dev=$1; shift
  local suite_cache=${SUITE_CACHE_DIR:-$HOME/.cache/mlperf-hvd-suite}
  local cache=$suite_cache/images
  local ca_bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
  local mounts=(--volume "$suite_cache/wheels:/root/.cache/mlperf-hvd-suite/wheels")
  if [[ $dev == gpu-pypi ]]; then
    mounts+=(--volume "$suite_cache/pypi:/root/.cache/mlperf-hvd-suite/pypi")
    ((dry_run)) || mkdir -p "$suite_cache/pypi"
  fi
  [[ ! -f $ca_bundle ]] || mounts+=(--volume "$cache/pip-config:/etc/xdg/pip:ro")
  if ((!dry_run)); then
    mkdir -p "$suite_cache/wheels"
    if [[ -f $ca_bundle ]]; then
      mkdir -p "$cache/pip-config"
      cp "$ca_bundle" "$cache/pip-config/ca.crt"
      printf '[global]\ncert = /etc/xdg/pip/ca.crt\n' >"$cache/pip-config/pip.conf"
    fi
  fi
  run buildah bud --format docker --isolation chroot --layers "${mounts[@]}" "$@"
}

build_one() {
  local dev=$1 version=$2 revision=$3
  local tag=${registry:+$registry/}$name:$version-g$revision-$dev${target:+-$target}
  local args=(-f "$repo_dir/container/Dockerfile.$dev"
              --label "org.opencontainers.image.version=$version"
              --label "org.opencontainers.image.revision=$revision"
              --build-arg "SUITE_REVISION=$revision")
  if [[ $dev == gpu && -n $ngc_tag ]]; then
    args+=(--build-arg "NGC_TAG=$ngc_tag")
  fi
  [[ -z $base_image ]] || args+=(--build-arg "BASE_IMAGE=$base_image")
  [[ -z $target ]] || args+=(--target "$target")
  if [[ $engine == buildah ]]; then
    buildah_build "$dev" "${args[@]}" -t "$tag" "$repo_dir"
  else
    run docker build "${args[@]}" -t "$tag" "$repo_dir"
  fi
  if ((push)); then
    run "$engine" push "$tag"
  fi
  built+=("$tag")
}

main() {
  parse_args "$@"
  local version revision
  version=$(suite_version)
  revision=$(git_revision)
  ((dry_run)) || "require_$engine"
  built=()
  local devices=("$device")
  [[ $device == all ]] && devices=(gpu cpu)
  for dev in "${devices[@]}"; do
    build_one "$dev" "$version" "$revision"
  done
  printf 'image: %s\n' "${built[@]}" >&2
}

main "$@"
