"""Persistent queries: ``CREATE STREAM out AS SELECT ... FROM in WHERE ...``,
``SHOW QUERIES``, ``EXPLAIN <id>``, ``TERMINATE <id>``, in ksqlDB's words.

A persistent query is a filter and projection over one topic, written
as JSON values to another topic, kept running by the node's query
runner (query_runner.py) until it is terminated. This module is both
sides of the one record that describes it:

- the statements (``Statements``, called by Session.query for the
  ``kafkalite sql`` command and ``POST /query``): checked here (one
  input topic, a SELECT whose rows are per record, the user's Read on
  the input and Write on the output), then recorded in the compacted
  topic of queries (queries_topic.py: its record format);

- the plan (``QueryPlan``, used by the runner): the SELECT split, through
  DuckDB's own parse tree, into the WHERE (a mask over a batch of input
  records) and the projection without it (over the rows the mask keeps,
  one output row each, in order), each run by DuckDB on one Arrow batch.
  Its Streams topology (``topology``) reads the input, filters, projects
  and writes the output under exactly_once_v2: each commit's output
  records and input offsets are one transaction.

Output records keep the input record's key and timestamp (ksqlDB's, for
a CREATE STREAM AS SELECT without PARTITION BY); the value is a JSON
object of the projection's columns (bytes as UTF-8 text, times ISO
8601, as ``POST /query`` prints them). A query reads its input from the
start (``auto.offset.reset`` earliest).

Who may call: Statements, one thread per Session; QueryPlan, the
runner's stream thread of that query. What it may import: as sql/.
"""
from __future__ import annotations

import json
import re
import time

import duckdb
import pyarrow as pa

from kafkalite.sql.errors import QueryError
from kafkalite.sql.queries_topic import (QUERIES_TOPIC, ensure_queries_topic, query_key,
                                         read_queries, seal, status_key)
from kafkalite.sql.topic_source import BASE_SCHEMA, input_table

APPLICATION_PREFIX = "_kafkalite-query-"     # a query's Streams application.id's

_NAME = r'"[^"]+"|[A-Za-z_][\w.\-]*'
CREATE_STREAM = re.compile(rf"^\s*CREATE\s+STREAM\s+({_NAME})\s+AS\s+(.*?)\s*;?\s*$",
                           re.IGNORECASE | re.DOTALL)
CREATE_TABLE = re.compile(rf"^\s*CREATE\s+TABLE\s+({_NAME})\s+AS\s+(SELECT\b.*?)\s*;?\s*$",
                          re.IGNORECASE | re.DOTALL)
SHOW_QUERIES = re.compile(r"^\s*(?:SHOW|LIST)\s+QUERIES\s*;?\s*$", re.IGNORECASE)
TERMINATE = re.compile(r"^\s*TERMINATE\s+(\S+?)\s*;?\s*$", re.IGNORECASE)
# EXPLAIN of a query id only: EXPLAIN SELECT ... stays DuckDB's
EXPLAIN = re.compile(r"^\s*(?:EXPLAIN|DESCRIBE)\s+(C[ST]AS_\w+)\s*;?\s*$", re.IGNORECASE)
# ksqlDB's CREATE STREAM ... AS SELECT ... ends with it; the query's nature, not a clause
_EMIT_CHANGES = re.compile(r"\s+EMIT\s+CHANGES\s*$", re.IGNORECASE)
_STARTS = re.compile(r"^\s*(?:(?:CREATE\s+STREAM|SHOW\s+QUERIES|LIST\s+QUERIES|TERMINATE)\b|"
                     rf"CREATE\s+TABLE\s+(?:{_NAME})\s+AS\s+SELECT\b|"
                     r"(?:EXPLAIN|DESCRIBE)\s+C[ST]AS_)", re.IGNORECASE)


def is_statement(sql: str) -> bool:
    """Whether ``sql`` is one of this module's statements (not DuckDB's)."""
    return _STARTS.match(sql) is not None


def application_id(query: dict) -> str:
    """The query's Streams application.id (its group, its transactional.id's
    prefix): with its creation time, so that a query created after another
    of the same id was terminated starts afresh, not from its offsets."""
    return f"{APPLICATION_PREFIX}{query['id']}-{query['created_ms']}"


