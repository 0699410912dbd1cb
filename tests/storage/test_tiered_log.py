"""A tiered partition log (KIP-405) over the local-directory remote store:
rolled segments copied, local copies deleted past local retention, reads
below the local log start served from the remote copy, total retention
deleting remote segments, and what a crash mid-copy leaves."""
import os

import pytest

from kafkalite.errors import OffsetOutOfRangeError
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.log import MAX_TIMESTAMP
from kafkalite.storage.remote.metadata import (RemoteLogMetadataFile, RemoteLogSegmentMetadata,
                                               RemoteLogSegmentState)
from kafkalite.storage.remote.storage_manager import (LocalDirectoryRemoteStorage,
                                                      RemoteStorageError)
from harness import wait_until
from soak import setting
from storage_helpers import batch, read_all

TIERED = {"remote.storage.enable": "true", "segment.bytes": "1200",
          "local.retention.bytes": "2000"}


@pytest.fixture
def tiered(tmp_path, clock):
    """tiered(**topic configs) -> an open tiered PartitionLog over one store."""
    store = LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    opened = []

    def _open(**props):
        cfg = LogConfig.from_properties({**TIERED, **props})
        plog = PartitionLog.open(str(tmp_path / "t-0"), cfg, clock=clock, remote_storage=store)
        opened.append(plog)
        return plog

    _open.store = store
    yield _open
    for plog in opened:
        if not plog.closed:
            plog.close()


def _raw(plog, start=0):
    """Every batch from ``start`` to the end, as the bytes a fetch sends."""
    out, offset = [], start
    while offset < plog.log_end_offset:
        data = plog.read(offset, 100_000)
        assert data.region is not None, f"nothing read at {offset}"
        out.append(data.read())
        offset = read_all_next(data.read())
    return b"".join(out)


def read_all_next(chunk: bytes) -> int:
    from kafkalite.record import decode_columns
    return decode_columns(chunk).next_offset


def _fill(plog, clock, n=40):
    for i in range(n):
        plog.append(batch([b"record-%03d" % i * 20], timestamp=clock.now + i))
    plog.high_watermark = plog.log_end_offset       # committed: copies stop at the LSO


def test_copied_segments_leave_the_disk_and_read_back_identical_from_offset_0(tiered, clock):
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    rolled = len(plog.segments) - 1
    assert rolled >= 8
    assert plog.delete_old_segments() == 0, "nothing is deleted locally before it is copied"
    assert plog.copy_to_remote() == rolled
    assert plog.highest_remote_offset == plog.segments[-1].base_offset - 1
    deleted = plog.delete_old_segments()
    assert deleted > 0
    assert plog.log_start_offset == 0, "the log start stays the remote start"
    assert plog.local_log_start_offset == plog.segments[0].base_offset > 0
    assert sum(s.size for s in plog.segments[:-1]) <= 2000
    assert _raw(plog) == before, "the remote segments read back byte for byte"
    values = [v for _, _, _, v, _ in read_all(plog, start=0)]
    assert values == [b"record-%03d" % i * 20 for i in range(40)]
    # by timestamp, in a remote segment
    assert plog.offset_for_timestamp(clock.now + 3) == (3, clock.now + 3)


def test_the_largest_timestamp_may_be_in_a_remote_segment(tiered, clock):
    plog = tiered()
    _fill(plog, clock)                          # timestamps now+0 .. now+39
    plog.append(batch([b"from the future"], timestamp=clock.now + 10 ** 9))    # offset 40
    _fill(plog, clock)                          # now+0 .. now+39 again
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert plog.local_log_start_offset > 40
    assert plog.offset_for_timestamp(MAX_TIMESTAMP) == (40, clock.now + 10 ** 9)


def test_a_reopened_tiered_log_keeps_its_remote_start(tiered, clock):
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    plog.copy_to_remote()
    plog.delete_old_segments()
    local_start = plog.local_log_start_offset
    plog.close()
    again = tiered()
    assert (again.log_start_offset, again.local_log_start_offset) == (0, local_start)
    assert _raw(again) == before
    again.append(batch([b"after"]))
    assert again.log_end_offset == 41


