"""kafkalite Connect's connectors, each beside its ceiling measured in the
same run (issue 45's targets: at least 0.5x): a file through the file
source and sink against ``kafkalite produce < file`` + ``kafkalite consume
> file``; PostgreSQL -> topic through the JDBC source against ``COPY ...
TO`` + ``produce_batch``; topic -> PostgreSQL through the JDBC sink
against ``consume_batch`` + ``COPY ... FROM``; topic -> Parquet through
the Parquet sink against ``COPY ... TO`` + a pyarrow Parquet write;
PostgreSQL changes -> topic through the CDC source (``--only cdc``)
against the same changes read straight from a replication slot +
``produce_batch`` (and issue 45's 20,000 changes/s).

    python benchmarks/bench_connect.py               # 200,000 rows and lines
    python benchmarks/bench_connect.py --quick       # 20,000 (the smoke test's size)
    python benchmarks/bench_connect.py --rows 1000000 --only file,jdbc
    python benchmarks/bench_connect.py --only mirror --records 200000

File pipeline (``--lines``, default ``--rows``; ~100-byte lines, some of
them not ASCII): ceiling: ``kafkalite produce TOPIC < in`` and ``kafkalite
consume TOPIC --from-beginning -c N > out`` started together (two
processes, as a user runs them), timed until both exit; connect: a
standalone worker (StringConverter both ways) running the
FileStreamSourceConnector and FileStreamSinkConnector at once, timed from
their creation until the sink's file has every byte (then compared with
the input: byte-identical or the run fails).

JDBC sink: ceiling: ``consume_batch`` of the ceiling's topic (the COPY
text lines of the source ceiling) and one ``COPY ... FROM STDIN`` of their
values into an empty table; connect: the JdbcSinkConnector
(``insert.mode=insert``, ``auto.create``) reading the schemaful topic of
the JDBC source, timed from its creation until the table has every row
(each put is a committed transaction), its consumer with
``max.poll.records`` 10,000 and ``max.partition.fetch.bytes`` 10 MB (a
put of up to 10,000 records; with the 1 MB default a put is one fetch,
~2,000 records).

A throwaway PostgreSQL cluster (tests/postgres.py) and a kafkalite server
(2 workers) are started; one table of ``--rows`` rows (id BIGSERIAL, a
20-character text, a double, a timestamp) is filled. Figures, in rows/s:

1. ceiling: ``COPY (SELECT ...) TO STDOUT`` read whole by psycopg (the
   database's fastest way out, no broker), and that with its lines
   produced (``produce_batch`` per 10,000, acknowledged);
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

CDC (``--only cdc``) and the JDBC sink in upsert mode (``--only upsert``):
``--rounds`` rounds (default 3), each pipeline beside its ceiling in the
same round, the two taking turns going first, the load average beside
each round, CPU a row or change in this process and in PostgreSQL; see
benchmarks/connect_cdc.py. CDC: the initial snapshot of
``--snapshot-rows`` rows against ``COPY ... TO`` + ``produce_batch``, and
``--changes`` changes (2/3 inserts then 1/3 updates, issue 75's 20k + 10k)
streamed from the slot against a second slot read by
``pg_logical_slot_get_binary_changes`` + ``produce_batch``. Upsert:
``--upsert-rows`` rows from a topic of JsonConverter envelopes against
``consume_batch`` + COPY into a staging table + ``INSERT ... ON CONFLICT``.
Issue 75's target: 0.5x of the ceiling (CDC: 20,000 changes/s or more).

MirrorMaker 2 (``--only mirror``, ``--records``, default ``--rows``): a
second kafkalite server (2 workers) is the target cluster; ``--records``
records (a 16-byte key, a value of 100 to 1,000 bytes) are produced into a
1-partition topic of the bench's server, the source. Ceiling: a Python loop
of ``consume_batch`` on the source with each batch's keys, values and
timestamps handed to ``produce_batch`` into a topic of the target, timed
until acknowledged; connect: a standalone worker on the target running the
MirrorSourceConnector as ``kafkalite mirror`` configures it (one task,
ByteArrayConverter, the alias ``src``), timed from its creation until
``src.mirrored``'s high watermark holds every record. Issue 45's target:
0.5x of the ceiling.

Timing never fails anything: this prints figures and writes results.json
under ``--out`` (default benchmarks/results/connect).
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
# this checkout's kafkalite, not whichever one is installed
sys.path.insert(0, os.path.join(HERE, ".."))

from postgres import PostgresServer  # noqa: E402

from kafkalite import launcher  # noqa: E402


def wait_for_connectors(herder, names, done, step: float = 0.02) -> None:
    """Until ``done()``, looking at the connectors' task states between
    looks: a FAILED task raises its trace instead of waiting forever."""
    while not done():
        for name in names:
            st = herder.status(name)
            if any(t["state"] == "FAILED" for t in st["tasks"]):
                raise RuntimeError(st["tasks"][0]["trace"])
        time.sleep(step)


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


LINE_TAIL = "the quick brown fox jumps over the lazy dog, naïve café, ünïcode ✓ " \
            "0123456789abcdef"


def write_lines(path: str, n: int) -> int:
    """``n`` lines of about 100 bytes into ``path``: its size."""
    with open(path, "w", encoding="utf-8") as f:
        for lo in range(0, n, 10_000):
            f.write("".join(f"{i:010d} {LINE_TAIL}\n" for i in range(lo, min(n, lo + 10_000))))
    return os.path.getsize(path)


def create_topic(server, topic: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for f in admin.create_topics([NewTopic(topic, 1)]).values():
            f.result()
    finally:
        admin.close()


def file_ceiling(server, src: str, n: int, work: str) -> float:
    """``kafkalite produce < src`` and ``kafkalite consume -c n > out``
    together: seconds until both exit."""
    import subprocess
    from kafkalite.launcher import package_env
    topic, out = "file-ceiling", os.path.join(work, "ceiling.out")
    create_topic(server, topic)
    cli = [sys.executable, "-m", "kafkalite"]
    boot = ["--bootstrap-server", server.bootstrap]
    env = package_env()
    start = time.perf_counter()
    with open(out, "wb") as o, open(src, "rb") as i:
        cons = subprocess.Popen(cli + ["consume", topic, "--from-beginning", "-c", str(n)] +
                                boot, stdout=o, env=env)
        prod = subprocess.Popen(cli + ["produce", topic] + boot, stdin=i, env=env)
        if prod.wait(600) or cons.wait(600):
            raise RuntimeError("kafkalite produce/consume failed")
    took = time.perf_counter() - start
    if not same_file(src, out):
        raise RuntimeError("kafkalite consume's output differs from the input")
    return took


def same_file(a: str, b: str) -> bool:
    import filecmp
    return filecmp.cmp(a, b, shallow=False)


def file_connect(server, src: str, size: int, work: str) -> float:
    """The file source and sink connectors together: seconds from their
    creation until the sink's file has ``size`` bytes."""
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    topic, out = "file-connect", os.path.join(work, "connect.out")
    create_topic(server, topic)
    conv = "org.apache.kafka.connect.storage.StringConverter"
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": 1000,
                     "key.converter": conv, "value.converter": conv,
                     "kafkalite.file.allowed.paths": os.path.dirname(src) + "," + work},
                    FileOffsetStore(os.path.join(work, "offsets-file.json")))
    worker.start()
    herder = Herder(worker)
    try:
        start = time.perf_counter()
        herder.put_connector_config("file-src", {
            "connector.class": "FileStreamSource", "file": src, "topic": topic}, False)
        herder.put_connector_config("file-sink", {
            "connector.class": "FileStreamSink", "file": out, "topics": topic}, False)
        wait_for_connectors(herder, ("file-src", "file-sink"),
                            lambda: os.path.exists(out) and os.path.getsize(out) >= size, 0.01)
        took = time.perf_counter() - start
    finally:
        herder.stop()
        worker.stop()
    if not same_file(src, out):
        raise RuntimeError("the file sink's output differs from the input")
    return took


