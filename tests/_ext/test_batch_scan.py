"""kafkalite._ext.batch_scan: validate_for_append (LogValidator) and scan_log (recovery)."""
import struct
import subprocess
import sys

import numpy as np
import pytest

from kafkalite._ext.batch_scan import batch_header, scan_log, validate_for_append
from kafkalite._ext.crc32c import crc32c
from kafkalite.errors import (CorruptRecordError, InvalidRecordError, MessageTooLargeError,
                              UnsupportedCompressionTypeError, UnsupportedForMessageFormatError)
from kafkalite.record import (RecordBatch, RecordBatchBuilder, build_control_batch,
                              decode_columns, iter_batches)
from kafkalite.launcher import package_env

HEADER = 61


# ---- helpers ---------------------------------------------------------------------------

def make_batch(n=3, codec=0, ts=1_000, base_offset=0, leader_epoch=-1, keys=True,
               producer_id=-1, producer_epoch=-1, base_sequence=-1, value_size=10):
    builder = RecordBatchBuilder(codec, base_offset=base_offset,
                                 partition_leader_epoch=leader_epoch, producer_id=producer_id,
                                 producer_epoch=producer_epoch, base_sequence=base_sequence)
    for i in range(n):
        builder.append(ts + i, (b"key-%d" % i) if keys else None, bytes([65 + i % 26]) * value_size,
                       [("i", b"%d" % i)])
    return builder.build()


def fix_crc(buf, pos=0):
    size = 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + size])))


def varint(v):
    z = (v << 1) ^ (v >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def record(offset_delta=0, key=b"k", value=b"v", ts_delta=0, length_adjust=0, extra=b"",
           key_len=None):
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    body += (varint(-1) if key is None else varint(len(key) if key_len is None else key_len)
             + key)
    body += varint(len(value)) + value + varint(0) + extra
    return varint(len(body) + length_adjust) + body


def hand_batch(records_bytes, count, last_offset_delta=None, attributes=0, base_ts=1000,
               max_ts=1000, base_offset=0):
    """A batch around hand-made records bytes, with a correct CRC."""
    if last_offset_delta is None:
        last_offset_delta = count - 1
    body = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_ts, max_ts, -1, -1, -1,
                       count) + records_bytes
    head = struct.pack(">qiib", base_offset, HEADER - 12 + len(records_bytes), -1, 2)
    return head + struct.pack(">I", crc32c(body)) + body


def concat(*raws):
    return bytearray(b"".join(raws))


def positions_of(raws):
    out, pos = [], 0
    for r in raws:
        out.append(pos)
        pos += len(r)
    return out


# ---- validate_for_append: success ------------------------------------------------------

def test_assigns_consecutive_offsets_and_leader_epoch():
    raws = [make_batch(3, codec=0, ts=100), make_batch(1, codec=1, ts=500),
            make_batch(5, codec=4, ts=300), make_batch(2, codec=2, ts=50)]
    buf = concat(*raws)
    original = bytes(buf)
    scan = validate_for_append(buf, next_offset=100, leader_epoch=7)

    assert scan.batch_count == 4
    assert scan.size_in_bytes == len(buf)
    assert scan.first_offset == 100
    assert scan.last_offset == 110
    assert scan.next_offset == 111
    assert scan.record_count == 11
    assert list(scan.positions) == positions_of(raws)
    assert list(scan.sizes) == [len(r) for r in raws]
    assert list(scan.base_offsets) == [100, 103, 104, 109]
    assert list(scan.last_offsets) == [102, 103, 108, 110]
    assert list(scan.record_counts) == [3, 1, 5, 2]
    assert list(scan.leader_epochs) == [7, 7, 7, 7]
    assert list(scan.max_timestamps) == [102, 500, 304, 51]
    assert list(scan.attributes) == [0, 1, 4, 2]
    assert scan.max_timestamp == 500
    assert scan.offset_of_max_timestamp == 103

    # patched in place: baseOffset and partitionLeaderEpoch only, CRC still valid
    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [100, 103, 104, 109]
    assert [b.partition_leader_epoch for b in batches] == [7] * 4
    for b, pos, raw in zip(batches, positions_of(raws), raws):
        assert b.is_valid()
        assert bytes(buf[pos + 8:pos + 12]) == raw[8:12]
        assert bytes(buf[pos + 16:pos + len(raw)]) == raw[16:]
    assert bytes(buf) != original
    assert list(decode_columns(buf, verify_crc=True).offsets) == list(range(100, 111))


