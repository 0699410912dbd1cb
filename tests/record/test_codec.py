"""RecordBatch v2 codec: RecordBatchBuilder -> bytes -> RecordBatch / decode_columns.

Hypothesis drives every field of the batch header and of the records through
the builder and back through both readers (``RecordBatch.records()`` and the
bulk ``decode_columns``), for every compression codec. The fixed-example
tests below pin the error behaviour a producer or consumer would see.
"""
import struct
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite._ext.crc32c import crc32c
from kafkalite.errors import (CorruptRecordError, InvalidRecordError,
                              UnsupportedCompressionTypeError, UnsupportedForMessageFormatError)
from kafkalite.record import (BATCH_HEADER_SIZE, COMPRESSION_GZIP, COMPRESSION_LZ4,
                              COMPRESSION_NONE, COMPRESSION_SNAPPY, COMPRESSION_ZSTD, CREATE_TIME,
                              LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC, NO_SEQUENCE, Record,
                              RecordBatch, RecordBatchBuilder, build_control_batch,
                              decode_columns, iter_batches)

CODECS = [COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
          COMPRESSION_ZSTD]
CODEC_NAMES = ["none", "gzip", "snappy", "lz4", "zstd"]
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fix_crc(buf, pos=0):
    """Recompute the CRC of the batch at ``pos`` after a hand edit (in place)."""
    size = LOG_OVERHEAD + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + size])))


# ---- strategies ------------------------------------------------------------------------

payloads = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.binary(min_size=100, max_size=3000),
)
header_keys = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)
headers_st = st.lists(st.tuples(header_keys, st.one_of(st.none(), st.binary(max_size=30))),
                      max_size=4)
# timestamps spread so deltas can be negative, tiny, and multi-byte varlongs
timestamps = st.one_of(
    st.integers(-1, 1),
    st.integers(-(2**40), 2**44),
    st.integers(1_600_000_000_000, 1_800_000_000_000),
)
records_st = st.lists(st.tuples(timestamps, payloads, payloads, headers_st),
                      min_size=1, max_size=25)


@st.composite
def batch_specs(draw):
    producer_id = draw(st.one_of(st.just(-1), st.integers(0, INT64_MAX)))
    transactional = producer_id >= 0 and draw(st.booleans())
    horizon = draw(st.one_of(st.none(), st.integers(0, 2**45)))
    return dict(
        compression=draw(st.sampled_from(CODECS)),
        base_offset=draw(st.one_of(st.just(0), st.integers(0, 2**50))),
        partition_leader_epoch=draw(st.one_of(st.just(-1), st.integers(0, INT32_MAX))),
        producer_id=producer_id,
        producer_epoch=draw(st.one_of(st.just(-1), st.integers(0, 32767))),
        base_sequence=draw(st.one_of(st.just(-1), st.integers(0, INT32_MAX))),
        transactional=transactional,
        timestamp_type=draw(st.sampled_from([CREATE_TIME, LOG_APPEND_TIME])),
        delete_horizon_ms=horizon,
    )


def _offset_gaps(draw, n):
    return draw(st.lists(st.integers(1, 3), min_size=n, max_size=n))


# ---- round trips -----------------------------------------------------------------------

