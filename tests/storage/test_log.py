"""PartitionLog: append, read, offsets, timestamps, epochs, validation errors."""
import os
import random
import socket
import threading

import pytest

from storage_helpers import batch, read_all, verify_segments
from kafkalite.errors import (CorruptRecordError, InvalidConfigurationError, InvalidRecordError,
                              MessageTooLargeError, OffsetOutOfRangeError,
                              UnsupportedForMessageFormatError)
from kafkalite.record import RecordBatch, build_control_batch, decode_columns
from kafkalite.storage import LogConfig, PartitionLog


def test_append_assigns_consecutive_offsets_and_reads_back(open_log):
    plog = open_log()
    info = plog.append(batch([b"a", b"b", b"c"], keys=[b"1", None, b"3"], timestamp=5))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 2, 3)
    info = plog.append(batch([b"d"], headers=[("h", b"x"), ("n", None)], timestamp=7))
    assert (info.first_offset, info.last_offset) == (3, 3)
    assert plog.log_end_offset == 4
    got = read_all(plog)
    assert [(o, k, v) for o, _, k, v, _ in got] == [
        (0, b"1", b"a"), (1, None, b"b"), (2, b"3", b"c"), (3, None, b"d")]
    assert got[3][4] == [("h", b"x"), ("n", None)]
    assert [ts for _, ts, _, _, _ in got] == [5, 5, 5, 7]


def test_several_batches_in_one_append_and_input_handling(open_log):
    plog = open_log()
    plog.append(batch([b"x"]))
    raw = batch([b"a", b"b"]) + batch([b"c"], compression="lz4") + batch([b"d"] * 3, compression="zstd")
    frozen = bytes(raw)
    info = plog.append(raw)
    assert (info.first_offset, info.last_offset, info.batch_count) == (1, 6, 3)
    assert raw == frozen, "a read-only input must not be modified (it is copied once)"
    writable = bytearray(batch([b"e"]))
    plog.append(writable)
    assert RecordBatch(writable).base_offset == 7, "a writable input is patched in place"
    assert [v for _, _, _, v, _ in read_all(plog)] == [b"x", b"a", b"b", b"c", b"d", b"d", b"d", b"e"]


def _unchanged(plog, fn, exc):
    end, size = plog.log_end_offset, plog.active_segment.size
    with pytest.raises(exc) as info:
        fn()
    assert plog.log_end_offset == end and plog.active_segment.size == size
    assert os.path.getsize(plog.active_segment.path) == size
    assert str(info.value)  # a message a user can read
    return info.value


def test_bad_batches_are_rejected_and_the_log_is_unchanged(open_log):
    plog = open_log(max_message_bytes=1000)
    plog.append(batch([b"ok"]))
    good = bytearray(batch([b"v" * 50]))

    flipped = bytearray(good)
    flipped[-3] ^= 0xFF
    e = _unchanged(plog, lambda: plog.append(flipped), CorruptRecordError)
    assert "CRC" in str(e) and e.code == 2

    _unchanged(plog, lambda: plog.append(good[:-5]), CorruptRecordError)
    _unchanged(plog, lambda: plog.append(b""), CorruptRecordError)
    _unchanged(plog, lambda: plog.append(b"\x00" * 7), CorruptRecordError)

    bad_magic = bytearray(good)
    bad_magic[16] = 1
    _unchanged(plog, lambda: plog.append(bad_magic), UnsupportedForMessageFormatError)

    big = batch([os.urandom(2000)])
    e = _unchanged(plog, lambda: plog.append(big), MessageTooLargeError)
    assert "max.message.bytes" in str(e) and e.code == 10

    # the good batch first, then a bad one: all or nothing
    _unchanged(plog, lambda: plog.append(bytes(good) + bytes(flipped)), CorruptRecordError)

    control = build_control_batch(True, producer_id=1, producer_epoch=0, coordinator_epoch=0)
    _unchanged(plog, lambda: plog.append(control), InvalidRecordError)
    plog.append(control, allow_control=True)
    assert plog.log_end_offset == 2

    plog.append(good)
    assert [v for *_, v, _ in read_all(plog)] == [b"ok", b"v" * 50]  # control record skipped
    assert verify_segments(plog) == []


def test_compacted_topic_requires_keys(open_log):
    plog = open_log(cleanup_policy="compact")
    e = _unchanged(plog, lambda: plog.append(batch([b"v"])), InvalidRecordError)
    assert "key" in str(e)
    plog.append(batch([b"v"], keys=[b"k"]))
    assert plog.log_end_offset == 1


