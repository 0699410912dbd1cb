"""Transactions in the partition log: the last stable offset, the
aborted-transaction index (.txnindex, Kafka's format) through roll,
reopen, crash recovery, truncation, retention and compaction, and the
read_committed view the columnar decoder gives of a log.

Real logs in temporary directories; markers are built as the coordinator
builds them (build_control_batch) and appended with the coordinator's
origin.
"""
from __future__ import annotations

import os
import shutil

import pytest

from kafkalite import errors
from kafkalite.record import RecordBatchBuilder, build_control_batch, decode_columns
from kafkalite.storage import AppendOrigin, LogConfig, PartitionLog
from kafkalite.storage.loader import CLEAN_SHUTDOWN_MARKER
from kafkalite.storage.txn_index import ENTRY, AbortedTxn

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "retention.ms": -1})


class Txn:
    """A transactional producer writing to one partition log."""

    def __init__(self, plog, pid, epoch=0):
        self.plog, self.pid, self.epoch, self.seq = plog, pid, epoch, 0

    def send(self, *values, key=b"k"):
        b = RecordBatchBuilder(producer_id=self.pid, producer_epoch=self.epoch,
                               base_sequence=self.seq, transactional=True)
        for v in values:
            b.append(None, key, v)
        self.seq += len(values)
        return self.plog.append(b.build())

    def end(self, commit: bool):
        marker = build_control_batch(commit, self.pid, self.epoch, 0)
        return self.plog.append(marker, origin=AppendOrigin.COORDINATOR, allow_control=True)


def plain(plog, *values, key=b"k"):
    b = RecordBatchBuilder()
    for v in values:
        b.append(None, key, v)
    return plog.append(b.build())


def committed_values(plog, start=0):
    """What a read_committed consumer sees: records below the LSO, minus
    the aborted transactions the log reports (decoded as the consumer does)."""
    out, offset = [], start
    while offset < plog.last_stable_offset:
        data = plog.read(offset, 1 << 20, max_offset=plog.last_stable_offset,
                         collect_aborted=True)
        if data.region is None:
            break
        raw = data.read()
        aborted = [(t.producer_id, t.first_offset) for t in data.aborted_transactions]
        cols = decode_columns(raw, aborted_transactions=aborted)
        out += cols.values()
        offset = cols.next_offset
    return out


def all_values(plog):
    data = plog.read(0, 1 << 24)
    return decode_columns(data.read()).values()


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), CONFIG)
    yield log
    if not log._closed:
        log.close()


def test_an_open_transaction_holds_the_last_stable_offset_until_its_commit(plog):
    plain(plog, b"a")
    t = Txn(plog, 7)
    first = t.send(b"t1", b"t2").first_offset
    plain(plog, b"b")
    plog.high_watermark = plog.log_end_offset
    assert plog.last_stable_offset == first
    assert committed_values(plog) == [b"a"]
    marker = t.end(commit=True)
    plog.high_watermark = plog.log_end_offset
    assert plog.last_stable_offset == marker.last_offset + 1 == plog.log_end_offset
    assert committed_values(plog) == [b"a", b"t1", b"t2", b"b"]
    assert plog.aborted_transactions(0, plog.log_end_offset) == []


def test_an_aborted_transaction_is_indexed_and_dropped_by_read_committed(plog, tmp_path):
    good, bad = Txn(plog, 1), Txn(plog, 2)
    good.send(b"g1")
    first_bad = bad.send(b"x1").first_offset
    good.send(b"g2")
    bad.send(b"x2")
    good_end = good.end(commit=True)
    bad_end = bad.end(commit=False)
    plain(plog, b"after")
    plog.high_watermark = plog.log_end_offset
    assert plog.aborted_transactions(0, plog.log_end_offset) == [
        AbortedTxn(2, first_bad, bad_end.last_offset, bad_end.last_offset + 1)]
    assert good_end.last_offset < bad_end.last_offset
    assert committed_values(plog) == [b"g1", b"g2", b"after"]
    # read_uncommitted sees everything but the markers
    assert all_values(plog) == [b"g1", b"x1", b"g2", b"x2", b"after"]
    # the index file is Kafka's format: version 0 and four int64s, 34 bytes
    raw = open(os.path.join(plog.directory, "%020d.txnindex" % plog.segments[0].base_offset),
               "rb").read()
    assert list(ENTRY.iter_unpack(raw)) == [(0, 2, first_bad, bad_end.last_offset,
                                             bad_end.last_offset + 1)]
    # a fetch starting after the aborted transaction ended is not told of it
    assert plog.aborted_transactions(bad_end.last_offset + 1, plog.log_end_offset) == []


