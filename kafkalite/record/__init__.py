"""Kafka RecordBatch v2: the one byte format used everywhere in kafkalite.

The codec itself is Cython (``kafkalite._ext.records``); this package
re-exports it with the compression codecs.
"""
from kafkalite._ext.records import (
    BATCH_HEADER_SIZE, COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD, CREATE_TIME, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP, Record, RecordBatch,
    RecordBatchBuilder, RecordColumns, batches_extent, build_control_batch, decode_columns,
    filter_batch, iter_batches,
)
from kafkalite.record.compression import CODEC_NAMES, codec_id

__all__ = [
    "BATCH_HEADER_SIZE", "COMPRESSION_GZIP", "COMPRESSION_LZ4", "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY", "COMPRESSION_ZSTD", "CREATE_TIME", "LOG_APPEND_TIME", "LOG_OVERHEAD",
    "MAGIC", "NO_PARTITION_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE",
    "NO_TIMESTAMP", "Record", "RecordBatch", "RecordBatchBuilder", "RecordColumns",
    "batches_extent", "build_control_batch", "decode_columns", "filter_batch", "iter_batches", "CODEC_NAMES",
    "codec_id",
]
