"""Kafka's own wire protocol over TCP, for Kafka's own clients.

One module of about 1,050 lines, with reason: a connection's states
(reading, TLS handshake, SASL, answers kept in order, throttled,
closing) and the listener's poll-loop hooks act on the same socket and
buffers; the TLS and SASL logic itself lives in auth/.

Every broker process (the supervisor and each partition worker) runs one
``KafkaListener`` inside its single-threaded poll loop: the listening socket
and every connection are plain non-blocking sockets whose descriptors sit in
the process's ``zmq.Poller`` beside its ZeroMQ sockets. Who calls it: the
supervisor and the worker, from their loops (``attach``, ``on_events``,
``respond``, ``close``); nothing here is thread-safe.

Framing (Kafka's): every request and response is an INT32 size followed by
that many bytes -- request header v1/v2 + body, response header v0/v1 +
body (``kafkalite.protocol`` encodes and decodes both; ApiVersions answers
always carry header v0). A frame larger than ``socket.request.max.bytes``
(100 MiB, as in Kafka), a negative size, or bytes that do not decode close
that connection and nothing else. A ZeroMQ peer (a native client given this
port instead of the native one) is told apart by its ZMTP signature and
closed with its own warning, one a minute at most: it reconnects ten times
a second, and each attempt is the same mistake, not new bad input.

Ordering: responses leave in request order, even when a handler defers
its reply (an acks=all produce waiting for the in-sync replicas, a
long-poll fetch, a JoinGroup, an admin op waiting for workers). Each
request read takes a slot in the connection's ``waiting`` queue; an answer
fills its request's slot, and answers go out from the head of the queue as
far as the slots are filled. As in Kafka, a connection is *muted* -- nothing
more is read from it -- while a request is being served, with one
exception Kafka does not make: while every request waiting is a Produce,
up to ``PIPELINED_PRODUCES`` are read and appended one after the other. An
acks=all produce waits for its followers' next fetches, which would
otherwise leave the leader idle for that round trip with the client's next
requests unread in the socket (a producer keeps up to five in flight); they
are appended in the order sent, as they would be one at a time. Produce with
acks=0 is the one request that is never answered; its slot goes at once.
The answers given while the requests of one read are served go out
together once they all are, in one ``sendmsg``: a producer that sends a
request per message (linger.ms 0) and finds the broker a little behind has
a burst of them read at once, and a write (and a wake-up of the client)
per answer was what kept the broker behind (issue 46). While no request
of the connection waits for its answer, the Produce requests of a read
are split off and answered in one C call (ext/produce_frames.pyx): an
answer given at once needs no slot to keep its place (issue 72). On a
plain connection the whole wake-up -- the read, those frames, the write of
their answers -- is one C call (ext/kafka_wake.pyx), back here at the rest.

Quotas (quotas.py): a request that put its client over a quota is
answered at once with ``throttle_time_ms`` and its connection then stays
muted for that long (KIP-219): nothing more is read from it until
``expire`` (called by the process's loop, which wakes for
``next_deadline``) lets it go.

Connection-rate quotas (connection_quotas.py, KIP-612): a connection over
its IP's ``connection_creation_rate`` is closed as soon as it is accepted,
before anything is read; over ``max_connection_creation_rate`` the listener
stops polling its listening socket until its rate is back at the bound
(``expire`` resumes it), so the connections wait in the kernel's backlog.

Requests become ``RequestContext``s (requests.py) handed to the process's
dispatcher, and this listener is their responder. A request for an API the
process does not serve is passed, undecoded, to ``relay`` when there is one
(a worker relays to the supervisor, relay.py) and stays muted until the
answer comes back; without a relay the dispatcher refuses it.

Zero copy: response records values may be segment file regions
(``FileRegion``); they are written with ``os.sendfile`` between the encoded
parts around them, never read into memory -- except small ones (at most
``INLINE_REGION_BYTES`` each, ``INLINE_ANSWER_BYTES`` an answer), which are
read into the answer so that it goes out in one write: a fetch of many
partitions with a few records each would otherwise cost two system calls
per partition and wake the client for each. A socket that would block keeps
the rest of the response in the connection's write queue until POLLOUT.

Unix-domain sockets (local_socket.py): a listener made with
``local_socket=True`` (the worker's first PLAINTEXT one) also accepts on an
abstract Unix-domain socket, which native clients in the same network
namespace use instead of loopback TCP: a send there costs a fraction of a
TCP one. Its connections are served exactly as TCP ones, their peer taken
as 127.0.0.1.

Security (security.py): with a ``ListenerSecurity`` the listener speaks
SSL, SASL_PLAINTEXT or SASL_SSL. TLS runs on the same non-blocking sockets
(tls.py's TlsConnection: OpenSSL through memory BIOs, the socket read in
big chunks): the handshake advances on each POLLIN/POLLOUT it asks for, so
it never blocks the loop; a failed handshake (an expired certificate, a
plaintext client) closes that connection only. Over TLS a file region
cannot go out with sendfile (the kernel would send it unencrypted): it is
read in chunks of ``TLS_REGION_CHUNK`` and written through the TLS
connection, whose ciphertext the socket did not take keeps POLLOUT on.
Bytes read but not yet decrypted are invisible to poll, so a read drains
them before returning. On a SASL
listener a connection serves only ApiVersions, SaslHandshake and
SaslAuthenticate until it has authenticated; anything else closes it, as
Kafka does. A failed login is answered, and the connection closed
``connection_failed_authentication_delay_ms`` (100 ms, Kafka's default)
after that answer is written, reading nothing more meanwhile (``_linger``).
The authenticated principal (``User:<name>``, or the client
certificate's DN under mutual TLS) goes on each request's context.

Idle connections (Kafka's Selector): a connection that has had nothing
read or written for ``connections_max_idle_ms`` (600000, Kafka's default;
negative: never) is closed, as Kafka closes it; a client opens a new one
when it next needs this broker. One with a request still being served (a
deferred answer), muted by a quota or closing anyway is not idle, and a
deferred answer counts as activity when it is sent. On an SSL or SASL
listener a connection must also have authenticated -- finished its TLS
handshake, and its SASL login on a SASL listener -- within
``authentication_timeout_ms`` (kafkalite's own, 10 s) of being accepted,
or it is closed: without that, connections that never start a handshake
would hold a descriptor each until they went idle. Kafka has no such bound
and leaves them to its idle timeout. Cost: no timer per connection and no
scan. Connections are kept in last-activity order (``_by_activity``, an
OrderedDict: an event moves its connection to the end) and unauthenticated
ones in accept order (``_authenticating``), which is deadline order since
every one has the same timeout; ``expire`` looks at the head of each and
stops at the first connection not yet due, so each event costs one
``move_to_end`` and each close its own work. ``next_deadline`` tells the
loop when the first of these (and of the throttles, lingering closes and
accept pauses) falls due; it is kept as one time (``_due``), lowered when a
deadline is added and recomputed when ``expire`` runs, so a loop pass with
nothing due costs ``expire`` one clock read and ``next_deadline`` none: a
busy worker makes a pass per request read.

Re-authentication (KIP-368): with ``connections_max_reauth_ms`` > 0, a
client that authenticated with SaslAuthenticate v1+ is told that lifetime
(``session_lifetime_ms``); older clients are told 0 and never expire, as in
Kafka. Once the session has expired, the connection's next request other
than a re-authentication closes it. A SaslHandshake on an authenticated
connection begins a re-authentication (at most one a second, else it is
answered ILLEGAL_SASL_STATE): the same mechanism, then SaslAuthenticate
against the credentials as they are now, which must yield the same
principal; success starts a new session on the same connection, failure
(a deleted user, a changed password) answers the error and closes it.
Re-authentications and expired sessions closed are counted in the metrics.
"""
from __future__ import annotations

