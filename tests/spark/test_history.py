"""read_with_history against a real server and a real Connect worker with
the Iceberg sink (record format ``kafka``, SQLite catalog): the DataFrame
holds the same (topic, partition, offset, key, value, timestamp) multiset
as a plain read of the topic, no offset twice and none missing, while
most rows come from the copy's Parquet files. The checker that says so is
shown to catch a union whose boundary is one offset off."""
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import create, reader
from kafkalite.client import AdminClient, Producer, TopicPartition
from kafkalite_spark import SCHEMA, read_with_history
from kafkalite_spark.history import DRIVER_READ_MAX_BYTES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "connect"))
from connect_helpers import Connect  # noqa: E402
from harness import wait_until  # noqa: E402

pytest.importorskip("pyiceberg")
ICEBERG = "org.apache.iceberg.connect.IcebergSinkConnector"
BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
T0 = 1_700_000_000_000
TABLE = "lake.history"


def produce(server, topic, partitions, ids):
    """Records ``ids``: null keys and tombstones among them, explicit timestamps."""
    p = Producer(server.config(**{"linger.ms": 2}))
    for i in ids:
        p.produce(topic, None if i % 13 == 5 else b"v%d" % i,
                  None if i % 7 == 3 else b"k%d" % (i % 5), partition=i % partitions,
                  timestamp=T0 + i)
    assert p.flush(30) == 0
    p.close()


def catalog_props(tmp_path):
    return {"uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": f"file://{tmp_path}/warehouse"}


def sink_of(topic):
    """The sink connector that copies ``topic``: its consumer group
    connect-<name> is the topic's alone on the session's shared server."""
    return f"ice-{topic}"


def copy_topic(server, tmp_path, topic, expect: dict):
    """The topic copied by the Iceberg sink in a Connect worker until the
    table's offsets are ``expect`` ({partition: next offset}); the worker
    then stopped, so that what follows stays in the topic only."""
    from kafkalite.connect.connectors.iceberg import sql_catalog, table_offsets
    name = sink_of(topic)
    # the catalog's tables made before the sink's catalog opens it
    cat = sql_catalog("kafkalite", **catalog_props(tmp_path))
    connect = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        connect.create(name, **{"connector.class": ICEBERG, "topics": topic,
                                "iceberg.tables": TABLE,
                                "iceberg.catalog.uri": catalog_props(tmp_path)["uri"],
                                "iceberg.catalog.warehouse": catalog_props(tmp_path)["warehouse"],
                                "iceberg.tables.record-format": "kafka",
                                "key.converter": BYTES, "value.converter": BYTES,
                                "flush.size": "40"})
        want = {(topic, p): off for p, off in expect.items()}

        def offsets():
            try:
                return table_offsets(cat.load_table(TABLE), f"connect-{name}")
            except Exception:  # noqa: BLE001 -- no table yet
                return {}
        wait_until(lambda: offsets() == want, timeout=60,
                   message=lambda: f"table offsets {want}, have {offsets()}")
    finally:
        connect.close()


def keyed(rows):
    """(topic, partition, offset, key, value, timestamp) of each row."""
    return [(r["topic"], r["partition"], r["offset"], r["key"] and bytes(r["key"]),
             r["value"] and bytes(r["value"]), r["timestamp"], r["timestampType"]) for r in rows]


def exactly_once_problems(got_rows, want_rows) -> list[str]:
    """What keeps ``got_rows`` from being ``want_rows`` exactly once: an
    offset twice, an offset missing, a row not in ``want_rows``, or a row
    whose content differs. [] when they are the same multiset."""
    got, want = Counter(keyed(got_rows)), Counter(keyed(want_rows))
    problems = []
    offsets = Counter(k[:3] for k in got.elements())
    problems += [f"offset {k} read {n} times" for k, n in sorted(offsets.items()) if n > 1]
    want_offsets = {k[:3] for k in want}
    problems += [f"offset {k} missing" for k in sorted(want_offsets - set(offsets))]
    problems += [f"row {k} not in the topic read" for k in sorted(set(offsets) - want_offsets)]
    if not problems and got != want:
        problems.append(f"rows differ: {sorted((got - want).elements())[:3]}")
    return problems


