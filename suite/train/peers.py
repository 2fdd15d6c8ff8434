"""A line from every rank to rank 0, so that a rank that dies, stops or drops off the network is named
within seconds, under any launcher.

Horovod learns of a lost rank only through its collectives: over Gloo after its operation timeout,
over MPI not at all (an MPI_Allreduce waits for ever on a stopped process or a dead link), and the
launcher's teardown tells rank 0 nothing of who failed. So at start-up every rank opens a TCP
connection to rank 0, and both ends send a line a second from a thread of their own. The kernel
closes a killed process's sockets at once, so a death is seen in milliseconds; a stopped process, a
frozen host or a link that went down says nothing, and is seen after the profile's
`timeouts.peer_seconds`. Rank 0 then closes the log naming the rank and its host, tells the others
to stop, and ends (a rank that says why it failed is only named: the job ends through its error);
the others end when rank 0 goes quiet, which frees a host cut off from the job.

An orderly end is said before the line closes: `done` (finished, or a verdict every rank reached),
`stopped SIG...` (the launcher is stopping every rank), `failed <reason>` (this rank's own error).
"""
import os
import secrets
import select
import socket
import threading
import time
from dataclasses import dataclass

HEARTBEAT_SECONDS = 1.0
# The words after which a rank says nothing more.
LAST_WORDS = ("done", "stopped", "failed", "abort")
CONNECT_SECONDS = 5.0
# How long rank 0 waits for the greetings of ranks that said they connected.
GREETING_SECONDS = 30.0


@dataclass(frozen=True)
class Lost:
    """What rank 0 (or, about rank 0, another rank) learnt of a peer."""

    rank: int
    host: str
    kind: str  # "ended", "silent", "failed" (it said why) or "abort" (rank 0 stopped the job)
    why: str
    others: int = 0  # more ranks lost in the same check

    def describe(self):
        more = f" (and {self.others} more rank{'s' if self.others > 1 else ''})" if self.others else ""
        return f"rank {self.rank} on host {self.host} {self.why}{more}"


class _Line:
    """One connection and what has been heard on it."""

    def __init__(self, sock, rank, host):
        self.sock, self.rank, self.host = sock, rank, host
        self.heard = time.monotonic()
        self.pending = b""
        self.said = None  # "done", "stopped ...", "failed ...", "abort": an orderly end
        self.kind = self.why = None
        self.overdue = True  # False for a silent rank counted with another before its own bound

    def send(self, line):
        """Best effort, never blocks: a full buffer means a peer that reads nothing, which the
        silence check reports."""
        try:
            self.sock.send(line.encode() + b"\n", socket.MSG_DONTWAIT)
        except OSError:
            pass

    def receive(self):
        """The complete lines that arrived, or None once the peer closed its end."""
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            return None
        self.heard = time.monotonic()
        *lines, self.pending = (self.pending + data).split(b"\n")
        return [line.decode(errors="replace") for line in lines]


