"""Hostfiles: Open MPI's forms read, checked before anything is launched, and Horovod's form written.

Open MPI takes `<host>`, `<host> slots=<N>`, `<host> slots = <N>` and `max_slots=<M>`; Horovod's own
parser (horovod/runner/common/util/hosts.py, parse_host_files) takes only `<host> slots=<N>` with no
comments or blank lines. The launcher therefore never hands Horovod the file: it passes `-H
host:slots,...`, and `python -m suite.cluster.hostfile FILE` prints the Horovod form for raw use.
"""
import argparse
import re
import socket
import sys
from dataclasses import dataclass

PLACEHOLDER = "REPLACE-ME"
# One host a line, `#` comments and blank lines skipped.
NAME = re.compile(r"^(?P<name>[^\s=]+)(?P<rest>.*)$")
SETTING = re.compile(r"\s*(?P<key>[A-Za-z_-]+)\s*=\s*(?P<value>[+-]?\d+)")
KEYS = {"slots": "slots", "max_slots": "max_slots", "max-slots": "max_slots"}
# Words people write for slots (other launchers' and schedulers' names for it).
MISTAKEN_KEYS = ("slot", "gpus", "gpu", "cpus", "np", "procs", "nslots", "tasks", "ntasks")


class HostfileError(ValueError):
    """A hostfile or host list that cannot be used; the message is one line naming the file and line."""


@dataclass(frozen=True)
class Host:
    name: str
    slots: int
    line: int = 0

    def spec(self):
        return f"{self.name}:{self.slots}"


def parse(path, default_slots=None):
    """The hosts of a hostfile, in file order; a bare host line gets default_slots (GPUs per node)."""
    try:
        with open(path) as handle:
            lines = handle.read().splitlines()
    except OSError as err:
        raise HostfileError(f"hostfile {path}: {err.strerror}") from None
    hosts, seen = [], {}
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if text:
            host = _parse_line(path, number, text, default_slots)
            _check_duplicate(path, host, seen)
            hosts.append(host)
    if not hosts:
        raise HostfileError(f"{path}: no hosts; expected lines of the form '<host> slots=<N>'")
    return hosts


def _parse_line(path, number, text, default_slots):
    where = f"{path}:{number}"
    match = NAME.match(text)
    if not match:
        raise HostfileError(f"{where}: {text!r} does not start with a host name; expected '<host> slots=<N>'")
    name = match["name"]
    if ":" in name or "," in name:
        # Both would break Horovod's and Open MPI's `-H host:slots,...` lists.
        raise HostfileError(f"{where}: host name {name!r} may not contain ':' or ','; "
                            f"{name.split(':')[0].split(',')[0]}:N is the -H form, a hostfile line reads "
                            f"'<host> slots=<N>'")
    settings = _settings(where, text, match["rest"])
    slots = settings.get("slots", default_slots)
    if slots is None and "max_slots" in settings:
        raise HostfileError(f"{where}: host {name} gives max_slots={settings['max_slots']} but no slots; "
                            f"max_slots only caps Open MPI's oversubscription, and the suite runs one rank "
                            f"per slot: add slots=<N>")
    if slots is None:
        raise HostfileError(f"{where}: host {name} gives no slots; a host line needs slots=<N> (the suite "
                            f"runs one rank per slot; Open MPI alone would count the cores)")
    if slots <= 0:
        raise HostfileError(f"{where}: host {name} has slots={slots}; slots must be positive (leave a host "
                            f"out by deleting its line or putting '#' before it)")
    if slots > settings.get("max_slots", slots):
        raise HostfileError(f"{where}: host {name} has slots={slots} above max_slots={settings['max_slots']}")
    return Host(name, slots, number)


def _settings(where, text, rest):
    """{'slots': N, 'max_slots': M} from the text after the host name; refuses anything else by name."""
    settings = {}
    while rest.strip():
        match = SETTING.match(rest)
        if not match or match["key"] not in KEYS or not _ends_word(rest, match):
            raise HostfileError(f"{where}: {text!r}: {_mistake(rest)}")
        key = KEYS[match["key"]]
        if key in settings:
            raise HostfileError(f"{where}: {key} given twice in {text!r}")
        settings[key] = int(match["value"])
        rest = rest[match.end():]
    return settings


