"""The ZeroMQ link: native-protocol requests to one kafkalite process.

A Connection is one ZeroMQ DEALER socket to one broker process (the
supervisor or a worker), carrying pipelined requests matched to responses
by correlation id (framing: kafkalite/protocol/native.py,
docs/protocol.md). It is a ``Link`` (link.py): a socket monitor, created
with ``watch=True``, turns ``alive()`` False as soon as the process goes
away, and ``ready()`` caps the requests in flight at ``max_in_flight``.
Besides the link calls, ``request``/``extension`` send and wait for one
answer (answers to other requests that arrive meanwhile are kept for
``receive``).

Security: a client whose config names CURVE keys (``curve.server.key``,
``curve.public.key``, ``curve.secret.key``; ``client_context`` puts them on
the client's ZeroMQ context) speaks CURVE (protocol/curve.py). ZeroMQ keeps
a refused handshake to itself (it retries the connection, and requests
wait for ever), so a new Connection watches its handshake through a socket
monitor once it is connected, whether it has keys or not, and raises
``AuthenticationRefusedError`` naming the refusal: an unknown client key
(HANDSHAKE_FAILED_AUTH), CURVE on one side only (HANDSHAKE_FAILED_PROTOCOL),
or a wrong server key (the server drops the connection mid-handshake). A
watched link (``watch=True``, the producer's and consumer's links to
workers, made after the metadata link to the same server succeeded with
the same keys) does not wait for its handshake: a failed one makes
``alive()`` False, as a disconnect does.

A SASL login (``security.protocol`` SASL_PLAINTEXT or SASL_SSL,
``sasl.mechanism``, ``sasl.username``, ``sasl.password``, as for a Kafka
listener; ``client_context`` puts it on the context with the CURVE keys,
which it needs: the server's public key, and this client's key pair or a
throwaway one): every new Connection logs in before it is used --
SaslHandshake and SaslAuthenticate, blocking_kafka_client.py's
``sasl_login``, before any other request -- so a link to a worker the client is sent to,
and a link made again after its process went away, is logged in as the
first one was (server/auth/native_login.py: the server binds this client's key
to the user). A refused login raises SaslAuthenticationFailedError (or
UnsupportedSaslMechanismError) with the server's message, from the
Connection's constructor. A process restarted on the same address, which
ZeroMQ reconnects a link to unseen, knows nothing of the login: a
``request``/``extension`` answered "... before a SASL login"
(curve.LOGIN_NEEDED) logs in again and is sent once more. (A watched link
is dropped at the disconnect and made anew, logging in.)

Without keys, a Connection to a server on this host whose native ports
require CURVE goes through the port's local door instead (local_socket.py
``native_door``: a Unix-domain ZeroMQ socket the server authenticates by
the peer's user id), so a local client is ``User:unix:<its user>`` to the
authorizer with no key file. ``endpoint`` stays the TCP one (messages, and
the refused-connection probe: the door goes when its process does).

A request waited on with ``request``/``extension``/``wait_for`` does not
wait out its timeout for an answer that cannot come: a watched link's wait
ends when ``alive()`` turns False; a non-watched one's, when its endpoint
has refused TCP connections for PEER_DOWN_GRACE_S (a plain connect, tried
once a second while the wait lasts: a dead process's port refuses at
once). Either raises ``PeerLostError``, a KafkaTimeoutError, so callers
that retry a timeout retry it. A non-watched link keeps no socket monitor
once connected: an event sent to a monitor its context closed first blocks
the context for good (``_monitor_socket``), and a context is destroyed
with its sockets in any order. Not caught early: a process that restarted
on its address while the request waited (its answer is lost with the old
connection; the request's timeout ends that wait).

Thread safety: a Connection is used by one thread at a time; the client
classes give each thread its own or hold a lock.
"""
from __future__ import annotations

import itertools
import logging
import os
import socket
import struct
import sys
import threading
import time

import zmq

from kafkalite import errors, local_socket
from kafkalite.client.blocking_kafka_client import sasl_login, sasl_mechanism
from kafkalite.client.link import Link
from kafkalite.errors import KafkaError, error_for_code
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, decode_response, encode_request
from kafkalite.protocol import curve, native

