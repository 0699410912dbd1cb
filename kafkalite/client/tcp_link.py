"""The direct TCP link: Produce and Fetch to a worker through its Kafka listener.

Every message on a ZeroMQ link passes ZeroMQ's I/O thread on each side: a
send queues the message and wakes that thread, which writes the socket;
an arriving message wakes it, and it wakes the reader. On the 2-core
development VM each such wake-up costs the sender 25-37 µs and an idle
round trip through two of them 0.2 ms (docs/performance.md, "Direct TCP links"), against
27 µs for a plain socket both of whose ends are Python. A ``TcpLink``
writes requests to the socket from the calling thread and reads answers
where the owner's poller woke, so the kernel wakes only the other end.

The protocol is Kafka's own (a 4-byte size, then the request header and
body, records inline; protocol/codec.py), spoken to the worker's PLAINTEXT
Kafka listener, which serves it already with everything a Kafka client
gets: quotas (a muted connection), limits on what a client may make the
worker buffer, fetches answered with ``sendfile``. A ZeroMQ link to the
same worker asks it for that listener's port first (the ``kafka_endpoint``
extension); the worker refuses when its native port is CURVE-protected (a
plaintext path would bypass the keys: ``principal`` stays ANONYMOUS here)
or it has no PLAINTEXT listener, and the client then keeps ZeroMQ.

To a worker in this process's network namespace the link is a Unix-domain
socket beside that same listener (kafkalite/local_socket.py), named in the
``kafka_endpoint`` answer: a loopback TCP send costs its sender about 8x the
CPU of a Unix-domain one on the development VM, and every request and
answer is one. ``kafkalite.local.socket`` false keeps TCP. The rest of this
module does not care which.

It is a ``Link`` (link.py), with ``request``/``wait_for`` as Connection has
them (a consumer's ListOffsets goes through its fetch link):

- ``send`` encodes, appends to the output buffer and writes what the
  socket takes now; the rest goes out when the socket is writable (``arm``
  asks the owner's poller for POLLOUT while some is left) or at the next
  ``receive``;
- ``receive`` reads what has arrived (at most READ_CHUNK a read; the
  body of an answer of DIRECT_MIN or more straight into a buffer of its
  own, one of two kept for reuse and handed to the process's next link
  when this one closes) and decodes every whole answer; an
  answer larger than ``max_response``
  (for a consumer, its fetch.max.bytes and one batch more) ends the link
  as a protocol error, so a confused peer cannot make it buffer without
  bound;
- ``alive`` turns False at the first EOF, reset or malformed answer; the
  owner then drops the link and sends what was in flight elsewhere, as
  for a ZeroMQ link whose worker went away (a worker's death closes its
  sockets, so this is at once too).

A request that gets no answer (acks=0) is sent with ``expect_response=False``;
Kafka's broker sends nothing for it either.

Who may call: one thread per link (its owner), as for every link.
"""
from __future__ import annotations

import itertools
import logging
import select
import socket
import struct
import time

from kafkalite import errors
from kafkalite.client.buffer_pool import BufferPool, SpareShelf
from kafkalite.client.connection import (CONNECT_TIMEOUT_MS, VERSIONS, Connection,
                                         KafkaTimeoutError, PeerLostError, endpoint_host_port)
from kafkalite.client.link import Link
from kafkalite.errors import KafkaError
from kafkalite.local_socket import connect as local_socket_connect
from kafkalite.local_socket import same_namespace
from kafkalite.protocol import decode_response, encode_request
from kafkalite.ratelimit import RateLimitedLog

# Small answers are read into one scratch buffer per link, allocated once:
# ``sock.recv(n)`` allocates n bytes for every read and shrinks and frees
# them, where an answer is mostly tens of bytes (with 256 KiB reads, a
# producer made an mmap, mremap and munmap a read, strace showed, and a
# munmap in a process with threads costs a TLB shootdown). Answers of
# DIRECT_MIN or more bypass it.
READ_CHUNK = 64 << 10
# An answer at least this big whose body is still coming is read straight
# into a buffer of its own (TcpLink._split).
DIRECT_MIN = 64 << 10
# Buffers kept for such answers, reused once nothing refers to what was
# decoded from them (buffer_pool.py): a consumer has one fetch out per link
# and decodes an answer before the next comes. A larger one is not kept:
# an idle consumer holds at most two.
SPARE_BUFFERS = 2
SPARE_MAX_BYTES = 32 << 20
# A closed link's buffers wait here for the process's next link (a Spark
# task's consumer, a consumer made per request): at most two, 64 MiB.
_SHELF = SpareShelf(SPARE_BUFFERS)
# An answer beyond this is not one a kafkalite client asked for: a
# producer's answers are small. A fetch's is up to its max_bytes and may
# overshoot by one batch, which is at most one request (the listener's
# 100 MiB cap): the consumer bounds its links by fetch_answer_bound.
DEFAULT_MAX_RESPONSE = 128 << 20
FETCH_OVERSHOOT = (100 << 20) + (1 << 20)
_size = struct.Struct(">i")
_POLLIN, _POLLOUT = 1, 2      # zmq.POLLIN / zmq.POLLOUT, without importing zmq here