def test_total_retention_deletes_remote_segments_and_moves_the_log_start(tiered, clock):
    plog = tiered(**{"retention.bytes": "5000"})
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.delete_old_segments()
    plog.copy_to_remote()   # waits for the store's deletes, made on the copier thread
    remote = RemoteLogMetadataFile(plog.directory).segments
    total = sum(s.size for s in remote if s.end_offset < plog.local_log_start_offset) \
        + plog.size_in_bytes
    assert total <= 5000 + remote[0].size
    assert plog.log_start_offset == remote[0].base_offset > 0
    assert len(tiered.store.list_segments("t-0")) == len(remote)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 1000)
    assert read_all(plog)[0][0] == plog.log_start_offset


def test_delete_records_and_topic_deletion_reach_the_remote_store(tiered, clock):
    plog = tiered()
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.delete_old_segments()
    second = RemoteLogMetadataFile(plog.directory).segments[1]
    plog.delete_records(second.base_offset + 1)
    assert plog.log_start_offset == second.base_offset + 1
    assert RemoteLogMetadataFile(plog.directory).segments[0].id == second.id
    assert read_all(plog)[0][0] == second.base_offset + 1
    plog.delete()
    # the node's deleter makes the store's deletes, off the caller's thread
    wait_until(lambda: tiered.store.list_segments("t-0") == [], 10, "the remote copies deleted")
    # the deleter drops its record after the store's deletes (the metadata's
    # versions last): not at the same instant as the copies go
    deletes = os.path.join(os.path.dirname(plog.directory), "remote-log-deletes")
    wait_until(lambda: not os.listdir(deletes), 10, "the deleter's record dropped")


def test_a_copy_a_crash_left_unfinished_is_deleted_and_copied_again(tiered, clock):
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    plog.close()
    # what a kill between COPY_SEGMENT_STARTED and the rename leaves
    metadata = RemoteLogMetadataFile(plog.directory)
    metadata.add_copy_started(RemoteLogSegmentMetadata(
        "deadbeef", 0, 3, 0, ((0, 0),), 500, RemoteLogSegmentState.COPY_SEGMENT_STARTED, 1))
    orphan = os.path.join(tiered.store.root, "t-0", ".%020d-deadbeef.tmp" % 0)
    os.makedirs(orphan)
    again = tiered()
    # the open's delete runs on the copier thread: waited for, no copy started
    again.copy_to_remote(start=False)
    assert RemoteLogMetadataFile(again.directory).all == ()
    assert not os.path.exists(orphan)
    assert again.copy_to_remote() == len(again.segments) - 1
    again.delete_old_segments()
    names = tiered.store.list_segments("t-0")
    assert len(names) == len({n.split("-")[0] for n in names}), "no segment listed twice"
    assert _raw(again) == before


def test_nothing_above_the_last_stable_offset_is_copied(tiered, clock):
    plog = tiered()
    _fill(plog, clock)
    plog.high_watermark = plog.segments[3].base_offset
    assert plog.copy_to_remote() == 3, "only the segments wholly committed"
    assert plog.highest_remote_offset == plog.segments[3].base_offset - 1


def test_local_deletion_takes_the_producer_snapshots_below_the_local_start(tiered, clock):
    from kafkalite.storage.producer_snapshot import list_snapshots
    plog = tiered()
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert min(list_snapshots(plog.directory)) >= plog.local_log_start_offset


@pytest.mark.processes
@pytest.mark.slow
def test_kill_9_while_copying_loses_no_segment_and_lists_none_twice(tmp_path):
    """KAFKALITE_TIERED_KILLS kills (tests/soak.py: 3, 50 under tools/soak)
    of a child appending, copying and deleting local copies at random
    moments (6 of 20 landed between COPY_SEGMENT_STARTED and FINISHED in a
    run of 20, the rest elsewhere in the loop). After
    each: every acknowledged record reads back from offset 0, the remote
    copies are exactly the finished metadata entries (what the kill left half
    done deleted at the open), one per offset range, contiguous."""
    import random
    import subprocess
    import sys
    import time

    import crash_writer
    import tiered_copier
    from storage_helpers import child_env
    directory, store_dir = str(tmp_path / "tiered-0"), str(tmp_path / "remote")
    store = LocalDirectoryRemoteStorage(store_dir)
    rng = random.Random(20261127)
    acked = -1
    for kill in range(setting("KAFKALITE_TIERED_KILLS")):
        proc = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "tiered_copier.py"),
             directory, store_dir, str(kill)], stdout=subprocess.PIPE, env=child_env())
        try:
            ready = proc.stdout.readline().split()
            assert ready and ready[0] == b"ready", ready
            time.sleep(rng.uniform(0.2, 0.6))
        finally:
            proc.kill()
            rest = proc.stdout.read()
            proc.wait()
        acks = [int(line.split()[1]) for line in rest.split(b"\n")[:-1] if line.startswith(b"ack ")]
        acked = max([acked, *acks])
        plog = PartitionLog.open(directory, tiered_copier.CONFIG, remote_storage=store)
        try:
            plog.copy_to_remote(start=False)    # the open's deletes, on the copier thread
            remote = RemoteLogMetadataFile(directory)
            assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in remote.all)
            assert store.list_segments("tiered-0") == sorted(
                "%020d-%s" % (s.base_offset, s.id) for s in remote.all)
            for before, after in zip(remote.all, remote.all[1:]):
                assert after.base_offset == before.end_offset + 1
            assert plog.log_start_offset == 0
            assert plog.local_log_start_offset <= plog.highest_remote_offset + 1
            records = read_all(plog, start=0)
            assert [r[0] for r in records] == list(range(len(records)))
            assert len(records) > acked, "an acknowledged record was lost"
            for offset, _, k, v, _ in records:
                assert (k, v) == (crash_writer.key(offset), crash_writer.value(offset))
        finally:
            plog.close()
    assert len(RemoteLogMetadataFile(directory).all) >= 3


