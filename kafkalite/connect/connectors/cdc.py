"""PostgreSQL change data capture: a source connector reading a logical
replication slot with the ``pgoutput`` plugin, with records in Debezium's
envelope (``PostgresCdcSourceConnector``; Kafka name
``io.debezium.connector.postgresql.PostgresConnector``).

How it reads: the task streams the slot over a replication connection
(replication.py: ``START_REPLICATION ... LOGICAL`` with ``proto_version``
1 and ``publication_names``), so PostgreSQL decodes each change once and
pushes it as it commits; pgoutput's binary messages are parsed by
``parse_message``, a row's text values by a loader per column made once per
relation (``_ValueLoader.plan``), and a poll hands each run of one table's
changes over as one SourceRecordBatch (a delete's tombstone among its
``tombstones``), which the worker converts a batch at a time. The batch
holds each change as pgoutput's texts, undecoded (cdc_envelopes.py): the
JsonConverter has the envelopes and keys written from them by one C loop
(kafkalite._ext.cdc_envelope), and the dicts the loaders decode are made
only for anything else (a transform, another converter). The slot is
confirmed (a standby status update) in ``commit()`` only up to the end of
the last transaction whose every change has its source offset stored by
the worker, so WAL not yet committed to Connect stays in the slot, and a
new stream (a restarted task, or a reconnect after the server ended the
stream) starts after the last confirmed transaction: the changes it sends
again are skipped by their position, without being parsed.

Offsets: source partition ``{"server": topic.prefix}``, offset
``{"lsn_commit": <commit LSN of the change's transaction>, "change": <its
index among the transaction's changes>, "lsn": <the change's LSN>,
"txId": <xid>}``. Changes come in (lsn_commit, change) order; on start the
task skips what is at or before the stored offset, so a restart neither
skips nor (beyond Connect's at-least-once window: polled but not yet
committed offsets) repeats.

Records: topic ``<topic.prefix>.<schema>.<table>``; key = the primary key
columns (a struct; the replica identity columns when there is no primary
key, null when neither); value ``{"before", "after", "source", "op",
"ts_ms"}`` with op ``c`` (insert), ``u`` (update), ``d`` (delete), ``t``
(truncate: before and after null, key null). ``before`` of an update is
the old row only with ``REPLICA IDENTITY FULL`` (or, with the default
identity, the old key columns when the key changed; otherwise null);
``before`` of a delete is the whole old row with FULL, else only the key
columns (the other fields null). A delete is followed by a tombstone (key,
null value) when ``tombstones.on.delete`` (default true). ``source``:
version, connector, name, ts_ms (commit time), db, schema, table, txId,
lsn, lsn_commit, change. Unchanged TOASTed values of an update (pgoutput
sends none) are ``unavailable.value.placeholder`` in string and bytes
columns, null in others.

Types: int2/4/8, float4/8, bool, text/varchar/char, bytea as Connect's;
numeric as a string (exact; ``decimal.handling.mode=double`` for float64);
timestamp/timestamptz as Connect Timestamp (ms, UTC), date as Date;
json/jsonb, uuid and every other type as their text form.

Setup: ``connection.url`` as the JDBC connectors' (jdbc:postgresql://...),
or Debezium's keys: ``database.hostname``, ``database.port`` (5432),
``database.dbname``, ``database.user``, ``database.password``, with
``plugin.name`` (``pgoutput``, the default here; Debezium's default
``decoderbufs`` is refused), so a Debezium configuration runs as written;
the connector checks ``wal_level`` is ``logical`` (a clear failure if not),
creates ``publication.name`` (for ``table.include.list``, else FOR ALL
TABLES) and, with ``snapshot.mode=never``, ``slot.name`` if missing: the
stream starts where the slot was created.

Initial snapshot (``snapshot.mode=initial``, Debezium's default): a task
with no stored offset (or one whose snapshot was interrupted) creates the
slot itself over a replication connection with ``SNAPSHOT 'export'``, and
reads every published table in a REPEATABLE READ transaction that imports
that snapshot: exactly the rows committed before the slot's consistent
point, each as an ``op: r`` record (``before`` null, ``source.snapshot``
``true``, ``last`` on the very last), then streams every change after that
point -- so no change is missed or doubled between the two. Snapshot
records carry the offset ``{"lsn_commit": -1, "change": -1, "snapshot":
true}``, the last one ``"snapshot_completed": true``; a task restarted before
that drops the slot (an existing slot of that name is the interrupted
snapshot's, or has no snapshot to export) and snapshots again from the
start, as Debezium does: rows sent before the restart come again.

One task (a slot has one reader). Deleting the connector leaves the slot
and the publication (as Debezium's default): the slot keeps WAL until it
is dropped (``SELECT pg_drop_replication_slot('<slot.name>')``).

Who calls: the worker, through the herder. ``KAFKALITE_CDC_FAULT=advance-on-start``
(tests only) plants the fault the restart test must catch: a resumed task
advances the slot to the current WAL position, past changes Connect never
committed; ``KAFKALITE_CDC_FAULT=snapshot-drop-first`` leaves each table's
first snapshot row out (the snapshot checker must catch it);
``KAFKALITE_CDC_FAULT=envelope-float-as-text`` has the C envelope writer
write float columns as JSON strings (cdc_envelopes.ChangeSource: its
differential test must catch it).
"""
from __future__ import annotations

