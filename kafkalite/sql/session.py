"""One user's SQL over the topics of one cluster: a DuckDB connection whose
tables are the topics a query names.

A query (``query``; a script of statements separated by ``;`` runs them
in order, answering the last) is parsed by DuckDB first; each table a
statement names (the cursor's ``get_table_names``, bound against the
session's database: common table expressions are not tables, nor are the
tables and views the session's statements made) is checked
(``authorize``: the HTTP app's ACL check for the user) and, if it is a
topic, registered as a RecordBatchReader over its history
(topic_source.py; an Iceberg topic whose table has a commit:
iceberg_source.py, its table's files and the log past them; with the
value's columns of values.py). A name that is
no topic is left to DuckDB, whose catalog error becomes "unknown topic".
Each query gets a fresh connection (a cursor of the session's one
database, whose configuration is locked once made): a reader can be read
once, and a topic's bound is the one at the query's start. The
session's own tables live in that database, from one query to the next.

The connection cannot reach files, the network or extensions
(``enable_external_access`` off, the configuration locked), so a query
over HTTP reads topics only; its memory is bounded by ``memory_limit``
(DuckDB spills or fails past it, never the process), its threads by
``threads``. ``interrupt`` (from any thread) cancels a running query.

``... EMIT CHANGES`` (``emit_changes``): a SELECT with WHERE over one
topic and no aggregate, ordering, limit, join or window, run over each
batch of records the topic gets from the query's start on (a filter and
projection are per-record, so per batch is exact).

Errors are QueryError: one line naming the problem, with its line and
column when DuckDB gives them.

Who may call: the ``kafkalite sql`` command, the HTTP app (http_query.py),
one thread per Session but for ``interrupt``.
"""
from __future__ import annotations

import json
import re
import threading

import duckdb
import pyarrow as pa

from kafkalite.sql import iceberg_source, topic_source, values
from kafkalite.sql.errors import QueryError, describe
from kafkalite.sql.values import json_cell

__all__ = ["QueryError", "Session", "describe", "json_cell"]    # json_cell, describe: re-exported

EMIT_CHANGES = re.compile(r"\s+EMIT\s+CHANGES\s*;?\s*$", re.IGNORECASE)
# what a per-batch run of a query would answer wrongly: EMIT CHANGES refuses them
_NOT_PER_RECORD = re.compile(r"\b(GROUP\s+BY|ORDER\s+BY|LIMIT|HAVING|JOIN|DISTINCT|OVER|"
                             r"WINDOW|QUALIFY|UNION|INTERSECT|EXCEPT)\b", re.IGNORECASE)
_QUOTED = re.compile(r'"(?:[^"]|"")*"|\'(?:[^\']|\'\')*\'')
DEFAULT_MEMORY_LIMIT = "1GB"
DEFAULT_THREADS = 2