def test_the_broker_copies_off_its_thread(tiered, clock):
    """copy_to_remote(wait=False), as the broker's housekeeping calls it:
    the copies run on the copier thread and later calls finish them (a
    segment stays local, and is not read from the store, until then);
    close waits for the copies in flight."""
    plog = tiered()
    _fill(plog, clock)
    rolled = len(plog.segments) - 1
    assert plog.copy_to_remote(wait=False) == 0, "started, not finished"
    assert plog.remote.copy_in_flight and plog.highest_remote_offset == -1
    assert plog.delete_old_segments() == 0, "nothing local goes before its copy is finished"
    finished = [0]

    def all_finished():
        finished[0] += plog.copy_to_remote(wait=False)
        return finished[0] == rolled
    wait_until(all_finished, message=lambda: f"{finished[0]} of {rolled} copies finished")
    assert plog.highest_remote_offset == plog.segments[-1].base_offset - 1
    plog.copy_to_remote(wait=False)
    assert not plog.remote.copy_in_flight, "nothing left to copy"
    plog.roll()                                 # one more segment to copy
    plog.append(batch([b"after the roll"]))
    plog.high_watermark = plog.log_end_offset
    plog.copy_to_remote(wait=False)
    assert plog.remote.copy_in_flight
    plog.close()
    again = tiered()
    assert again.highest_remote_offset == again.segments[-1].base_offset - 1


def test_a_former_leader_finishes_its_copies_and_starts_none(tiered, clock):
    plog = tiered()
    _fill(plog, clock, n=20)
    assert plog.copy_to_remote(wait=False) == 0
    copied = len(plog.segments) - 1
    _fill(plog, clock, n=20)                    # more rolled segments, not handed over
    finished = [0]

    def done():
        finished[0] += plog.copy_to_remote(wait=False, start=False)
        return not plog.remote.copy_in_flight
    wait_until(done)
    assert finished[0] == copied, "what was started is finished"
    assert plog.highest_remote_offset == plog.segments[copied].base_offset - 1
    assert plog.copy_to_remote(wait=False, start=False) == 0
    assert not plog.remote.copy_in_flight, "nothing new is started"


class _FailingOnce(LocalDirectoryRemoteStorage):
    """A directory store whose copy of one segment fails the first time (a
    full disk, an S3 outage)."""

    def __init__(self, root, base_offset):
        super().__init__(root)
        self.fail_at = base_offset

    def copy_log_segment_data(self, segment_id, base_offset, data):
        if base_offset == self.fail_at:
            self.fail_at = None
            raise RemoteStorageError(f"no space left for segment {base_offset}")
        super().copy_log_segment_data(segment_id, base_offset, data)