def test_producer_fields_reported():
    raws = [make_batch(2, producer_id=77, producer_epoch=3, base_sequence=10),
            make_batch(4, codec=3, producer_id=78, producer_epoch=0, base_sequence=0),
            make_batch(1)]
    scan = validate_for_append(concat(*raws), next_offset=0)
    assert list(scan.producer_ids) == [77, 78, -1]
    assert list(scan.producer_epochs) == [3, 0, -1]
    assert list(scan.base_sequences) == [10, 0, -1]
    # int64 columns of one table per append, with no numpy in the append path
    assert scan.producer_ids.typecode == "q" and scan.leader_epochs.typecode == "q"
    assert scan.batches() == [(0, len(raws[0]), 1, scan.max_timestamps[0]),
                              (len(raws[0]), len(raws[1]), 5, scan.max_timestamps[1]),
                              (len(raws[0]) + len(raws[1]), len(raws[2]), 6,
                               scan.max_timestamps[2])]


def test_producer_rows_are_what_the_producer_state_records():
    """producer_rows: the batches with a producer id, in order, as the
    producer state reads them; the last sequence wraps after INT32 max as
    Kafka's RecordBatch.lastSequence (and producer_state._last_sequence)."""
    from kafkalite.storage.producer_state import _last_sequence
    int32_max = 2**31 - 1
    raws = [make_batch(2, producer_id=77, producer_epoch=3, base_sequence=10),
            make_batch(1),
            make_batch(4, producer_id=78, producer_epoch=0, base_sequence=int32_max - 1),
            make_batch(1, producer_id=79, producer_epoch=2, base_sequence=-1)]
    scan = validate_for_append(concat(*raws), next_offset=100)
    rows = scan.producer_rows()
    ts = list(scan.max_timestamps)
    attrs = list(scan.attributes)
    assert rows == [(77, 3, 10, 11, 100, 101, ts[0], attrs[0], -1),
                    (78, 0, int32_max - 1, 1, 103, 106, ts[2], attrs[2], -1),
                    (79, 2, -1, -1, 107, 107, ts[3], attrs[3], -1)]
    assert [r[3] for r in rows] == [_last_sequence(r[2], r[5] - r[4]) for r in rows]
    # a producer-less append has none, without a look at the table
    assert validate_for_append(concat(make_batch(1)), next_offset=0).producer_rows() == []


def test_log_append_time_stamps_batches_and_recomputes_crc():
    raws = [make_batch(3, codec=0, ts=100), make_batch(2, codec=3, ts=10_000)]
    buf = concat(*raws)
    scan = validate_for_append(buf, next_offset=5, leader_epoch=2, log_append_time=77_777)
    assert list(scan.max_timestamps) == [77_777, 77_777]
    assert scan.max_timestamp == 77_777
    assert all(a & 0x08 for a in scan.attributes)
    assert list(scan.attributes) == [0x08, 0x08 | 3]
    for b in iter_batches(buf):
        assert b.timestamp_type == 1
        assert b.max_timestamp == 77_777
        assert b.is_valid()
        b.validate()
        assert [r.timestamp for r in b.records()] == [77_777] * b.record_count
        assert [r.timestamp_type for r in b.records()] == [1] * b.record_count
    cols = decode_columns(buf, verify_crc=True)
    assert set(cols.timestamps) == {77_777}


def test_log_append_time_zero_is_applied():
    buf = concat(make_batch(2, ts=100))
    validate_for_append(buf, next_offset=0, log_append_time=0)
    batch = RecordBatch(buf)
    assert batch.timestamp_type == 1 and batch.max_timestamp == 0 and batch.is_valid()


def test_create_time_max_timestamp_is_corrected_from_records():
    raw = bytearray(make_batch(4, ts=1000))        # true max 1003
    struct.pack_into(">q", raw, 35, 5)             # header claims 5
    fix_crc(raw)
    scan = validate_for_append(raw, next_offset=0)
    assert list(scan.max_timestamps) == [1003]
    batch = RecordBatch(raw)
    assert batch.max_timestamp == 1003
    assert batch.is_valid()


