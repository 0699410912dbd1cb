"""Shared parts of the fuzz tests (tests/server/test_*_fuzz.py,
tests/client/test_ingest_fuzz.py, tests/shm/test_ring_fuzz.py).

Inputs: valid Kafka requests of most APIs (``base_requests``), ``mutate``
(flipped bytes, truncations, insertions, extreme int32s) and
``random_frame``. Size and replay: KAFKALITE_FUZZ_INPUTS inputs per fuzz
(default 100,000; the long setting is e.g. 2,000,000), KAFKALITE_FUZZ_SEED
replays a run (the seed is printed). ``Survival`` checks the end state
every fuzz must reach: the same process ids and memory back within
RSS_SLACK_MB of the start. ``AckedRecords`` is the well-behaved producer
interleaved with the fuzz, whose acknowledged records must all be readable
afterwards.
"""
from __future__ import annotations

import collections
import os
import random
import struct
import time
import uuid

import zmq

from harness import read_all, rss_mb
from kafkalite.protocol import ApiKey, encode_request
from soak import setting

INPUTS = setting("KAFKALITE_FUZZ_INPUTS")
RSS_SLACK_MB = 50


def fuzz_rng(what: str) -> random.Random:
    seed = int(os.environ.get("KAFKALITE_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"{what}: fuzz seed {seed}, {INPUTS} inputs")
    return random.Random(seed)


def record_batch(value: bytes = b"v", key: bytes | None = b"k") -> bytes:
    from kafkalite.record import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0)
    b.append(1_700_000_000_000, key, value, [("h", b"1")])
    return bytes(b.build())


def base_requests(topic: str) -> list[tuple[int, int, dict]]:
    """(api key, version, body) of valid requests of most APIs. Admin APIs
    that create or grow topics are left out: a mutated partition count would
    have the broker create millions of partitions, which is a resource limit
    rather than a parsing robustness question."""
    records = record_batch()
    return [
        (ApiKey.API_VERSIONS, 3, {"client_software_name": "fuzz", "client_software_version": "1"}),
        (ApiKey.API_VERSIONS, 0, {}),
        (ApiKey.METADATA, 12, {"topics": [{"name": topic}], "allow_auto_topic_creation": False}),
        (ApiKey.METADATA, 1, {"topics": None}),
        (ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
        (ApiKey.PRODUCE, 3, {"acks": 1, "timeout_ms": 1000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}),
        (ApiKey.FETCH, 12, {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 20}]}]}),
        (ApiKey.FETCH, 4, {"max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                             "partition_max_bytes": 1 << 20}]}]}),
        (ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
            {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -2}]}]}),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"topics": [
            {"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}]}),
        (ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["fuzz-group"]}),
        (ApiKey.HEARTBEAT, 4, {"group_id": "fuzz-group", "generation_id": 1, "member_id": "m"}),
        (ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["fuzz-group"]}),
        (ApiKey.LIST_GROUPS, 4, {}),
        (ApiKey.OFFSET_FETCH, 8, {"groups": [{"group_id": "fuzz-group", "topics": None}]}),
        (ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout_ms": 1000,
                                      "producer_id": -1, "producer_epoch": -1}),
        (ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [
            {"resource_type": 2, "resource_name": topic, "configuration_keys": None}]}),
        # share groups (topic ids are not known here: mutations reach the
        # handlers' unknown-id and bad-range paths)
        (ApiKey.SHARE_GROUP_HEARTBEAT, 0, {"group_id": "fuzz-share", "member_id": "",
                                           "member_epoch": 0, "rack_id": None,
                                           "subscribed_topic_names": [topic]}),
        (ApiKey.SHARE_GROUP_DESCRIBE, 0, {"group_ids": ["fuzz-share"]}),
        (ApiKey.SHARE_FETCH, 0, {"group_id": "fuzz-share", "member_id": "m",
                                 "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
                                 "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
                                     {"partition_index": 0, "partition_max_bytes": 1 << 20,
                                      "acknowledgement_batches": [
                                          {"first_offset": 0, "last_offset": 9,
                                           "acknowledge_types": [1]}]}]}]}),
        # v1 (librdkafka's): MaxRecords and BatchSize instead of PartitionMaxBytes
        (ApiKey.SHARE_FETCH, 1, {"group_id": "fuzz-share", "member_id": "m1",
                                 "share_session_epoch": 0, "max_wait_ms": 0, "min_bytes": 1,
                                 "max_bytes": 1 << 20, "max_records": 3, "batch_size": 2,
                                 "topics": [{"topic_id": uuid.UUID(int=1), "partitions": [
                                     {"partition_index": 0, "acknowledgement_batches": []}]}]}),
        (ApiKey.SHARE_ACKNOWLEDGE, 0, {"group_id": "fuzz-share", "member_id": "m",
                                       "share_session_epoch": 1, "topics": [
                                           {"topic_id": uuid.UUID(int=1), "partitions": [
                                               {"partition_index": 0, "acknowledgement_batches": [
                                                   {"first_offset": 0, "last_offset": 2,
                                                    "acknowledge_types": [1, 2, 3]}]}]}]}),
        (ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, {"groups": [
            {"group_id": "fuzz-share", "topics": [{"topic_name": topic, "partitions": [0]}]}]}),
        (ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "fuzz-share", "topics": [
            {"topic_name": topic, "partitions": [{"partition_index": 0, "start_offset": 0}]}]}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": [{"name": "fuzz-user"}]}),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
            "deletions": [{"name": "fuzz-gone", "mechanism": 1}],
            "upsertions": [{"name": "fuzz-user", "mechanism": 2, "iterations": 4096,
                            "salt": b"s" * 16, "salted_password": b"p" * 64}]}),
    ]


