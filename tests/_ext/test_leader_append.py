"""The one-pass leader append (ext/leader_append.pyx) against the write
path it stands in for (``ReplicaManager.append``): two replica managers
get the same random appends -- one batch or several, of one to four records
of 0-3,000 bytes, in bytearrays, writable and read-only views and bytes,
idempotent batches in order, retried and out of order, damaged ones,
keyless ones on a compacted topic, on topics with small segments (rolls),
small index intervals, LogAppendTime, flush.messages, an old segment.ms,
a partition with a follower, a new leader epoch now and then -- one
through ``append_once`` (falling back to ``ReplicaManager.append`` where
it says None), the other through ``ReplicaManager.append`` only. Every
answer or error, every wake-up, and afterwards every segment's bytes,
indexes and in-memory state, every log's offsets, producer state, leader
state and the topic stats must be the same; and the one-pass path must
have served a good share of the appends (a third of them and more: a
check that could not fail otherwise)."""
from __future__ import annotations

import os
import random

import pytest

from kafkalite._ext.leader_append import append_once
from kafkalite.errors import KafkaError
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica.replica_manager import ReplicaManager

T0 = 1_700_000_000_000
TOPICS = {
    "plain": {},
    "rolls": {"segment.bytes": "6000", "index.interval.bytes": "100"},
    "stamped": {"message.timestamp.type": "LogAppendTime", "index.interval.bytes": "0"},
    "compacted": {"cleanup.policy": "compact"},
    "flushed": {"flush.messages": "3"},
    "aged": {"segment.ms": "5000"},
}
REPLICATED = ("plain", 1)       # a follower: its high watermark waits, the full path's


class Clock:
    """Both managers' logs read this clock (their own steps, the same times)."""

    def __init__(self):
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _manager(tmp_path, name: str, clock: Clock, epochs: dict) -> ReplicaManager:
    d = str(tmp_path / name)
    rm = ReplicaManager(0, d, ServerConfig(data_dir=d).log_config)
    for topic, configs in TOPICS.items():
        for p in range(2):
            replicated = (topic, p) == REPLICATED
            assert rm.become_leader({
                "topic": topic, "partition": p, "topic_id": None,
                "leader_epoch": epochs[(topic, p)], "configs": configs,
                "replicas": [0, 1] if replicated else [0],
                "isr": [0, 1] if replicated else [0]})["error"] == 0
            rm.partitions[(topic, p)].log._clock = clock
    return rm


def _batch(rng, clock: Clock, producer=None, records=None) -> bytes:
    b = RecordBatchBuilder()
    for _ in range(records or rng.randint(1, 4)):
        # timestamps now and then hours old (segment.ms counts record time)
        ts = clock.now - rng.choice([0, 0, 0, rng.randint(0, 10_000_000)])
        b.append(ts, rng.choice([None, b"k", b"key"]), os.urandom(rng.randint(0, 3000)))
    if producer is not None:
        pid, epoch, seq = producer
        b.set_producer(pid, epoch, seq)
    return bytes(b.build())


def _records(rng, clock: Clock, sequences: dict, key) -> bytes:
    kind = rng.random()
    if kind < 0.55:
        return _batch(rng, clock)
    if kind < 0.8:
        # idempotent, one record a batch: the next sequence, a retry of the last, or a gap
        expected = sequences.get(key, 0)
        how = rng.random()
        seq = expected if how < 0.75 else max(0, expected - 1) if how < 0.9 else expected + 3
        records = _batch(rng, clock, (4000 + key[1], 0, seq), records=1)
        if seq == expected:
            sequences[key] = expected + 1
        return records
    if kind < 0.9:
        return _batch(rng, clock) + _batch(rng, clock)        # two batches in one write
    damaged = bytearray(_batch(rng, clock))
    damaged[-1] ^= 0xFF                                        # CRC mismatch
    return bytes(damaged)


def _holder(rng, records: bytes):
    """The records as a caller may hold them, each manager its own copy."""
    how = rng.random()
    if how < 0.6:
        return bytearray(records)
    if how < 0.85:                  # as a Produce frame's records: a view into a bigger buffer
        frame = bytearray(b"\0" * 7 + records + b"\0" * 3)
        return memoryview(frame)[7:7 + len(records)]
    if how < 0.95:
        return memoryview(records)  # read-only
    return records


def _outcome(fn):
    try:
        return fn()
    except KafkaError as exc:
        return (type(exc).__name__, str(exc))


def _segment_state(seg) -> tuple:
    with open(seg.path, "rb") as f:
        data = f.read()
    return (seg.base_offset, data, seg.size, seg.next_offset, seg.max_timestamp,
            seg.offset_of_max_timestamp, seg.first_batch_timestamp,
            seg._bytes_since_last_index_entry, seg.tail_batches,
            seg._tail_end, bytes(seg.offset_index._data), bytes(seg.time_index._data))


def _state(rm: ReplicaManager) -> dict:
    out = {"stats": {k: list(v) for k, v in rm.topic_stats.items()}}
    for key, part in sorted(rm.partitions.items()):
        log = part.log
        # the rolled segments' fsyncs end in the background, when they end:
        # the recovery point is compared once they all have
        log._poll_flushes(wait=True)
        out[key] = (
            log.log_end_offset, log.high_watermark, log.log_start_offset,
            log.leader_epoch, log._unflushed_messages, log.recovery_point,
            log.leader_epoch_cache.latest_epoch,
            rm.leader_states.state(*key),
            sorted((pid, e.epoch, e.last_seq) for pid, e in log.producer_state.producers.items()),
            [_segment_state(s) for s in log._segments])
    return out


