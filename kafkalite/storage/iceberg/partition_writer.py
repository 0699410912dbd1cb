"""The partition leader's writer of an Iceberg topic's table.

``IcebergTopicWriter.maybe_commit(key, log, lag_ms)`` is called by the
partition log's owner at each housekeeping tick while it leads the
partition. It decides, on the owner's thread, whether a commit is due --
records below the last stable offset not in the table yet, and
``iceberg.target.lag.ms`` passed since the last commit or a segment rolled
since, or a backlog left by the last one -- and what to read: the file
regions of the log from the partition's next offset up to the LSO (at most
``MAX_COMMIT_BYTES``) with the aborted transactions they may hold, each
region's file descriptor duplicated so that retention closing the segment
cannot pull it from under the read. The reading, decoding
(``decode_columns``, read_committed: aborted records and control batches
left out) and commit run on the worker's Iceberg thread (background.py).

Where a partition resumes: on its first tick here the thread reads the
partition's next offset from the table's latest snapshot summary. Each
commit reads it again (topic_table.TopicTable.commit) and writes only the
records from it on; a commit that finds the table behind where this
writer read from (this writer's idea of the table was stale; it never
writes past a hole) writes nothing and the writer starts again from the
table's offset. Records below the log start offset (deleted by
retention before they were committed) cannot be written: the table starts
at the log start then.

Contract: ``maybe_commit``, ``forget`` on the log owner's thread; the
commits on the Iceberg thread, one at a time per worker.
"""
from __future__ import annotations

import logging
import os
import time

from kafkalite.storage.background import BackgroundThread

log = logging.getLogger(__name__)

ICEBERG_DIR = "iceberg"          # the catalog's directory in the data directory
MAX_COMMIT_BYTES = 64 << 20     # bytes of the log read for one commit
READ_CHUNK = 16 << 20           # decoded at a time
# how long after a failed commit the writer tries again
RETRY_S = 1.0

_iceberg_thread = BackgroundThread("kafkalite-iceberg")


class _Gap(Exception):
    """The table holds the partition up to below where this commit read from."""

    def __init__(self, committed: int):
        self.committed = committed


class _PartitionState:
    __slots__ = ("next_offset", "last_commit", "active_base", "future", "backlog",
                 "failed_at")

    def __init__(self):
        self.next_offset: int | None = None      # None: not read from the table yet
        self.last_commit = time.monotonic()
        self.active_base = -1
        self.future = None
        self.backlog = False
        self.failed_at = 0.0


class IcebergTopicWriter:
    """The Iceberg commits of the partitions a worker leads, into the
    catalog under ``root`` and the warehouse (default: under ``root`` too)."""

    def __init__(self, root: str, warehouse: str | None = None):
        self.root = root
        self.warehouse = warehouse
        self._partitions: dict[tuple[str, int], _PartitionState] = {}
        self._tables: dict = {}

    def _table(self, topic: str):
        from kafkalite.storage.iceberg.topic_table import TopicTable
        table = self._tables.get(topic)
        if table is None:
            table = self._tables[topic] = TopicTable(self.root, topic, self.warehouse)
        return table

    def committed_offset(self, key: tuple[str, int]) -> int | None:
        """The partition's next offset as this writer last knew it to be committed."""
        state = self._partitions.get(key)
        return None if state is None else state.next_offset

    def maybe_commit(self, key: tuple[str, int], plog, lag_ms: int) -> bool:
        """Start the partition's commit if one is due; True while the
        partition has records not in the table or a commit under way (the
        caller keeps calling)."""
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _PartitionState()
        now = time.monotonic()
        if state.future is not None:
            if not state.future.done():
                return True
            future, state.future = state.future, None
            try:
                state.next_offset, state.backlog = future.result()
                state.last_commit = now
            except Exception as exc:    # the store or catalog failed: keep the records, retry
                log.error("Iceberg commit of %s-%d failed: %s", *key, exc)
                state.next_offset, state.failed_at = None, now
                return True
        if now - state.failed_at < RETRY_S:
            return True
        table = self._table(key[0])
        if state.next_offset is None:
            state.future = _iceberg_thread.submit(_learn, table, key[1])
            return True
        lso = plog.last_stable_offset
        log_start = plog.log_start_offset
        start = max(state.next_offset, log_start)
        active_base = plog.active_segment.base_offset
        if start >= lso:
            state.active_base = active_base
            return False
        rolled = active_base != state.active_base
        if not (state.backlog or rolled or (now - state.last_commit) * 1000 >= lag_ms):
            return True
        state.active_base = active_base
        regions = _plan(plog, start, lso)
        if not regions:
            return True
        state.future = _iceberg_thread.submit(_commit, table, key[1], regions, start,
                                              start <= log_start, lso)
        return True

    def forget(self, key: tuple[str, int]) -> None:
        """The partition is no longer led here (a commit under way may still
        end: the table's compare-and-swap keeps it from writing twice)."""
        self._partitions.pop(key, None)


