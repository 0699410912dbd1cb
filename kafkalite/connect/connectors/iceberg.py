"""IcebergSinkConnector: records of ``topics`` appended to an Apache Iceberg
table (pyiceberg, a SQL catalog on SQLite or PostgreSQL), exactly once.

Table layout (``iceberg.tables.record-format``): ``value`` (the default):
the value's struct fields as columns (the Parquet sink's Arrow batch
building, parquet.arrow_table), plus ``__kafka_partition`` (int),
``__kafka_offset`` (long) and ``__kafka_timestamp`` (timestamptz);
tombstones (null values) are skipped. ``kafka``: the record as Spark's
Kafka source has it, ``key`` binary, ``value`` binary, ``topic`` string,
``partition`` int, ``offset`` long, ``timestamp`` timestamptz,
``timestampType`` int (0 CreateTime, 1 LogAppendTime), tombstones
included and headers left out; key and value must come through
ByteArrayConverter (the bytes as they are in the log), which the
connector's own config has to name. A ``kafka`` table below its stored
offsets is the topic itself, offset for offset, so a reader can take the
copy up to those offsets and the topic after them (kafkalite_spark's
read_with_history).
Each commit (the worker's ``pre_commit`` every ``offset.flush.interval.ms``,
on rebalance and stop, or when a backlog has been read to its end) is one
Iceberg append snapshot: Parquet data files written by pyiceberg from the
Arrow batch, and, in the same snapshot's summary properties, the next
Kafka offset of every topic partition the table holds, under
``kafka.connect.offsets.<consumer group>`` (JSON ``{topic: {partition:
offset}}``). ``flush.size`` bounds memory, not snapshots: once that many
records are buffered they are written as data files at once (staged), and
the next commit's snapshot takes them with the rest. While a task reads a
backlog (behind since its partitions were assigned, or at its last put)
it lets the worker's interval commits pass, at most MAX_DEFERRED in a row:
the backlog's end asks for the commit, so a backlog is one snapshot where
it was one per flush.size and per interval (SinkTaskContext.interval_commit
tells the interval's commit from the others). Staged files a task drops
(its partitions revoked or lost, a crash) are in no snapshot: orphans, as
a failed commit's files are, for the table's orphan-file cleanup.

Exactly once: when partitions are assigned (start, rebalance) the task
seeks them to the offsets of the latest snapshot carrying that property
(walking back over snapshots written by others), not to the consumer
group's, and drops redelivered records below them; the group's offsets,
committed after the table's, are only a hint. A crash between the table
commit and the group commit therefore writes nothing twice.

Concurrent tasks (one table, several tasks, each owning some partitions):
every commit re-reads the table's offsets and checks that each partition
it appends still stands where this task last saw it; a partition another
task wrote meanwhile (a zombie after a rebalance) is dropped from the batch
and re-sought. A lost race (pyiceberg's CommitFailedException) is retried
up to ``iceberg.commit.retries`` times with the offsets recomputed from
the refreshed table -- which is why the tables this sink uses have
pyiceberg's own rebase-and-retry off (``commit.retry.num-retries=0``: a
rebased commit would carry offsets computed before the other writer's).

Table auto-creation (``iceberg.tables.auto-create-enabled``) from the first
batch's schema, partitioned by ``iceberg.tables.default-partition-by``
(``day(field)``, ``hour``, ``month``, ``year``, ``identity``; the record
timestamp is ``__kafka_timestamp``); schema evolution
(``iceberg.tables.evolve-schema-enabled``): new fields become new optional
columns (``update_schema().union_by_name``) in the same transaction as the
append; with evolution off, fields the table lacks are left out. One table
(``iceberg.tables``) takes every topic of the connector; offsets are kept
per topic, but no column names the topic. Keys as Apache Iceberg's Kafka
Connect sink names them; ``iceberg.catalog`` is the catalog's name
(``kafkalite`` by default: readers find the table under it) and
``iceberg.catalog.*`` are the SQL catalog's properties (``uri``: a
SQLAlchemy URL such as ``sqlite:////path/catalog.db`` or
``postgresql+psycopg://user@host/db``, or Iceberg's JdbcCatalog's JDBC URL
with ``jdbc.user``/``jdbc.password``; ``warehouse``: where data files go):
catalog_name, catalog_properties.

The batch path (``put_batch``, api.py's bulk path): a batch whose values
a converter gave as Arrow columns (ColumnarValues: the JsonConverter's of
one struct schema, no tombstones, no Time field, or of schemaless objects;
the AvroConverter's of one schema id) is buffered as the Arrow table the
per-record path would build of its records (the same column types,
nulls, timestamps and offsets), one per topic partition, with no
SinkRecord made; in the ``kafka`` format every batch is, from the
consumer's own columns. Anything else (values decoded per record, a
schema that changes within the batch, transforms: the worker then calls
``put``) goes record by record. Both kinds sit in a partition's buffer in
offset order and are committed alike.

Who calls: the Connect worker (plugins.py names the class). Tables grow a
snapshot per commit: expiring old snapshots and compacting small files is
left to the table's owner (Spark's or pyiceberg's maintenance).
"""
from __future__ import annotations

