"""Kafka Connect's REST API over a Herder (Flask, served by kafkalite's one
HTTP server, kafkalite/http_server.py, on threads of its own).

Paths and bodies as Kafka Connect's: ``GET/POST /connectors`` (``?expand=
status|info``; POST takes KIP-980's ``initial_state``), ``GET/DELETE /connectors/{name}``, ``GET/PUT
/connectors/{name}/config`` (and KIP-477's PATCH: merged, a null removes a
key), ``/status``, ``/topics`` (KIP-558's active topics; ``PUT
/topics/reset``), ``/tasks``,
``/tasks/{id}/status``, ``POST /tasks/{id}/restart``, ``POST
/connectors/{name}/restart`` (``includeTasks``, ``onlyFailed``), ``PUT
/pause``, ``/resume``, ``/stop``, ``GET/PATCH/DELETE /offsets`` (KIP-875),
``GET /connector-plugins`` (``connectorsOnly``), ``GET
/connector-plugins/{plugin}/config`` (KIP-769), ``PUT
/connector-plugins/{plugin}/config/validate``, ``GET /`` (version and the
Kafka cluster's id), ``GET/PUT /admin/loggers[/{name}]`` (KIP-495; ``PUT
?scope=cluster``, KIP-976: every worker of the cluster; loggers.py).
Errors answer Kafka's body ``{"error_code": <HTTP status>, "message":
...}``. The OpenAPI description is served at ``/openapi.json``
(openapi.py). In distributed mode a config write or an offsets change
(PATCH/DELETE) that reaches a worker other than the group's leader is
forwarded to the leader (``forward=false``
on the forwarded request; see distributed/), and ``POST
/connectors/{name}/tasks`` is Kafka's internal call of a connector's owner,
signed with the cluster's session key (KIP-507, signature.py: 400 without a
signature, 403 with a wrong one).

Logins (rest_login.py): on a worker whose ``security.protocol`` is SASL_*
(or with ``rest.authentication=sasl``) every path but ``GET /`` and that
signed internal call asks for HTTP Basic credentials, checked by a SASL
login to the brokers (401 with ``WWW-Authenticate`` otherwise); a request
forwarded to the leader carries its caller's ``Authorization``. A
connector created or reconfigured then acts as its caller (creator.py);
the REST API shows its client passwords as ``[hidden]``.

Who calls: the ``kafkalite connect`` command and tests (RestServer).
"""
from __future__ import annotations

import logging
import urllib.error
import urllib.parse
import urllib.request

from flask import Flask, Response, jsonify, request
from werkzeug.exceptions import HTTPException

from kafkalite.connect import loggers, plugins
from kafkalite.connect.clients import KAFKA, protocol_of
from kafkalite.connect.creator import as_creator, hide_credentials
from kafkalite.connect.errors import (REBALANCE_CONFLICT, AlreadyExistsException,
                                      BadRequestException, ConnectException, ForbiddenException,
                                      NotFoundException, NotLeaderException,
                                      RebalanceNeededException)
from kafkalite.connect.rest_login import CALLER, REALM, BrokersUnreachable, broker_login
from kafkalite.connect.signature import ALGORITHM_HEADER, SIGNATURE_HEADER

log = logging.getLogger("kafkalite.connect")
MAX_BODY = 8 << 20
_FROM_WORKER_CONFIG = object()
# Kafka's internal endpoint: signed with the session key instead of a login (signature.py)
_SIGNED_ENDPOINTS = {("POST", "put_task_configs")}
# a request forwarded to the leader may wait out a rebalance there, then its write: Kafka's
# default REST request timeout
FORWARD_TIMEOUT_S = 90


def _error(status: int, message: str):
    resp = jsonify({"error_code": status, "message": message})
    resp.status_code = status
    return resp


def _flag(name: str) -> bool:
    return request.args.get(name, "false").lower() == "true"


def _json_body():
    body = request.get_json(silent=True)
    if body is None:
        raise BadRequestException("Request body is not valid JSON")
    return body


