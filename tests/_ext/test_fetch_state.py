"""A full fetch's idle partitions answered in C (ext/fetch_state.pyx's plan,
ext/produce_fetch.pyx's twin decoder and encoder) against the Python read
of the same partitions: one in-process broker, many random fetches of wide
topics (up to 132 partitions named, past the C arrays' first growth) --
all idle, partly idle (records to read, open and aborted transactions, a
moved log start), erroneous (unknown topics and partitions, fenced and
future leader epochs, offsets out of range), every version from 4, both
isolation levels, a follower now and then -- each answered twice on the
same state, C path on then off, and compared byte for byte as TCP carries
the answer (records inline) and as the native listener does (records in
frames). The C path's use is counted by the worker's own figure
(``FetchHandler.idle_partitions``, the metrics'
kafkalite_fetch_idle_partitions): most partitions must have gone through
it, or the comparison proved nothing."""
from __future__ import annotations

import random
import uuid

import pytest

from server.in_process_broker import Broker   # tests/server: a namespace package on the pythonpath
from kafkalite.protocol import ApiKey, encode_response, encode_response_parts
from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import AppendOrigin

VERSIONS = [4, 5, 7, 9, 11, 12, 13, 15, 16, 17]
TOPICS = {"wide": (130, uuid.UUID(int=0x11)), "narrow": (12, uuid.UUID(int=0x12))}


class TwoWireBroker(Broker):
    """Answers recorded as both transports carry them: the TCP bytes
    (records inline) and the native frames (records after the body)."""

    def send_response(self, ctx, body):
        h = ctx.header
        parts, _ = encode_response_parts(h.api_key, h.api_version, h.correlation_id, body)
        tcp = b"".join(p.read() if hasattr(p, "sendfile") else bytes(p) for p in parts)
        frames: list = []
        frame = encode_response(h.api_key, h.api_version, h.correlation_id, body,
                                records_out=frames)
        native = [bytes(frame)] + [f.read() if hasattr(f, "sendfile") else bytes(f)
                                   for f in frames]
        # header and body; the correlation id (their first 4 bytes) left
        # out, which differs between sends
        self._answered(h.correlation_id, (tcp[4:], [native[0][4:]] + native[1:]))


def batch(n: int, producer=None) -> bytearray:
    b = RecordBatchBuilder(**(producer or {}))
    for i in range(n):
        b.append(None, None, b"v%d" % i)
    return b.build()


@pytest.fixture
def broker(tmp_path):
    b = TwoWireBroker(tmp_path / "data")
    rm = b.rm
    for topic, (count, topic_id) in TOPICS.items():
        for p in range(count):
            assert rm.become_leader({"topic": topic, "partition": p, "topic_id": topic_id,
                                     "leader_epoch": 1 + p % 3, "configs": {}})["error"] == 0
    rng = random.Random(7201)
    for topic, (count, _) in TOPICS.items():
        for p in rng.sample(range(count), count // 4):
            rm.append(rm.partition(topic, p), batch(rng.randint(1, 3)))
        # an open transaction (the LSO below the high watermark) and an aborted one
        for p, commit in ((count - 1, None), (count - 2, False)):
            pid = 500 + p
            rm.append(rm.partition(topic, p), batch(2, {"producer_id": pid, "producer_epoch": 0,
                                                       "base_sequence": 0,
                                                       "transactional": True}))
            if commit is not None:
                rm.append(rm.partition(topic, p), bytearray(build_control_batch(commit, pid, 0, 0)),
                          AppendOrigin.COORDINATOR)
        # records deleted: the log start moved past the first offsets
        part = rm.partition(topic, 3)
        rm.append(part, batch(3))
        b.send(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": topic, "partitions": [
            {"partition_index": 3, "offset": part.high_watermark - 1}]}], "timeout_ms": 0})
    yield b
    rm.shutdown()


