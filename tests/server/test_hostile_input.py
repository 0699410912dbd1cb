"""Hostile native clients against a real server: memory stays bounded per
client and returns when the client goes, and everyone else is served
meanwhile (issue 12, finding 5)."""
import time

import zmq

from harness import create, read_all, reset_peak_rss, rss_mb
from kafkalite.client import Producer
from kafkalite.client.connection import Connection
from kafkalite.protocol import ApiKey, encode_request

FETCHES = 150
FETCH_BYTES = 10 << 20


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
    deadline = time.monotonic() + timeout
    while True:
        now = rss_mb(pid)
        if now <= target or time.monotonic() > deadline:
            return now
        time.sleep(0.2)


def test_a_client_that_never_reads_its_fetches_cannot_grow_a_worker(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config(**{"linger.ms": 5}))
    for i in range(120):                                  # 12 MB in the partition
        p.produce(topic_name, b"%06d" % i + b"x" * 99_994, partition=0)
    assert p.flush(30) == 0
    p.close()
    index, endpoint = leader_endpoint(server, topic_name)
    pid = server.worker_pid(index)
    start = settle_rss(pid, 0)                             # whatever it is now
    reset_peak_rss(pid)

    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.RCVHWM, 1)                       # reads nothing past one answer
    dealer.setsockopt(zmq.RCVBUF, 64 * 1024)
    dealer.connect(endpoint)
    try:
        for cid in range(FETCHES):
            dealer.send(fetch_request(topic_name, cid, FETCH_BYTES))
        time.sleep(3)
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
            dealer.connect(endpoints[name])
            dealer.send(frame, copy=False)
            time.sleep(3)
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
