#!/usr/bin/env python
"""A partition worker's poll, one pass: zmq.Poller beside the epoll set (issue 72).

    python benchmarks/bench_poller.py [--passes 100000] [--rounds 3] [--quick] [--json FILE]

What a worker's loop registers: six ZeroMQ sockets that carry nothing
while Kafka clients produce (the control channel's DEALER, the native
ROUTER, the relay's DEALER, the coordinator's and two replica peers'
DEALERs, all connected on loopback TCP) and one Kafka connection with a
request waiting (a socket pair whose other end wrote once and is never
read: every pass finds it readable). The figure is this process's CPU
(``time.process_time``) per pass of ``poll`` -- ``zmq.Poller`` (libzmq's
``zmq_poll``: a ``poll`` and a ``getpid`` for each ZeroMQ socket beside the
pass's own ``poll``) and ``EpollPoller`` (server/network/poller.py: one
``epoll_wait``) -- the sides taking turns, round after round; the median
and spread are printed. Nothing here fails on timing.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import say  # noqa: E402

import zmq  # noqa: E402

from kafkalite.server.network.poller import EpollPoller, polled_context  # noqa: E402

QUICK = {"passes": 2_000, "rounds": 1}
IDLE_DEALERS = 5        # control, relay, coordinator, two replica peers
SIDES = ("zmq.Poller", "EpollPoller")


def pass_cpu_us(side: str, passes: int) -> float:
    """CPU µs per poll of ``side`` over the worker's registrations."""
    zctx = polled_context() if side == "EpollPoller" else zmq.Context.instance()
    poller = EpollPoller() if side == "EpollPoller" else zmq.Poller()
    peer = zmq.Context.instance().socket(zmq.ROUTER)
    port = peer.bind_to_random_port("tcp://127.0.0.1")
    dealers = [zctx.socket(zmq.DEALER) for _ in range(IDLE_DEALERS)]
    router = zctx.socket(zmq.ROUTER)
    router.bind_to_random_port("tcp://127.0.0.1")
    for d in dealers:
        d.connect(f"tcp://127.0.0.1:{port}")
    connection, client = socket.socketpair()
    try:
        for s in (*dealers, router):
            poller.register(s, zmq.POLLIN)
        poller.register(connection.fileno(), zmq.POLLIN)
        client.send(b"\0\0\0\x10")          # a request's length: readable from now on
        # until the ZeroMQ connections' handshakes are over: quiet sockets
        while len(dict(poller.poll(1000))) != 1:
            pass
        start = time.process_time()
        for _ in range(passes):
            dict(poller.poll(1000))
        return (time.process_time() - start) * 1e6 / passes
    finally:
        for s in (*dealers, router):
            poller.unregister(s)
            s.close(linger=0)
        peer.close(linger=0)
        connection.close()
        client.close()
        if isinstance(poller, EpollPoller):
            poller.close()


def main(argv=None) -> int:
    p = common.parser(__doc__)
    p.add_argument("--passes", type=int, default=100_000, help="polls a round and side")
    common.add_rounds(p, 3)
    common.add_quick(p, "a few thousand passes, one round: a smoke run")
    common.add_json(p)
    args = common.parse(p, argv, QUICK)
    figures: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(args.rounds):
        for side in (SIDES if r % 2 == 0 else SIDES[::-1]):
            figures[side].append(pass_cpu_us(side, args.passes))
    say(f"one poll pass: {IDLE_DEALERS + 1} idle ZeroMQ sockets and one readable connection, "
        f"{args.passes:,} passes a round, {args.rounds} round(s); load average "
        f"{os.getloadavg()[0]:.2f}")
    for side in SIDES:
        values = figures[side]
        say(f"  {side}, CPU per pass: median {statistics.median(values):.2f} µs "
            f"({min(values):.2f}-{max(values):.2f})")
    if args.json:
        common.write_json(args.json, {"passes": args.passes, "zmq_poller_cpu_us_per_pass":
                                      figures["zmq.Poller"], "epoll_poller_cpu_us_per_pass":
                                      figures["EpollPoller"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