@SETTINGS
@given(spec=batch_specs(), records=records_st, data=st.data())
def test_round_trip_every_field(spec, records, data):
    use_gaps = data.draw(st.booleans())
    builder = RecordBatchBuilder(**spec)
    offsets = []
    offset = spec["base_offset"] - 1
    gaps = _offset_gaps(data.draw, len(records)) if use_gaps else [1] * len(records)
    for (ts, key, value, headers), gap in zip(records, gaps):
        offset += gap
        if use_gaps:
            assert builder.append_with_offset(offset, ts, key, value, headers) \
                == offset - spec["base_offset"]
        else:
            assert builder.append(ts, key, value, headers) == offset - spec["base_offset"]
        offsets.append(offset)
    assert builder.record_count == len(records)
    raw = builder.build()
    assert isinstance(raw, bytes)

    n = len(records)
    log_append = spec["timestamp_type"] == LOG_APPEND_TIME
    max_ts = max(r[0] for r in records)
    batch = RecordBatch(raw)
    # header accessors
    assert batch.size_in_bytes == len(raw)
    assert batch.batch_length == len(raw) - LOG_OVERHEAD
    assert batch.magic == MAGIC == 2
    assert batch.base_offset == spec["base_offset"]
    assert batch.last_offset == offsets[-1]
    assert batch.next_offset == offsets[-1] + 1
    assert batch.last_offset_delta == offsets[-1] - spec["base_offset"]
    assert batch.record_count == n
    assert batch.partition_leader_epoch == spec["partition_leader_epoch"]
    assert batch.compression == spec["compression"]
    assert batch.is_transactional == spec["transactional"]
    assert batch.is_control is False
    assert batch.timestamp_type == spec["timestamp_type"]
    assert batch.producer_id == spec["producer_id"]
    assert batch.producer_epoch == spec["producer_epoch"]
    assert batch.base_sequence == spec["base_sequence"]
    if spec["base_sequence"] == NO_SEQUENCE:
        assert batch.last_sequence == NO_SEQUENCE
    else:
        assert batch.last_sequence == (spec["base_sequence"] + batch.last_offset_delta) % 2**31
    assert batch.max_timestamp == max_ts
    if spec["delete_horizon_ms"] is None:
        assert batch.has_delete_horizon is False
        assert batch.delete_horizon_ms is None
        assert batch.base_timestamp == records[0][0]
    else:
        assert batch.has_delete_horizon is True
        assert batch.delete_horizon_ms == spec["delete_horizon_ms"]
        assert batch.base_timestamp == spec["delete_horizon_ms"]
    assert batch.is_valid()
    batch.validate()
    assert batch.crc == crc32c(raw[21:]) == batch.computed_crc()
    assert batch.crc == int.from_bytes(raw[17:21], "big")
    assert batch.tobytes() == raw
    assert batch.attributes & 7 == spec["compression"]

    expected = []
    for off, (ts, key, value, headers) in zip(offsets, records):
        expected.append((off, max_ts if log_append else ts, 1 if log_append else 0,
                         None if key is None else bytes(key),
                         None if value is None else bytes(value),
                         [(k, v) for k, v in headers]))

    got = [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
           for r in batch.records()]
    assert got == expected
    assert [r.offset for r in batch] == offsets

    cols = decode_columns(raw)
    assert cols.to_records() == expected
    assert len(cols) == n
    assert cols.next_offset == offsets[-1] + 1
    assert cols.bytes_consumed == len(raw)
    assert list(cols.batch_base_offsets) == [spec["base_offset"]]
    assert list(cols.batch_last_offsets) == [offsets[-1]]
    assert list(cols.batch_producer_ids) == [spec["producer_id"]]
    assert list(cols.batch_attributes) == [batch.attributes]
    assert list(cols.batch_base_timestamps) == [batch.base_timestamp]
    assert list(cols.batch_positions) == [0]
    assert list(cols.batch_sizes) == [len(raw)]
    assert list(cols.batch_record_starts) == [0]
    assert list(cols.key_valid) == [r[1] is not None for r in records]
    assert list(cols.value_valid) == [r[2] is not None for r in records]
    assert cols.to_records() == decode_columns(raw, verify_crc=True).to_records()