def test_a_failed_copy_drops_the_ones_queued_behind_it_and_is_retried(tmp_path, clock):
    """No gap: the copies after a failed one are not finished (local
    retention would take the failed segment for copied and delete it),
    and the next call copies them all again under new ids."""
    base = LogConfig.from_properties(TIERED)
    probe = PartitionLog.open(str(tmp_path / "probe-0"), base, clock=clock)
    _fill(probe, clock)
    third = probe.segments[2].base_offset
    probe.close()
    store = _FailingOnce(str(tmp_path / "remote"), third)
    plog = PartitionLog.open(str(tmp_path / "t-0"), base, clock=clock, remote_storage=store)
    try:
        _fill(plog, clock)
        before = _raw(plog)
        with pytest.raises(RemoteStorageError, match="no space left"):
            plog.copy_to_remote()
        assert plog.highest_remote_offset == third - 1, "the two before it are copied"
        assert len(store.list_segments("t-0")) == 2, "those queued after it are deleted"
        plog.delete_old_segments()
        assert plog.local_log_start_offset == third, "only the two copied went"
        assert plog.copy_to_remote() == len(plog.segments) - 1, "the rest, from the failed one"
        plog.delete_old_segments()
        assert _raw(plog) == before
        assert len(store.list_segments("t-0")) == len(RemoteLogMetadataFile(plog.directory).all)
    finally:
        plog.close()


class _GoingDown(LocalDirectoryRemoteStorage):
    """A directory store that, while ``down``, takes a copy's offset index
    and then fails (an S3 endpoint lost midway: the objects put stay, and
    the store cannot delete them), and fails every delete."""

    down = False

    def copy_log_segment_data(self, segment_id, base_offset, data):
        if self.down:
            final = self._dir(segment_id, base_offset)
            os.makedirs(final, exist_ok=True)
            with open(os.path.join(final, "offset.index"), "wb") as f:
                f.write(b"put before the outage")
            raise RemoteStorageError(f"the store went down copying segment {base_offset}")
        super().copy_log_segment_data(segment_id, base_offset, data)

    def delete_log_segment_data(self, segment_id, base_offset):
        if self.down:
            raise RemoteStorageError(f"the store is down deleting segment {base_offset}")
        super().delete_log_segment_data(segment_id, base_offset)


def test_what_a_failed_copy_put_is_deleted_once_the_store_is_back(tmp_path, clock):
    """A copy that fails midway leaves objects the store could not delete:
    its entry stays (DELETE_SEGMENT_STARTED) until a later call, with the
    store back, deletes them; the store then holds exactly the listed
    segments, each once. (Dropping the entry at the failure left them in
    the store for good, named by no metadata.)"""
    store = _GoingDown(str(tmp_path / "remote"))
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=store)
    try:
        _fill(plog, clock)
        before = _raw(plog)
        store.down = True
        with pytest.raises(RemoteStorageError, match="went down"):
            plog.copy_to_remote()
        assert plog.highest_remote_offset == -1
        abandoned = RemoteLogMetadataFile(plog.directory).all
        assert [s.base_offset for s in abandoned] == [
            seg.base_offset for seg in plog.segments[:-1]], "kept until the store confirms"
        assert {s.state for s in abandoned} == {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
        assert plog.remote.copy_in_flight, "the owner comes back for it"
        store.down = False
        assert plog.copy_to_remote() == len(plog.segments) - 1
        listed = RemoteLogMetadataFile(plog.directory).all
        assert store.list_segments("t-0") == sorted(
            "%020d-%s" % (s.base_offset, s.id) for s in listed)
        assert not plog.remote.copy_in_flight
        plog.delete_old_segments()
        assert _raw(plog) == before
    finally:
        plog.close()


def test_a_partition_opens_while_the_store_is_down(tmp_path, clock):
    """A copy a kill left unfinished is deleted at the open; with the store
    down then (a worker restarted during an S3 outage), the partition still
    opens and serves, the entry kept for a later call to delete."""
    store = _GoingDown(str(tmp_path / "remote"))
    config = LogConfig.from_properties(TIERED)
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    _fill(plog, clock)
    plog.close()
    RemoteLogMetadataFile(plog.directory).add_copy_started(RemoteLogSegmentMetadata(
        "deadbeef", 0, 3, 0, ((0, 0),), 500, RemoteLogSegmentState.COPY_SEGMENT_STARTED, 1))
    os.makedirs(os.path.join(store.root, "t-0", "%020d-deadbeef" % 0))
    store.down = True
    again = PartitionLog.open(plog.directory, config, clock=clock, remote_storage=store)
    try:
        assert [s.state for s in RemoteLogMetadataFile(again.directory).all] == [
            RemoteLogSegmentState.DELETE_SEGMENT_STARTED]
        assert read_all(again, start=0)[0][0] == 0, "the local log serves"
        store.down = False
        again.copy_to_remote()
        assert "%020d-deadbeef" % 0 not in store.list_segments("t-0")
        assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                   for s in RemoteLogMetadataFile(again.directory).all)
    finally:
        again.close()


