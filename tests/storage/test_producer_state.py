"""Producer state owned by the log: idempotence checks by append origin,
snapshots at roll and clean close, loading from the newest snapshot, and
what retention, truncation, corruption and kill -9 do to all of that.

Real logs in temporary directories; the crash test kills a real writer
process (tests/storage/producer_writer.py) at random moments.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys

import pytest

from kafkalite import errors
from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import AppendOrigin, LogConfig, PartitionLog
from kafkalite.storage import producer_snapshot, producer_state
from storage_helpers import child_env
from soak import setting

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "retention.ms": -1})
HERE = os.path.dirname(os.path.abspath(__file__))


def idempotent(pid, epoch, seq, n=3, transactional=False, timestamp=None):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           transactional=transactional)
    for i in range(n):
        b.append(timestamp, b"k", b"%d-%d-%d" % (pid, seq + i, i) * 4)
    return b.build()


def plain(n=3):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, b"k", b"plain-%d" % i * 4)
    return b.build()


def state(plog):
    """What a restart must preserve: per producer, the epoch, the last batch
    (sequences and offsets), the last written offset and the open transaction."""
    return {pid: (e.epoch, e.batches[-1] if e.batches else None, e.last_written_offset,
                  e.current_txn_first_offset)
            for pid, e in plog.producer_state.producers.items()}


def full_rebuild(directory, tmp_path):
    """The state read from the whole log, with every snapshot removed."""
    copy = tmp_path / f"rebuild-{random.random()}"
    shutil.copytree(directory, copy)
    for name in os.listdir(copy):
        if name.endswith(".snapshot"):
            os.unlink(copy / name)
    plog = PartitionLog.open(str(copy), CONFIG)
    try:
        return state(plog), plog.producer_state.batches_read
    finally:
        plog.close()


def snapshots(directory):
    return producer_snapshot.list_snapshots(str(directory))


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog.open(str(tmp_path / "t-0"), CONFIG)
    yield log
    log.close()


# ---- the checks, by origin --------------------------------------------------------------

def test_a_retried_batch_gets_its_original_offsets_and_is_not_written(plog):
    first = plog.append(idempotent(7, 0, 0))
    plog.append(plain())
    end, size = plog.log_end_offset, plog.size_in_bytes
    retry = plog.append(idempotent(7, 0, 0))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (0, 2)
    assert (plog.log_end_offset, plog.size_in_bytes) == (end, size)
    assert not first.duplicate
    # the next batch continues the sequence; a gap or a repeat is refused
    assert plog.append(idempotent(7, 0, 3)).first_offset == end
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append(idempotent(7, 0, 10))
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append(idempotent(7, 0, 4))          # overlaps, but is no cached batch
    assert plog.log_end_offset == end + 3


def test_epochs(plog):
    plog.append(idempotent(7, 3, 0))
    with pytest.raises(errors.InvalidProducerEpochError):
        plog.append(idempotent(7, 2, 3))
    with pytest.raises(errors.OutOfOrderSequenceNumberError):
        plog.append(idempotent(7, 4, 5))          # a new epoch starts at sequence 0
    plog.append(idempotent(7, 4, 0))
    # a producer the log knows nothing of may start anywhere (its state may
    # have gone with retention), as in Kafka 3.x
    plog.append(idempotent(8, 0, 1234))
    assert state(plog)[8][1][:2] == (1234, 1236)


def test_a_retry_mixing_old_and_new_batches_is_refused(plog):
    plog.append(idempotent(7, 0, 0))
    with pytest.raises(errors.OutOfOrderSequenceNumberError, match="mixes"):
        plog.append(idempotent(7, 0, 0) + idempotent(7, 0, 3))
    # a whole retried request of two batches is a duplicate as a whole
    plog.append(idempotent(7, 0, 3) + idempotent(7, 0, 6))
    retry = plog.append(idempotent(7, 0, 3) + idempotent(7, 0, 6))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (3, 8)


def test_a_retry_of_any_batch_of_the_last_five_appends_is_recognised_also_after_a_crash(tmp_path):
    """A client pipelines requests of many batches; after a worker's kill -9
    it retries one whose answer was lost. Kafka's five-batch window would
    have forgotten it behind the later batches of the same requests (seen:
    a producer retrying such a batch for ever as OUT_OF_ORDER_SEQUENCE)."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    plog.append(b"".join(idempotent(7, 0, 3 * i) for i in range(8)))     # offsets 0-23
    plog.append(b"".join(idempotent(7, 0, 3 * i) for i in range(8, 12)))  # 24-35
    for seq in (3, 15, 27):
        retry = plog.append(idempotent(7, 0, seq))
        assert retry.duplicate and (retry.first_offset, retry.last_offset) == (seq, seq + 2)
    end = plog.log_end_offset
    assert end == 36
    # kill -9: no snapshot, the state is rebuilt from the log's batches
    crashed = tmp_path / "crashed-0"
    shutil.copytree(directory, crashed)
    for name in os.listdir(crashed):
        if name.endswith(".snapshot"):
            os.unlink(crashed / name)
    plog.close()
    for path in (directory, crashed):          # clean close (snapshot) and crash
        reopened = PartitionLog.open(str(path), CONFIG)
        try:
            retry = reopened.append(idempotent(7, 0, 6))
            assert retry.duplicate and (retry.first_offset, retry.last_offset) == (6, 8)
            assert reopened.log_end_offset == end
            # the window is five appends when other writers come between
            for i in range(12, 18):
                reopened.append(idempotent(7, 0, 3 * i))
                reopened.append(plain())
            with pytest.raises(errors.OutOfOrderSequenceNumberError):
                reopened.append(idempotent(7, 0, 36))           # the 6th append back
            assert reopened.append(idempotent(7, 0, 39)).duplicate
        finally:
            reopened.close()