@SETTINGS
@given(records=records_st, codec=st.sampled_from(CODECS))
def test_builder_reset_and_reuse(records, codec):
    """build() twice gives the same bytes; reset() starts an independent batch."""
    builder = RecordBatchBuilder(codec, base_offset=10)
    builder.append(5, b"first", b"x")
    first = builder.build()
    assert builder.build() == first
    builder.reset()
    assert builder.record_count == 0
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    second = RecordBatch(builder.build())
    assert second.record_count == len(records)
    assert [r.key for r in second.records()] == [r[1] for r in records]
    assert second.base_timestamp == records[0][0]
    assert [r.offset for r in second.records()] == list(range(10, 10 + len(records)))
    assert RecordBatch(first).records()[0].key == b"first"


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_negative_and_no_timestamps(codec):
    """NO_TIMESTAMP (-1) and other negative timestamps survive, in any position."""
    for stamps in ([-1, 1000, 5], [1000, -1, -50], [-1, -1, 7], [-5, -1, 3], [0, -1]):
        builder = RecordBatchBuilder(codec)
        for ts in stamps:
            builder.append(ts, b"k", b"v")
        batch = RecordBatch(builder.build())
        assert [r.timestamp for r in batch.records()] == stamps
        assert list(decode_columns(batch.tobytes()).timestamps) == stamps
        assert batch.max_timestamp == max(stamps)


def test_extreme_timestamp_deltas():
    stamps = [2**50, -(2**50), 0, 2**62 - 1]
    builder = RecordBatchBuilder()
    for ts in stamps:
        builder.append(ts, None, b"v")
    batch = RecordBatch(builder.build())
    assert [r.timestamp for r in batch.records()] == stamps
    assert batch.max_timestamp == 2**62 - 1


def test_timestamp_none_means_now():
    before = int(time.time() * 1000)
    builder = RecordBatchBuilder()
    builder.append(None, b"k", b"v")
    builder.append_values([b"a", b"b"])
    after = int(time.time() * 1000)
    for rec in RecordBatch(builder.build()).records():
        assert before <= rec.timestamp <= after


def test_append_values_with_keys():
    builder = RecordBatchBuilder(COMPRESSION_LZ4, base_offset=7)
    assert builder.append_values([b"a", None, b"c"], keys=[b"1", b"2", None], timestamp=42) == 3
    recs = RecordBatch(builder.build()).records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs] == [
        (7, 42, b"1", b"a", []), (8, 42, b"2", None, []), (9, 42, None, b"c", [])]
    with pytest.raises(ValueError):
        RecordBatchBuilder().append_values([b"a", b"b"], keys=[b"k"])


def test_append_values_with_a_timestamp_and_headers_per_record():
    """The bulk path keeps each record's own timestamp and headers (a stream
    processor forwards them), also for fixed-size rows and with indices."""
    before = int(time.time() * 1000)
    builder = RecordBatchBuilder()
    builder.append_values([b"a", b"b", b"c"], timestamp=[1000, 2000, -1],
                          headers=[[("h", b"1")], None, [("x", b"y"), ("z", None)]])
    recs = RecordBatch(builder.build()).records()
    assert [(r.timestamp, r.value, r.headers) for r in recs[:2]] == [
        (1000, b"a", [("h", b"1")]), (2000, b"b", [])]
    assert recs[2].timestamp >= before and recs[2].headers == [("x", b"y"), ("z", None)]
    rows = np.arange(12, dtype=np.uint8).reshape(3, 4)
    builder = RecordBatchBuilder()
    assert builder.append_values(rows, None, np.array([5, 6, 7]), indices=np.array([2, 0]),
                                 headers=[None, None, [("k", b"v")]]) == 2
    recs = RecordBatch(builder.build()).records()
    assert [(r.timestamp, r.value, r.headers) for r in recs] == [
        (7, bytes(rows[2]), [("k", b"v")]), (5, bytes(rows[0]), [])]
    with pytest.raises(ValueError, match="timestamps"):
        RecordBatchBuilder().append_values([b"a", b"b"], timestamp=[1])
    with pytest.raises(ValueError, match="header lists"):
        RecordBatchBuilder().append_values([b"a", b"b"], headers=[None])


def test_bytes_like_inputs_are_accepted():
    builder = RecordBatchBuilder()
    builder.append(1, bytearray(b"key"), memoryview(b"value"), [("h", bytearray(b"hv"))])
    rec = RecordBatch(builder.build()).records()[0]
    assert (rec.key, rec.value, rec.headers) == (b"key", b"value", [("h", b"hv")])


