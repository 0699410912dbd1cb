"""Kafka RecordBatch v2: the one byte format used everywhere in kafkalite.

The codec itself is Cython, one module per job: ``kafkalite._ext.builder``
(building batches), ``kafkalite._ext.reader`` (reading them),
``kafkalite._ext.columns`` (decoding many into Arrow-layout columns), with
the layout constants in ``kafkalite.record.layout``. This package
re-exports them with the compression codecs; import from here.
"""
from kafkalite._ext.builder import RecordBatchBuilder, build_control_batch, filter_batch
from kafkalite._ext.columns import AbortedFilter, RecordColumns, decode_columns
from kafkalite._ext.reader import Record, RecordBatch, batches_extent, iter_batches
from kafkalite.record.compression import CODEC_NAMES, codec_id
from kafkalite.record.layout import (
    BATCH_HEADER_SIZE, COMPRESSION_GZIP, COMPRESSION_LZ4, COMPRESSION_NONE, COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD, CREATE_TIME, LOG_APPEND_TIME, LOG_OVERHEAD, MAGIC, NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, NO_TIMESTAMP,
)

__all__ = [
    "BATCH_HEADER_SIZE", "COMPRESSION_GZIP", "COMPRESSION_LZ4", "COMPRESSION_NONE",
    "COMPRESSION_SNAPPY", "COMPRESSION_ZSTD", "CREATE_TIME", "LOG_APPEND_TIME", "LOG_OVERHEAD",
    "MAGIC", "NO_PARTITION_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE",
    "NO_TIMESTAMP", "AbortedFilter", "Record", "RecordBatch", "RecordBatchBuilder", "RecordColumns",
    "batches_extent", "build_control_batch", "decode_columns", "filter_batch", "iter_batches", "CODEC_NAMES",
    "codec_id",
]