def test_read_committed_below_the_local_start_drops_the_aborted_transactions(tiered, clock):
    """The transaction indexes go with their segments: a read_committed read
    of the remote part is told of the aborted transactions there (one whose
    marker is in a later remote segment, too) and drops them."""
    from test_log_transactions import Txn, committed_values, plain
    plog = tiered()
    aborted, kept = Txn(plog, pid=7), Txn(plog, pid=8)
    expected = []
    for i in range(12):
        plain(plog, b"plain %d" % i + b"." * 200)
        expected.append(b"plain %d" % i + b"." * 200)
        aborted.send(b"aborted %d" % i + b"." * 200)
        kept.send(b"kept %d" % i + b"." * 200)
        expected.append(b"kept %d" % i + b"." * 200)
        if i % 3 == 2:
            aborted.end(commit=False)
            kept.end(commit=True)
    plain(plog, b"tail")
    expected.append(b"tail")
    plog.high_watermark = plog.log_end_offset
    assert committed_values(plog) == expected
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert plog.local_log_start_offset > plog.log_end_offset // 2
    assert committed_values(plog) == expected


class _CountingIndexGets(LocalDirectoryRemoteStorage):
    """A directory store that records whose transaction indexes are asked
    of it (the segments' base offsets, once per request)."""

    def __init__(self, root):
        super().__init__(root)
        self.txn_index_gets = []

    def fetch_index(self, segment_id, base_offset, index_type):
        if index_type == "TRANSACTION":
            self.txn_index_gets.append(base_offset)
        return super().fetch_index(segment_id, base_offset, index_type)


def _tiered_with_transactions(tmp_path, clock, store):
    """A tiered log whose remote part has segments with and without
    aborted transactions; returns (log, what read_committed sees)."""
    from test_log_transactions import Txn, committed_values, plain
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=store)
    for i in range(8):
        plain(plog, b"plain %d" % i + b"." * 300)
    aborted = Txn(plog, pid=7)
    aborted.send(b"aborted" + b"." * 300)
    aborted.end(commit=False)
    for i in range(8):
        plain(plog, b"after %d" % i + b"." * 300)
    plog.high_watermark = plog.log_end_offset
    expected = committed_values(plog)
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert plog.local_log_start_offset > plog.log_end_offset // 2
    return plog, expected


def test_read_committed_asks_the_store_only_for_indexes_of_segments_with_aborts(
        tmp_path, clock):
    """KIP-1058: the remote metadata says which segments were copied with
    an empty transaction index (none uploaded), and a read_committed read
    from offset 0 fetches the index of the one segment that has aborted
    transactions, not one per remote segment (each a 404 from S3)."""
    from test_log_transactions import committed_values
    store = _CountingIndexGets(str(tmp_path / "remote"))
    plog, expected = _tiered_with_transactions(tmp_path, clock, store)
    remote = RemoteLogMetadataFile(plog.directory).segments
    with_aborts = [m.base_offset for m in remote if m.txn_idx_empty is False]
    assert len(with_aborts) == 1 and len(remote) >= 5, remote
    assert committed_values(plog) == expected
    assert b"aborted" + b"." * 300 not in expected
    # its own index only (alone, and again with the segment when it is read)
    assert set(store.txn_index_gets) == set(with_aborts), store.txn_index_gets
    plog.close()


def test_remote_segments_listed_before_the_flag_still_report_their_aborts(tmp_path, clock):
    """Remote metadata written before ``txn_idx_empty`` existed: unknown,
    so every segment's index is asked for, and the aborts are found."""
    import json
    from test_log_transactions import committed_values
    store = _CountingIndexGets(str(tmp_path / "remote"))
    plog, expected = _tiered_with_transactions(tmp_path, clock, store)
    plog.close()
    path = os.path.join(plog.directory, "remote-log-metadata")
    with open(path) as f:
        doc = json.load(f)
    for entry in doc["segments"]:
        del entry["txn_idx_empty"]
    with open(path, "w") as f:
        json.dump(doc, f)
    again = PartitionLog.open(plog.directory, LogConfig.from_properties(TIERED), clock=clock,
                              remote_storage=store)
    remote = RemoteLogMetadataFile(again.directory).segments
    assert {m.txn_idx_empty for m in remote} == {None}
    assert committed_values(again) == expected
    assert len(set(store.txn_index_gets)) >= 2, "the unknown segments' indexes are asked for"
    again.close()


