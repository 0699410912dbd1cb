"""Log compaction (``cleanup.policy=compact``): keep the latest record per key.

One cleaning pass over a PartitionLog, as Kafka's LogCleaner does it:

1. First uncleanable offset U: the lowest of the active segment's base, the
   base of the first segment holding records younger than
   ``min.compaction.lag.ms``, and the high watermark and the first offset
   of an open transaction (each rounded down to a segment boundary). Only
   whole segments below U are rewritten.
2. Offset map over the dirty section [cleaner checkpoint, U): key (its
   XXH3-128 hash) -> latest offset, built segment by segment; if the next
   segment would overflow the map's memory budget, U moves down to it.
3. Every segment below U is rewritten, in groups whose total size fits
   ``segment.bytes``: a record survives if no later record has its key;
   keyless records are dropped. A surviving tombstone (null value) is kept
   until the batch's delete horizon: the first cleaning that keeps it stamps
   the batch with horizon = now + ``delete.retention.ms`` (Kafka's KIP-534
   attribute bit), and a cleaning after the horizon drops it. The batches
   of aborted transactions are dropped whole (and never enter the offset
   map, so an aborted write cannot shadow a committed one). A transaction
   marker stays while a record of its transaction does; once none is left
   (aborted, or every record superseded) it goes the way of a tombstone:
   stamped with a delete horizon, dropped by a cleaning after it, and its
   aborted-transaction index entry with it (Kafka's cleaner, KIP-534). Batches that keep every
   record are copied byte for byte; others are re-encoded by
   ``filter_batch``, which preserves offsets and producer fields.
4. Each group's output is written as ``.cleaned`` files, fsynced, and
   swapped in atomically (swap.py); then the cleaner checkpoint becomes U.

Who may call: PartitionLog.compact, on the log's owner thread.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field

import numpy as np

from kafkalite._ext.batch_scan import batch_header, validate_for_append
from kafkalite._ext.offset_map import OffsetMap
from kafkalite.record import decode_columns, filter_batch
from kafkalite.storage.faults import crash_point
from kafkalite.storage.segment import CLEANED_SUFFIX, SEGMENT_SUFFIXES, LogSegment, segment_path
from kafkalite.storage.swap import commit_swap

log = logging.getLogger(__name__)

_ATTR_TRANSACTIONAL = 0x10
_ATTR_CONTROL = 0x20
_ATTR_DELETE_HORIZON = 0x40
_ONE_RECORD = np.ones(1, dtype=bool)   # a marker's keep mask
DEFAULT_DEDUPE_BUFFER_BYTES = 128 * 1024 * 1024   # Kafka's log.cleaner.dedupe.buffer.size
_READ_CHUNK = 8 * 1024 * 1024
_WRITE_CHUNK = 1024 * 1024


@dataclass
class CleanerStats:
    first_dirty_offset: int = 0
    end_offset: int = 0               # U: first offset not cleaned
    segments_cleaned: int = 0
    segments_written: int = 0
    map_entries: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_removed: int = 0
    markers_removed: int = 0          # transaction markers past their delete horizon
    batches_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    elapsed_seconds: float = 0.0
    skipped_reason: str | None = None
    groups: list = field(default_factory=list)


class LogCleaner:
    def __init__(self, plog, *, dedupe_buffer_bytes: int = DEFAULT_DEDUPE_BUFFER_BYTES,
                 max_map_entries: int | None = None):
        self.log = plog
        self.config = plog.config
        self.max_map_entries = max_map_entries or max(
            1, int(dedupe_buffer_bytes / 24 * 0.75))
        self._txn_kept: dict[int, bool] = {}
        self._markers_dropped: set[int] = set()

    # ---- what can be cleaned ------------------------------------------------------------

    def first_uncleanable_offset(self, now: int) -> int:
        """U: see the module docstring. Always a segment base offset."""
        segments = self.log.segments
        bound = segments[-1].base_offset
        lag = self.config.min_compaction_lag_ms
        for seg in segments[:-1]:
            if lag > 0 and seg.max_timestamp > now - lag:
                bound = min(bound, seg.base_offset)
                break
        limit = self.log.high_watermark
        first_unstable = self.log.producer_state.first_unstable_offset()
        if first_unstable is not None:
            limit = min(limit, first_unstable)
        if limit < bound:
            # the last segment boundary at or below the limit
            bound = max((s.base_offset for s in segments if s.base_offset <= limit),
                        default=segments[0].base_offset)
        return bound

    def cleanable_ratio(self, now: int | None = None) -> float:
        """Dirty bytes / all bytes below U (Kafka's min.cleanable.dirty.ratio test)."""
        now = self.log._clock() if now is None else now
        end = self.first_uncleanable_offset(now)
        checkpoint = self.log.cleaner_checkpoint
        clean = dirty = 0
        for seg in self.log.segments:
            if seg.base_offset >= end:
                break
            if seg.next_offset <= checkpoint:
                clean += seg.size
            else:
                dirty += seg.size
        return dirty / (clean + dirty) if clean + dirty else 0.0

    # ---- reading --------------------------------------------------------------------------

    def _chunks(self, seg: LogSegment):
        """(raw bytes, decoded columns) for runs of whole batches of a
        segment; the records of aborted transactions are left out (their
        batches marked in ``batch_skipped``)."""
        fd, size, pos = seg.file.fileno(), seg.size, 0
        while pos < size:
            chunk = os.pread(fd, min(_READ_CHUNK, size - pos), pos)
            first = batch_header(chunk)[0]
            aborted = [(t.producer_id, t.first_offset)
                       for t in self.log.aborted_transactions(first, seg.next_offset)]
            cols = decode_columns(chunk, aborted_transactions=aborted)
            if cols.bytes_consumed == 0:
                whole = batch_header(chunk)[2]
                chunk = os.pread(fd, whole, pos)
                cols = decode_columns(chunk, aborted_transactions=aborted)
            yield chunk, cols
            pos += cols.bytes_consumed

    def _build_map(self, segments, start: int, end: int, stats: CleanerStats) -> tuple[OffsetMap, int]:
        """Map the dirty section; returns the map and the offset it covers up
        to, which is ``end`` unless the map filled up first. Records past a
        full map are still cleaned correctly: they are newer than anything
        mapped for their key, so they are kept."""
        offset_map = OffsetMap(self.max_map_entries)
        for seg in segments:
            if seg.base_offset >= end:
                break
            if seg.next_offset <= start:
                continue
            for _, cols in self._chunks(seg):
                offset_map.put_columns(cols.key_data, cols.key_offsets, cols.key_valid,
                                       cols.offsets)
                if len(offset_map) >= self.max_map_entries and cols.next_offset < end:
                    end = cols.next_offset
                    break
        stats.map_entries = len(offset_map)
        return offset_map, end

    # ---- cleaning -------------------------------------------------------------------------

    def _groups(self, segments, end: int) -> list[list[LogSegment]]:
        groups, current, size = [], [], 0
        for seg in segments:
            if seg.base_offset >= end:
                break
            too_big = size + seg.size > self.config.segment_bytes
            too_far = current and seg.next_offset - current[0].base_offset > 0x7FFFFFFF
            if current and (too_big or too_far):
                groups.append(current)
                current, size = [], 0
            current.append(seg)
            size += seg.size
        if current:
            groups.append(current)
        return groups

    def _clean_chunk(self, chunk: bytes, cols, offset_map: OffsetMap, now: int,
                     stats: CleanerStats, out: list) -> int:
        """Append the surviving batches of a chunk to ``out``; returns their bytes."""
        added = 0
        latest = offset_map.latest_offsets(cols.key_data, cols.key_offsets, cols.key_valid)
        keep = cols.key_valid & (latest <= cols.offsets)
        tombstones = ~cols.value_valid
        starts = cols.batch_record_starts
        n_records = len(cols)
        stats.records_read += n_records
        horizon_if_stamped = now + self.config.delete_retention_ms
        for b in range(len(cols.batch_positions)):
            pos, size = int(cols.batch_positions[b]), int(cols.batch_sizes[b])
            attrs = int(cols.batch_attributes[b])
            raw = chunk[pos:pos + size]
            if attrs & _ATTR_CONTROL:
                if self._txn_kept.pop(int(cols.batch_producer_ids[b]), False):
                    out.append(raw)             # its transaction still has records
                elif not attrs & _ATTR_DELETE_HORIZON:
                    out.append(filter_batch(raw, _ONE_RECORD, delete_horizon_ms=horizon_if_stamped))
                elif now >= int(cols.batch_base_timestamps[b]):
                    self._markers_dropped.add(int(cols.batch_last_offsets[b]))
                    stats.markers_removed += 1
                    continue
                else:
                    out.append(raw)
                added += len(out[-1])
                continue
            if cols.batch_skipped[b]:
                continue                # an aborted transaction's batch
            r0 = int(starts[b])
            r1 = int(starts[b + 1]) if b + 1 < len(starts) else n_records
            k = keep[r0:r1].copy()
            dead = tombstones[r0:r1] & k
            stamp = None
            if dead.any():
                if attrs & _ATTR_DELETE_HORIZON:
                    if now >= int(cols.batch_base_timestamps[b]):
                        k &= ~dead
                        stats.tombstones_removed += int(dead.sum())
                else:
                    stamp = horizon_if_stamped
            kept = int(k.sum())
            stats.records_retained += kept
            if kept and attrs & _ATTR_TRANSACTIONAL:
                self._txn_kept[int(cols.batch_producer_ids[b])] = True
            if kept == 0:
                continue
            if kept == r1 - r0 and stamp is None:
                out.append(raw)
            else:
                out.append(filter_batch(raw, k, delete_horizon_ms=stamp))
                stats.batches_rewritten += 1
            added += len(out[-1])
        return added

    @staticmethod
    def _write(cleaned: LogSegment, batches: list) -> None:
        # Validated like a follower's append (offsets kept, CRCs checked), so
        # a cleaner bug cannot write a batch recovery would reject.
        data = bytearray(b"".join(batches))
        scan = validate_for_append(data, next_offset=cleaned.next_offset, assign_offsets=False,
                                   allow_control=True, deep=False, max_batch_bytes=len(data))
        cleaned.append(data, scan)

    def _clean_group(self, group: list[LogSegment], end_of_group: int, offset_map: OffsetMap,
                     now: int, stats: CleanerStats) -> LogSegment:
        directory = self.log.directory
        start = group[0].base_offset
        for suffix in SEGMENT_SUFFIXES:
            try:
                os.unlink(segment_path(directory, start, suffix, CLEANED_SUFFIX))
            except FileNotFoundError:
                pass
        cleaned = LogSegment(directory, start, self.config, suffix=CLEANED_SUFFIX, create=True)
        try:
            pending, pending_bytes = [], 0
            for seg in group:
                stats.bytes_read += seg.size
                for chunk, cols in self._chunks(seg):
                    pending_bytes += self._clean_chunk(chunk, cols, offset_map, now, stats, pending)
                    if pending_bytes >= _WRITE_CHUNK:
                        self._write(cleaned, pending)
                        stats.bytes_written += pending_bytes
                        pending, pending_bytes = [], 0
            if pending:
                self._write(cleaned, pending)
                stats.bytes_written += pending_bytes
            for seg in group:           # the entries of the markers kept
                for txn in seg.txn_index.entries:
                    if txn.last_offset not in self._markers_dropped:
                        cleaned.txn_index.append(txn)
            cleaned.on_become_inactive()
            cleaned.flush()
        finally:
            cleaned.close()
        crash_point("cleaner-after-write")
        commit_swap(directory, start, end_of_group)
        crash_point("cleaner-after-swap")
        replacement = LogSegment(directory, start, self.config)
        problem = replacement.load_state()
        if problem:
            replacement.recover(salvage=False)
        return replacement

    def clean(self) -> CleanerStats:
        """One cleaning pass; returns what it did (``skipped_reason`` when nothing)."""
        began = time.monotonic()
        plog = self.log
        stats = CleanerStats()
        if not self.config.compact:
            stats.skipped_reason = "cleanup.policy does not include compact"
            return stats
        now = plog._clock()
        end = self.first_uncleanable_offset(now)
        start = max(plog.cleaner_checkpoint, plog.log_start_offset)
        stats.first_dirty_offset = start
        if start >= end:
            stats.end_offset = end
            stats.skipped_reason = "no dirty segments below the first uncleanable offset"
            return stats
        offset_map, end = self._build_map(plog.segments, start, end, stats)
        stats.end_offset = end
        # per producer: whether its transaction (since its last marker) kept
        # a record so far in this pass; the offsets of the markers dropped
        self._txn_kept: dict[int, bool] = {}
        self._markers_dropped: set[int] = set()
        segments = plog.segments
        groups = self._groups(segments, end)
        for group in groups:
            nxt = [s.base_offset for s in segments if s.base_offset > group[-1].base_offset]
            end_of_group = nxt[0] if nxt else plog.log_end_offset
            replacement = self._clean_group(group, end_of_group, offset_map, now, stats)
            plog._replace_segments(group[0].base_offset, end_of_group, replacement)
            stats.segments_cleaned += len(group)
            stats.segments_written += 1
            stats.groups.append((group[0].base_offset, end_of_group))
        plog.cleaner_checkpoint = end
        plog.checkpoint()
        stats.elapsed_seconds = time.monotonic() - began
        log.info("%s: cleaned offsets [%d, %d): %d -> %d records, %d -> %d bytes in %.3fs",
                 plog.name, start, end, stats.records_read, stats.records_retained,
                 stats.bytes_read, stats.bytes_written, stats.elapsed_seconds)
        return stats
