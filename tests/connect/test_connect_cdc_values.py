"""The CDC source's column values (connectors/cdc.py ``_ValueLoader``): a
row decoded by the per-relation plan of loaders (``row``) is the row the
per-value path (``load``, psycopg's loader of each type oid) decodes, over
random rows of PostgreSQL's own text forms of many types -- NULLs, unicode
text, integers at their limits, floats with NaN, infinities and -0.0,
numeric with tiny and huge values, timestamps and timestamptz in a session
time zone that is not UTC, dates, bytea, arrays, json, jsonb, uuid -- and
rows with unchanged TOASTed columns. The values come from a real
PostgreSQL: ``SELECT`` of each value's text, as pgoutput and the snapshot
send it."""
from __future__ import annotations

import math
import random

import psycopg
import pytest

COLUMNS = [
    ("i2", "int2", 21), ("i4", "int4", 23), ("i8", "int8", 20), ("f4", "float4", 700),
    ("f8", "float8", 701), ("ok", "bool", 16), ("t", "text", 25), ("vc", "varchar(40)", 1043),
    ("num", "numeric", 1700), ("ts", "timestamp", 1114), ("tstz", "timestamptz", 1184),
    ("d", "date", 1082), ("b", "bytea", 17), ("ia", "int4[]", 1007), ("ta", "text[]", 1009),
    ("j", "json", 114), ("jb", "jsonb", 3802), ("u", "uuid", 2950)]
TEXTS = ["", "a,b", 'q"q', "l\nl", "\\N", "tab\there", "NULL", "ünïcode ✓ 😀", "\u2028", " "]


def random_value(rng: random.Random, kind: str):
    """A value of ``kind`` as SQL text (a literal to cast), or None (NULL)."""
    if rng.random() < 0.15:
        return None
    if kind == "int2":
        return str(rng.choice([-32768, 32767, 0, rng.randint(-32768, 32767)]))
    if kind == "int4":
        return str(rng.choice([-2**31, 2**31 - 1, rng.randint(-2**31, 2**31 - 1)]))
    if kind == "int8":
        return str(rng.choice([-2**63, 2**63 - 1, rng.randint(-2**63, 2**63 - 1)]))
    if kind in ("float4", "float8"):
        exp = 30 if kind == "float4" else 300
        return rng.choice(["NaN", "Infinity", "-Infinity", "-0", "1e-45", "3.4e38",
                           repr(rng.uniform(-1e6, 1e6)), repr(rng.random() * 10 ** rng.randint(
                               -exp, exp))])
    if kind == "bool":
        return rng.choice(["true", "false"])
    if kind in ("text", "varchar(40)"):
        return "".join(rng.choice(TEXTS) for _ in range(rng.randint(0, 4)))
    if kind == "numeric":
        return rng.choice(["NaN", "0.0000001", "-0.00", "1e30", "123456789012345678901234567890.5",
                           f"{rng.uniform(-1e9, 1e9):.{rng.randint(0, 9)}f}"])
    if kind == "timestamp":
        return f"2024-01-01 00:00:00+00'::timestamptz::timestamp + '{rng.randint(-10**9, 10**9)} ms"
    if kind == "timestamptz":
        return f"2024-01-01 00:00:00+00'::timestamptz + '{rng.randint(-10**9, 10**9)} ms"
    if kind == "date":
        return f"2000-01-01'::date + '{rng.randint(-700000, 700000)} days"
    if kind == "bytea":
        return "\\x" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 12))).hex()
    if kind == "int4[]":
        return "{" + ",".join(rng.choice(["NULL", str(rng.randint(-9, 9))])
                              for _ in range(rng.randint(0, 4))) + "}"
    if kind == "text[]":
        return "{" + ",".join('"' + rng.choice(TEXTS).replace("\\", "\\\\").replace('"', '\\"')
                              + '"' for _ in range(rng.randint(0, 3))) + "}"
    if kind in ("json", "jsonb"):
        return rng.choice(['{"a": [1, 2.5, null]}', '"ü"', "[]", '{"k": "\\u2028 ✓"}', "1e400"
                           if kind == "json" else "12"])
    return "00000000-0000-4000-8000-" + f"{rng.getrandbits(48):012x}"


def random_row(rng: random.Random) -> tuple[list[str], list[str]]:
    """One random row of COLUMNS as SQL: each value's expression (a NULL, a
    parameter cast to its type, or 'literal'::type + 'interval') and the
    parameters."""
    exprs, params = [], []
    for _, kind, _ in COLUMNS:
        v = random_value(rng, kind)
        if v is None:
            exprs.append(f"NULL::{kind}")
        elif "'" in v:
            exprs.append(f"('{v}'::interval)::{kind}")
        else:
            exprs.append(f"%s::{kind}")
            params.append(v)
    return exprs, params


def pg_texts(dsn: str, rng: random.Random, n: int) -> list[list]:
    """``n`` random rows, each value's text as PostgreSQL's output function
    writes it (bytes, or None: what pgoutput sends), in a session whose time
    zone is not UTC."""
    rows = []
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SET TIME ZONE 'Asia/Kolkata'")
        for _ in range(n):
            exprs, params = random_row(rng)
            # libpq's text of each value, as the snapshot reads it off the result
            res = c.execute(f"SELECT {', '.join(exprs)}", params).pgresult
            rows.append([res.get_value(0, j) for j in range(res.nfields)])
    return rows


def same(a, b) -> bool:
    """Equal values of the same type (NaN equal to NaN, -0.0 not to 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or repr(a) == repr(b)
    return a == b


@pytest.mark.parametrize("decimal_mode", ["string", "double"])
def test_the_column_plan_decodes_what_the_per_value_path_decodes(postgres, decimal_mode):
    from kafkalite.connect.connectors.cdc import UNCHANGED, _Relation, _ValueLoader
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    rel = _Relation(("R", 1, "public", "t", "d", [(n, oid, n == "i4") for n, _, oid in COLUMNS]),
                    ["i4"], "pg", decimal_mode)
    values = _ValueLoader(decimal_mode, "__debezium_unavailable_value")
    reference = _ValueLoader(decimal_mode, "__debezium_unavailable_value")
    rows = pg_texts(postgres, rng, 300)
    # unchanged TOASTed values of an update (pgoutput's 'u') in some rows
    for row in rows[::7]:
        row[rng.randrange(len(row))] = UNCHANGED
    for row in rows:
        got = values.row(rel, row)
        want = {name: reference.load(oid, schema, raw) for (name, oid), schema, raw in
                zip(rel.columns, rel.field_schemas, row)}
        assert list(got) == list(want)
        bad = [(n, row[i], got[n], want[n]) for i, n in enumerate(want)
               if not same(got[n], want[n])]
        assert not bad, f"seed {seed}: {bad}"
