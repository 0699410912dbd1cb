"""PostgreSQL -> topic -> Iceberg through kafkalite Connect (the JDBC source
and the Iceberg sink in one worker), against ``COPY ... TO`` + a pyarrow
Parquet write of the same rows in the same run.

    python benchmarks/bench_connect_iceberg.py              # 200,000 rows
    python benchmarks/bench_connect_iceberg.py --quick      # 20,000 rows
    python benchmarks/bench_connect_iceberg.py --rows 1000000 --catalog postgresql

A throwaway PostgreSQL cluster (tests/postgres.py) and a kafkalite server
(2 workers) are started; bench_connect.py's table of ``--rows`` rows is
filled (id, a 20-character text, a double, a timestamp). Figures, rows/s:

1. the ceiling: ``COPY ... TO STDOUT (FORMAT csv)`` read by pyarrow.csv and
   written with pyarrow.parquet (bench_connect.copy_to_parquet);
2. PostgreSQL -> topic -> Iceberg: a standalone worker running the
   JdbcSourceConnector (JsonConverter with schemas, Kafka Connect's default)
   and the IcebergSinkConnector (SQL catalog on SQLite or PostgreSQL, table
   partitioned by day of ``modified``) at once, timed from the connectors'
   creation until the sink's group committed every row (committed = in a
   table snapshot);
3. topic -> Iceberg alone: a second Iceberg sink reading the topic of 2.,
   already full, into another table;
4. the Iceberg sink's ceiling (issue 45's: at least 0.5x): the same rows
   as one Arrow table of the sink's columns and types (read by COPY +
   pyarrow.csv beforehand, not timed), written by one pyiceberg append
   (pyarrow's Parquet writer) into a new table of the same catalog and
   partition spec, timed from the table's creation to the append's commit;
   3. is compared with it.
5. issue 75's format rounds (connect_iceberg_formats.py, ``--formats``):
   the sink alone on JSON with schema, schemaless JSON and Avro through the
   registry, each beside its ceiling (4.'s append of that format's rows)
   in ``--rounds`` alternating rounds, with the load and the CPU per row.

Timing never fails anything: figures are printed and written with
report.write_tables (results.json, results.md) under ``--output-dir``.
"""
from __future__ import annotations

import os
import shutil
import sys
import time

import common
import report
from bench_connect import copy_to_parquet, fill
from connect_iceberg_formats import FORMATS, format_rounds
from postgres import PostgresServer

from kafkalite import launcher

HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]


def wait_committed(admin, herder, connector, rows):
    while True:
        got = admin.list_consumer_group_offsets(f"connect-{connector}").result()
        if sum(tp.offset for tp in got if tp.offset > 0) >= rows:
            return
        for name in herder.connectors():
            st = herder.status(name)
            if any(t["state"] == "FAILED" for t in st["tasks"]):
                raise RuntimeError(st["tasks"][0]["trace"])
        time.sleep(0.05)


def pyiceberg_append(dsn: str, work: str, catalog_uri: str) -> float:
    """The Iceberg sink's ceiling: seconds to create a table (partitioned by
    day of ``modified``) and append the bench table's rows to it in one
    pyiceberg append, the rows already one Arrow table of the columns and
    types the sink writes (its ``__kafka_partition``, timestamps in
    microseconds, UTC)."""
    import io

    import psycopg
    import pyarrow as pa
    import pyarrow.csv as pcsv
    from pyiceberg.transforms import DayTransform

    from kafkalite.connect.connectors.iceberg import iceberg_ready, sql_catalog
    buf = io.BytesIO()
    with psycopg.connect(dsn) as c:
        with c.cursor().copy("COPY (SELECT * FROM bench_rows ORDER BY id) TO STDOUT "
                             "(FORMAT csv, HEADER true)") as cp:
            for chunk in cp:
                buf.write(chunk)
    buf.seek(0)
    rows = pcsv.read_csv(buf, convert_options=pcsv.ConvertOptions(column_types={
        "id": pa.int64(), "name": pa.string(), "amount": pa.float64(),
        "modified": pa.timestamp("ms")}))
    rows = rows.set_column(3, "modified", rows.column("modified").cast(
        pa.timestamp("ms", tz="UTC")))
    rows = iceberg_ready(rows.add_column(0, "__kafka_partition",
                                         pa.array([0] * rows.num_rows, pa.int32())))
    catalog = sql_catalog("kafkalite", uri=catalog_uri,
                          warehouse="file://" + os.path.join(work, "warehouse"))
    catalog.create_namespace_if_not_exists("ceiling")
    start = time.perf_counter()
    tx = catalog.create_table_transaction("ceiling.rows", schema=rows.schema)
    with tx.update_spec() as spec:
        spec.add_field("modified", DayTransform(), "modified_day")
    tx.commit_transaction()
    catalog.load_table("ceiling.rows").append(rows)
    return time.perf_counter() - start