class Session:
    """``client_config``: the Consumer's connection properties (bootstrap
    servers, security); ``registry_url``: the schema registry whose
    subjects give the value columns (None: raw values only);
    ``authorize(topic)``: raises QueryError(kind="denied") for a topic
    the user may not read (None: every topic); ``iceberg_catalog``: the
    REST catalog of Iceberg topics' tables (None: the server's; "": none,
    every topic read from its log)."""

    def __init__(self, client_config: dict, registry_url: str | None = None,
                 registry_user_info: str | None = None, memory_limit: str = DEFAULT_MEMORY_LIMIT,
                 threads: int = DEFAULT_THREADS, timeout: float = 30.0, authorize=None,
                 authorize_write=None, principal: str | None = None,
                 iceberg_catalog: str | None = None):
        self.client_config = client_config
        # an Iceberg topic's table (iceberg_source.py): the REST catalog's
        # URL (None: the server's iceberg_rest endpoint, asked once; "":
        # read every topic from its log), as the registry's user
        self._iceberg_uri, self._iceberg_catalog = iceberg_catalog, None
        self._user_info = registry_user_info
        self._table_reads: list = []        # the last query's iceberg_source.Counts
        # persistent queries (persistent.py): Write on a CREATE STREAM's
        # output, and who created it (None: the owner's tools)
        self._authorize_write, self.principal = authorize_write, principal
        self.registry = values.registry_client(registry_url, registry_user_info) \
            if registry_url else None
        self.memory_limit, self.threads, self.timeout = memory_limit, threads, timeout
        self.authorize = authorize
        self._db: duckdb.DuckDBPyConnection | None = None     # the database (_connect)
        self._con: duckdb.DuckDBPyConnection | None = None    # the running query's cursor
        self._admin = None
        self._value_columns: list = []      # the last query's, for values_decoded
        self._lock = threading.Lock()
        self._interrupted = False

    # ---- ad-hoc queries -------------------------------------------------------------------------

    def query(self, sql: str) -> pa.RecordBatchReader:
        """The answer of ``sql`` (no EMIT CHANGES) as a stream of batches;
        a persistent-query statement's (CREATE STREAM, SHOW QUERIES,
        EXPLAIN, TERMINATE: persistent.py) too."""
        sql = sql.strip().rstrip(";")
        from kafkalite.sql import persistent
        if persistent.is_statement(sql):
            answer = persistent.Statements(self).run(sql)
            # one batch even when empty: the HTTP answer's header is the first batch's columns
            return pa.RecordBatchReader.from_batches(answer.schema, answer.to_batches() or [
                pa.RecordBatch.from_pylist([], schema=answer.schema)])
        con = self._connect()
        self._value_columns, self._table_reads = [], []
        statements = _statements(con, sql)
        for statement in statements[:-1]:       # a script: run for its effect, in order
            self._statement(con, statement)
        relation = self._statement(con, statements[-1])
        if relation is None:        # a statement without rows (SET, CREATE TABLE ...)
            return pa.RecordBatchReader.from_batches(pa.schema([]), [])
        try:
            return relation.to_arrow_reader(8192)
        except duckdb.Error as exc:
            raise self._error(exc, statements[-1]) from None

    def _statement(self, con, sql: str):
        """One statement of a query run on ``con`` with the topics it names
        registered: its relation (a SELECT's is run when read), or None."""
        try:        # an interrupt lands in whichever DuckDB call runs (_run)
            tables = {topic: self._table(topic) for topic in self._topics_named(sql)}
            for topic, (_, schema) in tables.items():
                con.register(topic, pa.RecordBatchReader.from_batches(schema, []))
            columns = self._scanned_columns(con, sql)
            for topic, table in tables.items():
                con.register(topic, self.history_reader(topic, columns, table))
        except duckdb.Error as exc:
            raise self._error(exc, sql) from None
        return _relation(con, sql, self._error)

    def fetch(self, reader: pa.RecordBatchReader, sql: str = ""):
        """The batches of ``reader`` (query's answer), DuckDB's errors while
        they are computed (an interrupt, the memory limit) as QueryError."""
        try:
            yield from reader
        except (duckdb.Error, pa.ArrowException) as exc:
            raise self._error(exc, sql) from None

    def history_reader(self, topic: str, columns: set[str] | None = None,
                       table=None) -> pa.RecordBatchReader:
        """``topic``'s whole history (to its last stable offset now) as a
        reader of its table's schema; of the value's columns only those in
        ``columns`` (None: all) are decoded, the others are null.
        ``table``: the topic's (value columns, schema) if known."""
        decoded, schema = table or self._table(topic)
        if decoded is not None:
            self._value_columns.append(decoded)
        iceberg = self._iceberg_table(topic)
        if iceberg is None:
            records = topic_source.history(self.client_config, topic, self.timeout)
        else:
            counts = iceberg_source.Counts()
            self._table_reads.append(counts)
            records = iceberg_source.history(self.client_config, topic, *iceberg, columns,
                                             self.timeout, counts)
        batches = _with_values(records, decoded, schema, columns)
        return pa.RecordBatchReader.from_batches(schema, batches)

    @property
    def rows_from_table_files(self) -> int:
        """How many rows the last query has read from Iceberg tables' files
        (the others came from the log)."""
        return sum(c.rows for c in self._table_reads)

    def _iceberg_table(self, topic: str):
        """(table, snapshot) of ``topic``'s Iceberg table when the topic is a
        key_value Iceberg topic whose table has a snapshot, else None (the
        topic is read from its log). A catalog the server does not serve
        reads the log too."""
        from kafkalite.client.admin import ConfigResource
        if self._iceberg_uri == "":
            return None
        resource = ConfigResource("topic", topic)
        admin = self._admin_client()
        try:
            entry = admin.describe_configs([resource])[resource].result().get("iceberg.mode")
            if entry is None or entry.value != "key_value":
                return None
            if self._iceberg_catalog is None:
                uri = self._iceberg_uri or admin.server_endpoints().get("iceberg_rest")
                if not uri:
                    self._iceberg_uri = ""
                    return None
                self._iceberg_catalog = iceberg_source.open_catalog(uri, self._user_info)
            return iceberg_source.current(self._iceberg_catalog, topic)
        except Exception:   # noqa: BLE001 -- no config, no catalog, no table to see: the log
            # holds the topic's records too (the user's Read on it is checked)
            return None

    @property
    def values_decoded(self) -> int:
        """How many values the last query has decoded into value columns
        (none when it reads none of them)."""
        return sum(v.decoded for v in self._value_columns)

    def _table(self, topic: str):
        """(the value columns or None, the table's schema) of ``topic``."""
        decoded = values.for_topic(self.registry, topic)
        schema = topic_source.BASE_SCHEMA if decoded is None else \
            pa.schema([*topic_source.BASE_SCHEMA, *decoded.fields])
        return decoded, schema

    def _scanned_columns(self, con, sql: str) -> set[str] | None:
        """The columns DuckDB's plan of ``sql`` reads from its tables (the
        topics registered as empty readers on ``con``): every table scan's
        projection, of all the tables at once (a column of one topic named
        like another's is read from both: more decoded, never less). None,
        every column, when the plan does not say: a statement EXPLAIN does
        not take (its error is the real run's to report), a scan with
        filters pushed into it."""
        try:
            plan = json.loads(con.execute("EXPLAIN (FORMAT json) " + sql).fetchall()[0][1])
        except duckdb.Error:
            if self._interrupted:
                raise QueryError("the query was cancelled", "cancelled") from None
            return None
        except (ValueError, IndexError, TypeError):
            return None
        names: set[str] = set()
        nodes = list(plan) if isinstance(plan, list) else [plan]
        while nodes:
            node = nodes.pop()
            if not isinstance(node, dict):
                return None
            nodes.extend(node.get("children", ()))
            info = node.get("extra_info") or {}
            if node.get("name") != "PYTHON_ARROW_SCAN":
                continue
            projected = info.get("Projections") if isinstance(info, dict) else None
            if projected is None or "Filters" in info:
                return None
            names.update([projected] if isinstance(projected, str) else projected)
        return names

    def interrupt(self) -> None:
        """Cancel the running query (any thread): it fails with QueryError
        (kind ``cancelled``); an EMIT CHANGES loop ends."""
        with self._lock:
            self._interrupted = True
            if self._con is not None:
                self._con.interrupt()

    def close(self) -> None:
        with self._lock:
            for con in (self._con, self._db):
                if con is not None:
                    con.close()
            self._con = self._db = None
            if self._admin is not None:
                self._admin.close()
                self._admin = None

    # ---- EMIT CHANGES ---------------------------------------------------------------------------

    @staticmethod
    def is_push(sql: str) -> bool:
        # ksqlDB's CREATE STREAM ... AS SELECT ... EMIT CHANGES is a persistent query
        from kafkalite.sql import persistent
        return EMIT_CHANGES.search(sql) is not None and not persistent.is_statement(sql)

    def emit_changes(self, sql: str):
        """Batches of the answer of ``sql`` (ending in EMIT CHANGES) over each
        batch of new records, until ``interrupt`` or the caller closes the
        generator. An empty batch now and then (a wait without records)."""
        sql = EMIT_CHANGES.sub("", sql.strip())
        topic, decoded, schema = self._per_record(sql, "EMIT CHANGES")
        con = self._con
        for batch in _with_values(topic_source.tail(self.client_config, topic, self.timeout),
                                  decoded, schema):
            if self._interrupted:
                return
            try:
                answer = self._run(con, sql, topic, pa.Table.from_batches([batch], schema))
            except QueryError:
                if self._interrupted:
                    return          # the interrupt landed in DuckDB: the loop ends, as promised
                raise
            # an empty answer has no batches: one empty batch lets the caller check a stop
            yield from answer.to_batches() if answer.num_rows else \
                [pa.RecordBatch.from_pylist([], schema=answer.schema)]

    def per_record_topics(self, sql: str, what: str) -> list[str]:
        """[the one topic] of ``sql``, a SELECT whose answer over a topic is
        the union of its answers over each batch of the topic (a filter and
        projection): QueryError naming what is not, for ``what``. Its
        DuckDB errors (unknown column, type mismatch) too."""
        return [self._per_record(sql, what)[0]]

    def _per_record(self, sql: str, what: str):
        """(topic, decoded value columns, schema) of a per-record ``sql``,
        checked over an empty batch on a fresh connection (``self._con``)."""
        con = self._connect()
        topic = self.topic_of(sql, what)
        # not in a quoted name or a string: a topic "late-orders-over-1h" is no OVER
        refused = _NOT_PER_RECORD.search(_QUOTED.sub(lambda m: " " * len(m[0]), sql))
        if refused:
            raise QueryError(f"{what} takes a SELECT ... WHERE over one topic; "
                             f"{' '.join(refused[1].upper().split())} is not supported with it "
                             f"(position {refused.start(1) + 1})")
        decoded = values.for_topic(self.registry, topic)
        schema = topic_source.BASE_SCHEMA if decoded is None else \
            pa.schema([*topic_source.BASE_SCHEMA, *decoded.fields])
        # an aggregate answers a row even over no records: per batch it would be wrong
        if self._run(con, sql, topic, schema.empty_table()).num_rows:
            raise QueryError(f"{what} takes a SELECT ... WHERE over one topic; an "
                             f"aggregate (count, sum, ...) is not supported with it")
        return topic, decoded, schema

    def topic_of(self, sql: str, what: str) -> str:
        """The one topic ``sql`` reads, the user's Read on it checked:
        QueryError for an unknown topic, or none, or more than one."""
        names, topics = self._table_names(sql), self._topics_named(sql)
        if not topics and names:
            raise describe(duckdb.CatalogException(f"Table with name {names[0]} does not "
                                                   f"exist!"), sql, self._topic_names)
        if len(topics) != 1:
            raise QueryError(f"{what} runs over exactly one topic (a SELECT ... FROM topic "
                             f"WHERE ...)")
        return topics[0]

    def authorize_write(self, topic: str) -> None:
        """QueryError(kind="denied") unless the user may write ``topic``."""
        if self._authorize_write is not None:
            self._authorize_write(topic)

    def _run(self, con, sql: str, topic: str, table: pa.Table) -> pa.Table:
        try:
            # an interrupt (Ctrl-C) lands in whatever DuckDB call runs: the
            # register of each new batch too (a CI run's EMIT CHANGES ended
            # with InterruptException's traceback and status 1, not 130)
            con.register(topic, table)
        except duckdb.Error as exc:
            raise self._error(exc, sql) from None
        relation = _relation(con, sql, self._error)
        try:
            return pa.table({}) if relation is None else relation.to_arrow_table()
        except duckdb.Error as exc:
            raise self._error(exc, sql) from None

    # ---- the connection, the topics a query names, errors ---------------------------------------

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """A fresh connection (a cursor) to the session's database: its
        topics are registered on it alone (a reader is read once). One
        database a session, not one a query: opening and closing one took
        15-90 ms each (its catalog, its threads), a cursor under 5 ms."""
        with self._lock:
            if self._con is not None:
                self._con.close()
            self._interrupted = False       # an interrupt ends the query it came during
            if self._db is None:
                self._db = duckdb.connect(config={
                    # topics only: no files, no network, no extensions to load
                    "enable_external_access": False, "autoinstall_known_extensions": False,
                    "autoload_known_extensions": False,
                    "memory_limit": self.memory_limit, "threads": self.threads})
                # no query may undo the above (SET enable_external_access, ...)
                self._db.execute("SET lock_configuration = true")
            self._con = self._db.cursor()
            return self._con

    def _table_names(self, sql: str) -> list[str]:
        """The tables ``sql`` names, bound against the session's database
        (``duckdb.get_table_names`` binds against DuckDB's default
        connection: an INSERT INTO a table of the session's was unknown
        there), the session's own tables left out: they are not topics."""
        con = self._con if self._con is not None else self._connect()
        try:
            names = con.get_table_names(sql)
        except duckdb.BinderException:
            # get_table_names binds the query, and some queries bind only
            # with their tables' columns (JOIN ... USING): the parser's tree
            # then, which DuckDB gives of a SELECT only (an INSERT ... SELECT,
            # an UPDATE: the tokens)
            names = _parsed_table_names(sql) if _is_select(con, sql) else _token_table_names(sql)
        except duckdb.Error as exc:
            raise self._error(exc, sql) from None
        return sorted(set(names) - _own_tables(con))

    def _topics_named(self, sql: str) -> list[str]:
        """The tables ``sql`` names that are topics, checked by ``authorize``."""
        names = self._table_names(sql)
        if self.authorize is not None:
            for name in names:
                self.authorize(name)
        existing = self._topic_names()
        return [name for name in names if name in existing]

    def _topic_names(self) -> set[str]:
        return set(self._admin_client().list_topics(timeout=self.timeout).topics)

    def _admin_client(self):
        # one AdminClient a session (its connections kept), not one a query
        if self._admin is None:
            from kafkalite.client import AdminClient
            self._admin = AdminClient(self.client_config)
        return self._admin

    def _error(self, exc: Exception, sql: str) -> QueryError:
        if isinstance(exc, duckdb.InterruptException) or self._interrupted:
            return QueryError("the query was cancelled", "cancelled")
        if isinstance(exc, pa.ArrowException) and isinstance(exc.__cause__, QueryError):
            return exc.__cause__
        return describe(exc, sql, self._topic_names)


