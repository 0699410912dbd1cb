"""The Kafka listener's answers keep request order while Produce requests
are pipelined (kafkalite/server/network/kafka_listener.py, "Ordering").

A leader with two followers, both stopped (SIGSTOP) but still in the ISR:
an acks=all produce is appended and waits for them. Requests sent behind
it on the same connection:

- further Produce requests are read and appended at once, up to
  PIPELINED_PRODUCES waiting (Kafka reads nothing more until the first is
  answered, which leaves the leader idle for the followers' round trip);
- once that many wait, or anything else is sent, nothing more is read;
- the answers come in request order once the followers run again.
"""
from __future__ import annotations

import os
import signal
import socket
import struct
import sys
import time
import uuid

import pytest

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from harness import ServerProcess  # noqa: E402
from replicas import create, state, wait_for  # noqa: E402

from kafkalite.protocol import ApiKey, decode_response, encode_request  # noqa: E402
from kafkalite.record import RecordBatchBuilder  # noqa: E402
from kafkalite.server.network.kafka_connection import PIPELINED_PRODUCES  # noqa: E402


@pytest.fixture
def stalled(tmp_path):
    """A 3-worker server, topic ``order`` (RF=3) whose followers are stopped;
    yields (server, wire to the leader's Kafka listener, resume())."""
    s = ServerProcess(str(tmp_path / "data"), workers=3,
                      extra_args=["--replica-lag-time-max-ms", "60000",
                                  "--broker-session-timeout-ms", "60000"]).start()
    stopped = []

    def resume():
        while stopped:
            os.kill(stopped.pop(), signal.SIGCONT)
    try:
        create(s, "order", partitions=1, rf=3, **{"min.insync.replicas": "2"})
        leader, replicas, isr = state(s, "order")[0]
        assert sorted(isr) == [0, 1, 2]
        port = next(b["port"] for b in s.refresh()["kafka_brokers"] if b["node_id"] == leader)
        for follower in replicas:
            if follower != leader:
                pid = s.worker_pid(follower)
                os.kill(pid, signal.SIGSTOP)
                stopped.append(pid)
        wire = KafkaWire(f"127.0.0.1:{port}")
        yield s, wire, resume
        wire.close()
    finally:
        resume()
        s.stop()


def one_record_batch(value: bytes) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, value)
    return bytes(b.build())


def send_produce(wire, correlation: int, value: bytes) -> None:
    body = {"acks": -1, "timeout_ms": 30_000, "topic_data": [
        {"name": "order", "partition_data": [{"index": 0, "records": one_record_batch(value)}]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, correlation, "order-test", body)
    wire.sock.sendall(struct.pack(">i", len(frame)) + frame)


def leader_log_bytes(server) -> int:
    """The bytes in the leader's segment files: what it appended, whether or
    not the (stopped) followers have it."""
    leader = state(server, "order")[0][0]
    path = os.path.join(server.data_dir, f"broker-{leader}", "order-0")
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".log"))


def read_answers(wire, count: int, timeout: float = 30.0) -> list[tuple[int, int]]:
    """(correlation id, error code) of the next ``count`` Produce answers."""
    wire.sock.settimeout(timeout)
    out = []
    for _ in range(count):
        correlation, body = decode_response(ApiKey.PRODUCE, 9, wire.recv_frame())
        out.append((correlation, body["responses"][0]["partition_responses"][0]["error_code"]))
    return out


def nothing_to_read(wire, seconds: float) -> bool:
    wire.sock.settimeout(seconds)
    try:
        return wire.sock.recv(1, socket.MSG_PEEK) == b""
    except (TimeoutError, socket.timeout):
        return True


def test_produces_behind_a_waiting_one_are_appended_and_answered_in_order(stalled):
    server, wire, resume = stalled
    before, size = leader_log_bytes(server), len(one_record_batch(b"v0"))
    sent = PIPELINED_PRODUCES + 2
    for i in range(sent):
        send_produce(wire, 100 + i, b"v%d" % i)
    # the first PIPELINED_PRODUCES are appended while the first waits...
    wait_for(lambda: leader_log_bytes(server) >= before + PIPELINED_PRODUCES * size,
             what="the leader's appends")
    time.sleep(1.0)                          # ...and no more: the rest stay unread
    # (five: what a producer keeps in flight, librdkafka's and Java's cap with idempotence)
    assert (leader_log_bytes(server) - before) // size == PIPELINED_PRODUCES == 5
    assert nothing_to_read(wire, 0.5), "answered before the in-sync replicas had the records"
    resume()
    answers = read_answers(wire, sent)
    assert answers == [(100 + i, 0) for i in range(sent)]


def test_a_request_behind_waiting_produces_is_answered_after_them(stalled):
    server, wire, resume = stalled
    send_produce(wire, 1, b"first")
    metadata = encode_request(ApiKey.METADATA, 12, 2, "order-test",
                              {"topics": [{"name": "order", "topic_id": uuid.UUID(int=0)}],
                               "allow_auto_topic_creation": False,
                               "include_topic_authorized_operations": False})
    wire.sock.sendall(struct.pack(">i", len(metadata)) + metadata)
    send_produce(wire, 3, b"third")
    assert nothing_to_read(wire, 1.0)        # Metadata is not answered ahead of the produce
    resume()
    assert read_answers(wire, 1) == [(1, 0)]
    correlation, md = decode_response(ApiKey.METADATA, 12, wire.recv_frame())
    assert correlation == 2 and md["topics"][0]["name"] == "order"
    assert read_answers(wire, 1) == [(3, 0)]   # read only after the Metadata request was served
