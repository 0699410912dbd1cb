"""The SQL layer's error: QueryError, and DuckDB's errors as one line of it
(``describe``: what is wrong, then where in the query).

Who may call: session.py and persistent.py, on the thread of the query.
"""
from __future__ import annotations

import difflib
import re


class QueryError(ValueError):
    """A query refused or failed: ``str()`` is one line. ``kind``: syntax,
    unknown_topic, unknown_column, unknown_query, denied, cancelled, invalid."""

    def __init__(self, message: str, kind: str = "invalid"):
        super().__init__(message)
        self.kind = kind


_UNKNOWN_TABLE = re.compile(r"Table with name (.+?) does not exist!")
_UNKNOWN_COLUMN = re.compile(r'Referenced column (".+?") not found in FROM clause!')


def describe(exc: Exception, sql: str, topic_names=None) -> QueryError:
    """DuckDB's error as one line: what is wrong, then where (line and
    column of the query) when DuckDB shows it. ``topic_names()``: for a
    "did you mean" after an unknown topic."""
    text = str(exc)
    lines = text.split("\n")
    first = lines[0]
    kind_name, _, message = first.partition(": ")
    if not message:
        kind_name, message = "", first
    where = _position(lines, sql)
    kind = "invalid"
    if kind_name == "Parser Error":
        kind = "syntax"
    elif (m := _UNKNOWN_TABLE.search(message)):
        kind, name = "unknown_topic", m[1]
        message = f"unknown topic {name}"
        close = difflib.get_close_matches(name, sorted(topic_names()), n=1) if topic_names else []
        if close:
            message += f" (did you mean {close[0]!r}?)"
    elif (m := _UNKNOWN_COLUMN.search(message)):
        kind = "unknown_column"
        candidates = next((ln for ln in lines[1:] if ln.startswith("Candidate bindings: ")), "")
        message = f"unknown column {m[1]}" + (
            f" (candidates: {candidates[len('Candidate bindings: '):]})" if candidates else "")
    elif kind_name == "Out of Memory Error":
        message = f"the query needs more memory than its limit: {message}"
    return QueryError(message.rstrip(".!") + (f" at {where}" if where else ""), kind)


def _position(lines: list[str], sql: str) -> str:
    """'line L, column C' of DuckDB's caret under its ``LINE L: ...`` excerpt."""
    for i, line in enumerate(lines[:-1]):
        m = re.match(r"LINE (\d+): ", line)
        if not m or "^" not in lines[i + 1]:
            continue
        number, excerpt = int(m[1]), line[m.end():]
        caret = lines[i + 1].index("^") - m.end()
        if excerpt.startswith("..."):
            excerpt, caret = excerpt[3:], caret - 3
        excerpt = excerpt[:-3] if excerpt.endswith("...") else excerpt
        source = sql.split("\n")[number - 1] if number <= sql.count("\n") + 1 else ""
        start = source.find(excerpt.rstrip()) if excerpt.strip() else -1
        column = (start if start >= 0 else 0) + caret + 1
        return f"line {number}, column {column}"
    return ""