@pytest.fixture(scope="module")
def copied(server, tmp_path_factory, module_topic):
    """``topic`` (3 partitions): 300 records copied, then 45 more in the
    topic only; ``other`` (2 partitions, never copied): 20 records."""
    tmp_path = tmp_path_factory.mktemp("history")
    topic, other = module_topic, f"{module_topic}-other"
    create(server, topic, 3)
    create(server, other, 2)
    produce(server, topic, 3, range(300))
    copy_topic(server, tmp_path, topic, {0: 100, 1: 100, 2: 100})
    produce(server, topic, 3, range(300, 345))
    produce(server, other, 2, range(20))
    return {"topic": topic, "other": other, "catalog": catalog_props(tmp_path)}


def history(spark, server, copied, **options):
    return read_with_history(spark, TABLE, copied["catalog"],
                             **{"kafkalite.bootstrap.servers": server.bootstrap, **options})


def plan_of(df) -> str:
    return df._jdf.queryExecution().optimizedPlan().toString()


@pytest.mark.parametrize("driver_read", [True, False], ids=["driver-read", "source-read"])
def test_history_read_is_the_topic_read_exactly_once_mostly_from_parquet(spark, server, copied,
                                                                         driver_read):
    topics = f"{copied['topic']},{copied['other']}"
    df = history(spark, server, copied, subscribe=topics,
                 **({} if driver_read else {"driver_read_max_bytes": 0}))
    # the 65 records the copy lacks: read on the driver into a local relation,
    # or planned as the source's read
    assert ("LocalRelation" in plan_of(df)) is driver_read
    assert ("RelationV2" in plan_of(df)) is not driver_read
    assert df.schema == SCHEMA
    want = reader(spark, server, subscribe=topics).load().collect()
    assert len(want) == 345 + 20
    assert exactly_once_problems(df.collect(), want) == []
    # the copy served its part: Parquet files among the inputs, and the topic
    # reads planned only the tail (45 records) and the uncopied topic (20)
    assert any(f.endswith(".parquet") for f in df.inputFiles())
    # the whole copy is wanted and only the sink wrote the table: the Parquet
    # side is unfiltered, so count() can come from the footers
    assert "Filter" not in df._jdf.queryExecution().optimizedPlan().toString()
    topic_rows = df.where(f"offset >= 100 OR topic = '{copied['other']}'").count()
    assert topic_rows == 45 + 20
    # Spark's filters apply to both sides of the union
    part = df.where("partition = 1 AND offset BETWEEN 90 AND 110").collect()
    assert sorted(r["offset"] for r in part if r["topic"] == copied["topic"]) == \
        list(range(90, 111))


def test_a_tail_past_the_driver_read_limit_goes_to_the_source(spark, server, copied):
    """The driver's read stops where the records pass the limit and the
    source reads them instead: the same rows."""
    topics = f"{copied['topic']},{copied['other']}"
    want = reader(spark, server, subscribe=topics).load().collect()
    df = history(spark, server, copied, subscribe=topics, driver_read_max_bytes=2000)
    assert "RelationV2" in plan_of(df) and "LocalRelation" not in plan_of(df)
    assert exactly_once_problems(df.collect(), want) == []


@pytest.mark.parametrize("start,end", [(40, 105), (100, 115), (0, 60), (105, 110)])
def test_explicit_offsets_across_the_boundary(spark, server, copied, start, end):
    t = copied["topic"]
    opts = {"assign": json.dumps({t: [0, 2]}),
            "startingOffsets": json.dumps({t: {"0": start, "2": -2}}),
            "endingOffsets": json.dumps({t: {"0": end, "2": -1}})}
    got = history(spark, server, copied, **opts).collect()
    want = reader(spark, server, **opts).load().collect()
    assert exactly_once_problems(got, want) == []
    assert sorted(r["offset"] for r in got if r["partition"] == 0) == list(range(start, end))


def test_checker_catches_a_union_whose_boundary_is_one_off(spark, server, copied):
    """The union built wrong (the topic read from one offset before the
    boundary; or the copy taken one offset short of it): the checker names
    the offsets read twice or missed. The same union built right passes."""
    from kafkalite.connect.connectors.iceberg import sql_catalog, table_offsets
    t = copied["topic"]
    table = sql_catalog("kafkalite", **copied["catalog"]).load_table(TABLE)
    boundary = table_offsets(table, f"connect-{sink_of(t)}")
    files = [f.file.file_path for f in table.scan().plan_files()]
    want = reader(spark, server, subscribe=t).load().collect()
    cols = [f.name for f in SCHEMA.fields]

    def union(copy_shift, tail_shift):
        cond = " OR ".join(f"(partition = {p} AND offset < {b + copy_shift})"
                           for (_, p), b in boundary.items())
        tail = reader(spark, server, subscribe=t, startingOffsets=json.dumps(
            {t: {str(p): b + tail_shift for (_, p), b in boundary.items()}})).load()
        return spark.read.parquet(*files).where(cond).select(*cols).unionByName(tail).collect()
    for copy_shift, tail_shift, word in ((0, -1, "read 2 times"), (-1, 0, "missing")):
        problems = exactly_once_problems(union(copy_shift, tail_shift), want)
        assert len(problems) == 3 and all(word in p for p in problems), problems
    assert exactly_once_problems(union(0, 0), want) == []