def base_frames(topic: str) -> list[bytes]:
    """The base requests as Kafka wire frames (records inline)."""
    return [encode_request(k, v, 1, "fuzz", body) for k, v, body in base_requests(topic)]


def base_native_requests(topic: str) -> list[list[bytes]]:
    """The base requests in the native framing: [frame 0, record frames...]."""
    out = []
    for k, v, body in base_requests(topic):
        records: list = []
        out.append([encode_request(k, v, 1, "fuzz", body, records_out=records),
                    *(bytes(r) for r in records)])
    return out


def mutate(rng: random.Random, frame: bytes, keep: int = 8) -> bytes:
    """``frame`` with 1-4 damages; mostly the first ``keep`` bytes (api key,
    version, correlation id) are left alone."""
    buf = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        start = min(keep, len(buf)) if rng.random() < 0.8 else 0
        if op < 0.4 and len(buf) > start:
            buf[rng.randrange(start, len(buf))] = rng.randrange(256)
        elif op < 0.6 and len(buf) > start:
            del buf[rng.randrange(start, len(buf)):]
        elif op < 0.8:
            at = rng.randrange(start, len(buf) + 1)
            buf[at:at] = rng.randbytes(rng.randint(1, 16))
        elif len(buf) > start + 4:               # an int32 somewhere becomes extreme
            at = rng.randrange(start, len(buf) - 3)
            buf[at:at + 4] = struct.pack(">i", rng.choice([-1, -2, 0x7FFFFFFF, -0x80000000,
                                                           0x10000, 255]))
    return bytes(buf)


def random_frame(rng: random.Random) -> bytes:
    """A request header of a known API with random version and body bytes."""
    key = rng.choice(list(ApiKey))
    head = struct.pack(">hhih", key, rng.randint(-1, 20), rng.randrange(1 << 31),
                       rng.choice([-1, 0, 4]))
    return head + rng.randbytes(rng.randint(0, 4)) + rng.randbytes(rng.randint(0, 200))


class Survival:
    """Process ids and memory of the server (and any extra pids) before a
    fuzz, checked against after it."""

    def __init__(self, server, extra_pids=()):
        self.server = server
        self.pids = [server.proc.pid, *server.worker_pids(), *extra_pids]
        self.start = {pid: rss_mb(pid) for pid in self.pids}

    def check(self, label: str, settle_s: float = 20.0) -> dict:
        assert [self.server.proc.pid, *self.server.worker_pids()] == \
            self.pids[:len(self.server.worker_pids()) + 1], f"{label}: a process was restarted"
        assert self.server.proc.poll() is None
        deadline = time.monotonic() + settle_s
        while True:
            now = {pid: rss_mb(pid) for pid in self.pids}
            grown = {pid: now[pid] - self.start[pid] for pid in self.pids}
            if max(grown.values()) < RSS_SLACK_MB or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        print(f"{label}: RSS MiB before -> after: " + ", ".join(
            f"pid {pid} {self.start[pid]:.0f} -> {now[pid]:.0f}" for pid in self.pids))
        for pid, g in grown.items():
            assert g < RSS_SLACK_MB, f"{label}: pid {pid} kept {g:.0f} MiB after the fuzz"
        return now


