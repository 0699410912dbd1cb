"""SQL over an Iceberg topic (kafkalite/sql/iceberg_source.py) against the
shared server: the offsets the topic's Iceberg table holds are read from
its Parquet files (those the log's start has passed too), the records
produced after its last commit from the log, and every answer is compared with a Python model of the produced
records (each once: no gap, no duplicate at the seam). A topic whose
table does not exist yet is read from its log alone.

The model: orders in Confluent's Avro wire format (the registry decodes
``item`` and ``amount``), keyed by customer, with CreateTime timestamps
the test chose, headers on some, a tombstone, a record without a key,
and an aborted transaction's records (in neither the table nor the
answer)."""
from __future__ import annotations

import time
from collections import Counter, defaultdict

import pytest

from harness import wait_until
from kafkalite.client import (AdminClient, ConfigEntry, ConfigResource, Consumer, NewTopic,
                              Producer, TopicPartition)
from kafkalite.sql import Session
from kafkalite.storage.iceberg.topic_table import committed_offsets

pytest.importorskip("pyiceberg")

from test_session import register, wire  # noqa: E402

SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "item", "type": "string"}, {"name": "amount", "type": "double"}]}
ITEMS = ("pizza", "sushi", "salad")
PARTITIONS = 2
# recent: records older than the topic's retention.ms (7 days) go before the table has them
BASE_MS = int(time.time() * 1000) - 60_000


def _produce(server, topic: str, schema_id: int, model: list, count: int) -> None:
    """``count`` orders more (and their model rows), a tombstone and a
    record without a key, then an aborted transaction's records."""
    producer = Producer(server.config(**{"linger.ms": 5}))
    for _ in range(count):
        i = len(model)
        row = {"partition": i % PARTITIONS, "key": f"customer-{i % 11}".encode(),
               "item": ITEMS[i % 3], "amount": float(i % 40) / 4, "timestamp": BASE_MS + i,
               "headers": [("n", b"%d" % i)] if i % 5 == 0 else []}
        row["value"] = wire(schema_id, {"item": row["item"], "amount": row["amount"]}, SCHEMA)
        model.append(row)
        producer.produce(topic, row["value"], key=row["key"], partition=row["partition"],
                         timestamp=row["timestamp"], headers=row["headers"] or None)
    for key, value in ((b"gone", None), (None, b"no key")):
        i = len(model)
        model.append({"partition": 0, "key": key, "value": value, "item": None,
                      "amount": None, "timestamp": BASE_MS + i, "headers": []})
        producer.produce(topic, value, key=key, partition=0, timestamp=BASE_MS + i)
    assert producer.flush(30) == 0
    txn = Producer(server.config(**{"transactional.id": f"{topic}-{len(model)}"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    for p in range(PARTITIONS):
        txn.produce(topic, b"aborted", key=b"aborted", partition=p)
    txn.flush(30)
    txn.abort_transaction(30)
    # the log ends on records, not on the abort's markers: the table commits up to them
    producer.produce(topic, model[0]["value"], key=b"last", partition=1,
                     timestamp=BASE_MS + len(model))
    model.append({**model[0], "partition": 1, "key": b"last", "timestamp": BASE_MS + len(model),
                  "headers": []})
    assert producer.flush(30) == 0


def _create(server, topic: str, lag_ms: int) -> int:
    admin = AdminClient(server.config())
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1, config={
            "iceberg.mode": "key_value", "iceberg.target.lag.ms": str(lag_ms)})])[topic].result(30)
    finally:
        admin.close()
    return register(server, f"{topic}-value", SCHEMA)


def _set_lag(server, topic: str, lag_ms: int) -> None:
    admin = AdminClient(server.config())
    try:
        resource = ConfigResource("topic", topic, incremental_configs=[
            ConfigEntry("iceberg.target.lag.ms", str(lag_ms))])
        admin.incremental_alter_configs([resource])[resource].result(30)
    finally:
        admin.close()


def _ends(server, topic: str) -> dict[int, int]:
    consumer = Consumer(server.config(**{"isolation.level": "read_committed"}))
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def _log_start(server, topic: str, partition: int) -> int:
    consumer = Consumer(server.config())
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)[0]
    finally:
        consumer.close()


