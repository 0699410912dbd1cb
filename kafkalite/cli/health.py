"""``kafkalite health``: one line on a running server's health, exit 0 if healthy, 1 if not.

It asks the supervisor's HTTP ``/health`` (server/metrics.py), found the way
the other client commands find the server: ``--url``; else the ``health``
entry of ``<data dir>/server.json`` (default ./kafkalite-data) when that
server is the one ``--bootstrap-server`` names (or none is named); else the
default metrics port (9404) on the ``--bootstrap-server`` host.

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import json
import os

from kafkalite.cli.arguments import client_args
from kafkalite.cli.client_config import DEFAULT_DATA_DIR

DESCRIPTION = ("Print one line on a running server's health (workers up, controller ready) "
               "from its /health endpoint; exit 0 if healthy, 1 if not or unreachable.")


def add_arguments(p) -> None:
    p.add_argument("--url", help="the health endpoint, e.g. http://127.0.0.1:9404/health "
                                 "(default: found as the other commands find the server)")
    p.add_argument("--http-cafile", metavar="PEM",
                   help="CA of the HTTP port's certificate, for an https:// endpoint "
                        "(a server with http_tls)")
    p.add_argument("--wait", action="store_true",
                   help="ask again until the server is healthy or --timeout has passed (for "
                        "scripts that start a server: a server not up yet is unreachable)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="where to find server.json (default ./kafkalite-data)")
    client_args(p)


def health_url(args) -> str:
    from kafkalite.server.config import DEFAULT_METRICS_PORT
    if args.url:
        return args.url
    try:
        with open(os.path.join(args.data_dir, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        info = {}
    wanted = args.bootstrap_server
    if info.get("health") and (wanted is None or wanted in (
            info.get("bootstrap.servers"), info.get("kafka.bootstrap.servers"))):
        return info["health"]
    host = wanted.rsplit(":", 1)[0] if wanted else "127.0.0.1"
    return f"http://{host}:{DEFAULT_METRICS_PORT}/health"


def run(args) -> int:
    if not args.wait:
        return _ask(args)[0]
    import time
    deadline = time.monotonic() + args.timeout
    while True:
        # quietly until the last answer: only that one is the command's
        code, line = _ask(args, quiet=True)
        if code == 0 or time.monotonic() + WAIT_STEP_S >= deadline:
            print(line if code == 0 else f"{line} (not healthy within {args.timeout:g} s)")
            return code
        time.sleep(WAIT_STEP_S)


# --wait: how often a server not healthy yet is asked again
WAIT_STEP_S = 0.2


def _ask(args, quiet: bool = False) -> tuple[int, str]:
    """The exit code and the line of one look at /health (printed unless
    ``quiet``)."""
    code, line = _look(args)
    if not quiet:
        print(line)
    return code, line


def _look(args) -> tuple[int, str]:
    import ssl                  # here: the CLI's parser imports this module (its start time)
    import urllib.error
    import urllib.request
    url = health_url(args)
    try:
        context = (ssl.create_default_context(cafile=args.http_cafile)
                   if args.http_cafile else None)
        with urllib.request.urlopen(url, timeout=args.timeout, context=context) as answer:
            code, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:       # 503: the server answered, unhealthy
        code, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        return 1, (f"kafkalite health: unreachable: no answer from {url}: "
                   f"{getattr(exc, 'reason', exc)}")
    try:
        state = json.loads(body)
    except ValueError:
        return 1, f"kafkalite health: unavailable: {url} answered {code} with no health report"
    up, total = state.get("workers_up", 0), state.get("workers", 0)
    ready = "controller ready" if state.get("controller_ready") else "controller not ready"
    down = state.get("workers_down") or []
    detail = f"{up}/{total} workers up, {ready}" + (
        f"; down: worker {', '.join(map(str, down))}" if down else "")
    refused = state.get("remote_storage_refused") or []
    if refused:
        detail += (f"; the remote store refuses {state.get('remote_storage_refused_count')} "
                   f"kind(s) of call, first: {refused[0]}")
    return (0 if code == 200 else 1,
            f"kafkalite health: {state.get('status', 'unavailable')}: {detail} ({url})")
