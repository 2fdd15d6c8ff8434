"""What network the job's allreduce really got, found out before run_start (untimed).

Two pieces of evidence go into env.json and the report: the transport NCCL chose on every rank, read
from NCCL's own INFO lines (sent to a file per process), and a short allreduce probe whose bus
bandwidth is compared with what the cluster profile expects for this node count. A run below
WARN_BELOW of that expectation warns loudly; with --require-rdma a run without RDMA stops here.
"""
import argparse
import os
import re

from suite.common import runfiles
from suite.common.busbw import WARN_BELOW, expectation, format_size
from suite.train.timed_allreduce import measure

# The expectations are nccl-tests plateaus, reached from about 1 GiB; on the CPU a smaller message
# keeps the probe short (its figure is then compared with nothing but a CPU profile's own numbers).
PROBE_BYTES = {"gpu": 2**30, "cpu": 8 * 2**20}
PROBE = argparse.Namespace(dtype="float32", fp16_compression=False, op="sum", warmup=2, iters=5)
# Networks that move the data by RDMA: NCCL's IB transport (InfiniBand and RoCE), the IB-based
# plugins (IBext_v<N>, HPC-X's SHARP plugin) and the libfabric plugin (EFA).
RDMA_NETWORKS = re.compile(r"^(IB|IBext\w*|.*Libfabric.*)$")
USING_NETWORK = re.compile(r"NCCL INFO Using network (?P<name>.+?)\s*$")
IB_DEVICES = re.compile(r"NCCL INFO NET/IB ?: Using (?P<devices>.+?)(?: ?; OOB (?P<oob>\S+))?\s*$")
SOCKET_DEVICES = re.compile(r"NCCL INFO NET/Socket ?: Using (?P<devices>.+?)\s*$")
NO_IB = re.compile(r"NCCL INFO NET/IB ?: No device found")
IB_DISABLED = re.compile(r"NCCL INFO NCCL_IB_DISABLE set by environment to 1")
CHANNEL_VIA = re.compile(r"NCCL INFO Channel \S+ ?: .* via (?P<via>\S+)")
DEVICE = re.compile(r"\[\d+\](\S+)")
# The lines kept in env.json as evidence, besides the parsed result.
EVIDENCE = (USING_NETWORK, IB_DEVICES, SOCKET_DEVICES, NO_IB, IB_DISABLED)


class NetworkError(RuntimeError):
    """--require-rdma or --require-links, and the job did not get the network asked for; one line."""

    on_every_rank = True  # every rank reaches the verdict from the same gathered evidence


def parse_nccl_log(text):
    """What one process's NCCL INFO lines say about its transport.

    network: the name after "Using network" (IB, Socket, a plugin's name), or None if NCCL never
    said; rdma: whether that network moves data by RDMA; devices: the NICs it listed; via: how
    many channels each path carries (NET/IB/0/GDRDMA counts as NET/IB, P2P/IPC, SHM, ...).
    """
    found = {"network": None, "rdma": None, "devices": [], "ib_found": None, "ib_disabled": False,
             "gpu_direct": False, "via": {}, "evidence": []}
    for line in text.splitlines():
        _read_line(line, found)
    if found["network"] is not None:
        found["rdma"] = bool(RDMA_NETWORKS.match(found["network"]))
    return found


def _read_line(line, found):
    if any(pattern.search(line) for pattern in EVIDENCE) and len(found["evidence"]) < 20:
        found["evidence"].append(line.split("NCCL INFO ", 1)[-1].strip())
    if match := USING_NETWORK.search(line):
        found["network"] = match["name"]
    elif match := IB_DEVICES.search(line):
        found["ib_found"] = True
        found["devices"] = DEVICE.findall(match["devices"])
    elif NO_IB.search(line):
        found["ib_found"] = False
    elif IB_DISABLED.search(line):
        found["ib_disabled"] = True
    elif (match := SOCKET_DEVICES.search(line)) and not found["devices"]:
        found["devices"] = DEVICE.findall(match["devices"])
    elif match := CHANNEL_VIA.search(line):
        path = "/".join(match["via"].split("/")[:2])
        found["via"][path] = found["via"].get(path, 0) + 1
    if "GPU Direct RDMA Enabled" in line or "/GDRDMA" in line:
        found["gpu_direct"] = True