def copy_out_produced(server, dsn: str, table: str) -> tuple[float, str]:
    """``COPY (SELECT ...) TO STDOUT`` with its lines produced to a topic
    by ``produce_batch`` (10,000 a call) and acknowledged: (seconds, topic)."""
    import psycopg

    from kafkalite.client import Producer
    topic = "pg-ceiling"
    create_topic(server, topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    try:
        with psycopg.connect(dsn) as c:
            start = time.perf_counter()
            # psycopg hands COPY's output a row at a time: rows are gathered and split
            # 10,000 at a time, so the ceiling does no Python work per row either
            chunks: list = []

            def send():
                lines = b"".join(chunks).split(b"\n")[:-1]
                chunks.clear()
                p.produce_batch(topic, lines, partition=0)
            with c.cursor().copy(f"COPY (SELECT * FROM {table} ORDER BY id) TO STDOUT") as cp:
                for chunk in cp:
                    chunks.append(chunk)
                    if len(chunks) == 10_000:
                        send()
            if chunks:
                send()
            if p.flush(120):
                raise RuntimeError("the ceiling's records were not acknowledged")
            return time.perf_counter() - start, topic
    finally:
        p.close()


def consume_copy_in(server, dsn: str, topic: str, rows: int) -> float:
    """``consume_batch`` of ``topic`` and one ``COPY ... FROM STDIN`` of its
    values into an empty table of the bench table's columns: seconds."""
    import psycopg

    from kafkalite.client import Consumer, TopicPartition
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("CREATE TABLE sink_ceiling (id BIGINT, name TEXT, amount DOUBLE PRECISION, "
                  "modified TIMESTAMP)")
    cons = Consumer({"bootstrap.servers": server.bootstrap})
    try:
        start = time.perf_counter()
        cons.assign([TopicPartition(topic, 0, 0)])
        with psycopg.connect(dsn) as c:
            with c.cursor().copy("COPY sink_ceiling FROM STDIN") as cp:
                got = 0
                while got < rows:
                    batch = cons.consume_batch(5)
                    values = batch.column("value").to_pylist()
                    if values:
                        cp.write(b"\n".join(values) + b"\n")
                    got += len(values)
            c.commit()
        return time.perf_counter() - start
    finally:
        cons.close()


SINK_FETCH_BYTES = 10 * 1024 * 1024


def jdbc_sink(server, dsn: str, topic: str, rows: int, work: str) -> float:
    """The JdbcSinkConnector (insert, auto.create) from ``topic`` (the JDBC
    source's schemaful JSON) into a new table: seconds until the table has
    every row (a put is a committed transaction; the group's offsets follow
    at the next offset flush, as the ceiling has none)."""
    import psycopg
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    # a put of up to 10,000 records, and fetches that hold as many (~470-byte envelopes;
    # with the 1 MB default a fetch, and so a put, is ~2,000 of them): the consumer
    # settings Kafka Connect's JDBC sink is tuned with
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": 1000,
                     "consumer.max.poll.records": 10_000,
                     "consumer.max.partition.fetch.bytes": SINK_FETCH_BYTES},
                    FileOffsetStore(os.path.join(work, "offsets-jdbc-sink.json")))
    worker.start()
    herder = Herder(worker)
    try:
        start = time.perf_counter()
        herder.put_connector_config("pgsink", {
            "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
            "connection.url": "jdbc:" + dsn, "topics": topic, "insert.mode": "insert",
            "table.name.format": "sink_connect", "auto.create": "true",
            "batch.size": "10000"}, False)
        with psycopg.connect(dsn, autocommit=True) as c:
            while True:
                try:
                    if c.execute("SELECT count(*) FROM sink_connect").fetchone()[0] >= rows:
                        return time.perf_counter() - start
                except psycopg.errors.UndefinedTable:
                    pass
                st = herder.status("pgsink")
                if any(t["state"] == "FAILED" for t in st["tasks"]):
                    raise RuntimeError(st["tasks"][0]["trace"])
                time.sleep(0.02)
    finally:
        herder.stop()
        worker.stop()


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
    # named by topic.prefix: no transform (a transform takes the per-record path)
    prefix = f"pg-{'s' if schemas else 'n'}-"
    topic = prefix + table
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
            "topic.prefix": prefix, "batch.max.rows": str(batch), "poll.interval.ms": "100"},
                                    False)
        tp = TopicPartition(topic, 0)
        wait_for_connectors(herder, ("bench",), lambda: c.get_watermark_offsets(tp)[1] >= rows)
        return time.perf_counter() - start
    finally:
        c.close()
        herder.stop()
        worker.stop()


