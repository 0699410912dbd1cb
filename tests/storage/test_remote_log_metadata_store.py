"""The partition's remote log metadata in the remote store
(storage/remote/metadata_store.py), on both stores (a directory, and
moto's S3 server with its conditional writes): versions created only if
absent, a deposed leader's write refused, a crash mid-write leaving a
readable version, old versions deleted."""
import os

import pytest


from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from kafkalite.storage.remote.metadata_store import (STALE_VERSIONS, RemoteLogMetadataFenced,
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
    # the versions written over are kept until STALE_VERSIONS of them go
    # together; a claim deletes those below the newest at once
    assert new.versions() == [v1, v2, v3]
    new.delete_below(v3)
    assert new.versions() == [v3]


def test_a_version_is_one_put_and_the_old_ones_go_in_one_request(s3_endpoint):
    """Issue 71: each change of the metadata was a PUT and a DELETE (the
    version it followed), two requests a copied segment; now the versions
    written over are deleted STALE_VERSIONS at a time in one DeleteObjects."""
    from kafkalite.storage.remote.s3_storage import S3RemoteStorage
    store = S3RemoteStorage("tiered", endpoint_url=s3_endpoint)
    store.bucket = "b" + os.urandom(6).hex()
    store.s3.create_bucket(Bucket=store.bucket)
    sent = []
    store.s3.meta.events.register(
        "before-send.s3.*", lambda request, **_: sent.append(request.method))
    shared = SharedRemoteLogMetadata(store, "t-0-id")
    writes = 2 * STALE_VERSIONS + 5
    version, segments = -1, []
    for i in range(writes):
        segments.append(_segment(10 * i, 10 * i + 9))
        version = shared.publish(2, segments, after=version)
    assert sent.count("PUT") == writes
    assert len(sent) <= writes + 2, f"{len(sent)} requests for {writes} versions: {sent}"
    assert sent.count("POST") == 2                          # DeleteObjects, twice
    assert len(shared.versions()) <= STALE_VERSIONS + 1
    assert [s.base_offset for s in shared.latest().segments] == [10 * i for i in range(writes)]


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