def run_connect(server, dsn, rows, args, work, catalog_uri) -> tuple[float, float]:
    """(seconds PostgreSQL -> topic -> Iceberg, seconds topic -> Iceberg)."""
    from kafkalite.client import AdminClient, NewTopic
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    topic = "pg-ice"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1)]).values():
        f.result()
    worker = Worker({"bootstrap.servers": server.bootstrap,
                     "offset.flush.interval.ms": args.flush_interval_ms,
                     "consumer.max.poll.records": 10_000},
                    FileOffsetStore(os.path.join(work, "offsets.json")))
    worker.start()
    herder = Herder(worker)

    def sink(name, table):
        herder.put_connector_config(name, {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": topic, "iceberg.tables": table, "iceberg.catalog.uri": catalog_uri,
            "iceberg.catalog.warehouse": "file://" + os.path.join(work, "warehouse"),
            "iceberg.tables.default-partition-by": "day(modified)",
            "flush.size": str(args.flush_size)}, False)
    try:
        start = time.perf_counter()
        herder.put_connector_config("pg", {
            "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
            "connection.url": "jdbc:" + dsn, "mode": "incrementing",
            "incrementing.column.name": "id", "table.whitelist": "bench_rows",
            "topic.prefix": "pg-", "batch.max.rows": str(args.batch), "poll.interval.ms": "100",
            "transforms": "route", "transforms.route.type":
                "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": ".*", "transforms.route.replacement": topic}, False)
        sink("ice", "bench.rows")
        wait_committed(admin, herder, "ice", rows)
        pipeline = time.perf_counter() - start
        start = time.perf_counter()
        sink("ice2", "bench.rows2")
        wait_committed(admin, herder, "ice2", rows)
        return pipeline, time.perf_counter() - start
    finally:
        admin.close()
        herder.stop()
        worker.stop()


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = common.parser(__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=10_000, help="the source's batch.max.rows")
    ap.add_argument("--flush-size", type=int, default=100_000, help="the sink's flush.size")
    ap.add_argument("--flush-interval-ms", type=int, default=500,
                    help="the worker's offset.flush.interval.ms: the sink commits (a table "
                         "snapshot) at least this often, and the figures are timed to the "
                         "commit that holds the last row, so they move in steps of it")
    ap.add_argument("--catalog", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--formats", default=",".join(FORMATS),
                    help="the format rounds' formats (comma-separated; 'none': no rounds)")
    ap.add_argument("--format-rows", type=int, default=200_000,
                    help="rows of each format round's topic")
    ap.add_argument("--only-formats", action="store_true",
                    help="the format rounds alone (no PostgreSQL pipeline)")
    common.add_rounds(ap, 3)
    common.add_quick(ap, "20,000 rows")
    ap.add_argument("--output-dir")
    ap.add_argument("--work-dir")
    args = common.parse(ap, argv, quick={"rows": 20_000, "format_rows": 20_000, "rounds": 1})
    out_dir, work = report.make_dirs("connect-iceberg", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    report.say_load(info)
    t0 = time.perf_counter()
    pg = PostgresServer().start()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2).start()
    res = report.Results()
    try:
        uri = f"sqlite:///{work}/catalog.db" if args.catalog == "sqlite" else \
            pg.dsn.replace("postgresql://", "postgresql+psycopg://")
        formats = [f for f in args.formats.split(",") if f in FORMATS]
        if args.only_formats:
            format_rounds(server, work, uri, args.format_rows, args.rounds, formats,
                          args.flush_interval_ms, res)
            return _write(out_dir, res, t0, info, args)
        rows = args.rows
        fill(pg.dsn, "bench_rows", rows)
        ceiling = rows / copy_to_parquet(pg.dsn, "bench_rows", work)
        res.add("copy_to_parquet_rows_per_s", 1, "COPY ... TO (csv) + pyarrow Parquet write",
                round(ceiling), "rows/s")
        pipeline, sink_only = run_connect(server, pg.dsn, rows, args, work, uri)
        res.add("connect_pg_to_iceberg_rows_per_s", 2,
                f"PostgreSQL -> topic -> Iceberg ({args.catalog} catalog)", round(rows / pipeline),
                "rows/s", baseline_key="copy_to_parquet_rows_per_s")
        res.add("connect_topic_to_iceberg_rows_per_s", 3, "topic -> Iceberg (sink alone)",
                round(rows / sink_only), "rows/s", baseline_key="copy_to_parquet_rows_per_s")
        ceiling_append = rows / pyiceberg_append(pg.dsn, work, uri)
        res.add("pyiceberg_append_rows_per_s", 4, "Arrow table + one pyiceberg append",
                round(ceiling_append), "rows/s")
        res.add("connect_sink_to_append_ratio", 4, "sink alone / pyiceberg append",
                round(rows / sink_only / ceiling_append, 3), "ratio", target=0.5,
                target_text=">= 0.5x", meets=rows / sink_only / ceiling_append >= 0.5)
        format_rounds(server, work, uri, args.format_rows, args.rounds, formats,
                      args.flush_interval_ms, res)
    finally:
        server.stop()
        server.kill()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return _write(out_dir, res, t0, info, args)


def _write(out_dir, res, t0, info, args) -> int:
    report.write_tables(out_dir, "kafkalite Connect: PostgreSQL -> Iceberg", res, HEADERS,
                        elapsed=time.perf_counter() - t0, info=info, settings=vars(args),
                        units={"rows/s": "rows per second"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