def test_every_cached_batch_is_still_recognised_after_a_reopen_or_a_truncation(tmp_path):
    """Two producers take turns, so none of producer 7's batches follow
    one another in the log: five runs of one batch each. A log reopened
    from its snapshot (a worker restarted, as a broker node's are when the
    controller moves) or truncated to just above them (a follower) must
    still answer a retry of any of the five as a duplicate: the snapshot
    held only the last and the leader answered the client's retry of the
    oldest in-flight batch OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to
    librdkafka (issue 47 item 6)."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    offsets = {}
    for i in range(5):
        offsets[3 * i] = plog.append(idempotent(7, 0, 3 * i)).first_offset
        plog.append(idempotent(8, 0, 3 * i))
    end = plog.log_end_offset
    plog.close()
    assert snapshots(directory)[-1] == end

    def retries_are_duplicates(log):
        for seq, first in offsets.items():
            retry = log.append(idempotent(7, 0, seq))
            assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first, first + 2)
        assert log.log_end_offset == end

    again = PartitionLog.open(str(directory), CONFIG)
    try:
        assert again.producer_state.batches_read == 0        # from the snapshot alone
        retries_are_duplicates(again)
        # a follower's truncation reloads from the snapshot at or below the
        # new end: one more batch each, then truncated back
        again.append(idempotent(8, 0, 15))
        again.append(plain())
        again.roll()
        again.append(plain())
        assert again.truncate_to(end)
        retries_are_duplicates(again)
        # the sixth append back is forgotten, as in Kafka
        again.append(idempotent(7, 0, 15))
        with pytest.raises(errors.OutOfOrderSequenceNumberError):
            again.append(idempotent(7, 0, 0))
    finally:
        again.close()


def test_replication_and_coordinator_appends_skip_the_checks_but_update_the_state(tmp_path):
    leader = PartitionLog.open(str(tmp_path / "leader-0"), CONFIG)
    follower = PartitionLog.open(str(tmp_path / "follower-0"), CONFIG)
    leader.append(idempotent(7, 0, 0))
    leader.append(idempotent(7, 0, 3))
    fetched = leader.read(0, 1 << 20).read()
    follower.append_as_follower(fetched)
    assert state(follower) == state(leader)
    # a follower copies what its leader wrote even when it breaks the
    # sequence (the leader already decided): no check refuses it
    gap = bytearray(idempotent(7, 0, 50))
    gap[0:8] = follower.log_end_offset.to_bytes(8, "big")
    follower.append_as_follower(gap)
    assert state(follower)[7][1][:2] == (50, 52)
    # the coordinator's own writes are not checked either
    leader.append(idempotent(9, 0, 99), origin=AppendOrigin.COORDINATOR)
    leader.append(idempotent(9, 0, 7), origin=AppendOrigin.COORDINATOR)
    assert state(leader)[9][1][:2] == (7, 9)
    # a batch with no sequence (the group coordinator's transactional
    # offset commits) has none at its end either, however many records
    commit = RecordBatchBuilder(producer_id=10, producer_epoch=0, transactional=True)
    for value in (b"a", b"b", b"c"):
        commit.append(None, b"k", value)
    leader.append(commit.build(), origin=AppendOrigin.COORDINATOR)
    assert leader.producer_state.producers[10].last_seq == -1
    leader.close()
    follower.close()


def test_a_verified_transactions_v2_producer_new_to_the_partition_starts_at_sequence_0(plog):
    """Kafka's rule (ProducerAppendInfo.checkSequence): a producer with no
    state may start anywhere -- unless the leader just verified its first
    transactional write with a transactions v2 coordinator. Accepting
    sequence 5 there would tell the client that 0-4, which this partition
    never saw, were delivered."""
    plog.start_transaction_verification(5, 5, 0, supports_epoch_bump=True)
    with pytest.raises(errors.OutOfOrderSequenceNumberError, match="sequence 0"):
        plog.append(idempotent(5, 0, 5, transactional=True))
    assert plog.log_end_offset == 0
    # the retried first batch goes in; the verification ends with it and
    # the producer's later batches follow on as usual
    plog.start_transaction_verification(5, 0, 0, supports_epoch_bump=True)
    assert plog.append(idempotent(5, 0, 0, transactional=True)).first_offset == 0
    assert plog.append(idempotent(5, 0, 3, transactional=True)).first_offset == 3
    assert 5 not in plog.producer_state.verifications
    # its marker (bumped epoch, transactions v2) leaves it known but with
    # no batches: the next transaction's verified first write starts at 0
    plog.append(build_control_batch(True, 5, 1, 0), allow_control=True,
                origin=AppendOrigin.COORDINATOR)
    plog.start_transaction_verification(5, 2, 1, supports_epoch_bump=True)
    with pytest.raises(errors.OutOfOrderSequenceNumberError, match="sequence 0"):
        plog.append(idempotent(5, 1, 2, transactional=True))
    plog.append(idempotent(5, 1, 0, transactional=True))
    # a transactions v1 producer, and an idempotent one, keep Kafka 3.x's
    # rule: no state here, any first sequence
    plog.start_transaction_verification(6, 7, 0, supports_epoch_bump=False)
    plog.append(idempotent(6, 0, 7, transactional=True))
    plog.append(idempotent(8, 0, 1234))
    assert (state(plog)[6][1][:2], state(plog)[8][1][:2]) == ((7, 9), (1234, 1236))


def test_a_write_above_the_lowest_sequence_its_verification_saw_is_refused(plog):
    """Request A (sequence 0) had its verification fail retriably; B
    (sequence 3), pipelined behind it, was verified. Written, B would leave
    A's retry out of order for ever; refused, A's retry goes in, then B's."""
    plog.start_transaction_verification(9, 0, 0, supports_epoch_bump=False)
    plog.start_transaction_verification(9, 3, 0, supports_epoch_bump=False)
    with pytest.raises(errors.OutOfOrderSequenceNumberError, match="lowest"):
        plog.append(idempotent(9, 0, 3, transactional=True))
    plog.start_transaction_verification(9, 0, 0, supports_epoch_bump=False)
    plog.append(idempotent(9, 0, 0, transactional=True))
    plog.append(idempotent(9, 0, 3, transactional=True))
    # a newer epoch starts the lowest sequence over
    plog.start_transaction_verification(10, 4, 0, supports_epoch_bump=False)
    plog.start_transaction_verification(10, 6, 1, supports_epoch_bump=False)
    with pytest.raises(errors.OutOfOrderSequenceNumberError, match="lowest"):
        plog.append(idempotent(10, 1, 7, transactional=True))
    plog.append(idempotent(10, 1, 6, transactional=True))
    assert state(plog)[9][1][:2] == (0, 5) and state(plog)[10][1][:2] == (6, 8)