def _forward_to_leader(e: NotLeaderException):
    """Kafka's HerderRequestHandler: a config write that reached a worker
    other than the leader goes to the leader's REST API marked
    ``forward=false``; its answer passes through unchanged. No second hop:
    a forwarded request that finds no leader here answers 409."""
    if e.leader_url is None or request.args.get("forward", "").lower() == "false":
        return _error(409, REBALANCE_CONFLICT)
    query = [(k, v) for k, v in request.args.items(multi=True) if k != "forward"]
    url = (e.leader_url + urllib.parse.quote(request.path) + "?" +
           urllib.parse.urlencode(query + [("forward", "false")]))
    # an internal request keeps its signature: the leader checks it over the same body
    signed = {h: request.headers[h] for h in (SIGNATURE_HEADER, ALGORITHM_HEADER)
              if h in request.headers}
    # the leader checks the caller's login again, and a create there acts as the caller
    if "Authorization" in request.headers:
        signed["Authorization"] = request.headers["Authorization"]
    req = urllib.request.Request(url, method=request.method, data=request.get_data() or None,
                                 headers={"Content-Type": request.content_type or
                                          "application/json", **signed})
    try:
        with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S) as r:
            status, body, ctype = r.status, r.read(), r.headers.get("Content-Type")
    except urllib.error.HTTPError as err:
        status, body, ctype = err.code, err.read(), err.headers.get("Content-Type")
    except OSError as err:
        # the leader died or is stopping: a new one is elected after its session expires
        return _error(409, f"{REBALANCE_CONFLICT}: the leader {e.leader_url} is unreachable "
                           f"({err})")
    if 200 <= status < 300 and e.settled is not None:
        e.settled()
    return Response(body, status=status, content_type=ctype)


def _unauthorized():
    resp = _error(401, "log in with HTTP Basic credentials of a user of the Kafka cluster "
                       "(curl -u USER)")
    resp.headers["WWW-Authenticate"] = f'Basic realm="{REALM}", charset="UTF-8"'
    return resp


def create_app(herder, login=_FROM_WORKER_CONFIG) -> Flask:
    """``login``: a rest_login.BrokerLogin, None for none; by default the
    one ``rest.authentication`` of the herder's worker config asks for."""
    app = Flask("kafkalite.connect")
    app.json.sort_keys = False
    # bodies are configs: a few KB; a huge one is refused (413), not buffered
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    worker_config = herder.worker.config
    if login is _FROM_WORKER_CONFIG:
        login = broker_login(worker_config)
    # kafkalite's native clients log in with the worker's key pair, not with SASL settings
    acts_as_creator = login is not None and protocol_of(worker_config) == KAFKA
    if login is not None and not acts_as_creator:
        log.warning("REST logins are on, but the worker's clients are kafkalite's native ones: "
                    "connectors act as the worker's principal, not as their creators "
                    "(kafkalite.client.protocol=kafka makes them act as their creators)")

    _login_hooks(app, login)
    _error_handlers(app)
    _admin_routes(app, herder)
    _connector_routes(app, herder, acts_as_creator)
    _task_routes(app, herder)
    _plugin_routes(app, herder)
    return app


def _login_hooks(app: Flask, login) -> None:
    """Each request's caller checked against the brokers (``login``; None: no
    logins) and set for its handling."""
    @app.before_request
    def _login():
        if login is None:
            return None
        endpoint = request.url_rule.endpoint if request.url_rule is not None else None
        if (request.method, endpoint) in _SIGNED_ENDPOINTS or \
                (request.method in ("GET", "HEAD") and endpoint == "root"):
            return None
        header = request.headers.get("Authorization")
        try:
            creds = login.login(header)
        except BrokersUnreachable as e:
            return _error(503, f"the credentials could not be checked: {e}")
        if creds is None:
            return _unauthorized()
        request.environ["kafkalite.connect.caller"] = creds
        request.environ["kafkalite.connect.caller_token"] = CALLER.set(header)
        return None

    @app.teardown_request
    def _logout(_exc):
        token = request.environ.pop("kafkalite.connect.caller_token", None)
        if token is not None:
            CALLER.reset(token)


def _shown(info: dict) -> dict:
    """A connector's info with its credentials hidden."""
    return {**info, "config": hide_credentials(info["config"])} if "config" in info \
        else info


def _as_caller(config: dict, acts_as_creator: bool) -> dict:
    """``config`` with the REST caller's login as its clients' (with
    ``acts_as_creator``), else as given."""
    creds = request.environ.get("kafkalite.connect.caller")
    if not acts_as_creator or creds is None:
        return config
    return as_creator(config, creds.user, creds.password)


def _as_caller_patch(patch: dict, acts_as_creator: bool) -> dict:
    """A config PATCH's: the caller's login replaces the owned override keys,
    as a PUT's would."""
    creds = request.environ.get("kafkalite.connect.caller")
    if not acts_as_creator or creds is None:
        return patch
    out = as_creator({k: v for k, v in patch.items() if v is not None}, creds.user,
                     creds.password)
    return {**{k: None for k, v in patch.items() if v is None and k not in out}, **out}


