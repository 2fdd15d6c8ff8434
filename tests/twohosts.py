"""A real two-host cluster on one machine, for the tests: two network namespaces joined by a veth pair,
an SSH server in each on a non-default port, throwaway keys, and host names that resolve to the link.

    with TwoHosts(workdir) as cluster:
        cluster.run("h1", ["horovodrun", "-np", "4", "-H", "h1:2,h2:2", ...])

Each host has its own network namespace, its own host name (a UTS namespace) and its own /etc/hosts
(`ip netns exec` lays /etc/netns/<ns>/hosts over /etc/hosts); ~/.ssh is a throwaway folder mounted over
root's, whose config gives the port, the key and no host-key bookkeeping, so horovodrun and mpirun need
no SSH flags and the machine's own ~/.ssh is never touched. The file system, the repository and the
virtual environment are shared, as on a cluster with a shared home. Traffic stays on the veth link
between the two namespaces and on their loopbacks: the subnet is checked to be unused on the machine.
Everything is torn down on exit, also when the body fails. BridgedHosts is the same for N hosts on
one bridge, which lives in a namespace of its own (the switch).
"""
import ipaddress
import os
import shutil
import subprocess
import time

SSH_PORT = 2222
# The link's name inside every host: Horovod's runner looks for an interface of the same name on all hosts.
LINK = "link0"
# Candidate link subnets; the first one that no interface or route of the machine uses is taken.
CANDIDATE_SUBNETS = ("10.213.7.0/24", "10.213.8.0/24", "172.31.213.0/24")


class ClusterUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no iproute2 or sshd): one line why."""


def _sh(*args, check=True, **kwargs):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=60, **kwargs)


def _used_networks():
    text = _sh("ip", "-o", "addr").stdout + _sh("ip", "route").stdout
    networks = []
    for token in text.split():
        try:
            networks.append(ipaddress.ip_network(token, strict=False))
        except ValueError:
            continue
    return networks


def free_subnet():
    used = _used_networks()
    for text in CANDIDATE_SUBNETS:
        subnet = ipaddress.ip_network(text)
        if not any(subnet.overlaps(net) for net in used if net.version == 4 and net.prefixlen > 0):
            return subnet
    raise ClusterUnavailable(f"every candidate subnet ({', '.join(CANDIDATE_SUBNETS)}) is in use here")


def worker_prefix(prefix):
    """prefix, with this pytest-xdist worker's number after it (gw1 -> 1) under a parallel session: two
    workers that build the same kind of cluster at once get namespaces and links of their own."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return prefix + worker[2:] if worker.startswith("gw") and worker[2:].isdigit() else prefix


