"""One Kafka client's connection to a KafkaListener (kafka_listener.py):
its read buffer, its requests waiting for their answers, its write queue,
and the two things asked of it on every request -- may it read its next
request (ordering and muting, as kafka_listener.py's docstring says), and
its queued answers written in one ``sendmsg``. Who calls it: the listener
that accepted it, on its process's loop; nothing here is thread-safe."""
from __future__ import annotations

import collections
import os
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
TLS_REGION_CHUNK = 256 * 1024       # file region bytes read per TLS write

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

    def write_queue(self) -> None:
        """Write the write queue's items in order while the socket takes
        them: file regions with sendfile (read and written in chunks over
        TLS), runs of answers with ``write_gathered``. Raises what the
        socket raised (BlockingIOError and SSLWant*: the rest waits for
        POLLOUT; any other OSError: the connection is broken)."""
        queue, fd = self.out, self.fd
        # ciphertext TlsConnection still holds goes first; nothing new until it is out
        blocked = self.tls and bool(self.sock.unsent) and not self.sock.flush()
        while queue and not blocked:
            item = queue[0]
            if type(item) is list:          # [file region, bytes sent so far]
                region, sent = item
                while sent < region.length:
                    if self.tls:
                        # Retried after SSLWantWrite with the same bytes, as
                        # OpenSSL requires: the region is immutable.
                        chunk = os.pread(region.fd, min(TLS_REGION_CHUNK, region.length - sent),
                                         region.position + sent)
                        n = self.sock.send(chunk) if chunk else 0
                    else:
                        n = os.sendfile(fd, region.fd, region.position + sent,
                                        region.length - sent)
                    if n == 0:
                        raise OSError(f"segment {region.file.name} ended before the region did")
                    sent += n
                    item[1] = sent
            elif not self.tls and len(queue) > 1 and type(queue[1]) is not list:
                # answers to requests read together (a producer's
                # pipelined Produce requests): one write for all of them
                if not self.write_gathered():
                    break
                continue
            else:
                # A fetch answer's header followed by its file region:
                # MSG_MORE lets the kernel put both in one segment, so
                # the client wakes once for the answer, not twice.
                more = not self.tls and len(queue) > 1 and type(queue[1]) is list
                n = self.sock.send(item, socket.MSG_MORE) if more else self.sock.send(item)
                if n < len(item):
                    queue[0] = memoryview(item)[n:]
                    break
            queue.popleft()

    def drain_tls(self, scratch: bytearray, chunk: int) -> None:
        """Read on into the read buffer while the socket has data, up to
        ``chunk`` bytes: an SSL read returns one TLS record (16 KiB) at
        most, and what the SSL object holds decrypted is invisible to
        poll, so it must not stay there."""
        sock = self.sock
        total = 0
        try:
            while total < chunk or sock.pending():
                n = sock.recv_into(scratch)
                if not n:
                    return          # the peer closed: the next read sees it
                self.rbuf += memoryview(scratch)[:n]
                total += n
        except OSError:
            pass    # SSLWantRead: nothing more now; anything else the next read handles
