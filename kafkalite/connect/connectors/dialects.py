"""SQL dialects of the JDBC-style connectors: SQLite (the stdlib's sqlite3)
and PostgreSQL (psycopg 3), behind one small interface.

``connection.url`` names the database as the JDBC connectors' do
(``jdbc:sqlite:/path/db``, ``jdbc:postgresql://host:port/db?user=u``) or as
a plain URI (``sqlite:///path/db``, ``postgresql://user@host:port/db``);
``connection.user`` / ``connection.password`` are added to a PostgreSQL
connection. PostgreSQL sessions run with ``TimeZone=UTC`` so that timestamp
columns without a time zone are read and compared as UTC (the JDBC
connectors' ``db.timezone`` default).

PostgreSQL results come in binary once a query's column types are known
and each is one whose binary value psycopg loads as it loads its text
(``query``): there a timestamp column without a time zone is loaded as
UTC datetimes by psycopg's own (compiled) timestamptz loader -- both are
microseconds since 2000-01-01 on the wire -- so no value is made UTC one
at a time in Python.

Who calls: jdbc.py, from one task's thread per connection.
"""
from __future__ import annotations

import datetime as _dt
import decimal
import json
import urllib.parse

from kafkalite.connect import data as cdata
from kafkalite.connect.data import Schema
from kafkalite.connect.errors import ConnectException

UTC = _dt.timezone.utc


class Dialect:
    name = "?"
    placeholder = "?"

    def quote(self, ident: str) -> str:
        return '"' + ident.replace('"', '""') + '"'

    def qualified(self, table: str) -> str:
        return ".".join(self.quote(p) for p in table.split("."))

    def upsert(self, table, cols, pk) -> str:
        q = self.quote
        ph = ", ".join([self.placeholder] * len(cols))
        rest = [c for c in cols if c not in pk]
        action = ("DO UPDATE SET " + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in rest)) \
            if rest else "DO NOTHING"
        return (f"INSERT INTO {self.qualified(table)} ({', '.join(map(q, cols))}) VALUES ({ph}) "
                f"ON CONFLICT ({', '.join(map(q, pk))}) {action}")

    def sql_type(self, s: Schema) -> str:
        if s.name == cdata.TIMESTAMP:
            return self.TYPES["timestamp"]
        if s.name == cdata.DATE:
            return "DATE"
        if s.name == cdata.TIME:
            return "TIME"
        if s.name == cdata.DECIMAL:
            return "DECIMAL"        # Kafka's dialects': the value's own precision and scale
        t = self.TYPES.get(s.type)
        if t is None:
            raise ConnectException(f"no {self.name} column type for a {s.type} field")
        return t

    def to_db(self, v):
        return v

    def converts(self, schema: Schema, sample) -> bool:
        """Whether from_db must see a column's values (False: the driver's
        are Connect's already); ``sample``: one of them, maybe None."""
        return True

    def query(self, conn, sql: str, params, oids: tuple | None):
        """A cursor over ``sql``'s rows; ``oids``: the column types of its
        last run (None: not run yet)."""
        return conn.execute(sql, params)