import datetime as _dt
import logging
import operator
import os
import re
import struct
import threading

from kafkalite._ext.pgoutput import change_run, parse_change
from kafkalite.connect.api import SourceConnector, SourceRecordBatch, SourceTask
from kafkalite.connect.config import (BOOLEAN, INT, LIST, PASSWORD, STRING, ConfigDef,
                                      ConfigException, at_least, one_of)
from kafkalite.connect.connectors.dialects import PostgreSQL, dialect_for
from kafkalite.connect.connectors.cdc_envelopes import (SOURCE_SCHEMA, UNCHANGED, ChangeKeys,
                                                        ChangeSource, ChangeValues)
from kafkalite.connect.connectors.copy_out import CopyOut
from kafkalite.connect.connectors.jdbc import CONN
from kafkalite.connect.connectors.replication import ReplicationStream
from kafkalite.connect.data import Field, Schema
from kafkalite.connect.errors import ConnectException, DataException

log = logging.getLogger("kafkalite.connect")

CONFIG = CONN.merge(
    ConfigDef()
    # Debezium's connection keys, the other way to say connection.url (_connection)
    .define("connection.url", STRING, None, group="Database",
            doc="jdbc:postgresql://host:port/db; or Debezium's database.* keys")
    .define("database.hostname", STRING, None, group="Database")
    .define("database.port", INT, 5432, at_least(1), group="Database")
    .define("database.user", STRING, None, group="Database")
    .define("database.password", PASSWORD, None, group="Database")
    .define("database.dbname", STRING, None, group="Database")
    .define("plugin.name", STRING, "pgoutput", one_of("pgoutput"), group="Replication",
            doc="the logical decoding plugin: pgoutput (PostgreSQL's own) only; "
                "Debezium's default decoderbufs is a server extension not read here")
    .define("topic.prefix", STRING, group="Connector",
            doc="topics are <topic.prefix>.<schema>.<table>")
    .define("slot.name", STRING, "kafkalite", group="Replication")
    .define("publication.name", STRING, "kafkalite_publication", group="Replication")
    .define("table.include.list", LIST, [], group="Replication",
            doc="schema.table names for a new publication (empty: FOR ALL TABLES)")
    .define("tombstones.on.delete", BOOLEAN, True, group="Connector")
    .define("decimal.handling.mode", STRING, "string", one_of("string", "double"),
            group="Connector")
    .define("unavailable.value.placeholder", STRING, "__debezium_unavailable_value",
            group="Connector")
    .define("poll.interval.ms", INT, 500, at_least(1), group="Connector")
    .define("max.batch.size", INT, 2048, at_least(1), group="Connector",
            doc="changes decoded per read of the slot (whole transactions), rows per "
                "snapshot read")
    .define("snapshot.mode", STRING, "initial", one_of("initial", "never"), group="Connector",
            doc="initial: the published tables' rows first (op r), then the changes after "
                "them; never: only changes after the slot was created"))

PG_EPOCH_US = 946_684_800_000_000        # 2000-01-01 in µs since the Unix epoch
UTC = _dt.timezone.utc


