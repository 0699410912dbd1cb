"""The partition log: one topic-partition's durable, ordered record batches.

One module of about 960 lines, with reason: append, read, retention,
truncation, DeleteRecords, the local half of tiering and a follower's start
after the remote segments all change the same segment list, offsets and
producer state under one owner, and each keeps the others' invariants
(log start <= high watermark <= log end, the epochs and snapshots at
those offsets); what stands alone is in its own module already (segment,
loader, cleaner, producer state, remote/).

Directory layout (``<data dir>/<topic>-<partition>/``):

    00000000000000000000.log        segments, named by base offset (segment.py)
    00000000000000000000.index      sparse offset index (index.py)
    00000000000000000000.timeindex  sparse time index (index.py)
    00000000000000000000.txnindex   aborted transactions, by marker (txn_index.py)
    partition.checkpoint            log start, recovery point, high watermark,
                                    cleaner checkpoint (checkpoint.py); while a
                                    broker hosts the partition, they go to the
                                    broker's CheckpointFile, and here at close
    leader-epoch-checkpoint         leader epoch -> start offset (leader_epoch.py)
    00000000000000000000.snapshot   producer state as of that offset, written at
                                    each roll and clean close (producer_snapshot.py)
    .kafkalite_cleanshutdown        present from a clean close to the next open
    <base>.swap                     a cleaner swap being committed (swap.py)

Contract
- One owner per PartitionLog: the process (and thread) that owns the
  partition calls every method. The only other thread is the background
  flusher, which fsyncs segments after they roll (they are immutable by
  then) and reports back through futures that the owner polls.
- ``append`` is all or nothing: every batch is validated before any byte is
  written, and an I/O error (disk full, file size limit) rolls the segment
  back and raises KafkaStorageError, leaving the log as it was.
- The log owns its producer state (producer_state.py): a client's append
  (``AppendOrigin.CLIENT``) is checked against it before anything is
  written -- a retried batch is acknowledged with its original offsets and
  not written again -- and every append, whatever its origin, updates it.
- ``housekeeping()`` is the one place periodic work is decided (retention,
  ``flush.ms``, compaction when due); ``maybe_checkpoint()`` writes the
  checkpoint only when it changed. Every owner of a log calls both.
- An append is acknowledged once its bytes are ``write()``-n to the segment
  file (page cache). ``flush.messages`` / ``flush.ms`` add fsync; without
  them data reaches disk when a segment rolls (in the background) or the
  log closes.
- ``read`` returns a FileRegion for ``os.sendfile``; it never copies or
  re-encodes batches.
- Transactions: markers (control batches) are appended by the broker with
  ``allow_control``; an ABORT marker's transaction goes into the active
  segment's transaction index. ``last_stable_offset`` is the high
  watermark held back by the first open transaction; read_committed
  readers read below it and drop the batches ``aborted_transactions``
  names.
"""
from __future__ import annotations

import bisect
import concurrent.futures
import logging
import os
import shutil
import time
from typing import Callable, NamedTuple

from kafkalite._ext.batch_scan import validate_for_append
from kafkalite._ext.log_state import PartitionLogState
from kafkalite.errors import (CorruptRecordError, InvalidRequestError, KafkaStorageError,
                              OffsetOutOfRangeError, RecordListTooLargeError)
from kafkalite.storage import loader
from kafkalite.storage.background import BackgroundThread
from kafkalite.storage.checkpoint import (CheckpointFile, PartitionCheckpoint, fsync_dir,
                                          write_atomically)
from kafkalite.storage import producer_snapshot
from kafkalite.storage.config import LogConfig
from kafkalite.storage.producer_state import AppendOrigin, CompletedTxn, ProducerStateManager
from kafkalite.storage.segment import FileRegion, LogSegment
from kafkalite.storage.txn_index import AbortedTxn, aborted_from

log = logging.getLogger(__name__)

# ListOffsets special timestamps (Kafka's).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3

_flusher = BackgroundThread("kafkalite-flush")


def _wall_clock_ms() -> int:
    return int(time.time() * 1000)


class LogAppendInfo(NamedTuple):
    """What an append did (Kafka's LogAppendInfo)."""
    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int          # -1 for CreateTime topics
    log_start_offset: int
    size_in_bytes: int
    scan: object                  # per-batch detail (AppendScan); None for a duplicate
    duplicate: bool = False       # a retry of batches already in the log: nothing written


_new_tuple = tuple.__new__


class FetchDataInfo(NamedTuple):
    """A read's result: the region to send (None when there is nothing to
    read yet) and the partition's offsets at the time of the read; with
    ``collect_aborted``, the aborted transactions the region may hold."""
    fetch_offset: int
    region: FileRegion | None
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    last_stable_offset: int = -1
    aborted_transactions: list | None = None

    def read(self) -> bytes:
        return self.region.read() if self.region is not None else b""