class TcpLink(Link):
    def __init__(self, endpoint: str, host: str, port: int, client_id: str = "kafkalite", *,
                 max_in_flight: int | None = None, max_response: int = DEFAULT_MAX_RESPONSE,
                 local_socket: str | None = None):
        """``endpoint``: the worker's native endpoint (what the owner's
        metadata names it by); ``host``/``port``: its Kafka listener;
        ``local_socket``: the name of that listener's Unix-domain socket,
        tried first when given (a worker in this network namespace:
        kafkalite/local_socket.py), TCP when it cannot be reached.
        Connects at once; KafkaError (a NetworkError) when it cannot."""
        self.endpoint = endpoint
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.max_in_flight = max_in_flight
        self.max_response = max_response
        self.sock = None
        if local_socket:
            try:
                self.sock = local_socket_connect(local_socket, CONNECT_TIMEOUT_MS / 1000)
                self.address = f"{host}:{port} (unix {local_socket})"
            except OSError as exc:
                _log.debug("%s: its Unix-domain socket %r cannot be reached (%s): using TCP",
                           self.address, local_socket, exc)
        if self.sock is None:
            try:
                self.sock = socket.create_connection((host, port),
                                                     timeout=CONNECT_TIMEOUT_MS / 1000)
            except OSError as exc:
                raise errors.NetworkError(f"cannot connect to the Kafka listener at "
                                          f"{self.address}: {exc}") from None
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self._fd = self.sock.fileno()    # what a zmq.Poller reports it by
        self._ids = itertools.count(1)
        self._outstanding: dict[int, tuple[int, int]] = {}   # cid -> (api key, version)
        self._out = bytearray()          # encoded requests the socket has not taken yet
        self._in = bytearray()           # bytes read that do not make a whole answer yet
        self._frames: list = []          # whole answers read, not decoded yet
        self._frame: memoryview | None = None   # a large answer being read into its own buffer
        self._frame_got = 0              # ... and how much of it has come
        self._scratch: bytearray | None = None   # what small answers are read into
        # what large answers are read into
        self._buffers = _SHELF.stock(BufferPool(SPARE_BUFFERS, SPARE_MAX_BYTES))
        self._stash: dict[int, object] = {}
        self._poller = None              # the owner's poller it was last registered with
        self._armed = _POLLIN            # the events it was registered for with it
        self._alive = True
        self._why = ""

    # ---- sending -----------------------------------------------------------------------------

    def send(self, api_key: int, body: dict, *, expect_response: bool = True,
             version: int | None = None) -> int:
        version = VERSIONS[api_key] if version is None else version
        cid = next(self._ids) & 0x7FFFFFFF
        frame = encode_request(api_key, version, cid, self.client_id, body)
        if expect_response:
            self._outstanding[cid] = (api_key, version)
        self._out += _size.pack(len(frame))
        self._out += frame
        self._flush()
        return cid

    def _flush(self) -> None:
        """Write what the socket takes now without blocking."""
        while self._out and self._alive:
            try:
                n = self.sock.send(self._out)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._die(f"writing to {self.address} failed: {exc}")
                return
            del self._out[:n]

    # ---- receiving ---------------------------------------------------------------------------

    def receive(self) -> list:
        out = list(self._stash.items())
        self._stash.clear()
        self._flush()
        self._read()
        out += self._decode()
        return out

    def _read(self) -> None:
        """Everything the socket holds now: small answers through the input
        buffer, the body of a large one straight into its own buffer."""
        while self._alive:
            frame = self._frame
            try:
                if frame is None:
                    scratch = self._scratch
                    if scratch is None:
                        scratch = self._scratch = bytearray(READ_CHUNK)
                    n, asked = self.sock.recv_into(scratch), READ_CHUNK
                else:
                    asked = len(frame) - self._frame_got
                    n = self.sock.recv_into(frame[self._frame_got:])
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._die(f"reading from {self.address} failed: {exc}")
                return
            if not n:
                self._die(f"{self.address} closed the connection")
                return
            if frame is None:
                with memoryview(scratch) as view:
                    self._in += view[:n]
                self._split()
            else:
                self._frame_got += n
                if self._frame_got == len(frame):
                    self._frames.append(frame)
                    self._frame = None
            if n < asked:
                return                   # the socket is drained: spare the EAGAIN read

    def _split(self) -> None:
        """Whole answers out of the input buffer into ``_frames``. An answer
        over DIRECT_MIN bytes whose body is still coming gets a buffer of its
        size, which ``_read`` fills from the socket: a fetch of many
        megabytes is copied once, by the kernel, rather than through the
        input buffer and out of it again."""
        buf = self._in
        start = 0
        with memoryview(buf) as view:     # released before the buffer is cut below
            while len(buf) - start >= 4:
                (size,) = _size.unpack_from(buf, start)
                if not 4 <= size <= self.max_response:
                    self._die(f"{self.address} sent an answer of {size} bytes (not a Kafka "
                              f"listener, or not a PLAINTEXT one)")
                    break
                have = len(buf) - start - 4
                if have >= size:
                    self._frames.append(bytes(view[start + 4:start + 4 + size]))
                    start += 4 + size
                    continue
                if size >= DIRECT_MIN:
                    self._frame = memoryview(self._buffers.take(size))[:size]
                    self._frame[:have] = view[start + 4:]
                    self._frame_got = have
                    start = len(buf)
                break
        if start:
            del buf[:start]

    def _decode(self) -> list:
        got = []
        frames, self._frames = self._frames, []
        for frame in frames:
            if not self._alive:
                break
            (cid,) = _size.unpack_from(frame, 0)
            api_key, version = self._outstanding.pop(cid, (None, None))
            if api_key is None:
                self._die(f"{self.address} answered request {cid}, which is not out")
                break
            try:
                _, body = decode_response(api_key, version, frame)
            except Exception as exc:     # a ProtocolError: the stream cannot be trusted on
                self._die(f"{self.address} sent an answer that does not decode: {exc}")
                break
            got.append((cid, body))
        return got

    def _die(self, why: str) -> None:
        if self._alive:
            self._alive = False
            self._why = why

    # ---- waiting for one answer (Connection's shape) -----------------------------------------

    def wait_for(self, correlation_id: int, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            if correlation_id in self._stash:
                return self._stash.pop(correlation_id)
            for cid, body in self.receive():
                self._stash[cid] = body
            if correlation_id in self._stash:
                continue
            if not self._alive:
                self._outstanding.pop(correlation_id, None)
                raise PeerLostError(f"no response from {self.address}: {self._why}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._outstanding.pop(correlation_id, None)
                raise KafkaTimeoutError(f"no response from {self.address} within "
                                        f"{timeout:.1f} s (is the server running?)")
            _wait_on(self.sock, True, bool(self._out), min(remaining, 0.25))

    # send and wait; raises the KafkaError of an error reply (only send,
    # wait_for and Link._logged_in_again are used, which this link has in
    # Connection's shape)
    request = Connection.request

    # ---- Link --------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    def ready(self) -> bool:
        return self.max_in_flight is None or len(self._outstanding) < self.max_in_flight

    def register(self, poller) -> None:
        # one poller at a time: the producer's sender keeps one, the
        # consumer makes one for each wait
        poller.register(self.sock, _POLLIN)
        self._poller = poller
        self._armed = _POLLIN

    def unregister(self, poller) -> None:
        poller.unregister(self.sock)
        if self._poller is poller:
            self._poller = None

    def arm(self) -> bool:
        """Before the owner sleeps: POLLOUT too while requests wait to be
        written; False when an answer is here already (stashed by a wait,
        or a dead link the owner must see)."""
        if self._poller is not None:
            # only when it changes: the owner arms its links before every
            # sleep (a producer's sender a thousand times a second and more),
            # and POLLOUT is wanted only while the socket refuses what waits
            want = _POLLIN | (_POLLOUT if self._out and self._alive else 0)
            if want != self._armed:
                self._poller.modify(self.sock, want)
                self._armed = want
        return not self._stash and self._alive

    def woken(self, ready) -> bool:
        # answers come only through the socket; what is stashed, what waits
        # to be written and a death are the link's own to report
        return self._fd in ready or bool(self._stash) or bool(self._out) or not self._alive

    def alive(self) -> bool:
        return self._alive

    def close(self, linger_ms: int = 0) -> None:
        """Close; with ``linger_ms``, requests not written yet (acks=0) get
        that long to go out."""
        if linger_ms and self._out and self._alive:
            deadline = time.monotonic() + linger_ms / 1000
            while self._out and self._alive and time.monotonic() < deadline:
                _wait_on(self.sock, False, True, max(0.0, deadline - time.monotonic()))
                self._flush()
        self._alive = False
        self._frame = None
        self._frames = []
        _SHELF.put(self._buffers)
        try:
            self.sock.close()
        except OSError:
            pass


def _wait_on(sock, readable: bool, writable: bool, timeout: float) -> None:
    """Until ``sock`` is readable or writable as asked, or ``timeout`` s.
    poll(2), not select(2): select cannot take a descriptor numbered 1024 or
    more, which a process with many files open (a broker's tests, an
    application with many connections) hands out."""
    p = select.poll()
    p.register(sock, (select.POLLIN if readable else 0) | (select.POLLOUT if writable else 0))
    p.poll(max(0, int(timeout * 1000 + 0.999)))


def kafka_endpoint_of(conn, timeout: float) -> tuple[str, int, str | None]:
    """(host, port, Unix-domain socket name or None) of the PLAINTEXT Kafka
    listener of the worker behind ``conn`` (a Connection), asked with the
    ``kafka_endpoint`` extension; KafkaError when it has none to give. The
    host is the one ``conn`` reaches the worker at unless the worker
    advertises another; the socket name is given only when the worker is
    in this process's network namespace (local_socket.py)."""
    reply = conn.extension({"op": "kafka_endpoint"}, timeout)
    host = reply.get("host") or endpoint_host_port(conn.endpoint)[0]
    local = reply.get("local_socket")
    if not (local and same_namespace(reply.get("local_identity"))):
        local = None
    return host, int(reply["port"]), local



def resolve_transport(cfg: dict) -> bool:
    """Set ``cfg["kafkalite.transport"]`` when the user left it unset, and
    say whether the user chose it (True) or it was chosen here (False).

    Unset means the direct TCP link, the faster one (docs/performance.md, "Direct TCP
    links"), unless the config asks for what only ZeroMQ carries: CURVE keys
    (the TCP link is plaintext) or a proxy's ``kafkalite.request.principal``.
    A chosen ``tcp`` with CURVE keys is a ValueError: the user asked for
    both encryption and a plaintext link."""
    chosen = cfg.get("kafkalite.transport")
    if chosen is None:
        only_zmq = cfg.get("curve.server.key") or cfg.get("kafkalite.request.principal")
        cfg["kafkalite.transport"] = "zmq" if only_zmq else "tcp"
        return False
    if chosen == "tcp" and cfg.get("curve.server.key"):
        raise ValueError("kafkalite.transport 'tcp' is plaintext: it cannot be used with CURVE "
                         "keys (curve.server.key); use 'zmq'")
    return True


_log = logging.getLogger("kafkalite.client.tcp_link")
_fallback_log = RateLimitedLog(_log)


def fetch_answer_bound(fetch_max_bytes: int) -> int:
    """The largest answer a consumer's link may take for fetches of at most
    ``fetch_max_bytes`` (one batch may overshoot it, as in Kafka)."""
    return max(DEFAULT_MAX_RESPONSE, fetch_max_bytes + FETCH_OVERSHOOT)


def tcp_link_or(conn, timeout: float, max_in_flight: int | None = None,
                max_response: int = DEFAULT_MAX_RESPONSE, chosen: bool = True,
                local: bool = True):
    """A TcpLink to the worker behind ``conn`` (a watched Connection,
    closed once the TCP link stands), or ``conn`` itself when the worker
    offers no plaintext Kafka listener or it cannot be reached: the client
    keeps working over ZeroMQ. That is logged (rate-limited) as a warning
    when the user ``chosen`` the TCP link, at debug level when it was the
    default (a server whose Kafka listeners all want TLS or SASL is no
    fault of the client's). ``local``: over the listener's Unix-domain
    socket when the worker is in this network namespace
    (``kafkalite.local.socket``)."""
    try:
        host, port, local_name = kafka_endpoint_of(conn, timeout)
        link = TcpLink(conn.endpoint, host, port, conn.client_id, max_in_flight=max_in_flight,
                       max_response=max_response, local_socket=local_name if local else None)
    except KafkaError as exc:
        log = _fallback_log.warning if chosen else _log.debug
        log("kafkalite.transport 'tcp': %s offers no direct TCP link (%s); using ZeroMQ",
            conn.endpoint, exc)
        return conn
    conn.close()
    return link