def _table_offsets(server, topic: str) -> dict[int, int]:
    """{partition: next offset} of the table's current snapshot, read through
    the served REST catalog ({}: no table yet)."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    try:
        table = load_catalog("kafkalite", type="rest", uri=server.info["iceberg_rest"]) \
            .load_table(("kafkalite", topic))
    except NoSuchTableError:
        return {}
    return committed_offsets(table)


def rows(session, sql: str) -> list[tuple]:
    return [tuple(r.values()) for r in session.query(sql).read_all().to_pylist()]


def _check_answers(session, topic: str, model: list) -> None:
    """Every query's answer over ``topic`` against ``model``."""
    t = f'"{topic}"'
    assert rows(session, f"SELECT count(*) FROM {t}") == [(len(model),)]
    # each offset once, none missing: 0 .. n-1 per partition but the aborted ones' and markers'
    per_partition = Counter(r["partition"] for r in model)
    assert rows(session, f"SELECT partition, count(*), count(DISTINCT \"offset\") FROM {t} "
                         f"GROUP BY partition ORDER BY partition") == \
        [(p, n, n) for p, n in sorted(per_partition.items())]
    per_item = defaultdict(float)
    for r in model:
        if r["item"] is not None:
            per_item[r["item"]] += r["amount"]
    assert rows(session, f"SELECT item, sum(amount) FROM {t} WHERE item IS NOT NULL "
                         f"GROUP BY item ORDER BY item") == sorted(per_item.items())
    # every column of every record, in produced order per partition
    got = rows(session, f"SELECT partition, epoch_ms(\"timestamp\"), key, value, "
                        f"[(h.key, h.value) FOR h IN headers] FROM {t} "
                        f"ORDER BY partition, \"offset\"")
    want = sorted(((r["partition"], r["timestamp"], r["key"], r["value"],
                    [{"h.key": k, "h.value": v} for k, v in r["headers"]]) for r in model),
                  key=lambda r: (r[0], r[1]))
    assert [g[:4] for g in got] == [w[:4] for w in want]
    assert [[tuple(h.values()) for h in g[4] or ()] for g in got] == \
        [[tuple(h.values()) for h in w[4]] for w in want]


def test_an_iceberg_topic_is_read_from_its_table_files_and_its_log_after_them(server):
    topic = "sql.iceberg-" + str(int(time.time() * 1000) % 10**9)
    schema_id = _create(server, topic, 200)
    model: list = []
    _produce(server, topic, schema_id, model, 300)
    ends = _ends(server, topic)
    wait_until(lambda: _table_offsets(server, topic) == ends, 60,
               lambda: f"the table's offsets {_table_offsets(server, topic)} short of {ends}")
    in_table = len(model)
    # the log's first 50 records of partition 0 deleted: the table keeps them, and so the answer
    admin = AdminClient(server.config())
    try:
        deleted = TopicPartition(topic, 0, 50)
        admin.delete_records([deleted])[deleted].result(30)
    finally:
        admin.close()
    # no commit for an hour: the records produced now are the log's, past the table's last
    _set_lag(server, topic, 3_600_000)
    _produce(server, topic, schema_id, model, 100)
    session = Session(server.config(), server.info["schema_registry"])
    try:
        assert _log_start(server, topic, 0) == 50
        _check_answers(session, topic, model)
        assert _table_offsets(server, topic) == ends, "the table committed the seam's records"
        assert rows(session, f'SELECT count(*) FROM "{topic}"') == [(len(model),)]
        assert session.rows_from_table_files == in_table
    finally:
        session.close()


def test_an_iceberg_topic_without_its_table_yet_is_read_from_its_log(server):
    topic = "sql.iceberg-new-" + str(int(time.time() * 1000) % 10**9)
    schema_id = _create(server, topic, 3_600_000)
    model: list = []
    _produce(server, topic, schema_id, model, 120)
    session = Session(server.config(), server.info["schema_registry"])
    try:
        assert _table_offsets(server, topic) == {}
        assert rows(session, f'SELECT count(*) FROM "{topic}"') == [(len(model),)]
        # a leader whose first housekeeping tick finds records already there
        # takes it for a segment roll and commits at once, lag or no lag: the
        # table may appear meanwhile, and the check of the log alone is then moot
        if _table_offsets(server, topic) == {}:
            assert session.rows_from_table_files == 0
        _check_answers(session, topic, model)
    finally:
        session.close()