def test_a_verification_whose_write_never_came_is_dropped_after_a_day(open_log, clock):
    """As Kafka drops it with expired producer ids: a producer that went
    away mid-verification holds nothing here for ever."""
    plog = open_log()
    plog.start_transaction_verification(5, 0, 0, supports_epoch_bump=True)
    plog.start_transaction_verification(6, 0, 0, supports_epoch_bump=True)
    clock.advance(producer_state.VERIFICATION_EXPIRY_MS - 1)
    plog.start_transaction_verification(6, 0, 0, supports_epoch_bump=True)   # from the first
    plog.housekeeping()
    assert set(plog.producer_state.verifications) == {5, 6}
    clock.advance(1)
    plog.housekeeping()
    assert not plog.producer_state.verifications
    plog.append(idempotent(5, 0, 5, transactional=True))


def test_transactions_are_tracked_until_their_marker(plog):
    plog.append(plain())
    first = plog.append(idempotent(5, 0, 0, transactional=True))
    plog.append(idempotent(5, 0, 3, transactional=True))
    assert state(plog)[5][3] == first.first_offset
    plog.append(build_control_batch(True, 5, 0, 0), allow_control=True,
                origin=AppendOrigin.COORDINATOR)
    assert state(plog)[5][3] == -1
    assert state(plog)[5][2] == plog.log_end_offset - 1


