"""bench_connect_iceberg.py's format rounds (issue 75): the Iceberg sink
alone, reading a full topic in each of the three common value formats,
beside its ceiling in the same round, the two taking turns going first,
the load average beside each round.

Formats (``--formats``, the same rows in each: id int64, a 20-character
name, a double amount, a millisecond timestamp ``modified``):

- ``json``: JsonConverter with schemas (Kafka Connect's default), the
  envelope a JDBC source writes;
- ``schemaless``: JsonConverter with ``schemas.enable=false``, the payload
  object alone (``modified`` a number: JSON has no timestamp);
- ``avro``: Confluent's AvroConverter through the server's schema registry.

One side of a round, on a table of its own in one SQL catalog, partitioned
by day of ``__kafka_timestamp``:

- sink: an IcebergSinkConnector (standalone worker in this process,
  ``consumer.max.poll.records`` 10,000, 10 MB fetches), timed from its
  creation until its group committed every row (committed = in a table
  snapshot, so the figure moves in steps of ``offset.flush.interval.ms``);
- ceiling: the same rows as one Arrow table of the columns and types the
  sink writes for that format (made beforehand, not timed), written by one
  pyiceberg append, timed from the table's creation to the append's commit.

Figures: rows/s, and the CPU a row costs in this process (every thread:
the worker's task, its consumer, the commits; not the server's, which
serves the fetches), in µs: the main figure on a machine others load.
"""
from __future__ import annotations

import os
import time

from bench_connect import SINK_FETCH_BYTES, create_topic, load_average

FORMATS = ("json", "schemaless", "avro")
BASE_MS = 1_704_067_200_000          # 2024-01-01 UTC


def value_schema():
    from kafkalite.connect.data import Schema, SchemaBuilder
    return (SchemaBuilder.struct().name("bench_rows")
            .field("id", Schema.INT64).field("name", Schema.OPTIONAL_STRING)
            .field("amount", Schema.OPTIONAL_FLOAT64)
            .field("modified", Schema.OPTIONAL_TIMESTAMP).build())


def rows_of(n: int) -> dict:
    """The bench rows as columns of Python values."""
    import datetime as dt
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    ms = [BASE_MS + i * 1000 for i in range(n)]
    return {"id": list(range(1, n + 1)),
            "name": [f"row-{i:016d}" for i in range(n)],
            "amount": [i * 0.25 for i in range(n)],
            "modified": ms, "modified_dt": [epoch + dt.timedelta(milliseconds=m) for m in ms]}


def encoded(fmt: str, cols: dict, topic: str, registry: str) -> list:
    """The rows as the ``fmt`` converter writes them (not timed)."""
    from kafkalite.connect.converters import converter_from_config
    n = len(cols["id"])
    if fmt == "schemaless":
        import json
        return [json.dumps({"id": cols["id"][i], "name": cols["name"][i],
                            "amount": cols["amount"][i], "modified": cols["modified"][i]},
                           separators=(",", ":")).encode() for i in range(n)]
    conf = {"v": "org.apache.kafka.connect.json.JsonConverter" if fmt == "json"
            else "io.confluent.connect.avro.AvroConverter",
            "v.schema.registry.url": registry}
    conv = converter_from_config(conf, "v", False, "")
    schema = value_schema()
    values = [{"id": cols["id"][i], "name": cols["name"][i], "amount": cols["amount"][i],
               "modified": cols["modified_dt"][i]} for i in range(n)]
    return conv.from_connect_batch(topic, schema, values)


def ceiling_table(fmt: str, cols: dict, stamps: list):
    """The Arrow table the sink writes for ``fmt``: its columns, in its
    order, of its types (iceberg_ready's)."""
    import pyarrow as pa

    from kafkalite.connect.connectors.iceberg import iceberg_ready
    n = len(cols["id"])
    modified = pa.array(cols["modified"], pa.int64())
    if fmt != "schemaless":
        modified = modified.cast(pa.timestamp("ms", tz="UTC"))
    return iceberg_ready(pa.table({
        "__kafka_partition": pa.array([0] * n, pa.int32()),
        "id": pa.array(cols["id"], pa.int64()), "name": pa.array(cols["name"], pa.string()),
        "amount": pa.array(cols["amount"], pa.float64()), "modified": modified,
        "__kafka_offset": pa.array(range(n), pa.int64()),
        "__kafka_timestamp": pa.array(stamps, pa.timestamp("ms", tz="UTC"))}))


class Meter:
    """Wall time and this process's CPU over one measured phase."""

    def __enter__(self):
        self.t, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.proc = time.process_time() - self.cpu


def produce(server, topic: str, values: list) -> list:
    """``values`` produced to partition 0 of a new ``topic``; their timestamps."""
    from kafkalite.client import Consumer, Producer, TopicPartition
    create_topic(server, topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    try:
        for i in range(0, len(values), 10_000):
            p.produce_batch(topic, values[i:i + 10_000], partition=0)
        if p.flush(120):
            raise RuntimeError("the bench's records were not acknowledged")
    finally:
        p.close()
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "stamps-" + topic,
                  "auto.offset.reset": "earliest"})
    stamps: list = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        while len(stamps) < len(values):
            rows = c.consume_batch(1.0)
            stamps += rows.column("timestamp").cast("int64").to_pylist()
    finally:
        c.close()
    return stamps


