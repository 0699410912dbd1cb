"""The request pipeline: one way from a decoded request to its response.

A broker process (the supervisor or a partition worker) receives requests
on up to three paths:

- native: its ZeroMQ ROUTER (native_listener.py), Kafka request bodies with
  record batches in frames of their own;
- Kafka: its TCP listener (kafka_listener.py), Kafka's own framing;
- relayed: a Kafka-wire request that a worker's TCP listener does not serve
  itself, passed to the supervisor over an internal ZeroMQ channel
  (relay.py) and answered back through it.

Each path only decodes: it wraps the request in a ``RequestContext`` that
knows how to answer on that path, and hands it to
``RequestDispatcher.dispatch``, which does everything else once: ApiVersions
(one builder), the version check, finding the handler, turning exceptions
into error answers, and acting on what the handler returns.

Handlers are ``fn(ctx, body) -> dict | DEFERRED | NO_RESPONSE``:

- a dict is the response body, sent at once;
- ``DEFERRED``: the handler keeps ``ctx`` and calls ``ctx.respond(body)``
  later (a long-poll fetch, a JoinGroup waiting for its group, an admin
  request waiting for the workers);
- ``NO_RESPONSE``: the request is never answered (Produce with acks=0).

A ``KafkaError`` raised by a handler answers the whole request with its
code and message; any other exception is logged and answered
UNKNOWN_SERVER_ERROR. Such whole-request errors carry the same code and
message on every path: on the native path as the error reply frame
(docs/protocol.md); on the Kafka and relayed paths in the API's own
response with its top-level ``error_code`` (and ``error_message`` where the
version has it), or, for an API whose response has no top-level error, by
closing the connection, as Kafka does.

A Produce request may name the principal it is made for
(``request_principal``, protocol/messages/produce.py): the ingest gateway
forwards its publishers' records so. As Kafka trusts an Envelope's
principal (KIP-590) only from a connection authenticated as a broker, the
dispatcher takes it only from a request whose own principal is the
server's (protocol/curve.py's BROKER_PRINCIPAL, its own CURVE key) on a
native port (a Kafka-listener login of that name is not the server), and
then authorizes and counts the request against that principal as if it
had sent it; from any other principal the request is refused with
CLUSTER_AUTHORIZATION_FAILED and nothing of it is written.

Who may call: a broker process's listeners, on its one event-loop thread.
Nothing here is thread-safe.
"""
from __future__ import annotations

import enum
import logging
import re
import time
from typing import Callable, Iterable, Mapping, Protocol

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, RequestHeader
from kafkalite.protocol.curve import BROKER_PRINCIPAL
from kafkalite.server.network.quotas import fetch_response_bytes, user_of

log = logging.getLogger("kafkalite.requests")

ANONYMOUS = "User:ANONYMOUS"


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


DEFERRED = _Sentinel("DEFERRED")
NO_RESPONSE = _Sentinel("NO_RESPONSE")


class Listener(enum.Enum):
    """Which protocol a request arrived in. Answers that name brokers (node
    ids, ports) differ: Kafka clients are told the Kafka listeners'."""

    NATIVE = "native"
    KAFKA = "kafka"


class Responder(Protocol):
    """How one path answers its requests (implemented by each listener)."""

    def send_response(self, ctx: "RequestContext", body: dict) -> None: ...

    def send_error(self, ctx: "RequestContext", code: int, message: str) -> None: ...

    def send_nothing(self, ctx: "RequestContext") -> None: ...

    # optional: ``throttle(ctx, ms)`` holds the client back for ``ms`` after
    # this answer (client quotas); a path without it only reports the throttle


