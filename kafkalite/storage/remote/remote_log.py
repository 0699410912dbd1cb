"""A tiered partition's remote side (the per-partition part of Kafka's
RemoteLogManager: its copy task, its expiration task and its reads).

The shared metadata's claim (``lead``, ``follow`` and what they call) is
remote_leadership.py's and the reads below the local log start are
remote_reads.py's: both are parts of RemoteLog, which inherits them.

The partition log (log.py) owns one RemoteLog when its topic has
``remote.storage.enable=true`` and the broker a remote store, and calls it
from ``housekeeping`` and ``read``:

- ``copy_segments``: every rolled segment past the highest offset already
  remote whose records are all below the last stable offset (Kafka copies
  nothing a reader could not yet see) is copied, oldest first, with its
  indexes, the producer snapshot taken at its end, the leader epochs up to
  its end and its transaction index. The metadata says COPY_SEGMENT_STARTED
  before the copy and COPY_SEGMENT_FINISHED after it (one write for the
  copies handed over together, one for those found finished together);
  only then may the log delete the local copy (past ``local.retention.*``).
- ``expire``: total retention (``retention.ms``/``retention.bytes``, over
  the remote segments no longer local plus the local log) and the log start
  offset (DeleteRecords) delete remote segments, oldest first:
  DELETE_SEGMENT_STARTED (no read is served from it from then on), the
  store's delete on the copier pool, DELETE_SEGMENT_FINISHED once the
  store confirms it (a failed delete is tried again at later calls, after
  a backoff).
- ``delete_all`` (DeleteTopics): the partition's deletes are handed over to
  the node's deleter (remote_log_deleter.py), which outlives the partition.
- ``read`` below the local log start offset: the remote segment holding the
  offset is brought into ``remote-log-cache/`` in the partition directory
  (CACHED_SEGMENTS and CACHED_BYTES at most, the one being read always
  kept): its ``.log`` linked to the store's file where the store can
  (a directory store on the same file system: read in place, no byte
  copied), else fetched by ranges; its indexes fetched. It is read as a
  local segment is: a FileRegion for sendfile, CRCs checked, whole
  batches. The cache is emptied at open.
- at open (a log on its own) or when it claims the shared metadata (a
  replica's new leader), what a crash or a former leader left half done is
  finished: a copy STARTED and not FINISHED (and not under way here) is
  deleted from the store and from the metadata (a kill mid-copy loses
  nothing: the local segment is still there and is copied again), a
  DELETE_SEGMENT_STARTED is deleted again.
- on a replica (``lead``/``follow``, from the partition's leadership), the
  metadata is the one the replicas share in the store (metadata_store.py):
  the leader reads its newest version, merges it with what it knows and
  writes the next one under its leader epoch before it copies or deletes
  anything (``_try_claim``); then one version per change of its entries
  (a copier pass's changes together),
  written on the metadata thread, each copy or delete of objects running
  only once the version before it was written (``_after``), so the shared
  metadata names every object put; a write refused for a newer epoch
  (fenced) ends this replica's copies, and the objects of the copies it
  made that the newer leader does not list are deleted. A follower reads
  the newest version and takes it as its entries: at most each
  FOLLOWER_REFRESH_S while it holds a rolled segment the entries do not
  list as copied yet (what its local retention waits for), else at most
  each FOLLOWER_IDLE_REFRESH_S (a LIST and a GET of the store each time);
  it deletes no remote segment. Local retention deletes only up to
  the highest offset the shared metadata lists as copied
  (``retention_highest_offset``).
- a copy that fails (the store down, a full disk) is abandoned with those
  queued behind it: DELETE_SEGMENT_STARTED, and the store's delete of
  whatever each put, on the copier pool; entries go once the store
  confirms their deletes (those confirmed together in one write), and a
  delete that fails (or one the open could not make) is tried again at a
  later ``copy_segments``, so the store keeps no object the metadata does
  not name. Each kind of store call (copies, deletes, writes and reads of
  the shared metadata) backs off after a failure and is logged once as it
  starts failing and once as it succeeds again (store_backoff.py); while
  copies fail, one at a time tries the store. No store call of a copy or
  of a delete runs on the owner's thread (at the open neither), and what
  the owner does per call is bounded (DELETES_QUEUED deletes handed over,
  one metadata write for those confirmed), whatever an outage left.

Who may call: the owner of the partition log, from its thread. The copies
and deletes run on the process's copier pool, the shared metadata's reads
and writes on its metadata thread (copier.py):
the owner writes COPY_SEGMENT_STARTED for the segments it hands over and,
at later calls, takes their outcomes in offset order and writes
COPY_SEGMENT_FINISHED (or drops the entries). The copier only reads the rolled
segment's files, which nothing changes and which retention keeps until the
copy is finished; ``close`` waits for it (``delete_all`` cancels the
queued copies and has the node's deleter wait for the running one, which
may fail as the topic's files go under it: its objects are deleted after).

Downloads into the cache run on the owner's thread, unless the owner reads
within ``reading_in_background(reader)`` (the replica manager's fetches,
share fetches and ListOffsets lookups by timestamp): a
segment not cached is then downloaded by the reader's threads
(remote_log_reader.py) and the read raises RemoteReadPending; the finished
download goes into the cache at ``finish_read``, on the owner's thread. A
reader thread only writes the segment's own files in the cache directory,
which nothing else touches while its download is under way (one per
segment); ``close`` waits for the downloads.
"""
from __future__ import annotations