def test_memoryview_slice_of_bytearray_is_patched():
    pad = bytearray(b"\xee" * 5)
    raw = make_batch(2)
    buf = pad + raw + pad
    validate_for_append(memoryview(buf)[5:5 + len(raw)], next_offset=42, leader_epoch=3)
    assert buf[:5] == pad and buf[-5:] == pad
    batch = RecordBatch(buf, 5)
    assert batch.base_offset == 42 and batch.partition_leader_epoch == 3 and batch.is_valid()


def test_numpy_buffer_is_patched():
    arr = np.frombuffer(bytearray(make_batch(2)), dtype=np.uint8).copy()
    validate_for_append(arr, next_offset=9)
    assert RecordBatch(arr.tobytes()).base_offset == 9


@pytest.mark.parametrize("readonly", [lambda raw: raw, lambda raw: memoryview(raw)],
                         ids=["bytes", "readonly-memoryview"])
def test_read_only_input_is_refused(readonly):
    raw = make_batch(2)
    with pytest.raises(BufferError):
        validate_for_append(readonly(raw), next_offset=5)
    # a follower's append patches nothing, unless it walks the records or
    # stamps append times: read-only input is taken as it is
    with pytest.raises(BufferError):
        validate_for_append(readonly(raw), next_offset=0, assign_offsets=False)   # deep
    with pytest.raises(BufferError):
        validate_for_append(readonly(raw), next_offset=0, assign_offsets=False, deep=False,
                            log_append_time=7)
    scan = validate_for_append(readonly(raw), next_offset=0, assign_offsets=False, deep=False)
    assert (scan.first_offset, scan.last_offset) == (0, 1)
    assert RecordBatch(raw).base_offset == 0


def test_max_batch_bytes_boundary_is_inclusive():
    raw = make_batch(3)
    validate_for_append(bytearray(raw), next_offset=0, max_batch_bytes=len(raw))
    with pytest.raises(MessageTooLargeError):
        validate_for_append(bytearray(raw), next_offset=0, max_batch_bytes=len(raw) - 1)


def test_control_batch_allowed_when_asked():
    buf = concat(make_batch(2), build_control_batch(True, producer_id=4, producer_epoch=0,
                                                    coordinator_epoch=1, timestamp=5))
    scan = validate_for_append(buf, next_offset=10, allow_control=True)
    assert list(scan.base_offsets) == [10, 12]
    assert RecordBatch(buf, int(scan.positions[1])).is_control


def test_require_keys_passes_with_keys():
    buf = concat(make_batch(3, codec=0), make_batch(3, codec=2))
    scan = validate_for_append(buf, next_offset=0, require_keys=True)
    assert scan.record_count == 6


def test_shallow_skips_record_checks():
    raw = hand_batch(record(length_adjust=+3), 1)
    scan = validate_for_append(bytearray(raw), next_offset=0, deep=False)
    assert scan.batch_count == 1
    with pytest.raises(CorruptRecordError):
        validate_for_append(bytearray(raw), next_offset=0)


# ---- validate_for_append: failures leave the buffer alone -------------------------------

def _with_good_batch_first(bad):
    """Good batch, then the bad one: if anything were patched before the whole
    append was checked, the first batch would show it."""
    good = make_batch(2, codec=0)
    return len(good), concat(good, bad)


def _truncated():
    return make_batch(3)[:-4]


def _length_below_header():
    raw = bytearray(make_batch(3))
    struct.pack_into(">i", raw, 8, HEADER - 12 - 1)
    return raw


def _negative_length():
    raw = bytearray(make_batch(3))
    struct.pack_into(">i", raw, 8, -20)
    return raw


def _magic(m):
    def build():
        raw = bytearray(make_batch(3))
        raw[16] = m
        return raw
    return build


def _crc_mismatch():
    raw = bytearray(make_batch(3))
    raw[-3] ^= 0x10
    return raw


def _unknown_codec(codec):
    def build():
        raw = bytearray(make_batch(3))
        attrs = struct.unpack_from(">h", raw, 21)[0]
        struct.pack_into(">h", raw, 21, (attrs & ~7) | codec)
        fix_crc(raw)
        return raw
    return build


def _control():
    return build_control_batch(False, producer_id=3, producer_epoch=1, coordinator_epoch=0,
                               timestamp=10)


