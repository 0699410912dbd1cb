"""Streams' Avro and Protobuf serdes in registry mode
(``Serdes.avro(schema_registry_url=...)``, kafkalite/streams/serdes.py):
a real application on the shared server reads what confluent-kafka's
AvroSerializer wrote and writes Avro and Protobuf that confluent-kafka's
deserializers read, every record in Confluent's wire format with its
schema in kafkalite's registry; bytes the registry cannot explain raise
SerializationException (what the deserialization exception handler
takes).
"""
from __future__ import annotations

import pyarrow as pa
import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import (MessageField, SerializationContext, StringDeserializer,
                                           StringSerializer)
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from test_streams_runtime import config, run_until_caught_up

from harness import create, wait_until
from kafkalite.streams import Consumed, KafkaStreams, Produced, Serdes, StreamsBuilder
from kafkalite.streams.serdes import SerializationException

CLICK = """{"type": "record", "name": "Click", "namespace": "demo", "fields": [
 {"name": "user", "type": "string"}, {"name": "count", "type": "long"},
 {"name": "score", "type": ["null", "double"], "default": null}]}"""
TOTAL = """{"type": "record", "name": "Total", "namespace": "demo", "fields": [
 {"name": "user", "type": "string"}, {"name": "doubled", "type": "long"}]}"""


def total_class():
    """demo.Total { string user = 1; int64 doubled = 2; } as protoc would make it."""
    f = descriptor_pb2.FileDescriptorProto(name="streams_registry_total.proto",
                                           package="streamsreg", syntax="proto3")
    m = f.message_type.add(name="Total")
    T = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="user", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    m.field.add(name="doubled", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("streamsreg.Total"))


def read_all(server, topic, count, deserialize) -> list:
    """(key, value) of ``count`` records of ``topic``, by confluent-kafka."""
    c = ConfluentConsumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": topic,
                           "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    out = []

    def more():
        m = c.poll(0.2)
        if m is not None and not m.error():
            assert m.value()[0] == 0                # Confluent's wire format
            ctx = SerializationContext(topic, MessageField.VALUE)
            out.append((StringDeserializer()(m.key(), ctx), deserialize(m.value(), ctx)))
        return len(out) >= count
    try:
        wait_until(more, timeout=30, message=lambda: f"{count} records of {topic}: {out}")
    finally:
        c.close()
    return out


def test_a_topology_reads_and_writes_what_confluents_serializers_do(server, topic_name,
                                                                    tmp_path):
    url = server.info["schema_registry"]
    registry = SchemaRegistryClient({"url": url})
    src, avro_out, proto_out = topic_name, f"{topic_name}-avro", f"{topic_name}-proto"
    for t in (src, avro_out, proto_out):
        create(server, t)
    rows = [{"user": f"u{i}", "count": i, "score": None if i % 2 else i / 2} for i in range(6)]
    producer = ConfluentProducer({"bootstrap.servers": server.kafka_bootstrap})
    serialize = AvroSerializer(registry, CLICK)
    for r in rows:
        ctx = SerializationContext(src, MessageField.VALUE)
        producer.produce(src, serialize(r, ctx), StringSerializer()(r["user"], ctx))
    assert producer.flush(20) == 0

    Total = total_class()
    b = StreamsBuilder()
    totals = b.stream(src, Consumed.with_(Serdes.string(), Serdes.avro(schema_registry_url=url))) \
        .filter(lambda k, v: v["count"] > 2) \
        .map_values(lambda v: {"user": v["user"], "doubled": 2 * v["count"]})
    totals.to(avro_out, Produced.with_(Serdes.string(), Serdes.avro(
        TOTAL, schema_registry_url=url, subject=f"{avro_out}-value")))
    totals.to(proto_out, Produced.with_(Serdes.string(), Serdes.protobuf(
        Total, schema_registry_url=url, subject=f"{proto_out}-value")))
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, topic_name)), server)

    want = [(r["user"], {"user": r["user"], "doubled": 2 * r["count"]})
            for r in rows if r["count"] > 2]
    assert read_all(server, avro_out, len(want), AvroDeserializer(registry)) == want
    got = read_all(server, proto_out, len(want), ProtobufDeserializer(
        Total, {"use.deprecated.format": False}, registry))
    assert [(k, {"user": m.user, "doubled": m.doubled}) for k, m in got] == want
    assert registry.get_latest_version(f"{proto_out}-value").schema.schema_type == "PROTOBUF"


def test_bytes_the_registry_cannot_explain_raise_serialization_exception(server, topic_name):
    url = server.info["schema_registry"]
    serde = Serdes.avro(TOTAL, schema_registry_url=url, subject=f"{topic_name}-value")
    good = serde.serialize(pa.array([{"user": "a", "doubled": 2}]))
    assert serde.deserialize(good).to_pylist() == [{"user": "a", "doubled": 2}]
    unknown = b"\x00" + (765432).to_bytes(4, "big") + b"\x02a\x04"
    with pytest.raises(SerializationException, match="schema id 765432"):
        Serdes.avro(schema_registry_url=url).deserialize(pa.array([unknown], pa.binary()))
    with pytest.raises(SerializationException, match="wire format"):
        serde.deserialize(pa.array([b"\x01plain"], pa.binary()))
    with pytest.raises(SerializationException, match="subject="):
        Serdes.avro(TOTAL, schema_registry_url=url).serialize(pa.array([{"user": "a",
                                                                          "doubled": 1}]))
    with pytest.raises(SerializationException, match="cannot be written"):
        serde.serialize(pa.array([{"user": 5}]))
    with pytest.raises(SerializationException, match="cannot be written"):
        # auto.register.schemas off: a schema not registered under the subject
        Serdes.avro(CLICK, schema_registry_url=url, subject=f"{topic_name}-value",
                    auto_register_schemas=False).serialize(
            pa.array([{"user": "a", "count": 1, "score": None}]))
