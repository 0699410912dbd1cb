"""The append facts as C fields (ext/log_state.pyx): the active segment's
in-memory tail kept as C rows answers as the list of tuples it replaced
(the newest batches, trimmed to 16 past 32, found by last offset, not
asked when stale), and the indexes' entries appended from C are the
bytes, last entries and fullness of the Python methods, which still take
the cases the C path leaves (an unknown last entry, entries out of order or
range) and raise as before. Real segment and index files."""
from __future__ import annotations

import struct

import pytest

from kafkalite._ext.log_state import NOT_IN_TAIL, IndexState, LogSegmentState
from kafkalite.storage.config import LogConfig
from kafkalite.storage.index import OffsetIndex, TimeIndex
from kafkalite.storage.segment import _TAIL_BATCHES, LogSegment


@pytest.fixture
def segment(tmp_path):
    seg = LogSegment(str(tmp_path), 100, LogConfig(), create=True)
    yield seg
    seg.close()


def test_the_classes_keep_their_facts_in_the_c_bases(segment):
    assert isinstance(segment, LogSegmentState)
    assert isinstance(segment.offset_index, IndexState)
    segment.next_offset = 7
    assert segment.next_offset == 7
    with pytest.raises(TypeError):
        segment._size = None            # an int64 field holds ints only
    assert "_size" not in segment.__dict__


def test_the_tail_keeps_the_newest_batches_and_finds_one_by_last_offset(segment):
    rows = []
    for i in range(2 * _TAIL_BATCHES + 1):      # one past twice 16: trimmed to the newest 16
        row = (100 + 10 * i, 109 + 10 * i, 500 * i, 500)
        segment.tail_add(*row)
        rows.append(row)
        segment.tail_trim()
    assert segment.tail_batches == rows[-_TAIL_BATCHES:]
    segment._size = segment._tail_end = 500 * len(rows)
    first = rows[-_TAIL_BATCHES]
    # the batch holding an offset, a batch's last offset, past the last batch
    assert segment.tail_lookup(first[0] + 3, 0) == first
    assert segment.tail_lookup(first[1], first[2]) == first
    assert segment.tail_lookup(first[1] + 1, 0) == rows[-_TAIL_BATCHES + 1]
    assert segment.tail_lookup(rows[-1][1] + 1, 0) is None
    # what the tail cannot say: before it, from a position after its start, or stale
    assert segment.tail_lookup(first[0] - 1, 0) is NOT_IN_TAIL
    assert segment.tail_lookup(first[0], first[2] + 1) is NOT_IN_TAIL
    segment._tail_end = 0
    assert segment.tail_lookup(first[0], 0) is NOT_IN_TAIL
    segment.tail_clear()
    assert segment.tail_batches == []


def test_offset_index_entries_from_c_are_the_python_methods(tmp_path):
    c_index = OffsetIndex(str(tmp_path / "c.index"), 1000, 24)     # room for 3 entries
    py_index = OffsetIndex(str(tmp_path / "p.index"), 1000, 24)
    for offset, position in ((1000, 0), (1010, 4096), (1025, 9000)):
        assert c_index.try_offset_append(offset, position) == 1
        py_index.append(offset, position)
        assert bytes(c_index._data) == bytes(py_index._data)
        assert c_index._last == py_index._last == (offset, position)
        assert c_index.full == py_index.full
    assert c_index.full
    assert bytes(c_index._data[-8:]) == struct.pack(">ii", 25, 9000)
    # out of order, or out of the segment's range: left to the Python method, which raises
    assert c_index.try_offset_append(1025, 9500) == 0
    with pytest.raises(ValueError):
        c_index.append(1025, 9500)
    assert c_index.try_offset_append(1000 + 2 ** 31, 9500) == 0
    c_index.close()
    py_index.close()


def test_time_index_entries_from_c_are_the_python_methods(tmp_path):
    c_index = TimeIndex(str(tmp_path / "c.timeindex"), 1000, 1024)
    py_index = TimeIndex(str(tmp_path / "p.timeindex"), 1000, 1024)
    for ts, offset in ((5, 1000), (5, 1003), (4, 1004), (9, 1009), (12, 1012)):
        assert c_index.try_time_append(ts, offset) == 1
        py_index.maybe_append(ts, offset)       # only a larger timestamp is an entry
        assert bytes(c_index._data) == bytes(py_index._data)
        assert c_index._last == py_index._last
    assert c_index.entries == 3
    assert c_index.try_time_append(20, 1011) == 0       # offset going back: Python raises
    with pytest.raises(ValueError):
        c_index.maybe_append(20, 1011)
    c_index.close()
    py_index.close()


def test_an_index_opened_with_entries_leaves_its_first_append_to_python(tmp_path):
    path = str(tmp_path / "x.index")
    index = OffsetIndex(path, 0, 1024)
    index.append(5, 100)
    index.write_pending()
    index.close()
    reopened = OffsetIndex(path, 0, 1024)
    assert reopened._last is None and reopened.entries == 1   # the last entry not read yet
    assert reopened.try_offset_append(9, 200) == 0
    reopened.append(9, 200)
    assert reopened.try_offset_append(12, 300) == 1                 # known now
    assert reopened.entry(2) == (12, 300)
    reopened.close()
