"""The PostgreSQL change-data-capture source (connectors/cdc.py) against a
real PostgreSQL server with ``wal_level=logical`` (tests/postgres.py) and a
real broker: Debezium-style envelopes of inserts, updates, deletes and
truncates in commit order, the common types, unchanged TOAST values, the
wal_level check; and a standalone worker process killed with SIGKILL
mid-stream and restarted: every change arrives at least once, in LSN order
per table, none skipped -- with the checker shown to catch a slot advanced
past uncommitted changes (``KAFKALITE_CDC_FAULT=advance-on-start``).

``KAFKALITE_CDC_TXNS`` (default 90) sets the transactions the kill test
writes; e.g. 2000 for a longer run."""
from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from connect_helpers import wait_for
from harness import child_env, create, free_port

from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
from postgres import PostgresServer, find_binaries
from soak import setting

CDC = "io.debezium.connector.postgresql.PostgresConnector"
JSON = "org.apache.kafka.connect.json.JsonConverter"
UTC = dt.timezone.utc
_n = itertools.count()


@pytest.fixture(scope="module")
def pglogical():
    """A PostgreSQL server with wal_level=logical, for this module: its DSN."""
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    srv = PostgresServer(wal_level="logical").start()
    yield srv.dsn
    srv.stop()


def pg(dsn, sql, params=None):
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else None


