"""Damaged files are never served, and damage costs only what it hit
(findings 7, 8 and 10 of the hardening issue).

- an offset index entry that is wrong but still ascending, or that points
  into the middle of a batch, is caught when a read uses it: the indexes
  are rebuilt and the read is right;
- a batch whose CRC fails, in a segment opened after a clean shutdown (not
  rescanned), is not served: the read stops before it, or fails with
  CORRUPT_MESSAGE when it is the first; nothing cuts it out (its records
  were acknowledged: readers get the error until a person decides);
- one flipped byte in the active segment, then a crash: recovery drops the
  batch it hit and keeps every intact batch after it;
- with flush.messages=1, the directory entry of a new segment is durable
  before the append that created it returns.
"""
from __future__ import annotations

import os
import shutil
import stat

import pytest

from kafkalite import errors
from kafkalite.record import RecordBatch
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.index import OFFSET_ENTRY
from kafkalite.storage.loader import CLEAN_SHUTDOWN_MARKER
from storage_helpers import batch, read_all, verify_segments

CONFIG = LogConfig.from_properties({"segment.bytes": 1 << 20, "index.interval.bytes": 256,
                                    "retention.ms": -1})


def build(directory, batches=60, per_batch=5):
    plog = PartitionLog.open(directory, CONFIG)
    for b in range(batches):
        start = plog.log_end_offset
        plog.append(batch([b"value-%06d" % (start + i) * 3 for i in range(per_batch)]))
    plog.high_watermark = plog.log_end_offset
    records = read_all(plog)
    plog.close()
    return records


def batch_positions(path):
    data = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(data):
        b = RecordBatch(data, pos)
        out.append((pos, b.size_in_bytes, b.base_offset, b.last_offset))
        pos += b.size_in_bytes
    return out


def every_start_reads_right(plog, records):
    """A read from every offset starts with that offset's record."""
    for offset, *_ in records:
        got = read_all(plog, start=offset)
        assert got and got[0][0] == offset, f"a read at {offset} began at {got[0][0] if got else None}"


def index_path(directory):
    return os.path.join(directory, "%020d.index" % 0)


def rewrite_entry(directory, slot, rel=None, pos=None):
    path = index_path(directory)
    data = bytearray(open(path, "rb").read())
    old_rel, old_pos = OFFSET_ENTRY.unpack_from(data, slot * 8)
    OFFSET_ENTRY.pack_into(data, slot * 8, old_rel if rel is None else rel,
                           old_pos if pos is None else pos)
    open(path, "wb").write(data)
    return old_rel, old_pos


def test_a_wrong_but_ascending_index_entry_is_caught_and_rebuilt(tmp_path):
    directory = str(tmp_path / "t-0")
    config = LogConfig.from_properties({"segment.bytes": 1 << 20, "index.interval.bytes": 700,
                                        "retention.ms": -1})
    plog = PartitionLog.open(directory, config)
    for b in range(60):
        start = plog.log_end_offset
        plog.append(batch([b"value-%06d" % (start + i) * 3 for i in range(5)]))
    plog.high_watermark = plog.log_end_offset
    records = read_all(plog)
    plog.close()
    positions = [p for p, *_ in batch_positions(os.path.join(directory, "%020d.log" % 0))]
    entries = open(index_path(directory), "rb").read()
    _, pos5 = OFFSET_ENTRY.unpack_from(entries, 5 * 8)
    _, pos6 = OFFSET_ENTRY.unpack_from(entries, 6 * 8)
    later = positions[positions.index(pos5) + 1]
    assert later < pos6                   # still ascending: only a read can tell it is wrong
    rewrite_entry(directory, 5, pos=later)
    plog = PartitionLog.open(directory, config)
    assert plog.had_clean_shutdown
    every_start_reads_right(plog, records)
    assert read_all(plog) == records
    plog.close()


def test_an_index_entry_into_the_middle_of_a_batch_is_caught_and_rebuilt(tmp_path):
    directory = str(tmp_path / "t-0")
    records = build(directory)
    rewrite_entry(directory, 7, pos=OFFSET_ENTRY.unpack_from(
        open(index_path(directory), "rb").read(), 7 * 8)[1] + 7)
    plog = PartitionLog.open(directory, CONFIG)
    every_start_reads_right(plog, records)
    plog.close()


def test_a_batch_with_a_bad_crc_is_never_served_nor_repaired_away(tmp_path):
    directory = str(tmp_path / "t-0")
    records = build(directory)
    path = os.path.join(directory, "%020d.log" % 0)
    batches = batch_positions(path)
    pos, size, base, last = batches[20]
    with open(path, "r+b") as f:                  # a byte of batch 20's records
        f.seek(pos + size - 3)
        byte = f.read(1)[0]
        f.seek(pos + size - 3)
        f.write(bytes([byte ^ 0x55]))
    length = os.path.getsize(path)
    plog = PartitionLog.open(directory, CONFIG)
    assert plog.had_clean_shutdown and plog.recovered_segments == 0
    # a read from before the bad batch stops in front of it...
    got = plog.read(0, 1 << 20)
    assert got.region.position + got.region.length == pos
    # ...and one starting at it is refused with Kafka's CORRUPT_MESSAGE
    with pytest.raises(errors.CorruptRecordError, match=f"position {pos}"):
        plog.read(base, 1 << 20)
    assert plog.segments[0].damaged
    # acknowledged records are never cut out behind the readers' backs:
    # housekeeping leaves the segment, the read after it fails the same way
    plog.housekeeping()
    with pytest.raises(errors.CorruptRecordError):
        plog.read(base, 1 << 20)
    assert read_all(plog, start=last + 1) == [r for r in records if r[0] > last]
    assert plog.log_end_offset == records[-1][0] + 1 and not plog.damage
    plog.close()
    assert os.path.getsize(path) == length
    again = PartitionLog.open(directory, CONFIG)
    with pytest.raises(errors.CorruptRecordError):
        again.read(base, 1 << 20)
    again.close()


def test_a_flipped_byte_then_a_crash_loses_only_the_batch_it_hit(tmp_path):
    directory = str(tmp_path / "t-0")
    records = build(directory, batches=100)
    path = os.path.join(directory, "%020d.log" % 0)
    batches = batch_positions(path)
    pos, size, base, last = batches[10]
    with open(path, "r+b") as f:
        f.seek(pos + size // 2)
        byte = f.read(1)[0]
        f.seek(pos + size // 2)
        f.write(bytes([byte ^ 0x01]))
    os.unlink(os.path.join(directory, CLEAN_SHUTDOWN_MARKER))      # as after kill -9
    plog = PartitionLog.open(directory, CONFIG)
    kept = read_all(plog)
    assert len(kept) == len(records) - (last - base + 1) == 495
    assert [r[0] for r in kept] == [r[0] for r in records if not base <= r[0] <= last]
    assert len(plog.damage) == 1 and f"offsets {base} to {last}" in plog.damage[0]
    plog.close()


def test_with_flush_messages_a_new_segment_is_in_a_synced_directory_before_the_ack(
        tmp_path, monkeypatch):
    directory = tmp_path / "t-0"
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            synced.append(sorted(n for n in os.listdir(directory) if n.endswith(".log")))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    plog = PartitionLog.open(str(directory), LogConfig.from_properties(
        {"segment.bytes": 2048, "flush.messages": 1}))
    rolls = 0
    for i in range(40):
        before = len(plog.segments)
        plog.append(batch([b"x" * 200]))
        rolls += len(plog.segments) - before
        logs = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
        assert synced and synced[-1] == logs, f"append {i} returned before {logs[-1]} was synced"
    assert rolls >= 3
    plog.close()