def _ends_word(rest, match):
    # `slots=8x` or `slots=8,` must not pass as slots=8 followed by junk.
    return match.end() == len(rest) or rest[match.end()].isspace()


def _mistake(rest):
    """Which of the common mistakes the text after a host name makes, and the fix (its first wrong word)."""
    word = re.sub(r"\s*=\s*", "=", rest.strip()).split()[0]
    key, sep, value = word.partition("=")
    if not sep and word.isdigit():
        return f"a bare slot count; write slots={word}"
    if not sep:
        return f"{word!r} is not a setting; a host line reads '<host> slots=<N>'"
    if key in KEYS:
        return f"{key}={value} is not a whole number; write {key}=<N> in digits, e.g. {key}=8"
    if key.lower() in MISTAKEN_KEYS:
        return f"unknown setting {key!r}; the processes a host runs are its slots=<N>"
    return f"unknown setting {key!r}; a host line takes slots=<N> and Open MPI's max_slots=<M> only"


def _check_duplicate(path, host, seen):
    key = host.name.lower()  # host names are case-insensitive
    if key in seen:
        raise HostfileError(f"{path}:{host.line}: duplicate host {host.name} (first on line {seen[key]}); "
                            f"give each host one line with all its slots")
    seen[key] = host.line


def total_slots(hosts):
    return sum(host.slots for host in hosts)


def hosts_used(hosts, np):
    """The hosts that get ranks when np processes fill the slots in order (Horovod's and mpirun's -H)."""
    used, filled = [], 0
    for host in hosts:
        if filled >= np:
            break
        used.append(host)
        filled += host.slots
    return used


def horovod_form(hosts):
    """The file text Horovod's own -hostfile parser reads: `<host> slots=<N>` lines and nothing else."""
    return "".join(f"{host.name} slots={host.slots}\n" for host in hosts)


def host_list(hosts):
    """The `-H` argument Horovod and Open MPI both take: host1:8,host2:8."""
    return ",".join(host.spec() for host in hosts)


def validate(hosts, np, path="hostfile", check_names=True, placeholders_allowed=False):
    """Refuses placeholders (unless a dry run marks them), a process count the slots cannot hold and,
    unless told not to, names that do not resolve."""
    for host in hosts:
        if PLACEHOLDER in host.name and not placeholders_allowed:
            raise HostfileError(f"{location(path, host)}: host {host.name} is a placeholder; edit {path} "
                                f"and put your nodes' names in place of {PLACEHOLDER} (--dry-run shows the "
                                f"whole command with every placeholder marked)")
    if np <= 0:
        raise HostfileError(f"-np must be positive, not {np}")
    if np > total_slots(hosts):
        raise HostfileError(f"-np {np} is more than the {total_slots(hosts)} slots in {path}")
    if check_names:
        for host in hosts:
            if PLACEHOLDER not in host.name:
                _resolve(path, host)


def _resolve(path, host):
    # The resolver only: /etc/hosts and DNS, no connection to the host itself.
    try:
        socket.getaddrinfo(host.name, None)
    except (socket.gaierror, UnicodeError) as err:
        reason = err.strerror if isinstance(err, socket.gaierror) else str(err)
        raise HostfileError(f"{location(path, host)}: host {host.name} does not resolve ({reason}); fix the "
                            f"name, or pass --skip-host-check if names resolve only on the nodes") from None


def location(path, host):
    return f"{path}:{host.line}" if host.line else path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m suite.cluster.hostfile",
        description="Checks a hostfile (Open MPI's forms) and prints it in the form horovodrun's -hostfile "
                    "reads, e.g. horovodrun -hostfile <(python -m suite.cluster.hostfile FILE) ...")
    parser.add_argument("hostfile")
    parser.add_argument("--default-slots", type=int,
                        help="slots for a host line that gives none (e.g. the GPUs per node)")
    args = parser.parse_args(argv)
    try:
        hosts = parse(args.hostfile, args.default_slots)
        validate(hosts, total_slots(hosts), args.hostfile, check_names=False)
    except HostfileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    sys.stdout.write(horovod_form(hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
