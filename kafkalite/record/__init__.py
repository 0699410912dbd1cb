"""Kafka RecordBatch v2: the one byte format used everywhere in kafkalite.

The codec itself is Cython, one module per job: ``kafkalite._ext.builder``
(building batches), ``kafkalite._ext.reader`` (reading them),
``kafkalite._ext.columns`` (decoding many into Arrow-layout columns), with
the layout constants in ``kafkalite.record.layout``. This package
re-exports them with the compression codecs; import from here. The codec's
names load on first use (kafkalite/_lazy.py): importing ``kafkalite.record.layout``
must not load the Cython builder and decoders, which import numpy.
"""
from kafkalite._lazy import lazy_exports
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
    "batches_extent", "build_control_batch", "decode_chunks", "decode_columns", "filter_batch",
    "iter_batches", "CODEC_NAMES",
    "codec_id",
]
__getattr__, __dir__ = lazy_exports(__name__, {
    "kafkalite._ext.builder": ("RecordBatchBuilder", "build_control_batch", "filter_batch"),
    "kafkalite._ext.columns": ("AbortedFilter", "RecordColumns", "decode_chunks", "decode_columns"),
    "kafkalite._ext.reader": ("Record", "RecordBatch", "batches_extent", "iter_batches"),
    "kafkalite.record.compression": ("CODEC_NAMES", "codec_id"),
})
