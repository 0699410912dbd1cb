"""pgoutput's change messages parsed by kafkalite._ext.pgoutput (through
cdc.parse_message): real Insert, Update (REPLICA IDENTITY FULL and
DEFAULT, the key changed or not, an unchanged TOASTed value) and Delete
messages from a logical slot, against a reference parser written from
PostgreSQL's "Logical Replication Message Formats"; and every truncation
of each, and each with a column kind PostgreSQL does not send, refused
with a DataException (never a crash, never a read past the message)."""
from __future__ import annotations

import struct

import psycopg
import pytest


def reference(data: bytes, unchanged) -> tuple:
    """The message by the layout, one field at a time."""
    i = 0

    def take(fmt):
        nonlocal i
        v = struct.unpack_from(fmt, data, i)
        i += struct.calcsize(fmt)
        return v[0]

    def tuple_data():
        nonlocal i
        out = []
        for _ in range(take("!h")):
            kind = take("!c")
            if kind == b"n":
                out.append(None)
            elif kind == b"u":
                out.append(unchanged)
            else:
                n = take("!i")
                out.append(data[i:i + n])
                i += n
        return tuple(out)
    kind = take("!c").decode()
    relid = take("!I")
    tag = take("!c").decode()
    if kind == "I":
        return ("I", relid, tuple_data())
    if kind == "D":
        return ("D", relid, tag, tuple_data())
    old_kind = old = None
    if tag in "KO":
        old_kind, old = tag, tuple_data()
        take("!c")
    return ("U", relid, old_kind, old, tuple_data())


def slot_messages(dsn: str) -> list[bytes]:
    """The change messages of a few statements on two tables, from a slot."""
    with psycopg.connect(dsn, autocommit=True) as c:
        # logical decoding reads flushed WAL only (the test cluster commits without
        # waiting for the flush)
        c.execute("SET synchronous_commit = on")
        c.execute("DROP TABLE IF EXISTS pgo_full, pgo_key")
        c.execute("CREATE TABLE pgo_full (id int PRIMARY KEY, t text, b bytea, f float8)")
        c.execute("ALTER TABLE pgo_full REPLICA IDENTITY FULL")
        c.execute("CREATE TABLE pgo_key (id int PRIMARY KEY, big text, n numeric)")
        c.execute("DROP PUBLICATION IF EXISTS pgo_pub")
        c.execute("CREATE PUBLICATION pgo_pub FOR TABLE pgo_full, pgo_key")
        c.execute("SELECT pg_create_logical_replication_slot('pgo_slot', 'pgoutput')")
        try:
            c.execute("INSERT INTO pgo_full VALUES (1, 'ünï \"x\"', '\\x00ff', 'NaN'), "
                      "(2, NULL, NULL, -0.0), (3, '', '\\x', 1e300)")
            # a value past the TOAST threshold, stored out of line, so an update that
            # leaves it alone sends it unchanged ('u')
            c.execute("INSERT INTO pgo_key SELECT 1, string_agg(md5(g::text), ''), 1.5 "
                      "FROM generate_series(1, 400) g")
            c.execute("UPDATE pgo_full SET t = 'new' WHERE id = 1")
            c.execute("UPDATE pgo_key SET n = 2.5 WHERE id = 1")
            c.execute("UPDATE pgo_key SET id = 2 WHERE id = 1")
            c.execute("DELETE FROM pgo_full WHERE id = 2")
            c.execute("DELETE FROM pgo_key")
            rows = c.execute("SELECT data FROM pg_logical_slot_get_binary_changes('pgo_slot', "
                             "NULL, NULL, 'proto_version', '1', 'publication_names', "
                             "'pgo_pub')").fetchall()
        finally:
            c.execute("SELECT pg_drop_replication_slot('pgo_slot')")
    return [bytes(r[0]) for r in rows if bytes(r[0])[:1] in (b"I", b"U", b"D")]