def _keyless():
    return make_batch(3, keys=False)


def _keyless_compressed():
    return make_batch(3, codec=3, keys=False)


def _one_keyless_record():
    return hand_batch(record(0, b"a") + record(1, None) + record(2, b"c"), 3)


def _framing(records, count):
    return lambda: hand_batch(records, count)


def _deltas(deltas, last=None):
    return lambda: hand_batch(b"".join(record(d) for d in deltas), len(deltas),
                              last_offset_delta=last)


def _zero_count():
    return hand_batch(b"", 0, last_offset_delta=0)


def _negative_count():
    return hand_batch(record(0), -1, last_offset_delta=0)


def _negative_last_delta():
    return hand_batch(record(0), 1, last_offset_delta=-1)


def _bad_compressed_payload():
    raw = bytearray(make_batch(5, codec=4))
    for i in range(HEADER, len(raw)):
        raw[i] = (i * 29) & 0xFF
    fix_crc(raw)
    return raw


def _stray_bytes():
    return b"\x00" * 7


FAILURES = [
    ("truncated", _truncated, CorruptRecordError, "truncated"),
    ("length-below-header", _length_below_header, CorruptRecordError, "less than"),
    ("negative-length", _negative_length, CorruptRecordError, "length"),
    ("magic-0", _magic(0), UnsupportedForMessageFormatError, "magic 0"),
    ("magic-1", _magic(1), UnsupportedForMessageFormatError, "magic 1"),
    ("magic-3", _magic(3), UnsupportedForMessageFormatError, "magic 3"),
    ("crc", _crc_mismatch, CorruptRecordError, "CRC"),
    ("codec-5", _unknown_codec(5), UnsupportedCompressionTypeError, "codec 5"),
    ("codec-6", _unknown_codec(6), UnsupportedCompressionTypeError, "codec 6"),
    ("codec-7", _unknown_codec(7), UnsupportedCompressionTypeError, "codec 7"),
    ("control", _control, InvalidRecordError, "control"),
    ("bad-compressed-payload", _bad_compressed_payload, CorruptRecordError, "decompress"),
    ("record-past-end", _framing(record(length_adjust=+2), 1), CorruptRecordError, "record 0"),
    ("record-overrun", _framing(record(length_adjust=-1), 1), CorruptRecordError, "record 0"),
    ("record-inner-trailing", _framing(record(extra=b"\x01"), 1), CorruptRecordError,
     "record 0"),
    ("record-negative-key", _framing(record(key=b"", key_len=-3), 1), CorruptRecordError,
     "negative"),
    ("fewer-records", _framing(record(0), 2), CorruptRecordError, "record 1"),
    ("trailing-bytes", _framing(record(0) + b"\x02\x00", 1), CorruptRecordError, "bytes after"),
    ("second-record-bad", _framing(record(0) + record(1, length_adjust=5), 2),
     CorruptRecordError, "record 1"),
    ("delta-gap", _deltas([0, 2]), InvalidRecordError, "offset delta 2"),
    ("delta-repeat", _deltas([0, 0], last=1), InvalidRecordError, "offset delta 0"),
    ("delta-backwards", _deltas([1, 0], last=1), InvalidRecordError, "out of sequence"),
    ("delta-not-starting-at-0", _deltas([1, 2]), InvalidRecordError, "out of sequence"),
    ("delta-beyond-last", _deltas([0, 1, 2], last=1), InvalidRecordError, "offset delta 2"),
    ("last-delta-mismatch", _deltas([0, 1], last=4), InvalidRecordError, "lastOffsetDelta"),
    ("zero-count", _zero_count, InvalidRecordError, "record count 0"),
    ("negative-count", _negative_count, InvalidRecordError, "record count -1"),
    ("negative-last-delta", _negative_last_delta, InvalidRecordError, "lastOffsetDelta -1"),
    ("stray-bytes", _stray_bytes, CorruptRecordError, "stray"),
]


@pytest.mark.parametrize("build,error,match", [f[1:] for f in FAILURES],
                         ids=[f[0] for f in FAILURES])
