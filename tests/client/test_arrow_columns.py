"""consume_batch's Arrow columns (kafkalite.client.arrow) hold exactly the
decoded records: built from buffers and shared caches, they are checked
here against the records decoded one by one, for every shape of batch a
fetch can bring (null keys and values, headers or none, a start part-way
in, batches longer than the shared zero buffer)."""
from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from kafkalite.client import arrow
from kafkalite.record import RecordBatchBuilder, build_control_batch, decode_chunks, decode_columns


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


def _chunk(seed: int, batches: int, *, base: int = 0, compression: str = "none",
           aborted_pid: int | None = None, partial: bool = False) -> tuple[bytes, list]:
    """A fetched chunk: ``batches`` batches from offset ``base`` (some of
    producer 7's transactional ones, aborted with a marker after them when
    ``aborted_pid`` is 7), maybe a partial batch at the end; and the fetch's
    aborted transactions for it."""
    rng = random.Random(seed)
    out, offset, aborted = b"", base, []
    for i in range(batches):
        n = rng.randrange(1, 6)
        txn = aborted_pid is not None and i % 2 == 1
        b = RecordBatchBuilder(compression, base_offset=offset,
                               producer_id=aborted_pid if txn else -1,
                               producer_epoch=0 if txn else -1, transactional=txn)
        keys = [None if rng.random() < 0.3 else rng.randbytes(4) for _ in range(n)]
        hdrs = [[("h", rng.randbytes(2))] if rng.random() < 0.3 else None for _ in range(n)]
        b.append_values([rng.randbytes(rng.randrange(0, 30)) for _ in range(n)], keys,
                        [1_700_000_000_000 + offset + j for j in range(n)], headers=hdrs)
        out += b.build()
        if txn:
            aborted.append((aborted_pid, offset))
            out += build_control_batch(False, aborted_pid, 0, 0, base_offset=offset + n)
            offset += 1
        offset += n
    if partial:
        b = RecordBatchBuilder(0, base_offset=offset)
        b.append(None, None, b"never whole")
        out += b.build()[:-3]
    return out, aborted


def test_chunks_of_many_partitions_decode_as_each_on_its_own():
    """decode_chunks + chunks_to_arrow (consume_batch's path) give the rows,
    and each chunk's next offset and bytes consumed, that decoding each
    chunk alone from its partition's position gives: topics in any order,
    positions part-way into a batch or past the whole chunk, aborted
    transactions and markers dropped, compressed batches, a partial batch
    at a chunk's end, a chunk with no whole batch."""
    specs = [  # topic, partition, chunk, position
        ("a", 0, _chunk(1, 3), 0),
        ("b", 4, _chunk(2, 4, base=100, aborted_pid=7), 102),
        ("a", 2, _chunk(3, 1, base=50, compression="zstd"), 50),
        ("c", 1, _chunk(4, 2, base=10, partial=True), 11),
        ("b", 0, _chunk(5, 2), 10_000),                  # everything below the position
        ("a", 3, (b"", []), 0),                           # nothing fetched
        ("a", 5, _chunk(6, 0, partial=True), 0),           # only part of a batch
        ("c", 0, _chunk(7, 5, base=7, aborted_pid=7, compression="lz4"), 9),
    ]
    cols = decode_chunks([(memoryview(data), aborted, position)
                          for _, _, (data, aborted), position in specs])
    topics = ["a", "b", "c"]
    batch = arrow.chunks_to_arrow(cols, topics, np.array([topics.index(t) for t, *_ in specs]),
                                  np.array([p for _, p, *_ in specs]))
    batch.validate(full=True)
    assert batch.schema == arrow.SCHEMA
    want_rows, want_next, want_consumed = [], [], []
    for topic, partition, (data, aborted), position in specs:
        alone = decode_columns(memoryview(data), aborted_transactions=aborted)
        start = int(np.searchsorted(alone.offsets, position))
        want_rows += arrow.columns_to_arrow(alone, topic, partition, start).to_pylist()
        want_next.append(alone.next_offset)
        want_consumed.append(alone.bytes_consumed)
    assert len(want_rows) > 20
    assert batch.to_pylist() == want_rows
    assert cols.chunk_next_offsets.tolist() == want_next
    assert cols.chunk_bytes_consumed.tolist() == want_consumed
    assert sum(cols.chunk_records.tolist()) == len(want_rows)
    assert sorted(batch.column("topic").dictionary.to_pylist()) == topics   # each topic once
    # one topic: the shared zero indices
    one = decode_chunks([(memoryview(specs[0][2][0]), None, 0), (memoryview(specs[2][2][0]), None, 0)])
    single = arrow.chunks_to_arrow(one, ["a"], np.array([0, 0]), np.array([0, 2]))
    single.validate(full=True)
    assert single.column("topic").to_pylist() == ["a"] * single.num_rows
    assert single.column("partition").to_pylist() == \
        [0] * int(one.chunk_records[0]) + [2] * int(one.chunk_records[1])
    assert arrow.chunks_to_arrow(decode_chunks([]), ["a"], np.array([], np.int32),
                                 np.array([], np.int32)).num_rows == 0


def test_an_empty_range_is_the_empty_batch():
    cols = _batches(3, 4, **SHAPES["values only"])
    empty = arrow.columns_to_arrow(cols, "t", 0, 4)
    assert empty.num_rows == 0 and empty.schema == arrow.SCHEMA
    assert isinstance(arrow.empty(), pa.RecordBatch)
