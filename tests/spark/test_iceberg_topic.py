"""kafkalite_spark.read_topic against a real server's Iceberg topic
(``iceberg.mode=key_value``): two committed rounds of records in the
table's Parquet files (over two hours of timestamps, so several files per
partition) and an uncommitted tail in the topic only. The function's rows
are those of ``spark.read.format("kafkalite")`` over the same topic, row
for row (offsets, keys, values, timestamps, timestamp types, headers), its
partition/offset options and a ``where`` on its result give the rows the
full read filtered gives, reading fewer of the table's files, and the
committed part is Spark's own Parquet scan."""
import json
import sys
from pathlib import Path

import pytest

from conftest import reader
from kafkalite.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from kafkalite.client.admin import ConfigResource

pytest.importorskip("pyiceberg")
from kafkalite_spark import read_topic  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "server"))
from harness import ServerProcess, stop_server, wait_until  # noqa: E402
from iceberg_tables import table_offsets  # noqa: E402
from moto_s3 import moto_s3_server  # noqa: E402

T0 = 1_700_000_000_000
HOUR = 3_600_000
PARTITIONS = 2


def produce(server, topic, ids):
    """Records ``ids``, alternately on the two partitions; null keys, a
    tombstone and headers among them; timestamps over two hours."""
    p = Producer(server.config(**{"linger.ms": 2}))
    for i in ids:
        p.produce(topic, None if i % 13 == 5 else b"v%d" % i,
                  None if i % 7 == 3 else b"k%d" % (i % 5), partition=i % PARTITIONS,
                  timestamp=T0 + (i % 4) * HOUR // 2 + i,
                  headers=[("n", b"%d" % i), ("h", None)] if i % 3 == 0 else None)
    assert p.flush(30) == 0
    p.close()


def set_configs(server, topic, **configs):
    admin = AdminClient(server.config())
    try:
        resource = ConfigResource("topic", topic, set_config=configs)
        admin.alter_configs([resource])[resource].result()
    finally:
        admin.close()


def ends(server, topic):
    c = Consumer(server.config())
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)}
    finally:
        c.close()


def create_iceberg_topic(server, topic) -> dict:
    """``topic`` made an Iceberg topic committing every 200 ms; its configs."""
    admin = AdminClient(server.config())
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"}
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, config=configs)]).values():
        f.result()
    admin.close()
    return configs


def produce_committed(server, topic, ids) -> dict:
    """produce(), then wait until the table holds every record of the topic;
    the topic's end offsets."""
    produce(server, topic, ids)
    want = ends(server, topic)
    wait_until(lambda: table_offsets(server.data_dir, topic) == want, timeout=60,
               message=lambda: f"table offsets {want}, have "
                               f"{table_offsets(server.data_dir, topic)}")
    return want


@pytest.fixture(scope="module")
def iceberg_topic(server, module_topic):
    """The topic: 160 records committed in two rounds, then 40 in the topic only."""
    topic = module_topic
    configs = create_iceberg_topic(server, topic)
    for ids in (range(0, 100), range(100, 160)):
        produce_committed(server, topic, ids)
    # no commit for an hour from now on: what follows stays in the topic only
    set_configs(server, topic, **{**configs, "iceberg.target.lag.ms": "3600000"})
    produce(server, topic, range(160, 200))
    return {"topic": topic, "committed": table_offsets(server.data_dir, topic),
            "ends": ends(server, topic)}


def rows(df):
    """(partition, offset) -> the row's every column, headers as tuples."""
    out = {}
    for r in df.collect():
        d = r.asDict()
        if "headers" in d:
            d["headers"] = None if d["headers"] is None else \
                tuple((h["key"], h["value"] and bytes(h["value"])) for h in d["headers"])
        d["key"] = d["key"] and bytes(d["key"])
        d["value"] = d["value"] and bytes(d["value"])
        assert (d["partition"], d["offset"]) not in out, f"offset {d['partition'], d['offset']} twice"
        out[(d["partition"], d["offset"])] = d
    return out


def history(spark, server, iceberg_topic, **options):
    return read_topic(spark, server.bootstrap, iceberg_topic["topic"],
                      server.info["iceberg_rest"], **options)


def plain(spark, server, iceberg_topic, **options):
    return reader(spark, server, subscribe=iceberg_topic["topic"], **options).load()


def check_tail_uncommitted(server, iceberg_topic):
    """The test read a tail from the topic: the table still lacks it."""
    committed = table_offsets(server.data_dir, iceberg_topic["topic"])
    assert committed == iceberg_topic["committed"], "a commit after the fixture's"
    assert all(committed[p] < iceberg_topic["ends"][p] for p in range(PARTITIONS))


@pytest.mark.parametrize("driver_read_max_bytes", [None, 0], ids=["driver-tail", "source-tail"])
def test_same_rows_as_the_source(spark, server, iceberg_topic, driver_read_max_bytes):
    extra = {} if driver_read_max_bytes is None else {"driver_read_max_bytes": 0}
    got = rows(history(spark, server, iceberg_topic, includeHeaders="true", **extra))
    want = rows(plain(spark, server, iceberg_topic, includeHeaders="true"))
    assert len(want) == 200
    assert sorted(set(want) - set(got)) == [], "offsets missing"
    assert sorted(set(got) - set(want)) == [], "offsets not in the topic"
    differ = [k for k in sorted(want) if got[k] != want[k]]
    assert not differ, f"rows differ, first {differ[0]}: {got[differ[0]]} != {want[differ[0]]}"
    # without headers: the source's seven columns, in its order and types
    df = history(spark, server, iceberg_topic, **extra)
    assert df.schema == plain(spark, server, iceberg_topic).schema
    assert df.count() == 200
    check_tail_uncommitted(server, iceberg_topic)


