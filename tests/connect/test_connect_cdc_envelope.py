"""The CDC source's envelopes written by the C writer
(kafkalite._ext.cdc_envelope, through cdc_envelopes.ChangeValues and
ChangeKeys) against the JsonConverter's bytes of the dicts the Python path
decodes from the same changes: byte for byte, for random changes (inserts,
updates with the whole old row, the old key or none, deletes, truncates,
snapshot reads, tombstones) of random rows of many PostgreSQL types as
PostgreSQL writes them (test_connect_cdc_values' rows: NULLs, unicode
text, integers at their limits, floats with NaN and infinities, numeric,
timestamps and timestamptz in a zone not UTC, dates, bytea, arrays, json,
uuid) and unchanged TOASTed values, with and without schemas, both
decimal modes. A planted fault (a float column written as text) must make
the comparison fail."""
from __future__ import annotations

import random
import uuid

import pytest
from test_connect_cdc_values import COLUMNS, pg_texts

PLACEHOLDER = "__debezium_unavailable_value"


def random_changes(rng: random.Random, rows: list) -> tuple[list, list]:
    """(changes, tombstone indexes): a change of a random kind per row (its
    old row another random row), a delete's tombstone after some deletes."""
    changes, tombstones = [], []
    for i, row in enumerate(rows):
        old = rows[rng.randrange(len(rows))]
        ts_ms = rng.choice([0, 1_700_000_000_123, rng.randrange(2**41)])
        lsn, commit = rng.randrange(2**40), rng.randrange(2**40)
        kind = rng.choice("cuUKddtr")
        if kind == "r":
            changes.append(("r", None, False, row, ts_ms, rng.choice(["true", "last"]), None,
                            lsn, None, None))
            continue
        op, before, key_only, after = {
            "c": ("c", None, False, row), "u": ("u", None, False, row),
            "U": ("u", old, False, row), "K": ("u", old, True, row),
            "d": ("d", old, rng.random() < 0.5, None), "t": ("t", None, False, None)}[kind]
        changes.append((op, before, key_only, after, ts_ms, "false", rng.randrange(2**32), lsn,
                        commit, i))
        if op == "d" and rng.random() < 0.5:
            tombstones.append(len(changes))
            changes.append(changes[-1])
    return changes, tombstones


def both_ways(source, rel, changes, tombstones, schemas_enable: str):
    """(fast, reference) bytes of the values and of the keys."""
    from kafkalite.connect.connectors.cdc_envelopes import ChangeKeys, ChangeValues
    from kafkalite.connect.converters import JsonConverter
    conv = JsonConverter()
    conv.configure({"schemas.enable": schemas_enable}, False)
    # a tombstone's value is None (the worker leaves it out of the batch it converts)
    values = ChangeValues(source, rel, [None if i in tombstones else c
                                        for i, c in enumerate(changes)]).without(set(tombstones))
    keys = ChangeKeys(source, rel, [c for c in changes if c[0] != "t"])
    fast = (conv.from_connect_batch("t", rel.envelope, values),
            conv.from_connect_batch("t", rel.key_schema, keys))
    reference = (conv.from_connect_batch("t", rel.envelope, list(values)),
                 conv.from_connect_batch("t", rel.key_schema, list(keys)))
    return fast, reference


def first_difference(fast: list, reference: list) -> str | None:
    for i, (a, b) in enumerate(zip(fast, reference)):
        if a != b:
            at = next(j for j in range(min(len(a), len(b)) + 1) if a[j:j + 1] != b[j:j + 1])
            return f"record {i}, byte {at}: {a[max(0, at - 80):at + 80]!r} != " \
                   f"{b[max(0, at - 80):at + 80]!r}"
    return None if len(fast) == len(reference) else f"{len(fast)} != {len(reference)} records"


def relation_and_source(decimal_mode: str, fault: str = ""):
    from kafkalite.connect.connectors.cdc import _Relation, _ValueLoader
    from kafkalite.connect.connectors.cdc_envelopes import ChangeSource
    rel = _Relation(("R", 1, "public", "t\u00fc", "d", [(n, oid, n in ("i4", "t"))
                                                        for n, _, oid in COLUMNS]),
                    ["i4", "t"], "pg", decimal_mode)
    return rel, ChangeSource("pg", "db\"1", _ValueLoader(decimal_mode, PLACEHOLDER), fault)


@pytest.mark.parametrize("decimal_mode", ["string", "double"])
def test_the_c_writer_writes_the_converters_bytes(postgres, decimal_mode):
    from kafkalite.connect.connectors.cdc import UNCHANGED
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    rows = pg_texts(postgres, rng, 300)
    for row in rows[::7]:
        row[rng.randrange(len(row))] = UNCHANGED
    rows.append([None] * len(COLUMNS))
    rel, source = relation_and_source(decimal_mode)
    changes, tombstones = random_changes(rng, rows)
    for schemas_enable in ("true", "false"):
        fast, reference = both_ways(source, rel, changes, tombstones, schemas_enable)
        for what, f, r in zip(("values", "keys"), fast, reference):
            assert first_difference(f, r) is None, \
                f"seed {seed}, {what}, schemas.enable={schemas_enable}: {first_difference(f, r)}"


