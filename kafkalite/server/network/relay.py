"""The relay: Kafka-wire requests a worker does not serve, answered by the supervisor.

To Kafka's clients every worker is a whole broker, so a worker's TCP
listener also receives Metadata, group, admin and producer-id requests,
which only the supervisor (controller and group coordinator) can answer.
The worker passes such a request on, undecoded, over an internal ZeroMQ
channel: a DEALER per worker to a ROUTER the supervisor binds on loopback
(never the public native port). The ROUTER is a CURVE server that only the
node's key pair opens (protocol/curve.py ``NODE_ZAP_DOMAIN``): the one of
``native_curve_secret_key_file``, else one the supervisor made for the run
and handed its workers through a pipe (processes.spawn_worker). So no other
local process's request is relayed, let alone as the principal its header
names, and none takes over a worker's identity. In a cluster the ROUTER
listens where other nodes' workers reach it, and is CURVE only with the
key file (every node holds the same pair; security.warn_if_node_channels_open).
The supervisor decodes it as a Kafka-wire request (``Listener.KAFKA``:
answers name the Kafka listeners' node ids and ports), dispatches it like
any other, and sends the encoded answer back; the worker writes it to the
client's connection, which stays muted meanwhile, so answers keep request
order.

Frames, worker -> supervisor::

    [RELAY_REQUEST header: relay id int32, client address (int16 length + UTF-8),
                           principal (int16 length + UTF-8; the connection's
                           authenticated User:<name>, security.py),
                           listener name (int16 length + UTF-8; which of the
                           node's Kafka listeners it came in on, listeners.py;
                           absent or empty: the primary one)]
    [the client's request frame, untouched]

supervisor -> worker::

    [RELAY_REPLY header: relay id int32, kind int8, error code int16,
                         throttle ms int32, UTF-8 message]
    [the encoded response frame]        (kind RESPONSE only)

The throttle is what the client's quotas (quotas.py) held it back by when
the supervisor answered: the worker mutes the client's connection that
long, as its own answers do (the response's throttle_time_ms says so too).

A message that is not a relay request -- another frame count, a header
that does not decode -- is dropped, logged (rate-limited) and counted
(``RelayServer.dropped``, kafkalite_relay_messages_dropped): only the
node's processes can send one (a worker gone wrong, or a bug), and the
supervisor's loop, which every process of the node depends on, must not
end on it.

Kinds: RESPONSE; ERROR (a whole-request error: the worker answers it in the
API's schema, exactly as for a request it served itself); NOTHING (the
request gets no answer: unmute); CLOSE (the request could not be decoded:
close the client's connection, as Kafka does).

Who may call: ``RelayClient`` from a worker's event loop, ``RelayServer``
from the supervisor's; nothing here is thread-safe.
"""
from __future__ import annotations

import itertools
import logging
import struct

import zmq

from kafkalite import errors
from kafkalite.protocol import ProtocolError, decode_request, encode_response
from kafkalite.server.ratelimit import RateLimitedLog
from kafkalite.server.network.requests import ANONYMOUS, Listener, RequestContext, RequestDispatcher

log = logging.getLogger("kafkalite.relay")

RESPONSE, ERROR, NOTHING, CLOSE = 0, 1, 2, 3
_RELAY_ID = struct.Struct(">i")
_LENGTH = struct.Struct(">h")               # a string's length
_REPLY_HEADER = struct.Struct(">ibhi")      # relay id, kind, error code, throttle ms


def encode_relay_request(relay_id: int, client_address: str, principal: str = ANONYMOUS,
                         listener_name: str | None = None) -> bytes:
    out = _RELAY_ID.pack(relay_id)
    for text in (client_address, principal, listener_name or ""):
        raw = text.encode("utf-8", "replace")[:0x7FFF]
        out += _LENGTH.pack(len(raw)) + raw
    return out


def decode_relay_request(buf) -> tuple[int, str, str, str | None]:
    """(relay id, client address, principal, listener name or None) of a
    RELAY_REQUEST header."""
    relay_id, = _RELAY_ID.unpack_from(buf)
    fields, pos = [], _RELAY_ID.size
    for what in ("address", "principal", "listener name"):
        if what == "listener name" and pos == len(buf):
            fields.append("")                      # a header without one: the primary
            break
        size, = _LENGTH.unpack_from(buf, pos)
        pos += _LENGTH.size
        if size < 0 or pos + size > len(buf):
            raise ValueError(f"relay header: {what} of {size} bytes in a {len(buf)}-byte frame")
        fields.append(bytes(buf[pos:pos + size]).decode("utf-8", "replace"))
        pos += size
    address, principal, listener_name = fields
    return relay_id, address, principal, listener_name or None


