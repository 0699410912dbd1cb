"""Decoded record columns as pyarrow RecordBatches, without per-record work.

``decode_columns`` and ``decode_chunks`` (Cython) already lay keys, values
and headers out as Arrow binary / list<struct> buffers; this wraps them with
``pa.Array.from_buffers`` (no copies but the validity bitmaps, which numpy
packs in one call): one partition's records (``columns_to_arrow``), or the
chunks of many partitions a fetch brought, as one batch (``chunks_to_arrow``).

Schema of ``Consumer.consume_batch``:
    topic      dictionary<int32, string>
    partition  int32
    offset     int64
    timestamp  timestamp[ms, UTC]
    timestamp_type int8   (0 CreateTime, 1 LogAppendTime)
    key        binary (null: no key)
    value      binary (null: tombstone)
    headers    list<struct<key: string, value: binary>>
"""
from __future__ import annotations

import functools

import numpy as np
import pyarrow as pa

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SCHEMA = pa.schema([
    ("topic", pa.dictionary(pa.int32(), pa.string())),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", pa.timestamp("ms", tz="UTC")),
    ("timestamp_type", pa.int8()),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
])


TOPIC_TYPE = SCHEMA.field("topic").type
TIMESTAMP_TYPE = SCHEMA.field("timestamp").type
# A batch without headers (the usual case) gets its headers column from these:
# an empty entries child and all-zero list offsets.
_NO_ENTRIES = pa.array([], HEADER_TYPE.value_type)
_zeros = pa.py_buffer(np.zeros(1024, dtype=np.int32))


def _zero_offsets(n: int) -> pa.Buffer:
    """A buffer of at least n int32 zeros, which also serves as an all-null
    bitmap of n bits. One shared buffer that grows: consume_batch of a
    record or two is common at low rates, and its fixed cost is what counts."""
    global _zeros
    if _zeros.size < 4 * n:
        _zeros = pa.py_buffer(np.zeros(max(n, 2 * _zeros.size // 4), dtype=np.int32))
    return _zeros


@functools.lru_cache(maxsize=4096)
def _topic_dictionary(topic: str) -> pa.Array:
    return pa.array([topic], pa.string())


@functools.lru_cache(maxsize=1024)
def _topics_dictionary(topics: tuple) -> pa.Array:
    return pa.array(topics, pa.string())


def _bitmap(valid: np.ndarray):
    if valid.all():
        return None, 0
    if not valid.any():     # all null: keyless records
        return _zero_offsets(len(valid)), len(valid)
    return pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - valid.sum())


def _binary(kind, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, start: int, stop: int):
    n = stop - start
    offs = offsets[start:stop + 1]
    lo = int(offs[0])
    if lo:
        offs = offs - lo
    bitmap, nulls = _bitmap(valid[start:stop])
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(offs),
                                           pa.py_buffer(data[lo:lo + int(offs[-1])])],
                                 null_count=nulls)


def _headers(cols, start: int, stop: int, n: int) -> pa.Array:
    h0, h1 = int(cols.header_offsets[start]), int(cols.header_offsets[stop])
    if h0 == h1:
        return pa.Array.from_buffers(HEADER_TYPE, n, [None, _zero_offsets(n + 1)],
                                     children=[_NO_ENTRIES])
    keys = _binary(pa.string(), cols.header_key_offsets, cols.header_key_data,
                   np.ones(h1 - h0, dtype=bool), h0, h1)
    values = _binary(pa.binary(), cols.header_value_offsets, cols.header_value_data,
                     cols.header_value_valid, h0, h1)
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    list_offsets = cols.header_offsets[start:stop + 1] - h0
    return pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), entries)


def columns_to_arrow(cols, topic: str, partition: int, start: int = 0) -> pa.RecordBatch:
    """Records ``start:`` of a RecordColumns as one RecordBatch (SCHEMA).
    Every column wraps buffers (``from_buffers``): building arrays from numpy
    with ``pa.array`` costs several times more, which a fetch of one record
    pays in full."""
    stop = len(cols)
    n = max(stop - start, 0)
    if n == 0:
        return empty()
    return _record_batch(
        cols, start, stop,
        pa.DictionaryArray.from_buffers(TOPIC_TYPE, n, [None, _zero_offsets(n)],
                                        _topic_dictionary(topic)),
        np.full(n, partition, dtype=np.int32))


def chunks_to_arrow(cols, topics: list[str], chunk_topics: np.ndarray,
                    chunk_partitions: np.ndarray) -> pa.RecordBatch:
    """A RecordColumns of many partitions' chunks (``decode_chunks``) as one
    RecordBatch (SCHEMA): ``chunk_topics`` (int32 indexes into ``topics``,
    each topic once) and ``chunk_partitions`` (int32) per chunk, spread over
    the chunk's records (``cols.chunk_records``). One set of arrays for the
    whole fetch, not one per partition and a concatenation."""
    n = len(cols)
    if n == 0:
        return empty()
    counts = cols.chunk_records
    if len(topics) == 1:
        indices = _zero_offsets(n)
    else:
        indices = pa.py_buffer(np.repeat(chunk_topics.astype(np.int32, copy=False), counts))
    dictionary = _topic_dictionary(topics[0]) if len(topics) == 1 else \
        _topics_dictionary(tuple(topics))
    return _record_batch(
        cols, 0, n, pa.DictionaryArray.from_buffers(TOPIC_TYPE, n, [None, indices], dictionary),
        np.repeat(chunk_partitions.astype(np.int32, copy=False), counts))


def _record_batch(cols, start: int, stop: int, topic: pa.Array,
                  partitions: np.ndarray) -> pa.RecordBatch:
    n = stop - start
    return pa.RecordBatch.from_arrays([
        topic,
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(partitions)]),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(cols.offsets[start:stop])]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(cols.timestamps[start:stop])]),
        # 0 and 1: the same bytes as int8
        pa.Array.from_buffers(pa.int8(), n,
                              [None, pa.py_buffer(cols.timestamp_types[start:stop].view(np.int8))]),
        _binary(pa.binary(), cols.key_offsets, cols.key_data, cols.key_valid, start, stop),
        _binary(pa.binary(), cols.value_offsets, cols.value_data, cols.value_valid, start, stop),
        _headers(cols, start, stop, n),
    ], schema=SCHEMA)


_EMPTY = pa.RecordBatch.from_pylist([], schema=SCHEMA)


def empty() -> pa.RecordBatch:
    return _EMPTY    # immutable, so one serves every caller