import collections
import logging
import os
import socket
import ssl
import struct
import time

import zmq

from kafkalite import errors
from kafkalite._ext import kafka_wake
from kafkalite._ext.kafka_wake import KafkaWake
from kafkalite._ext.produce_frames import ProduceFrames
from kafkalite.local_socket import PEER as LOCAL_PEER
from kafkalite.local_socket import listen as local_socket_listen
from kafkalite.local_socket import tune as local_socket_tune
from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ProtocolError,
    decode_request,
    encode_response,
    encode_response_wire,
    peek_request_header,
)
from kafkalite.protocol.messages import RESPONSES
from kafkalite.protocol.native import zmtp_signature
from kafkalite.server.ratelimit import RateLimitedLog
from kafkalite.server.network.port_holder import held_by
from kafkalite.server.network.requests import (
    ANONYMOUS,
    NO_RESPONSE,
    Listener,
    RequestContext,
    RequestDispatcher,
    api_versions_body,
)
from kafkalite.server.network.kafka_connection import (
    POLLIN,
    POLLIN_OR_ERR,
    POLLOUT,
    KafkaConnection,
    may_read,
)
from kafkalite.server.network.listener_deadlines import NO_DEADLINE, ListenerDeadlines
from kafkalite.server.network.tls import TlsConnection
from kafkalite.server.auth.security import ListenerSecurity, certificate_principal

log = logging.getLogger("kafkalite.kafka")

_WAKE_NOT_TAKEN, _WAKE_SERVED = kafka_wake.NOT_TAKEN, kafka_wake.SERVED     # (_wake)

