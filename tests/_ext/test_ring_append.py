"""A ring's entries appended in C (ext/ring_append.pyx through
WorkerCore.append_entries, ext/shm_ring.pyx) against the ring gateway's
Python path (``ReplicaManager.append`` per entry): two replica managers,
each with a real ring in /dev/shm, get the same random entries -- plain
batches of one to four records, idempotent ones in order, retried and out
of order, transactional ones, two batches in one entry, damaged ones, to
partitions with small segments (rolls) and to a partition not led here.
One ring is attached with acks=1 (the C path, which declines what it does
not serve), the other with acks=-1 (a partition without followers
commits at once, so it is acknowledged at once, but always through the
Python path). Every acknowledgement (sequence, error code, base offset),
every log's offsets and every segment's bytes must be the same; and the C
path must have appended a good share of them itself (a check that could not fail
otherwise)."""
from __future__ import annotations

import os
import random
import sys

import pytest
import zmq

from harness import shm_entries
from kafkalite._ext.ring_append import LeaderSink
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica.replica_manager import ReplicaManager
from kafkalite.server.replica.ring_gateway import RingGateway
from kafkalite.shm.ring import ProducerRing

T0 = 1_700_000_000_000
TOPICS = {"plain": {}, "rolls": {"segment.bytes": "6000", "index.interval.bytes": "100"}}
PARTITIONS = 3
ENTRIES = 400


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _manager(path: str, clock: Clock) -> ReplicaManager:
    rm = ReplicaManager(0, path, ServerConfig(data_dir=path).log_config)
    for topic, configs in TOPICS.items():
        for p in range(PARTITIONS):
            assert rm.become_leader({"topic": topic, "partition": p, "topic_id": None,
                                     "leader_epoch": 1, "configs": configs})["error"] == 0
            rm.partitions[(topic, p)].log._clock = clock
    return rm


def _batch(rng, producer=None, records=None, transactional=False) -> bytes:
    if transactional:
        pid, epoch, seq = producer
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                               transactional=True)
    else:
        b = RecordBatchBuilder()
    for _ in range(records or rng.randint(1, 4)):
        b.append(T0 - rng.randint(0, 1000), rng.choice([None, b"k"]),
                 os.urandom(rng.randint(0, 2000)))
    if producer is not None and not transactional:
        b.set_producer(*producer)
    return bytes(b.build())


def _entries(seed: int) -> list[tuple[str, int, bytes]]:
    rng = random.Random(seed)
    sequences: dict = {}
    out = []
    for _ in range(ENTRIES):
        topic = rng.choice(list(TOPICS))
        partition = rng.randrange(PARTITIONS + 1) if rng.random() < 0.05 else \
            rng.randrange(PARTITIONS)       # PARTITIONS: not led here
        kind = rng.random()
        if kind < 0.6:
            records = _batch(rng)
        elif kind < 0.8:
            key = (topic, partition)
            expected = sequences.get(key, 0)
            how = rng.random()
            seq = expected if how < 0.75 else max(0, expected - 1) if how < 0.9 else expected + 3
            records = _batch(rng, (4000 + partition, 0, seq), records=1)
            if seq == expected:
                sequences[key] = expected + 1
        elif kind < 0.87:
            records = _batch(rng) + _batch(rng)
        elif kind < 0.93:
            key = ("txn", topic, partition)
            seq = sequences.get(key, 0)
            sequences[key] = seq + 1
            records = _batch(rng, (9000 + partition, 0, seq), records=1, transactional=True)
        else:
            damaged = bytearray(_batch(rng))
            damaged[-1] ^= 0xFF                                 # CRC mismatch
            records = bytes(damaged)
        out.append((topic, partition, records))
    return out


