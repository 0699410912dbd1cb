"""Aggregates in persistent queries: ``CREATE TABLE out AS SELECT <key>,
COUNT(*), SUM(x), MIN(x), MAX(x), AVG(x) FROM in [WHERE ...] [WINDOW
TUMBLING | HOPPING | SESSION (...)] GROUP BY <key> [EMIT CHANGES]``, in ksqlDB's
words (persistent.py records and lists it; the runner runs it).

The work is split where each engine is good at it:

- per record, DuckDB on each Arrow batch of the input (as QueryPlan's
  filter and projection): the WHERE, the GROUP BY expression (the new
  key, its text as UTF-8 bytes, or the bytes of a BLOB) and the
  aggregates' arguments, packed as one JSON object per record (DuckDB's
  ``to_json``, in C++) so that the repartition topic carries a string;
- the grouping and the aggregation, the Streams runtime: the records go
  through a repartition topic keyed by the group key (so that a key's
  records meet in one task), their arguments are unpacked (DuckDB's
  ``json_transform``) into a struct, and ``aggregate_columns`` (a
  columnar hash aggregate per batch, its window store and changelog)
  keeps count, sum, min and max per (key, window);
- each update is an output record (EMIT CHANGES): its key the group key
  (windowed: Kafka's time-windowed key, the key's bytes then the window
  start as 8 bytes big-endian), its value a JSON object of the SELECT's
  columns in order (AVG is the sum over the count of its argument's
  non-null values) and ``WINDOWSTART`` / ``WINDOWEND`` (ms), as
  ksqlDB's windowed tables carry them.

The WINDOW clause is ksqlDB's (not DuckDB's named windows), cut from the
SELECT before DuckDB parses it (blanked, so that DuckDB's error
positions stay the user's):

    WINDOW TUMBLING (SIZE <n> <unit> [, GRACE PERIOD <n> <unit>])
    WINDOW HOPPING (SIZE <n> <unit>, ADVANCE BY <n> <unit> [, GRACE PERIOD <n> <unit>])
    WINDOW SESSION (<n> <unit> [, GRACE PERIOD <n> <unit>])

units MILLISECOND(S), SECOND(S), MINUTE(S), HOUR(S), DAY(S); the grace
period is 24 hours when not given (ksqlDB's default), and the window
store keeps a window for its size + grace of stream time. A SESSION's
<n> <unit> is its inactivity gap (Window's size); its aggregates are
folded record by record (``_Fold``: sessions merge record by record in
the Streams runtime), and a session merged away is a tombstone out.

Who may call: persistent.py (Statements, to check a statement; the
runner's query thread, through ``plan_for``). What it may import: as sql/.
"""
from __future__ import annotations

import copy
import json
import re

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.sql.errors import QueryError, describe
from kafkalite.sql.topic_source import BASE_SCHEMA, input_table

DEFAULT_GRACE_MS = 24 * 3600 * 1000
_UNITS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000,
          "day": 86_400_000}
_QUOTED = re.compile(r'"(?:[^"]|"")*"|\'(?:[^\']|\'\')*\'')
WINDOW_CLAUSE = re.compile(r"\bWINDOW\s+(\w+)\s*\(([^()]*)\)", re.IGNORECASE)
_DURATION = r"(\d+)\s+(MILLISECONDS?|SECONDS?|MINUTES?|HOURS?|DAYS?)"
_WINDOW_SPECS = {
    "TUMBLING": re.compile(rf"^\s*SIZE\s+{_DURATION}\s*(?:,\s*GRACE\s+PERIOD\s+{_DURATION}\s*)?$",
                           re.IGNORECASE),
    "HOPPING": re.compile(rf"^\s*SIZE\s+{_DURATION}\s*,\s*ADVANCE\s+BY\s+{_DURATION}\s*"
                          rf"(?:,\s*GRACE\s+PERIOD\s+{_DURATION}\s*)?$", re.IGNORECASE),
    "SESSION": re.compile(rf"^\s*{_DURATION}\s*(?:,\s*GRACE\s+PERIOD\s+{_DURATION}\s*)?$",
                          re.IGNORECASE)}
