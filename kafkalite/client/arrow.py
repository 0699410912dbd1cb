"""Decoded record columns as pyarrow RecordBatches, without per-record work.

``decode_columns`` (Cython) already lays keys, values and headers out as
Arrow binary / list<struct> buffers; this wraps them with
``pa.Array.from_buffers`` (no copies but the validity bitmaps, which numpy
packs in one call).

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


def _bitmap(valid: np.ndarray):
    if valid.all():
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), int(len(valid) - valid.sum())


def _binary(kind, offsets: np.ndarray, data: np.ndarray, valid: np.ndarray, start: int, stop: int):
    n = stop - start
    offs = offsets[start:stop + 1]
    if offs[0] != 0:
        offs = offs - offs[0]
    lo = int(offsets[start])
    bitmap, nulls = _bitmap(valid[start:stop])
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(offs),
                                           pa.py_buffer(data[lo:lo + int(offs[-1])])],
                                 null_count=nulls)


def columns_to_arrow(cols, topic: str, partition: int, start: int = 0) -> pa.RecordBatch:
    """Records ``start:`` of a RecordColumns as one RecordBatch (SCHEMA)."""
    stop = len(cols)
    n = max(stop - start, 0)
    if n == 0:
        return empty()
    topic_col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)),
                                               pa.array([topic], pa.string()))
    h0, h1 = int(cols.header_offsets[start]), int(cols.header_offsets[stop])
    keys = _binary(pa.string(), cols.header_key_offsets, cols.header_key_data,
                   np.ones(h1 - h0, dtype=bool), h0, h1)
    values = _binary(pa.binary(), cols.header_value_offsets, cols.header_value_data,
                     cols.header_value_valid, h0, h1)
    entries = pa.StructArray.from_arrays([keys, values], names=["key", "value"])
    list_offsets = cols.header_offsets[start:stop + 1] - h0
    headers = pa.ListArray.from_arrays(pa.array(list_offsets, pa.int32()), entries)
    return pa.RecordBatch.from_arrays([
        topic_col,
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(cols.offsets[start:stop]),
        pa.Array.from_buffers(pa.timestamp("ms", tz="UTC"), n,
                              [None, pa.py_buffer(np.ascontiguousarray(cols.timestamps[start:stop]))]),
        pa.array(cols.timestamp_types[start:stop].astype(np.int8)),
        _binary(pa.binary(), cols.key_offsets, cols.key_data, cols.key_valid, start, stop),
        _binary(pa.binary(), cols.value_offsets, cols.value_data, cols.value_valid, start, stop),
        headers,
    ], schema=SCHEMA)


def empty() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=SCHEMA)


def concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    batches = [b for b in batches if b.num_rows]
    if not batches:
        return empty()
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches).unify_dictionaries().combine_chunks()
    return table.to_batches(max_chunksize=table.num_rows)[0]
