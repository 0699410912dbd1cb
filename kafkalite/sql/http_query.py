"""``POST /query`` on the node's HTTP port: SQL over topics, in ksqlDB's style.

Request: ``{"sql": "SELECT ...", "timeout_ms": 30000}`` as
``application/json`` (ksqlDB's ``application/vnd.ksql.v1+json`` too;
``ksql`` is taken for ``sql``); ``timeout_ms`` is optional (default
DEFAULT_TIMEOUT_S, at most MAX_TIMEOUT_S) and does not apply to EMIT
CHANGES, which runs until the client goes away. ``sql`` may be a script,
statements separated by ``;`` run in order in the request's one session
(a table the first creates is there for the next); the answer is the
last one's. Answer, 200: a JSON array,
streamed as it is computed (chunked):

    [{"header": {"columns": ["key", "n"], "schema": "`key` BLOB, `n` BIGINT"}},
     {"row": {"columns": ["k1", 3]}},
     ...]

Bytes as UTF-8 text (\\x escapes for the rest), times ISO 8601. An EMIT
CHANGES query's array gets a row as each new record passes its filter,
and a newline while none come (so that a client gone is noticed). An
error after the first row (the timeout, the memory limit, a cancelled
query) is the array's last element, ``{"error": {"message", "kind"}}``;
one before it is the answer: 400 ``{"error": message, "kind": ...}`` for
a syntax error, an unknown topic or column, a type mismatch or a query
that ran past its timeout, 403 for a topic the user may not read, 405,
413, 415 for a bad request, 503 when MAX_QUERIES queries are running.

The web console's SQL page posts here too (the same port and login).
``running()``: queries holding a slot, the node's
``kafkalite_sql_queries_running`` gauge (kafkalite/cli/server.py).

Persistent queries (persistent.py): ``CREATE STREAM ... AS SELECT``,
``SHOW QUERIES``, ``EXPLAIN <id>``, ``TERMINATE <id>`` are answered as
queries are (a header, then rows); CREATE STREAM and TERMINATE need the
user's Write on the output topic too (403).

Who may read what: the app reads topics with the node's own key pair, so
the ACLs are applied here, as Kafka applies them to a Fetch: every table a
query names needs Read on the TOPIC of that name for the user logged in
(kafkalite/http_access.py; denied: 403, audited). The schema registry,
which decodes values into columns, is asked as that user (the request's
Basic login forwarded), so its subject ACLs apply too.

Which process runs it: the supervisor, on the HTTP server's threads (one
Session per request; MAX_QUERIES at once). What it may import: the
client side (kafkalite.client, protocol/'s enums) and the bottom.
"""
from __future__ import annotations

import json
import threading

from kafkalite.http_access import RequestAccess, basic_credentials
from kafkalite.http_routes import BadBody, NoRoute, Router, WrongMethod, json_object
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res

MAX_BODY = 64 << 10
MAX_QUERIES = 4
DEFAULT_TIMEOUT_S = 30.0
MAX_TIMEOUT_S = 600.0
JSON_TYPES = ("application/json", "application/vnd.ksql.v1+json")
ROUTER = Router([("POST", "/query", "query")])
_STATUS = {400: "400 Bad Request", 403: "403 Forbidden", 404: "404 Not Found",
           405: "405 Method Not Allowed", 413: "413 Payload Too Large",
           415: "415 Unsupported Media Type", 503: "503 Service Unavailable"}


class _HttpError(Exception):
    def __init__(self, status: int, message: str, kind: str | None = None):
        super().__init__(message)
        self.status, self.kind = status, kind


class _Access(RequestAccess):
    __slots__ = ()
    CLUSTER = Res.CLUSTER