AGGREGATES = ("count", "count_star", "sum", "min", "max", "avg")
_ARROW = {"BIGINT": pa.int64(), "DOUBLE": pa.float64(), "BOOLEAN": pa.bool_(),
          "VARCHAR": pa.string()}
WINDOW_COLUMNS = ("windowstart", "windowend")


def _ms(n: str | None, unit: str | None) -> int | None:
    return None if n is None else int(n) * _UNITS[unit.lower().rstrip("s")]


class Window:
    """A WINDOW clause: ``kind`` TUMBLING, HOPPING or SESSION, size (a
    session's gap), advance, grace (ms)."""

    def __init__(self, kind: str, size_ms: int, advance_ms: int, grace_ms: int):
        self.kind, self.size_ms, self.advance_ms, self.grace_ms = \
            kind, size_ms, advance_ms, grace_ms

    def time_windows(self):
        from kafkalite.streams import SessionWindows, TimeWindows
        if self.kind == "SESSION":      # size: the inactivity gap
            return SessionWindows(self.size_ms, self.grace_ms)
        return TimeWindows(self.size_ms, self.advance_ms, self.grace_ms)

    def __str__(self):
        if self.kind == "SESSION":
            return f"SESSION ({self.size_ms} MILLISECONDS, GRACE PERIOD {self.grace_ms} " \
                "MILLISECONDS)"
        hop = f", ADVANCE BY {self.advance_ms} MILLISECONDS" if self.kind == "HOPPING" else ""
        return (f"{self.kind} (SIZE {self.size_ms} MILLISECONDS{hop}, GRACE PERIOD "
                f"{self.grace_ms} MILLISECONDS)")


def cut_window(select: str) -> tuple[str, Window | None]:
    """(``select`` with its WINDOW clause blanked, the Window or None)."""
    unquoted = _QUOTED.sub(lambda m: " " * len(m[0]), select)
    found = list(WINDOW_CLAUSE.finditer(unquoted))
    if not found:
        return select, None
    if len(found) > 1:
        raise QueryError(f"one WINDOW clause per query, not {len(found)}", "syntax")
    m = found[0]
    kind, spec = m[1].upper(), m[2]
    if kind not in _WINDOW_SPECS:
        raise QueryError(f"unknown window type {m[1]} (TUMBLING, HOPPING or SESSION)"
                         f"{_position(select, m.start(1))}", "syntax")
    parsed = _WINDOW_SPECS[kind].match(spec)
    if parsed is None:
        form = "<n> <unit>" if kind == "SESSION" else \
            "SIZE <n> <unit>" + (", ADVANCE BY <n> <unit>" if kind == "HOPPING" else "")
        raise QueryError(f"WINDOW {kind} takes ({form} [, GRACE PERIOD <n> <unit>]), not "
                         f"({' '.join(spec.split())}){_position(select, m.start())}", "syntax")
    g = parsed.groups()
    size = _ms(g[0], g[1])
    advance = _ms(g[2], g[3]) if kind == "HOPPING" else size
    grace = _ms(*g[-2:])
    if size <= 0 or not 0 < advance <= size:
        raise QueryError(f"WINDOW {kind}: the size must be positive and the advance between "
                         f"1 ms and the size", "invalid")
    window = Window(kind, size, advance, DEFAULT_GRACE_MS if grace is None else grace)
    return select[:m.start()] + " " * (m.end() - m.start()) + select[m.end():], window


def is_aggregate(select: str) -> bool:
    """Whether ``select`` (with or without a WINDOW clause) has a GROUP BY:
    CREATE TABLE's, not CREATE STREAM's."""
    blanked, window = cut_window(select)
    return window is not None or _tree(blanked).get("group_expressions") not in (None, [])