class TwoHosts:
    """Hosts h1 and h2, each a namespace with sshd on SSH_PORT; names resolve to their link addresses."""

    def __init__(self, workdir, prefix="mlh", names=("h1", "h2")):
        self.workdir = str(workdir)
        self.prefix = prefix = worker_prefix(prefix)
        self.names = names
        self.namespaces = {name: f"{prefix}-{name}" for name in names}
        self.links = {name: f"{prefix}{index}" for index, name in enumerate(names, start=1)}
        self.addresses = {}
        self.ssh_dir = os.path.join(self.workdir, "dot-ssh")
        self.key = os.path.join(self.ssh_dir, "id_ed25519")
        self._servers = []

    # ---- set-up and tear-down ----

    def __enter__(self):
        self._check_machine()
        try:
            self._make_network()
            self._make_keys()
            for name in self.names:
                self._start_sshd(name)
            self._wait_for_ssh()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()

    def _check_machine(self):
        if os.geteuid() != 0:
            raise ClusterUnavailable("network namespaces need root")
        for tool in ("ip", "ssh", "ssh-keygen", "unshare", "/usr/sbin/sshd"):
            if not shutil.which(tool):
                raise ClusterUnavailable(f"{tool} is not installed (scripts/setup.sh installs it)")

    def _make_network(self):
        subnet = free_subnet()
        hosts = list(subnet.hosts())
        self.addresses = {name: str(hosts[index]) for index, name in enumerate(self.names)}
        self.close()  # leftovers of an interrupted earlier run
        for name in self.names:
            _sh("ip", "netns", "add", self.namespaces[name])
        self._wire()
        for name in self.names:
            ns = self.namespaces[name]
            _sh("ip", "-n", ns, "addr", "add", f"{self.addresses[name]}/{subnet.prefixlen}", "dev", LINK)
            _sh("ip", "-n", ns, "link", "set", LINK, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            etc = f"/etc/netns/{ns}"
            os.makedirs(etc, exist_ok=True)
            with open(os.path.join(etc, "hosts"), "w") as handle:
                handle.write("127.0.0.1 localhost\n")
                handle.writelines(f"{address} {host}\n" for host, address in self.addresses.items())

    def _wire(self):
        """One veth pair, an end in each host, named LINK there."""
        first, second = self.names
        _sh("ip", "link", "add", self.links[first], "type", "veth", "peer", "name", self.links[second])
        for name in self.names:
            ns, link = self.namespaces[name], self.links[name]
            _sh("ip", "link", "set", link, "netns", ns)
            _sh("ip", "-n", ns, "link", "set", link, "name", LINK)

    def _make_keys(self):
        shutil.rmtree(self.ssh_dir, ignore_errors=True)
        os.makedirs(self.ssh_dir, mode=0o700)
        host_key = os.path.join(self.workdir, "host_key")
        for path in (host_key, host_key + ".pub"):
            if os.path.exists(path):
                os.remove(path)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", host_key)
        shutil.copy(self.key + ".pub", os.path.join(self.ssh_dir, "authorized_keys"))
        with open(os.path.join(self.ssh_dir, "config"), "w") as handle:
            handle.write(f"Host *\n  Port {SSH_PORT}\n  IdentityFile {self.key}\n  StrictHostKeyChecking no\n"
                         f"  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n  BatchMode yes\n")
        os.makedirs("/run/sshd", exist_ok=True)
        os.makedirs(os.path.expanduser("~root/.ssh"), mode=0o700, exist_ok=True)  # the mount point

    def _start_sshd(self, name):
        options = {"HostKey": os.path.join(self.workdir, "host_key"),
                   "AuthorizedKeysFile": os.path.join(self.ssh_dir, "authorized_keys"),
                   "PidFile": os.path.join(self.workdir, f"sshd-{name}.pid"),
                   "StrictModes": "no", "PermitRootLogin": "prohibit-password",
                   "PasswordAuthentication": "no",
                   "UsePAM": "no", "AcceptEnv": "*", "PermitUserEnvironment": "no"}
        sshd = ["/usr/sbin/sshd", "-D", "-e", "-p", str(SSH_PORT), "-f", "/dev/null",
                *[arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]]
        log = open(os.path.join(self.workdir, f"sshd-{name}.log"), "w")
        self._servers.append(subprocess.Popen(self.wrap(name, sshd), stdout=log, stderr=subprocess.STDOUT))

    def _wait_for_ssh(self, seconds=60):
        deadline = time.monotonic() + seconds
        first = self.names[0]
        for other in self.names[1:]:
            while True:
                try:
                    result = self.run(first, [*self.ssh_command(other), "hostname"], check=False, timeout=10)
                    said = (result.stderr or result.stdout).strip()[-300:]
                    if result.returncode == 0 and result.stdout.strip() == other:
                        break
                except subprocess.TimeoutExpired:
                    said = "no answer within 10 s"
                if time.monotonic() > deadline:
                    raise ClusterUnavailable(f"ssh from {first} to {other} did not come up: {said}")
                time.sleep(0.3)

    def close(self):
        for server in self._servers:
            server.terminate()
            try:
                server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                server.kill()
        self._servers = []
        for name in self.names:
            ns = self.namespaces[name]
            # Ends whatever still runs inside (ranks a failed test left behind) before the netns goes.
            pids = _sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _sh("ip", "netns", "del", ns, check=False)
            shutil.rmtree(f"/etc/netns/{ns}", ignore_errors=True)
            # A veth end still on the machine (its creator stopped before moving it into its namespace)
            # would make the next `ip link add` of the same name fail.
            _sh("ip", "link", "del", self.links[name], check=False)

        self._remove_switch()

    def _remove_switch(self):
        """Two hosts have no switch; the bridged cluster removes its own."""

    # ---- using the hosts ----

    def wrap(self, name, command):
        """`command` as host `name` runs it: its network namespace and its own host name."""
        script = 'hostname "$0" && mount --bind "$1" ~root/.ssh && shift && exec "$@"'
        return ["ip", "netns", "exec", self.namespaces[name], "unshare", "--uts", "sh", "-c", script, name,
                self.ssh_dir, *command]

    def ssh_command(self, host):
        return ["ssh", host]

    def run(self, name, command, timeout=600, check=False, env=None, cwd=None):
        return subprocess.run(self.wrap(name, command), capture_output=True, text=True, timeout=timeout,
                              check=check, env=env, cwd=cwd)

    def set_hostname(self, name, hostname):
        """Renames host `name` (its SSH server's UTS namespace, so every later login sees it)."""
        server = self._servers[self.names.index(name)]
        _sh("nsenter", "--target", str(server.pid), "--uts", "hostname", hostname)

    def set_link(self, name, up):
        """Takes host `name`'s end of the link down (a pulled cable, a failed switch port) or up again."""
        _sh("ip", "-n", self.namespaces[name], "link", "set", LINK, "up" if up else "down")

    def link_bytes(self, name):
        """Bytes sent and received so far on host `name`'s end of the link."""
        base = f"/sys/class/net/{LINK}/statistics"
        read = ["cat", f"{base}/tx_bytes", f"{base}/rx_bytes"]
        out = _sh("ip", "netns", "exec", self.namespaces[name], *read).stdout.split()
        return int(out[0]), int(out[1])


class BridgedHosts(TwoHosts):
    """N hosts on one switch: a bridge in a namespace of its own, a veth from each host to a port.

    The bridge and its ports live outside the machine's own network namespace, so nothing on the
    machine's interfaces changes; each host sees only LINK (its end of the cable) and its loopback.
    `switch_port(name)` is the bridge's end of a host's cable, where a test shapes what reaches it.
    """

    def __init__(self, workdir, names, prefix="mlb"):
        super().__init__(workdir, prefix=prefix, names=tuple(names))
        # Namespace names stay short and unique: <prefix>-<index>; the host names are the hostfile's.
        self.namespaces = {name: f"{self.prefix}-{index}" for index, name in enumerate(self.names, start=1)}
        self.switch = f"{self.prefix}-switch"
        self.ports = {name: f"port{index}" for index, name in enumerate(self.names, start=1)}

    def _wire(self):
        _sh("ip", "netns", "add", self.switch)
        _sh("ip", "-n", self.switch, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", self.switch, "link", "set", "br0", "up")
        for name in self.names:
            port = self.ports[name]
            _sh("ip", "-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", LINK,
                "netns", self.namespaces[name])
            _sh("ip", "-n", self.switch, "link", "set", port, "master", "br0")
            _sh("ip", "-n", self.switch, "link", "set", port, "up")

    def _remove_switch(self):
        _sh("ip", "netns", "del", self.switch, check=False)

    def shape(self, name, mbit):
        """Host `name`'s cable at `mbit` Mbit/s both ways: a token bucket on its end (what it sends)
        and on the switch's port (what reaches it), as a degraded link or a slow NIC would be."""
        for ns, device in ((self.namespaces[name], LINK), (self.switch, self.ports[name])):
            _sh("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", device, "root", "tbf", "rate",
                f"{mbit:.3f}mbit", "burst", "32kb", "latency", "400ms")

    def unshape(self, name):
        for ns, device in ((self.namespaces[name], LINK), (self.switch, self.ports[name])):
            _sh("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", device, "root", check=False)
