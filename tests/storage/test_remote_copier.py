"""The copier pool (storage/remote/copier.py) and a copier pass's single
write of the shared remote log metadata (remote_log.py), against moto's
S3 server (issue 71, item 4: the copier fell behind a 1 MB/s producer with
1 MiB segments): copies of several partitions, and of one partition's next
segments, overlap in time and are still listed in offset order; a copied
segment costs at most one request of the shared metadata."""
import os
import threading
import time
import uuid

import pytest

from harness import wait_until
from moto_s3 import moto_s3_server

from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.remote.metadata import RemoteLogSegmentState
from kafkalite.storage.remote.metadata_store import METADATA_PREFIX, STALE_VERSIONS
from kafkalite.storage.remote.s3_storage import S3RemoteStorage
from storage_helpers import batch

TIERED = {"remote.storage.enable": "true", "segment.bytes": "1200",
          "local.retention.bytes": "-1"}
PUT_HELD_S = 0.3        # each segment.log PUT held this long by the store: a copy takes a while


class HeldPuts:
    """Counts the segment.log PUTs the store holds at once (the most seen)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.now = self.most = 0

    def __call__(self, method, path):
        if method != "PUT" or not path.endswith("/segment.log"):
            return
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(PUT_HELD_S)
        with self._lock:
            self.now -= 1


@pytest.fixture
def s3():
    with moto_s3_server() as server:
        yield server


def _store(s3):
    """A bucket of its own (moto keeps every bucket for the whole process)."""
    store = S3RemoteStorage("tiered", endpoint_url=s3.endpoint)
    store.bucket = "b" + os.urandom(6).hex()
    store.s3.create_bucket(Bucket=store.bucket)
    return store


def _leader(tmp_path, store, name, clock, topic_id):
    plog = PartitionLog.open(str(tmp_path / name), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=store, remote_leadership=True)
    plog.remote.lead(1, topic_id)
    return plog


def _fill(plog, clock, n):
    for i in range(n):
        plog.append(batch([b"record-%03d" % i * 20], timestamp=clock.now + i))
    plog.high_watermark = plog.log_end_offset


def _copied(plog):
    return [m.base_offset for m in plog.remote.metadata.all
            if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]


def test_copies_of_several_partitions_and_segments_overlap_and_finish_in_order(
        tmp_path, clock, s3):
    """On the old code every copy ran on one thread: one segment.log PUT at
    a time, whatever the number of partitions."""
    held = HeldPuts()
    s3.on_request = held
    store = _store(s3)
    logs = [_leader(tmp_path, store, "t-%d" % p, clock, uuid.uuid4()) for p in range(2)]
    try:
        for plog in logs:
            _fill(plog, clock, 30)
        rolled = [[s.base_offset for s in plog.segments[:-1]] for plog in logs]
        assert all(len(r) >= 4 for r in rolled)
        listed = [[] for _ in logs]

        def copied_all():
            for plog, seen in zip(logs, listed):
                plog.copy_to_remote(wait=False)
                seen.append(_copied(plog))
            return all(_copied(p) == r for p, r in zip(logs, rolled))
        wait_until(copied_all, timeout=60, message="every rolled segment copied")
        assert held.most >= 2, f"at most {held.most} segment PUT(s) at once"
        # each view of a partition's copies was a prefix of its segments:
        # never a later one listed before an earlier one
        for seen, r in zip(listed, rolled):
            assert all(view == r[:len(view)] for view in seen), seen
    finally:
        s3.on_request = None
        for plog in logs:
            plog.close()


def test_a_copied_segment_costs_at_most_one_request_of_the_shared_metadata(
        tmp_path, clock, s3):
    """A producer rolling a segment between copier passes (1 MB/s, 1 MiB
    segments, one pass a second), each copy done before the next roll. On
    the old code each segment cost a COPY_SEGMENT_STARTED and a
    COPY_SEGMENT_FINISHED version, each a PUT and a DELETE of the one
    before: four requests."""
    asked = []      # the metadata's requests: its versions, and DeleteObjects (a POST)
    s3.on_request = lambda method, path: asked.append(method) \
        if METADATA_PREFIX in path or method == "POST" else None
    store = _store(s3)
    plog = _leader(tmp_path, store, "t-0", clock, uuid.uuid4())
    try:
        _fill(plog, clock, 8)
        plog.copy_to_remote()       # the claim and a first copy
        plog.copy_to_remote()
        asked.clear()
        copied = len(_copied(plog))
        for _ in range(40):
            rolled = len(plog.segments) - 1
            while len(plog.segments) - 1 == rolled:
                _fill(plog, clock, 1)
            wait_until(lambda: plog.copy_to_remote(wait=False) or not plog.remote.copy_in_flight,
                       timeout=30, message="the segment copied")
        while plog.remote.copy_in_flight:
            plog.copy_to_remote(wait=False)
        segments = len(_copied(plog)) - copied
        assert segments >= 40
        # a PUT a segment (its FINISHED, with the next one reserved: its copy
        # starts without a write), a DeleteObjects each STALE_VERSIONS versions
        # (measured: 40 PUTs and 1 POST for 40 segments)
        assert asked.count("PUT") <= segments + 1, asked
        assert len(asked) <= segments * (1 + 1 / STALE_VERSIONS) + 1, \
            f"{len(asked)} metadata requests for {segments} segments: {asked}"
        assert asked.count("POST") >= 1
    finally:
        s3.on_request = None
        plog.close()


def test_a_copy_under_the_reserved_id_needs_no_write_and_leaves_no_orphan_if_its_leader_dies(
        tmp_path, clock, s3):
    """Each write lists the next copy ahead (COPY_SEGMENT_STARTED at the
    next base offset): that copy starts with no write of its own (on the
    old code, a PUT and a DELETE before it), and if its leader dies before
    writing it finished, the new leader deletes what it put."""
    store = _store(s3)
    topic_id = uuid.uuid4()
    old = _leader(tmp_path, store, "a/t-0", clock, topic_id)
    new = None
    try:
        _fill(old, clock, 8)
        old.copy_to_remote()
        old.copy_to_remote()        # written finished, with the next copy reserved
        before = set(store.list_segments("t-0"))
        asked = []
        s3.on_request = lambda method, path: asked.append((method, path)) \
            if METADATA_PREFIX in path else None
        rolled = len(old.segments) - 1
        while len(old.segments) - 1 == rolled:
            _fill(old, clock, 1)
        old.copy_to_remote(wait=False)
        wait_until(lambda: len(store.list_segments("t-0")) == len(before) + 1, 30,
                   "the new segment's copy in the store")
        assert asked == [], f"the copy wrote the metadata first: {asked}"
        # its leader is gone before it writes the copy finished: the next one
        # claims the partition and deletes the objects of the copy it never saw
        new = PartitionLog.open(str(tmp_path / "b" / "t-0"), LogConfig.from_properties(TIERED),
                                clock=clock, remote_storage=store, remote_leadership=True)
        new.remote.lead(2, topic_id)
        new.copy_to_remote()
        listed = {m.id for m in new.remote.metadata.all
                  if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED}
        assert {name.split("-", 1)[1] for name in store.list_segments("t-0")} == listed
        assert set(store.list_segments("t-0")) == before
    finally:
        s3.on_request = None
        for plog in (old, new):
            if plog is not None:
                plog.close()