def test_an_entrys_lso_waits_for_the_oldest_open_transaction(plog):
    slow, fast = Txn(plog, 1), Txn(plog, 2)
    slow_first = slow.send(b"s").first_offset
    fast.send(b"f")
    end = fast.end(commit=False)
    (entry,) = plog.aborted_transactions(0, plog.log_end_offset)
    assert entry.last_stable_offset == slow_first     # slow's transaction is still open
    slow.end(commit=True)
    plog.high_watermark = plog.log_end_offset
    assert committed_values(plog) == [b"s"]
    assert end.last_offset < plog.log_end_offset


def test_transactions_survive_roll_and_reopen_with_the_open_one_still_open(tmp_path):
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(directory, CONFIG)
    pids = [Txn(plog, pid) for pid in range(1, 9)]
    for round_ in range(6):            # many rolls (4 KB segments)
        for t in pids:
            t.send(b"%d-%d" % (t.pid, round_) * 30)
        for t in pids:
            t.end(commit=t.pid % 2 == 0)
    still_open = Txn(plog, 99)
    open_first = still_open.send(b"pending").first_offset
    plog.high_watermark = plog.log_end_offset
    assert len(plog.segments) >= 3
    aborted = plog.aborted_transactions(0, plog.log_end_offset)
    assert len(aborted) == 4 * 6
    expect = committed_values(plog)
    plog.close()

    again = PartitionLog.open(directory, CONFIG)
    assert again.producer_state.batches_read == 0        # from the snapshot
    assert again.last_stable_offset == open_first
    assert again.aborted_transactions(0, again.log_end_offset) == aborted
    assert committed_values(again) == expect
    assert all(b"%d-" % pid not in v for v in expect for pid in (1, 3, 5, 7))
    Txn(again, 99).end(commit=True)
    again.high_watermark = again.log_end_offset
    assert committed_values(again)[-1] == b"pending"
    again.close()


def _interleaved_transactions(plog, rnd, producers=4, transactions=40, max_records=400):
    """Transactions of 1..max_records records from several producers at once,
    over many rolls, plain records between them, each committed or aborted at
    random: the values a read_committed reader must see, in log order."""
    txns = {pid: Txn(plog, pid) for pid in range(1, producers + 1)}
    sent = {pid: [] for pid in txns}       # this transaction's (offset, value) so far
    left = {pid: rnd.randint(1, max_records) for pid in txns}
    visible = []                            # (offset, value) of committed and plain records
    ended = 0
    while ended < transactions:
        pid = rnd.choice(list(txns))
        n = min(left[pid], rnd.randint(1, 60))
        values = [b"%d-%d-%d" % (pid, ended, i) + b"." * rnd.randint(0, 40) for i in range(n)]
        first = txns[pid].send(*values).first_offset
        sent[pid] += [(first + i, v) for i, v in enumerate(values)]
        left[pid] -= n
        if rnd.random() < 0.1:
            info = plain(plog, b"plain-%d" % ended)
            visible.append((info.first_offset, b"plain-%d" % ended))
        if left[pid] == 0:
            commit = rnd.random() < 0.5
            txns[pid].end(commit=commit)
            if commit:
                visible += sent[pid]
            sent[pid], left[pid] = [], rnd.randint(1, max_records)
            ended += 1
    for pid, t in txns.items():             # end what is still open: abort it
        if sent[pid]:
            t.end(commit=False)
    plog.high_watermark = plog.log_end_offset
    return sorted(visible)