def _drain_all(gw: RingGateway, ring: ProducerRing, entries) -> list[tuple[int, int, int]]:
    (fd,) = gw.rings
    acks = []
    for topic, partition, records in entries:
        assert ring.try_append(topic, partition, records) >= 0
    while len(acks) < len(entries):
        gw.on_events({fd: zmq.POLLIN})
        got = ring.poll_acks()
        assert got or len(acks) == len(entries), "a drain appended nothing"
        acks.extend(got)
    return acks


def _log_bytes(rm: ReplicaManager) -> dict:
    out = {}
    for key, part in sorted(rm.partitions.items()):
        files = {}
        for name in sorted(os.listdir(part.log.directory)):
            if name.endswith(".log"):
                with open(os.path.join(part.log.directory, name), "rb") as f:
                    files[name] = f.read()
        out[key] = (part.log.log_end_offset, part.high_watermark, files)
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_c_appends_match_the_python_path(tmp_path, seed):
    before = shm_entries()
    entries = _entries(seed)
    results = {}
    appends = {}
    for acks in (1, -1):
        clock = Clock()
        rm = _manager(str(tmp_path / f"acks{acks}"), clock)
        gw = RingGateway(rm, zmq.Poller(), 0)
        ring = ProducerRing.create(1 << 22)
        try:
            gw.attach({"op": "shm_attach", "ring": ring.name, "acks": acks,
                       "secret": ring.attach_secret.hex()}, "User:ANONYMOUS")
            calls = [0]
            python_append = ReplicaManager.append.__code__

            def count(frame, event, arg):
                if event == "call" and frame.f_code is python_append:
                    calls[0] += 1
            sys.setprofile(count)
            try:
                acked = _drain_all(gw, ring, entries)
            finally:
                sys.setprofile(None)
            appends[acks] = calls[0]
            results[acks] = (acked, _log_bytes(rm))
        finally:
            gw.close()
            ring.close(unlink=True)
            rm.shutdown()
    assert [a[0] for a in results[1][0]] == list(range(ENTRIES))
    assert results[1][0] == results[-1][0]          # every ack: sequence, code, base offset
    assert results[1][1] == results[-1][1]          # every log's offsets and bytes
    codes = {code for _, code, _ in results[1][0]}
    assert 0 in codes and len(codes) > 1, f"no refused entry to compare: {codes}"
    # the Python path appended every entry; the C path left it only what it declines
    assert appends[-1] >= ENTRIES * 0.9
    # (it declines rolls, retries, two-batch and transactional entries)
    assert appends[1] < ENTRIES * 0.7, f"the C path declined {appends[1]} of {ENTRIES} entries"
    assert shm_entries() <= before


def test_the_base_sink_declines_every_entry_and_poll_returns_them(tmp_path):
    """The ring's own EntrySink takes nothing: append_entries appends and
    acknowledges nothing, and poll() hands every entry over as before."""
    from kafkalite.shm.ring import WorkerRing
    from kafkalite._ext.shm_ring import EntrySink
    with ProducerRing.create(1 << 16) as ring:
        worker = WorkerRing.attach(ring.name, ring.attach_secret)
        try:
            for i in range(5):
                assert ring.try_append("t", i, b"x" * 100) == i
            assert worker.append_entries(EntrySink(), 100) == 0
            assert [(s, t, p, bytes(b)) for s, t, p, b in worker.poll(100)] == \
                [(i, "t", i, b"x" * 100) for i in range(5)]
            assert ring.poll_acks() == []
            # a polled entry not acknowledged yet: the C path waits for it
            assert ring.try_append("plain", 0, _batch(random.Random(0))) == 5
            rm = _manager(str(tmp_path / "rm"), Clock())
            try:
                assert worker.append_entries(LeaderSink(rm, None), 100) == 0
                for seq in range(5):
                    worker.ack(seq, 0, seq)
                worker.release_through(4)
                assert worker.append_entries(LeaderSink(rm, None), 100) == 1
                assert [(s, c) for s, c, _ in ring.poll_acks()] == \
                    [(i, 0) for i in range(6)]
            finally:
                rm.shutdown()
        finally:
            worker.close()
