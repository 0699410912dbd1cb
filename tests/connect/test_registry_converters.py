"""Confluent's schema-registry converters (AvroConverter, ProtobufConverter,
JsonSchemaConverter) against kafkalite's registry and confluent-kafka's own
serializers: a Connect source writes what confluent-kafka's deserializers
read, confluent-kafka's serializers write what a Connect sink reads, and a
record whose schema id the registry does not know goes through Connect's
error tolerance to the dead-letter queue.

The session's shared server; each test has its own topic, so its own
subjects (``<topic>-value``).
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from connect_helpers import read_to_end
from registry_plugins import PUT, ROW, row

from harness import create, wait_until
from kafkalite.connect.converters import converter_from_config
from kafkalite.connect.data import Field, Schema
from kafkalite.connect.errors import DataException

CONVERTERS = {"avro": "io.confluent.connect.avro.AvroConverter",
              "protobuf": "io.confluent.connect.protobuf.ProtobufConverter",
              "json": "io.confluent.connect.json.JsonSchemaConverter"}
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}
STRING = "org.apache.kafka.connect.storage.StringConverter"


@pytest.fixture
def registry(server):
    return SchemaRegistryClient({"url": server.info["schema_registry"]})


def converter(server, fmt, **settings):
    config = {"value.converter": CONVERTERS[fmt],
              "value.converter.schema.registry.url": server.info["schema_registry"],
              **{f"value.converter.{k}": v for k, v in settings.items()}}
    return converter_from_config(config, "value.converter", False, "")


def consume(server, topic, count, deserialize) -> list:
    """``count`` values of ``topic`` read with confluent-kafka's consumer and
    decoded by ``deserialize``."""
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    try:
        def more():
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                assert msg.value()[0] == 0          # Confluent's wire format: magic byte 0
                out.append(deserialize(msg.value(),
                                       SerializationContext(topic, MessageField.VALUE)))
            return len(out) >= count
        wait_until(more, timeout=30, message=lambda: f"{count} records, {len(out)} read")
    finally:
        consumer.close()
    return out


def produce(server, topic, values, serialize):
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for v in values:
        producer.produce(topic, v if isinstance(v, bytes) else
                         serialize(v, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(20) == 0


def message_class(file_proto, name):
    from google.protobuf import message_factory
    from kafkalite.connect.protobuf_data import proto_pool
    pool = proto_pool()     # the well-known files (confluent.type.Decimal's as this version has it)
    pool.Add(file_proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


# ---- the converter alone, against the registry ---------------------------------------------

@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json"])
def test_a_struct_of_every_type_round_trips_through_the_converter(server, registry, topic_name,
                                                                  fmt):
    values = [row(i) for i in range(4)]
    out = converter(server, fmt)
    datas = [out.from_connect_data(topic_name, ROW, v) for v in values]
    latest = registry.get_latest_version(f"{topic_name}-value")
    assert latest.schema.schema_type == SCHEMA_TYPES[fmt]
    assert {d[1:5] for d in datas} == {latest.schema_id.to_bytes(4, "big")}
    back = converter(server, fmt)         # another converter: the schema from the registry
    read = [back.to_connect_data(topic_name, d) for d in datas]
    assert [v for _, v in read] == values
    schema = read[0][0]
    assert [f.name for f in schema.fields] == [f.name for f in ROW.fields]
    if fmt != "protobuf":
        # Avro and JSON Schema carry the whole Connect schema (connect.* properties);
        # Protobuf's message makes every message-typed field optional (as Confluent's)
        assert schema == ROW
    assert back.to_connect_data(topic_name, None) == (None, None)
    assert out.from_connect_data(topic_name, ROW, None) is None


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_auto_register_off_looks_the_schema_up_and_use_latest_version_writes_the_latest(
        server, registry, topic_name, fmt):
    subject = f"{topic_name}-value"
    v1 = Schema("struct", name="demo.Item", fields=(Field("id", Schema.INT32),))
    v2 = Schema("struct", name="demo.Item", fields=(Field("id", Schema.INT32),
                                                     Field("note", Schema.OPTIONAL_STRING)))
    with pytest.raises(DataException, match=subject):
        converter(server, fmt, **{"auto.register.schemas": "false"}).from_connect_data(
            topic_name, v1, {"id": 1})
    first = converter(server, fmt).from_connect_data(topic_name, v1, {"id": 1})
    looked_up = converter(server, fmt, **{"auto.register.schemas": "false"}).from_connect_data(
        topic_name, v1, {"id": 1})
    assert looked_up == first
    converter(server, fmt).from_connect_data(topic_name, v2, {"id": 2, "note": "n"})
    latest = registry.get_latest_version(subject)
    assert latest.version == 2
    data = converter(server, fmt, **{"auto.register.schemas": "false",
                                     "use.latest.version": "true"}).from_connect_data(
        topic_name, v1, {"id": 3})
    assert int.from_bytes(data[1:5], "big") == latest.schema_id
    schema, value = converter(server, fmt).to_connect_data(topic_name, data)
    assert schema == v2 and value == {"id": 3, "note": None}


def test_a_key_converter_writes_under_the_key_subject_and_formats_are_not_mixed(
        server, registry, topic_name):
    config = {"key.converter": CONVERTERS["json"],
              "key.converter.schema.registry.url": server.info["schema_registry"]}
    key = converter_from_config(config, "key.converter", True, "")
    data = key.from_connect_data(topic_name, Schema.STRING, "k1")
    assert registry.get_latest_version(f"{topic_name}-key").schema_id == \
        int.from_bytes(data[1:5], "big")
    assert registry.get_subjects().count(f"{topic_name}-value") == 0
    with pytest.raises(DataException, match="is a JSON schema, not AVRO"):
        converter(server, "avro").to_connect_data(topic_name, data)


def test_bytes_not_in_confluents_wire_format_are_refused(server):
    c = converter(server, "avro")
    for data in (b"", b"\x01\x00\x00\x00\x01x", b"\x00\x00"):
        with pytest.raises(DataException, match="Unknown magic byte"):
            c.to_connect_data("t", data)
    with pytest.raises(DataException, match="schema for id 987654"):
        c.to_connect_data("t", b"\x00" + (987654).to_bytes(4, "big") + b"\x02")


# ---- a Connect source, read by confluent-kafka ----------------------------------------------

def _expected_json(v):
    day = None if v["day"] is None else (v["day"] - dt.date(1970, 1, 1)).days
    return {**v, "raw": base64.b64encode(v["raw"]).decode(), "day": day,
            "at": int(v["at"].timestamp() * 1000), "price": float(v["price"])}


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json"])
def test_a_source_with_the_converter_is_read_by_confluents_deserializer(
        connect, server, registry, topic_name, fmt):
    create(server, topic_name)
    connect.create(f"src-{topic_name}", **{
        "connector.class": "registry_plugins:StructSourceConnector", "topic": topic_name,
        "count": "6", "key.converter": STRING, "value.converter": CONVERTERS[fmt],
        "value.converter.schema.registry.url": server.info["schema_registry"]})
    wait_until(lambda: len(read_to_end(server, topic_name)) >= 6, timeout=60,
               message="the source's records")
    values = [row(i) for i in range(6)]
    if fmt == "avro":
        assert consume(server, topic_name, 6, AvroDeserializer(registry)) == values
    elif fmt == "json":
        got = consume(server, topic_name, 6, JSONDeserializer(None,
                                                              schema_registry_client=registry))
        assert got == [_expected_json(v) for v in values]
    else:
        from google.protobuf import descriptor_pb2
        served = registry.get_latest_version(f"{topic_name}-value", fmt="serialized").schema
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served.schema_str))
        Row = message_class(fdp, "demo.Row")
        got = consume(server, topic_name, 6, ProtobufDeserializer(Row, {}, registry))
        for v, m in zip(values, got):
            assert (m.id, m.score, m.big, m.active, list(m.tags), dict(m.counts)) == (
                v["id"], v["score"], v["big"], v["active"], v["tags"], v["counts"])
            assert (m.name if m.HasField("name") else None) == v["name"]
            assert m.at.ToDatetime(dt.timezone.utc) == v["at"]
            assert (m.address.city if m.HasField("address") else None) == (
                v["address"] and v["address"]["city"])
            unscaled = int.from_bytes(m.price.value, "big", signed=True)
            assert decimal.Decimal(unscaled).scaleb(-m.price.scale) == v["price"]


# ---- confluent-kafka's serializers, read by a Connect sink ----------------------------------

USER_AVRO = """{"type": "record", "name": "User", "namespace": "demo", "fields": [
 {"name": "name", "type": "string"}, {"name": "age", "type": ["null", "int"], "default": null},
 {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-millis"}},
 {"name": "tags", "type": {"type": "array", "items": "string"}}]}"""
USER_JSON = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "demo.User",
 "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
 "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["name"]}"""
SEEN = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)


