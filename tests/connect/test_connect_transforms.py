"""Each single message transform and predicate against expected records,
configured with Kafka's keys and class names."""
import datetime as dt

import pytest

from kafkalite.connect.api import SinkRecord, SourceRecord
from kafkalite.connect.config import ConfigException
from kafkalite.connect.data import Schema, SchemaBuilder
from kafkalite.connect.errors import DataException
from kafkalite.connect.transforms import TransformationChain

T = "org.apache.kafka.connect.transforms."
VS = SchemaBuilder.struct().field("id", Schema.INT64).field("name", Schema.OPTIONAL_STRING) \
    .field("ssn", Schema.OPTIONAL_STRING).field("price", Schema.OPTIONAL_STRING).build()
TS = 1_700_000_000_123


def rec(value=None, schema=VS, key=None, key_schema=None, topic="orders", headers=()):
    if value is None and schema is VS:
        value = {"id": 1, "name": "ada", "ssn": "123-45", "price": "9.50"}
    return SinkRecord(topic, 3, key_schema, key, schema, value, TS, list(headers), 42)


def chain(**cfg):
    return TransformationChain({k.replace("__", "."): v for k, v in cfg.items()})


def one(type_, props, record, name="t"):
    cfg = {"transforms": name, f"transforms.{name}.type": type_}
    cfg.update({f"transforms.{name}.{k}": v for k, v in props.items()})
    return TransformationChain(cfg).apply(record)


def test_insert_field_schemaful_and_schemaless():
    out = one(T + "InsertField$Value", {"topic.field": "t!", "partition.field": "p",
                                        "offset.field": "o", "timestamp.field": "ts",
                                        "static.field": "src", "static.value": "pg"}, rec())
    assert out.value == {"id": 1, "name": "ada", "ssn": "123-45", "price": "9.50", "t": "orders",
                         "p": 3, "o": 42, "ts": dt.datetime.fromtimestamp(TS / 1000, dt.timezone.utc),
                         "src": "pg"}
    f = {x.name: x.schema for x in out.value_schema.fields}
    assert f["t"] == Schema.STRING and f["p"] == Schema.OPTIONAL_INT32
    assert f["ts"].name == "org.apache.kafka.connect.data.Timestamp"
    out = one("InsertField$Value", {"topic.field": "t", "timestamp.field": "ts"},
              rec({"a": 1}, None))
    assert out.value == {"a": 1, "t": "orders", "ts": TS} and out.value_schema is None


def test_replace_field_exclude_include_and_renames():
    out = one(T + "ReplaceField$Value", {"exclude": "ssn", "renames": "name:full_name"}, rec())
    assert out.value == {"id": 1, "full_name": "ada", "price": "9.50"}
    assert [f.name for f in out.value_schema.fields] == ["id", "full_name", "price"]
    out = one("ReplaceField$Value", {"include": "id,name"}, rec({"id": 1, "name": "x", "z": 0},
                                                                 None))
    assert out.value == {"id": 1, "name": "x"}
    with pytest.raises(ConfigException, match="renames"):
        one("ReplaceField$Value", {"renames": "bad"}, rec())


def test_mask_field_with_and_without_replacement():
    out = one(T + "MaskField$Value", {"fields": "ssn,id"}, rec())
    assert out.value["ssn"] == "" and out.value["id"] == 0 and out.value["name"] == "ada"
    out = one("MaskField$Value", {"fields": "ssn", "replacement": "***"}, rec())
    assert out.value["ssn"] == "***"
    with pytest.raises(DataException):
        one("MaskField$Value", {"fields": "n", "replacement": "abc"}, rec({"n": 5}, None))


def test_cast_fields_and_whole_value():
    out = one(T + "Cast$Value", {"spec": "price:float64,id:string"}, rec())
    assert out.value["price"] == 9.5 and out.value["id"] == "1"
    f = {x.name: x.schema for x in out.value_schema.fields}
    assert f["price"].type == "float64" and f["id"] == Schema.STRING
    out = one("Cast$Value", {"spec": "int8"}, rec(1000, Schema.INT32))
    assert out.value == -24 and out.value_schema.type == "int8"    # Java's narrowing wraps
    with pytest.raises(ConfigException, match="transforms.t.spec"):
        one("Cast$Value", {"spec": "id:decimalish"}, rec())
    with pytest.raises(DataException):
        one("Cast$Value", {"spec": "name:int32"}, rec())


