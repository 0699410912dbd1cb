"""The Iceberg sink on a real server (SQL catalog on SQLite): a topic's
records read back, the same rows, through pyiceberg's scan and DuckDB (and
PySpark: tests/spark/test_iceberg_sink.py, in the Spark tests' session); a
table partitioned by day of a field and by hour of the record timestamp;
schema evolution (a new optional column, old rows null).

DuckDB's iceberg extension and Spark's Iceberg runtime jar need a download
this machine cannot make offline, so DuckDB (read_parquet) and Spark
(spark.read.parquet) read the data files that pyiceberg's scan plan lists:
the table's current files, which is what an Iceberg reader reads when the
table has no deletes (this sink only appends)."""
from __future__ import annotations

import json
import os

import pytest
from harness import create, read_all, wait_until

from kafkalite.client import Producer
from kafkalite.iceberg_catalog import sql_catalog

pytest.importorskip("pyiceberg")
ICEBERG = "org.apache.iceberg.connect.IcebergSinkConnector"
DAY = 86_400_000
T0 = 1_700_000_000_000


def catalog(tmp_path):
    return sql_catalog("kafkalite", uri=f"sqlite:///{tmp_path}/catalog.db",
                      warehouse=f"file://{tmp_path}/warehouse")


def sink_config(tmp_path, topic, table, **more):
    return {"connector.class": ICEBERG, "topics": topic, "iceberg.tables": table,
            "iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse", **more}


def table_rows(cat, name):
    """The table's rows by pyiceberg's scan, sorted by (partition, offset); [] before it exists."""
    from pyiceberg.exceptions import NoSuchTableError
    try:
        t = cat.load_table(name)
    except NoSuchTableError:
        return []
    return sorted(t.scan().to_arrow().to_pylist(),
                  key=lambda r: (r["__kafka_partition"], r["__kafka_offset"]))


def envelope(schema_fields, payload):
    return json.dumps({"schema": {"type": "struct", "optional": False, "fields": schema_fields},
                       "payload": payload}).encode()


