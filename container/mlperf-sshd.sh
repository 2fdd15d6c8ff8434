#!/usr/bin/env bash
# Runs sshd in the foreground for horovodrun/mpirun across nodes: keys from a mounted secret, no passwords.
#
# Keys: a directory holding id_rsa and authorized_keys (or id_rsa.pub, then trusted as the only key),
# mounted read-only at $SSH_KEYS_DIR (default /etc/mlperf-ssh). The Kubeflow MPI Operator mounts its
# own key Secret at /root/.ssh instead, which is used as it is.
# Port: $SSH_PORT (the image's build-time default), or the first argument.
set -euo pipefail

keys_dir=${SSH_KEYS_DIR:-/etc/mlperf-ssh}
port=${1:-${SSH_PORT:-2222}}
ssh_dir=/root/.ssh

die() { printf 'mlperf-sshd: error: %s\n' "$*" >&2; exit 1; }

install_keys() {
  [[ -d $keys_dir ]] || return 0
  mkdir -p "$ssh_dir"
  chmod 700 "$ssh_dir"
  if [[ -f $keys_dir/id_rsa ]]; then
    install -m 600 "$keys_dir/id_rsa" "$ssh_dir/id_rsa"
  fi
  if [[ -f $keys_dir/authorized_keys ]]; then
    install -m 600 "$keys_dir/authorized_keys" "$ssh_dir/authorized_keys"
  elif [[ -f $keys_dir/id_rsa.pub ]]; then
    install -m 600 "$keys_dir/id_rsa.pub" "$ssh_dir/authorized_keys"
  fi
}

main() {
  if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    die "port must be 1-65535, not '$port'"
  fi
  install_keys
  [[ -s $ssh_dir/authorized_keys ]] \
    || die "no $ssh_dir/authorized_keys: mount a secret with id_rsa and authorized_keys at $keys_dir"
  # Host keys are made per container at start, so none is baked into the image.
  ssh-keygen -A >/dev/null
  mkdir -p /run/sshd
  exec /usr/sbin/sshd -D -e -p "$port"
}

main "$@"