def _plan(plog, start: int, lso: int) -> list[tuple]:
    """(fd, position, length, aborted) of the log's regions from ``start``
    up to ``lso``, the fds duplicated (the caller's thread owns the log)."""
    regions, offset, total = [], start, 0
    segments = plog.segments
    while offset < lso and total < MAX_COMMIT_BYTES:
        data = plog.read(offset, MAX_COMMIT_BYTES - total, max_offset=lso,
                         min_one_message=True, collect_aborted=True)
        region = data.region
        if region is None:
            break
        aborted = [(t.producer_id, t.first_offset) for t in data.aborted_transactions or ()]
        regions.append((os.dup(region.fd), region.position, region.length, aborted))
        total += region.length
        seg = next((s for s in segments if s.file is region.file), None)
        if seg is None or region.position + region.length < seg.size:
            break       # cut by the LSO or the byte limit: the thread finds where
        offset = seg.next_offset
    return regions


def _learn(table, partition: int) -> tuple[int, bool]:
    committed = table.committed_offset(partition)
    return (0 if committed is None else committed), False


def _decode(regions) -> tuple[list, int]:
    """The records of ``regions`` as Arrow tables, and the offset after the
    last whole batch read (-1: none)."""
    from kafkalite._ext.batch_scan import batch_header
    from kafkalite.record import decode_columns
    tables, next_offset = [], -1
    for fd, position, length, aborted in regions:
        pos, end = position, position + length
        while pos < end:
            chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
            cols = decode_columns(chunk, verify_crc=True, aborted_transactions=aborted)
            if cols.bytes_consumed == 0:
                whole = batch_header(chunk)[2]
                if pos + whole > end:
                    break       # the region ends inside this batch
                chunk = os.pread(fd, whole, pos)
                cols = decode_columns(chunk, verify_crc=True, aborted_transactions=aborted)
                if cols.bytes_consumed == 0:
                    break
            tables.append(cols)
            next_offset = max(next_offset, cols.next_offset)
            pos += cols.bytes_consumed
    return tables, next_offset


def _commit(table, partition: int, regions, start: int, from_log_start: bool,
            lso: int) -> tuple[int, bool]:
    """Runs on the Iceberg thread: decode ``regions`` and commit them from
    the partition's committed offset; returns (the next offset, whether
    records below ``lso`` are left for another commit)."""
    import numpy as np
    import pyarrow as pa

    from kafkalite.storage.iceberg.topic_table import arrow_schema, columns_to_table
    try:
        decoded, scanned = _decode(regions)
    finally:
        for fd, *_ in regions:
            os.close(fd)
    if scanned < 0:
        return start, True
    parts = [columns_to_table(cols, partition) for cols in decoded if len(cols)]
    records = pa.concat_tables(parts) if parts else arrow_schema().empty_table()
    offsets = np.concatenate([cols.offsets for cols in decoded if len(cols)]) if parts \
        else np.empty(0, dtype=np.int64)

    def records_from(committed: int):
        if committed < start and not from_log_start:
            raise _Gap(committed)
        lowest = max(committed, start)
        if not len(offsets) or offsets[0] >= lowest:
            return records
        return records.filter(pa.array(offsets >= lowest))

    try:
        next_offset = table.commit(partition, records_from, lambda committed: scanned)
    except _Gap as gap:
        return gap.committed, True
    return next_offset, next_offset < lso