def test_plan_reads_the_table_with_spark_parquet(spark, server, iceberg_topic):
    df = history(spark, server, iceberg_topic)
    plan = df._jdf.queryExecution().executedPlan().toString()
    assert "FileScan parquet" in plan, plan
    files = df.inputFiles()
    assert len(files) >= 2 * PARTITIONS and all("/warehouse/" in f for f in files), files
    # the Parquet part holds every committed offset: a read of the files alone
    parquet = spark.read.parquet(*files)
    assert parquet.count() == sum(iceberg_topic["committed"].values())
    # and the rest, the tail, once: every offset of the topic counted once
    assert df.count() == sum(iceberg_topic["ends"].values())


@pytest.mark.parametrize("options,where", [
    ({"assign": "partition 1"}, "partition = 1"),
    ({"offsets": {0: (30, 90), 1: (0, 45)}}, "(partition = 0 AND offset >= 30 AND offset < 90) "
                                              "OR (partition = 1 AND offset < 45)"),
    ({"offsets": {0: (85, -1), 1: (79, 95)}}, "(partition = 0 AND offset >= 85) "
                                              "OR (partition = 1 AND offset >= 79 "
                                              "AND offset < 95)"),
], ids=["partition", "offsets-in-table", "offsets-across-tail"])
def test_filters_give_the_filtered_rows(spark, server, iceberg_topic, options, where):
    topic = iceberg_topic["topic"]
    full = history(spark, server, iceberg_topic)
    want = rows(plain(spark, server, iceberg_topic).where(where))
    if "assign" in options:
        opts = {"assign": json.dumps({topic: [1]})}
    else:
        opts = {"startingOffsets": json.dumps({topic: {str(p): lo for p, (lo, _) in
                                                       options["offsets"].items()}}),
                "endingOffsets": json.dumps({topic: {str(p): hi for p, (_, hi) in
                                                     options["offsets"].items()}})}
    pruned = history(spark, server, iceberg_topic, **opts)
    assert rows(pruned) == want
    assert rows(full.where(where)) == want
    # the options choose the table's files by the manifests' bounds
    assert set(pruned.inputFiles()) < set(full.inputFiles())
    check_tail_uncommitted(server, iceberg_topic)


def test_a_table_in_the_s3_store_is_refused_naming_what_spark_lacks(spark, tmp_path):
    """With tiered storage in S3 the table's files are s3:// objects
    (docs/iceberg-topics.md), which Spark opens only with hadoop-aws (not
    shipped): read_topic says so before reading, rather than reading the
    table's offsets from the topic (whose retention may have deleted them)
    or failing deep in Hadoop. Where the read needs none of the table's
    files (offsets past what it holds), it still reads the topic."""
    from pyiceberg.catalog import load_catalog

    from kafkalite.storage.iceberg.topic_table import committed_offsets
    with moto_s3_server("spark-iceberg") as s3:
        config = tmp_path / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "spark-iceberg"\n'
                          f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n')
        srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
        try:
            topic = "s3-events"
            admin = AdminClient(srv.config())
            for f in admin.create_topics([NewTopic(topic, PARTITIONS, config={
                    "iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"})]).values():
                f.result()
            admin.close()
            produce(srv, topic, range(40))
            want = ends(srv, topic)
            catalog = load_catalog("kafkalite", type="rest", uri=srv.info["iceberg_rest"])
            wait_until(lambda: catalog.table_exists(("kafkalite", topic)) and committed_offsets(
                catalog.load_table(("kafkalite", topic))) == want, timeout=60,
                message=f"the table to hold {want}")
            with pytest.raises(ValueError, match=r"keeps its files in s3:// \(s3://spark-iceberg/"
                                                 r"iceberg/.*hadoop-aws"):
                read_topic(spark, srv.bootstrap, topic, srv.info["iceberg_rest"])
            # a tail the table will not take for an hour: no file of it to open
            set_configs(srv, topic, **{"iceberg.mode": "key_value",
                                       "iceberg.target.lag.ms": "3600000"})
            produce(srv, topic, range(40, 60))
            tail = read_topic(spark, srv.bootstrap, topic, srv.info["iceberg_rest"],
                              startingOffsets=json.dumps({topic: {str(p): o
                                                                  for p, o in want.items()}}))
            assert sorted(r.offset for r in tail.collect()) == sorted(
                o for p in want for o in range(want[p], want[p] + 10))
        finally:
            stop_server(srv)


def test_a_new_snapshot_is_planned_again(spark, server, module_topic):
    """read_topic plans a snapshot once (its manifests read once) and a
    newer one afresh: after another commit, the next read takes the new
    data files, every row from the table, none from a stale plan's tail."""
    topic = module_topic + "-again"
    create_iceberg_topic(server, topic)
    reads = []
    for ids in (range(0, 40), range(40, 100)):
        want = produce_committed(server, topic, ids)
        for _ in range(2):          # the second read of a snapshot: its plan kept
            df = read_topic(spark, server.bootstrap, topic, server.info["iceberg_rest"])
            plan = df._jdf.queryExecution().executedPlan().toString()
            assert "FileScan parquet" in plan and "PythonScan" not in plan, plan
            assert sorted(r["offset"] for r in df.collect() if r["partition"] == 0) == \
                list(range(want[0]))
            reads.append(set(df.inputFiles()))
    assert reads[0] == reads[1] and reads[2] == reads[3] and reads[1] < reads[2], reads