def test_a_copy_older_than_the_topics_retention_is_returned(spark, server, topic_name,
                                                            tmp_path):
    """The topic lost its first records (DeleteRecords, as retention
    would): reading from earliest returns them from the copy; the rest is
    the plain read of the topic, exactly once. A start past the loss reads
    exactly what the topic has."""
    topic = topic_name
    create(server, topic, 2)
    produce(server, topic, 2, range(120))
    copy_topic(server, tmp_path, topic, {0: 60, 1: 60})
    produce(server, topic, 2, range(120, 140))
    admin = AdminClient(server.config())
    for f in admin.delete_records([TopicPartition(topic, p, 25) for p in range(2)]).values():
        f.result()
    admin.close()
    catalog = catalog_props(tmp_path)
    got = read_with_history(spark, TABLE, catalog, subscribe=topic,
                            **{"kafkalite.bootstrap.servers": server.bootstrap}).collect()
    want = reader(spark, server, subscribe=topic).load().collect()
    assert len(want) == 2 * (70 - 25)
    lost = [r for r in got if r["offset"] < 25]
    assert sorted((r["partition"], r["offset"]) for r in lost) == \
        [(p, o) for p in range(2) for o in range(25)]
    assert exactly_once_problems([r for r in got if r["offset"] >= 25], want) == []
    assert len(got) == len({(r["partition"], r["offset"]) for r in got}) == 140


def test_an_empty_table_reads_the_topic_and_bad_options_are_refused(spark, server, topic_name,
                                                                    tmp_path):
    import pyarrow as pa

    from kafkalite.connect.connectors.iceberg import sql_catalog
    from kafkalite_spark.source import ARROW_SCHEMA
    topic = topic_name
    create(server, topic, 2)
    produce(server, topic, 2, range(30))
    catalog = catalog_props(tmp_path)
    cat = sql_catalog("kafkalite", **catalog)
    cat.create_namespace_if_not_exists("lake")
    cat.create_table(TABLE, schema=pa.schema(list(ARROW_SCHEMA)))       # no snapshot yet
    boot = {"kafkalite.bootstrap.servers": server.bootstrap}
    got = read_with_history(spark, TABLE, catalog, subscribe=topic, **boot).collect()
    assert exactly_once_problems(got, reader(spark, server, subscribe=topic).load().collect()) \
        == []
    for option, value, why in (("includeHeaders", "true", "the copy keeps no headers"),
                               ("startingTimestamp", "1", "timestamps"),
                               ("kafkalite.isolation.level", "read_committed", "read_committed"),
                               ("maxOffsetsPerTrigger", "10", "streaming"),
                               ("colour", "red", "not an option")):
        with pytest.raises(ValueError, match=f"'{option}'.*{why}"):
            read_with_history(spark, TABLE, catalog, subscribe=topic, **boot, **{option: value})
    with pytest.raises(ValueError, match="no Iceberg table 'lake.nope'"):
        read_with_history(spark, "lake.nope", catalog, subscribe=topic, **boot)