FIELDS = [{"field": "id", "type": "int64", "optional": False},
          {"field": "name", "type": "string", "optional": True},
          {"field": "amount", "type": "float64", "optional": True},
          {"field": "at", "type": "int64", "optional": True,
           "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}]


def produce_rows(server, topic, ids):
    p = Producer(server.config())
    for i in ids:
        p.produce(topic, partition=i % 2, value=envelope(FIELDS, {
            "id": i, "name": f"n{i}", "amount": i * 0.5, "at": T0 + (i % 3) * DAY + i}))
    p.flush(30)
    p.close()


def topic_rows(server, topic, n):
    """(partition, offset, id, name, amount, at ms) of the topic's records."""
    out = []
    for m in read_all(server, topic, 2, n, timeout=30):
        v = json.loads(m.value())["payload"]
        out.append((m.partition(), m.offset(), v["id"], v["name"], v["amount"], v["at"]))
    return sorted(out)


def as_tuples(rows):
    return sorted((r["__kafka_partition"], r["__kafka_offset"], r["id"], r["name"], r["amount"],
                   int(r["at"].timestamp() * 1000)) for r in rows)


def test_iceberg_sink_rows_read_back_in_pyiceberg_and_duckdb_partitioned_by_day(
        connect, server, topic_name, sink_name, tmp_path):
    import duckdb
    create(server, topic_name, 2)
    produce_rows(server, topic_name, range(300))
    cat = catalog(tmp_path)     # the catalog's tables made before the sink's catalog opens it
    connect.create(sink_name, **sink_config(tmp_path, topic_name, "lake.rows",
                                            **{"iceberg.tables.default-partition-by": "day(at)",
                                               "flush.size": "100"}))
    wait_until(lambda: len(table_rows(cat, "lake.rows")) >= 300, timeout=60,
               message="300 rows in the table")
    want = topic_rows(server, topic_name, 300)
    assert as_tuples(table_rows(cat, "lake.rows")) == want
    table = cat.load_table("lake.rows")
    assert str(table.spec().fields[0].transform) == "day"
    # the group's offsets are the table's, and the snapshot carries them
    summary = table.current_snapshot().summary.additional_properties
    assert json.loads(summary[f"kafka.connect.offsets.connect-{sink_name}"]) == {
        topic_name: {"0": 150, "1": 150}}
    wait_until(lambda: sorted(o["offset"]["kafka_offset"] for o in connect.http(
        "GET", f"/connectors/{sink_name}/offsets").json()["offsets"]) == [150, 150], timeout=60,
               message="group commits")
    # time partitioning: three days, each data file holds one day's rows
    files = [t.file for t in table.scan().plan_files()]
    paths = [f.file_path.removeprefix("file://") for f in files]
    days = set()
    for f, path in zip(files, paths):
        got = duckdb.sql(f"SELECT DISTINCT epoch_ms(\"at\") // {DAY} FROM read_parquet('{path}')"
                         ).fetchall()
        assert got == [(f.partition[0],)]
        days.add(got[0][0])
    assert len(days) == 3
    # DuckDB over the files of the scan plan: the same rows
    listed = ", ".join(f"'{p}'" for p in paths)
    got = duckdb.sql(f"SELECT __kafka_partition, __kafka_offset, id, name, amount, "
                     f"epoch_ms(\"at\") FROM read_parquet([{listed}])").fetchall()
    assert sorted(got) == want


def test_iceberg_schema_evolution_and_hourly_partitions_of_the_record_timestamp(
        connect, server, topic_name, sink_name, tmp_path):
    create(server, topic_name, 2)
    v1 = FIELDS[:2]
    v2 = v1 + [{"field": "score", "type": "float32", "optional": True}]
    p = Producer(server.config())

    def send(fields, ids, **extra):
        for i in ids:
            p.produce(topic_name, partition=i % 2, timestamp=T0 + (i % 3) * 3_600_000,
                      value=envelope(fields, {"id": i, "name": f"n{i}", **extra}))
        p.flush(30)
    send(v1, range(0, 40))
    # the catalog's tables made here before the sink's catalog opens it (pyiceberg's
    # creation of them raced with the sink's once: "iceberg_namespace_properties
    # already exists")
    cat = catalog(tmp_path)
    connect.create(sink_name, **sink_config(
        tmp_path, topic_name, "lake.evolving",
        **{"iceberg.tables.default-partition-by": "hour(__kafka_timestamp)"}))
    wait_until(lambda: len(table_rows(cat, "lake.evolving")) >= 40, timeout=60,
               message="40 v1 rows")
    for i in range(40, 80):
        send(v2, [i], score=i / 4)
    send(v1, range(80, 100))       # an old producer again: its rows have no score
    wait_until(lambda: len(table_rows(cat, "lake.evolving")) >= 100, timeout=60, message="100 rows")
    p.close()
    table = cat.load_table("lake.evolving")
    score = table.schema().find_field("score")
    assert not score.required and str(score.field_type) == "float"
    rows = table_rows(cat, "lake.evolving")
    assert sorted(r["id"] for r in rows) == list(range(100))
    assert all((r["score"] == r["id"] / 4) if 40 <= r["id"] < 80 else r["score"] is None
               for r in rows)
    # partitioned by the hour of the record timestamp: three hours, one per file group
    parts = {t.file.partition[0] for t in table.scan().plan_files()}
    assert parts == {T0 // 3_600_000 + h for h in range(3)}


def test_a_backlog_read_to_its_end_is_committed_without_waiting_for_the_flush_interval(
        server, topic_name, sink_name, tmp_path):
    """A sink started behind a backlog (300 records, fetched a batch at a
    time) commits the table and the group's offsets once it has read the
    backlog to its end, not at the worker's next offset.flush.interval.ms
    (a minute here); on the old code nothing was committed before it."""
    from connect_helpers import Connect
    create(server, topic_name, 2)
    for lo in range(0, 300, 50):        # batches of 25 records a partition: a fetch each
        produce_rows(server, topic_name, range(lo, lo + 50))
    cat = catalog(tmp_path)
    connect = Connect(server, offset_file=tmp_path / "offsets.json",
                      **{"offset.flush.interval.ms": 60_000,
                         "consumer.max.partition.fetch.bytes": 4096})
    try:
        connect.create(sink_name, **sink_config(tmp_path, topic_name, "lake.drained"))
        wait_until(lambda: sorted(o["offset"]["kafka_offset"] for o in connect.http(
            "GET", f"/connectors/{sink_name}/offsets").json()["offsets"]) == [150, 150],
                   timeout=30, message="the group's offsets at the backlog's end")
        assert as_tuples(table_rows(cat, "lake.drained")) == topic_rows(server, topic_name, 300)
    finally:
        connect.close()


def test_a_backlog_longer_than_flush_size_is_one_snapshot_of_files_written_as_it_is_read(
        server, topic_name, sink_name, tmp_path):
    """A backlog of 300 records read a fetch at a time, ``flush.size`` 100:
    every 100 buffered records are written as data files (the memory
    bound), and the backlog's end commits them all in one snapshot, the
    worker's interval commits meanwhile (every 2 s) let pass. The code
    before committed a snapshot at each flush.size: three or more."""
    from connect_helpers import Connect
    create(server, topic_name, 2)
    for lo in range(0, 300, 50):        # batches of 25 records a partition: a fetch each
        produce_rows(server, topic_name, range(lo, lo + 50))
    cat = catalog(tmp_path)
    connect = Connect(server, offset_file=tmp_path / "offsets.json",
                      **{"offset.flush.interval.ms": 2000,
                         "consumer.max.partition.fetch.bytes": 4096})
    try:
        connect.create(sink_name, **sink_config(tmp_path, topic_name, "lake.backlog",
                                                **{"flush.size": "100"}))
        wait_until(lambda: sorted(o["offset"]["kafka_offset"] for o in connect.http(
            "GET", f"/connectors/{sink_name}/offsets").json()["offsets"]) == [150, 150],
                   timeout=30, message="the group's offsets at the backlog's end")
        table = cat.load_table("lake.backlog")
        assert as_tuples(table_rows(cat, "lake.backlog")) == topic_rows(server, topic_name, 300)
        sizes = [s.summary.additional_properties.get("added-records")
                 for s in table.metadata.snapshots]
        assert sizes == ["300"], f"snapshots of {sizes} records"
        # written in pieces of at most flush.size (100) records as they came, not at the end
        files = [t.file.record_count for t in table.scan().plan_files()]
        assert len(files) >= 3 and max(files) <= 100, files
    finally:
        connect.close()


def test_a_task_keeping_up_with_a_stream_commits_at_the_interval_not_every_poll(
        server, topic_name, sink_name, tmp_path):
    """The other side of the backlog's commit: a task that reads each new
    batch to the partitions' ends as it comes is never behind, so it asks
    for no commit of its own (one snapshot per poll would swamp a table):
    after the first put since open, which read that backlog to its end and
    committed it, four more batches sit buffered until the worker's
    interval (a minute here). A guard: the code before never committed
    early."""
    from connect_helpers import Connect
    create(server, topic_name, 2)
    cat = catalog(tmp_path)
    connect = Connect(server, offset_file=tmp_path / "offsets.json",
                      **{"offset.flush.interval.ms": 60_000})
    try:
        connect.create(sink_name, **sink_config(tmp_path, topic_name, "lake.steady"))
        produce_rows(server, topic_name, range(10))
        wait_until(lambda: len(table_rows(cat, "lake.steady")) == 10, timeout=30,
                   message="the first batch committed")
        runtime = connect.herder._connectors[sink_name]
        task = runtime.tasks[0].task
        for k in range(1, 5):
            produce_rows(server, topic_name, range(10 * k, 10 * k + 10))
            wait_until(lambda: task.buffered == 10 * k, timeout=30,
                       message=lambda: f"{10 * k} records buffered ({task.buffered})")
        assert len(cat.load_table("lake.steady").metadata.snapshots) == 1
    finally:
        connect.close()


def test_bad_partition_spec_is_a_400_naming_the_field(connect, topic_name, tmp_path):
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": sink_config(
        tmp_path, topic_name, "lake.bad", **{"iceberg.tables.default-partition-by": "week(at)"})})
    assert r.status_code == 400 and "iceberg.tables.default-partition-by" in r.json()["message"]


