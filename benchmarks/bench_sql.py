#!/usr/bin/env python
"""SQL over a topic's history (kafkalite.sql, issue 76): a count (of the
non-empty values: one that reads a column) and a group-by over N records read from the topic, beside DuckDB over the same
rows in a Parquet file, in the same run.

    python benchmarks/bench_sql.py                        # 1,000,000 records, 3 rounds
    python benchmarks/bench_sql.py --records 10000000     # the issue's size
    python benchmarks/bench_sql.py --quick                # 20,000 records, 1 round
    python benchmarks/bench_sql.py --avro                 # values in the registry's Avro
    python benchmarks/bench_sql.py --iceberg              # an Iceberg topic: its table's files

A two-worker server gets a topic of --partitions partitions and --records
records of --value-bytes bytes, keyed by one of --keys keys. The topic's
history is read once into a Parquet file (zstd) of the same columns the
topic's table has (kafkalite.sql.topic_source). Then, in each round, the
topic side and the Parquet side take turns going first; each runs both
queries on a fresh DuckDB connection with the same threads and memory
limit (the topic side through kafkalite.sql.Session, which reads the
topic through the Consumer for each query; the Parquet side with
read_parquet). The answers are checked equal; the table shows the medians
in records a second, and the issue's target: the topic side at least 0.5x
of Parquet's. Also the first row of a point lookup by key (WHERE key =
...), whose target is under 1 s. With --avro the values are records of an
Avro schema the registry holds (an item of 20, an amount, a note of
random text), the table has their columns (decoded by kafkalite.sql.
values, in C for the latest schema of a flat record), and the queries are
over them: a count where amount > 10 and a group-by of the items. With
--iceberg the topic is an Iceberg topic (iceberg.mode=key_value) whose
table, once it holds every record, the topic side reads from its files
(kafkalite.sql.iceberg_source); a third side, ``log``, is the same
Session reading the same topic from its log (``iceberg_catalog=""``),
and its table beside the others. A benchmark never fails on timing.
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402
import numpy as np  # noqa: E402
from report import say  # noqa: E402

from kafkalite.launcher import ServerProcess  # noqa: E402

QUICK = dict(records=20_000, rounds=1)
TOPIC = "bench-sql"
QUERIES = {
    # a count that reads a column: Parquet answers count(*) and count(value)
    # from its footer (row counts, null counts) without reading a row, which
    # a topic cannot (aborted and control records, compaction's gaps: only
    # a read of its records counts them)
    "count": 'SELECT count(*) FROM {t} WHERE octet_length(value) > 0',
    "group_by": 'SELECT key, count(*) AS n, sum(octet_length(value)) AS bytes FROM {t} '
                'GROUP BY key ORDER BY key',
}
# --avro: the same over the value's columns (the registry's Avro, decoded by
# kafkalite.sql.values); the amounts are quarters, so any order sums them exactly
AVRO_QUERIES = {
    "count": 'SELECT count(*) FROM {t} WHERE amount > 10',
    "group_by": 'SELECT item, count(*) AS n, sum(amount) AS total FROM {t} '
                'GROUP BY item ORDER BY item',
}
# --iceberg: and a count of every record, which a table's files answer from
# two small columns (partition and offset, for the offsets' bounds) and
# DuckDB over Parquet from its footer
ICEBERG_QUERIES = {**QUERIES, "count_all": 'SELECT count(*) FROM {t}'}
AVRO_SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "item", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None}]}


def produce(bootstrap: str, args, registry: str | None = None) -> None:

    from kafkalite.client import AdminClient, NewTopic, Producer
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"iceberg.mode": "key_value", "iceberg.target.lag.ms": "1000"} \
        if args.iceberg else {}
    admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config=configs)])[TOPIC].result()
    admin.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = np.random.default_rng(76)
    step = 50_000
    for start in range(0, args.records, step):
        n = min(step, args.records - start)
        keys = [b"key-%d" % k for k in np.arange(start, start + n) % args.keys]
        # random bytes, one value a row: Parquet cannot shrink them to a dictionary
        values = avro_values(registry, n, start, args.value_bytes, rng) if args.avro else \
            rng.integers(0, 256, (n, args.value_bytes), dtype=np.uint8)
        producer.produce_batch(TOPIC, values, keys=keys)   # each to its key's partition
        producer.flush()


def avro_values(registry: str, n: int, start: int, value_bytes: int, rng) -> list[bytes]:
    """``n`` values of AVRO_SCHEMA in Confluent's wire format, about
    ``value_bytes`` each (the note's random text fills them)."""
    import io
    import json
    import urllib.request

    import fastavro
    request = urllib.request.Request(
        f"{registry}/subjects/{TOPIC}-value/versions", method="POST",
        data=json.dumps({"schema": json.dumps(AVRO_SCHEMA)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as resp:      # the same id each time
        header = b"\0" + json.loads(resp.read())["id"].to_bytes(4, "big")
    parsed = fastavro.parse_schema(AVRO_SCHEMA)
    notes = rng.integers(97, 123, (n, max(value_bytes - 25, 1)), dtype=np.uint8)
    out = []
    for i in range(n):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, {
            "item": f"item-{(start + i) % 20:02d}", "amount": ((start + i) % 400) / 4,
            "note": None if i % 10 == 0 else notes[i].tobytes().decode()})
        out.append(header + buf.getvalue())
    return out


def wait_for_table(srv, timeout: float = 900.0) -> float:
    """Seconds until the topic's Iceberg table holds every offset of its log."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.storage.iceberg.topic_table import committed_offsets
    consumer = Consumer({"bootstrap.servers": srv.bootstrap, "isolation.level": "read_committed"})
    parts = consumer.list_topics(TOPIC, 30).topics[TOPIC].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), 30)[1] for p in parts}
    consumer.close()
    catalog = load_catalog("kafkalite", type="rest", uri=srv.info["iceberg_rest"])
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout:
        try:
            if committed_offsets(catalog.load_table(("kafkalite", TOPIC))) == ends:
                return time.perf_counter() - t0
        except NoSuchTableError:
            pass
        time.sleep(1)       # the leaders commit every iceberg.target.lag.ms
    raise TimeoutError(f"the table did not reach {ends} in {timeout:.0f} s")


def write_parquet(session, path: str) -> int:
    import pyarrow.parquet as pq
    reader = session.history_reader(TOPIC)
    rows = 0
    with pq.ParquetWriter(path, reader.schema, compression="zstd") as writer:
        for batch in reader:
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows


def run_topic(session, name: str, queries: dict):
    t0 = time.perf_counter()
    answer = session.query(queries[name].format(t=f'"{TOPIC}"')).read_all().to_pylist()
    return time.perf_counter() - t0, answer


def run_parquet(path: str, name: str, args, queries: dict):
    import duckdb
    con = duckdb.connect(config={"memory_limit": args.memory_limit, "threads": args.threads})
    t0 = time.perf_counter()
    answer = con.sql(queries[name].format(t=f"read_parquet('{path}')")).fetchall()
    seconds = time.perf_counter() - t0
    con.close()
    return seconds, [dict(enumerate(r)) for r in answer]


def point_lookup(session) -> float:
    """Seconds to the first row of a lookup by key (the whole history is
    scanned: a topic has no index by key)."""
    t0 = time.perf_counter()
    reader = session.query(f'SELECT * FROM "{TOPIC}" WHERE key = \'key-1\'::BLOB')
    for batch in reader:
        if batch.num_rows:
            break
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = common.parser(__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--keys", type=int, default=100, help="distinct keys (default: 100)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--threads", type=int, default=2, help="DuckDB's threads, both sides")
    p.add_argument("--memory-limit", default="1GB", help="DuckDB's memory_limit, both sides")
    p.add_argument("--avro", action="store_true",
                   help="values in the registry's Avro, the queries over their columns")
    p.add_argument("--iceberg", action="store_true",
                   help="an Iceberg topic read from its table's files, beside its log read")
    common.add_quick(p, "20,000 records, 1 round: checks that the benchmark works")
    common.add_rounds(p, 3)
    common.add_json(p)
    args = common.parse(p, argv, QUICK)

    from kafkalite.sql import Session
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as work:
        srv = ServerProcess(os.path.join(work, "data")).start(timeout=120)
        try:
            t0 = time.perf_counter()
            produce(srv.bootstrap, args, srv.info["schema_registry"])
            say(f"produced {args.records:,} records of {args.value_bytes} bytes in "
                f"{time.perf_counter() - t0:.1f} s")
            if args.iceberg:
                say(f"the Iceberg table holds every record {wait_for_table(srv):.1f} s later")

            def session_of(**kw):
                return Session({"bootstrap.servers": srv.bootstrap},
                               srv.info["schema_registry"] if args.avro else None,
                               memory_limit=args.memory_limit, threads=args.threads, **kw)
            session = session_of()
            # the same topic read from its log: an Iceberg topic's other way
            log = session_of(iceberg_catalog="") if args.iceberg else None
            parquet = os.path.join(work, "topic.parquet")
            rows = write_parquet(log or session, parquet)
            assert rows == args.records, (rows, args.records)
            say(f"parquet: {os.path.getsize(parquet) / 1e6:.1f} MB")
            figures = run_rounds(session, parquet, args, log)
            if args.iceberg:
                session.query(f'SELECT count(*) FROM "{TOPIC}"').read_all()
                assert session.rows_from_table_files == args.records, \
                    (session.rows_from_table_files, "rows from the table's files")
            figures["point_lookup_first_row_s"] = [point_lookup(session)
                                                   for _ in range(args.rounds)]
        finally:
            srv.stop()
    report(figures, args)
    return 0


def run_rounds(session, parquet: str, args, log=None) -> dict:
    """Rounds of the topic side (``session``), Parquet's, and the log side
    (``log``: an Iceberg topic's log read) when given."""
    queries = _queries(args)
    sides = ("topic", "parquet") + (("log",) if log is not None else ())

    def run(side):
        out = {}
        for name in queries:
            if side == "topic":
                out[name] = run_topic(session, name, queries)
            elif side == "log":
                out[name] = run_topic(log, name, queries)
            else:
                out[name] = run_parquet(parquet, name, args, queries)
        return out
    rounds = common.alternating(sides, args.rounds, run)
    common.say_load(rounds)
    figures = {"load_average_at_start": rounds.loads}
    for name in queries:
        for side in sides:
            answers = [r[name][1] for r in rounds.values[side]]
            figures[f"{name}_{side}_s"] = [r[name][0] for r in rounds.values[side]]
            figures[f"{name}_{side}_answer"] = answers[0]
        for side in sides[1:]:
            assert _same(figures[f"{name}_topic_answer"], figures[f"{name}_{side}_answer"]), \
                (name, side)
    return figures


def _queries(args) -> dict:
    if args.avro:
        return AVRO_QUERIES
    return ICEBERG_QUERIES if args.iceberg else QUERIES


def _same(a, b) -> bool:
    return [tuple(r.values()) for r in a] == [tuple(r.values()) for r in b]


def report(figures: dict, args) -> None:
    rows = []
    for name in _queries(args):
        topic, parquet = (statistics.median(figures[f"{name}_{s}_s"]) for s in ("topic", "parquet"))
        common.say_runs(f"{name} from the topic (s)", figures[f"{name}_topic_s"], fmt=".3f")
        common.say_runs(f"{name} from Parquet (s)", figures[f"{name}_parquet_s"], fmt=".3f")
        ours, peer = args.records / topic, args.records / parquet
        what = f"{name} over {args.records:,} records" + (" (Avro columns)" if args.avro else "")
        if args.iceberg:
            what += ", Iceberg table's files"
        # Parquet counts every row from its footer: no target beside that
        target = "" if name == "count_all" else ">= 0.5x"
        rows.append(common.Row(what, ours, "rec/s", peer, "DuckDB over Parquet", target,
                               ours >= 0.5 * peer if target else None))
        if args.iceberg:
            common.say_runs(f"{name} from the log (s)", figures[f"{name}_log_s"], fmt=".3f")
            rows.append(common.Row(f"{name}, the same topic's log read", args.records / statistics
                                   .median(figures[f"{name}_log_s"]), "rec/s", ours,
                                   "its table's files"))
    lookup = statistics.median(figures["point_lookup_first_row_s"])
    rows.append(common.Row("point lookup by key, first row", lookup, "s", target="< 1 s",
                           met=lookup < 1.0, fmt=".3f"))
    common.say_table(rows)
    if args.json:
        common.write_json(args.json, {k: v for k, v in figures.items()
                                      if not k.endswith("_answer")})


if __name__ == "__main__":
    sys.exit(main())
