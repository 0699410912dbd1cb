"""The partition's remote log metadata in the remote store
(storage/remote/metadata_store.py), on both stores (a directory, and
moto's S3 server with its conditional writes): versions created only if
absent, a deposed leader's write refused, a crash mid-write leaving a
readable version, old versions deleted."""
import os

import pytest


from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from kafkalite.storage.remote.metadata_store import (RemoteLogMetadataFenced,
                                                     SharedRemoteLogMetadata)
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage

FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED




def _segment(base, end):
    return RemoteLogSegmentMetadata(os.urandom(8).hex(), base, end, 0, ((0, base),), 100,
                                    FINISHED, 0)


def test_a_deposed_leader_cannot_overwrite_a_newer_leaders_metadata(store):
    old = SharedRemoteLogMetadata(store, "t-0-id")
    new = SharedRemoteLogMetadata(store, "t-0-id")
    v1 = old.publish(3, [_segment(0, 9)], after=-1)
    # the new leader claims: reads the newest and writes the next under its epoch
    seen = new.latest()
    assert (seen.version, seen.leader_epoch) == (v1, 3)
    v2 = new.publish(4, seen.segments, after=seen.version)
    # the old leader, not knowing yet, writes what it thinks comes next
    with pytest.raises(RemoteLogMetadataFenced):
        old.publish(3, [_segment(0, 9), _segment(10, 19)], after=v1)
    latest = new.latest()
    assert (latest.version, latest.leader_epoch) == (v2, 4)
    assert [s.base_offset for s in latest.segments] == [0]
    # the same epoch's writer (a restarted leader) writes after the newest
    v3 = old.publish(4, [_segment(0, 9), _segment(10, 19)], after=v1)
    assert v3 == v2 + 1 and len(new.latest().segments) == 2
    # one version kept: each write deleted the one it followed
    assert new.versions() == [v3]


def test_an_existing_version_is_never_replaced(store):
    shared = SharedRemoteLogMetadata(store, "t-1")
    shared.publish(1, [_segment(0, 9)], after=-1)
    name = shared.prefix + "%020d.json" % 0
    assert store.create_metadata(name, b"{}") is False
    assert [s.base_offset for s in shared.latest().segments] == [0]


def test_a_crash_mid_write_leaves_the_previous_version_readable(tmp_path):
    store = LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    shared = SharedRemoteLogMetadata(store, "t-0")
    shared.publish(1, [_segment(0, 9)], after=-1)
    # what a kill between the temporary file's write and its link leaves
    directory = os.path.join(store.root, shared.prefix)
    with open(os.path.join(directory, ".%020d.json.dead.tmp" % 1), "wb") as f:
        f.write(b'{"version": 1, "segm')
    latest = shared.latest()
    assert latest.version == 0 and [s.end_offset for s in latest.segments] == [9]
    assert shared.publish(1, [_segment(0, 9), _segment(10, 19)], after=0) == 1