def _error_handlers(app: Flask) -> None:
    """Each exception as Kafka Connect's REST API answers it."""
    @app.errorhandler(NotFoundException)
    def _nf(e):
        return _error(404, str(e))

    @app.errorhandler(AlreadyExistsException)
    def _ae(e):
        return _error(409, str(e))

    @app.errorhandler(BadRequestException)
    def _br(e):
        return _error(400, str(e))

    @app.errorhandler(ForbiddenException)
    def _fb(e):
        return _error(403, str(e))

    @app.errorhandler(NotLeaderException)
    def _nl(e):
        return _forward_to_leader(e)

    @app.errorhandler(RebalanceNeededException)
    def _rn(e):
        return _error(409, str(e))

    @app.errorhandler(ConnectException)
    def _ce(e):
        return _error(500, str(e))

    @app.errorhandler(HTTPException)
    def _http(e):
        return _error(e.code, e.description)

    @app.errorhandler(Exception)
    def _any(e):
        log.exception("REST request failed")
        return _error(500, f"{type(e).__name__}: {e}")


def _admin_routes(app: Flask, herder) -> None:
    """The worker's own resources: version, health, loggers, the OpenAPI
    document."""
    @app.get("/")
    def root():
        from kafkalite import __version__
        return {"version": __version__, "commit": "kafkalite",
                "kafka_cluster_id": herder.cluster_id()}

    @app.get("/health")
    def health():
        code, body = herder.health()
        return jsonify(body), code

    @app.get("/admin/loggers")
    def all_loggers():
        return loggers.all_levels()

    @app.get("/admin/loggers/<name>")
    def get_logger(name):
        return loggers.level(name)

    @app.put("/admin/loggers/<name>")
    def set_logger(name):
        body = _json_body()
        if not isinstance(body, dict):
            raise BadRequestException("the body is {\"level\": \"DEBUG\"}")
        level = body.get("level")
        loggers.level_of(level)         # 400 or 404 before anything changes, as Kafka's
        scope = request.args.get("scope", "worker").lower()
        if scope == "cluster":
            herder.set_cluster_logger_level(name, level)
            return "", 204
        if scope != "worker":
            # Kafka's LoggingResource: an unknown scope is the worker's, with a warning
            log.warning("received invalid scope %r to adjust a logging level; the worker's "
                        "scope applies", scope)
        return jsonify(loggers.set_level(name, level))

    @app.get("/openapi.json")
    def openapi():
        from kafkalite.connect.openapi import SPEC
        return SPEC


def _connector_routes(app: Flask, herder, acts_as_creator: bool) -> None:
    """Connectors: list, create, describe, delete, and their configs. With
    ``acts_as_creator`` a connector's clients log in as the REST caller who
    wrote its config."""
    @app.get("/connectors")
    def list_connectors():
        names = herder.connectors()
        expand = request.args.getlist("expand")
        if not expand:
            return jsonify(names)
        out = {}
        for n in names:
            out[n] = {}
            if "status" in expand:
                out[n]["status"] = herder.status(n)
            if "info" in expand:
                out[n]["info"] = _shown(herder.connector_info(n))
        return out

    @app.post("/connectors")
    def create_connector():
        body = _json_body()
        if not isinstance(body, dict) or not isinstance(body.get("config", {}), dict):
            raise BadRequestException("the body is {\"name\": ..., \"config\": {...}}")
        config = dict(body.get("config") or {})
        name = body.get("name") or config.get("name")
        if not name or not str(name).strip():
            raise BadRequestException("Connector name cannot be empty")
        if "name" in config and config["name"] != name:
            raise BadRequestException("Connector name configuration (" + str(config["name"]) +
                                      ") doesn't match connector name in the URL (" + name + ")")
        _, info = herder.put_connector_config(
            name, _as_caller({**config, "name": name}, acts_as_creator), False,
            body.get("initial_state"))
        return _shown(info), 201

    @app.get("/connectors/<name>")
    def get_connector(name):
        return _shown(herder.connector_info(name))

    @app.delete("/connectors/<name>")
    def delete_connector(name):
        herder.delete_connector(name)
        return "", 204

    @app.get("/connectors/<name>/config")
    def get_config(name):
        return hide_credentials(herder.connector_config(name))

    @app.put("/connectors/<name>/config")
    def put_config(name):
        body = _json_body()
        if not isinstance(body, dict):
            raise BadRequestException("the body is the connector's config object")
        created, info = herder.put_connector_config(name, _as_caller(body, acts_as_creator), True)
        return _shown(info), 201 if created else 200

    @app.patch("/connectors/<name>/config")
    def patch_config(name):
        body = _json_body()
        if not isinstance(body, dict):
            raise BadRequestException("the body is an object of config keys to set (null "
                                      "removes one)")
        if body.get("name") is not None and body["name"] != name:
            raise BadRequestException("Connector name configuration (" + str(body["name"]) +
                                      ") doesn't match connector name in the URL (" + name + ")")
        return _shown(herder.patch_connector_config(name,
                                                    _as_caller_patch(body, acts_as_creator)))