def test_headers_unicode_and_bytes_keys_and_empty():
    builder = RecordBatchBuilder()
    builder.append(1, None, None, [])
    builder.append(2, None, None, [("ключ", b"\x00\xff"), ("", b""), ("𝄞", None)])
    builder.append(3, None, None, [(b"raw", b"v")])
    recs = RecordBatch(builder.build()).records()
    assert recs[0].headers == []
    assert recs[1].headers == [("ключ", b"\x00\xff"), ("", b""), ("𝄞", None)]
    assert recs[2].headers == [("raw", b"v")]


def test_last_offset_delta_override_and_gaps():
    builder = RecordBatchBuilder(base_offset=100)
    builder.append_with_offset(100, 1, b"a", b"1")
    builder.append_with_offset(105, 2, b"b", b"2")
    raw = builder.build(last_offset_delta=9)
    batch = RecordBatch(raw)
    assert batch.last_offset_delta == 9
    assert batch.last_offset == 109
    assert [r.offset for r in batch.records()] == [100, 105]
    with pytest.raises(ValueError):
        builder.build(last_offset_delta=4)
    with pytest.raises(ValueError):
        builder.append_with_offset(105, 3, b"c", b"3")
    with pytest.raises(ValueError):
        builder.append_with_offset(100 + 2**31, 3, b"c", b"3")


@pytest.mark.parametrize("base,records,expected", [
    (INT32_MAX, 1, INT32_MAX),
    (INT32_MAX, 2, 0),
    (INT32_MAX - 1, 3, 0),
    (INT32_MAX - 1, 5, 2),
    (0, 4, 3),
])
def test_last_sequence_wraps_at_int32_max(base, records, expected):
    builder = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=base)
    for i in range(records):
        builder.append(i, None, b"v")
    batch = RecordBatch(builder.build())
    assert batch.base_sequence == base
    assert batch.last_sequence == expected


def test_builder_header_properties():
    builder = RecordBatchBuilder("zstd", base_offset=3, partition_leader_epoch=4, producer_id=5,
                                 producer_epoch=6, base_sequence=7, transactional=True,
                                 timestamp_type=LOG_APPEND_TIME)
    assert builder.codec == COMPRESSION_ZSTD
    assert (builder.base_offset, builder.partition_leader_epoch, builder.producer_id,
            builder.producer_epoch, builder.base_sequence) == (3, 4, 5, 6, 7)
    assert builder.attributes == COMPRESSION_ZSTD | 0x08 | 0x10
    assert builder.size_in_bytes == BATCH_HEADER_SIZE
    builder.append(1, b"k", b"v")
    assert builder.size_in_bytes > BATCH_HEADER_SIZE
    assert builder.last_offset_delta == 0


@pytest.mark.parametrize("name,codec", [("none", 0), ("GZIP", 1), ("snappy", 2), ("lz4", 3),
                                        ("zstd", 4), ("uncompressed", 0), (None, 0)])
def test_compression_by_name(name, codec):
    builder = RecordBatchBuilder(name)
    builder.append(1, b"k", b"v" * 100)
    batch = RecordBatch(builder.build())
    assert batch.compression == codec
    assert batch.records()[0].value == b"v" * 100


# ---- control batches -------------------------------------------------------------------

@SETTINGS
@given(commit=st.booleans(), producer_id=st.integers(0, INT64_MAX),
       producer_epoch=st.integers(0, 32767), coordinator_epoch=st.integers(-(2**31), INT32_MAX),
       timestamp=st.integers(0, 2**45), base_offset=st.integers(0, 2**50),
       leader_epoch=st.integers(-1, INT32_MAX))