def lsn_str(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def lsn_int(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


# ---- pgoutput (protocol version 1) messages -------------------------------------------------

class _Reader:
    def __init__(self, data: bytes):
        self.b, self.i = data, 0

    def take(self, fmt: str):
        v = struct.unpack_from(fmt, self.b, self.i)
        self.i += struct.calcsize(fmt)
        return v[0] if len(v) == 1 else v

    def string(self) -> str:
        end = self.b.index(b"\0", self.i)
        s = self.b[self.i:end].decode()
        self.i = end + 1
        return s


_ROW_CHANGES = (b"I", b"U", b"D")


def parse_message(data: bytes) -> tuple:
    """One pgoutput message as a tuple led by its kind:
    ("B", final_lsn, commit_ts_us, xid), ("C", commit_lsn, end_lsn, commit_ts_us),
    ("R", relid, schema, table, replident, [(name, type_oid, is_key)]),
    ("Y", oid, schema, name), ("I", relid, new), ("U", relid, old_kind, old, new),
    ("D", relid, old_kind, old), ("T", [relids], options), ("O", lsn, name),
    ("M", ...) ignored. A row (new, old): a tuple of None (null) | UNCHANGED
    (unchanged TOAST) | bytes (text form), one per column; old_kind "K" (key columns), "O" (whole
    old row) or None. The changes (I, U, D), one message each, parsed by
    kafkalite._ext.pgoutput. Raises DataException on anything else."""
    data = bytes(data)
    if data[:1] in _ROW_CHANGES:
        try:
            return parse_change(data, UNCHANGED)
        except ValueError as e:
            raise DataException(f"pgoutput: {e}") from None
    r = _Reader(data)
    try:
        kind = r.take("!c").decode()
        if kind == "B":
            return ("B", *r.take("!qqi"))
        if kind == "C":
            r.take("!b")
            return ("C", *r.take("!qqq"))
        if kind == "R":
            relid = r.take("!I")
            schema, table = r.string(), r.string()
            ident = chr(r.take("!b"))
            cols = []
            for _ in range(r.take("!h")):
                flags = r.take("!b")
                name = r.string()
                oid, _typmod = r.take("!Ii")
                cols.append((name, oid, bool(flags & 1)))
            return ("R", relid, schema, table, ident, cols)
        if kind == "Y":
            oid = r.take("!I")
            return ("Y", oid, r.string(), r.string())
        if kind == "T":
            n = r.take("!i")
            options = r.take("!b")
            return ("T", [r.take("!I") for _ in range(n)], options)
        if kind == "O":
            lsn = r.take("!q")
            return ("O", lsn, r.string())
        if kind == "M":
            return ("M",)
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise DataException(f"pgoutput: truncated or malformed message: {e}") from None
    raise DataException(f"pgoutput: unknown message type {data[:1]!r}")


# ---- values ---------------------------------------------------------------------------------

_SCHEMAS = {16: Schema.OPTIONAL_BOOLEAN, 17: Schema.OPTIONAL_BYTES, 20: Schema.OPTIONAL_INT64,
            21: Schema.OPTIONAL_INT16, 23: Schema.OPTIONAL_INT32, 700: Schema.OPTIONAL_FLOAT32,
            701: Schema.OPTIONAL_FLOAT64, 1114: Schema.OPTIONAL_TIMESTAMP,
            1184: Schema.OPTIONAL_TIMESTAMP, 1082: Schema.OPTIONAL_DATE}
_LOADED = frozenset(_SCHEMAS) | {1700}      # parsed by psycopg's text loaders
# the type oids the C envelope writer reads itself (kafkalite._ext.cdc_envelope's
# KIND_*: 1 integers, 2 floats, 3 booleans, 5 timestamp, 6 timestamptz, 7 date); the
# rest of _LOADED (numeric, bytea) by the Python path (0), every other type as text (4)
_KINDS = {20: 1, 21: 1, 23: 1, 700: 2, 701: 2, 16: 3, 1114: 5, 1184: 6, 1082: 7}


def column_kind(oid: int) -> int:
    """A column's kind for the C envelope writer (see _KINDS)."""
    return _KINDS.get(oid, 0 if oid in _LOADED else 4)
_STARTS_WITH_T = operator.methodcaller("startswith", b"t")


class _Relation:
    """A table as its Relation message describes it, with its record schemas."""

    def __init__(self, msg, pk: list[str], prefix: str, decimal_mode: str):
        _, self.relid, self.schema, self.table, self.ident, cols = msg
        self.columns = [(n, oid) for n, oid, _ in cols]
        self.kinds = [column_kind(oid) for _, oid in self.columns]     # the C writer's
        self.names = self.loaders = None        # _ValueLoader.plan's, made at the first row
        self.topic = f"{prefix}.{self.schema}.{self.table}"
        key_cols = pk or ([] if self.ident == "f" else [n for n, _, k in cols if k])
        numeric = Schema.OPTIONAL_FLOAT64 if decimal_mode == "double" else Schema.OPTIONAL_STRING
        self.field_schemas = [numeric if oid == 1700 else _SCHEMAS.get(oid, Schema.OPTIONAL_STRING)
                              for _, oid in self.columns]
        base = f"{prefix}.{self.schema}.{self.table}"
        self.value_schema = Schema("struct", True, f"{base}.Value", fields=tuple(
            Field(n, s) for (n, _), s in zip(self.columns, self.field_schemas)))
        by = dict(zip((n for n, _ in self.columns), self.field_schemas))
        self.key_names = key_cols
        self.key_schema = Schema("struct", False, f"{base}.Key", fields=tuple(
            Field(n, Schema(by[n].type, False, by[n].name, by[n].version)) for n in key_cols)) \
            if key_cols else None
        self.envelope = Schema("struct", True, f"{base}.Envelope", fields=(
            Field("before", self.value_schema), Field("after", self.value_schema),
            Field("source", SOURCE_SCHEMA), Field("op", Schema.STRING),
            Field("ts_ms", Schema.OPTIONAL_INT64)))


class _ValueLoader:
    """pgoutput's text column values as Connect values, by type oid."""

    def __init__(self, decimal_mode: str, placeholder: str):
        from psycopg import pq
        from psycopg.adapt import Transformer
        self._tx, self._text = Transformer(), pq.Format.TEXT
        self._loaders: dict = {}
        self.decimal_mode, self.placeholder = decimal_mode, placeholder

    def load(self, oid: int, schema: Schema, raw):
        if raw is None:
            return None
        if raw is UNCHANGED:
            if schema.type == "string":
                return self.placeholder
            return self.placeholder.encode() if schema.type == "bytes" else None
        if oid not in _LOADED:
            return raw.decode()
        loader = self._loaders.get(oid)
        if loader is None:
            loader = self._loaders[oid] = self._tx.get_loader(oid, self._text)
        v = loader.load(raw)
        if oid == 1700:
            return float(v) if self.decimal_mode == "double" else str(v)
        if isinstance(v, _dt.datetime):
            return v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)
        return v

    def plan(self, rel: _Relation) -> tuple[list, list]:
        """(column names, a loader of each column's non-null text): Python's
        own int() and float() where they read PostgreSQL's text as psycopg's
        loaders do (integers, floats with NaN and Infinity), a comparison for
        booleans, UTF-8 for text, psycopg's loader for the rest of _LOADED."""
        loaders = []
        for (_, oid), schema in zip(rel.columns, rel.field_schemas):
            if oid in (20, 21, 23):
                loaders.append(int)
            elif oid in (700, 701):
                loaders.append(float)
            elif oid == 16:
                loaders.append(_STARTS_WITH_T)          # psycopg's: the first byte
            elif oid not in _LOADED:
                loaders.append(bytes.decode)
            elif oid == 1114:
                load = self._tx.get_loader(oid, self._text).load
                loaders.append(lambda raw, load=load: load(raw).replace(tzinfo=UTC))
            elif oid == 1184:
                load = self._tx.get_loader(oid, self._text).load
                loaders.append(lambda raw, load=load: load(raw).astimezone(UTC))
            else:
                loaders.append(lambda raw, oid=oid, schema=schema: self.load(oid, schema, raw))
        return [n for n, _ in rel.columns], loaders

    def row(self, rel: _Relation, values: list | None, only: list[str] | None = None):
        if values is None:
            return None
        if rel.loaders is None:
            rel.names, rel.loaders = self.plan(rel)
        if only is None and UNCHANGED not in values:
            # the common row: each column's loader, decided once per relation
            return {n: None if raw is None else load(raw)
                    for n, load, raw in zip(rel.names, rel.loaders, values)}
        out = {}
        for (name, oid), schema, raw in zip(rel.columns, rel.field_schemas, values):
            out[name] = None if only is not None and name not in only else \
                self.load(oid, schema, raw)
        return out


# ---- connector ------------------------------------------------------------------------------

NO_CONNECTION = ("connection.url or Debezium's database.hostname and database.dbname must be "
                 "set")


def _connection(c) -> tuple[str, str | None, str | None]:
    """(JDBC URL, user, password) of the configured database: ``connection.url``
    (with ``connection.user``/``connection.password``), or Debezium's
    ``database.hostname``, ``database.port``, ``database.dbname``,
    ``database.user``, ``database.password``; ConfigException when neither."""
    user = c.get("connection.user") or c.get("database.user")
    password = c.get("connection.password") or c.get("database.password")
    if c.get("connection.url"):
        return c["connection.url"], user, password
    host, db = c.get("database.hostname"), c.get("database.dbname")
    if not host or not db:
        raise ConfigException("connection.url", NO_CONNECTION)
    import urllib.parse
    host = f"[{host}]" if ":" in host else host       # an IPv6 address
    return (f"jdbc:postgresql://{host}:{c['database.port']}/{urllib.parse.quote(db)}",
            user, password)


def _connect(c, autocommit=True, **kwargs):
    """A connection to the configured database; with ``replication="database"``
    a replication connection, which takes only the simple query protocol
    (``pgconn.exec_``), so nothing is run on it here."""
    d = dialect_for(*_connection(c))
    if not isinstance(d, PostgreSQL):
        raise ConnectException("connection.url: change data capture needs PostgreSQL "
                               "(jdbc:postgresql://host:port/db)")
    import psycopg
    conn = psycopg.connect(d.conninfo, autocommit=autocommit, **kwargs)
    if not kwargs.get("replication"):
        conn.execute("SET TIME ZONE 'UTC'")
    return conn


def _quote_table(name: str) -> str:
    from psycopg import sql
    parts = name.split(".")
    return ".".join(sql.Identifier(p).as_string(None) for p in parts)


def ensure_slot(c, create_slot: bool = True) -> None:
    """Checks wal_level, creates the publication and (``create_slot``) the
    slot if missing; an existing slot must use pgoutput."""
    conn = _connect(c)
    try:
        level = conn.execute("SHOW wal_level").fetchone()[0]
        if level != "logical":
            raise ConnectException(
                f"PostgreSQL's wal_level is {level!r}: change data capture needs "
                f"wal_level=logical (set it in postgresql.conf and restart the server)")
        pub, slot = c["publication.name"], c["slot.name"]
        if not conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s",
                            (pub,)).fetchone():
            from psycopg import sql
            tables = c["table.include.list"]
            what = ("FOR TABLE " + ", ".join(_quote_table(t) for t in tables)) if tables \
                else "FOR ALL TABLES"
            conn.execute(sql.SQL("CREATE PUBLICATION {} ").format(sql.Identifier(pub))
                         + sql.SQL(what))
        row = conn.execute("SELECT plugin FROM pg_replication_slots WHERE slot_name = %s",
                           (slot,)).fetchone()
        if row is None and create_slot:
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        elif row is not None and row[0] != "pgoutput":
            raise ConnectException(f"replication slot {slot} uses plugin {row[0]}, not pgoutput")
    finally:
        conn.close()


