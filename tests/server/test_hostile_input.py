"""Hostile native clients against a real server: memory stays bounded per
client and returns when the client goes, and everyone else is served
meanwhile (issue 12, finding 5)."""
import mmap
import os
import signal
import struct
import time

import pytest
import zmq

from harness import create, read_all, reset_peak_rss, rss_mb, shm_entries, wait_until
from kafkalite import errors
from kafkalite.client import Producer
from kafkalite.client.connection import Connection
from kafkalite.protocol import ApiKey, encode_request

FETCHES = 150
FETCH_BYTES = 10 << 20


@pytest.fixture(scope="module")
def server(module_server):
    """Hostile clients grow, stop (SIGSTOP) and break rings of its workers,
    whose memory the tests measure and whose log they read."""
    return module_server


def leader_endpoint(server, topic: str, partition: int = 0) -> tuple[int, str]:
    """(worker index, native endpoint) of the partition's leader."""
    conn = Connection(server.info["native"])
    try:
        meta = conn.request(ApiKey.METADATA, {"topics": [{"name": topic}],
                                              "allow_auto_topic_creation": False})
    finally:
        conn.close()
    (t,) = meta["topics"]
    leader = next(p["leader_id"] for p in t["partitions"] if p["partition_index"] == partition)
    return leader, server.info["workers"][leader]["endpoint"]


def fetch_request(topic: str, correlation_id: int, max_bytes: int) -> bytes:
    return encode_request(ApiKey.FETCH, 12, correlation_id, "never-reads", {
        "max_wait_ms": 0, "min_bytes": 1, "max_bytes": max_bytes, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": max_bytes}]}]})


def settle_rss(pid: int, target: float, timeout: float = 20.0) -> float:
    """RSS of ``pid`` once it is at most ``target`` MiB, or after ``timeout``."""
    try:
        return wait_until(lambda: (lambda now: now if now <= target else None)(rss_mb(pid)),
                          timeout, interval=0.2)
    except AssertionError:
        return rss_mb(pid)


def test_a_client_that_never_reads_its_fetches_cannot_grow_a_worker(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config(**{"linger.ms": 5}))
    for i in range(120):                                  # 12 MB in the partition
        p.produce(topic_name, b"%06d" % i + b"x" * 99_994, partition=0)
    assert p.flush(30) == 0
    p.close()
    index, endpoint = leader_endpoint(server, topic_name)
    pid = server.worker_pid(index)
    start = rss_mb(pid)                                    # whatever it is now
    reset_peak_rss(pid)

    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVHWM, 1)                       # reads nothing past one answer
    dealer.setsockopt(zmq.RCVBUF, 64 * 1024)
    dealer.connect(endpoint)
    try:
        for cid in range(FETCHES):
            dealer.send(fetch_request(topic_name, cid, FETCH_BYTES))
        time.sleep(3)       # the time the hostile client has to make the worker buffer
        # a well-behaved client on another socket is served meanwhile
        got = read_all(server, topic_name, 1, 120, timeout=30)
        assert len(got) == 120
        peak = rss_mb(pid, "VmHWM")
    finally:
        dealer.close(0)
        ctx.term()
    after = settle_rss(pid, start + 50)
    print(f"worker RSS: start {start:.0f} MiB, peak while {FETCHES} x 10 MB fetches were "
          f"unread {peak:.0f} MiB, after the client left {after:.0f} MiB")
    assert server.worker_pid(index) == pid
    assert peak - start < 250, f"{FETCHES} unread 10 MB fetches grew the worker by {peak - start:.0f} MiB"
    assert after - start < 50, f"the worker kept {after - start:.0f} MiB after the client left"


def test_an_oversized_frame_is_refused_before_it_is_buffered(server):
    from zmq.utils.monitor import recv_monitor_message
    pids = {"supervisor": server.proc.pid, "worker": server.worker_pid(0)}
    endpoints = {"supervisor": server.info["native"],
                 "worker": server.info["workers"][0]["endpoint"]}
    frame = b"\0" * (300 << 20)
    ctx = zmq.Context()
    try:
        for name, pid in pids.items():
            start = rss_mb(pid)
            reset_peak_rss(pid)
            dealer = ctx.socket(zmq.DEALER)
            monitor = dealer.get_monitor_socket(zmq.EVENT_DISCONNECTED)
            dealer.connect(endpoints[name])
            dealer.send(frame, copy=False)
            # ZMQ_MAXMSGSIZE: the process drops a sender whose frame says it
            # is too long, before reading it; a process that buffered the
            # frame instead shows it in its peak
            wait_until(lambda: monitor.poll(0) or rss_mb(pid, "VmHWM") - start >= 100, 20,
                       f"the {name} to drop the connection")
            while monitor.poll(0):
                recv_monitor_message(monitor)
            dealer.disable_monitor()
            monitor.close(0)
            dealer.close(0)
            peak = rss_mb(pid, "VmHWM")
            print(f"{name}: RSS {start:.0f} MiB, peak {peak:.0f} MiB after a 300 MB frame")
            assert peak - start < 100, f"the {name} buffered the 300 MB frame"
    finally:
        ctx.term()
    assert [server.proc.pid, server.worker_pid(0)] == list(pids.values())
    conn = Connection(server.info["native"])
    try:
        assert conn.request(ApiKey.METADATA, {"topics": None})["brokers"]
    finally:
        conn.close()


# ---- a same-host ring producer that breaks its ring (finding 4) -----------------------------

def attached_ring(server, endpoint: str, capacity: int = 64 << 10):
    """A raw ProducerRing the worker behind ``endpoint`` drains."""
    from kafkalite.shm import ProducerRing
    ring = ProducerRing.create(capacity)
    conn = Connection(endpoint)
    try:
        conn.extension({"op": "shm_attach", "ring": ring.name,
                        "secret": ring.attach_secret.hex()})
    except BaseException:
        ring.close()
        raise
    finally:
        conn.close()
    return ring


class RawRing:
    """Writes into a ring's shared memory behind the ProducerRing's back,
    as a broken producer would; only ever touches the header page."""

    def __init__(self, ring):
        from kafkalite._ext import shm_ring as core
        self.core = core
        self.path = os.path.join(core.SHM_DIR, ring.name)
        self.fd = os.open(self.path, os.O_RDWR)
        self.header = mmap.mmap(self.fd, core.HEADER_SIZE)

    def data_head(self) -> int:
        return struct.unpack_from("<Q", self.header, self.core.OFF_DATA_HEAD)[0]

    def publish(self, head: int) -> None:
        struct.pack_into("<Q", self.header, self.core.OFF_DATA_HEAD, head)
        bell = os.open(self.path + ".w", os.O_WRONLY | os.O_NONBLOCK)
        try:
            os.write(bell, b"\1")
        finally:
            os.close(bell)

    def write_data(self, position: int, raw: bytes) -> None:
        os.pwrite(self.fd, raw, self.core.HEADER_SIZE + position)

    def close(self) -> None:
        self.header.close()
        os.close(self.fd)


class _AnyOffset:
    def __eq__(self, other):
        return isinstance(other, int) and other >= 0


ANY_OFFSET = _AnyOffset()


def good_batch() -> bytes:
    from kafkalite.record import RecordBatchBuilder
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"raw-ring", None)
    return bytes(b.build())