def test_control_batch(commit, producer_id, producer_epoch, coordinator_epoch, timestamp,
                       base_offset, leader_epoch):
    raw = build_control_batch(commit, producer_id, producer_epoch, coordinator_epoch,
                              timestamp=timestamp, base_offset=base_offset,
                              partition_leader_epoch=leader_epoch)
    batch = RecordBatch(raw)
    assert batch.is_control and batch.is_transactional
    assert batch.compression == COMPRESSION_NONE
    assert (batch.producer_id, batch.producer_epoch) == (producer_id, producer_epoch)
    assert batch.base_offset == base_offset and batch.record_count == 1
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.is_valid()
    (rec,) = batch.records()
    assert rec.offset == base_offset and rec.timestamp == timestamp
    # key: version 0, type 1 = COMMIT / 0 = ABORT; value: version 0, coordinator epoch
    assert rec.key == struct.pack(">hh", 0, 1 if commit else 0)
    assert rec.value == struct.pack(">hi", 0, coordinator_epoch)
    assert len(decode_columns(raw)) == 0
    assert decode_columns(raw).next_offset == base_offset + 1
    cols = decode_columns(raw, skip_control=False)
    assert cols.to_records() == [(base_offset, timestamp, 0, rec.key, rec.value, [])]


def test_control_builder_flag():
    builder = RecordBatchBuilder(control=True, producer_id=1, producer_epoch=0,
                                 transactional=True)
    builder.append(1, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")
    assert RecordBatch(builder.build()).is_control


# ---- errors: building ------------------------------------------------------------------

def test_empty_batch_rejected():
    with pytest.raises(InvalidRecordError) as info:
        RecordBatchBuilder().build()
    assert info.value.code == 87
    builder = RecordBatchBuilder("gzip")
    builder.append(1, b"k", b"v")
    builder.build()
    builder.reset()
    with pytest.raises(InvalidRecordError):
        builder.build()


@pytest.mark.parametrize("call", [
    lambda b: b.append(1, None, "text"),
    lambda b: b.append(1, "text", b"v"),
    lambda b: b.append(1, None, b"v", [("h", "text")]),
    lambda b: b.append(1, None, b"v", [(None, b"x")]),
    lambda b: b.append_values(["a"]),
    lambda b: b.append(1, None, 5),
    lambda b: b.append(1, 3, b"v"),
    lambda b: b.append(1, None, [1, 2]),
    lambda b: b.append(1, None, b"v", [(7, b"x")]),
    lambda b: b.append(1, None, b"v", [("h", 2)]),
], ids=["str-value", "str-key", "str-header-value", "none-header-key", "str-append-values",
        "int-value", "int-key", "list-value", "int-header-key", "int-header-value"])
def test_bad_record_inputs_raise_type_error(call):
    builder = RecordBatchBuilder()
    with pytest.raises(TypeError):
        call(builder)
    # the failed append left nothing behind
    assert builder.record_count == 0


def test_str_value_error_is_explanatory():
    with pytest.raises(TypeError, match="bytes"):
        RecordBatchBuilder().append(1, None, "text")


def test_bad_builder_settings():
    with pytest.raises(ValueError):
        RecordBatchBuilder(transactional=True)            # no producer id
    with pytest.raises(ValueError):
        RecordBatchBuilder(timestamp_type=2)
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatchBuilder("brotli")
    for codec in (5, 6, 7, -1):
        with pytest.raises(UnsupportedCompressionTypeError):
            RecordBatchBuilder(codec)


# ---- errors: reading -------------------------------------------------------------------

def _sample(codec=COMPRESSION_NONE, n=5):
    builder = RecordBatchBuilder(codec, base_offset=40, producer_id=9, producer_epoch=1,
                                 base_sequence=0)
    for i in range(n):
        builder.append(1_000 + i, b"key-%d" % i, b"value-%d" % i * 10, [("h", b"%d" % i)])
    return builder.build()


@pytest.mark.parametrize("cut", [1, 10, 48])
def test_truncated_batch_rejected(cut):
    raw = _sample()
    with pytest.raises(CorruptRecordError, match="truncated"):
        RecordBatch(raw[:-cut])
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw[:11])
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw, position=len(raw) - 5)
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw, position=-1)