# The versions kafkalite's clients speak (all within SUPPORTED_VERSIONS).
VERSIONS = {
    ApiKey.PRODUCE: 9, ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 7, ApiKey.METADATA: 12,
    ApiKey.API_VERSIONS: 3, ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3, ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1, ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.FIND_COORDINATOR: 4, ApiKey.JOIN_GROUP: 9, ApiKey.SYNC_GROUP: 5,
    ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 5, ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 8, ApiKey.OFFSET_DELETE: 0, ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 4, ApiKey.DELETE_GROUPS: 2, ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0, ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.INIT_PRODUCER_ID: 4, ApiKey.ADD_PARTITIONS_TO_TXN: 3, ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3, ApiKey.TXN_OFFSET_COMMIT: 3, ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_TRANSACTIONS: 0, ApiKey.LIST_TRANSACTIONS: 1, ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DELETE_RECORDS: 2, ApiKey.DESCRIBE_LOG_DIRS: 4,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: 1, ApiKey.ALTER_CLIENT_QUOTAS: 1,
    ApiKey.CONSUMER_GROUP_DESCRIBE: 1,
}
_CORRELATION = struct.Struct(">i")
log = logging.getLogger(__name__)
# How long a client's close waits for its ZeroMQ context to end
TERM_WAIT_S = 15.0
# A watched link whose TCP connect is not answered in this long counts as
# lost (a host that is gone answers nothing; one that is up refuses at once).
CONNECT_TIMEOUT_MS = 3000


# How long a new Connection waits for its TCP connection, then for the
# ZMTP handshake on it, to tell a refused handshake apart (a server that is
# not reachable yet is left to the usual timeouts).
HANDSHAKE_CONNECT_WAIT_S = 0.25
HANDSHAKE_WAIT_S = 5.0
# ... and, after the endpoint dropped a connection before its handshake, for
# ZeroMQ's redial (reconnect_ivl 100 ms) and its outcome
HANDSHAKE_REDIAL_WAIT_S = 1.0
# A non-watched link's endpoint refusing connections this long fails the
# requests waiting on it (a restart of a loaded node takes a few seconds;
# a request sent meanwhile is answered once it is back).
PEER_DOWN_GRACE_S = 3.0
# A SASL login's each answer (a server that is gone is seen sooner, above).
LOGIN_TIMEOUT_S = 15.0
PROBE_EVERY_S = 1.0
_WAIT_SLICE_MS = 250
_HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                     zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_HANDSHAKE_EVENTS = (zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED
                     | zmq.EVENT_HANDSHAKE_SUCCEEDED | sum(_HANDSHAKE_FAILED))


class KafkaTimeoutError(errors.RequestTimedOutError):
    """No answer within the timeout (the server may be down or unreachable)."""


class PeerLostError(KafkaTimeoutError):
    """The broker process behind the link is gone: its port refuses
    connections (or, on a watched link, the connection dropped), so the
    answer will not come and the wait ends before its timeout."""


class AuthenticationRefusedError(errors.SaslAuthenticationFailedError):
    """The server refused this client's ZeroMQ security handshake (CURVE)."""