import json
import logging
import random
import re
import time
import uuid

from kafkalite.connect import data as cdata
from kafkalite.connect.api import SinkConnector, SinkTask
from kafkalite.connect.config import (BOOLEAN, INT, STRING, ConfigDef, ConfigException, at_least,
                                      one_of)
from kafkalite.connect.connectors.parquet import arrow_table, arrow_type
from kafkalite.connect.converters import ColumnarValues
from kafkalite.connect.errors import ConnectException
from kafkalite.iceberg_catalog import create_namespace, sql_catalog

log = logging.getLogger("kafkalite.connect.iceberg")

_PARTITION = re.compile(r"^\s*(year|month|day|hour|identity)\s*\(\s*([^)\s]+)\s*\)\s*$")
PROPERTY = "kafka.connect.offsets."
PARTITION_BY = "iceberg.tables.default-partition-by"
RECORD_FORMAT = "iceberg.tables.record-format"
BYTES_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
# ConnectRecord.timestamp_type -> Spark's Kafka source timestampType
TIMESTAMP_TYPES = {"CreateTime": 0, "LogAppendTime": 1}
CONFIG = (ConfigDef()
          .define("iceberg.tables", STRING,
                  doc="the table, namespace.name (one table for all the topics)")
          .define("iceberg.catalog.uri", STRING,
                  doc="the SQL catalog's SQLAlchemy URL (sqlite:///..., postgresql+psycopg://...)")
          .define("iceberg.catalog.warehouse", STRING,
                  doc="where new tables' files go (file://...)")
          .define("iceberg.catalog", STRING, None,
                  doc="the catalog's name (Apache Iceberg's sink's key): readers find the "
                      "table under it; default kafkalite")
          .define("iceberg.catalog.name", STRING, None,
                  doc="the catalog's name, kafkalite's earlier key for iceberg.catalog")
          .define("iceberg.tables.auto-create-enabled", BOOLEAN, True,
                  doc="create the table from the first batch's schema")
          .define("iceberg.tables.evolve-schema-enabled", BOOLEAN, True,
                  doc="add new fields as optional columns")
          .define(PARTITION_BY, STRING, "",
                  lambda name, value: partition_fields(value or ""),
                  doc="partitioning of a created table: day(field), hour(...), month(...), "
                      "year(...), identity(...), comma-separated; empty: none")
          .define(RECORD_FORMAT, STRING, "value", one_of("value", "kafka"),
                  doc="value: the value's struct fields as columns; kafka: key, value, topic, "
                      "partition, offset, timestamp, timestampType as Spark's Kafka source "
                      "(needs ByteArrayConverter for key and value)")
          .define("iceberg.commit.retries", INT, 20, at_least(0),
                  doc="retries of a commit that lost a race with another writer")
          .define("flush.size", INT, 100_000, at_least(1),
                  doc="buffered records that are written as data files, added to the table "
                      "by the next commit (the bound on the rows a task holds in memory)"))
# the worker's interval commits a task reading a backlog lets pass in a row: its
# commit comes at the backlog's end or, for a long one, every (MAX_DEFERRED + 1)th interval
MAX_DEFERRED = 4


def partition_fields(spec: str) -> list[tuple[str, str]]:
    """[(transform, source column)] of ``iceberg.tables.default-partition-by``."""
    out = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        m = _PARTITION.match(part)
        if m is None:
            raise ConfigException(PARTITION_BY, f"Invalid value {spec} for configuration "
                                  f"{PARTITION_BY}: {part!r} is not day(field), hour(field), "
                                  f"month(field), year(field) or identity(field)", spec)
        out.append((m[1], m[2]))
    return out


