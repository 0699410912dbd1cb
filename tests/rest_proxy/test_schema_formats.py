"""The proxy's registry formats (kafkalite/rest_proxy/schemas.py) over real
HTTP against a real server and its own schema registry: v2 produce with
``application/vnd.kafka.{avro,protobuf,jsonschema}.v2+json`` read back by
confluent-kafka's own deserializers, records written by confluent-kafka's
serializers read through v2 consumer instances of those formats, v3's
records with ``schema_id`` and ``type``/``schema``, and Confluent's error
codes (42201, 42202, 42203, 42205, 40801, 415, 40601).

One server for the module (module_server): its topics are its own.
"""
from __future__ import annotations

import base64
import json
import time

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from proxy_client import V2, call

AVRO = "application/vnd.kafka.avro.v2+json"
PROTOBUF = "application/vnd.kafka.protobuf.v2+json"
JSONSCHEMA = "application/vnd.kafka.jsonschema.v2+json"
ORDER = json.dumps({"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "item", "type": "string"}]})
ORDER_JSON = json.dumps({"type": "object", "properties": {
    "id": {"type": "integer"}, "item": {"type": "string"}},
    "required": ["id", "item"], "additionalProperties": False})
ORDER_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Order {\n  int64 id = 1;\n' \
              '  string item = 2;\n}\n'


def order_class():
    """shop.Order as a generated class would be, for confluent-kafka's
    Protobuf serializer and deserializer."""
    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="shop", syntax="proto3")
    m = fdp.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, json_name="id")
    m.field.add(name="item", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, json_name="item")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


@pytest.fixture(scope="module")
def proxy(module_server):
    url = module_server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    for name in ("avro", "avro-in", "proto", "proto-in", "js", "js-in", "v3", "bad", "unions",
                 "proto-refs"):
        assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                    {"topic_name": name, "partitions_count": 1})[0] == 201
    registry = SchemaRegistryClient({"url": module_server.info["schema_registry"]})
    return url, cluster, registry, module_server


def raw_records(server, topic, want, deadline_s=30.0):
    """The topic's records as bytes, by kafkalite's plain Consumer."""
    from kafkalite.client import Consumer
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": f"raw-{topic}-{time.time()}",
                  "auto.offset.reset": "earliest"})
    try:
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + deadline_s
        while len(got) < want and time.monotonic() < deadline:
            got += [m for m in c.consume(100, 1.0) if m.error() is None]
        return got
    finally:
        c.close()


def produce_raw(server, topic, values, key=None):
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap})
    for v in values:
        p.produce(topic, v, key)
    p.flush(30)
    p.close()


def read_instance(url, group, fmt, topic, want):
    assert call(f"{url}/consumers/{group}", "POST", {"name": "i", "format": fmt,
                                                     "auto.offset.reset": "earliest"},
                content_type=V2)[0] == 200
    base = f"{url}/consumers/{group}/instances/i"
    assert call(f"{base}/subscription", "POST", {"topics": [topic]}, content_type=V2)[0] == 204
    accept = f"application/vnd.kafka.{fmt}.v2+json"
    got, deadline = [], time.monotonic() + 30
    while len(got) < want and time.monotonic() < deadline:
        status, records, ctype = call(f"{base}/records?timeout=1000", accept=accept)
        assert status == 200 and ctype == accept, records
        got += records
    call(base, "DELETE", content_type=V2)
    return got


CASES = {"avro": (AVRO, ORDER, "avro"), "protobuf": (PROTOBUF, ORDER_PROTO, "proto"),
         "jsonschema": (JSONSCHEMA, ORDER_JSON, "js")}


@pytest.mark.parametrize("fmt", list(CASES))
def test_v2_produce_registers_under_topic_value_and_confluent_deserializer_reads_it(proxy, fmt):
    url, _, registry, server = proxy
    ctype, schema, topic = CASES[fmt]
    body = {"value_schema": schema, "records": [{"value": {"id": i, "item": f"i{i}"}}
                                                 for i in range(3)]}
    status, answer, got_type = call(f"{url}/topics/{topic}", "POST", body, content_type=ctype)
    assert status == 200 and got_type == V2, answer
    assert answer["key_schema_id"] is None
    assert answer["value_schema_id"] == registry.get_latest_version(f"{topic}-value").schema_id
    assert [o["offset"] for o in answer["offsets"]] == [0, 1, 2]
    ctx = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        decode = AvroDeserializer(registry)
    elif fmt == "jsonschema":
        decode = JSONDeserializer(None, schema_registry_client=registry)
    else:
        decode = ProtobufDeserializer(order_class(), {"use.deprecated.format": False})
    values = [decode(m.value(), ctx) for m in raw_records(server, topic, 3)]
    if fmt == "protobuf":
        values = [{"id": v.id, "item": v.item} for v in values]
    assert values == [{"id": i, "item": f"i{i}"} for i in range(3)]
    # the same schema again, by id this time: the same id, nothing new registered
    again = call(f"{url}/topics/{topic}", "POST", {"value_schema_id": answer["value_schema_id"],
                                                   "records": [{"value": {"id": 9, "item": "x"}}]},
                 content_type=ctype)[1]
    assert again["value_schema_id"] == answer["value_schema_id"]
    assert registry.get_versions(f"{topic}-value") == [1]


