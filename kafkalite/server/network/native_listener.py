"""The native protocol's ZeroMQ ROUTER in one broker process.

Framing (kafkalite/protocol/native.py, docs/protocol.md): a request is
[identity, Kafka request header + body, record batch frames...]; the answer
mirrors it, or is the two-frame error reply. This module only decodes and
encodes: every request becomes a ``RequestContext`` (requests.py) handed to
the process's dispatcher, and this listener is the context's responder.

Extension requests (API key 32000, JSON ops such as ``shm_attach``) go to
the ``extensions`` table: op name -> fn(body dict, principal, peer uid) ->
reply dict, where the peer uid is the kernel's word for a local door's peer
(its SO_PEERCRED, which libzmq reports in the message's Peer-Address) and
None for a TCP peer.

Fetch responses may carry segment file regions; ZeroMQ needs bytes, so a
region is read into memory here (the Kafka listener sendfiles them).

Memory is bounded per client, whatever the client does:

- a frame larger than MAX_MESSAGE_BYTES (the Kafka listener's 100 MiB
  request cap) disconnects its sender before it is buffered
  (ZMQ_MAXMSGSIZE);
- a Fetch asks for at most FETCH_MAX_BYTES (Kafka's broker-side
  fetch.max.bytes), since its answer is built in memory here;
- answers ZeroMQ holds unsent for a client (it does not read them, or
  reads slowly) count against MAX_UNSENT_BYTES: every answer of
  TRACK_MIN_BYTES or more is sent with a ZeroMQ message tracker, which
  reports when libzmq has written it to the socket or dropped it with the
  connection. Over the bound, further answers wait here unread -- a fetch's
  file regions stay regions -- and go out as the client catches up (checked
  whenever the event loop wakes); at most MAX_WAITING_ANSWERS of them,
  whose encoded parts take at most MAX_UNSENT_BYTES, after which answers to
  that client are dropped (it is not reading them) with a rate-limited
  warning. The Kafka listener gets the same effect from muting a
  connection until its answer is written.
- the socket is a ROUTER_MANDATORY one and sends never block: a client at
  its high-water mark makes the answer wait as above, and a client that is
  gone (EHOSTUNREACH) is forgotten with everything waiting for it (what
  ZeroMQ still held for it counts as released once libzmq drops it). Once
  answers over TRIM_AFTER_BYTES were released, the C heap is trimmed
  (malloc_trim), so memory a client made the process allocate goes back to
  the system when it goes, rather than staying in glibc's free lists.

Quotas (quotas.py): a client whose request put it over a quota has that
answer, and every answer after it, held here until its throttle time has
passed (the native client does not read ``throttle_time_ms``), and the
requests it sends meanwhile wait unread too, as a muted Kafka connection's
do: otherwise a producer with several large requests in flight would have
them all appended during the hold. When the hold ends, the waiting requests
are served one at a time while no new hold begins, at most
MAX_HELD_REQUESTS per client (the client's requests in flight; beyond it a
request is dropped with a rate-limited warning, as an unread answer is).
The process's loop wakes for ``next_deadline``.

Security (``curve``, a protocol/curve.CurveServer: the key file's, or with
security on the node's key pair of the run, server/auth/security.py
native_security; None by default): the
ROUTER is a CURVE server, so only clients whose public key the ZAP handler
accepts get a message through, encrypted; each message's ZAP User-Id is
the request's ``principal`` (extension requests get it too: ``shm_attach``
checks it; a Produce made with the server's own key may name the
principal it forwards for, see requests.py), and the dispatcher's
authorization gate then checks native requests as it checks Kafka ones.

The local door (``local_door``: CURVE and the authorizer on, and
``local_sockets``; without the authorizer an identity would be full
access, which the CURVE keys are there to refuse): same-host clients
without keys reach the same dispatcher through a second ROUTER, a ZeroMQ
``ipc://`` socket in the abstract namespace named after this port
(local_socket.py ``native_door_name``), whose ZAP handler makes the peer's
user id its principal (protocol/curve.py ``local_principal``,
``User:unix:<name>``): a local producer needs no key file, and is
authorized as that user. It is a listener of its own (``local``), which
this one's loop calls pass on to.

SASL logins (``login``, a server/native_login.NativeLogin: the server has
SASL users and CURVE; None otherwise): the ROUTER then also takes CURVE
keys that are not authorized, each pending its login (protocol/curve.py
LOGIN_ZAP_DOMAIN). A request of a pending key goes to ``_pending``, never
to the dispatcher: SaslHandshake and SaslAuthenticate are answered from
the login, everything else refused SASL_AUTHENTICATION_FAILED until the
key's login succeeded; from then on its requests are the logged-in
principal's. A failed login holds that client's answers (``hold``) for
the login's failed-authentication delay.

Who may call: the owning process's event loop (``attach``, ``on_events``,
``close``); nothing here is thread-safe.
"""
from __future__ import annotations

