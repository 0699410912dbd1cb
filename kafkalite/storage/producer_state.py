"""Idempotent producer state of one partition (Kafka's ProducerStateManager).

For every producer id that wrote to the partition: its current epoch and
the sequence and offset ranges of its last ``MAX_CACHED_BATCHES`` batches.
The partition's leader checks each produced batch against it *before* the
append:

- a batch equal (epoch, first and last sequence) to a cached one is a retry
  of a batch already written: it is acknowledged with the original offsets
  and not written again;
- an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH;
- a newer epoch must start at sequence 0, the same epoch must continue at
  last sequence + 1 (wrapping after INT32 max): otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the partition has no state for
  (new, or its batches were deleted by retention) may start at any
  sequence, as in Kafka 3.x.

Batches without a producer id (-1) are not tracked. The state is not
snapshotted: ``rebuild`` reads it back from the batch headers of the log
when the partition is opened, 61 bytes per batch.

Batch header fields used (RecordBatch v2; offsets as in ``ext/wire.h``):
length int32 @8, lastOffsetDelta int32 @23, producerId int64 @43,
producerEpoch int16 @51, baseSequence int32 @53.

Who may call: the partition's owner (the worker's event loop) only.
"""
from __future__ import annotations

import os
import struct

from kafkalite.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    OutOfOrderSequenceNumberError,
)

MAX_CACHED_BATCHES = 5          # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT32_MAX = 2**31 - 1
BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12                # baseOffset + length precede the counted bytes
OFF_LENGTH = 8
OFF_LAST_OFFSET_DELTA = 23
OFF_PRODUCER_ID = 43
_length = struct.Struct(">i").unpack_from
_delta = struct.Struct(">i").unpack_from
_producer = struct.Struct(">qhi").unpack_from     # producerId, producerEpoch, baseSequence
_base_offset = struct.Struct(">q").unpack_from
SCAN_CHUNK = 1 << 20


class ProducerBatch:
    """One produced batch as the producer state sees it."""

    __slots__ = ("producer_id", "epoch", "first_seq", "last_seq", "position", "size")

    def __init__(self, producer_id, epoch, first_seq, last_seq, position, size):
        self.producer_id = producer_id
        self.epoch = epoch
        self.first_seq = first_seq
        self.last_seq = last_seq
        self.position = position
        self.size = size


class ProducerEntry:
    __slots__ = ("epoch", "batches")   # batches: [(first_seq, last_seq, first_offset, last_offset)]

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches: list[tuple[int, int, int, int]] = []

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


def producer_batches(records) -> list[ProducerBatch]:
    """The idempotent batches in ``records`` (concatenated RecordBatch v2);
    empty when no batch carries a producer id (the common, cheap case)."""
    view = memoryview(records)
    end, pos, out = view.nbytes, 0, []
    while pos + BATCH_HEADER_SIZE <= end:
        size = _length(view, pos + OFF_LENGTH)[0] + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"batch at byte {pos} has a length of {size - LOG_OVERHEAD}")
        pid, epoch, seq = _producer(view, pos + OFF_PRODUCER_ID)
        if pid != NO_PRODUCER_ID:
            delta = _delta(view, pos + OFF_LAST_OFFSET_DELTA)[0]
            last = seq + delta
            if last > INT32_MAX:
                last -= INT32_MAX + 1
            out.append(ProducerBatch(pid, epoch, seq, last, pos, size))
        pos += size
    return out


class ProducerStateManager:
    def __init__(self):
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, batches: list[ProducerBatch]) -> tuple[int, int] | None:
        """Validate ``batches`` before an append. Returns (first offset,
        last offset) of the original when the first batch is a duplicate
        (the append must be skipped), None when the append may go ahead;
        raises OUT_OF_ORDER_SEQUENCE_NUMBER / INVALID_PRODUCER_EPOCH."""
        pending: dict[int, tuple[int, int]] = {}         # pid -> (epoch, last seq) within the request
        for b in batches:
            entry = self.producers.get(b.producer_id)
            if entry is not None and b.producer_id not in pending:
                if b.epoch == entry.epoch:
                    for first, last, first_off, last_off in entry.batches:
                        if first == b.first_seq and last == b.last_seq:
                            return first_off, last_off
            epoch, last_seq = pending.get(b.producer_id) or (
                (entry.epoch, entry.last_seq) if entry is not None else (NO_PRODUCER_EPOCH, -1))
            if b.epoch < epoch:
                raise InvalidProducerEpochError(
                    f"producer {b.producer_id} epoch {b.epoch} is older than the current "
                    f"epoch {epoch}")
            if b.epoch != epoch:
                if b.first_seq != 0 and epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {b.producer_id}: new epoch {b.epoch} must start at sequence "
                        f"0, not {b.first_seq}")
            elif epoch != NO_PRODUCER_EPOCH and last_seq >= 0 and not (
                    b.first_seq == last_seq + 1 or (b.first_seq == 0 and last_seq == INT32_MAX)):
                raise OutOfOrderSequenceNumberError(
                    f"producer {b.producer_id} epoch {b.epoch}: sequence {b.first_seq} does not "
                    f"follow {last_seq}")
            pending[b.producer_id] = (b.epoch, b.last_seq)
        return None

    def update(self, batches: list[ProducerBatch], base_offsets, last_offsets) -> None:
        """Record appended ``batches`` with the offsets the log assigned
        (``base_offsets[i]``/``last_offsets[i]`` belong to ``batches[i]``)."""
        for b, first_off, last_off in zip(batches, base_offsets, last_offsets):
            self.record(b.producer_id, b.epoch, b.first_seq, b.last_seq, int(first_off),
                        int(last_off))

    def record(self, pid: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int) -> None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.batches.append((first_seq, last_seq, first_offset, last_offset))
        if len(entry.batches) > MAX_CACHED_BATCHES:
            del entry.batches[0]

    def rebuild(self, segments) -> int:
        """Read the state back from the batch headers of ``segments`` (a
        log's LogSegments, oldest first). Returns the batches read."""
        self.producers.clear()
        count = 0
        for seg in segments:
            fd, size, pos = seg.file.fileno(), seg.size, 0
            while pos + BATCH_HEADER_SIZE <= size:
                chunk = memoryview(os.pread(fd, min(SCAN_CHUNK, size - pos), pos))
                at = 0
                while at + BATCH_HEADER_SIZE <= len(chunk):
                    length = _length(chunk, at + OFF_LENGTH)[0] + LOG_OVERHEAD
                    if length < BATCH_HEADER_SIZE:
                        return count            # recovery already cut the log at the valid prefix
                    if at > 0 and at + length > len(chunk):
                        break                   # read it again at the start of the next chunk
                    self._note_header(chunk, at)
                    count += 1
                    at += length
                pos += at
        return count

    def _note_header(self, view, at: int) -> None:
        pid, epoch, seq = _producer(view, at + OFF_PRODUCER_ID)
        if pid != NO_PRODUCER_ID:
            base = _base_offset(view, at)[0]
            delta = _delta(view, at + OFF_LAST_OFFSET_DELTA)[0]
            last = seq + delta
            if last > INT32_MAX:
                last -= INT32_MAX + 1
            self.record(pid, epoch, seq, last, base, base + delta)
