"""A schema registry in a process of its own, as Confluent's is deployed:
``python -m kafkalite.registry --bootstrap HOST:PORT [--host H] [--port P]``.

It serves the same app as a node's (rest.py) against the cluster at
``--bootstrap`` (kafkalite's native port), and joins the cluster's other
registries: one leads, the others forward writes to it (leader.py). Plain
HTTP without login (a node's registry has TLS and login: docs/schema-registry.md),
so not for a server with security on: every HTTP caller may do anything, and
on the server's host its writes reach the native port through the local door
as its Unix user (a guard that refuses a secured server is still to come);
``--port 0`` takes a free port. Once it serves it prints one line,
``schema registry <url>``, to stdout; SIGTERM or SIGINT stops it.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):     # noqa: A002 (the base class's name)
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.registry")
    parser.add_argument("--bootstrap", required=True, help="the cluster's native HOST:PORT")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from kafkalite.registry import make_app
    app = make_app(args.bootstrap)
    server = make_server(args.host, args.port, app, server_class=_Server,
                         handler_class=_QuietHandler)
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{server.server_port}"
    app.advertise(url)

    def stop(signum, frame):
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"schema registry {url}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
