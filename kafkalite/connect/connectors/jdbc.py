"""JDBC-style source and sink connectors for SQLite and PostgreSQL, with the
configuration keys of Confluent's JDBC connectors.

Source (JdbcSourceConnector): for each table of ``table.whitelist`` (alias
``table.include.list``; tables are shared out among ``tasks.max`` tasks),
or for one ``query``, every ``poll.interval.ms``:

- ``bulk``: every row, every time;
- ``incrementing``: rows with ``incrementing.column.name`` > the stored
  offset, in its order (new rows only: updates are not seen);
- ``timestamp``: rows with ``timestamp.column.name`` > the stored
  timestamp and < now - ``timestamp.delay.interval.ms`` (updates seen; rows
  sharing the last timestamp across a poll boundary may be seen once);
- ``timestamp+incrementing``: ``ts < end AND ((ts = last_ts AND inc >
  last_inc) OR ts > last_ts)`` ordered by (ts, inc): every insert and update,
  exactly once each, across restarts.

Up to ``batch.max.rows`` rows per poll, as one SourceRecordBatch (api.py:
no record object per row on the bulk path); a full batch polls again at
once.
Each row is a struct value (fields as the columns) written to
``topic.prefix`` + table (query mode: ``topic.prefix``), with no key (use
the ValueToKey/ExtractField transforms, as with Confluent's). Source
partition ``{"protocol": "1", "table": <table>}`` (query mode:
``{"query": "query"}``), offset ``{"incrementing": n}`` and/or
``{"timestamp": ms, "timestamp_nanos": ns}``.

Sink (JdbcSinkConnector): records of ``topics`` go to ``table.name.format``
(``${topic}``), ``insert.mode`` insert, upsert (on the primary key) or
update; ``pk.mode`` none, kafka (``__connect_topic``, ``__connect_partition``,
``__connect_offset``), record_key or record_value with ``pk.fields``;
``auto.create`` makes the table (primary key as pk.mode says), ``auto.evolve``
adds columns a record has and the table lacks (nullable); tombstones delete
the row of their key with ``delete.enabled`` (needs pk.mode=record_key).
A ``put`` is one transaction; on PostgreSQL its inserts go through ``COPY
FROM`` and its upserts through COPY into a temporary staging table and one
``INSERT ... SELECT ... ON CONFLICT`` (the last write of a key in a run
wins), the rest (updates, deletes, SQLite) in ``batch.size`` statement
batches; order between writes and deletes of one table is kept. A batch
the converter gave as Arrow columns is inserted by one ``COPY ... (FORMAT
csv)`` of them (upserted: COPYed into the staging table, the last row of
each key only, then one ``INSERT ... ON CONFLICT`` from it) whose end
(and upsert) and commit run on a thread of the task's own
after ``put_batch`` returns, while the worker fetches the next records:
the next put, ``flush`` (so before the worker commits offsets) or
``stop`` waits for it, and a failure of it fails that call and every one
after (nothing of that put is kept, and no offset after it committed).
Values may be schemaful structs or schemaless dicts (column types then
come from the values).
"""
from __future__ import annotations

import datetime as _dt
import logging
import threading
import time

from kafkalite.connect import data as cdata
from kafkalite.connect.api import (SinkConnector, SinkTask, SourceConnector, SourceRecordBatch,
                                   SourceTask)
from kafkalite.connect.config import (BOOLEAN, INT, LIST, LONG, PASSWORD, STRING, ConfigDef,
                                      ConfigException, at_least, one_of)
from kafkalite.connect.connectors.dialects import PostgreSQL, SQLite, dialect_for
from kafkalite.connect.converters import ColumnarValues, StructColumns
from kafkalite.connect.data import Field, Schema
from kafkalite.connect.errors import ConnectException, DataException

CONN = (ConfigDef()
        .define("connection.url", STRING, doc="jdbc:sqlite:<path> or jdbc:postgresql://...",
                group="Database")
        .define("connection.user", STRING, None, group="Database")
        .define("connection.password", PASSWORD, None, group="Database"))