import collections
import ctypes
import ctypes.util
import logging
import struct
import time

import zmq

from kafkalite import errors, local_socket
from kafkalite.errors import KafkaError
from kafkalite.protocol import (ApiKey, ProtocolError, decode_request, encode_response,
                                peek_request_header)
from kafkalite.protocol import native
from kafkalite.protocol.curve import peer_uid, pending_key, principal_of
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.network.kafka_listener import MAX_REQUEST_BYTES
from kafkalite.server.network.port_holder import held_by
from kafkalite.server.network.requests import ANONYMOUS, Listener, RequestContext, RequestDispatcher
from kafkalite.storage.segment import FileRegion

log = logging.getLogger("kafkalite.native")

# Requests read per poll wakeup, so rings, timers and other sockets of the
# same loop are not starved by one busy client.
MAX_REQUESTS_PER_WAKEUP = 1024
MAX_MESSAGE_BYTES = MAX_REQUEST_BYTES
FETCH_MAX_BYTES = 57_671_680            # Kafka's broker fetch.max.bytes default (55 MiB)
# Two of the largest fetch answers: a consumer's next fetch is never held up
# by its previous answer whose tracker has not reported yet.
MAX_UNSENT_BYTES = 2 * FETCH_MAX_BYTES
MAX_HELD_REQUESTS = 64
MAX_WAITING_ANSWERS = 1024
TRACK_MIN_BYTES = 64 * 1024
TRIM_AFTER_BYTES = 64 * 1024 * 1024
# Let pyzmq's garbage thread drop the frames libzmq released before trimming.
TRIM_DELAY_S = 0.2


def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):   # not glibc: nothing to trim
        return None


_trim = _malloc_trim()


class _Answer:
    """An answer not yet handed to ZeroMQ: its parts after the identity
    (bytes, or FileRegions still unread)."""

    __slots__ = ("correlation_id", "parts", "size", "inline")

    def __init__(self, correlation_id: int, parts: list):
        self.correlation_id = correlation_id
        self.parts = parts
        self.size = sum(p.length if type(p) is FileRegion else len(p) for p in parts)
        self.inline = sum(len(p) for p in parts if type(p) is not FileRegion)


class _Client:
    """What one client (ROUTER identity) has outstanding."""

    __slots__ = ("unsent", "unsent_bytes", "waiting", "waiting_bytes", "hold_until", "held")

    def __init__(self):
        self.held: collections.deque = collections.deque()     # requests' frames, unread
        self.hold_until = 0.0       # a quota throttle: answers wait until this monotonic time
        self.unsent: collections.deque = collections.deque()   # (MessageTracker, bytes)
        self.unsent_bytes = 0
        self.waiting: collections.deque = collections.deque()  # _Answer
        self.waiting_bytes = 0      # their inline parts

    def has_room(self, size: int) -> bool:
        return not self.unsent_bytes or self.unsent_bytes + size <= MAX_UNSENT_BYTES