MAX_REQUEST_BYTES = 100 * 1024 * 1024   # Kafka's socket.request.max.bytes default
RECV_CHUNK = 1024 * 1024
LISTEN_BACKLOG = 128
ACCEPT_RETRY_S = 0.1                # after accept() failed (EMFILE): accept again then
# A region this small is read into the answer rather than sent with
# sendfile, up to this much of one answer (see "Zero copy" above).
INLINE_REGION_BYTES = 64 * 1024
INLINE_ANSWER_BYTES = 1024 * 1024
# What a SASL listener serves before authentication (Kafka's SaslServerAuthenticator).
SASL_APIS = (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
MIN_REAUTH_INTERVAL_S = 1.0     # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS
# The defaults of connections_max_idle_ms (Kafka's connections.max.idle.ms)
# and authentication_timeout_ms, as ServerConfig has them (config.py), for a
# listener made without them
CONNECTIONS_MAX_IDLE_MS = 600_000
AUTHENTICATION_TIMEOUT_MS = 10_000
_PRODUCE = ApiKey.PRODUCE
_size = struct.Struct(">i")
_pack_size = _size.pack
_unpack_size = _size.unpack_from


def _one_pass(answer, header, request):
    """What a dispatcher's one-pass path (``answer``) gives for a request,
    or the exception it raised: one request must not take the process
    down (the listener answers it as a fault)."""
    try:
        return answer(header, request)
    except Exception as exc:
        return exc


def _correlation_id(frame) -> int:
    """The correlation id an encoded response (header + body) starts with."""
    return _unpack_size(frame, 0)[0]


def error_body(api_key: int, api_version: int, code: int, message: str) -> dict | None:
    """The response body telling a whole request's error in the API's own
    schema: its top-level error_code (and error_message where the schema
    has one); None when this version has no top-level error_code."""
    response = RESPONSES.get(api_key)
    if response is None:
        return None
    fields = {f.name: f for f in response.fields}
    code_field = fields.get("error_code")
    if code_field is None or api_version not in code_field.versions:
        return None
    body = {"error_code": code}
    if "error_message" in fields:
        body["error_message"] = message or None
    return body


class KafkaListener(ListenerDeadlines):
    """A TCP listener serving Kafka clients through ``dispatcher``.

    ``connections_max_idle_ms`` and ``authentication_timeout_ms`` are the
    server settings of those names ("Idle connections" above); the process
    that makes the listener passes them, else Kafka's and kafkalite's
    defaults hold."""

    def __init__(self, host: str, port: int, dispatcher: RequestDispatcher, *, relay=None,
                 name: str = "broker", max_request_bytes: int = MAX_REQUEST_BYTES,
                 fallback_to_any_port: bool = False, security: ListenerSecurity | None = None,
                 listener_name: str | None = None, connection_quotas=None,
                 local_socket: bool = False,
                 connections_max_idle_ms: int = CONNECTIONS_MAX_IDLE_MS,
                 authentication_timeout_ms: int = AUTHENTICATION_TIMEOUT_MS):
        self.dispatcher = dispatcher
        # 0.0: no bound (connections_max_idle_ms -1, authentication_timeout_ms 0)
        self.idle_s = connections_max_idle_ms / 1000 if connections_max_idle_ms > 0 else 0.0
        self.auth_timeout_s = (authentication_timeout_ms / 1000
                               if authentication_timeout_ms > 0 else 0.0)
        # fd -> connection, least recently active first (idle connections, above)
        self._by_activity: collections.OrderedDict[int, KafkaConnection] = \
            collections.OrderedDict()
        # fd -> connection not authenticated yet, in accept order (= deadline order)
        self._authenticating: collections.OrderedDict[int, KafkaConnection] = \
            collections.OrderedDict()
        self.connection_quotas = connection_quotas     # a ConnectionQuotas, or None
        self._accept_paused_until = 0.0     # over max_connection_creation_rate (or EMFILE) until then
        self.listener_name = listener_name  # its name among the node's listeners (listeners.py)
        self.security = security
        self._auth_failures = RateLimitedLog(log)
        self.relay = relay                  # a RelayClient, or None
        self.name = name
        self.max_request_bytes = max_request_bytes
        self.connections: dict[int, KafkaConnection] = {}
        self.poller: zmq.Poller | None = None
        self._bad_input = RateLimitedLog(log)
        self._zmtp_peers = RateLimitedLog(log, per_interval=1, interval_s=60.0)
        # a response that cannot be encoded is a server bug, but one a client
        # may trigger as often as it sends the request: logged rate-limited
        self._unencodable = RateLimitedLog(log)
        # a plain connection's wake-up in one call (kafka_wake.pyx), and the
        # buffer every read of this listener lands in first
        self.wake = KafkaWake(RECV_CHUNK, max_request_bytes)
        self._throttled: dict[int, KafkaConnection] = {}
        self._lingering: dict[int, KafkaConnection] = {}   # fd -> closed at its close_at
        # no deadline of the ones above falls before this (inf: none): lowered
        # as each is added; activity only puts a connection's own one later,
        # so it stays a lower bound until ``expire`` recomputes it
        # (no more attributes without taking one away: past 30, CPython 3.11
        # gives the instance a dict of its own and every attribute read on
        # the request path gets slower, 1,100 instructions a request)
        self._due = NO_DEADLINE
        # the one-pass Produce path over a read's frames (its ``served``
        # counts the requests it answered), and the function it was made for
        self.produce_frames: ProduceFrames | None = None
        self._frames_answer = None
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as exc:
            if not (port and fallback_to_any_port):
                self.sock.close()
                # not a Kafka error: nothing was asked of a broker (the CLI prints it as is)
                raise OSError(f"cannot listen for Kafka clients on {host}:{port}: "
                              f"{exc.strerror or exc} ({held_by(port)}another kafkalite server "
                              f"or Kafka broker? choose another port)") from None
            log.warning("%s: Kafka port %d is taken (%s); using any free port", name, port, exc)
            self.sock.bind((host, 0))
        self.sock.listen(LISTEN_BACKLOG)
        self.sock.setblocking(False)
        self.fd = self.sock.fileno()
        self.port = self.sock.getsockname()[1]
        # the Unix-domain socket beside it (local_socket.py), and its name
        plaintext = security is None or (security.ssl_context is None and not security.sasl)
        local = local_socket_listen(self.port, LISTEN_BACKLOG) \
            if local_socket and plaintext else None
        self.local_sock, self.local_name = local if local is not None else (None, None)
        self.local_fd = self.local_sock.fileno() if self.local_sock is not None else -1

    # ---- poll loop integration ---------------------------------------------------------------

    def attach(self, poller: zmq.Poller) -> None:
        self.poller = poller
        self._listen(True)

    def _listen(self, on: bool) -> None:
        """(Un)register the listening sockets with the poller."""
        for fd in (self.fd, self.local_fd):
            if fd >= 0:
                if on:
                    self.poller.register(fd, POLLIN)
                else:
                    self.poller.unregister(fd)

    def on_events(self, events: dict) -> None:
        """Serve whatever ``poller.poll()`` reported for this listener's fds."""
        now = time.monotonic() if self.idle_s else 0.0
        frames = False      # the one-pass Produce path, looked up at the first read
        for fd, ev in events.items():
            if type(fd) is not int:
                continue
            if fd == self.fd or fd == self.local_fd:
                self._accept()
                continue
            conn = self.connections.get(fd)
            if conn is None:
                continue
            if now:
                conn.active_at = now
                self._by_activity.move_to_end(fd)
            if conn.handshake_wants:
                self._handshake(conn)
                continue
            if ev & POLLOUT:
                self._flush(conn)
            elif ev & POLLIN_OR_ERR:
                if frames is False:
                    frames = self._frames()
                if frames is not None and self._wake(conn, frames):
                    continue
            if ev & POLLIN_OR_ERR and not conn.closed:
                self._read(conn)

    def _wake(self, conn: KafkaConnection, frames: ProduceFrames) -> bool:
        """``conn``'s read served by one C call (kafka_wake.pyx), this
        listener's own steps taking over where it stopped; False: it did
        not take the connection, nothing done."""
        wake = self.wake
        done = wake.serve(conn, frames, self.dispatcher.stats)
        if done == _WAKE_SERVED:
            return True
        if done == _WAKE_NOT_TAKEN:
            return False
        if done == kafka_wake.HANDED:
            payload, result, wake.payload, wake.result = wake.payload, wake.result, None, None
            self._process(conn, (payload, result))
        elif done == kafka_wake.PROCESS:
            self._process(conn)
        elif done == kafka_wake.WRITE_PENDING:
            self._flush(conn)
        elif done == kafka_wake.PEER_CLOSED:
            self._close(conn, None)
        else:
            self._close(conn, str(OSError(wake.error, os.strerror(wake.error))))
        return True

    def close(self) -> None:
        for conn in list(self.connections.values()):
            self._close(conn, None)
        if self.poller is not None and not self._accept_paused_until:
            self._listen(False)
        self.sock.close()
        if self.local_sock is not None:
            self.local_sock.close()

    # ---- connections -------------------------------------------------------------------------

    @property
    def quota_name(self) -> str:
        """This listener's name in connection quotas and their metric."""
        return self.listener_name or self.name

    def _accept(self) -> None:
        quotas = self.connection_quotas
        if quotas is not None and not quotas.enabled:
            quotas = None
        listening = [self.sock] if self.local_sock is None else [self.sock, self.local_sock]
        for _ in range(64):
            if quotas is not None and quotas.listener_bound > 0:
                delay = quotas.listener_delay(self.quota_name)
                if delay > 0:
                    self._pause_accept(delay)
                    return
            for lsock in listening:
                try:
                    sock, peer = lsock.accept()
                    break
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    # EMFILE and the like: keep serving the connections there
                    # are, and stop accepting a moment, or the pending one
                    # makes every poll return at once (a busy loop)
                    self._bad_input.warning("%s: accept failed: %s", self.name, exc)
                    self._pause_accept(ACCEPT_RETRY_S)
                    return
            else:
                return
            local = lsock is not self.sock
            if local:
                peer = LOCAL_PEER
            if quotas is not None and not quotas.admit(self.quota_name, peer[0]):
                sock.close()        # over its IP's connection_creation_rate: nothing read
                continue
            sock.setblocking(False)
            if local:
                local_socket_tune(sock)
            else:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            security = self.security
            if security is not None and security.ssl_context is not None:
                try:
                    sock = TlsConnection(sock, security.ssl_context)
                except (OSError, ValueError) as exc:
                    self._bad_input.warning("%s: cannot start TLS with %s: %s", self.name, peer, exc)
                    sock.close()
                    continue
            conn = KafkaConnection(sock, peer)
            if security is not None and security.sasl:
                conn.sasl = security.sasl_server()
            self.connections[conn.fd] = conn
            if self.idle_s:
                conn.active_at = time.monotonic()
                self._by_activity[conn.fd] = conn
                self._due = min(self._due, conn.active_at + self.idle_s)
            if self.auth_timeout_s and (conn.tls or conn.sasl is not None):
                conn.auth_deadline = time.monotonic() + self.auth_timeout_s
                self._authenticating[conn.fd] = conn
                self._due = min(self._due, conn.auth_deadline)
            self._update_interest(conn)

    def _close(self, conn: KafkaConnection, reason: str | None) -> None:
        if conn.closed:
            return
        if reason:
            self._bad_input.warning("%s: closing connection from %s: %s", self.name, conn.peer, reason)
        conn.closed = True
        conn.out.clear()
        conn.waiting.clear()
        self.connections.pop(conn.fd, None)
        if self._by_activity.get(conn.fd) is conn:
            del self._by_activity[conn.fd]
        if self._authenticating.get(conn.fd) is conn:
            del self._authenticating[conn.fd]
        if self._throttled.get(conn.fd) is conn:
            del self._throttled[conn.fd]
        if self._lingering.get(conn.fd) is conn:
            del self._lingering[conn.fd]
        if self.poller is not None and conn.interest:
            self.poller.unregister(conn.fd)
        if conn.closing:
            # closed after its last answer (a failed authentication): bytes the
            # client sent meanwhile, left unread, would make the kernel reset the
            # connection, and a reset can destroy that answer before the client
            # reads it (a possible cause of kafka-python once logging "socket
            # disconnected" instead of the error, under load)
            try:
                for _ in range(16):
                    if not conn.sock.recv(4096):
                        break
            except (OSError, ValueError):
                pass
        conn.sock.close()

    def _update_interest(self, conn: KafkaConnection) -> None:
        if conn.closed:
            return
        if conn.handshake_wants:
            interest = conn.handshake_wants
        else:
            interest = ((POLLIN if may_read(conn) else 0)
                        | (POLLOUT if conn.out or (conn.tls and conn.sock.unsent) else 0))
        if interest != conn.interest and self.poller is not None:
            # register(fd, 0) unregisters: a muted connection with nothing to
            # write is not polled at all, as Kafka mutes a channel.
            self.poller.register(conn.fd, interest)
            conn.interest = interest

    def _handshake(self, conn: KafkaConnection) -> None:
        """Advance the TLS handshake by what the socket allows now."""
        try:
            conn.sock.do_handshake()
        except ssl.SSLWantReadError:
            conn.handshake_wants = POLLIN
        except ssl.SSLWantWriteError:
            conn.handshake_wants = POLLOUT
        except (OSError, ValueError) as exc:   # ssl.SSLError is an OSError
            self._close(conn, f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}")
            return
        else:
            conn.handshake_wants = 0
            if conn.sasl is None:      # SSL: the handshake was the whole authentication
                try:
                    conn.principal = certificate_principal(conn.sock.getpeercert()) or ANONYMOUS
                except (OSError, ValueError):
                    pass
                self._authenticating.pop(conn.fd, None)
            self._update_interest(conn)
            self._read(conn)       # the client may have sent its first request already
            return
        self._update_interest(conn)

    def _read(self, conn: KafkaConnection) -> None:
        scratch = self.wake.scratch
        try:
            n = conn.sock.recv_into(scratch)
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return
        except OSError as exc:
            self._close(conn, None if exc.errno in (104, 32) else str(exc))
            return
        if n == 0:
            self._close(conn, None)
            return
        conn.rbuf += memoryview(scratch)[:n]
        if conn.tls:
            conn.drain_tls(scratch, RECV_CHUNK)
        self._process(conn)

    def _process(self, conn: KafkaConnection, handed: tuple | None = None) -> None:
        """Serve complete frames from the read buffer while it may read;
        ``handed``: (payload, result) of a Produce frame the one-pass path
        handed back to ``_wake``, served first."""
        if conn.dispatching:
            return
        conn.dispatching = True
        try:
            rbuf = conn.rbuf
            produce_frames = self._produce_frames(conn)
            while handed is not None or (may_read(conn) and len(rbuf) >= 4):
                if handed is not None or (produce_frames is not None and not conn.waiting):
                    if handed is not None:
                        (payload, result), handed = handed, None
                    else:
                        # the Produce requests of this read answered in one call
                        # (ext/produce_frames.pyx); it stops at a frame for the steps below
                        consumed, payload, result = produce_frames.serve(
                            rbuf, conn.out, self.dispatcher.stats)
                        del rbuf[:consumed]
                    if payload is not None:
                        header = peek_request_header(payload)
                        conn.waiting.append([header.correlation_id, header.api_key, None])
                        if not self._answer_at_once(conn, header, result):
                            self._on_request(conn, payload, header, tried=True)
                        continue
                    if not (may_read(conn) and len(rbuf) >= 4):
                        break
                size, = _unpack_size(rbuf, 0)
                if size < 0:
                    zmtp = zmtp_signature(rbuf)
                    if zmtp is None:
                        break           # the rest of the signature is on its way
                    if zmtp:
                        self._zmtp_peers.warning(
                            "%s: closing connection from %s: it speaks ZeroMQ (ZMTP), not "
                            "Kafka's protocol; kafkalite's native clients belong on the native "
                            "port (kafkalite server prints it as bootstrap.servers)",
                            self.name, conn.address)
                        self._close(conn, None)
                        return
                if size < 0 or size > self.max_request_bytes:
                    self._close(conn, f"request size {size} is outside 0..{self.max_request_bytes} "
                                      f"(socket.request.max.bytes)")
                    return
                if len(rbuf) < 4 + size:
                    break
                payload = rbuf[4:4 + size]      # a writable copy: storage patches batches in place
                del rbuf[:4 + size]
                # a raw SASL token (SaslHandshake v0) has no header: its slot's id is None
                header = None if conn.sasl_raw else peek_request_header(payload)
                conn.waiting.append([None, None, None] if header is None else
                                    [header.correlation_id, header.api_key, None])
                self._on_request(conn, payload, header)
        finally:
            conn.dispatching = False
        if conn.out and not conn.closed:
            self._flush(conn)       # the answers given meanwhile (_answered)
        else:
            self._update_interest(conn)

    # ---- requests ----------------------------------------------------------------------------

    def _produce_frames(self, conn: KafkaConnection) -> ProduceFrames | None:
        """The dispatcher's one-pass Produce path over a read's frames, when
        ``conn``'s requests may take it now (produce_frames.pyx's contract:
        not on a SASL listener, no authorizer, no client quota); else None."""
        if conn.sasl is not None or conn.sasl_raw:
            return None
        return self._frames()

    def _frames(self) -> ProduceFrames | None:
        """The one-pass Produce path when this listener's requests may take
        it now (no authorizer, no client quota), before the connection's
        own conditions (``_produce_frames``; kafka_wake.pyx checks them)."""
        dispatcher = self.dispatcher
        answer = dispatcher.frames_at_once.get(_PRODUCE)
        if (answer is None or dispatcher.gate is not None
                or (dispatcher.quotas is not None and dispatcher.quotas.enabled)):
            return None
        frames = self.produce_frames
        if frames is None or self._frames_answer is not answer:
            versions = SUPPORTED_VERSIONS[_PRODUCE]
            frames = self.produce_frames = ProduceFrames(
                answer, NO_RESPONSE, versions[0], versions[1], self.max_request_bytes)
            self._frames_answer = answer
        return frames

    def _on_request(self, conn: KafkaConnection, payload: bytearray, header,
                    tried: bool = False) -> None:
        """``header``: the request's, peeked (None for a raw SASL token or a
        frame too short to hold one); ``tried``: the one-pass path already
        looked at it and left it to the generic decoder."""
        if conn.sasl is not None:
            try:
                if self._on_sasl_request(conn, payload):
                    return
            except Exception as exc:  # one client's login must not stop the broker process
                self._bad_input.warning("%s: the SASL login of %s failed on the server: %r",
                                        self.name, conn.peer, exc)
                self._close(conn, None)
                return
        if (header is not None and self.relay is not None
                and not self.dispatcher.serves(header.api_key)):
            self.relay.forward(self, conn, header, payload)
            return
        if (header is not None and not tried and self.dispatcher.frames_at_once
                and self._answer_at_once(conn, header, _one_pass(
                    self.dispatcher.answer_frame_at_once, header, payload))):
            return
        try:
            # Kafka ignores bytes after a request body, and clients rely on it.
            header, body = decode_request(payload, ignore_trailing=True)
        except ProtocolError as exc:
            h = exc.header
            if h is not None and h.api_key == ApiKey.API_VERSIONS and exc.code == \
                    errors.UnsupportedVersionError.code:
                # KIP-511: a too-new ApiVersions gets a v0 answer with the error
                # and our ranges, so the client retries with a version we know.
                self._send(conn, encode_response(ApiKey.API_VERSIONS, 0, h.correlation_id,
                                                 self.dispatcher.api_versions_body(
                                                     Listener.KAFKA,
                                                     errors.UnsupportedVersionError.code)),
                           h.correlation_id)
                return
            # Kafka closes a connection whose request it cannot parse.
            self._close(conn, str(exc))
            return
        if self.dispatcher.at_once and self._answer_at_once(
                conn, header, _one_pass(self.dispatcher.answer_at_once, header, body)):
            return
        self.dispatcher.dispatch(RequestContext(header, Listener.KAFKA, self, conn,
                                                peer=conn.address, principal=conn.principal,
                                                size=len(payload),
                                                listener_name=self.listener_name),
                                 body)

    def _answer_at_once(self, conn: KafkaConnection, header, result) -> bool:
        """Whether the dispatcher's one-pass path answered the request (the
        common Produce: no RequestContext, no handler chain): ``result`` is
        what its ``answer_at_once`` (of the decoded body) or
        ``answer_frame_at_once`` (of the frame, not decoded: answered
        without the generic codec's dicts) gave, or the exception it raised
        (``_one_pass``); None: it did not take the request, nothing done."""
        if result is None:
            return False
        if isinstance(result, Exception):
            log.error("%s: %r request failed", self.name, header.api_key, exc_info=result)
            self.respond_error(conn, header, errors.UnknownServerError.code,
                               f"{type(result).__name__}: {result}")
        elif result is NO_RESPONSE:
            self.unmute(conn, header)
        elif type(result) is dict:
            self.respond(conn, header, result)
        elif not conn.closed:       # the answer's frame, size prefix and all
            self._answered(conn, header.correlation_id, (result,))
        return True

    # ---- SASL (security.py) ------------------------------------------------------------------

    def _on_sasl_request(self, conn: KafkaConnection, payload: bytearray) -> bool:
        """Serve a frame on a SASL listener's connection if it belongs to the
        SASL exchange (or ApiVersions, which advertises it); False: an
        authenticated client's request, for the dispatcher."""
        sasl = conn.reauth or conn.sasl
        if conn.sasl_raw:          # SaslHandshake v0: this frame is a bare SASL token
            self._sasl_raw_token(conn, sasl, payload)
            return True
        header = peek_request_header(payload)
        api_key = header.api_key if header is not None else None
        if api_key not in SASL_APIS:
            if sasl.principal is None:
                self._close(conn, f"{api_key!r} request before SASL authentication "
                                  f"(only ApiVersions, SaslHandshake, SaslAuthenticate are served)")
                return True
            if conn.session_expiry and time.monotonic() > conn.session_expiry:
                if self.dispatcher.stats is not None:
                    self.dispatcher.stats.expired_sessions_closed += 1
                self._close(conn, f"{api_key!r} request after the SASL session of "
                                  f"{conn.principal} expired without re-authentication "
                                  f"(connections_max_reauth_ms)")
                return True
            return False
        self._sasl_exchange(conn, api_key, payload)
        return True

    def _sasl_exchange(self, conn: KafkaConnection, api_key, payload: bytearray) -> None:
        try:
            header, body = decode_request(payload, ignore_trailing=True)
        except ProtocolError as exc:
            if api_key == ApiKey.API_VERSIONS and exc.code == errors.UnsupportedVersionError.code:
                self._send(conn, encode_response(ApiKey.API_VERSIONS, 0, exc.header.correlation_id,
                                                 self._sasl_api_versions(
                                                     errors.UnsupportedVersionError.code)),
                           exc.header.correlation_id)
                return
            self._close(conn, str(exc))
            return
        if api_key == ApiKey.API_VERSIONS:
            self.respond(conn, header, self._sasl_api_versions(0, header.api_version))
            return
        sasl = conn.reauth or conn.sasl
        if sasl.principal is not None:
            # authenticated: only a SaslHandshake beginning a re-authentication
            if api_key != ApiKey.SASL_HANDSHAKE or not conn.session_expiry:
                self._close(conn, f"{api_key!r} after SASL authentication completed "
                                  f"(re-authentication needs connections_max_reauth_ms and "
                                  f"SaslAuthenticate v1+)")
                return
            now = time.monotonic()
            if now - conn.reauth_started < MIN_REAUTH_INTERVAL_S:
                self.respond(conn, header, {"error_code": errors.IllegalSaslStateError.code,
                                            "mechanisms": list(sasl.mechanisms)})
                return
            conn.reauth_started = now
            conn.reauth = sasl = self.security.sasl_server()
        if api_key == ApiKey.SASL_HANDSHAKE:
            if conn.reauth is sasl and (body["mechanism"] != conn.sasl.mechanism
                                        or header.api_version == 0):
                self.respond(conn, header, {"error_code": errors.IllegalSaslStateError.code,
                                            "mechanisms": [conn.sasl.mechanism]})
                self._auth_failed(conn, f"re-authentication with SaslHandshake "
                                        f"v{header.api_version} {body['mechanism']!r}, not "
                                        f"v1+ {conn.sasl.mechanism!r}")
                return
            code = sasl.handshake(body["mechanism"])
            self.respond(conn, header, {"error_code": code, "mechanisms": list(sasl.mechanisms)})
            if code:
                self._auth_failed(conn, f"SASL mechanism {body['mechanism']!r} is not enabled")
            elif header.api_version == 0:
                conn.sasl_raw = True
            return
        try:
            token = sasl.authenticate(body["auth_bytes"])
            if conn.reauth is sasl and sasl.principal not in (None, conn.principal):
                raise errors.SaslAuthenticationFailedError(
                    f"Cannot change principals during re-authentication from "
                    f"{conn.principal} to {sasl.principal}")
        except errors.KafkaError as exc:
            self.respond(conn, header, {"error_code": exc.code, "error_message": exc.message,
                                        "auth_bytes": b"", "session_lifetime_ms": 0})
            what = "re-authentication" if conn.reauth is sasl else sasl.mechanism
            self._auth_failed(conn, f"{what}: {sasl.failure or exc.message}")
            return
        # KIP-368: a lifetime only for clients that can re-authenticate (v1+)
        lifetime = self.security.reauth_ms if header.api_version >= 1 else 0
        self.respond(conn, header, {"error_code": 0, "error_message": None, "auth_bytes": token,
                                    "session_lifetime_ms": lifetime if sasl.principal else 0})
        self._authenticated(conn, lifetime)

    def _sasl_raw_token(self, conn: KafkaConnection, sasl, token: bytearray) -> None:
        try:
            answer = sasl.authenticate(token)
        except errors.KafkaError as exc:
            self._auth_failed(conn, f"{sasl.mechanism}: {exc.message}")
            self._close(conn, None)     # raw SASL has no way to say why
            return
        self._send(conn, answer, None)
        self._authenticated(conn, 0)

    def _authenticated(self, conn: KafkaConnection, lifetime_ms: int) -> None:
        """After each SASL token: once the exchange is complete, the
        connection's (new) session starts."""
        sasl = conn.reauth or conn.sasl
        if sasl.principal is None:
            return
        if conn.reauth is not None:
            conn.sasl, conn.reauth = conn.reauth, None
            if self.dispatcher.stats is not None:
                self.dispatcher.stats.reauthentications += 1
        conn.principal = sasl.principal
        conn.sasl_raw = False
        self._authenticating.pop(conn.fd, None)
        conn.session_expiry = time.monotonic() + lifetime_ms / 1000 if lifetime_ms else 0.0

    def _auth_failed(self, conn: KafkaConnection, why: str) -> None:
        """Kafka closes a connection whose authentication failed, once the
        answer saying so is written and ``connection.failed.authentication.
        delay.ms`` later."""
        if self.dispatcher.stats is not None:
            self.dispatcher.stats.authentication_failures += 1
        self._auth_failures.warning("%s: authentication of %s failed: %s", self.name, conn.address,
                                    why)
        conn.closing = True
        if not conn.out:
            self._linger(conn)
        else:
            self._update_interest(conn)

    def _linger(self, conn: KafkaConnection) -> None:
        """The last answer of a closing connection is written: it is closed
        after the delay, reading nothing meanwhile. Closed at once, a client
        that reads its socket to the end before handling what it read
        (kafka-python 3's transport drops the bytes that came with the EOF)
        never sees the authentication error, only a lost connection."""
        delay_ms = self.security.failed_auth_delay_ms if self.security is not None else 0
        if not delay_ms:
            self._close(conn, None)
            return
        conn.close_at = time.monotonic() + delay_ms / 1000
        self._lingering[conn.fd] = conn
        self._due = min(self._due, conn.close_at)
        self._update_interest(conn)

    def _sasl_api_versions(self, error_code: int, api_version: int = 0) -> dict:
        return api_versions_body([*self.dispatcher.advertised(Listener.KAFKA),
                                  ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE], error_code,
                                 api_version)

    # ---- Responder (requests.py) -------------------------------------------------------------

    def send_response(self, ctx: RequestContext, body: dict) -> None:
        self.respond(ctx.reply_to, ctx.header, body)

    def send_error(self, ctx: RequestContext, code: int, message: str) -> None:
        self.respond_error(ctx.reply_to, ctx.header, code, message)

    def send_nothing(self, ctx: RequestContext) -> None:
        self.unmute(ctx.reply_to, ctx.header)

    def throttle(self, ctx: RequestContext, ms: int) -> None:
        self.mute_for(ctx.reply_to, ms)

    def mute_for(self, conn: KafkaConnection, ms: int) -> None:
        """Read nothing more from ``conn`` for ``ms`` (a client quota's
        throttle; the relay's too, for requests the supervisor answered)."""
        if conn.closed:
            return
        until = time.monotonic() + ms / 1000.0
        if until > conn.throttled_until:
            conn.throttled_until = until
            self._throttled[conn.fd] = conn
            self._due = min(self._due, until)

    # ---- quota throttles ---------------------------------------------------------------------

    def _pause_accept(self, seconds: float) -> None:
        """Accept nothing for ``seconds`` (max_connection_creation_rate, or
        no descriptor for a new connection)."""
        if not self._accept_paused_until and self.poller is not None:
            self._listen(False)
        self._accept_paused_until = time.monotonic() + seconds
        self._due = min(self._due, self._accept_paused_until)

    # ---- responses ---------------------------------------------------------------------------

    def respond(self, conn: KafkaConnection, header, body: dict) -> None:
        """Send the response to ``header``'s request (now or deferred)."""
        if conn.closed:
            return
        try:
            parts = encode_response_wire(header.api_key, header.api_version,
                                         header.correlation_id, body)
        except ProtocolError as exc:
            self._unencodable.warning("%s: cannot encode the %r response: %s", self.name,
                                      header.api_key, exc)
            self._close(conn, None)
            return
        if len(parts) == 1:     # no file region: already one buffer, size prefix and all
            self._answered(conn, header.correlation_id, parts)
            return
        queue = []
        pending = []
        inline = 0
        for part in parts:
            if type(part) is not bytes and hasattr(part, "sendfile"):
                if part.length <= INLINE_REGION_BYTES and inline + part.length <= INLINE_ANSWER_BYTES:
                    try:
                        pending.append(part.read())
                        inline += part.length
                        continue
                    except (OSError, errors.KafkaError):
                        pass     # sent as a region: its write reports the failure as always
                queue.append(b"".join(pending))
                queue.append([part, 0])
                pending = []
            else:
                pending.append(part)
        if pending:
            queue.append(b"".join(pending))
        self._answered(conn, header.correlation_id, queue)

    def respond_frame(self, conn: KafkaConnection, frame) -> None:
        """Send an already encoded response (header + body), e.g. one relayed
        from the supervisor."""
        self._send(conn, frame, _correlation_id(frame))

    def unmute(self, conn: KafkaConnection, header) -> None:
        """``header``'s request gets no answer (Produce with acks=0): its
        slot goes, and the next request may be read."""
        if not conn.closed:
            self._answered(conn, header.correlation_id, None)

    def close_connection(self, conn: KafkaConnection, reason: str | None) -> None:
        self._close(conn, reason)

    def respond_error(self, conn: KafkaConnection, header, code: int, message: str = "") -> None:
        """Answer a whole request with an error code where its schema has a
        top-level error_code; otherwise close the connection, as Kafka does
        with a request it cannot serve."""
        if conn.closed:
            return
        body = error_body(header.api_key, header.api_version, code, message)
        if body is not None:
            self.respond(conn, header, body)
        else:
            self._close(conn, f"{header.api_key!r} v{header.api_version}: error {code} {message}")

    def _send(self, conn: KafkaConnection, frame, correlation_id: int | None) -> None:
        """Send ``frame`` as the answer to the request of ``correlation_id``
        (None: the raw SASL token being served)."""
        if conn.closed:
            return
        self._answered(conn, correlation_id, [_pack_size(len(frame)) + bytes(frame)])

    def _answered(self, conn: KafkaConnection, correlation_id: int | None, items) -> None:
        """The request of ``correlation_id`` is answered with ``items`` (None:
        it gets no answer): the answers at the head of the connection's
        queue go out, and what it may read next is served."""
        waiting = conn.waiting
        for slot in waiting:
            if slot[0] == correlation_id and slot[2] is None:
                slot[2] = items if items is not None else ()
                break
        else:
            log.error("%s: an answer to %s for correlation id %s, which is not waiting for "
                      "one: dropped", self.name, conn.peer, correlation_id)
            return
        while waiting and waiting[0][2] is not None:
            conn.out.extend(waiting.popleft()[2])
        if conn.dispatching:
            # an answer to a request of the bytes just read: written with
            # the others' once they are all served (_process), one write
            # and one wake-up of the client for a burst of requests
            return
        self._flush(conn)
        if not conn.closed:
            # a deferred reply: the connection's idle time starts again from
            # it (a reply while dispatching follows a read, which did that);
            # then serve what queued up meanwhile
            if self.idle_s:
                conn.active_at = time.monotonic()
                self._by_activity.move_to_end(conn.fd)
            self._process(conn)

    def _flush(self, conn: KafkaConnection) -> None:
        try:
            conn.write_queue()
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            pass
        except (OSError, ValueError) as exc:   # peer gone, or a segment deleted under the send
            self._close(conn, None if getattr(exc, "errno", None) in (104, 32) else str(exc))
            return
        if conn.closing and not conn.out and not (conn.tls and conn.sock.unsent):
            self._linger(conn)
            return
        self._update_interest(conn)
