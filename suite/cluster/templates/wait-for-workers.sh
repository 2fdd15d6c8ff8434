# Launcher script, part 1 (suite/cluster/templates/wait-for-workers.sh, rendered by suite.cluster.deploy k8s).
# mpirun gives up on a worker whose sshd does not answer yet, so first wait, within a bounded time,
# until every worker in the operator's hostfile accepts an ssh login. The operator's own
# launcherCreationPolicy: WaitForWorkersReady (v0.5.0 and later) usually makes this a single round;
# with older operators, or workers that are Ready before their sshd listens, this wait is the one
# that counts. The operator mounts the hostfile at /etc/mpi/hostfile and names it in
# OMPI_MCA_orte_default_hostfile (kubeflow/mpi-operator pkg/controller/mpi_job_controller.go).
readonly hostfile=${OMPI_MCA_orte_default_hostfile:-/etc/mpi/hostfile}
readonly wait_seconds={{wait_seconds}}
if [[ ! -r $hostfile ]]; then
  echo "error: no MPI hostfile at $hostfile; is this pod the launcher of an MPIJob?" >&2
  exit 1
fi
deadline=$((SECONDS + wait_seconds))
while read -r host _; do
  [[ -n $host ]] || continue
  # -n: ssh must not read the hostfile this loop reads.
  until ssh -n -p {{ssh_port}} -o ConnectTimeout=5 -o BatchMode=yes "$host" true 2>/dev/null; do
    if ((SECONDS >= deadline)); then
      echo "error: worker $host did not answer ssh on port {{ssh_port}} within $wait_seconds s" >&2
      exit 1
    fi
    sleep 2
  done
done < "$hostfile"
echo "every worker in $hostfile answers ssh on port {{ssh_port}}"