class _Context:
    """What a sink task asks of its worker here: seeks (recorded)."""

    def __init__(self):
        self.seeks = {}

    def offset(self, offsets):
        self.seeks.update(offsets)


def _task(tmp_path, topic, partitions):
    from kafkalite.client import TopicPartition
    from kafkalite.connect.api import SinkRecord
    from kafkalite.connect.connectors.iceberg import IcebergSinkTask
    from kafkalite.connect.data import Schema, SchemaBuilder
    task = IcebergSinkTask()
    task.initialize(_Context())
    task.start({"name": "ice", **sink_config(tmp_path, topic, "lake.shared")})
    task.open([TopicPartition(topic, p) for p in partitions])
    schema = SchemaBuilder.struct().field("id", Schema.INT64).build()

    def put(partition, first, count):
        task.put([SinkRecord(topic, partition, None, None, schema, {"id": o}, T0, [], o)
                  for o in range(first, first + count)])
        return task.pre_commit({(topic, partition): first + count})
    return task, put


def test_iceberg_tasks_committing_at_once_retry_and_a_zombie_is_fenced(tmp_path):
    """Two sink tasks (each with its own catalog connection, as in two
    workers) commit to one table at once: lost races are redone with the
    offsets recomputed, so the snapshot ends with both partitions' offsets
    and every row once. Then a rebalance gives partition 0 to a new task
    while the old one still holds a batch of it (a zombie): the zombie's
    commit is fenced, its batch dropped and its partition re-sought."""
    import threading
    topic = "t"
    a, put_a = _task(tmp_path, topic, [0])
    b, put_b = _task(tmp_path, topic, [1])
    put_a(0, 0, 1)      # creates the table

    def run(put, partition):
        for i in range(15):
            put(partition, 1 + i * 10 if partition == 0 else i * 10, 10)
    threads = [threading.Thread(target=run, args=(put_a, 0)),
               threading.Thread(target=run, args=(put_b, 1))]
    [t.start() for t in threads]
    [t.join(120) for t in threads]
    cat = catalog(tmp_path)
    table = cat.load_table("lake.shared")
    summary = table.current_snapshot().summary.additional_properties
    assert json.loads(summary["kafka.connect.offsets.connect-ice"]) == {"t": {"0": 151, "1": 150}}
    rows = table_rows(cat, "lake.shared")
    assert [(r["__kafka_partition"], r["__kafka_offset"]) for r in rows] == \
        [(0, o) for o in range(151)] + [(1, o) for o in range(150)]
    assert a.commit_retries + b.commit_retries > 0, "no race happened: the test shows nothing"
    # the rebalance: c owns partition 0 now and commits; a still has a batch of it
    a.put([])
    c, put_c = _task(tmp_path, topic, [0])
    assert c.context.seeks == {("t", 0): 151}
    assert put_c(0, 151, 5)[("t", 0)] == 156
    assert put_a(0, 151, 5).get(("t", 0)) == 156          # fenced: nothing written twice
    assert a.context.seeks == {("t", 0): 156}
    rows = table_rows(cat, "lake.shared")
    assert [r["__kafka_offset"] for r in rows if r["__kafka_partition"] == 0] == list(range(156))