import collections
import concurrent.futures
import itertools
import logging
import os
import shutil
from typing import Callable

from kafkalite.storage import producer_snapshot
from kafkalite.storage.leader_epoch import decode as decode_epochs, encode as encode_epochs
from kafkalite.storage.remote.copier import COPIER as _copier, METADATA_THREAD as _metadata_thread
from kafkalite.storage.remote.copier import after as _after, due_for_copy
from kafkalite.storage.remote.metadata import (RemoteAuxState, RemoteLogMetadataFile,
                                               RemoteLogSegmentMetadata, RemoteLogSegmentState)
from kafkalite.storage.remote.metadata_store import SharedRemoteLogMetadata
from kafkalite.storage.remote.remote_log_deleter import NODE_DELETER
from kafkalite.storage.remote.remote_topic_stats import REMOTE_TOPIC_STATS, RemoteTopicStats
from kafkalite.storage.remote.store_backoff import REFUSED, StoreBackoff
from kafkalite.storage.remote.storage_manager import (LogSegmentData, RemoteLogSegmentId,
                                                      RemoteStorageError, RemoteStorageManager)
from kafkalite.storage.remote.remote_leadership import RemoteLeadership
# RemoteReadPending: the fetch paths take it from here, where RemoteLog's reads raise it
from kafkalite.storage.remote.remote_reads import RemoteReadPending, RemoteReads  # noqa: F401
from kafkalite.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, segment_path
from kafkalite.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

REMOTE_CACHE_DIR = "remote-log-cache"
COPIES_QUEUED = 16              # a partition's copies in flight on the copier pool, at most
DELETES_QUEUED = 16             # store deletes of a partition handed to the copier at once
S = RemoteLogSegmentState


