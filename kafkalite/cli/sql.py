"""``kafkalite sql``: SQL over topics (kafkalite.sql) from the shell.

``kafkalite sql "SELECT ..."`` runs one query and prints its answer: an
aligned table, or ``--format json`` (one JSON object a row) or ``csv``.
Without a query it reads statements ending in ``;`` from stdin, with a
``sql>`` prompt on a terminal, until ``exit``, ``quit`` or end of input.
A query ending in ``EMIT CHANGES`` prints the rows of records as they
arrive until Ctrl-C. ``CREATE STREAM out AS SELECT ...``, ``SHOW
QUERIES``, ``EXPLAIN <id>`` and ``TERMINATE <id>`` manage the server's
persistent queries (kafkalite/sql/persistent.py). Ctrl-C cancels a running query: the command ends
with status 130 (at the prompt, back to the prompt).

Keys, values and other bytes print as UTF-8 text (bytes that are not
UTF-8 as \\x escapes), timestamps in ISO 8601. A bad query is one line,
what is wrong and where, and exit status 1 (at the prompt: the next
statement is read; the status is 1 at the end).

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import json
import os
import signal
import sys

from kafkalite.cli.arguments import client_args, client_properties
from kafkalite.cli.client_config import DEFAULT_DATA_DIR, client_config

DESCRIPTION = ("Query topics with SQL (DuckDB): every topic is a table of partition, offset, "
               "timestamp, key, value, headers and the value's fields the schema registry "
               "decodes. One query, or a prompt without one; EMIT CHANGES follows new records; "
               "CREATE STREAM out AS SELECT ... keeps one running on the server (SHOW QUERIES, "
               "TERMINATE).")
HELP = "query topics with SQL: one query, a prompt, or EMIT CHANGES on new records"
PROMPT, MORE = "sql> ", "...> "


def add_arguments(p) -> None:
    p.add_argument("query", nargs="?",
                   help="the query (a topic with dots or dashes in double quotes); without "
                        "one, statements ending in ; are read from stdin")
    p.add_argument("--format", choices=["table", "json", "csv"], default="table",
                   help="table (default), json (one object a row) or csv")
    p.add_argument("--schema-registry", metavar="URL",
                   help="the registry that decodes values into columns (default: "
                        "schema_registry of <data dir>/server.json; 'none' for raw values)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="where to find server.json (default ./kafkalite-data)")
    p.add_argument("--memory-limit", default="1GB",
                   help="DuckDB's memory_limit for a query (default: 1GB)")
    client_args(p)
    client_properties(p)


def registry_url(args) -> str | None:
    if args.schema_registry:
        return None if args.schema_registry.lower() == "none" else args.schema_registry
    try:
        with open(os.path.join(args.data_dir, "server.json")) as f:
            return json.load(f).get("schema_registry")
    except (OSError, ValueError):
        return None


def run(args) -> int:
    from kafkalite.sql import QueryError, Session
    session = Session(client_config(args), registry_url(args), memory_limit=args.memory_limit,
                      timeout=args.timeout)
    try:
        if args.query is not None:
            return _one(session, args.query, args.format)
        return _prompt(session, args.format, QueryError)
    finally:
        session.close()


def _one(session, sql: str, fmt: str) -> int:
    """One query; Ctrl-C cancels it (status 130)."""
    cancelled = []

    def on_sigint(signum, frame):
        # DuckDB runs the query in C, calling back into Python for the topic's
        # batches: interrupt it there rather than unwind through it
        cancelled.append(True)
        session.interrupt()
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        _print(session, sql, fmt)
    except ValueError:
        if cancelled:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if cancelled:
        raise KeyboardInterrupt
    return 0


def _prompt(session, fmt: str, query_error) -> int:
    tty = sys.stdin.isatty()
    status = 0
    while True:
        statement = _read_statement(tty)
        if statement is None:
            return status
        if statement.strip().rstrip(";").strip().lower() in ("exit", "quit"):
            return status
        if not statement.strip().rstrip(";").strip():
            continue
        try:
            _one(session, statement, fmt)
        except query_error as exc:
            print(f"kafkalite sql: {exc}", file=sys.stderr, flush=True)
            status = 1
        except KeyboardInterrupt:
            print("kafkalite sql: cancelled", file=sys.stderr, flush=True)


def _read_statement(tty: bool) -> str | None:
    """Lines up to one ending in ';' (or 'exit'/'quit'); None at end of input."""
    lines = []
    while True:
        if tty:
            try:
                line = input(MORE if lines else PROMPT)
            except EOFError:
                print()
                line = None
            except KeyboardInterrupt:     # at the prompt: drop the statement being typed
                print()
                lines = []
                continue
        else:
            line = sys.stdin.readline()
            line = line if line else None
        if line is None:
            return "\n".join(lines) if any(x.strip() for x in lines) else None
        lines.append(line.rstrip("\n"))
        word = line.strip().lower()
        if line.rstrip().endswith(";") or (len(lines) == 1 and word in ("exit", "quit")):
            return "\n".join(lines)


def _print(session, sql: str, fmt: str) -> None:
    push = session.is_push(sql)
    if push:
        batches = session.emit_changes(sql)
    else:
        batches = session.fetch(session.query(sql), sql)
    out = _Output(fmt, stream=push)
    try:
        for batch in batches:
            out.batch(batch)
    finally:
        # now, not at the interpreter's exit: closing the topic's Consumer starts a thread
        batches.close()
        out.end()


class _Output:
    """Rows as a table (aligned over the whole answer; for EMIT CHANGES,
    printed as they come), JSON lines or CSV."""

    def __init__(self, fmt: str, stream: bool):
        self.fmt, self.stream = fmt, stream
        self.names: list[str] | None = None
        self.rows: list[list] = []
        self._csv = None

    def batch(self, batch) -> None:
        from kafkalite.sql.session import json_cell
        if self.names is None:
            self.names = list(batch.schema.names)
            self._header()
        if not batch.num_rows:
            return
        columns = [c.to_pylist() for c in batch.columns]
        for row in zip(*columns):
            self._row([json_cell(v) for v in row])
        sys.stdout.flush()

    def _header(self) -> None:
        if self.fmt == "csv":
            import csv
            self._csv = csv.writer(sys.stdout, lineterminator="\n")
            self._csv.writerow(self.names)
        elif self.fmt == "table" and self.stream:
            print("  ".join(self.names), flush=True)

    def _row(self, row: list) -> None:
        if self.fmt == "json":
            sys.stdout.write(json.dumps(dict(zip(self.names, row)), separators=(",", ":"),
                                        default=str) + "\n")
        elif self.fmt == "csv":
            self._csv.writerow(["" if v is None else _text(v) for v in row])
        elif self.stream:
            print("  ".join("-" if v is None else _text(v) for v in row))
        else:
            self.rows.append(row)

    def end(self) -> None:
        if self.fmt == "table" and not self.stream and self.names is not None:
            from kafkalite.cli.output import print_table
            print_table([[None if v is None else _text(v) for v in r] for r in self.rows],
                        self.names)
            n = len(self.rows)
            print(f"({n} row{'' if n == 1 else 's'})")


def _text(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, default=str)
