"""Fuzz the Kafka listeners: random and mutated request frames must never
crash or hang a broker process, and a real client is served afterwards.

KAFKALITE_FUZZ_FRAMES sets the number of frames (default 100,000); the
seed is printed, and KAFKALITE_FUZZ_SEED replays a run.

Mutated frames start from valid requests of most APIs (valid headers,
damaged bodies); random frames carry a known API key and random body
bytes; noise frames are bytes with arbitrary size prefixes. Admin APIs
that create or grow topics are left out of the mutations: a mutated
partition count would have the broker create millions of partitions,
which is a resource limit rather than a parsing robustness question.
"""
from __future__ import annotations

import os
import random
import select
import socket
import struct
import time

import confluent_kafka as ck

from kafkalite.protocol import ApiKey, encode_request

FRAMES = int(os.environ.get("KAFKALITE_FUZZ_FRAMES", "100000"))
REPLY_WAIT_S = 5.0


def base_frames(topic: str) -> list[bytes]:
    from kafkalite.record import RecordBatchBuilder
    b = RecordBatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0)
    b.append(1_700_000_000_000, b"k", b"v", [("h", b"1")])
    records = bytes(b.build())
    reqs = [
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
    ]
    return [encode_request(k, v, 1, "fuzz", body) for k, v, body in reqs]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    buf = bytearray(frame)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        # mostly keep api key, version, correlation id
        start = min(8, len(buf)) if rng.random() < 0.8 else 0
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
    key = rng.choice(list(ApiKey))
    head = struct.pack(">hhih", key, rng.randint(-1, 20), rng.randrange(1 << 31),
                       rng.choice([-1, 0, 4]))
    return head + rng.randbytes(rng.randint(0, 4)) + rng.randbytes(rng.randint(0, 200))


class Fuzzer:
    """Sends each frame on a fresh connection, then half-closes it, so the
    broker answers or closes at once; up to IN_FLIGHT connections at a time."""

    IN_FLIGHT = 48

    def __init__(self, addresses: list[str]):
        self.addresses = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in addresses)]
        self.open: dict[socket.socket, float] = {}
        self.answered = self.closed = self.timeouts = 0

    def send(self, i: int, raw: bytes) -> None:
        while len(self.open) >= self.IN_FLIGHT:
            self.reap(0.5)
        sock = socket.create_connection(self.addresses[i % len(self.addresses)], timeout=5)
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker may close before reading everything
        sock.setblocking(False)
        self.open[sock] = time.monotonic()

    def reap(self, wait: float) -> None:
        ready, _, _ = select.select(list(self.open), [], [], wait)
        for sock in ready:
            got = False
            try:
                while True:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        break
                    got = True
            except BlockingIOError:
                continue            # more reply to come
            except OSError:
                pass
            self.answered += got
            self.closed += not got
            del self.open[sock]
            sock.close()
        now = time.monotonic()
        for sock, since in list(self.open.items()):
            if now - since > REPLY_WAIT_S:  # acks=0 produce, a parked fetch: give up on it
                self.timeouts += 1
                del self.open[sock]
                sock.close()

    def drain(self) -> None:
        while self.open:
            self.reap(0.5)


def test_fuzzed_frames_never_crash_or_hang_a_broker(server, topic_name):
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(server.config())
    try:
        admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    finally:
        admin.close()
    pids_before = [server.proc.pid] + server.worker_pids()
    seed = int(os.environ.get("KAFKALITE_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"fuzz seed {seed}, {FRAMES} frames")
    rng = random.Random(seed)
    bases = base_frames(topic_name)
    fuzzer = Fuzzer([server.kafka_bootstrap] + [
        f"127.0.0.1:{b['port']}" for b in server.refresh()["kafka_brokers"]
        if b["node_id"] != 1000])
    started = time.monotonic()
    for i in range(FRAMES):
        r = rng.random()
        if r < 0.5:
            frame = mutate(rng, rng.choice(bases))
            raw = struct.pack(">i", len(frame)) + frame
        elif r < 0.9:
            frame = random_frame(rng)
            raw = struct.pack(">i", len(frame)) + frame
        else:                                    # noise, with any size prefix
            raw = rng.randbytes(rng.randint(0, 64))
        fuzzer.send(i, raw)
    fuzzer.drain()
    elapsed = time.monotonic() - started
    print(f"{FRAMES} frames in {elapsed:.1f} s: answered {fuzzer.answered}, connection "
          f"closed {fuzzer.closed}, no reply within {REPLY_WAIT_S} s {fuzzer.timeouts}")

    assert [server.proc.pid] + server.worker_pids() == pids_before
    assert server.proc.poll() is None
    # A real client is served normally afterwards, by every broker.
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "enable.idempotence": True})
    for i in range(100):
        p.produce(topic_name, value=b"after-%d" % i, partition=i % 2)
    assert p.flush(20) == 0
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "after-fuzz"})
    try:
        c.assign([ck.TopicPartition(topic_name, q, ck.OFFSET_BEGINNING) for q in range(2)])
        values, deadline = set(), time.monotonic() + 20
        while len({v for v in values if v.startswith(b"after-")}) < 100 \
                and time.monotonic() < deadline:
            values |= {m.value() for m in c.consume(1000, 0.5) if m.error() is None}
        assert {b"after-%d" % i for i in range(100)} <= values
    finally:
        c.close()