def test_bad_append_raises_and_leaves_buffer_unchanged(build, error, match):
    bad_pos, buf = _with_good_batch_first(bytes(build()))
    before = bytes(buf)
    with pytest.raises(error, match=match) as info:
        validate_for_append(buf, next_offset=1000, leader_epoch=9, log_append_time=5)
    assert bytes(buf) == before
    message = str(info.value)
    assert f"byte {bad_pos}" in message
    assert info.value.code == error.code
    # the same bytes alone fail the same way
    alone = bytearray(build())
    alone_before = bytes(alone)
    with pytest.raises(error):
        validate_for_append(alone, next_offset=0)
    assert bytes(alone) == alone_before


@pytest.mark.parametrize("build", [_keyless, _keyless_compressed, _one_keyless_record],
                         ids=["keyless", "keyless-lz4", "one-keyless"])
def test_keyless_record_rejected_for_compacted_topic(build):
    bad_pos, buf = _with_good_batch_first(bytes(build()))
    before = bytes(buf)
    with pytest.raises(InvalidRecordError, match="key") as info:
        validate_for_append(buf, next_offset=0, require_keys=True)
    assert f"byte {bad_pos}" in str(info.value)
    assert bytes(buf) == before
    # without the requirement the same append is fine
    validate_for_append(buf, next_offset=0)


def test_oversized_batch_rejected():
    big = make_batch(5, value_size=500)
    bad_pos, buf = _with_good_batch_first(big)
    before = bytes(buf)
    with pytest.raises(MessageTooLargeError, match=str(len(big))) as info:
        validate_for_append(buf, next_offset=0, max_batch_bytes=len(big) - 1)
    assert info.value.code == 10
    assert f"byte {bad_pos}" in str(info.value)
    assert bytes(buf) == before


def test_empty_buffer_rejected():
    with pytest.raises(CorruptRecordError, match="no record batches"):
        validate_for_append(bytearray(), next_offset=0)


def test_valid_hand_built_batch_accepted():
    """The hand-built helpers produce batches the validator accepts, so the
    failures above are due to the one thing each breaks."""
    raw = bytearray(hand_batch(record(0, b"a") + record(1, b"b", ts_delta=7), 2, max_ts=1007))
    scan = validate_for_append(raw, next_offset=3, require_keys=True)
    assert list(scan.base_offsets) == [3] and list(scan.last_offsets) == [4]
    assert list(scan.max_timestamps) == [1007]


# ---- follower mode ---------------------------------------------------------------------

def test_follower_mode_keeps_offsets_and_epochs():
    raws = [make_batch(3, base_offset=50, leader_epoch=4),
            make_batch(2, codec=4, base_offset=60, leader_epoch=5)]
    buf = concat(*raws)
    before = bytes(buf)
    scan = validate_for_append(buf, next_offset=50, assign_offsets=False, leader_epoch=99)
    assert list(scan.base_offsets) == [50, 60]
    assert list(scan.last_offsets) == [52, 61]
    assert list(scan.leader_epochs) == [4, 5]
    assert scan.next_offset == 62
    assert bytes(buf) == before


def test_follower_mode_accepts_compacted_batches():
    builder = RecordBatchBuilder(base_offset=10, partition_leader_epoch=1)
    for off in (10, 13, 14):
        builder.append_with_offset(off, off, b"k%d" % off, b"v")
    buf = bytearray(builder.build(last_offset_delta=6))
    scan = validate_for_append(buf, next_offset=10, assign_offsets=False)
    assert list(scan.last_offsets) == [16]
    # the same batch from a producer is out of sequence
    with pytest.raises(InvalidRecordError):
        validate_for_append(bytearray(buf), next_offset=10)


@pytest.mark.parametrize("bases,next_offset", [((40, 60), 50), ((50, 52), 50), ((50, 45), 50)],
                         ids=["first-below", "overlap", "backwards"])
def test_follower_mode_rejects_offsets_below_next(bases, next_offset):
    buf = concat(make_batch(3, base_offset=bases[0], leader_epoch=1),
                 make_batch(3, base_offset=bases[1], leader_epoch=1))
    before = bytes(buf)
    with pytest.raises(InvalidRecordError, match="below the next offset"):
        validate_for_append(buf, next_offset=next_offset, assign_offsets=False)
    assert bytes(buf) == before


# ---- scan_log --------------------------------------------------------------------------