# ---- snapshots ---------------------------------------------------------------------------

def fill(plog, producers=(1, 2, 3), rounds=150):
    seqs = {p: 0 for p in producers}
    for r in range(rounds):
        p = producers[r % len(producers)]
        plog.append(idempotent(p, 0, seqs[p]))
        seqs[p] += 3
        if r % 5 == 0:
            plog.append(plain())
    return seqs


def test_a_cleanly_closed_log_reopens_without_reading_a_batch_header(tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    fill(plog)
    assert len(plog.segments) > 3
    assert snapshots(directory)            # one per roll
    before = state(plog)
    plog.close()
    assert snapshots(directory)[-1] == plog.log_end_offset
    again = PartitionLog.open(str(directory), CONFIG)
    assert again.producer_state.batches_read == 0
    assert state(again) == before
    # and it still tells a retry from a new batch
    assert again.append(idempotent(1, 0, before[1][1][0])).duplicate
    again.close()


def test_after_a_crash_only_the_batches_after_the_last_snapshot_are_read(tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    fill(plog)
    last_snapshot = snapshots(directory)[-1]
    tail = [s for s in plog.segments if s.base_offset >= last_snapshot]
    expected_reads = sum(1 for s in tail for _ in s._headers_from(0))
    before = state(plog)
    # no close: the log is abandoned as a killed process leaves it
    copy = tmp_path / "crashed-0"
    shutil.copytree(directory, copy)
    again = PartitionLog.open(str(copy), CONFIG)
    assert 0 < again.producer_state.batches_read == expected_reads
    assert again.producer_state.batches_read < full_rebuild(copy, tmp_path)[1]
    assert state(again) == before == full_rebuild(copy, tmp_path)[0]
    again.close()
    plog.close()


def test_a_damaged_snapshot_is_deleted_and_the_state_rebuilt(tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    fill(plog)
    before = state(plog)
    plog.close()
    newest = snapshots(directory)[-1]
    path = producer_snapshot.snapshot_path(str(directory), newest)
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0x40
    open(path, "wb").write(bytes(data))
    again = PartitionLog.open(str(directory), CONFIG)
    assert newest not in snapshots(directory)
    assert again.producer_state.batches_read > 0          # from the snapshot before it
    assert state(again) == before
    again.close()


def test_retention_deletes_old_snapshots_and_forgets_producers_with_them(tmp_path):
    clock = [1_700_000_000_000]
    config = LogConfig.from_properties({"segment.bytes": 4096, "retention.ms": 60_000})
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), config, clock=lambda: clock[0])
    # an old producer, written once, alone in the first segment
    plog.append(idempotent(1, 0, 0, n=30, timestamp=clock[0] - 120_000))
    plog.roll()
    seqs = {2: 0}
    while len(plog.segments) < 4:
        plog.append(idempotent(2, 0, seqs[2], timestamp=clock[0]))
        seqs[2] += 3
    assert 1 in state(plog) and plog.segments[0].max_timestamp == clock[0] - 120_000
    # the first segment is past retention.ms, the others are not
    assert plog.delete_old_segments() == 1
    assert 1 not in state(plog) and 2 in state(plog)
    assert all(o >= plog.log_start_offset for o in snapshots(directory))
    plog.close()


def test_truncation_below_a_snapshot_reloads_the_state_as_of_the_new_end(tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), CONFIG)
    fill(plog, rounds=200)
    shots = snapshots(directory)
    assert len(shots) >= 3
    cut = shots[-2] - 1                      # below the last two snapshots
    plog.truncate_to(cut)
    assert snapshots(directory) == [s for s in shots if s <= cut]
    rebuilt, _ = full_rebuild(directory, tmp_path)
    assert state(plog) == rebuilt
    # the producers continue from the truncated state: the sequence after
    # the last surviving batch is accepted
    pid, (epoch, (_, last_seq, _, _), _, _) = next(iter(state(plog).items()))
    plog.append(idempotent(pid, epoch, last_seq + 1))
    plog.close()


