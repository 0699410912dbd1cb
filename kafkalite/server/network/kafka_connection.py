"""One Kafka client's connection to a KafkaListener (kafka_listener.py):
its read buffer, its requests waiting for their answers, its write queue,
and the two things asked of it on every request -- may it read its next
request (ordering and muting, as kafka_listener.py's docstring says), and
its queued answers written in one ``sendmsg``. Who calls it: the listener
that accepted it, on its process's loop; nothing here is thread-safe."""
from __future__ import annotations

import collections
import socket

import zmq

from kafkalite.protocol import ApiKey
from kafkalite.server.network.requests import ANONYMOUS
from kafkalite.server.network.tls import TlsConnection

# Produce requests read and appended while earlier ones wait for their
# answers (kafka_listener.py, "Ordering"): a producer's in-flight requests (Kafka's
# max.in.flight.requests.per.connection, 5 at most with idempotence)
PIPELINED_PRODUCES = 5
_PRODUCE = ApiKey.PRODUCE
# answers written by one sendmsg at most (well under the kernel's IOV_MAX, 1024)
GATHERED_WRITES = 64

# pyzmq's poll flags as plain ints: they are enum.Flag members, and every
# ``ev & zmq.POLLIN`` on this loop's path would be a Python-level enum
# operation (about 2% of a worker's time at 10,000 requests/s, py-spy)
POLLIN, POLLOUT, POLLERR = int(zmq.POLLIN), int(zmq.POLLOUT), int(zmq.POLLERR)
POLLIN_OR_ERR = POLLIN | POLLERR


def may_read(conn: "KafkaConnection") -> bool:
    """Whether ``conn`` may read its next request now."""
    if conn.closed or conn.closing or conn.throttled_until:
        return False
    waiting = conn.waiting
    if not waiting:
        return True
    if len(waiting) >= PIPELINED_PRODUCES:
        return False
    # a loop, not all() over a generator: this runs for every request read
    for slot in waiting:
        if slot[1] != _PRODUCE:
            return False
    return True


class KafkaConnection:
    """One client's TCP connection: read buffer, requests waiting for their
    answers, write queue."""

    __slots__ = ("sock", "fd", "peer", "address", "rbuf", "waiting", "out", "closed", "interest",
                 "dispatching", "tls", "handshake_wants", "sasl", "sasl_raw", "principal",
                 "closing", "reauth", "session_expiry", "reauth_started", "throttled_until",
                 "close_at", "active_at", "auth_deadline")

    def __init__(self, sock: socket.socket, peer):
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.rbuf = bytearray()
        # [correlation id, api key, its answer's out items or None] of each
        # request read and not answered yet, in request order (kafka_listener.py, "Ordering")
        self.waiting: collections.deque = collections.deque()
        self.out: collections.deque = collections.deque()  # bytes-likes and [region, sent]
        self.closed = False
        self.interest = 0
        self.dispatching = False
        self.tls = isinstance(sock, TlsConnection)
        self.handshake_wants = POLLIN if self.tls else 0   # 0: no TLS handshake pending
        self.sasl = None            # a SaslServer until the connection has authenticated
        self.sasl_raw = False       # SaslHandshake v0: raw SASL tokens follow, not requests
        self.principal = ANONYMOUS
        self.closing = False        # close once the queued answer is written
        self.reauth = None          # the SaslServer of a re-authentication in progress
        self.session_expiry = 0.0   # time.monotonic() the SASL session ends; 0: never
        self.reauth_started = 0.0   # when the last re-authentication began
        self.throttled_until = 0.0  # muted by a quota until this time.monotonic()
        self.close_at = 0.0         # a failed login's answer is written: closed at this time
        self.active_at = 0.0        # time.monotonic() of its last read or write event
        self.auth_deadline = 0.0    # closed then unless authenticated; 0: nothing to wait for

    def __repr__(self):
        return f"KafkaConnection({self.peer})"

    def write_gathered(self) -> bool:
        """Write the bytes items at the head of the write queue (up to
        ``GATHERED_WRITES``, the next file region's header with MSG_MORE)
        in one sendmsg; whether all of them went."""
        queue = self.out
        run = []
        for item in queue:
            if type(item) is list or len(run) == GATHERED_WRITES:
                break
            run.append(item)
        more = len(queue) > len(run) and type(queue[len(run)]) is list
        n = self.sock.sendmsg(run, (), socket.MSG_MORE if more else 0)
        for item in run:
            if n < len(item):
                queue[0] = memoryview(item)[n:]
                return False
            n -= len(item)
            queue.popleft()
        return True
