"""The native protocol's ZeroMQ ROUTER in one broker process.

Framing (kafkalite/protocol/native.py, docs/protocol.md): a request is
[identity, Kafka request header + body, record batch frames...]; the answer
mirrors it, or is the two-frame error reply. This module only decodes and
encodes: every request becomes a ``RequestContext`` (requests.py) handed to
the process's dispatcher, and this listener is the context's responder.

Extension requests (API key 32000, JSON ops such as ``shm_attach``) go to
the ``extensions`` table: op name -> fn(body dict) -> reply dict.

Fetch responses may carry segment file regions; ZeroMQ needs bytes, so a
region is read into memory here (the Kafka listener sendfiles them).

Who may call: the owning process's event loop (``attach``, ``on_events``,
``close``); nothing here is thread-safe.
"""
from __future__ import annotations

import logging
import struct

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ProtocolError, decode_request, encode_response
from kafkalite.protocol import native
from kafkalite.server.ratelimit import RateLimitedLog
from kafkalite.server.requests import Listener, RequestContext, RequestDispatcher
from kafkalite.storage.segment import FileRegion

log = logging.getLogger("kafkalite.native")

# Requests read per poll wakeup, so rings, timers and other sockets of the
# same loop are not starved by one busy client.
MAX_REQUESTS_PER_WAKEUP = 1024


class NativeListener:
    def __init__(self, zctx: zmq.Context, host: str, port: int, dispatcher: RequestDispatcher, *,
                 name: str, extensions: dict | None = None, fallback_to_any_port: bool = False):
        self.dispatcher = dispatcher
        self.name = name
        self.extensions = extensions or {}
        self._bad_input = RateLimitedLog(log)
        self.socket = zctx.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.port = 0
        if port:
            try:
                self.socket.bind(f"tcp://{host}:{port}")
                self.port = port
            except zmq.ZMQError as exc:
                if not fallback_to_any_port:
                    self.socket.close()
                    raise errors.KafkaStorageError(f"cannot listen on {host}:{port}: {exc}") from None
                log.warning("%s: port %d is taken (%s); using any free port", name, port, exc)
        if not self.port:
            self.port = self.socket.bind_to_random_port(f"tcp://{host}")

    # ---- poll loop integration ---------------------------------------------------------------

    def attach(self, poller: zmq.Poller) -> None:
        poller.register(self.socket, zmq.POLLIN)

    def on_events(self, events: dict) -> None:
        if self.socket not in events:
            return
        for _ in range(MAX_REQUESTS_PER_WAKEUP):
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) >= 2:
                self._on_message(frames)

    def close(self) -> None:
        self.socket.close()

    # ---- requests ----------------------------------------------------------------------------

    def _on_message(self, frames: list) -> None:
        identity, payload = frames[0].bytes, frames[1]
        if native.is_extension_request(payload.buffer):
            self._on_extension(identity, payload.bytes)
            return
        try:
            header, body = decode_request(payload.buffer, records_in=[f.buffer for f in frames[2:]])
        except ProtocolError as exc:
            if exc.code != errors.UnsupportedVersionError.code:
                self._bad_input.warning("%s: malformed request: %s", self.name, exc)
            if exc.header is not None:   # its correlation id can be trusted: answer it
                self._send_error(identity, exc.header.correlation_id, exc.code, exc.message)
            return
        ctx = RequestContext(header, Listener.NATIVE, self, identity, peer=payload)
        self.dispatcher.dispatch(ctx, body)

    def _on_extension(self, identity: bytes, payload: bytes) -> None:
        try:
            correlation_id, body = native.decode_extension_request(payload)
            op = self.extensions[body["op"]]
        except (ValueError, KeyError, struct.error) as exc:
            self._bad_input.warning("%s: dropped a malformed extension request: %s", self.name, exc)
            return
        try:
            reply = {"error_code": 0, **op(body)}
        except KafkaError as exc:
            reply = {"error_code": exc.code, "message": exc.message}
        except Exception as exc:  # one request must not take the process down
            log.exception("%s: extension request %s failed", self.name, body["op"])
            reply = {"error_code": errors.UnknownServerError.code, "message": str(exc)}
        self.socket.send_multipart([identity, native.encode_extension_response(correlation_id, reply)])

    # ---- Responder ---------------------------------------------------------------------------

    def send_response(self, ctx: RequestContext, body: dict) -> None:
        header = ctx.header
        records: list = []
        try:
            payload = encode_response(header.api_key, header.api_version, header.correlation_id,
                                      body, records_out=records)
        except ProtocolError as exc:
            log.error("%s: cannot encode the %r response: %s", self.name, header.api_key, exc)
            self.send_error(ctx, errors.UnknownServerError.code, f"cannot encode the response: {exc}")
            return
        frames = [r.read() if type(r) is FileRegion else r for r in records]
        self.socket.send_multipart([ctx.reply_to, payload, *frames], copy=False)

    def send_error(self, ctx: RequestContext, code: int, message: str) -> None:
        self._send_error(ctx.reply_to, ctx.header.correlation_id, code, message)

    def send_nothing(self, ctx: RequestContext) -> None:
        pass

    def _send_error(self, identity: bytes, correlation_id: int, code: int, message: str) -> None:
        self.socket.send_multipart([identity, native.ERROR_FRAME,
                                    native.encode_error(correlation_id, code, message)])