class ClientContext(zmq.Context):
    """A client's ZeroMQ context: its Connections use its CURVE keys,
    (server key, public key, secret key) or None, and log in with its SASL
    ``login``, (mechanism, user, password) or None."""

    curve: tuple[bytes, bytes, bytes] | None = None
    login: tuple[str, str, str] | None = None

    def __del__(self, _finalizing=sys.is_finalizing, _thread=threading.Thread):
        """A client dropped without close(): pyzmq's own __del__ would
        destroy the context in whatever thread the garbage collector runs,
        and a context whose I/O thread is stuck (an open socket, a monitor
        whose reader closed first: _monitor_socket) blocks that thread for
        good -- a producer's writer in the middle of produce(). Ended on a
        daemon thread instead.

        Not while the interpreter finalizes (a client left open when a
        script ends, collected with its module's globals, which may be None
        by then: hence the default arguments): a thread started then never
        runs, and Thread.start() would wait for it for ever. The process is
        ending; its ZeroMQ I/O threads end with it."""
        if self.closed or _finalizing():
            return
        try:
            _thread(target=self.destroy, kwargs={"linger": 0}, name="client-ctx-gc",
                    daemon=True).start()
        except RuntimeError:
            pass    # can't create new thread at interpreter shutdown (3.12 and later)

    def term_within(self, owner: str, timeout: float | None = None) -> bool:
        """Terminate the context once its owner closed its sockets, waiting
        at most ``timeout``: a close must never hang its caller. A socket
        left open (a bug) would make term() wait for ever; then the context
        is left to a daemon thread, and the open sockets are logged, so the
        leak can be found. Returns whether the context ended."""
        timeout = TERM_WAIT_S if timeout is None else timeout
        done = threading.Event()

        def term():
            self.term()
            done.set()
        threading.Thread(target=term, name=f"{owner}-term", daemon=True).start()
        if done.wait(timeout):
            return True
        open_sockets = []
        for ref in list(getattr(self, "_sockets", ())):
            sock = ref() if callable(ref) else ref
            if sock is not None and not sock.closed:
                try:
                    where = sock.getsockopt(zmq.LAST_ENDPOINT).decode() or "(not connected)"
                except zmq.ZMQError:
                    where = "?"
                open_sockets.append(f"{zmq.SocketType(sock.type).name} {where}")
        log.error("%s: its ZeroMQ context did not end within %.0f s; sockets still open: %s",
                  owner, timeout, ", ".join(open_sockets) or "none (an I/O thread is stuck)")
        return False


def client_context(config: dict) -> zmq.Context:
    """The ZeroMQ context of a client with ``config`` (config.py's names);
    ValueError naming a key that cannot be used."""
    ctx = ClientContext()
    names = ("curve.server.key", "curve.public.key", "curve.secret.key")
    given = [config.get(n) for n in names]
    try:
        ctx.login = _sasl_login(config)
    except ValueError:
        ctx.term()
        raise
    if ctx.login is not None and not given[0]:
        ctx.term()
        raise ValueError(f"security.protocol {config['security.protocol']} on the native "
                         f"protocol needs curve.server.key (the server's public key, Z85 or its "
                         f".key file): the login goes over CURVE, encrypted to the server")
    if not any(given):
        return ctx
    if not given[0]:
        ctx.term()
        raise ValueError("curve.server.key is required with curve.public.key/curve.secret.key "
                         "(the server's public key, Z85 or its .key file)")
    try:
        server = curve.load_key(given[0])
        if given[2]:
            secret = curve.load_key(given[2], secret=True)
            public = curve.load_key(given[1]) if given[1] else zmq.curve_public(secret)
        elif given[1]:
            raise curve.CurveKeyError("curve.public.key needs curve.secret.key (this client's "
                                      "key pair: its .key_secret file, or the Z85 secret key)")
        else:   # no key of our own: a throwaway one, which the server refuses unless its
            public, secret = zmq.curve_keypair()    # authorized keys are meant for anyone
    except curve.CurveKeyError as exc:
        ctx.term()
        raise ValueError(str(exc)) from None
    ctx.curve = (server, public, secret)
    return ctx


SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", *SASL_PROTOCOLS)


def _sasl_login(config: dict) -> tuple[str, str, str] | None:
    """(mechanism, user, password) when ``security.protocol`` asks for a
    SASL login, else None; ValueError naming a setting that cannot work."""
    protocol = str(config.get("security.protocol") or "PLAINTEXT").upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(f"security.protocol {protocol!r}: one of {', '.join(SECURITY_PROTOCOLS)}")
    if protocol not in SASL_PROTOCOLS:
        return None
    try:
        mechanism = sasl_mechanism(config)
    except errors.InvalidConfigurationError as exc:
        raise ValueError(exc.message) from None
    user, password = config.get("sasl.username"), config.get("sasl.password")
    if not user or not password:
        raise ValueError(f"security.protocol {protocol} needs sasl.username and sasl.password")
    return mechanism, user, password


