"""A tiered partition log through an outage of its store and the store's
return, at the pace of the broker's housekeeping (``copy_to_remote(wait=False)``
every few milliseconds here): what the owner's thread does, what the store
is asked, and what is logged.

- While the store is down, copies back off (one tried at a time, 1 s then
  doubling) instead of handing the copier a new batch of 16 at each call,
  each of them abandoned and listed for deletion; the failures are logged
  once when they start, with the count once the store answers again: not
  a line per failed copy or delete and per retry.
- When the store comes back to a long list of copies to delete (what an
  outage left, or a crash), no call of the owner's holds its thread: the
  deletes are confirmed a bounded batch at a time, each batch in one write
  of the metadata file, where each confirmation used to rewrite (and
  fsync) the whole file on the owner's thread.

The store is the local-directory one, with its calls failing while ``down``
(as an S3 client against an endpoint that refuses connections fails)."""
from __future__ import annotations

import dataclasses
import logging
import time
import uuid

from kafkalite.errors import KafkaStorageError
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.remote.metadata import RemoteLogMetadataFile, RemoteLogSegmentState
from kafkalite.storage.remote.remote_log import COPIES_QUEUED
from kafkalite.storage.remote.storage_manager import (LocalDirectoryRemoteStorage,
                                                      RemoteStorageError)
from harness import wait_until
from storage_helpers import batch

S = RemoteLogSegmentState
TIERED = {"remote.storage.enable": "true", "segment.bytes": "1200",
          "local.retention.bytes": "2000"}
TICK_S = 0.005          # the pace of the calls: far faster than the broker's 1 s
LEFT_BY_AN_OUTAGE = 1000    # copies listed for deletion when the store comes back
SLOWEST_CALL_S = 3.0    # the longest one call may hold the owner's thread: the old code held it
# 8.8-38.8 s here; one call is ~0.05 s on a quiet machine and 0.55 s was seen at load 18


class _Down(LocalDirectoryRemoteStorage):
    """A directory store whose every call fails at once while ``down``,
    counting the copies and deletes asked of it."""

    down = False

    def __init__(self, root):
        super().__init__(root)
        self.copies = 0
        self.deletes = 0

    def _check(self, what):
        if self.down:
            raise RemoteStorageError(f"the store is down ({what})")

    def copy_log_segment_data(self, segment_id, base_offset, data):
        self.copies += 1
        self._check("copy")
        super().copy_log_segment_data(segment_id, base_offset, data)

    def delete_log_segment_data(self, segment_id, base_offset):
        self.deletes += 1
        self._check("delete")
        super().delete_log_segment_data(segment_id, base_offset)

    def create_metadata(self, name, data):
        self._check("metadata write")
        return super().create_metadata(name, data)

    def fetch_metadata(self, name):
        self._check("metadata read")
        return super().fetch_metadata(name)

    def list_metadata(self, prefix):
        self._check("metadata list")
        return super().list_metadata(prefix)


def _fill(plog, clock, n=40):
    for i in range(n):
        plog.append(batch([b"record-%03d" % i * 20], timestamp=clock.now + i))
    plog.high_watermark = plog.log_end_offset


def _housekeeping(plog, seconds: float) -> tuple[int, float]:
    """``copy_to_remote(wait=False)`` every TICK_S for ``seconds``, as the
    broker's housekeeping calls it (a storage error is what the replica
    manager logs, a line each); returns (errors raised, the slowest call)."""
    raised, slowest = 0, 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.monotonic()
        try:
            plog.copy_to_remote(wait=False)
        except KafkaStorageError:
            raised += 1
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(TICK_S)
    return raised, slowest


def _outage_lines(caplog, raised: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] + \
        ["a storage error raised to the housekeeping"] * raised


def _copies_done(plog) -> bool:
    entries = RemoteLogMetadataFile(plog.directory).all
    return (all(s.state is S.COPY_SEGMENT_FINISHED for s in entries)
            and plog.highest_remote_offset == plog.segments[-1].base_offset - 1)