def log_of(counts, start=0, codec=0, epochs=None, ts0=1_000):
    """Batches with consecutive offsets; returns (bytes, raws)."""
    raws, offset = [], start
    for i, n in enumerate(counts):
        raws.append(make_batch(n, codec=codec if isinstance(codec, int) else codec[i],
                               base_offset=offset, ts=ts0 + 10 * i,
                               leader_epoch=epochs[i] if epochs else 0))
        offset += n
    return b"".join(raws), raws


def test_scan_clean_log():
    data, raws = log_of([3, 1, 4, 2], start=100, codec=[0, 1, 4, 3])
    scan = scan_log(data, min_offset=100)
    assert scan.error is None
    assert scan.valid_bytes == len(data)
    assert scan.next_offset == 110
    assert scan.first_offset == 100
    assert scan.batch_count == 4
    assert scan.record_count == 10
    assert scan.max_timestamp == 1_031
    assert scan.offset_of_max_timestamp == 109
    assert scan.first_batch_timestamp == 1_002
    deep = scan_log(data, min_offset=100, deep=True, contiguous=True)
    assert deep.error is None and deep.valid_bytes == len(data)


def test_scan_empty_log():
    scan = scan_log(b"")
    assert scan.valid_bytes == 0 and scan.error is None
    assert scan.next_offset == -1 and scan.first_offset == -1 and scan.batch_count == 0


@pytest.mark.parametrize("cut", [1, 20, 49, 60])
def test_scan_torn_tail(cut):
    data, raws = log_of([3, 2, 5])
    scan = scan_log(data[:-cut])
    assert scan.valid_bytes == len(raws[0]) + len(raws[1])
    assert scan.next_offset == 5
    assert scan.batch_count == 2
    assert scan.error is not None and "torn" in scan.error


def test_scan_stray_tail_bytes():
    data, _ = log_of([3, 2])
    scan = scan_log(data + b"\x00" * 5)
    assert scan.valid_bytes == len(data)
    assert "stray" in scan.error
    assert scan.next_offset == 5


def test_scan_zeroed_tail():
    data, _ = log_of([3, 2])
    scan = scan_log(data + bytes(100))     # a preallocated, zero-filled tail
    assert scan.valid_bytes == len(data)
    assert scan.error is not None


def test_scan_stops_at_flipped_byte_in_middle_batch():
    data, raws = log_of([3, 2, 5, 1])
    mid = len(raws[0]) + len(raws[1])
    bad = bytearray(data)
    bad[mid + 30] ^= 0x04                  # inside the CRC-covered header of batch 3
    scan = scan_log(bytes(bad))
    assert scan.valid_bytes == mid
    assert scan.next_offset == 5
    assert scan.batch_count == 2
    assert "CRC" in scan.error and f"position {mid}" in scan.error
    # without CRC checks it goes on (the flipped byte is the base timestamp)
    assert scan_log(bytes(bad), verify_crc=False).valid_bytes == len(data)


def test_scan_detects_bad_magic_and_length():
    data, raws = log_of([3, 2, 5])
    mid = len(raws[0])
    bad = bytearray(data)
    bad[mid + 16] = 1
    scan = scan_log(bytes(bad))
    assert scan.valid_bytes == mid and "magic" in scan.error
    bad = bytearray(data)
    struct.pack_into(">i", bad, mid + 8, 3)
    scan = scan_log(bytes(bad))
    assert scan.valid_bytes == mid and "length" in scan.error


def test_scan_stops_when_offsets_go_backwards():
    raws = [make_batch(3, base_offset=0), make_batch(3, base_offset=3),
            make_batch(3, base_offset=4), make_batch(3, base_offset=20)]
    data = b"".join(raws)
    scan = scan_log(data)
    assert scan.valid_bytes == len(raws[0]) + len(raws[1])
    assert scan.next_offset == 6
    assert "offsets 4..6" in scan.error


def test_scan_gaps_allowed_unless_contiguous():
    raws = [make_batch(3, base_offset=0), make_batch(3, base_offset=10)]
    data = b"".join(raws)
    assert scan_log(data).valid_bytes == len(data)
    scan = scan_log(data, contiguous=True)
    assert scan.valid_bytes == len(raws[0])
    assert scan.next_offset == 3


def test_scan_min_offset():
    data, raws = log_of([3, 2], start=10)
    scan = scan_log(data, min_offset=11)
    assert scan.valid_bytes == 0 and scan.next_offset == -1 and scan.error is not None
    assert scan_log(data, min_offset=10, contiguous=True).valid_bytes == len(data)
    assert scan_log(data, min_offset=5, contiguous=True).valid_bytes == 0