def parse_bootstrap(servers: str) -> list[str]:
    """'host:port,host2:port' -> ZeroMQ endpoints; ValueError for anything else."""
    if not isinstance(servers, str) or not servers.strip():
        raise ValueError("bootstrap.servers must be 'host:port' (comma-separated for several)")
    out = []
    for item in servers.split(","):
        item = item.strip()
        if item.startswith("tcp://"):
            item = item[len("tcp://"):]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap.servers entry {item!r} is not host:port")
        out.append(f"tcp://{host}:{int(port)}")
    return out


def endpoint_host_port(endpoint: str) -> tuple[str, int]:
    """(host, port) of a ZeroMQ endpoint "tcp://host:port" (an IPv6 host
    without its brackets); ValueError for a port that is not a number."""
    host, _, port = endpoint.rpartition("/")[2].rpartition(":")
    return host.strip("[]"), int(port)


_monitor_ids = itertools.count()


def _monitor_socket(sock: zmq.Socket, events: int) -> zmq.Socket:
    """The socket ``sock``'s events arrive on. Unlike pyzmq's
    get_monitor_socket, its queue has no high-water mark: libzmq sends an
    event from the context's I/O thread with a blocking send, so a full
    queue (a socket retrying a dead endpoint makes ten events a second,
    read only when its owner asks alive()) would block that thread, and
    every socket of the context with it, for good. Unread events cost a
    few dozen bytes each, and stop once the link is seen dead."""
    addr = f"inproc://kafkalite.monitor.{os.getpid()}.{next(_monitor_ids)}"
    sock.monitor(addr, events)
    monitor = sock.context.socket(zmq.PAIR)
    monitor.setsockopt(zmq.LINGER, 0)
    monitor.setsockopt(zmq.RCVHWM, 0)     # the pipe's limit is 0 (none) when either end's is
    monitor.connect(addr)
    return monitor


