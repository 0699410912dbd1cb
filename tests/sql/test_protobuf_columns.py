"""Protobuf values and registry-decoded keys as columns (kafkalite/sql/
protobuf_columns.py, values.py) against the shared server: each query's
answer is compared with a Python model of the records produced.

A Protobuf topic: values of a registered ``Order`` message (scalars, a
proto3 ``optional``, an enum, a repeated field, a nested message, a
uint64) in Confluent's wire format, keyed by a registered Protobuf
``OrderKey``; an older version's values (one field fewer) read into the
same columns; a tombstone and a value not in the wire format are rows of
nulls. An Avro topic keyed by an Avro record and a JSON Schema topic keyed
by a JSON object get their keys' fields as ``key_<field>`` columns.
"""
from __future__ import annotations

import io
import json
import urllib.request

import fastavro
import pytest

from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.client.serialization import protobuf_schema_classes
from kafkalite.sql import Session
from kafkalite.sql.values import registry_client

ORDER_V1 = """syntax = "proto3";
package shop;
message Order {
  string item = 1;
  double amount = 2;
}
"""
ORDER = """syntax = "proto3";
package shop;
message Order {
  string item = 1;
  double amount = 2;
  int32 qty = 3;
  optional string note = 4;
  Status status = 5;
  repeated string tags = 6;
  Address ship_to = 7;
  uint64 big = 8;
  enum Status { NEW = 0; PAID = 1; }
  message Address { string city = 1; }
}
"""
ORDER_KEY = """syntax = "proto3";
package shop;
message OrderKey { int64 id = 1; string region = 2; }
"""


def register(server, subject: str, schema: str, kind: str | None = None) -> int:
    body = {"schema": schema, **({"schemaType": kind} if kind else {})}
    request = urllib.request.Request(
        f"{server.info['schema_registry']}/subjects/{subject}/versions", method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())["id"]


def message_class(server, schema_id: int):
    client = registry_client(server.info["schema_registry"])
    registered = client.get_schema(schema_id, fmt="serialized")
    return protobuf_schema_classes(registered.schema_str, [], None)((0,))


def proto_wire(schema_id: int, msg) -> bytes:
    return b"\0" + schema_id.to_bytes(4, "big") + b"\0" + msg.SerializeToString()


def create(server, topic: str) -> None:
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    admin.close()


@pytest.fixture
def session(server):
    s = Session(server.config(), server.info["schema_registry"])
    yield s
    s.close()


def answer(session, sql: str) -> list[dict]:
    return session.query(sql).read_all().to_pylist()


