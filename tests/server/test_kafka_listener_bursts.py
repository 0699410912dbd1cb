"""A burst of small requests read at once costs the broker once, not once
per request (issue 46: confluent-kafka with linger.ms 0 sends a Produce
request per message or two; at 10,000 msg/s the worker answered each with a
write of its own and woke the waiting consumer's fetch for each, and fell
behind: 200 ms p50 end to end where librdkafka's defaults had 4 ms).

- kafkalite/server/network/kafka_listener.py: the answers to the requests
  of one read leave in one write (one TCP segment on loopback, seen from
  the client's TCP_INFO);
- kafkalite/server/node/worker.py with replica/replica_manager.py's
  gathered wakeups: a fetch waiting in the purgatory is answered once the
  whole burst is appended, with all of it.

On the shared server, against the leader's Kafka listener with our own
codec (tests/compat/compat_helpers.py's KafkaWire).
"""
from __future__ import annotations

import socket
import struct
import sys

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from replicas import create, state  # noqa: E402

from kafkalite.protocol import ApiKey, decode_response, encode_request  # noqa: E402
from kafkalite.record import RecordBatchBuilder  # noqa: E402
from kafkalite.record.layout import HEADER  # noqa: E402

BURST = 8
# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, the segments with data
# received, since Linux 4.6
TCPI_DATA_SEGS_IN = 152


def data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, TCPI_DATA_SEGS_IN)[0]


def leader_wire(server, topic: str) -> KafkaWire:
    create(server, topic, partitions=1, rf=1)
    leader = state(server, topic)[0][0]
    port = next(b["port"] for b in server.refresh()["kafka_brokers"] if b["node_id"] == leader)
    return KafkaWire(f"127.0.0.1:{port}")


def produce_frame(topic: str, correlation: int, value: bytes) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, value)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": bytes(b.build())}]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, correlation, "bursts-test", body)
    return struct.pack(">i", len(frame)) + frame


def burst(topic: str, first: int) -> bytes:
    """BURST Produce requests of one record each, as one write."""
    return b"".join(produce_frame(topic, first + i, b"v%d" % i) for i in range(BURST))


def produce_answers(wire: KafkaWire, count: int) -> list[tuple[int, int, int]]:
    """(correlation id, error code, base offset) of the next ``count`` answers."""
    out = []
    for _ in range(count):
        correlation, body = decode_response(ApiKey.PRODUCE, 9, wire.recv_frame())
        p = body["responses"][0]["partition_responses"][0]
        out.append((correlation, p["error_code"], p["base_offset"]))
    return out


def test_the_answers_to_a_burst_of_produce_requests_leave_in_one_write(server, topic_name):
    wire = leader_wire(server, topic_name)
    try:
        wire.sock.settimeout(30)
        before = data_segments_in(wire.sock)
        wire.sock.sendall(burst(topic_name, 1))
        assert produce_answers(wire, BURST) == [(1 + i, 0, i) for i in range(BURST)]
        # all eight in one segment: one write, one wake-up of the client
        # (a write each before: eight segments, TCP_NODELAY being set)
        assert data_segments_in(wire.sock) - before == 1
    finally:
        wire.close()


def test_a_waiting_fetch_is_answered_with_the_whole_burst(server, topic_name):
    consumer = leader_wire(server, topic_name)
    producer = KafkaWire(f"127.0.0.1:{consumer.sock.getpeername()[1]}")
    try:
        consumer.sock.settimeout(30)
        producer.sock.settimeout(30)
        # a consumer's long poll at the end of the (empty) log: it waits
        fetch = {"replica_id": -1, "max_wait_ms": 20_000, "min_bytes": 1, "max_bytes": 1 << 20,
                 "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                 "topics": [{"topic": topic_name, "partitions": [
                     {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                      "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                 "forgotten_topics_data": [], "rack_id": ""}
        consumer.send_frame(encode_request(ApiKey.FETCH, 12, 7, "bursts-test", fetch))
        # the worker has read the fetch once it answers a request sent after
        # it on another connection (one loop, one poll for both sockets)
        producer.request(ApiKey.API_VERSIONS, 0, {})
        producer.sock.sendall(burst(topic_name, 1))
        assert produce_answers(producer, BURST) == [(1 + i, 0, i) for i in range(BURST)]
        correlation, body = decode_response(ApiKey.FETCH, 12, consumer.recv_frame())
        p = body["responses"][0]["partitions"][0]
        assert correlation == 7 and p["error_code"] == 0 and p["high_watermark"] == BURST
        # every record of the burst, not the first request's alone (its
        # append woke the fetch before the next request was read)
        offsets = []
        records = memoryview(bytes(p["records"]))
        while len(records) >= HEADER.size:
            base, length, _, _, _, _, last_delta, _, _ = HEADER.unpack_from(records)
            offsets += range(base, base + last_delta + 1)
            records = records[12 + length:]
        assert offsets == list(range(BURST))
    finally:
        producer.close()
        consumer.close()
