"""The Kafka listener's one-pass path for Produce requests still in their
TCP frame (kafkalite/server/network/kafka_listener.py, the dispatcher's
``frames_at_once``; produce_at_once.answer_frame): over a real socket,
pipelined requests of every version it takes and of kinds it leaves to
the full path (a transactional id, a client id not ASCII, a batch the log
refuses, acks 0), answered in request order with the bytes the full path
answers with, the frame path having taken the common ones."""
from __future__ import annotations

import socket
import struct
import time

import pytest
import zmq

from kafkalite import errors
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.network.requests import RequestDispatcher
import kafkalite.server.replica.replica_manager as replica_manager_module
from kafkalite.server.replica import produce_at_once
from kafkalite.server.replica.replica_manager import ReplicaManager


class _Node:
    """A replica manager behind a real KafkaListener, its loop run by the test."""

    def __init__(self, data_dir, frames: bool):
        self.rm = ReplicaManager(0, str(data_dir), ServerConfig(data_dir=str(data_dir)).log_config)
        for p in range(3):
            assert self.rm.become_leader({"topic": "t", "partition": p, "topic_id": None,
                                          "leader_epoch": 1, "configs": {}})["error"] == 0
        self.dispatcher = RequestDispatcher("test", self.rm.handlers())
        if frames:      # as a worker has them; without, every request takes the full path
            self.dispatcher.at_once[ApiKey.PRODUCE] = self.rm.produce_at_once
            self.dispatcher.frames_at_once[ApiKey.PRODUCE] = self.rm.produce_frame_at_once
        self.listener = KafkaListener("127.0.0.1", 0, self.dispatcher)
        self.poller = zmq.Poller()
        self.listener.attach(self.poller)
        self.client = socket.create_connection(("127.0.0.1", self.listener.port))
        self.client.settimeout(0)

    def answers(self, frames: list, expected: int, timeout: float = 20.0) -> list:
        """Send ``frames`` at once, serve until ``expected`` answers came back."""
        self.client.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))
        buf, out = bytearray(), []
        deadline = time.monotonic() + timeout
        while len(out) < expected:
            assert time.monotonic() < deadline, f"{len(out)} of {expected} answers"
            self.listener.on_events(dict(self.poller.poll(10)))
            try:
                buf += self.client.recv(1 << 20)
            except BlockingIOError:
                pass
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


def _requests() -> tuple[list, int]:
    """(request frames, how many are answered): every version 3-12 of the
    common kind, and after each one the full path takes."""
    frames, answered = [], 0
    for cid, version in enumerate(range(3, 13)):
        def body(records, acks=1, transactional_id=None, partition=cid % 3):
            return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000,
                    "topic_data": [{"name": "t", "partition_data": [
                        {"index": partition, "records": records}]}]}
        frames.append(encode_request(ApiKey.PRODUCE, version, cid * 10, "client",
                                     body(_batch(b"v%d" % version))))
        uncommon = [
            ("clïent", body(_batch(b"non-ascii client id"))),
            ("client", body(_batch(b"tx", producer=(7, 0, 0, True)), transactional_id="tx")),
            ("client", body(b"\x00" * 70)),                 # refused: not a batch
            ("client", body(_batch(b"unknown"), partition=9)),
        ]
        name, other = uncommon[cid % len(uncommon)]
        frames.append(encode_request(ApiKey.PRODUCE, version, cid * 10 + 1, name, other))
        frames.append(encode_request(ApiKey.PRODUCE, version, cid * 10 + 2, "client",
                                     body(_batch(b"acks 0"), acks=0)))
        answered += 2
    return frames, answered


@pytest.mark.parametrize("pipelined", [1, 3])
def test_frames_answered_at_once_are_the_full_paths_answers(tmp_path, monkeypatch, pipelined):
    frames, answered = _requests()
    taken = []
    real = produce_at_once.answer_frame

    def counting(rm, payload):
        out = real(rm, payload)
        taken.append(out is not None)
        return out
    monkeypatch.setattr(ReplicaManager, "produce_frame_at_once", counting)
    # ReplicaManager.produce's own one-pass path off: the full node's requests take the full path
    monkeypatch.setattr(replica_manager_module, "answer_at_once", lambda rm, body: None)
    fast, full = _Node(tmp_path / "fast", True), _Node(tmp_path / "full", False)
    try:
        got = {}
        for node in (fast, full):
            got[node] = []
            for at in range(0, len(frames), pipelined):
                chunk = frames[at:at + pipelined]
                got[node] += node.answers(chunk, sum(1 for f in chunk if b"acks 0" not in f))
        assert got[fast] == got[full]
        assert len(got[fast]) == answered
        # answers in request order: their correlation ids
        assert [struct.unpack_from(">i", a)[0] for a in got[fast]] == \
            [c for i in range(10) for c in (i * 10, i * 10 + 1)]
        # the common requests (10) and the acks=0 ones (10) and the refused batches taken
        assert sum(taken) >= 20, taken
        for key, part in fast.rm.partitions.items():
            other = full.rm.partitions[key].log
            assert (part.log.log_end_offset, part.log.high_watermark) == \
                (other.log_end_offset, other.high_watermark)
    finally:
        fast.close()
        full.close()