def test_kafkalite_verify_takes_the_remote_start_for_the_log_start(tiered, clock):
    """`kafkalite verify` reported a tiered partition's log start below its
    first local segment as damage."""
    from storage_helpers import verify_segments
    plog = tiered()
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.delete_old_segments()
    plog.read(0, 100)               # the remote segment fetched into the cache
    plog.close()
    assert verify_segments(plog.directory) == []


def test_the_remote_read_cache_keeps_within_its_bytes(tiered, clock, monkeypatch):
    from kafkalite.storage.remote import remote_log, remote_reads
    monkeypatch.setattr(remote_reads, "CACHED_BYTES", 1500)   # one ~1 KB segment
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert _raw(plog) == before                 # reads every remote segment in turn
    cache = os.path.join(plog.directory, remote_log.REMOTE_CACHE_DIR)
    assert len([n for n in os.listdir(cache) if n.endswith(".log")]) == 1


class _Unreachable(LocalDirectoryRemoteStorage):
    """A store whose deletes, while ``reachable`` is clear, hang as an S3
    client's retries against a store that is down do, then fail."""

    HANG_S = 3.0

    def __init__(self, root):
        super().__init__(root)
        import threading
        self.reachable = threading.Event()
        self.reachable.set()

    def delete_log_segment_data(self, segment_id, base_offset):
        if not self.reachable.wait(self.HANG_S):
            raise RemoteStorageError(f"the store is down deleting segment {base_offset}")
        super().delete_log_segment_data(segment_id, base_offset)


def _listed(store, plog_directory, partition="t-0") -> tuple[list, list]:
    names = ["%020d-%s" % (s.base_offset, s.id) for s in RemoteLogMetadataFile(plog_directory).all]
    return store.list_segments(partition), sorted(names)


def test_retention_deletes_wait_on_the_store_off_the_owners_thread(tmp_path, clock):
    """Retention past remote segments with the store unreachable returns at
    once (the store's deletes run on the copier thread; before, each delete
    held the owner's thread through the store's retries, HANG_S each): the
    log start moves past them, nothing is read from them, their entries stay
    DELETE_SEGMENT_STARTED until the store, back, confirms the deletes."""
    import time
    store = _Unreachable(str(tmp_path / "remote"))
    config = LogConfig.from_properties({**TIERED, "retention.bytes": "4000"})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    try:
        _fill(plog, clock)
        plog.copy_to_remote()
        store.reachable.clear()
        started = time.monotonic()
        plog.delete_old_segments()
        took = time.monotonic() - started
        assert took < 1.0, f"retention waited {took:.1f} s on the store"
        doomed = [s for s in RemoteLogMetadataFile(plog.directory).all
                  if s.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED]
        assert doomed and plog.log_start_offset > doomed[-1].end_offset
        with pytest.raises(OffsetOutOfRangeError):
            plog.read(doomed[0].base_offset, 1000)
        assert plog.remote.copy_in_flight, "the owner comes back for the deletes"
        store.reachable.set()
        plog.copy_to_remote()       # the deletes' outcomes taken (waited for here)
        listed, named = _listed(store, plog.directory)
        assert listed == named and not {s.id for s in doomed} & {n[21:] for n in named}
        assert not plog.remote.copy_in_flight
    finally:
        store.reachable.set()
        plog.close()


def test_a_partition_opens_at_once_while_its_deletes_wait_on_the_store(tmp_path, clock):
    """An entry left DELETE_SEGMENT_STARTED (a stop during an outage): the
    open hands its delete to the copier thread instead of waiting on the
    store's retries."""
    import time
    store = _Unreachable(str(tmp_path / "remote"))
    config = LogConfig.from_properties({**TIERED, "retention.bytes": "4000"})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.close()
    # what a stop during an outage leaves: a delete started, not confirmed
    metadata = RemoteLogMetadataFile(plog.directory)
    metadata.update_state(metadata.segments[0].id, RemoteLogSegmentState.DELETE_SEGMENT_STARTED, 1)
    store.reachable.clear()
    started = time.monotonic()
    again = PartitionLog.open(plog.directory, config, clock=clock, remote_storage=store)
    try:
        took = time.monotonic() - started
        assert took < 1.0, f"the open waited {took:.1f} s on the store"
        store.reachable.set()
        again.copy_to_remote(start=False)
        listed, named = _listed(store, again.directory)
        assert listed == named
        assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                   for s in RemoteLogMetadataFile(again.directory).all)
    finally:
        store.reachable.set()
        again.close()


