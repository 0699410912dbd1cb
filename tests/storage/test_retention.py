"""Retention by time and by size deletes whole closed segments, never the active one."""
import pytest

from storage_helpers import batch, read_all
from kafkalite.errors import OffsetOutOfRangeError

DAY = 24 * 3600 * 1000


def test_retention_by_time_deletes_expired_closed_segments(open_log, clock):
    plog = open_log(segment_bytes=1000, retention_ms=DAY)
    for i in range(30):  # 10 days of records, oldest first
        plog.append(batch([b"%02d" % i * 100], timestamp=clock.now - (30 - i) * DAY // 3))
    assert len(plog.segments) >= 10
    region = plog.read(0, 1000).region   # a reader holding the oldest segment
    deleted = plog.delete_old_segments()
    assert deleted > 0
    survivors = read_all(plog)
    assert survivors, "the active segment is never deleted"
    # Every segment left except the active one holds a record within a day.
    for seg in plog.segments[:-1]:
        assert clock.now - seg.max_timestamp <= DAY
    assert plog.log_start_offset == plog.segments[0].base_offset == survivors[0][0]
    with pytest.raises(OffsetOutOfRangeError):
        plog.read(0, 100)
    assert region.read()[:8] == (0).to_bytes(8, "big"), "an open read survives deletion"


def test_active_segment_survives_even_when_expired(open_log, clock):
    plog = open_log(retention_ms=1000)
    plog.append(batch([b"old"], timestamp=clock.now - DAY))
    assert plog.delete_old_segments() == 0
    assert [v for *_, v, _ in read_all(plog)] == [b"old"]
    plog.roll()
    plog.append(batch([b"new"], timestamp=clock.now))
    assert plog.delete_old_segments() == 1
    assert [v for *_, v, _ in read_all(plog)] == [b"new"]


def test_retention_by_size_keeps_the_newest_bytes(open_log, clock):
    plog = open_log(segment_bytes=1000, retention_bytes=3000, retention_ms=-1)
    for i in range(40):
        plog.append(batch([b"%02d" % i * 100], timestamp=clock.now))
    total_before = plog.size_in_bytes
    plog.delete_old_segments()
    assert plog.size_in_bytes <= 3000 + plog.segments[0].size
    assert plog.size_in_bytes < total_before
    # deleting one more segment would take it under the limit: Kafka's rule
    assert plog.size_in_bytes - plog.segments[0].size < 3000
    assert read_all(plog)[-1][3] == b"39" * 100


def test_compact_only_topics_ignore_time_and_size_retention(open_log, clock):
    plog = open_log(cleanup_policy="compact", segment_bytes=500, retention_ms=1, retention_bytes=1)
    for i in range(10):
        plog.append(batch([b"v" * 100], keys=[b"k%d" % i], timestamp=clock.now - DAY))
    assert plog.delete_old_segments() == 0
    assert len(read_all(plog)) == 10


def test_retention_persists_the_new_log_start_offset(open_log, clock, tmp_path):
    from kafkalite.storage import PartitionLog
    plog = open_log(segment_bytes=500, retention_bytes=1000, retention_ms=-1)
    for i in range(20):
        plog.append(batch([b"x" * 100]))
    plog.delete_old_segments()
    start = plog.log_start_offset
    assert start > 0
    plog.close()
    again = PartitionLog.open(plog.directory, plog.config, clock=clock)
    assert again.log_start_offset == start
    again.close()