# ---- kill -9 -----------------------------------------------------------------------------

CRASHES = setting("KAFKALITE_PRODUCER_CRASHES")


@pytest.mark.processes
@pytest.mark.slow
def test_producer_state_survives_kill_9_at_random_moments(tmp_path):
    """KAFKALITE_PRODUCER_CRASHES kills (tests/soak.py: 3, 100 under tools/soak)."""
    directory = tmp_path / "p-0"
    config = LogConfig.from_properties({"segment.bytes": 16 * 1024, "retention.ms": -1})
    rng = random.Random(1234)
    for round_ in range(CRASHES):
        child = subprocess.Popen([sys.executable, os.path.join(HERE, "producer_writer.py"),
                                  str(directory), str(round_)],
                                 stdout=subprocess.PIPE, text=True, env=child_env())
        assert child.stdout.readline().strip() == "ready"
        for _ in range(rng.randrange(20, 400)):
            assert child.stdout.readline().startswith("ack")
        child.send_signal(signal.SIGKILL)
        child.wait()
        # every ack the writer printed before it died, the last ones included
        acked = [tuple(map(int, line.split()[1:])) for line in child.stdout if line.startswith("ack")]
        child.stdout.close()
        plog = PartitionLog.open(str(directory), config)
        try:
            assert state(plog) == full_rebuild(directory, tmp_path)[0]
            # acknowledged batches are where their acks said
            for pid, first_seq, _, first_off, _ in acked[-50:]:
                record = read_at(plog, first_off)
                assert record == b"%d-%d" % (pid, first_seq)
            # each producer's last batch is recognised as such when retried
            for pid, (epoch, (first_seq, last_seq, first_off, last_off), _, _) in state(plog).items():
                retry = plog.append(idempotent(pid, epoch, first_seq, last_seq - first_seq + 1))
                assert retry.duplicate and (retry.first_offset, retry.last_offset) == (
                    first_off, last_off)
        finally:
            plog.close()


def read_at(plog, offset):
    from kafkalite.record import iter_batches
    for batch in iter_batches(plog.read(offset, 1 << 16).read()):
        for record in batch.records():
            if record.offset == offset:
                return bytes(record.value)
    return None