class PostgresCdcSourceConnector(SourceConnector):
    def config_def(self):
        return CONFIG

    def validate(self, props: dict) -> list[dict]:
        values = super().validate(props)
        try:
            c = CONFIG.parse(props)
        except ConfigException:
            return values           # a bad value: its own key's error says so
        try:
            _connection(c)
        except ConfigException as e:
            next(v for v in values if v["name"] == "connection.url")["errors"].append(str(e))
        return values

    def start(self, props):
        self.props = dict(props)
        c = CONFIG.parse(props)
        # an initial snapshot needs the slot made with it: its task makes both
        ensure_slot(c, create_slot=c["snapshot.mode"] == "never")

    def task_class(self):
        return PostgresCdcSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]       # one reader per slot


_SLOT_NAME = re.compile(r"[a-z0-9_]{1,63}")


class _Snapshot:
    """The initial snapshot of a task: the slot created with an exported
    snapshot, and the published tables read by a ``COPY (SELECT * ...) TO
    STDOUT`` per table (copy_out.py) in one REPEATABLE READ transaction that
    imports it. Rows come as each column's output-function text, the same
    text form pgoutput sends, so both go through one _ValueLoader and one
    envelope writer."""

    def __init__(self, task: "PostgresCdcSourceTask"):
        import psycopg
        from psycopg import sql
        self.task, c = task, task.c
        slot = c["slot.name"]
        if not _SLOT_NAME.fullmatch(slot):
            raise ConnectException(f"slot.name {slot!r}: PostgreSQL allows lower-case letters, "
                                   f"digits and underscores only")
        self._drop_slot(slot)
        repl = _connect(c, replication="database")
        try:
            res = repl.pgconn.exec_(
                f"CREATE_REPLICATION_SLOT {slot} LOGICAL pgoutput (SNAPSHOT 'export')".encode())
            if res.status != psycopg.pq.ExecStatus.TUPLES_OK:
                raise ConnectException(f"creating slot {slot}: "
                                       f"{res.error_message.decode(errors='replace').strip()}")
            self.lsn = lsn_int(res.get_value(0, 1).decode())
            name = res.get_value(0, 2).decode()
            # the exported snapshot lives until the replication connection's next
            # command: import it first
            self.conn = _connect(c)
            self.conn.autocommit = False
            self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            self.conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(name)))
        finally:
            repl.close()
        self.tables = self.conn.execute(
            "SELECT c.oid, n.nspname, c.relname, c.relreplident FROM pg_publication_tables t "
            "JOIN pg_namespace n ON n.nspname = t.schemaname JOIN pg_class c ON "
            "c.relnamespace = n.oid AND c.relname = t.tablename WHERE t.pubname = %s "
            "ORDER BY 2, 3", (c["publication.name"],)).fetchall()
        self.ts_ms = int(_dt.datetime.now(UTC).timestamp() * 1000)
        self.rel: _Relation | None = None
        self.held: tuple | None = None     # the newest record: the last one, maybe
        self.drop_first = task.fault == "snapshot-drop-first"
        log.info("cdc %s: snapshot of %d table(s) at %s", c["topic.prefix"], len(self.tables),
                 lsn_str(self.lsn))

    def _drop_slot(self, slot: str) -> None:
        """An existing slot is an interrupted snapshot's, or has none to export."""
        import psycopg
        conn = _connect(self.task.c)
        try:
            for _ in range(300):    # a killed worker's session may hold it a while
                try:
                    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                                 "pg_replication_slots WHERE slot_name = %s", (slot,))
                    return
                except psycopg.errors.ObjectInUse:
                    self.task._stop.wait(0.1)
            raise ConnectException(f"slot {slot} stays in use by another session")
        finally:
            conn.close()

    def _open_next(self) -> bool:
        from psycopg import sql
        self.rel = self.rows = None
        if not self.tables:
            return False
        relid, schema, table, ident = self.tables.pop(0)
        cols = self.conn.execute(
            "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
            "AND NOT attisdropped ORDER BY attnum", (relid,)).fetchall()
        pk = self.task._primary_key(relid, self.conn)
        self.rel = _Relation(("R", relid, schema, table, ident,
                              [(n, oid, n in pk) for n, oid in cols]),
                             pk, self.task.c["topic.prefix"], self.task.c["decimal.handling.mode"])
        self.rows = CopyOut(self.conn, sql.SQL("COPY (SELECT * FROM {}.{}) TO STDOUT").format(
            sql.Identifier(schema), sql.Identifier(table)).as_bytes(self.conn), len(cols))
        self.first = True
        return True

    def read(self, limit: int, batches: "_Batches") -> bool:
        """Up to ``limit`` more rows as records into ``batches``; whether the
        snapshot is done (then the last record is marked so, and the
        transaction ended)."""
        # runs of one relation's changes: [relation, [change]]
        runs = [[self.held[0], [self.held[1]]]] if self.held is not None else []
        self.held = None
        count = len(runs)
        offset = {"lsn_commit": -1, "change": -1, "snapshot": True}
        done = False
        while count <= limit:
            if self.rel is None and not self._open_next():
                if runs:
                    last = runs[-1][1]
                    last[-1] = last[-1][:5] + ("last",) + last[-1][6:]
                self.conn.commit()
                self.conn.close()
                done = True
                break
            rows = self.rows.read(limit + 1 - count)
            if rows is None:
                self._open_next()
                continue
            if self.first and self.drop_first and rows:      # the planted fault
                rows = rows[1:]
            self.first = False
            rel, lsn, ts_ms = self.rel, self.lsn, self.ts_ms
            changes = [("r", None, False, row, ts_ms, "true", None, lsn, None, None)
                       for row in rows]
            if runs and runs[-1][0] is rel:
                runs[-1][1].extend(changes)
            elif changes:
                runs.append([rel, changes])
            count += len(changes)
        if not done:
            rel, changes = runs[-1]
            self.held = (rel, changes.pop())
            if not changes:
                runs.pop()
        for rel, changes in runs:
            # a run's records added at once (_Batches.extend), not one add per row
            batches.extend(rel, changes, self.ts_ms, offset, rel.key_schema is not None)
        if done and runs:
            batches.out[-1].source_offset = {**offset, "snapshot_completed": True}
        return done

    def close(self) -> None:
        self.conn.close()


