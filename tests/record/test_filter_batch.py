"""filter_batch: the log cleaner's re-encoding of a batch keeping some records."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite._ext.batch_scan import scan_log, validate_for_append
from kafkalite.record import (LOG_APPEND_TIME, RecordBatch, RecordBatchBuilder, decode_columns,
                              filter_batch)

CODECS = [0, 1, 2, 3, 4]
SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

payloads = st.one_of(st.none(), st.just(b""), st.binary(max_size=40))
record_st = st.tuples(
    st.one_of(st.integers(-1, 1), st.integers(-(2**40), 2**44)),
    payloads, payloads,
    st.lists(st.tuples(st.text(alphabet=st.characters(codec="utf-8"), max_size=5),
                       st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
    st.booleans(),            # keep?
)


def as_tuples(batch):
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
            for r in batch.records()]


@SETTINGS
@given(records=st.lists(record_st, min_size=1, max_size=30), codec=st.sampled_from(CODECS),
       base_offset=st.integers(0, 2**40), producer_id=st.integers(-1, 2**62),
       producer_epoch=st.integers(-1, 1000), base_sequence=st.integers(-1, 2**31 - 1),
       leader_epoch=st.integers(-1, 1000), extra_delta=st.integers(0, 5),
       horizon=st.one_of(st.none(), st.integers(-(2**40), 2**45)),
       transactional=st.booleans(), log_append=st.booleans(), gap=st.integers(1, 3))
def test_filter_keeps_exactly_the_masked_records(records, codec, base_offset, producer_id,
                                                 producer_epoch, base_sequence, leader_epoch,
                                                 extra_delta, horizon, transactional,
                                                 log_append, gap):
    transactional = transactional and producer_id >= 0
    builder = RecordBatchBuilder(codec, base_offset=base_offset, producer_id=producer_id,
                                 producer_epoch=producer_epoch, base_sequence=base_sequence,
                                 partition_leader_epoch=leader_epoch, transactional=transactional,
                                 timestamp_type=LOG_APPEND_TIME if log_append else 0)
    for i, (ts, key, value, headers, _) in enumerate(records):
        builder.append_with_offset(base_offset + i * gap, ts, key, value, headers)
    last_delta = (len(records) - 1) * gap + extra_delta
    original = RecordBatch(builder.build(last_offset_delta=last_delta))
    keep = [r[4] for r in records]

    out = filter_batch(original.tobytes(), keep, delete_horizon_ms=horizon)
    if not any(keep):
        assert out is None
        return
    kept = [rec for rec, k in zip(as_tuples(original), keep) if k]
    batch = RecordBatch(out)
    assert batch.is_valid()
    assert as_tuples(batch) == kept
    assert decode_columns(out).to_records() == kept
    # header fields the producer-state rebuild depends on are preserved
    assert batch.base_offset == base_offset
    assert batch.last_offset_delta == last_delta
    assert batch.last_offset == original.last_offset
    assert batch.producer_id == producer_id
    assert batch.producer_epoch == producer_epoch
    assert batch.base_sequence == base_sequence
    assert batch.last_sequence == original.last_sequence
    assert batch.partition_leader_epoch == leader_epoch
    assert batch.is_transactional == transactional
    assert batch.compression == codec
    assert batch.timestamp_type == original.timestamp_type
    assert batch.record_count == sum(keep)
    if log_append:
        assert batch.max_timestamp == original.max_timestamp
    else:
        assert batch.max_timestamp == max(r[1] for r in kept)
    if horizon is None:
        assert not batch.has_delete_horizon
        assert batch.base_timestamp == original.base_timestamp
        assert batch.attributes == original.attributes
    else:
        assert batch.has_delete_horizon
        assert batch.delete_horizon_ms == horizon == batch.base_timestamp
        assert batch.attributes == original.attributes | 0x40


def _batch(codec=0, n=10, **kw):
    builder = RecordBatchBuilder(codec, base_offset=500, producer_id=11, producer_epoch=2,
                                 base_sequence=40, **kw)
    for i in range(n):
        builder.append(1_700_000_000_000 + i * 10, b"key-%d" % (i % 4),
                       None if i % 5 == 4 else b"value-%d" % i, [("n", b"%d" % i)])
    return builder.build()


@pytest.mark.parametrize("codec", CODECS)
def test_filter_specific_mask(codec):
    raw = _batch(codec)
    keep = np.zeros(10, dtype=bool)
    keep[[1, 4, 9]] = True
    out = RecordBatch(filter_batch(raw, keep))
    assert out.compression == codec
    assert [r.offset for r in out.records()] == [501, 504, 509]
    assert [r.value for r in out.records()] == [b"value-1", None, None]
    assert [r.key for r in out.records()] == [b"key-1", b"key-0", b"key-1"]
    assert out.base_offset == 500 and out.last_offset == 509
    assert out.max_timestamp == 1_700_000_000_090
    assert out.base_timestamp == 1_700_000_000_000        # the dropped first record's
    # dropping trailing records keeps lastOffsetDelta
    keep[9] = False
    out = RecordBatch(filter_batch(raw, keep))
    assert [r.offset for r in out.records()] == [501, 504]
    assert out.last_offset == 509 and out.next_offset == 510
    assert out.max_timestamp == 1_700_000_000_040
    assert out.is_valid()


def test_keep_everything_without_horizon_is_byte_identical_uncompressed():
    raw = _batch(0)
    assert filter_batch(raw, [True] * 10) == raw


@pytest.mark.parametrize("codec", CODECS)
def test_nothing_kept_returns_none(codec):
    assert filter_batch(_batch(codec), [False] * 10) is None
    assert filter_batch(_batch(codec), np.zeros(10, dtype=np.uint8)) is None


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("horizon", [0, 1_700_000_000_050, 1_800_000_000_000, 2**62])
def test_delete_horizon_keeps_record_timestamps(codec, horizon):
    raw = _batch(codec)
    before = [r.timestamp for r in RecordBatch(raw).records()]
    out = RecordBatch(filter_batch(raw, [True] * 10, delete_horizon_ms=horizon))
    assert out.attributes & 0x40
    assert out.has_delete_horizon and out.delete_horizon_ms == horizon
    assert out.base_timestamp == horizon
    assert [r.timestamp for r in out.records()] == before
    assert list(decode_columns(out.tobytes()).timestamps) == before
    assert out.max_timestamp == max(before)
    assert out.compression == codec
    assert out.is_valid()
    # filtering again without a horizon keeps the stamped one
    again = RecordBatch(filter_batch(out.tobytes(), [i % 2 == 0 for i in range(10)]))
    assert again.delete_horizon_ms == horizon
    assert [r.timestamp for r in again.records()] == before[::2]


def test_log_append_time_batch_keeps_its_max_timestamp():
    raw = _batch(3, timestamp_type=LOG_APPEND_TIME)
    out = RecordBatch(filter_batch(raw, [True] + [False] * 9))
    assert out.timestamp_type == 1
    assert out.max_timestamp == RecordBatch(raw).max_timestamp == 1_700_000_000_090
    assert [r.timestamp for r in out.records()] == [1_700_000_000_090]


def test_accepts_a_record_batch_inside_a_larger_buffer():
    first, second = _batch(0, n=3), _batch(4, n=5)
    data = first + second
    out = filter_batch(RecordBatch(data, len(first)), [False, True, False, True, False])
    assert [r.offset for r in RecordBatch(out).records()] == [501, 503]


def test_mask_length_must_match():
    with pytest.raises(ValueError):
        filter_batch(_batch(0), [True] * 9)
    with pytest.raises(ValueError):
        filter_batch(_batch(0), [True] * 11)


@pytest.mark.parametrize("codec", CODECS)
def test_filtered_batches_pass_replication_and_recovery_checks(codec):
    """A compacted batch (offset gaps) is accepted by the follower path and scan_log."""
    raw = _batch(codec)
    out = filter_batch(raw, [i % 3 == 0 for i in range(10)], delete_horizon_ms=123)
    nxt = _batch(codec, n=2)
    nxt = bytearray(nxt)
    nxt[:8] = (510).to_bytes(8, "big")
    buf = bytearray(out) + nxt
    scan = validate_for_append(buf, next_offset=500, assign_offsets=False)
    assert list(scan.base_offsets) == [500, 510]
    assert list(scan.last_offsets) == [509, 511]
    log = scan_log(bytes(buf), min_offset=500, deep=True, contiguous=True)
    assert log.error is None and log.valid_bytes == len(buf) and log.next_offset == 512