def check_converters(props: dict) -> None:
    """``kafka`` record format: the connector's own config must name
    ByteArrayConverter for key and value (the worker's defaults are out of
    the connector's sight, and any other converter would not hand over the
    log's bytes)."""
    if (props.get(RECORD_FORMAT) or "value").strip().lower() != "kafka":
        return
    for key in ("key.converter", "value.converter"):
        if (props.get(key) or "").strip() != BYTES_CONVERTER:
            raise ConfigException(RECORD_FORMAT, f"Invalid value kafka for configuration "
                                  f"{RECORD_FORMAT}: the kafka record format stores the "
                                  f"record's bytes, so {key} must be {BYTES_CONVERTER} in the "
                                  f"connector's config (it is {props.get(key) or 'not set'})",
                                  "kafka")


DEFAULT_CATALOG_NAME = "kafkalite"
CATALOG_PREFIX = "iceberg.catalog."
# Apache Iceberg's JDBC catalog, whose tables pyiceberg's SqlCatalog shares
JDBC_CATALOG = "org.apache.iceberg.jdbc.JdbcCatalog"


def catalog_name(c: dict) -> str:
    """``iceberg.catalog`` (Iceberg's key), or ``iceberg.catalog.name``, or
    ``kafkalite``: the name a SQL catalog files the table under (its
    ``catalog_name`` column), which a reader's catalog must be given."""
    name, old = c.get("iceberg.catalog"), c.get("iceberg.catalog.name")
    if name and old and name != old:
        raise ConfigException("iceberg.catalog", f"Invalid value {name} for configuration "
                              f"iceberg.catalog: iceberg.catalog.name names another catalog "
                              f"({old}); set one of them", name)
    return name or old or DEFAULT_CATALOG_NAME


def catalog_properties(props: dict) -> dict:
    """The SQL catalog's properties from the ``iceberg.catalog.*`` keys, as
    Apache Iceberg's sink passes them to its catalog. A JDBC URL
    (``jdbc:postgresql://host:port/db``, ``jdbc:sqlite:<path>``) with
    ``jdbc.user``/``jdbc.password``, as Iceberg's JdbcCatalog takes, becomes
    the SQLAlchemy URL pyiceberg's SqlCatalog takes; ``type`` and
    ``catalog-impl`` may name only a JDBC/SQL catalog."""
    import urllib.parse
    out = {k[len(CATALOG_PREFIX):]: v for k, v in props.items()
           if k.startswith(CATALOG_PREFIX) and k != "iceberg.catalog.name"}
    kind, impl = out.pop("type", None), out.pop("catalog-impl", None)
    if kind and kind.strip().lower() not in ("jdbc", "sql"):
        raise ConfigException("iceberg.catalog.type", f"Invalid value {kind} for configuration "
                              f"iceberg.catalog.type: only a SQL catalog (jdbc or sql)", kind)
    if impl and impl.strip() != JDBC_CATALOG:
        raise ConfigException("iceberg.catalog.catalog-impl", f"Invalid value {impl} for "
                              f"configuration iceberg.catalog.catalog-impl: only "
                              f"{JDBC_CATALOG}", impl)
    user, password = out.pop("jdbc.user", None), out.pop("jdbc.password", None)
    uri = out.get("uri") or ""
    if uri.startswith("jdbc:sqlite:"):
        path = uri[len("jdbc:sqlite:"):]
        out["uri"] = "sqlite:///" + (path[2:] if path.startswith("//") else path)
    elif uri.startswith("jdbc:postgresql:"):
        u = urllib.parse.urlsplit(uri[len("jdbc:"):])
        query = dict(urllib.parse.parse_qsl(u.query))
        user = user or query.pop("user", None)
        password = password or query.pop("password", None)
        auth = "" if not user else urllib.parse.quote(user, safe="") + (
            ":" + urllib.parse.quote(password, safe="") if password else "") + "@"
        out["uri"] = urllib.parse.urlunsplit((
            "postgresql+psycopg", auth + u.netloc.rpartition("@")[2], u.path,
            urllib.parse.urlencode(query), ""))
    return out


def catalog_of(c: dict, props: dict):
    return sql_catalog(catalog_name(c), **catalog_properties(props))


