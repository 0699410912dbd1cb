"""Batch reads through the kafkalite Spark source against a real server."""
import json

import pytest
from pyspark.errors import PySparkException

from conftest import consume_all, create, reader
from kafkalite.client import Producer

BASE_TS = 1_700_000_000_000
N = 3000


@pytest.fixture(scope="module")
def events(server):
    """3 partitions, N records: keys with nulls, tombstones, headers, explicit timestamps."""
    topic = "spark-events"
    create(server, topic, 3)
    p = Producer(server.config(**{"linger.ms": 2}))
    for i in range(N):
        p.produce(topic, None if i % 50 == 7 else b"value-%d" % i,
                  None if i % 10 == 3 else b"key-%d" % (i % 17), partition=i % 3,
                  headers=[("seq", b"%d" % i), ("null", None)] if i % 4 == 0 else None,
                  timestamp=BASE_TS + i)
    assert p.flush(20) == 0
    p.close()
    return topic


def rows(df):
    return {(r["partition"], r["offset"]): r for r in df.collect()}


def test_batch_read_of_every_column_matches_the_native_consumer(spark, server, events):
    got = rows(reader(spark, server, subscribe=events, includeHeaders="true").load())
    want = consume_all(server, events, 3, N)
    assert len(got) == len(want) == N
    for key, m in want.items():
        r = got[key]
        assert r["topic"] == events and (r["partition"], r["offset"]) == (m.partition(), m.offset())
        assert r["key"] == m.key() and r["value"] == m.value()
        ts_type, ts = m.timestamp()
        assert r["timestampType"] == ts_type - 1 == 0   # Spark: 0 CreateTime
        assert int(r["timestamp"].timestamp() * 1000) == ts
        assert [(h["key"], h["value"]) for h in r["headers"]] == (m.headers() or [])


def test_schema_is_sparks_kafka_schema(spark, server, events):
    df = reader(spark, server, subscribe=events).load()
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    with_headers = reader(spark, server, subscribe=events, includeHeaders="true").load()
    assert with_headers.schema["headers"].dataType.simpleString() == \
        "array<struct<key:string,value:binary>>"


