"""The console's WSGI app: static pages and the JSON API, mounted at /console.

Routes (all under the mount prefix, ``/console``; the table is ``ROUTES``,
each route's action named after its ``authorization.RULES`` entry):

    GET    /                                the single page (index.html), and /static/<file>
    GET    /api/cluster                     brokers, controller, counts
    GET    /api/throughput                  rates over time (history.py)
    GET    /api/metrics?filter=             the node's metric families, as JSON
    GET    /api/topics                      every topic: partitions, size, records
    POST   /api/topics                      create {"name", "partitions", "replication_factor", "configs"}
    GET    /api/topics/<t>                  partitions (leader, ISR, offsets, size), configs
    DELETE /api/topics/<t>
    POST   /api/topics/<t>/configs          {"set": {k: v}, "delete": [k]}
    GET    /api/topics/<t>/messages?...     records (api.read_records' parameters; those in
                                            Confluent's wire format decoded, unless decode=0)
    GET    /api/topics/<t>/schemas          its subjects, <t>-key and <t>-value (schemas.py)
    GET    /api/schemas                     every subject of the schema registry
    GET    /api/groups                      every group: state, members, lag
    GET    /api/groups/<g>                  members, assignment, offsets and lag, lag over time
    POST   /api/groups/<g>/reset-offsets    {"spec", "value", "topics", "dry_run"}

Every action runs as the user logged in (authorization.py): with the
authorizer on, what that user's ACLs deny is answered 403, or left out
of lists, as Kafka answers the same user's Kafka requests.

Errors are JSON ``{"error": message}``: 400 bad input, 403 an action the
user's ACLs deny (with ``code``, ``operation`` and ``resource``), 404
unknown path, topic or group, 405 wrong method, 409 a Kafka refusal (the
group has members, the topic exists), 413 a body over ``MAX_BODY``, 415 a
body that is not ``application/json`` (so another site's page cannot post
a form here: see ``_body``), 503 when ``MAX_READERS`` record reads are
already running; 500 only for a bug (logged, rate-limited). Every client
call has a timeout, so no request hangs.

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
from kafkalite.http_routes import BadBody, NoRoute, Router, WrongMethod, json_object, segment_names
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.webconsole import api, authorization
from kafkalite.webconsole.history import History
from kafkalite.webconsole.schemas import SchemaView

log = logging.getLogger("kafkalite.webconsole")

MAX_BODY = 64 << 10
SUBJECT_PREFIX = "subject:"   # a subject's ACL resource: TOPIC subject:<name> (the registry's)
MAX_READERS = 4               # record reads at once (each holds a Consumer)
MAX_METRIC_SAMPLES = 5000     # samples in one /api/metrics answer
STATIC = ("index.html", "console.js", "console.css")

# Kafka's refusals that are the caller's to fix, not the server's fault
_CONFLICT = (errors.TopicAlreadyExistsError, errors.NonEmptyGroupError)
_NOT_FOUND = (errors.UnknownTopicOrPartitionError, errors.GroupIdNotFoundError)
_DENIED = (errors.TopicAuthorizationFailedError, errors.GroupAuthorizationFailedError,
           errors.ClusterAuthorizationFailedError)

# (method, path under the prefix, action): the action is the ConsoleApp
# method ``_<action>`` that answers it and the rule (authorization.RULES)
# it runs under; ``<name>`` is one path segment, given to the method as
# ``name``. HEAD is answered as GET.
ROUTES = (
    ("GET", "/", "page"),
    ("GET", "/index.html", "page"),
    ("GET", "/static/{file}", "page"),
    ("GET", "/api/cluster", "cluster"),
    ("GET", "/api/throughput", "throughput"),
    ("GET", "/api/metrics", "metrics"),
    ("GET", "/api/topics", "list_topics"),
    ("POST", "/api/topics", "create_topic"),
    ("GET", "/api/topics/{topic}", "describe_topic"),
    ("DELETE", "/api/topics/{topic}", "delete_topic"),
    ("POST", "/api/topics/{topic}/configs", "alter_topic_configs"),
    ("GET", "/api/topics/{topic}/messages", "read_records"),
    ("GET", "/api/topics/{topic}/schemas", "topic_subjects"),
    ("GET", "/api/schemas", "list_subjects"),
    ("GET", "/api/groups", "list_groups"),
    ("GET", "/api/groups/{group}", "describe_group"),
    ("POST", "/api/groups/{group}/reset-offsets", "reset_offsets"),
)
# kafkalite/http_routes.py's table: each action with its segments' names
ROUTER = Router((method, template, (action, segment_names(template)))
                for method, template, action in ROUTES)

_REASONS = {200: "OK", 302: "Found", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
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
        self.schemas = SchemaView(lambda: self.admin, self.client_config)

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
            action, params = _match(method, path)
            access = authorization.Access(environ, action)
            access.check_route(params)
            if action == "page":
                return self._static(params.get("file", "index.html"), start_response)
            self.history.touch()
            query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", "")))
            body = self._body(environ) if method in ("POST", "PUT") else {}
            result = getattr(self, "_" + action)(access, query, body, **params)
            if access.unchecked():          # the action skipped its rule: a bug, say so
                raise AssertionError(f"{action} did not check {access.unchecked()}")
            return self._json(start_response, 200, result)
        except (authorization.Denied, authorization.NoRule) as exc:
            return self._json(start_response, exc.status, exc.as_json())
        except _HttpError as exc:
            return self._json(start_response, exc.status, {"error": str(exc)})
        except (api.BadRequest, api.NotFound) as exc:
            return self._json(start_response, exc.status, {"error": str(exc)})
        except _NOT_FOUND as exc:
            return self._json(start_response, 404, {"error": str(exc), "code": exc.name})
        except _CONFLICT as exc:
            return self._json(start_response, 409, {"error": str(exc), "code": exc.name})
        except _DENIED as exc:                           # the node refused the console itself
            return self._json(start_response, 403, {"error": str(exc), "code": exc.name})
        except errors.KafkaError as exc:
            status = 503 if getattr(exc, "retriable", False) else 400
            return self._json(start_response, status, {"error": str(exc), "code": exc.name})
        except Exception as exc:                         # a bug: say so, keep serving
            self._errors.warning("console %s %s: %r", method, path, exc, exc_info=True)
            return self._json(start_response, 500, {"error": f"internal error: {exc!r}"})

    def _static(self, name, start_response):
        if name not in STATIC:
            raise _HttpError(404, f"no page {name!r}")
        data = resources.files("kafkalite.webconsole").joinpath("static", name).read_bytes()
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        start_response("200 OK", [("Content-Type", f"{ctype}; charset=utf-8"),
                                  ("Content-Length", str(len(data))),
                                  ("Cache-Control", "no-cache")])
        return [data]

    @staticmethod
    def _body(environ) -> dict:
        try:
            return json_object(environ, MAX_BODY)
        except BadBody as exc:
            raise _HttpError(exc.status, str(exc)) from None

    @staticmethod
    def _json(start_response, status: int, value):
        data = json.dumps(value, allow_nan=False).encode()
        start_response(f"{status} {_REASONS.get(status, '')}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                        ("Cache-Control", "no-store")])
        return [data]

    # ---- the API: one method per action of ROUTES -----------------------------------------
    # Each takes the request's Access (authorization.py), the query, the JSON
    # body and the route's parameters; Access.check_route has already checked
    # the rule's needs on the cluster and on the route's topic or group.

    def _cluster(self, access, query, body):
        return api.cluster(self.admin, metric_values(self.registry),
                           topic_visible=access.sees(Op.DESCRIBE, Res.TOPIC),
                           group_visible=access.sees(Op.DESCRIBE, Res.GROUP))

    def _throughput(self, access, query, body):
        return self.history.throughput()

    def _metrics(self, access, query, body):
        return self._metric_families(query.get("filter", ""))

    def _list_topics(self, access, query, body):
        return api.list_topics(self.admin, metric_values(self.registry),
                               topic_visible=access.sees(Op.DESCRIBE, Res.TOPIC))

    def _create_topic(self, access, query, body):
        name = body.get("name")
        access.require(Op.CREATE, Res.TOPIC, [name] if isinstance(name, str) and name else [])
        return api.create_topic(self.admin, body)

    def _describe_topic(self, access, query, body, topic):
        return api.describe_topic(self.admin, topic, metric_values(self.registry),
                                  with_configs=access.sees(Op.DESCRIBE_CONFIGS, Res.TOPIC)(topic))

    def _delete_topic(self, access, query, body, topic):
        return api.delete_topic(self.admin, topic)

    def _alter_topic_configs(self, access, query, body, topic):
        return api.alter_topic_configs(self.admin, topic, body)

    def _read_records(self, access, query, body, topic):
        if not self._readers.acquire(blocking=False):
            raise _HttpError(503, f"{MAX_READERS} reads are running; try again")
        try:
            decoder = None
            if query.get("decode", "1") != "0":
                decoder = self.schemas.decoder(access.environ, _may_read_subject(access))
            return api.read_records(self.admin, self.bootstrap, topic, query, self.client_config,
                                    decoder)
        finally:
            self._readers.release()

    def _topic_subjects(self, access, query, body, topic):
        return self.schemas.topic_subjects(access.environ, topic, _may_read_subject(access))

    def _list_subjects(self, access, query, body):
        return self.schemas.list_subjects(access.environ, _may_read_subject(access))

    def _list_groups(self, access, query, body):
        return api.list_groups(self.admin, metric_values(self.registry),
                               group_visible=access.sees(Op.DESCRIBE, Res.GROUP),
                               topic_visible=access.sees(Op.DESCRIBE, Res.TOPIC))

    def _describe_group(self, access, query, body, group):
        topic_visible = access.sees(Op.DESCRIBE, Res.TOPIC)
        return {**api.describe_group(self.admin, group, topic_visible=topic_visible),
                "lag_history": self.history.lag(group, topic_visible)}

    def _reset_offsets(self, access, query, body, group):
        return api.reset_group_offsets(
            self.admin, group, body, topic_visible=access.sees(Op.DESCRIBE, Res.TOPIC),
            before_change=lambda topics: access.require(Op.READ, Res.TOPIC, topics))

    def _metric_families(self, needle: str) -> dict:
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


def _may_read_subject(access):
    """subject -> whether the user may Read it (a subject's ACLs are on the
    TOPIC ``subject:<name>``, registry/authorization.py)."""
    sees = access.sees(Op.READ, Res.TOPIC)
    return lambda subject: sees(SUBJECT_PREFIX + subject)


def _match(method: str, path: str) -> tuple[str, dict]:
    """(action, {segment name: value}) of the route ``path`` (under the
    prefix) and ``method`` name; 404 for no route, 405 for another method."""
    try:
        (action, names), values = ROUTER.find(method, path)
    except WrongMethod as exc:
        raise _HttpError(405, f"{method} is not allowed on {path} "
                              f"(only {', '.join(exc.allowed)})") from None
    except NoRoute:
        if path.startswith("/api/"):
            raise _HttpError(404, f"no API {path}") from None
        raise _HttpError(404, f"no page {path!r}") from None
    return action, dict(zip(names, values))


def make_app(bootstrap: str, registry, client_config: dict | None = None) -> ConsoleApp:
    """The factory ``kafkalite server`` hands the supervisor (``http_apps``)."""
    return ConsoleApp(bootstrap, registry, client_config=client_config)
