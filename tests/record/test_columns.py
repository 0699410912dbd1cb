"""decode_columns: many batches to Arrow-layout numpy columns in one call.

The reference is per-record iteration through ``RecordBatch.records()``,
which shares only the record parser with the bulk decoder.
"""
import random
import struct

import numpy as np
import pytest

from kafkalite._ext.crc32c import crc32c
from kafkalite.errors import CorruptRecordError
from kafkalite.record import (LOG_APPEND_TIME, LOG_OVERHEAD, RecordBatch, RecordBatchBuilder,
                              build_control_batch, decode_columns, iter_batches)

CODECS = [0, 1, 2, 3, 4]


def random_batches(seed, n_batches=40, with_control=True):
    """Concatenated batches with random contents, codecs, controls; returns
    (bytes, list of per-batch raw bytes)."""
    rng = random.Random(seed)
    raws = []
    offset = rng.randrange(0, 10_000)
    for i in range(n_batches):
        if with_control and rng.random() < 0.15:
            raw = build_control_batch(rng.random() < 0.5, producer_id=rng.randrange(100),
                                      producer_epoch=rng.randrange(5),
                                      coordinator_epoch=rng.randrange(10),
                                      timestamp=rng.randrange(10**12), base_offset=offset)
            raws.append(raw)
            offset += 1
            continue
        builder = RecordBatchBuilder(
            rng.choice(CODECS), base_offset=offset,
            producer_id=rng.choice([-1, rng.randrange(1 << 40)]),
            producer_epoch=rng.randrange(-1, 5), base_sequence=rng.randrange(-1, 1000),
            timestamp_type=LOG_APPEND_TIME if rng.random() < 0.2 else 0,
            delete_horizon_ms=rng.randrange(10**12) if rng.random() < 0.1 else None)
        base_ts = rng.randrange(-1000, 10**12)
        n = rng.randrange(1, 30)
        rel = -1
        for _ in range(n):
            rel += rng.choice([1, 1, 1, 2, 5])
            key = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 20))])
            value = rng.choice([None, b"", rng.randbytes(rng.randrange(1, 300)),
                                b"x" * rng.randrange(1000)])
            headers = [(rng.choice(["", "h", "ключ", "k%d" % rng.randrange(9)]),
                        rng.choice([None, b"", rng.randbytes(rng.randrange(1, 10))]))
                       for _ in range(rng.choice([0, 0, 1, 3]))]
            builder.append_with_offset(offset + rel, base_ts + rng.randrange(-500, 500), key,
                                       value, headers)
        raws.append(builder.build(last_offset_delta=rel + rng.choice([0, 0, 3])))
        offset = RecordBatch(raws[-1]).next_offset + rng.choice([0, 0, 0, 7])
    return b"".join(raws), raws


