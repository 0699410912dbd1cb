"""A replicated tiered partition's claim of the shared remote metadata
(remote_log.py's docstring, "on a replica"): the leader reads the store's
newest version, merges it with what it knows and writes the next one
under its leader epoch before it copies or deletes anything; then one
version per change of its entries, on the metadata thread; a follower
reads the newest version now and then and takes it as its entries.

``RemoteLeadership`` is a part of remote_log.py's ``RemoteLog`` (which
inherits it and holds its state): the process, threads and callers are
that module's.
"""
from __future__ import annotations

import concurrent.futures
import logging
import time
from dataclasses import replace

from kafkalite.storage.remote.copier import METADATA_THREAD as _metadata_thread
from kafkalite.storage.remote.copier import reserve
from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from kafkalite.storage.remote.metadata_store import (RemoteLogMetadataFenced,
                                                     SharedRemoteLogMetadata, partition_key)

log = logging.getLogger("kafkalite.storage.remote.remote_log")

FOLLOWER_REFRESH_S = 1.0        # a follower behind on what is copied reads the shared metadata
FOLLOWER_IDLE_REFRESH_S = 30.0  # at most this often, one that is not at most this often

# how far along an entry is, for merging two views of one (a claim)
_RANK = {RemoteLogSegmentState.COPY_SEGMENT_STARTED: 0,
         RemoteLogSegmentState.COPY_SEGMENT_FINISHED: 1,
         RemoteLogSegmentState.DELETE_SEGMENT_STARTED: 2,
         RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: 3}

S = RemoteLogSegmentState


