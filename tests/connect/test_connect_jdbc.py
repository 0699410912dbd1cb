"""The JDBC-style connectors against a real PostgreSQL server (started by
tests/postgres.py) and SQLite files, through a standalone worker and a real
broker: the three query modes of the source, the sink's upsert, auto-create,
column evolution, batching and deletes, and PostgreSQL -> topic -> SQLite
end to end with the same rows."""
from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import sqlite3

import psycopg
import pytest
from harness import create, read_all, wait_until

from kafkalite.client import Producer

SRC = "io.confluent.connect.jdbc.JdbcSourceConnector"
SINK = "io.confluent.connect.jdbc.JdbcSinkConnector"
T = "org.apache.kafka.connect.transforms."
_n = itertools.count()
PREFIX = {"timestamp": "ts-", "timestamp+incrementing": "tsi-"}
UTC = dt.timezone.utc


def table_name(prefix="t"):
    return f"{prefix}{next(_n)}_{dt.datetime.now().strftime('%H%M%S%f')}"


def pg(dsn, sql, params=None):
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else None


def values_of(server, topic, n, timeout=60):
    got = read_all(server, topic, 1, n, timeout=timeout)
    return [json.loads(m.value())["payload"] for m in got]


def test_postgres_incrementing_source_resumes_without_repeats(connect, server, postgres, tmp_path):
    tbl = table_name()
    pg(postgres, f"CREATE TABLE {tbl} (id SERIAL PRIMARY KEY, name TEXT, qty INTEGER, "
                 f"price DOUBLE PRECISION, at TIMESTAMP)")
    for i in range(250):
        pg(postgres, f"INSERT INTO {tbl} (name, qty, price, at) VALUES (%s, %s, %s, %s)",
           (f"n{i}", i, i / 4, dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i)))
    topic = f"pg-{tbl}"
    create(server, topic)
    cfg = {"connector.class": SRC, "connection.url": "jdbc:" + postgres, "mode": "incrementing",
           "incrementing.column.name": "id", "table.whitelist": tbl, "topic.prefix": "pg-",
           "poll.interval.ms": "200", "batch.max.rows": "64"}
    connect.create("pg-inc", **cfg)
    rows = values_of(server, topic, 250)
    assert [r["id"] for r in rows] == list(range(1, 251))
    assert rows[3] == {"id": 4, "name": "n3", "qty": 3, "price": 0.75,
                       "at": int(dt.datetime(2024, 1, 1, 0, 0, 3, tzinfo=UTC).timestamp() * 1000)}
    schema = json.loads(read_all(server, topic, 1, 1)[0].value())["schema"]
    assert [(f["field"], f["type"]) for f in schema["fields"]] == [
        ("id", "int32"), ("name", "string"), ("qty", "int32"), ("price", "float64"),
        ("at", "int64")]
    assert schema["fields"][4]["name"] == "org.apache.kafka.connect.data.Timestamp"
    wait_until(lambda: connect.http("GET", "/connectors/pg-inc/offsets").json()["offsets"] == [
        {"partition": {"protocol": "1", "table": tbl}, "offset": {"incrementing": 250}}],
               timeout=60, message="the stored offset")
    # stopped and resumed: only rows added since
    connect.http("PUT", "/connectors/pg-inc/stop")
    pg(postgres, f"INSERT INTO {tbl} (name) SELECT 'late' || g FROM generate_series(1, 5) g")
    pg(postgres, f"UPDATE {tbl} SET name = 'changed' WHERE id = 1")   # not seen in this mode
    connect.http("PUT", "/connectors/pg-inc/resume")
    rows = values_of(server, topic, 255)
    assert [r["id"] for r in rows] == list(range(1, 256))
    assert [r["name"] for r in rows[250:]] == [f"late{i}" for i in range(1, 6)]