class SQLite(Dialect):
    name = "sqlite"
    TYPES = {"int8": "SMALLINT", "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT",
             "float32": "REAL", "float64": "DOUBLE", "boolean": "BOOLEAN", "string": "TEXT",
             "bytes": "BLOB", "timestamp": "TIMESTAMP"}

    def __init__(self, path):
        self.path = path

    def connect(self):
        import sqlite3
        conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        return conn

    def columns(self, conn, table) -> dict | None:
        """{column: declared type} of ``table``, None if there is no such table."""
        rows = conn.execute(f"PRAGMA table_info({self.quote(table)})").fetchall()
        return {r[1]: (r[2] or "").upper() for r in rows} or None

    def ts_expr(self, col: str) -> str:
        # text timestamps in any of SQLite's forms compare as instants
        return f"julianday({self.quote(col)})"

    def ts_param(self) -> str:
        return "julianday(?)"

    def ts_value(self, t: _dt.datetime):
        return t.astimezone(UTC).replace(tzinfo=None).isoformat(" ")

    def now(self, conn) -> _dt.datetime:
        return _dt.datetime.now(UTC)

    def schema_for(self, decl: str) -> Schema:
        d = decl.upper()
        if "TIMESTAMP" in d or "DATETIME" in d:
            return Schema.OPTIONAL_TIMESTAMP
        if "INT" in d:
            return Schema.OPTIONAL_INT64
        if "BOOL" in d:
            return Schema.OPTIONAL_BOOLEAN
        if any(k in d for k in ("REAL", "FLOA", "DOUB", "NUMERIC", "DECIMAL")):
            return Schema.OPTIONAL_FLOAT64
        if "BLOB" in d:
            return Schema.OPTIONAL_BYTES
        return Schema.OPTIONAL_STRING

    def from_db(self, v, schema: Schema):
        if v is None:
            return None
        if schema.name == cdata.TIMESTAMP:
            if isinstance(v, (int, float)):
                return cdata.millis_to_timestamp(int(v))
            t = _dt.datetime.fromisoformat(str(v))
            return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
        if schema.type == "boolean":
            return bool(v)
        return v

    def to_db(self, v):
        if isinstance(v, _dt.datetime):
            return self.ts_value(v)
        if isinstance(v, (_dt.date, _dt.time)):
            return v.isoformat()
        if isinstance(v, (dict, list)):
            return json.dumps(v)
        if isinstance(v, decimal.Decimal):
            return str(v)           # sqlite3 takes no Decimal; a DECIMAL column reads the text
        return v


_PG_TYPES = {16: Schema.OPTIONAL_BOOLEAN, 17: Schema.OPTIONAL_BYTES, 20: Schema.OPTIONAL_INT64,
             21: Schema.OPTIONAL_INT16, 23: Schema.OPTIONAL_INT32, 25: Schema.OPTIONAL_STRING,
             1043: Schema.OPTIONAL_STRING, 1042: Schema.OPTIONAL_STRING,
             700: Schema.OPTIONAL_FLOAT32, 701: Schema.OPTIONAL_FLOAT64,
             1700: Schema.OPTIONAL_FLOAT64, 1114: Schema.OPTIONAL_TIMESTAMP,
             1184: Schema.OPTIONAL_TIMESTAMP, 1082: Schema.OPTIONAL_DATE,
             1083: Schema.OPTIONAL_TIME}


# the column types whose binary values psycopg loads as their text: booleans, bytea,
# integers, text, varchar, char, double precision, numeric (a Decimal of the same digits
# and scale), timestamp (UTC datetimes here, through the timestamptz loader), timestamptz,
# date, time. Not real (float4): its binary is the float32 itself (0.1 is
# 0.10000000149011612), its text the shortest decimal that reads back as it (0.1).
_BINARY_AS_TEXT = frozenset((16, 17, 20, 21, 23, 25, 1043, 1042, 701, 1700, 1114, 1184, 1082,
                             1083))


_PLAIN_TYPES = {"int16": int, "int32": int, "int64": int, "float32": float, "float64": float,
                "boolean": bool, "string": str}


