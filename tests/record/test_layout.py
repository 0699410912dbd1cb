"""The batch layout Python reads headers with comes from wire.h, and agrees
with what the builder writes and the reader reads."""
from kafkalite.record import RecordBatch, RecordBatchBuilder, layout


def test_header_fields_read_through_the_layout_match_the_batch():
    b = RecordBatchBuilder("lz4", base_offset=1234, partition_leader_epoch=7, producer_id=42,
                           producer_epoch=3, base_sequence=99, transactional=True)
    for i in range(5):
        b.append(1_700_000_000_000 + i, b"k", b"v%d" % i)
    raw = b.build()
    batch = RecordBatch(raw)
    base, length, epoch, magic, crc, attrs, delta, base_ts, max_ts = layout.HEADER.unpack_from(raw)
    assert (base, epoch, magic, crc, attrs, delta) == (
        batch.base_offset, batch.partition_leader_epoch, layout.MAGIC, batch.crc,
        batch.attributes, batch.last_offset_delta)
    assert length + layout.LOG_OVERHEAD == len(raw) == batch.size_in_bytes
    assert (base_ts, max_ts) == (batch.base_timestamp, batch.max_timestamp)
    assert layout.PRODUCER.unpack_from(raw, layout.OFF_PRODUCER_ID) == (42, 3, 99)
    assert attrs & layout.ATTR_COMPRESSION_MASK == layout.COMPRESSION_LZ4
    assert attrs & layout.ATTR_TRANSACTIONAL and not attrs & layout.ATTR_CONTROL
    assert layout.BATCH_HEADER_SIZE == 61 and layout.MIN_BATCH_LENGTH == 49