def parse_topic_partition(directory: str) -> tuple[str, int] | None:
    """("topic", N) from a ``topic-N`` directory name, if it is one."""
    name = os.path.basename(os.path.normpath(directory))
    topic, dash, num = name.rpartition("-")
    if dash and topic and num.isdigit():
        return topic, int(num)
    return None


class PartitionLog(PartitionLogState):
    def __init__(self, directory: str, config: LogConfig, state: loader.LoadedLog,
                 clock: Callable[[], int]):
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments: list[LogSegment] = state.segments
        self._bases = [s.base_offset for s in self._segments]
        self._log_start = state.log_start_offset
        self._log_end = state.log_end_offset
        self._recovery_point = state.recovery_point
        self._high_watermark = state.high_watermark
        self.cleaner_checkpoint = state.cleaner_checkpoint
        self.leader_epoch_cache = state.leader_epoch_cache
        self._leader_epoch = max(self.leader_epoch_cache.latest_epoch, 0)
        self.had_clean_shutdown = state.had_clean_shutdown
        self.recovered_segments = state.recovered_segments
        self.truncated_bytes = state.truncated_bytes
        self.damage: list[str] = list(state.damage or ())   # what recovery dropped
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._pending_flushes: list[tuple[concurrent.futures.Future, int]] = []
        self._checkpointed = state.checkpoint      # what partition.checkpoint holds now
        self._checkpoints = None                   # the owner's CheckpointFile, if any
        self._closed = False
        self.name = "%s-%d" % tp if (tp := parse_topic_partition(directory)) else directory
        self.remote = None          # a tiered log's RemoteLog (remote/remote_log.py)
        self.producer_state = ProducerStateManager(directory)
        rebuild_from = state.txn_index_rebuild_from
        self.producer_state.load(
            self._segments, self._log_start, self._log_end, replay_from=rebuild_from,
            on_completed=None if rebuild_from is None else (
                lambda txn: self._reindex_aborted(txn, rebuild_from)))

    @classmethod
    def open(cls, directory: str, config: LogConfig | None = None, *,
             clock: Callable[[], int] | None = None,
             checkpoints: CheckpointFile | None = None,
             remote_storage=None, remote_leadership: bool = False,
             flush_recovered: bool = True) -> "PartitionLog":
        """Open (creating if needed) the partition in ``directory``, running
        recovery if it was not closed cleanly. ``checkpoints``: the owner's
        CheckpointFile, where the checkpoint is kept while the log is open
        (default: partition.checkpoint, written at every change).
        ``remote_storage``: the broker's RemoteStorageManager; the log is
        tiered when it is given and ``remote.storage.enable`` is true.
        ``remote_leadership``: the owner will say whether this replica leads
        (``remote.lead``/``remote.follow``), and the remote log metadata is
        then the one the replicas share in the store. ``flush_recovered``: loader.load's."""
        config = config or LogConfig()
        clock = clock or _wall_clock_ms
        remote = None
        if remote_storage is not None and config.remote_storage_enable:
            from kafkalite.storage.remote.remote_log import RemoteLog
            os.makedirs(directory, exist_ok=True)
            name = "%s-%d" % tp if (tp := parse_topic_partition(directory)) else directory
            remote = RemoteLog(directory, name, remote_storage, clock,
                               replicated=remote_leadership)
        span = None
        if remote is not None and remote.log_start_offset is not None:
            span = (remote.log_start_offset, remote.highest_offset)
        state = loader.load(directory, config, checkpoints, span, flush_recovered)
        plog = cls(directory, config, state, clock)
        plog.remote = remote
        plog._checkpoints = checkpoints
        plog.maybe_checkpoint()
        return plog

    # ---- state --------------------------------------------------------------------------

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_start_offset(self) -> int:
        return self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._log_end

    @property
    def local_log_start_offset(self) -> int:
        """The first offset in a local segment (KIP-405's earliest-local):
        the log start offset, unless the log is tiered and the segments
        below it are only remote."""
        return max(self._log_start, self._segments[0].base_offset)

    @property
    def highest_remote_offset(self) -> int:
        """The last offset copied to remote storage (KIP-1005's latest-tiered), -1 for none."""
        return -1 if self.remote is None else self.remote.highest_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        if not self._log_start <= offset <= self._log_end:
            raise ValueError(f"high watermark {offset} outside [{self._log_start}, "
                             f"{self._log_end}] for {self.name}")
        self._high_watermark = offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, held back to the first offset of the
        oldest open transaction. read_committed consumers read below it."""
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self._high_watermark
        return hw if first_unstable is None else min(hw, first_unstable)

    def fetch_offsets(self) -> tuple[int, int, int] | None:
        """(high watermark, last stable offset, log start offset) in one
        call, as the properties give them, for the leader states after
        every append; None when the log is closed."""
        if self._closed:
            return None
        first_unstable = self.producer_state.first_unstable_offset()
        hw = self._high_watermark
        return (hw, hw if first_unstable is None else min(hw, first_unstable), self._log_start)

    def raise_high_watermark(self, offset: int) -> bool:
        """Move the high watermark up to ``offset`` (as the setter checks
        it) if that is higher; whether it moved."""
        if offset <= self._high_watermark:
            return False
        if not self._log_start <= offset <= self._log_end:
            raise ValueError(f"high watermark {offset} outside [{self._log_start}, "
                             f"{self._log_end}] for {self.name}")
        self._high_watermark = offset
        return True

    @property
    def leader_epoch(self) -> int:
        """The epoch stamped on batches appended by this log's leader."""
        return self._leader_epoch

    @leader_epoch.setter
    def leader_epoch(self, epoch: int) -> None:
        if epoch < self.leader_epoch_cache.latest_epoch:
            raise ValueError(f"leader epoch {epoch} is older than {self.name}'s latest "
                             f"{self.leader_epoch_cache.latest_epoch}")
        self._leader_epoch = epoch

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def max_timestamp(self) -> int:
        return max(s.max_timestamp for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise KafkaStorageError(f"log {self.name} is closed")

    # ---- main write interface --------------------------------------------------------------

    def append(self, records, *, origin: AppendOrigin = AppendOrigin.CLIENT,
               leader_epoch: int | None = None, allow_control: bool = False) -> LogAppendInfo:
        """Append one or more record batches as the leader: validate them,
        check a client's against the producer state, assign offsets from the
        log end, stamp the leader epoch (and the append time for
        LogAppendTime topics), write, index, update the producer state.

        ``records`` may be any bytes-like object; a writable one is patched
        in place, anything else is copied once. A retry of batches already
        in the log returns their original offsets with ``duplicate`` set
        and writes nothing. ``allow_control`` is for transaction markers
        written by the broker itself.
        """
        # The whole path runs once per Produce partition, most often for a
        # batch of one record (issue 46): its common case makes no call it
        # can do without (the checks below are _check_open's and
        # _poll_flushes' own, a bytearray needs no _writable probe).
        if self._closed:
            self._check_open()
        if self._pending_flushes:
            self._poll_flushes()
        # a writable view (a Produce request's records, sliced from its frame) is patched as is
        kind = type(records)
        buf = (records if kind is bytearray or (kind is memoryview and not records.readonly)
               or _writable(records) else bytearray(records))
        epoch = self._leader_epoch if leader_epoch is None else leader_epoch
        now = self._clock()
        cfg = self.config
        append_time = now if cfg.log_append_time else -1
        scan = validate_for_append(
            buf, next_offset=self._log_end, leader_epoch=epoch,
            max_batch_bytes=cfg.max_message_bytes, require_keys=cfg.compact,
            log_append_time=append_time, allow_control=allow_control)
        if scan.producer_batch_count and origin is AppendOrigin.CLIENT:
            original = self.producer_state.check(scan)
            if original is not None:
                return LogAppendInfo(original[0], original[1], 0, 0, -1, -1, -1,
                                     self._log_start, 0, None, True)
        if allow_control:
            self.producer_state.check_marker(scan)
        if epoch > self.leader_epoch_cache.latest_epoch:
            # Before the write: recovery checks batches against the cache.
            self.leader_epoch_cache.assign(epoch, scan.first_offset)
            self._leader_epoch = epoch
        return self._write(buf, scan, now, append_time)

    def start_transaction_verification(self, producer_id: int, base_sequence: int, epoch: int,
                                       supports_epoch_bump: bool) -> None:
        """The leader asks the transaction coordinator about this producer's
        first transactional write here (Kafka's
        ``maybeStartTransactionVerification``); until that write is in, a
        client's appends of the producer are held to what the verification
        saw (producer_state.py: above its lowest sequence, or -- transactions
        v2, ``supports_epoch_bump`` -- from anything but sequence 0 with no
        batches here: OUT_OF_ORDER_SEQUENCE_NUMBER)."""
        self.producer_state.start_verification(producer_id, base_sequence, epoch,
                                                supports_epoch_bump, self._clock())

    def append_as_follower(self, records, max_leader_epoch: int | None = None) -> LogAppendInfo:
        """Append batches fetched from the leader, keeping their offsets and
        leader epochs (which must follow on from this log's end); the
        producer state follows them unchecked (``AppendOrigin.REPLICATION``).
        ``max_leader_epoch``: refuse (CorruptRecordError, nothing written)
        batches written under a newer leader epoch than that."""
        self._check_open()
        self._poll_flushes()
        # read-only bytes are fine: nothing is patched (no copy of the fetch)
        buf = records
        scan = validate_for_append(
            buf, next_offset=self._log_end, max_batch_bytes=max(self.config.max_message_bytes,
                                                                len(buf)),
            assign_offsets=False, allow_control=True, deep=False)
        epochs = scan.leader_epochs.tolist()
        if max_leader_epoch is not None and max(epochs) > max_leader_epoch:
            raise CorruptRecordError(
                f"{self.name}: a batch of leader epoch {max(epochs)} among those read at "
                f"epoch {max_leader_epoch}")
        starts, last = [], self.leader_epoch_cache.latest_epoch
        for epoch, base in zip(epochs, scan.base_offsets.tolist()):
            if epoch > last:
                starts.append((epoch, base))
                last = epoch
        self.leader_epoch_cache.assign_all(starts)  # before the write, as in append
        return self._write(buf, scan, self._clock())

    def _write(self, buf, scan, now: int, append_time: int | None = None) -> LogAppendInfo:
        """Write ``scan``'s validated batches; ``append_time``: what
        LogAppendInfo reports (-1 for CreateTime; None: from the config)."""
        cfg = self.config
        size, last_offset = scan.size_in_bytes, scan.last_offset
        if size > cfg.segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes to {self.name} is larger than "
                f"segment.bytes ({cfg.segment_bytes})")
        seg = self._segments[-1]
        if seg.should_roll(cfg, size, last_offset, scan.max_timestamp, now):
            self.roll()
            seg = self._segments[-1]
        seg.append(buf, scan)
        self._log_end = last_offset + 1
        if scan.producer_batch_count:
            for txn in self.producer_state.update(scan):
                if txn.aborted:
                    self._index_aborted(txn, seg)
        self._unflushed_messages += scan.record_count
        if (self._unflushed_messages >= cfg.flush_messages
                or now - self._last_flush_ms >= cfg.flush_ms):
            self.flush()
        # positional: the fields in LogAppendInfo's order
        if append_time is None:
            append_time = now if cfg.log_append_time else -1
        # every field in LogAppendInfo's order, made as a tuple: its generated
        # __new__ is a Python call of its own, on the path of every append
        return _new_tuple(LogAppendInfo, (
            scan.first_offset, last_offset, scan.record_count, scan.batch_count,
            scan.max_timestamp, scan.offset_of_max_timestamp,
            append_time, self._log_start, size, scan, False))

    def _index_aborted(self, txn: CompletedTxn, segment: LogSegment) -> None:
        """Record an aborted transaction in the index of the segment holding
        its marker, with the LSO as of its end (Kafka's: the first offset
        of the oldest other open transaction, or just past the marker)."""
        first_unstable = self.producer_state.first_unstable_offset()
        lso = txn.last_offset + 1 if first_unstable is None else first_unstable
        segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                            lso))

    def _reindex_aborted(self, txn: CompletedTxn, rebuild_from: int) -> None:
        """Loading after recovery: the markers replayed at or above
        ``rebuild_from`` refill the transaction indexes the loader reset
        (and only those: the others were found complete)."""
        if txn.aborted and txn.last_offset >= rebuild_from:
            segment = self._segments[self._segment_index(txn.last_offset)]
            if not segment.txn_index.has_entry_ending_at(txn.last_offset):
                self._index_aborted(txn, segment)

    def roll(self) -> LogSegment:
        """Start a new active segment at the log end (no-op if the active one
        is empty), with a producer-state snapshot at that offset. The old
        segment and the snapshot are fsynced in the background; when that
        completes the recovery point moves up to the new segment."""
        self._check_open()
        old = self.active_segment
        if old.is_empty and old.base_offset == self._log_end:
            return old
        old.on_become_inactive()
        new = LogSegment(self.directory, self._log_end, self.config, create=True)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        snapshot = self.producer_state.take_snapshot(new.base_offset, sync=False)
        future = _flusher.submit(_flush_rolled, old, snapshot)
        self._pending_flushes.append((future, new.base_offset))
        return new

    def _poll_flushes(self, wait: bool = False) -> None:
        moved = False
        while self._pending_flushes:
            future, offset = self._pending_flushes[0]
            if not wait and not future.done():
                break
            self._pending_flushes.pop(0)
            future.result()  # a failed fsync surfaces as KafkaStorageError here
            if offset > self._recovery_point:
                self._recovery_point = offset
                moved = True
        if moved:
            self.checkpoint()

    def flush(self) -> None:
        """fsync everything appended so far; the recovery point becomes the log end."""
        self._check_open()
        self._poll_flushes(wait=True)
        for seg in self._segments:
            if seg.next_offset > self._recovery_point or seg is self.active_segment:
                seg.flush()
        self._recovery_point = self._log_end
        self._unflushed_messages = 0
        self._last_flush_ms = self._clock()

    def maybe_flush(self) -> None:
        """Apply ``flush.ms`` when no appends arrive; owners call it periodically."""
        self._poll_flushes()
        if self._unflushed_messages and (
                self._clock() - self._last_flush_ms >= self.config.flush_ms):
            self.flush()

    def checkpoint(self, durable: bool = False) -> None:
        """Persist log start, recovery point, high watermark and cleaner
        checkpoint: to the owner's CheckpointFile if it has one (durable when
        that is next written), else -- and with ``durable`` -- to
        partition.checkpoint at once."""
        state = PartitionCheckpoint(self._log_start, self._recovery_point, self._high_watermark,
                                    self.cleaner_checkpoint)
        if self._checkpoints is not None:
            self._checkpoints.write(self.directory, state)
        if self._checkpoints is None or durable:
            state.write(self.directory)
        self._checkpointed = state

    def take_checkpoint(self) -> PartitionCheckpoint | None:
        """For an owner that writes partition.checkpoint off its own thread:
        the state to write if it changed since the last one taken (counted
        as written from now on), else None. The owner writes them with
        ``PartitionCheckpoint.write`` in the order taken; a crash before a
        write only leaves an older checkpoint, which recovery accepts."""
        state = PartitionCheckpoint(self._log_start, self._recovery_point,
                                    self._high_watermark, self.cleaner_checkpoint)
        if state == self._checkpointed or self._checkpoints is not None:
            return None
        self._checkpointed = state
        return state

    def maybe_checkpoint(self) -> bool:
        """``checkpoint()`` if anything in it changed since it was last
        written (an idle partition costs no I/O); returns whether it wrote."""
        if self._checkpointed != PartitionCheckpoint(self._log_start, self._recovery_point,
                                                     self._high_watermark, self.cleaner_checkpoint):
            self.checkpoint()
            return True
        return False

    def housekeeping(self) -> None:
        """The periodic work of a log, decided here for every owner:
        retention, ``flush.ms``, compaction once the cleanable ratio
        reaches ``min.cleanable.dirty.ratio`` (``cleanup.policy=compact``),
        and dropping transaction verifications whose write never came."""
        self._check_open()
        self.delete_old_segments()
        self.maybe_flush()
        self.producer_state.expire_verifications(self._clock())
        # The active segment is never cleaned: with only that one there is
        # nothing to weigh, and the cleaner (with numpy) stays unimported.
        if self.config.compact and len(self._segments) > 1:
            from kafkalite.storage.cleaner import LogCleaner
            if LogCleaner(self).cleanable_ratio() >= self.config.min_cleanable_dirty_ratio:
                self.compact()

    # ---- main read interface --------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True, collect_aborted: bool = False,
             below_lso: bool = False) -> FetchDataInfo:
        """Read from ``offset`` up to ``max_bytes`` (the first batch whole when
        larger, with ``min_one_message``), never past ``max_offset`` (the high
        watermark for consumers), nor past the LSO with ``below_lso`` (for
        read_committed ones: the LSO found once, not again for the answer).
        With ``collect_aborted``, also the aborted transactions the region
        may hold (a superset: those overlapping [offset, end of its segment)).
        OffsetOutOfRangeError outside [log start, log end]."""
        self._check_open()
        if offset < self._log_start or offset > self._log_end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.name}: the log holds "
                f"[{self._log_start}, {self._log_end})")
        if max_bytes < 0:
            raise InvalidRequestError(f"max_bytes must be >= 0, not {max_bytes}")
        lso = self.last_stable_offset
        if below_lso:
            max_offset = lso if max_offset is None else min(max_offset, lso)
        limit = self._log_end if max_offset is None else min(max_offset, self._log_end)
        if offset >= limit:
            return self._nothing_read(offset, lso, collect_aborted)
        if self.remote is not None and offset < self.local_log_start_offset:
            remote = self._read_remote(offset, max_bytes, limit, min_one_message,
                                       collect_aborted)
            if remote is not None:
                return remote._replace(log_start_offset=self._log_start,
                                       high_watermark=self._high_watermark,
                                       log_end_offset=self._log_end, last_stable_offset=lso)
        limit_index = self._segment_index(limit) if limit < self._log_end else None
        limit_position = None
        if limit_index is not None:
            found = self._segments[limit_index].translate_offset(limit)
            limit_position = found[2] if found else None
        i = self._segment_index(offset)
        while i < len(self._segments):
            max_position = limit_position if i == limit_index else None
            region = self._segments[i].read(offset, max_bytes, max_position, min_one_message)
            if region is not None:
                aborted = None
                if collect_aborted:
                    upper = min(limit, self._segments[i].next_offset)
                    aborted = aborted_from(self._segments, i, offset, upper)
                return FetchDataInfo(offset, region, self._log_start, self._high_watermark,
                                     self._log_end, lso, aborted)
            if i == limit_index:
                break
            i += 1  # offset is past this segment's data (a compacted gap)
        return self._nothing_read(offset, lso, collect_aborted)

    def _nothing_read(self, offset: int, lso: int, collect_aborted: bool) -> FetchDataInfo:
        return FetchDataInfo(offset, None, self._log_start, self._high_watermark, self._log_end,
                             lso, [] if collect_aborted else None)

    def _read_remote(self, offset: int, max_bytes: int, limit: int, min_one_message: bool,
                     collect_aborted: bool) -> FetchDataInfo | None:
        """A read below the local log start, from the remote segment holding
        ``offset`` (whole batches, all below the LSO: only those are copied);
        None when no remote segment holds it."""
        seg = self.remote.segment_for(offset)
        if seg is None:
            return None
        region = seg.read(offset, max_bytes, None, min_one_message)
        if region is None:
            return None
        aborted = None
        if collect_aborted:
            upper = min(limit, seg.next_offset)
            aborted, complete = [], False
            for _, remote_seg in self.remote.segments_from(offset):
                entries, complete = remote_seg.txn_index.collect(offset, upper)
                aborted += entries
                if complete:
                    break
            if not complete:
                aborted += self.aborted_transactions(self.local_log_start_offset, upper)
        return FetchDataInfo(offset, region, self._log_start, self._high_watermark,
                             self._log_end, -1, aborted)

    def aborted_transactions(self, start: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions a read of [start, upper_bound) may meet:
        those ending at or after ``start`` and beginning below
        ``upper_bound``, from the transaction indexes of the segment holding
        ``start`` onwards, until an entry proves the rest cannot qualify
        (its LSO at or past ``upper_bound``: every transaction starting
        below had ended). A transaction is indexed in the segment of its
        ABORT marker, which may lie any number of segments past
        ``upper_bound``: the search cannot stop at a segment boundary."""
        self._check_open()
        return aborted_from(self._segments, self._segment_index(start), start, upper_bound)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """Kafka's ListOffsets: (offset, timestamp) of the first record whose
        timestamp is >= ``timestamp``, or None. -2 gives the log start, -1 the
        log end (timestamp -1 for both), -3 the record with the largest
        timestamp."""
        self._check_open()
        if timestamp == EARLIEST_TIMESTAMP:
            return self._log_start, -1
        if timestamp == LATEST_TIMESTAMP:
            return self._log_end, -1
        if timestamp == MAX_TIMESTAMP:
            best = max(self._segments, key=lambda s: s.max_timestamp).max_timestamp
            if self.remote is not None:
                # the remote segments no longer local count too
                best = max([best] + [m.max_timestamp for m in self.remote.metadata.segments
                                     if m.end_offset < self.local_log_start_offset])
            if best < 0:
                return None
            timestamp = best
        elif timestamp < 0:
            raise InvalidRequestError(f"invalid timestamp {timestamp} for ListOffsets")
        if self.remote is not None:
            found = self.remote.offset_for_timestamp(timestamp, self._log_start,
                                                     self.local_log_start_offset)
            if found is not None:
                return found
        for seg in self._segments:
            if seg.max_timestamp >= timestamp and seg.next_offset > self._log_start:
                found = seg.find_offset_by_timestamp(timestamp, self._log_start)
                if found is not None:
                    return found
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The leader epoch ``offset`` was written in, -1 when unknown."""
        return self.leader_epoch_cache.epoch_for(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset) -- see LeaderEpochFileCache."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._log_end)

    # ---- retention and truncation -----------------------------------------------------------

    def delete_old_segments(self) -> int:
        """Apply retention: delete closed segments that are past
        ``retention.ms``, beyond ``retention.bytes``, or wholly below the log
        start offset. The active segment is never deleted. Returns how many."""
        self._check_open()
        if self.remote is not None:
            return self._delete_tiered_segments()
        closed = self._segments[:-1]
        doomed = 0
        # below the log start offset (after delete_records)
        while doomed < len(closed) and self._segments[doomed + 1].base_offset <= self._log_start:
            doomed += 1
        if self.config.delete:
            now = self._clock()
            if self.config.retention_ms >= 0:
                while (doomed < len(closed)
                       and now - closed[doomed].largest_timestamp > self.config.retention_ms):
                    doomed += 1
            if self.config.retention_bytes >= 0:
                excess = self.size_in_bytes - self.config.retention_bytes
                excess -= sum(s.size for s in closed[:doomed])
                while doomed < len(closed) and excess >= closed[doomed].size:
                    excess -= closed[doomed].size
                    doomed += 1
        if doomed:
            self._delete_segments(doomed)
        return doomed

    def _delete_segments(self, count: int, move_log_start: bool = True) -> None:
        self._poll_flushes(wait=True)
        victims = self._segments[:count]
        self._segments = self._segments[count:]
        self._bases = self._bases[count:]
        if move_log_start:
            new_start = max(self._log_start, self._segments[0].base_offset)
            self._set_log_start(new_start)
        else:
            # a tiered log: the snapshots went to the remote store with their segments
            self.producer_state.delete_snapshots(below=self.local_log_start_offset)
        for seg in victims:
            seg.delete()
        log.info("%s: deleted %d segment(s); log start offset is now %d, local log start "
                 "offset %d", self.name, count, self._log_start, self.local_log_start_offset)

    # ---- tiered storage (KIP-405) -----------------------------------------------------------

    def enable_remote_storage(self, remote_storage, remote_leadership: bool = False) -> None:
        """``remote.storage.enable`` turned on for an open log: tier it from now on."""
        if self.remote is None and self.config.remote_storage_enable:
            from kafkalite.storage.remote.remote_log import RemoteLog
            self.remote = RemoteLog(self.directory, self.name, remote_storage, self._clock,
                                    replicated=remote_leadership)

    def copy_to_remote(self, wait: bool = True, start: bool = True) -> int:
        """The leader's copy of its rolled segments to remote storage (see
        remote/remote_log.py): all of them before returning, or, without
        ``wait`` (the broker's housekeeping), on the copier thread, each
        call finishing the copies done and starting the next ones (none
        without ``start``: a replica that no longer leads only finishes
        what it started). Returns how many copies finished."""
        self._check_open()
        if self.remote is None:
            return 0
        return self.remote.copy_segments(self._segments[:-1], self.last_stable_offset,
                                         self.leader_epoch_cache.entries, wait=wait,
                                         start=start)

    def _delete_tiered_segments(self) -> int:
        """A tiered log's retention: local segments go once copied and past
        ``local.retention.*`` (or below the log start), without moving the
        log start offset; remote ones by the total ``retention.*`` or below
        the log start, which then moves to the first one left. On a
        replica, "copied" is what the shared remote log metadata says (a
        follower's is its leader's): never a segment only this replica
        thinks copied."""
        closed = self._segments[:-1]
        highest = self.remote.retention_highest_offset
        doomed = 0
        while doomed < len(closed) and self._segments[doomed + 1].base_offset <= self._log_start:
            doomed += 1
        cfg = self.config
        if cfg.delete:
            now = self._clock()
            local_ms, local_bytes = cfg.effective_local_retention_ms, cfg.effective_local_retention_bytes
            if local_ms >= 0:
                while (doomed < len(closed) and closed[doomed].next_offset - 1 <= highest
                       and now - closed[doomed].largest_timestamp > local_ms):
                    doomed += 1
            if local_bytes >= 0:
                excess = self.size_in_bytes - local_bytes - sum(s.size for s in closed[:doomed])
                while (doomed < len(closed) and closed[doomed].next_offset - 1 <= highest
                       and excess >= closed[doomed].size):
                    excess -= closed[doomed].size
                    doomed += 1
        if doomed:
            self._delete_segments(doomed, move_log_start=False)
        expired = self.remote.expire(
            self._log_start, self.local_log_start_offset, self.size_in_bytes,
            cfg.retention_ms if cfg.delete else -1, cfg.retention_bytes if cfg.delete else -1)
        if expired:
            remote_start = self.remote.log_start_offset
            local_start = self.local_log_start_offset
            new_start = local_start if remote_start is None else min(remote_start, local_start)
            if new_start > self._log_start:
                self._set_log_start(new_start)
            log.info("%s: deleted %d remote segment(s); log start offset is now %d",
                     self.name, expired, self._log_start)
        return doomed + expired

    def _set_log_start(self, offset: int) -> None:
        self._log_start = offset
        self._high_watermark = max(self._high_watermark, offset)
        self._recovery_point = max(self._recovery_point, offset)
        self.cleaner_checkpoint = max(self.cleaner_checkpoint, offset)
        self.leader_epoch_cache.truncate_from_start(offset)
        self.producer_state.evict_before(offset)
        self.checkpoint()

    def delete_records(self, offset: int) -> int:
        """DeleteRecords (a leader's, or a follower taking its leader's log
        start): move the log start offset up to ``offset`` (at most the high
        watermark) and drop segments wholly below it; an offset at or below
        the log start changes nothing. Returns the log start offset.

        The new log start is made durable at once (partition.checkpoint,
        fsynced) rather than with the broker's next checkpoint write: the
        records it hides may still sit in a segment, and a crash must not
        bring them back."""
        self._check_open()
        if offset > self._high_watermark or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records of {self.name} before {offset}: the high watermark "
                f"is {self._high_watermark}")
        if offset > self._log_start:
            self._set_log_start(offset)
            self.delete_old_segments()
            self.checkpoint(durable=True)
        return self._log_start

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch at or above ``offset`` (a follower discarding a
        diverged tail); the log end becomes ``offset``. Returns whether
        anything was removed."""
        self._check_open()
        if offset >= self._log_end:
            return False
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to a negative offset")
        self._poll_flushes(wait=True)
        if offset < self._log_start:
            self.truncate_fully_and_start_at(offset)
            return True
        keep = max(bisect.bisect_left(self._bases, offset), 1)
        for seg in self._segments[keep:]:
            seg.close()
            seg.delete()
        self._segments = self._segments[:keep]
        self._bases = self._bases[:keep]
        self.active_segment.truncate_to(offset)
        if self.active_segment.next_offset < offset:
            # Compaction left a gap below ``offset``: start an empty segment
            # there, so the log end is ``offset`` now and after a reopen.
            self._log_end = offset
            self.roll()
        # an epoch that started at ``offset`` began in the tail just removed
        self.leader_epoch_cache.truncate_from_end(offset, keep_at_end=False)
        self._after_truncation(offset)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at ``offset``."""
        self._check_open()
        self._poll_flushes(wait=True)
        for seg in self._segments:
            seg.close()
            seg.delete()
        new = LogSegment(self.directory, offset, self.config, create=True)
        self._segments, self._bases = [new], [offset]
        self._log_start = offset
        self.leader_epoch_cache.clear()
        self._after_truncation(offset)

    def start_after_remote_segment(self, state, leader_log_start: int) -> None:
        """A tiered follower whose log ends below its leader's local log
        start (KIP-405; Kafka's buildRemoteLogAuxState): empty the local log
        and start it at ``state.next_offset``, the offset after a remote
        segment (a remote.RemoteAuxState), with the log start offset at the
        leader's (the records between are remote, read through the remote
        log metadata), the leader epochs and the producer state of that
        segment's end. The follower then fetches from there: the remote
        history is never brought back onto the local disk."""
        self._check_open()
        if self.remote is None:
            raise KafkaStorageError(f"{self.name} is not tiered")
        self._poll_flushes(wait=True)
        self.remote.take_aux_state(state)
        start = state.next_offset
        for seg in self._segments:
            seg.close()
            seg.delete()
        new = LogSegment(self.directory, start, self.config, create=True)
        self._segments, self._bases = [new], [start]
        if leader_log_start < 0:        # not said: where the remote segments start
            remote_start = self.remote.log_start_offset
            leader_log_start = start if remote_start is None else remote_start
        self._log_start = min(leader_log_start, start)
        self._recovery_point = start
        self.leader_epoch_cache.clear()
        self.leader_epoch_cache.assign_all(e for e in state.leader_epochs if e[1] < start)
        self.producer_state.clear()
        if state.producer_snapshot is not None:
            path = producer_snapshot.snapshot_path(self.directory, start)
            write_atomically(path, state.producer_snapshot)
            self.producer_state.snapshots = [start]
        self._after_truncation(start)
        log.info("%s: starts at %d after the remote segments (log start offset %d, leader "
                 "epochs %s, %d producer(s))", self.name, start, self._log_start,
                 self.leader_epoch_cache.entries, len(self.producer_state.producers))

    def _after_truncation(self, log_end: int) -> None:
        self._log_end = log_end
        self._high_watermark = min(max(self._high_watermark, self._log_start), log_end)
        self._recovery_point = min(self._recovery_point, log_end)
        self.cleaner_checkpoint = min(max(self.cleaner_checkpoint, self._log_start), log_end)
        self.leader_epoch_cache.truncate_from_end(log_end)
        # state past the new end must go: reload from a snapshot at or below it
        self.producer_state.truncate_and_reload(self._segments, self._log_start, log_end)
        # durable now: data appended after this must not pass for recovered
        self.checkpoint(durable=True)

    # ---- compaction -----------------------------------------------------------------------

    def compact(self, **cleaner_options):
        """Run the log cleaner once over this log (see cleaner.LogCleaner)."""
        from kafkalite.storage.cleaner import LogCleaner
        self._check_open()
        self._poll_flushes(wait=True)
        return LogCleaner(self, **cleaner_options).clean()

    def _replace_segments(self, start: int, end: int, replacement: LogSegment) -> None:
        """Cleaner hook: the segments with base in [start, end) were swapped
        on disk for ``replacement``; update the in-memory list to match."""
        first = self._bases.index(start)
        last = bisect.bisect_left(self._bases, end)
        for seg in self._segments[first:last]:
            seg.close()
        self._segments[first:last] = [replacement]
        self._bases[first:last] = [start]

    # ---- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        """Flush everything, snapshot the producer state at the log end,
        checkpoint, and mark the shutdown clean (the next open then reads
        no batch headers for producer state)."""
        if self._closed:
            return
        self.flush()
        self.producer_state.take_snapshot(self._log_end, sync=True)
        self.checkpoint(durable=True)       # before the marker, which vouches for it
        write_atomically(os.path.join(self.directory, loader.CLEAN_SHUTDOWN_MARKER), b"")
        for seg in self._segments:
            seg.close()
        if self.remote is not None:
            self.remote.close()
        self._closed = True

    def delete(self, remote: bool = True) -> None:
        """Remove the partition's directory (topic deletion, or a replica
        moved away), and with ``remote`` its remote segments when it is
        tiered (without: a replica that goes leaves them to the others)."""
        self._poll_flushes(wait=True)
        if self.remote is not None:
            if remote:
                self.remote.delete_all()
            else:
                self.remote.close()
        for seg in self._segments:
            seg.close()
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"PartitionLog({self.name}, start={self._log_start}, end={self._log_end}, "
                f"segments={len(self._segments)})")


def _flush_rolled(segment: LogSegment, snapshot: str) -> None:
    """The background flusher's job after a roll: the old segment, the
    producer snapshot taken at the roll, and the directory entries of both
    new files."""
    segment.flush()
    try:
        producer_snapshot.fsync(snapshot)
    except FileNotFoundError:
        pass          # deleted meanwhile (retention, truncation): nothing to keep
    fsync_dir(segment.directory)


def _writable(obj) -> bool:
    try:
        return not memoryview(obj).readonly
    except TypeError:
        return False