def test_postgres_timestamp_and_timestamp_incrementing_modes_see_updates(connect, server,
                                                                         postgres):
    tbl = table_name()
    pg(postgres, f"CREATE TABLE {tbl} (id SERIAL PRIMARY KEY, v TEXT, "
                 f"modified TIMESTAMP NOT NULL)")
    base = dt.datetime(2024, 3, 1, 12, 0, 0)
    # 40 rows sharing 4 timestamps: ts+incrementing must split them by id, exactly once each
    for i in range(40):
        pg(postgres, f"INSERT INTO {tbl} (v, modified) VALUES (%s, %s)",
           (f"v{i}", base + dt.timedelta(seconds=i // 10)))
    for mode in ("timestamp", "timestamp+incrementing"):
        create(server, f"{PREFIX[mode]}{tbl}")
        connect.create(f"pg-{mode}", **{
            "connector.class": SRC, "connection.url": "jdbc:" + postgres, "mode": mode,
            "incrementing.column.name": "id", "timestamp.column.name": "modified",
            "table.whitelist": tbl, "topic.prefix": PREFIX[mode], "poll.interval.ms": "200",
            "batch.max.rows": "7"})
    for mode in ("timestamp", "timestamp+incrementing"):
        rows = values_of(server, f"{PREFIX[mode]}{tbl}", 40)
        assert sorted(r["id"] for r in rows) == list(range(1, 41)), mode
    pg(postgres, f"UPDATE {tbl} SET v = 'new', modified = %s WHERE id IN (3, 17)",
       (base + dt.timedelta(minutes=5),))
    for mode in ("timestamp", "timestamp+incrementing"):
        rows = values_of(server, f"{PREFIX[mode]}{tbl}", 42)
        assert len(rows) == 42, mode
        assert [(r["id"], r["v"]) for r in rows[40:]] == [(3, "new"), (17, "new")], mode
    stamp = int((base + dt.timedelta(minutes=5)).replace(tzinfo=UTC).timestamp() * 1000)
    wait_until(lambda: connect.http("GET", "/connectors/pg-timestamp+incrementing/offsets").json()[
        "offsets"] == [{"partition": {"protocol": "1", "table": tbl}, "offset": {
            "incrementing": 17, "timestamp": stamp, "timestamp_nanos": 0}}], timeout=60,
               message="the offset")


def test_sqlite_source_incrementing_with_a_query(connect, server, tmp_path, topic_name):
    db = tmp_path / "src.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, label TEXT, price REAL, "
                  "at TIMESTAMP)")
        c.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                      [(i, f"l{i}", i * 1.5, f"2024-02-0{1 + i % 9} 10:00:00") for i in range(1, 31)])
    create(server, topic_name)
    connect.create("lite", **{"connector.class": "JdbcSource", "connection.url": f"jdbc:sqlite:{db}",
                              "mode": "incrementing", "incrementing.column.name": "id",
                              "query": "SELECT id, label FROM items WHERE id % 2 = 0",
                              "topic.prefix": topic_name, "poll.interval.ms": "200"})
    rows = values_of(server, topic_name, 15)
    assert rows == [{"id": i, "label": f"l{i}"} for i in range(2, 31, 2)]
    with sqlite3.connect(db) as c:
        c.execute("INSERT INTO items VALUES (32, 'l32', 1, NULL)")
    assert values_of(server, topic_name, 16)[-1] == {"id": 32, "label": "l32"}


def sink_config(url, topic, **extra):
    return {"connector.class": SINK, "connection.url": url, "topics": topic,
            "insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "id",
            "auto.create": "true", "auto.evolve": "true", "delete.enabled": "true",
            "batch.size": "7", **extra}


def envelope(schema_fields, payload, name=None):
    return json.dumps({"schema": {"type": "struct", "optional": False, "fields": schema_fields},
                       "payload": payload}).encode()


F_ID = {"field": "id", "type": "int64", "optional": False}
F_NAME = {"field": "name", "type": "string", "optional": True}
F_EMAIL = {"field": "email", "type": "string", "optional": True}
F_AT = {"field": "at", "type": "int64", "optional": True,
        "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_sink_upsert_auto_create_evolve_and_deletes(connect, server, postgres, tmp_path,
                                                    topic_name, db):
    table = table_name("s")
    url = f"jdbc:sqlite:{tmp_path / 'sink.db'}" if db == "sqlite" else "jdbc:" + postgres
    create(server, topic_name)
    p = Producer(server.config())
    key = lambda i: envelope([F_ID], {"id": i})   # noqa: E731
    for i in range(30):                 # v1 of the schema
        p.produce(topic_name, key=key(i), value=envelope([F_ID, F_NAME, F_AT], {
            "id": i, "name": f"n{i}", "at": 1_700_000_000_000 + i}))
    for i in range(0, 30, 3):           # v2 adds a column; updates every third row
        p.produce(topic_name, key=key(i), value=envelope([F_ID, F_NAME, F_AT, F_EMAIL], {
            "id": i, "name": f"N{i}", "at": 1_700_000_000_000 + i, "email": f"{i}@x"}))
    for i in (1, 4, 7):
        p.produce(topic_name, key=key(i), value=None)       # tombstones: deletes
    p.flush(30)
    p.close()
    connect.create(f"jsink-{db}", **sink_config(url, topic_name, **{"table.name.format": table}))

    def rows():
        try:
            if db == "sqlite":
                with sqlite3.connect(tmp_path / "sink.db") as c:
                    return c.execute(f"SELECT id, name, email, at FROM {table} ORDER BY id"
                                     ).fetchall()
            return pg(postgres, f"SELECT id, name, email, at FROM {table} ORDER BY id")
        except (sqlite3.OperationalError, psycopg.errors.UndefinedTable,
                psycopg.errors.UndefinedColumn):
            return []
    want_ids = [i for i in range(30) if i not in (1, 4, 7)]
    got = wait_until(lambda: (r := rows()) and [x[0] for x in r] == want_ids and
                     ("N27" in [x[1] for x in r]) and r, timeout=60,
                     message=lambda: f"the sink table: {rows()} {connect.state(f'jsink-{db}')}")
    for i, name, email, at in got:
        assert name == (f"N{i}" if i % 3 == 0 else f"n{i}")
        assert email == (f"{i}@x" if i % 3 == 0 else None)
        t = dt.datetime(2023, 11, 14, 22, 13, 20, (i * 1000)) 
        assert (dt.datetime.fromisoformat(at) if db == "sqlite" else at) == t
    wait_until(lambda: connect.http("GET", f"/connectors/jsink-{db}/offsets").json()["offsets"] == [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 43}}], timeout=60, message="committed offsets")
    if db == "postgres":
        cols = pg(postgres, "SELECT column_name, data_type, is_nullable FROM "
                            "information_schema.columns WHERE table_name = %s "
                            "ORDER BY ordinal_position", (table,))
        assert cols == [("id", "bigint", "NO"), ("name", "text", "YES"),
                        ("at", "timestamp without time zone", "YES"),
                        ("email", "text", "YES")]


