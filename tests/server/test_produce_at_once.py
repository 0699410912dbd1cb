"""The common Produce request served in one pass
(kafkalite/server/replica/produce_at_once.py) answers and writes exactly
what the full path does: two in-process brokers get the same random
requests -- acks 0, 1 and -1, several topics and partitions, idempotent
batches in order, retried and out of order, transactional ones, batches
too large, damaged, empty, for partitions not led here or not there at
all -- one of them with the one-pass path switched off; every answer and
every partition's log must be the same, and the one-pass path must have
served most of them (a check that could not fail otherwise)."""
from __future__ import annotations

import os
import random
import time

import pytest
from in_process_broker import Broker

import kafkalite.server.replica.replica_manager as replica_manager_module
from kafkalite.protocol import ApiKey, encode_request
from kafkalite.protocol.codec import encode_response_wire
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.network.requests import NO_RESPONSE
from kafkalite.server.replica import produce_at_once

TOPICS = {"a": 3, "b": 2, "c": 1}
COMPACTED = "c"             # a keyless record there is refused, with the record's error
REPLICATED = ("b", 1)        # a follower in its ISR: acks=-1 waits, so the full path's


def _batch(rng, producer: tuple | None = None, size: int | None = None,
           records: int | None = None) -> bytes:
    b = RecordBatchBuilder()
    for _ in range(records or rng.randint(1, 4)):
        b.append(None, rng.choice([None, b"k"]), os.urandom(size or rng.randint(0, 300)))
    if producer is not None:
        pid, epoch, seq, transactional = producer
        b.set_producer(pid, epoch, seq, transactional=transactional)
    return bytes(b.build())


def _partition_data(rng, sequences: dict, name: str, index: int, plain: bool) -> dict:
    kind = rng.random() * (0.7 if plain else 1.0)
    if kind < 0.5:
        records = _batch(rng)
    elif kind < 0.7:
        # idempotent, one record a batch: the next sequence, a retry of the last, or a gap
        key = (name, index)
        expected = sequences.get(key, 0)
        how = rng.random()
        seq = expected if how < 0.7 else max(0, expected - 1) if how < 0.85 else expected + 3
        records = _batch(rng, (1000, 0, seq, False), records=1)
        if seq == expected:
            sequences[key] = expected + 1
    elif kind < 0.75:
        records = _batch(rng, (2000, 0, 0, True))           # transactional: the full path's
    elif kind < 0.8:
        records = _batch(rng, size=1_100_000, records=1)    # over max.message.bytes
    elif kind < 0.85:
        damaged = bytearray(_batch(rng))
        damaged[-1] ^= 0xFF                                 # CRC mismatch
        records = bytes(damaged)
    elif kind < 0.9:
        records = b"\x00" * 10                              # shorter than a batch header
    elif kind < 0.95:
        records = None
    else:
        records = b""
    return {"index": index, "records": records}


def _request(rng, sequences: dict) -> dict:
    topics = []
    plain = rng.random() < 0.4       # only batches the one-pass path takes
    for name in rng.sample(sorted(TOPICS) + ["unknown"], rng.randint(1, 2)):
        count = TOPICS.get(name, 2)
        indexes = rng.sample(range(count + (1 if rng.random() < 0.1 else 0)),
                             rng.randint(1, count))
        topics.append({"name": name, "partition_data": [
            _partition_data(rng, sequences, name, i, plain) for i in indexes]})
    return {"transactional_id": None, "acks": rng.choice([0, 1, 1, -1]), "timeout_ms": 1,
            "topic_data": topics}


def _broker(root, name: str) -> Broker:
    b = Broker(root / name)
    for topic, count in TOPICS.items():
        for i in range(count):
            if topic == COMPACTED:
                assert b.rm.become_leader({"topic": topic, "partition": i, "topic_id": None,
                                           "leader_epoch": 1,
                                           "configs": {"cleanup.policy": "compact"}})["error"] == 0
            elif (topic, i) == REPLICATED:
                b.lead(topic, i, replicas=[0, 1], isr=[0, 1])
            else:
                b.lead(topic, i)
    return b


def _waiting_fetch(broker: Broker) -> dict:
    ends = {i: broker.rm.partitions[("a", i)].log.log_end_offset for i in range(TOPICS["a"])}
    return {"replica_id": -1, "max_wait_ms": 30_000, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "a", "partitions": [
                {"partition": i, "fetch_offset": end, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20, "current_leader_epoch": -1}
                for i, end in ends.items()]}], "forgotten_topics_data": [], "rack_id": ""}


def _fetched(answer) -> dict | None:
    """{partition: bytes of records} of a fetch's answer (None: not answered yet)."""
    if answer is None:
        return None
    return {p["partition_index"]: len(bytes(p["records"] or b""))
            for t in answer["responses"] for p in t["partitions"]}


