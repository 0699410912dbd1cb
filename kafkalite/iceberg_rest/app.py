"""The REST catalog's WSGI app: its routes and answers.

Served (apache/iceberg's open-api/rest-catalog-open-api.yaml; no
``prefix``, so every path is ``/v1/...``):

- ``GET /v1/config``: no defaults or overrides, and the endpoints below
  (a client checks an operation against them before it calls it);
- ``GET /v1/namespaces`` (``?parent=``), ``GET`` and ``HEAD``
  ``/v1/namespaces/{ns}``, ``GET /v1/namespaces/{ns}/tables``;
- ``GET /v1/namespaces/{ns}/tables/{t}`` (loadTable: metadata-location and
  metadata, ``?snapshots=refs`` keeping the snapshots a branch or tag
  names, an ``ETag`` and ``If-None-Match`` answered 304; its ``config``,
  the FileIO properties a reader opens the table's files with: for a
  warehouse in the tiered store's S3 bucket ``s3.endpoint`` and
  ``s3.region``, never a credential, which the reader takes from its own
  AWS environment) and ``HEAD``;
- a multipart namespace's parts are separated by the unit separator
  (``%1F``), the spec's default; pagination is not offered, so every list
  is one answer without ``next-page-token``, as the spec asks of a server
  without it.

Refused: every write of the spec (create, update or drop a namespace or
its properties; create, register, commit, drop, rename a table; a
multi-table transaction) is 403 ForbiddenException for every user: the
partition leaders own the tables and record in each snapshot the offsets
it holds, which a commit from outside would break. Operations the
catalog does not serve (views, functions, server-side scan planning,
credentials, remote signing, metrics reports, OAuth tokens) are 406
UnsupportedOperationException, a method a path has not 405, any other
path 404; each in the spec's error model (errors.py).

Who may call: the HTTP server's threads (http_server.py), any number at once.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
from urllib.parse import parse_qs

from kafkalite.http_routes import NoRoute, Router, WrongMethod
from kafkalite.iceberg_rest.authorization import Access
from kafkalite.iceberg_rest.catalog import NodeCatalog
from kafkalite.iceberg_rest.errors import (BAD_REQUEST, FORBIDDEN, METHOD_NOT_ALLOWED,
                                           NOT_FOUND, SERVICE_FAILURE, UNSUPPORTED,
                                           IcebergError)

log = logging.getLogger(__name__)

NAMESPACE_SEPARATOR = "\x1f"        # the spec's default (%1F in a URL)
JSON = "application/json"
STATUS = {200: "200 OK", 204: "204 No Content", 304: "304 Not Modified",
          400: "400 Bad Request", 401: "401 Unauthorized", 403: "403 Forbidden",
          404: "404 Not Found", 405: "405 Method Not Allowed", 406: "406 Not Acceptable",
          500: "500 Internal Server Error"}
ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
]
_NS, _TABLE = "/v1/namespaces/{namespace}", "/v1/namespaces/{namespace}/tables/{table}"
# (method, path template, handler name), kafkalite/http_routes.py's table; a
# method of the spec's that writes is "write"
ROUTER = Router([
    ("GET", "/v1/config", "config"),
    ("GET", "/v1/namespaces", "list_namespaces"),
    ("POST", "/v1/namespaces", "write"),
    ("GET", _NS, "load_namespace"),
    ("HEAD", _NS, "namespace_exists"),
    ("DELETE", _NS, "write"),
    ("POST", _NS + "/properties", "write"),
    ("GET", _NS + "/tables", "list_tables"),
    ("POST", _NS + "/tables", "write"),
    ("POST", _NS + "/register", "write"),
    ("GET", _TABLE, "load_table"),
    ("HEAD", _TABLE, "table_exists"),
    ("POST", _TABLE, "write"),
    ("DELETE", _TABLE, "write"),
    ("POST", _TABLE + "/unregister", "write"),
    ("POST", "/v1/tables/rename", "write"),
    ("POST", "/v1/transactions/commit", "write"),
])
UNSUPPORTED_PATHS = re.compile(
    r"/v1/(oauth/tokens|views/rename|namespaces/[^/]+/(views|functions|register-view)(/.*)?"
    r"|namespaces/[^/]+/tables/[^/]+/(plan|tasks|credentials|sign|metrics)(/.*)?)")


def make_app(catalog_file: str, catalog_name: str,
             file_io: dict | None = None) -> "CatalogApp":
    return CatalogApp(NodeCatalog(catalog_file, catalog_name, file_io))


def _namespace(segment: str) -> tuple[str, ...]:
    parts = tuple(segment.split(NAMESPACE_SEPARATOR))
    if not all(parts):
        raise IcebergError(BAD_REQUEST, f"Invalid namespace: {segment!r}")
    return parts


class CatalogApp:
    def __init__(self, catalog: NodeCatalog):
        self.catalog = catalog

    def close(self) -> None:
        self.catalog.close()

    def __call__(self, environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        # the server decodes the path's %-escapes as Latin-1 (PEP 3333); names are UTF-8
        path = (environ.get("PATH_INFO", "") or "/").encode("latin-1").decode("utf-8", "replace")
        headers = []
        try:
            status, body, headers = self._dispatch(method, path.rstrip("/") or "/", environ)
        except IcebergError as exc:
            status, body = exc.code, exc.body()
            if exc.code == 405:
                headers = [("Allow", exc.allow)]
        except Exception:               # a bug: answered, logged, never a dropped connection
            log.exception("iceberg rest catalog: %s %s", method, path)
            status, body = 500, IcebergError(
                SERVICE_FAILURE, "Internal Server Error (see the server's log)").body()
        raw = b"" if body is None or method == "HEAD" else json.dumps(body).encode()
        start_response(STATUS.get(status, f"{status} Error"),
                       [*headers, *([("Content-Type", JSON)] if body is not None else []),
                        ("Content-Length", str(len(raw)))])
        return [raw]

    def _dispatch(self, method: str, path: str, environ):
        try:
            name, groups = ROUTER.find(method, environ.get("PATH_INFO", "") or "/")
        except WrongMethod as wrong:
            exc = IcebergError(METHOD_NOT_ALLOWED, f"{method} is not allowed on {path}")
            exc.allow = ", ".join(wrong.allowed)
            raise exc from None
        except NoRoute:
            if UNSUPPORTED_PATHS.fullmatch(path):
                raise IcebergError(UNSUPPORTED, f"kafkalite's Iceberg REST catalog does not "
                                                f"support {method} {path}") from None
            raise IcebergError(NOT_FOUND, f"No route for {method} {path}") from None
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        return getattr(self, name)(Access(environ), query, environ, *groups)

    # ---- handlers: (access, query, environ, *path groups) -> (status, body, headers) --------

    def config(self, access, query, environ):
        return 200, {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}, []

    def write(self, access, query, environ, *groups):
        raise IcebergError(FORBIDDEN, "kafkalite's Iceberg tables are written by the partition "
                                      "leaders of their topics only: produce to the topic "
                                      "instead (this catalog is read-only)")

    def list_namespaces(self, access, query, environ):
        parent = _namespace(query["parent"]) if query.get("parent") else ()
        return 200, {"namespaces": [list(ns) for ns in self.catalog.namespaces(parent)]}, []

    def load_namespace(self, access, query, environ, namespace):
        ns = _namespace(namespace)
        return 200, {"namespace": list(ns),
                     "properties": self.catalog.namespace_properties(ns)}, []

    def namespace_exists(self, access, query, environ, namespace):
        self.catalog.namespace_properties(_namespace(namespace))    # 404 if not there
        return 204, None, []

    def list_tables(self, access, query, environ, namespace):
        ns = _namespace(namespace)
        return 200, {"identifiers": [{"namespace": list(ns), "name": name}
                                     for name in self.catalog.tables(ns)
                                     if access.sees_table(name)]}, []

    def table_exists(self, access, query, environ, namespace, table):
        ns = _namespace(namespace)
        access.require_describe(table)
        if not self.catalog.table_exists(ns, table):
            self.catalog.load_table(ns, table)          # the 404 of a missing table
        return 204, None, []

    def load_table(self, access, query, environ, namespace, table):
        ns = _namespace(namespace)
        access.require_read(table)
        snapshots = query.get("snapshots", "all")
        if snapshots not in ("all", "refs"):
            raise IcebergError(BAD_REQUEST, f"snapshots must be all or refs, not {snapshots!r}")
        location, metadata = self.catalog.load_table(ns, table)
        if snapshots == "refs":
            referenced = {ref["snapshot-id"] for ref in metadata.get("refs", {}).values()}
            metadata["snapshots"] = [s for s in metadata.get("snapshots", [])
                                     if s["snapshot-id"] in referenced]
        # the same metadata file and the same snapshots choice: the same answer
        etag = '"%s"' % hashlib.sha256(f"{location}\n{snapshots}".encode()).hexdigest()[:32]
        if environ.get("HTTP_IF_NONE_MATCH") == etag:
            return 304, None, [("ETag", etag)]
        return 200, {"metadata-location": location, "metadata": metadata,
                     "config": dict(self.catalog.file_io)}, [("ETag", etag)]
