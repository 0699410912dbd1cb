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


def _create(server, topic, mode, partitions=2, lag_ms=100, **configs):
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config={
        "iceberg.mode": mode, "iceberg.target.lag.ms": str(lag_ms),
        **configs})])[topic].result(30)


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


def _data_files(server, table: str) -> set[str]:
    return {t.file.file_path for t in load_table(server.data_dir, table).scan().plan_files()}


def test_a_newer_schema_adds_a_column_without_rewriting_the_data_files(server, topic_name):
    _create(server, topic_name, "value_schema_id_prefix", partitions=1)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    v1 = _serializer(server, CLICK_V1)
    _produce(server, topic_name, [(0, v1(_click(i), ctx)) for i in range(10)])
    _wait_covered(server, topic_name, {0: 10})
    before = _data_files(server, topic_name)
    v2 = _serializer(server, CLICK_V2)
    _produce(server, topic_name, [(0, v2(_click(i, v2=True), ctx)) for i in range(10, 20)])
    _wait_covered(server, topic_name, {0: 20})
    table = load_table(server.data_dir, topic_name)
    assert [f.name for f in table.schema().fields][-1] == "session"
    assert before < _data_files(server, topic_name), "the earlier data files were rewritten"
    rows = _rows(server, topic_name)
    assert [rows[(0, o)]["session"] for o in range(20)] == \
        [None] * 10 + [f"sess-{i}" for i in range(10, 20)]
    assert [rows[(0, o)]["user_id"] for o in range(20)] == list(range(20))


