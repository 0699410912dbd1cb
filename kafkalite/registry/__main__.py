"""A schema registry in a process of its own, as Confluent's is deployed:
``python -m kafkalite.registry --bootstrap HOST:PORT [--host H] [--port P]``.

It serves the same app as a node's (rest.py), on the same HTTP server
(kafkalite/http_server.py), against the cluster at
``--bootstrap`` (kafkalite's native port), and joins the cluster's other
registries: one leads, the others forward writes to it (leader.py). Plain
HTTP without login (a node's registry has TLS and login: docs/schema-registry.md),
so it refuses a server with security on (one line, exit 2): every HTTP caller
could do anything, and on the server's host its writes would reach the
native port through the local door as its Unix user;
``--port 0`` takes a free port. Once it serves it prints one line,
``schema registry <url>``, to stdout; SIGTERM or SIGINT stops it.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading


def _secured(bootstrap: str) -> str | None:
    """Why this registry may not serve the server at ``bootstrap``, or
    None: it has no login, so it serves only a server whose doors do not
    ask who calls (on the server's host its client would otherwise take the
    native port's local door as this Unix user, for every HTTP caller)."""
    from kafkalite.client import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        endpoints = admin.server_endpoints(10.0)
    except Exception as exc:        # noqa: BLE001 -- said in one line, exit 2
        return f"cannot ask the server at {bootstrap} about itself: {exc}"
    finally:
        admin.close()
    if endpoints.get("security"):
        return (f"the server at {bootstrap} has security on, and a standalone registry has "
                f"no login: use the node's registry (docs/schema-registry.md)")
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kafkalite.registry")
    parser.add_argument("--bootstrap", required=True, help="the cluster's native HOST:PORT")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    refused = _secured(args.bootstrap)
    if refused:
        print(f"python -m kafkalite.registry: {refused}", file=sys.stderr)
        return 2
    from kafkalite.http_server import serve
    from kafkalite.registry import make_app
    app = make_app(args.bootstrap)
    server = serve(args.host, args.port, app, name="schema registry", any_port_if_taken=False)
    host = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{host}:{server.server_port}"
    app.advertise(url)
    stopped = threading.Event()

    def stop(signum, frame):
        stopped.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"schema registry {url}", flush=True)
    try:
        stopped.wait()
    finally:
        server.close()
        app.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