def drop_slot(dsn, slot, timeout=30):
    """Drops the test's slot (its WAL is otherwise kept), once no session holds it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            pg(dsn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def unique(prefix):
    return f"{prefix}{next(_n)}_{uuid.uuid4().hex[:6]}"


class TopicReader:
    """Everything in some topics from the start, kept as (topic, key, value) JSON."""

    def __init__(self, server, topics):
        self.c = Consumer(server.config())
        self.c.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in topics])
        self.records: list = []

    def poll(self, seconds=0.5):
        for m in self.c.consume(10_000, seconds):
            if m.error():
                continue
            self.records.append((m.topic(), None if m.key() is None else json.loads(m.key()),
                                 None if m.value() is None else json.loads(m.value())))
        return self.records

    def close(self):
        self.c.close()


def cdc_config(dsn, prefix, slot, **extra):
    return {"connector.class": CDC, "connection.url": "jdbc:" + dsn, "topic.prefix": prefix,
            "slot.name": slot, "publication.name": slot + "_pub", "poll.interval.ms": "100",
            "key.converter": JSON, "key.converter.schemas.enable": "false",
            "value.converter": JSON, "value.converter.schemas.enable": "false", **extra}


def test_cdc_envelopes_types_toast_and_truncate_in_commit_order(connect, server, pglogical):
    full, dflt = unique("cdcfull"), unique("cdcdflt")
    slot = unique("slot")
    prefix = unique("pg")
    pg(pglogical, f"CREATE TABLE {full} (id INT PRIMARY KEY, name TEXT, qty INT2, big INT8, "
                  f"price NUMERIC(10,2), ok BOOL, f FLOAT8, at TIMESTAMP, atz TIMESTAMPTZ, "
                  f"d DATE, j JSONB, b BYTEA, u UUID, v VARCHAR(10))")
    pg(pglogical, f"ALTER TABLE {full} REPLICA IDENTITY FULL")
    pg(pglogical, f"CREATE TABLE {dflt} (id INT PRIMARY KEY, n INT, big TEXT)")
    topics = [f"{prefix}.public.{full}", f"{prefix}.public.{dflt}"]
    for t in topics:
        create(server, t)
    connect.create("cdc", **cdc_config(pglogical, prefix, slot,
                                       **{"table.include.list": f"public.{full},public.{dflt}"}))
    wait_for(lambda: connect.state("cdc")["tasks"] and
             connect.state("cdc")["tasks"][0]["state"] == "RUNNING", what="the task RUNNING")
    u = uuid.uuid4()
    toast = "".join(uuid.uuid4().hex for _ in range(400))      # 12.8 kB, barely compressible
    with psycopg.connect(pglogical, autocommit=False) as c:
        # txn 1: inserts, every type; a null
        c.execute(f"INSERT INTO {full} VALUES (1, 'one', 7, 9000000000, 12.34, true, 1.5, "
                  f"'2024-01-02 03:04:05.678', '2024-01-02 03:04:05.678+02', '2024-02-29', "
                  f"'{{\"a\": [1, 2]}}', '\\x00ff', %s, 'vc')", (u,))
        c.execute(f"INSERT INTO {full} (id, name) VALUES (2, NULL)")
        c.execute(f"INSERT INTO {dflt} VALUES (1, 1, %s)", (toast,))
        c.commit()
        # txn 2: updates (FULL: before image; default identity: none), a delete
        c.execute(f"UPDATE {full} SET name = 'uno' WHERE id = 1")
        c.execute(f"UPDATE {dflt} SET n = 2 WHERE id = 1")        # big: unchanged TOAST
        c.execute(f"DELETE FROM {full} WHERE id = 2")
        c.commit()
        # txn 3: a delete with the default identity (before: key only), a key change
        c.execute(f"INSERT INTO {dflt} VALUES (5, 5, 'small')")
        c.execute(f"UPDATE {dflt} SET id = 6 WHERE id = 5")
        c.execute(f"DELETE FROM {dflt} WHERE id = 1")
        c.commit()
        c.execute(f"TRUNCATE {full}")
        c.commit()
        # a column added mid-stream: a new Relation message, a new schema
        c.execute(f"ALTER TABLE {dflt} ADD COLUMN note TEXT")
        c.execute(f"INSERT INTO {dflt} VALUES (7, 7, 'x', 'added')")
        c.commit()
    reader = TopicReader(server, topics)
    try:
        def by_topic():
            recs = reader.poll()
            return {t: [(k, v) for tt, k, v in recs if tt == t] for t in topics}
        want = {topics[0]: 6, topics[1]: 7}      # deletes + tombstones
        got = wait_for(lambda: (lambda b: b if all(len(b[t]) >= n for t, n in want.items())
                                else None)(by_topic()),
                       what=lambda: f"every change: {by_topic()} {connect.state('cdc')}")
    finally:
        reader.close()
    f_recs, d_recs = got[topics[0]], got[topics[1]]
    assert [v and v["op"] for _, v in f_recs] == ["c", "c", "u", "d", None, "t"]
    assert [v and v["op"] for _, v in d_recs] == ["c", "u", "c", "u", "d", None, "c"]
    assert d_recs[6][1]["after"] == {"id": 7, "n": 7, "big": "x", "note": "added"}
    # every type, as Connect values in JSON
    k, v = f_recs[0]
    assert k == {"id": 1}
    assert v["before"] is None
    assert v["after"] == {
        "id": 1, "name": "one", "qty": 7, "big": 9000000000, "price": "12.34", "ok": True,
        "f": 1.5, "at": int(dt.datetime(2024, 1, 2, 3, 4, 5, 678000, UTC).timestamp() * 1000),
        "atz": int(dt.datetime(2024, 1, 2, 1, 4, 5, 678000, UTC).timestamp() * 1000),
        "d": (dt.date(2024, 2, 29) - dt.date(1970, 1, 1)).days, "j": '{"a": [1, 2]}',
        "b": "AP8=", "u": str(u), "v": "vc"}
    src = v["source"]
    assert (src["connector"], src["name"], src["db"], src["schema"], src["table"]) == (
        "postgresql", prefix, "postgres", "public", full)
    assert src["txId"] > 0 and src["lsn"] > 0 and src["ts_ms"] > 0
    assert f_recs[1][1]["after"]["name"] is None                       # a null
    # FULL: the update's before image is the whole old row
    upd = f_recs[2][1]
    assert upd["before"]["name"] == "one" and upd["after"]["name"] == "uno"
    assert upd["before"]["price"] == "12.34"
    assert f_recs[3][0] == {"id": 2} and f_recs[3][1]["before"]["id"] == 2
    assert f_recs[3][1]["after"] is None
    assert f_recs[4] == ({"id": 2}, None)                                 # tombstone
    assert f_recs[5] == (None, {**f_recs[5][1], "before": None, "after": None, "op": "t"})
    # default identity: no before image of an update; unchanged TOAST as the placeholder
    assert d_recs[0][1]["after"]["big"] == toast
    assert d_recs[1][1]["before"] is None
    assert d_recs[1][1]["after"] == {"id": 1, "n": 2, "big": "__debezium_unavailable_value"}
    # a key change: before carries the old key columns only
    assert d_recs[3][1]["before"] == {"id": 5, "n": None, "big": None}
    assert d_recs[3][0] == {"id": 6}
    # a delete with the default identity: the key columns only
    assert d_recs[4][1]["before"] == {"id": 1, "n": None, "big": None}
    # commit order: (lsn_commit, change) rises through each topic; one txId per transaction
    for recs in (f_recs, d_recs):
        pos = [(v["source"]["lsn_commit"], v["source"]["change"]) for _, v in recs if v]
        assert pos == sorted(pos) and len(set(pos)) == len(pos)
    txids = [v["source"]["txId"] for _, v in f_recs if v]
    assert txids[0] == txids[1] < txids[2] == txids[3] < txids[4]
    assert d_recs[1][1]["source"]["txId"] == txids[2]        # one transaction, both tables
    # the slot advances as offsets are committed: nothing left but what came after
    wait_for(lambda: pg(pglogical, "SELECT count(*) FROM pg_logical_slot_peek_binary_changes("
                                   "%s, NULL, NULL, 'proto_version', '1', 'publication_names', "
                                   "%s)", (slot, slot + "_pub"))[0][0] == 0,
             what="the slot advanced to the committed offset")
    connect.http("DELETE", "/connectors/cdc")
    drop_slot(pglogical, slot)


def test_pgoutput_parser_refuses_malformed_messages():
    from kafkalite.connect.connectors.cdc import parse_message
    from kafkalite.connect.errors import DataException
    assert parse_message(b"B" + (5).to_bytes(8, "big") + (6).to_bytes(8, "big") +
                         (7).to_bytes(4, "big")) == ("B", 5, 6, 7)
    for bad in (b"", b"Z", b"I\x00", b"R\x00\x00\x00\x01abc", b"I\x00\x00\x00\x01N\x00\x01q"):
        with pytest.raises(DataException):
            parse_message(bad)


def test_cdc_refuses_a_server_without_logical_decoding(connect, postgres):
    # the session's PostgreSQL runs with the default wal_level=replica
    connect.create("cdc-replica", **cdc_config(postgres, "pgr", "never_made"))
    st = wait_for(lambda: (lambda s: s if s["connector"]["state"] == "FAILED" else None)(
        connect.state("cdc-replica")), what="the connector FAILED")
    assert "wal_level is 'replica'" in st["connector"]["trace"]
    assert "wal_level=logical" in st["connector"]["trace"]


# ---- kill -9 of a standalone worker mid-stream ---------------------------------------------

def expected_changes(n):
    """What the writer's transactions do, per table: [(op, id, v)] in commit order."""
    a, b = [], []
    for i in range(1, n + 1):
        a.append(("c", i, i))
        b.append(("c", i, i))
        if i % 3 == 0:
            a.append(("u", i - 1, i - 1 + 100_000))
        if i % 4 == 0:
            b.append(("d", i - 2, None))
    return a, b


