"""Before a multi-host launch: is every host reachable, alike, and named so its ranks can find each other?

Each host runs a small probe (over SSH, or directly for this host) from the same working directory
with the same interpreter as the ranks will: its host name, Python, where the suite is and at which
revision, what its own name resolves to there and the addresses of its interfaces. The answers are
held against each other and against the profile; every problem is one line naming the host and the fix.

What it catches: a host that SSH cannot reach without a password; a different Python or suite (or none)
at the launch's paths; two hosts that report one host name (Open MPI then takes them for one node and
Horovod's local ranks collide); a host name that resolves to a loopback address on its own host
(Gloo ranks then advertise 127.0.0.1 and their peers' connections are refused); a name that resolves to
an address of another interface than the profile's front-end one; more slots than GPUs.
"""
import ipaddress
import json
import os
import shlex
import socket
import subprocess
import sys
from dataclasses import dataclass

# Runs on every host with the launch's interpreter, in the launch's working directory; no TensorFlow.
PROBE = r"""
import json, os, platform, socket, subprocess, sys
found = {"hostname": socket.gethostname(), "python": platform.python_version(), "executable": sys.executable}
try:
    found["resolves_to"] = socket.gethostbyname(found["hostname"])
except OSError as err:
    found["resolves_to"] = None
    found["resolve_error"] = str(err)
try:
    import suite
    from suite.common import runfiles
    found["suite"] = os.path.dirname(os.path.abspath(suite.__file__))
    found["revision"] = runfiles.git_revision()
except Exception as err:
    found["suite"] = None
    found["suite_error"] = f"{type(err).__name__}: {err}"
try:
    text = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True,
                          timeout=10).stdout
    rows = [line.split() for line in text.splitlines()]
    found["interfaces"] = {row[1]: row[3].split("/")[0] for row in rows if len(row) > 3}
except (OSError, subprocess.SubprocessError):
    found["interfaces"] = None
try:
    text = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    found["gpus"] = sum(1 for l in text.splitlines() if l.startswith("GPU "))
except (OSError, subprocess.SubprocessError):
    found["gpus"] = 0
print("PROBE " + json.dumps(found))
"""

SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class HostReport:
    """What one host's probe said, or why it could not run."""

    name: str
    found: dict | None
    error: str | None = None


def probe_command(python, directory):
    return f"cd {shlex.quote(directory)} && {shlex.quote(python)} -c {shlex.quote(PROBE)}"


def probe(host, python, directory, ssh=("ssh",), timeout=60):
    """Runs the probe on `host`: directly when it is this machine's loopback name, else over SSH."""
    command = probe_command(python, directory)
    argv = ["sh", "-c", command] if host in LOCAL_NAMES else [*ssh, *SSH_OPTIONS, host, command]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return HostReport(host, None, f"no answer within {timeout} s")
    except OSError as err:
        return HostReport(host, None, str(err))
    for line in result.stdout.splitlines():
        if line.startswith("PROBE "):
            return HostReport(host, json.loads(line[len("PROBE "):]))
    said = (result.stderr.strip().splitlines() or ["exit code %d" % result.returncode])[-1]
    return HostReport(host, None, said)


def start_on(host, argv, directory):
    """argv started on `host` from `directory` (directly for a loopback name, else over SSH), as a Popen."""
    command = f"cd {shlex.quote(directory)} && {shlex.join(argv)}"
    full = ["sh", "-c", command] if host in LOCAL_NAMES else ["ssh", *SSH_OPTIONS, host, command]
    return subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def problems(reports, here, profile=None, slots=None):
    """One line per problem, each naming the host and the fix; `here` is this host's own report."""
    lines = []
    for report in reports:
        lines += _host_problems(report, here, profile, (slots or {}).get(report.name))
    lines += _shared_name_problems([r for r in reports if r.found])
    return lines