class Watch:
    """The watching thread of one rank; `on_lost(Lost)` runs in it when a peer fails."""

    def __init__(self, rank, lines, timeout, on_lost):
        self.rank = rank
        self.lines = lines          # rank 0: every other rank; the others: rank 0 alone
        self.timeout = timeout
        self.on_lost = on_lost
        self.lost = None
        self._found = threading.Event()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="suite-peers", daemon=True)

    def start(self):
        self._thread.start()
        return self

    # Said by this rank ----------------------------------------------------------------------------

    def done(self):
        """This rank ends in order (success, or a verdict rank 0 reports itself)."""
        self._say("done")

    def stopped(self, signal_name):
        self._say(f"stopped {signal_name}")

    def failed(self, reason):
        """This rank's own error; it keeps listening, so that rank 0's `abort` ends it at once."""
        for line in self.lines:
            line.send(f"failed {' '.join(reason.split())}")

    def abort(self):
        """Rank 0 tells the others to stop at once, quietly: it has closed the log."""
        self._say("abort")

    def await_ends(self, wait):
        """After done(): waits up to `wait` seconds until every peer has ended its side (said its last
        word, or closed); returns whether all did. For a rank whose own exit would make the launcher
        signal rank 0 before rank 0 has written its line: rank 0 says `done` only after it has."""
        deadline = time.monotonic() + wait
        self._thread.join(max(0.0, deadline - time.monotonic()))  # it stops within a heartbeat
        waiting = [line for line in self.lines if line.said is None]
        while waiting and (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([line.sock for line in waiting], [], [], left)
            waiting = [line for line in waiting
                       if line.sock not in readable or not _last_word(line.receive())]
        return not waiting

    def cause(self, wait=0.0):
        """The first peer failure seen, waiting up to `wait` seconds for one; None if there is none."""
        self._found.wait(wait)
        return self.lost

    def _say(self, word):
        if self._ended.is_set():
            return
        self._ended.set()
        for line in self.lines:
            line.send(word)

    # The thread ----------------------------------------------------------------------------------

    def _watch(self):
        beat = 0.0
        while not self._ended.is_set():
            open_lines = [line for line in self.lines if line.said is None]
            if not open_lines:
                return
            readable, _, _ = select.select([line.sock for line in open_lines], [], [], HEARTBEAT_SECONDS)
            now = time.monotonic()
            lost = []
            for line in open_lines:
                if line.sock in readable:
                    lost.extend(self._read(line))
            if now - beat >= HEARTBEAT_SECONDS:
                # A send that fails means a closed peer, which the next read reports as such.
                beat = now
                for line in open_lines:
                    line.send("beat")
            lost = self._judge(lost, now, open_lines)
            if lost and not self._ended.is_set():
                self._report(lost)
                return

    def _read(self, line):
        heard = line.receive()
        if heard is None:
            if line.said is None:
                line.kind, line.why = "ended", "ended without a word (killed, or crashed)"
                return [line]
            return []
        for text in heard:
            word, _, rest = text.partition(" ")
            if word == "failed":
                line.said, line.kind, line.why = text, "failed", f"failed: {rest}"
                return [line]
            if word == "abort":
                line.said, line.kind, line.why = text, "abort", "stopped the job"
                return [line]
            if word in ("done", "stopped"):
                line.said = text
        return []

    def _judge(self, lost, now, open_lines):
        # Ranks cut off together (a host or a link going down) fell silent within a heartbeat or two
        # of each other: once one has passed the bound, those are counted with it, not one by one.
        overdue = any(line.said is None and now - line.heard > self.timeout for line in open_lines)
        bound = self.timeout - 2 * HEARTBEAT_SECONDS if overdue else self.timeout
        for line in open_lines:
            if line.said is None and line not in lost and now - line.heard > bound:
                line.kind, line.overdue = "silent", now - line.heard > self.timeout
                line.why = (f"sent nothing for {self.timeout:g} s (stopped, hung, or its host or the link to "
                            f"it is down)")
                lost.append(line)
        return lost

    def _report(self, lost):
        # The rank named is one that did pass the bound its description gives.
        first = min(lost, key=lambda line: (not line.overdue, line.rank))
        self.lost = Lost(first.rank, first.host, first.kind, first.why, len(lost) - 1)
        self._found.set()
        self.on_lost(self.lost)


def _last_word(heard):
    """True for a peer's end: its socket closed, or a word after which it says nothing more."""
    return heard is None or any(text.partition(" ")[0] in LAST_WORDS for text in heard)


def start(world, hosts, timeout, on_lost, broadcast, allgather):
    """Connects every rank with rank 0 and starts watching; returns the Watch (None on one rank) and
    the ranks left unwatched.

    hosts: every rank's host name, in rank order. broadcast(value, name) and allgather(value, name)
    are the job's collectives (Horovod's), used once here to exchange the address. A rank that
    cannot reach rank 0 (a firewall between the nodes) is named in a warning and left unwatched.
    """
    if world.size == 1:
        return None, []
    listener = _listen(world.size) if world.is_root else None
    where = broadcast(_where(listener) if listener else None, "peer_watch_address")
    sock = None if world.is_root else _connect(where, world, hosts)
    reached = allgather(world.is_root or sock is not None, "peer_watch_connected")
    if world.is_root:
        lines, missing = _greet(listener, where["token"], hosts, reached)
        listener.close()
    else:
        lines, missing = ([_Line(sock, 0, hosts[0])] if sock else []), []
    return Watch(world.rank, lines, timeout, on_lost).start(), missing + [
        rank for rank, ok in enumerate(reached) if not ok]


def _listen(size):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", 0))
    listener.listen(max(size, 16))
    return listener


def _where(listener):
    return {"port": listener.getsockname()[1], "token": secrets.token_hex(8), "addresses": _addresses()}


def _addresses():
    """Rank 0's IPv4 addresses, the job's own interface first (the profile's, via NCCL/Gloo settings)."""
    import psutil  # a dependency of Horovod's
    wanted = os.environ.get("HOROVOD_GLOO_IFACE") or os.environ.get("NCCL_SOCKET_IFNAME", "")
    found = []
    for name, addresses in sorted(psutil.net_if_addrs().items(), key=lambda item: item[0] != wanted):
        found.extend(a.address for a in addresses if a.family == socket.AF_INET
                     and not a.address.startswith("127."))
    return found


def _connect(where, world, hosts):
    """A connection to rank 0 that has said hello, or None."""
    candidates = ["127.0.0.1"] if world.host == hosts[0] else where["addresses"]
    for address in candidates:
        try:
            sock = socket.create_connection((address, where["port"]), timeout=CONNECT_SECONDS)
        except OSError:
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(f"hello {where['token']} {world.rank}\n".encode())
        sock.setblocking(False)
        return sock
    return None


def _greet(listener, token, hosts, reached):
    """Accepts the ranks that said they connected; returns their lines and the ranks never heard."""
    expected = {rank for rank, ok in enumerate(reached) if ok and rank != 0}
    lines, deadline = [], time.monotonic() + GREETING_SECONDS
    listener.settimeout(1.0)
    while expected and time.monotonic() < deadline:
        try:
            sock, _ = listener.accept()
        except socket.timeout:
            continue
        rank, rest = _hello(sock, token)
        if rank in expected:
            expected.discard(rank)
            sock.setblocking(False)
            line = _Line(sock, rank, hosts[rank])
            line.pending = rest.rsplit(b"\n", 1)[-1]  # heartbeats already sent after the greeting
            lines.append(line)
        else:
            sock.close()
    return lines, sorted(expected)


def _hello(sock, token):
    """(rank, bytes after the greeting) from a greeting with the job's token, else (None, b"")."""
    sock.settimeout(CONNECT_SECONDS)
    received = b""
    try:
        while b"\n" not in received and len(received) < 256:
            data = sock.recv(256)
            if not data:
                break
            received += data
    except OSError:
        return None, b""
    first, _, rest = received.partition(b"\n")
    words = first.decode(errors="replace").split()
    if len(words) == 3 and words[0] == "hello" and words[1] == token and words[2].isdigit():
        return int(words[2]), rest
    return None, b""
