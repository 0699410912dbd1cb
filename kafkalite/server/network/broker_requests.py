"""Requests one broker process sends another, over the native protocol.

Two conversations need it:

- the transaction coordinator (in the supervisor) ends a transaction by
  having a COMMIT or ABORT marker written to every partition it touched:
  WriteTxnMarkers to each worker leading one;
- a worker about to append the first batch of a producer's transaction to
  a partition asks the coordinator whether the partition is in that
  transaction (AddPartitionsToTxn with ``verify_only``, KIP-890 part 1).

One ZeroMQ DEALER per peer process, speaking the native protocol to its
ROUTER as any client would, carrying Kafka's own request. Each request's
outcome -- the response body, or a KafkaError (an error reply, no answer
within ``timeout_s``, the peer gone) -- goes to the ``on_done`` callback
given with it; retrying is the caller's decision. Answers never block
the event loop: ``on_events`` takes them when the poller says so.

Who may call: the owning process's event loop (``attach``, ``on_events``,
``expire``, ``close``) and the parts that run on it; nothing here is
thread-safe.
"""
from __future__ import annotations

import itertools
import logging
import struct
import time
from typing import Callable

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError, error_for_code
from kafkalite.protocol import ApiKey, ProtocolError, decode_response, encode_request
from kafkalite.protocol import native

log = logging.getLogger("kafkalite.txn")

_CORRELATION = struct.Struct(">i")


class BrokerRequests:
    def __init__(self, zctx: zmq.Context, endpoint_of: Callable[[int], str | None],
                 client_id: str, timeout_s: float = 30.0, curve=None):
        self.zctx = zctx
        self.curve = curve                      # a CurveServer: connect with the server's keys
        self.endpoint_of = endpoint_of          # broker id -> its native endpoint (None: down)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._poller: zmq.Poller | None = None
        self._sockets: dict[int, tuple[str, zmq.Socket]] = {}
        # correlation id -> (broker id, api key, version, deadline, on_done)
        self._waiting: dict[int, tuple] = {}
        self._ids = itertools.count(1)
        self._closed = False

    def attach(self, poller: zmq.Poller) -> None:
        self._poller = poller
        for _, sock in self._sockets.values():
            poller.register(sock, zmq.POLLIN)

    def send(self, broker_id: int, api_key: int, version: int, body: dict,
             on_done: Callable[[object], None]) -> None:
        """Send a request to ``broker_id``; ``on_done`` gets the response
        body or a KafkaError."""
        if self._closed:
            # a callback of close() sending again: nothing would ever answer
            # it (the owner no longer polls this), so it fails now
            on_done(errors.BrokerNotAvailableError("this process is stopping"))
            return
        endpoint = self.endpoint_of(broker_id)
        if endpoint is None:
            on_done(errors.BrokerNotAvailableError(f"broker {broker_id} is not available"))
            return
        sock = self._socket(broker_id, endpoint)
        cid = next(self._ids) & 0x7FFFFFFF
        frames: list = []
        payload = encode_request(api_key, version, cid, self.client_id, body, records_out=frames)
        sock.send_multipart([payload, *frames])
        self._waiting[cid] = (broker_id, api_key, version, time.monotonic() + self.timeout_s,
                              on_done)

    def _socket(self, broker_id: int, endpoint: str) -> zmq.Socket:
        known = self._sockets.get(broker_id)
        if known is not None and known[0] == endpoint:
            return known[1]
        if known is not None:                 # the worker restarted on another port
            self._drop(broker_id, errors.NotLeaderOrFollowerError(f"broker {broker_id} moved"))
        sock = self.zctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            self.curve.secure_client(sock)
        sock.connect(endpoint)
        self._sockets[broker_id] = (endpoint, sock)
        if self._poller is not None:
            self._poller.register(sock, zmq.POLLIN)
        return sock

    def _drop(self, broker_id: int, err: KafkaError) -> None:
        _, sock = self._sockets.pop(broker_id)
        if self._poller is not None:
            self._poller.unregister(sock)
        sock.close()
        for cid, waiting in list(self._waiting.items()):
            if waiting[0] == broker_id:
                del self._waiting[cid]
                waiting[-1](err)

    def broker_gone(self, broker_id: int) -> None:
        """``broker_id``'s process is gone (the controller fenced it): what
        waits for its answer fails now, to be retried with the new leader,
        rather than after ``timeout_s``."""
        if broker_id in self._sockets:
            self._drop(broker_id, errors.NotLeaderOrFollowerError(
                f"broker {broker_id} is gone"))

    def on_events(self, events: dict) -> None:
        for broker_id, (_, sock) in list(self._sockets.items()):
            if sock not in events:
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on_reply(frames)

    def _on_reply(self, frames: list) -> None:
        try:
            if frames[0] == native.ERROR_FRAME:
                cid, code, message = native.decode_error(frames[1])
                waiting = self._waiting.pop(cid, None)
                result: object = error_for_code(code)(message)
            else:
                (cid,) = _CORRELATION.unpack_from(frames[0])
                waiting = self._waiting.pop(cid, None)
                if waiting is None:
                    return
                _, result = decode_response(waiting[1], waiting[2], frames[0],
                                            records_in=frames[1:])
        except (ProtocolError, struct.error, IndexError) as exc:
            log.error("unreadable answer from a broker: %s", exc)
            return
        if waiting is not None:
            waiting[-1](result)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for cid, (broker_id, api_key, _, deadline, on_done) in list(self._waiting.items()):
            if deadline <= now:
                del self._waiting[cid]
                on_done(errors.RequestTimedOutError(
                    f"broker {broker_id} did not answer {ApiKey(api_key).name} in "
                    f"{self.timeout_s:.0f} s"))

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    def next_deadline(self) -> float | None:
        if not self._waiting:
            return None     # asked on every pass of the worker's loop: no generator
        return min(w[3] for w in self._waiting.values())

    def close(self) -> None:
        """Fail what waits (BROKER_NOT_AVAILABLE) and close every socket. A
        callback that sends again is failed at once too (``send``)."""
        self._closed = True
        for broker_id in list(self._sockets):
            self._drop(broker_id, errors.BrokerNotAvailableError("this process is stopping"))
