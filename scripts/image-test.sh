#!/usr/bin/env bash
# make image-test: the container images built for real, with Debian's buildah, and the CPU image run.
#
# 1. buildah and debootstrap from Debian when missing (as scripts/setup.sh installs its packages).
# 2. A Debian bookworm base with Python 3.11 and venv, made by debootstrap (no image registry is
#    needed) and cached as a tarball in $SUITE_CACHE_DIR/images, keyed on how it is made.
# 3. container/Dockerfile.cpu built on it (container/build.sh --engine buildah --base-image ...).
# 4. The image's own command (its CMD, `make demo`) run in its working directory inside a container
#    of the image, for DEMO_EPOCHS epochs instead of to its target: the host's `make test` trains the
#    same demo to 0.9 (tests/test_main_job.py); here it shows that the image trains with its own
#    environment and writes a log the checker passes. The MLPerf log it wrote checked by the
#    compliance checker, and the run directory, env.json's git revision, the image's settings, a quiet
#    start and one TensorFlow distribution in the image's environment checked by container/check_run.py.
# 5. The GPU image's suite-check stage, the part of Dockerfile.gpu that needs no NGC base.
#
# Knobs: SUITE_CACHE_DIR (default ~/.cache/mlperf-hvd-suite), SUITE_DEBIAN_MIRROR (default
# http://deb.debian.org/debian), SUITE_SKIP_APT=1 (install nothing).
set -euo pipefail

BASE_REVISION=1  # bump to remake cached bases after changing make_base
BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-dev,ca-certificates
RULESET=2.1.0
# One epoch of the demo's 8 (10 steps of 32 images, one evaluation): it ends short of the target with
# run_stop aborted, which the checker accepts like a success.
DEMO_EPOCHS=1