MIRROR_TOPIC, MIRROR_ALIAS = "mirrored", "src"


def mirror_value_size(i: int) -> int:
    """Record i's value bytes: 100 to 1,000, spread evenly (mean 550)."""
    return 100 + (i * 7919) % 901


def fill_mirror_source(server, records: int) -> int:
    """``records`` records (a 16-byte key, a 100-1,000-byte value) produced
    into a 1-partition topic and acknowledged: their key and value bytes."""
    from kafkalite.client import Producer
    create_topic(server, MIRROR_TOPIC)
    p = Producer({"bootstrap.servers": server.bootstrap})
    nbytes = 0
    try:
        for lo in range(0, records, 10_000):
            idx = range(lo, min(records, lo + 10_000))
            keys = [f"key-{i:012d}".encode() for i in idx]
            values = [f"{i:012d}".encode().ljust(mirror_value_size(i), b"v") for i in idx]
            nbytes += sum(map(len, keys)) + sum(map(len, values))
            p.produce_batch(MIRROR_TOPIC, values, keys=keys, partition=0)
            p.poll(0)
        if p.flush(120):
            raise RuntimeError("the mirror source's records were not acknowledged")
        return nbytes
    finally:
        p.close()


def mirror_ceiling(source, target, records: int) -> float:
    """``consume_batch`` of the source topic with each batch's keys, values
    and timestamps handed to ``produce_batch`` into a topic of the target,
    until ``records`` are acknowledged there: seconds."""
    from kafkalite.client import Consumer, Producer, TopicPartition
    topic = "mirror-ceiling"
    create_topic(target, topic)
    cons = Consumer({"bootstrap.servers": source.bootstrap})
    p = Producer({"bootstrap.servers": target.bootstrap})
    try:
        start = time.perf_counter()
        cons.assign([TopicPartition(MIRROR_TOPIC, 0, 0)])
        got = 0
        while got < records:
            batch = cons.consume_batch(5)
            if not batch.num_rows:
                continue
            stamps = batch.column("timestamp").cast("int64").to_numpy()
            p.produce_batch(topic, batch.column("value").to_pylist(),
                            keys=batch.column("key").to_pylist(), partition=0, timestamp=stamps)
            p.poll(0)
            got += batch.num_rows
        if p.flush(120):
            raise RuntimeError("the ceiling's records were not acknowledged")
        return time.perf_counter() - start
    finally:
        cons.close()
        p.close()


