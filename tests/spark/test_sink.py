"""Writing DataFrames to kafkalite topics (batch) and the sink's errors."""
import pytest
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructField,
                               StructType)

from conftest import consume_all, create, writer

HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))


def test_round_trip_with_keys_partitions_and_headers(spark, server):
    topic = "spark-sink"
    create(server, topic, 3)
    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType()),
                         StructField("partition", IntegerType()),
                         StructField("headers", HEADERS)])
    data = [(f"k{i % 5}" if i % 7 else None, b"v%d" % i, 2 if i % 11 == 0 else None,
             [("n", b"%d" % i)] if i % 13 == 0 else None) for i in range(2000)]
    writer(spark.createDataFrame(data, schema).repartition(2), server, topic=topic).save()

    got = consume_all(server, topic, 3, 2000)
    assert len(got) == 2000
    by_value = {m.value(): m for m in got.values()}
    for key, value, partition, headers in data:
        m = by_value[value]
        assert m.key() == (key.encode() if key else None)
        if partition is not None:
            assert m.partition() == partition
        assert (m.headers() or []) == (headers or [])
    # keyed rows without a partition go where the key hashes: one partition per key
    parts = {}
    for key, value, partition, headers in data:
        if key and partition is None:
            parts.setdefault(key, set()).add(by_value[value].partition())
    assert all(len(p) == 1 for p in parts.values())

    # and the source reads back what the sink wrote
    df = spark.read.format("kafkalite").option("kafkalite.bootstrap.servers", server.bootstrap) \
        .option("subscribe", topic).option("includeHeaders", "true").load()
    values = sorted(r["value"] for r in df.select("value").collect())
    assert values == sorted(v for _, v, *_ in data)


def test_topic_column_routes_rows_and_the_option_fills_nulls(spark, server):
    create(server, "spark-sink-a", 1)
    create(server, "spark-sink-b", 1)
    data = [("spark-sink-a" if i % 3 == 0 else None if i % 3 == 1 else "spark-sink-b", f"v{i}")
            for i in range(300)]
    df = spark.createDataFrame(data, "topic string, value string")
    writer(df, server, topic="spark-sink-b").save()
    a = consume_all(server, "spark-sink-a", 1, 100)
    b = consume_all(server, "spark-sink-b", 1, 200)
    assert sorted(m.value() for m in a.values()) == sorted(
        f"v{i}".encode() for i in range(300) if i % 3 == 0)
    assert len(b) == 200


def test_missing_value_column_is_a_clear_error(spark, server):
    df = spark.createDataFrame([("k", "v")], "key string, payload string")
    with pytest.raises(Exception, match="needs a 'value' column"):
        writer(df, server, topic="spark-sink").save()


def test_unknown_topic_option_is_a_clear_error(spark, server):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="topic 'no-such-topic' does not exist"):
        writer(df, server, topic="no-such-topic").save()


def test_unknown_topic_in_the_topic_column_fails_the_write(spark, server):
    df = spark.createDataFrame([("nowhere-topic", "v")], "topic string, value string")
    with pytest.raises(Exception, match="nowhere-topic"):
        writer(df, server).save()


def test_no_topic_at_all_is_a_clear_error(spark, server):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="no topic to write to"):
        writer(df, server).save()


def test_a_large_write_is_cut_into_batches_the_broker_accepts(spark, server):
    topic = "spark-sink-large"
    create(server, topic, 1)
    df = spark.range(20000, numPartitions=1).selectExpr(
        "CONCAT(CAST(id AS STRING), REPEAT('x', 200)) AS value", "0 AS partition")
    writer(df, server, topic=topic).save()   # 4 MB to one partition from one task
    got = consume_all(server, topic, 1, 20000)
    assert len(got) == 20000