def _tree(select: str) -> dict:
    with duckdb.connect() as con:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [select]).fetchall()[0][0])
    if tree.get("error"):
        # DuckDB's own message, with its position: bind it for that
        try:
            duckdb.connect().execute(select)
        except duckdb.Error as exc:
            raise describe(exc, select) from None
        raise QueryError(tree.get("error_message", "not a SELECT"), "syntax")
    node = tree["statements"][0]["node"]
    if node.get("type") != "SELECT_NODE":
        raise QueryError("a persistent query is one SELECT (no UNION, no CTE)", "invalid")
    return node


def _bare(expr):
    """An expression's tree without its alias and positions: for comparing two."""
    if isinstance(expr, dict):
        return {k: _bare(v) for k, v in expr.items()
                if k not in ("alias", "query_location", "query_location_length")}
    if isinstance(expr, list):
        return [_bare(v) for v in expr]
    return expr


def _position(select: str, offset: int) -> str:
    """DuckDB's form of a place in ``select`` (describe's): line, column."""
    before = select[:offset]
    return f" at line {before.count(chr(10)) + 1}, column {offset - before.rfind(chr(10))}"


def _where(select: str, expr) -> str:
    """Where ``expr`` (a parse-tree node) is in ``select``."""
    at = expr.get("query_location") if isinstance(expr, dict) else None
    return _position(select, at) if isinstance(at, int) and at < len(select) else ""


def _refuse_clauses(select: str, node: dict) -> None:
    if node.get("having") is not None:
        raise QueryError("HAVING is not supported in a persistent query yet" +
                         _where(select, node["having"]), "invalid")
    if node.get("modifiers"):
        raise QueryError("ORDER BY, LIMIT and DISTINCT are not supported in a persistent "
                         "query", "invalid")
    if (node.get("from_table") or {}).get("type") != "BASE_TABLE":
        raise QueryError("a persistent query reads one topic (no JOIN, no subquery)", "invalid")
    groups = node.get("group_expressions") or []
    if len(groups) != 1:
        raise QueryError("a WINDOW needs a GROUP BY" if not groups else
                         f"GROUP BY takes one expression in a persistent query, not "
                         f"{len(groups)}", "invalid")


def _group_key(node: dict) -> dict:
    """The GROUP BY expression; a name that is no column of the input but
    a SELECT column's alias stands for that column's expression."""
    key = node["group_expressions"][0]
    names = key.get("column_names") or []
    if key.get("class") == "COLUMN_REF" and len(names) == 1 and \
            names[0].lower() not in [n.lower() for n in BASE_SCHEMA.names]:
        for item in node["select_list"]:
            if (item.get("alias") or "").lower() == names[0].lower():
                return item
    return key


def _number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