def malformed_entry(raw: RawRing) -> str:
    head = raw.data_head()
    raw.write_data(head, struct.pack("<IBBH", 32, ord("X"), 1, 0) + bytes(24))
    raw.publish(head + 32)
    return "malformed entry"


def impossible_head(raw: RawRing) -> str:
    raw.publish(7340040)
    return "data head 7340040 is impossible"


def truncated_file(raw: RawRing) -> str:
    head = raw.data_head()
    raw.write_data(head, struct.pack("<IBBH", 64, ord("E"), 1, 0) + bytes(56))
    os.truncate(raw.path, raw.core.HEADER_SIZE)     # the data region is gone: SIGBUS to touch
    raw.publish(head + 64)
    return "truncated"


@pytest.mark.parametrize("fault", [malformed_entry, impossible_head, truncated_file])
def test_a_broken_ring_is_closed_and_its_producer_told_while_the_worker_serves_on(
        server, topic_name, fault):
    from kafkalite.shm import RingPoisoned
    create(server, topic_name, 2)
    index, endpoint = leader_endpoint(server, topic_name, 0)
    pid = server.worker_pid(index)
    good = Producer(server.config(**{"kafkalite.transport": "shm", "linger.ms": 1}))
    delivered = []
    try:
        for i in range(200):
            good.produce(topic_name, b"before-%d" % i, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
        assert good.flush(20) == 0
        ring = attached_ring(server, endpoint)
        seq = ring.append(topic_name, 0, good_batch())
        assert ring.wait_acks(10) == [(seq, 0, ANY_OFFSET)]
        raw = RawRing(ring)
        try:
            reason = fault(raw)
            with pytest.raises(RingPoisoned) as refused:
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    ring.wait_acks(0.2)
            assert refused.value.code == errors.CorruptRecordError.code
            assert reason in str(refused.value)
        finally:
            raw.close()
            ring.close()
        for i in range(200):
            good.produce(topic_name, b"after-%d" % i, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
        assert good.flush(20) == 0
    finally:
        good.close()
    assert delivered == [None] * 400
    assert server.worker_pid(index) == pid, "the worker died"
    values = {m.value() for m in read_all(server, topic_name, 2, 401)}
    assert {b"before-%d" % i for i in range(200)} | {b"after-%d" % i for i in range(200)} <= values
    assert server.output().count("closed ring") <= 10


def test_a_producer_whose_ring_breaks_gets_the_error_then_a_new_ring(server, topic_name):
    create(server, topic_name, 1)
    index, _ = leader_endpoint(server, topic_name, 0)
    pid = server.worker_pid(index)
    before = shm_entries()
    p = Producer(server.config(**{"kafkalite.transport": "shm", "retries": 0, "linger.ms": 1}))
    results = []
    try:
        p.produce(topic_name, b"first", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(10) == 0 and results == [None]
        (name,) = {n for n in shm_entries() - before if not n.endswith((".w", ".p"))}
        raw = RawRing(type("Ring", (), {"name": name})())
        head = raw.data_head()
        os.kill(pid, signal.SIGSTOP)          # so that "second" is in the ring, not yet drained
        try:
            p.produce(topic_name, b"second", on_delivery=lambda err, msg: results.append(err))
            wait_until(lambda: raw.data_head() != head, 10, "the record in the ring",
                       interval=0.01)
            raw.write_data(head + 4, b"X")    # its entry's kind byte
        finally:
            os.kill(pid, signal.SIGCONT)
            raw.close()
        p.flush(10)
        assert isinstance(results[1], errors.CorruptRecordError), results
        assert "closed the shared-memory ring" in str(results[1])
        assert "malformed entry" in str(results[1])
        p.produce(topic_name, b"third", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(10) == 0 and results[2] is None, "a new ring carries on"
    finally:
        p.close()
    assert server.worker_pid(index) == pid
    assert [m.value() for m in read_all(server, topic_name, 1, 2)] == [b"first", b"third"]
