"""The rank watch (suite/train/peers.py) on real sockets: who it names, and when it stays quiet."""
import queue
import socket
import threading
import time
from types import SimpleNamespace

from suite.train import peers


def watched(timeout=30.0):
    """Rank 0's watch over ranks 1 (host h2) and 2 (host h3); returns it, the far ends and the reports."""
    reports = queue.Queue()
    lines, far = [], {}
    for rank, host in ((1, "h2"), (2, "h3")):
        near, far[rank] = socket.socketpair()
        near.setblocking(False)
        lines.append(peers._Line(near, rank, host))
    return peers.Watch(0, lines, timeout, reports.put).start(), far, reports


def test_a_rank_that_dies_is_named_at_once():
    watch, far, reports = watched()
    far[2].close()  # what the kernel does for a killed process
    lost = reports.get(timeout=5)
    assert (lost.rank, lost.host, lost.kind) == (2, "h3", "ended")
    assert lost.describe() == "rank 2 on host h3 ended without a word (killed, or crashed)"
    assert watch.cause() == lost


def test_a_rank_that_says_why_it_failed_is_quoted():
    _, far, reports = watched()
    far[1].sendall(b"beat\nfailed cannot read /data/x.tfrecord\n")
    lost = reports.get(timeout=5)
    assert lost.describe() == "rank 1 on host h2 failed: cannot read /data/x.tfrecord"


def test_a_silent_rank_is_named_after_the_timeout_and_not_before():
    watch, far, reports = watched(timeout=2)
    started = time.monotonic()
    keep_talking = threading.Event()

    def talk():
        while not keep_talking.is_set():
            far[2].sendall(b"beat\n")
            time.sleep(0.3)
    threading.Thread(target=talk, daemon=True).start()
    lost = reports.get(timeout=10)  # rank 1 says nothing; rank 2 keeps beating
    keep_talking.set()
    assert time.monotonic() - started >= 2
    assert (lost.rank, lost.kind, lost.others) == (1, "silent", 0)
    assert "sent nothing for 2 s" in lost.describe()


def test_ranks_that_fall_silent_together_are_named_together():
    """A host or link going down silences its ranks within a heartbeat of each other: one report."""
    watch, far, reports = watched(timeout=3)
    far[2].sendall(b"beat\n")  # rank 2's last word comes a second after rank 1's silence began
    time.sleep(1)
    far[2].sendall(b"beat\n")
    lost = reports.get(timeout=10)
    assert (lost.rank, lost.kind, lost.others) == (1, "silent", 1)
    assert lost.describe().endswith("(and 1 more rank)")
    assert reports.empty()


def test_ranks_that_end_in_order_are_not_reported():
    watch, far, reports = watched(timeout=2)
    far[1].sendall(b"done\n")
    far[1].close()
    far[2].sendall(b"stopped SIGTERM\n")
    far[2].close()
    time.sleep(3)
    assert reports.empty() and watch.cause() is None


def test_the_others_hear_rank_0_stop_the_job():
    near, far = socket.socketpair()
    near.setblocking(False)
    reports = queue.Queue()
    peers.Watch(1, [peers._Line(near, 0, "h1")], 30, reports.put).start()
    far.sendall(b"abort\n")
    assert reports.get(timeout=5).kind == "abort"


def _rank_1_watch():
    near, far = socket.socketpair()
    near.setblocking(False)
    return peers.Watch(1, [peers._Line(near, 0, "h1")], 30, lambda lost: None).start(), far


def test_a_rank_that_ends_on_a_shared_verdict_waits_for_rank_0_to_say_done():
    """Its exit would make the launcher signal rank 0 before rank 0's error line is out."""
    watch, far = _rank_1_watch()

    def rank_0():
        for _ in range(4):
            far.sendall(b"beat\n")  # heartbeats do not end the wait
            time.sleep(0.25)
        far.sendall(b"done\n")
    started = time.monotonic()  # before rank 0 starts its second of heartbeats
    threading.Thread(target=rank_0, daemon=True).start()
    watch.done()
    assert watch.await_ends(10)
    assert 0.9 < time.monotonic() - started < 5
    assert b"done\n" in far.recv(100)  # and rank 0 heard this rank end in order


def test_the_wait_for_rank_0_is_bounded_and_ends_when_rank_0_is_gone():
    watch, far = _rank_1_watch()
    watch.done()
    started = time.monotonic()
    assert not watch.await_ends(1.5)
    assert 1.5 <= time.monotonic() - started < 4
    far.close()
    assert watch.await_ends(5)


def test_start_connects_every_rank_with_rank_0():
    """Three ranks in threads, with collectives that exchange values in memory; then rank 2 dies.

    Rank 1 shares rank 0's host (it connects over loopback), rank 2 does not (over this machine's
    own address, as from another node)."""
    size, values, barrier, hosts = 3, {}, threading.Barrier(3), ["h0", "h0", "h2"]

    def broadcast(value, name):
        if value is not None:
            values[name] = value
        barrier.wait()
        return values[name]

    def allgather(value, name):
        values[(name, threading.current_thread().name)] = value
        barrier.wait()
        return [values[(name, f"rank{r}")] for r in range(size)]

    reports, made = queue.Queue(), {}

    def rank(number):
        world = SimpleNamespace(rank=number, size=size, is_root=number == 0, host=hosts[number])
        made[number] = peers.start(world, hosts, 30, reports.put, broadcast, allgather)

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank{r}") for r in range(size)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(made[r][1] == [] for r in range(size))  # nobody unwatched
    made[2][0].lines[0].sock.shutdown(socket.SHUT_RDWR)  # rank 2's end, as its death would close it
    lost = made[0][0].cause(wait=5)  # rank 0's report (rank 2's own watch reports losing rank 0)
    assert (lost.rank, lost.host, lost.kind) == (2, "h2", "ended")