def _parsed_table_names(sql: str) -> list[str]:
    """The tables ``sql`` names, read from DuckDB's parse tree (no binding):
    every BASE_TABLE reference but the common table expressions'."""
    tree = json.loads(duckdb.connect().execute("SELECT json_serialize_sql(?)", [sql])
                      .fetchall()[0][0])
    tables, ctes = set(), set()

    def walk(node):
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE" and "table_name" in node:
                tables.add(node["table_name"])
            for entry in (node.get("cte_map") or {}).get("map", []) if isinstance(
                    node.get("cte_map"), dict) else []:
                ctes.add(entry.get("key"))
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(tree)
    return sorted(tables - ctes)


def _own_tables(con) -> set[str]:
    """The tables and views the session's statements made (CREATE TABLE,
    CREATE VIEW): DuckDB's, not topics. Not the topics registered on ``con``
    (temporary views)."""
    return {name for (name,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE NOT internal UNION "
        "SELECT view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary").fetchall()}


def _statements(con, sql: str) -> list[str]:
    """The statements of ``sql`` (a script: ``CREATE TABLE t ...; INSERT
    INTO t ...; SELECT ... FROM t``), each with the text before it blanked
    but its line breaks, so that DuckDB's positions are the whole script's.
    ``sql`` as one statement when DuckDB does not parse it (its error is
    the run's to report)."""
    try:
        texts = [s.query for s in con.extract_statements(sql)]
    except duckdb.Error:
        return [sql]
    if len(texts) < 2:
        return [sql]
    statements, before = [], ""
    for text in texts:
        statements.append(re.sub(r"[^\n]", " ", before) + text)
        before += text
    return statements