repo_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${SUITE_CACHE_DIR:-$HOME/.cache/mlperf-hvd-suite}/images
mirror=${SUITE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work_dir=
containers=()
container=  # set by new_container
base=       # set by make_base
tag=        # set by build

log() { printf '[image-test] %s\n' "$*" >&2; }
die() { printf '[image-test] error: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local ctr
  for ctr in "${containers[@]}"; do
    buildah rm "$ctr" >/dev/null 2>&1 || true
  done
  [[ -z $work_dir ]] || rm -rf "$work_dir"
}

# As root (buildah's builds and chroots need it here), like the rest of this script.
install_tools() {
  local missing=() tool
  for tool in buildah debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  ((${#missing[@]})) || return 0
  [[ ${SUITE_SKIP_APT:-0} != 1 ]] || die "${missing[*]} not installed and SUITE_SKIP_APT=1"
  log "installing Debian packages: ${missing[*]}"
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing[@]}"; } >/dev/null || die "apt-get install ${missing[*]} failed"
}

base_key() {
  printf '%s\n' "$BASE_SUITE" "$BASE_PACKAGES" "$mirror" "$BASE_REVISION" | sha256sum | cut -c1-12
}

# debootstrap's minimal Debian with Python, its apt sources (updates and security too) for the
# set-up's packages, packed as a tarball once.
make_base_tarball() {
  local tarball=$1 rootfs=$work_dir/rootfs
  log "making the Debian $BASE_SUITE base with debootstrap (about a minute)"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" "$BASE_SUITE" "$rootfs" "$mirror" \
    >"$work_dir/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work_dir/debootstrap.log" >&2; die "debootstrap $BASE_SUITE from $mirror failed"; }
  printf '%s\n' "deb $mirror $BASE_SUITE main" "deb $mirror $BASE_SUITE-updates main" \
    "deb ${mirror%/debian}/debian-security $BASE_SUITE-security main" >"$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  mkdir -p "$cache_dir"
  tar -C "$rootfs" --numeric-owner -cf "$tarball.partial.$$" .
  mv "$tarball.partial.$$" "$tarball"
}

# Sets container to a new container of image $1, remembered for the clean-up. (Functions that add
# containers set globals: a $(...) subshell would lose them from the clean-up's list.)
new_container() {
  container=$(buildah from --quiet "$1")
  containers+=("$container")
}

# Sets base to the base image's name, making and importing it when buildah does not have it yet.
make_base() {
  local key; key=$(base_key)
  local tarball=$cache_dir/base-$BASE_SUITE-$key.tar
  base=localhost/mlperf-hvd-base:$BASE_SUITE-$key
  buildah inspect --type image "$base" >/dev/null 2>&1 && return
  [[ -f $tarball ]] || make_base_tarball "$tarball"
  log "importing $tarball as $base"
  new_container scratch
  buildah add --quiet "$container" "$tarball" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/bash "$container"
  buildah commit --quiet "$container" "$base" >/dev/null
}

# Builds and runs need buildah's chroot isolation; some sandboxes refuse it.
require_chroot_isolation() {
  new_container "$1"
  local error
  if ! error=$(buildah run --isolation chroot "$container" -- true 2>&1); then
    die "this machine refuses buildah's chroot isolation, which image builds and runs need: $(tail -n 1 <<<"$error")"
  fi
}

# Short sha, -dirty as build.sh tags a tree with uncommitted or untracked files.
expected_revision() {
  local sha; sha=$(git -C "$repo_dir" rev-parse --short HEAD)
  [[ -z $(git -C "$repo_dir" status --porcelain --untracked-files=normal) ]] || sha+=-dirty
  printf '%s' "$sha"
}

# Runs container/build.sh (its output to stderr) and sets tag to the image it built.
build() {
  local out=$work_dir/build.log
  "$repo_dir/container/build.sh" --engine buildah "$@" 2>&1 | tee "$out" >&2 \
    || die "container/build.sh --engine buildah $* failed"
  tag=$(sed -n 's/^image: //p' "$out" | tail -n 1)
}

# What the image's set-up did about Horovod, from setup.sh's lines in the build's log: a compile is
# most of a cold image build, and a wheel make setup left on this host should spare it.
horovod_in_build() {
  if grep -q '^\[setup\] reusing the Horovod wheel ' "$work_dir/build.log"; then
    echo "Horovod wheel reused"
  elif grep -q '^\[setup\] building Horovod ' "$work_dir/build.log"; then
    echo "Horovod compiled: no wheel of the image's key in the cache"
  else
    echo "set-up layer cached"
  fi
}

# The image's entry point and command in its working directory, as `docker run IMAGE` runs them,
# with make's DEMO_FLAGS for the shorter run (container/check_run.py holds the command to `make demo`).
run_image_command() {
  local ctr=$1 config=$2
  local cmd=()
  mapfile -t cmd < <(python3 -c 'import json, sys; config = json.load(sys.stdin)
print(*(config.get("Entrypoint") or []) + (config.get("Cmd") or []), sep="\n")' <"$config")
  ((${#cmd[@]})) || die "the image has no CMD"
  cmd+=("DEMO_FLAGS=--set epochs=$DEMO_EPOCHS")
  log "running the image's command: ${cmd[*]}"
  buildah run --isolation chroot "$ctr" -- "${cmd[@]}" 2>&1 | tee "$work_dir/demo.log" \
    || die "the image's command (${cmd[*]}) failed"
}

# The image's own command (make demo, one epoch) run in container $1 of image $2, its MLPerf log checked
# by the compliance checker and the run by container/check_run.py; $3 is the revision it was built from,
# further arguments go to check_run.py.
run_and_check_demo() {
  local ctr=$1 image=$2 revision=$3
  shift 3
  local config=$work_dir/config.json
  buildah inspect --type image "$image" \
    | python3 -c 'import json, sys; json.dump(json.load(sys.stdin)["Docker"]["config"], sys.stdout)' >"$config"
  local started=$SECONDS
  run_image_command "$ctr" "$config"
  log "the image's command took $((SECONDS - started)) s"
  # env finds python on the image's PATH inside the container (buildah looks commands up from outside).
  buildah run --isolation chroot "$ctr" -- env python -m mlperf_logging.compliance_checker --usage training \
    --ruleset "$RULESET" --log_output /tmp/compliance.txt runs/demo/run/result_0.txt >"$work_dir/checker.log" 2>&1 \
    || { tail -n 20 "$work_dir/checker.log" >&2; die "the compliance checker ($RULESET) rejects the image's MLPerf log"; }
  grep -q SUCCESS "$work_dir/checker.log" || die "the compliance checker ($RULESET) did not say SUCCESS"
  buildah run --isolation chroot "$ctr" -- env python -c \
    'import importlib.metadata as m; print(*(d.metadata["Name"] for d in m.distributions()), sep="\n")' \
    >"$work_dir/distributions.txt" || die "the image's python cannot list its distributions"
  local root; root=$(buildah mount "$ctr")
  python3 "$repo_dir/container/check_run.py" --config "$config" --root "$root" --revision "$revision" \
    --output "$work_dir/demo.log" --distributions "$work_dir/distributions.txt" --epochs "$DEMO_EPOCHS" "$@" \
    || die "the image's run does not pass container/check_run.py"
  buildah umount "$ctr" >/dev/null
  local workdir; workdir=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["WorkingDir"])' <"$config")
  log "passed: make demo (epochs=$DEMO_EPOCHS) in $workdir, the $RULESET checker, revision $revision in env.json"
}

test_cpu_image() {
  local base=$1 revision=$2
  local started=$SECONDS
  build --device cpu --base-image "$base"
  log "CPU image built in $((SECONDS - started)) s ($(horovod_in_build)): $tag"
  new_container "$tag"
  run_and_check_demo "$container" "$tag" "$revision"
}

# As root, the tools, a work folder removed at exit, and the base image (sets base); $1 names the target.
prepare() {
  [[ $(id -u) == 0 ]] || die "make $1 runs as root: buildah's chroot builds need it"
  install_tools
  work_dir=$(mktemp -d)
  trap cleanup EXIT
  make_base
  require_chroot_isolation "$base"
}

main() {
  local started=$SECONDS
  local revision; revision=$(expected_revision)
  prepare image-test
  log "base $base ready after $((SECONDS - started)) s"
  test_cpu_image "$base" "$revision"
  local gpu_started=$SECONDS
  build --device gpu --target suite-check --base-image "$base"
  log "GPU image's suite-check stage built in $((SECONDS - gpu_started)) s"
  log "passed in $((SECONDS - started)) s"
}

# Sourced (scripts/image-gpu-test.sh), it only defines its functions.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
