"""An idempotent producer's sequence numbers after a refusal (Sender's part).

A batch refused for good leaves a gap the partition's later batches close
by moving down (``_close_sequence_gap``, applied by ``_apply_gaps`` once
none of them is out); a partition whose next sequence no batch carries any
more starts again from 0 under a new epoch (``_stranded``, ``_bump_epoch``:
KIP-360). ``restamp`` rewrites a built batch's sequence (and epoch) and CRC.

Which process runs it: the application's, on the producer's sender thread
(sender.py's ``Sender`` inherits it and holds the state it reads:
``sequences``, ``acked``, ``epochs``, ``gaps``, ``waiting``, ``nodes``).

What it may import: kafkalite.errors, kafkalite._ext (the CRC) and
kafkalite.record.layout; never sender.py nor api.py.
"""
from __future__ import annotations

import collections
import logging
import struct

from kafkalite import errors

log = logging.getLogger("kafkalite.client.producer.sender")

INT32_SPAN = 1 << 31                 # sequences wrap from INT32_MAX to 0
INT16_MAX = (1 << 15) - 1            # the last producer epoch


def restamp(raw: bytes, sequence: int, epoch: int | None = None) -> bytes:
    """A built batch with base sequence ``sequence`` (and producer epoch
    ``epoch``, if given; its CRC again)."""
    from kafkalite._ext.crc32c import crc32c
    from kafkalite.record.layout import (OFF_ATTRIBUTES, OFF_BASE_SEQUENCE, OFF_CRC,
                                         OFF_PRODUCER_EPOCH)
    buf = bytearray(raw)
    struct.pack_into(">i", buf, OFF_BASE_SEQUENCE, sequence)
    if epoch is not None:
        struct.pack_into(">h", buf, OFF_PRODUCER_EPOCH, epoch)
    struct.pack_into(">I", buf, OFF_CRC, crc32c(memoryview(buf)[OFF_ATTRIBUTES:]))
    return bytes(buf)



class SequenceNumbers:
    def _close_sequence_gap(self, b) -> None:
        """``b`` was refused (a partition error that is not retriable: nothing
        of it was written), so the worker still expects ``b.sequence``: the
        partition's later batches move down by its count (Kafka's producer
        adjusts its sequences alike, KIP-360) -- once none of them is out.

        The move waits (``gaps``; _flush_waiting applies it, and sends none
        of the partition's batches meanwhile) because a later batch already
        sent may be taken with its old number: by a worker that had
        forgotten the producer (its batches deleted by retention or
        DeleteRecords, as Kafka's brokers forget). Renumbered while out, its
        acknowledgement counted under the new number, and the next batch,
        moved down onto the number the worker had just taken, was answered
        as a retry of it -- acknowledged at its offset, never written (a
        record lost: tests/client/test_producer_faults.py, the ring)."""
        key = (b.topic, b.partition)
        self.gaps.setdefault(key, []).append((b.sequence, b.count))
        for node in self.nodes.values():
            self._hold_back(node, key)      # queued, not sent: they wait for the move

    def _apply_gaps(self, key) -> None:
        """The partition's refused batches' moves (``_close_sequence_gap``),
        oldest first, now that nothing of it is out. A move is skipped when a
        later batch was acknowledged first (a worker that had forgotten the
        producer took it): the worker expects the sequence after that one,
        not the refused batch's, and no gap is left. Moved down anyway, the
        next batches overlapped the acknowledged one (answered as its retry)
        and the one after them started above the worker's next sequence."""
        gaps = self.gaps.pop(key)
        for i, (sequence, n) in enumerate(gaps):
            acked = self.acked.get(key)
            if acked is not None and 0 < (acked - sequence) % INT32_SPAN <= INT32_SPAN // 2:
                continue
            if key in self.sequences:
                self.sequences[key] = (self.sequences[key] - n) % INT32_SPAN
            for q in self.waiting.get(key, ()):
                if q.sequence >= 0 and q.raw is not None and \
                        0 < (q.sequence - sequence) % INT32_SPAN < INT32_SPAN // 2:
                    q.sequence = (q.sequence - n) % INT32_SPAN
                    q.raw = restamp(q.raw, q.sequence)
            # the later refused batches' numbers move with the rest
            gaps[i + 1:] = [((s - n) % INT32_SPAN
                             if 0 < (s - sequence) % INT32_SPAN < INT32_SPAN // 2 else s, c)
                            for s, c in gaps[i + 1:]]

    def _stranded(self, key, b) -> bool:
        """``b``, the first of its partition's batches (nothing of the
        partition out), was refused out of order above the sequence the
        worker expects after the last acknowledged batch: no batch this
        producer holds carries that sequence any more (its batch failed or
        expired without the gap closed), so ``b`` would be refused on every
        retry until delivery.timeout.ms. Kafka's producer calls this an
        unresolved sequence. Transactions leave it to the coordinator's
        epoch (the batches wait, then fail)."""
        acked = self.acked.get(key)
        return (acked is not None and b.sequence >= 0 and self.p._transactional_id is None
                and not self.in_flight_batches[key] and not self.requests_out[key]
                and isinstance(b.last_error, errors.OutOfOrderSequenceNumberError)
                and 0 < (b.sequence - acked) % INT32_SPAN < INT32_SPAN // 2)

    def _bump_epoch(self, key, queue: collections.deque) -> None:
        """A stranded partition (``_stranded``) starts again: its waiting
        batches, all it holds, take the next epoch and sequences from 0 on,
        as Kafka's idempotent producer bumps its epoch and rewrites the
        partition's sequences (KIP-360); a worker takes a newer epoch from
        sequence 0 whatever it last saw. The epoch is the partition's own:
        workers check it per partition, and the others' batches keep theirs.
        Until the first batch under it is acknowledged one append goes at a
        time (``_appends_allowed``)."""
        p = self.p
        epoch = self.epochs.get(key, p._epoch) + 1
        if epoch > INT16_MAX:
            self.retry_log.warning("%s-%d: out of order and no epoch left to start again from",
                                   *key)
            return
        self.epochs[key] = epoch
        log.warning("%s-%d: the worker expects sequence %d, which no batch carries any more; "
                    "numbering the partition's %d waiting batches from 0 under epoch %d",
                    key[0], key[1], self.acked[key], len(queue), epoch)
        sequence = 0
        for q in queue:
            q.sequence = sequence
            q.raw = restamp(q.raw, sequence, epoch)
            sequence = (sequence + q.count) % INT32_SPAN
        self.sequences[key] = sequence
        del self.acked[key]