def _is_select(con, sql: str) -> bool:
    try:
        return [s.type for s in con.extract_statements(sql)] == [duckdb.StatementType.SELECT]
    except duckdb.Error:
        return False


_TABLE_BEFORE = {"FROM", "JOIN", "INTO", "UPDATE"}


def _token_table_names(sql: str) -> list[str]:
    """The tables ``sql`` names, read from its tokens: the names after FROM,
    JOIN, INTO and UPDATE (and after a comma of a FROM list), not those
    followed by ``(`` (a table function), nor a common table expression's
    (``name AS (``). A name too many is no topic, or a topic registered
    but not read; it is still checked by ``authorize`` (it fails closed)."""
    tokens = duckdb.tokenize(sql)
    texts = [sql[start:end].strip() for (start, _), end in
             zip(tokens, [t[0] for t in tokens[1:]] + [len(sql)])]
    kinds = [kind for _, kind in tokens]
    identifier = duckdb.token_type.identifier
    names, ctes, i = set(), set(), 0
    while i < len(texts):
        if kinds[i] == identifier and [t.upper() for t in texts[i + 1:i + 3]] == ["AS", "("]:
            ctes.add(_unquoted(texts[i]))
        if texts[i].upper() not in _TABLE_BEFORE:
            i += 1
            continue
        i += 1
        while i < len(texts) and kinds[i] == identifier:
            while i + 2 < len(texts) and texts[i + 1] == "." and kinds[i + 2] == identifier:
                i += 2          # schema.table: the table
            if texts[i + 1:i + 2] != ["("]:
                names.add(_unquoted(texts[i]))
            i += 1
            if i < len(texts) and texts[i].upper() == "AS":
                i += 1
            if i < len(texts) and kinds[i] == identifier:
                i += 1          # an alias
            if i < len(texts) and texts[i] == ",":
                i += 1
                continue
            break
    return sorted(names - ctes)


def _unquoted(name: str) -> str:
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


def _relation(con, sql: str, error):
    """``con.sql(sql)``: the answer as a relation, read as Arrow without a
    copy (``execute`` makes one). Its errors name no position; ``execute``'s
    do, and a query DuckDB refuses is refused before any topic is read, so
    a refused query is run again through ``execute`` for its message."""
    try:
        return con.sql(sql)
    except duckdb.Error as exc:
        try:
            con.execute(sql)
        except duckdb.Error as positioned:
            raise error(positioned, sql) from None
        raise error(exc, sql) from None


def _with_values(batches, decoded, schema: pa.Schema, columns: set[str] | None = None):
    """``batches`` (BASE_SCHEMA) with the value's columns added (decoded
    only if named in ``columns``; None: all)."""
    for batch in batches:
        if decoded is not None:
            batch = pa.RecordBatch.from_arrays(
                [*batch.columns, *decoded.arrays(batch, columns)],
                schema=schema)
        yield batch