class Connection(Link):
    def __init__(self, endpoint: str, client_id: str = "kafkalite", ctx: zmq.Context | None = None,
                 *, watch: bool = False, max_in_flight: int | None = None):
        self.endpoint = endpoint
        self.client_id = client_id
        self.sock = (ctx or zmq.Context.instance()).socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        # A dead broker process shows up as a disconnect at once, not after
        # a request timeout; so does one that was never there: a connect
        # refused (nothing listens: its process died before we connected,
        # as after a failover whose metadata we had not seen yet) or not
        # answered within CONNECT_TIMEOUT_MS (its host is gone).
        self._monitor = None
        self._monitor_stopped = False
        self._watch = watch
        keys = getattr(ctx, "curve", None)
        if keys is not None:
            curve.secure_client(self.sock, *keys)
        if watch:
            self.sock.setsockopt(zmq.CONNECT_TIMEOUT, CONNECT_TIMEOUT_MS)
        self._monitor = _monitor_socket(self.sock, _HANDSHAKE_EVENTS)
        self._alive = True
        self._connected = False
        # without keys, a server on this host with security on is reached by
        # its local door, as the user this process runs as (local_socket.py)
        self.door = local_socket.native_door(endpoint) if keys is None else None
        self.sock.connect(self.door or endpoint)
        if not watch:
            try:
                self._check_handshake(keys is not None)
            except BaseException:
                self.close()
                raise
            self._stop_monitor()
            self._monitor.close(0)
            self._monitor = None
        self.max_in_flight = max_in_flight
        self._ids = itertools.count(1)
        self._outstanding: dict[int, tuple[int, int]] = {}
        self._stash: dict[int, object] = {}
        self._login = login = getattr(ctx, "login", None)
        if login is not None:
            try:
                self._log_in(*login)
            except BaseException:
                self.close()
                raise

    def _logged_in_again(self, result) -> bool:
        """Whether ``result`` said this link's key has no session where it
        logged in -- the process behind the endpoint restarted on the same
        address, and ZeroMQ reconnected to it unseen -- and the link has
        logged in again (the request is then sent once more)."""
        if self._login is None or not isinstance(result, errors.SaslAuthenticationFailedError) \
                or curve.LOGIN_NEEDED not in result.message:
            return False
        self._log_in(*self._login)
        return True

    def _log_in(self, mechanism: str, user: str, password: str) -> None:
        """The SASL login of this link (server/auth/native_login.py), before any
        other request goes out on it."""
        sasl_login(lambda api, version, body: self.request(api, body, LOGIN_TIMEOUT_S, version),
                   mechanism, user, password, self.endpoint,
                   SUPPORTED_VERSIONS[ApiKey.SASL_AUTHENTICATE][1])

    def send(self, api_key: int, body: dict, *, expect_response: bool = True,
             version: int | None = None) -> int:
        """Send a request; returns its correlation id."""
        version = VERSIONS[api_key] if version is None else version
        correlation_id = next(self._ids) & 0x7FFFFFFF
        records: list = []
        frame = encode_request(api_key, version, correlation_id, self.client_id, body,
                               records_out=records)
        self._send_frames([frame, *records])
        if expect_response:
            self._outstanding[correlation_id] = (api_key, version)
        return correlation_id

    def _send_frames(self, frames: list) -> None:
        """Queue ``frames`` for the peer, never blocking: with no send limit
        (SNDHWM 0) ZeroMQ refuses a send only when the socket has no pipe to
        the peer at all, which is what a peer that refused the ZMTP handshake
        leaves (a socket of another type, as the ingest gateway's PULL:
        ZeroMQ drops the connection, retries it and blocks a send for ever)."""
        try:
            self.sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
        except zmq.Again:
            raise errors.NetworkError(f"cannot send: {self._not_native_port()}") from None

    def send_extension(self, body: dict) -> int:
        correlation_id = next(self._ids) & 0x7FFFFFFF
        self._send_frames([native.encode_extension_request(correlation_id, body)])
        self._outstanding[correlation_id] = (native.EXTENSION_API_KEY, 0)
        return correlation_id

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    def recv(self, timeout_ms: int = 0):
        """The next response as (correlation id, body or KafkaError), or None."""
        if self._stash:
            cid = next(iter(self._stash))
            return cid, self._stash.pop(cid)
        return self._recv_socket(timeout_ms)

    def _recv_socket(self, timeout_ms: int):
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart(copy=False)
        first = frames[0].bytes if len(frames[0]) <= 1 else None
        if first == native.ERROR_FRAME:
            cid, code, message = native.decode_error(frames[1].bytes)
            self._outstanding.pop(cid, None)
            return cid, error_for_code(code)(message or f"server error {code}")
        (cid,) = _CORRELATION.unpack_from(frames[0].buffer)
        api_key, version = self._outstanding.pop(cid, (None, None))
        if api_key is None:
            return cid, errors.UnknownServerError(f"unexpected response {cid}")
        if api_key == native.EXTENSION_API_KEY:
            return cid, native.decode_extension_response(frames[0].bytes)[1]
        _, body = decode_response(api_key, version, frames[0].buffer,
                                  records_in=[f.buffer for f in frames[1:]])
        return cid, body

    def wait_for(self, correlation_id: int, timeout: float):
        """The response to ``correlation_id`` (others are kept for recv)."""
        started = time.monotonic()
        deadline = started + timeout
        probe_at, refused_since = started + PROBE_EVERY_S, None
        while True:
            if correlation_id in self._stash:
                return self._stash.pop(correlation_id)
            now = time.monotonic()
            remaining = deadline - now
            if remaining <= 0:
                self._outstanding.pop(correlation_id, None)
                raise KafkaTimeoutError(f"no response from {self.endpoint} within {timeout:.1f} s "
                                        f"(is the server running?)")
            if self._watch and not self.alive():
                self._outstanding.pop(correlation_id, None)
                raise PeerLostError(f"no response from {self.endpoint}: its process went away")
            if not self._watch and now >= probe_at:
                probe_at = now + PROBE_EVERY_S
                if self._refuses():
                    refused_since = refused_since or now
                    if now - refused_since >= PEER_DOWN_GRACE_S - PROBE_EVERY_S / 2:
                        self._outstanding.pop(correlation_id, None)
                        raise PeerLostError(
                            f"no response from {self.endpoint}: it has refused connections "
                            f"for {now - refused_since + PROBE_EVERY_S:.0f} s (is the "
                            f"server running?)")
                else:
                    refused_since = None
            # from the socket: what recv() would give first may be stashed already
            got = self._recv_socket(min(int(remaining * 1000) + 1, _WAIT_SLICE_MS))
            if got is None:
                continue
            cid, body = got
            if cid == correlation_id:
                return body
            self._stash[cid] = body

    def request(self, api_key: int, body: dict, timeout: float = 30.0, version: int | None = None):
        """Send and wait; raises the KafkaError of an error reply."""
        result = self.wait_for(self.send(api_key, body, version=version), timeout)
        if self._logged_in_again(result):
            result = self.wait_for(self.send(api_key, body, version=version), timeout)
        if isinstance(result, KafkaError):
            raise result
        return result

    def extension(self, body: dict, timeout: float = 30.0) -> dict:
        result = self.wait_for(self.send_extension(body), timeout)
        if isinstance(result, dict) and result.get("error_code") and self._logged_in_again(
                error_for_code(result["error_code"])(result.get("message", ""))):
            result = self.wait_for(self.send_extension(body), timeout)
        if isinstance(result, KafkaError):
            raise result
        if result.get("error_code"):
            raise error_for_code(result["error_code"])(result.get("message", ""))
        return result

    # ---- Link --------------------------------------------------------------------------------

    def ready(self) -> bool:
        # POLLOUT: a socket with no pipe to its peer (see _send_frames) takes nothing
        return ((self.max_in_flight is None or len(self._outstanding) < self.max_in_flight)
                and not self.sock.closed and bool(self.sock.get(zmq.EVENTS) & zmq.POLLOUT))

    def receive(self) -> list:
        out = list(self._stash.items())
        self._stash.clear()
        while True:
            got = self._recv_socket(0)
            if got is None:
                return out
            out.append(got)

    def register(self, poller: zmq.Poller) -> None:
        poller.register(self.sock, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)

    def unregister(self, poller: zmq.Poller) -> None:
        poller.unregister(self.sock)
        if self._monitor is not None:
            poller.unregister(self._monitor)

    def arm(self) -> bool:
        # an answer read while waiting for another is not signalled again
        return not self._stash

    def alive(self) -> bool:
        monitor = self._monitor
        while self._alive and monitor is not None and monitor.poll(0):
            # imported here, where an event came: zmq.utils.monitor imports
            # asyncio (tens of ms at every client's start, the ingest gateway's)
            from zmq.utils.monitor import recv_monitor_message
            event = recv_monitor_message(monitor)["event"]
            if event == zmq.EVENT_CONNECTED:
                self._connected = True
            elif event in _HANDSHAKE_FAILED or event == zmq.EVENT_DISCONNECTED or (
                    event == zmq.EVENT_CONNECT_RETRIED and not self._connected):
                self._alive = False
                # dead for good: nobody reads its events from now on, so
                # they must stop (see _stop_monitor)
                self._stop_monitor()
        return self._alive

    def _refuses(self) -> bool:
        """Whether the endpoint's port refuses a TCP connection now (nothing
        listens: its process is gone). A connect that is not answered in a
        short while says nothing (a loaded server, or a host far away)."""
        try:
            socket.create_connection(endpoint_host_port(self.endpoint), timeout=0.5).close()
        except ConnectionRefusedError:
            return True
        except (OSError, ValueError):
            return False
        return False

    def _check_handshake(self, with_curve: bool) -> None:
        """Raise AuthenticationRefusedError when the server refuses the
        handshake, NetworkError when the endpoint is not a native port (it
        drops the ZMTP handshake of a client without CURVE, and then ZeroMQ
        does not redial it, or the redial is dropped too; a server going
        away is redialled and refused); return once it succeeded, or when
        no TCP connection came within HANDSHAKE_CONNECT_WAIT_S (a server not
        up yet: not ours to judge here)."""
        deadline = time.monotonic() + HANDSHAKE_CONNECT_WAIT_S
        dropped = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._monitor.poll(int(remaining * 1000) + 1):
                if dropped is True:     # not even redialled: ZeroMQ gave the peer up
                    raise self._dropped_without_keys()
                return
            from zmq.utils.monitor import recv_monitor_message   # lazily: see alive()
            event = recv_monitor_message(self._monitor)["event"]
            if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._connected = True
                return
            if event == zmq.EVENT_CONNECTED:
                self._connected = True
                deadline = time.monotonic() + HANDSHAKE_WAIT_S
            elif event == zmq.EVENT_CONNECT_RETRIED and not self._connected:
                if not dropped:
                    return              # refused: alive() sees the next retry
                dropped = None          # the redial after the drop; refused next time
            elif event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and not with_curve:
                raise self._dropped_without_keys()
            elif event in _HANDSHAKE_FAILED:
                raise AuthenticationRefusedError(self._refusal(event, with_curve))
            elif event == zmq.EVENT_DISCONNECTED:
                if with_curve:          # a CURVE server drops a HELLO it cannot decrypt
                    raise AuthenticationRefusedError(self._refusal(event, with_curve))
                if dropped is not False:
                    raise self._dropped_without_keys()
                # the server went away (alive() will say so), or the endpoint
                # is a socket a DEALER cannot talk to: a redial tells which
                dropped = True
                self._connected = False
                deadline = time.monotonic() + HANDSHAKE_REDIAL_WAIT_S

    def _dropped_without_keys(self) -> KafkaError:
        """What a handshake of a client without CURVE keys that the peer
        dropped means. A native port that requires CURVE drops it too, and
        whether libzmq reports that as a mechanism mismatch or, when the
        server's close comes first, as a failure with no detail (or a drop)
        is a race: the peer's own greeting, read over a plain socket, names
        its mechanism and tells the two apart."""
        if self.door is None and self._peer_mechanism() == "CURVE":
            return AuthenticationRefusedError(
                self._refusal(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, False))
        return errors.NetworkError(self._not_native_port())

    def _peer_mechanism(self) -> str | None:
        """The security mechanism the endpoint's ZMTP greeting names, or None
        (no answer within a short while, or not ZMTP 3)."""
        try:
            with socket.create_connection(endpoint_host_port(self.endpoint), timeout=0.5) as s:
                s.sendall(native.GREETING_START)
                greeting = b""
                while len(greeting) < native.ZMTP_GREETING_SIZE:
                    chunk = s.recv(native.ZMTP_GREETING_SIZE - len(greeting))
                    if not chunk:
                        break
                    greeting += chunk
        except (OSError, ValueError):
            return None
        return native.zmtp_mechanism(greeting)

    def _not_native_port(self) -> str:
        return (f"{self.endpoint} closes every ZeroMQ handshake of this client: it is not a "
                f"kafkalite native port (the ingest gateway? give the port `kafkalite server` "
                f"prints as bootstrap.servers)")

    def _refusal(self, event: int, with_curve: bool) -> str:
        where = f"the server at {self.endpoint} refused this client's"
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return f"{where} CURVE key (curve.public.key is not among its authorized keys)"
        if not with_curve:
            return (f"{where} connection: it requires CURVE (set curve.server.key, "
                    f"curve.public.key and curve.secret.key)")
        if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            return f"{where} CURVE handshake: the server does not speak CURVE"
        return (f"{where} CURVE handshake: it closed the connection (is curve.server.key "
                f"the server's public key?)")

    def _stop_monitor(self) -> None:
        """Stop the socket's events (the monitor socket stays open, and
        registered where it was, until close()).

        Needed before the monitor's reader closes: an event sent to a closed
        reader blocks the context's I/O thread for good (_monitor_socket
        says why); and once the link is dead, so that unread events do not
        pile up while its owner gets round to closing it. disable_monitor()
        takes the lock the sender holds, so no event is sent once it
        returns."""
        if self._monitor is not None and not self._monitor_stopped:
            self._monitor_stopped = True
            try:
                self.sock.disable_monitor()
            except zmq.ZMQError:
                pass                     # the socket is closed already
            while self._monitor.poll(0):  # what came before: nobody will read it
                self._monitor.recv_multipart()

    def close(self, linger_ms: int = 0) -> None:
        """Close; with ``linger_ms``, requests ZeroMQ has not sent yet still go
        out for that long (acks=0 producers have nothing else to wait on)."""
        self._stop_monitor()
        if self._monitor is not None:
            self._monitor.close(0)
        self.sock.close(linger_ms)