class PostgreSQL(Dialect):
    name = "postgresql"
    placeholder = "%s"
    TYPES = {"int8": "SMALLINT", "int16": "SMALLINT", "int32": "INTEGER", "int64": "BIGINT",
             "float32": "REAL", "float64": "DOUBLE PRECISION", "boolean": "BOOLEAN",
             "string": "TEXT", "bytes": "BYTEA", "timestamp": "TIMESTAMP"}

    def __init__(self, conninfo: str):
        self.conninfo = conninfo

    def connect(self):
        import psycopg
        from psycopg.types.datetime import TimestamptzBinaryLoader
        conn = psycopg.connect(self.conninfo, autocommit=False)
        conn.execute("SET TIME ZONE 'UTC'")
        conn.commit()
        # binary results only (a loader is registered for one format): a timestamp
        # without a time zone is the UTC wall clock in this session, and on the wire the
        # same microseconds since 2000-01-01 UTC as a timestamptz, which this loader
        # makes UTC datetimes of in C
        conn.adapters.register_loader("timestamp", TimestamptzBinaryLoader)
        return conn

    def query(self, conn, sql: str, params, oids: tuple | None):
        # the first run in text: the column types are not known before it
        binary = oids is not None and _BINARY_AS_TEXT.issuperset(oids)
        return conn.cursor(binary=binary).execute(sql, params)

    def columns(self, conn, table) -> dict | None:
        schema, _, name = table.rpartition(".")
        rows = conn.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = %s AND table_schema = COALESCE(NULLIF(%s, ''), current_schema()) "
            "ORDER BY ordinal_position", (name, schema)).fetchall()
        return {r[0]: r[1].upper() for r in rows} or None

    def ts_expr(self, col: str) -> str:
        return self.quote(col)

    def ts_param(self) -> str:
        return "%s"

    def ts_value(self, t: _dt.datetime):
        return t

    def now(self, conn) -> _dt.datetime:
        return conn.execute("SELECT now()").fetchone()[0]

    def schema_for_oid(self, oid: int) -> Schema:
        return _PG_TYPES.get(oid, Schema.OPTIONAL_STRING)

    def converts(self, schema: Schema, sample) -> bool:
        # psycopg's ints, floats, text and booleans are Connect's as they are (a numeric
        # column's Decimals, a uuid's UUIDs, a null sample: converted)
        if schema.name == cdata.TIMESTAMP:
            # a binary result's: UTC already
            return type(sample) is not _dt.datetime or sample.tzinfo is not UTC
        plain = _PLAIN_TYPES.get(schema.type) if schema.name is None else None
        return plain is None or type(sample) is not plain

    def from_db(self, v, schema: Schema):
        if v is None:
            return None
        if isinstance(v, _dt.datetime):
            return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
        if isinstance(v, decimal.Decimal):
            return float(v)
        if isinstance(v, memoryview):
            return bytes(v)
        if schema.type == "string" and not isinstance(v, str):
            return json.dumps(v) if isinstance(v, (dict, list)) else str(v)
        return v

    def to_db(self, v):
        if isinstance(v, _dt.datetime):
            # the session is UTC: a timestamp column gets the UTC wall clock
            return v.astimezone(UTC).replace(tzinfo=None) if v.tzinfo else v
        if isinstance(v, (dict, list)):
            return json.dumps(v)
        return v


def dialect_for(url: str, user: str | None = None, password: str | None = None) -> Dialect:
    u = url.strip()
    if u.startswith("jdbc:"):
        u = u[5:]
    if u.startswith("sqlite:"):
        path = u[len("sqlite:"):]
        if path.startswith("//"):
            path = path[2:]          # sqlite:///abs/path -> /abs/path
        return SQLite(path or ":memory:")
    if u.startswith(("postgresql:", "postgres:")):
        parsed = urllib.parse.urlsplit(u)
        query = dict(urllib.parse.parse_qsl(parsed.query))
        netloc = parsed.netloc
        user = user or query.pop("user", None)
        password = password or query.pop("password", None)
        if user and "@" not in netloc:
            auth = urllib.parse.quote(user) + (":" + urllib.parse.quote(password)
                                               if password else "")
            netloc = f"{auth}@{netloc}"
        return PostgreSQL(urllib.parse.urlunsplit(("postgresql", netloc, parsed.path,
                                                   urllib.parse.urlencode(query), "")))
    raise ConnectException(f"connection.url {url!r}: use jdbc:sqlite:<path> or "
                           f"jdbc:postgresql://host:port/db (or sqlite:// / postgresql:// URIs)")
