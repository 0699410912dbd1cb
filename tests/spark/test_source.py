"""Batch reads through the kafkalite Spark source against a real server."""
import json

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pyspark.errors import PySparkException

from conftest import consume_all, create, reader
from harness import scrape, wait_until
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


def _answered(server, request: str) -> float:
    return sum(s.value for family in text_string_to_metric_families(scrape(server))
               for s in family.samples
               if s.name == "kafka_network_requestmetrics_requests_total"
               and s.labels.get("request") == request)


def _list_offsets_settled(server, topic) -> float:
    """ListOffsets answered so far, once the workers' metrics cover every
    request before now: a record produced to the topic's one partition (its
    leader served the reads) and counted marks a snapshot taken after them."""
    produced = _answered(server, "Produce")
    p = Producer(server.config())
    p.produce(topic, b"marker", partition=0)
    assert p.flush(15) == 0
    p.close()
    wait_until(lambda: _answered(server, "Produce") > produced, 30)
    return _answered(server, "ListOffsets")


def test_tasks_read_their_planned_range_without_asking_the_log_bounds_again(spark, server,
                                                                             topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config())
    p.produce_batch(topic_name, [b"v%d" % i for i in range(300)], partition=0)
    assert p.flush(15) == 0
    p.close()
    before = _list_offsets_settled(server, topic_name)
    df = reader(spark, server, subscribe=topic_name, minPartitions="4",
                startingOffsets=json.dumps({topic_name: {"0": 10}}),
                endingOffsets=json.dumps({topic_name: {"0": 250}})).load()
    assert df.rdd.getNumPartitions() == 4
    got = df.select("offset", "value").collect()
    assert sorted((r[0], r[1]) for r in got) == [(i, b"v%d" % i) for i in range(10, 250)]
    # the planning's two (the partition's log start and end); none from the four tasks
    assert _list_offsets_settled(server, topic_name) - before == 2


def test_queries_one_after_another_read_exactly_their_rows(spark, server, topic_name):
    """Spark's Python workers keep their consumer from task to task
    (task_consumers.py): queries with other ranges, another isolation level
    and more tasks than workers, one after another, each read exactly their
    rows. Partition 0: offsets 0-49 plain, 50-59 an aborted transaction (60
    its marker), 61-70 plain; partition 1: 0-29 plain."""
    create(server, topic_name, 2)
    p = Producer(server.config())
    p.produce_batch(topic_name, [b"0-%d" % i for i in range(50)], partition=0)
    p.produce_batch(topic_name, [b"1-%d" % i for i in range(30)], partition=1)
    assert p.flush(15) == 0
    tx = Producer(server.config(**{"transactional.id": topic_name + "-tx"}))
    tx.init_transactions(15)
    tx.begin_transaction()
    tx.produce_batch(topic_name, [b"aborted-%d" % i for i in range(10)], partition=0)
    tx.abort_transaction(15)
    tx.close()
    p.produce_batch(topic_name, [b"0-%d" % i for i in range(61, 71)], partition=0)
    assert p.flush(15) == 0
    p.close()
    plain = {(0, o, b"0-%d" % o) for o in [*range(50), *range(61, 71)]} | {
        (1, o, b"1-%d" % o) for o in range(30)}
    aborted = {(0, 50 + i, b"aborted-%d" % i) for i in range(10)}

    def read(**options):
        df = reader(spark, server, subscribe=topic_name, **options).load()
        got = [(r[0], r[1], r[2]) for r in df.select("partition", "offset", "value").collect()]
        assert len(got) == len(set(got)), "a record read twice"
        return set(got)

    ranges = dict(startingOffsets=json.dumps({topic_name: {"0": 40, "1": 0}}),
                  endingOffsets=json.dumps({topic_name: {"0": -1, "1": 10}}))
    assert read(**ranges) == {r for r in plain | aborted if r[0] == 1 and r[1] < 10
                              or r[0] == 0 and r[1] >= 40}
    assert read(**{"kafkalite.isolation.level": "read_committed"}) == plain
    assert read(startingOffsets=json.dumps({topic_name: {"0": 55, "1": 25}})) == {
        r for r in plain | aborted if r[1] >= (55 if r[0] == 0 else 25)}
    assert read(minPartitions="6") == plain | aborted
    assert read(minPartitions="6", **{"kafkalite.isolation.level": "read_committed"}) == plain