class RequestContext:
    """One request in flight: its header, where it came from, and how to
    answer it. ``reply_to`` is the path's own routing token (a ZeroMQ
    identity, a TCP connection, a relay slot); only the responder reads it.
    A context is answered at most once. ``stats`` (set by the dispatcher,
    a metrics.RequestStats) records the request's time when it is answered:
    from its arrival to its answer, waits in the purgatory included."""

    __slots__ = ("header", "listener", "principal", "reply_to", "_responder", "_peer", "answered",
                 "started", "stats", "amend", "size", "quotas", "handler_s", "listener_name",
                 "relayed_from", "topic_readable", "denied_topics")

    def __init__(self, header: RequestHeader, listener: Listener, responder: Responder, reply_to,
                 *, peer=None, principal: str = ANONYMOUS, size: int = 0,
                 listener_name: str | None = None):
        self.header = header
        self.listener = listener
        # which of the node's Kafka listeners (listeners.py) it came in on:
        # answers naming brokers give that listener's endpoints; None: the
        # primary listener's (and every native request)
        self.listener_name = listener_name
        self.principal = principal
        self.reply_to = reply_to
        self._responder = responder
        self._peer = peer
        self.answered = False
        self.started = time.perf_counter()
        self.stats = None
        # set by the authorization check (request_authorization.py): puts the
        # answers for what it took out of the request into the response
        self.amend = None
        # client quotas (quotas.py): the request's bytes as they came, the
        # process's QuotaManager (set by the dispatcher), and the time its
        # handler ran
        self.size = size
        self.quotas = None
        self.handler_s = 0.0
        # the broker id of the worker that relayed the request here (the
        # broker the client addressed), or None when it came to this process
        self.relayed_from = None
        # a consumer's Fetch with the authorizer on (request_authorization.py):
        # topic name -> whether the principal may read it, for the partitions
        # of its fetch session it does not name; and the request topics the
        # gate took out (answered by it, kept in the session)
        self.topic_readable = None
        self.denied_topics = ()

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def is_kafka(self) -> bool:
        return self.listener is Listener.KAFKA

    @property
    def client_address(self) -> str:
        """"host:port" of the client, "" when the path cannot tell."""
        peer = self._peer
        if peer is None or type(peer) is str:
            return peer or ""
        try:  # a zmq.Frame: libzmq knows the TCP peer of the message
            return peer.get("Peer-Address") or ""
        except Exception:
            return ""

    @property
    def client_host(self) -> str:
        address = self.client_address
        return address.rsplit(":", 1)[0] if ":" in address else address

    def respond(self, body: dict) -> None:
        if self.amend is not None and not self.answered:
            self.amend(body)
        if self.quotas is not None and not self.answered:
            throttle_ms = self._throttle(body)
            if throttle_ms:
                body["throttle_time_ms"] = max(body.get("throttle_time_ms") or 0, throttle_ms)
        if self._answer():
            self._responder.send_response(self, body)

    def respond_error(self, code: int, message: str = "") -> None:
        if self.quotas is not None and not self.answered:
            self._throttle(None)
        if self._answer():
            self._responder.send_error(self, code, message)

    def no_response(self) -> None:
        if self.quotas is not None and not self.answered:
            self._throttle(None)
        if self._answer():
            self._responder.send_nothing(self)

    def _throttle(self, body: dict | None) -> int:
        """Count this request against its client's quotas (quotas.py); when
        it went over, tell the responder to hold the client back (before the
        answer goes, so the client's next request waits). The throttle in ms."""
        quotas = self.quotas
        api_key = self.header.api_key
        ms = quotas.on_request(
            user_of(self.principal), self.header.client_id or "", api_key, self.size,
            fetch_response_bytes(body) if body is not None and api_key == ApiKey.FETCH else 0,
            self.handler_s)
        if ms:
            throttle = getattr(self._responder, "throttle", None)
            if throttle is not None:
                throttle(self, ms)
        return ms

    def _answer(self) -> bool:
        if self.answered:
            log.error("%r request %d answered twice; the second answer is dropped",
                      self.header.api_key, self.header.correlation_id)
            return False
        self.answered = True
        if self.stats is not None:
            self.stats.observe(self.header.api_key, time.perf_counter() - self.started)
        return True

    def __repr__(self) -> str:
        h = self.header
        return f"RequestContext({h.api_key!r} v{h.api_version} #{h.correlation_id}, {self.listener.value})"


Handler = Callable[[RequestContext, dict], object]


# Features (KIP-584) in ApiVersions v3+, as a Kafka 4.0 broker finalizes
# them: transaction.version 2 lets clients use transactions v2 (KIP-890).
# The level never changes, so the finalized epoch is a constant.
TRANSACTION_VERSION = 2
FEATURES_EPOCH = 1
SUPPORTED_FEATURES = {"transaction.version": (0, TRANSACTION_VERSION)}   # name -> (min, max)
# ApiVersions below v4 leaves out a supported feature whose min_version is
# 0, as Kafka does (KAFKA-17011: Java clients before 3.9 refuse to parse such
# a range); a v4 client is told every feature. The finalized levels (what a
# client decides by) are in every version from v3.
FEATURES_FROM_LEVEL_0 = 4