def write_changes(dsn, ta, tb, n, progress):
    with psycopg.connect(dsn, autocommit=False) as c:
        for i in range(1, n + 1):
            c.execute(f"INSERT INTO {ta} VALUES (%s, %s)", (i, i))
            c.execute(f"INSERT INTO {tb} VALUES (%s, %s)", (i, i))
            if i % 3 == 0:
                c.execute(f"UPDATE {ta} SET v = v + 100000 WHERE id = %s", (i - 1,))
            if i % 4 == 0:
                c.execute(f"DELETE FROM {tb} WHERE id = %s", (i - 2,))
            c.commit()
            progress[0] = i
            # slow enough that the restarted worker streams while the writer still writes
            time.sleep(0.05)


def check_stream(expected: list, got: list) -> list[str]:
    """Problems in one table's records ``got`` [(position, op, id, v)] against the
    changes ``expected`` [(op, id, v)]: a record out of LSN order (a position not
    above the highest seen and not a repeat of the same change), a repeat that
    differs, and, after dropping repeats, any change missing, extra or reordered."""
    problems, seen, top = [], {}, None
    firsts = []
    for pos, *change in got:
        if top is not None and pos <= top:
            if pos not in seen:
                problems.append(f"out of LSN order: {change} at {pos} after {top}")
            elif seen[pos] != change:
                problems.append(f"repeat differs at {pos}: {seen[pos]} then {change}")
            continue
        top, seen[pos] = pos, change
        firsts.append(tuple(change))
    if firsts != expected:
        missing = [c for c in expected if c not in firsts]
        extra = [c for c in firsts if c not in expected]
        problems.append(f"changes differ: {len(firsts)} of {len(expected)}; missing "
                        f"{missing[:5]} ({len(missing)}), extra {extra[:5]} ({len(extra)})")
    return problems