# ---- the plan: the SELECT as a mask and a projection over one batch -----------------------------

class QueryPlan:
    """``select``: the query's SELECT over ``input``. ``mask(batch)`` and
    ``values(batch)`` take a Streams topology batch (streams/records.py:
    key, value, timestamp int64 ms, partition, offset, headers)."""

    def __init__(self, select: str, input_topic: str):
        self.input = input_topic
        self.mask_sql, self.project_sql = split_select(select)
        self._con = duckdb.connect(config={
            "enable_external_access": False, "autoinstall_known_extensions": False,
            "autoload_known_extensions": False, "threads": 1, "memory_limit": "256MB"})

    def _run(self, sql: str, batch: pa.RecordBatch) -> pa.Table:
        self._con.register(self.input, input_table(batch))
        try:
            return self._con.sql(sql).to_arrow_table()
        finally:
            self._con.unregister(self.input)

    def check(self) -> None:
        """Both statements over no records: DuckDB's error if either fails to bind."""
        for sql in (self.mask_sql, self.project_sql):
            if sql is not None:
                self._con.register(self.input, BASE_SCHEMA.empty_table())
                try:
                    self._con.sql(sql).to_arrow_table()
                finally:
                    self._con.unregister(self.input)

    def mask(self, batch: pa.RecordBatch) -> pa.Array:
        if self.mask_sql is None:
            return pa.array([True] * batch.num_rows, pa.bool_())
        return self._run(self.mask_sql, batch).column(0).combine_chunks().fill_null(False)

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        from kafkalite.sql.values import json_cell
        answer = self._run(self.project_sql, batch)
        names = answer.column_names
        columns = [c.to_pylist() for c in answer.columns]
        return pa.array([json.dumps({n: json_cell(v) for n, v in zip(names, row)},
                                    separators=(",", ":"))
                         for row in zip(*columns)], pa.string())

    def topology(self, output: str):
        """The Streams topology: input -> filter -> project -> output."""
        from kafkalite.streams import Consumed, Produced, Serdes, StreamsBuilder
        from kafkalite.streams.records import columnar
        builder = StreamsBuilder()
        (builder.stream(self.input, Consumed.with_(Serdes.bytes(), Serdes.bytes()))
         .filter(columnar(lambda batch: self.mask(batch)))
         .map_values(columnar(lambda batch: self.values(batch)))
         .to(output, Produced.with_(Serdes.bytes(), Serdes.string())))
        return builder.build()


def plan_for(query: dict):
    """The plan of a recorded query: CREATE TABLE's aggregate (windowed.py)
    or CREATE STREAM's filter and projection."""
    if query.get("kind") == "table":
        from kafkalite.sql.windowed import AggregatePlan
        return AggregatePlan(query["select"], query["input"])
    return QueryPlan(query["select"], query["input"])


def split_select(select: str) -> tuple[str | None, str]:
    """(``SELECT coalesce(<where>, false) FROM in``, the SELECT without its
    WHERE), rebuilt from DuckDB's parse tree of ``select`` (so a WHERE
    inside a string or a subquery is never cut by a pattern)."""
    con = duckdb.connect()
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0])
        if tree.get("error"):
            raise ValueError(tree.get("error_message", "not a SELECT"))
        node = tree["statements"][0]["node"]
        where = node.get("where_clause")
        node["where_clause"] = None
        project = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchall()[0][0]
        if where is None:
            return None, project
        node["select_list"] = [where]
        mask = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(tree)]).fetchall()[0][0]
        return mask, project
    finally:
        con.close()


# ---- the statements ------------------------------------------------------------------------------

