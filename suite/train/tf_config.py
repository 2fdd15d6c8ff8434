"""TF_CONFIG for MultiWorkerMirroredStrategy, built by every rank from the launcher's world.

TensorFlow's multi-worker runtime wants each process to know every worker's address and its own
index before it starts; MPI launchers (mpirun, srun, an MPIJob) say neither. So each rank takes a
free port on its host, the ranks exchange (address, port) over the launcher's MPI communicator, and
worker i of TF_CONFIG is rank i: TensorFlow's task index is the launcher's rank, so rank 0 is the
chief, writes the MLPerf log and leads the coordination service.

Plain Python, no TensorFlow: the arithmetic is tested on its own.
"""
import json
import os
import socket

# Variables that name the interface the job's traffic should use, as the cluster profiles set them
# for NCCL, Gloo and Horovod's runner; the first one set decides the workers' addresses.
INTERFACE_VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "HOROVOD_GLOO_IFACE")


def reserve_port():
    """A socket bound to a free TCP port of this host; its port is this worker's, once it is closed.

    Kept bound while the ranks exchange their ports, so that no two ranks of a host draw the same one;
    closed just before TensorFlow's server binds it (a port never connected to is free at once).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    return sock


def interface_prefixes(environ):
    """The interface names the profile's variables ask for (NCCL's syntax: a list of prefixes; a
    leading ^ excludes and = asks for an exact name)."""
    for key in INTERFACE_VARIABLES:
        text = environ.get(key, "").strip()
        if text and not text.startswith("^"):
            return [name.lstrip("=") for name in text.lstrip("=").split(",") if name.strip()]
    return []


def worker_address(host, hosts, environ, interfaces=None):
    """The address the other workers reach this one at.

    host: this rank's host name; hosts: every rank's. On one host the workers meet on loopback.
    Across hosts: the IPv4 address of the interface the profile names, when this host has one, else
    the host name (which MPI launchers need to resolve already). interfaces: {name: [IPv4, ...]},
    read from the host when None.
    """
    if len(set(hosts)) == 1:
        return "localhost"
    prefixes = interface_prefixes(environ)
    if prefixes:
        found = _ipv4_interfaces() if interfaces is None else interfaces
        for prefix in prefixes:
            for name in sorted(found):
                if name.startswith(prefix) and found[name]:
                    return found[name][0]
    return host


def _ipv4_interfaces():
    try:
        import psutil
    except ImportError:
        return {}
    return {name: [a.address for a in addresses if a.family == socket.AF_INET]
            for name, addresses in psutil.net_if_addrs().items()}


def tf_config(workers, index):
    """The TF_CONFIG text: workers are "address:port" in rank order, index is this rank."""
    if not 0 <= index < len(workers):
        raise ValueError(f"worker index {index} is outside the {len(workers)} workers")
    duplicates = sorted({w for w in workers if workers.count(w) > 1})
    if duplicates:
        raise ValueError(f"two workers were given the same address: {', '.join(duplicates)}")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


def set_tf_config(workers, index, environ=os.environ):
    """Puts TF_CONFIG in the environment (a one-worker job gets none: TensorFlow then runs locally)."""
    if len(workers) == 1:
        environ.pop("TF_CONFIG", None)
    else:
        environ["TF_CONFIG"] = tf_config(workers, index)
    return environ.get("TF_CONFIG")