class AckedRecords:
    """A well-behaved kafkalite Producer interleaved with a fuzz: every
    record it had acknowledged must be readable afterwards."""

    def __init__(self, server, topic: str, partitions: int, **config):
        from kafkalite.client import Producer
        self.server, self.topic, self.partitions = server, topic, partitions
        self.producer = Producer(server.config(**{"linger.ms": 2, **config}))
        self.acked: set[bytes] = set()
        self.failed: list = []
        self.sent = 0

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed.append(err)

    def produce(self) -> None:
        self.producer.produce(self.topic, b"acked-%d" % self.sent,
                              partition=self.sent % self.partitions, on_delivery=self._delivered)
        self.sent += 1
        self.producer.poll(0)

    def check(self, label: str) -> None:
        self.producer.flush(30)
        self.producer.close()
        values = {m.value() for m in read_all(self.server, self.topic, self.partitions,
                                               len(self.acked), timeout=60)}
        missing = self.acked - values
        print(f"{label}: {self.sent} records from a well-behaved producer, "
              f"{len(self.acked)} acknowledged, {len(self.failed)} failed")
        assert not missing, (f"{label}: {len(missing)} acknowledged records are not readable; "
                             f"{self._partitions(missing)}")

    def _partitions(self, missing: set) -> str:
        """Where the missing records were sent and what each partition's
        leader says it holds: a lost record and a read that timed out look
        alike from the read alone (a fresh-clone run once missed 50 of 100)."""
        from kafkalite.client import Consumer, TopicPartition
        sent_to = collections.Counter(int(v.split(b"-")[1]) % self.partitions for v in missing)
        c = Consumer(self.server.config())
        try:
            marks = {p: c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10)
                     for p in range(self.partitions)}
        except Exception as exc:  # the diagnosis must not hide the failure
            marks = f"watermarks not read: {exc!r}"
        finally:
            c.close()
        return f"missing per partition {dict(sent_to)}, (low, high) watermarks {marks}"
        assert len(self.acked) == self.sent, f"{label}: good records failed: {self.failed[:3]}"


def read_answers(dealers) -> int:
    """Read (and drop) what the DEALER sockets ``dealers`` have received; how many."""
    n = 0
    for d in dealers:
        while True:
            try:
                d.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            n += 1
    return n


def fuzz_dealers(dealers, next_message, good: "AckedRecords", good_every: int) -> int:
    """Send INPUTS messages (``next_message()``, a list of frames each),
    round-robin over ``dealers``, with ``good``'s well-behaved produce and a
    read of the answers every ``good_every``; the answers read."""
    answers = 0
    for i in range(INPUTS):
        dealers[i % len(dealers)].send_multipart(next_message(), copy=True)
        if i % good_every == 0:
            good.produce()
            answers += read_answers(dealers)
        if i % 2000 == 0:
            time.sleep(0.005)            # let the servers breathe: this is no load test
    return answers


def end_of_fuzz(server, what: str, started: float, answers: int, good: "AckedRecords",
                survival: "Survival") -> None:
    """What every fuzz of a server's sockets ends with: its rate printed,
    ``good``'s acknowledged records all readable, the same processes and
    their memory back, and the bad input logged rate-limited."""
    elapsed = time.monotonic() - started
    print(f"{INPUTS} {what} messages in {elapsed:.1f} s ({INPUTS / elapsed:.0f}/s), "
          f"{answers} answers read")
    good.check(what)
    survival.check(what)
    log_lines = server.output().count("\n")
    print(f"server log: {log_lines} lines")
    assert log_lines < 500, "bad input is logged rate-limited"