_CHANGES = frozenset(b"IUDT")     # pgoutput's change messages, by their first byte
_RUN_KINDS = frozenset(b"IU")     # ...those a run of one relation takes (pgoutput.change_run)


class _Txn:
    """A decoded transaction: its end LSN and the key of its last change."""
    __slots__ = ("commit_lsn", "end_lsn", "last")

    def __init__(self, commit_lsn, end_lsn, last):
        self.commit_lsn, self.end_lsn, self.last = commit_lsn, end_lsn, last


class _Batches:
    """A poll's records as SourceRecordBatches: one per run of changes of one
    relation (its envelope schema) with a key or without (a truncate has
    none), in poll order, so each table's changes keep their order; a
    delete's tombstone rides in its run as one of the batch's
    ``tombstones``. Keys and values are cdc_envelopes' ChangeKeys and
    ChangeValues of the changes. The batch's offset is its last record's."""

    def __init__(self, partition: dict, source: ChangeSource):
        self.partition, self.source, self.out, self.count = partition, source, [], 0
        self._run, self._at = None, None

    def add(self, rel: "_Relation", change: tuple, ts_ms: int, offset: dict, keyed: bool,
            tombstone: bool = False) -> None:
        at = (rel.envelope, keyed)
        b = self._run
        if b is None or at[0] is not self._at[0] or at[1] != self._at[1]:
            b = self._run = SourceRecordBatch(
                rel.topic, rel.envelope, ChangeValues(self.source, rel, []),
                source_partition=self.partition, key_schema=rel.key_schema if keyed else None,
                keys=ChangeKeys(self.source, rel, []) if keyed else None, timestamps=[])
            self.out.append(b)
            self._at = at
        if tombstone:
            if b.tombstones is None:
                b.tombstones = []
            b.tombstones.append(len(b.values))
        b.values.changes.append(None if tombstone else change)
        if keyed:
            b.keys.changes.append(change)
        b.timestamps.append(ts_ms)
        b.source_offset = offset
        self.count += 1

    def extend(self, rel: "_Relation", changes: list, ts_ms: int, offset: dict,
               keyed: bool) -> None:
        """``add`` of each of ``changes`` (none a tombstone), all at ``ts_ms``,
        ``offset`` their last one's: the lists grown once, not per change."""
        self.add(rel, changes[0], ts_ms, offset, keyed)
        rest = changes[1:]
        if rest:
            b = self._run
            b.values.changes.extend(rest)
            if keyed:
                b.keys.changes.extend(rest)
            b.timestamps.extend([ts_ms] * len(rest))
            self.count += len(rest)