def test_a_planted_fault_in_the_writer_is_caught(postgres):
    """The float columns written as text (KAFKALITE_CDC_FAULT=envelope-float-as-text):
    the comparison above must see it."""
    rng = random.Random(7)
    rows = pg_texts(postgres, rng, 60)
    rel, source = relation_and_source("string", fault="envelope-float-as-text")
    changes, tombstones = random_changes(rng, rows)
    fast, reference = both_ways(source, rel, changes, tombstones, "true")
    assert first_difference(fast[0], reference[0]) is not None


def test_a_change_the_writer_refuses_is_written_by_the_general_path():
    """A commit time whose ts_ns is past 64 bits (the C writer's int64): the
    converter writes the batch from the dicts, as before the writer."""
    from kafkalite.connect.connectors.cdc_envelopes import ChangeValues
    from kafkalite.connect.converters import JsonConverter
    rel, source = relation_and_source("string")
    row = [b"1"] * 3 + [None] * (len(COLUMNS) - 3)
    changes = [("c", None, False, row, ts, "false", 1, 2, 3, 0) for ts in (5, 2**53)]
    conv = JsonConverter()
    conv.configure({}, False)
    values = ChangeValues(source, rel, changes)
    got = conv.from_connect_batch("t", rel.envelope, values)
    assert got == conv.from_connect_batch("t", rel.envelope, list(values))
    assert b'"ts_ns":9007199254740992000000' in got[1]


def test_a_transform_gets_the_records_the_fast_path_writes(connect, server, pglogical):
    """Two connectors on the same changes (two slots, one topic.prefix),
    JsonConverter with schemas: one on the batch path (the C writer), one
    with a transform (RegexRouter: the per-record path, the dicts written by
    the converter record by record). Their keys and values are the same
    bytes, tombstones included."""
    from test_connect_cdc import cdc_config, drop_slot, pg, unique

    from harness import create, wait_until
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    table, prefix = unique("cdcenv"), unique("pg")
    slots = [unique("slot"), unique("slot")]
    pg(pglogical, f"CREATE TABLE {table} (id INT PRIMARY KEY, name TEXT, f FLOAT8, "
                  f"price NUMERIC(10,2), at TIMESTAMPTZ, b BYTEA, big TEXT)")
    pg(pglogical, f"ALTER TABLE {table} REPLICA IDENTITY FULL")
    topic = f"{prefix}.public.{table}"
    for t in (topic, topic + "-routed"):
        create(server, t)
    schemas = {"key.converter.schemas.enable": "true", "value.converter.schemas.enable": "true",
               "snapshot.mode": "never", "table.include.list": f"public.{table}"}
    connect.create("plain", **cdc_config(pglogical, prefix, slots[0], **schemas))
    connect.create("routed", **cdc_config(
        pglogical, prefix, slots[1], **schemas, transforms="route",
        **{"transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
           "transforms.route.regex": "(.*)", "transforms.route.replacement": "$1-routed"}))
    for name in ("plain", "routed"):
        wait_until(lambda: connect.state(name)["tasks"] and
                   connect.state(name)["tasks"][0]["state"] == "RUNNING", timeout=60,
                   message=f"{name}'s task RUNNING")
    toast = "".join(uuid.uuid4().hex for _ in range(400))
    pg(pglogical, f"INSERT INTO {table} VALUES (1, 'ünï \"q\"', 'NaN', 12.5, "
                  f"'2024-01-02 03:04:05.678+05:30', '\\x00ff', %s), "
                  f"(2, 'two', 2.25, NULL, NULL, NULL, 'small')", (toast,))
    pg(pglogical, f"UPDATE {table} SET f = '-0' WHERE id = 1")
    pg(pglogical, f"DELETE FROM {table} WHERE id = 2")
    consumer = Consumer(server.config())
    consumer.assign([TopicPartition(t, 0, OFFSET_BEGINNING) for t in (topic, topic + "-routed")])
    got: dict = {topic: [], topic + "-routed": []}
    try:
        def all_in():
            for m in consumer.consume(1000, 0.5):
                if not m.error():
                    got[m.topic()].append((m.key(), m.value()))
            return all(len(v) >= 5 for v in got.values())       # 2 c, 1 u, 1 d, a tombstone
        wait_until(all_in, timeout=60, message="both connectors' five records")
    finally:
        consumer.close()
        for name in ("plain", "routed"):
            connect.http("DELETE", f"/connectors/{name}")
        for slot in slots:
            drop_slot(pglogical, slot)
    assert got[topic] == got[topic + "-routed"]
    assert got[topic][-1][1] is None and b'"payload":{"id":2}' in got[topic][-1][0]
    assert b'"f":NaN' in got[topic][0][1] and b'"f":-0.0' in got[topic][2][1]