def test_a_reads_produce_requests_are_answered_in_one_call_and_after_a_deferred_one(tmp_path):
    """The Produce requests of one read are answered by the listener's frame
    loop (ext/produce_frames.pyx), counted; behind a request still waiting
    for its answer (an acks=-1 Produce on a partition with a follower in its
    ISR, answered when its timeout expires) they take the slot path and are
    answered after it, in request order."""
    node = _Node(tmp_path, True)
    try:
        assert node.rm.become_leader({"topic": "r", "partition": 0, "topic_id": None,
                                      "leader_epoch": 1, "configs": {}, "replicas": [0, 1],
                                      "isr": [0, 1]})["error"] == 0

        def produce(cid, topic="t", partition=0, acks=1, timeout_ms=1000):
            return encode_request(ApiKey.PRODUCE, 9, cid, "client", {
                "transactional_id": None, "acks": acks, "timeout_ms": timeout_ms,
                "topic_data": [{"name": topic, "partition_data": [
                    {"index": partition, "records": _batch(b"v%d" % cid)}]}]})

        def correlation_ids(answers):
            return [struct.unpack_from(">i", a)[0] for a in answers]

        burst = [produce(cid, partition=cid % 3) for cid in range(1, 9)]
        assert correlation_ids(node.answers(burst, 8)) == list(range(1, 9))
        assert node.listener.produce_frames.served == 8

        # the deferred one first: what follows waits for it
        deferred = produce(20, topic="r", acks=-1, timeout_ms=300)
        node.client.sendall(b"".join(struct.pack(">i", len(f)) + f
                                     for f in [deferred] + [produce(cid) for cid in (21, 22)]))
        buf, got = bytearray(), []
        deadline = time.monotonic() + 20
        while len(got) < 3:
            assert time.monotonic() < deadline, got
            node.listener.on_events(dict(node.poller.poll(10)))
            node.rm.expire()        # the acks=-1 produce's timeout (the worker's loop does this)
            try:
                buf += node.client.recv(1 << 20)
            except BlockingIOError:
                pass
            while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                size = struct.unpack_from(">i", buf)[0]
                got.append(bytes(buf[4:4 + size]))
                del buf[:4 + size]
        assert correlation_ids(got) == [20, 21, 22]
        # deferred indeed: its follower never fetched
        answer = decode_response(ApiKey.PRODUCE, 9, got[0])[1]
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == \
            errors.RequestTimedOutError.code
        assert node.listener.produce_frames.served == 8     # those two were not the loop's
    finally:
        node.close()


def test_a_produce_frame_cut_short_in_its_header_closes_its_connection_only(tmp_path):
    """A frame that names Produce v9 and ends inside its correlation id:
    the frame loop leaves it to the listener's own steps, which close the
    connection, as Kafka does with a request it cannot parse; the listener
    serves on."""
    node = _Node(tmp_path, True)
    try:
        good = encode_request(ApiKey.PRODUCE, 9, 1, "client", {
            "transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [
                {"index": 0, "records": _batch(b"before")}]}]})
        assert len(node.answers([good], 1)) == 1
        # api key, version and half a correlation id
        node.client.sendall(struct.pack(">i", 6) + struct.pack(">hhh", 0, 9, 0))
        deadline = time.monotonic() + 20
        closed = False
        while not closed:
            assert time.monotonic() < deadline, "the connection stayed open"
            node.listener.on_events(dict(node.poller.poll(10)))
            try:
                closed = node.client.recv(1 << 16) == b""
            except BlockingIOError:
                pass
            except ConnectionResetError:
                closed = True
        assert not node.listener.connections
        # another connection is served as before
        node.client.close()
        node.client = socket.create_connection(("127.0.0.1", node.listener.port))
        node.client.settimeout(0)
        assert len(node.answers([good], 1)) == 1
    finally:
        node.close()