def table_offsets(table, group: str) -> dict:
    """{(topic, partition): next offset} of the newest snapshot of ``table``
    that carries ``group``'s offsets (others' snapshots are skipped)."""
    from pyiceberg.table.snapshots import ancestors_of
    key = PROPERTY + group
    for snap in ancestors_of(table.current_snapshot(), table.metadata):
        raw = snap.summary.additional_properties.get(key) if snap.summary else None
        if raw is not None:
            return {(t, int(p)): off for t, parts in json.loads(raw).items()
                    for p, off in parts.items()}
    return {}


def iceberg_ready(table):
    """``table`` with Arrow types Iceberg has: timestamps and times in
    microseconds, 8/16-bit integers widened to int."""
    import pyarrow as pa
    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_timestamp(t) and t.unit != "us":
            t = pa.timestamp("us", tz=t.tz)
        elif pa.types.is_int8(t) or pa.types.is_int16(t):
            t = pa.int32()
        elif pa.types.is_time(t):
            t = pa.time64("us")             # Iceberg's time is in microseconds
        elif pa.types.is_null(t):
            t = pa.string()
        fields.append(pa.field(f.name, t, True))
    return table.cast(pa.schema(fields))


class _Rows:
    """Rows of one topic partition taken whole from a batch's columns
    (put_batch): the Arrow table ``_batch`` would have made of their
    records, without ``__kafka_partition``, and the offset of the last."""

    __slots__ = ("table", "kafka_offset")

    def __init__(self, table, kafka_offset: int):
        self.table, self.kafka_offset = table, kafka_offset

    def __len__(self) -> int:
        return self.table.num_rows


def _last_offset(run) -> int:
    """The Kafka offset of the last record of a buffered run."""
    return run.kafka_offset if isinstance(run, _Rows) else run[-1].kafka_offset