SOURCE_CONFIG = CONN.merge(
    ConfigDef()
    .define("mode", STRING, validator=one_of("bulk", "incrementing", "timestamp",
                                             "timestamp+incrementing"), group="Mode")
    .define("incrementing.column.name", STRING, "", group="Mode")
    .define("timestamp.column.name", LIST, [], group="Mode")
    .define("timestamp.delay.interval.ms", LONG, 0, at_least(0), group="Mode")
    .define("timestamp.initial", LONG, None, group="Mode",
            doc="ms since the epoch to start from; -1: now (default: from the start)")
    .define("table.whitelist", LIST, [], group="Database")
    .define("table.include.list", LIST, [], group="Database")
    .define("query", STRING, "", group="Database")
    .define("topic.prefix", STRING, group="Connector")
    .define("poll.interval.ms", INT, 5000, at_least(1), group="Connector")
    .define("batch.max.rows", INT, 100, at_least(1), group="Connector"))

SINK_CONFIG = CONN.merge(
    ConfigDef()
    .define("insert.mode", STRING, "insert", one_of("insert", "upsert", "update"),
            group="Writes")
    .define("batch.size", INT, 3000, at_least(1), group="Writes")
    .define("delete.enabled", BOOLEAN, False, group="Writes")
    .define("table.name.format", STRING, "${topic}", group="Data Mapping")
    .define("pk.mode", STRING, "none", one_of("none", "kafka", "record_key", "record_value"),
            group="Data Mapping")
    .define("pk.fields", LIST, [], group="Data Mapping")
    .define("fields.whitelist", LIST, [], group="Data Mapping")
    .define("auto.create", BOOLEAN, False, group="DDL Support")
    .define("auto.evolve", BOOLEAN, False, group="DDL Support"))


def _dialect(c):
    return dialect_for(c["connection.url"], c.get("connection.user"),
                       c.get("connection.password"))


# ---- source ---------------------------------------------------------------------------------

class JdbcSourceConnector(SourceConnector):
    def config_def(self):
        return SOURCE_CONFIG

    def validate(self, props):
        values = SOURCE_CONFIG.validate(props)
        by = {v["name"]: v for v in values}
        mode = props.get("mode", "")
        tables = props.get("table.whitelist") or props.get("table.include.list")
        if not tables and not props.get("query"):
            by["table.whitelist"]["errors"].append(
                "Invalid value for configuration table.whitelist: one of table.whitelist, "
                "table.include.list or query is required")
        if "incrementing" in mode and not props.get("incrementing.column.name"):
            by["incrementing.column.name"]["errors"].append(
                f"Invalid value for configuration incrementing.column.name: mode {mode} needs "
                f"the incrementing column")
        if "timestamp" in mode and not props.get("timestamp.column.name"):
            by["timestamp.column.name"]["errors"].append(
                f"Invalid value for configuration timestamp.column.name: mode {mode} needs the "
                f"timestamp column")
        return values

    def start(self, props):
        self.props = dict(props)
        c = SOURCE_CONFIG.parse(props)
        if c["query"]:
            self.tables = []
        else:
            self.tables = c["table.whitelist"] or c["table.include.list"]
            # fail at start (FAILED with the reason) rather than in every task
            d = _dialect(c)
            conn = d.connect()
            try:
                missing = [t for t in self.tables if d.columns(conn, t) is None]
            finally:
                conn.close()
            if missing:
                raise ConnectException(f"tables not found: {', '.join(missing)}")

    def task_class(self):
        return JdbcSourceTask

    def task_configs(self, max_tasks):
        if not self.tables:
            return [dict(self.props)]
        n = min(max_tasks, len(self.tables))
        return [{**self.props, "tables": ",".join(self.tables[i::n])} for i in range(n)]


def source_partition(table: str | None) -> dict:
    return {"protocol": "1", "table": table} if table else {"query": "query"}


