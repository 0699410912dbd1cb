"""confluent-kafka's serializer objects on kafkalite's own Producer and
Consumer (kafkalite/client/serialization.py): AvroSerializer,
ProtobufSerializer and JSONSerializer against kafkalite's schema registry,
unchanged, given as ``value.serializer`` / ``value_serializer=`` & co.;
what they write is Confluent's wire format, which confluent-kafka's own
consumer reads back; a refused record raises the error confluent-kafka's
SerializingProducer / DeserializingConsumer raise, and loses nothing.

The session's shared server; each test has its own topic (so subjects).
"""
from __future__ import annotations

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import (MessageField, SerializationContext, StringDeserializer,
                                           StringSerializer)

from harness import create, wait_until
from kafkalite.client import Consumer, Producer
from kafkalite.client.serialization import (ValueDeserializationError,
                                            ValueSerializationError)

USER_AVRO = """{"type": "record", "name": "User", "namespace": "demo",
 "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}"""
USER_JSON = """{"$schema": "http://json-schema.org/draft-07/schema#", "title": "User",
 "type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
 "required": ["name", "age"]}"""


@pytest.fixture
def registry(server):
    return SchemaRegistryClient({"url": server.info["schema_registry"]})


def _user_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("clientser.User"))
    except KeyError:
        pass
    fdp = descriptor_pb2.FileDescriptorProto(name="clientser/user.proto", package="clientser",
                                             syntax="proto3")
    m = fdp.message_type.add(name="User")
    m.field.add(name="name", number=1, label=1, type=9)
    m.field.add(name="age", number=2, label=1, type=5)
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("clientser.User"))


def serdes(fmt, registry):
    """(serializer, deserializer, values) of one format, confluent-kafka's."""
    if fmt == "avro":
        return (AvroSerializer(registry, USER_AVRO), AvroDeserializer(registry),
                [{"name": f"u{i}", "age": i} for i in range(5)])
    if fmt == "json":
        return (JSONSerializer(USER_JSON, registry),
                JSONDeserializer(None, schema_registry_client=registry),
                [{"name": f"u{i}", "age": i} for i in range(5)])
    User = _user_class()
    return (ProtobufSerializer(User, registry, {"use.deprecated.format": False}),
            ProtobufDeserializer(User, {"use.deprecated.format": False}, registry),
            [User(name=f"u{i}", age=i) for i in range(5)])


def read(consumer, count) -> list:
    out = []
    wait_until(lambda: out.extend(consumer.consume(count - len(out), 0.2)) or
               len(out) >= count, timeout=30, message=lambda: f"{count} records, {len(out)} read")
    return out


@pytest.mark.parametrize("fmt", ["avro", "protobuf", "json"])
def test_confluents_serializers_work_unchanged_on_kafkalites_clients(server, registry,
                                                                     topic_name, fmt):
    create(server, topic_name)
    serialize, deserialize, values = serdes(fmt, registry)
    producer = Producer(server.config(), value_serializer=serialize,
                        **{"key.serializer": StringSerializer()})
    for i, v in enumerate(values):
        producer.produce(topic_name, v, key=f"k{i}")
    assert producer.flush(20) == 0
    producer.close()
    latest = registry.get_latest_version(f"{topic_name}-value")
    assert latest.schema.schema_type == {"avro": "AVRO", "protobuf": "PROTOBUF",
                                         "json": "JSON"}[fmt]

    consumer = Consumer(server.config(**{"group.id": topic_name, "auto.offset.reset":
                                         "earliest"}),
                        key_deserializer=StringDeserializer(),
                        **{"value.deserializer": deserialize})
    consumer.subscribe([topic_name])
    try:
        got = [consumer.poll(30)]
        got += read(consumer, len(values) - 1)
    finally:
        consumer.close()
    assert [m.value() for m in got] == values
    assert [m.key() for m in got] == [f"k{i}" for i in range(len(values))]

    # Confluent's wire format: confluent-kafka's own consumer and deserializer read it
    theirs = ConfluentConsumer({"bootstrap.servers": server.kafka_bootstrap,
                                "group.id": topic_name + "-theirs",
                                "auto.offset.reset": "earliest"})
    theirs.subscribe([topic_name])
    raw = []

    def more():
        m = theirs.poll(0.2)
        if m is not None and not m.error():
            raw.append(m)
        return len(raw) >= len(values)
    try:
        wait_until(more, timeout=30, message="confluent-kafka's reads")
    finally:
        theirs.close()
    assert all(m.value()[0] == 0 and m.value()[1:5] == latest.schema_id.to_bytes(4, "big")
               for m in raw)
    assert [deserialize(m.value(), SerializationContext(topic_name, MessageField.VALUE))
            for m in raw] == values


def test_a_value_the_serializer_refuses_raises_and_queues_nothing(server, registry, topic_name):
    create(server, topic_name)
    producer = Producer(server.config(), value_serializer=AvroSerializer(registry, USER_AVRO))
    try:
        with pytest.raises(ValueSerializationError) as refused:
            producer.produce(topic_name, {"name": "no age"})
        assert refused.value.exception is not None
        assert len(producer) == 0
        producer.produce(topic_name, {"name": "ok", "age": 1})
        assert producer.flush(20) == 0
    finally:
        producer.close()
    plain = Producer(server.config())
    try:
        # without serializers: the accumulator's C produce, no Python wrapper per record
        assert plain.produce.__self__ is plain._acc
    finally:
        plain.close()


def test_a_record_the_deserializer_refuses_raises_once_and_loses_no_other(server, registry,
                                                                         topic_name):
    create(server, topic_name)
    serialize = AvroSerializer(registry, USER_AVRO)
    ctx = SerializationContext(topic_name, MessageField.VALUE)
    values = [serialize({"name": f"u{i}", "age": i}, ctx) for i in range(6)]
    values[3] = b"not Confluent's wire format"
    producer = Producer(server.config())
    for v in values:
        producer.produce(topic_name, v)
    assert producer.flush(20) == 0
    producer.close()
    consumer = Consumer(server.config(**{"group.id": topic_name,
                                         "auto.offset.reset": "earliest"}),
                        value_deserializer=AvroDeserializer(registry))
    consumer.subscribe([topic_name])
    got, refused = [], []

    def step():
        try:
            got.extend(m.value() for m in consumer.consume(10, 0.2))
        except ValueDeserializationError as e:
            refused.append(e.kafka_message.offset())
        return len(got) >= 5
    try:
        wait_until(step, timeout=30, message=lambda: f"5 good records: {got}, {refused}")
    finally:
        consumer.close()
    assert got == [{"name": f"u{i}", "age": i} for i in range(6) if i != 3]
    assert refused == [3]