def _host_problems(report, here, profile, slots):
    name = report.name
    if report.found is None:
        if report.name in LOCAL_NAMES:
            return [f"host {name}: the probe failed here ({report.error})"]
        return [f"host {name}: not reachable over SSH without a password ({report.error}); "
                f"`ssh {name} true` must work from this host, with keys"]
    found, lines = report.found, []
    mine = (here.found["python"], here.found["executable"]) if here and here.found else None
    if mine and (found["python"], found["executable"]) != mine:
        lines.append(f"host {name}: Python {found['python']} at {found['executable']}, this host has "
                     f"{here.found['python']} at {here.found['executable']}; install the same environment "
                     f"at the same path on every host")
    if not found.get("suite"):
        lines.append(f"host {name}: the suite cannot be imported there ({found.get('suite_error')}); the "
                     f"ranks start in this directory, so it must hold the same checkout on every host")
    elif here and here.found and here.found.get("revision") != found.get("revision"):
        lines.append(f"host {name}: the suite is at revision {found.get('revision')}, this host at "
                     f"{here.found.get('revision')}; check out the same revision on every host")
    lines += _address_problems(name, found, profile)
    gpus_needed = profile is not None and getattr(profile, "gpus_per_node", 0) > 0
    if gpus_needed and slots and found.get("gpus", 0) < slots:
        lines.append(f"host {name}: {slots} slots but {found.get('gpus', 0)} GPUs (nvidia-smi -L); lower its "
                     f"slots in the hostfile")
    return lines


def _address_problems(name, found, profile):
    if name in LOCAL_NAMES:
        return []  # a one-host job on loopback needs no link address
    resolved = found.get("resolves_to")
    if resolved is None:
        return [f"host {name}: its own host name {found['hostname']} does not resolve there "
                f"({found.get('resolve_error')}); add it to /etc/hosts or DNS with its link address"]
    if ipaddress.ip_address(resolved).is_loopback:
        return [f"host {name}: its host name {found['hostname']} resolves to {resolved} there (a loopback "
                f"address, as a default /etc/hosts line does); map it to the address of the interface the "
                f"ranks use, or Gloo ranks advertise {resolved} and their peers cannot connect"]
    interface = profile.network_interface if profile is not None else None
    interfaces = found.get("interfaces")
    if not interface or interfaces is None:
        return []  # no interface named, or `ip` could not list them there
    if interface not in interfaces:
        return [f"host {name}: has no interface {interface} with an IPv4 address (the profile's "
                f"network_interface; it has {', '.join(sorted(interfaces)) or 'none'}); name the front-end "
                f"interface every node has"]
    if interfaces[interface] != resolved:
        return [f"host {name}: {found['hostname']} resolves to {resolved}, but the profile's front-end "
                f"interface {interface} has {interfaces[interface]}; point the name at that address"]
    return []


def _shared_name_problems(reports):
    by_name = {}
    for report in reports:
        by_name.setdefault(report.found["hostname"], []).append(report.name)
    return [f"hosts {', '.join(names)} all call themselves {hostname}; give each node its own host name "
            f"(Open MPI and Horovod count ranks per host by it)"
            for hostname, names in sorted(by_name.items()) if len(names) > 1]


def check_hosts(hosts, python=sys.executable, directory=None, profile=None, ssh=("ssh",)):
    """(reports, problem lines) for every host of a hostfile; this host is probed too, for comparison."""
    directory = directory or os.getcwd()
    here = probe("localhost", python, directory)
    reports = [probe(host.name, python, directory, ssh) for host in hosts]
    slots = {host.name: host.slots for host in hosts}
    return reports, problems(reports, here, profile, slots)


def is_this_machine(name):
    """True when name resolves to an address of this machine (binding to it succeeds only here)."""
    if name in LOCAL_NAMES:
        return True
    try:
        infos = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, address in infos:
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((address[0], 0))
            return True
        except OSError:
            continue
    return False


def is_multi_host(hosts):
    return len(hosts) > 1 or any(host.name not in LOCAL_NAMES for host in hosts)
