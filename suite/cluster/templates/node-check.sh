# Node check (suite/cluster/templates/node-check.sh, rendered by suite.cluster.deploy): what the job
# needs of this node, checked in seconds before the job starts. The first problem stops it with one
# line naming the node and the fix; what cannot be told here is a warning, not a stop.
node=$(hostname)
profile={{profile}}
# The shapes the profile is for (empty: any), the GPUs and exact RDMA devices it names, and what the
# launch needs of the node (yes or no): Pyxis in srun, enroot's PMIx hook, the suite's own files.
want_shapes={{shapes}}
want_gpus={{gpus}}
want_rdma={{rdma_devices}}
need_pyxis={{need_pyxis}}
need_pmix_hook={{need_pmix_hook}}
suite_dir={{suite_dir}}
suite_python={{suite_python}}
# The oldest NVIDIA driver the image's CUDA code runs on: the image's own SUITE_MIN_NVIDIA_DRIVER where
# this runs inside it (Kubernetes), else what the renderer knew of the image (empty: not checked).
min_driver=${SUITE_MIN_NVIDIA_DRIVER:-{{min_driver}}}
# OCI's instance metadata (oracle-quickstart/oci-hpc samples/gpu/nccl_run_allreduce.sbatch reads the
# shape there the same way); SUITE_METADATA_URL points the check elsewhere (the tests' stand-in).
metadata_url=${SUITE_METADATA_URL:-{{metadata_url}}}

fail() {
  echo "error: node $node: $*" >&2
  exit 1
}

# The shapes whose GPUs nvidia-smi names so, when the metadata does not answer. BM.GPU.A100-v2.8
# (GM4.8) has A100-SXM4-80GB, BM.GPU4.8 and BM.GPU.B4.8 have A100-SXM4-40GB
# (suite/common/profiles/oci-bm-gpu-gm4-8.yaml, oci-bm-gpu4-8.yaml): 40 GB leaves two candidates.
shapes_with_gpu() {
  case $1 in
    *A100-SXM4-80GB*) echo "BM.GPU.A100-v2.8" ;;
    *A100-SXM4-40GB*) echo "BM.GPU4.8 BM.GPU.B4.8" ;;
  esac
}

# The shipped profile written for a shape, for the fix in the refusal.
profile_for_shape() {
  case $1 in
{{profile_cases}}
    *) echo "a profile written for $1 (copy the closest one in suite/common/profiles/)" ;;
  esac
}

check_shape() {
  [[ -n $want_shapes ]] || return 0
  local found="" how="" gpu="" shape want
  if command -v curl >/dev/null; then
    # Short bounds and no proxy: off OCI, or where the metadata service is blocked, this takes at
    # most 3 s and says so.
    found=$(curl -fsS --noproxy '*' --connect-timeout 2 --max-time 3 -H "Authorization: Bearer Oracle" \
      "$metadata_url" 2>/dev/null | sed -n 's/.*"shape"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p' \
      | head -n 1) || found=""
    how="instance metadata"
  fi
  if [[ -z $found ]] && command -v nvidia-smi >/dev/null; then
    gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
    found=$(shapes_with_gpu "$gpu")
    how="nvidia-smi: $gpu"
  fi
  if [[ -z $found ]]; then
    echo "warning: node $node: could not tell the shape (no answer from $metadata_url, and no GPU" \
      "that names one); profile $profile is for $want_shapes, not checked" >&2
    return 0
  fi
  for shape in $found; do
    for want in $want_shapes; do
      [[ $shape == "$want" ]] && return 0
    done
  done
  shape=${found%% *}
  if [[ $found == *" "* ]]; then
    fail "shape ${found// / or } ($how), but profile $profile is for $want_shapes; render with" \
      "--profile $(profile_for_shape "$shape") (or that of the other candidate)"
  fi
  fail "shape $shape ($how), but profile $profile is for $want_shapes; render with" \
    "--profile $(profile_for_shape "$shape")"
}

