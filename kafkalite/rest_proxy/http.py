"""The proxy's WSGI plumbing: request bodies, content types, answers.

A handler (routed by app.py's table, kafkalite/http_routes.py) takes the
Request and the path's segments and answers an Answer (status, JSON body
or None, content type), or an iterable of bytes for a streamed answer
(v3's streaming produce). A body that is not JSON is 400 (Confluent's
codes, errors.py).

Bodies: ``Content-Length`` or ``Transfer-Encoding: chunked`` (the
streaming mode's), decoded by the HTTP server (kafkalite/http_server.py).
A body over MAX_BODY_BYTES is 413, except a chunked one read as a stream
(``Request.stream``), whose size is not bounded (records are answered as
they come).

Who may call: the HTTP server's threads, any number at once.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs

from kafkalite.rest_proxy.authorization import Access
from kafkalite.rest_proxy.errors import (BAD_REQUEST, NOT_ACCEPTABLE, PAYLOAD_TOO_LARGE,
                                         UNSUPPORTED_MEDIA_TYPE, ProxyError)

MAX_BODY_BYTES = 64 << 20
READ_BYTES = 64 << 10
JSON = "application/json"
V2 = "application/vnd.kafka.v2+json"
V2_JSON = "application/vnd.kafka.json.v2+json"
V2_BINARY = "application/vnd.kafka.binary.v2+json"
V2_AVRO = "application/vnd.kafka.avro.v2+json"
V2_PROTOBUF = "application/vnd.kafka.protobuf.v2+json"
V2_JSONSCHEMA = "application/vnd.kafka.jsonschema.v2+json"
STATUS = {200: "200 OK", 201: "201 Created", 204: "204 No Content", 400: "400 Bad Request",
          401: "401 Unauthorized", 403: "403 Forbidden", 404: "404 Not Found",
          405: "405 Method Not Allowed", 406: "406 Not Acceptable", 409: "409 Conflict",
          413: "413 Payload Too Large", 415: "415 Unsupported Media Type",
          422: "422 Unprocessable Entity", 500: "500 Internal Server Error",
          503: "503 Service Unavailable"}


@dataclass
class Answer:
    status: int = 200
    body: object = None
    content_type: str = JSON


class Request:
    """One HTTP request as the handlers read it."""

    def __init__(self, environ):
        self.environ = environ
        self.method = environ.get("REQUEST_METHOD", "GET")
        self.path = environ.get("PATH_INFO", "") or "/"
        self.query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        self.content_type = (environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower()
        self.accept = environ.get("HTTP_ACCEPT") or ""
        self.chunked = "chunked" in (environ.get("HTTP_TRANSFER_ENCODING") or "").lower()
        self.base_url = _base_url(environ)
        self.access = Access(environ)      # the logged-in user's decisions (authorization.py)
        self._read = False

    def raw_body(self) -> bytes:
        """The whole body (Content-Length or chunked), at most MAX_BODY_BYTES."""
        if self.chunked:
            out = bytearray()
            for piece in self.stream():
                out += piece
                if len(out) > MAX_BODY_BYTES:
                    raise ProxyError(PAYLOAD_TOO_LARGE, f"a request body over "
                                                        f"{MAX_BODY_BYTES} bytes")
            return bytes(out)
        try:
            length = int(self.environ.get("CONTENT_LENGTH") or 0)
        except ValueError:
            raise ProxyError(BAD_REQUEST, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            raise ProxyError(PAYLOAD_TOO_LARGE, f"a request body of {length} bytes is over the "
                                                f"{MAX_BODY_BYTES} bytes this proxy takes")
        self._read = True
        return self.environ["wsgi.input"].read(length) if length > 0 else b""

    def stream(self):
        """The body's bytes as they arrive (a chunked body's come a chunk
        at a time: the HTTP server's ``wsgi.input`` reads no further than
        the chunk at hand); a malformed chunk is 400."""
        self._read = True
        rfile = self.environ["wsgi.input"]
        while True:
            try:
                piece = rfile.read(READ_BYTES)
            except ValueError as exc:
                raise ProxyError(BAD_REQUEST, str(exc)) from None
            if not piece:
                return
            yield piece

    def json(self, default=None):
        """The body as JSON (None or ``default`` when empty); 415 for a
        content type that is not JSON."""
        raw = self.raw_body()
        if not raw.strip():
            return default
        if self.content_type and not self.content_type.endswith("json"):
            raise ProxyError(UNSUPPORTED_MEDIA_TYPE, f"HTTP 415 Unsupported Media Type: "
                                                     f"{self.content_type}")
        try:
            return json.loads(raw)
        except RecursionError:
            raise ProxyError(BAD_REQUEST, "the request body is JSON nested too deeply") from None
        except ValueError as exc:
            raise ProxyError(BAD_REQUEST, f"the request body is not JSON: {exc}") from None

    def accepts(self, *types: str) -> str:
        """The first of ``types`` the Accept header takes (the first when it
        names none, or */*); 406 otherwise."""
        if not self.accept:
            return types[0]
        offered = [a.split(";")[0].strip().lower() for a in self.accept.split(",")]
        for a in offered:
            if a in types:
                return a
        if "*/*" in offered or "application/*" in offered:
            return types[0]
        raise ProxyError(NOT_ACCEPTABLE, "HTTP 406 Not Acceptable")


def _base_url(environ) -> str:
    scheme = environ.get("wsgi.url_scheme", "http")
    host = environ.get("HTTP_HOST") or \
        f"{environ.get('SERVER_NAME', 'localhost')}:{environ.get('SERVER_PORT', '')}"
    return f"{scheme}://{host}"


def encode(status: int, body, content_type: str):
    raw = b"" if body is None else json.dumps(body).encode()
    return (STATUS.get(status, f"{status} Error"),
            [("Content-Type", content_type), ("Content-Length", str(len(raw)))], raw)
