"""Hostfiles in Horovod's `<host> slots=<N>` format: parsing and checks before anything is launched."""
import re
import socket
from dataclasses import dataclass

PLACEHOLDER = "REPLACE-ME"
# One host a line. Horovod's own parser takes nothing else; `#` comments and blank lines are
# skipped here, which is why the launcher hands Horovod `-H host:slots,...` and never the file.
LINE = re.compile(r"^(?P<name>\S+)\s+slots=(?P<slots>[+-]?\d+)$")


class HostfileError(ValueError):
    """A hostfile or host list that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Host:
    name: str
    slots: int
    line: int = 0

    def spec(self):
        return f"{self.name}:{self.slots}"


def parse(path):
    """The hosts of a hostfile, in file order."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError as err:
        raise HostfileError(f"hostfile {path}: {err.strerror}") from None
    hosts, seen = [], {}
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if text:
            host = _parse_line(path, number, text)
            _check_duplicate(path, host, seen)
            hosts.append(host)
    if not hosts:
        raise HostfileError(f"{path}: no hosts; expected lines of the form '<host> slots=<N>'")
    return hosts


def _parse_line(path, number, text):
    match = LINE.match(text)
    if not match:
        raise HostfileError(f"{path}:{number}: unknown syntax {text!r}; expected '<host> slots=<N>'")
    name, slots = match["name"], int(match["slots"])
    if slots <= 0:
        raise HostfileError(f"{path}:{number}: host {name} has slots={slots}; slots must be positive")
    if ":" in name or "," in name:
        # Both would break Horovod's and Open MPI's `-H host:slots,...` lists.
        raise HostfileError(f"{path}:{number}: host name {name!r} may not contain ':' or ','")
    return Host(name, slots, number)


def _check_duplicate(path, host, seen):
    key = host.name.lower()  # host names are case-insensitive
    if key in seen:
        raise HostfileError(f"{path}:{host.line}: duplicate host {host.name} (first on line {seen[key]}); "
                            f"give each host one line with all its slots")
    seen[key] = host.line


def total_slots(hosts):
    return sum(host.slots for host in hosts)


def host_list(hosts):
    """The `-H` argument Horovod and Open MPI both take: host1:8,host2:8."""
    return ",".join(host.spec() for host in hosts)


def validate(hosts, np, path="hostfile", check_names=True):
    """Refuses placeholders, a process count the slots cannot hold and, unless told not to, unknown names."""
    for host in hosts:
        if PLACEHOLDER in host.name:
            raise HostfileError(f"{_where(path, host)}: host {host.name} is a placeholder; edit {path} "
                                f"and put your nodes' names in place of {PLACEHOLDER}")
    if np <= 0:
        raise HostfileError(f"-np must be positive, not {np}")
    if np > total_slots(hosts):
        raise HostfileError(f"-np {np} is more than the {total_slots(hosts)} slots in {path}")
    if check_names:
        for host in hosts:
            _resolve(path, host)


def _resolve(path, host):
    # The resolver only: /etc/hosts and DNS, no connection to the host itself.
    try:
        socket.getaddrinfo(host.name, None)
    except (socket.gaierror, UnicodeError) as err:
        reason = err.strerror if isinstance(err, socket.gaierror) else str(err)
        raise HostfileError(f"{_where(path, host)}: host {host.name} does not resolve ({reason}); fix the "
                            f"name, or pass --skip-host-check if names resolve only on the nodes") from None


def _where(path, host):
    return f"{path}:{host.line}" if host.line else path