def test_change_messages_parse_as_the_layout_says(pglogical):
    from kafkalite.connect.connectors.cdc import UNCHANGED, parse_message
    msgs = slot_messages(pglogical)
    kinds = [m[:1] for m in msgs]
    assert kinds.count(b"I") == 4 and kinds.count(b"U") == 3 and kinds.count(b"D") == 2
    parsed = [parse_message(m) for m in msgs]
    assert parsed == [reference(m, UNCHANGED) for m in msgs]
    # the cases the layout has: the whole old row, an unchanged value, the old key
    assert any(p[0] == "U" and p[2] == "O" for p in parsed)
    assert any(p[0] == "U" and UNCHANGED in p[-1] for p in parsed)
    assert any(p[0] == "U" and p[2] == "K" for p in parsed)


def test_every_truncated_change_message_is_refused(pglogical):
    from kafkalite.connect.connectors.cdc import parse_message
    from kafkalite.connect.errors import DataException
    for m in slot_messages(pglogical):
        for n in range(len(m)):
            with pytest.raises(DataException, match="^pgoutput: "):
                parse_message(m[:n])
        # the first column's kind byte (after the kind, the relation, the tuple's tag
        # and its column count) replaced by one PostgreSQL does not send
        at = 8
        with pytest.raises(DataException, match="unknown tuple column kind b'q'"):
            parse_message(m[:at] + b"q" + m[at + 1:])


def test_a_run_of_inserts_and_updates_is_made_into_changes_by_one_call(pglogical):
    """pgoutput.change_run: from each message on, the Inserts and Updates of
    its relation up to the first message of another kind or relation, each
    as the change tuple cdc.py's per-message path makes of its parse."""
    from kafkalite._ext.pgoutput import change_run
    from kafkalite.connect.connectors.cdc import UNCHANGED
    msgs = [(1000 + k, m) for k, m in enumerate(slot_messages(pglogical))]
    runs = 0
    for at, (_, m) in enumerate(msgs):
        relid = struct.unpack_from("!I", m, 1)[0]
        changes: list = []
        end = change_run(msgs, at, relid, UNCHANGED, 17, 42, 999, 5, changes)
        want = []
        for lsn, d in msgs[at:]:
            p = reference(d, UNCHANGED)
            if p[0] not in ("I", "U") or p[1] != relid:
                break
            before, key_only, after = (None, False, p[2]) if p[0] == "I" else \
                (p[3], p[2] == "K", p[4])
            want.append(("c" if p[0] == "I" else "u", before, key_only, after, 17, "false",
                         42, lsn, 999, 5 + len(want)))
        assert changes == want and end == at + len(want)
        runs += len(want) > 1
    assert runs     # the slot's messages hold a run of more than one
    # a message cut short in a run: parse_change's error (the task's DataException)
    with pytest.raises(ValueError, match="truncated"):
        change_run([msgs[0], (0, msgs[0][1][:9])], 0, struct.unpack_from("!I", msgs[0][1], 1)[0],
                   UNCHANGED, 0, 0, 0, 0, [])


def test_rows_and_changes_are_not_tracked_by_the_collector(pglogical):
    """A change waits in memory from its poll until the offset commit: its
    rows and its change tuple hold only bytes, None, ints and strings, so
    they are made untracked (kafkalite._ext.pgoutput), and no collection
    walks the hundreds of thousands of them a backlog holds (issue 75)."""
    import gc

    from kafkalite._ext.pgoutput import change_run
    from kafkalite.connect.connectors.cdc import UNCHANGED, parse_message
    msgs = slot_messages(pglogical)
    rows = [row for m in msgs for row in parse_message(m)[2:]
            if isinstance(row, (tuple, list))]
    assert len(rows) >= len(msgs)
    assert not [r for r in rows if gc.is_tracked(r)], "rows tracked by the collector"
    pairs = [(1000 + k, m) for k, m in enumerate(msgs)]
    changes: list = []
    change_run(pairs, 0, struct.unpack_from("!I", msgs[0], 1)[0], UNCHANGED, 17, 42, 999, 5,
               changes)
    assert len(changes) > 1
    assert not [c for c in changes if gc.is_tracked(c) or gc.is_tracked(c[3])], \
        "changes tracked by the collector"