class StandaloneCdc:
    """``kafkalite connect standalone`` running one CDC connector ``cfg`` in its
    own process (offsets in ``tmp_path``), to be killed and started again."""

    def __init__(self, server, tmp_path, cfg, flush_ms, fault=None):
        self.port = free_port()
        (tmp_path / "worker.properties").write_text(
            f"bootstrap.servers={server.bootstrap}\n"
            f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
            f"offset.flush.interval.ms={flush_ms}\nlisteners=http://127.0.0.1:{self.port}\n")
        (tmp_path / "cdc.properties").write_text(
            "name=cdc\n" + "".join(f"{k}={v}\n" for k, v in cfg.items()))
        self.args = [sys.executable, "-m", "kafkalite", "connect", "standalone",
                     str(tmp_path / "worker.properties"), str(tmp_path / "cdc.properties")]
        self.env = child_env()
        if fault:
            self.env["KAFKALITE_CDC_FAULT"] = fault
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def running(self):
        import requests
        try:
            st = requests.get(f"http://127.0.0.1:{self.port}/connectors/cdc/status",
                              timeout=5).json()
        except requests.ConnectionError:
            return False
        return st.get("tasks") and st["tasks"][0]["state"] == "RUNNING"

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def run_killed_worker(server, dsn, tmp_path, fault=None):
    """A standalone worker process capturing two tables while a writer commits
    transactions, SIGKILLed a quarter of the way and restarted. Returns
    (problems per table, repeats)."""
    n = setting("KAFKALITE_CDC_TXNS")
    ta, tb, slot, prefix = unique("ka"), unique("kb"), unique("kslot"), unique("pk")
    pg(dsn, f"CREATE TABLE {ta} (id INT PRIMARY KEY, v INT)")
    pg(dsn, f"CREATE TABLE {tb} (id INT PRIMARY KEY, v INT)")
    topics = [f"{prefix}.public.{ta}", f"{prefix}.public.{tb}"]
    for t in topics:
        create(server, t)
    cfg = cdc_config(dsn, prefix, slot, **{"table.include.list": f"{ta},{tb}",
                                           "max.batch.size": "16"})
    worker = StandaloneCdc(server, tmp_path, cfg, 700, fault)
    reader = TopicReader(server, topics)
    progress = [0]
    writer = None
    try:
        wait_for(worker.running, what="the CDC task RUNNING")
        writer = threading.Thread(target=write_changes, args=(dsn, ta, tb, n, progress))
        writer.start()
        wait_for(lambda: progress[0] >= n // 4, what="a quarter of the writes")
        worker.kill9()
        time.sleep(0.5)
        worker.start()
        wait_for(worker.running, what="the CDC task RUNNING again")
        writer.join(120)
        exp_a, exp_b = expected_changes(n)

        def records(topic):
            return [((v["source"]["lsn_commit"], v["source"]["change"]), v["op"],
                     (v["after"] or v["before"])["id"], v["after"] and v["after"]["v"])
                    for t, _, v in reader.records if t == topic and v is not None]

        def complete():
            reader.poll()
            return (len({r[0] for r in records(topics[0])}) >= len(exp_a) and
                    len({r[0] for r in records(topics[1])}) >= len(exp_b))
        deadline = time.monotonic() + (15 if fault else 90)
        while not complete() and time.monotonic() < deadline:
            pass
        got_a, got_b = records(topics[0]), records(topics[1])
        repeats = len(got_a) + len(got_b) - len({r[0] for r in got_a} | {r[0] for r in got_b})
        return {ta: check_stream(exp_a, got_a), tb: check_stream(exp_b, got_b)}, repeats
    finally:
        if writer is not None:
            writer.join(120)
        worker.stop()
        reader.close()
        drop_slot(dsn, slot)


def test_cdc_kill9_and_restart_neither_skips_nor_reorders(server, pglogical, tmp_path):
    problems, repeats = run_killed_worker(server, pglogical, tmp_path)
    assert problems == {t: [] for t in problems}, problems
    print(f"repeats after the restart (at-least-once window): {repeats}")


def test_cdc_kill9_checker_catches_a_slot_advanced_past_uncommitted_changes(server, pglogical,
                                                                            tmp_path):
    """The planted fault: the resumed task advances the slot to the current WAL
    position, past what the killed worker never committed."""
    problems, _ = run_killed_worker(server, pglogical, tmp_path, fault="advance-on-start")
    print(f"the checker with the slot advanced on start: {problems}")
    assert any(p.startswith("changes differ") for ps in problems.values() for p in ps), problems


# ---- the initial snapshot ---------------------------------------------------------------------

SNAPSHOT_ROWS = 1500
QUIET_S = 10.0


def replay(records: list) -> dict:
    """A table rebuilt from its topic's records: id -> row."""
    rows = {}
    for _, key, value in records:
        if value is None:
            continue                                 # a tombstone
        if value["op"] in ("r", "c", "u"):
            if value["before"] is not None and value["before"]["id"] != value["after"]["id"]:
                rows.pop(value["before"]["id"], None)
            rows[value["after"]["id"]] = value["after"]
        elif value["op"] == "d":
            rows.pop(value["before"]["id"], None)
    return rows


def snapshot_problems(connect, server, dsn) -> tuple[list[str], list]:
    """A table of SNAPSHOT_ROWS rows captured by a new connector while a writer
    changes it (some changes land while the snapshot is read): problems
    between the table rebuilt from the topic and the table itself (rows
    missing, extra or different, snapshot rows doubled, a snapshot row after
    a change), and the records."""
    table, slot, prefix = unique("snap"), unique("sslot"), unique("ps")
    pg(dsn, f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT, note TEXT, ok BOOL, b BYTEA)")
    pg(dsn, f"INSERT INTO {table} SELECT i, i, 'row ' || i, i % 2 = 0, int4send(i) "
            f"FROM generate_series(1, {SNAPSHOT_ROWS}) i")
    topic = f"{prefix}.public.{table}"
    create(server, topic)
    done = threading.Event()

    def writer():
        with psycopg.connect(dsn, autocommit=True) as c:
            for i in range(1, 61):
                c.execute(f"UPDATE {table} SET v = v + 1000000, ok = NOT ok WHERE id = %s",
                          (i * 7,))
                c.execute(f"INSERT INTO {table} VALUES (%s, %s, 'new', true, NULL)",
                          (SNAPSHOT_ROWS + i, i))
                if i % 5 == 0:
                    c.execute(f"DELETE FROM {table} WHERE id = %s", (i * 11,))
                time.sleep(0.01)
        done.set()
    connect.create("snap", **cdc_config(dsn, prefix, slot, **{
        "table.include.list": f"public.{table}", "max.batch.size": "100"}))
    t = threading.Thread(target=writer)
    t.start()
    reader = TopicReader(server, [topic])
    try:
        t.join(60)
        want = {r[0]: {"id": r[0], "v": r[1], "note": r[2], "ok": r[3],
                       "b": None if r[4] is None else base64.b64encode(r[4]).decode()}
                for r in pg(dsn, f"SELECT id, v, note, ok, b FROM {table}")}
        # until the topic rebuilds the table, or (a checker's planted fault
        # never converges) nothing new came for QUIET_S, or 60 s
        deadline = time.monotonic() + 60
        seen, quiet_since = -1, time.monotonic()
        while time.monotonic() < deadline:
            records = reader.poll()
            if replay(records) == want:
                break
            if len(records) != seen:
                seen, quiet_since = len(records), time.monotonic()
            elif records and time.monotonic() - quiet_since > QUIET_S:
                break
        records = reader.poll(1.0)
    finally:
        reader.close()
        connect.http("DELETE", "/connectors/snap")
        drop_slot(dsn, slot)
    got = replay(records)
    problems = []
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    differ = sorted(i for i in set(want) & set(got) if want[i] != got[i])
    if missing or extra or differ:
        problems.append(f"rows missing {missing[:5]} ({len(missing)}), extra {extra[:5]} "
                        f"({len(extra)}), different {differ[:5]} ({len(differ)})")
    ops = [v["op"] for _, _, v in records if v is not None]
    snap_ids = [v["after"]["id"] for _, _, v in records if v is not None and v["op"] == "r"]
    if len(snap_ids) != len(set(snap_ids)):
        problems.append(f"snapshot rows doubled: {len(snap_ids) - len(set(snap_ids))}")
    if "r" in ops and any(op != "r" for op in ops[:len(snap_ids)]):
        problems.append("a change came before the end of the snapshot")
    return problems, records


def test_cdc_initial_snapshot_then_changes_rebuild_the_table_exactly(connect, server, pglogical):
    """snapshot.mode=initial (the default): the rows committed before the slot
    as op r records, then every change after them, none missed or doubled,
    although the writer runs while the snapshot is read."""
    problems, records = snapshot_problems(connect, server, pglogical)
    assert problems == []
    snap = [v for _, _, v in records if v is not None and v["op"] == "r"]
    # the writer deletes 12 rows and inserts 60: those done before the slot are in it
    assert SNAPSHOT_ROWS - 12 <= len(snap) <= SNAPSHOT_ROWS + 60
    assert [v["source"]["snapshot"] for v in snap[-2:]] == ["true", "last"]
    assert all(v["before"] is None and v["source"]["txId"] is None for v in snap)
    row2 = next(v["after"] for v in snap if v["after"]["id"] == 2)
    assert row2 == {"id": 2, "v": 2, "note": "row 2", "ok": True,
                    "b": base64.b64encode((2).to_bytes(4, "big")).decode()}
    changes = [v for _, _, v in records if v is not None and v["op"] != "r"]
    assert changes and all(v["source"]["snapshot"] == "false" for v in changes)
    pos = [(v["source"]["lsn_commit"], v["source"]["change"]) for v in changes]
    assert pos == sorted(pos)


def test_cdc_snapshot_checker_catches_a_missing_row(connect, server, pglogical, monkeypatch):
    """The planted fault: each table's first snapshot row is left out."""
    monkeypatch.setenv("KAFKALITE_CDC_FAULT", "snapshot-drop-first")
    problems, _ = snapshot_problems(connect, server, pglogical)
    print(f"the snapshot checker with a row left out: {problems}")
    assert any(p.startswith("rows missing [1]") for p in problems), problems


def test_cdc_worker_killed_mid_snapshot_snapshots_again_and_misses_nothing(server, pglogical,
                                                                          tmp_path):
    """A standalone worker SIGKILLed while it reads the initial snapshot: the
    restarted task finds the snapshot unfinished in its offsets, drops the
    slot and snapshots again; the table rebuilt from the topic equals the
    table (rows sent twice are the same rows), and changes made between the
    kill and the restart arrive."""
    rows = 20_000
    table, slot, prefix = unique("ksnap"), unique("kss"), unique("pks")
    pg(pglogical, f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
    pg(pglogical, f"INSERT INTO {table} SELECT i, i FROM generate_series(1, {rows}) i")
    topic = f"{prefix}.public.{table}"
    create(server, topic)
    worker = StandaloneCdc(server, tmp_path, cdc_config(
        pglogical, prefix, slot, **{"table.include.list": table, "max.batch.size": "20"}), 200)
    reader = TopicReader(server, [topic])
    try:
        offsets = tmp_path / "offsets.json"

        def snapshot_under_way():
            stored = offsets.exists() and offsets.read_text().strip()
            return len(reader.poll()) >= 400 and bool(stored) and json.loads(stored)
        wait_for(snapshot_under_way, what="part of the snapshot sent and its offsets stored")
        worker.kill9()
        # everything the killed worker had acknowledged: read until quiet (a
        # count taken at once can miss records still on their way, and the
        # rows deleted below must be ones the first snapshot did not send:
        # a re-snapshot does not know a row it never sees was ever there)
        sent_before = -1
        while len(reader.poll(1.0)) != sent_before:
            sent_before = len(reader.records)
        unsent = sorted(set(range(1, rows + 1)) - set(replay(reader.records)))
        assert len(unsent) > 5, "the snapshot finished before the kill: make it longer"
        pg(pglogical, f"UPDATE {table} SET v = -v WHERE id <= 10")
        pg(pglogical, f"DELETE FROM {table} WHERE id IN ({', '.join(map(str, unsent[-5:]))})")
        pg(pglogical, f"INSERT INTO {table} VALUES ({rows + 1}, 1)")
        worker.start()
        want = {i: {"id": i, "v": v} for i, v in pg(pglogical, f"SELECT id, v FROM {table}")}
        deadline = time.monotonic() + 90
        while replay(reader.poll()) != want and time.monotonic() < deadline:
            pass
        records = reader.poll(0.5)
    finally:
        worker.stop()
        reader.close()
        drop_slot(pglogical, slot)
    got = replay(records)
    assert got == want, (f"missing {sorted(set(want) - set(got))[:5]}, extra "
                         f"{sorted(set(got) - set(want))[:5]}")
    snap = [v for _, _, v in records if v is not None and v["op"] == "r"]
    print(f"snapshot records: {len(snap)} for {rows} rows ({sent_before} before the kill)")
    assert len(snap) > rows - 5 and snap[-1]["source"]["snapshot"] == "last"
