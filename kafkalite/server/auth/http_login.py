"""Logins on the HTTP port (``/metrics``, ``/health`` and the web console)
when security is on.

With security on (server/auth/security.py ``security_enabled``) the HTTP port is
a door like the others: every path but ``/health`` (a liveness probe that
says nothing of topics or groups) asks for HTTP Basic credentials, checked
against the same users as the Kafka listeners' SASL logins (the SCRAM or
PLAIN credentials of ``sasl_users_file``, credentials.py), so Prometheus's
``basic_auth`` scrapes it. The principal is ``User:<name>``; then

- ``/metrics`` (topic and group names are in its labels): a principal the
  authorizer allows Describe on the cluster, or, with the authorizer off,
  any user who logged in;
- the web console: any user who logged in. Its clients reach the node
  with the server's own key pair (security.py ``write_owner_keys``), so
  with the authorizer on it is the console that acts as the user: ``wrap``
  hands it ``environ["kafkalite.authorize"]``, ``(operation, resource
  type, name, audit) -> bool`` for this principal and host with the
  supervisor's authorizer, and each console action asks it what Kafka
  would ask of the same Kafka request (webconsole/authorization.py): a
  user who may not read a topic does not see its records, a topic they
  may not describe is not listed. A change (any method but GET and HEAD)
  must carry the ``X-Kafkalite-Console`` header, which the console's own
  page sends and a page of another origin cannot (a custom header needs a
  CORS preflight this port never approves), and an ``Origin``, when the
  browser sends one, of this host: a browser that remembers the login
  cannot be made to change anything by another site (cross-site request
  forgery).

The environ's names and the apps' view of the decisions are
kafkalite/http_access.py's (the one authorization layer of every HTTP
app: the console, the schema registry, the REST proxy, the Iceberg REST
catalog).

Failed logins are answered 401 and counted, never told apart (an unknown
user and a wrong password look the same), and the answer to credentials
that failed waits ``failed_auth_delay_ms`` (the node's
``connection_failed_authentication_delay_ms``, 100 ms by default, the Kafka
listener's delay): a client trying passwords on one kept-alive connection
gets one answer per delay, as on the Kafka and native listeners. The wait
is on the request's own thread (http_server.py serves each connection on
a thread of its own) and holds no lock, so other connections' requests,
and the accept thread, go on meanwhile. A request without credentials
(a browser's first, before it asks its user) is answered at once: it
guessed nothing. A login that passed is
remembered for LOGIN_CACHE_S, keyed by a keyed hash of the credentials, so
that a console polling every second does not pay PBKDF2 each time.

Who may call: the metrics server's request threads (metrics.py serve).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import threading
import time

from kafkalite.http_access import ENVIRON_AUTHORIZE, ENVIRON_PRINCIPAL
from kafkalite.protocol.enums import AclOperation, ResourceType
from kafkalite.server.auth.authorizer import CLUSTER_NAME

REALM = "kafkalite"
CSRF_HEADER = "HTTP_X_KAFKALITE_CONSOLE"     # X-Kafkalite-Console, as WSGI names it
LOGIN_CACHE_S = 60.0
LOGIN_CACHE_MAX = 1024
SAFE_METHODS = ("GET", "HEAD")


class HttpLogin:
    """``credentials``: a credentials.CredentialStore; ``authorizer``: the
    supervisor's (None when off); ``failed_auth_delay_ms``: how long the
    answer to credentials that failed waits."""

    def __init__(self, credentials, authorizer=None, failed_auth_delay_ms: int = 100):
        self.credentials = credentials
        self.authorizer = authorizer
        self.failed_auth_delay_ms = failed_auth_delay_ms
        self.failures = 0
        self._key = os.urandom(32)
        self._passed: dict[bytes, tuple[str, float]] = {}     # hash -> (principal, until)
        self._lock = threading.Lock()

    def principal(self, environ) -> str | None:
        """The User:<name> whose Basic credentials the request carries, or None."""
        header = environ.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic" or not value:
            return None
        digest = hmac.new(self._key, value.strip().encode(), hashlib.sha256).digest()
        now = time.monotonic()
        with self._lock:
            hit = self._passed.get(digest)
            if hit is not None and hit[1] > now:
                return hit[0]
        try:
            user, colon, password = base64.b64decode(value.strip(), validate=True) \
                .decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if not colon or not user or not self.credentials.verify_password(user, password):
            return None
        principal = f"User:{user}"
        with self._lock:
            if len(self._passed) >= LOGIN_CACHE_MAX:
                self._passed.clear()
            self._passed[digest] = (principal, now + LOGIN_CACHE_S)
        return principal

    def may_scrape(self, principal: str, host: str) -> bool:
        return self.authorizer is None or self.authorizer.authorize(
            principal, host, AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    def wrap(self, app, allowed=None, console: bool = False, json_errors: bool = False,
             error_body=None):
        """``app`` behind the login: ``allowed(principal, host)`` says who
        may use it (None: every user who logged in); ``console``: changes
        need the CSRF header and origin; ``json_errors``: a refusal is
        Confluent's JSON error body (``{"error_code": 401, "message": ...}``),
        which the schema registry's and REST proxy's clients parse, or
        ``error_body(status code, message)``'s when given (the Iceberg REST
        catalog's error model). The app finds the principal in
        ``environ["kafkalite.principal"]`` and, with the authorizer on, the
        decisions for it in ``environ["kafkalite.authorize"]``."""
        def refuse(start_response, status: str, message: str, headers=()):
            if error_body is not None:
                body = json.dumps(error_body(int(status[:3]), message)).encode()
                kind = "application/json"
            elif json_errors:
                body = json.dumps({"error_code": int(status[:3]), "message": message}).encode()
                kind = "application/json"
            else:
                body, kind = f"{message}\n".encode(), "text/plain; charset=utf-8"
            start_response(status, [*headers, ("Content-Type", kind)])
            return [body]

        def guarded(environ, start_response):
            principal = self.principal(environ)
            if principal is None:
                self.failures += 1
                if self.failed_auth_delay_ms > 0 and environ.get("HTTP_AUTHORIZATION"):
                    time.sleep(self.failed_auth_delay_ms / 1000)
                return refuse(start_response, "401 Unauthorized",
                              "log in with a user of the server's SASL users",
                              [("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"')])
            host = environ.get("REMOTE_ADDR", "")
            if allowed is not None and not allowed(principal, host):
                return refuse(start_response, "403 Forbidden", f"{principal} may not use this")
            if console and environ.get("REQUEST_METHOD", "GET") not in SAFE_METHODS:
                why = _forged(environ)
                if why:
                    start_response("403 Forbidden",
                                   [("Content-Type", "text/plain; charset=utf-8")])
                    return [f"refused a change {why}\n".encode()]
            environ[ENVIRON_PRINCIPAL] = principal
            if self.authorizer is not None:
                environ[ENVIRON_AUTHORIZE] = self._decisions(principal, host)
            return app(environ, start_response)
        return guarded

    def _decisions(self, principal: str, host: str):
        authorizer = self.authorizer

        def authorize(operation, resource_type, name, audit=True) -> bool:
            return authorizer.authorize(principal, host, operation, resource_type, name,
                                        audit=audit)
        return authorize


def _forged(environ) -> str | None:
    """Why a change may come from another site's page, or None."""
    if not environ.get(CSRF_HEADER):
        return "without the X-Kafkalite-Console header (the console's page sends it)"
    origin = environ.get("HTTP_ORIGIN")
    if origin and origin != "null":
        host = origin.split("://", 1)[-1].rstrip("/")
        if host != environ.get("HTTP_HOST", ""):
            return f"from another origin ({origin})"
    return None
