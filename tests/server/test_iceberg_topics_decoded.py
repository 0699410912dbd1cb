"""Iceberg topics whose values are decoded through the schema registry
(Redpanda's ``value_schema_id_prefix`` and ``value_schema_latest``): records
produced by confluent-kafka's AvroSerializer (SchemaRegistryClient against
kafkalite's own registry) to the shared server, and the tables the
partition leaders keep read back with pyiceberg: the value's fields as
columns beside ``redpanda``, a newer schema's field added as a column
without rewriting the earlier data files, and the records that do not
decode in ``<topic>~dlq`` with their raw bytes, main and dead-letter
tables covering every offset once."""
from __future__ import annotations

import io
import json

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import wait_until

pytest.importorskip("pyiceberg")
fastavro = pytest.importorskip("fastavro")

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402
from iceberg_tables import load_table, table_offsets  # noqa: E402

CLICK_V1 = {"type": "record", "name": "Click", "namespace": "demo", "fields": [
    {"name": "user_id", "type": "int"},
    {"name": "page", "type": "string"},
    {"name": "referrer", "type": ["null", "string"], "default": None},
    {"name": "device", "type": {"type": "record", "name": "Device", "fields": [
        {"name": "os", "type": {"type": "enum", "name": "Os", "symbols": ["LINUX", "MAC"]}},
        {"name": "screen", "type": {"type": "array", "items": "int"}}]}},
    {"name": "tags", "type": {"type": "map", "values": "long"}},
    {"name": "score", "type": ["int", "string"]},
]}
# v2 adds a field with a default (BACKWARD compatible)
CLICK_V2 = {**CLICK_V1, "fields": CLICK_V1["fields"] + [
    {"name": "session", "type": "string", "default": "none"}]}


def _create(server, topic, mode, partitions=2):
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={
        "iceberg.mode": mode, "iceberg.target.lag.ms": "100"})])[topic].result(30)


def _click(i: int, v2: bool = False) -> dict:
    out = {"user_id": i, "page": f"/p/{i % 5}", "referrer": None if i % 3 else f"r{i}",
           "device": {"os": "MAC" if i % 2 else "LINUX", "screen": [i, i + 1]},
           "tags": {"n": i}, "score": i if i % 2 else f"s{i}"}
    if v2:
        out["session"] = f"sess-{i}"
    return out


def _serializer(server, schema):
    registry = SchemaRegistryClient({"url": server.info["schema_registry"]})
    return AvroSerializer(registry, json.dumps(schema))


def _produce(server, topic, values: list[tuple[int, bytes]]) -> None:
    producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap,
                            "enable.idempotence": True, "linger.ms": 5})
    for partition, value in values:
        producer.produce(topic, value, key=b"k", partition=partition)
    assert producer.flush(30) == 0


def _ends(server, topic, partitions=2):
    consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": topic})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def _wait_covered(server, topic, ends):
    """Until the topic's table holds every partition up to ``ends``."""
    wait_until(lambda: table_offsets(server.data_dir, topic) == ends, 60,
               lambda: f"the table's offsets {table_offsets(server.data_dir, topic)} "
                       f"short of the log's {ends}")


def _expected(row: dict) -> dict:
    """A Click as the table's columns hold it."""
    out = dict(row)
    out["tags"] = list(row["tags"].items())
    out["score"] = {"0": row["score"], "1": None} if isinstance(row["score"], int) \
        else {"0": None, "1": row["score"]}
    return out


def _rows(server, table: str) -> dict[tuple[int, int], dict]:
    rows = load_table(server.data_dir, table).scan().to_arrow().to_pylist()
    return {(r["redpanda"]["partition"], r["redpanda"]["offset"]): r for r in rows}


def _value_columns(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "redpanda"}


def test_values_are_decoded_into_columns_by_their_schema_id(server, topic_name):
    _create(server, topic_name, "value_schema_id_prefix")
    serialize = _serializer(server, CLICK_V1)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    clicks = [_click(i) for i in range(40)]
    _produce(server, topic_name, [(i % 2, serialize(c, ctx)) for i, c in enumerate(clicks)])
    ends = _ends(server, topic_name)
    _wait_covered(server, topic_name, ends)
    table = load_table(server.data_dir, topic_name)
    assert [f.name for f in table.schema().fields] == [
        "redpanda", "user_id", "page", "referrer", "device", "tags", "score"]
    rows = _rows(server, topic_name)
    # partition i % 2, offset i // 2
    assert {k: _value_columns(v) for k, v in rows.items()} == \
        {(i % 2, i // 2): _expected(c) for i, c in enumerate(clicks)}