def test_a_deleted_partitions_remote_deletes_outlive_it(tmp_path, clock):
    """Topic deletion with the store unreachable: the partition goes at once,
    its deletes kept on disk by the node's deleter, made once the store is
    back; a deleter started later (a restarted worker) takes up what one
    stopped before finishing left. The store is left with nothing of it."""
    import time
    store = _Unreachable(str(tmp_path / "remote"))
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_properties(TIERED),
                             clock=clock, remote_storage=store)
    _fill(plog, clock)
    plog.copy_to_remote()
    plog.delete_old_segments()
    assert store.list_segments("t-0")
    store.reachable.clear()
    started = time.monotonic()
    plog.delete()
    took = time.monotonic() - started
    assert took < 1.0, f"the topic deletion waited {took:.1f} s on the store"
    assert not os.path.exists(plog.directory)
    from kafkalite.storage.remote.remote_log_deleter import PENDING_DIR, RemoteLogDeleter
    pending = os.path.join(str(tmp_path), PENDING_DIR)
    assert len(os.listdir(pending)) == 1, "the deletes kept on disk"
    # what a process stopped before the store came back leaves: a second
    # deleter, as a restarted worker's, takes it up
    later = RemoteLogDeleter()
    store.reachable.set()
    later.resume(str(tmp_path), store)
    wait_until(lambda: store.list_segments("t-0") == [] and not os.listdir(pending), 10,
               "the deleted partition's remote copies deleted")


class _CountingDown(LocalDirectoryRemoteStorage):
    """A directory store whose deletes fail at once while ``down`` (an S3
    endpoint refusing connections), counting every delete tried, by segment."""

    down = False

    def __init__(self, root):
        super().__init__(root)
        self.deletes: dict[str, int] = {}

    def delete_log_segment_data(self, segment_id, base_offset):
        self.deletes[segment_id.id] = self.deletes.get(segment_id.id, 0) + 1
        if self.down:
            raise RemoteStorageError(f"the store is down deleting segment {base_offset}")
        super().delete_log_segment_data(segment_id, base_offset)