def test_postgres_insert_sink_through_copy_is_exact(connect, server, postgres, topic_name):
    """insert.mode=insert writes through COPY FROM: text COPY escapes
    (tabs, newlines, backslashes, \\N), unicode, NULLs, bytes, floats and
    timestamps arrive as they were, in order."""
    table = table_name("c")
    create(server, topic_name)
    f_bytes = {"field": "raw", "type": "bytes", "optional": True}
    f_amount = {"field": "amount", "type": "float64", "optional": True}
    texts = ["tab\there", "new\nline", "back\\slash \\N", "ünïcode ✓", None, "", "\\."]
    p = Producer(server.config())
    for i in range(700):
        p.produce(topic_name, value=envelope([F_ID, F_NAME, F_AT, f_bytes, f_amount], {
            "id": i, "name": texts[i % len(texts)],
            "at": None if i % 5 == 0 else 1_700_000_000_000 + i,
            "raw": None if i % 4 == 0 else base64.b64encode(bytes([i % 256, 0, 9])).decode(),
            "amount": None if i % 6 == 0 else i / 3}))
    assert p.flush(30) == 0
    p.close()
    connect.create("jsink-copy", **sink_config("jdbc:" + postgres, topic_name, **{
        "table.name.format": table, "insert.mode": "insert", "pk.mode": "none",
        "delete.enabled": "false"}))

    def rows():
        try:
            return pg(postgres, f"SELECT id, name, at, raw, amount FROM {table} ORDER BY id")
        except psycopg.errors.UndefinedTable:
            return []
    got = wait_until(lambda: len(r := rows()) == 700 and r, timeout=60,
                     message=lambda: f"{len(rows())} rows: {connect.state('jsink-copy')}")
    for i, name, at, raw, amount in got:
        assert name == texts[i % len(texts)]
        assert at == (None if i % 5 == 0 else
                      dt.datetime(2023, 11, 14, 22, 13, 20, i * 1000))
        assert raw == (None if i % 4 == 0 else bytes([i % 256, 0, 9]))
        assert amount == (None if i % 6 == 0 else i / 3)


def test_sink_refuses_missing_columns_without_auto_evolve(connect, server, tmp_path, topic_name):
    db = tmp_path / "s.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    create(server, topic_name)
    p = Producer(server.config())
    p.produce(topic_name, key=envelope([F_ID], {"id": 1}),
              value=envelope([F_ID, F_NAME, F_EMAIL], {"id": 1, "name": "a", "email": "e"}))
    p.flush(30)
    p.close()
    connect.create("strict", **sink_config(f"jdbc:sqlite:{db}", topic_name,
                                           **{"auto.evolve": "false", "table.name.format": "t"}))
    st = wait_until(lambda: (s := connect.state("strict"))["tasks"][0]["state"] == "FAILED" and s,
                    timeout=60, message="FAILED")
    assert "missing fields ['email']" in st["tasks"][0]["trace"]