@pytest.mark.parametrize("seed", range(3))
def test_aborted_transactions_spanning_many_segments_are_dropped_from_every_start(tmp_path, seed):
    """Kafka's aborted-transaction search: a transaction is indexed in the
    segment of its ABORT marker, so a read of an earlier segment must look
    in later segments' indexes until an entry's LSO proves none can start
    below its end, not stop at the next segment."""
    import random
    plog = PartitionLog.open(str(tmp_path / "t-0"), CONFIG)
    visible = _interleaved_transactions(plog, random.Random(seed))
    expect = [v for _, v in visible]
    assert len(plog.segments) > 20
    spanning = [a for a in plog.aborted_transactions(0, plog.log_end_offset)
                if plog._segment_index(a.first_offset) != plog._segment_index(a.last_offset)]
    assert spanning, "no aborted transaction crossed a roll: the test would be vacuous"
    assert committed_values(plog) == expect
    # a reader starting inside a spanning aborted transaction (at a batch's base)
    for a in spanning[:5]:
        assert committed_values(plog, a.first_offset) == [v for off, v in visible
                                                          if off >= a.first_offset]
        data = plog.read(a.first_offset, 1 << 20, max_offset=plog.last_stable_offset,
                         collect_aborted=True)
        assert a in data.aborted_transactions
    plog.close()
    again = PartitionLog.open(str(tmp_path / "t-0"), CONFIG)
    assert committed_values(again) == expect
    again.close()


def test_compaction_drops_an_aborted_transaction_that_spans_segments(tmp_path, clock):
    config = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": 0.01})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    committer, aborter = Txn(plog, 1), Txn(plog, 2)
    committer.send(b"committed", key=b"K")
    committer.end(commit=True)
    for i in range(20):                        # an aborted transaction over many segments
        aborter.send(b"aborted-%d" % i + b"." * 60, key=b"A%d" % i)
    aborter.send(b"aborted-K", key=b"K")       # newer than the committed K
    aborter.end(commit=False)
    for i in range(30):                        # fill segments so the above can be cleaned
        plain(plog, b"filler%d" % i * 20, key=b"F%d" % i)
    plog.high_watermark = plog.log_end_offset
    (entry,) = plog.aborted_transactions(0, 1 << 40)
    assert plog._segment_index(entry.first_offset) < plog._segment_index(entry.last_offset)
    plog.compact()
    values = all_values(plog)
    assert not [v for v in values if v.startswith(b"aborted")]
    assert b"committed" in values and b"committed" in committed_values(plog)
    plog.close()


def test_recovery_rebuilds_a_lost_transaction_index_from_the_markers(tmp_path):
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(directory, CONFIG)
    writers = [Txn(plog, pid) for pid in (1, 2, 3)]
    for round_ in range(5):
        for t in writers:
            t.send(b"v%d" % round_ * 50)
        for t in writers:
            t.end(commit=t.pid == 2)
    plog.high_watermark = plog.log_end_offset
    expected = plog.aborted_transactions(0, plog.log_end_offset)
    expected_view = committed_values(plog)
    # abandon it as kill -9 would, then lose every transaction index
    copy = tmp_path / "crashed-0"
    shutil.copytree(directory, copy)
    for name in os.listdir(copy):
        if name.endswith(".txnindex") or name.endswith(".snapshot"):
            os.unlink(copy / name)
    with open(copy / "partition.checkpoint", "w") as f:   # everything is above the recovery point
        f.write("")
    assert not os.path.exists(copy / CLEAN_SHUTDOWN_MARKER)
    again = PartitionLog.open(str(copy), CONFIG)
    again.high_watermark = again.log_end_offset
    assert again.aborted_transactions(0, again.log_end_offset) == expected
    assert committed_values(again) == expected_view
    again.close()
    plog.close()


