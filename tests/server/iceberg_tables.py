"""Reading an Iceberg topic's table back (pyiceberg, and DuckDB over the
snapshot's Parquet files) and the exactly-once checker the Iceberg topic
tests share: the table against a read of the topic, offset by offset."""
from __future__ import annotations

import os
import time
from collections import Counter

import confluent_kafka as ck

from kafkalite.storage.iceberg.topic_table import NAMESPACE, committed_offsets, open_catalog


def load_table(data_dir: str, topic: str):
    return open_catalog(os.path.join(data_dir, "iceberg")).load_table((NAMESPACE, topic))


def table_offsets(data_dir: str, topic: str) -> dict[int, int]:
    """partition -> next offset, as the table's latest snapshot says (empty: no table)."""
    try:
        return committed_offsets(load_table(data_dir, topic))
    except Exception:       # not created yet
        return {}


def _row(partition, offset, timestamp_ms, key, value, headers):
    return (int(partition), int(offset), int(timestamp_ms), key, value,
            tuple((k, v) for k, v in headers or ()))


def pyiceberg_rows(data_dir: str, topic: str) -> list[tuple]:
    """(partition, offset, timestamp ms, key, value, headers) per table row."""
    out = []
    for r in load_table(data_dir, topic).scan().to_arrow().to_pylist():
        rp = r["redpanda"]
        out.append(_row(rp["partition"], rp["offset"], rp["timestamp"].timestamp() * 1000,
                        rp["key"], r["value"], [(h["key"], h["value"]) for h in rp["headers"]]))
    return out


def duckdb_rows(data_dir: str, topic: str) -> list[tuple] | None:
    """The same rows read by DuckDB's Parquet reader over the current
    snapshot's data files (None without duckdb)."""
    try:
        import duckdb
    except ImportError:
        return None
    files = [task.file.file_path.removeprefix("file://")
             for task in load_table(data_dir, topic).scan().plan_files()]
    if not files:
        return []
    rows = duckdb.sql(
        "SELECT redpanda.partition, redpanda.offset, epoch_ms(redpanda.timestamp), "
        "redpanda.key, value, redpanda.headers FROM read_parquet($files)",
        params={"files": files}).fetchall()
    return [_row(p, o, ts, k, v, [(h["key"], h["value"]) for h in hs])
            for p, o, ts, k, v, hs in rows]


def topic_rows(bootstrap: str, topic: str, ends: dict[int, int],
               timeout: float = 60.0) -> list[tuple]:
    """Every record of ``topic`` below ``ends`` (partition -> end offset,
    whose last offset must be a record's, not a marker's), read_committed
    by confluent-kafka."""
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-check",
                            "enable.auto.commit": False, "isolation.level": "read_committed"})
    out, left = [], {p: e for p, e in ends.items() if e > 0}
    deadline = time.monotonic() + timeout
    try:
        consumer.assign([ck.TopicPartition(topic, p, 0) for p in left])
        while left:
            assert time.monotonic() < deadline, f"the topic's read stalled short of {left}"
            for m in consumer.consume(1000, 1):
                assert m.error() is None, m.error()
                if m.offset() < ends[m.partition()]:
                    out.append(_row(m.partition(), m.offset(), m.timestamp()[1], m.key(),
                                    m.value(), list(m.headers() or ())))
                if m.offset() >= ends[m.partition()] - 1:
                    left.pop(m.partition(), None)
    finally:
        consumer.close()
    return out


def check_exactly_once(table: list[tuple], topic: list[tuple]) -> list[str]:
    """What is wrong with ``table`` as the Iceberg copy of ``topic`` (rows
    as the readers above give them): offsets twice, offsets missing,
    offsets the topic has not, and rows whose key/value/timestamp/headers
    differ. Empty: every record exactly once, as it was produced."""
    problems = []
    counts = Counter((r[0], r[1]) for r in table)
    twice = sorted(k for k, n in counts.items() if n > 1)
    if twice:
        problems.append(f"{len(twice)} offsets in the table more than once, e.g. {twice[:5]}")
    expected = {(r[0], r[1]): r for r in topic}
    missing = sorted(set(expected) - set(counts))
    if missing:
        problems.append(f"{len(missing)} offsets of the topic not in the table, e.g. {missing[:5]}")
    extra = sorted(set(counts) - set(expected))
    if extra:
        problems.append(f"{len(extra)} offsets in the table the topic has not, e.g. {extra[:5]}")
    wrong = sorted(r[:2] for r in table if r[:2] in expected and r != expected[r[:2]])
    if wrong:
        problems.append(f"{len(wrong)} rows differ from the topic's records, e.g. {wrong[:5]}")
    return problems