def test_postgres_to_topic_to_sqlite_end_to_end(connect, server, postgres, tmp_path):
    """PostgreSQL table -> JDBC source (timestamp+incrementing, ValueToKey)
    -> topic -> JDBC sink (upsert) -> SQLite table: the same rows, after
    inserts and updates at the source."""
    tbl = table_name("e")
    pg(postgres, f"CREATE TABLE {tbl} (id BIGSERIAL PRIMARY KEY, customer TEXT NOT NULL, "
                 f"amount DOUBLE PRECISION, paid BOOLEAN, modified TIMESTAMP NOT NULL "
                 f"DEFAULT (now() AT TIME ZONE 'UTC'))")
    pg(postgres, f"INSERT INTO {tbl} (customer, amount, paid, modified) "
                 f"SELECT 'c' || g, g * 1.25, g % 2 = 0, TIMESTAMP '2024-01-01' + g * INTERVAL "
                 f"'1 second' FROM generate_series(1, 400) g")
    topic = f"e2e-{tbl}"
    create(server, topic)
    lite = tmp_path / "replica.db"
    connect.create("e2e-src", **{
        "connector.class": SRC, "connection.url": "jdbc:" + postgres,
        "mode": "timestamp+incrementing", "incrementing.column.name": "id",
        "timestamp.column.name": "modified", "table.whitelist": tbl, "topic.prefix": "e2e-",
        "poll.interval.ms": "200", "batch.max.rows": "100",
        "transforms": "key", "transforms.key.type": T + "ValueToKey",
        "transforms.key.fields": "id"})
    connect.create("e2e-sink", **sink_config(f"jdbc:sqlite:{lite}", topic, **{
        "table.name.format": "orders", "delete.enabled": "false", "batch.size": "50"}))
    pg(postgres, f"UPDATE {tbl} SET paid = true, amount = amount + 1, modified = TIMESTAMP "
                 f"'2024-02-01' WHERE id % 50 = 0")
    pg(postgres, f"INSERT INTO {tbl} (customer, amount, paid, modified) VALUES "
                 f"('late', 0.5, NULL, TIMESTAMP '2024-02-02')")

    def source_rows():
        return [(i, c, a, p, m.isoformat(" ")) for i, c, a, p, m in pg(
            postgres, f"SELECT id, customer, amount, paid, modified FROM {tbl} ORDER BY id")]

    def replica_rows():
        try:
            with sqlite3.connect(lite) as c:
                return [(i, c_, a, None if p is None else bool(p), m) for i, c_, a, p, m in
                        c.execute("SELECT id, customer, amount, paid, modified FROM orders "
                                  "ORDER BY id").fetchall()]
        except sqlite3.OperationalError:
            return []
    want = source_rows()
    assert len(want) == 401
    wait_until(lambda: replica_rows() == want, timeout=90, message="the replica to match")


def test_sqlite_bulk_mode_sends_every_row_every_poll(connect, server, tmp_path, topic_name):
    db = tmp_path / "bulk.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE kv (k TEXT, v INTEGER)")
        c.executemany("INSERT INTO kv VALUES (?, ?)", [("a", 1), ("b", 2)])
    create(server, f"{topic_name}kv")
    connect.create("bulk", **{"connector.class": SRC, "connection.url": f"jdbc:sqlite:{db}",
                              "mode": "bulk", "table.whitelist": "kv", "topic.prefix": topic_name,
                              "poll.interval.ms": "300"})
    rows = values_of(server, f"{topic_name}kv", 6)
    assert rows[:6] == [{"k": "a", "v": 1}, {"k": "b", "v": 2}] * 3
    st = connect.http("GET", "/connectors/bulk/offsets").json()
    assert st == {"offsets": []}        # bulk mode keeps no offsets


def test_jdbc_source_configs_refused_with_the_field_named(connect, postgres):
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": {
        "connector.class": SRC, "connection.url": "jdbc:" + postgres, "mode": "incrementing",
        "table.whitelist": "t", "topic.prefix": "p-"}})
    assert r.status_code == 400 and "incrementing.column.name" in r.json()["message"]
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": {
        "connector.class": SRC, "connection.url": "jdbc:" + postgres, "mode": "sometimes",
        "table.whitelist": "t", "topic.prefix": "p-"}})
    assert r.status_code == 400 and "mode" in r.json()["message"]
    # a table that is not there: the connector FAILS with the reason, nothing hangs
    connect.create("missing", **{"connector.class": SRC, "connection.url": "jdbc:" + postgres,
                                 "mode": "bulk", "table.whitelist": "no_such_table",
                                 "topic.prefix": "p-"})
    st = connect.state("missing")
    assert st["connector"]["state"] == "FAILED" and "no_such_table" in st["connector"]["trace"]
    r = connect.http("POST", "/connectors", json={"name": "bad", "config": {
        "connector.class": SINK, "connection.url": "jdbc:" + postgres, "topics": "x",
        "insert.mode": "upsert"}})
    assert r.status_code == 400 and "pk.mode" in r.json()["message"]


COLUMNAR = {"type": "struct", "optional": False, "name": "flat", "fields": [
    F_ID, {"field": "small", "type": "int8", "optional": True}, F_NAME,
    {"field": "amount", "type": "float64", "optional": True},
    {"field": "ratio", "type": "float32", "optional": True},
    {"field": "ok", "type": "boolean", "optional": True}, F_AT,
    {"field": "day", "type": "int32", "optional": True,
     "name": "org.apache.kafka.connect.data.Date", "version": 1},
    {"field": "clock", "type": "int32", "optional": True,
     "name": "org.apache.kafka.connect.data.Time", "version": 1}]}
NASTY = ["", "a,b", 'q"q', "l\nl", "\r\n", "\\.", "x\\y", "\\N", "tab\there", "NULL",
         "ünïcode ✓ 😀", " ", '"', ",", "\\", "\u2028"]