class _TableQuerier:
    """One table (or the query): its statement, schema and offset."""

    def __init__(self, task, table: str | None, offset: dict | None):
        self.task, self.table = task, table
        c = task.c
        self.mode = c["mode"]
        self.inc = c["incrementing.column.name"] or None
        ts = c["timestamp.column.name"]
        self.ts = ts[0] if ts else None
        self.partition = source_partition(table)
        self.topic = c["topic.prefix"] + (table or "")
        offset = offset or {}
        self.last_inc = offset.get("incrementing", -1)
        if "timestamp" in offset:
            ms, ns = offset["timestamp"], offset.get("timestamp_nanos", 0)
            self.last_ts = cdata.millis_to_timestamp(ms) + _dt.timedelta(
                microseconds=(ns % 1_000_000) // 1000)
        elif c["timestamp.initial"] is not None:
            self.last_ts = (_dt.datetime.now(_dt.timezone.utc) if c["timestamp.initial"] == -1
                            else cdata.millis_to_timestamp(c["timestamp.initial"]))
        else:
            self.last_ts = cdata.EPOCH
        self.next_poll = 0.0
        self.schema = None
        self.oids = None        # the column types of the last poll's result

    def statement(self, d, now):
        q = d.quote
        base = f"SELECT * FROM {d.qualified(self.table)}" if self.table else \
            f"SELECT * FROM ({self.task.c['query']}) AS connect_query"
        limit = self.task.c["batch.max.rows"]
        ph = d.placeholder
        if self.mode == "bulk":
            return base, ()
        if self.mode == "incrementing":
            return (f"{base} WHERE {q(self.inc)} > {ph} ORDER BY {q(self.inc)} ASC LIMIT {limit}",
                    (self.last_inc,))
        ts, p = d.ts_expr(self.ts), d.ts_param()
        end = d.ts_value(now - _dt.timedelta(milliseconds=self.task.c["timestamp.delay.interval.ms"]))
        last = d.ts_value(self.last_ts)
        if self.mode == "timestamp":
            # no LIMIT: rows sharing a timestamp must not be cut in two
            return (f"{base} WHERE {ts} > {p} AND {ts} < {p} ORDER BY {ts} ASC", (last, end))
        return (f"{base} WHERE {ts} < {p} AND (({ts} = {p} AND {q(self.inc)} > {ph}) OR {ts} > {p})"
                f" ORDER BY {ts}, {q(self.inc)} ASC LIMIT {limit}",
                (end, last, self.last_inc, last))

    def _schema(self, d, conn, cur):
        if isinstance(d, SQLite):
            decl = d.columns(conn, self.table) if self.table else {}
            cols = [c[0] for c in cur.description]
            return Schema("struct", name=self.table or None, fields=tuple(
                Field(c, d.schema_for(decl.get(c, ""))) for c in cols))
        return Schema("struct", name=self.table or None, fields=tuple(
            Field(c.name, d.schema_for_oid(c.type_code)) for c in cur.description))

    def poll(self, d, conn) -> SourceRecordBatch | None:
        """The next rows as one SourceRecordBatch (api.py): one schema, one
        source partition, and the offset after its last row."""
        sql, params = self.statement(d, d.now(conn))
        cur = d.query(conn, sql, params, self.oids)
        rows = cur.fetchall()
        conn.commit()           # end the read transaction: the next poll must see new rows
        self.oids = tuple(c[1] for c in cur.description)
        if self.schema is None or len(self.schema.fields) != len(cur.description):
            self.schema = self._schema(d, conn, cur)
        full = self.mode != "timestamp" and self.mode != "bulk" and \
            len(rows) >= self.task.c["batch.max.rows"]
        self.next_poll = 0.0 if full else time.monotonic() + self.task.c["poll.interval.ms"] / 1000
        if not rows:
            return None
        fields = self.schema.fields
        names = [f.name for f in fields]
        # the rows as columns (no dict per row: the converter writes a batch from the
        # columns, and a record's dict is made only if one is read)
        columns = [list(c) for c in zip(*rows)]
        # the driver's values as Connect's, a column at a time, only where a column's
        # values need it (timestamps made UTC, decimals, bytes...)
        for i, f in enumerate(fields):
            col = columns[i]
            # the column's first value that is not NULL: NULLs say nothing of the others
            sample = next((v for v in col if v is not None), None)
            if d.converts(f.schema, sample):
                schema, from_db = f.schema, d.from_db
                columns[i] = [from_db(v, schema) for v in col]
        # a column of a name twice (a query's join): the dict keeps the last, as before
        by_name = dict(zip(names, columns))
        offset = {}
        if self.inc:
            self.last_inc = by_name[self.inc][-1]
            offset["incrementing"] = self.last_inc
        if self.ts and self.mode != "incrementing":
            if None in by_name[self.ts]:
                raise DataException(f"{self.table}: null in timestamp column {self.ts}")
            t = self.last_ts = by_name[self.ts][-1]
            offset["timestamp"] = cdata.timestamp_to_millis(t)
            offset["timestamp_nanos"] = t.microsecond * 1000
        values = StructColumns(names, columns) if len(by_name) == len(names) else \
            [dict(zip(names, row)) for row in zip(*columns)]
        return SourceRecordBatch(self.topic, self.schema, values,
                                 source_partition=self.partition,
                                 source_offset=offset or None)


class JdbcSourceTask(SourceTask):
    def start(self, props):
        self.c = SOURCE_CONFIG.parse(props)
        self.d = _dialect(self.c)
        self.conn = self.d.connect()
        reader = self.context.offset_storage_reader()
        tables = [t for t in props.get("tables", "").split(",") if t] or [None]
        self.queriers = []
        for t in tables:
            self.queriers.append(_TableQuerier(self, t, reader.offset(source_partition(t))))
        self._stop = threading.Event()

    def poll(self):
        due = min(self.queriers, key=lambda q: q.next_poll)
        wait = due.next_poll - time.monotonic()
        if wait > 0:
            # short waits, so that stop() is seen within 100 ms
            self._stop.wait(min(wait, 0.1))
            return None
        return due.poll(self.d, self.conn)

    def stop(self):
        self._stop.set()
        try:
            self.conn.close()
        except Exception:       # noqa: BLE001 -- closing anyway
            pass


# ---- sink -----------------------------------------------------------------------------------

log = logging.getLogger(__name__)
KAFKA_PK = ("__connect_topic", "__connect_partition", "__connect_offset")
_UTC = _dt.timezone.utc
# the column types (information_schema's names, or sql_type's of a table made here) that
# read a value's CSV text and psycopg's as one value (not numeric: it keeps the scale of
# the text, 1.0 from psycopg and 1 from pyarrow)
_FLOAT_COLUMNS = {"REAL", "DOUBLE PRECISION"}
_TIMESTAMP_COLUMNS = {"TIMESTAMP", "TIMESTAMP WITHOUT TIME ZONE", "TIMESTAMP WITH TIME ZONE"}
_TIME_COLUMNS = {"TIME", "TIME WITHOUT TIME ZONE", "TIME WITH TIME ZONE"}


class JdbcSinkConnector(SinkConnector):
    def config_def(self):
        return SINK_CONFIG

    def validate(self, props):
        values = SINK_CONFIG.validate(props)
        by = {v["name"]: v for v in values}
        if props.get("delete.enabled", "false").lower() == "true" and \
                props.get("pk.mode", "none") != "record_key":
            by["delete.enabled"]["errors"].append(
                "Invalid value true for configuration delete.enabled: deletes need "
                "pk.mode=record_key")
        if props.get("insert.mode") in ("upsert", "update") and \
                props.get("pk.mode", "none") == "none":
            by["pk.mode"]["errors"].append(
                f"Invalid value none for configuration pk.mode: insert.mode "
                f"{props['insert.mode']} needs a primary key")
        return values

    def start(self, props):
        self.props = dict(props)
        SINK_CONFIG.parse(props)

    def task_class(self):
        return JdbcSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props) for _ in range(max_tasks)]