def api_versions_body(api_keys: Iterable[int], error_code: int = 0,
                      api_version: int = FEATURES_FROM_LEVEL_0) -> dict:
    """The ApiVersions response of ``api_version`` advertising ``api_keys``
    (and ApiVersions)."""
    keys = sorted(set(api_keys) | {ApiKey.API_VERSIONS})
    return {"error_code": error_code, "throttle_time_ms": 0, "api_keys": [
        {"api_key": int(k), "min_version": SUPPORTED_VERSIONS[k][0],
         "max_version": SUPPORTED_VERSIONS[k][1]} for k in keys if k in SUPPORTED_VERSIONS],
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in SUPPORTED_FEATURES.items()
            if low > 0 or api_version >= FEATURES_FROM_LEVEL_0],
        "finalized_features_epoch": FEATURES_EPOCH,
        "finalized_features": [{"name": "transaction.version",
                                "max_version_level": TRANSACTION_VERSION,
                                "min_version_level": TRANSACTION_VERSION}]}


# KIP-511: what a client may call itself in ApiVersions v3+; Kafka refuses
# any other name or version INVALID_REQUEST (ApiVersionsRequest.isValid)
_CLIENT_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_client_software(body: dict) -> bool:
    return all(_CLIENT_SOFTWARE.fullmatch(body.get(f) or "") for f in
               ("client_software_name", "client_software_version"))


def unsupported(header: RequestHeader, what: str, hint: str = "") -> KafkaError:
    return errors.UnsupportedVersionError(
        f"{what} does not serve {_api_name(header.api_key)} v{header.api_version}{hint}")


def _act_for(ctx: RequestContext, principal: str) -> None:
    """Make ``ctx`` a request of ``principal``, which a proxy named in it;
    only the server's own connections may (see the module docstring)."""
    # the server's own CURVE key, on a native port: a Kafka-listener login
    # (a SASL user or a certificate) that happens to carry the same name is
    # not the server, and may not act for others
    if ctx.principal != BROKER_PRINCIPAL or ctx.listener is not Listener.NATIVE:
        raise errors.ClusterAuthorizationFailedError(
            f"{ctx.principal} may not produce on behalf of {principal}: only the server's "
            f"own key ({BROKER_PRINCIPAL}) may name a request principal")
    ctx.principal = principal


