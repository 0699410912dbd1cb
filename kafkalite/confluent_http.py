"""What Confluent's HTTP services share, for the two kafkalite serves (the
schema registry, registry/, and the REST proxy, rest_proxy/): their error
body and the WSGI app built at its first request.

Confluent's ``RestException`` answers ``{"error_code": N, "message": ...}``
with the HTTP status N itself when N is one (404, 409, 415) and N's first
three digits otherwise (40401 is a 404, 42201 a 422).

Which process runs it: the supervisor's HTTP threads. What it may import:
the standard library only (it sits at the bottom of the layers, so that the
two capabilities share it without importing each other).
"""
from __future__ import annotations

import threading


class ConfluentError(Exception):
    """An answer with Confluent's ``error_code`` and a readable message."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = error_code
        self.message = message

    @property
    def http_status(self) -> int:
        code = self.error_code
        while code >= 1000:
            code //= 10
        return code

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


def lazy_app(build):
    """A WSGI app (with a ``close()``) that calls ``build()`` for the real
    app at its first request, not on the server's way to ready (the
    services' modules and schema libraries take a while to import); the
    HTTP server answers on several threads, so one builds it."""
    lock, built = threading.Lock(), []

    def app(environ, start_response):
        with lock:
            if not built:
                built.append(build())
        return built[0](environ, start_response)

    def close() -> None:
        if built:
            built[0].close()
    app.close = close
    return app
