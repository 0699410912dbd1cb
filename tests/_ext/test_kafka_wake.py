"""A plain Kafka connection's wake-up in one call (ext/kafka_wake.pyx)
behind a real KafkaListener, its replica manager and files, over a real
socket: pipelined requests of every kind the listener meets -- Produce
requests of the common kind, acks 0, ones the one-pass path hands back
(a transactional id, an unknown partition, a batch the log refuses), and
requests that are not a Produce -- cut at random points across reads,
get byte for byte the answers the listener's own Python steps give, and
the reads of common Produce requests are served wholly in C."""
from __future__ import annotations

import random
import socket
import struct
import time

import pytest
import zmq

from kafkalite.protocol import ApiKey, encode_request
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.metrics import LATENCY_BUCKETS_MS, RequestStats
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.network.requests import RequestDispatcher
from kafkalite.server.replica.replica_manager import ReplicaManager


class _Node:
    """A worker's Produce path behind a real KafkaListener, its loop run by
    the test; ``wake``: False takes the listener's own Python steps only."""

    def __init__(self, data_dir, wake: bool, stats: RequestStats | None = None):
        self.rm = ReplicaManager(0, str(data_dir), ServerConfig(data_dir=str(data_dir)).log_config)
        for p in range(3):
            assert self.rm.become_leader({"topic": "t", "partition": p, "topic_id": None,
                                          "leader_epoch": 1, "configs": {}})["error"] == 0
        self.dispatcher = RequestDispatcher("test", self.rm.handlers(), stats=stats)
        self.dispatcher.at_once[ApiKey.PRODUCE] = self.rm.produce_at_once
        self.dispatcher.frames_at_once[ApiKey.PRODUCE] = self.rm.produce_frame_at_once
        self.listener = KafkaListener("127.0.0.1", 0, self.dispatcher)
        if not wake:
            self.listener._wake = lambda conn, frames: False
        self.poller = zmq.Poller()
        self.listener.attach(self.poller)
        self.client = socket.create_connection(("127.0.0.1", self.listener.port))
        self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client.settimeout(0)
        self.received = bytearray()

    def send_read(self, chunk: bytes) -> None:
        """Send ``chunk`` and serve until the listener has read it: each
        chunk is one read of the listener's."""
        self.client.sendall(chunk)
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "the listener never read the chunk"
            events = dict(self.poller.poll(100))
            if any(type(fd) is int and fd != self.listener.fd for fd in events):
                self.listener.on_events(events)
                return
            self.listener.on_events(events)        # the accept

    def answers(self, expected: int) -> list[bytes]:
        out = []
        deadline = time.monotonic() + 20
        while len(out) < expected:
            assert time.monotonic() < deadline, f"{len(out)} of {expected} answers"
            self.listener.on_events(dict(self.poller.poll(10)))
            try:
                self.received += self.client.recv(1 << 20)
            except BlockingIOError:
                pass
            buf = self.received
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                size = struct.unpack_from(">i", buf)[0]
                out.append(bytes(buf[4:4 + size]))
                del buf[:4 + size]
        return out

    def close(self):
        self.client.close()
        self.listener.close()
        self.rm.shutdown()


def _batch(value: bytes, producer=None) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, value)
    if producer is not None:
        b.set_producer(*producer)
    return bytes(b.build())


