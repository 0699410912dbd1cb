"""The record batch inside a topology, and how operator arguments run on it.

Every processor takes and forwards pyarrow RecordBatches with these columns
(the consumer's Arrow output, kafkalite.client.arrow.SCHEMA, less ``topic``
and ``timestamp_type``, keys and values deserialized by the source's serdes):

    key        the record key (type from the key serde; null: no key)
    value      the record value (type from the value serde; null: tombstone)
    timestamp  int64, ms since the epoch (the record's timestamp, carried to
               its outputs as Kafka Streams does)
    partition  int32, the input partition (the task's)
    offset     int64, the input offset (of the record a row came from)
    headers    list<struct<key: string, value: binary>>

A windowed aggregation's table adds ``window_start`` and ``window_end``
(int64 ms); a session-windowed one ``session_start`` and ``session_end``.

Operator arguments, one rule for every operator:
- a ``pyarrow.compute.Expression`` over those columns (``pc.field("value")``)
  is evaluated once per batch (Acero), the fast path;
- a function marked ``@columnar`` is called once per batch with the whole
  RecordBatch and returns an Array (or what the operator documents);
- any other callable is a per-record function with Kafka Streams' signature
  (``(key, value)``, or ``(value)`` for the *_values operators), called once
  per record on Python objects: the slow path, as in every Python stream
  processor.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.acero as acero
import pyarrow.compute as pc

COLUMNS = ("key", "value", "timestamp", "partition", "offset", "headers")


def columnar(fn):
    """Mark ``fn`` as a function of a whole RecordBatch (the fast path)."""
    fn.__kafkalite_columnar__ = True
    return fn


def is_columnar(fn) -> bool:
    return isinstance(fn, pc.Expression) or getattr(fn, "__kafkalite_columnar__", False)


def evaluate(arg, batch: pa.RecordBatch) -> pa.Array:
    """A columnar argument (Expression or @columnar function) on ``batch``."""
    if isinstance(arg, pc.Expression):
        plan = acero.Declaration.from_sequence([
            acero.Declaration("table_source",
                              acero.TableSourceNodeOptions(pa.Table.from_batches([batch]))),
            acero.Declaration("project", acero.ProjectNodeOptions([arg], ["out"]))])
        out = plan.to_table(use_threads=False).column("out")
    else:
        out = arg(batch)
    if isinstance(out, pa.ChunkedArray):
        out = out.combine_chunks()
    if not isinstance(out, pa.Array):
        out = pa.array(out)
    if len(out) != batch.num_rows:
        raise ValueError(f"a columnar function returned {len(out)} rows for a batch of "
                         f"{batch.num_rows}")
    return out


def replace(batch: pa.RecordBatch, **columns) -> pa.RecordBatch:
    """``batch`` with some columns replaced (or added), same rows."""
    names = list(batch.schema.names)
    arrays = list(batch.columns)
    for name, col in columns.items():
        if name in names:
            arrays[names.index(name)] = col
        else:
            names.append(name)
            arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, names=names)


def from_consumer(batch: pa.RecordBatch, key_serde, value_serde) -> pa.RecordBatch:
    """The consumer's RecordBatch (client/arrow.py SCHEMA) as a topology batch."""
    return pa.RecordBatch.from_arrays([
        key_serde.deserialize(batch.column("key")),
        value_serde.deserialize(batch.column("value")),
        batch.column("timestamp").cast(pa.int64()),
        batch.column("partition"),
        batch.column("offset"),
        batch.column("headers"),
    ], names=list(COLUMNS))


def by_partition(batch: pa.RecordBatch):
    """((topic, partition), rows) of a consumer batch, one per partition
    present, rows in log order."""
    topics = batch.column("topic")
    names = topics.dictionary.to_pylist()
    code = topics.indices.to_numpy().astype(np.int64) << 32 | \
        batch.column("partition").to_numpy().astype(np.int64)
    if (code == code[0]).all():
        yield (names[int(code[0]) >> 32], int(code[0]) & 0xFFFFFFFF), batch
        return
    for c in np.unique(code):
        yield (names[int(c) >> 32], int(c) & 0xFFFFFFFF), \
            batch.take(pa.array(np.flatnonzero(code == c)))


def merge_runs(timestamps: list) -> list:
    """The order in which a task takes the records of several input
    partitions (Kafka's PartitionGroup): always the head record with the
    smallest timestamp (ties: the partition listed first), each partition's
    records in offset order. ``timestamps``: one int64 array per partition,
    in offset order. -> [(partition index, start, end)]: runs of consecutive
    records of one partition, so that the task processes slices, not
    records."""
    heads = [0] * len(timestamps)
    runs = []
    while True:
        live = [(int(t[h]), i) for i, (t, h) in enumerate(zip(timestamps, heads)) if h < len(t)]
        if not live:
            return runs
        live.sort()
        _, i = live[0]
        seg = np.asarray(timestamps[i][heads[i]:])
        if len(live) == 1:
            n = len(seg)
        else:
            other_ts, other_i = live[1]
            # the next record of partition i still comes first while it is
            # (timestamp, index)-smaller than every other head
            ahead = (seg < other_ts) | ((seg == other_ts) & (i < other_i))
            n = len(seg) if ahead.all() else int(np.argmin(ahead))
        runs.append((i, heads[i], heads[i] + n))
        heads[i] += n