def test_scan_from_start_position():
    data, raws = log_of([3, 2, 5])
    scan = scan_log(data, start=len(raws[0]), min_offset=3)
    assert scan.valid_bytes == len(data)
    assert scan.first_offset == 3 and scan.batch_count == 2 and scan.record_count == 7


def test_scan_deep_finds_bad_records_behind_a_valid_crc():
    good, raws = log_of([3, 2], epochs=[-1, -1])
    bad = hand_batch(record(0) + record(1, length_adjust=4), 2, base_offset=5)
    data = good + bad + make_batch(2, base_offset=7)
    assert scan_log(data).valid_bytes == len(data)
    deep = scan_log(data, deep=True)
    assert deep.valid_bytes == len(good)
    assert deep.next_offset == 5
    assert "record 1" in deep.error


def test_scan_deep_undecompressable_batch():
    good, _ = log_of([2])
    bad = bytearray(make_batch(4, codec=1, base_offset=2))
    for i in range(HEADER, len(bad)):
        bad[i] = 0x5A
    fix_crc(bad)
    scan = scan_log(good + bytes(bad), deep=True)
    assert scan.valid_bytes == len(good)
    assert scan.error is not None


def expected_index(raws, interval, since=0, last_time=-1):
    """Kafka's LogSegment.append rule, restated: before appending a batch, add
    an index entry for it if more than ``interval`` bytes were appended since
    the last entry."""
    offsets, positions, ti_ts, ti_off = [], [], [], []
    max_ts, off_of_max, pos = -1, -1, 0
    for raw in raws:
        b = RecordBatch(raw)
        if b.max_timestamp > max_ts:
            max_ts, off_of_max = b.max_timestamp, b.last_offset
        if since > interval:
            offsets.append(b.last_offset)
            positions.append(pos)
            if max_ts > last_time:
                ti_ts.append(max_ts)
                ti_off.append(off_of_max)
                last_time = max_ts
            since = 0
        since += len(raw)
        pos += len(raw)
    return offsets, positions, ti_ts, ti_off, since


def test_index_every_third_equal_batch():
    raws = [make_batch(2, base_offset=2 * i, ts=100 * i) for i in range(10)]
    size = len(raws[0])
    assert all(len(r) == size for r in raws)
    data = b"".join(raws)
    scan = scan_log(data, index_interval_bytes=2 * size)
    # 3 batches (> 2 * size bytes) written before batches 3, 6 and 9
    assert list(scan.index_positions) == [3 * size, 6 * size, 9 * size]
    assert list(scan.index_offsets) == [7, 13, 19]
    assert list(scan.time_index_timestamps) == [301, 601, 901]
    assert list(scan.time_index_offsets) == [7, 13, 19]
    assert scan.bytes_since_last_index_entry == size


def test_index_first_batch_never_indexed():
    data, raws = log_of([1] * 5)
    scan = scan_log(data, index_interval_bytes=0)
    assert list(scan.index_positions) == positions_of(raws)[1:]
    scan = scan_log(data, index_interval_bytes=10**9)
    assert len(scan.index_positions) == 0 and len(scan.time_index_offsets) == 0
    assert scan.bytes_since_last_index_entry == len(data)


@pytest.mark.parametrize("interval", [0, 100, 250, 1000, 4096])
def test_index_entries_follow_the_interval_rule(interval):
    raws, offset = [], 0
    for i in range(60):
        n = 1 + (i * 7) % 5
        raws.append(make_batch(n, base_offset=offset, value_size=(i * 37) % 200,
                               ts=5_000 + ((i * 13) % 17) * 100))
        offset += n
    data = b"".join(raws)
    scan = scan_log(data, index_interval_bytes=interval)
    offsets, positions, ti_ts, ti_off, since = expected_index(raws, interval)
    assert list(scan.index_offsets) == offsets
    assert list(scan.index_positions) == positions
    assert list(scan.time_index_timestamps) == ti_ts
    assert list(scan.time_index_offsets) == ti_off
    assert scan.bytes_since_last_index_entry == since
    if interval < 1000:
        assert len(offsets) > 3
    # time index timestamps strictly increase
    assert all(a < b for a, b in zip(ti_ts, ti_ts[1:]))