def test_read_bounds_and_min_one_message(open_log):
    plog = open_log()
    for i in range(10):
        plog.append(batch([b"%d" % i * 100] * 5))
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(51, 100)
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(-1, 100)
    assert plog.read(50, 100).region is None  # at the log end: nothing yet
    one = plog.read(12, 10)  # smaller than a batch: the whole batch anyway (KIP-74)
    cols = decode_columns(one.read())
    assert list(cols.offsets) == [10, 11, 12, 13, 14]
    cut = plog.read(0, 900)  # may end inside a batch, as Kafka's does
    assert cut.region.length == 900
    cols = decode_columns(cut.read())
    assert cols.bytes_consumed < 900 and cols.next_offset == 5 * (cols.bytes_consumed // 600)
    capped = read_all(plog, max_offset=23)
    assert capped[-1][0] == 19, "no batch at or past max_offset (the high watermark)"


def test_sendfile_sends_the_region_over_a_real_socket(open_log):
    plog = open_log(segment_bytes=4096)
    for i in range(40):
        plog.append(batch([os.urandom(50) for _ in range(4)]))
    fetched = plog.read(37, 3000)
    expected = fetched.read()
    a, b = socket.socketpair()
    received = bytearray()

    def drain():
        while len(received) < len(expected):
            chunk = b.recv(65536)
            if not chunk:
                break
            received.extend(chunk)

    t = threading.Thread(target=drain)
    t.start()
    assert fetched.region.sendfile(a.fileno()) == len(expected)
    t.join(5)
    a.close()
    b.close()
    assert bytes(received) == expected
    assert decode_columns(expected).offsets[0] <= 37


def test_segments_roll_on_size_and_lookup_crosses_them(open_log):
    plog = open_log(segment_bytes=2000, index_interval_bytes=300)
    for i in range(100):
        plog.append(batch([b"v%03d" % i * 10] * 3, timestamp=1000 + i))
    names = sorted(n for n in os.listdir(plog.directory) if n.endswith(".log"))
    assert len(names) == len(plog.segments) > 10
    assert names[0] == "%020d.log" % 0
    assert all(int(n[:20]) == s.base_offset for n, s in zip(names, plog.segments))
    assert any(s.offset_index.entries for s in plog.segments), "index.interval.bytes honoured"
    for offset in random.Random(1).sample(range(300), 60):
        cols = decode_columns(plog.read(offset, 1).read())
        assert cols.offsets[0] <= offset <= cols.offsets[-1]
        assert cols.value(int(offset - cols.offsets[0])) == b"v%03d" % (offset // 3) * 10
    assert len(read_all(plog)) == 300
    assert verify_segments(plog) == []


def test_a_full_index_rolls_the_segment_as_it_was_opened_and_truncated(open_log):
    """segment.index.bytes 24: a time index of two entries, and an entry
    for every batch after a segment's first (index.interval.bytes 0), so
    every third batch fills it and the next rolls the segment; a segment
    opened with a full index rolls at the next append, one truncated below
    its full index takes the next batches itself."""
    props = dict(segment_index_bytes=24, index_interval_bytes=0)
    plog = open_log(**props)
    for i in range(9):
        plog.append(batch([b"x"], timestamp=1000 + i))
    assert [s.base_offset for s in plog.segments] == [0, 3, 6]
    assert plog.active_segment.time_index.is_full()
    plog.close()
    plog = open_log(**props)
    plog.append(batch([b"y"], timestamp=2000))
    assert [s.base_offset for s in plog.segments] == [0, 3, 6, 9]
    for i in range(2):
        plog.append(batch([b"z"], timestamp=2001 + i))
    assert plog.active_segment.time_index.is_full()
    plog.truncate_to(10)
    assert not plog.active_segment.time_index.is_full()
    plog.append(batch([b"w"], timestamp=2003))
    assert [s.base_offset for s in plog.segments] == [0, 3, 6, 9]
    assert plog.log_end_offset == 11


def test_segment_ms_rolls_by_record_time(open_log):
    plog = open_log(segment_ms=1000)
    plog.append(batch([b"a"], timestamp=10_000))
    plog.append(batch([b"b"], timestamp=10_500))
    assert len(plog.segments) == 1
    plog.append(batch([b"c"], timestamp=11_001))
    assert len(plog.segments) == 2 and plog.active_segment.base_offset == 2


def test_a_topic_config_change_rolls_by_the_new_segment_settings(open_log):
    """The broker swaps a live log's config when the topic's is altered
    (replica_manager.become_leader): the active segment, opened under the
    old one, rolls by the new segment.bytes and segment.ms at the next
    append."""
    plog = open_log()
    for i in range(5):
        plog.append(batch([b"x" * 100], timestamp=1000 + i))
    assert len(plog.segments) == 1
    plog.config = LogConfig.from_properties({"segment.bytes": 300})
    plog.append(batch([b"x" * 100], timestamp=1010))
    assert len(plog.segments) == 2 and plog.active_segment.base_offset == 5
    plog.config = LogConfig.from_properties({"segment.ms": 50})
    plog.append(batch([b"y"], timestamp=1020))
    assert len(plog.segments) == 2
    plog.append(batch([b"z"], timestamp=1100))
    assert len(plog.segments) == 3 and plog.active_segment.base_offset == 7


def test_offset_for_timestamp_matches_a_brute_force_model(open_log):
    rng = random.Random(7)
    plog = open_log(segment_bytes=3000, index_interval_bytes=200)
    stamps = []
    for _ in range(150):
        ts = [rng.randrange(0, 5000) for _ in range(rng.randrange(1, 6))]
        plog.append(batch([b"x" * 20] * len(ts), timestamp=ts))
        stamps.extend(ts)
    for target in list(range(-5, 5100, 37)) + stamps[:40]:
        want = next(((o, t) for o, t in enumerate(stamps) if t >= target), None)
        got = plog.offset_for_timestamp(max(target, 0)) if target >= 0 else None
        if target >= 0:
            assert got == want, target
    assert plog.offset_for_timestamp(-2) == (0, -1)
    assert plog.offset_for_timestamp(-1) == (len(stamps), -1)
    assert plog.offset_for_timestamp(-3) == (stamps.index(max(stamps)), max(stamps))


def test_log_append_time(open_log, clock):
    plog = open_log(message_timestamp_type="LogAppendTime")
    info = plog.append(batch([b"a", b"b"], timestamp=5))
    assert info.log_append_time == clock.now
    assert [ts for _, ts, *_ in read_all(plog)] == [clock.now, clock.now]
    assert RecordBatch(plog.read(0, 1000).read()).is_valid()


def test_leader_epochs_are_stamped_cached_and_persisted(open_log, tmp_path, clock):
    plog = open_log()
    plog.append(batch([b"a"]))
    plog.leader_epoch = 3
    plog.append(batch([b"b", b"c"]))
    plog.leader_epoch = 5
    plog.append(batch([b"d"]))
    epochs = [RecordBatch(plog.read(o, 1).read()).partition_leader_epoch for o in (0, 1, 3)]
    assert epochs == [0, 3, 5]
    assert plog.leader_epoch_cache.entries == [(0, 0), (3, 1), (5, 3)]
    assert plog.end_offset_for_epoch(3) == (3, 3)
    assert plog.end_offset_for_epoch(4) == (3, 3)
    assert plog.end_offset_for_epoch(5) == (5, 4)
    with pytest.raises(ValueError):
        plog.leader_epoch = 2
    plog.close()
    again = PartitionLog.open(plog.directory, plog.config, clock=clock)
    assert again.leader_epoch_cache.entries == [(0, 0), (3, 1), (5, 3)]
    with open(os.path.join(plog.directory, "leader-epoch-checkpoint")) as f:
        assert f.read().split("\n")[:3] == ["0", "3", "0 0"]
    again.close()


def test_high_watermark_and_checkpoint_survive_reopen(open_log, clock):
    plog = open_log()
    for _ in range(5):
        plog.append(batch([b"x"]))
    with pytest.raises(ValueError):
        plog.high_watermark = 6
    plog.high_watermark = 4
    plog.close()
    again = PartitionLog.open(plog.directory, plog.config, clock=clock)
    assert again.had_clean_shutdown and again.recovered_segments == 0
    assert (again.high_watermark, again.log_end_offset, again.recovery_point) == (4, 5, 5)
    again.append(batch([b"y"]))
    assert again.log_end_offset == 6
    again.close()


def test_flush_messages_moves_the_recovery_point(open_log):
    plog = open_log(flush_messages=2)
    plog.append(batch([b"a"]))
    assert plog.recovery_point == 0
    plog.append(batch([b"b"]))
    assert plog.recovery_point == 2
    plain = open_log("u-0")
    plain.append(batch([b"a"]))
    plain.flush()
    assert plain.recovery_point == 1


def test_roll_flushes_the_old_segment_in_the_background(open_log):
    plog = open_log(segment_bytes=500)
    for _ in range(10):
        plog.append(batch([b"z" * 200]))
    plog._poll_flushes(wait=True)
    assert plog.recovery_point == plog.active_segment.base_offset > 0


def test_delete_records_and_truncate(open_log):
    plog = open_log(segment_bytes=400, retention_ms=-1)
    for i in range(20):
        plog.append(batch([b"%02d" % i * 40]))
    plog.high_watermark = 20
    assert plog.delete_records(7) == 7
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(6, 100)
    assert read_all(plog)[0][0] == 7
    assert plog.segments[0].base_offset <= 7
    with pytest.raises(OffsetOutOfRangeError):
        plog.delete_records(21)

    plog.leader_epoch = 2
    plog.append(batch([b"e2"]))
    assert plog.truncate_to(15)
    assert plog.log_end_offset == 15 and plog.high_watermark == 15
    assert plog.leader_epoch_cache.entries[-1][1] < 15
    assert [o for o, *_ in read_all(plog)] == list(range(7, 15))
    plog.append(batch([b"again"]))
    assert read_all(plog)[-1][0] == 15 and read_all(plog)[-1][3] == b"again"
    assert verify_segments(plog) == []


def test_follower_append_keeps_offsets_and_epochs(open_log):
    leader = open_log("l-0")
    leader.leader_epoch = 4
    for i in range(5):
        leader.append(batch([b"%d" % i] * 2))
    data = leader.read(0, 1 << 20).read()
    assert isinstance(data, bytes)            # read-only: taken as it is, not copied
    kept = bytes(data)
    follower = open_log("f-0")
    info = follower.append_as_follower(data)
    assert data == kept
    assert (info.first_offset, info.last_offset) == (0, 9)
    assert follower.leader_epoch_cache.entries == [(4, 0)]
    assert read_all(follower) == read_all(leader)
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(data)  # offsets already present


def test_config_errors_name_the_key():
    with pytest.raises(InvalidConfigurationError, match="segment.bytes"):
        LogConfig.from_properties({"segment.bytes": "lots"})
    with pytest.raises(InvalidConfigurationError, match="segment.bytes"):
        LogConfig.from_properties({"segment.bytes": 3})
    with pytest.raises(InvalidConfigurationError, match="no.such"):
        LogConfig.from_properties({"no.such": 1})
    with pytest.raises(InvalidConfigurationError, match="cleanup.policy"):
        LogConfig.from_properties({"cleanup.policy": "shred"})
    cfg = LogConfig.from_properties({"cleanup.policy": "compact,delete", "retention.ms": "-1"})
    assert cfg.compact and cfg.delete and cfg.retention_ms == -1
    assert LogConfig.from_properties(cfg.to_properties()) == cfg


def test_closed_log_refuses_work(open_log):
    plog = open_log()
    plog.append(batch([b"a"]))
    plog.close()
    with pytest.raises(Exception, match="closed"):
        plog.append(batch([b"b"]))


def _regions(plog, offsets, max_bytes):
    out = []
    for o in offsets:
        r = plog.read(o, max_bytes).region
        out.append(None if r is None else (os.path.basename(r.file.name), r.position, r.length))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_reads_near_the_log_end_find_the_batches_a_reopened_log_finds(open_log, seed):
    # A read at the log end finds its batch among the segment's last
    # appends, kept in memory; a reopened log has none kept and reads the
    # index and batch headers. Both must serve the same bytes from every
    # offset: across one- and many-batch appends, more appends than are
    # kept, a truncation, a compacted (gapped) segment and rolls.
    rng = random.Random(seed)
    plog = open_log(segment_bytes=60_000, index_interval_bytes=300, cleanup_policy="compact")
    for n in range(400):
        parts = [batch([b"v" * rng.randrange(1, 400)] * rng.randrange(1, 4),
                       keys=[b"k%d" % rng.randrange(20)] * 3) for _ in range(rng.choice([1, 1, 3]))]
        plog.append(b"".join(parts))
        if n == 150:
            assert plog.truncate_to(plog.log_end_offset - 7)
        if n == 300:
            plog.roll()
            plog.high_watermark = plog.log_end_offset
            plog.compact()
    offsets = range(plog.log_start_offset, plog.log_end_offset + 1)
    live = _regions(plog, offsets, 1) + _regions(plog, offsets, 5000)
    found = [plog.active_segment.translate_offset(o) for o in offsets]
    directory = plog.directory
    plog.close()
    reopened = PartitionLog.open(directory, plog.config)
    try:
        assert live == _regions(reopened, offsets, 1) + _regions(reopened, offsets, 5000)
        assert found == [reopened.active_segment.translate_offset(o) for o in offsets]
    finally:
        reopened.close()
