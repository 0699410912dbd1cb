"""The remote stores (KIP-405's RemoteStorageManager: a local directory, and
S3 through boto3 against moto's S3 server) and the per-partition remote log
metadata, on real segments in real directories."""
import os

import pytest


from kafkalite.storage.remote.metadata import (RemoteLogMetadataFile, RemoteLogSegmentMetadata,
                                               RemoteLogSegmentState)
from kafkalite.storage.remote.s3_storage import S3RemoteStorage
from kafkalite.storage.remote.storage_manager import (LocalDirectoryRemoteStorage, LogSegmentData,
                                                      RemoteLogSegmentId, RemoteStorageError)
from kafkalite.storage.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_path
from storage_helpers import batch

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED




def _rolled_segment(open_log):
    plog = open_log(segment_bytes=2000)
    for i in range(20):
        plog.append(batch([b"v%03d" % i * 40]))
    seg = plog.segments[0]
    assert seg is not plog.active_segment
    return plog, seg


def _data(seg, **kw):
    return LogSegmentData(seg.path, segment_path(seg.directory, seg.base_offset, INDEX_SUFFIX),
                          segment_path(seg.directory, seg.base_offset, TIME_INDEX_SUFFIX),
                          kw.get("txn"), kw.get("snapshot"), b"0\n1\n0 0\n")


def test_a_copied_segment_reads_back_byte_for_byte_by_range(open_log, store):
    _, seg = _rolled_segment(open_log)
    sid = RemoteLogSegmentId.generate("t-0")
    store.copy_log_segment_data(sid, seg.base_offset, _data(seg))
    with open(seg.path, "rb") as f:
        local = f.read()
    assert store.fetch_log_segment(sid, seg.base_offset, 0) == local
    assert store.fetch_log_segment(sid, seg.base_offset, 61, 700) == local[61:700]
    with open(segment_path(seg.directory, seg.base_offset, INDEX_SUFFIX), "rb") as f:
        assert store.fetch_index(sid, seg.base_offset, "OFFSET") == f.read()
    assert store.fetch_index(sid, seg.base_offset, "LEADER_EPOCH") == b"0\n1\n0 0\n"
    assert store.fetch_index(sid, seg.base_offset, "TRANSACTION") is None   # none copied
    assert store.list_segments("t-0") == ["%020d-%s" % (seg.base_offset, sid.id)]
    store.delete_log_segment_data(sid, seg.base_offset)
    store.delete_log_segment_data(sid, seg.base_offset)      # again: nothing to do
    assert store.list_segments("t-0") == []
    with pytest.raises(RemoteStorageError):
        store.fetch_log_segment(sid, seg.base_offset, 0)


def test_a_copy_that_fails_midway_leaves_nothing_listed(open_log, store, tmp_path):
    """A failure after some files were copied (here, a snapshot file that is
    gone) lists no half copy and leaves none of its files behind."""
    _, seg = _rolled_segment(open_log)
    sid = RemoteLogSegmentId.generate("t-0")
    with pytest.raises(RemoteStorageError):
        store.copy_log_segment_data(sid, seg.base_offset,
                                    _data(seg, snapshot=str(tmp_path / "gone.snapshot")))
    assert store.list_segments("t-0") == []
    if isinstance(store, S3RemoteStorage):
        assert "Contents" not in store.s3.list_objects_v2(Bucket=store.bucket)
    else:
        assert os.listdir(tmp_path / "remote" / "t-0") == []


def test_a_copy_a_kill_left_in_a_directory_store_is_never_listed(open_log, tmp_path):
    """The directory store writes a copy under a hidden temporary name and
    renames it: what a kill leaves is not listed, and the delete by id
    (the clean-up at the next open) removes it."""
    _, seg = _rolled_segment(open_log)
    store = LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    sid = RemoteLogSegmentId.generate("t-0")
    killed = tmp_path / "remote" / "t-0" / (".%020d-%s.tmp" % (seg.base_offset, sid.id))
    killed.mkdir(parents=True)
    (killed / "segment.log").write_bytes(b"half")
    assert store.list_segments("t-0") == []
    store.delete_log_segment_data(sid, seg.base_offset)      # the orphan's clean-up
    assert not killed.exists()


def _meta(sid, base, end, state=STARTED):
    return RemoteLogSegmentMetadata(sid, base, end, 1000 + base, ((0, base),), 100, state, 1)


def test_remote_log_metadata_survives_a_reopen_and_follows_kafkas_states(tmp_path):
    md = RemoteLogMetadataFile(str(tmp_path))
    assert (md.log_start_offset, md.highest_offset) == (None, -1)
    md.add_copy_started(_meta("b", 100, 199))
    md.add_copy_started(_meta("a", 0, 99))
    assert md.segments == [], "a copy only started is not readable"
    md.update_state("a", FINISHED, 2)
    md.update_state("b", FINISHED, 2)
    again = RemoteLogMetadataFile(str(tmp_path))
    assert [s.id for s in again.segments] == ["a", "b"]
    assert (again.log_start_offset, again.highest_offset) == (0, 199)
    assert again.find(150).id == "b" and again.find(200) is None
    with pytest.raises(ValueError):
        again.update_state("a", STARTED, 3)             # no way back
    again.update_state("a", RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 3)
    assert again.log_start_offset == 100, "a segment being deleted is no longer read"
    again.update_state("a", RemoteLogSegmentState.DELETE_SEGMENT_FINISHED, 4)
    assert [s.id for s in RemoteLogMetadataFile(str(tmp_path)).all] == ["b"]
    assert not os.path.exists(again.path + ".tmp")