def test_index_state_continues_across_scans():
    data, raws = log_of([2] * 12)
    size = len(raws[0])
    whole = scan_log(data, index_interval_bytes=size * 2 + 1)
    split = 5 * size
    first = scan_log(data[:split], index_interval_bytes=size * 2 + 1)
    second = scan_log(data, start=split, min_offset=first.next_offset,
                      index_interval_bytes=size * 2 + 1,
                      bytes_since_last_index_entry=first.bytes_since_last_index_entry,
                      last_indexed_timestamp=int(first.time_index_timestamps[-1]),
                      max_timestamp=first.max_timestamp,
                      offset_of_max_timestamp=first.offset_of_max_timestamp)
    assert list(first.index_positions) + list(second.index_positions) == \
        list(whole.index_positions)
    assert list(first.index_offsets) + list(second.index_offsets) == list(whole.index_offsets)
    assert list(first.time_index_timestamps) + list(second.time_index_timestamps) == \
        list(whole.time_index_timestamps)


def test_epoch_starts():
    data, raws = log_of([2, 3, 1, 1, 4, 2], epochs=[-1, 0, 0, 2, 2, 5])
    scan = scan_log(data)
    assert scan.epoch_starts == [(0, 2), (2, 6), (5, 11)]
    # continuing from a known epoch only reports changes after it
    assert scan_log(data, start=len(raws[0]) + len(raws[1]), min_offset=5,
                    last_epoch=0).epoch_starts == [(2, 6), (5, 11)]


def test_epoch_going_down_stops_scan():
    data, raws = log_of([2, 2, 2], epochs=[3, 4, 2])
    scan = scan_log(data)
    assert scan.valid_bytes == len(raws[0]) + len(raws[1])
    assert scan.epoch_starts == [(3, 0), (4, 2)]
    assert "leader epoch 2" in scan.error
    assert scan_log(data, last_epoch=5).valid_bytes == 0


def test_scan_after_validate_for_append_roundtrip():
    """What the append path writes, recovery accepts."""
    buf = concat(make_batch(3, codec=0), make_batch(2, codec=3), make_batch(4, codec=2))
    scan = validate_for_append(buf, next_offset=1000, leader_epoch=6, log_append_time=123)
    log = scan_log(bytes(buf), min_offset=1000, deep=True, contiguous=True)
    assert log.error is None and log.valid_bytes == len(buf)
    assert log.next_offset == scan.next_offset == 1009
    assert log.epoch_starts == [(6, 1000)]
    assert log.max_timestamp == 123


# ---- batch_header ----------------------------------------------------------------------

def test_batch_header():
    data, raws = log_of([3, 5], start=40, ts0=700)
    assert batch_header(data) == (40, 42, len(raws[0]), 702)
    assert batch_header(data, len(raws[0])) == (43, 47, len(raws[1]), 714)
    assert batch_header(memoryview(data)[:HEADER]) == (40, 42, len(raws[0]), 702)
    with pytest.raises(CorruptRecordError):
        batch_header(data[:HEADER - 1])
    with pytest.raises(CorruptRecordError):
        batch_header(data, len(data) - 10)
    with pytest.raises(CorruptRecordError):
        batch_header(data, -1)


def test_scan_start_outside_buffer_is_rejected():
    data, _ = log_of([2, 2])
    with pytest.raises(ValueError):
        scan_log(data, start=-12)          # would read before the buffer
    with pytest.raises(ValueError):
        scan_log(data, start=len(data) + 1)
    end = scan_log(data, start=len(data), min_offset=4)
    assert end.valid_bytes == len(data) and end.error is None and end.batch_count == 0


@pytest.mark.processes
def test_appends_do_not_import_numpy():
    """A worker that only appends never imports numpy (50-70 ms of its start-up)."""
    code = ("import sys; from kafkalite._ext.batch_scan import validate_for_append; "
            "from kafkalite._ext.builder import RecordBatchBuilder; import kafkalite.server.node.worker; "
            "b = RecordBatchBuilder(0); b.append(1, b'k', b'v'); "
            "validate_for_append(bytearray(b.build()), next_offset=0); "
            "print('numpy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=package_env(), check=True).stdout
    assert out.strip() == "False"