def mirror_connect(source, target, records: int, work: str) -> float:
    """The MirrorSourceConnector in a standalone worker whose cluster is the
    target (as ``kafkalite mirror`` runs it, one task): seconds from its
    creation until the remote topic's high watermark reaches ``records``."""
    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.connectors.mirror import connector_configs
    from kafkalite.connect.offsets import FileOffsetStore
    name, config = next((n, c) for n, c in connector_configs(
        source.bootstrap, target.bootstrap, MIRROR_TOPIC, source_alias=MIRROR_ALIAS,
        target_alias="dst").items() if c["connector.class"] == "MirrorSourceConnector")
    worker = Worker({"bootstrap.servers": target.bootstrap, "offset.flush.interval.ms": 5000},
                    FileOffsetStore(os.path.join(work, "offsets-mirror.json")))
    worker.start()
    herder = Herder(worker)
    c = Consumer({"bootstrap.servers": target.bootstrap})
    tp = TopicPartition(f"{MIRROR_ALIAS}.{MIRROR_TOPIC}", 0)

    def copied() -> int:
        try:
            return c.get_watermark_offsets(tp)[1]
        except Exception:       # noqa: BLE001 -- the remote topic is not created yet
            return 0
    try:
        start = time.perf_counter()
        herder.put_connector_config(name, config, False)
        wait_for_connectors(herder, (name,), lambda: copied() >= records)
        return time.perf_counter() - start
    finally:
        c.close()
        herder.stop()
        worker.stop()


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def ratio(figures: dict, key: str, ceiling: str) -> str:
    return f"{figures[key] / figures[ceiling]:.2f}x of the ceiling"


