"""Idempotent producer state of one partition (Kafka's ProducerStateManager).

For every producer id that wrote to the partition: its current epoch and
the sequence and offset ranges of its last ``MAX_CACHED_BATCHES`` runs. A
run is a stretch of the producer's batches with consecutive sequences at
consecutive offsets (Kafka keeps single batches): one request of many
batches, or several requests nothing else came between, is one run, so
the window covers the producer's last five appends however many batches
they carried -- a client that pipelines multi-batch requests still has
every batch it may retry after a crash recognised.
The log checks each batch a client appends against it *before* writing
(``check``) and records every appended batch, whatever its origin, after
(``update``):

- a batch whose sequences (same epoch) lie within a cached run is a retry
  of a batch already written: the append is acknowledged with the original
  offsets (a run maps sequences to offsets one to one) and nothing is
  written;
- an epoch older than the producer's current one: INVALID_PRODUCER_EPOCH;
  a transactional batch of a newer epoch while the producer's transaction
  is open here (its marker not written yet): INVALID_TXN_STATE;
- a newer epoch must start at sequence 0, the same epoch must continue at
  last sequence + 1 (wrapping after INT32 max): otherwise
  OUT_OF_ORDER_SEQUENCE_NUMBER. A producer the partition has no state for
  (new, or its batches were deleted by retention) may start at any
  sequence, as in Kafka 3.x -- except a transactional first write the
  transaction coordinator was asked about (below).

Transaction verification (KIP-890, Kafka's VerificationStateEntry): the
leader asks the coordinator before a producer's first transactional write
to the partition and records it here first (``start_verification``: the
write's epoch and first sequence, the lowest one across the attempts of
that epoch, and whether the producer speaks transactions v2). Until a
transactional batch or marker of the producer is recorded, its appends
must not start above that lowest sequence (a verification that failed
retriably must not let a later, higher batch in ahead of the retried
lower one: the lower one would then be out of order for ever), and a
transactions v2 producer with no batches here must start at sequence 0:
the leader holds nothing that says the sequences below were ever written,
and a client counts its earlier in-flight batches delivered once a later
one is. Both refusals are OUT_OF_ORDER_SEQUENCE_NUMBER, as Kafka's
``ProducerAppendInfo.checkSequence``. The verification state lives in
memory only (a restarted leader verifies again); one whose write never
came (the producer went away) is dropped after
``VERIFICATION_EXPIRY_MS`` (``expire_verifications``, from the log's
housekeeping), as Kafka drops it with expired producer ids.

Appends from replication and from the broker's coordinators are recorded
without these checks (the leader already made them), as Kafka's log does
by ``AppendOrigin``.

The per-batch fields come from the Cython validation scan of the append
(``AppendScan``: producer id, epoch, base sequence, offsets) or, when
loading, from ``batch_scan.producer_batches`` over the log's tail: nothing
here parses batch bytes.

Transactions: a producer's first transactional batch opens its
transaction in the partition (``ongoing``: producer id -> first offset);
its COMMIT or ABORT marker, a control batch the transaction coordinator
has written through the log, closes it and comes back from ``update`` as
a ``CompletedTxn`` -- the log records aborted ones in the segment's
transaction index. The smallest first offset of the open transactions is
the partition's first unstable offset, below which the last stable offset
(LSO) stays.

Persistence: snapshots (producer_snapshot.py). ``take_snapshot(offset)``
writes the state as of a log end, every cached run of every producer; the
log takes one when a segment rolls and when it closes. ``load`` restores the newest snapshot at or below the
log end and reads the batch headers after it (``batches_read`` says how
many), so opening a cleanly closed log reads none. Snapshots past the log
end (after a truncation or a crash that cut the tail) are deleted, as are
those older than the log start.

Who may call: the partition log (log.py), on its owner's thread.
"""
from __future__ import annotations

import enum
import logging
from typing import Callable, NamedTuple

from kafkalite._ext.batch_scan import producer_batches
from kafkalite.errors import (InvalidProducerEpochError, InvalidTxnStateError,
                              OutOfOrderSequenceNumberError)
