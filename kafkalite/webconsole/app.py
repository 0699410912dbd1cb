"""The console's WSGI app: static pages and the JSON API, mounted at /console.

Routes (all under the mount prefix, ``/console``):

    GET    /                                the single page (index.html), and /static/<file>
    GET    /api/cluster                     brokers, controller, counts
    GET    /api/throughput                  rates over time (history.py)
    GET    /api/metrics?filter=             the node's metric families, as JSON
    GET    /api/topics                      every topic: partitions, size, records
    POST   /api/topics                      create {"name", "partitions", "replication_factor", "configs"}
    GET    /api/topics/<t>                  partitions (leader, ISR, offsets, size), configs
    DELETE /api/topics/<t>
    POST   /api/topics/<t>/configs          {"set": {k: v}, "delete": [k]}
    GET    /api/topics/<t>/messages?...     records (api.read_records' parameters)
    GET    /api/groups                      every group: state, members, lag
    GET    /api/groups/<g>                  members, assignment, offsets and lag, lag over time
    POST   /api/groups/<g>/reset-offsets    {"spec", "value", "topics", "dry_run"}

Errors are JSON ``{"error": message}``: 400 bad input, 404 unknown path,
topic or group, 405 wrong method, 409 a Kafka refusal (the group has
members, the topic exists), 413 a body over ``MAX_BODY``, 415 a body that
is not ``application/json`` (so another site's page cannot post a form
here: see ``_body``), 503 when
``MAX_READERS`` record reads are already running; 500 only for a bug
(logged, rate-limited). Every client call has a timeout, so no request
hangs.

Who may call: the metrics HTTP server, on its per-request threads.
"""
from __future__ import annotations

import json
import logging
import mimetypes
import threading
import urllib.parse
from importlib import resources

from kafkalite import errors
from kafkalite.client import AdminClient
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.webconsole import api
from kafkalite.webconsole.history import History

log = logging.getLogger("kafkalite.webconsole")

MAX_BODY = 64 << 10
MAX_READERS = 4               # record reads at once (each holds a Consumer)
MAX_METRIC_SAMPLES = 5000     # samples in one /api/metrics answer
STATIC = ("index.html", "console.js", "console.css")

# Kafka's refusals that are the caller's to fix, not the server's fault
_CONFLICT = (errors.TopicAlreadyExistsError, errors.NonEmptyGroupError)
_NOT_FOUND = (errors.UnknownTopicOrPartitionError, errors.GroupIdNotFoundError)

_REASONS = {200: "OK", 302: "Found", 400: "Bad Request", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
            415: "Unsupported Media Type",
            500: "Internal Server Error", 503: "Service Unavailable"}


class _HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def metric_values(registry) -> dict:
    """{sample name: {sorted label items: value}} of one collection."""
    out: dict = {}
    for family in registry.collect():
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