def _user_proto():
    from google.protobuf import descriptor_pb2
    fdp = descriptor_pb2.FileDescriptorProto(name="regconv/user.proto", package="regconv",
                                             syntax="proto3",
                                             dependency=["google/protobuf/timestamp.proto"])
    m = fdp.message_type.add(name="User")
    m.field.add(name="name", number=1, label=1, type=9)
    m.field.add(name="age", number=2, label=1, type=5)
    m.field.add(name="seen", number=3, label=1, type=11, type_name=".google.protobuf.Timestamp")
    m.field.add(name="tags", number=4, label=3, type=9)
    return message_class(fdp, "regconv.User")


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json"])
def test_records_of_confluents_serializer_reach_a_sink_through_the_converter(
        connect, server, registry, topic_name, sink_name, fmt):
    create(server, topic_name)
    if fmt == "avro":
        values = [{"name": f"u{i}", "age": None if i == 1 else i, "seen": SEEN,
                   "tags": ["a"] * i} for i in range(4)]
        produce(server, topic_name, values, AvroSerializer(registry, USER_AVRO))
        want = values
    elif fmt == "json":
        values = [{"name": f"u{i}", "age": i, "tags": ["a"] * i} for i in range(4)]
        produce(server, topic_name, values, JSONSerializer(USER_JSON, registry))
        want = values
    else:
        User = _user_proto()
        values = []
        for i in range(4):
            u = User(name=f"u{i}", age=i, tags=["a"] * i)
            u.seen.FromDatetime(SEEN)
            values.append(u)
        produce(server, topic_name, values, ProtobufSerializer(User, registry,
                                                               {"use.deprecated.format": False}))
        want = [{"name": f"u{i}", "age": i, "seen": SEEN, "tags": ["a"] * i} for i in range(4)]
    connect.create(sink_name, **{
        "connector.class": "registry_plugins:RecordingSinkConnector", "topics": topic_name,
        "sink.id": sink_name, "value.converter": CONVERTERS[fmt],
        "value.converter.schema.registry.url": server.info["schema_registry"]})
    wait_until(lambda: len(PUT.get(sink_name, ())) >= 4, timeout=60, message="the sink's puts")
    got = PUT.pop(sink_name)
    assert [v for _, v in got] == want
    schema = got[0][0]
    assert schema.type == "struct" and schema.name in ("demo.User", "regconv.User")
    types = {f.name: (f.schema.type, f.schema.optional) for f in schema.fields}
    assert types["name"] == ("string", False)
    assert types["tags"][0] == "array"
    if fmt == "avro":
        assert types["age"] == ("int32", True) and types["seen"] == ("int64", False)
        assert schema.field("seen").schema.name == "org.apache.kafka.connect.data.Timestamp"
    elif fmt == "json":
        assert types["age"] == ("int64", True)      # not required: optional


