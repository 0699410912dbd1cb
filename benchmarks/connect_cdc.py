"""bench_connect.py's CDC rounds (``--only cdc``) and JDBC upsert rounds
(``--only upsert``): each pipeline beside its ceiling, measured in the
same round, the two taking turns going first, the load average beside
each round. Figures: rows or changes a second, and the CPU each costs in
this process (the Connect worker's thread, the consumer that watches the
topic) and in the PostgreSQL cluster (every backend: the walsender that
decodes the slot, the sink's session), in µs a row or change.

CDC, one round (a fresh table, publication and slots):

1. snapshot: ``--snapshot-rows`` rows (the bench table's columns) read by
   the PostgresCdcSourceConnector's initial snapshot (Debezium's envelope,
   JsonConverter with schemas), timed from the connector's creation until
   the topic holds every row; ceiling: ``COPY (SELECT ...) TO STDOUT`` of
   the same table with its lines produced by ``produce_batch``;
2. streaming: 2/3 of ``--changes`` inserts then 1/3 updates (issue 75's
   20k + 10k), in transactions of 1,000, committed while nothing reads
   them (the two slots made before them); then the connector
   (``snapshot.mode=never`` on its slot) timed from its creation until the
   topic holds every change; ceiling: the other slot read by
   ``pg_logical_slot_get_binary_changes`` 10,000 messages a call, each
   call's pgoutput messages produced as they are by ``produce_batch``.

JDBC upsert, one round: ``--upsert-rows`` rows in two topics, the same
rows as COPY text lines (the ceiling's) and as JsonConverter envelopes with
schemas (the connector's); each goes into its own table that already holds
the first half of the ids (amount -1: every other row is an update).
Ceiling: ``consume_batch`` and, per 10,000 rows, COPY into a temporary
staging table plus one ``INSERT ... SELECT ... ON CONFLICT (id) DO UPDATE``,
committed; connect: the JdbcSinkConnector (``insert.mode=upsert``,
``pk.mode=record_value``, ``pk.fields=id``, puts of up to 10,000), timed
from its creation until every row has its new amount.
"""
from __future__ import annotations

import os
import time

from bench_connect import SINK_FETCH_BYTES, create_topic, load_average, wait_for_connectors

CDC_PREFIX = "cdcbench"
CDC_TXN = 1000


def pg_cpu(pg) -> float:
    """CPU seconds the cluster's processes have used: the postmaster's own
    and its reaped children's, and its live children's."""
    with open(os.path.join(pg.data, "postmaster.pid")) as f:
        pid = int(f.readline())
    tick = os.sysconf("SC_CLK_TCK")

    def fields(p):
        with open(f"/proc/{p}/stat") as f:
            return f.read().rpartition(")")[2].split()
    top = fields(pid)
    total = sum(int(x) for x in top[11:15])      # utime stime cutime cstime
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                st = fields(p)
            except OSError:
                continue
            if int(st[1]) == pid:
                total += int(st[11]) + int(st[12])
    return total / tick


class Meter:
    """Wall time and CPU (this process, the cluster) of one measured phase."""

    def __init__(self, pg):
        self.pg = pg

    def __enter__(self):
        self.t, self.cpu, self.pgc = time.perf_counter(), time.process_time(), pg_cpu(self.pg)
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t
        self.proc = time.process_time() - self.cpu
        self.db = pg_cpu(self.pg) - self.pgc

    def figures(self, n: int, name: str) -> dict:
        return {f"{name}_per_s": n / self.wall, f"{name}_cpu_us": self.proc / n * 1e6,
                f"{name}_pg_cpu_us": self.db / n * 1e6}


def _psql(dsn, *stmts, params=None):
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as c:
        for s in stmts:
            c.execute(s, params)


def _connector(server, work, name, config, topic, n, pg) -> Meter:
    """``config`` run by a standalone worker: a Meter from its creation until
    ``topic``'s high watermark reaches ``n``."""
    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    worker = Worker({"bootstrap.servers": server.bootstrap},
                    FileOffsetStore(os.path.join(work, f"offsets-{name}.json")))
    worker.start()
    herder = Herder(worker)
    c = Consumer({"bootstrap.servers": server.bootstrap})
    tp = TopicPartition(topic, 0)
    try:
        with Meter(pg) as m:
            herder.put_connector_config(name, config, False)
            wait_for_connectors(herder, (name,), lambda: c.get_watermark_offsets(tp)[1] >= n)
        return m
    finally:
        c.close()
        herder.stop()
        worker.stop()