def main(argv=None) -> int:
    import common
    ap = common.parser(__doc__)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--lines", type=int, default=None, help="file lines (default: --rows)")
    ap.add_argument("--batch", type=int, default=10_000, help="batch.max.rows")
    common.add_quick(ap, "20,000 rows and lines, 6,000 CDC changes, 5,000 snapshot rows, "
                         "10,000 upserts, one round (an option given wins)")
    ap.add_argument("--changes", type=int, default=30_000,
                    help="CDC changes streamed (2/3 inserts, 1/3 updates)")
    ap.add_argument("--snapshot-rows", type=int, default=20_000, help="CDC snapshot rows")
    ap.add_argument("--upsert-rows", type=int, default=100_000, help="rows upserted")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of cdc and upsert")
    ap.add_argument("--records", type=int, default=None,
                    help="records mirrored (--only mirror; default: --rows)")
    ap.add_argument("--only", default="file,jdbc,parquet",
                    help="comma-separated sections: file, jdbc (source and sink), parquet, cdc, "
                         "upsert, mirror")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "connect"))
    args = common.parse(ap, argv, quick={"rows": 20_000, "lines": 20_000, "changes": 6_000,
                                         "snapshot_rows": 5_000, "upsert_rows": 10_000,
                                         "rounds": 1})
    rows = args.rows
    lines = args.lines or rows
    changes = args.changes
    records = args.records or rows
    only = set(args.only.split(","))
    # the machine's load beside the figures: the ratios to the same run's ceilings are
    # what compare across runs
    print(f"load average: {load_average()}")
    work = tempfile.mkdtemp(prefix="bench-connect-")
    pg = None
    if only & {"jdbc", "parquet", "cdc", "upsert"}:
        pg = PostgresServer(wal_level="logical" if "cdc" in only else None).start()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2).start()
    target = None
    figures: dict = {}
    try:
        if "file" in only:
            src = os.path.join(work, "in.txt")
            size = write_lines(src, lines)
            took = file_ceiling(server, src, lines, work)
            figures["file_ceiling_lines_per_s"] = lines / took
            print(f"kafkalite produce < file + kafkalite consume > file: {lines:,} lines "
                  f"({size / 1e6:.1f} MB) in {took:.2f} s = {lines / took:,.0f} lines/s "
                  f"(the ceiling)")
            took = file_connect(server, src, size, work)
            figures["connect_file_lines_per_s"] = lines / took
            print(f"file source -> topic -> file sink: {lines:,} lines in {took:.2f} s = "
                  f"{lines / took:,.0f} lines/s, byte-identical "
                  f"({ratio(figures, 'connect_file_lines_per_s', 'file_ceiling_lines_per_s')})")
        if only & {"jdbc", "parquet"}:
            fill(pg.dsn, "bench_rows", rows)
            took, nbytes = copy_out(pg.dsn, "bench_rows")
            figures["copy_to_rows_per_s"] = rows / took
            print(f"COPY ... TO STDOUT: {rows:,} rows ({nbytes / 1e6:.1f} MB of text) in "
                  f"{took:.2f} s = {rows / took:,.0f} rows/s (no broker)")
            for schemas in (True, False) if "jdbc" in only else (True,):
                took = through_connect(server, pg.dsn, "bench_rows", rows, args.batch, schemas,
                                       work)
                key = f"connect_json_{'schemas' if schemas else 'schemaless'}_rows_per_s"
                figures[key] = rows / took
                print(f"JDBC source -> topic, JsonConverter schemas.enable="
                      f"{str(schemas).lower()}: {rows:,} rows in {took:.2f} s = "
                      f"{rows / took:,.0f} rows/s "
                      f"({rows / took / figures['copy_to_rows_per_s']:.1%} of COPY)")
        if "jdbc" in only:
            took, ceiling_topic = copy_out_produced(server, pg.dsn, "bench_rows")
            figures["jdbc_source_ceiling_rows_per_s"] = rows / took
            ceiling = "jdbc_source_ceiling_rows_per_s"
            print(f"COPY ... TO STDOUT + produce_batch: {rows:,} rows in {took:.2f} s = "
                  f"{rows / took:,.0f} rows/s (the JDBC source's ceiling; the source above is "
                  f"{ratio(figures, 'connect_json_schemas_rows_per_s', ceiling)} with schemas, "
                  f"{ratio(figures, 'connect_json_schemaless_rows_per_s', ceiling)} without)")
            took = consume_copy_in(server, pg.dsn, ceiling_topic, rows)
            figures["jdbc_sink_ceiling_rows_per_s"] = rows / took
            print(f"consume_batch + COPY ... FROM STDIN: {rows:,} rows in {took:.2f} s = "
                  f"{rows / took:,.0f} rows/s (the JDBC sink's ceiling)")
            took = jdbc_sink(server, pg.dsn, "pg-s-bench_rows", rows, work)
            ceiling = "jdbc_sink_ceiling_rows_per_s"
            figures["connect_jdbc_sink_rows_per_s"] = rows / took
            print(f"topic -> JDBC sink (insert): {rows:,} rows in {took:.2f} s = "
                  f"{rows / took:,.0f} rows/s "
                  f"({ratio(figures, 'connect_jdbc_sink_rows_per_s', ceiling)})")
        if "parquet" in only:
            took = copy_to_parquet(pg.dsn, "bench_rows", work)
            figures["copy_to_parquet_rows_per_s"] = rows / took
            print(f"COPY ... TO (csv) + pyarrow Parquet write: {rows:,} rows in {took:.2f} s = "
                  f"{rows / took:,.0f} rows/s (the Parquet ceiling)")
            took = parquet_sink(server, "pg-s-bench_rows", rows, work)
            figures["connect_parquet_sink_rows_per_s"] = rows / took
            print(f"topic -> ParquetSinkConnector: {rows:,} rows in {took:.2f} s = "
                  f"{rows / took:,.0f} rows/s "
                  f"({rows / took / figures['copy_to_parquet_rows_per_s']:.1%} of COPY + Parquet)")
        for section in ("cdc", "upsert"):
            if section in only:
                import connect_cdc
                figures[section] = connect_cdc.run(section, server, pg, work, args.rounds,
                                                   args.snapshot_rows if section == "cdc"
                                                   else args.upsert_rows, changes)
        if "mirror" in only:
            # the source is the bench's server; the target a second one, as two clusters
            target = launcher.ServerProcess(os.path.join(work, "target"), workers=2).start()
            nbytes = fill_mirror_source(server, records)
            mb = nbytes / 1e6
            print(f"load average: {load_average()}")
            took = mirror_ceiling(server, target, records)
            figures["mirror_ceiling_records_per_s"] = records / took
            print(f"consume_batch (source) + produce_batch (target): {records:,} records "
                  f"({mb:.1f} MB of keys and values) in {took:.2f} s = {records / took:,.0f} "
                  f"records/s, {mb / took:.1f} MB/s (the mirror's ceiling)")
            print(f"load average: {load_average()}")
            took = mirror_connect(server, target, records, work)
            figures["connect_mirror_records_per_s"] = records / took
            print(f"source -> MirrorSourceConnector -> target: {records:,} records in "
                  f"{took:.2f} s = {records / took:,.0f} records/s, {mb / took:.1f} MB/s "
                  f"({ratio(figures, 'connect_mirror_records_per_s', 'mirror_ceiling_records_per_s')}"
                  f"; target 0.5x)")
        print(f"load average: {load_average()}")
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({"rows": rows, "lines": lines, "changes": changes, "records": records,
                       "batch.max.rows": args.batch, "figures": figures}, f, indent=2)
    finally:
        for srv in (server, target):
            if srv is not None:
                srv.stop()
                srv.kill()
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