class RemoteLog(RemoteLeadership, RemoteReads):
    def __init__(self, directory: str, name: str, storage: RemoteStorageManager,
                 clock: Callable[[], int], replicated: bool = False):
        self.directory = directory
        self.name = name
        self.storage = storage
        self._clock = clock
        self.metadata = RemoteLogMetadataFile(directory)
        self.partition = os.path.basename(os.path.normpath(directory))
        # the shared metadata in the store (metadata_store.py), once ``lead``
        # or ``follow`` said which partition it is; None: a log on its own
        # (no replicas: the local file is the only metadata)
        self._shared: SharedRemoteLogMetadata | None = None
        self._leading = False
        self._epoch: int | None = None  # the leader epoch this replica writes under
        self._claim: concurrent.futures.Future | None = None    # the newest version, read
        self._claimed = False
        self._fenced = False
        self._version = -1              # newest version read or written (metadata thread only)
        self._publish: concurrent.futures.Future | None = None  # the last metadata write
        self._publish_needed = False    # a write is owed (the last failed, or backing off)
        # the last offset copied that the shared metadata says is (what local
        # retention may delete up to: a copy finished here and not written there
        # yet would be lost to a new leader)
        self._shared_highest = -1
        self._mine: set[str] = set()    # entries this replica wrote while it led
        self._refresh: concurrent.futures.Future | None = None
        self._refreshed_at = 0.0
        # what its metrics are counted under: the topic of its ``<topic>-<n>`` directory
        topic, _, index = os.path.basename(os.path.normpath(directory)).rpartition("-")
        self.topic = topic if topic and index.isdigit() else name
        # the topic's counters exist from its open, at 0: a store down since
        # the start (no copy tried yet) is not a metric missing
        REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.COPY_ERRORS, 0)
        self._cache_dir = os.path.join(directory, REMOTE_CACHE_DIR)
        self._cache: collections.OrderedDict[str, LogSegment] = collections.OrderedDict()
        # the copies handed to the copier, oldest first: futures and metadata
        # (COPY_SEGMENT_STARTED), finished in this order
        self._copying: collections.deque[tuple[concurrent.futures.Future,
                                               RemoteLogSegmentMetadata]] = collections.deque()
        # the store's deletes of abandoned copies under way on the copier pool,
        # by segment id (their entries are DELETE_SEGMENT_STARTED meanwhile)
        self._deleting: dict[str, concurrent.futures.Future] = {}
        # abandoned copies that were running when abandoned, by segment id:
        # their objects' delete waits for them to end
        self._abandoned_copies: dict[str, concurrent.futures.Future] = {}
        self._deferring = False         # in a copier pass: its changes make one write
        self._owed = False              # changes of the pass not written yet
        # the next copy's entry, listed ahead by each write (copier.reserve), and
        # whether a write submitted listed it
        self._reservation: RemoteLogSegmentMetadata | None = None
        self._reservation_listed = False
        # how the store has been answering each kind of call (store_backoff.py):
        # a kind that fails backs off (a store that is down, each call tried
        # again at every housekeeping, kept the copier busy failing and
        # the log full: each failed copy abandoned a batch of 16, each listed
        # for deletion, each failed delete logged at each retry) and is logged
        # once as it starts failing, once as it succeeds again
        self._copies_tried = StoreBackoff(log, name, "copies to remote storage")
        self._deletes_tried = StoreBackoff(log, name, "deletes of remote segments")
        self._writes_tried = StoreBackoff(log, name, "writes of the remote log metadata")
        self._reads_tried = StoreBackoff(log, name, "reads of the remote log metadata")
        # downloads under way on a reader's threads (segment id -> future), the
        # reader while the owner reads in the background, and the downloads
        # that failed since (their error goes to the next read of the segment)
        self._reading: dict[tuple, tuple] = {}    # key -> (future, metadata, install)
        self._reader = None
        self._read_failed: dict[tuple, Exception] = {}
        # transaction indexes of remote segments not cached whole (read_committed reads)
        self._txn_indexes: collections.OrderedDict[str, TransactionIndex] = \
            collections.OrderedDict()
        shutil.rmtree(self._cache_dir, ignore_errors=True)
        if replicated:
            # a replica learns from ``lead``/``follow`` whether what a crash left
            # is its to finish (a follower's copy of the metadata lists the
            # leader's copies under way, which are not)
            NODE_DELETER.resume(os.path.dirname(os.path.normpath(self.directory)), self.storage)
        else:
            self._finish_interrupted()

    # ---- state ----------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int | None:
        return self.metadata.log_start_offset

    @property
    def highest_offset(self) -> int:
        """The last offset copied (Kafka's highest offset in remote storage), -1 for none."""
        return self.metadata.highest_offset

    @property
    def retention_highest_offset(self) -> int:
        """The last offset local retention may delete up to: copied, and
        said so by the shared metadata where there is one."""
        if self._shared is None:
            return self.metadata.highest_offset
        return min(self.metadata.highest_offset, self._shared_highest)

    def size_below(self, offset: int) -> int:
        """Bytes of the remote segments wholly below ``offset`` (the local log start)."""
        return sum(s.size for s in self.metadata.segments if s.end_offset < offset)

    def _segment_id(self, meta: RemoteLogSegmentMetadata) -> RemoteLogSegmentId:
        return RemoteLogSegmentId(os.path.basename(os.path.normpath(self.directory)), meta.id)

    def _finish_interrupted(self) -> None:
        unfinished = [m for m in self.metadata.all if m.state is S.COPY_SEGMENT_STARTED]
        if unfinished:
            log.warning("%s: deleting the remote copies of %d segment(s) a crash left "
                        "unfinished, from %d", self.name, len(unfinished),
                        unfinished[0].base_offset)
            self.metadata.update_states([m.id for m in unfinished], S.DELETE_SEGMENT_STARTED,
                                        self._clock())
        # the store's deletes go on the copier pool: a store that is down
        # (each try waiting on the client's retries) does not hold up the open;
        # what it could not delete stays listed, and is deleted at a later call
        self._delete_abandoned(wait=False)
        # and those of partitions deleted here before a stop (delete_all)
        NODE_DELETER.resume(os.path.dirname(os.path.normpath(self.directory)), self.storage)

    # ---- a follower below its leader's local log start ---------------------------------------

    def fetch_aux_state(self, leader_local_start: int) -> concurrent.futures.Future:
        """A follower whose log ends below its leader's local log start
        (Kafka's buildRemoteLogAuxState): on the metadata thread, the newest
        shared metadata, the copied segment holding the offset just below
        ``leader_local_start``, its leader-epoch checkpoint and its producer
        snapshot. The future's result is a RemoteAuxState for
        ``take_aux_state``; it fails with RemoteStorageError while no copied
        segment holds that offset."""
        return _metadata_thread.submit(self._aux_state, leader_local_start)

    def _aux_state(self, leader_local_start: int) -> "RemoteAuxState":
        newest = self._read_newest() if self._shared is not None else None
        segments = self.metadata.all if newest is None else newest.segments
        below = leader_local_start - 1
        meta = next((m for m in segments if m.state is S.COPY_SEGMENT_FINISHED
                     and m.base_offset <= below <= m.end_offset), None)
        if meta is None:
            raise RemoteStorageError(
                f"{self.name}: no remote segment holds offset {below}, below the leader's local "
                f"log start {leader_local_start}")
        sid = self._segment_id(meta)
        epochs = [(e, o) for e, o in decode_epochs(
            self.storage.fetch_index(sid, meta.base_offset, "LEADER_EPOCH"))
            if o <= meta.end_offset]
        snapshot = self.storage.fetch_index(sid, meta.base_offset, "PRODUCER_SNAPSHOT")
        return RemoteAuxState(tuple(segments), meta.end_offset + 1, epochs, snapshot)

    def take_aux_state(self, state: "RemoteAuxState") -> None:
        """The owner's side of ``fetch_aux_state``: the metadata read is
        this follower's (the log about to start at ``state.next_offset``
        counts on it for what lies below, after a restart too)."""
        if self._shared is not None and not (self._leading or self._copying or self._deleting):
            self._take(state.segments)

    # ---- copy -----------------------------------------------------------------------------

    @property
    def copy_in_flight(self) -> bool:
        """Copies under way, or abandoned copies whose objects are still to
        be deleted, a metadata write or read under way: the owner calls
        ``copy_segments`` again soon."""
        if self._shared is not None and (
                self._publish_needed or self._refresh is not None
                or (self._publish is not None and not self._publish.done())
                or (self._leading and not self._claimed and not self._fenced)):
            return True
        return bool(self._copying or self._deleting) or (self._may_delete and any(
            m.state is S.DELETE_SEGMENT_STARTED for m in self.metadata.all))

    @property
    def _may_delete(self) -> bool:
        """Whether this replica deletes what the metadata lists for deletion:
        a log on its own, or the leader holding the shared metadata."""
        return self._shared is None or (self._leading and self._claimed and not self._fenced)

    @property
    def following(self) -> bool:
        return self._shared is not None and not self._leading

    def copy_segments(self, segments, last_stable_offset: int, epoch_entries, *,
                      wait: bool = False, start: bool = True) -> int:
        """Copy the rolled ``segments`` (the log's, active one excluded) not
        yet remote and wholly below ``last_stable_offset``, oldest first:
        finish the copies done in offset order (``wait``: all) and hand the
        copier pool the next ones (COPIES_QUEUED in flight at most), both in
        one metadata write. With ``wait``, every such segment is copied before
        the call returns; without ``start`` (a leader no more), none is
        started. Returns how many copies finished. A failed copy is
        abandoned, and so are the copies queued behind it (finishing them
        would leave a gap that local retention takes for copied), their
        objects deleted in the background (see ``_delete_abandoned``); they
        are copied again under new ids at a later call, after a backoff
        (store_backoff.py), one at a time until a copy succeeds, and none
        while the shared metadata cannot be written (each would fail
        behind the write). With ``wait`` a failed copy raises
        RemoteStorageError; without, the backoff logs it (once, as the
        copies start failing)."""
        if self._shared is not None:
            self._poll_publish(wait)
            if self._publish_needed and (wait or self._writes_tried.due()):
                self._publish_now(claim=self._leading and self._claimed)
            if self._writes_tried.failing and not wait:
                start = False       # the write tried again alone, until it succeeds
            if not self._leading or self._fenced:
                start = False
                if not self._leading:
                    self._maybe_refresh(wait, segments)
            elif not self._try_claim(wait):
                start = False
        # one copier pass, one write (and none for a copy of the segment the
        # last write reserved, copier.reserve: one write a segment)
        self._deferring = True
        try:
            return self._copy_pass(segments, last_stable_offset, epoch_entries, wait, start)
        finally:
            self._deferring = False
            if self._owed:
                self._changed()

    def _copy_pass(self, segments, last_stable_offset: int, epoch_entries, wait: bool,
                   start: bool) -> int:
        finished = 0
        while True:
            try:
                finished += self._finish_copies(wait)
                if start and (wait or self._copies_tried.due()):
                    # as many as COPIES_QUEUED leaves room for; while the copies
                    # fail, one alone tries the store (those behind it would be
                    # abandoned with it)
                    room = COPIES_QUEUED - len(self._copying)
                    if self._copies_tried.failing and not wait:
                        room = 0 if self._copying else 1
                    handed = max([self.highest_offset, *(m.end_offset for _, m in self._copying)])
                    todo = list(itertools.islice(
                        due_for_copy(segments, handed, last_stable_offset), room))
                    if todo:
                        self._start_copies(todo, epoch_entries)
            finally:
                self._delete_abandoned(wait)
            if not (wait and self._copying):
                return finished

    def _finish_copies(self, wait: bool) -> int:
        """Finish the copies done, in offset order, up to the first one not
        done (with ``wait``: all), their COPY_SEGMENT_FINISHED in one write.
        A failed one raises with ``wait`` only (see ``copy_segments``)."""
        done, failed = [], False
        try:
            while self._copying and (wait or self._copying[0][0].done()):
                future, meta = self._copying.popleft()
                try:
                    future.result()
                except Exception as exc:
                    REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.COPY_ERRORS)
                    failed = True
                    self._copies_tried.failed(exc)
                    # the failed copy may have put some of its objects (a store lost
                    # midway cannot delete them), and those queued behind it may be
                    # under way: all are abandoned, their objects deleted by id on the
                    # copier pool, after them, without holding up this thread
                    for later, m in self._copying:
                        if not later.cancel() and not later.done():
                            self._abandoned_copies[m.id] = later
                    self._abandon([meta] + [m for _, m in self._copying])
                    self._copying.clear()
                    if wait:
                        raise
                    break
                done.append(meta)
        finally:
            # those that succeeded before a failure are finished all the same
            if done:
                self.metadata.update_states([m.id for m in done], S.COPY_SEGMENT_FINISHED,
                                            self._clock())
                self._changed()
                if not failed:
                    self._copies_tried.succeeded()
                self._deletes_tried.retry_now()     # the store answers again
                for meta in done:
                    REMOTE_TOPIC_STATS.add(self.topic, RemoteTopicStats.COPY_BYTES, meta.size)
                    log.info("%s: copied segment %d..%d (%d bytes) to remote storage",
                             self.name, meta.base_offset, meta.end_offset, meta.size)
        return len(done)

    def _abandon(self, metas: list[RemoteLogSegmentMetadata]) -> None:
        """Unfinished copies that will not be finished: DELETE_SEGMENT_STARTED
        (one write), and ``_delete_abandoned`` deletes whatever of them the
        store holds."""
        self.metadata.update_states([m.id for m in metas], S.DELETE_SEGMENT_STARTED,
                                    self._clock())
        self._changed()

    def _delete_abandoned(self, wait: bool) -> None:
        """The store's deletes of the copies whose entries say
        DELETE_SEGMENT_STARTED (abandoned, or a delete that a crash or the
        store interrupted), on the copier pool (each after the copy of the
        same segment if it is still under way: ``_after``), at most
        DELETES_QUEUED at a time; the entries whose deletes succeeded go
        (DELETE_SEGMENT_FINISHED) together, in one write of the metadata
        file and one of the shared metadata, however many there are (each
        used to rewrite the whole file on the owner's thread: an outage's
        thousand entries held the worker's loop for seconds once the store
        answered). Failed deletes are tried again after a backoff
        (store_backoff.py), and none is handed over while the shared
        metadata cannot be written (a delete must follow the write that
        lists it), so no object the metadata no longer names is left in
        the store. With ``wait`` (a caller that waits for the store), every
        delete is made now, backing off or not, and ends before the call
        returns."""
        if wait or (self._deletes_tried.due() and not self._writes_tried.failing):
            for meta in self.metadata.all:
                if len(self._deleting) >= DELETES_QUEUED and not wait:
                    break
                if meta.state is not S.DELETE_SEGMENT_STARTED or meta.id in self._deleting:
                    continue
                if not (self._may_delete or meta.id in self._mine):
                    continue        # the leader's to delete
                if self._owed:
                    self._publish_now()     # the write listing it for deletion goes first
                self._deleting[meta.id] = _copier.submit(
                    _after, self._publish, self._abandoned_copies.get(meta.id),
                    self.storage.delete_log_segment_data, self._segment_id(meta),
                    meta.base_offset)
        confirmed, failed = [], False
        for segment_id, future in list(self._deleting.items()):
            if not (wait or future.done()):
                continue
            del self._deleting[segment_id]
            try:
                future.result()
            except Exception as exc:
                failed = True
                self._deletes_tried.failed(exc)
                continue
            confirmed.append(segment_id)
            self._abandoned_copies.pop(segment_id, None)
        if confirmed:
            if not failed:      # one still failing keeps them backing off, and unlogged
                self._deletes_tried.succeeded()
            listed = {m.id for m in self.metadata.all}
            confirmed = [i for i in confirmed if i in listed]
        if confirmed:
            self.metadata.update_states(confirmed, S.DELETE_SEGMENT_FINISHED, self._clock())
            self._changed()

    def _start_copies(self, segments, epoch_entries) -> None:
        """Hand ``segments`` to the copier, their COPY_SEGMENT_STARTED written
        first, in one write (none for a lone copy of the segment the last
        write reserved): no object is put before its id is listed."""
        r = self._reservation
        reserved = r is not None and self._reservation_listed and len(segments) == 1 \
            and segments[0].base_offset == r.base_offset
        copies = [self._prepare_copy(seg, epoch_entries, r.id if reserved else None)
                  for seg in segments]
        self.metadata.add_copy_started(*(meta for meta, _, _ in copies))
        self._reservation = None if reserved else r
        if not reserved:
            self._publish_now()     # the copies follow the write that lists them
        for meta, sid, data in copies:
            future = _copier.submit(_after, self._publish, None,
                                    self.storage.copy_log_segment_data, sid, meta.base_offset,
                                    data)
            self._copying.append((future, meta))

    def _prepare_copy(self, seg: LogSegment, epoch_entries, reserved_id: str | None = None):
        end = seg.next_offset - 1
        sid = RemoteLogSegmentId(self.partition, reserved_id) if reserved_id else \
            RemoteLogSegmentId.generate(self.partition)
        in_segment = [(e, o) for e, o in epoch_entries if seg.base_offset < o <= end]
        before = [(e, o) for e, o in epoch_entries if o <= seg.base_offset]
        epochs = ([(before[-1][0], seg.base_offset)] if before else []) + in_segment
        txn = segment_path(seg.directory, seg.base_offset, TXN_INDEX_SUFFIX)
        # an empty index is not uploaded, and the metadata says so (KIP-1058's
        # txnIdxEmpty): read_committed reads never ask the store for it
        txn_idx_empty = not (os.path.exists(txn) and os.path.getsize(txn))
        meta = RemoteLogSegmentMetadata(sid.id, seg.base_offset, end, seg.max_timestamp,
                                        tuple(epochs), seg.size, S.COPY_SEGMENT_STARTED,
                                        self._clock(), txn_idx_empty)
        snapshot = producer_snapshot.snapshot_path(seg.directory, seg.next_offset)
        checkpoint = [(e, o) for e, o in epoch_entries if o <= end]
        data = LogSegmentData(
            seg.path, segment_path(seg.directory, seg.base_offset, INDEX_SUFFIX),
            segment_path(seg.directory, seg.base_offset, TIME_INDEX_SUFFIX),
            None if txn_idx_empty else txn,
            snapshot if os.path.exists(snapshot) else None,
            encode_epochs(checkpoint))
        return meta, sid, data

    def copy_lag(self, segments, last_stable_offset: int) -> tuple[int, int]:
        """Kafka's RemoteCopyLagBytes and RemoteCopyLagSegments: the bytes
        and number of the rolled ``segments`` (active one excluded) due for
        a copy (as ``copy_segments`` picks them) and not finished yet."""
        due = list(due_for_copy(segments, self.highest_offset, last_stable_offset))
        return sum(seg.size for seg in due), len(due)

    # ---- retention ------------------------------------------------------------------------

    def expire(self, log_start_offset: int, local_log_start_offset: int, local_size: int,
               retention_ms: int, retention_bytes: int) -> int:
        """Delete the remote segments wholly below ``log_start_offset`` and,
        with retention ``retention_ms``/``retention_bytes`` >= 0, those past
        it; returns how many. Only the leader deletes remote segments (a
        follower's log start follows its leader's)."""
        if not self._may_delete:
            return 0
        now = self._clock()
        remote = [s for s in self.metadata.segments if s.end_offset < local_log_start_offset]
        excess = (sum(s.size for s in remote) + local_size - retention_bytes
                  if retention_bytes >= 0 else -1)
        doomed = []
        for seg in self.metadata.segments:
            if seg.end_offset < log_start_offset:
                doomed.append(seg)
            elif seg.end_offset < local_log_start_offset and (
                    (retention_ms >= 0 and now - seg.max_timestamp > retention_ms)
                    or (retention_bytes >= 0 and excess >= seg.size)):
                doomed.append(seg)
            else:
                break
            if seg.end_offset < local_log_start_offset:
                excess -= seg.size
        for seg in doomed:
            self.delete(seg)
        return len(doomed)

    def delete(self, meta: RemoteLogSegmentMetadata) -> None:
        """Delete a remote segment (retention, DeleteRecords): no more read
        from the moment its DELETE_SEGMENT_STARTED is written; the store's
        delete runs on the copier pool and the entry goes once the store
        confirms it (``_delete_abandoned``), so a store that is down never
        holds up the owner's thread."""
        self.metadata.update_state(meta.id, S.DELETE_SEGMENT_STARTED, self._clock())
        self._changed()
        cached = self._cache.pop(meta.id, None)
        if cached is not None:
            cached.delete()     # a FileRegion read from it keeps its file open
        index = self._txn_indexes.pop(meta.id, None)
        if index is not None:
            index.delete()
        log.info("%s: deleting remote segment %d..%d", self.name, meta.base_offset,
                 meta.end_offset)
        self._delete_abandoned(wait=False)

    def delete_all(self) -> None:
        """Every remote segment (the topic is deleted), without waiting on
        the store: the partition's directory goes now, so its deletes are
        handed over to the node's deleter (remote_log_deleter.py), which
        keeps them on disk until the store confirms each, after the copies
        still running on the copier pool (queued ones are cancelled)."""
        running = []
        for future, _ in self._copying:
            if not future.cancel():
                running.append(future)
        self._copying.clear()
        for future in self._deleting.values():
            if not future.cancel():
                running.append(future)
        self._deleting.clear()
        running.extend(self._abandoned_copies.values())
        entries = self.metadata.all
        if entries or self._shared is not None:
            # with the shared metadata's key: what it lists goes too (a
            # follower's copy may lag its leader's), and then its versions
            NODE_DELETER.hand_over(os.path.dirname(os.path.normpath(self.directory)),
                                   self.storage, self.partition, entries, running,
                                   metadata=None if self._shared is None else self._shared.key)
        self._release()

    def close(self) -> None:
        try:        # the copies in flight end, whatever their outcome
            self._finish_copies(wait=True)
        except Exception as exc:
            log.warning("%s: a copy to remote storage failed: %s", self.name, exc)
        concurrent.futures.wait(self._abandoned_copies.values())
        if self._owed:
            self._publish_now()
        if self._publish is not None:
            concurrent.futures.wait([self._publish])    # the shared metadata says it too
        for future in self._deleting.values():
            future.cancel()     # not waited for: the entries stay listed, the next open deletes
        self._deleting.clear()
        self._release()

    def _release(self) -> None:
        """Let go of the reads and the cache (close, delete_all)."""
        REFUSED.forget(self.name)
        self._wait_for_reads()
        for seg in self._cache.values():
            seg.delete()
        self._cache.clear()
        self._txn_indexes.clear()
        shutil.rmtree(self._cache_dir, ignore_errors=True)