def copy_produced(server, dsn, table, topic, pg) -> Meter:
    import psycopg

    from kafkalite.client import Producer
    create_topic(server, topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    try:
        with psycopg.connect(dsn) as c, Meter(pg) as m:
            buf = []
            with c.cursor().copy(f"COPY (SELECT * FROM {table}) TO STDOUT") as cp:
                for chunk in cp:
                    buf.append(chunk)
            lines = b"".join(buf).split(b"\n")[:-1]
            for i in range(0, len(lines), 10_000):
                p.produce_batch(topic, lines[i:i + 10_000], partition=0)
            if p.flush(120):
                raise RuntimeError("the ceiling's records were not acknowledged")
        return m
    finally:
        p.close()


def slot_produced(server, dsn, slot, pub, topic, n, pg) -> Meter:
    import psycopg

    from kafkalite.client import Producer
    create_topic(server, topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    try:
        with psycopg.connect(dsn, autocommit=True) as c, Meter(pg) as m:
            got = 0
            while True:
                rows = c.execute("SELECT data FROM pg_logical_slot_get_binary_changes(%s, NULL, "
                                 "10000, 'proto_version', '1', 'publication_names', %s)",
                                 (slot, pub)).fetchall()
                if not rows:
                    break
                got += len(rows)
                p.produce_batch(topic, [r[0] for r in rows], partition=0)
            if p.flush(120):
                raise RuntimeError("the ceiling's records were not acknowledged")
        if got < n:
            raise RuntimeError(f"the ceiling's slot held {got} messages, not {n} changes")
        return m
    finally:
        p.close()


def write_changes(dsn, table, base: int, changes: int) -> None:
    """2/3 of ``changes`` inserts (ids after ``base``), then 1/3 updates of
    rows of the table, in transactions of CDC_TXN."""
    import psycopg
    inserts = changes * 2 // 3
    with psycopg.connect(dsn) as c:
        for lo in range(0, inserts, CDC_TXN):
            c.execute(f"INSERT INTO {table} SELECT g, md5(g::text)::varchar(20), g * 0.25, "
                      f"TIMESTAMP '2024-01-01' + g * INTERVAL '1 millisecond' FROM "
                      f"generate_series(%s::bigint, %s::bigint) g",
                      (base + lo + 1, base + min(inserts, lo + CDC_TXN)))
            c.commit()
        for lo in range(0, changes - inserts, CDC_TXN):
            c.execute(f"UPDATE {table} SET amount = amount + 1, modified = modified + INTERVAL "
                      f"'1 second' WHERE id > %s::bigint AND id <= %s::bigint",
                      (lo, min(changes - inserts, lo + CDC_TXN)))
            c.commit()
        # logical decoding reads flushed WAL only: with synchronous_commit off (the test
        # cluster's setting) the last commits may not be yet, and a ceiling read at once
        # found a transaction short
        end = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        c.commit()
        while not c.execute("SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn",
                            (end,)).fetchone()[0]:
            c.commit()
            time.sleep(0.01)
        c.commit()


def cdc_round(server, pg, work, r: int, rows: int, changes: int) -> dict:
    dsn, table, pub = pg.dsn, f"cdc_rows_{r}", f"cdc_pub_{r}"
    _psql(dsn, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT, amount DOUBLE "
               f"PRECISION, modified TIMESTAMP)",
          f"INSERT INTO {table} SELECT g, md5(g::text)::varchar(20), g * 0.25, TIMESTAMP "
          f"'2024-01-01' + g * INTERVAL '1 millisecond' FROM generate_series(1, {rows}) g",
          f"VACUUM ANALYZE {table}", f"CREATE PUBLICATION {pub} FOR TABLE {table}")
    conf = {"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "connection.url": "jdbc:" + dsn, "publication.name": pub}
    figures: dict = {}
    # the connector and the ceiling take turns going first, round by round
    for side in (("connect", "ceiling") if r % 2 == 0 else ("ceiling", "connect")):
        if side == "connect":
            prefix = f"{CDC_PREFIX}s{r}"
            create_topic(server, f"{prefix}.public.{table}")
            m = _connector(server, work, f"cdcsnap{r}", {
                **conf, "topic.prefix": prefix, "slot.name": f"cdc_snap_{r}"},
                f"{prefix}.public.{table}", rows, pg)
            figures.update(m.figures(rows, "snapshot"))
            _drop_slots(dsn, f"cdc_snap_{r}")
        else:
            m = copy_produced(server, dsn, table, f"cdc-snap-ceiling-{r}", pg)
            figures.update(m.figures(rows, "snapshot_ceiling"))
    _psql(dsn, f"SELECT pg_create_logical_replication_slot('cdc_stream_{r}', 'pgoutput')",
          f"SELECT pg_create_logical_replication_slot('cdc_ceiling_{r}', 'pgoutput')")
    write_changes(dsn, table, rows, changes)
    for side in (("connect", "ceiling") if r % 2 == 0 else ("ceiling", "connect")):
        if side == "connect":
            prefix = f"{CDC_PREFIX}c{r}"
            create_topic(server, f"{prefix}.public.{table}")
            m = _connector(server, work, f"cdcstream{r}", {
                **conf, "topic.prefix": prefix, "slot.name": f"cdc_stream_{r}",
                "snapshot.mode": "never"}, f"{prefix}.public.{table}", changes, pg)
            figures.update(m.figures(changes, "streaming"))
        else:
            m = slot_produced(server, dsn, f"cdc_ceiling_{r}", pub, f"cdc-ceiling-{r}",
                              changes, pg)
            figures.update(m.figures(changes, "streaming_ceiling"))
    _drop_slots(dsn, f"cdc_%_{r}")
    return figures


def _drop_slots(dsn, pattern: str, timeout: float = 30.0) -> None:
    """Drop the slots named like ``pattern``; a stopped connector's walsender
    may hold its slot a moment after the worker closed the stream."""
    import psycopg
    deadline = time.monotonic() + timeout
    while True:
        try:
            _psql(dsn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                       "WHERE slot_name LIKE %s", params=(pattern,))
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def fill_upsert_topics(server, rows: int, r: int) -> tuple[str, str]:
    """The rows as COPY text lines and as JsonConverter envelopes, in two
    topics: (lines topic, envelopes topic)."""
    import datetime as dt

    from kafkalite.client import Producer
    from kafkalite.connect.converters import JsonConverter
    from kafkalite.connect.data import Field, Schema
    schema = Schema("struct", False, "bench_rows", fields=(
        Field("id", Schema.INT64), Field("name", Schema.OPTIONAL_STRING),
        Field("amount", Schema.OPTIONAL_FLOAT64), Field("modified", Schema.OPTIONAL_TIMESTAMP)))
    conv = JsonConverter()
    conv.configure({}, False)
    lines_topic, json_topic = f"upsert-lines-{r}", f"upsert-json-{r}"
    create_topic(server, lines_topic)
    create_topic(server, json_topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    base = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
    try:
        for lo in range(1, rows + 1, 10_000):
            ids = range(lo, min(rows + 1, lo + 10_000))
            vals = [{"id": i, "name": f"name-{i:08d}", "amount": i * 0.25,
                     "modified": base + dt.timedelta(milliseconds=i)} for i in ids]
            p.produce_batch(lines_topic, [
                f"{v['id']}\t{v['name']}\t{v['amount']!r}\t"
                f"{v['modified'].replace(tzinfo=None).isoformat(' ')}".encode() for v in vals],
                partition=0)
            p.produce_batch(json_topic, conv.from_connect_batch(json_topic, schema, vals),
                            partition=0)
            p.poll(0)
        if p.flush(120):
            raise RuntimeError("the upsert topics' records were not acknowledged")
    finally:
        p.close()
    return lines_topic, json_topic


def _target(dsn, table, rows):
    _psql(dsn, f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name TEXT, amount DOUBLE "
               f"PRECISION, modified TIMESTAMP)",
          f"INSERT INTO {table} SELECT g, 'old', -1, NULL FROM generate_series(1, {rows // 2}) g",
          f"VACUUM ANALYZE {table}")


def upsert_ceiling(server, pg, topic, table, rows) -> Meter:
    import psycopg

    from kafkalite.client import Consumer, TopicPartition
    cons = Consumer({"bootstrap.servers": server.bootstrap})
    cols = "id, name, amount, modified"
    try:
        with psycopg.connect(pg.dsn) as c, Meter(pg) as m:
            cons.assign([TopicPartition(topic, 0, 0)])
            c.execute(f"CREATE TEMP TABLE stage ON COMMIT DELETE ROWS AS SELECT {cols} FROM "
                      f"{table} WITH NO DATA")
            got, pending = 0, []
            while got < rows:
                values = cons.consume_batch(5).column("value").to_pylist()
                got += len(values)
                pending.extend(values)
                if len(pending) >= 10_000 or (got >= rows and pending):
                    with c.cursor().copy(f"COPY stage ({cols}) FROM STDIN") as cp:
                        cp.write(b"\n".join(pending) + b"\n")
                    c.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM stage ON "
                              f"CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, amount = "
                              f"EXCLUDED.amount, modified = EXCLUDED.modified")
                    c.commit()
                    pending = []
        return m
    finally:
        cons.close()


def upsert_connect(server, pg, work, topic, table, rows, r) -> Meter:
    import psycopg

    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": 1000,
                     "consumer.max.poll.records": 10_000,
                     "consumer.max.partition.fetch.bytes": SINK_FETCH_BYTES},
                    FileOffsetStore(os.path.join(work, f"offsets-upsert-{r}.json")))
    worker.start()
    herder = Herder(worker)
    name = f"upsert{r}"
    try:
        with psycopg.connect(pg.dsn, autocommit=True) as c, Meter(pg) as m:
            herder.put_connector_config(name, {
                "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
                "connection.url": "jdbc:" + pg.dsn, "topics": topic, "insert.mode": "upsert",
                "pk.mode": "record_value", "pk.fields": "id", "table.name.format": table,
                "batch.size": "10000"}, False)
            wait_for_connectors(herder, (name,), lambda: c.execute(
                f"SELECT count(*) FROM {table} WHERE amount >= 0").fetchone()[0] >= rows, 0.1)
        return m
    finally:
        herder.stop()
        worker.stop()


def upsert_round(server, pg, work, r: int, rows: int) -> dict:
    lines, envelopes = fill_upsert_topics(server, rows, r)
    figures: dict = {}
    for side in (("connect", "ceiling") if r % 2 == 0 else ("ceiling", "connect")):
        table = f"upsert_{side}_{r}"
        _target(pg.dsn, table, rows)
        if side == "connect":
            m = upsert_connect(server, pg, work, envelopes, table, rows, r)
            figures.update(m.figures(rows, "upsert"))
        else:
            m = upsert_ceiling(server, pg, lines, table, rows)
            figures.update(m.figures(rows, "upsert_ceiling"))
    return figures


PIPELINES = {"cdc": (("snapshot", "rows"), ("streaming", "changes")),
             "upsert": (("upsert", "rows"),)}


def report(section: str, rounds: list[dict], loads: list[str]) -> None:
    """Each round's figures beside their ceiling's, and the load it started under."""
    for i, (figs, load) in enumerate(zip(rounds, loads)):
        print(f"{section} round {i + 1} (load average {load}):")
        for name, unit in PIPELINES[section]:
            ours, ceil = figs[f"{name}_per_s"], figs[f"{name}_ceiling_per_s"]
            print(f"  {name}: {ours:,.0f} {unit}/s, {figs[f'{name}_cpu_us']:.1f} µs CPU + "
                  f"{figs[f'{name}_pg_cpu_us']:.1f} µs PostgreSQL a {unit[:-1]}; ceiling "
                  f"{ceil:,.0f} {unit}/s, {figs[f'{name}_ceiling_cpu_us']:.1f} + "
                  f"{figs[f'{name}_ceiling_pg_cpu_us']:.1f} µs; {ours / ceil:.2f}x "
                  f"(target 0.5x)")


def run(section: str, server, pg, work, rounds: int, rows: int, changes: int) -> dict:
    """``rounds`` rounds of ``section`` (cdc or upsert): {figures of each
    round, load average at each round's start}."""
    out, loads = [], []
    for r in range(rounds):
        loads.append(load_average())
        out.append(cdc_round(server, pg, work, r, rows, changes) if section == "cdc"
                   else upsert_round(server, pg, work, r, rows))
    report(section, out, loads)
    return {"rounds": out, "load_average_at_start": loads}