@pytest.mark.parametrize("fmt", list(CASES))
def test_confluent_serializer_records_read_through_a_v2_instance(proxy, fmt):
    url, _, registry, server = proxy
    ctype, schema, topic = CASES[fmt]
    topic += "-in"
    ctx = SerializationContext(topic, MessageField.VALUE)
    if fmt == "avro":
        values = [AvroSerializer(registry, ORDER)({"id": i, "item": f"s{i}"}, ctx)
                  for i in range(3)]
    elif fmt == "jsonschema":
        values = [JSONSerializer(ORDER_JSON, registry)({"id": i, "item": f"s{i}"}, ctx)
                  for i in range(3)]
    else:
        cls = order_class()
        ser = ProtobufSerializer(cls, registry, {"use.deprecated.format": False})
        values = [ser(cls(id=i, item=f"s{i}"), ctx) for i in range(3)]
    produce_raw(server, topic, values)
    got = read_instance(url, f"g-{topic}", fmt, topic, 3)
    expect = [{"id": i, "item": f"s{i}"} for i in range(3)]
    if fmt == "protobuf":       # protobuf's JSON mapping: an int64 is a JSON string
        expect = [{"id": str(i), "item": f"s{i}"} for i in range(3)]
    assert [r["value"] for r in got] == expect
    assert [r["offset"] for r in got] == [0, 1, 2] and all(r["key"] is None for r in got)


def test_v3_records_with_a_schema_id_and_with_a_schema_text(proxy):
    url, cluster, registry, server = proxy
    records = f"{url}/v3/clusters/{cluster}/topics/v3/records"
    status, answer, _ = call(records, "POST", {"value": {
        "type": "AVRO", "schema": ORDER, "data": {"id": 1, "item": "a"}}})
    assert status == 200, answer
    sid = registry.get_latest_version("v3-value").schema_id
    assert answer["value"] == {"type": "AVRO", "size": 8, "subject": "v3-value",
                               "schema_id": sid}
    status, answer, _ = call(records, "POST", {"value": {"schema_id": sid,
                                                         "data": {"id": 2, "item": "b"}}})
    assert status == 200 and answer["value"]["schema_id"] == sid, answer
    status, answer, _ = call(records, "POST", {"value": {"subject": "v3-value",
                                                         "schema_version": 1,
                                                         "data": {"id": 3, "item": "c"}}})
    assert status == 200 and answer["offset"] == 2, answer
    decode = AvroDeserializer(registry)
    ctx = SerializationContext("v3", MessageField.VALUE)
    assert [decode(m.value(), ctx)["id"] for m in raw_records(server, "v3", 3)] == [1, 2, 3]


MONEY_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Money {\n  int64 cents = 1;\n}\n'
PAYMENT_PROTO = ('syntax = "proto3";\npackage shop;\nimport "money.proto";\n'
                 'import "google/protobuf/timestamp.proto";\n'
                 'message Payment {\n  Money amount = 1;\n  google.protobuf.Timestamp at = 2;\n'
                 '  message Note {\n    string text = 1;\n  }\n  Note note = 3;\n}\n')