# ---- an unknown schema id, through the error tolerance ----------------------------------------

def test_a_record_of_an_unknown_schema_id_goes_to_the_dead_letter_queue(
        connect, server, registry, topic_name, sink_name):
    create(server, topic_name)
    serialize = AvroSerializer(registry, USER_AVRO)
    good = {"name": "ok", "age": 1, "seen": SEEN, "tags": []}
    unknown = b"\x00" + (876543).to_bytes(4, "big") + b"\x04ab"
    produce(server, topic_name, [good, unknown, b"not the wire format", good], serialize)
    dlq = f"{topic_name}-dlq"
    connect.create(sink_name, **{
        "connector.class": "registry_plugins:RecordingSinkConnector", "topics": topic_name,
        "sink.id": sink_name, "value.converter": CONVERTERS["avro"],
        "value.converter.schema.registry.url": server.info["schema_registry"],
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": dlq,
        "errors.deadletterqueue.topic.replication.factor": "1",
        "errors.deadletterqueue.context.headers.enable": "true"})
    wait_until(lambda: len(PUT.get(sink_name, ())) >= 2, timeout=60, message="the good records")
    assert [v for _, v in PUT.pop(sink_name)] == [good, good]
    dead = wait_until(lambda: (m := read_to_end(server, dlq)) and len(m) >= 2 and m,
                      timeout=60, message="the two bad records in the dead-letter queue")
    assert [m.value() for m in dead] == [unknown, b"not the wire format"]
    headers = [{k: v.decode() for k, v in m.headers()} for m in dead]
    assert all(h["__connect.errors.stage"] == "VALUE_CONVERTER" for h in headers)
    assert all(h["__connect.errors.class.name"].endswith("AvroConverter") for h in headers)
    assert "schema for id 876543" in headers[0]["__connect.errors.exception.message"]
    assert "Unknown magic byte" in headers[1]["__connect.errors.exception.message"]
    assert connect.state(sink_name)["tasks"][0]["state"] == "RUNNING"
