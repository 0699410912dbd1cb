"""The source's ``value.format = avro`` (spark/kafkalite_spark/registry.py):
values confluent-kafka's AvroSerializer wrote through kafkalite's registry
come out as a struct column of the subject's latest schema, records of an
older compatible version resolved to it; a value the registry cannot
explain fails the query naming its offset."""
import datetime
import decimal

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from pyspark.errors import PySparkException

from conftest import create, reader

V1 = """{"type": "record", "name": "Order", "namespace": "shop", "fields": [
 {"name": "item", "type": "string"}, {"name": "count", "type": "long"},
 {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
 {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9,
                            "scale": 2}},
 {"name": "tags", "type": {"type": "array", "items": "string"}},
 {"name": "score", "type": ["null", "double"], "default": null}]}"""
# v2 adds a field with a default: BACKWARD compatible, v1's records read with it
V2 = V1.replace('"default": null}]}', '"default": null},\n {"name": "note", "type": "string", '
                                      '"default": "none"}]}')
AT = datetime.datetime(2024, 5, 6, 7, 8, 9, tzinfo=datetime.timezone.utc)


def produce(server, topic, schema, values):
    registry = SchemaRegistryClient({"url": server.info["schema_registry"]})
    serialize = AvroSerializer(registry, schema)
    p = Producer({"bootstrap.servers": server.kafka_bootstrap})
    for v in values:
        p.produce(topic, v if v is None or isinstance(v, bytes) else
                  serialize(v, SerializationContext(topic, MessageField.VALUE)))
    assert p.flush(20) == 0


def order(i, **more):
    return {"item": f"i{i}", "count": i, "at": AT + datetime.timedelta(seconds=i),
            "price": decimal.Decimal(f"{i}.25"), "tags": ["a"] * i,
            "score": None if i % 2 else i / 2, **more}


def test_avro_values_are_a_struct_column_of_the_latest_schema(spark, server):
    topic = "spark-registry-orders"
    create(server, topic)
    produce(server, topic, V1, [order(i) for i in range(3)] + [None])
    produce(server, topic, V2, [order(3, note="new")])
    df = reader(spark, server, subscribe=topic, **{
        "value.format": "avro", "schema.registry.url": server.info["schema_registry"]}).load()
    assert df.schema["value"].dataType.simpleString() == (
        "struct<item:string,count:bigint,at:timestamp,price:decimal(9,2),tags:array<string>,"
        "score:double,note:string>")
    rows = sorted(df.select("offset", "value").collect())
    got = [None if r["value"] is None else r["value"].asDict() for r in rows]
    assert got[3] is None                               # a tombstone stays null
    want = [order(i, note="none") for i in range(3)] + [order(3, note="new")]
    for g, w in zip([g for g in got if g is not None], want):
        assert g["at"].replace(tzinfo=datetime.timezone.utc) == w.pop("at")
        g.pop("at")
        assert g == w
    # the struct's fields are columns like any other
    assert [r["item"] for r in df.where("value.count >= 2").select("value.item").collect()] == \
        ["i2", "i3"]


def test_a_value_the_registry_cannot_explain_fails_the_query(spark, server):
    topic = "spark-registry-bad"
    create(server, topic)
    produce(server, topic, V1, [order(1), b"\x00" + (654321).to_bytes(4, "big") + b"\x02"])
    df = reader(spark, server, subscribe=topic, **{
        "value.format": "avro", "schema.registry.url": server.info["schema_registry"]}).load()
    with pytest.raises(PySparkException, match="offset 1: schema id 654321"):
        df.collect()
    with pytest.raises(Exception, match="subject no-such-topic-value"):
        reader(spark, server, subscribe="no-such-topic", **{
            "value.format": "avro", "schema.registry.url": server.info["schema_registry"]}).load()


def test_a_streaming_query_decodes_the_values_too(spark, server, tmp_path):
    topic = "spark-registry-stream"
    create(server, topic)
    produce(server, topic, V1, [order(i) for i in range(4)])
    q = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("value.format", "avro")
         .option("schema.registry.url", server.info["schema_registry"]).load()
         .select("offset", "value.item", "value.count", "value.price")
         .writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "checkpoint"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None
    rows = sorted(spark.read.parquet(str(tmp_path / "out")).collect())
    assert [(r["item"], r["count"], r["price"]) for r in rows] == [
        (f"i{i}", i, decimal.Decimal(f"{i}.25")) for i in range(4)]