def _logs(broker: Broker) -> dict:
    """Each partition's log end, high watermark and segment bytes."""
    out = {}
    for key, part in broker.rm.partitions.items():
        data = b""
        for segment in part.log._segments:
            with open(segment.path, "rb") as f:
                data += f.read()
        out[key] = (part.log.log_end_offset, part.log.high_watermark, data)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_answers_and_writes_as_the_full_path(tmp_path, monkeypatch, seed):
    fast, full = _broker(tmp_path, "fast"), _broker(tmp_path, "full")
    served = []
    real = produce_at_once.answer_at_once

    def counting(rm, body):
        out = real(rm, body)
        if out is not None:
            served.append(1)
        return out
    try:
        rng = random.Random(seed)
        sequences: dict = {}
        for _ in range(120):
            body = _request(rng, sequences)
            # a consumer's long poll at topic a's ends: what the produce wakes it with
            waits = {b: b.send(ApiKey.FETCH, 12, _waiting_fetch(b)) for b in (fast, full)}
            # ReplicaManager.produce calls the name in its module: the full path alone for
            # one broker, the one-pass path first (where it takes the request) for the other
            monkeypatch.setattr(replica_manager_module, "answer_at_once", lambda rm, b: None)
            cid_full = full.send(ApiKey.PRODUCE, 9, body)
            monkeypatch.setattr(replica_manager_module, "answer_at_once", counting)
            cid_fast = fast.send(ApiKey.PRODUCE, 9, body)
            if cid_full not in full.answers:
                # acks=-1 with the replicated partition: both wait out their 1 ms timeout
                time.sleep(0.002)
                full.rm.expire()
                fast.rm.expire()
            assert repr(fast.answers.pop(cid_fast, "none")) == \
                repr(full.answers.pop(cid_full, "none")), body
            assert _fetched(fast.answers.pop(waits[fast], None)) == \
                _fetched(full.answers.pop(waits[full], None)), body
            for b in (fast, full):          # a long poll the produce did not wake ends now
                b.rm.purgatory.expire(float("inf"))
                b.answers.clear()
        assert _logs(fast) == _logs(full)
        assert len(served) > 25, f"the one-pass path served only {len(served)} of 120 requests"
    finally:
        fast.rm.shutdown()
        full.rm.shutdown()


def _wire(version: int, cid: int, answer) -> bytes | None:
    """An answer as the TCP wire carries it (None: no answer)."""
    if answer is None or answer is NO_RESPONSE:
        return None
    if type(answer) is dict:
        return bytes(encode_response_wire(ApiKey.PRODUCE, version, cid, answer)[0])
    return bytes(answer)


@pytest.mark.parametrize("seed", range(4))
def test_the_frame_path_answers_and_writes_as_the_full_path(tmp_path, monkeypatch, seed):
    """The one-pass path of a request still in its TCP frame
    (ReplicaManager.produce_frame_at_once: read, appended and answered
    without the generic codec) against the full path, at every version it
    takes: the same answer's bytes, logs and waiting fetch's answer; what
    it does not take it leaves alone, and the full path serves it."""
    fast, full = _broker(tmp_path, "fast"), _broker(tmp_path, "full")
    monkeypatch.setattr(replica_manager_module, "answer_at_once", lambda rm, b: None)
    served = 0
    try:
        rng = random.Random(seed)
        sequences: dict = {}
        for cid in range(120):
            body, version = _request(rng, sequences), rng.randint(3, 12)
            waits = {b: b.send(ApiKey.FETCH, 12, _waiting_fetch(b)) for b in (fast, full)}
            cid_full = full.send(ApiKey.PRODUCE, version, body)
            frame = bytearray(encode_request(ApiKey.PRODUCE, version, cid, "t", body))
            fast_answer, cid_fast = fast.rm.produce_frame_at_once(frame), None
            if fast_answer is None:         # not taken: the full path serves it
                cid_fast = fast.send(ApiKey.PRODUCE, version, body)
            else:
                served += 1
            if cid_full not in full.answers:
                time.sleep(0.002)       # acks=-1 with the replicated partition: its timeout
                full.rm.expire()
                fast.rm.expire()
            if cid_fast is not None:
                fast_answer = fast.answers.pop(cid_fast, "none")
            full_answer = full.answers.pop(cid_full, "none")
            if full_answer == "none" or fast_answer == "none":
                assert fast_answer == full_answer, body
            else:
                assert _wire(version, cid, fast_answer) == _wire(version, cid, full_answer), body
            assert _fetched(fast.answers.pop(waits[fast], None)) == \
                _fetched(full.answers.pop(waits[full], None)), body
            for b in (fast, full):
                b.rm.purgatory.expire(float("inf"))
                b.answers.clear()
        assert _logs(fast) == _logs(full)
        assert served > 25, f"the frame path served only {served} of 120 requests"
    finally:
        fast.rm.shutdown()
        full.rm.shutdown()