def encode_relay_reply(relay_id: int, kind: int, code: int = 0, message: str = "",
                       throttle_ms: int = 0) -> bytes:
    return _REPLY_HEADER.pack(relay_id, kind, code, throttle_ms) + message.encode("utf-8",
                                                                                 "replace")


def decode_relay_reply(buf) -> tuple[int, int, int, str, int]:
    """(relay id, kind, error code, message, throttle ms)."""
    relay_id, kind, code, throttle_ms = _REPLY_HEADER.unpack_from(buf)
    return (relay_id, kind, code, bytes(buf[_REPLY_HEADER.size:]).decode("utf-8", "replace"),
            throttle_ms)


def _broker_of(identity: bytes) -> int | None:
    """The broker id a relaying worker's identity (b"worker-<id>") names."""
    name = bytes(identity)
    if name.startswith(b"worker-") and name[7:].isdigit():
        return int(name[7:])
    return None


class RelayServer:
    """The supervisor's end: a ROUTER its workers connect to (on loopback;
    on ``bind_host``/``advertised_host`` where workers of other nodes of a
    cluster connect too); with ``curve`` (a protocol/curve.CurveServer) a
    CURVE server only the server's key pair may join."""

    def __init__(self, zctx: zmq.Context, dispatcher: RequestDispatcher,
                 bind_host: str = "127.0.0.1", advertised_host: str = "127.0.0.1", curve=None):
        self.dispatcher = dispatcher
        self._bad_input = RateLimitedLog(log)
        self.dropped = 0                 # malformed messages dropped (see the module)
        self._unencodable = RateLimitedLog(log)
        self._throttles: dict = {}       # (worker, relay id) -> ms, until the answer goes
        self.socket = zctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if curve is not None:
            curve.secure_node_server(self.socket, zctx)
        port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        self.endpoint = f"tcp://{advertised_host}:{port}"

    def attach(self, poller: zmq.Poller) -> None:
        poller.register(self.socket, zmq.POLLIN)

    def on_events(self, events: dict) -> None:
        if self.socket not in events:
            return
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) == 3:
                self._on_request(*frames)
            else:
                self._drop(frames[0], f"{len(frames) - 1} frames, not 2")

    def close(self) -> None:
        self.socket.close()

    def _drop(self, worker: bytes, why: str) -> None:
        self.dropped += 1
        self._bad_input.warning("dropped a malformed relay message (%d so far) from %r: %s",
                                self.dropped, bytes(worker)[:64], why)

    def _on_request(self, worker: bytes, relay_header: bytes, payload: bytes) -> None:
        try:
            relay_id, address, principal, listener_name = decode_relay_request(relay_header)
        except (ValueError, struct.error) as exc:
            self._drop(worker, f"its header: {exc}")
            return
        try:
            # Kafka ignores bytes after a request body, and clients rely on it.
            header, body = decode_request(payload, ignore_trailing=True)
        except ProtocolError as exc:
            self._bad_input.warning("relayed request from %s cannot be decoded: %s", address, exc)
            self.socket.send_multipart([worker, encode_relay_reply(relay_id, CLOSE, exc.code,
                                                                   exc.message)])
            return
        ctx = RequestContext(header, Listener.KAFKA, self, (worker, relay_id), peer=address,
                             principal=principal, listener_name=listener_name)
        ctx.relayed_from = _broker_of(worker)
        self.dispatcher.dispatch(ctx, body)

    # Responder

    def throttle(self, ctx: RequestContext, ms: int) -> None:
        """A quota held the client back (called just before the answer):
        the reply tells the worker to mute its connection that long."""
        self._throttles[ctx.reply_to] = ms

    def send_response(self, ctx: RequestContext, body: dict) -> None:
        worker, relay_id = ctx.reply_to
        h = ctx.header
        try:
            frame = encode_response(h.api_key, h.api_version, h.correlation_id, body)
        except ProtocolError as exc:
            # rate-limited: what a request names (its principal, a resource)
            # can make the answer's message too long to encode, as often as
            # it is sent
            self._unencodable.warning("cannot encode the relayed %r response: %s", h.api_key, exc)
            self.send_error(ctx, errors.UnknownServerError.code, f"cannot encode the response: {exc}")
            return
        self.socket.send_multipart([worker, encode_relay_reply(
            relay_id, RESPONSE, throttle_ms=self._throttles.pop(ctx.reply_to, 0)), frame])

    def send_error(self, ctx: RequestContext, code: int, message: str) -> None:
        worker, relay_id = ctx.reply_to
        self.socket.send_multipart([worker, encode_relay_reply(
            relay_id, ERROR, code, message, self._throttles.pop(ctx.reply_to, 0))])

    def send_nothing(self, ctx: RequestContext) -> None:
        worker, relay_id = ctx.reply_to
        self.socket.send_multipart([worker, encode_relay_reply(
            relay_id, NOTHING, throttle_ms=self._throttles.pop(ctx.reply_to, 0))])