@pytest.mark.parametrize("seed", range(4))
def test_one_pass_appends_as_the_write_path(tmp_path, seed):
    rng = random.Random(seed)
    clock = Clock()
    epochs = {(t, p): 1 for t in TOPICS for p in range(2)}
    fast = _manager(tmp_path, "fast", clock, epochs)
    full = _manager(tmp_path, "full", clock, epochs)
    sequences: dict = {}
    served = 0
    keys = sorted(epochs)
    for step in range(600):
        clock.now += rng.randint(0, 400)
        if rng.random() < 0.01:         # a new leader epoch: its first append is the full path's
            key = rng.choice(keys)
            epochs[key] += 1
            for rm in (fast, full):
                part = rm.partitions[key]
                rm.become_leader({"topic": key[0], "partition": key[1], "topic_id": None,
                                  "leader_epoch": epochs[key], "configs": TOPICS[key[0]],
                                  "replicas": part.replicas, "isr": part.isr})
        key = rng.choice(keys)
        records = _records(rng, clock, sequences, key)
        a_records, b_records = _holder(rng, records), _holder(rng, records)
        index = key[1]
        pa, pb = fast.partitions[key], full.partitions[key]

        def fast_append():
            once = append_once(fast, pa, a_records, index)
            if once is not None:
                return once, True
            info = fast.append(pa, a_records)
            return (index, info.first_offset, info.log_append_time, info.log_start_offset), False

        def full_append():
            info = full.append(pb, b_records)
            return (index, info.first_offset, info.log_append_time, info.log_start_offset), False

        # inside a gathering, what each append wakes is left in rm._woken to compare
        with fast.gathered_wakeups():
            got = _outcome(fast_append)
            woken_fast = dict(fast._woken)
        with full.gathered_wakeups():
            want = _outcome(full_append)
            woken_full = dict(full._woken)
        if isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], bool):
            got, once = got
            served += once
            want = want[0]
        assert got == want, f"step {step}, {key}"
        assert woken_fast == woken_full, f"step {step}, {key}"
    assert _state(fast) == _state(full)
    # a third of the appends are the common kind (writable, one batch, no roll,
    # not replicated): the comparison above was of the one-pass path
    assert served > 150, served


def _run_of_batches(rng, clock: Clock, sequences: dict, key) -> bytes:
    """2-6 batches of one partition in one records field, as the native
    producer sends what waited behind a request in flight: idempotent ones
    in sequence (now and then a retry of the run, or a gap), or plain."""
    n = rng.randint(2, 6)
    if rng.random() < 0.3:
        return b"".join(_batch(rng, clock) for _ in range(n))
    expected = sequences.get(key, 0)
    how = rng.random()
    seq = expected if how < 0.8 else max(0, expected - n) if how < 0.9 else expected + 2
    run = b"".join(_batch(rng, clock, (4000 + key[1], 0, seq + i), records=1) for i in range(n))
    if seq == expected:
        sequences[key] = expected + n
    return run


@pytest.mark.parametrize("seed", range(3))
def test_one_pass_appends_runs_of_batches_as_the_write_path(tmp_path, seed):
    """Several batches of a partition in one records field (the native
    producer's, issue 72) are appended by the one pass too, as the write
    path appends them: the same answers, logs, indexes, tails and states."""
    rng = random.Random(seed)
    clock = Clock()
    epochs = {(t, p): 1 for t in TOPICS for p in range(2)}
    fast = _manager(tmp_path, "fast", clock, epochs)
    full = _manager(tmp_path, "full", clock, epochs)
    sequences: dict = {}
    served = 0
    keys = sorted(epochs)
    for step in range(300):
        clock.now += rng.randint(0, 400)
        key = rng.choice(keys)
        records = _run_of_batches(rng, clock, sequences, key)
        # writable, as a Produce frame's records are: what the one pass takes
        a_records = memoryview(bytearray(b"\0" * 5 + records))[5:]
        b_records = bytearray(records)
        pa, pb = fast.partitions[key], full.partitions[key]
        with fast.gathered_wakeups():
            try:
                once = append_once(fast, pa, a_records, key[1])
                if once is None:
                    info = fast.append(pa, a_records)
                    got = (key[1], info.first_offset, info.log_append_time, info.log_start_offset)
                else:
                    got, served = once, served + 1
            except KafkaError as exc:
                got = (type(exc).__name__, str(exc))
            woken_fast = dict(fast._woken)
        with full.gathered_wakeups():
            want = _outcome(lambda: full.append(pb, b_records))
            if hasattr(want, "first_offset"):      # a LogAppendInfo, not an error
                want = (key[1], want.first_offset, want.log_append_time, want.log_start_offset)
            woken_full = dict(full._woken)
        assert got == want, f"step {step}, {key}"
        assert woken_fast == woken_full, f"step {step}, {key}"
    assert _state(fast) == _state(full)
    # most runs are plain or in sequence on a partition without a follower:
    # the comparison above was of the one-pass path
    assert served > 80, served
