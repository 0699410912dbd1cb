"""The PostgreSQL change-data-capture source (connectors/cdc.py) against a
real PostgreSQL server with ``wal_level=logical`` (tests/postgres.py) and a
real broker: Debezium-style envelopes of inserts, updates, deletes and
truncates in commit order, the common types, unchanged TOAST values, the
wal_level check; and a standalone worker process killed with SIGKILL
mid-stream and restarted: every change arrives at least once, in LSN order
per table, none skipped -- with the checker shown to catch a slot advanced
past uncommitted changes (``KAFKALITE_CDC_FAULT=advance-on-start``).

``KAFKALITE_CDC_TXNS`` (tests/soak.py: 30, 1000 under tools/soak) sets the
transactions the kill test writes."""
from __future__ import annotations

import base64
import datetime as dt
import itertools
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import psycopg
import pytest
from harness import child_env, create, free_port, wait_until

from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
from soak import setting

CDC = "io.debezium.connector.postgresql.PostgresConnector"
JSON = "org.apache.kafka.connect.json.JsonConverter"
UTC = dt.timezone.utc
_n = itertools.count()


def pg(dsn, sql, params=None):
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else None


def drop_slot(dsn, slot, timeout=30):
    """Drops the test's slot (its WAL is otherwise kept), once no session holds it."""
    def dropped():
        try:
            pg(dsn, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s", (slot,))
            return True
        except psycopg.errors.ObjectInUse:
            return False
    wait_until(dropped, timeout=timeout, message=f"slot {slot} released", interval=0.2)


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


def slot_confirmed_past(dsn, slot: str, lsn: int) -> bool:
    """Whether ``slot``'s confirmed_flush_lsn is past ``lsn`` (a commit LSN):
    the transaction's WAL released. (The task streams the slot, so it holds
    it: a peek of its changes from here fails with ObjectInUse.)"""
    from kafkalite.connect.connectors.cdc import lsn_str
    return pg(dsn, "SELECT confirmed_flush_lsn > %s::pg_lsn FROM pg_replication_slots WHERE "
                   "slot_name = %s", (lsn_str(lsn), slot))[0][0]


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
    wait_until(lambda: connect.state("cdc")["tasks"] and
               connect.state("cdc")["tasks"][0]["state"] == "RUNNING", timeout=60,
               message="the task RUNNING")
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
        got = wait_until(lambda: (lambda b: b if all(len(b[t]) >= n for t, n in want.items())
                                else None)(by_topic()), timeout=60,
                         message=lambda: f"every change: {by_topic()} {connect.state('cdc')}")
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
    # the slot advances as offsets are committed: past the last transaction's commit
    last = max(v["source"]["lsn_commit"] for _, v in f_recs + d_recs if v)
    wait_until(lambda: slot_confirmed_past(pglogical, slot, last), timeout=60,
               message="the slot advanced to the committed offset")
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
    st = wait_until(lambda: (lambda s: s if s["connector"]["state"] == "FAILED" else None)(
        connect.state("cdc-replica")), timeout=60, message="the connector FAILED")
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


def write_changes(dsn, ta, tb, first, last, progress):
    with psycopg.connect(dsn, autocommit=False) as c:
        for i in range(first, last + 1):
            c.execute(f"INSERT INTO {ta} VALUES (%s, %s)", (i, i))
            c.execute(f"INSERT INTO {tb} VALUES (%s, %s)", (i, i))
            if i % 3 == 0:
                c.execute(f"UPDATE {ta} SET v = v + 100000 WHERE id = %s", (i - 1,))
            if i % 4 == 0:
                c.execute(f"DELETE FROM {tb} WHERE id = %s", (i - 2,))
            c.commit()
            progress[0] = i


def table_states(expected: list) -> list[dict]:
    """The table {id: v} after each prefix of ``expected`` (len(expected) + 1 states)."""
    rows, out = {}, [{}]
    for op, i, v in expected:
        if op == "d":
            rows.pop(i, None)
        else:
            rows[i] = v
        out.append(dict(rows))
    return out


def check_stream(expected: list, got: list) -> list[str]:
    """Problems in one table's records ``got`` [(position, op, id, v)] against the
    changes ``expected`` [(op, id, v)], for a worker killed at any moment.

    A record is a change (position: (lsn_commit, change)) or a snapshot row (op
    ``r``; position: its slot's consistent point, one per snapshot). The stream
    is cut where a snapshot starts (the first start's, and a restarted task's when
    the kill came before the snapshot was done). A snapshot followed by changes or
    ending the stream must be the table as some prefix of ``expected`` left it,
    each row once; one followed by the next snapshot may be cut short. After each
    snapshot (or from the start, when the table was empty and no snapshot row
    came) the changes must go on from there: a record out of LSN order (a
    position not above the highest seen and not a repeat of a change seen since
    that snapshot; its changes commit after its slot's consistent point), a repeat
    that differs, and, after dropping repeats, any change
    missing, extra or reordered -- the last part must end at ``expected``'s end,
    an earlier part be a prefix of what followed its snapshot."""
    states = table_states(expected)
    # [snapshot rows or None, its slot's LSN, changes]
    parts, snapshots, problems = [[None, None, []]], [], []
    for pos, op, i, v in got:
        if op == "r":
            if not snapshots or pos != snapshots[-1]:
                if pos in snapshots:
                    problems.append(f"a row of the snapshot at {pos} after a later snapshot")
                snapshots.append(pos)
                parts.append([{}, pos, []])
            rows, _, changes = parts[-1]
            if changes:
                problems.append(f"snapshot row {i} after a change")
            if i in rows:
                problems.append(f"snapshot row {i} twice")
            rows[i] = v
        else:
            parts[-1][2].append((pos, op, i, v))
    top = None
    for n, (rows, lsn, changes) in enumerate(parts):
        last = n == len(parts) - 1
        if rows is None:
            base = 0
        elif rows in states:
            base = states.index(rows)
        elif changes or last:
            problems.append(f"a snapshot of {len(rows)} rows that no committed state of the "
                            f"table had")
            continue
        else:
            continue            # cut short by the kill: the next snapshot follows
        if lsn is not None:
            # what follows a snapshot committed after its slot's consistent point
            top = max(top, (lsn, -1)) if top is not None else (lsn, -1)
        seen, firsts = {}, []
        for pos, *change in changes:
            if top is not None and pos <= top:
                if pos not in seen:
                    problems.append(f"out of LSN order: {change} at {pos} after {top}")
                elif seen[pos] != change:
                    problems.append(f"repeat differs at {pos}: {seen[pos]} then {change}")
                continue
            top, seen[pos] = pos, change
            firsts.append(tuple(change))
        want = expected[base:] if last else expected[base:base + len(firsts)]
        if firsts != want:
            missing = [c for c in want if c not in firsts]
            extra = [c for c in firsts if c not in want]
            problems.append(f"changes differ: {len(firsts)} of {len(want)} after change {base}; "
                            f"missing {missing[:5]} ({len(missing)}), extra {extra[:5]} "
                            f"({len(extra)})")
    return problems


def test_the_kill_checker_takes_a_kill_at_any_moment_and_catches_skips_and_reorders():
    """check_stream on made-up streams of one table: a kill during the first
    snapshot (a second, whole snapshot follows), a kill while streaming (a
    repeat from the stored offset), a first snapshot that caught the writer's
    first transactions; and a skipped, a reordered and a doubled change, a
    snapshot row twice, a snapshot of no committed state."""
    exp, _ = expected_changes(12)
    states = table_states(exp)
    at = {k: (10 * k + 10, 0) for k in range(len(exp))}       # change k's position

    def changes(first, last):
        return [(at[k], *exp[k]) for k in range(first, last)]

    def snapshot(k, rows=None):
        """A snapshot of the table after change k - 1 (its slot made before change k)."""
        rows = states[k] if rows is None else rows
        return [(10 * k + 5, "r", i, v) for i, v in sorted(rows.items())]
    whole = changes(0, len(exp))
    assert check_stream(exp, whole) == []
    # a repeat after a restart from the stored offset
    assert check_stream(exp, changes(0, 9) + changes(6, len(exp))) == []
    # the first snapshot caught 5 changes; killed in the middle of its rows, the
    # restarted task's snapshot caught 8
    cut = snapshot(5)[:2]
    assert check_stream(exp, snapshot(5) + changes(5, len(exp))) == []
    assert check_stream(exp, cut + snapshot(8) + changes(8, len(exp))) == []
    # killed after streaming a few, before the snapshot was stored as done: again
    assert check_stream(exp, snapshot(5) + changes(5, 7) + snapshot(8) +
                        changes(8, len(exp))) == []
    # ... and the writer had finished before the second snapshot: no change after it
    assert check_stream(exp, cut + snapshot(len(exp))) == []
    # the faults
    skipped = check_stream(exp, changes(0, 4) + changes(5, len(exp)))
    assert len(skipped) == 1 and skipped[0].startswith("changes differ"), skipped
    swapped = whole[:3] + [whole[4], whole[3]] + whole[5:]
    assert any(p.startswith("out of LSN order") for p in check_stream(exp, swapped))
    assert check_stream(exp, snapshot(5) + changes(4, len(exp)))[0].startswith(
        "out of LSN order")
    assert check_stream(exp, snapshot(5) + changes(6, len(exp)))[0].startswith(
        "changes differ")
    differs = whole[:5] + [(at[3], "c", 99, 99)] + whole[5:]
    assert check_stream(exp, differs)[0].startswith("repeat differs")
    twice = snapshot(5) + snapshot(5)[-1:] + changes(5, len(exp))
    assert check_stream(exp, twice)[0].startswith("snapshot row")
    wrong = snapshot(5, {i: v + 1 for i, v in states[5].items()}) + changes(5, len(exp))
    assert check_stream(exp, wrong)[0].startswith("a snapshot of")
    assert check_stream(exp, cut)[0].startswith("a snapshot of")        # a snapshot cut short
    assert check_stream(exp, changes(0, len(exp) - 1))[0].startswith("changes differ")


class StandaloneCdc:
    """``kafkalite connect standalone`` running one CDC connector ``cfg`` in its
    own process (offsets in ``tmp_path``), to be killed and started again."""

    def __init__(self, server, tmp_path, cfg, flush_ms, fault=None):
        self.port = free_port()
        self.offsets = tmp_path / "offsets.json"
        (tmp_path / "worker.properties").write_text(
            f"bootstrap.servers={server.bootstrap}\n"
            f"offset.storage.file.filename={self.offsets}\n"
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

    def stored(self) -> dict | None:
        """The source offset in the offsets file (replaced whole on each flush)."""
        try:
            doc = json.loads(self.offsets.read_text())
        except (OSError, ValueError):
            return None
        return next((v for _, v in doc["offsets"]), None)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def run_killed_worker(server, dsn, tmp_path, fault=None):
    """A standalone worker process capturing two tables while a writer commits
    transactions: SIGKILLed once it stored the offset of a streamed change, a
    quarter of the way, more transactions written while it is down, restarted,
    the rest written while it streams. Returns (problems per table, repeats)."""
    n = setting("KAFKALITE_CDC_TXNS")
    ta, tb, slot, prefix = unique("ka"), unique("kb"), unique("kslot"), unique("pk")
    pg(dsn, f"CREATE TABLE {ta} (id INT PRIMARY KEY, v INT)")
    pg(dsn, f"CREATE TABLE {tb} (id INT PRIMARY KEY, v INT)")
    topics = [f"{prefix}.public.{ta}", f"{prefix}.public.{tb}"]
    for t in topics:
        create(server, t)
    cfg = cdc_config(dsn, prefix, slot, **{"table.include.list": f"{ta},{tb}",
                                           "max.batch.size": "16"})
    worker = StandaloneCdc(server, tmp_path, cfg, 200, fault)
    reader = TopicReader(server, topics)
    progress = [0]
    exp_a, exp_b = expected_changes(n)
    try:
        wait_until(worker.running, timeout=60, message="the CDC task RUNNING")
        write_changes(dsn, ta, tb, 1, n // 4, progress)
        # killed past its snapshot, with a streamed change's offset stored: the restart
        # resumes from it (the planted fault acts there); a kill during the snapshot
        # makes the task snapshot again (test_cdc_worker_killed_mid_snapshot_...)
        wait_until(lambda: (o := worker.stored()) and o.get("lsn_commit", -1) >= 0,
                   timeout=60, message=lambda: f"a streamed change's offset stored: "
                                               f"{worker.stored()}")
        worker.kill9()
        write_changes(dsn, ta, tb, n // 4 + 1, n // 2, progress)
        worker.start()
        wait_until(worker.running, timeout=60, message="the CDC task RUNNING again")
        write_changes(dsn, ta, tb, n // 2 + 1, n, progress)

        def records(topic):
            return [(v["source"]["lsn"] if v["op"] == "r" else
                     (v["source"]["lsn_commit"], v["source"]["change"]), v["op"],
                     (v["after"] or v["before"])["id"], v["after"] and v["after"]["v"])
                    for t, _, v in reader.records if t == topic and v is not None]

        def caught_up():
            # the writer's last change arrived (changes come in commit order: any
            # other change the task will ever send came before it), or the stream
            # is right already (a snapshot taken after the last write ends it)
            reader.poll()
            return all(tuple(exp[-1]) in {tuple(r[1:]) for r in records(t)} or
                       not check_stream(exp, records(t))
                       for t, exp in zip(topics, (exp_a, exp_b)))
        wait_until(caught_up, timeout=90, message=lambda: f"the writer's last changes "
                                                          f"(progress {progress[0]} of {n})")
        got_a, got_b = records(topics[0]), records(topics[1])
        repeats = len(got_a) + len(got_b) - len({r[0] for r in got_a} | {r[0] for r in got_b})
        return {ta: check_stream(exp_a, got_a), tb: check_stream(exp_b, got_b)}, repeats
    finally:
        worker.stop()
        reader.close()
        drop_slot(dsn, slot)


@pytest.mark.slow
def test_cdc_kill9_and_restart_neither_skips_nor_reorders(server, pglogical, tmp_path):
    problems, repeats = run_killed_worker(server, pglogical, tmp_path)
    assert problems == {t: [] for t in problems}, problems
    print(f"repeats after the restart (at-least-once window): {repeats}")


@pytest.mark.slow
def test_cdc_kill9_checker_catches_a_slot_advanced_past_uncommitted_changes(server, pglogical,
                                                                            tmp_path):
    """The planted fault: the resumed task advances the slot to the current WAL
    position, past the changes written while the worker was down."""
    problems, _ = run_killed_worker(server, pglogical, tmp_path, fault="advance-on-start")
    print(f"the checker with the slot advanced on start: {problems}")
    assert any(p.startswith("changes differ") for ps in problems.values() for p in ps), problems


# ---- the initial snapshot ---------------------------------------------------------------------

SNAPSHOT_ROWS = 1500
LAST_ROW = 10**6        # inserted after the writer's changes: the table's last change


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
                # paced, so that some changes land while the snapshot is read
                time.sleep(0.01)
            c.execute(f"INSERT INTO {table} VALUES (%s, 0, 'last', true, NULL)", (LAST_ROW,))
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
        assert done.is_set()

        def through_the_last_row():
            # the snapshot ended and the last row arrived (in it, or as the last
            # change): every record the connector sends for the table came before
            records = reader.poll()
            values = [v for _, _, v in records if v is not None]
            return any(v["source"]["snapshot"] == "last" for v in values) and \
                any((v["after"] or {}).get("id") == LAST_ROW for v in values)
        wait_until(through_the_last_row, timeout=60,
                   message=lambda: f"the snapshot's end and row {LAST_ROW}: "
                                   f"{len(reader.records)} records")
        records = reader.records
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
    # the writer deletes 12 rows and inserts 61: those done before the slot are in it
    assert SNAPSHOT_ROWS - 12 <= len(snap) <= SNAPSHOT_ROWS + 61
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
    rows = 100_000     # the C snapshot read 20,000 rows before the kill landed, quiet
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
        wait_until(snapshot_under_way, timeout=60,
                   message="part of the snapshot sent and its offsets stored")
        worker.kill9()
        # the rows deleted below must be ones the killed worker's snapshot never sent
        # (a re-snapshot does not know a row it never sees was ever there): the last
        # ones, far past the first rows it was killed among (checked below, once
        # every record it sent is in)
        deleted = list(range(rows - 4, rows + 1))
        pg(pglogical, f"UPDATE {table} SET v = -v WHERE id <= 10")
        pg(pglogical, f"DELETE FROM {table} WHERE id IN ({', '.join(map(str, deleted))})")
        pg(pglogical, f"INSERT INTO {table} VALUES ({rows + 1}, 1)")
        worker.start()
        want = {i: {"id": i, "v": v} for i, v in pg(pglogical, f"SELECT id, v FROM {table}")}

        def rebuilt():
            got = replay(reader.poll())
            return got == want and any(v and v["source"]["snapshot"] == "last"
                                       for _, _, v in reader.records)
        wait_until(rebuilt, timeout=90, message=lambda: (
            f"the table rebuilt from the topic: missing "
            f"{sorted(set(want) - set(replay(reader.records)))[:5]}, extra "
            f"{sorted(set(replay(reader.records)) - set(want))[:5]}"))
        records = reader.records
    finally:
        worker.stop()
        reader.close()
        drop_slot(pglogical, slot)
    snap = [v for _, _, v in records if v is not None and v["op"] == "r"]
    first = [v for v in snap if v["source"]["lsn"] == snap[0]["source"]["lsn"]]
    assert first[-1]["source"]["snapshot"] != "last" and \
        not {v["after"]["id"] for v in first} & set(deleted), \
        "the snapshot reached the rows deleted after the kill: make the table larger"
    print(f"snapshot records: {len(snap)} for {rows} rows ({len(first)} before the kill)")
    assert len(snap) > rows - 5 and snap[-1]["source"]["snapshot"] == "last"


def test_a_debezium_configuration_from_its_documentation_runs_unchanged(connect, server,
                                                                          pglogical):
    """Debezium's PostgreSQL connector example (its documentation's
    "fulfillment-connector", with this test's server, table, slot and
    publication): database.* keys instead of connection.url, topic.prefix
    naming <prefix>.<schema>.<table>, plugin.name=pgoutput, and the worker's
    converters (JSON with schemas): Debezium's envelope, schema names and
    source block."""
    import urllib.parse
    dsn = urllib.parse.urlsplit(pglogical)
    table, slot = unique("inventory"), unique("dbz")
    pg(pglogical, f"CREATE TABLE {table} (id INT PRIMARY KEY, item TEXT, qty INT)")
    pg(pglogical, f"INSERT INTO {table} VALUES (1, 'bolt', 10)")
    topic = f"fulfillment{slot}.public.{table}"
    create(server, topic)
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": dsn.hostname,
        "database.port": str(dsn.port),
        "database.user": dsn.username,
        "database.password": "postgres",
        "database.dbname": dsn.path.lstrip("/"),
        "topic.prefix": f"fulfillment{slot}",
        "table.include.list": f"public.{table}",
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "publication.name": slot + "_pub",
    }
    # neither connection.url nor database.hostname: the validation names the keys
    bare = {k: v for k, v in config.items() if not k.startswith("database.")}
    r = connect.http("PUT", "/connector-plugins/PostgresConnector/config/validate", json=bare)
    errs = {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"]}
    assert "database.hostname" in " ".join(errs["connection.url"]), errs["connection.url"]
    r = connect.http("POST", "/connectors", json={"name": "dbz", "config": {
        **config, "plugin.name": "decoderbufs"}})
    assert r.status_code == 400 and "plugin.name" in r.text, r.text

    connect.create("dbz", **config)
    wait_until(lambda: connect.state("dbz")["tasks"] and
               connect.state("dbz")["tasks"][0]["state"] == "RUNNING", timeout=60,
               message=lambda: f"the task RUNNING: {connect.state('dbz')}")
    pg(pglogical, f"UPDATE {table} SET qty = 9 WHERE id = 1")
    pg(pglogical, f"DELETE FROM {table} WHERE id = 1")
    reader = TopicReader(server, [topic])
    try:
        recs = wait_until(lambda: len(reader.poll()) >= 4 and reader.records, timeout=60,
                          message=lambda: f"4 records on {topic}: {reader.records}")
    finally:
        reader.close()
    ops = [v and v["payload"]["op"] for _, _, v in recs]
    assert ops == ["r", "u", "d", None], ops             # snapshot, update, delete, tombstone
    key, value = recs[1][1], recs[1][2]
    assert key["schema"]["name"] == f"{topic}.Key" and key["payload"] == {"id": 1}
    assert value["schema"]["name"] == f"{topic}.Envelope"
    assert [f["field"] for f in value["schema"]["fields"]] == [
        "before", "after", "source", "op", "ts_ms"]
    assert value["payload"]["after"] == {"id": 1, "item": "bolt", "qty": 9}
    src = value["payload"]["source"]
    assert (src["connector"], src["name"], src["db"], src["schema"], src["table"]) == (
        "postgresql", f"fulfillment{slot}", dsn.path.lstrip("/"), "public", table)
    # Debezium's whole source block, in its order (issue 75: sequence, xmin and a
    # version a consumer can read were missing); kafkalite's two of its own last
    source_fields = next(f for f in value["schema"]["fields"] if f["field"] == "source")
    assert [f["field"] for f in source_fields["fields"]] == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us",
        "ts_ns", "schema", "table", "txId", "lsn", "xmin", "lsn_commit", "change"]
    assert re.fullmatch(r"\d+\.\d+\.\d+\.Final", src["version"]), src["version"]
    assert json.loads(src["sequence"]) == [str(src["lsn_commit"]), str(src["lsn"])]
    assert (src["ts_us"], src["ts_ns"], src["xmin"]) == (
        src["ts_ms"] * 1000, src["ts_ms"] * 1_000_000, None)
    snap_src = recs[0][2]["payload"]["source"]
    assert json.loads(snap_src["sequence"]) == [None, str(snap_src["lsn"])]
    connect.http("DELETE", "/connectors/dbz")
    drop_slot(pglogical, slot)
