"""The route table of every HTTP app kafkalite serves: one convention for all of them.

A route is ``(method, template, target)``: the template a path whose
``{name}`` segments each match one non-empty path segment; ``target`` is
whatever the app dispatches on (a handler, an action's name, a handler and
its ACL rule). ``Router.find(method, path)`` answers ``(target,
[segment, ...])``, the segments in the template's order, each decoded:
the server hands ``PATH_INFO`` %-decoded as Latin-1 (PEP 3333) with an
encoded ``/`` left as ``%2F`` (so that it stays inside its segment), and
a segment here is that text read back as UTF-8 with its ``%2F`` decoded.

The same for every app: a trailing slash names the same path (``/a/`` is
``/a``); HEAD finds GET's route; the first route that matches answers. A
path no route has raises NoRoute; a path that routes have only with other
methods raises WrongMethod, whose ``allowed`` lists those methods (an
``Allow`` header's). Each app answers these in its own error body:
Confluent's (the schema registry, the REST proxy), the Iceberg spec's
(the REST catalog), the console's.

Who may call: the apps (registry/rest.py, rest_proxy/app.py,
iceberg_rest/app.py, webconsole/app.py), from any thread: a Router never
changes once made. What it may import: the standard library only (it sits
at the bottom of the layers, beside http_server.py).
"""
from __future__ import annotations

import re

_SEGMENT = re.compile(r"\{(\w+)\}")
_ENCODED_SLASH = re.compile("%2F", re.IGNORECASE)


class NoRoute(LookupError):
    """No route has this path."""


class WrongMethod(LookupError):
    """Routes have this path, with other methods only (``allowed``)."""

    def __init__(self, method: str, path: str, allowed: list[str]):
        super().__init__(f"{method} is not allowed on {path}")
        self.allowed = allowed


class Router:
    """``routes``: (method, template, target) triples, tried in order."""

    def __init__(self, routes):
        self.routes = [(method, _compile(template), target) for method, template, target in routes]

    def find(self, method: str, path: str):
        """(target, [decoded segment, ...]) of the first route of ``method``
        (HEAD: GET) whose template ``path`` matches."""
        if method == "HEAD" and not any(m == "HEAD" for m, _, _ in self.routes):
            method = "GET"
        path = path.rstrip("/") or "/"
        allowed = []
        for route_method, pattern, target in self.routes:
            match = pattern.fullmatch(path)
            if match is None:
                continue
            if route_method != method:
                if route_method not in allowed:
                    allowed.append(route_method)
                continue
            return target, [_decoded(g) for g in match.groups()]
        if allowed:
            raise WrongMethod(method, path, allowed)
        raise NoRoute(path)


def segment_names(template: str) -> list[str]:
    """The ``{name}``s of a template, in order (find's segments are theirs)."""
    return _SEGMENT.findall(template)


def _compile(template: str) -> re.Pattern:
    parts = _SEGMENT.split(template.rstrip("/") or "/")
    # split() alternates literal text and names: the names' places are one segment each
    return re.compile("".join(re.escape(p) if i % 2 == 0 else "([^/]+)"
                              for i, p in enumerate(parts)))


def _decoded(segment: str) -> str:
    try:
        text = segment.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        text = segment
    return _ENCODED_SLASH.sub("/", text)


class BadBody(ValueError):
    """A request body ``json_object`` refuses; ``status`` is the HTTP
    status to answer (400, 413 or 415)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def json_object(environ, max_bytes: int, types: tuple = ("application/json",)) -> dict:
    """The request's body, a JSON object ({} when empty); BadBody otherwise.

    JSON only: another site's page can POST a form or text/plain here
    without the browser asking first, but not application/json (that
    needs a CORS preflight, which kafkalite's apps never grant)."""
    import json
    ctype = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if ctype not in types:
        raise BadBody(415, "send the body as application/json")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise BadBody(400, "Content-Length is not a number") from None
    if length > max_bytes:
        raise BadBody(413, f"a request body may be at most {max_bytes} bytes")
    try:
        raw = environ["wsgi.input"].read(length) if length > 0 else b""
    except OSError:          # the HTTP server's read timeout: the client stopped sending
        raw = None
    if raw is None or len(raw) < length:
        raise BadBody(400, f"the body ended before its Content-Length ({length} bytes)")
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBody(400, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadBody(400, "the body must be a JSON object")
    return body