class ConsoleApp:
    def __init__(self, bootstrap: str, registry, prefix: str = "/console",
                 client_config: dict | None = None):
        self.bootstrap = bootstrap
        # its clients' settings beside the bootstrap: the owner's CURVE keys
        # on a server with security on (client/config.py owner_config)
        self.client_config = dict(client_config or {})
        self.registry = registry
        self.prefix = prefix
        self.history = History(registry)
        self._admin: AdminClient | None = None
        self._admin_lock = threading.Lock()
        self._readers = threading.BoundedSemaphore(MAX_READERS)
        self._errors = RateLimitedLog(log)

    @property
    def admin(self) -> AdminClient:
        # made at the first request: the node is not serving yet when the app is made
        with self._admin_lock:
            if self._admin is None:
                self._admin = AdminClient({**self.client_config,
                                           "bootstrap.servers": self.bootstrap,
                                           "client.id": "kafkalite-console",
                                           "request.timeout.ms": 10_000})
            return self._admin

    def close(self) -> None:
        self.history.close()
        with self._admin_lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None

    # ---- WSGI -----------------------------------------------------------------------------

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")[len(self.prefix):]
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == "":
                start_response("302 Found", [("Location", self.prefix + "/")])
                return [b""]
            if not path.startswith("/api/"):
                return self._static(path, start_response)
            self.history.touch()
            query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))
            body = self._body(environ) if method in ("POST", "PUT") else {}
            result = self._route(method, path[len("/api/"):], query, body)
            return self._json(start_response, 200, result)
        except _HttpError as exc:
            return self._json(start_response, exc.status, {"error": str(exc)})
        except (api.BadRequest, api.NotFound) as exc:
            return self._json(start_response, exc.status, {"error": str(exc)})
        except _NOT_FOUND as exc:
            return self._json(start_response, 404, {"error": str(exc), "code": exc.name})
        except _CONFLICT as exc:
            return self._json(start_response, 409, {"error": str(exc), "code": exc.name})
        except errors.KafkaError as exc:
            status = 503 if getattr(exc, "retriable", False) else 400
            return self._json(start_response, status, {"error": str(exc), "code": exc.name})
        except Exception as exc:                         # a bug: say so, keep serving
            self._errors.warning("console %s %s: %r", method, path, exc, exc_info=True)
            return self._json(start_response, 500, {"error": f"internal error: {exc!r}"})

    def _static(self, path, start_response):
        name = path.lstrip("/")
        if name in ("", "index.html"):
            name = "index.html"
        elif name.startswith("static/"):
            name = name[len("static/"):]
        if name not in STATIC:
            raise _HttpError(404, f"no page {path!r}")
        data = resources.files("kafkalite.webconsole").joinpath("static", name).read_bytes()
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        start_response("200 OK", [("Content-Type", f"{ctype}; charset=utf-8"),
                                  ("Content-Length", str(len(data))),
                                  ("Cache-Control", "no-cache")])
        return [data]

    @staticmethod
    def _body(environ) -> dict:
        # Only JSON: a page on another site can send a form or text/plain POST
        # here without the browser asking first, but not application/json
        # (that needs a CORS preflight, which this app never grants).
        ctype = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise _HttpError(415, "send the body as application/json")
        try:
            length = int(environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise _HttpError(400, "Content-Length is not a number") from None
        if length > MAX_BODY:
            raise _HttpError(413, f"a request body may be at most {MAX_BODY} bytes")
        try:
            raw = environ["wsgi.input"].read(length) if length > 0 else b""
        except OSError:          # the HTTP server's read timeout: the client stopped sending
            raw = None
        if raw is None or len(raw) < length:
            raise _HttpError(400, f"the body ended before its Content-Length ({length} bytes)")
        if not raw:
            return {}
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _HttpError(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise _HttpError(400, "the body must be a JSON object")
        return body

    @staticmethod
    def _json(start_response, status: int, value):
        data = json.dumps(value, allow_nan=False).encode()
        start_response(f"{status} {_REASONS.get(status, '')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                        ("Cache-Control", "no-store")])
        return [data]

    # ---- the API --------------------------------------------------------------------------

    def _route(self, method: str, path: str, query: dict, body: dict):
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        head, rest = parts[0], parts[1:]

        def allow(*methods):
            if method not in methods:
                raise _HttpError(405, f"{method} is not allowed on /api/{path}")

        if head == "cluster" and not rest:
            allow("GET")
            return api.cluster(self.admin, metric_values(self.registry))
        if head == "throughput" and not rest:
            allow("GET")
            return self.history.throughput()
        if head == "metrics" and not rest:
            allow("GET")
            return self._metrics(query.get("filter", ""))
        if head == "topics":
            if not rest:
                allow("GET", "POST")
                if method == "POST":
                    return api.create_topic(self.admin, body)
                return api.list_topics(self.admin, metric_values(self.registry))
            topic = rest[0]
            if len(rest) == 1:
                allow("GET", "DELETE")
                if method == "DELETE":
                    return api.delete_topic(self.admin, topic)
                return api.describe_topic(self.admin, topic, metric_values(self.registry))
            if rest[1:] == ["configs"]:
                allow("POST")
                return api.alter_topic_configs(self.admin, topic, body)
            if rest[1:] == ["messages"]:
                allow("GET")
                if not self._readers.acquire(blocking=False):
                    raise _HttpError(503, f"{MAX_READERS} reads are running; try again")
                try:
                    return api.read_records(self.admin, self.bootstrap, topic, query,
                                            self.client_config)
                finally:
                    self._readers.release()
        if head == "groups":
            if not rest:
                allow("GET")
                return api.list_groups(self.admin, metric_values(self.registry))
            group = rest[0]
            if len(rest) == 1:
                allow("GET")
                return {**api.describe_group(self.admin, group),
                        "lag_history": self.history.lag(group)}
            if rest[1:] == ["reset-offsets"]:
                allow("POST")
                return api.reset_group_offsets(self.admin, group, body)
        raise _HttpError(404, f"no API /api/{path}")

    def _metrics(self, needle: str) -> dict:
        families, count = [], 0
        for family in self.registry.collect():
            if needle and needle not in family.name:
                continue
            samples = []
            for s in family.samples:
                if count >= MAX_METRIC_SAMPLES:
                    break
                count += 1
                samples.append([s.name, s.labels,
                                s.value if s.value == s.value and abs(s.value) != float("inf")
                                else str(s.value)])
            families.append({"name": family.name, "type": family.type,
                             "help": family.documentation, "samples": samples})
        return {"families": families, "truncated": count >= MAX_METRIC_SAMPLES}


def make_app(bootstrap: str, registry, client_config: dict | None = None) -> ConsoleApp:
    """The factory ``kafkalite server`` hands the supervisor (``http_apps``)."""
    return ConsoleApp(bootstrap, registry, client_config=client_config)