def test_a_states_change_of_many_entries_is_one_write_all_or_none(tmp_path):
    md = RemoteLogMetadataFile(str(tmp_path))
    md.add_copy_started(_meta("a", 0, 99), _meta("b", 100, 199), _meta("c", 200, 299))
    assert [s.id for s in RemoteLogMetadataFile(str(tmp_path)).all] == ["a", "b", "c"]
    with pytest.raises(KeyError):
        md.update_states(["a", "nope"], FINISHED, 2)
    assert RemoteLogMetadataFile(str(tmp_path)).segments == [], "nothing changed"
    assert md.segments == []
    md.update_states(["a", "b"], FINISHED, 2)
    assert [s.id for s in RemoteLogMetadataFile(str(tmp_path)).segments] == ["a", "b"]


def test_a_directory_stores_link_outlives_the_copys_delete(open_log, tmp_path):
    """link_log_segment, the directory store's read in place: the link
    reads the whole segment after the store deleted the copy."""
    _, seg = _rolled_segment(open_log)
    store = LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    sid = RemoteLogSegmentId.generate("t-0")
    store.copy_log_segment_data(sid, seg.base_offset, _data(seg))
    link = str(tmp_path / "linked.log")
    assert store.link_log_segment(sid, seg.base_offset, link)
    store.delete_log_segment_data(sid, seg.base_offset)
    assert store.list_segments("t-0") == []
    with open(seg.path, "rb") as f, open(link, "rb") as linked:
        assert linked.read() == f.read()
    with pytest.raises(RemoteStorageError):
        store.link_log_segment(sid, seg.base_offset, str(tmp_path / "again.log"))


def _s3_store(s3_endpoint):
    store = S3RemoteStorage("tiered", endpoint_url=s3_endpoint)
    store.bucket = "b" + os.urandom(6).hex()
    store.s3.create_bucket(Bucket=store.bucket)
    sent = []
    store.s3.meta.events.register(
        "before-send.s3.*", lambda request, **_: sent.append((request.method, request.url)))
    return store, sent


def test_an_s3_copy_is_two_puts_and_a_segment_fetchs_indexes_one_get(open_log, s3_endpoint):
    """Issue 71: a copy was six PUTs (an object per index), which kept a
    loaded copier behind a 1 MB/s producer; now the indexes travel as one
    object, and the three a segment fetch reads come with one ranged GET."""
    _, seg = _rolled_segment(open_log)
    store, sent = _s3_store(s3_endpoint)
    sid = RemoteLogSegmentId.generate("t-0")
    store.copy_log_segment_data(sid, seg.base_offset, _data(seg, txn=seg.path))
    assert [m for m, _ in sent] == ["PUT", "PUT"], sent
    assert sent[-1][1].endswith("/segment.log")        # last: the copy is complete with it
    sent.clear()
    fresh, gets = _s3_store(s3_endpoint)                # no head kept from the copy
    fresh.bucket = store.bucket
    with open(segment_path(seg.directory, seg.base_offset, TIME_INDEX_SUFFIX), "rb") as f:
        assert fresh.fetch_index(sid, seg.base_offset, "TIMESTAMP") == f.read()
    with open(seg.path, "rb") as f:
        assert fresh.fetch_index(sid, seg.base_offset, "TRANSACTION") == f.read()
    assert fresh.fetch_index(sid, seg.base_offset, "PRODUCER_SNAPSHOT") is None
    assert fresh.fetch_index(sid, seg.base_offset, "LEADER_EPOCH") == b"0\n1\n0 0\n"
    assert [m for m, _ in gets] == ["GET"], gets


def test_an_index_beyond_the_bundles_head_is_one_more_ranged_get(open_log, s3_endpoint, tmp_path):
    from kafkalite.storage.remote.s3_storage import BUNDLE_HEAD_BYTES
    _, seg = _rolled_segment(open_log)
    store, sent = _s3_store(s3_endpoint)
    big = tmp_path / "big.index"
    big.write_bytes(os.urandom(BUNDLE_HEAD_BYTES + 5000))
    sid = RemoteLogSegmentId.generate("t-0")
    store.copy_log_segment_data(sid, seg.base_offset, LogSegmentData(
        seg.path, str(big), str(big), None, None, b"0\n"))
    sent.clear()
    assert store.fetch_index(sid, seg.base_offset, "OFFSET") == big.read_bytes()
    assert store.fetch_index(sid, seg.base_offset, "TIMESTAMP") == big.read_bytes()
    assert store.fetch_index(sid, seg.base_offset, "LEADER_EPOCH") == b"0\n"
    assert len(sent) == 3, sent     # the head, then each index beyond it


def test_a_copy_made_before_the_bundle_reads_as_it_was_written(open_log, s3_endpoint):
    """Buckets filled before the bundle keep an object per index."""
    _, seg = _rolled_segment(open_log)
    store, _ = _s3_store(s3_endpoint)
    sid = RemoteLogSegmentId.generate("t-0")
    prefix = f"t-0/{'%020d-%s' % (seg.base_offset, sid.id)}/"
    index = segment_path(seg.directory, seg.base_offset, INDEX_SUFFIX)
    store.s3.upload_file(index, store.bucket, prefix + "offset.index")
    store.s3.put_object(Bucket=store.bucket, Key=prefix + "leader-epoch-checkpoint", Body=b"0\n")
    store.s3.upload_file(seg.path, store.bucket, prefix + "segment.log")
    with open(index, "rb") as f:
        assert store.fetch_index(sid, seg.base_offset, "OFFSET") == f.read()
    assert store.fetch_index(sid, seg.base_offset, "LEADER_EPOCH") == b"0\n"
    assert store.fetch_index(sid, seg.base_offset, "TRANSACTION") is None
    with pytest.raises(RemoteStorageError):
        store.fetch_index(sid, seg.base_offset, "TIMESTAMP")     # required, and missing
