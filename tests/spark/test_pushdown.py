"""Filter pushdown and partition planning of the kafkalite Spark source.

Filters on topic, partition and offset become the planned offset ranges;
a lower bound on the timestamp moves each range's start. Checked against a
real server: a pushed query returns exactly the rows of the same filter
applied to an unfiltered read, and reads fewer batches (counted where the
reader fetches them, not timed)."""
import datetime
import json
import re

import pytest
from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull,
                                    LessThan, Not)

from conftest import create, reader
from kafkalite.client import Producer
from kafkalite_spark import source as src
from kafkalite_spark.source import SCHEMA, KafkaLiteDataSource, OffsetRange, split_ranges

BASE_TS = 1_700_000_000_000
N = 1500          # 500 records a partition
PARTS = 3


def ts_of(i: int) -> int:
    """Timestamps that grow with offsets, but not from record to record (a
    CreateTime producer's need not): a timestamp bound must not cut a range
    at the first record that new."""
    return BASE_TS + i + (i * 7919) % 61 - 30


@pytest.fixture(scope="module")
def topic(server):
    name = "spark-pushdown"
    create(server, name, PARTS)
    p = Producer(server.config(**{"linger.ms": 0, "batch.size": 512}))
    for i in range(N):
        p.produce(name, b"value-%d" % i, b"k%d" % (i % 7), partition=i % PARTS,
                  timestamp=ts_of(i))
    assert p.flush(20) == 0
    p.close()
    other = name + "-other"
    create(server, other, 1)
    p = Producer(server.config())
    for i in range(20):
        p.produce(other, b"o-%d" % i, partition=0)
    assert p.flush(20) == 0
    p.close()
    return name