def test_length_below_header_rejected():
    raw = bytearray(_sample())
    struct.pack_into(">i", raw, 8, 48)
    with pytest.raises(CorruptRecordError, match="less than"):
        RecordBatch(raw)
    struct.pack_into(">i", raw, 8, -1)
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw)
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(raw))


@pytest.mark.parametrize("magic", [0, 1, 3, 255])
def test_bad_magic_rejected(magic):
    raw = bytearray(_sample())
    raw[16] = magic
    with pytest.raises(UnsupportedForMessageFormatError, match="magic"):
        RecordBatch(raw)
    with pytest.raises(UnsupportedForMessageFormatError):
        decode_columns(bytes(raw))


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
def test_every_corrupted_byte_is_caught_by_crc(codec):
    raw = _sample(codec)
    for pos in range(21, len(raw)):
        bad = bytearray(raw)
        bad[pos] ^= 0x01
        batch = RecordBatch(bad)
        assert not batch.is_valid()
        with pytest.raises(CorruptRecordError, match="CRC"):
            batch.validate()
        with pytest.raises(CorruptRecordError):
            decode_columns(bytes(bad), verify_crc=True)
    # the bytes outside the CRC (offset, length, epoch, magic) do not affect it
    bad = bytearray(raw)
    bad[0] ^= 0xFF
    bad[12] ^= 0xFF
    assert RecordBatch(bad).is_valid()


def test_crc_field_corruption_detected():
    raw = bytearray(_sample())
    raw[18] ^= 0x40
    batch = RecordBatch(raw)
    assert not batch.is_valid()
    assert batch.computed_crc() == crc32c(bytes(raw[21:]))
    with pytest.raises(CorruptRecordError):
        batch.validate()


@pytest.mark.parametrize("codec", [COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
                                   COMPRESSION_ZSTD], ids=CODEC_NAMES[1:])
def test_garbage_compressed_payload_raises_corrupt(codec):
    raw = bytearray(_sample(codec))
    for i in range(BATCH_HEADER_SIZE, len(raw)):
        raw[i] = (i * 37) & 0xFF
    fix_crc(raw)
    batch = RecordBatch(raw)
    assert batch.is_valid()
    with pytest.raises(CorruptRecordError):
        batch.records()
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(raw))


@pytest.mark.parametrize("codec", CODECS, ids=CODEC_NAMES)
@pytest.mark.parametrize("delta", [1, -1, 2**20])
def test_record_count_mismatch_raises_corrupt(codec, delta):
    raw = bytearray(_sample(codec))
    count = struct.unpack_from(">i", raw, 57)[0]
    struct.pack_into(">i", raw, 57, count + delta)
    fix_crc(raw)
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw).records()
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(raw))


def test_negative_record_count_raises_corrupt():
    raw = bytearray(_sample())
    struct.pack_into(">i", raw, 57, -3)
    fix_crc(raw)
    with pytest.raises(CorruptRecordError):
        RecordBatch(raw).records()
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(raw))


def test_unknown_codec_in_read_batch():
    raw = bytearray(_sample())
    raw[22] = (raw[22] & ~7) | 6
    fix_crc(raw)
    with pytest.raises(UnsupportedCompressionTypeError):
        RecordBatch(raw).records()
    with pytest.raises(UnsupportedCompressionTypeError):
        decode_columns(bytes(raw))


def _hand_batch(record_bytes, count, last_offset_delta=None):
    """A batch header around raw records bytes with a correct CRC."""
    if last_offset_delta is None:
        last_offset_delta = count - 1
    body = struct.pack(">hiqqqhii", 0, last_offset_delta, 1000, 1000, -1, -1, -1, count)
    size = BATCH_HEADER_SIZE + len(record_bytes)
    head = struct.pack(">qiib", 0, size - LOG_OVERHEAD, -1, 2)
    crc = crc32c(body + record_bytes)
    return head + struct.pack(">I", crc) + body + record_bytes