def _task_routes(app: Flask, herder) -> None:
    """A connector's status, topics and tasks, its restarts, pause, resume and
    stop, and its offsets."""
    @app.get("/connectors/<name>/status")
    def status(name):
        return herder.status(name)

    @app.get("/connectors/<name>/topics")
    def topics(name):
        return {name: {"topics": herder.topics(name)}}

    @app.put("/connectors/<name>/topics/reset")
    def reset_topics(name):
        herder.reset_topics(name)
        return "", 202

    @app.get("/connectors/<name>/tasks")
    def tasks(name):
        return jsonify([_shown(t) for t in herder.task_configs(name)])

    @app.post("/connectors/<name>/tasks")
    def put_task_configs(name):
        # Kafka's internal endpoint: a connector's owner hands its task configs to the
        # leader, signed with the session key (KIP-507) over the body's bytes
        herder.put_task_configs(name, request.get_json(silent=True), request.headers,
                                request.get_data())
        return "", 204

    @app.get("/connectors/<name>/tasks/<int:task>/status")
    def task_status(name, task):
        return herder.task_status(name, task)

    @app.post("/connectors/<name>/tasks/<int:task>/restart")
    def restart_task(name, task):
        herder.restart_task(name, task)
        return "", 204

    @app.post("/connectors/<name>/restart")
    def restart(name):
        out = herder.restart(name, _flag("includeTasks"), _flag("onlyFailed"))
        return ("", 204) if out is None else (out, 202)

    @app.put("/connectors/<name>/pause")
    def pause(name):
        herder.pause(name)
        return "", 202

    @app.put("/connectors/<name>/resume")
    def resume(name):
        herder.resume(name)
        return "", 202

    @app.put("/connectors/<name>/stop")
    def stop(name):
        herder.stop_connector(name)
        return "", 204      # Kafka's stopConnector returns nothing: 204, where pause is 202

    @app.get("/connectors/<name>/offsets")
    def get_offsets(name):
        return herder.offsets(name)

    @app.patch("/connectors/<name>/offsets")
    def alter_offsets(name):
        body = _json_body()
        if not isinstance(body, dict) or "offsets" not in body:
            raise BadRequestException("the body is {\"offsets\": [{\"partition\": ..., "
                                      "\"offset\": ...}]}")
        return {"message": herder.alter_offsets(name, body["offsets"])}

    @app.delete("/connectors/<name>/offsets")
    def reset_offsets(name):
        return {"message": herder.reset_offsets(name)}


def _plugin_routes(app: Flask, herder) -> None:
    """Installed plugins, their config definitions and config validation."""
    @app.get("/connector-plugins")
    def connector_plugins():
        out = [{"class": java, "type": cls.TYPE, "version": cls().version()}
               for java, cls in plugins.connector_plugins()]
        if request.args.get("connectorsOnly", "true").lower() == "false":
            from kafkalite.connect.converters import CONVERTERS
            from kafkalite.connect.transforms import PREDICATES, TRANSFORMS
            from kafkalite import __version__
            out += [{"class": n, "type": "transformation", "version": __version__}
                    for n in TRANSFORMS]
            out += [{"class": n, "type": "predicate", "version": __version__}
                    for n in PREDICATES]
            out += [{"class": n, "type": "converter", "version": __version__}
                    for n in CONVERTERS]
        return jsonify(out)

    @app.get("/connector-plugins/<plugin>/config")
    def plugin_config(plugin):
        return jsonify(herder.plugin_config(plugin))

    @app.put("/connector-plugins/<plugin>/config/validate")
    def validate(plugin):
        body = _json_body()
        if not isinstance(body, dict):
            raise BadRequestException("the body is the connector's config object")
        cls = body.get("connector.class")
        if cls and plugins.connector_class(cls) is not plugins.connector_class(plugin):
            raise BadRequestException("Included connector type " + cls +
                                      " does not match request type " + plugin)
        return herder.validate({**body, "connector.class": cls or plugin})

def _access_log() -> logging.Logger:
    """Where each request's line goes (Kafka Connect's request log): on
    stderr unless the process set up its logging."""
    access = logging.getLogger("kafkalite.connect.rest")
    if not access.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        access.addHandler(handler)
        access.setLevel(logging.INFO)
    return access


class RestServer:
    """The REST API on ``host:port`` (port 0: any free port, see ``.port``)."""

    def __init__(self, herder, host: str = "127.0.0.1", port: int = 8083):
        from kafkalite.http_server import serve
        self._server = serve(host, port, create_app(herder), name="connect rest",
                             any_port_if_taken=False, access_log=_access_log())
        self.host, self.port = host, self._server.server_port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "RestServer":
        """(It serves from the moment it is made.)"""
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