def test_timestamp_converter_between_string_unix_and_timestamp():
    s = SchemaBuilder.struct().field("at", Schema.OPTIONAL_STRING).build()
    out = one(T + "TimestampConverter$Value",
              {"field": "at", "target.type": "unix", "format": "yyyy-MM-dd'T'HH:mm:ss.SSS"},
              rec({"at": "2023-11-14T22:13:20.123"}, s))
    assert out.value == {"at": TS} and out.value_schema.field("at").schema.type == "int64"
    out = one("TimestampConverter$Value", {"field": "at", "target.type": "string",
                                           "format": "yyyyMMdd HH:mm:ss.SSS"},
              rec({"at": TS}, None))
    assert out.value == {"at": "20231114 22:13:20.123"}
    out = one("TimestampConverter$Value", {"target.type": "Timestamp"}, rec(TS, Schema.INT64))
    assert out.value == dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.timezone.utc)
    out = one("TimestampConverter$Value", {"target.type": "unix", "unix.precision": "seconds"},
              rec(out.value, Schema.TIMESTAMP))
    assert out.value == TS // 1000
    with pytest.raises(ConfigException, match="format"):
        one("TimestampConverter$Value", {"target.type": "string"}, rec())


def test_value_to_key_then_extract_field_key():
    r = one(T + "ValueToKey", {"fields": "id"}, rec())
    assert r.key == {"id": 1} and [f.name for f in r.key_schema.fields] == ["id"]
    cfg = {"transforms": "k,x", "transforms.k.type": T + "ValueToKey", "transforms.k.fields": "id",
           "transforms.x.type": T + "ExtractField$Key", "transforms.x.field": "id"}
    r = TransformationChain(cfg).apply(rec())
    assert r.key == 1 and r.key_schema == Schema.INT64
    with pytest.raises(DataException, match="nope"):
        one("ValueToKey", {"fields": "nope"}, rec())


def test_extract_field_value_schemaless_and_tombstone():
    assert one(T + "ExtractField$Value", {"field": "a"}, rec({"a": {"b": 1}}, None)).value == \
        {"b": 1}
    assert one("ExtractField$Value", {"field": "a"}, rec(None, None)).value is None


def test_regex_router_and_timestamp_router():
    r = one(T + "RegexRouter", {"regex": r"pg-(.*)-v\d", "replacement": "$1_cdc"},
            rec(topic="pg-orders-v2"))
    assert r.topic == "orders_cdc"
    assert one("RegexRouter", {"regex": "x", "replacement": "y"}, rec()).topic == "orders"
    r = one(T + "TimestampRouter", {"topic.format": "${topic}-${timestamp}",
                                    "timestamp.format": "yyyy.MM.dd"}, rec())
    assert r.topic == "orders-2023.11.14"


def test_filter_with_each_predicate_and_negate():
    base = {"transforms": "f", "transforms.f.type": T + "Filter", "transforms.f.predicate": "p",
            "predicates": "p"}
    topic = TransformationChain({**base, "predicates.p.type": T + "predicates.TopicNameMatches",
                                 "predicates.p.pattern": "ord.*"})
    assert topic.apply(rec()) is None and topic.apply(rec(topic="users")) is not None
    header = TransformationChain({**base, "predicates.p.type": "HasHeaderKey",
                                  "predicates.p.name": "skip"})
    assert header.apply(rec(headers=[("skip", b"1")])) is None
    assert header.apply(rec(headers=[("other", b"1")])) is not None
    tomb = TransformationChain({**base, "predicates.p.type": "RecordIsTombstone",
                                "transforms.f.negate": "true"})
    # negated: everything but tombstones is dropped
    assert tomb.apply(rec()) is None and tomb.apply(rec(None, None)) is not None
    assert TransformationChain({"transforms": "f", "transforms.f.type": "Filter"}).apply(
        rec()) is None


def test_a_predicate_gates_any_transform_and_unknown_names_fail():
    cfg = {"transforms": "m", "transforms.m.type": "MaskField$Value", "transforms.m.fields": "ssn",
           "transforms.m.predicate": "isOrders", "predicates": "isOrders",
           "predicates.isOrders.type": "TopicNameMatches", "predicates.isOrders.pattern": "orders"}
    c = TransformationChain(cfg)
    assert c.apply(rec()).value["ssn"] == "" and c.apply(rec(topic="x")).value["ssn"] == "123-45"
    with pytest.raises(ConfigException, match="transforms.m.predicate"):
        TransformationChain({**cfg, "predicates": ""})
    with pytest.raises(Exception, match="NoSuchTransform"):
        TransformationChain({"transforms": "a", "transforms.a.type": "NoSuchTransform"})


def test_source_records_keep_their_source_offsets_through_transforms():
    r = SourceRecord("t", None, None, None, None, {"a": 1}, source_partition={"f": "x"},
                     source_offset={"position": 5})
    out = one("InsertField$Value", {"static.field": "s", "static.value": "v"}, r)
    assert out.source_offset == {"position": 5} and out.value == {"a": 1, "s": "v"}