def test_records_that_do_not_decode_land_in_the_dead_letter_table(server, topic_name):
    _create(server, topic_name, "value_schema_id_prefix")
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    good = _serializer(server, CLICK_V1)(_click(7), ctx)
    bad = {
        "no magic byte": b'{"user_id": 1}',
        "unknown id": b"\x00\x7f\xff\xff\xf0" + good[5:],
        "bad body": good[:5] + b"\xff",
        "bytes left over": good + b"\x00",
        "too short": b"\x00\x00",
    }
    values = []
    for i in range(30):
        values.append((i % 2, good))
        if i % 6 == 0:
            values.append((i % 2, list(bad.values())[(i // 6) % len(bad)]))
    values.append((1, None))        # a tombstone has no value to decode
    _produce(server, topic_name, values)
    ends = _ends(server, topic_name)
    _wait_covered(server, topic_name, ends)
    wait_until(lambda: table_offsets(server.data_dir, topic_name + "~dlq"), 30,
               "the dead-letter table")
    main = _rows(server, topic_name)
    dlq = _rows(server, topic_name + "~dlq")
    assert not set(main) & set(dlq), "offsets in both tables"
    assert sorted(set(main) | set(dlq)) == [(p, o) for p in (0, 1) for o in range(ends[p])]
    produced = {}
    for p in (0, 1):
        for o, (_, v) in enumerate([x for x in values if x[0] == p]):
            produced[(p, o)] = v
    assert {k: r["value"] for k, r in dlq.items()} == \
        {k: v for k, v in produced.items() if v != good}
    assert all(_value_columns(r) == _expected(_click(7)) for r in main.values())
    assert len(main) == 30


def test_with_invalid_record_action_drop_the_records_that_do_not_decode_go_nowhere(
        server, topic_name):
    """Redpanda's redpanda.iceberg.invalid.record.action=drop: the records
    that do not decode are in neither table (no dead-letter table is made),
    the others are in the topic's table, and the table covers the log."""
    _create(server, topic_name, "value_schema_id_prefix",
            **{"redpanda.iceberg.invalid.record.action": "drop"})
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    good = _serializer(server, CLICK_V1)(_click(7), ctx)
    values = [(i % 2, good if i % 3 else b"no magic byte") for i in range(30)]
    _produce(server, topic_name, values)
    ends = _ends(server, topic_name)
    _wait_covered(server, topic_name, ends)
    main = _rows(server, topic_name)
    assert sorted(main) == sorted((p, o) for p in (0, 1) for o, (_, v) in enumerate(
        [x for x in values if x[0] == p]) if v == good)
    assert table_offsets(server.data_dir, topic_name + "~dlq") == {}, "no dead-letter table"


def test_value_schema_latest_decodes_plain_avro_by_the_subjects_latest_schema(server,
                                                                                topic_name):
    SchemaRegistryClient({"url": server.info["schema_registry"]}).register_schema(
        f"{topic_name}-value",
        __import__("confluent_kafka.schema_registry", fromlist=["Schema"]).Schema(
            json.dumps(CLICK_V1), "AVRO"))
    _create(server, topic_name, "value_schema_latest", partitions=1)
    parsed = fastavro.parse_schema(CLICK_V1)

    def plain(row):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        return out.getvalue()
    framed = _serializer(server, CLICK_V1)(_click(3), SerializationContext(
        topic_name, MessageField.VALUE))
    _produce(server, topic_name, [(0, plain(_click(i))) for i in range(5)] + [(0, framed)])
    _wait_covered(server, topic_name, {0: 6})
    rows = _rows(server, topic_name)
    assert {o: _value_columns(rows[(0, o)]) for o in range(5)} == \
        {i: _expected(_click(i)) for i in range(5)}
    # the wire format's prefix is not plain Avro: Redpanda's value_schema_latest refuses it
    wait_until(lambda: table_offsets(server.data_dir, topic_name + "~dlq"), 30,
               "the dead-letter table")
    assert [r["value"] for r in _rows(server, topic_name + "~dlq").values()] == [framed]


ORDER_V1 = {"type": "record", "name": "Order", "namespace": "demo", "fields": [
    {"name": "order_id", "type": "long"},
    {"name": "amount", "type": "long"}]}
# amount long -> string: no Iceberg promotion takes it (registered under NONE)
ORDER_V2 = {**ORDER_V1, "fields": [ORDER_V1["fields"][0], {"name": "amount", "type": "string"}]}
# a field added with a default: the table takes it
ORDER_V3 = {**ORDER_V1, "fields": ORDER_V1["fields"] + [
    {"name": "note", "type": "string", "default": ""}]}


def test_records_of_a_schema_the_table_cannot_take_go_to_the_dead_letter_table(server,
                                                                                  topic_name):
    _create(server, topic_name, "value_schema_id_prefix", partitions=1)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    v1 = _serializer(server, ORDER_V1)
    first = [(0, v1({"order_id": i, "amount": 10 * i}, ctx)) for i in range(6)]
    _produce(server, topic_name, first)
    _wait_covered(server, topic_name, {0: 6})
    SchemaRegistryClient({"url": server.info["schema_registry"]}).set_compatibility(
        f"{topic_name}-value", "NONE")
    v2 = _serializer(server, ORDER_V2)
    v3 = _serializer(server, ORDER_V3)
    incompatible = [(0, v2({"order_id": i, "amount": f"${i}"}, ctx)) for i in range(6, 10)]
    later = [(0, v1({"order_id": i, "amount": 10 * i}, ctx)) for i in range(10, 13)] + \
        [(0, v3({"order_id": i, "amount": 10 * i, "note": f"n{i}"}, ctx)) for i in range(13, 16)]
    _produce(server, topic_name, incompatible + later)
    # the old code failed this commit for ever (union_by_name refusing long -> string):
    # the table stayed at offset 6
    # (each commit writes the dead-letter table first: it is complete once the table is)
    _wait_covered(server, topic_name, {0: 16})
    main = _rows(server, topic_name)
    dlq = _rows(server, topic_name + "~dlq")
    assert not set(main) & set(dlq), "offsets in both tables"
    assert sorted(set(main) | set(dlq)) == [(0, o) for o in range(16)]
    values = [v for _, v in first + incompatible + later]
    assert {k: r["value"] for k, r in dlq.items()} == {(0, o): values[o] for o in range(6, 10)}
    assert load_table(server.data_dir, topic_name).schema().find_field("amount") \
        .field_type.__class__.__name__ == "LongType"
    assert [(rows["order_id"], rows["amount"], rows["note"])
            for _, rows in sorted(main.items())] == \
        [(i, 10 * i, None) for i in range(13)
         if not 6 <= i < 10] + [(i, 10 * i, f"n{i}") for i in range(13, 16)]


STOCK_V1 = {"type": "record", "name": "Stock", "namespace": "demo", "fields": [
    {"name": "qty", "type": "int"}]}
# int -> long: Avro's and Iceberg's promotion (BACKWARD compatible), no column added
STOCK_V2 = {**STOCK_V1, "fields": [{"name": "qty", "type": "long"}]}


def test_a_newer_schema_that_widens_int_to_long_widens_the_column(server, topic_name):
    _create(server, topic_name, "value_schema_id_prefix", partitions=1)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    v1 = _serializer(server, STOCK_V1)
    _produce(server, topic_name, [(0, v1({"qty": i}, ctx)) for i in range(3)])
    _wait_covered(server, topic_name, {0: 3})
    v2 = _serializer(server, STOCK_V2)
    big = [1 << 40, -(1 << 33)]
    _produce(server, topic_name, [(0, v2({"qty": q}, ctx)) for q in big])
    # the old code added columns only, and a long past int's range stopped the partition
    _wait_covered(server, topic_name, {0: 5})
    assert load_table(server.data_dir, topic_name).schema().find_field("qty") \
        .field_type.__class__.__name__ == "LongType"
    rows = _rows(server, topic_name)
    assert [rows[(0, o)]["qty"] for o in range(5)] == [0, 1, 2] + big
    assert not table_offsets(server.data_dir, topic_name + "~dlq")


VISIT_V1 = {"type": "record", "name": "Visit", "namespace": "demo", "fields": [
    {"name": "user", "type": "string"},
    {"name": "n", "type": "int"}]}
# v2: an optional field; v3: a field with a default, and n widened int -> long
VISIT_V2 = {**VISIT_V1, "fields": VISIT_V1["fields"] + [
    {"name": "page", "type": ["null", "string"], "default": None}]}
VISIT_V3 = {**VISIT_V2, "fields": [VISIT_V1["fields"][0], {"name": "n", "type": "long"},
                                   VISIT_V2["fields"][2],
                                   {"name": "country", "type": "string", "default": "nl"}]}


def _visits(serializers, ctx, first: int, count: int, order: tuple[int, ...]):
    """``count`` Visits from ``first`` on, the i-th under schema order[i % len(order)]
    (1, 2, 3), with the row the table should hold for each."""
    values, expected = [], []
    for i in range(first, first + count):
        version = order[i % len(order)]
        row = {"user": f"u{i}", "n": i, "page": None, "country": None}
        value = {"user": row["user"], "n": i}
        if version >= 2:
            row["page"] = value["page"] = f"/p/{i}"
        if version == 3:
            row["n"] = value["n"] = i + (1 << 40)
            row["country"] = value["country"] = f"c{i % 4}"
        values.append((0, serializers[version](value, ctx)))
        expected.append(row)
    return values, expected


def test_schemas_evolved_in_any_order_before_and_between_commits(server, topic_name):
    # one commit of records under three schemas the table has never seen: the
    # old code unioned each into one schema update against the table's schema
    # before it, so each added `user` again with a new field id, and every
    # commit failed for ever ("multiple fields for name user: 10 and 12")
    _create(server, topic_name, "value_schema_id_prefix", partitions=1, lag_ms=3000)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    serializers = {v: _serializer(server, s)
                   for v, s in ((1, VISIT_V1), (2, VISIT_V2), (3, VISIT_V3))}
    first, expected = _visits(serializers, ctx, 0, 30, (1,) * 10 + (2,) * 10 + (3,) * 10)
    _produce(server, topic_name, first)
    _wait_covered(server, topic_name, {0: 30})
    table = load_table(server.data_dir, topic_name)
    assert [s.summary["kafkalite.next-offset.0"] for s in table.snapshots()] == ["30"], \
        "the three schemas were not in one commit"
    # between commits, the three in turns (a record of v1 after v3's)
    later, more = _visits(serializers, ctx, 30, 30, (3, 1, 2))
    _produce(server, topic_name, later)
    _wait_covered(server, topic_name, {0: 60})
    table = load_table(server.data_dir, topic_name)
    assert [f.name for f in table.schema().fields] == \
        ["redpanda", "user", "n", "page", "country"]
    assert table.schema().find_field("n").field_type.__class__.__name__ == "LongType"
    rows = _rows(server, topic_name)
    assert [_value_columns(rows[(0, o)]) for o in range(60)] == expected + more
    assert not table_offsets(server.data_dir, topic_name + "~dlq")