def test_a_task_that_loses_the_race_to_create_the_table_writes_into_the_winners(tmp_path):
    """Two tasks find no table and both create it: the SQL catalog refuses
    the loser's create at its commit (CommitFailedException, "Table already
    exists"), and the loser writes into the winner's table instead of
    failing (a fresh-clone suite run met it: the task FAILED). The race is
    made to happen: b creates the table while a's create is open."""
    topic = "t"
    a, put_a = _task(tmp_path, topic, [0])
    b, put_b = _task(tmp_path, topic, [1])
    opened = a.catalog.create_table_transaction

    def open_then_lose(*args, **kwargs):
        tx = opened(*args, **kwargs)
        put_b(1, 0, 3)          # b finds no table either, creates it and commits
        return tx
    a.catalog.create_table_transaction = open_then_lose
    assert put_a(0, 0, 2)[(topic, 0)] == 2
    rows = table_rows(catalog(tmp_path), "lake.shared")
    assert [(r["__kafka_partition"], r["__kafka_offset"]) for r in rows] == \
        [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]


def test_a_task_that_loses_the_race_to_create_the_namespace_creates_its_table(tmp_path):
    """The same race one step earlier: b creates the namespace between a's
    check that it is missing and a's insert of it, which the SQL catalog
    refuses (IntegrityError, a key that exists); a goes on to its table."""
    topic = "t"
    a, put_a = _task(tmp_path, topic, [0])
    b, _ = _task(tmp_path, topic, [1])
    exists = a.catalog.namespace_exists

    def missing_until_b_creates_it(namespace):
        found = exists(namespace)
        if not found:
            b.catalog.create_namespace(namespace)
        return found
    a.catalog.namespace_exists = missing_until_b_creates_it
    assert put_a(0, 0, 2)[(topic, 0)] == 2
    rows = table_rows(catalog(tmp_path), "lake.shared")
    assert [(r["__kafka_partition"], r["__kafka_offset"]) for r in rows] == [(0, 0), (0, 1)]