def _last_of_each_key(table, pk):
    """The rows of an Arrow ``table`` that are the last of their key (the
    ``pk`` columns): one INSERT ... ON CONFLICT may touch a row once, and
    one statement at a time the last write of a key would win."""
    import pyarrow as pa
    import pyarrow.compute as pc
    n = table.num_rows
    keyed = pa.table({**{f"k{i}": table.column(k) for i, k in enumerate(pk)},
                      "row": pa.array(range(n), pa.int64())})
    last = keyed.group_by([f"k{i}" for i in range(len(pk))]).aggregate([("row", "max")])
    if last.num_rows == n:
        return table
    rows = last.column("row_max").combine_chunks()
    return table.take(rows.take(pc.array_sort_indices(rows)))      # in their order


class JdbcSinkTask(SinkTask):
    def start(self, props):
        self.c = SINK_CONFIG.parse(props)
        self.d = _dialect(self.c)
        self.conn = self.d.connect()
        self.tables: dict[str, dict] = {}     # table -> {column: declared type}
        # (table, columns) -> the session's temporary staging table of upserts through COPY
        self._staging: dict[tuple, str] = {}
        # the last CSV COPY's end and commit, run by a thread of the task's own while the
        # worker fetches and converts the next records (PostgreSQL takes in the rows
        # meanwhile); whatever uses the connection next waits for it first (_settle)
        self._committing = None
        self._committer = None
        self._copy_failed = None

    def _table_of(self, r):
        return self.c["table.name.format"].replace("${topic}", r.topic)

    def _row(self, r) -> tuple[dict, dict, list]:
        """(columns -> values, columns -> schemas, primary key columns) of a record."""
        mode, pk = self.c["pk.mode"], self.c["pk.fields"]
        vs = r.value_schema or cdata.infer_schema(r.value)
        if not isinstance(r.value, dict) or vs is None or vs.type != "struct":
            raise DataException(f"{r.topic}-{r.kafka_partition}@{r.kafka_offset}: the JDBC sink "
                                f"needs a struct (or map) value, got {type(r.value).__name__}")
        wanted = self.c["fields.whitelist"]
        cols, schemas = {}, {}
        if mode == "kafka":
            names = pk or list(KAFKA_PK)
            for n, v, s in zip(names, (r.topic, r.kafka_partition, r.kafka_offset),
                               (Schema.STRING, Schema.INT32, Schema.INT64)):
                cols[n], schemas[n] = v, s
        elif mode == "record_key":
            cols.update(self._key_columns(r))
            for n in cols:
                schemas[n] = self._key_schema(r, n)
        key_cols = list(cols)
        for f in vs.fields:
            if wanted and f.name not in wanted and f.name not in cols:
                continue
            if f.name not in cols:
                cols[f.name], schemas[f.name] = r.value.get(f.name), f.schema
        if mode == "record_value":
            key_cols = pk or [f.name for f in vs.fields]
            missing = [n for n in key_cols if n not in cols]
            if missing:
                raise DataException(f"value has no field(s) {missing} of pk.fields")
        return cols, schemas, key_cols

    def _key_columns(self, r) -> dict:
        pk = self.c["pk.fields"]
        if r.key is None:
            raise DataException(f"{r.topic}-{r.kafka_partition}@{r.kafka_offset}: pk.mode "
                                f"record_key and a null key")
        if isinstance(r.key, dict):
            names = pk or list(r.key)
            missing = [n for n in names if n not in r.key]
            if missing:
                raise DataException(f"key has no field(s) {missing}")
            return {n: r.key[n] for n in names}
        if len(pk) != 1:
            raise ConfigException("pk.fields", "Invalid value for configuration pk.fields: a "
                                               "primitive key needs exactly one pk.fields name")
        return {pk[0]: r.key}

    def _key_schema(self, r, name):
        if r.key_schema is not None:
            if r.key_schema.type == "struct":
                return r.key_schema.field(name).schema
            return r.key_schema
        return cdata.infer_schema(r.key[name] if isinstance(r.key, dict) else r.key) \
            or Schema.STRING

    def _ensure_table(self, table, cols, schemas, pk) -> None:
        d, q = self.d, self.d.quote
        known = self.tables.get(table)
        if known is None:
            known = d.columns(self.conn, table)
            if known is None:
                if not self.c["auto.create"]:
                    raise ConnectException(f"Table {table} is missing and auto-creation is "
                                           f"disabled")
                defs = [f"{q(n)} {d.sql_type(s)}" + ("" if s.optional and n not in pk else
                                                     " NOT NULL")
                        for n, s in schemas.items()]
                if pk:
                    defs.append(f"PRIMARY KEY ({', '.join(map(q, pk))})")
                self.conn.execute(f"CREATE TABLE {d.qualified(table)} ({', '.join(defs)})")
                known = {n: d.sql_type(s) for n, s in schemas.items()}
            self.tables[table] = known
        missing = [n for n in cols if n not in known]
        if missing:
            if not self.c["auto.evolve"]:
                raise ConnectException(f"Table {table} is missing fields {missing} and "
                                       f"auto-evolution is disabled")
            for n in missing:
                # added columns are nullable: rows already there have no value for them
                self.conn.execute(f"ALTER TABLE {d.qualified(table)} ADD COLUMN {q(n)} "
                                  f"{d.sql_type(schemas[n])}")
                known[n] = d.sql_type(schemas[n])

    def put(self, records):
        self._settle()
        if not records:
            return
        try:
            pending: list = []       # (table, sql, cols, [rows]) in order
            for r in records:
                table = self._table_of(r)
                if r.value is None:
                    if not self.c["delete.enabled"]:
                        continue        # Confluent's sink skips tombstones unless deletes are on
                    key = self._key_columns(r)
                    sql = (f"DELETE FROM {self.d.qualified(table)} WHERE " +
                           " AND ".join(f"{self.d.quote(k)} = {self.d.placeholder}" for k in key))
                    if self.d.columns(self.conn, table) is not None or table in self.tables:
                        self._add(pending, table, sql, tuple(key),
                                  [self.d.to_db(v) for v in key.values()], None)
                    continue
                cols, schemas, pk = self._row(r)
                self._ensure_table(table, cols, schemas, pk)
                names = tuple(cols)
                sql = self._write_sql(table, names, pk)
                if self.c["insert.mode"] == "update":
                    rest = [n for n in names if n not in pk]
                    values = [self.d.to_db(cols[n]) for n in rest + pk]
                else:
                    values = [self.d.to_db(cols[n]) for n in names]
                self._add(pending, table, sql, names, values, tuple(pk))
            for table, sql, names, rows, pk in pending:
                self._write(table, sql, names, rows, pk)
            self.conn.commit()
        except Exception:
            self.conn.rollback()
            self.tables.clear()      # a rolled-back CREATE/ALTER: read the table again
            self._staging.clear()
            raise

    def put_batch(self, batch):
        """The bulk path (api.py): a batch of one topic whose values are
        structs of one schema, inserted or upserted on PostgreSQL (pk.mode
        none or record_value) from its columns through COPY, with no record
        object; anything else is ``put`` of its records. Values the
        converter gave as Arrow columns (ColumnarValues) are inserted as the
        CSV pyarrow writes of them, with no Python object per value, where
        that CSV is what the rows would have been (_csv_of); that COPY's end
        and commit run on while the worker fetches the next records."""
        self._settle()
        if not self._bulk_ok(batch):
            self.put(batch.records())
            return
        from operator import itemgetter
        values, vs = batch.values, batch.value_schema
        wanted = self.c["fields.whitelist"]
        fields = [f for f in vs.fields if not wanted or f.name in wanted]
        names = tuple(f.name for f in fields)
        schemas = {f.name: f.schema for f in fields}
        pk = [] if self.c["pk.mode"] == "none" else (self.c["pk.fields"] or list(names))
        if any(n not in schemas for n in pk):
            self.put(batch.records())       # put names the missing key field
            return
        table = self.c["table.name.format"].replace(
            "${topic}", batch.rows.column("topic").dictionary[0].as_py())
        columnar = isinstance(values, ColumnarValues)
        get = itemgetter(*names)
        rows = None
        if not columnar:
            try:
                rows = list(map(get, values)) if len(names) > 1 else [(get(v),) for v in values]
            except KeyError:                # a value without a field: as put reads it
                self.put(batch.records())
                return
        try:
            self._ensure_table(table, schemas, schemas, pk)
            columns = values.table if columnar else None
            if columnar and self.c["insert.mode"] == "upsert":
                columns = _last_of_each_key(columns, pk)
            csv = self._csv_of(table, columns, fields) if columnar else None
            if csv is not None:
                if self.c["insert.mode"] == "upsert":
                    stage, then = self._stage_upsert(table, names, tuple(pk))
                    self._copy_csv(stage, names, csv, then)     # upserted and committed on
                else:
                    self._copy_csv(self.d.qualified(table), names, csv)    # committed on
                return
            if rows is None:                # the converter's dicts hold every field
                rows = list(map(get, values)) if len(names) > 1 else [(get(v),) for v in values]
            self._write(table, None, names, self._db_rows(table, fields, rows), tuple(pk))
            self.conn.commit()
        except Exception:
            self.conn.rollback()
            self.tables.clear()
            self._staging.clear()
            raise

    def _db_rows(self, table, fields, rows) -> list:
        """``rows`` with the columns whose values the driver cannot take as
        they are (timestamps made naive UTC, maps and arrays as JSON)
        converted, a column at a time, as ``put`` converts them."""
        convert = [i for i, f in enumerate(fields)
                   if f.schema.name is not None or f.schema.type in ("map", "array", "struct")]
        if not convert:
            return rows
        to_db = self.d.to_db
        known = self.tables[table]
        rows = [list(r) for r in rows]
        for i in convert:
            if fields[i].schema.name == cdata.TIMESTAMP and \
                    known.get(fields[i].name) in _TIMESTAMP_COLUMNS:
                # a UTC datetime goes as it is into a timestamp column: it takes the wall
                # clock (PostgreSQL ignores the +00:00), a timestamptz the instant; into
                # any other column, the text put writes
                for r in rows:
                    x = r[i]
                    if x is not None and x.tzinfo is not _UTC:
                        r[i] = to_db(x)
                continue
            for r in rows:
                r[i] = to_db(r[i])
        return rows

    def _csv_of(self, table, columns, fields):
        """The CSV of ``fields``' Arrow columns that ``COPY ... (FORMAT csv)``
        reads as the rows ``_copy`` would write of the same values, or None.
        Every string is quoted (so an empty one is not NULL and ``\\.`` is no
        end of data), a null is an unquoted empty field. Ints, strings and
        dates are the text psycopg writes; booleans are written as its
        ``t``/``f``; the rest differ in text from psycopg's and are written
        only into columns that read both texts as one value: floats (finite:
        the converter keeps NaN and infinities per record) into float
        columns, timestamps as their UTC wall clock into timestamp columns
        (the session is UTC: a timestamptz takes the same instant), times
        into time columns."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as pcsv
        known = self.tables[table]
        out = []
        for f in fields:
            col = columns.column(f.name)
            decl = known.get(f.name, "")
            t = col.type
            if pa.types.is_boolean(t):
                col = pc.if_else(col, "t", "f")
            elif pa.types.is_floating(t):
                if decl not in _FLOAT_COLUMNS:
                    return None
            elif pa.types.is_timestamp(t):
                if decl not in _TIMESTAMP_COLUMNS:
                    return None
                col = col.cast(pa.timestamp("ms"))      # the UTC wall clock
            elif pa.types.is_time(t):
                if decl not in _TIME_COLUMNS:
                    return None
            elif not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_date(t)):
                return None
            out.append(col)
        sink = pa.BufferOutputStream()
        pcsv.write_csv(pa.Table.from_arrays(out, names=[f.name for f in fields]), sink,
                       pcsv.WriteOptions(include_header=False, quoting_style="needed"))
        return sink.getvalue()

    def _copy_csv(self, target: str, names, csv, then: str | None = None) -> None:
        """``COPY ... (FORMAT csv)`` of ``csv``, sent; its end (PostgreSQL's
        answer once every row is in), ``then`` (the upsert from the staging
        table) and the commit left to the committer thread."""
        cols = ", ".join(map(self.d.quote, names))
        copying = self.conn.cursor().copy(f"COPY {target} ({cols}) FROM STDIN (FORMAT csv)")
        cp = copying.__enter__()
        try:
            cp.write(csv)
        except BaseException as e:
            copying.__exit__(type(e), e, e.__traceback__)
            raise
        if self._committer is None:
            from concurrent.futures import ThreadPoolExecutor
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="jdbc-sink-commit")
        self._committing = self._committer.submit(self._end_copy, copying, then)

    def _end_copy(self, copying, then: str | None = None) -> None:
        copying.__exit__(None, None, None)
        if then is not None:
            self.conn.execute(then)
        self.conn.commit()

    def _settle(self) -> None:
        """Wait for the last COPY's commit. Its failure is raised here, with
        its transaction rolled back (nothing of that put is kept), and again
        by every later call: the worker took that put as done, so no flush
        may succeed after it (the offsets after its records would be
        committed)."""
        if self._copy_failed is not None:
            raise ConnectException(f"an earlier put's COPY failed: {self._copy_failed}")
        committing, self._committing = self._committing, None
        if committing is None:
            return
        try:
            committing.result()
        except Exception as e:
            self._copy_failed = e
            self.conn.rollback()
            self.tables.clear()
            self._staging.clear()
            raise

    def flush(self, current_offsets):
        self._settle()

    def _bulk_ok(self, batch) -> bool:
        vs = batch.value_schema
        return (isinstance(self.d, PostgreSQL) and self.c["insert.mode"] in ("insert", "upsert")
                and self.c["pk.mode"] in ("none", "record_value") and vs is not None
                and not isinstance(vs, list) and vs.type == "struct"
                and len(batch.rows.column("topic").dictionary) == 1
                and (isinstance(batch.values, ColumnarValues)      # dicts, every one
                     or all(type(v) is dict for v in batch.values)))

    def _write(self, table, sql, names, rows, pk) -> None:
        """One run of rows of one statement: PostgreSQL's inserts through
        ``COPY FROM`` and its upserts through COPY into a staging table and
        one ``INSERT ... SELECT ... ON CONFLICT``; the rest (updates,
        deletes, SQLite) in ``batch.size`` statement batches."""
        if isinstance(self.d, PostgreSQL) and pk is not None:
            mode = self.c["insert.mode"]
            if mode == "insert":
                self._copy(self.d.qualified(table), names, rows)
                return
            if mode == "upsert":
                self._copy_upsert(table, names, rows, pk)
                return
        batch = self.c["batch.size"]
        for i in range(0, len(rows), batch):
            self._executemany(sql, rows[i:i + batch])

    def _copy(self, target: str, names, rows) -> None:
        cols = ", ".join(map(self.d.quote, names))
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY {target} ({cols}) FROM STDIN") as cp:
                for row in rows:
                    cp.write_row(row)

    def _copy_upsert(self, table, names, rows, pk) -> None:
        # one INSERT ... ON CONFLICT may not touch a row twice: the last write of a key wins,
        # as it would one statement at a time
        at = [names.index(k) for k in pk]
        rows = list({tuple(r[i] for i in at): r for r in rows}.values())
        stage, upsert = self._stage_upsert(table, names, pk)
        self._copy(stage, names, rows)
        self.conn.execute(upsert)

    def _stage_upsert(self, table, names, pk) -> tuple[str, str]:
        """(the session's empty staging table of ``names``, the statement
        upserting its rows into ``table``): rows COPYed into the first, then
        the second run, in one transaction."""
        q = self.d.quote
        stage = self._staging.get((table, names))
        if stage is None:
            import hashlib
            # named by its columns: a name made once is the same table for ever after
            digest = hashlib.blake2s(repr((table, names)).encode(), digest_size=8).hexdigest()
            stage = q(f"connect_stage_{digest}")
            # the session's own table, emptied by every commit, of the run's columns alone
            # (no constraints: the target checks them on the INSERT)
            self.conn.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS SELECT "
                f"{', '.join(map(q, names))} FROM {self.d.qualified(table)} WITH NO DATA")
            self._staging[(table, names)] = stage
        else:
            self.conn.execute(f"TRUNCATE {stage}")
        cols = ", ".join(map(q, names))
        rest = [n for n in names if n not in pk]
        action = ("DO UPDATE SET " + ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in rest)) \
            if rest else "DO NOTHING"
        return stage, (f"INSERT INTO {self.d.qualified(table)} ({cols}) SELECT {cols} FROM "
                       f"{stage} ON CONFLICT ({', '.join(map(q, pk))}) {action}")

    def _executemany(self, sql, rows):
        if isinstance(self.d, SQLite):
            self.conn.executemany(sql, rows)
        else:
            with self.conn.cursor() as cur:
                cur.executemany(sql, rows)

    @staticmethod
    def _add(pending, table, sql, names, values, pk):
        """``pk``: the write's key columns (None: a delete)."""
        if pending and pending[-1][1] == sql:
            pending[-1][3].append(values)
        else:
            pending.append((table, sql, names, [values], pk))

    def _write_sql(self, table, names, pk):
        d, q = self.d, self.d.quote
        mode = self.c["insert.mode"]
        if mode == "upsert":
            return d.upsert(table, list(names), pk)
        if mode == "update":
            rest = [n for n in names if n not in pk]
            return (f"UPDATE {d.qualified(table)} SET " +
                    ", ".join(f"{q(n)} = {d.placeholder}" for n in rest) + " WHERE " +
                    " AND ".join(f"{q(n)} = {d.placeholder}" for n in pk))
        return (f"INSERT INTO {d.qualified(table)} ({', '.join(map(q, names))}) VALUES (" +
                ", ".join([d.placeholder] * len(names)) + ")")

    def stop(self):
        try:
            self._settle()
        except Exception as e:      # noqa: BLE001 -- stopping anyway; its offsets were not
            # committed (no flush succeeded), so its records come again
            log.warning("JDBC sink: the last put's COPY failed at stop: %s", e)
        finally:
            if self._committer is not None:
                self._committer.shutdown()
            try:
                self.conn.close()
            except Exception:       # noqa: BLE001
                pass