def _frames(rng: random.Random) -> tuple[bytes, int]:
    """(the requests' bytes, how many are answered): mostly common Produce
    requests, and among them every kind the C call leaves to Python."""
    def produce(cid, version, records, acks=1, transactional_id=None, partition=None):
        body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000,
                "topic_data": [{"name": "t", "partition_data": [
                    {"index": cid % 3 if partition is None else partition, "records": records}]}]}
        return encode_request(ApiKey.PRODUCE, version, cid, "client", body)
    requests, answered = [], 0
    for cid in range(120):
        version = 3 + cid % 10
        kind = rng.random()
        if kind < 0.04:
            requests.append(encode_request(ApiKey.API_VERSIONS, 0, cid, "client", {}))
        elif kind < 0.08:
            requests.append(produce(cid, version, _batch(b"tx", producer=(7, 0, 0, True)),
                                    transactional_id="tx"))
        elif kind < 0.11:
            requests.append(produce(cid, version, _batch(b"unknown"), partition=9))
        elif kind < 0.14:
            requests.append(produce(cid, version, b"\x00" * 70))       # refused: not a batch
        elif kind < 0.20:
            requests.append(produce(cid, version, _batch(b"acks 0"), acks=0))
            continue
        else:
            requests.append(produce(cid, version, _batch(b"v%d" % cid * 50)))
        answered += 1
    return b"".join(struct.pack(">i", len(r)) + r for r in requests), answered


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_requests_cut_across_reads_get_the_python_steps_answers(tmp_path, seed):
    rng = random.Random(seed)
    data, answered = _frames(rng)
    # the same cuts for both: mostly whole requests in one read, some cut
    # inside a size prefix, a header or a batch
    cuts, at = [], 0
    while at < len(data):
        step = rng.choice([rng.randint(1, 12), rng.randint(13, 600), rng.randint(600, 3000)])
        cuts.append(data[at:at + step])
        at += step
    nodes = {"wake": _Node(tmp_path / "wake", True), "python": _Node(tmp_path / "python", False)}
    try:
        got = {}
        for name, node in nodes.items():
            for chunk in cuts:
                node.send_read(chunk)
            got[name] = node.answers(answered)
        assert got["wake"] == got["python"]
        for key, part in nodes["wake"].rm.partitions.items():
            other = nodes["python"].rm.partitions[key].log
            assert (part.log.log_end_offset, part.log.high_watermark) == \
                (other.log_end_offset, other.high_watermark)
        # the reads that held common Produce requests only were served in C
        assert nodes["wake"].listener.wake.served > 0
    finally:
        for node in nodes.values():
            node.close()


def test_one_request_a_read_is_served_wholly_in_c(tmp_path):
    stats = RequestStats()
    node = _Node(tmp_path, True, stats)
    try:
        for cid in range(50):
            body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
                    "topic_data": [{"name": "t", "partition_data": [
                        {"index": cid % 3, "records": _batch(b"x" * 1024)}]}]}
            request = encode_request(ApiKey.PRODUCE, 9, cid, "client", body)
            node.send_read(struct.pack(">i", len(request)) + request)
            assert len(node.answers(1)) == 1
        # librdkafka's load at 100 partitions: one Produce a read, each wake one C call
        assert node.listener.wake.served == 50
        assert node.listener.produce_frames.served == 50
        # each request timed into the node's request metrics, as RequestStats.observe does
        count, total_ms, buckets = stats.by_api[ApiKey.PRODUCE]
        assert count == 50 and sum(buckets) == 50 and total_ms > 0
        assert len(buckets) == len(LATENCY_BUCKETS_MS) + 1
    finally:
        node.close()


@pytest.mark.parametrize("ms", [0.0, 0.3, 0.5, 0.7, 1.0, 2.5, 99.9, 100.0, 30000.0, 45000.0])
def test_a_request_timed_in_c_lands_in_request_stats_own_bucket(tmp_path, ms):
    """KafkaWake.observe against RequestStats.observe, bound by bound."""
    ours, python = RequestStats(), RequestStats()
    node = _Node(tmp_path, True, ours)
    try:
        ours.observe(ApiKey.PRODUCE, 0.001)         # the entry KafkaWake.observe updates
        python.observe(ApiKey.PRODUCE, 0.001)
        node.listener.wake.observe_into(ours, ApiKey.PRODUCE, ms / 1000.0)
        python.observe(ApiKey.PRODUCE, ms / 1000.0)
        assert ours.by_api[ApiKey.PRODUCE][0] == python.by_api[ApiKey.PRODUCE][0]
        assert ours.by_api[ApiKey.PRODUCE][2] == python.by_api[ApiKey.PRODUCE][2]
        assert ours.by_api[ApiKey.PRODUCE][1] == pytest.approx(python.by_api[ApiKey.PRODUCE][1])
    finally:
        node.close()
