"""Reads of a tiered partition below its local log start (remote_log.py's
docstring, "read"): the remote segment holding an offset brought into
``remote-log-cache/`` (linked or fetched by ranges, its indexes fetched),
at most CACHED_SEGMENTS and CACHED_BYTES kept, read as a local segment
is; downloads on a background reader's threads (RemoteReadPending wakes
the waiting fetch); transaction indexes kept alone for read_committed.

``RemoteReads`` is a part of remote_log.py's ``RemoteLog`` (which
inherits it and holds its state): the process, threads and callers are
that module's.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import shutil

from kafkalite.errors import KafkaStorageError
from kafkalite.storage.config import LogConfig
from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata
from kafkalite.storage.remote.remote_topic_stats import REMOTE_TOPIC_STATS, RemoteTopicStats
from kafkalite.storage.remote.storage_manager import RemoteLogSegmentId
from kafkalite.storage.segment import (INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment,
                                       segment_path)
from kafkalite.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger("kafkalite.storage.remote.remote_log")

CACHED_SEGMENTS = 4             # remote segments kept fetched for reads, at most,
CACHED_BYTES = 1 << 30          # and their bytes (the segment being read is always kept)
CACHED_TXN_INDEXES = 1024      # remote segments' transaction indexes kept fetched alone
TXN_INDEXES_AHEAD = 8           # a read_committed walk's next indexes downloaded beside one
READ_AHEAD_SEGMENTS = 2         # remote segments downloaded ahead of a background read
_FETCH_CHUNK = 8 << 20          # bytes per ranged fetch when filling the cache


class RemoteReadPending(Exception):
    """A read needs a remote segment that is being downloaded in the
    background; ``key`` is the purgatory key its completion wakes."""

    def __init__(self, key):
        super().__init__(key)
        self.key = key

class _IndexOnly:
    """What segments_from yields for a segment: its transaction index."""
    __slots__ = ("txn_index",)

    def __init__(self, txn_index: TransactionIndex):
        self.txn_index = txn_index


class RemoteReads:
    """Reads from the remote tier, RemoteLog's part (this module's docstring)."""

    def segment_for(self, offset: int) -> LogSegment | None:
        """The remote segment holding ``offset`` as a readable local segment
        (fetched into the cache if it is not there), None when no remote
        segment holds it."""
        meta = self.metadata.find(offset)
        if meta is None:
            return None
        seg = self._cached(meta)
        if self._reader is not None:
            self._read_ahead(meta)
        return seg

    def _read_ahead(self, meta: RemoteLogSegmentMetadata) -> None:
        """A read served from ``meta``'s segment, in the background: start
        downloading the next READ_AHEAD_SEGMENTS remote segments too, so
        that a consumer reading on finds them there (or under way) instead
        of waiting a whole download at each segment boundary. Two, not
        one: a download from S3 takes longer than the consumer's read of a
        cached segment, and the reader's threads make two at once; the
        cache keeps four (the one read, the one before, two ahead)."""
        ahead = 0
        for following in self.metadata.segments:
            if following.base_offset <= meta.end_offset:
                continue
            if ahead == READ_AHEAD_SEGMENTS:
                return
            ahead += 1
            if following.id in self._cache:
                continue
            key = ("remote-read", self.directory, "segment", following.id)
            if key not in self._reading and key not in self._read_failed:
                future = self._reader.submit(self, key, self.fetch_segment, following)
                if future is None:
                    return          # the reader is full: reads first
                self._reading[key] = (future, following, self._put_segment)

    def segments_from(self, offset: int):
        """The remote segments from the one holding ``offset`` on that may
        hold aborted transactions, each with an object whose ``txn_index``
        is its transaction index (for the aborted transactions of a read:
        the index alone is fetched, unless the segment is cached whole).
        A segment copied with an empty index (``txn_idx_empty``) is passed
        over without a request to the store: a walk over a topic without
        transactions costs nothing, however many segments are remote."""
        wanted = [m for m in self.metadata.segments
                  if m.end_offset >= offset and m.txn_idx_empty is not True]
        for i, meta in enumerate(wanted):
            ahead = wanted[i + 1:i + 1 + TXN_INDEXES_AHEAD]
            yield meta, _IndexOnly(self._txn_index(meta, ahead))

    @contextlib.contextmanager
    def reading_in_background(self, reader):
        """Reads made within download what they need on ``reader``'s threads
        (a RemoteLogReader), raising RemoteReadPending meanwhile."""
        self._reader = reader
        try:
            yield
        finally:
            self._reader = None

    def _cached(self, meta: RemoteLogSegmentMetadata) -> LogSegment:
        seg = self._cache.get(meta.id)
        if seg is None:
            self._download(("segment", meta.id), self.fetch_segment, self._put_segment, meta)
            seg = self._cache[meta.id]      # the newest entry: never the one evicted
        self._cache.move_to_end(meta.id)
        return seg

    def _txn_index(self, meta: RemoteLogSegmentMetadata, ahead=()) -> TransactionIndex:
        seg = self._cache.get(meta.id)
        if seg is not None:
            return seg.txn_index
        index = self._txn_indexes.get(meta.id)
        if index is None:
            if self._reader is not None:
                # the walk may go on past this one: the next indexes download
                # beside it, not one wake-up of the read after another
                for later in ahead:
                    if not self._txn_index_ahead(later):
                        break
            self._download(("txn", meta.id), self.fetch_txn_index, self._put_txn_index, meta)
            index = self._txn_indexes[meta.id]
        self._txn_indexes.move_to_end(meta.id)
        return index

    def _txn_index_ahead(self, meta: RemoteLogSegmentMetadata) -> bool:
        """Start downloading ``meta``'s transaction index on the reader, if
        it is not there or under way; False when the reader is full."""
        key = ("remote-read", self.directory, "txn", meta.id)
        if meta.id in self._cache or meta.id in self._txn_indexes or key in self._reading \
                or key in self._read_failed:
            return True
        future = self._reader.submit(self, key, self.fetch_txn_index, meta)
        if future is None:
            return False
        self._reading[key] = (future, meta, self._put_txn_index)
        return True

    def _download(self, what: tuple, fetch, install, meta: RemoteLogSegmentMetadata) -> None:
        """Have ``fetch(meta)`` (a download) made and its result put in place
        by ``install(meta, result)``: now, on this thread, or, reading in
        the background, on the reader's threads (RemoteReadPending until
        ``finish_read``). One download of ``what`` at a time; a failed
        background one raises at the next read that needs it."""
        key = ("remote-read", self.directory, *what)
        entry = self._reading.get(key)
        failed = self._read_failed.pop(key, None)
        if failed is not None:
            raise failed
        if self._reader is not None:
            if entry is None:
                future = self._reader.submit(self, key, fetch, meta)
                if future is not None:      # else the reader is full: the read waits it out
                    self._reading[key] = (future, meta, install)
            raise RemoteReadPending(key)
        if entry is not None:
            # a reader's download of it: waited for, not made twice
            concurrent.futures.wait([entry[0]])
            self.finish_read(key)
            failed = self._read_failed.pop(key, None)
            if failed is not None:
                raise failed
            return
        try:
            result = fetch(meta)
        except Exception:
            REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.FETCH_ERRORS)
            raise
        self._count_read(result)
        install(meta, result)

    def _count_read(self, result) -> None:
        if isinstance(result, LogSegment):      # a transaction index alone is not counted
            REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.FETCH_BYTES, result.size)

    def finish_read(self, key: tuple) -> None:
        """A reader's download ended (owner's thread): its result is put in
        place, unless the segment was deleted meanwhile; a failure is kept
        for the next read that needs it. Once per download."""
        entry = self._reading.pop(key, None)
        if entry is None:
            return
        future, meta, install = entry
        if future.cancelled():
            return
        exc = future.exception()
        if exc is not None:
            REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.FETCH_ERRORS)
            self._read_failed[key] = exc if isinstance(exc, KafkaStorageError) else \
                KafkaStorageError(f"{self.name}: a remote read failed: {exc}")
            return
        self._count_read(future.result())
        if all(s.id != meta.id for s in self.metadata.segments):
            future.result().delete()
        else:
            install(meta, future.result())

    def _put_segment(self, meta: RemoteLogSegmentMetadata, seg: LogSegment) -> None:
        if meta.id in self._cache:
            seg.delete()
            return
        self._cache[meta.id] = seg
        while len(self._cache) > 1 and (len(self._cache) > CACHED_SEGMENTS or sum(
                s.size for s in self._cache.values()) > CACHED_BYTES):
            _, old = self._cache.popitem(last=False)
            old.delete()        # a FileRegion read from it keeps its file open

    def _put_txn_index(self, meta: RemoteLogSegmentMetadata, index: TransactionIndex) -> None:
        if meta.id in self._txn_indexes:
            index.delete()
            return
        self._txn_indexes[meta.id] = index
        while len(self._txn_indexes) > CACHED_TXN_INDEXES:
            _, old = self._txn_indexes.popitem(last=False)
            old.delete()

    def _wait_for_reads(self) -> None:
        for key, (future, _, _) in list(self._reading.items()):
            future.cancel()
            concurrent.futures.wait([future])
            self._reading.pop(key, None)
            if not future.cancelled() and future.exception() is None:
                future.result().delete()

    def fetch_txn_index(self, meta: RemoteLogSegmentMetadata) -> TransactionIndex:
        """Download ``meta``'s transaction index alone (empty when it has
        none) into the cache directory (any thread: only its own file)."""
        data = None if meta.txn_idx_empty else self.storage.fetch_index(
            self._segment_id(meta), meta.base_offset, "TRANSACTION")
        directory = os.path.join(self._cache_dir, "txn")
        path = os.path.join(directory, meta.id + TXN_INDEX_SUFFIX)
        if data:
            os.makedirs(directory, exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        return TransactionIndex(path, meta.base_offset)

    def fetch_segment(self, meta: RemoteLogSegmentMetadata) -> LogSegment:
        """Download ``meta``'s segment into the cache directory and open it
        (on the owner's thread or a reader's: it touches only its own files).
        A store that can link its file there (a directory store on the same
        file system) is read in place: no byte of the ``.log`` is copied, and
        the link keeps the file whole if the store deletes the copy while it
        is read; the indexes, small, are fetched."""
        sid = self._segment_id(meta)
        os.makedirs(self._cache_dir, exist_ok=True)
        base = meta.base_offset
        log_path = segment_path(self._cache_dir, base, LOG_SUFFIX)
        link = getattr(self.storage, "link_log_segment", None)
        seg = None
        try:
            linked = link is not None and link(sid, base, log_path)
            if not linked:
                self._fetch_log(sid, meta, log_path)
            for kind, suffix in (("OFFSET", INDEX_SUFFIX), ("TIMESTAMP", TIME_INDEX_SUFFIX),
                                 ("TRANSACTION", TXN_INDEX_SUFFIX)):
                if kind == "TRANSACTION" and meta.txn_idx_empty:
                    continue        # never uploaded (_prepare_copy)
                data = self.storage.fetch_index(sid, base, kind)
                if data is not None:
                    with open(segment_path(self._cache_dir, base, suffix), "wb") as f:
                        f.write(data)
            seg = LogSegment(self._cache_dir, base, LogConfig())
            if seg.load_state() is not None:
                if linked:
                    # recovery cuts a damaged tail off the file, which is the
                    # store's: it works on a copy of its own
                    seg.close()
                    seg = None
                    _unshare(log_path)
                    seg = LogSegment(self._cache_dir, base, LogConfig())
                seg.recover(salvage=False)
        except BaseException:
            if seg is not None:
                seg.close()
            for path in (log_path, log_path + ".copy", *(
                    segment_path(self._cache_dir, base, suffix)
                    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
            raise
        return seg

    def _fetch_log(self, sid: RemoteLogSegmentId, meta: RemoteLogSegmentMetadata,
                   path: str) -> None:
        with open(path, "wb") as f:
            position = 0
            while position < meta.size:
                chunk = self.storage.fetch_log_segment(
                    sid, meta.base_offset, position, min(position + _FETCH_CHUNK, meta.size))
                if not chunk:
                    break
                f.write(chunk)
                position += len(chunk)

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int,
                             below: int) -> tuple[int, int] | None:
        """ListOffsets by timestamp over the remote segments below ``below``
        (the local log start): the first record at or after the timestamp."""
        for meta in self.metadata.segments:
            if meta.base_offset >= below:
                break
            if meta.max_timestamp >= timestamp and meta.end_offset >= log_start_offset:
                found = self._cached(meta).find_offset_by_timestamp(timestamp, log_start_offset)
                if found is not None:
                    return found
        return None


def _unshare(path: str) -> None:
    """Replace ``path``, a link to a file of the store, by a copy of it."""
    tmp = path + ".copy"
    shutil.copyfile(path, tmp)
    os.replace(tmp, path)