def random_fetch(rng, rm) -> tuple[int, dict]:
    """A consumer's full fetch (now and then a follower's), mostly idle."""
    version = rng.choice(VERSIONS)
    names = [t for t in TOPICS if rng.random() < 0.9] + (["nope"] if rng.random() < 0.2 else [])
    rng.shuffle(names)
    idle_share = rng.choice([1.0, 1.0, 0.95, 0.7])
    topics = []
    for name in names or ["wide"]:
        count, topic_id = TOPICS.get(name, (3, uuid.UUID(int=0xDEAD)))
        indexes = list(range(count + 2)) if rng.random() < 0.5 else \
            rng.sample(range(count + 2), rng.randint(0, count + 2))
        rng.shuffle(indexes)
        if indexes and rng.random() < 0.1:
            indexes.append(indexes[0])              # named twice
        parts = []
        for i in indexes:
            part = rm.partitions.get((name, i))
            epoch = part.leader_epoch if part is not None else 1
            log = part.log if part is not None else None
            if log is None:
                offset = rng.randint(0, 3)
            elif rng.random() < idle_share:
                offset = log.high_watermark if rng.random() < 0.7 else log.last_stable_offset
            else:
                offset = rng.choice([log.log_start_offset, log.high_watermark - 1,
                                     log.log_end_offset + 1, 0, -1])
            parts.append({"partition": i, "fetch_offset": offset,
                          "current_leader_epoch": -1 if rng.random() < 0.7 else rng.choice(
                              [epoch, epoch, epoch - 1, epoch + 1]),
                          "last_fetched_epoch": -1, "log_start_offset": -1,
                          "partition_max_bytes": rng.choice([1 << 20, 1 << 20, 60])})
        topics.append({"topic": name, "topic_id": topic_id, "partitions": parts})
    replica = 1 if rng.random() < 0.05 else -1
    body = {"replica_id": replica, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": rng.choice([1 << 20, 1 << 20, 1 << 20, 200]),
            "isolation_level": rng.choice([0, 1]), "session_id": 0, "session_epoch": -1,
            "topics": topics, "forgotten_topics_data": [], "rack_id": ""}
    if version >= 15:
        body["replica_state"] = {"replica_id": replica, "replica_epoch": -1}
    return version, body


def both_paths(broker: TwoWireBroker, version: int, body: dict) -> tuple:
    """The answers with idle partitions answered in C, then read in Python,
    and how many partitions the C path answered in each."""
    fetches = broker.rm.fetches
    fetches.idle_in_c = True
    before = fetches.idle_partitions
    fast = broker.answers.pop(broker.send(ApiKey.FETCH, version, body))
    in_c = fetches.idle_partitions - before
    fetches.idle_in_c = False
    try:
        before = fetches.idle_partitions
        slow = broker.answers.pop(broker.send(ApiKey.FETCH, version, body))
        assert fetches.idle_partitions == before     # the reference path counts none
    finally:
        fetches.idle_in_c = True
    return fast, slow, in_c


def test_random_wide_fetches_answer_as_the_python_read_on_both_transports(broker):
    rng = random.Random(72)
    named = in_c = 0
    for step in range(120):
        version, body = random_fetch(rng, broker.rm)
        fast, slow, n = both_paths(broker, version, body)
        assert fast[0] == slow[0], ("tcp", step, version)
        assert fast[1] == slow[1], ("frames", step, version)
        named += sum(len(t["partitions"]) for t in body["topics"])
        in_c += n
    # the C path answered most of what was asked: the comparison is not the
    # Python path against itself
    assert in_c > 0.5 * named, (in_c, named)


def test_the_idle_partitions_counted_are_in_the_metrics_figures(broker):
    rm = broker.rm
    wide = [{"partition": p, "fetch_offset": rm.partition("wide", p).high_watermark,
             "current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1,
             "partition_max_bytes": 1 << 20} for p in range(TOPICS["wide"][0])]
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "wide", "topic_id": TOPICS["wide"][1], "partitions": wide}],
            "forgotten_topics_data": [], "rack_id": ""}
    before = rm.fetches.figures()["idle_partitions"]
    broker.answers.pop(broker.send(ApiKey.FETCH, 12, body))
    assert rm.fetches.figures()["idle_partitions"] - before == TOPICS["wide"][0]