class RemoteLeadership:
    """The shared metadata's claim and refresh, RemoteLog's part (this module's docstring)."""

    def lead(self, leader_epoch: int, topic_id=None) -> None:
        """This replica leads at ``leader_epoch``: the newest shared version
        is read (on the metadata thread) and claimed at the next
        ``copy_segments`` before anything is copied or deleted."""
        self._bind(topic_id)
        if self._leading and self._epoch == leader_epoch and not self._fenced:
            return
        self._leading, self._epoch = True, leader_epoch
        self._claimed = self._fenced = self._reservation_listed = False
        self._reservation = None        # a claim abandons what an earlier one listed
        self._claim = None

    def follow(self, topic_id=None) -> None:
        """This replica follows: it copies nothing more (those under way
        finish, under the epoch it led at, unless a newer leader wrote
        since), and takes the shared metadata's word on what is remote."""
        self._bind(topic_id)
        self._leading = self._claimed = False
        self._claim = None

    def _bind(self, topic_id) -> None:
        if self._shared is None:
            self._shared = SharedRemoteLogMetadata(self.storage,
                                                   partition_key(self.partition, topic_id))

    def _read_newest(self):
        """Copier thread: the newest shared version."""
        newest = self._shared.latest()
        if newest is not None:
            self._version = max(self._version, newest.version)
        return newest

    def _try_claim(self, wait: bool) -> bool:
        """Whether this leader holds the partition's metadata: its newest
        shared version read, merged with what this replica knows, and
        written under this leader's epoch (any older leader's write after
        that is refused)."""
        if self._claimed:
            return True
        if self._claim is None:
            if not (wait or self._reads_tried.due()):
                return False
            self._claim = _metadata_thread.submit(self._read_newest)
        if wait:
            concurrent.futures.wait([self._claim])
        if not self._claim.done():
            return False
        claim, self._claim = self._claim, None
        try:
            newest = claim.result()
        except Exception as exc:
            self._reads_tried.failed(exc)
            return False
        self._reads_tried.succeeded()
        if newest is not None and newest.leader_epoch > self._epoch:
            log.warning("%s: the remote log metadata was written at leader epoch %d, newer "
                        "than this leader's %d: nothing copied", self.name,
                        newest.leader_epoch, self._epoch)
            self._fenced = True
            return False
        self.metadata.replace(self._merge(newest))
        if newest is not None:
            self._shared_highest = max((s.end_offset for s in newest.segments
                                        if s.state is S.COPY_SEGMENT_FINISHED), default=-1)
        else:
            # nothing shared yet: what this replica's own file says (a log
            # tiered before the metadata was shared) is published now
            self._shared_highest = -1
        self._claimed = True
        self._publish_now(claim=True)
        log.info("%s: leads the remote log metadata at epoch %d (version %s, %d remote "
                 "segment(s))", self.name, self._epoch,
                 "none" if newest is None else newest.version, len(self.metadata.segments))
        return True

    def _merge(self, newest) -> list[RemoteLogSegmentMetadata]:
        """What a new leader takes: the shared entries (or, with none shared
        yet, this replica's own file), each as far along as this replica
        knows it went if it wrote it and nobody wrote since; copies started
        and not under way here are abandoned (DELETE_SEGMENT_STARTED: their
        objects deleted): a former leader's, or a crash's."""
        now = self._clock()
        in_flight = {m.id for _, m in self._copying}
        local = {m.id: m for m in self.metadata.all}
        if newest is None:
            entries = dict(local)
        else:
            entries = {m.id: m for m in newest.segments}
            nobody_since = newest.leader_epoch <= self._epoch
            for m in list(entries.values()):
                mine = local.get(m.id)
                if mine is not None and m.id in self._mine and nobody_since \
                        and _RANK[mine.state] > _RANK[m.state]:
                    entries[m.id] = mine
            if nobody_since:
                for m in local.values():
                    if m.id in self._mine and m.id not in entries:
                        entries[m.id] = m
        for m in list(entries.values()):
            if m.state is S.COPY_SEGMENT_STARTED and m.id not in in_flight:
                entries[m.id] = replace(m, state=S.DELETE_SEGMENT_STARTED, event_timestamp=now)
        return sorted(entries.values(), key=lambda s: s.base_offset)

    def _changed(self) -> None:
        """The entries changed here: the shared metadata follows (one write;
        while the writes back off, or within a copier pass, the next one,
        which takes this change too)."""
        if self._shared is None:
            return          # a log on its own: its file, written already, is all
        if self._deferring:
            self._owed = True
            return
        if self._writes_tried.failing and not self._writes_tried.due():
            self._publish_needed = True
            return
        self._publish_now()

    def _publish_now(self, claim: bool = False) -> None:
        self._publish_needed = False        # owed no more: written now, or nothing to write
        self._owed = False
        if self._shared is None or self._epoch is None or self._fenced:
            return
        if not (self._leading and self._claimed) and not (self._copying or self._mine):
            return
        snapshot = self.metadata.all
        if self._leading and self._claimed:
            # listed ahead: the next copy needs no write of its own (copier.py)
            self._reservation = reserve(self._reservation, snapshot, self.partition,
                                        self._clock())
            self._reservation_listed = True
            snapshot += (self._reservation,)
        if self._leading:
            self._mine.update(m.id for m in snapshot if m.state is not S.COPY_SEGMENT_FINISHED)
        # the copies handed over before this write: they follow earlier writes only
        running = [f for f, _ in self._copying] + list(self._abandoned_copies.values())
        self._publish = _metadata_thread.submit(self._write_version, self._epoch, snapshot,
                                                claim, running)

    def _write_version(self, epoch: int, snapshot, claim: bool, running) -> int:
        """Metadata thread: ``snapshot`` as the next shared version; returns
        the last offset it says is copied. Refused (fenced), the copies this
        replica made that the newer leader does not list as copied are
        deleted here, once the ``running`` ones ended (each waits on an
        earlier write only, done by now: no deadlock): no orphan."""
        try:
            self._version = self._shared.publish(epoch, snapshot, self._version)
        except RemoteLogMetadataFenced:
            concurrent.futures.wait(running)
            newest = self._shared.latest()
            keep = {m.id for m in (newest.segments if newest else ())
                    if m.state is S.COPY_SEGMENT_FINISHED}
            for m in snapshot:
                if m.id in self._mine and m.id not in keep:
                    self.storage.delete_log_segment_data(self._segment_id(m), m.base_offset)
            raise
        if claim:
            self._shared.delete_below(self._version)
        return max((m.end_offset for m in snapshot if m.state is S.COPY_SEGMENT_FINISHED),
                   default=-1)

    def _poll_publish(self, wait: bool) -> None:
        publish = self._publish
        if publish is None or not (wait or publish.done()):
            return
        try:
            self._shared_highest = publish.result()
            self._writes_tried.succeeded()
        except RemoteLogMetadataFenced as exc:
            log.warning("%s: deposed: %s; its copies under way are abandoned", self.name, exc)
            self._fenced = True
            self._publish = None
            for future, _ in self._copying:
                future.cancel()
            self._copying.clear()
            self._mine.clear()
            self._refreshed_at = 0.0
        except Exception as exc:
            self._writes_tried.failed(exc)
            self._publish = None
            self._publish_needed = True

    def _maybe_refresh(self, wait: bool = False, segments=()) -> None:
        """A follower (or a deposed leader) takes the newest shared version,
        read on the metadata thread (Kafka's RLMFollowerTask): its highest
        remote offset is what its local retention deletes up to. So it is
        read at most every FOLLOWER_REFRESH_S while the last of the log's
        rolled ``segments`` ends past that offset (a new version would let
        retention go on), and otherwise only every FOLLOWER_IDLE_REFRESH_S
        (the remote segments the leader's retention deleted, for the cache
        and the remote sizes): the store's LISTs are per partition."""
        if self._shared is None or self._leading:
            return
        if self._refresh is None:
            behind = bool(segments) and segments[-1].next_offset - 1 > self._shared_highest
            every = FOLLOWER_REFRESH_S if behind else FOLLOWER_IDLE_REFRESH_S
            if time.monotonic() - self._refreshed_at < every and not wait:
                return
            self._refreshed_at = time.monotonic()
            self._refresh = _metadata_thread.submit(self._read_newest)
        if wait:
            concurrent.futures.wait([self._refresh])
        if not self._refresh.done() or self._copying or self._deleting:
            return      # its own copies' entries are its to finish first
        refresh, self._refresh = self._refresh, None
        try:
            newest = refresh.result()
        except Exception as exc:
            self._reads_tried.failed(exc)
            return
        self._reads_tried.succeeded()
        if newest is None:
            return
        self._take(newest.segments)

    def _take(self, segments) -> None:
        """A follower takes ``segments``, the shared metadata's, as its entries."""
        self._mine.clear()
        self.metadata.replace(segments)
        self._shared_highest = max((s.end_offset for s in segments
                                    if s.state is S.COPY_SEGMENT_FINISHED), default=-1)
        for meta_id in [i for i in self._cache if all(s.id != i for s in segments)]:
            self._cache.pop(meta_id).delete()