class PostgresCdcSourceTask(SourceTask):
    def start(self, props):
        self.c = CONFIG.parse(props)
        self.partition = {"server": self.c["topic.prefix"]}
        stored = self.context.offset_storage_reader().offset(self.partition)
        # (lsn_commit, change) of the last change handed to the worker
        self.position = (stored["lsn_commit"], stored["change"]) if stored else (-1, -1)
        self.txns: list[_Txn] = []          # decoded, not yet known committed, commit order
        self.tracked = -1                   # commit LSN of the last transaction put in txns
        self.stream: ReplicationStream | None = None
        self.confirmed = 0                  # the end LSN last confirmed to the slot
        self.txn: dict | None = None        # the transaction being read (Begin seen)
        self.handed = False                 # ...and it was wholly handed over before
        self.values = _ValueLoader(self.c["decimal.handling.mode"],
                                   self.c["unavailable.value.placeholder"])
        self.relations: dict[int, _Relation] = {}
        self.types: dict[int, str] = {}
        self._pk: dict[int, list] = {}
        self._stop = threading.Event()
        self.conn = _connect(self.c)
        self.db = self.conn.info.dbname
        self.fault = os.environ.get("KAFKALITE_CDC_FAULT", "")
        self.changes = ChangeSource(self.c["topic.prefix"], self.db, self.values, self.fault)
        self.snapshot: _Snapshot | None = None
        if self.c["snapshot.mode"] == "initial" and (
                stored is None or (stored.get("snapshot") and not stored.get("snapshot_completed"))):
            self.position = (-1, -1)
            self.snapshot = _Snapshot(self)
        elif stored is not None and self.fault == "advance-on-start":
            self._fault_advance()

    def stop(self):
        # called by the task's own thread once its loop ended (never during a poll)
        self._stop.set()
        for reader in (getattr(self, "snapshot", None), getattr(self, "stream", None)):
            if reader is not None:      # None before start() made it
                # the snapshot's open REPEATABLE READ transaction would hold back
                # PostgreSQL's vacuum until the connection is collected
                reader.close()

    # ---- reading the slot ----------------------------------------------------------------

    def poll(self):
        batches = _Batches(self.partition, self.changes)
        if self.snapshot is not None:
            # the snapshot's rows first; the slot holds every change after them
            if self.snapshot.read(self.c["max.batch.size"], batches):
                self.snapshot = None
            return batches.out or None
        if self.stream is None and not self._open_stream():
            self._stop.wait(self.c["poll.interval.ms"] / 1000)
            return None
        import psycopg
        limit = self.c["max.batch.size"]
        wait = self.c["poll.interval.ms"] / 1000
        try:
            while batches.count < limit:
                # waits for the first message only: what has come is handed over at once
                msgs = self.stream.read(limit - batches.count, wait if not batches.count else 0)
                if not msgs:
                    break
                self._decode(msgs, batches)
        except (ConnectException, psycopg.OperationalError) as e:
            # the server ended the stream (restarted, or timed out a paused task): a new
            # one starts after the last confirmed transaction; what was decoded of this
            # one is handed over, and skipped by its position when it comes again
            log.warning("cdc %s: replication stream of slot %s lost: %s", self.c["topic.prefix"],
                        self.c["slot.name"], e)
            self.stream.close()
            self.stream = None
        return batches.out or None

    def _open_stream(self) -> bool:
        import psycopg
        slot = self.c["slot.name"]
        try:
            row = self.conn.execute("SELECT confirmed_flush_lsn::text FROM pg_replication_slots "
                                    "WHERE slot_name = %s", (slot,)).fetchone()
        except psycopg.OperationalError:
            self.conn.close()
            self.conn = _connect(self.c)
            return False
        if row is None:
            raise ConnectException(f"replication slot {slot} does not exist")
        try:
            self.stream = ReplicationStream(_connect(self.c, replication="database"), slot,
                                            self.c["publication.name"], lsn_int(row[0]))
        except (ConnectException, psycopg.OperationalError) as e:
            # the slot is still held by a previous owner's session (a killed worker's
            # backend ends when it sees the socket closed)
            log.info("cdc %s: %s", self.c["topic.prefix"], e)
            return False
        self.txn, self.handed = None, False
        self.stream.confirm(self.confirmed)
        return True

    def _decode(self, msgs, batches: _Batches) -> None:
        at, n = 0, len(msgs)
        while at < n:
            lsn, data = msgs[at]
            if self.handed and data[0] in _CHANGES:
                at += 1
                continue        # streamed again after a reconnect: not parsed twice
            # a run only where none of its changes can have been handed over: its
            # first (and so each) is past the position
            if data[0] in _RUN_KINDS and self.txn is not None and \
                    (self.txn["final_lsn"], self.txn["n"]) > self.position:
                got = self._run(msgs, at, batches)
                if got > at:
                    at = got
                    continue
            at += 1
            msg = parse_message(data)
            kind = msg[0]
            txn = self.txn
            if kind == "B":
                self.txn = {"final_lsn": msg[1], "ts_ms": (msg[2] + PG_EPOCH_US) // 1000,
                            "xid": msg[3], "n": 0, "last": None}
                self.handed = msg[1] < self.position[0] and msg[1] <= self.tracked
            elif kind == "C":
                if txn is not None and msg[1] > self.tracked:
                    self.txns.append(_Txn(msg[1], msg[2], txn["last"]))
                    self.tracked = msg[1]
                self.txn, self.handed = None, False
            elif kind == "R":
                self.relations[msg[1]] = _Relation(msg, self._primary_key(msg[1]),
                                                   self.c["topic.prefix"],
                                                   self.c["decimal.handling.mode"])
            elif kind == "Y":
                self.types[msg[1]] = f"{msg[2]}.{msg[3]}"
            elif kind in "IUDT":
                if txn is None:
                    raise DataException(f"pgoutput: change outside a transaction at "
                                        f"{lsn_str(lsn)}")
                i = txn["n"]
                txn["n"] += 1
                txn["last"] = (txn["final_lsn"], i)
                if (txn["final_lsn"], i) <= self.position:
                    continue            # handed to the worker already
                self.position = (txn["final_lsn"], i)
                self._records(msg, txn, i, lsn, batches)

    def _run(self, msgs, at: int, batches: _Batches) -> int:
        """The Inserts and Updates of one relation from ``msgs[at]`` on, in a
        transaction none of whose changes were handed over yet, made into
        change tuples by one C loop (pgoutput.change_run) and added to
        ``batches`` as one run: what _records makes of each, without a
        Python call per change. The index after them (``at``: none taken)."""
        txn = self.txn
        data = msgs[at][1]
        rel = self.relations.get(int.from_bytes(data[1:5], "big")) if len(data) >= 5 else None
        if rel is None:
            return at       # _records raises its error
        changes: list = []
        try:
            end = change_run(msgs, at, rel.relid, UNCHANGED, txn["ts_ms"], txn["xid"],
                             txn["final_lsn"], txn["n"], changes)
        except ValueError as e:
            raise DataException(f"pgoutput: {e}") from None
        if not changes:
            return at
        last = changes[-1]
        txn["n"] += len(changes)
        txn["last"] = self.position = (txn["final_lsn"], last[9])
        batches.extend(rel, changes, txn["ts_ms"],
                       {"lsn_commit": txn["final_lsn"], "change": last[9], "lsn": last[7],
                        "txId": txn["xid"]}, rel.key_schema is not None)
        return end

    def _primary_key(self, relid: int, conn=None) -> list[str]:
        pk = self._pk.get(relid)
        if pk is None:
            pk = self._pk[relid] = [r[0] for r in (conn or self.conn).execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = "
                "i.indrelid AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s AND "
                "i.indisprimary ORDER BY array_position(i.indkey, a.attnum)",
                (relid,)).fetchall()]
        return pk

    def _records(self, msg, txn, i, lsn, batches: _Batches) -> None:
        """A change message's records (cdc_envelopes' changes): one per
        relation (a truncate's may be several), a delete's tombstone after it."""
        kind = msg[0]
        offset = {"lsn_commit": txn["final_lsn"], "change": i, "lsn": lsn, "txId": txn["xid"]}
        rels = [msg[1]] if kind != "T" else msg[1]
        ts_ms = txn["ts_ms"]
        for relid in rels:
            rel = self.relations.get(relid)
            if rel is None:
                raise DataException(f"pgoutput: change to relation {relid} before its Relation "
                                    f"message")
            before, key_only, after = None, False, None
            if kind == "I":
                op, after = "c", msg[2]
            elif kind == "U":
                # the old row with REPLICA IDENTITY FULL ("O"), its key columns when the
                # key changed ("K"), else none
                op, after = "u", msg[4]
                before, key_only = msg[3], msg[2] == "K"
            elif kind == "D":
                op, before, key_only = "d", msg[3], msg[2] != "O"
            else:
                op = "t"
            change = (op, before, key_only, after, ts_ms, "false", txn["xid"], lsn,
                      txn["final_lsn"], i)
            keyed = rel.key_schema is not None and op != "t"
            batches.add(rel, change, ts_ms, offset, keyed)
            if op == "d" and self.c["tombstones.on.delete"] and keyed:
                batches.add(rel, change, ts_ms, offset, keyed, tombstone=True)

    # ---- releasing the slot's WAL ----------------------------------------------------------

    def commit(self):
        """The worker stored the offsets of everything polled: release the WAL of
        the transactions that are now wholly committed to Connect."""
        stored = self.context.offset_storage_reader().offset(self.partition)
        done = (stored["lsn_commit"], stored["change"]) if stored else (-1, -1)
        while self.txns and (self.txns[0].last is None or self.txns[0].last <= done):
            self.confirmed = max(self.confirmed, self.txns.pop(0).end_lsn)
        if self.stream is not None:
            # a stream opened later confirms it first thing (_open_stream)
            try:
                self.stream.confirm(self.confirmed)
            except Exception as e:  # noqa: BLE001 -- confirmed again by the next stream
                log.warning("cdc %s: confirming %s to slot %s failed: %s",
                            self.c["topic.prefix"], lsn_str(self.confirmed),
                            self.c["slot.name"], e)

    def _fault_advance(self) -> None:
        import psycopg
        upto = lsn_str(lsn_int(self.conn.execute(
            "SELECT pg_current_wal_lsn()::text").fetchone()[0]))
        for _ in range(300):        # the killed worker's session may hold the slot a while
            try:
                self.conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)",
                                  (self.c["slot.name"], upto))
                return
            except psycopg.errors.ObjectInUse:
                self._stop.wait(0.1)