def test_iceberg_sink_fails_its_task_with_a_message_on_values_it_cannot_write(
        connect, server, topic_name, sink_name, tmp_path):
    """Plain strings are no table rows: the task is FAILED with a message
    naming the partition; the worker and its REST API go on."""
    create(server, topic_name)
    p = Producer(server.config())
    p.produce(topic_name, value=b"just text")
    p.flush(30)
    p.close()
    connect.create(sink_name, **sink_config(
        tmp_path, topic_name, "lake.text",
        **{"value.converter": "org.apache.kafka.connect.storage.StringConverter"}))
    task = wait_until(lambda: (t := connect.state(sink_name)["tasks"]) and t[0]["state"] == "FAILED"
                      and t[0], timeout=60, message="the task FAILED")
    assert f"{topic_name}-0: the Iceberg sink writes struct or map values" in task["trace"]
    assert connect.http("GET", "/connectors").json() == [sink_name]


def test_consumer_close_releases_its_sockets_when_on_revoke_raises(server, topic_name):
    """Found through the test above: a failed sink task's consumer.close()
    runs the revoke callback, whose commit raises again; close() then left
    its connections and ZeroMQ context open (file descriptors leaked, and
    the context's term() at interpreter exit blocked pytest forever). The
    exception still reaches the caller, and every descriptor is released."""
    from kafkalite.client import Consumer
    create(server, topic_name)
    p = Producer(server.config())
    p.produce(topic_name, value=b"x")
    p.flush(30)
    p.close()
    before = len(os.listdir("/proc/self/fd"))
    c = Consumer(server.config(**{"group.id": f"g-{topic_name}", "auto.offset.reset": "earliest"}))

    def on_revoke(consumer, parts):
        raise RuntimeError("the sink's commit failed")
    c.subscribe([topic_name], on_revoke=on_revoke)
    wait_until(lambda: c.consume(10, 0.2), timeout=60, message="the record")
    with pytest.raises(RuntimeError, match="the sink's commit failed"):
        c.close()
    assert len(os.listdir("/proc/self/fd")) <= before


BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"


def test_kafka_record_format_rows_are_the_records_as_spark_reads_them(
        connect, server, topic_name, sink_name, tmp_path):
    """iceberg.tables.record-format=kafka: one row per record with Spark's
    Kafka source columns and types, key and value the log's bytes (null
    keys and tombstones included), the table's offsets as in the value format."""
    create(server, topic_name, 2)
    p = Producer(server.config())
    for i in range(50):
        p.produce(topic_name, partition=i % 2, key=None if i % 5 == 0 else b"k%d" % i,
                  value=None if i % 7 == 0 else b"\x00\xffv%d" % i, timestamp=T0 + i)
    p.flush(30)
    p.close()
    cat = catalog(tmp_path)     # the catalog's tables made before the sink's catalog opens it
    connect.create(sink_name, **sink_config(tmp_path, topic_name, "lake.records", **{
        "iceberg.tables.record-format": "kafka", "key.converter": BYTES,
        "value.converter": BYTES}))

    def rows():
        from pyiceberg.exceptions import NoSuchTableError
        try:
            return cat.load_table("lake.records").scan().to_arrow()
        except NoSuchTableError:
            return None
    wait_until(lambda: (t := rows()) is not None and t.num_rows >= 50, timeout=60,
               message="50 rows")
    table = cat.load_table("lake.records")
    assert [(f.name, str(f.field_type)) for f in table.schema().fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "long"), ("timestamp", "timestamptz"), ("timestampType", "int")]
    got = sorted((r["partition"], r["offset"], r["key"], r["value"], r["topic"],
                  int(r["timestamp"].timestamp() * 1000), r["timestampType"])
                 for r in rows().to_pylist())
    want = sorted((m.partition(), m.offset(), m.key(), m.value(), topic_name,
                   m.timestamp()[1], 0) for m in read_all(server, topic_name, 2, 50, timeout=30))
    assert got == want and sum(r[3] is None for r in got) == 8
    summary = table.current_snapshot().summary.additional_properties
    assert json.loads(summary[f"kafka.connect.offsets.connect-{sink_name}"]) == {
        topic_name: {"0": 25, "1": 25}}


