"""Producer-state snapshot files: ``<offset>.snapshot`` in a partition directory.

A snapshot holds the idempotent (and, later, transactional) producer state
of the partition as of ``offset``: it reflects every batch below that
offset and none at or above it. The log writes one when a segment rolls
(at the new segment's base offset) and when it closes cleanly (at the log
end), so opening a log only has to read the batch headers after the newest
snapshot. The name is the offset in 20 digits, like a segment's.

Format (Kafka's producer snapshot, version 1; big-endian)::

    version          int16    1
    crc              uint32   CRC-32C of everything after this field
    entry count      int32
    entries, each 46 bytes:
      producer id                 int64
      producer epoch              int16
      last sequence               int32   of one of the producer's cached runs of batches
      last offset                 int64   of that run
      offset delta                int32   last offset - first offset of that run
      timestamp                   int64   its max timestamp
      coordinator epoch           int32   -1 until transactions
      current txn first offset    int64   -1: no open transaction

Kafka writes one entry per producer, for its last batch. Here a producer
has one entry per run of batches it has cached (up to five, oldest first;
the other fields repeat), so that a log reopened or truncated still
recognises a retry of any of them. A reader that keeps one entry per
producer (the format allows more) keeps the last, Kafka's.

A file whose CRC fails, or that does not parse, is not trusted: the reader
raises ``CorruptSnapshotError`` and the caller deletes it and falls back
to an older snapshot or to the log itself.

Who may call: the partition's ProducerStateManager (its log's owner).
"""
from __future__ import annotations

import os
import struct
from typing import NamedTuple

from kafkalite._ext.crc32c import crc32c

SNAPSHOT_SUFFIX = ".snapshot"
VERSION = 1
_HEADER = struct.Struct(">hIi")                 # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_FROM = 6                                   # the crc covers the bytes from the entry count on
NO_COORDINATOR_EPOCH = -1
NO_TXN = -1


class CorruptSnapshotError(Exception):
    pass


class SnapshotEntry(NamedTuple):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_TXN


def snapshot_path(directory: str, offset: int) -> str:
    return os.path.join(directory, "%020d%s" % (offset, SNAPSHOT_SUFFIX))


def parse_snapshot_name(name: str) -> int | None:
    """The offset of a ``<20 digits>.snapshot`` file name, else None."""
    stem, dot, suffix = name.partition(".")
    if "." + suffix == SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def list_snapshots(directory: str) -> list[int]:
    """Offsets of the snapshots in ``directory``, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(o for o in map(parse_snapshot_name, names) if o is not None)


def encode(entries) -> bytes:
    entries = list(entries)
    body = bytearray(_HEADER.size + _ENTRY.size * len(entries))
    _HEADER.pack_into(body, 0, VERSION, 0, len(entries))
    at = _HEADER.size
    for e in entries:
        _ENTRY.pack_into(body, at, *e)
        at += _ENTRY.size
    struct.pack_into(">I", body, 2, crc32c(memoryview(body)[_CRC_FROM:]))
    return bytes(body)


def decode(data: bytes) -> list[SnapshotEntry]:
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header")
    version, crc, count = _HEADER.unpack_from(data)
    if version != VERSION:
        raise CorruptSnapshotError(f"version {version}; only version {VERSION} is known")
    computed = crc32c(memoryview(data)[_CRC_FROM:])
    if crc != computed:
        raise CorruptSnapshotError(f"CRC {crc:#010x} does not match the computed {computed:#010x}")
    if count < 0 or _HEADER.size + count * _ENTRY.size != len(data):
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
    return [SnapshotEntry(*e) for e in _ENTRY.iter_unpack(memoryview(data)[_HEADER.size:])]


def write(directory: str, offset: int, entries) -> str:
    """Write ``<offset>.snapshot`` (replacing it if present): a temporary
    file renamed into place, not fsynced here. Call ``fsync`` before
    relying on it surviving a crash; a snapshot torn by one fails its CRC."""
    path = snapshot_path(directory, offset)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(encode(entries))
    os.replace(tmp, path)
    return path


def fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(directory: str, offset: int) -> list[SnapshotEntry]:
    try:
        with open(snapshot_path(directory, offset), "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CorruptSnapshotError(f"cannot read it: {exc.strerror or exc}") from exc
    return decode(data)


def delete(directory: str, offset: int) -> None:
    try:
        os.unlink(snapshot_path(directory, offset))
    except FileNotFoundError:
        pass
