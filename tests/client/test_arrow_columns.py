"""consume_batch's Arrow columns (kafkalite.client.arrow) hold exactly the
decoded records: built from buffers and shared caches, they are checked
here against the records decoded one by one, for every shape of batch a
fetch can bring (null keys and values, headers or none, a start part-way
in, batches longer than the shared zero buffer)."""
from __future__ import annotations

import random

import pyarrow as pa
import pytest

from kafkalite.client import arrow
from kafkalite.record import RecordBatchBuilder, decode_columns


def _batches(seed: int, n: int, *, null_keys: float, null_values: float, headers: float):
    rng = random.Random(seed)
    values = [None if rng.random() < null_values else rng.randbytes(rng.randrange(0, 40))
              for _ in range(n)]
    keys = [None if rng.random() < null_keys else rng.randbytes(rng.randrange(0, 9))
            for _ in range(n)]
    hdrs = [[(f"h{j}", None if rng.random() < 0.2 else rng.randbytes(3))
             for j in range(rng.randrange(1, 3))] if rng.random() < headers else None
            for _ in range(n)]
    b = RecordBatchBuilder(0)
    b.append_values(values, keys, [1_700_000_000_000 + i for i in range(n)], headers=hdrs)
    return decode_columns(memoryview(b.build()))


SHAPES = {
    "values only": dict(null_keys=1.0, null_values=0.0, headers=0.0),
    "keys and values": dict(null_keys=0.0, null_values=0.0, headers=0.0),
    "some nulls": dict(null_keys=0.5, null_values=0.3, headers=0.0),
    "all null values": dict(null_keys=0.5, null_values=1.0, headers=0.0),
    "headers": dict(null_keys=0.3, null_values=0.1, headers=0.6),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("n,start", [(1, 0), (2, 1), (37, 0), (37, 20), (5000, 0), (5000, 4999)])
def test_columns_hold_the_records(shape, n, start):
    cols = _batches(n * 31 + start, n, **SHAPES[shape])
    batch = arrow.columns_to_arrow(cols, "orders", 7, start)
    batch.validate(full=True)
    assert batch.schema == arrow.SCHEMA
    want = cols.to_records()[start:]
    assert batch.num_rows == len(want)
    got = batch.to_pylist()
    for row, (offset, ts, ts_type, key, value, headers) in zip(got, want):
        assert row["topic"] == "orders" and row["partition"] == 7
        assert row["offset"] == offset
        assert int(row["timestamp"].timestamp() * 1000) == ts
        assert row["timestamp_type"] == ts_type
        assert row["key"] == key and row["value"] == value
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(headers)


@pytest.mark.parametrize("route", ["concat_batches", "table"])
def test_batches_of_two_topics_concatenate(route, monkeypatch):
    if route == "table":                  # pyarrow before 19 has no concat_batches
        monkeypatch.setattr(arrow, "_concat_batches", None)
    elif arrow._concat_batches is None:
        pytest.skip("this pyarrow has no concat_batches")
    parts = [arrow.columns_to_arrow(_batches(seed, n, **SHAPES[shape]), topic, partition)
             for seed, n, shape, topic, partition in [
                 (1, 3, "some nulls", "a", 0), (2, 4, "headers", "b", 1),
                 (3, 1, "values only", "a", 2), (4, 2, "headers", "b", 0),
                 (5, 5, "some nulls", "a", 1)]]
    both = arrow.concat(parts)
    both.validate(full=True)
    assert both.schema == arrow.SCHEMA
    assert both.to_pylist() == [row for p in parts for row in p.to_pylist()]
    assert both.column("topic").to_pylist() == ["a"] * 3 + ["b"] * 4 + ["a"] + ["b"] * 2 + ["a"] * 5
    assert both.column("partition").to_pylist() == [0] * 3 + [1] * 4 + [2] + [0] * 2 + [1] * 5
    assert sorted(both.column("topic").dictionary.to_pylist()) == ["a", "b"]   # each topic once


def test_an_empty_range_is_the_empty_batch():
    cols = _batches(3, 4, **SHAPES["values only"])
    empty = arrow.columns_to_arrow(cols, "t", 0, 4)
    assert empty.num_rows == 0 and empty.schema == arrow.SCHEMA
    assert isinstance(arrow.empty(), pa.RecordBatch)