def test_kafka_record_format_without_byte_array_converters_is_a_400(connect, topic_name,
                                                                   tmp_path):
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": sink_config(
        tmp_path, topic_name, "lake.bad", **{"iceberg.tables.record-format": "kafka",
                                             "key.converter": BYTES})})
    assert r.status_code == 400
    assert "value.converter must be " + BYTES in r.json()["message"]
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": sink_config(
        tmp_path, topic_name, "lake.bad", **{"iceberg.tables.record-format": "avro"})})
    assert r.status_code == 400 and "iceberg.tables.record-format" in r.json()["message"]


def test_the_table_is_filed_under_the_catalog_name_iceberg_s_keys_give(
        connect, server, topic_name, sink_name, tmp_path):
    """Apache Iceberg's sink keys for a JDBC catalog: ``iceberg.catalog`` names
    the catalog (a reader's catalog of that name finds the table; one named
    otherwise, such as the default ``kafkalite``, does not), ``catalog-impl``
    JdbcCatalog with a JDBC ``uri`` (pyiceberg's SqlCatalog shares its tables);
    a catalog type other than a SQL one is refused naming the key."""
    from pyiceberg.exceptions import NoSuchTableError

    from kafkalite.connect.connectors.iceberg import catalog_properties
    create(server, topic_name, 2)
    produce_rows(server, topic_name, range(50))
    uri, warehouse = f"sqlite:///{tmp_path}/catalog.db", f"file://{tmp_path}/warehouse"
    lake = sql_catalog("lake", uri=uri, warehouse=warehouse)
    config = {"connector.class": ICEBERG, "topics": topic_name, "iceberg.tables": "db.orders",
              "iceberg.catalog": "lake",
              "iceberg.catalog.catalog-impl": "org.apache.iceberg.jdbc.JdbcCatalog",
              "iceberg.catalog.uri": f"jdbc:sqlite:{tmp_path}/catalog.db",
              "iceberg.catalog.warehouse": warehouse, "flush.size": "50"}
    r = connect.http("POST", "/connectors", json={"name": sink_name, "config": {
        **config, "iceberg.catalog.type": "rest"}})
    assert r.status_code == 400 and "iceberg.catalog.type" in r.text, r.text
    connect.create(sink_name, **config)
    wait_until(lambda: len(table_rows(lake, "db.orders")) >= 50, timeout=60,
               message=lambda: f"50 rows under the catalog lake: {connect.state(sink_name)}")
    assert as_tuples(table_rows(lake, "db.orders")) == topic_rows(server, topic_name, 50)
    with pytest.raises(NoSuchTableError):
        sql_catalog("kafkalite", uri=uri, warehouse=warehouse).load_table("db.orders")
    # Iceberg's JdbcCatalog settings on PostgreSQL, as SqlCatalog takes them
    assert catalog_properties({
        "iceberg.catalog.uri": "jdbc:postgresql://db.example:5433/lake?sslmode=require",
        "iceberg.catalog.jdbc.user": "ice", "iceberg.catalog.jdbc.password": "p@ss",
        "iceberg.catalog.type": "jdbc", "iceberg.catalog.warehouse": "s3://w"}) == {
        "uri": "postgresql+psycopg://ice:p%40ss@db.example:5433/lake?sslmode=require",
        "warehouse": "s3://w"}