class Statements:
    """The persistent-query statements of one Session (session.py):
    ``run(sql)`` answers a pyarrow Table, or raises QueryError."""

    def __init__(self, session):
        self.session = session

    def run(self, sql: str) -> pa.Table:
        if (m := CREATE_STREAM.match(sql)):
            return self.create_stream(m[1], m[2], sql)
        if (m := CREATE_TABLE.match(sql)):
            return self.create_table(m[1], m[2], sql)
        if SHOW_QUERIES.match(sql):
            return self.show_queries()
        if (m := TERMINATE.match(sql)):
            return self.terminate(m[1])
        if (m := EXPLAIN.match(sql)):
            return self.explain(m[1])
        raise QueryError("expected CREATE STREAM <name> AS SELECT ... FROM <topic> [WHERE ...], "
                         "CREATE TABLE <name> AS SELECT ... GROUP BY ..., SHOW QUERIES, "
                         "EXPLAIN <query id> or TERMINATE <query id>", "syntax")

    def create_stream(self, name: str, select: str, sql: str) -> pa.Table:
        output = name[1:-1] if name.startswith('"') else name
        select = _EMIT_CHANGES.sub("", select)      # ksqlDB's form ends with it
        try:
            inputs = self.session.per_record_topics(select, "CREATE STREAM ... AS SELECT")
        except QueryError as exc:
            # DuckDB's positions are the SELECT's: say so
            where = " of its SELECT" if re.search(r"at line \d+, column \d+$", str(exc)) else ""
            raise QueryError(f"CREATE STREAM {output}: {exc}{where}", exc.kind) from None
        input_topic = inputs[0]
        _check_output(output, input_topic, "STREAM")
        try:
            plan = QueryPlan(select, input_topic)
        except (duckdb.Error, ValueError, KeyError, IndexError) as exc:
            raise QueryError(f"CREATE STREAM {output}: the SELECT cannot be split into a "
                             f"filter and a projection ({exc})", "invalid") from None
        try:
            plan.check()
        except duckdb.Error as exc:
            from kafkalite.sql.errors import describe
            raise QueryError(f"CREATE STREAM {output}: {describe(exc, select)} (a persistent "
                             f"query sees the columns partition, offset, timestamp, key, value, "
                             f"headers; not the registry's value columns yet)",
                             "invalid") from None
        return self._record("stream", output, input_topic, select, sql)

    def create_table(self, name: str, select: str, sql: str) -> pa.Table:
        """``CREATE TABLE out AS SELECT ... GROUP BY ...`` (windowed.py)."""
        from kafkalite.sql.windowed import AggregatePlan, cut_window
        output = name[1:-1] if name.startswith('"') else name
        select = _EMIT_CHANGES.sub("", select)
        try:
            input_topic = self.session.topic_of(cut_window(select)[0],
                                                "CREATE TABLE ... AS SELECT")
            _check_output(output, input_topic, "TABLE")
            AggregatePlan(select, input_topic)
        except QueryError as exc:
            where = " of its SELECT" if re.search(r"at line \d+, column \d+$", str(exc)) else ""
            raise QueryError(f"CREATE TABLE {output}: {exc}{where}", exc.kind) from None
        return self._record("table", output, input_topic, select, sql)

    def _record(self, kind: str, output: str, input_topic: str, select: str,
                sql: str) -> pa.Table:
        """A checked query into QUERIES_TOPIC (the runner starts it)."""
        self.session.authorize_write(output)
        queries = self.queries()
        for q in queries.values():
            if q["output"] == output:
                raise QueryError(f"{q.get('kind', 'stream')} {output} exists: query {q['id']} "
                                 f"writes it (TERMINATE it first)", "invalid")
        partitions = self._ensure_output(input_topic, output)
        query_id = _new_id(output, queries, "CTAS_" if kind == "table" else "CSAS_")
        record = {"id": query_id, "sql": " ".join(sql.split()).rstrip(";"), "select": select,
                  "input": input_topic, "output": output, "partitions": partitions,
                  "principal": self.session.principal, "created_ms": int(time.time() * 1000)}
        if kind == "table":     # absent: a stream (the records before tables)
            record["kind"] = kind
        # sealed with the owner's key file when this client has it (the
        # HTTP door, the owner's CLI): the runner runs nothing unsealed on a
        # server with security on (queries_topic.py)
        record = seal(record, self.session.client_config.get("curve.secret.key"))
        self._write({query_key(query_id): json.dumps(record).encode()})
        return pa.table({"query_id": [query_id],
                         "message": [f"Created query with ID {query_id}: {input_topic} -> "
                                     f"{output}"]})

    def show_queries(self) -> pa.Table:
        rows = list(self.queries().values())
        return pa.table({"query_id": [q["id"] for q in rows],
                         "state": [q["state"] for q in rows],
                         "input": [q["input"] for q in rows],
                         "output": [q["output"] for q in rows],
                         "statement": [q["sql"] for q in rows]},
                        schema=pa.schema([(n, pa.string()) for n in
                                          ("query_id", "state", "input", "output", "statement")]))

    def explain(self, query_id: str) -> pa.Table:
        q = self._one(query_id)
        if q.get("kind") == "table":
            steps = [("source", q["input"]), *plan_for(q).explain(),
                     ("sink", f"{q['output']} (JSON values, keyed by the group key: windowed, "
                              f"key bytes + window start)")]
        else:
            mask, project = split_select(q["select"])
            steps = [("source", q["input"]), ("filter", mask or "(none)"), ("project", project),
                     ("sink", f"{q['output']} (JSON values, key and timestamp of the input "
                              f"record)")]
        steps += [("state", q["state"] + (f": {q['error']}" if q.get("error") else "")),
                  ("host", q.get("host") or ""), ("owner", q.get("principal") or ""),
                  ("application.id", application_id(q))]
        return pa.table({"step": [s for s, _ in steps], "detail": [d for _, d in steps]})

    def terminate(self, query_id: str) -> pa.Table:
        q = self._one(query_id)
        self.session.authorize_write(q["output"])
        self._write({query_key(q["id"]): None, status_key(q["id"]): None})
        return pa.table({"query_id": [q["id"]], "message": [f"Query {q['id']} terminated"]})

    def _one(self, query_id: str) -> dict:
        queries = self.queries()
        q = queries.get(query_id.upper())
        if q is None:
            known = ", ".join(sorted(queries)) or "none"
            raise QueryError(f"no query {query_id} (running: {known})", "unknown_query")
        return q

    # ---- the queries topic ----

    def queries(self) -> dict:
        """Every live query by id, with its runner's state (PENDING before
        a runner says)."""
        return read_queries(self.session.client_config, self.session.timeout)

    def _write(self, records: dict) -> None:
        from kafkalite.client import Producer
        ensure_queries_topic(self.session.client_config, self.session.timeout)
        producer = Producer({**self.session.client_config, "acks": "all",
                             "enable.idempotence": True})
        try:
            for key, value in records.items():
                producer.produce(QUERIES_TOPIC, value, key=key)
            if producer.flush(self.session.timeout):
                        raise QueryError(f"the query could not be recorded in {QUERIES_TOPIC}")
        finally:
            producer.close()

    def _ensure_output(self, input_topic: str, output: str) -> int:
        """The output topic's partitions; created like the input when missing."""
        from kafkalite.client import AdminClient, NewTopic
        admin = AdminClient(self.session.client_config)
        try:
            md = admin.list_topics(timeout=self.session.timeout)
            if output not in md.topics:
                n = len(md.topics[input_topic].partitions)
                admin.create_topics([NewTopic(output, n)])[output].result(self.session.timeout)
                return n
            return len(md.topics[output].partitions)
        finally:
            admin.close()


def _check_output(output: str, input_topic: str, kind: str) -> None:
    if output == input_topic:
        raise QueryError(f"CREATE {kind} {output}: the output topic is the query's input",
                         "invalid")
    if output.startswith("_"):
        raise QueryError(f"CREATE {kind} {output}: a name starting with '_' is an internal "
                         f"topic's", "invalid")


def _new_id(output: str, queries: dict, prefix: str = "CSAS_") -> str:
    """ksqlDB's form: CSAS_<OUTPUT>_<n> (a table's: CTAS_), n one more than
    any id's so far."""
    base = prefix + re.sub(r"\W", "_", output).upper()
    n = 1 + max((int(i.rsplit("_", 1)[1]) for i in queries if i.rsplit("_", 1)[1].isdigit()),
                default=-1)
    return f"{base}_{n}"
