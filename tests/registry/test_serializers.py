"""confluent-kafka's own schema registry client and serializers, unchanged,
against kafkalite's registry (kafkalite/registry/): records produced with
``AvroSerializer``, ``ProtobufSerializer`` and ``JSONSerializer`` through
kafkalite's Kafka listener, consumed and decoded with the matching
deserializers, each looking the writer's schema up by the id in the
record's first bytes (magic byte 0, a 4-byte id).

The session's shared server: each test has its own topic, so its own
subjects (``<topic>-value``).
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from harness import create

USER_AVRO = """{"type": "record", "name": "User", "namespace": "demo",
 "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}"""
USER_JSON = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "User",
 "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
 "required": ["name"]}"""


@pytest.fixture
def registry(server):
    return SchemaRegistryClient({"url": server.info["schema_registry"]})


def round_trip(server, topic, serializer, deserializer, values) -> list:
    """``values`` produced through ``serializer`` to ``topic`` over the
    Kafka listener, read back and decoded by ``deserializer``."""
    create(server, topic)
    producer = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for v in values:
        producer.produce(topic, serializer(v, SerializationContext(topic, MessageField.VALUE)))
    assert producer.flush(20) == 0
    consumer = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": topic,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    out = []
    try:
        for _ in range(200):
            if len(out) == len(values):
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            assert msg.value()[0] == 0          # Confluent's wire format: magic byte 0
            out.append(deserializer(msg.value(),
                                    SerializationContext(topic, MessageField.VALUE)))
    finally:
        consumer.close()
    return out


def test_avro_serializer_registers_and_the_deserializer_reads_back(server, registry,
                                                                     topic_name):
    values = [{"name": f"u{i}", "age": i} for i in range(5)]
    got = round_trip(server, topic_name, AvroSerializer(registry, USER_AVRO),
                     AvroDeserializer(registry), values)
    assert got == values
    latest = registry.get_latest_version(f"{topic_name}-value")
    assert latest.version == 1 and latest.schema.schema_type == "AVRO"
    assert registry.get_schema(latest.schema_id).schema_str == latest.schema.schema_str


def test_json_serializer_registers_and_the_deserializer_reads_back(server, registry,
                                                                     topic_name):
    values = [{"name": f"u{i}", "age": i} for i in range(5)]
    got = round_trip(server, topic_name, JSONSerializer(USER_JSON, registry),
                     JSONDeserializer(None, schema_registry_client=registry), values)
    assert got == values
    assert registry.get_latest_version(f"{topic_name}-value").schema.schema_type == "JSON"


def _user_message_class():
    """A Protobuf message class made at run time, as protoc's output would
    be: demo.User { string name = 1; int32 age = 2; Timestamp seen = 3 }."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("regtest.User"))
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto(
        name="regtest/user.proto", package="regtest", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    m = fdp.message_type.add(name="User")
    m.field.add(name="name", number=1, label=1, type=9)
    m.field.add(name="age", number=2, label=1, type=5)
    m.field.add(name="seen", number=3, label=1, type=11, type_name=".google.protobuf.Timestamp")
    assert timestamp_pb2.Timestamp     # its file is in the default pool
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("regtest.User"))


def test_protobuf_serializer_registers_and_the_deserializer_reads_back(server, registry,
                                                                         topic_name):
    User = _user_message_class()
    values = [User(name=f"u{i}", age=i) for i in range(5)]
    for i, v in enumerate(values):
        v.seen.seconds = 1_700_000_000 + i
    got = round_trip(server, topic_name,
                     ProtobufSerializer(User, registry, {"use.deprecated.format": False}),
                     ProtobufDeserializer(User, {"use.deprecated.format": False}, registry),
                     values)
    assert got == values
    latest = registry.get_latest_version(f"{topic_name}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # the deserializer asked for format=serialized: a base64 FileDescriptorProto
    from google.protobuf import descriptor_pb2
    import base64
    served = registry.get_schema(latest.schema_id, fmt="serialized").schema_str
    fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(served))
    assert [f.name for f in fdp.message_type[0].field] == ["name", "age", "seen"]


def test_the_same_schema_under_two_subjects_has_one_id(server, registry, topic_name):
    from confluent_kafka.schema_registry import Schema
    a = registry.register_schema(f"{topic_name}-a", Schema(USER_AVRO, "AVRO"))
    b = registry.register_schema(f"{topic_name}-b", Schema(USER_AVRO, "AVRO"))
    again = registry.register_schema(f"{topic_name}-a", Schema(USER_AVRO, "AVRO"))
    assert a == b == again
    assert {f"{topic_name}-a", f"{topic_name}-b"} <= set(registry.get_subjects_by_schema_id(a))