def test_offset_ranges_per_partition_with_earliest_and_latest(spark, server, events):
    df = reader(spark, server, subscribe=events,
                startingOffsets=json.dumps({events: {"0": 10, "1": -2, "2": 990}}),
                endingOffsets=json.dumps({events: {"0": 20, "1": 5, "2": -1}})).load()
    got = sorted(rows(df))
    assert got == ([(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
                   + [(2, o) for o in range(990, 1000)])


def test_assign_reads_only_the_assigned_partitions(spark, server, events):
    df = reader(spark, server, assign=json.dumps({events: [1]})).load()
    assert {r["partition"] for r in df.select("partition").collect()} == {1}
    assert df.count() == N // 3


def test_timestamp_ranges(spark, server, events):
    # record i has timestamp BASE_TS + i and sits in partition i % 3
    df = reader(spark, server, subscribe=events, startingTimestamp=str(BASE_TS + 1500),
                endingTimestamp=str(BASE_TS + 1530)).load()
    values = sorted(int(r["value"].split(b"-")[1]) for r in df.collect() if r["value"])
    assert values == [i for i in range(1500, 1530) if i % 50 != 7]
    by_partition = reader(spark, server, subscribe=events, startingOffsetsByTimestamp=json.dumps(
        {events: {"0": BASE_TS + 2997, "1": BASE_TS, "2": BASE_TS + 10 ** 9}}),
        startingOffsetsByTimestampStrategy="latest").load()
    got = sorted(rows(by_partition))
    assert got == [(0, 999)] + [(1, o) for o in range(1000)]


def test_min_partitions_splits_ranges_and_keeps_every_record(spark, server, events):
    df = reader(spark, server, subscribe=events, minPartitions="12").load()
    assert df.rdd.getNumPartitions() == 12
    got = df.select("partition", "offset").collect()
    assert sorted((r[0], r[1]) for r in got) == sorted(
        (p, o) for p in range(3) for o in range(N // 3)), "no record lost or read twice"


def test_fail_on_data_loss_when_the_ending_offset_is_past_the_log(spark, server, events):
    past = json.dumps({events: {"0": 5000, "1": -1, "2": -1}})
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader(spark, server, subscribe=events, endingOffsets=past).load().count()
    assert reader(spark, server, subscribe=events, endingOffsets=past,
                  failOnDataLoss="false").load().count() == N


BAD = [
    ({}, "subscribe", "exactly one of subscribe"),
    ({"subscribe": "a", "assign": '{"a": [0]}'}, "subscribe", "exactly one"),
    ({"subscribe": "t", "kafkalite.bootstrap.servers": ""}, "kafkalite.bootstrap.servers",
     "required"),
    ({"subscribe": "t", "kafka.bootstrap.servers": "x:1"}, "kafka.bootstrap.servers", "prefix"),
    ({"subscribePattern": "(unclosed"}, "subscribePattern", "regular expression"),
    ({"assign": "[1, 2]"}, "assign", "JSON object"),
    ({"subscribe": "t", "startingOffsets": "latest"}, "startingOffsets", "batch query"),
    ({"subscribe": "t", "endingOffsets": "earliest"}, "endingOffsets", "batch query"),
    ({"subscribe": "t", "startingOffsets": "{not json"}, "startingOffsets", "not valid JSON"),
    ({"subscribe": "t", "startingOffsets": '{"other": {"0": 1}}'}, "startingOffsets",
     "does not read"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -5}}'}, "startingOffsets", "invalid"),
    ({"subscribe": "t", "startingTimestamp": "yesterday"}, "startingTimestamp", "integer"),
    ({"subscribe": "t", "minPartitions": "0"}, "minPartitions", "at least 1"),
    ({"subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
    ({"subscribe": "t", "includeHeaders": "true", "kafkalite.fetch.min.bytes": "lots"},
     "kafkalite.*", "fetch.min.bytes"),
    ({"subscribe": "t", "kafkalite.isolation.level": "serializable"},
     "kafkalite.isolation.level", "expected read_uncommitted or read_committed"),
    ({"subscribe": "no-such-topic"}, "subscribe", "do not exist"),
    ({"assign": '{"spark-events": [7]}'}, "assign", "no such partitions"),
]


@pytest.mark.parametrize("options,option,message", BAD, ids=[b[1] + "-" + b[2] for b in BAD])
def test_bad_options_fail_at_planning_naming_the_option(spark, server, events, options, option,
                                                         message):
    r = spark.read.format("kafkalite")
    if "kafkalite.bootstrap.servers" not in options:
        r = r.option("kafkalite.bootstrap.servers", server.bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    with pytest.raises((PySparkException, Exception)) as info:
        r.load().collect()   # planning fails before any task runs
    text = str(info.value)
    assert f"option {option!r}" in text and message in text, text[:2000]


def test_starting_offset_after_ending_offset_is_an_error(spark, server, events):
    with pytest.raises(Exception, match="startingOffsets.*after the ending offset"):
        reader(spark, server, subscribe=events,
               startingOffsets=json.dumps({events: {"0": 30, "1": 0, "2": 0}}),
               endingOffsets=json.dumps({events: {"0": 20, "1": 5, "2": 5}})).load().collect()


def test_a_user_schema_selects_kafka_columns(spark, server, events):
    df = reader(spark, server, subscribe=events).schema("offset bigint, key binary").load()
    got = df.collect()
    assert df.columns == ["offset", "key"] and len(got) == N
    want = consume_all(server, events, 3, N)
    assert sorted((r["offset"], r["key"] or b"") for r in got) == sorted(
        (m.offset(), m.key() or b"") for m in want.values())
    with pytest.raises(Exception, match="option 'schema'.*not one of the Kafka columns"):
        reader(spark, server, subscribe=events).schema("value string").load().collect()
