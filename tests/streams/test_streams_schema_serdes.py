"""Avro (fastavro) and Protobuf serdes where a schema is given: values
round-trip through bytes (hypothesis), Confluent's framing carries and
checks the schema id, bytes that do not fit raise SerializationException
(what the deserialization exception handler and the dead-letter queue
take), and a topology reads Avro and writes Protobuf in the
TopologyTestDriver, its output equal to a plain-Python model.
"""
from __future__ import annotations

import pyarrow as pa
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import Consumed, Produced, Serdes, StreamsBuilder, TopologyTestDriver
from kafkalite.streams.serdes import SerializationException

SCHEMA = {"type": "record", "name": "Click", "fields": [
    {"name": "user", "type": "string"}, {"name": "count", "type": "long"},
    {"name": "score", "type": ["null", "double"], "default": None}]}


def message_class():
    """A Protobuf message class built from a descriptor (as protoc would)."""
    f = descriptor_pb2.FileDescriptorProto(name="click_test.proto", package="kl",
                                           syntax="proto3")
    m = f.message_type.add(name="Total")
    T = descriptor_pb2.FieldDescriptorProto
    m.field.add(name="user", number=1, type=T.TYPE_STRING, label=T.LABEL_OPTIONAL)
    m.field.add(name="doubled", number=2, type=T.TYPE_INT64, label=T.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("kl.Total"))


clicks = st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "user": st.text(max_size=8), "count": st.integers(-2**63, 2**63 - 1),
    "score": st.one_of(st.none(), st.floats(allow_nan=False))})), max_size=20)


@settings(max_examples=50, deadline=None)
@given(clicks, st.one_of(st.none(), st.integers(0, 2**31 - 1)))
def test_avro_round_trip(values, schema_id):
    serde = Serdes.avro(SCHEMA, schema_id)
    raw = serde.serialize(pa.array(values, pa.struct([("user", pa.string()),
                                                      ("count", pa.int64()),
                                                      ("score", pa.float64())])))
    if schema_id is not None:
        assert all(r is None or r[:5] == b"\0" + schema_id.to_bytes(4, "big")
                   for r in raw.to_pylist())
    assert serde.deserialize(raw).to_pylist() == values


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.none(), st.fixed_dictionaries({
    "user": st.text(max_size=8), "doubled": st.integers(-2**63, 2**63 - 1)})), max_size=20))
def test_protobuf_round_trip(values):
    serde = Serdes.protobuf(message_class())
    back = serde.deserialize(serde.serialize(pa.array(values))).to_pylist()
    # proto3 JSON mapping: int64 as decimal strings
    assert back == [None if v is None else {"user": v["user"], "doubled": str(v["doubled"])}
                    for v in values]


def test_bytes_that_do_not_fit_raise_serialization_exception():
    avro = Serdes.avro(SCHEMA, 7)
    good = avro.serialize(pa.array([{"user": "a", "count": 1, "score": None}]))
    with pytest.raises(SerializationException, match="schema id 8"):
        Serdes.avro(SCHEMA, 8).deserialize(good)
    with pytest.raises(SerializationException, match="not Avro"):
        Serdes.avro(SCHEMA).deserialize(pa.array([b"\xff"], pa.binary()))
    with pytest.raises(SerializationException, match="does not fit"):
        Serdes.avro(SCHEMA).serialize(pa.array([{"user": 5}]))
    with pytest.raises(SerializationException, match="Total"):
        Serdes.protobuf(message_class()).deserialize(pa.array([b"\xff\xff"], pa.binary()))
    with pytest.raises(SerializationException, match="Total"):
        Serdes.protobuf(message_class()).serialize(pa.array([{"nope": 1}]))


def test_avro_in_protobuf_out_in_the_driver():
    b = StreamsBuilder()
    b.stream("clicks", Consumed.with_(Serdes.string(), Serdes.avro(SCHEMA, 1))) \
        .filter(lambda k, v: v["count"] > 2) \
        .map_values(lambda v: {"user": v["user"], "doubled": 2 * v["count"]}) \
        .to("totals", Produced.with_(Serdes.string(), Serdes.protobuf(message_class())))
    rows = [{"user": f"u{i}", "count": i, "score": None if i % 2 else i / 2} for i in range(6)]
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        d.create_input_topic("clicks", Serdes.string(), Serdes.avro(SCHEMA, 1)) \
            .pipe_record_list([(r["user"], r, 0) for r in rows])
        out = d.create_output_topic("totals", Serdes.string(),
                                    Serdes.protobuf(message_class())).read_key_values_to_list()
    assert out == [(r["user"], {"user": r["user"], "doubled": str(2 * r["count"])})
                   for r in rows if r["count"] > 2]