def iterated(raws, skip_control=True):
    out = []
    for raw in raws:
        batch = RecordBatch(raw)
        if skip_control and batch.is_control:
            continue
        out.extend((r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                   for r in batch.records())
    return out


@pytest.mark.parametrize("seed", range(6))
def test_equals_per_record_iteration(seed):
    data, raws = random_batches(seed)
    cols = decode_columns(data)
    assert cols.to_records() == iterated(raws)
    assert cols.keys() == [r[3] for r in iterated(raws)]
    assert cols.values() == [r[4] for r in iterated(raws)]
    all_cols = decode_columns(data, skip_control=False)
    assert all_cols.to_records() == iterated(raws, skip_control=False)
    assert decode_columns(data, verify_crc=True).to_records() == cols.to_records()
    # also from a bytearray, a memoryview and a numpy array
    for obj in (bytearray(data), memoryview(data), np.frombuffer(data, dtype=np.uint8)):
        assert decode_columns(obj).to_records() == cols.to_records()


@pytest.mark.parametrize("skip_control", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_per_batch_arrays(seed, skip_control):
    data, raws = random_batches(seed + 100)
    assert any(RecordBatch(r).is_control for r in raws)
    cols = decode_columns(data, skip_control=skip_control)
    batches = list(iter_batches(data))
    nb = len(batches)
    assert nb == len(raws)
    for name in ("batch_base_offsets", "batch_last_offsets", "batch_positions", "batch_sizes",
                 "batch_record_starts", "batch_attributes", "batch_producer_ids",
                 "batch_base_timestamps"):
        assert len(getattr(cols, name)) == nb, name
    assert list(cols.batch_base_offsets) == [b.base_offset for b in batches]
    assert list(cols.batch_last_offsets) == [b.last_offset for b in batches]
    assert list(cols.batch_positions) == [b.position for b in batches]
    assert list(cols.batch_sizes) == [b.size_in_bytes for b in batches]
    assert list(cols.batch_attributes) == [b.attributes for b in batches]
    assert list(cols.batch_producer_ids) == [b.producer_id for b in batches]
    assert list(cols.batch_base_timestamps) == [b.base_timestamp for b in batches]
    starts, count = [], 0
    for b in batches:
        starts.append(count)
        if not (skip_control and b.is_control):
            count += b.record_count
    assert list(cols.batch_record_starts) == starts
    assert len(cols) == count
    # each batch's slice of the record columns is that batch's records
    bounds = list(cols.batch_record_starts) + [len(cols)]
    recs = cols.to_records()
    for i, b in enumerate(batches):
        got = recs[bounds[i]:bounds[i + 1]]
        if skip_control and b.is_control:
            assert got == []
        else:
            assert [r[0] for r in got] == [r.offset for r in b.records()]
            assert all(b.base_offset <= r[0] <= b.last_offset for r in got)
    assert cols.next_offset == batches[-1].next_offset
    assert cols.bytes_consumed == len(data)


def test_column_dtypes_and_arrow_layout():
    builder = RecordBatchBuilder(base_offset=5)
    builder.append(10, b"ab", None, [])
    builder.append(11, None, b"xyz", [("a", b"1"), ("ü", None)])
    builder.append(9, b"", b"", [("", b"")])
    builder.append(12, b"c", None, [("k", b"vv")])
    raw = builder.build()
    cols = decode_columns(raw)
    assert cols.offsets.dtype == np.int64 and list(cols.offsets) == [5, 6, 7, 8]
    assert cols.timestamps.dtype == np.int64 and list(cols.timestamps) == [10, 11, 9, 12]
    assert cols.timestamp_types.dtype == np.uint8 and list(cols.timestamp_types) == [0] * 4
    # keys: Arrow binary -- int32 offsets (n+1), uint8 data, validity bitmap as bools
    assert cols.key_offsets.dtype == np.int32
    assert list(cols.key_offsets) == [0, 2, 2, 2, 3]
    assert bytes(cols.key_data) == b"abc"
    assert cols.key_valid.dtype == np.bool_
    assert list(cols.key_valid) == [True, False, True, True]
    assert list(cols.value_offsets) == [0, 0, 3, 3, 3]
    assert bytes(cols.value_data) == b"xyz"
    assert list(cols.value_valid) == [False, True, True, False]
    # headers: list<struct<key: string, value: binary>>
    assert cols.header_offsets.dtype == np.int32
    assert list(cols.header_offsets) == [0, 0, 2, 3, 4]
    assert list(cols.header_key_offsets) == [0, 1, 3, 3, 4]
    assert bytes(cols.header_key_data) == "aü".encode() + b"k"
    assert list(cols.header_value_offsets) == [0, 1, 1, 1, 3]
    assert bytes(cols.header_value_data) == b"1vv"
    assert cols.header_value_valid.dtype == np.bool_
    assert list(cols.header_value_valid) == [True, False, True, True]
    assert [cols.headers(i) for i in range(4)] == [
        [], [("a", b"1"), ("ü", None)], [("", b"")], [("k", b"vv")]]
    assert [cols.key(i) for i in range(4)] == [b"ab", None, b"", b"c"]
    assert [cols.value(i) for i in range(4)] == [None, b"xyz", b"", None]


@pytest.mark.parametrize("seed", range(3))
def test_header_columns_match_records(seed):
    data, raws = random_batches(seed + 200)
    cols = decode_columns(data)
    expected = [r[5] for r in iterated(raws)]
    n_headers = sum(len(h) for h in expected)
    assert len(cols.header_key_offsets) == n_headers + 1
    assert len(cols.header_value_offsets) == n_headers + 1
    assert len(cols.header_value_valid) == n_headers
    assert cols.header_offsets[-1] == n_headers
    assert np.all(np.diff(cols.header_offsets) >= 0)
    assert [cols.headers(i) for i in range(len(cols))] == expected
    flat_values = [v for hs in expected for _, v in hs]
    assert list(cols.header_value_valid) == [v is not None for v in flat_values]
    assert bytes(cols.header_value_data) == b"".join(v for v in flat_values if v)


def test_null_masks_over_many_batches():
    data, raws = random_batches(300)
    cols = decode_columns(data)
    expected = iterated(raws)
    assert list(cols.key_valid) == [r[3] is not None for r in expected]
    assert list(cols.value_valid) == [r[4] is not None for r in expected]
    # null entries have zero length in the offsets
    ko, vo = cols.key_offsets, cols.value_offsets
    assert all(ko[i + 1] == ko[i] for i, r in enumerate(expected) if r[3] is None)
    assert all(vo[i + 1] == vo[i] for i, r in enumerate(expected) if r[4] is None)
    assert ko[-1] == len(cols.key_data) == sum(len(r[3]) for r in expected if r[3])
    assert vo[-1] == len(cols.value_data) == sum(len(r[4]) for r in expected if r[4])


def test_trailing_partial_batch_is_ignored():
    data, raws = random_batches(7, n_batches=12)
    last_start = len(data) - len(raws[-1])
    complete = iterated(raws[:-1])
    prev_next = RecordBatch(raws[-2]).next_offset
    for cut in sorted({1, 5, 11, 12, 13, 48, 49, 60, 61, len(raws[-1]) - 1}):
        if cut >= len(raws[-1]):
            continue
        cols = decode_columns(data[:-cut])
        assert cols.bytes_consumed == last_start, cut
        assert cols.next_offset == prev_next, cut
        assert cols.to_records() == complete, cut
        assert len(cols.batch_base_offsets) == len(raws) - 1
    # a few stray bytes after complete batches are ignored too
    cols = decode_columns(data + b"\x00" * 7)
    assert cols.bytes_consumed == len(data)
    assert cols.to_records() == iterated(raws)


def test_only_a_partial_batch():
    _, raws = random_batches(8, n_batches=1, with_control=False)
    cols = decode_columns(raws[0][:-1])
    assert len(cols) == 0
    assert cols.next_offset == -1
    assert cols.bytes_consumed == 0


@pytest.mark.parametrize("data", [b"", b"\x00" * 11, bytearray()], ids=["empty", "short",
                                                                         "bytearray"])
def test_empty_input(data):
    cols = decode_columns(data)
    assert len(cols) == 0
    assert cols.next_offset == -1
    assert cols.bytes_consumed == 0
    for name in ("offsets", "timestamps", "timestamp_types", "key_valid", "value_valid",
                 "key_data", "value_data", "header_key_data", "header_value_data",
                 "header_value_valid", "batch_base_offsets", "batch_last_offsets",
                 "batch_positions", "batch_sizes", "batch_record_starts", "batch_attributes",
                 "batch_producer_ids", "batch_base_timestamps"):
        assert len(getattr(cols, name)) == 0, name
    for name in ("key_offsets", "value_offsets", "header_offsets", "header_key_offsets",
                 "header_value_offsets"):
        assert list(getattr(cols, name)) == [0], name
    assert cols.to_records() == []


def test_only_control_batches():
    data = b"".join(build_control_batch(True, 1, 0, 0, timestamp=5, base_offset=o)
                    for o in range(3))
    cols = decode_columns(data)
    assert len(cols) == 0
    assert cols.next_offset == 3
    assert list(cols.batch_record_starts) == [0, 0, 0]
    assert len(decode_columns(data, skip_control=False)) == 3


def test_verify_crc_detects_flipped_byte():
    data, raws = random_batches(9, n_batches=8, with_control=False)
    rng = random.Random(1)
    for _ in range(40):
        which = rng.randrange(len(raws))
        start = sum(len(r) for r in raws[:which])
        pos = start + rng.randrange(21, len(raws[which]))
        bad = bytearray(data)
        bad[pos] ^= 1 << rng.randrange(8)
        with pytest.raises(CorruptRecordError, match=f"position {start}"):
            decode_columns(bytes(bad), verify_crc=True)


def test_without_verify_crc_a_flipped_value_byte_is_not_noticed():
    builder = RecordBatchBuilder()
    builder.append(1, b"k", b"hello")
    bad = bytearray(builder.build())
    bad[-2] ^= 0x20                       # 'o' -> 'O' inside the value (last byte: 0 headers)
    assert decode_columns(bytes(bad)).value(0) == b"hellO"
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(bad), verify_crc=True)


def test_log_append_time_columns():
    builder = RecordBatchBuilder("lz4", timestamp_type=LOG_APPEND_TIME)
    for ts in (5, 50, 20):
        builder.append(ts, None, b"v")
    cols = decode_columns(builder.build())
    assert list(cols.timestamps) == [50, 50, 50]
    assert list(cols.timestamp_types) == [1, 1, 1]


def test_to_columns_on_a_batch():
    data, raws = random_batches(10, n_batches=5, with_control=False)
    batch = RecordBatch(data, len(raws[0]))
    assert batch.to_columns().to_records() == iterated(raws[1:2])


def test_offsets_of_one_compacted_batch_keep_gaps():
    builder = RecordBatchBuilder(base_offset=1000)
    for off in (1000, 1003, 1004, 1010):
        builder.append_with_offset(off, off, b"k", b"v")
    cols = decode_columns(builder.build(last_offset_delta=15))
    assert list(cols.offsets) == [1000, 1003, 1004, 1010]
    assert cols.next_offset == 1016
    assert list(cols.batch_last_offsets) == [1015]


def test_malformed_batch_in_the_middle_raises():
    data, raws = random_batches(11, n_batches=4, with_control=False)
    bad = bytearray(data)
    pos = len(raws[0])
    struct.pack_into(">i", bad, pos + 8, 10)          # length below the header
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(bad))
    # a record count that disagrees with the records, CRC fixed up
    bad = bytearray(raws[1])
    struct.pack_into(">i", bad, 57, struct.unpack_from(">i", bad, 57)[0] + 1)
    struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
    with pytest.raises(CorruptRecordError):
        decode_columns(raws[0] + bytes(bad) + raws[2])
    assert LOG_OVERHEAD == 12