def test_failed_retention_deletes_back_off_and_complete_once_the_store_is_back(tmp_path,
                                                                              clock):
    """During an outage the broker's housekeeping (``copy_to_remote(wait=False)``,
    every few ms here) tries each failed delete again only after a backoff
    (1 s, doubling): at most 2 tries per segment in 2 s. (Before, every call
    resubmitted every failed delete: hundreds of tries, the copier thread
    busy with them and copies queued behind.) Once the store is back, every
    delete completes and the store holds exactly the listed segments."""
    import time
    store = _CountingDown(str(tmp_path / "remote"))
    config = LogConfig.from_properties({**TIERED, "retention.bytes": "4000"})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock, remote_storage=store)
    try:
        _fill(plog, clock)
        plog.copy_to_remote()
        store.down = True
        plog.delete_old_segments()
        doomed = {s.id for s in RemoteLogMetadataFile(plog.directory).all
                  if s.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
        assert len(doomed) >= 2
        started = time.monotonic()
        while time.monotonic() - started < 2.0:
            plog.copy_to_remote(wait=False)
            time.sleep(0.005)       # the housekeeping's pace, not a wait for an outcome
        tries = {sid: store.deletes.get(sid, 0) for sid in doomed}
        assert all(1 <= n <= 2 for n in tries.values()), f"delete tries in 2 s: {tries}"
        store.down = False

        def done():
            plog.copy_to_remote(wait=False)
            return not any(s.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED
                           for s in RemoteLogMetadataFile(plog.directory).all)
        wait_until(done, 10, "the deletes once the store is back")
        listed, named = _listed(store, plog.directory)
        assert listed == named and not doomed & {n[21:] for n in named}
        assert not plog.remote.copy_in_flight
    finally:
        store.down = False
        plog.close()


def _stored_log(store, plog_directory, meta) -> str:
    return os.path.join(store.root, os.path.basename(plog_directory),
                        "%020d-%s" % (meta.base_offset, meta.id), "segment.log")


def test_a_directory_store_is_read_in_place_and_its_delete_cuts_no_read_short(tiered, clock):
    """A remote segment of a directory store is read from the store's own
    file (linked into the cache: no byte copied), and the store deleting
    the copy (DeleteRecords past it) while a fetch's region is still to be
    sent cuts nothing short: the region sends every byte it names."""
    import socket
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    plog.copy_to_remote()
    plog.delete_old_segments()
    first = RemoteLogMetadataFile(plog.directory).segments[0]
    stored = _stored_log(tiered.store, plog.directory, first)
    data = plog.read(0, 100_000)
    assert os.fstat(data.region.fd).st_ino == os.stat(stored).st_ino, "read in place"
    plog.delete_records(first.end_offset + 1)
    plog.copy_to_remote(start=False)            # waits for the store's delete
    assert not os.path.exists(stored)
    out, into = socket.socketpair()
    with out, into:
        assert data.region.sendfile(out.fileno()) == data.region.length
        got = b""
        while len(got) < data.region.length:
            got += into.recv(1 << 16)
    assert got == before[:data.region.length]


def test_a_damaged_remote_segment_is_recovered_on_a_copy_not_in_the_store(tiered, clock):
    """A remote segment whose file ends inside a batch is read up to the
    damage as a local one is; the recovery that cuts the torn batch off
    works on a copy of its own, never on the store's file it is linked to."""
    plog = tiered()
    _fill(plog, clock)
    before = _raw(plog)
    plog.copy_to_remote()
    plog.delete_old_segments()
    first = RemoteLogMetadataFile(plog.directory).segments[0]
    stored = _stored_log(tiered.store, plog.directory, first)
    with open(stored, "r+b") as f:
        f.truncate(os.path.getsize(stored) - 5)
    with open(stored, "rb") as f:
        damaged = f.read()
    data = plog.read(0, 100_000)
    assert data.region is not None and 0 < data.region.length < len(damaged)
    assert data.read() == before[:data.region.length]
    with open(stored, "rb") as f:
        assert f.read() == damaged, "the store's file was changed by the read"


def test_a_follower_below_its_leaders_local_start_starts_after_the_remote_segment(
        tmp_path, clock):
    """KIP-405's follower (replica_fetcher.py answered OFFSET_MOVED_TO_TIERED_STORAGE):
    its log starts after the remote segment below the leader's local start,
    with the leader's log start, leader epochs and producer state, and reads
    the part below from the store, after a reopen too."""
    import uuid
    from kafkalite.record import RecordBatchBuilder
    store = LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    cfg = LogConfig.from_properties(TIERED)
    topic_id = uuid.uuid4()
    # the replicas' directories share their name, as on two brokers
    leader = PartitionLog.open(str(tmp_path / "a" / "t-0"), cfg, clock=clock,
                               remote_storage=store, remote_leadership=True)
    leader.remote.lead(3, topic_id)
    leader.leader_epoch = 1
    for seq in range(10):       # an idempotent producer, only in what goes remote
        b = RecordBatchBuilder(producer_id=7, producer_epoch=2, base_sequence=seq)
        b.append(clock.now, None, b"early-%d" % seq, None)
        leader.append(b.build())
    leader.leader_epoch = 3
    _fill(leader, clock)
    assert leader.copy_to_remote() > 0
    leader.copy_to_remote()     # and the shared metadata says so: local retention may go
    assert leader.delete_old_segments() > 0
    local_start = leader.local_log_start_offset
    assert local_start > 10

    follower = PartitionLog.open(str(tmp_path / "b" / "t-0"), cfg, clock=clock,
                                 remote_storage=store, remote_leadership=True)
    follower.remote.follow(topic_id)
    state = follower.remote.fetch_aux_state(local_start).result(10)
    follower.start_after_remote_segment(state, leader.log_start_offset)
    assert state.next_offset == local_start     # the leader's own segments: its boundaries
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20).read())
    follower.high_watermark = follower.log_end_offset

    for replica in (follower, None):
        if replica is None:     # and after a restart
            follower.close()
            replica = PartitionLog.open(str(tmp_path / "b" / "t-0"), cfg, clock=clock,
                                        remote_storage=store, remote_leadership=True)
            replica.remote.follow(topic_id)
        assert (replica.log_start_offset, replica.local_log_start_offset) == (0, local_start)
        assert [s.base_offset for s in replica.segments][0] == local_start
        assert replica.leader_epoch_cache.entries == leader.leader_epoch_cache.entries == [
            (1, 0), (3, 10)]
        entry = replica.producer_state.producers[7]
        assert (entry.epoch, entry.last_seq) == (2, 9)
        assert _raw(replica) == _raw(leader), "offset 0 on, the remote part read from the store"
    replica.close()
    leader.close()