def columnar_payload(i):
    return {"id": i, "small": (i % 256) - 128, "name": None if i % 7 == 0 else
            NASTY[i % len(NASTY)], "amount": None if i % 5 == 0 else (i / 3 if i % 2 else
                                                                       -i * 1.5e300),
            "ratio": i * 0.1, "ok": None if i % 3 == 0 else i % 2 == 0,
            "at": None if i % 4 == 0 else 1_700_000_000_000 + i * 86_400_017 - 10 ** 12,
            "day": None if i % 6 == 0 else i * 1000 - 700_000,
            "clock": i * 3_600_001 % 86_400_000}


def _sink_batches(server, topic, n, start=0):
    """The topic's n records from ``start`` as the worker hands them to
    put_batch: consume_batch slices, keys and values converted a batch at a
    time by the JsonConverter."""
    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.connect.api import SinkRecordBatch
    from kafkalite.connect.converters import JsonConverter
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({}, True)
    values.configure({}, False)
    c = Consumer(server.config())
    out, got = [], 0
    try:
        c.assign([TopicPartition(topic, 0, start)])
        deadline = dt.datetime.now() + dt.timedelta(seconds=30)
        while got < n and dt.datetime.now() < deadline:
            rows = c.consume_batch(1)
            if rows.num_rows:
                out.append(SinkRecordBatch(
                    rows, *keys.to_connect_batch(topic, rows.column("key")),
                    *values.to_connect_batch(topic, rows.column("value"))))
                got += rows.num_rows
    finally:
        c.close()
    assert got == n
    return out


def _sink_task(postgres, table, **extra):
    from kafkalite.connect.connectors.jdbc import JdbcSinkTask
    t = JdbcSinkTask()
    t.start({"connection.url": "jdbc:" + postgres, "insert.mode": "insert", "pk.mode": "none",
             "auto.create": "true", "table.name.format": table, **extra})
    return t


def _typed_rows(postgres, table):
    """Each row as its columns' text and values (floats by repr: -0.0 is not 0.0)."""
    cols = [f["field"] for f in COLUMNAR["fields"]]
    rows = pg(postgres, f"SELECT {', '.join(f'{c}::text AS {c}_text' for c in cols)}, "
                        f"{', '.join(cols)} FROM {table} ORDER BY id")
    return [tuple(repr(x) if isinstance(x, float) else x for x in r) for r in rows]


@pytest.mark.parametrize("columns", [
    None,                                       # auto.create: the sink's own column types
    "id BIGINT, small SMALLINT, name TEXT, amount NUMERIC, ratio REAL, ok BOOLEAN, "
    "at TIMESTAMPTZ, day DATE, clock TIME WITH TIME ZONE",
    "id BIGINT, small TEXT, name TEXT, amount TEXT, ratio TEXT, ok TEXT, at TEXT, day TEXT, "
    "clock TEXT",
    "id TEXT, small TEXT, name TEXT, amount DOUBLE PRECISION, ratio REAL, ok TEXT, "
    "at TIMESTAMP, day TEXT, clock TIME"])
def test_postgres_insert_from_arrow_columns_writes_what_the_per_record_path_writes(
        server, postgres, topic_name, columns):
    """A batch the JsonConverter hands over as Arrow columns is inserted by
    COPY of the CSV pyarrow writes: the table is the one ``put`` of the same
    records writes, text and values (quotes, commas, newlines, backslashes,
    ``\\.``, empty strings and NULLs, unicode, -1e300 and 1/3, booleans,
    timestamps, dates and times), into the sink's own columns, into wider
    types (numeric, timestamptz, timetz), into text columns (where the CSV's
    text of a float, a timestamp or a time is not psycopg's: the rows then go
    as rows), and into text columns for the rest (a boolean's text is
    psycopg's t/f). A batch PostgreSQL refuses (a NUL in a text) fails its
    put or the flush after it, and leaves nothing of itself in the table."""
    from kafkalite.connect.converters import ColumnarValues
    create(server, topic_name)
    p = Producer(server.config())
    n = 600
    p.produce_batch(topic_name, [envelope(COLUMNAR["fields"], columnar_payload(i))
                                 for i in range(n)], partition=0)
    assert p.flush(30) == 0
    p.close()
    batches = _sink_batches(server, topic_name, n)
    assert all(isinstance(b.values, ColumnarValues) for b in batches)
    columnar, per_record = table_name("col"), table_name("rec")
    if columns:
        for t in (columnar, per_record):
            pg(postgres, f"CREATE TABLE {t} ({columns})")
    a, b = _sink_task(postgres, columnar), _sink_task(postgres, per_record)
    try:
        for batch in batches:
            a.put_batch(batch)
            b.put(batch.records())
        a.flush({})         # the last CSV COPY is committed on after its put returns
        got, want = _typed_rows(postgres, columnar), _typed_rows(postgres, per_record)
        assert len(got) == n and got == want
        # a NUL in a text: refused by PostgreSQL on both paths, nothing of the batch kept
        p = Producer(server.config())
        bad = [envelope(COLUMNAR["fields"], {**columnar_payload(n + i), "name": "a\u0000b"
                                             if i == 7 else "fine"}) for i in range(10)]
        p.produce_batch(topic_name, bad, partition=0)
        assert p.flush(30) == 0
        p.close()
        [rest] = _sink_batches(server, topic_name, 10, start=n)     # one produce_batch
        assert isinstance(rest.values, ColumnarValues)
        with pytest.raises(psycopg.Error):
            a.put_batch(rest)
            a.flush({})     # where a CSV COPY's failure is raised, if not in its put
        with pytest.raises(psycopg.Error):
            b.put(rest.records())
        assert _typed_rows(postgres, columnar) == got
        assert _typed_rows(postgres, per_record) == got
    finally:
        a.stop()
        b.stop()