def _record_stamps(rows):
    """The rows' timestamps as the per-record path has them: null where the
    record has none (the consumer's -1)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    stamps = rows.column("timestamp")
    return pc.if_else(pc.less(stamps.cast(pa.int64()), 0),
                      pa.scalar(None, stamps.type), stamps)


class IcebergSinkConnector(SinkConnector):
    def config_def(self):
        return CONFIG

    def validate(self, props):
        values = super().validate(props)
        by_name = {v["name"]: v for v in values}
        for check in (lambda: check_converters(props), lambda: catalog_properties(props),
                      lambda: catalog_name(props)):
            try:
                check()
            except ConfigException as e:
                # a catalog property has no definition of its own: the uri's carries it
                by_name.get(e.name, by_name["iceberg.catalog.uri"])["errors"].append(str(e))
        return values

    def start(self, props):
        self.props = dict(props)
        partition_fields(CONFIG.parse(props)[PARTITION_BY])
        check_converters(props)
        catalog_name(props)
        catalog_properties(props)

    def task_class(self):
        return IcebergSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props) for _ in range(max_tasks)]


class IcebergSinkTask(SinkTask):
    def start(self, props):
        c = self.config = CONFIG.parse(props)
        self.group = f"connect-{props.get('name', 'iceberg')}"
        self.catalog = catalog_of(c, props)
        self.identifier = c["iceberg.tables"]
        self.partition_by = partition_fields(c[PARTITION_BY])
        self.flush_size = c["flush.size"]
        check_converters(props)
        self.kafka_format = c[RECORD_FORMAT].strip().lower() == "kafka"
        self.table = None
        # (topic, partition) -> runs in offset order: [records] (put) or _Rows (put_batch)
        self.buffers: dict = {}
        self.buffered = 0
        self.base: dict = {}       # (topic, partition) -> next offset, as the table has it
        self.commit_retries = 0    # commits that lost a race and were redone
        # (topic, partition) -> ([data files written, not yet in a snapshot], next offset, rows)
        self.staged: dict = {}
        self.deferred = 0          # interval commits let pass in a row (MAX_DEFERRED)
        self.end_known = False     # the last put knew every partition's lag (pre_commit)
        self.behind = False        # reading a backlog: since open, or a put left records unread

    # -- the table --------------------------------------------------------------------

    def _load(self, create_from=None):
        from pyiceberg.exceptions import (CommitFailedException, NoSuchTableError,
                                          TableAlreadyExistsError)
        if self.table is not None:
            self.table.refresh()
            return self.table
        try:
            self.table = self.catalog.load_table(self.identifier)
        except NoSuchTableError:
            if create_from is None:
                return None
            if not self.config["iceberg.tables.auto-create-enabled"]:
                raise ConnectException(f"table {self.identifier} does not exist and "
                                       f"iceberg.tables.auto-create-enabled is false") from None
            try:
                self._create(create_from)
            except (TableAlreadyExistsError, CommitFailedException) as exc:
                # Another task created it first: a catalog may say so when
                # the create begins (TableAlreadyExistsError) or, the SQL
                # catalog, only at its commit ("Table already exists" from
                # the create's requirement). Either way the table is there
                # to load; if it is not, the failure was something else.
                try:
                    self.table = self.catalog.load_table(self.identifier)
                except NoSuchTableError:
                    raise exc from None
            else:
                self.table = self.catalog.load_table(self.identifier)
        if self.table.properties.get("commit.retry.num-retries") != "0":
            try:
                with self.table.transaction() as tx:
                    tx.set_properties({"commit.retry.num-retries": "0"})
            except CommitFailedException:
                self.table.refresh()     # another task set it (or wrote) meanwhile
        return self.table

    def _create(self, schema):
        from pyiceberg import transforms
        namespace = self.identifier.rsplit(".", 1)[0] if "." in self.identifier else "default"
        create_namespace(self.catalog, namespace)
        names = set(schema.names)
        for _, col in self.partition_by:
            if col not in names:
                raise ConnectException(f"partition column {col!r} is not among the record's "
                                       f"fields {sorted(names)}")
        tx = self.catalog.create_table_transaction(
            self.identifier, schema=schema, properties={"commit.retry.num-retries": "0"})
        if self.partition_by:
            kinds = {"year": transforms.YearTransform, "month": transforms.MonthTransform,
                     "day": transforms.DayTransform, "hour": transforms.HourTransform,
                     "identity": transforms.IdentityTransform}
            with tx.update_spec() as spec:
                for kind, col in self.partition_by:
                    spec.add_field(col, kinds[kind](), f"{col}_{kind}")
        tx.commit_transaction()

    # -- the sink API -----------------------------------------------------------------

    def _resume_offsets(self) -> dict:
        """The offsets to resume from: the table's (see the module docstring)."""
        table = self._load()
        return {} if table is None else table_offsets(table, self.group)

    def open(self, partitions):
        # what the partitions hold already is a backlog: committed once read to its end
        self.behind = True
        stored = self._resume_offsets()
        seek = {}
        for tp in partitions:
            key = (tp.topic, tp.partition)
            self.base.pop(key, None)
            if key in stored:
                self.base[key] = seek[key] = stored[key]
        if seek:
            self.context.offset(seek)

    def close(self, partitions):
        for tp in partitions:
            self.buffers.pop((tp.topic, tp.partition), None)
            self.base.pop((tp.topic, tp.partition), None)
            # written but in no snapshot: files no reader sees (orphans, as a failed commit's)
            self.staged.pop((tp.topic, tp.partition), None)
        self._count()

    def _count(self) -> None:
        self.buffered = sum(len(run) for b in self.buffers.values() for run in b)

    def _pending(self) -> int:
        """Rows put and in no snapshot yet: buffered, or staged as data files."""
        return self.buffered + sum(rows for _, _, rows in self.staged.values())

    def put(self, records):
        buffers, base = self.buffers, self.base
        tombstones = self.kafka_format    # a row in the kafka format, skipped in the value one
        runs: dict = {}                   # (topic, partition) -> the run this call appends to
        for r in records:
            key = (r.topic, r.kafka_partition)
            if (r.value is None and not tombstones) or r.kafka_offset < base.get(key, -1):
                continue    # a tombstone, or in the table already (redelivered before the seek)
            run = runs.get(key)
            if run is None:
                buf = buffers.setdefault(key, [])
                if not buf or isinstance(buf[-1], _Rows):
                    buf.append([])
                run = runs[key] = buf[-1]
            run.append(r)
        self._count()
        self._after_put(runs)

    def put_batch(self, batch):
        """The batch path (module docstring): the batch's columns buffered
        per topic partition, or ``put`` of its records where they cannot be."""
        table = self._kafka_columns(batch) if self.kafka_format else self._value_columns(batch)
        if table is None:
            self.put(batch.records())
            return
        import numpy as np
        import pyarrow as pa
        rows = batch.rows
        topic_col = rows.column("topic")
        topics = topic_col.dictionary.to_pylist()
        idx = topic_col.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        parts = rows.column("partition").to_numpy(zero_copy_only=False).astype(np.int64)
        offsets = rows.column("offset").to_numpy(zero_copy_only=False)
        tp = (idx << 32) | parts
        put = []
        for k in np.unique(tp).tolist():
            key = (topics[k >> 32], k & 0xFFFFFFFF)
            mine = tp == k
            # in the table already (redelivered before the seek): left out, as put does
            mine &= offsets >= self.base.get(key, -1)
            if not mine.any():
                continue
            piece = table if mine.all() else table.filter(pa.array(mine))
            self.buffers.setdefault(key, []).append(_Rows(piece, int(offsets[mine][-1])))
            put.append(key)
        self._count()
        self._after_put(put)

    def _after_put(self, keys) -> None:
        """The buffered rows written as data files once ``flush.size``
        records are buffered (_stage: memory, not a commit); and, when a
        backlog has just been read to its end (the consumer, behind since
        open or at an earlier put, has now fetched every partition of the
        task up to the end its last fetch saw: current_lag 0), a commit asked of
        the worker at once, which would otherwise come up to
        ``offset.flush.interval.ms`` later with nothing left to read
        meanwhile. A task keeping up with a steady stream is never behind,
        so it still commits at the worker's interval, not every poll."""
        request = getattr(self.context, "request_commit", None)
        if self.buffered >= self.flush_size:
            self._stage()
        lag = getattr(self.context, "current_lag", None)
        self.end_known = False
        if lag is None or request is None or not keys:
            return
        # every partition the task has, not only this put's: another may still be behind
        assigned = getattr(self.context, "assignment", None)
        keys = set(keys) | set(assigned() if assigned is not None else ())
        lags = [lag(topic, partition) for topic, partition in keys]
        # a consumer that keeps no end (None) would never see a backlog's end: the
        # interval's commits are then not let pass (pre_commit)
        self.end_known = None not in lags
        if any(n != 0 for n in lags):
            self.behind = True
        elif self.behind and self._pending():
            self.behind = False
            request()

    def _value_columns(self, batch):
        """The ``value`` format's table of ``batch`` (arrow_table's columns
        and types) from the converter's Arrow columns, or None where the
        batch has none or a field they do not hold as the per-record path
        writes it (Time: a time of day per record, which arrow_table refuses)."""
        import pyarrow as pa
        values, schema = batch.values, batch.value_schema
        if not isinstance(values, ColumnarValues) or isinstance(schema, list) or \
                schema is not None and (schema.type != "struct" or
                                        any(f.schema.name == cdata.TIME for f in schema.fields)):
            return None
        got, rows = values.table, batch.rows
        if schema is None:
            # schemaless: the columns from_pylist infers of the dicts, as arrow_table has them
            cols, names = list(got.columns), list(got.column_names)
        else:
            cols = [got.column(f.name).cast(arrow_type(f.schema)) for f in schema.fields]
            names = [f.name for f in schema.fields]
        cols += [pa.chunked_array([rows.column("offset")]),
                 pa.chunked_array([_record_stamps(rows)])]
        return pa.Table.from_arrays(cols, names=names + ["__kafka_offset", "__kafka_timestamp"])

    def _kafka_columns(self, batch):
        """The ``kafka`` format's table of ``batch``, _kafka_batch's columns
        from the consumer's: the key and value columns are the log's bytes,
        what ByteArrayConverter (which check_converters requires) hands on."""
        import pyarrow as pa
        import pyarrow.compute as pc
        if getattr(batch.key_schema, "type", None) != "bytes" or \
                getattr(batch.value_schema, "type", None) != "bytes":
            return None
        rows = batch.rows
        stamps = _record_stamps(rows)
        kind = pc.if_else(pc.equal(rows.column("timestamp_type"), 1), 1, 0).cast(pa.int32())
        return pa.table({
            "key": rows.column("key"),
            "value": rows.column("value"),
            "topic": rows.column("topic").cast(pa.string()),
            "partition": rows.column("partition"),
            "offset": rows.column("offset"),
            "timestamp": stamps.cast(pa.timestamp("us", tz="UTC")),
            # -1 (none) where the record had no timestamp, as Kafka's
            "timestampType": pc.if_else(stamps.is_null(), -1, kind).cast(pa.int32()),
        })

    def pre_commit(self, current_offsets):
        # A backlog read in several intervals would otherwise be several snapshots (a
        # Parquet file set, manifests and a catalog commit each) where one does: its
        # end asks for the commit (_after_put). The group's offsets stay the table's.
        interval = getattr(self.context, "interval_commit", None)
        if self.behind and self.end_known and self.deferred < MAX_DEFERRED and \
                interval is not None and interval():
            self.deferred += 1
        else:
            self.deferred = 0
            self._commit()
        return {k: v for k, v in self.base.items() if k in current_offsets}

    # -- one commit -------------------------------------------------------------------

    def _batch(self, keys):
        """The Arrow table of the buffered runs of ``keys``: a taken batch's
        table as it is, records one piece per run sharing a value schema,
        concatenated (columns unified)."""
        import pyarrow as pa
        pieces = []
        for topic, partition in keys:
            for run in self.buffers[(topic, partition)]:
                if self.kafka_format:
                    pieces.append(run.table if isinstance(run, _Rows) else
                                  self._kafka_batch(topic, partition, run))
                    continue
                for t in [run.table] if isinstance(run, _Rows) else \
                        self._value_tables(topic, partition, run):
                    pieces.append(t.add_column(0, "__kafka_partition",
                                               pa.array([partition] * t.num_rows, pa.int32())))
        table = pieces[0] if len(pieces) == 1 else \
            pa.concat_tables(pieces, promote_options="permissive")
        return table if self.kafka_format else iceberg_ready(table)

    @staticmethod
    def _value_tables(topic, partition, recs) -> list:
        """arrow_table of each run of ``recs`` sharing a value schema."""
        tables, start = [], 0
        for i in range(1, len(recs) + 1):
            if i == len(recs) or recs[i].value_schema != recs[start].value_schema:
                tables.append(arrow_table(recs[start:i], f"{topic}-{partition}",
                                          "the Iceberg sink"))
                start = i
        return tables

    def _kafka_batch(self, topic, partition, recs):
        """The ``kafka`` record format of records of one topic partition:
        one column list per field, each made an Arrow array at once."""
        import pyarrow as pa
        kinds = TIMESTAMP_TYPES
        n = len(recs)
        # timestampType -1 (none) where the record had no timestamp, as Kafka's
        return pa.table({
            "key": pa.array([r.key for r in recs], pa.binary()),
            "value": pa.array([r.value for r in recs], pa.binary()),
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array([partition] * n, pa.int32()),
            "offset": pa.array([r.kafka_offset for r in recs], pa.int64()),
            "timestamp": pa.array([r.timestamp for r in recs], pa.int64())
                           .cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([-1 if r.timestamp is None else
                                       kinds.get(r.timestamp_type, 0) for r in recs], pa.int32()),
        })

    def _conform(self, batch, table_schema):
        """``batch`` with the table's columns, order and types (missing: nulls)."""
        import pyarrow as pa
        target = table_schema.as_arrow()
        cols = [batch.column(f.name).cast(f.type) if f.name in batch.column_names
                else pa.nulls(batch.num_rows, f.type) for f in target]
        return pa.Table.from_arrays(cols, schema=target)

    def _fence(self, stored: dict, keys: list) -> list:
        """The partitions among ``keys`` that the table has moved since this
        task last saw it (another task wrote them)."""
        return [k for k in keys if stored.get(k) != self.base.get(k)]

    def _stage(self) -> None:
        """``flush.size``: each partition's buffered rows written as data
        files now, freeing the memory they held; the next commit adds the
        files to its snapshot, so a backlog is one snapshot, not one per
        ``flush.size``. Columns the table lacks are added first, on their
        own (evolution on; off, they are left out as a commit leaves them)."""
        from pyiceberg.io.pyarrow import _dataframe_to_data_files
        keys = [k for k, b in self.buffers.items() if b]
        if not keys:
            return
        batches = {k: self._batch([k]) for k in keys}
        table = self._load(create_from=batches[keys[0]].schema)
        for k, batch in batches.items():
            if self.config["iceberg.tables.evolve-schema-enabled"]:
                self._evolve(table, batch)
            # pyiceberg's own writer of an append's files (Transaction.append's)
            files = list(_dataframe_to_data_files(table.metadata,
                                                  self._conform(batch, table.schema()),
                                                  table.io, uuid.uuid4()))
            had, _, rows = self.staged.get(k, ([], None, 0))
            last = _last_offset(self.buffers.pop(k)[-1])
            self.staged[k] = (had + files, last + 1, rows + batch.num_rows)
        self._count()

    def _evolve(self, table, batch) -> None:
        """The columns of ``batch`` the table lacks added, in a commit of their own."""
        from pyiceberg.exceptions import CommitFailedException
        for attempt in range(self.config["iceberg.commit.retries"] + 1):
            have = set(table.schema().column_names)
            if all(n in have for n in batch.column_names):
                return
            try:
                with table.update_schema() as upd:
                    upd.union_by_name(batch.schema)
                return
            except CommitFailedException:
                if attempt == self.config["iceberg.commit.retries"]:
                    raise
                table.refresh()      # another writer moved the table: evolve what it left

    def _append(self, tx, table, batch, keys, props: dict) -> None:
        """The snapshot of one commit in ``tx``: ``batch`` (the buffered
        rows, or None) and the data files staged for ``keys``."""
        files = [f for k in keys for f in self.staged.get(k, ((),))[0]]
        if batch is not None and self.config["iceberg.tables.evolve-schema-enabled"]:
            have = set(table.schema().column_names)
            if any(n not in have for n in batch.column_names):
                with tx.update_schema() as upd:
                    upd.union_by_name(batch.schema)
        if not files:
            tx.append(self._conform(batch, tx.table_metadata.schema()), snapshot_properties=props)
            return
        from pyiceberg.io.pyarrow import _dataframe_to_data_files
        with tx.update_snapshot(snapshot_properties=props).fast_append() as app:
            if batch is not None:
                files += _dataframe_to_data_files(
                    tx.table_metadata, self._conform(batch, tx.table_metadata.schema()),
                    table.io, app.commit_uuid)
            for f in files:
                app.append_data_file(f)

    def _next_offset(self, key) -> int:
        """The offset after the last row of ``key`` put: buffered, else staged."""
        runs = self.buffers.get(key)
        return _last_offset(runs[-1]) + 1 if runs else self.staged[key][1]

    def _commit(self):
        from pyiceberg.exceptions import CommitFailedException
        keys = [k for k, b in self.buffers.items() if b]
        keys += [k for k in self.staged if k not in keys]
        if not keys:
            return
        batch = self._batch_of(keys)
        retries = self.config["iceberg.commit.retries"]
        for attempt in range(retries + 1):
            table = self._load(create_from=None if batch is None else batch.schema)
            if table is None:
                raise ConnectException(f"table {self.identifier} is gone: its staged data "
                                       f"files have no table to go into")
            stored = table_offsets(table, self.group)
            lost = self._fence(stored, keys)
            if lost:
                # another task wrote these partitions since this one last saw the table
                # (it owned them after a rebalance): drop them, go on from the table
                log.warning("%s: partitions %s were written by another task; re-seeking",
                            self.identifier, lost)
                for k in lost:
                    self.buffers.pop(k, None)
                    self.staged.pop(k, None)
                    if k in stored:
                        self.base[k] = stored[k]
                self.context.offset({k: stored[k] for k in lost if k in stored})
                keys = [k for k in keys if k not in lost]
                if not keys:
                    break
                batch = self._batch_of(keys)
            merged = dict(stored)
            for k in keys:
                merged[k] = self._next_offset(k)
            doc: dict = {}
            for (t, p), off in sorted(merged.items()):
                doc.setdefault(t, {})[str(p)] = off
            try:
                tx = table.transaction()
                self._append(tx, table, batch, keys, {PROPERTY + self.group: json.dumps(doc)})
                tx.commit_transaction()
            except CommitFailedException:
                if attempt == retries:
                    raise
                self.commit_retries += 1
                time.sleep(min(0.01 * 2 ** attempt, 1.0) * (1 + random.random()))
                continue
            for k in keys:
                self.base[k] = merged[k]
            break
        for k in keys:
            self.buffers.pop(k, None)
            self.staged.pop(k, None)
        self._count()

    def _batch_of(self, keys):
        """_batch of those of ``keys`` with buffered rows; None where none has."""
        keys = [k for k in keys if self.buffers.get(k)]
        return self._batch(keys) if keys else None