def test_a_copy_that_starts_late_leaves_its_head_to_the_topic(spark, server, topic_name,
                                                              tmp_path):
    """The connector's group had committed offset 10 before the sink ever
    wrote (a copy that started mid-topic): offsets 0-9 are in no Parquet
    file, so they come from the topic, the copy's part from the copy."""
    from kafkalite.client import Consumer
    topic = topic_name
    create(server, topic, 2)
    produce(server, topic, 2, range(80))
    c = Consumer(server.config(**{"group.id": f"connect-{sink_of(topic)}"}))
    c.commit(offsets=[TopicPartition(topic, p, 10) for p in range(2)], asynchronous=False)
    c.close()
    copy_topic(server, tmp_path, topic, {0: 40, 1: 40})
    produce(server, topic, 2, range(80, 90))
    want = reader(spark, server, subscribe=topic).load().collect()
    assert len(want) == 90
    for limit in (DRIVER_READ_MAX_BYTES, 0):       # head and tail on the driver, or not
        df = read_with_history(spark, TABLE, catalog_props(tmp_path), subscribe=topic,
                               driver_read_max_bytes=limit,
                               **{"kafkalite.bootstrap.servers": server.bootstrap})
        assert exactly_once_problems(df.collect(), want) == [], limit
    from kafkalite.connect.connectors.iceberg import sql_catalog
    copy = sql_catalog("kafkalite", **catalog_props(tmp_path)).load_table(TABLE).scan() \
        .to_arrow()
    assert sorted(copy["offset"].to_pylist()) == sorted(list(range(10, 40)) * 2)


def test_expired_snapshots_leave_the_older_copy_to_the_topic(spark, server, topic_name,
                                                             tmp_path):
    """The copy made in three commits, the two oldest snapshots expired
    (their rows stay in the table): the oldest snapshot left names rows
    from offset 20 on, so offsets 0-19 come from the topic and the copy is
    filtered from 20 -- not taken whole, which would hold them twice."""
    from kafkalite.connect.connectors.iceberg import sql_catalog
    from pyiceberg.table.snapshots import ancestors_of
    topic = topic_name
    create(server, topic, 2)
    for stage in range(3):
        produce(server, topic, 2, range(stage * 20, stage * 20 + 20))
        copy_topic(server, tmp_path, topic, {0: 10 * stage + 10, 1: 10 * stage + 10})
    produce(server, topic, 2, range(60, 70))
    want = reader(spark, server, subscribe=topic).load().collect()
    assert len(want) == 70

    def read():
        return read_with_history(spark, TABLE, catalog_props(tmp_path), subscribe=topic,
                                 **{"kafkalite.bootstrap.servers": server.bootstrap}).collect()
    # read once before the expiry: the first offsets the oldest snapshot added are
    # remembered (history._FIRST_ADDED); after it, another snapshot is the oldest
    assert exactly_once_problems(read(), want) == []
    table = sql_catalog("kafkalite", **catalog_props(tmp_path)).load_table(TABLE)
    snapshots = list(ancestors_of(table.current_snapshot(), table.metadata))
    assert len(snapshots) == 3
    for old in snapshots[1:]:
        table.maintenance.expire_snapshots().by_id(old.snapshot_id).commit()
    assert exactly_once_problems(read(), want) == []


def test_many_local_files_are_listed_on_the_driver_not_by_a_spark_job(spark, tmp_path):
    """read_parquet_files over 40 local data files (more than the 32 Spark
    lists with a job of its own): every row, no Spark job made to list
    them, and the session's listing setting as it was, set or not. A
    plain spark.read.parquet of the same files, the check's control, does
    make the job."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafkalite_spark.history import LISTING_THRESHOLD_KEY, read_parquet_files
    schema = pa.schema([("offset", pa.int64()), ("value", pa.binary())])
    paths = []
    for i in range(40):
        path = tmp_path / f"{i:03d}.parquet"
        pq.write_table(pa.table({"offset": [2 * i, 2 * i + 1], "value": [b"a", b"b"]},
                                schema=schema), path)
        paths.append(f"file://{path}")
    tracker = spark.sparkContext.statusTracker()
    spark_schema = "offset BIGINT, value BINARY"

    def jobs_made(make):
        before = set(tracker.getJobIdsForGroup())
        df = make()
        return df, set(tracker.getJobIdsForGroup()) - before

    _, control = jobs_made(lambda: spark.read.schema(spark_schema).parquet(*paths))
    assert control, "the control: Spark lists 40 paths with a job"
    for setting in (None, "64"):
        if setting is None:
            spark.conf.unset(LISTING_THRESHOLD_KEY)
        else:
            spark.conf.set(LISTING_THRESHOLD_KEY, setting)
        try:
            df, made = jobs_made(lambda: read_parquet_files(spark, spark_schema, paths))
            assert not made, f"a listing job: {made}"
            assert spark.conf.get(LISTING_THRESHOLD_KEY, None) == setting
            assert sorted(r["offset"] for r in df.collect()) == list(range(80))
        finally:
            spark.conf.unset(LISTING_THRESHOLD_KEY)