def _varint(v):
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _record(offset_delta=0, key=b"k", value=b"v", ts_delta=0, extra=b"", length_adjust=0,
            key_len=None):
    body = bytes([0]) + _varint(ts_delta) + _varint(offset_delta)
    body += _varint(len(key) if key_len is None else key_len) + key
    body += _varint(len(value)) + value + _varint(0) + extra
    return _varint(len(body) + length_adjust) + body


def test_hand_built_batch_reads():
    raw = _hand_batch(_record(0, b"a", b"1") + _record(1, b"b", b"2", ts_delta=-5), 2)
    recs = RecordBatch(raw).records()
    assert [(r.offset, r.timestamp, r.key, r.value) for r in recs] == [
        (0, 1000, b"a", b"1"), (1, 995, b"b", b"2")]
    assert decode_columns(raw).to_records() == [(0, 1000, 0, b"a", b"1", []),
                                                (1, 995, 0, b"b", b"2", [])]


@pytest.mark.parametrize("records,count", [
    (_record(length_adjust=+3), 1),                  # record runs past the section
    (_record(length_adjust=-1), 1),                  # fields overrun the length prefix
    (_record(extra=b"\x00\x00"), 1),                 # bytes left inside the record
    (_record(key_len=-2, key=b""), 1),               # invalid negative key length
    (_record() + b"\x00\x01", 1),                    # trailing bytes after the records
    (_record(), 2),                                  # fewer records than the count
    (b"\x00", 1),                                    # zero record length
    (b"\xff" * 11, 1),                               # endless varint
], ids=["past-end", "overrun", "inner-trailing", "neg-key", "trailing", "short", "zero-len",
        "varint"])
def test_malformed_records_raise_corrupt(records, count):
    raw = _hand_batch(records, count)
    batch = RecordBatch(raw)
    assert batch.is_valid()          # CRC is fine; the framing is not
    with pytest.raises(CorruptRecordError):
        batch.records()
    with pytest.raises(CorruptRecordError):
        decode_columns(raw)


def test_record_equality_and_repr():
    builder = RecordBatchBuilder()
    builder.append(1, b"k", b"v", [("h", None)])
    a = RecordBatch(builder.build()).records()[0]
    b = RecordBatch(builder.build()).records()[0]
    assert isinstance(a, Record)
    assert a == b and hash(a) == hash(b)
    assert "offset=0" in repr(a) and "b'k'" in repr(a)
    builder.reset()
    builder.append(2, b"k", b"v", [("h", None)])
    assert RecordBatch(builder.build()).records()[0] != a
    assert "base_offset=0" in repr(RecordBatch(builder.build()))


# ---- iteration over concatenated batches ------------------------------------------------

def test_iter_batches_and_position():
    raws = [_sample(codec, n=i + 1) for i, codec in enumerate(CODECS)]
    data = b"".join(raws)
    batches = list(iter_batches(data))
    assert [b.size_in_bytes for b in batches] == [len(r) for r in raws]
    assert [b.record_count for b in batches] == [1, 2, 3, 4, 5]
    assert [b.compression for b in batches] == CODECS
    positions = [b.position for b in batches]
    assert positions == [sum(len(r) for r in raws[:i]) for i in range(len(raws))]
    assert RecordBatch(data, positions[3]).tobytes() == raws[3]
    # a trailing partial batch ends the iteration silently
    for cut in (1, 30, len(raws[-1]) - 1):
        assert len(list(iter_batches(data[:-cut]))) == 4
    assert len(list(iter_batches(data, positions[2]))) == 3
    assert list(iter_batches(b"")) == []


def test_batch_holds_buffer_export():
    buf = bytearray(_sample())
    batch = RecordBatch(buf)
    with pytest.raises(BufferError):
        buf.extend(b"more")
    del batch
    buf.extend(b"more")