def test_recovery_drops_index_entries_of_markers_cut_with_a_torn_tail(tmp_path):
    directory = str(tmp_path / "t-0")
    plog = PartitionLog.open(directory, LogConfig())
    t = Txn(plog, 5)
    t.send(b"one")
    kept = t.end(commit=False)
    t.send(b"two")
    cut = t.end(commit=False)
    seg = plog.active_segment
    copy = tmp_path / "crashed-0"
    shutil.copytree(directory, copy)
    # tear the last marker in half
    path = copy / os.path.basename(seg.path)
    size = os.path.getsize(path)
    os.truncate(path, size - 10)
    again = PartitionLog.open(str(copy), LogConfig())
    assert again.log_end_offset == cut.last_offset
    assert [a.last_offset for a in again.aborted_transactions(0, 1 << 40)] == [kept.last_offset]
    # the producer's second transaction is open again: its marker was lost
    assert again.producer_state.first_unstable_offset() is not None
    again.close()
    plog.close()


def test_truncation_below_a_marker_removes_its_entry_and_reopens_the_transaction(plog):
    t = Txn(plog, 4)
    first = t.send(b"a").first_offset
    marker = t.end(commit=False)
    assert len(plog.aborted_transactions(0, 100)) == 1
    plog.truncate_to(marker.last_offset)
    assert plog.aborted_transactions(0, 100) == []
    assert plog.producer_state.first_unstable_offset() == first


def test_retention_takes_transaction_indexes_with_their_segments(tmp_path, clock):
    config = LogConfig.from_properties({"segment.bytes": 2048, "retention.bytes": 4096})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    t = Txn(plog, 1)
    for i in range(40):
        t.send(b"%d" % i * 100)
        t.end(commit=False)
    plog.high_watermark = plog.log_end_offset
    before = {n for n in os.listdir(plog.directory) if n.endswith(".txnindex")}
    assert plog.delete_old_segments() > 0
    after = {n for n in os.listdir(plog.directory) if n.endswith(".txnindex")}
    assert after < before
    assert {"%020d.txnindex" % s.base_offset for s in plog.segments
            if len(s.txn_index)} == after
    start = plog.log_start_offset
    assert all(a.last_offset >= start for a in plog.aborted_transactions(start, 1 << 40))
    plog.close()


def test_compaction_drops_aborted_writes_and_keeps_committed_ones_and_markers(tmp_path, clock):
    config = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": 0.01})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    committer, aborter = Txn(plog, 1), Txn(plog, 2)
    committer.send(b"committed-old", key=b"K")
    committer.end(commit=True)
    committer.send(b"committed-new", key=b"K")
    committer.end(commit=True)
    aborter.send(b"aborted", key=b"K")        # newer than every committed K
    aborter.end(commit=False)
    for i in range(30):                        # fill segments so the above can be cleaned
        plain(plog, b"filler%d" % i * 20, key=b"F%d" % i)
    plog.high_watermark = plog.log_end_offset
    markers_before = [a.last_offset for a in plog.aborted_transactions(0, 1 << 40)]
    stats = plog.compact()
    assert stats.segments_cleaned > 0
    data = plog.read(0, 1 << 24)
    cols = decode_columns(data.read(), skip_control=False)
    values = cols.values()
    assert b"aborted" not in values
    assert b"committed-new" in values and b"committed-old" not in values
    # every marker is still there, and so is the aborted transaction's entry
    assert int((cols.batch_attributes & 0x20 != 0).sum()) == 3
    assert [a.last_offset for a in plog.aborted_transactions(0, 1 << 40)] == markers_before
    assert b"committed-new" in committed_values(plog)
    plog.close()


def test_compaction_stops_at_the_first_open_transaction(tmp_path, clock):
    config = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": 0.01})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    t = Txn(plog, 3)
    open_at = t.send(b"open", key=b"K").first_offset
    for i in range(30):
        plain(plog, b"v%d" % i * 20, key=b"K")
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    # nothing at or above the open transaction was rewritten: "open" is there
    assert b"open" in all_values(plog)
    assert plog.cleaner_checkpoint <= open_at
    plog.close()