# Every API a node serves to Kafka clients: each API the protocol layer
# has versions of, answered by the process that owns it (a worker relays
# the supervisor's to it), but the SASL exchange, which the listener
# answers before a request reaches a dispatcher. Every process advertises
# all of them from its first connection, as Kafka's brokers do: a worker
# that told a client less while it waited for its first assignment made
# librdkafka fail Metadata as unsupported for the connection's life, and
# transactional producers fatally (_UNSUPPORTED_FEATURE). The supervisor
# checks at start that its handlers and the workers' are exactly these.
KAFKA_APIS = frozenset(SUPPORTED_VERSIONS) - {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def _api_name(api_key) -> str:
    return api_key.name if isinstance(api_key, ApiKey) else f"API {api_key}"


class RequestDispatcher:
    """Routes contexts to handlers. ``handlers`` is a live mapping.

    ApiVersions advertises the handlers' APIs on the native path; on the
    Kafka path, where each process is one broker of a cluster and a worker
    relays what it does not serve, it advertises ``cluster_apis()`` (by
    default the handlers' too). ``stats`` (a metrics.RequestStats, or None
    with metrics off) counts and times every request answered. ``gate`` (a
    request_authorization.RequestGate, or None with the authorizer off)
    checks each request that came in on a Kafka listener before its
    handler, and native ones too when ``check_native`` (the native listener
    sets it when CURVE authenticates its clients); without CURVE the native
    path has no principals to check."""

    def __init__(self, name: str, handlers: Mapping[int, Handler], *,
                 cluster_apis: Callable[[], Iterable[int]] | None = None, stats=None,
                 unserved_hint: str = ""):
        self.name = name
        # added to the refusal of an API no handler serves: where it is served
        self.unserved_hint = unserved_hint
        self.handlers = handlers
        self._cluster_apis = cluster_apis
        self.stats = stats
        self.gate = None
        self.check_native = False
        self.quotas = None          # a quotas.QuotaManager: client quotas enforced
        # {api key: fn(body) -> response body, NO_RESPONSE, or None}: a handler's one-pass
        # path for its common requests, which needs no RequestContext (``answer_at_once``)
        self.at_once: dict = {}
        # {api key: fn(payload) -> the answer's TCP frame, a response body,
        # NO_RESPONSE, or None}: the same for a request still in its TCP frame
        # (header + body), which the path reads itself (``answer_frame_at_once``)
        self.frames_at_once: dict = {}

    def advertised(self, listener: Listener) -> Iterable[int]:
        if listener is Listener.KAFKA and self._cluster_apis is not None:
            return self._cluster_apis()
        return self.handlers.keys()

    def serves(self, api_key: int) -> bool:
        """Whether this process answers ``api_key`` itself."""
        return api_key == ApiKey.API_VERSIONS or api_key in self.handlers

    def api_versions_body(self, listener: Listener, error_code: int = 0,
                          api_version: int = FEATURES_FROM_LEVEL_0) -> dict:
        return api_versions_body(self.advertised(listener), error_code, api_version)

    def check_version(self, header: RequestHeader) -> None:
        versions = SUPPORTED_VERSIONS.get(header.api_key)
        if versions is None or not versions[0] <= header.api_version <= versions[1]:
            raise unsupported(header, self.name)

    def answer_at_once(self, header: RequestHeader, body: dict):
        """The answer to a request whose handler serves it in one pass
        (``at_once``), the request counted in the stats: a response body, or
        NO_RESPONSE; None when there is no such path for it, the
        authorizer or client quotas must see it (they need its context), or
        the path did not take it -- nothing done, ``dispatch`` serves it.
        Raises what the path raised (a fault: the caller answers it as
        ``dispatch`` would)."""
        return self._at_once(self.at_once, header, body)

    def answer_frame_at_once(self, header: RequestHeader, payload):
        """As ``answer_at_once`` for a request not decoded yet: ``payload``
        is its frame (header + body), ``header`` its peeked header. The
        answer's TCP frame (a bytes-like, size prefix and all), a response
        body, NO_RESPONSE, or None: nothing done, the caller decodes it."""
        return self._at_once(self.frames_at_once, header, payload)

    def _at_once(self, table: dict, header: RequestHeader, request):
        """``table``'s one-pass handler of the request's API, if it may take
        it, called with ``request`` (a body or a frame) and timed; None
        when it may not (answer_at_once, answer_frame_at_once)."""
        fn = table.get(header.api_key)
        if fn is None or self.gate is not None or (self.quotas is not None
                                                     and self.quotas.enabled):
            return None
        versions = SUPPORTED_VERSIONS[header.api_key]
        if not versions[0] <= header.api_version <= versions[1]:
            return None
        started = time.perf_counter()
        result = fn(request)
        if result is not None and self.stats is not None:
            self.stats.observe(header.api_key, time.perf_counter() - started)
        return result

    def dispatch(self, ctx: RequestContext, body: dict) -> None:
        header = ctx.header
        ctx.stats = self.stats
        quotas = self.quotas
        if quotas is not None and quotas.enabled:
            ctx.quotas = quotas          # counted and throttled when answered
        else:
            quotas = None
        try:
            self.check_version(header)
            if header.api_key == ApiKey.API_VERSIONS:
                if header.api_version >= 3 and not valid_client_software(body):
                    ctx.respond(api_versions_body((), errors.InvalidRequestError.code,
                                                  header.api_version) | {"api_keys": []})
                    return
                ctx.respond(self.api_versions_body(ctx.listener, api_version=header.api_version))
                return
            handler = self.handlers.get(header.api_key)
            if handler is None:
                raise unsupported(header, self.name, self.unserved_hint)
            if header.api_key == ApiKey.PRODUCE and body.get("request_principal"):
                _act_for(ctx, body.pop("request_principal"))
            result = None
            if self.gate is not None and (ctx.listener is Listener.KAFKA or self.check_native):
                result = self.gate.check(ctx, body)
            if result is None:
                if quotas is not None:
                    began = time.perf_counter()
                    result = handler(ctx, body)
                    ctx.handler_s = time.perf_counter() - began
                else:
                    result = handler(ctx, body)
        except KafkaError as exc:
            ctx.respond_error(exc.code, exc.message)
            return
        except Exception as exc:  # one request must not take the process down
            log.exception("%s: %r request failed", self.name, header.api_key)
            ctx.respond_error(errors.UnknownServerError.code, f"{type(exc).__name__}: {exc}")
            return
        if type(result) is dict:
            ctx.respond(result)
        elif result is DEFERRED:
            pass
        elif result is NO_RESPONSE:
            ctx.no_response()
        else:
            log.error("%s: the %r handler returned %r, not a body, DEFERRED or NO_RESPONSE",
                      self.name, header.api_key, result)
            ctx.respond_error(errors.UnknownServerError.code,
                              f"{_api_name(header.api_key)} handler gave no answer")