def test_protobuf_with_a_reference_and_a_well_known_type(proxy):
    """A Protobuf schema importing another registered schema (a reference)
    and google/protobuf/timestamp.proto: written through v3 by its id and
    read back through a v2 protobuf instance, the imports resolved through
    the registry and protobuf's own types."""
    url, cluster, registry, server = proxy
    headers = {"Content-Type": "application/vnd.schemaregistry.v1+json"}
    reg = server.info["schema_registry"]
    status, money, _ = call(f"{reg}/subjects/money/versions", "POST",
                            {"schemaType": "PROTOBUF", "schema": MONEY_PROTO}, headers=headers)
    assert status == 200, money
    status, payment, _ = call(f"{reg}/subjects/proto-refs-value/versions", "POST", {
        "schemaType": "PROTOBUF", "schema": PAYMENT_PROTO,
        "references": [{"name": "money.proto", "subject": "money", "version": 1}]},
        headers=headers)
    assert status == 200, payment
    records = f"{url}/v3/clusters/{cluster}/topics/proto-refs/records"
    data = [{"amount": {"cents": str(100 + i)}, "at": f"2026-11-28T0{i}:00:00Z",
             "note": {"text": f"n{i}"}} for i in range(3)]
    for d in data:
        status, answer, _ = call(records, "POST", {"value": {"schema_id": payment["id"],
                                                             "data": d}})
        assert status == 200 and answer["value"]["schema_id"] == payment["id"], answer
    got = read_instance(url, "g-proto-refs", "protobuf", "proto-refs", 3)
    assert [r["value"] for r in got] == data


# unions of a primitive and of two records, bytes: what Avro's JSON encoding spells differently
PARCEL = json.dumps({"type": "record", "name": "Parcel", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "to", "type": ["null",
                            {"type": "record", "name": "Home", "fields": [
                                {"name": "street", "type": "string"}]},
                            {"type": "record", "name": "Shop", "fields": [
                                {"name": "street", "type": "string"}]}]},
    {"name": "tag", "type": "bytes"}]})


def test_avro_is_read_and_written_in_avros_json_encoding(proxy):
    """Confluent's proxy reads and writes Avro data as Avro's JSON encoding
    (Avro's JsonDecoder/JsonEncoder): a union's non-null value as
    {"<type>": value} (a record's full name), bytes as a string of code
    points 0-255. A plain union value is refused (42203), as Confluent's
    is ("Expected start-union")."""
    url, cluster, registry, server = proxy
    topic = f"{url}/topics/unions"
    given = [{"id": 1, "note": {"string": "fragile"}, "to": {"shop.Shop": {"street": "Main"}},
              "tag": "\u00ff\u0000A"},
             {"id": 2, "note": None, "to": None, "tag": ""}]
    status, answer, _ = call(topic, "POST", {"value_schema": PARCEL,
                                             "records": [{"value": v} for v in given]},
                             content_type=AVRO)
    assert status == 200, answer
    # v3 takes the same encoding
    status, answer, _ = call(f"{url}/v3/clusters/{cluster}/topics/unions/records", "POST",
                             {"value": {"type": "AVRO", "schema": PARCEL, "data": {
                                 "id": 3, "note": {"string": "v3"},
                                 "to": {"shop.Home": {"street": "Elm"}}, "tag": "\u0001"}}})
    assert status == 200, answer
    decode = AvroDeserializer(registry, return_record_name=True)
    ctx = SerializationContext("unions", MessageField.VALUE)
    assert [decode(m.value(), ctx) for m in raw_records(server, "unions", 3)] == [
        {"id": 1, "note": "fragile", "to": ("shop.Shop", {"street": "Main"}),
         "tag": b"\xff\x00A"},
        {"id": 2, "note": None, "to": None, "tag": b""},
        {"id": 3, "note": "v3", "to": ("shop.Home", {"street": "Elm"}), "tag": b"\x01"}]
    # read back through a v2 avro instance: the same encoding, the branch written named
    got = read_instance(url, "g-unions", "avro", "unions", 3)
    assert [r["value"] for r in got] == given + [
        {"id": 3, "note": {"string": "v3"}, "to": {"shop.Home": {"street": "Elm"}},
         "tag": "\u0001"}]
    # a union's value given plainly is not Avro's JSON encoding: refused, nothing produced
    status, answer, _ = call(topic, "POST", {"value_schema": PARCEL, "records": [
        {"value": {"id": 4, "note": "plain", "to": None, "tag": ""}}]}, content_type=AVRO)
    assert (status, answer["error_code"]) == (422, 42203), answer
    assert "union" in answer["message"]
    assert len(raw_records(server, "unions", 4, deadline_s=2)) == 3