F_BLOB = {"field": "blob", "type": "bytes", "optional": True}
F_PRICE = {"field": "price", "type": "bytes", "optional": True, "version": 1,
           "name": "org.apache.kafka.connect.data.Decimal", "parameters": {"scale": "2"}}
F_TAGS = {"field": "tags", "type": "array", "optional": True,
          "items": {"type": "string", "optional": True}}
F_ATTRS = {"field": "attrs", "type": "map", "optional": True,
           "keys": {"type": "string", "optional": False},
           "values": {"type": "string", "optional": True}}
F_AMOUNT = {"field": "amount", "type": "float64", "optional": True}


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def _fallback_batch(case, n):
    """``n`` envelopes the JsonConverter cannot hand over as Arrow columns."""
    if case == "bytes":
        return [envelope([F_ID, F_NAME, F_BLOB], {
            "id": i, "name": NASTY[i % len(NASTY)], "blob": None if i % 3 == 0 else
            _b64(bytes([i % 256, 0, 255, 10, 44, 34]) + "ü,\\n".encode())}) for i in range(n)]
    if case == "decimals":
        return [envelope([F_ID, F_PRICE], {"id": i, "price": None if i % 4 == 0 else _b64(
            (i * 12345 - 99999).to_bytes(4, "big", signed=True))}) for i in range(n)]
    if case == "arrays and maps":
        return [envelope([F_ID, F_NAME, F_TAGS, F_ATTRS], {
            "id": i, "name": f"n{i}", "tags": None if i % 5 == 0 else ["a,b", 'q"', str(i)],
            "attrs": None if i % 2 else {"k": NASTY[i % len(NASTY)], "n": None}})
            for i in range(n)]
    if case == "a schema change within the batch":
        return [envelope([F_ID, F_NAME, F_AT] if i % 2 else [F_ID, F_NAME], {
            "id": i, "name": NASTY[i % len(NASTY)],
            **({"at": 1_700_000_000_000 + i} if i % 2 else {})}) for i in range(n)]
    # a float Arrow's reader and Python's read differently (NaN): the batch per record
    return [envelope([F_ID, F_NAME, F_AMOUNT], {
        "id": i, "name": f"n{i}", "amount": float("nan") if i == n // 2 else i / 7})
        for i in range(n)]


@pytest.mark.parametrize("case", ["bytes", "decimals", "arrays and maps",
                                  "a schema change within the batch", "a NaN"])
def test_a_batch_the_arrow_columns_cannot_hold_is_written_as_the_per_record_path_writes_it(
        server, postgres, topic_name, case):
    """A batch the JsonConverter does not hand over as Arrow columns (bytes
    and Decimals, which its JSON carries as base64; arrays and maps; records
    of two schemas; a NaN) goes through put_batch's other path or ``put``,
    and the table holds exactly the rows ``put`` of the same records writes
    (each row's text, bytea and numeric included)."""
    from kafkalite.connect.converters import ColumnarValues
    create(server, topic_name)
    n = 300
    p = Producer(server.config())
    p.produce_batch(topic_name, _fallback_batch(case, n), partition=0)
    assert p.flush(30) == 0
    p.close()
    batches = _sink_batches(server, topic_name, n)
    assert not any(isinstance(b.values, ColumnarValues) for b in batches)
    via_batch, per_record = table_name("fb"), table_name("rec")
    if case == "arrays and maps":           # no column type is made for them: JSON text
        for t in (via_batch, per_record):
            pg(postgres, f"CREATE TABLE {t} (id BIGINT, name TEXT, tags TEXT, attrs JSONB)")
    a, b = (_sink_task(postgres, t, **{"auto.evolve": "true"}) for t in (via_batch, per_record))
    try:
        for batch in batches:
            a.put_batch(batch)
            b.put(batch.records())
        a.flush({})
        got = pg(postgres, f"SELECT t::text FROM {via_batch} t ORDER BY id")
        want = pg(postgres, f"SELECT t::text FROM {per_record} t ORDER BY id")
        assert len(got) == n and got == want
        if case == "bytes":     # the bytes themselves, not their base64 text
            assert pg(postgres, f"SELECT blob FROM {via_batch} WHERE id = 1") == [
                (bytes([1, 0, 255, 10, 44, 34]) + "ü,\\n".encode(),)]
        if case == "decimals":  # numbers in a DECIMAL column, not their unscaled bytes
            assert pg(postgres, f"SELECT price::text FROM {via_batch} WHERE id IN (1, 4) "
                                f"ORDER BY id") == [("-876.54",), (None,)]
    finally:
        a.stop()
        b.stop()


def test_a_copy_refused_after_its_put_returned_fails_the_task_with_nothing_of_it_kept(
        connect, server, postgres, topic_name):
    """The CSV COPY of a put ends (PostgreSQL answers once every row is in)
    and commits while the worker fetches the next records: a batch
    PostgreSQL refuses fails the task with PostgreSQL's error, none of its
    rows in the table, and the group's offset not past the rows that are."""
    table = table_name("f")
    create(server, topic_name)
    p = Producer(server.config())
    p.produce_batch(topic_name, [envelope(COLUMNAR["fields"], columnar_payload(i))
                                 for i in range(500)], partition=0)
    assert p.flush(30) == 0
    connect.create("jsink-nul", **sink_config("jdbc:" + postgres, topic_name, **{
        "table.name.format": table, "insert.mode": "insert", "pk.mode": "none",
        "delete.enabled": "false"}))

    def count():
        try:
            return pg(postgres, f"SELECT count(*) FROM {table}")[0][0]
        except psycopg.errors.UndefinedTable:
            return 0
    wait_until(lambda: count() == 500, timeout=60,
               message=lambda: f"{count()} rows: {connect.state('jsink-nul')}")
    p.produce_batch(topic_name, [envelope(COLUMNAR["fields"], {
        **columnar_payload(500 + i), "name": "a\u0000b" if i == 3 else "fine"})
        for i in range(10)], partition=0)
    assert p.flush(30) == 0
    p.close()
    st = wait_until(lambda: (s := connect.state("jsink-nul"))["tasks"][0]["state"] == "FAILED"
                    and s, timeout=60, message="the task FAILED")
    assert "0x00" in st["tasks"][0]["trace"]
    assert count() == 500
    offsets = connect.http("GET", "/connectors/jsink-nul/offsets").json()["offsets"]
    assert all(o["offset"]["kafka_offset"] <= 500 for o in offsets), offsets


def _poll_all(postgres, tmp_path, table, batch, **extra):
    """Every row of ``table`` through a JdbcSourceTask (incrementing on id,
    ``batch`` rows a poll), as the values of its batches in order."""
    from kafkalite.connect.connectors.jdbc import JdbcSourceTask
    from kafkalite.connect.offsets import FileOffsetStore
    from kafkalite.connect.worker import OffsetStorageReader, SourceTaskContext
    props = {"connection.url": "jdbc:" + postgres, "mode": "incrementing",
             "incrementing.column.name": "id", "topic.prefix": "p-", "tables": table,
             "batch.max.rows": str(batch), "poll.interval.ms": "10", **extra}
    task = JdbcSourceTask()
    task.initialize(SourceTaskContext(props, OffsetStorageReader(
        FileOffsetStore(str(tmp_path / "offsets.json")), "src")))
    task.start(props)
    got, polls = [], 0
    try:
        while True:
            batch_ = task.poll()
            if batch_ is None:
                if polls and task.queriers[0].next_poll:
                    return got, polls
                continue
            polls += 1
            got += batch_.values
    finally:
        task.stop()


def test_postgres_source_timestamps_are_utc_exactly_in_every_poll(postgres, tmp_path):
    """Timestamps without a time zone (read as UTC: the session's zone) and
    with one (written at other offsets), microseconds, before 1970, year 1
    and 9999 and NULLs (a column's first value too) come out as the same
    UTC datetimes in the first poll (text) and in the later ones (binary),
    beside numerics, chars and text as they were."""
    import decimal
    tbl = table_name("tsu")
    pg(postgres, f"CREATE TABLE {tbl} (id INT PRIMARY KEY, ts TIMESTAMP, tz TIMESTAMPTZ, "
                 f"n NUMERIC(10, 3), c CHAR(3), name TEXT, d DOUBLE PRECISION)")
    rows = [
        (1, None, None, "1.500", "ab", "naïve ✓", 0.1),
        (2, "2024-01-01 00:00:00.000001", "2024-01-01 05:30:00.5+05:30", "-2.250", "x", None,
         None),
        (3, "1969-12-31 23:59:59.999999", "1969-12-31 20:00:00.000001-04", None, None, "", -3.3),
        (4, "1900-02-28 12:34:56.789", "1900-01-01 00:00:00+00", "0.001", "abc", "a", 1e-300),
        (5, "0001-01-01 00:00:00", "0001-01-01 00:00:00+00", "99.999", "z", "b", 2.5),
        (6, "9999-12-31 23:59:59.999999", "9999-12-31 23:59:59.999999+00", "1", "q", "c", 0.3),
        (7, None, None, "0.300", "w", "d", 7.0),
        (8, "2038-01-19 03:14:08.123456", "2038-01-19 04:14:08.123456+01", "5.000", "e", "e",
         1.1),
    ]
    with psycopg.connect(postgres, autocommit=True) as c:
        # written from a session in another zone: a timestamptz is an instant whatever
        # the writer's zone, a timestamp the wall clock as written
        c.execute("SET TIME ZONE 'America/New_York'")
        c.cursor().executemany(f"INSERT INTO {tbl} VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)
    got, polls = _poll_all(postgres, tmp_path, tbl, 2)
    assert polls == 4
    want_ts = [None, dt.datetime(2024, 1, 1, 0, 0, 0, 1, UTC),
               dt.datetime(1969, 12, 31, 23, 59, 59, 999999, UTC),
               dt.datetime(1900, 2, 28, 12, 34, 56, 789000, UTC), dt.datetime(1, 1, 1, tzinfo=UTC),
               dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC), None,
               dt.datetime(2038, 1, 19, 3, 14, 8, 123456, UTC)]
    want_tz = [None, dt.datetime(2024, 1, 1, 0, 0, 0, 500000, UTC),
               dt.datetime(1970, 1, 1, 0, 0, 0, 1, UTC), dt.datetime(1900, 1, 1, tzinfo=UTC),
               dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, UTC),
               None, dt.datetime(2038, 1, 19, 3, 14, 8, 123456, UTC)]
    assert [v["ts"] for v in got] == want_ts
    assert [v["tz"] for v in got] == want_tz
    # equal is not enough: the same instant at another offset compares equal
    assert all(v[k].tzinfo is UTC for v in got for k in ("ts", "tz") if v[k] is not None)
    assert [v["n"] for v in got] == [float(decimal.Decimal(r[3])) if r[3] else None for r in rows]
    assert [v["c"] for v in got] == ["ab ", "x  ", None, "abc", "z  ", "q  ", "w  ", "e  "]
    assert [v["name"] for v in got] == [r[5] for r in rows]
    assert [v["d"] for v in got] == [r[6] for r in rows]


def test_postgres_source_real_columns_keep_their_text_in_every_poll(postgres, tmp_path):
    """A real (float4) column's values are its text's (0.1, not the float32's
    0.10000000149011612) in every poll, as Kafka Connect's JDBC source reads
    a REAL into a FLOAT32 schema and writes its text."""
    tbl = table_name("real")
    pg(postgres, f"CREATE TABLE {tbl} (id INT PRIMARY KEY, r REAL, ts TIMESTAMP)")
    values = [0.1, 3.3, None, -0.7, 1e-7, 2.5]
    pg(postgres, f"INSERT INTO {tbl} SELECT g, (ARRAY[{', '.join(map(repr, values[:2]))}, NULL, "
                 f"{', '.join(map(repr, values[3:]))}]::real[])[g], TIMESTAMP '1960-01-01' + "
                 f"g * INTERVAL '1 microsecond' FROM generate_series(1, 6) g")
    got, polls = _poll_all(postgres, tmp_path, tbl, 2)
    assert polls == 3
    assert [v["r"] for v in got] == values
    assert [v["ts"] for v in got] == [dt.datetime(1960, 1, 1, 0, 0, 0, g, UTC) for g in range(1, 7)]


def test_postgres_upsert_from_arrow_columns_writes_what_the_per_record_path_writes(
        server, postgres, topic_name):
    """In upsert mode a batch the JsonConverter hands over as Arrow columns
    goes as the CSV pyarrow writes, COPYed into the staging table and
    upserted from it by one INSERT ... ON CONFLICT committed on after the
    put returns (as inserts are): the table is the one ``put`` of the same
    records upserts, every type of COLUMNAR, a key written several times
    within a batch (the last write wins) and across batches."""
    from kafkalite.connect.converters import ColumnarValues
    create(server, topic_name)
    p = Producer(server.config())
    n, keys = 600, 170
    p.produce_batch(topic_name, [envelope(COLUMNAR["fields"], {**columnar_payload(i),
                                                              "id": i % keys})
                                 for i in range(n)], partition=0)
    assert p.flush(30) == 0
    p.close()
    batches = _sink_batches(server, topic_name, n)
    assert all(isinstance(b.values, ColumnarValues) for b in batches)
    columnar, per_record = table_name("ucol"), table_name("urec")
    upsert = {"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"}
    a, b = _sink_task(postgres, columnar, **upsert), _sink_task(postgres, per_record, **upsert)
    try:
        for batch in batches:
            a.put_batch(batch)
            # the columns' path: its upsert and commit run on after the put
            assert a._committing is not None
            b.put(batch.records())
        a.flush({})
        got, want = _typed_rows(postgres, columnar), _typed_rows(postgres, per_record)
        assert len(got) == keys and got == want
    finally:
        a.stop()
        b.stop()