class AggregatePlan:
    """``select``'s plan over ``input_topic`` (this module's docstring):
    ``grouping(batch)`` (key and packed arguments of each input record),
    ``unpack(batch)`` (the arguments as a struct, after the repartition),
    ``slots`` (for aggregate_columns), ``values(batch)`` (the output's JSON
    values of a batch of updates); ``topology(output)``. Raises QueryError
    (one line, positions in ``select``) for what it cannot run."""

    def __init__(self, select: str, input_topic: str):
        self.input = input_topic
        self.select, self.window = cut_window(select)
        node = _tree(self.select)
        _refuse_clauses(self.select, node)
        self._con = duckdb.connect(config={
            "enable_external_access": False, "autoinstall_known_extensions": False,
            "autoload_known_extensions": False, "threads": 1, "memory_limit": "256MB"})
        self.names = self._bind(node)
        self.key = _group_key(node)
        self.arguments: list[tuple[dict, str]] = []   # (expression, its aggregate's name)
        self.slots: list[tuple[str | None, str]] = []  # aggregate_columns' pairs
        self.columns = [self._column(item) for item in node["select_list"]]
        if not self.slots:
            self.slots.append((None, "count"))     # a GROUP BY without aggregates: kept keys
        structure = self._plan_sql(node)
        self.values_sql = self._values_sql()
        # the window store's values: a struct a column at a time (Serdes.struct),
        # not a JSON object a record
        self.state_type = pa.struct([
            (f"a{i}", pa.int64() if op == "count" else _ARROW[structure[field]])
            for i, (field, op) in enumerate(self.slots)])

    def _bind(self, node: dict) -> list[str]:
        """DuckDB binds the SELECT (WINDOWSTART / WINDOWEND as grouped
        columns) over no records: its errors, positioned; the column names."""
        windowed = any(i.get("class") == "COLUMN_REF" and len(i.get("column_names", [])) == 1
                       and i["column_names"][0].lower() in WINDOW_COLUMNS
                       for i in node["select_list"])
        sql = self.select + (", WINDOWSTART, WINDOWEND" if windowed else "")
        empty = BASE_SCHEMA.empty_table()
        if windowed:
            empty = empty.append_column("WINDOWSTART", pa.array([], pa.int64())) \
                .append_column("WINDOWEND", pa.array([], pa.int64()))
        self._con.register(self.input, empty)
        try:    # execute, not sql: its errors show the position
            result = self._con.execute(sql)
            names = [d[0] for d in result.description]
            result.fetchall()       # (no rows) the connection is free again
            return names
        except duckdb.Error as exc:
            raise describe(exc, sql) from None
        finally:
            self._con.unregister(self.input)

    def _run(self, sql: str, table: pa.Table) -> pa.Table:
        self._con.register(self.input, table)
        try:
            return self._con.sql(sql).to_arrow_table()
        finally:
            self._con.unregister(self.input)

    def _argument(self, expr: dict, role: str) -> str:
        self.arguments.append((expr, role))
        return f"x{len(self.arguments) - 1}"

    def _column(self, item: dict) -> tuple[str, object]:
        """One SELECT column as (kind, detail): ("key", None), ("window",
        "windowstart" | "windowend"), (an aggregate, its slot or (sum slot,
        count slot) for avg)."""
        names = item.get("column_names") or []
        if _bare(item) == _bare(self.key) or item is self.key:
            return "key", None
        if item.get("class") == "COLUMN_REF" and len(names) == 1 and \
                names[0].lower() in WINDOW_COLUMNS:
            if self.window is None:
                raise QueryError(f"{names[0]} needs a WINDOW clause{_where(self.select, item)}",
                                 "invalid")
            return "window", names[0].lower()
        name = (item.get("function_name") or "").lower()
        if item.get("class") != "FUNCTION" or name not in AGGREGATES:
            what = f"{name.upper()} is not supported in a persistent query" if \
                item.get("class") == "FUNCTION" and self._is_aggregate(name) else \
                "a column of an aggregate query is the GROUP BY expression, an aggregate " \
                "of the input's columns, WINDOWSTART or WINDOWEND"
            raise QueryError(f"{what} (aggregates: COUNT, SUM, MIN, MAX, AVG)"
                             f"{_where(self.select, item)}", "invalid")
        if item.get("distinct") or item.get("filter") or \
                (item.get("order_bys") or {}).get("orders"):
            raise QueryError(f"{name.upper()} with DISTINCT, FILTER or ORDER BY is not "
                             f"supported in a persistent query{_where(self.select, item)}",
                             "invalid")
        args = [a["expression"] if "expression" in a else a for a in item.get("arguments") or
                item.get("children") or []]
        if name == "count_star" or (name == "count" and not args):
            self.slots.append((None, "count"))
            return "count", len(self.slots) - 1
        field = self._argument(args[0], "count" if name == "count" else name)
        if name == "avg":
            self.slots += [(field, "sum"), (field, "count")]
            return "avg", (len(self.slots) - 2, len(self.slots) - 1)
        self.slots.append((field, name))
        return name, len(self.slots) - 1

    def _is_aggregate(self, name: str) -> bool:
        return bool(self._con.execute(
            "SELECT 1 FROM duckdb_functions() WHERE function_name = ? AND function_type = "
            "'aggregate'", [name]).fetchall())

    def _plan_sql(self, node: dict) -> dict:
        """The per-record SQL (WHERE, key, arguments over the input; their
        types checked) and the unpacking one (JSON to a struct); -> the
        arguments' SQL types by field."""
        inner = copy.deepcopy(node)
        where = inner.get("where_clause")
        items = ([where] if where is not None else []) + [self.key] + \
            [expr for expr, _ in self.arguments]
        inner["select_list"] = [{**copy.deepcopy(e), "alias": f"c{i}"}
                                for i, e in enumerate(items)]
        inner.update(where_clause=None, group_expressions=[], group_sets=[], having=None)
        with duckdb.connect() as con:
            text = con.execute("SELECT json_deserialize_sql(?)", [json.dumps(
                {"error": False, "statements": [{"node": inner}]})]).fetchall()[0][0]
        types = self._run(text, BASE_SCHEMA.empty_table()).schema.types
        first = 1 if where is not None else 0
        self.key_type = types[first]
        key = f"c{first}" if pa.types.is_binary(self.key_type) else \
            f"encode(CAST(c{first} AS VARCHAR))"
        if where is not None:
            key = f"CASE WHEN coalesce(c0, false) THEN {key} END"
        packed, structure = [], {}
        for j, ((expr, role), t) in enumerate(zip(self.arguments, types[first + 1:])):
            column = f"c{first + 1 + j}"
            if role == "count":
                packed.append(f"x{j} := CASE WHEN {column} IS NULL THEN NULL ELSE 1 END")
                structure[f"x{j}"] = "BIGINT"
                continue
            if role in ("sum", "avg") and not _number(t) or \
                    not (_number(t) or pa.types.is_string(t) or pa.types.is_boolean(t)):
                raise QueryError(f"{role.upper()} takes a number" + (
                    "" if role in ("sum", "avg") else ", text or a boolean") +
                    f", not {t}{_where(self.select, expr)}", "invalid")
            sql_type = "BIGINT" if pa.types.is_integer(t) else "DOUBLE" if _number(t) else \
                "BOOLEAN" if pa.types.is_boolean(t) else "VARCHAR"
            packed.append(f"x{j} := CAST({column} AS {sql_type})")
            structure[f"x{j}"] = sql_type
        value = f"to_json(struct_pack({', '.join(packed)}))" if packed else "''"
        self.grouping_sql = f"SELECT {key} AS key, {value} AS value FROM ({text}) AS t"
        # GROUP BY key: each record is in its key's partition already (as
        # Kafka Streams' group_by_key and ksqlDB assume): no repartition, the
        # arguments a struct at once, a null one (the WHERE false) left out
        # by the aggregation
        self.direct_sql = None
        if self.key.get("class") == "COLUMN_REF" and \
                [n.lower() for n in self.key.get("column_names", [])] == ["key"]:
            direct = f"struct_pack({', '.join(packed)})" if packed else "1"
            if where is not None:
                direct = f"CASE WHEN coalesce(c0, false) THEN {direct} END"
            self.direct_sql = f"SELECT {direct} AS value FROM ({text}) AS t"
        # COUNT(*)s alone, GROUP BY key, no WHERE: nothing to compute per
        # record, so the Streams DSL's own columnar count (its store a long
        # a key) takes the records as they come, without DuckDB
        self.counts_only = self.direct_sql is not None and where is None and \
            all(slot == (None, "count") for slot in self.slots) and \
            (self.window is None or self.window.kind != "SESSION")
        # (the structure's names and types: no quote to escape)
        self.unpack_sql = f"SELECT json_transform(value, '{json.dumps(structure)}') AS value " \
            f"FROM packed" if structure else None
        return structure

    # ---- per batch --------------------------------------------------------------------------

    def grouping(self, batch: pa.RecordBatch) -> dict:
        """Each input record's group key (null: the WHERE drops it, or the
        key is null, which ksqlDB drops too) and packed arguments."""
        answer = self._run(self.grouping_sql, input_table(batch))
        return {"key": answer.column("key").combine_chunks(),
                "value": answer.column("value").combine_chunks().cast(pa.string())}

    def direct(self, batch: pa.RecordBatch) -> pa.Array:
        """GROUP BY key: each record's arguments (null: the WHERE drops it)."""
        return self._run(self.direct_sql, input_table(batch)).column("value").combine_chunks()

    def unpack(self, batch: pa.RecordBatch) -> pa.Array:
        if self.unpack_sql is None:
            return batch.column("value")
        self._con.register("packed", pa.table({"value": batch.column("value")}))
        try:
            return self._con.sql(self.unpack_sql).to_arrow_table().column("value") \
                .combine_chunks()
        finally:
            self._con.unregister("packed")

    def _values_sql(self) -> str:
        """The output's JSON values of a table of updates (key, a0.., ws),
        by DuckDB (``values``): a key text that is not UTF-8 makes it fail,
        and that batch is written by ``_values_per_row``."""
        t = self.key_type
        key = "json(decode(key))" if _number(t) or pa.types.is_boolean(t) else "decode(key)"
        fields = {}
        for name, (kind, detail) in zip(self.names, self.columns):
            fields.setdefault(name, key if kind == "key" else
                              ("we" if detail == "windowend" else "ws")
                              if kind == "window" else
                              f"a{detail[0]} / NULLIF(a{detail[1]}, 0)" if kind == "avg" else
                              f"a{detail}")
        if self.window is not None:
            fields.setdefault("WINDOWSTART", "ws")
            fields.setdefault("WINDOWEND", "we")
        members = ", ".join('"{}" := {}'.format(n.replace('"', '""'), e)
                            for n, e in fields.items())
        return f"SELECT to_json(struct_pack({members})) AS value FROM updates"

    def _count_fields(self) -> list[tuple[str, str]]:
        """counts_only's output columns in order: (JSON name and colon,
        "key" | "count" | "windowstart" | "windowend"), a name once (the
        first column of that name, as _values_sql's setdefault)."""
        fields = {}
        for name, (kind, detail) in zip(self.names, self.columns):
            fields.setdefault(name, kind if kind in ("key", "count") else detail)
        if self.window is not None:
            fields.setdefault("WINDOWSTART", "windowstart")
            fields.setdefault("WINDOWEND", "windowend")
        return [(json.dumps(n) + ":", what) for n, what in fields.items()]

    def _count_values(self, batch: pa.RecordBatch) -> pa.Array | None:
        """counts_only's JSON values joined a column at a time in Arrow
        (the key's text between quotes, the counts as text, the text that
        depends on the window start made once per distinct start), cheaper
        than a DuckDB call a batch; None for a key that is not UTF-8 or
        would need a JSON escape (DuckDB's path writes those)."""
        keys = batch.column("key")
        data = keys.buffers()[2]
        if data is not None and _needs_escape(np.frombuffer(data, np.uint8)):
            return None
        try:
            keys = keys.cast(pa.string())
        except pa.ArrowInvalid:
            return None
        count = batch.column("value").cast(pa.string())
        starts = batch.column("window_start") if self.window is not None else None
        parts, run = [], ["{"]
        for i, (name, what) in enumerate(self._count_fields()):
            run.append(("," if i else "") + name)
            if what in ("windowstart", "windowend"):
                run.append(what)
                continue
            if what == "key":
                run.append('"')
            parts += [self._text(run, starts), keys if what == "key" else count]
            run = ['"' if what == "key" else ""]
        parts.append(self._text(run + ["}"], starts))
        return pc.binary_join_element_wise(*parts, "")

    def _text(self, run: list[str], starts: pa.Array | None):
        """Literal text and window bounds (``run``) as one scalar, or, with
        bounds in it, one text per record made once per distinct start (a
        batch's records fall in few windows)."""
        if "windowstart" not in run and "windowend" not in run:
            return pa.scalar("".join(run))
        distinct = pc.unique(starts)
        size = self.window.size_ms
        texts = pa.array(["".join(str(ws) if p == "windowstart" else str(ws + size)
                                  if p == "windowend" else p for p in run)
                          for ws in distinct.to_pylist()], pa.string())
        return texts.take(pc.index_in(starts, distinct))

    def values(self, batch: pa.RecordBatch) -> pa.Array:
        """The output records' JSON values (per update, not per input
        record), made by DuckDB: a batch of updates is one call
        (counts_only's, when its keys allow, in Arrow alone)."""
        if self.counts_only:
            made = self._count_values(batch)
            if made is not None:
                return made
        columns = {"key": batch.column("key")}
        columns.update(zip((f"a{i}" for i in range(len(self.slots))), self._slots(batch)))
        if self.window is not None:
            columns["ws"], columns["we"] = _bounds(batch)
        self._con.register("updates", pa.table(columns))
        try:
            made = self._con.sql(self.values_sql).to_arrow_table().column("value") \
                .combine_chunks().cast(pa.string())
        except duckdb.Error:
            return self._values_per_row(batch)
        finally:
            self._con.unregister("updates")
        state = batch.column("value")
        # a session merged into a longer one: its tombstone (a null value)
        return pc.if_else(pc.is_valid(state), made, None) if state.null_count else made

    def _values_per_row(self, batch: pa.RecordBatch) -> pa.Array:
        """``values`` in Python: keys that are not UTF-8 text (\\x escapes)."""
        slots = [slot.to_pylist() for slot in self._slots(batch)]
        keys = [self._key_value(k) for k in batch.column("key").to_pylist()]
        windowed = self.window is not None
        starts, ends = (b.to_pylist() for b in _bounds(batch)) if windowed else (None, None)
        rows, live = [], batch.column("value").is_valid().to_pylist()
        for r, key in enumerate(keys):
            if not live[r]:
                rows.append(None)
                continue
            row = {}
            for name, (kind, detail) in zip(self.names, self.columns):
                if kind == "key":
                    row[name] = key
                elif kind == "window":
                    row[name] = ends[r] if detail == "windowend" else starts[r]
                elif kind == "avg":
                    total, count = slots[detail[0]][r], slots[detail[1]][r]
                    row[name] = total / count if count else None
                else:
                    row[name] = slots[detail][r]
            if windowed:
                row.setdefault("WINDOWSTART", starts[r])
                row.setdefault("WINDOWEND", ends[r])
            rows.append(row)
        return pa.array([r if r is None else json.dumps(r, separators=(",", ":")) for r in rows],
                        pa.string())

    def _slots(self, batch: pa.RecordBatch) -> list[pa.Array]:
        """Each slot's aggregates in a batch of updates: a field of the
        struct, or (counts_only: the DSL's count, one long) the count."""
        state = batch.column("value")
        if self.counts_only:
            return [state] * len(self.slots)
        return [state.field(f"a{i}") for i in range(len(self.slots))]

    def _key_value(self, key: bytes):
        """The group key as the SELECT typed it (a number, a boolean, text)."""
        t = self.key_type
        if pa.types.is_binary(t):
            return key.decode("utf-8", "backslashreplace")
        text = key.decode()
        if _number(t) or pa.types.is_boolean(t):
            return json.loads(text)
        return text

    def topology(self, output: str):
        """input -> key and arguments (DuckDB) -> repartition by key ->
        unpack (DuckDB) -> [window] -> aggregate_columns -> values -> output;
        GROUP BY key: no repartition; COUNT(*)s alone as well: the DSL's count."""
        from kafkalite.streams import (Consumed, Grouped, Materialized, Produced, Repartitioned,
                                       Serdes, StreamsBuilder, columnar)
        builder = StreamsBuilder()
        source = builder.stream(self.input, Consumed.with_(Serdes.bytes(), Serdes.bytes()))
        if self.counts_only:
            # SQL's COUNT(*) counts a record of null value too; the DSL's
            # count takes none (as Kafka Streams'): an empty value stands for it
            source = source.map_values(columnar(_present))
        elif self.direct_sql is not None:
            source = source.map_values(columnar(lambda batch: self.direct(batch)))
        else:
            source = (source.map(columnar(lambda batch: self.grouping(batch)))
                      .filter(pc.is_valid(pc.field("key")))
                      .repartition(Repartitioned("group-by", Serdes.bytes(), Serdes.string()))
                      .map_values(columnar(lambda batch: self.unpack(batch))))
        grouped = source.group_by_key(Grouped.with_(Serdes.bytes(), None))
        if self.window is not None:
            grouped = grouped.windowed_by(self.window.time_windows())
        if self.counts_only:
            table = grouped.count(Materialized.as_("aggregate").with_value_serde(Serdes.long()))
        elif self.window is not None and self.window.kind == "SESSION":
            # sessions merge record by record (the Streams runtime's session
            # aggregation): the aggregates folded in Python, a dict a session
            fold = _Fold(self.slots)
            table = grouped.aggregate(fold.initial, fold.add, fold.merge, Materialized.as_(
                "aggregate").with_value_serde(Serdes.struct(self.state_type)))
        else:
            table = grouped.aggregate_columns(self.slots, Materialized.as_(
                "aggregate").with_value_serde(Serdes.struct(self.state_type)))
        (table.to_stream().map_values(columnar(lambda batch: self.values(batch)))
         .to(output, Produced.with_(Serdes.bytes(), Serdes.string())))
        return builder.build()

    def explain(self) -> list[tuple[str, str]]:
        """EXPLAIN's steps between the source and the sink."""
        group = "the record key (no repartition, no SQL per record)" if self.counts_only else \
            f"the record key (no repartition): {self.direct_sql}" if self.direct_sql else \
            self.grouping_sql
        aggregate = "count(*) (the Streams DSL's count)" if self.counts_only else \
            ", ".join(f"{op}({f or '*'})" for f, op in self.slots)
        return [("group by", group),
                ("window", str(self.window) if self.window else "(none: one row per key)"),
                ("aggregate", aggregate),
                ("columns", ", ".join(self.names))]