class RelayClient:
    """A worker's end: forwards requests for its Kafka listeners and hands
    each answer back to the KafkaListener the request came from; with
    ``curve``, over CURVE with the server's key pair."""

    def __init__(self, zctx: zmq.Context, endpoint: str, identity: bytes, curve=None):
        self.socket = zctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.IDENTITY, identity)
        if curve is not None:
            curve.secure_client(self.socket)
        self.socket.connect(endpoint)
        # relay id -> (listener, connection, request header, request, times
        # sent before): the request kept to send again if this supervisor
        # goes (unanswered)
        self._pending: dict[int, tuple] = {}
        self._ids = itertools.count(1)

    def attach(self, poller: zmq.Poller) -> None:
        poller.register(self.socket, zmq.POLLIN)

    def forward(self, listener, conn, header, payload, resent: int = 0) -> None:
        relay_id = next(self._ids) & 0x7FFFFFFF
        self._pending[relay_id] = (listener, conn, header, bytes(payload), resent)
        self.socket.send_multipart([encode_relay_request(relay_id, conn.address, conn.principal,
                                                         listener.listener_name),
                                    payload], copy=False)

    def on_events(self, events: dict) -> None:
        if self.socket not in events:
            return
        while True:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                relay_id, kind, code, message, throttle_ms = decode_relay_reply(frames[0])
            except struct.error:
                log.error("dropped a malformed relay reply of %d bytes", len(frames[0]))
                continue
            pending = self._pending.pop(relay_id, None)
            if pending is None:
                continue
            listener, conn, header, _, _ = pending
            if throttle_ms > 0:
                listener.mute_for(conn, throttle_ms)    # before the answer: the next request waits
            if kind == RESPONSE and len(frames) == 2:
                listener.respond_frame(conn, frames[1])
            elif kind == ERROR:
                listener.respond_error(conn, header, code, message)
            elif kind == NOTHING:
                listener.unmute(conn, header)
            else:
                listener.close_connection(conn, f"the supervisor could not decode the "
                                                     f"{header.api_key!r} request: {message}")

    def unanswered(self) -> list[tuple]:
        """(listener, connection, request header, request, times sent
        before) of each request sent and not answered yet, in the order they were sent, after
        taking the answers that arrived: what a supervisor that is gone
        leaves, to be sent to the next one."""
        self.on_events({self.socket: zmq.POLLIN})
        return list(self._pending.values())

    def close(self) -> None:
        self.socket.close()


class PendingRelay:
    """The relay of a worker that does not know the supervisor's yet: at
    start-up the supervisor starts its workers before it binds the relay,
    and names it with their first assign. A Kafka client may connect
    before that, and the worker advertises every API of the node from the
    first connection (requests.KAFKA_APIS), so what the listeners forward
    waits here, each connection muted as for any relayed request, and goes
    to the supervisor once it is known (``hand_over``): the client sees a
    slower first answer, never an error it would take as permanent.
    At most MAX_WAITING requests wait; a connection whose request would
    pass that is closed (the client reconnects and retries)."""

    MAX_WAITING = 10_000

    def __init__(self):
        self._waiting: list[tuple] = []

    def __len__(self) -> int:
        return len(self._waiting)

    def forward(self, listener, conn, header, payload, resent: int = 0) -> None:
        if len(self._waiting) >= self.MAX_WAITING:
            listener.close_connection(conn, "the broker is starting and holds too many "
                                            "requests for the supervisor")
            return
        self._waiting.append((listener, conn, header, bytes(payload), resent))

    def forward_again(self, unanswered: list[tuple]) -> None:
        """Hold the requests a supervisor that is gone left unanswered
        (RelayClient.unanswered), ahead of any later one, for the next: as
        a Kafka client retries a request its broker's disconnect left
        without an answer. Closing their connections instead made
        librdkafka take its coordinator for down and wait out its 500 ms
        coordinator query timer (issue 47: a transactional producer's stall
        after a supervisor kill). Once only: a request two supervisors in
        turn left unanswered may be what stops them, and its connection is
        closed instead."""
        for listener, conn, header, payload, resent in unanswered:
            if conn.closed:
                continue
            if resent:
                listener.close_connection(conn, f"its {header.api_key!r} request was left "
                                                f"unanswered by two supervisors in turn")
            else:
                self.forward(listener, conn, header, payload, 1)

    def hand_over(self, relay: RelayClient) -> None:
        """Forward what waited, in the order it came (the listener answers
        a connection's requests in order)."""
        waiting, self._waiting = self._waiting, []
        for listener, conn, header, payload, resent in waiting:
            relay.forward(listener, conn, header, payload, resent)