class NcclLog:
    """Sends this process's NCCL INFO lines (init and network only) to its file in the run directory.

    Set before NCCL creates its first communicator, which Horovod does at the first GPU collective.
    The file is NCCL's own NCCL_DEBUG_FILE, <run dir>/nccl.%h.%p.log (suite.common.runfiles), on
    every launch path: the renderers and a raw horovodrun alike, so it outlives the container or pod
    and a run that fails before run_start still leaves it. On hosts without a shared file system each
    host keeps its ranks' files in its own copy of the run directory. env.json keeps the parsed result,
    the telling lines and the file's path. NCCL's warnings go to that file for the whole run rather
    than to stderr. A user's own NCCL_DEBUG_FILE (any other value) is left alone and read instead.
    """

    def __init__(self, environ, run_dir):
        self.environ = environ
        own = runfiles.nccl_debug_file(run_dir)
        if environ.get("NCCL_DEBUG_FILE") not in (None, "", own):
            self.pattern = environ["NCCL_DEBUG_FILE"]
            return
        # NCCL writes to stdout instead when it cannot open the file, so its folder must exist here.
        os.makedirs(run_dir, exist_ok=True)
        self.pattern = own
        environ["NCCL_DEBUG_FILE"] = self.pattern
        # INFO for the two subsystems that name the transport; WARN and above still land in the file.
        environ["NCCL_DEBUG"] = "INFO"
        environ["NCCL_DEBUG_SUBSYS"] = "INIT,NET"

    def read(self, host, pid):
        path = self.pattern.replace("%h", host).replace("%p", str(pid))
        try:
            with open(path, errors="replace") as handle:
                text = handle.read()
        except OSError:
            return {**parse_nccl_log(""), "log": path, "log_error": f"no NCCL log at {path}"}
        return {**parse_nccl_log(text), "log": path}


def probe(hvd, world):
    """One allreduce size, timed as the allreduce benchmark times it: (row, message size)."""
    nbytes = PROBE_BYTES["gpu" if world.device != "cpu" else "cpu"]
    return measure(hvd, PROBE, world, nbytes)


def assess(transports, row, profile, nodes, library):
    """The record for env.json and the warnings to print, from every rank's transport and the probe.

    transports: one parse_nccl_log result per rank (None where NCCL is not used); library: "nccl",
    "gloo" or "mpi", what carries the gradients.
    """
    expected, source = expectation(None, profile, nodes)
    record = {"library": library, "nodes": nodes, "probe": row, "expected_busbw_gbps": expected,
              "expected_source": source, "warn_below": WARN_BELOW, "ranks": transports}
    record["networks"] = sorted({t["network"] or "unknown" for t in transports if t is not None})
    record["rdma"] = _rdma(transports, library, nodes)
    warnings = []
    if expected is not None and row is not None and row["busbw_gbps"] < WARN_BELOW * expected:
        warnings.append(f"allreduce probe: bus bandwidth {row['busbw_gbps']:.3g} GB/s at "
                        f"{format_size(row['bytes'])} is {100 * row['busbw_gbps'] / expected:.0f}% of "
                        f"the {expected:g} GB/s expected ({source}); below {100 * WARN_BELOW:.0f}%")
    if nodes > 1 and record["rdma"] is False:
        warnings.append(_no_rdma_line(transports, library))
    elif nodes > 1 and record["rdma"] is None:
        warnings.append("NCCL did not say which network it uses on every rank (no 'Using network' line "
                        "in its log); the transport is unknown")
    record["status"] = "below expectation" if warnings else ("ok" if expected is not None else "not compared")
    return record, warnings


def _rdma(transports, library, nodes):
    """True only when every rank's NCCL chose an RDMA network; None on one node (no network in use)."""
    if nodes == 1:
        return None
    if library != "nccl":
        return False
    chosen = [t["rdma"] for t in transports if t is not None]
    if not chosen or None in chosen:
        return None
    return all(chosen)


def _no_rdma_line(transports, library):
    if library != "nccl":
        return f"no RDMA: the gradients go over {library} on the CPU, through TCP between the hosts"
    bad = [rank for rank, t in enumerate(transports) if t is not None and not t["rdma"]]
    names = sorted({transports[rank]["network"] or "unknown" for rank in bad})
    ranks = ", ".join(str(rank) for rank in bad[:8]) + (" ..." if len(bad) > 8 else "")
    return (f"no RDMA: NCCL on rank(s) {ranks} uses network {'/'.join(names)}, not IB; look at "
            f"env.json's network section for its lines (NET/IB : No device found, NCCL_IB_DISABLE)")


def check_required(record, warnings):
    """--require-rdma: raises NetworkError when the run did not get RDMA at the expected speed."""
    if warnings:
        raise NetworkError("--require-rdma: " + "; ".join(warnings))
