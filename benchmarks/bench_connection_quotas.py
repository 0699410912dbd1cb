"""The Kafka listener's accept path with connection-rate quotas (KIP-612):
new connections a second (connect, ApiVersions, close, one at a time) with
no quota configured, with an ``ip`` quota on the connecting IP (every
connection counted against it, the bound never reached), and, as the
baseline in the same run, a server built from the code before connection
quotas (``--baseline-tree``: a checkout of that commit with its extensions
built; skipped when not given).

    python benchmarks/bench_connection_quotas.py
    python benchmarks/bench_connection_quotas.py --baseline-tree /tmp/base --seconds 2

Each figure is the supervisor's Kafka port; rounds alternate between the
servers (and the quota off and on), the one going first rotated each
round, so that a loaded machine weighs on all of them alike, and the
best round of each is printed with the median.
Timing never fails anything: this prints figures.
"""
from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
import time

from kafkalite.protocol import ApiKey, encode_request
from kafkalite.launcher import ServerProcess

import common

RATE = "connection_creation_rate"
NO_QUOTA, IP_QUOTA = "no quota", "ip quota on 127.0.0.1 (never reached)"
BEFORE = "before (baseline)"


def api_versions(correlation: int) -> bytes:
    frame = encode_request(ApiKey.API_VERSIONS, 0, correlation, "bench", {})
    return struct.pack(">i", len(frame)) + frame


def connections_per_second(address: str, seconds: float) -> float:
    host, port = address.rsplit(":", 1)
    request = api_versions(1)
    n = 0
    end = time.monotonic() + seconds
    start = time.monotonic()
    while time.monotonic() < end:
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(request)
        size, = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))
        s.recv(size, socket.MSG_WAITALL)
        s.close()
        n += 1
    return n / (time.monotonic() - start)


def set_ip_quota(address: str, value) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "compat"))
    from compat_helpers import KafkaWire
    wire = KafkaWire(address)
    try:
        answer = wire.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{
            "entity": [{"entity_type": "ip", "entity_name": "127.0.0.1"}],
            "ops": [{"key": RATE, "value": value or 0.0, "remove": value is None}]}],
            "validate_only": False})["entries"][0]
        assert answer["error_code"] == 0, answer
    finally:
        wire.close()


def baseline_program(tree: str) -> list:
    """``python -m kafkalite`` from ``tree``, its workers too (PYTHONPATH)."""
    return [sys.executable, "-c",
            f"import os, sys, runpy; os.environ['PYTHONPATH'] = {tree!r}; "
            f"sys.path.insert(0, {tree!r}); "
            f"runpy.run_module('kafkalite', run_name='__main__', alter_sys=True)"]


def main() -> None:
    parser = common.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each round")
    common.add_rounds(parser, 5)
    parser.add_argument("--baseline-tree", metavar="DIR",
                        help="a kafkalite checkout from before connection quotas (built)")
    args = common.parse(parser)
    tmp = tempfile.mkdtemp(prefix="bench-connquota-")
    branch_server = ServerProcess(os.path.join(tmp, "branch"), workers=1)
    servers = [branch_server]
    if args.baseline_tree:
        servers.append(ServerProcess(os.path.join(tmp, "base"), workers=1,
                                     program=baseline_program(args.baseline_tree)))
    for srv in servers:
        srv.start()
    branch = branch_server.kafka_bootstrap
    sides = [NO_QUOTA, IP_QUOTA] + [BEFORE] * bool(args.baseline_tree)

    def round_of(side: str) -> float:
        if side == BEFORE:
            return connections_per_second(servers[1].kafka_bootstrap, args.seconds)
        set_ip_quota(branch, 1_000_000 if side == IP_QUOTA else None)
        try:
            return connections_per_second(branch, args.seconds)
        finally:
            set_ip_quota(branch, None)
    try:
        rounds = common.alternating(sides, args.rounds, round_of)
    finally:
        for srv in servers:
            srv.stop()
    common.say(f"connect + ApiVersions + close, one at a time, {args.rounds} rounds of "
               f"{args.seconds:g} s each:")
    rows = []
    for what, figure in (("best", rounds.best), ("median", rounds.median)):
        peer = figure(BEFORE) if args.baseline_tree else None
        rows += [common.Row(f"{NO_QUOTA}, {what}", figure(NO_QUOTA), "/s", peer, BEFORE),
                 common.Row(f"{IP_QUOTA}, {what}", figure(IP_QUOTA), "/s", figure(NO_QUOTA),
                            NO_QUOTA)]
    common.say_table(rows)
    common.say_load(rounds)

if __name__ == "__main__":
    main()