class NativeListener:
    def __init__(self, zctx: zmq.Context, host: str, port: int, dispatcher: RequestDispatcher, *,
                 name: str, extensions: dict | None = None, fallback_to_any_port: bool = False,
                 curve=None, local_door: bool = False, login=None):
        self._setup(zctx, dispatcher, name, extensions, curve)
        if curve is not None:
            curve.start(zctx)
            self.login = login
            curve.secure_server(self.socket, login=login is not None)
        self.port = 0
        if port:
            try:
                self.socket.bind(f"tcp://{host}:{port}")
                self.port = port
            except zmq.ZMQError as exc:
                if not fallback_to_any_port:
                    self.socket.close()
                    # not a Kafka error: nothing was asked of a broker (the CLI prints it as is)
                    raise OSError(f"cannot listen on {host}:{port}: {exc} ({held_by(port)}"
                                  f"another kafkalite server? choose another port)") from None
                log.warning("%s: port %d is taken (%s); using any free port", name, port, exc)
        if not self.port:
            self.port = self.socket.bind_to_random_port(f"tcp://{host}")
        # under CURVE, same-host clients without keys come in by the local
        # door, as the user they run as (curve.local_principal)
        self.local = (self._local_door(zctx) if curve is not None and local_door else None)

    def _setup(self, zctx, dispatcher, name, extensions, curve) -> None:
        self.dispatcher = dispatcher
        self.curve = curve
        # every message carries its principal (a ZAP User-Id): CURVE's, or
        # a local door's peer's
        self.authenticated = curve is not None
        if self.authenticated:
            dispatcher.check_native = True     # native requests are authorized too
        self.name = name
        self.extensions = extensions or {}
        self._bad_input = RateLimitedLog(log)
        self._slow_client = RateLimitedLog(log)
        self._unencodable = RateLimitedLog(log)     # as often as a client can trigger one
        self._clients: dict[bytes, _Client] = {}
        self._released = 0
        self._draining: collections.deque = collections.deque()  # forgotten clients' unsent
        self._trim_at = 0.0
        self.dropped_answers = 0
        self.local = None
        self.login = None           # a NativeLogin: unknown keys may log in (CURVE only)
        self.peer_host = None       # None: the TCP peer's, from each message
        self.socket = zctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)

    def _local_door(self, zctx: zmq.Context) -> "NativeListener | None":
        """A listener of its own (its clients' identities are another
        ROUTER's) on the local door of this port (local_socket.py), or None
        when its name is taken: then clients without keys stay refused."""
        door = NativeListener.__new__(NativeListener)
        door._setup(zctx, self.dispatcher, f"{self.name} (local door)", self.extensions,
                    self.curve)
        door.port = self.port
        # its peers are on this host: their address, for ACL hosts, quotas
        # and logs, is loopback's, as for the Kafka listeners' Unix sockets
        # (libzmq's would be "localhost:<uid>:<gid>:<pid>")
        door.peer_host = local_socket.PEER[0]
        bound = self.curve.bind_local_door(door.socket, zctx,
                                           local_socket.native_door_name(self.port), self.name)
        return door if bound else None

    # ---- poll loop integration ---------------------------------------------------------------

    def attach(self, poller: zmq.Poller) -> None:
        poller.register(self.socket, zmq.POLLIN)
        if self.local is not None:
            self.local.attach(poller)

    def on_events(self, events: dict) -> None:
        if self.local is not None:
            self.local.on_events(events)
        if self._clients or self._trim_at or self._draining:
            self._catch_up()
        if self.socket not in events:
            return
        for _ in range(MAX_REQUESTS_PER_WAKEUP):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) >= 2:
                client = self._clients.get(frames[0].bytes) if self._clients else None
                if client is not None and (client.hold_until or client.held):
                    self._hold_request(client, frames)
                else:
                    self._on_message(frames)

    def _hold_request(self, client: _Client, frames: list) -> None:
        if len(client.held) >= MAX_HELD_REQUESTS:
            self.dropped_answers += 1
            self._slow_client.warning("%s: a throttled client sent more than %d requests; "
                                      "dropped one", self.name, MAX_HELD_REQUESTS)
            return
        client.held.append(frames)

    def close(self) -> None:
        if self.local is not None:
            self.local.socket.close()
        self.socket.close()
        if self.curve is not None:
            self.curve.stop()

    # ---- requests ----------------------------------------------------------------------------

    def _on_message(self, frames: list) -> None:
        identity, payload = frames[0].bytes, frames[1]
        principal = (principal_of(payload) or ANONYMOUS) if self.authenticated else ANONYMOUS
        if self.login is not None:
            key = pending_key(principal)
            if key is not None:
                principal = self._pending(identity, key, frames)
                if principal is None:
                    return
        if native.is_extension_request(payload.buffer):
            self._on_extension(identity, payload.bytes, principal,
                               None if self.peer_host is None
                               else peer_uid(self._peer_of(payload, libzmq=True)))
            return
        try:
            header, body = decode_request(payload.buffer, records_in=[f.buffer for f in frames[2:]])
        except ProtocolError as exc:
            if exc.code != errors.UnsupportedVersionError.code:
                self._bad_input.warning("%s: malformed request: %s", self.name, exc)
            if exc.header is not None:   # its correlation id can be trusted: answer it
                self._send_error(identity, exc.header.correlation_id, exc.code, exc.message)
            return
        if header.api_key == ApiKey.FETCH and body.get("max_bytes", 0) > FETCH_MAX_BYTES:
            body["max_bytes"] = FETCH_MAX_BYTES
        ctx = RequestContext(header, Listener.NATIVE, self, identity,
                             peer=self.peer_host or payload,
                             principal=principal,
                             size=payload.buffer.nbytes + sum(f.buffer.nbytes for f in frames[2:]))
        self.dispatcher.dispatch(ctx, body)

    def _pending(self, identity: bytes, key: str, frames: list) -> str | None:
        """A request of a key pending its login (``key``, Z85): the principal
        to serve it as, once that key has logged in; else None, the request
        answered here (its login's SASL requests, or a refusal)."""
        payload = frames[1]
        if native.is_extension_request(payload.buffer):
            principal = self.login.principal(key)
            if principal is None:
                try:
                    correlation_id, body = native.decode_extension_request(payload.bytes)
                except (ValueError, KeyError, struct.error):
                    return None
                exc = self.login.refusal(f"the {body.get('op')!r} extension")
                self._answer(identity, _Answer(correlation_id, [native.encode_extension_response(
                    correlation_id, {"error_code": exc.code, "message": exc.message})]))
            return principal
        header = peek_request_header(payload.buffer)
        if header is None:
            self._bad_input.warning("%s: dropped a malformed request of a client that has not "
                                    "logged in", self.name)
            return None
        if header.api_key not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            principal = self.login.principal(key)
            if principal is None:
                exc = self.login.refusal(header.api_key)
                self._send_error(identity, header.correlation_id, exc.code, exc.message)
            return principal
        try:
            header, body = decode_request(payload.buffer)
        except ProtocolError as exc:
            self._bad_input.warning("%s: malformed SASL request: %s", self.name, exc)
            if exc.header is not None:
                self._send_error(identity, exc.header.correlation_id, exc.code, exc.message)
            return None
        where = f"{self._peer_of(payload)} (key {key})"
        try:
            answer, failed = self.login.exchange(key, header.api_key, body, where)
        except Exception as exc:  # one client's login must not stop the broker process
            self._bad_input.warning("%s: the SASL login of %s failed on the server: %r",
                                    self.name, where, exc)
            self._send_error(identity, header.correlation_id, errors.UnknownServerError.code,
                             f"the login failed on the server: {type(exc).__name__}")
            return None
        if failed:
            if self.dispatcher.stats is not None:
                self.dispatcher.stats.authentication_failures += 1
            if self.login.failed_auth_delay_ms:
                self.hold(identity, self.login.failed_auth_delay_ms)
        self._answer(identity, _Answer(header.correlation_id, [encode_response(
            header.api_key, header.api_version, header.correlation_id, answer)]))
        return None

    def _peer_of(self, payload, libzmq: bool = False) -> str:
        """The peer's address as logs and ACLs see it; with ``libzmq``, as
        libzmq reports it (a local door's: "localhost:<uid>:<gid>:<pid>")."""
        if self.peer_host is not None and not libzmq:
            return self.peer_host
        try:
            return payload.get("Peer-Address") or "?"
        except zmq.ZMQError:
            return "?"

    def _on_extension(self, identity: bytes, payload: bytes, principal: str,
                      peer_uid: int | None) -> None:
        try:
            correlation_id, body = native.decode_extension_request(payload)
            op = self.extensions[body["op"]]
        except (ValueError, KeyError, struct.error) as exc:
            self._bad_input.warning("%s: dropped a malformed extension request: %s", self.name, exc)
            return
        try:
            reply = {"error_code": 0, **op(body, principal, peer_uid)}
        except KafkaError as exc:
            reply = {"error_code": exc.code, "message": exc.message}
        except Exception as exc:  # one request must not take the process down
            self._bad_input.exception("%s: extension request %s failed", self.name, body["op"])
            reply = {"error_code": errors.UnknownServerError.code, "message": str(exc)}
        self._answer(identity, _Answer(correlation_id,
                                       [native.encode_extension_response(correlation_id, reply)]))

    # ---- Responder ---------------------------------------------------------------------------

    def send_response(self, ctx: RequestContext, body: dict) -> None:
        header = ctx.header
        records: list = []
        try:
            payload = encode_response(header.api_key, header.api_version, header.correlation_id,
                                      body, records_out=records)
        except ProtocolError as exc:
            self._unencodable.warning("%s: cannot encode the %r response: %s", self.name,
                                      header.api_key, exc)
            self.send_error(ctx, errors.UnknownServerError.code, f"cannot encode the response: {exc}")
            return
        self._answer(ctx.reply_to, _Answer(header.correlation_id, [payload, *records]))

    def send_error(self, ctx: RequestContext, code: int, message: str) -> None:
        self._send_error(ctx.reply_to, ctx.header.correlation_id, code, message)

    def send_nothing(self, ctx: RequestContext) -> None:
        pass

    def throttle(self, ctx: RequestContext, ms: int) -> None:
        """Hold this client's answers for ``ms`` (a quota throttle)."""
        self.hold(ctx.reply_to, ms)

    def hold(self, identity: bytes, ms: int) -> None:
        client = self._clients.get(identity)
        if client is None:
            client = self._clients[identity] = _Client()
        client.hold_until = max(client.hold_until, time.monotonic() + ms / 1000.0)

    def next_deadline(self) -> float | None:
        """When held answers may go (None: none are held)."""
        due = [c.hold_until for c in self._clients.values() if c.hold_until]
        door = self.local.next_deadline() if self.local is not None else None
        if door is not None:
            due.append(door)
        return min(due) if due else None

    def _send_error(self, identity: bytes, correlation_id: int, code: int, message: str) -> None:
        self._answer(identity, _Answer(correlation_id, [
            native.ERROR_FRAME, native.encode_error(correlation_id, code, message)]))

    # ---- answers within each client's bound ---------------------------------------------------

    def _answer(self, identity: bytes, answer: _Answer) -> None:
        client = self._clients.get(identity)
        if client is not None and (client.waiting or not client.has_room(answer.size)
                                   or client.hold_until):
            self._wait(identity, client, answer)
        elif not self._send(identity, answer):
            self._wait(identity, self._clients.setdefault(identity, _Client()), answer)

    def _send(self, identity: bytes, answer: _Answer) -> bool:
        """Hand ``answer`` to ZeroMQ; False when the client is at its
        high-water mark (nothing was sent)."""
        try:
            parts = [p.read() if type(p) is FileRegion else p for p in answer.parts]
        except (KafkaError, OSError) as exc:     # the segment went away under the region
            self._bad_input.warning("%s: cannot read the records of answer %d: %s", self.name,
                                    answer.correlation_id, exc)
            parts = [native.ERROR_FRAME, native.encode_error(
                answer.correlation_id, errors.KafkaStorageError.code, str(exc))]
        track = answer.size >= TRACK_MIN_BYTES
        try:
            tracker = self.socket.send_multipart([identity, *parts], flags=zmq.NOBLOCK,
                                                 copy=not track, track=track)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if exc.errno != zmq.EHOSTUNREACH:
                raise
            self._forget(identity)              # gone: nothing more will reach it
            return True
        if track:
            client = self._clients.get(identity)
            if client is None:
                client = self._clients[identity] = _Client()
            client.unsent.append((tracker, answer.size))
            client.unsent_bytes += answer.size
        return True

    def _forget(self, identity: bytes) -> None:
        """Drop a client the ROUTER says is gone, with everything waiting
        for it. What ZeroMQ still holds for it is counted as released when
        libzmq drops it: the ROUTER forgets the peer before pyzmq's garbage
        thread has reported every dropped message, and bytes never counted
        would leave the heap untrimmed."""
        client = self._clients.pop(identity, None)
        if client is not None and client.unsent:
            self._draining.extend(client.unsent)

    def _wait(self, identity: bytes, client: _Client, answer: _Answer) -> None:
        if len(client.waiting) >= MAX_WAITING_ANSWERS \
                or client.waiting_bytes + answer.inline > MAX_UNSENT_BYTES:
            self.dropped_answers += 1
            self._slow_client.warning(
                "%s: a client does not read its answers (%d bytes unsent, %d answers waiting); "
                "dropped the answer to request %d", self.name, client.unsent_bytes,
                len(client.waiting), answer.correlation_id)
            return
        client.waiting.append(answer)
        client.waiting_bytes += answer.inline

    def _catch_up(self) -> None:
        """Count what ZeroMQ has written (or dropped) since the last look,
        send what waited for room, and trim the heap after big releases."""
        released = 0
        now = time.monotonic()
        if self._draining:
            still = collections.deque()
            for tracker, n in self._draining:
                if tracker.done:
                    released += n
                else:
                    still.append((tracker, n))
            self._draining = still
        for identity, client in list(self._clients.items()):
            if client.hold_until:
                if client.hold_until > now:
                    continue
                client.hold_until = 0.0
            while client.held and not client.hold_until:
                self._on_message(client.held.popleft())    # may begin a new hold
            unsent = client.unsent
            while unsent and unsent[0][0].done:
                n = unsent.popleft()[1]
                client.unsent_bytes -= n
                released += n
            waiting = client.waiting
            while waiting and client.has_room(waiting[0].size):
                answer = waiting[0]
                if not self._send(identity, answer):
                    break
                waiting.popleft()
                client.waiting_bytes -= answer.inline
                if identity not in self._clients:
                    break               # it went away: what waited for it went with it
            if not unsent and not waiting and not client.held and not client.hold_until:
                self._clients.pop(identity, None)
        if released:
            self._released += released
            if self._released >= TRIM_AFTER_BYTES and not self._trim_at:
                self._trim_at = now + TRIM_DELAY_S
        if self._trim_at and now >= self._trim_at:
            self._trim_at, self._released = 0.0, 0
            if _trim is not None:
                _trim(0)