def test_markers_only_from_the_coordinator_and_not_from_an_older_epoch(plog):
    marker = build_control_batch(True, 9, 0, 0)
    with pytest.raises(errors.InvalidRecordError):
        plog.append(bytearray(marker))                 # a client may not write markers
    Txn(plog, 9, epoch=3).send(b"x")
    with pytest.raises(errors.InvalidProducerEpochError):
        plog.append(bytearray(marker), origin=AppendOrigin.COORDINATOR, allow_control=True)
    Txn(plog, 9, epoch=3).end(commit=True)
    assert plog.producer_state.first_unstable_offset() is None


def test_a_malformed_control_batch_is_refused_even_from_the_coordinator(plog):
    b = RecordBatchBuilder(producer_id=1, producer_epoch=0, transactional=True, control=True)
    b.append(None, b"\x00\x00\x00\x07", b"\x00\x00\x00\x00\x00\x00")   # type 7 does not exist
    with pytest.raises(errors.InvalidRecordError):
        plog.append(b.build(), origin=AppendOrigin.COORDINATOR, allow_control=True)
    assert plog.log_end_offset == 0


def test_compaction_removes_markers_of_transactions_with_nothing_left_after_the_horizon(
        tmp_path, clock):
    """Kafka's cleaner: a marker stays while its transaction has a record in
    the log; once none is left (an aborted transaction, or a committed one
    whose records were all superseded) the marker is stamped with a delete
    horizon and a cleaning after delete.retention.ms removes it, with its
    aborted-transaction index entry. What read_committed sees never changes."""
    config = LogConfig.from_properties({"segment.bytes": 1024, "cleanup.policy": "compact",
                                        "min.cleanable.dirty.ratio": 0.01,
                                        "delete.retention.ms": 1000})
    plog = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    committer, aborter = Txn(plog, 1), Txn(plog, 2)
    committer.send(b"superseded", key=b"K")
    old_marker = committer.end(commit=True).first_offset
    committer.send(b"kept", key=b"K")
    kept_marker = committer.end(commit=True).first_offset
    aborter.send(b"aborted", key=b"A")
    aborted_marker = aborter.end(commit=False).first_offset

    def fill(tag):
        for i in range(30):
            plain(plog, b"%s%d" % (tag, i) * 20, key=b"F%d" % i)
        plog.high_watermark = plog.log_end_offset

    def markers():
        cols = decode_columns(plog.read(0, 1 << 24).read(), skip_control=False)
        control = (cols.batch_attributes & 0x20) != 0
        return sorted(int(o) for o in cols.batch_last_offsets[control])

    fill(b"a")
    visible = committed_values(plog)
    plog.compact()                         # stamps the two markers with nothing left
    assert markers() == [old_marker, kept_marker, aborted_marker]
    assert [a.last_offset for a in plog.aborted_transactions(0, 1 << 40)] == [aborted_marker]
    clock.advance(500)
    fill(b"b")
    plog.compact()                         # before the horizon: still there
    assert markers() == [old_marker, kept_marker, aborted_marker]
    clock.advance(1000)
    fill(b"c")
    stats = plog.compact()                 # past it: gone, with the index entry
    assert stats.markers_removed == 2
    assert markers() == [kept_marker]
    assert plog.aborted_transactions(0, 1 << 40) == []
    assert b"kept" in committed_values(plog) and b"aborted" not in committed_values(plog)
    assert [v for v in committed_values(plog) if v in (b"kept", b"superseded")] == \
        [v for v in visible if v == b"kept"]
    plog.close()
    reopened = PartitionLog.open(str(tmp_path / "t-0"), config, clock=clock)
    assert reopened.last_stable_offset == reopened.log_end_offset
    assert reopened.producer_state.ongoing == {}
    reopened.close()