class _Fold:
    """The aggregates of a session, record by record: {"a0": ..} with one
    per (field, op) slot, as aggregate_columns keeps them (count: of the
    records, or of a field's non-null values; sum, min, max: of the
    non-null values, null while there is none)."""

    _COMBINE = {"count": lambda a, b: a + b, "sum": lambda a, b: a + b, "min": min, "max": max}

    def __init__(self, slots):
        self.slots = [(f"a{i}", field, op) for i, (field, op) in enumerate(slots)]

    def initial(self) -> dict:
        return {name: 0 if op == "count" else None for name, _, op in self.slots}

    def add(self, key, value, aggregate: dict) -> dict:
        out = dict(aggregate)
        for name, field, op in self.slots:
            x = 1 if field is None else value[field]
            if x is not None:
                out[name] = (out[name] + 1 if op == "count" else x if out[name] is None
                             else self._COMBINE[op](out[name], x))
        return out

    def merge(self, key, a: dict, b: dict) -> dict:
        return {name: a[name] if b[name] is None else b[name] if a[name] is None
                else self._COMBINE[op](a[name], b[name]) for name, _, op in self.slots}


def _bounds(batch: pa.RecordBatch) -> tuple[pa.Array, pa.Array]:
    """A windowed update's WINDOWSTART and WINDOWEND: its time window's or
    (WINDOW SESSION) its session's first and last record times."""
    if "session_start" in batch.schema.names:
        return batch.column("session_start"), batch.column("session_end")
    return batch.column("window_start"), batch.column("window_end")


def _needs_escape(data: np.ndarray) -> bool:
    """Whether key bytes hold a quote, a backslash or a control character
    (bytes past a sliced array's end may count: then DuckDB's path)."""
    return bool(((data < 0x20) | (data == 0x22) | (data == 0x5C)).any())


def _present(batch: pa.RecordBatch) -> pa.Array:
    """The values with a null one made empty (counts_only's input)."""
    value = batch.column("value")
    return value.fill_null(b"") if value.null_count else value