check_pyxis() {
  [[ $need_pyxis == yes ]] || return 0
  # srun lists the flags of its SPANK plugins: Pyxis adds --container-image (NVIDIA/pyxis README.md).
  if ! srun --help 2>/dev/null | grep -q -- '--container-image'; then
    fail "srun has no --container-image: the Pyxis plugin is not loaded here (link pyxis.conf into" \
      "/etc/slurm/plugstack.conf.d and restart slurmd, NVIDIA/pyxis README.md), or render with --bare-metal"
  fi
}

check_pmix_hook() {
  [[ $need_pmix_hook == yes ]] || return 0
  # enroot installs 50-slurm-pmi.sh disabled, in its data folder's hooks.d (NVIDIA/enroot Makefile:
  # HOOKS_EXTRA into $(DATADIR)/hooks.d, /usr/share/enroot/hooks.d in its packages); it runs only from
  # the system or the user's hooks.d (src/runtime.sh, hook_dirs). Without it PMIx's server folder is
  # not mounted into the container and the ranks cannot reach srun's PMIx server.
  local system=${ENROOT_SYSCONF_PATH:-/etc/enroot}/hooks.d
  local user=${ENROOT_CONFIG_PATH:-${XDG_CONFIG_HOME:-$HOME/.config}/enroot}/hooks.d
  if [[ ! -e $system/50-slurm-pmi.sh && ! -e $user/50-slurm-pmi.sh ]]; then
    fail "enroot's PMIx hook is not enabled (no 50-slurm-pmi.sh in $system), so srun --mpi=pmix" \
      "cannot reach the container: ln -s /usr/share/enroot/hooks.d/50-slurm-pmi.sh $system/ on every" \
      "node, or render with --mpi pmi2"
  fi
}

check_suite() {
  [[ -n $suite_python ]] || return 0
  [[ -f $suite_dir/suite/__init__.py ]] || fail "no suite at $suite_dir: bare metal runs it from the" \
    "shared file system; put the checkout there or render with --suite-dir <its path on the nodes>"
  [[ -x $suite_python ]] || fail "no interpreter at $suite_python: render with --python <the suite's" \
    "environment's python on the shared file system>"
}

check_gpus() {
  ((want_gpus > 0)) || return 0
  command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: no NVIDIA driver here, and profile" \
    "$profile needs $want_gpus GPUs a node"
  local count
  count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ') || count=0
  if ((count < want_gpus)); then
    fail "nvidia-smi lists $count GPU(s), profile $profile needs $want_gpus a node"
  fi
}

# Whether driver version $1 is older than $2 (dotted numbers, e.g. 535.183.01 and 580.65.06).
older_than() {
  [[ $1 != "$2" && $(printf '%s\n' "$1" "$2" | sort -V | head -n 1) == "$1" ]]
}

check_driver() {
  [[ -n $min_driver ]] && command -v nvidia-smi >/dev/null || return 0
  local driver
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ')
  [[ -n $driver ]] || fail "nvidia-smi --query-gpu=driver_version gives no driver version; the image" \
    "needs NVIDIA driver $min_driver or newer"
  if older_than "$driver" "$min_driver"; then
    fail "NVIDIA driver $driver, older than $min_driver, the image's minimum (its CUDA code needs it):" \
      "update the driver, or use the NGC image (docs/containers.md)"
  fi
}

check_rdma() {
  [[ -n $want_rdma ]] || return 0
  local present="" how dev missing=()
  if command -v ibdev2netdev >/dev/null; then
    present=$(ibdev2netdev 2>/dev/null | awk '{print $1}')
    how="ibdev2netdev"
  else
    present=$(ls /sys/class/infiniband 2>/dev/null)
    how="/sys/class/infiniband"
  fi
  for dev in $want_rdma; do
    grep -qx -- "$dev" <<<"$present" || missing+=("$dev")
  done
  if ((${#missing[@]})); then
    local listed
    listed=$(paste -sd ' ' <<<"$present")
    fail "RDMA device(s) ${missing[*]} of profile $profile's NCCL_IB_HCA are missing ($how lists:" \
      "${listed:-none}); wrong profile for this shape, or the OS image numbers them otherwise:" \
      "render with --env NCCL_IB_HCA==<the devices here>"
  fi
}

check_shape
check_pyxis
check_pmix_hook
check_suite
check_gpus
check_driver
check_rdma
echo "node $node: ready for profile $profile"
