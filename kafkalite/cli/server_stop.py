"""``kafkalite server-stop``: stop the server of a data directory, like
kafka-server-stop.sh, and wait until it has exited.

The server is the supervisor whose pid its ``<data dir>/server.json``
names (default ./kafkalite-data): it is sent SIGTERM, which stops it
cleanly (its workers, then server.json removed), as Ctrl-C in its terminal
does. A page of the docs that starts a server of other settings stops the
one before it with this; a reader who started it with ``&`` in another
shell has no ``kill %1`` for it.

No server there (no server.json, or its pid no longer a kafkalite
process: a server killed -9 leaves its server.json) is not an error: the
command says so and exits 0, so a script may stop "whatever runs here".
A server that outlives ``--timeout`` is an error (exit 1), left running.

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

from kafkalite.cli.client_config import DEFAULT_DATA_DIR
from kafkalite.launcher import SERVER_FILE, pid_alive

HELP = "stop the server of a data directory and wait for it to exit (like kafka-server-stop)"
DESCRIPTION = ("Stop the server running on a data directory (SIGTERM to the supervisor its "
               "server.json names: a clean stop, as Ctrl-C) and wait until it has exited. "
               "Exit 0 when none runs there.")

# how often the supervisor is looked at while it stops
WAIT_STEP_S = 0.1


def add_arguments(p) -> None:
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                   help="the server's data directory (default ./kafkalite-data)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the server to exit (default 60)")


def _is_kafkalite(pid: int) -> bool:
    """Whether ``pid`` is a running kafkalite process: a server killed -9
    leaves its server.json, and its pid may since be another program's."""
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"kafkalite" in f.read()
    except OSError:
        return False


def run(args) -> int:
    path = os.path.join(args.data_dir, SERVER_FILE)
    try:
        with open(path) as f:
            pid = int(json.load(f)["pid"])
    except FileNotFoundError:
        print(f"kafkalite server-stop: no server runs on {args.data_dir} (no {SERVER_FILE})")
        return 0
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"kafkalite server-stop: {path} names no server: {exc}", file=sys.stderr)
        return 1
    if not _is_kafkalite(pid):
        print(f"kafkalite server-stop: no server runs on {args.data_dir} "
              f"(pid {pid} of its {SERVER_FILE} is gone)")
        return 0
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    except PermissionError:
        print(f"kafkalite server-stop: the server on {args.data_dir} (pid {pid}) is another "
              f"user's", file=sys.stderr)
        return 1
    deadline = time.monotonic() + args.timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            print(f"kafkalite server-stop: the server on {args.data_dir} (pid {pid}) still "
                  f"runs {args.timeout:g} s after SIGTERM", file=sys.stderr)
            return 1
        time.sleep(WAIT_STEP_S)
    print(f"kafkalite server-stop: stopped the server on {args.data_dir} (pid {pid})")
    return 0