def run_sink(server, work, uri, fmt, topic, table, rows, flush_ms) -> Meter:
    from kafkalite.client import AdminClient
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": flush_ms,
                     "consumer.max.poll.records": 10_000,
                     "consumer.max.partition.fetch.bytes": SINK_FETCH_BYTES},
                    FileOffsetStore(os.path.join(work, f"offsets-{table}.json")))
    worker.start()
    herder = Herder(worker)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    name = table.replace(".", "-")
    conf = {"connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": topic, "iceberg.tables": table, "iceberg.catalog.uri": uri,
            "iceberg.catalog.warehouse": "file://" + os.path.join(work, "warehouse"),
            "iceberg.tables.default-partition-by": "day(__kafka_timestamp)"}
    if fmt == "schemaless":
        conf["value.converter"] = "org.apache.kafka.connect.json.JsonConverter"
        conf["value.converter.schemas.enable"] = "false"
    elif fmt == "avro":
        conf["value.converter"] = "io.confluent.connect.avro.AvroConverter"
        conf["value.converter.schema.registry.url"] = server.info["schema_registry"]
    try:
        with Meter() as m:
            herder.put_connector_config(name, conf, False)
            while True:
                got = admin.list_consumer_group_offsets(f"connect-{name}").result()
                if sum(tp.offset for tp in got if tp.offset > 0) >= rows:
                    break
                st = herder.status(name)
                if any(t["state"] == "FAILED" for t in st["tasks"]):
                    raise RuntimeError(st["tasks"][0]["trace"])
                time.sleep(0.05)
        m.snapshots = snapshot_sizes(uri, work, table)
        return m
    finally:
        admin.close()
        herder.stop()
        worker.stop()


def snapshot_sizes(uri, work, table) -> list:
    """The rows each of the table's snapshots added (one a sink commit)."""
    from kafkalite.connect.connectors.iceberg import sql_catalog
    catalog = sql_catalog("kafkalite", uri=uri,
                          warehouse="file://" + os.path.join(work, "warehouse"))
    return [int(s.summary.additional_properties.get("added-records", 0))
            for s in catalog.load_table(table).metadata.snapshots]


def run_ceiling(work, uri, table_name, arrow) -> Meter:
    from pyiceberg.transforms import DayTransform

    from kafkalite.connect.connectors.iceberg import create_namespace, sql_catalog
    catalog = sql_catalog("kafkalite", uri=uri,
                          warehouse="file://" + os.path.join(work, "warehouse"))
    create_namespace(catalog, table_name.split(".")[0])
    with Meter() as m:
        tx = catalog.create_table_transaction(table_name, schema=arrow.schema)
        with tx.update_spec() as spec:
            spec.add_field("__kafka_timestamp", DayTransform(), "ts_day")
        tx.commit_transaction()
        catalog.load_table(table_name).append(arrow)
    return m


def format_rounds(server, work, uri, rows, rounds, formats, flush_ms, res) -> None:
    """Each format's rounds (module docstring), figures added to ``res``."""
    import common
    import report
    # what the first side would otherwise import inside its timing (pyiceberg's SQL
    # catalog, SQLAlchemy, the converters' readers): a second of CPU, 50 µs a row of 20,000
    import fastavro  # noqa: F401
    import pyarrow.json  # noqa: F401
    import pyiceberg.catalog.sql  # noqa: F401
    import pyiceberg.io.pyarrow  # noqa: F401

    import kafkalite.connect.connectors.iceberg  # noqa: F401
    import kafkalite.connect.registry_converters  # noqa: F401
    cols = rows_of(rows)
    # a first sink and append of a small topic, not counted: the first of each in a process
    # paid for what the later ones had cached (SQLAlchemy's compiled statements, pyiceberg's
    # first table), 2x on the first round's sink
    warm = rows_of(2000)
    stamps = produce(server, "ice-warm", encoded("json", warm, "ice-warm", ""))
    run_sink(server, work, uri, "json", "ice-warm", "warm.sink", 2000, flush_ms)
    run_ceiling(work, uri, "warm.ceiling", ceiling_table("json", warm, stamps))
    for fmt in formats:
        topic = f"ice-{fmt}"
        stamps = produce(server, topic, encoded(fmt, cols, topic, server.info["schema_registry"]))
        arrow = ceiling_table(fmt, cols, stamps)
        loads = []

        def run(side, counter=[0]):
            counter[0] += 1
            table = f"fmt.{fmt}_{side}_{counter[0]}"
            load = load_average()
            m = run_sink(server, work, uri, fmt, topic, table, rows, flush_ms) \
                if side == "sink" else run_ceiling(work, uri, table, arrow)
            loads.append(load)
            commits = getattr(m, "snapshots", None)
            report.say(f"  {fmt:10s} {side:7s} {rows / m.wall:>10,.0f} rows/s "
                       f"{m.proc / rows * 1e6:6.1f} µs CPU/row  (load {load})" +
                       (f"  commits of {commits} rows" if commits else ""))
            return m
        result = common.alternating(("sink", "ceiling"), rounds, run)
        sink, ceil = result.values["sink"], result.values["ceiling"]
        for r, (s, c) in enumerate(zip(sink, ceil), 1):
            ratio = c.wall / s.wall
            res.add(f"iceberg_{fmt}_round{r}_ratio", 10 + r,
                    f"{fmt}, round {r}: sink {rows / s.wall:,.0f} rows/s "
                    f"{s.proc / rows * 1e6:.1f} µs CPU/row; ceiling {rows / c.wall:,.0f} rows/s "
                    f"{c.proc / rows * 1e6:.1f} µs CPU/row; load {result.loads[r - 1]}",
                    round(ratio, 3), "ratio", target=0.5, target_text=">= 0.5x",
                    meets=ratio >= 0.5)
            res.add(f"iceberg_{fmt}_round{r}_cpu_ratio", 10 + r,
                    f"{fmt}, round {r}: ceiling's CPU per row / sink's",
                    round(c.proc / s.proc, 3), "ratio")
