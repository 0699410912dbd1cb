"""PostgreSQL -> topic through kafkalite Connect's JDBC-style source, against
``COPY ... TO`` of the same rows in the same run; and topic -> Parquet
through the Parquet sink, against ``COPY ... TO`` + a pyarrow Parquet write.

    python benchmarks/bench_connect.py               # 200,000 rows
    python benchmarks/bench_connect.py --quick       # 20,000 rows (the smoke test's size)
    python benchmarks/bench_connect.py --rows 1000000

A throwaway PostgreSQL cluster (tests/postgres.py) and a kafkalite server
(2 workers) are started; one table of ``--rows`` rows (id BIGSERIAL, a
20-character text, a double, a timestamp) is filled. Figures, in rows/s:

1. ceiling: ``COPY (SELECT ...) TO STDOUT`` read whole by psycopg (the
   database's fastest way out, no broker);
2. connect: a standalone worker running the JdbcSourceConnector
   (``mode=incrementing``, ``batch.max.rows=--batch``) into a 1-partition
   topic, timed from the connector's creation until the topic's high
   watermark reaches ``--rows`` (acknowledged, acks=all), once with the
   JsonConverter with schemas (Kafka Connect's default envelope) and once
   without schemas;
3. parquet ceiling: ``COPY ... TO STDOUT (FORMAT csv)`` read by
   pyarrow.csv and written with pyarrow.parquet (one file);
4. connect parquet: the ParquetSinkConnector (``flush.size`` 50,000)
   reading the schemaful topic of 2. into Parquet files, timed from its
   creation until its group committed every record (committed = in files).

Timing never fails anything: this prints figures and writes results.json
under ``--out`` (default benchmarks/results/connect).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from postgres import PostgresServer  # noqa: E402

from kafkalite.server.node import launcher  # noqa: E402


def fill(dsn: str, table: str, rows: int) -> None:
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, name TEXT, amount DOUBLE "
                  f"PRECISION, modified TIMESTAMP)")
        c.execute(f"INSERT INTO {table} (name, amount, modified) SELECT "
                  f"md5(g::text)::varchar(20), g * 0.25, TIMESTAMP '2024-01-01' + g * INTERVAL "
                  f"'1 millisecond' FROM generate_series(1, %s) g", (rows,))
        c.execute(f"VACUUM ANALYZE {table}")


def copy_out(dsn: str, table: str) -> tuple[float, int]:
    import psycopg
    with psycopg.connect(dsn) as c:
        start = time.perf_counter()
        n = 0
        with c.cursor().copy(f"COPY (SELECT * FROM {table} ORDER BY id) TO STDOUT") as cp:
            for chunk in cp:
                n += len(chunk)
        return time.perf_counter() - start, n


def copy_to_parquet(dsn: str, table: str, out: str) -> float:
    import io

    import psycopg
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq
    start = time.perf_counter()
    buf = io.BytesIO()
    with psycopg.connect(dsn) as c:
        with c.cursor().copy(f"COPY (SELECT * FROM {table} ORDER BY id) TO STDOUT "
                             f"(FORMAT csv, HEADER true)") as cp:
            for chunk in cp:
                buf.write(chunk)
    buf.seek(0)
    pq.write_table(pcsv.read_csv(buf), os.path.join(out, "copy.parquet"))
    return time.perf_counter() - start


def parquet_sink(server, topic, rows, work) -> float:
    from kafkalite.client import AdminClient
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": 1000,
                     "consumer.max.poll.records": 10_000},
                    FileOffsetStore(os.path.join(work, "offsets-pq.json")))
    worker.start()
    herder = Herder(worker)
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        start = time.perf_counter()
        herder.put_connector_config("pq", {
            "connector.class": "kafkalite.connect.ParquetSinkConnector", "topics": topic,
            "directory": os.path.join(work, "lake"), "flush.size": "50000"}, False)
        while True:
            got = admin.list_consumer_group_offsets("connect-pq").result()
            if sum(tp.offset for tp in got if tp.offset > 0) >= rows:
                return time.perf_counter() - start
            st = herder.status("pq")
            if any(t["state"] == "FAILED" for t in st["tasks"]):
                raise RuntimeError(st["tasks"][0]["trace"])
            time.sleep(0.05)
    finally:
        admin.close()
        herder.stop()
        worker.stop()


def through_connect(server, dsn, table, rows, batch, schemas: bool, work) -> float:
    from kafkalite.client import AdminClient, Consumer, NewTopic, TopicPartition
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    topic = f"pg-{table}-{'s' if schemas else 'n'}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1)]).values():
        f.result()
    admin.close()
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": 5000,
                     "value.converter.schemas.enable": str(schemas).lower()},
                    FileOffsetStore(os.path.join(work, f"offsets-{topic}.json")))
    worker.start()
    herder = Herder(worker)
    c = Consumer({"bootstrap.servers": server.bootstrap})
    try:
        start = time.perf_counter()
        herder.put_connector_config("bench", {
            "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
            "connection.url": "jdbc:" + dsn, "mode": "incrementing",
            "incrementing.column.name": "id", "table.whitelist": table,
            "topic.prefix": "pg-", "batch.max.rows": str(batch), "poll.interval.ms": "100",
            "transforms": "route", "transforms.route.type":
                "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.regex": ".*", "transforms.route.replacement": topic}, False)
        tp = TopicPartition(topic, 0)
        while c.get_watermark_offsets(tp)[1] < rows:
            st = herder.status("bench")
            if any(t["state"] == "FAILED" for t in st["tasks"]):
                raise RuntimeError(st["tasks"][0]["trace"])
            time.sleep(0.02)
        return time.perf_counter() - start
    finally:
        c.close()
        herder.stop()
        worker.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=10_000, help="batch.max.rows")
    ap.add_argument("--quick", action="store_true", help="20,000 rows")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "connect"))
    args = ap.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    work = tempfile.mkdtemp(prefix="bench-connect-")
    pg = PostgresServer().start()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2).start()
    try:
        fill(pg.dsn, "bench_rows", rows)
        took, nbytes = copy_out(pg.dsn, "bench_rows")
        figures = {"copy_to_rows_per_s": rows / took}
        print(f"COPY ... TO STDOUT: {rows:,} rows ({nbytes / 1e6:.1f} MB of text) in {took:.2f} s"
              f" = {rows / took:,.0f} rows/s (the ceiling)")
        for schemas in (True, False):
            took = through_connect(server, pg.dsn, "bench_rows", rows, args.batch, schemas, work)
            key = f"connect_json_{'schemas' if schemas else 'schemaless'}_rows_per_s"
            figures[key] = rows / took
            print(f"JDBC source -> topic, JsonConverter schemas.enable={str(schemas).lower()}: "
                  f"{rows:,} rows in {took:.2f} s = {rows / took:,.0f} rows/s "
                  f"({rows / took / figures['copy_to_rows_per_s']:.1%} of COPY)")
        took = copy_to_parquet(pg.dsn, "bench_rows", work)
        figures["copy_to_parquet_rows_per_s"] = rows / took
        print(f"COPY ... TO (csv) + pyarrow Parquet write: {rows:,} rows in {took:.2f} s = "
              f"{rows / took:,.0f} rows/s (the Parquet ceiling)")
        took = parquet_sink(server, "pg-bench_rows-s", rows, work)
        figures["connect_parquet_sink_rows_per_s"] = rows / took
        print(f"topic -> ParquetSinkConnector: {rows:,} rows in {took:.2f} s = "
              f"{rows / took:,.0f} rows/s ({rows / took / figures['copy_to_parquet_rows_per_s']:.1%}"
              f" of COPY + Parquet)")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"rows": rows, "batch.max.rows": args.batch, "figures": figures}, f,
                      indent=2)
    finally:
        server.stop()
        server.kill()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