from kafkalite.record.layout import ATTR_CONTROL, ATTR_TRANSACTIONAL, CONTROL_ABORT
from kafkalite.storage import producer_snapshot
from kafkalite.storage.producer_snapshot import CorruptSnapshotError, SnapshotEntry

log = logging.getLogger(__name__)

MAX_CACHED_BATCHES = 5          # runs; Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
NO_PRODUCER_EPOCH = -1
INT32_MAX = 2**31 - 1
# Kafka's producer.id.expiration.ms default, after which it drops a
# verification whose write never came
VERIFICATION_EXPIRY_MS = 86_400_000


class AppendOrigin(enum.Enum):
    """Who appends: what the log checks before writing (Kafka's AppendOrigin)."""

    CLIENT = "client"               # a producer: every check
    REPLICATION = "replication"     # a follower copying its leader: no producer checks
    COORDINATOR = "coordinator"     # the broker's own writes (group and transaction state)


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: its first offset in this partition
    (the marker's own offset if it wrote nothing here) and the marker's."""
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


def _last_sequence(first_seq: int, offset_delta: int) -> int:
    if first_seq < 0:
        # no sequence (the coordinators' transactional writes): none at the
        # end either, as Kafka's RecordBatch.lastSequence
        return first_seq
    last = first_seq + offset_delta
    return last - (INT32_MAX + 1) if last > INT32_MAX else last


class ProducerEntry:
    __slots__ = ("epoch", "batches", "last_written_offset", "last_timestamp",
                 "coordinator_epoch", "current_txn_first_offset")

    def __init__(self, epoch: int):
        self.epoch = epoch
        # runs (first_seq, last_seq, first_offset, last_offset), oldest first
        self.batches: list[tuple[int, int, int, int]] = []
        self.last_written_offset = -1       # of its last batch, data or transaction marker
        self.last_timestamp = -1
        self.coordinator_epoch = producer_snapshot.NO_COORDINATOR_EPOCH
        self.current_txn_first_offset = producer_snapshot.NO_TXN

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


    def cached(self, first_seq: int, last_seq: int) -> tuple[int, int] | None:
        """(first offset, last offset) of the batch with these sequences, when
        a cached run holds it."""
        for s, e, first, last in self.batches:
            if s == first_seq and e == last_seq:
                return first, last
            if s <= first_seq <= last_seq <= e:       # runs never cross the wrap
                return first + first_seq - s, first + last_seq - s
        return None

    def append_batch(self, first_seq: int, last_seq: int, first_offset: int,
                     last_offset: int) -> None:
        runs = self.batches
        if runs:
            s, e, first, last = runs[-1]
            if (first_seq == e + 1 and first_offset == last + 1 and first_seq <= last_seq
                    and last_seq - first_seq == last_offset - first_offset):
                runs[-1] = (s, last_seq, first, last_offset)
                return
        runs.append((first_seq, last_seq, first_offset, last_offset))
        if len(runs) > MAX_CACHED_BATCHES:
            del runs[0]


class VerificationState:
    """A producer's transaction verification under way or answered, until its
    first transactional batch here is written (Kafka's VerificationStateEntry)."""
    __slots__ = ("epoch", "lowest_sequence", "supports_epoch_bump", "started_ms")

    def __init__(self, epoch: int, sequence: int, supports_epoch_bump: bool, started_ms: int):
        self.epoch = epoch
        self.lowest_sequence = sequence
        self.supports_epoch_bump = supports_epoch_bump
        self.started_ms = started_ms


class ProducerStateManager:
    def __init__(self, directory: str):
        self.directory = directory
        self.producers: dict[int, ProducerEntry] = {}
        # producer id -> its transaction verification, until a transactional
        # batch or marker of it is recorded
        self.verifications: dict[int, VerificationState] = {}
        self.ongoing: dict[int, int] = {}         # producer id -> first offset of its open txn
        self.batches_read = 0                     # batch headers the last load read
        self.snapshots: list[int] = producer_snapshot.list_snapshots(directory)
        self._rows_of = None                      # the scan whose _batches are in _rows
        self._rows: list[tuple] = []

    # ---- the append path ---------------------------------------------------------------------

    def start_verification(self, pid: int, sequence: int, epoch: int,
                           supports_epoch_bump: bool, now_ms: int) -> None:
        """The leader is about to ask the transaction coordinator about
        ``pid``'s first transactional write here (base sequence
        ``sequence``). The lowest sequence of the attempts is kept, per
        epoch: a newer epoch starts over, since its sequences restart."""
        state = self.verifications.get(pid)
        if state is None:
            self.verifications[pid] = VerificationState(epoch, sequence, supports_epoch_bump,
                                                        now_ms)
            return
        if epoch > state.epoch:
            state.epoch, state.lowest_sequence = epoch, sequence
        elif epoch == state.epoch and sequence < state.lowest_sequence:
            state.lowest_sequence = sequence
        state.supports_epoch_bump = supports_epoch_bump

    def expire_verifications(self, now_ms: int) -> None:
        """Drop the verifications started ``VERIFICATION_EXPIRY_MS`` or more
        ago whose write never came (Kafka keeps the first start's time too)."""
        if self.verifications:
            for pid in [pid for pid, v in self.verifications.items()
                        if now_ms - v.started_ms >= VERIFICATION_EXPIRY_MS]:
                del self.verifications[pid]

    def _batches(self, scan) -> list[tuple]:
        """(pid, epoch, first_seq, last_seq, first_offset, last_offset, max_ts,
        attributes, control type) of the scan's batches that carry a producer
        id, in order (AppendScan.producer_rows: one call, a tuple a batch,
        its last sequence as ``_last_sequence`` gives it), and kept for the
        scan: ``check`` and ``update`` of one append read it once."""
        if scan is self._rows_of:
            return self._rows
        rows = scan.producer_rows()
        self._rows_of, self._rows = scan, rows
        return rows

    def check(self, scan) -> tuple[int, int] | None:
        """Validate a client's append before it is written. Returns (first
        offset, last offset) of the original when the append is a retry of
        batches already in the log (it must not be written again), None
        when it may go ahead; raises OUT_OF_ORDER_SEQUENCE_NUMBER /
        INVALID_PRODUCER_EPOCH."""
        pending: dict[int, tuple[int, int]] = {}    # pid -> (epoch, last seq) within the append
        duplicates: list = []
        fresh = 0
        for pid, epoch, first_seq, last_seq, _, _, _, attrs, _ in self._batches(scan):
            if attrs & ATTR_CONTROL:
                continue        # transaction markers carry no sequence (the broker writes them)
            entry = self.producers.get(pid)
            if (attrs & ATTR_TRANSACTIONAL and entry is not None and epoch > entry.epoch
                    and pid in self.ongoing):
                # transactions v2: a new transaction's write before the
                # (bumped) marker of the producer's last one reached here
                raise InvalidTxnStateError(
                    f"producer {pid} epoch {epoch}: its transaction of epoch {entry.epoch} is "
                    f"still open in this partition")
            if entry is not None and epoch == entry.epoch:
                dup = entry.cached(first_seq, last_seq)
                if dup is not None:
                    duplicates.append(dup)
                    continue
            fresh += 1
            current_epoch, current_last = pending.get(pid) or (
                (entry.epoch, entry.last_seq) if entry is not None else (NO_PRODUCER_EPOCH, -1))
            if epoch < current_epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {current_epoch}")
            verification = self.verifications.get(pid)
            if verification is not None and pid not in pending:
                self._check_verified(pid, first_seq, entry, verification)
            if epoch != current_epoch:
                if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceNumberError(
                        f"producer {pid}: new epoch {epoch} must start at sequence 0, not "
                        f"{first_seq}")
            elif current_epoch != NO_PRODUCER_EPOCH and current_last >= 0 and not (
                    first_seq == current_last + 1 or (first_seq == 0 and current_last == INT32_MAX)):
                cached = [(b[0], b[1]) for b in entry.batches] if entry is not None else []
                raise OutOfOrderSequenceNumberError(
                    f"producer {pid} epoch {epoch}: sequence {first_seq} does not follow "
                    f"{current_last} (the batches this partition knows it by: {cached})")
            pending[pid] = (epoch, last_seq)
        if duplicates:
            if fresh:
                # a retried request is retried whole: a mix is a broken producer
                raise OutOfOrderSequenceNumberError(
                    f"an append mixes {len(duplicates)} retried batch(es) with {fresh} new one(s)")
            return duplicates[0][0], duplicates[-1][1]
        return None

    @staticmethod
    def _check_verified(pid: int, first_seq: int, entry: ProducerEntry | None,
                        verification: VerificationState) -> None:
        """The rules for the first batch of an append by a producer whose
        transaction verification is recorded (module docstring). Later
        batches of the same append follow on from it as usual."""
        if verification.supports_epoch_bump and first_seq != 0 and (
                entry is None or not entry.batches):
            raise OutOfOrderSequenceNumberError(
                f"producer {pid}: a transactions v2 producer with no batches in this partition "
                f"must start at sequence 0, not {first_seq}")
        if first_seq > verification.lowest_sequence:
            raise OutOfOrderSequenceNumberError(
                f"producer {pid}: sequence {first_seq} is above {verification.lowest_sequence}, "
                f"the lowest its transaction verification here saw")

    def check_marker(self, scan) -> None:
        """Validate transaction markers (the coordinator's appends) before
        they are written: a marker's epoch may not be older than the
        producer's (a fenced coordinator's or zombie's late marker)."""
        for pid, epoch, _, _, _, _, _, attrs, _ in self._batches(scan):
            entry = self.producers.get(pid)
            if attrs & ATTR_CONTROL and entry is not None and epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"transaction marker of producer {pid} has epoch {epoch}, older than the "
                    f"current epoch {entry.epoch}")

    def update(self, scan) -> list[CompletedTxn]:
        """Record the appended batches of ``scan`` (offsets as written);
        returns the transactions its markers completed, in log order."""
        rows = self._batches(scan)
        self._rows_of, self._rows = None, []
        if len(rows) == 1:
            done = self._record(*rows[0])       # one batch: no loop
            return [] if done is None else [done]
        completed = []
        for batch in rows:
            done = self._record(*batch)
            if done is not None:
                completed.append(done)
        return completed

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    def _record(self, pid: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                last_offset: int, timestamp: int, attributes: int,
                control_type: int) -> CompletedTxn | None:
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(epoch)
        elif epoch != entry.epoch:
            entry.epoch = epoch
            entry.batches.clear()
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        entry.last_written_offset = last_offset
        if attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) and self.verifications:
            # the transaction is open here now, or ended: nothing left to guard
            self.verifications.pop(pid, None)
        if attributes & ATTR_CONTROL:
            # a transaction marker ends the producer's open transaction
            first = self.ongoing.pop(pid, first_offset)
            entry.current_txn_first_offset = producer_snapshot.NO_TXN
            return CompletedTxn(pid, first, last_offset, control_type == CONTROL_ABORT)
        if attributes & ATTR_TRANSACTIONAL and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self.ongoing[pid] = first_offset
        entry.append_batch(first_seq, last_seq, first_offset, last_offset)
        return None

    # ---- snapshots ---------------------------------------------------------------------------

    def take_snapshot(self, offset: int, *, sync: bool) -> str:
        """Write the state as of log end ``offset``; with ``sync``, make it
        durable before returning (else the caller fsyncs the returned path
        off the append path)."""
        entries = []
        for pid, e in self.producers.items():
            if not e.batches:       # only transaction markers so far
                entries.append(SnapshotEntry(pid, e.epoch, -1, e.last_written_offset, 0,
                                             e.last_timestamp, e.coordinator_epoch,
                                             e.current_txn_first_offset))
                continue
            # Every cached run, oldest first, one entry each (Kafka keeps
            # only the last): a reopened or truncated log must still know
            # each batch a client may retry. Broker nodes restart their
            # workers when the controller moves, and a leader that forgot
            # all but its producers' last run answered a retry of an
            # earlier in-flight batch OUT_OF_ORDER_SEQUENCE_NUMBER, which
            # librdkafka takes as fatal (issue 47 item 6).
            for first_seq, last_seq, first_offset, last_offset in e.batches:
                entries.append(SnapshotEntry(pid, e.epoch, last_seq, last_offset,
                                             last_offset - first_offset, e.last_timestamp,
                                             e.coordinator_epoch, e.current_txn_first_offset))
        path = producer_snapshot.write(self.directory, offset, entries)
        if offset not in self.snapshots:
            self.snapshots.append(offset)
            self.snapshots.sort()
        if sync:
            producer_snapshot.fsync(path)
        return path

    def _restore(self, entries) -> None:
        self.producers.clear()
        self.ongoing.clear()
        for e in entries:
            entry = self.producers.get(e.producer_id)
            if entry is None:
                entry = self.producers[e.producer_id] = ProducerEntry(e.producer_epoch)
            entry.last_written_offset = e.last_offset
            if e.last_sequence >= 0:
                first_seq = e.last_sequence - e.offset_delta
                if first_seq < 0:
                    first_seq += INT32_MAX + 1
                entry.batches.append((first_seq, e.last_sequence, e.last_offset - e.offset_delta,
                                      e.last_offset))
            entry.last_timestamp = e.timestamp
            entry.coordinator_epoch = e.coordinator_epoch
            entry.current_txn_first_offset = e.current_txn_first_offset
            if e.current_txn_first_offset >= 0:
                self.ongoing[e.producer_id] = e.current_txn_first_offset

    def delete_snapshots(self, *, below: int | None = None, above: int | None = None) -> None:
        """Delete the snapshots at offsets < ``below`` and > ``above``."""
        keep = []
        for offset in self.snapshots:
            if (below is not None and offset < below) or (above is not None and offset > above):
                producer_snapshot.delete(self.directory, offset)
            else:
                keep.append(offset)
        self.snapshots = keep

    # ---- loading -----------------------------------------------------------------------------

    def load(self, segments, log_start: int, log_end: int, *, replay_from: int | None = None,
             on_completed: Callable[[CompletedTxn], None] | None = None) -> None:
        """Rebuild the state of a log holding [log_start, log_end) in
        ``segments``: from the newest sound snapshot at or below the log
        end (at or below ``replay_from`` when given), plus the batch headers
        after it. ``on_completed`` sees the transactions completed by the
        markers replayed (the loader rebuilds transaction indexes with it)."""
        self.delete_snapshots(above=log_end)
        start = log_start
        self.producers.clear()
        self.ongoing.clear()
        limit = log_end if replay_from is None else min(replay_from, log_end)
        for offset in list(reversed(self.snapshots)):
            if offset > limit:
                continue
            if offset < log_start:
                break
            try:
                self._restore(producer_snapshot.read(self.directory, offset))
            except CorruptSnapshotError as exc:
                log.warning("%s: producer snapshot %d is not usable (%s); deleting it",
                            self.directory, offset, exc)
                producer_snapshot.delete(self.directory, offset)
                self.snapshots.remove(offset)
                continue
            start = offset
            break
        self.batches_read = self._read_log(segments, start, log_end, on_completed)
        self.evict_before(log_start)

    def _read_log(self, segments, start: int, end: int, on_completed=None) -> int:
        """Record the batches of ``segments`` in [start, end); returns how
        many batch headers were read."""
        read = 0
        for seg in segments:
            if seg.next_offset <= start or seg.base_offset >= end or seg.is_empty:
                continue
            position = 0
            if seg.base_offset < start:
                found = seg.translate_offset(start)
                if found is None:
                    continue
                position = found[2]
            data = seg.mapped()
            if data is None:
                continue
            try:
                rows, walked, _ = producer_batches(data, position)
                read += walked
                for first, last, pid, epoch, seq, ts, attrs, control in rows:
                    if first >= end:
                        break
                    done = self._record(pid, epoch, seq, _last_sequence(seq, last - first), first,
                                        last, ts, attrs, control)
                    if done is not None and on_completed is not None:
                        on_completed(done)
            finally:
                data.close()
        return read

    def evict_before(self, log_start: int) -> None:
        """Forget producers whose last batch is below the log start (deleted by
        retention or DeleteRecords), and the snapshots below it."""
        for pid in [pid for pid, e in self.producers.items()
                    if e.last_written_offset < log_start]:
            del self.producers[pid]
            self.ongoing.pop(pid, None)
        self.delete_snapshots(below=log_start)

    def truncate_and_reload(self, segments, log_start: int, log_end: int) -> None:
        """The log was truncated to ``log_end``: state past it must go."""
        self.load(segments, log_start, log_end)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.delete_snapshots(above=-1)