def test_protobuf_values_and_keys_read_as_the_model(server, session, topic_name):
    create(server, topic_name)
    v1 = register(server, f"{topic_name}-value", ORDER_V1, "PROTOBUF")
    v2 = register(server, f"{topic_name}-value", ORDER, "PROTOBUF")
    key_id = register(server, f"{topic_name}-key", ORDER_KEY, "PROTOBUF")
    old, order, order_key = (message_class(server, i) for i in (v1, v2, key_id))
    model, producer = [], Producer(server.config())
    for i in range(40):
        row = {"key_id": i, "key_region": ("eu", "us")[i % 2], "item": f"item-{i % 3}",
               "amount": i / 4, "qty": i % 5, "note": None if i % 4 else f"note {i}",
               "status": ("NEW", "PAID")[i % 2], "tags": [f"t{j}" for j in range(i % 3)],
               "ship_to": None if i % 2 else {"city": f"city-{i}"}, "big": 2**63 + i}
        msg = order(item=row["item"], amount=row["amount"], qty=row["qty"],
                    status=i % 2, tags=row["tags"], big=row["big"])
        if row["note"] is not None:
            msg.note = row["note"]
        if row["ship_to"] is not None:
            msg.ship_to.city = row["ship_to"]["city"]
        model.append(row)
        producer.produce(topic_name, proto_wire(v2, msg), key=proto_wire(
            key_id, order_key(id=i, region=row["key_region"])))
    # an older version's value: the fields it lacks are nulls, proto3's defaults the others
    producer.produce(topic_name, proto_wire(v1, old(item="old", amount=1.5)),
                     key=proto_wire(key_id, order_key(id=100, region="eu")))
    model.append({"key_id": 100, "key_region": "eu", "item": "old", "amount": 1.5, "qty": None,
                  "note": None, "status": None, "tags": None, "ship_to": None, "big": None})
    producer.produce(topic_name, None, key=b"raw key")          # a tombstone, a raw key
    producer.produce(topic_name, b"not protobuf", key=None)
    assert producer.flush(30) == 0

    got = answer(session, f'SELECT key_id, key_region, item, amount, qty, note, status, tags, '
                          f'ship_to, big FROM "{topic_name}" ORDER BY key_id NULLS LAST')
    expected = [{**r, "tags": None if r["tags"] is None else json.dumps(r["tags"]),
                 "ship_to": None if r["ship_to"] is None else json.dumps(r["ship_to"])}
                for r in sorted(model, key=lambda r: r["key_id"])]
    nulls = dict.fromkeys(expected[0])
    assert got == expected + [nulls, nulls]
    # the columns' types, and a group-by and filter over key and value columns
    types = {r["column_name"]: r["column_type"] for r in answer(
        session, f'SELECT column_name, column_type FROM (DESCRIBE "{topic_name}")')}
    assert [types[c] for c in ("key_id", "amount", "qty", "status", "big", "tags")] == \
        ["BIGINT", "DOUBLE", "INTEGER", "VARCHAR", "UBIGINT", "VARCHAR"]
    per_region = {}
    for r in model:
        if r["qty"] is not None and r["qty"] > 1:
            per_region[r["key_region"]] = per_region.get(r["key_region"], 0) + r["amount"]
    assert answer(session, f'SELECT key_region, sum(amount) AS total FROM "{topic_name}" '
                           f"WHERE qty > 1 GROUP BY 1 ORDER BY 1") == \
        [{"key_region": k, "total": v} for k, v in sorted(per_region.items())]


def test_avro_and_json_schema_keys_are_columns(server, session, topic_name):
    key_schema = {"type": "record", "name": "CustomerKey", "fields": [
        {"name": "customer", "type": "long"}, {"name": "country", "type": "string"}]}
    avro_topic, json_topic = topic_name + "-avro", topic_name + "-json"
    for t in (avro_topic, json_topic):
        create(server, t)
    avro_id = register(server, f"{avro_topic}-key", json.dumps(key_schema))
    json_id = register(server, f"{json_topic}-key", json.dumps({
        "type": "object", "properties": {"customer": {"type": "integer"},
                                         "country": {"type": "string"}}}), "JSON")
    producer = Producer(server.config())
    model = [{"customer": i, "country": ("fr", "de", "it")[i % 3]} for i in range(30)]
    for row in model:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, fastavro.parse_schema(key_schema), row)
        producer.produce(avro_topic, b"v", key=b"\0" + avro_id.to_bytes(4, "big") + out.getvalue())
        producer.produce(json_topic, b"v", key=b"\0" + json_id.to_bytes(4, "big") +
                         json.dumps(row).encode())
    assert producer.flush(30) == 0
    per_country = {}
    for row in model:
        per_country[row["country"]] = per_country.get(row["country"], 0) + row["customer"]
    for t in (avro_topic, json_topic):
        assert answer(session, f'SELECT key_country, sum(key_customer) AS s FROM "{t}" '
                               f"GROUP BY 1 ORDER BY 1") == \
            [{"key_country": c, "s": s} for c, s in sorted(per_country.items())]
        # the value has no subject: the raw bytes, as before
        assert answer(session, f'SELECT DISTINCT value FROM "{t}"') == [{"value": b"v"}]