def test_copies_back_off_in_an_outage_and_log_once(tmp_path, clock, caplog):
    store = _Down(str(tmp_path / "remote"))
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=store)
    caplog.set_level(logging.INFO, logger="kafkalite")
    try:
        _fill(plog, clock)
        store.down = True
        raised, _ = _housekeeping(plog, 3.0)
        entries = RemoteLogMetadataFile(plog.directory).all
        lines = _outage_lines(caplog, raised)
        # the batch handed over before the first failure, then one copy at
        # 1 s and one at 3 s (the old code: a batch of 16 at each call, each
        # failed one and those behind it abandoned, listed for deletion, a
        # delete tried and logged for each: hundreds of copies, entries, lines)
        most = COPIES_QUEUED + 2
        assert store.copies <= most, f"{store.copies} copies tried in 3 s of outage"
        assert len(entries) <= most, f"{len(entries)} entries left by 3 s of outage"
        assert len(lines) <= 2, f"{len(lines)} lines logged in 3 s of outage: {lines[:5]}"

        caplog.clear()
        store.down = False
        def caught_up():
            _housekeeping(plog, 0.05)
            return _copies_done(plog)
        wait_until(caught_up, 30, "every rolled segment copied once the store is back")
        assert not any(s.state is S.DELETE_SEGMENT_STARTED
                       for s in RemoteLogMetadataFile(plog.directory).all)
        back = [r.getMessage() for r in caplog.records if "again" in r.getMessage()]
        assert back and "failed" in back[0], f"no line saying the store answers again: {back}"
    finally:
        store.down = False
        plog.close()


def _listed_for_deletion(plog, count: int) -> None:
    """``count`` entries DELETE_SEGMENT_STARTED in the log's metadata file,
    as an outage left them (copies of the same segments abandoned one batch
    after another), with no object of theirs in the store."""
    metadata = RemoteLogMetadataFile(plog.directory)
    first = metadata.all[0]
    left = [dataclasses.replace(first, id=uuid.uuid4().hex, state=S.COPY_SEGMENT_STARTED)
            for _ in range(count)]
    metadata.add_copy_started(*left)
    metadata.update_states([m.id for m in left], S.DELETE_SEGMENT_STARTED, 1)


def _settled(count, quiet_s: float = 0.3) -> None:
    """Until ``count()`` has not moved for ``quiet_s``."""
    last, since = count(), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.02)
        now = count()
        if now != last:
            last, since = now, time.monotonic()


def test_confirming_an_outages_deletes_holds_up_no_call(tmp_path, clock):
    store = _Down(str(tmp_path / "remote"))
    config = LogConfig.from_properties(TIERED)
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    _fill(plog, clock)
    plog.copy_to_remote()
    _listed_for_deletion(plog, LEFT_BY_AN_OUTAGE)
    plog.close()
    # reopened (its open hands the deletes over to the copier thread), the
    # store answering: the deletes are confirmed while the housekeeping goes on
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    try:
        # what the copier makes of them before the owner looks again (the
        # worker's housekeeping looks once a second)
        _settled(lambda: store.deletes)
        slowest = 0.0

        def confirmed():
            nonlocal slowest
            slowest = max(slowest, _housekeeping(plog, 0.05)[1])
            return not any(m.state is S.DELETE_SEGMENT_STARTED
                           for m in RemoteLogMetadataFile(plog.directory).all)
        wait_until(confirmed, 120, "the deletes the outage left confirmed")
        # the old code: every delete confirmed at one call, each rewriting and
        # fsyncing the whole file: seconds of the owner's thread (the worker's
        # loop: no heartbeat, fenced)
        assert slowest < SLOWEST_CALL_S, \
            f"a call held the owner's thread {slowest:.2f} s confirming the deletes"
        assert store.deletes == LEFT_BY_AN_OUTAGE
    finally:
        plog.close()