def test_confluent_error_codes_of_the_registry_formats(proxy):
    url, cluster, registry, _ = proxy
    topic = f"{url}/topics/bad"
    status, answer, _ = call(topic, "POST", {"records": [{"value": {"id": 1}}]},
                             content_type=AVRO)
    assert (status, answer["error_code"]) == (422, 42202), answer
    status, answer, _ = call(topic, "POST", {"value_schema": ORDER, "records": [
        {"key": 1, "value": {"id": 1, "item": "x"}}]}, content_type=AVRO)
    assert (status, answer["error_code"]) == (422, 42201), answer
    status, answer, _ = call(topic, "POST", {"value_schema": '{"type": "recrd"}',
                                             "records": [{"value": {}}]}, content_type=AVRO)
    assert (status, answer["error_code"]) == (422, 42205), answer
    # a value that does not fit its schema: nothing produced, 42203
    status, answer, _ = call(topic, "POST", {"value_schema": ORDER, "records": [
        {"value": {"id": 1, "item": "ok"}}, {"value": {"id": "one", "item": "x"}}]},
        content_type=AVRO)
    assert (status, answer["error_code"]) == (422, 42203), answer
    status, answer, _ = call(topic, "POST", {"value_schema_id": 99999,
                                             "records": [{"value": {}}]}, content_type=AVRO)
    assert (status, answer["error_code"]) == (408, 40801), answer
    status, answer, _ = call(topic, "POST", {"records": []},
                             content_type="application/vnd.kafka.thrift.v2+json")
    assert (status, answer["error_code"]) == (415, 415), answer
    status, answer, _ = call(f"{url}/v3/clusters/{cluster}/topics/bad/records", "POST",
                             {"value": {"schema_id": 99999, "data": {}}})
    assert answer["error_code"] == 40801, answer
    # an avro instance asked for json records: 40601
    assert call(f"{url}/consumers/g-bad", "POST", {"name": "i", "format": "avro"},
                content_type=V2)[0] == 200
    base = f"{url}/consumers/g-bad/instances/i"
    assert call(f"{base}/subscription", "POST", {"topics": ["bad"]}, content_type=V2)[0] == 204
    status, answer, _ = call(f"{base}/records?timeout=10",
                             accept="application/vnd.kafka.json.v2+json")
    assert (status, answer["error_code"]) == (406, 40601), answer
    call(base, "DELETE", content_type=V2)


def test_bad_schema_input_is_a_confluent_error_never_a_500(proxy):
    url, cluster, _, server = proxy
    for name in ("bad-proto", "bad-js", "bad-read"):      # a subject each: no evolution
        assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                    {"topic_name": name, "partitions_count": 1})[0] == 201
    topic, records = f"{url}/topics/bad", f"{url}/v3/clusters/{cluster}/topics/bad/records"
    answers = [
        call(topic, "POST", {"value_schema_id": "one", "records": [{"value": {}}]},
             content_type=AVRO),
        call(topic, "POST", {"value_schema": 12, "records": [{"value": {}}]},
             content_type=AVRO),
        call(topic, "POST", {"value_schema": "message {", "records": [{"value": {}}]},
             content_type=PROTOBUF),
        call(topic, "POST", {"value_schema": '{"type": 5}', "records": [{"value": {}}]},
             content_type=JSONSCHEMA),
        call(f"{url}/topics/bad-proto", "POST", {"value_schema": ORDER_PROTO,
                                                 "records": [{"value": {"id": "x"}}]},
             content_type=PROTOBUF),
        call(f"{url}/topics/bad-js", "POST", {"value_schema": ORDER_JSON,
                                              "records": [{"value": {"id": 1}}]},
             content_type=JSONSCHEMA),
        call(records, "POST", {"value": {"schema_id": "x", "data": {}}}),
        call(records, "POST", {"value": {"type": "PROTOBUF", "schema": "garbage", "data": {}}}),
        call(records, "POST", {"value": {"subject": "bad-value", "schema_version": "x",
                                         "data": {}}}),
        call(records, "POST", {"value": {"schema": ORDER, "data": {}}}),
    ]
    codes = [(status, answer.get("error_code")) for status, answer, _ in answers]
    assert codes == [(400, 400), (422, 42205), (422, 42205), (422, 42205), (422, 42203),
                     (422, 42203), (400, 400), (422, 42205), (400, 400), (400, 400)], answers
    # JSON records read by an avro instance: 50002 naming the record, not a 500
    produce_raw(server, "bad-read", [b'{"plain": "json"}'])
    assert call(f"{url}/consumers/g-bad2", "POST", {"name": "i", "format": "avro",
                                                     "auto.offset.reset": "earliest"},
                content_type=V2)[0] == 200
    base = f"{url}/consumers/g-bad2/instances/i"
    assert call(f"{base}/subscription", "POST", {"topics": ["bad-read"]},
                content_type=V2)[0] == 204
    deadline, answer = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        status, answer, _ = call(f"{base}/records?timeout=1000", accept=AVRO)
        if status != 200 or answer:
            break
    assert (status, answer["error_code"]) == (500, 50002) and "bad-read-0@0" in answer["message"], \
        answer
    call(base, "DELETE", content_type=V2)