def ms(dt_ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(dt_ms / 1000, datetime.timezone.utc)


def tsms(r) -> int:
    """A collected row's timestamp in epoch ms (collect gives naive local time)."""
    return round(r["timestamp"].timestamp() * 1000)


def key(r):
    return r["topic"], r["partition"], r["offset"]


# (SQL filter, the same filter on a collected row)
QUERIES = [
    ("partition = 1 AND offset >= 100 AND offset < 300",
     lambda r: r["partition"] == 1 and 100 <= r["offset"] < 300),
    ("partition IN (0, 2) AND offset > 450", lambda r: r["partition"] in (0, 2)
     and r["offset"] > 450),
    ("offset <= 3 OR partition = 2", lambda r: r["offset"] <= 3 or r["partition"] == 2),
    ("offset IN (5, 17, 499, 700)", lambda r: r["offset"] in (5, 17, 499, 700)),
    ("NOT (partition = 1) AND offset BETWEEN 10 AND 12",
     lambda r: r["partition"] != 1 and 10 <= r["offset"] <= 12),
    (f"timestamp >= timestamp_millis({BASE_TS + 700})",
     lambda r: tsms(r) >= BASE_TS + 700),
    (f"timestamp > timestamp_micros({(BASE_TS + 990) * 1000 + 1}) AND partition = 0",
     lambda r: tsms(r) > BASE_TS + 990 and r["partition"] == 0),
    (f"timestamp = timestamp_millis({BASE_TS + 500})",
     lambda r: tsms(r) == BASE_TS + 500),
    (f"timestamp >= timestamp_millis({BASE_TS + 5000})", lambda r: tsms(r) >= BASE_TS + 5000),
    ("topic = 'spark-pushdown-other' AND offset >= 15",
     lambda r: r["topic"] == "spark-pushdown-other" and r["offset"] >= 15),
    ("partition > 5", lambda r: False),
]


@pytest.fixture(scope="module")
def everything(spark, server, topic):
    return reader(spark, server, subscribePattern="spark-pushdown.*").load().collect()


@pytest.mark.parametrize("where,keep", QUERIES, ids=[q[0] for q in QUERIES])
def test_pushed_filters_return_the_rows_of_an_unpushed_read(spark, server, topic, everything,
                                                              where, keep):
    want = sorted(key(r) for r in everything if keep(r))
    assert len(everything) == N + 20
    got = reader(spark, server, subscribePattern="spark-pushdown.*").load().where(where).collect()
    assert sorted(key(r) for r in got) == want
    assert len(got) == len(want), "no row twice"


def test_spark_hands_the_filters_to_the_source(spark, server, topic):
    df = reader(spark, server, subscribe=topic).load().where(
        "partition = 1 AND offset < 10")
    plan = df._jdf.queryExecution().executedPlan().toString()
    # both pushed exactly: Spark keeps no Filter of its own over the scan
    assert not re.search(r"(^|\s)Filter ", plan), plan
    assert df.count() == 10


def _read(server, topic, filters, **options):
    """Plans and reads like Spark does (pushFilters, partitions, read), in
    this process: (rows, Arrow batches fetched, filters left to Spark)."""
    opts = {"kafkalite.bootstrap.servers": server.bootstrap, "subscribe": topic,
            # small fetches: one Arrow batch a few record batches, so that
            # what is fetched shows in the count of batches
            "kafkalite.max.partition.fetch.bytes": "1024", "kafkalite.fetch.max.bytes": "1024",
            **options}
    r = KafkaLiteDataSource(opts).reader(SCHEMA)
    left = list(r.pushFilters(filters))
    rows, batches = [], 0
    for part in r.partitions():
        for b in r.read(part):
            batches += 1
            rows += list(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
    return rows, batches, left


def test_a_pushed_filter_on_offset_and_partition_reads_fewer_batches(server, topic):
    all_rows, all_batches, _ = _read(server, topic, [])
    assert len(all_rows) == N and all_batches >= 20, all_batches
    filters = [EqualTo(("partition",), 2), GreaterThanOrEqual(("offset",), 400),
               LessThan(("offset",), 450), IsNotNull(("offset",))]
    rows, batches, left = _read(server, topic, filters)
    assert left == [], "partition and offset filters are applied exactly by the plan"
    assert sorted(rows) == [(2, o) for o in range(400, 450)]
    assert batches * 5 <= all_batches, (batches, all_batches)


def test_a_pushed_timestamp_bound_starts_late_but_leaves_the_filter_to_spark(server, topic):
    bound = GreaterThanOrEqual(("timestamp",), ms(BASE_TS + 1200))
    rows, batches, left = _read(server, topic, [bound])
    assert left == [bound], "timestamps need not grow with offsets: Spark checks each row"
    want = [(i % PARTS, i // PARTS) for i in range(N) if ts_of(i) >= BASE_TS + 1200]
    # each partition is read from its first record that new, not from its start
    expect = []
    for p in range(PARTS):
        mine = [o for q, o in want if q == p]
        expect += [(p, o) for o in range(min(mine), N // PARTS)] if mine else []
    assert want and sorted(rows) == sorted(expect) and len(rows) < N // 2
    none, _, _ = _read(server, topic, [GreaterThan(("timestamp",), ms(BASE_TS + 10 ** 6))])
    assert none == []


def test_unsupported_filters_are_left_to_spark(server, topic):
    filters = [Not(EqualTo(("partition",), 1)), EqualTo(("value",), b"x"),
               In(("offset",), [3, 9]), GreaterThan(("partition",), 1.5),
               LessThan(("timestamp",), ms(BASE_TS))]
    rows, _, left = _read(server, topic, filters)
    assert left == filters
    # the In on offset still narrowed the read to its span
    assert sorted({o for _, o in rows}) == list(range(3, 10))


def test_pushdown_and_starting_offsets_intersect(server, topic):
    rows, _, _ = _read(server, topic, [GreaterThan(("offset",), 95)],
                       startingOffsets=json.dumps({topic: {"0": 90, "1": 98, "2": -2}}),
                       endingOffsets=json.dumps({topic: {"0": 100, "1": 99, "2": 97}}))
    assert sorted(rows) == [(0, o) for o in range(96, 100)] + [(1, 98), (2, 96)]


def test_spark_timestamps_round_to_kafka_milliseconds():
    at = ms(BASE_TS)
    micro = at + datetime.timedelta(microseconds=1)
    assert src._epoch_ms_at_least(at, strict=False) == BASE_TS
    assert src._epoch_ms_at_least(at, strict=True) == BASE_TS + 1
    assert src._epoch_ms_at_least(micro, strict=False) == BASE_TS + 1
    assert src._epoch_ms_at_least(micro, strict=True) == BASE_TS + 1
    before = ms(BASE_TS) - datetime.timedelta(microseconds=1)
    assert src._epoch_ms_at_least(before, strict=False) == BASE_TS
    assert src._epoch_ms_at_least(datetime.datetime(2024, 1, 1), strict=False) is None


def r(p, a, b):
    return OffsetRange("t", p, a, b)


def test_default_planning_keeps_every_core_busy_without_small_tasks():
    M = 1_000_000
    # one big partition: one task a core
    assert split_ranges([r(0, 0, 10 * M)], None, None, cores=2) == [r(0, 0, 5 * M),
                                                                  r(0, 5 * M, 10 * M)]
    # as many equal partitions as cores or more: as they are
    even = [r(p, 0, 3 * M) for p in range(4)]
    assert split_ranges(even, None, None, cores=2) == even
    # a skewed topic: the big partition is cut to the per-core share
    skewed = split_ranges([r(0, 0, 6 * M), r(1, 0, M), r(2, 0, M)], None, None, cores=2)
    assert max(x.end - x.start for x in skewed) <= 4 * M and len(skewed) == 4
    # small ranges are never split below MIN_TASK_RECORDS
    assert split_ranges([r(0, 0, 1500)], None, None, cores=8) == [r(0, 0, 1500)]
    assert len(split_ranges([r(0, 0, 3 * M)], None, None, cores=8)) == 3
    # minPartitions and maxRecordsPerPartition still decide when given
    assert len(split_ranges([r(0, 0, 1500)], 5, None, cores=2)) == 5
    assert len(split_ranges([r(0, 0, 1500)], None, 100, cores=2)) == 15
    for ranges in ([r(0, 0, 10 * M)], [r(0, 7, 6 * M + 3), r(1, 0, M)]):
        pieces = split_ranges(ranges, None, None, cores=3)
        assert sum(x.end - x.start for x in pieces) == sum(x.end - x.start for x in ranges)