class QueryApp:
    """The WSGI app. ``client_config``: how the app's clients reach the
    node (bootstrap, the owner's key pair)."""

    def __init__(self, client_config: dict):
        self.client_config = client_config
        self._running = threading.BoundedSemaphore(MAX_QUERIES)
        self._count_lock = threading.Lock()
        self._count = 0         # queries holding a slot: the gauge running() reads
        self._registry_url: str | None = None

    def __call__(self, environ, start_response):
        try:
            try:
                ROUTER.find(environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", ""))
            except WrongMethod as exc:
                raise _HttpError(405, f"{exc}: send the query with POST") from None
            except NoRoute:
                raise _HttpError(404, "no such path: POST the query to /query") from None
            body = _body(environ)
            if not self._running.acquire(blocking=False):
                raise _HttpError(503, f"{MAX_QUERIES} queries are running; try again")
            with self._count_lock:
                self._count += 1
        except _HttpError as exc:
            return _error(start_response, exc)
        return self._query(environ, start_response, body)     # it gives the slot back

    def _query(self, environ, start_response, body: dict):
        """The answer's first part before start_response (errors so far
        are the status), the rest streamed; the query slot is given back
        when the stream ends."""
        from kafkalite.sql.session import QueryError
        sql = body.get("sql", body.get("ksql"))
        timeout = body.get("timeout_ms", DEFAULT_TIMEOUT_S * 1000)
        session = None
        try:
            if not isinstance(sql, str) or not sql.strip():
                raise _HttpError(400, 'the body needs "sql": the query')
            if not isinstance(timeout, (int, float)) or timeout <= 0:
                raise _HttpError(400, '"timeout_ms" must be a positive number')
            session = self._session(environ)
            rows = _Rows(session, sql, min(timeout / 1000.0, MAX_TIMEOUT_S))
            first = rows.start()
        except _HttpError as exc:
            self._end(session)
            return _error(start_response, exc)
        except QueryError as exc:
            self._end(session)
            status = 403 if exc.kind == "denied" else 400
            return _error(start_response, _HttpError(status, str(exc), exc.kind))
        except BaseException:
            self._end(session)
            raise
        start_response("200 OK", [("Content-Type", "application/json")])
        return self._stream(session, first, rows)

    def _stream(self, session, first: bytes, rows):
        try:
            yield first
            yield from rows
            yield b"]\n"
        finally:
            self._end(session)

    def _end(self, session) -> None:
        if session is not None:
            session.interrupt()
            session.close()
        with self._count_lock:
            self._count -= 1
        self._running.release()

    def running(self) -> int:
        """Queries running now (their slot is given back only once the
        session is interrupted and closed): the node's
        ``kafkalite_sql_queries_running`` gauge."""
        return self._count

    def _session(self, environ):
        from kafkalite.sql.session import QueryError, Session
        access = _Access(environ)

        def authorize(topic: str) -> None:
            if not access.may(Op.READ, Res.TOPIC, topic):
                raise QueryError(f"not authorized to read topic {topic!r}", "denied")

        def authorize_write(topic: str) -> None:
            # a persistent query's output (persistent.py): it runs with its creator's rights
            if not access.may(Op.WRITE, Res.TOPIC, topic):
                raise QueryError(f"not authorized to write topic {topic!r}", "denied")
        return Session(self.client_config, self._registry(), basic_credentials(environ),
                       authorize=authorize, authorize_write=authorize_write,
                       principal=access.principal)

    def _registry(self) -> str | None:
        """The node's schema registry URL (None: it serves none)."""
        if self._registry_url is None:
            from kafkalite.client import AdminClient
            admin = AdminClient(self.client_config)
            try:
                self._registry_url = admin.server_endpoints().get("schema_registry") or ""
            except Exception:   # noqa: BLE001 -- asked again at the next query
                return None
            finally:
                admin.close()
        return self._registry_url or None

    def close(self) -> None:
        pass


class _Rows:
    """The array's parts: ``start()`` runs the query up to its first batch
    (DuckDB's errors so far raise QueryError), iterating gives the rest."""

    def __init__(self, session, sql: str, timeout: float):
        self.session, self.sql, self.timeout = session, sql, timeout
        self.push = session.is_push(sql)
        self._timer = None if self.push else threading.Timer(timeout, session.interrupt)
        self._batches = None
        self._first = None

    def start(self) -> bytes:
        from kafkalite.sql.session import QueryError
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()
        try:
            if self.push:
                self._batches = self.session.emit_changes(self.sql)
            else:
                self._batches = self.session.fetch(self.session.query(self.sql), self.sql)
            self._first = next(self._batches, None)
        except QueryError as exc:
            self._stop_timer()
            if exc.kind == "cancelled":
                raise QueryError(self._timed_out(), "timeout") from None
            raise
        schema = self._first.schema if self._first is not None else None
        columns = schema.names if schema is not None else []
        header = {"columns": columns,
                  "schema": ", ".join(f"`{f.name}` {f.type}" for f in schema) if schema else ""}
        return b"[" + _json({"header": header})

    def _timed_out(self) -> str:
        return f"the query ran longer than its timeout ({self.timeout:g} s: timeout_ms)"

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def __iter__(self):
        from kafkalite.sql.session import QueryError, json_cell
        batch = self._first
        try:
            while batch is not None:
                if batch.num_rows:
                    columns = [c.to_pylist() for c in batch.columns]
                    yield b"".join(b",\n" + _json({"row": {"columns": [json_cell(v) for v in r]}})
                                   for r in zip(*columns))
                elif self.push:
                    yield b"\n"         # nothing new: a write that finds a client gone
                batch = next(self._batches, None)
        except QueryError as exc:
            message = self._timed_out() if exc.kind == "cancelled" else str(exc)
            yield b",\n" + _json({"error": {"message": message, "kind": exc.kind}})
        finally:
            self._stop_timer()
            if self._batches is not None:
                self._batches.close()


def _body(environ) -> dict:
    try:
        return json_object(environ, MAX_BODY, JSON_TYPES)
    except BadBody as exc:
        raise _HttpError(exc.status, str(exc)) from None


def _error(start_response, exc: _HttpError):
    start_response(_STATUS[exc.status], [("Content-Type", "application/json")])
    return [_json({"error": str(exc), **({"kind": exc.kind} if exc.kind else {})}) + b"\n"]


def _json(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), default=str).encode()


def make_app(bootstrap: str, client_config: dict | None = None) -> QueryApp:
    return QueryApp({"bootstrap.servers": bootstrap, **(client_config or {})})
