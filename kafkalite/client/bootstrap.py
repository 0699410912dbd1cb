"""Finding the native endpoint behind a ``bootstrap.servers`` address.

A user may give a kafkalite server's native port (7092) or one of its Kafka
listeners (9092, what a Kafka user types). Neither a Kafka port nor a port
nobody listens on may be handed to ZeroMQ: it retries its handshake there
ten times a second, for ever and silently, so the user saw only a request
timing out (10-30 s later) and the server logged each attempt. So before
``Metadata`` links to a bootstrap address, ``native_endpoint`` probes it
over a plain TCP socket:

- connection refused or unreachable, or no answer to the connect within
  ``CONNECT_TIMEOUT_MS`` (connection.py's, 3 s: a host that is gone answers
  nothing): ``BootstrapError`` naming the address (a refusal at once);
- the peer sends the ZMTP signature (a ZeroMQ ROUTER greets as soon as a
  connection opens, so it arrives within ``GREETING_WAIT_S``): the native
  port, used as given;
- silence: a Kafka broker says nothing until asked. It is asked, in Kafka's
  protocol, DescribeConfigs of a BROKER resource for
  ``NATIVE_BOOTSTRAP_CONFIG`` (protocol/native.py), and the native address
  it names is probed in turn. A greeting later than GREETING_WAIT_S still
  tells itself apart: its first byte, 0xFF, never begins a Kafka response's
  size (the native port takes the question for a bad handshake and drops
  that connection, which is closed anyway).

The probe's socket is closed before ZeroMQ connects. What a Kafka address
resolved to is remembered for the process (a producer makes several
metadata links to one bootstrap address, and each Kafka probe waits out
GREETING_WAIT_S), and forgotten when that native address stops answering.

Who may call: any thread (the cache is one dict; a race resolves twice,
harmlessly).
"""
from __future__ import annotations

import socket
import struct

from kafkalite import errors
from kafkalite.client.connection import CONNECT_TIMEOUT_MS
from kafkalite.protocol import ApiKey, ProtocolError, decode_response, encode_request
from kafkalite.protocol.enums import ConfigResourceType
from kafkalite.protocol.native import NATIVE_BOOTSTRAP_CONFIG, ZMTP_SIGNATURE_SIZE, zmtp_signature

# How long a native port's greeting may take before the peer is taken for
# a Kafka broker and asked (a loaded loopback greets within milliseconds).
GREETING_WAIT_S = 0.2
# A DescribeConfigs answer naming one config is a few dozen bytes.
MAX_ANSWER_BYTES = 1 << 20
_DESCRIBE_CONFIGS_VERSION = 4
_size = struct.Struct(">i")
_resolved: dict[str, str] = {}


class BootstrapError(errors.NetworkError):
    """No kafkalite server answers at a bootstrap address (nothing listens,
    the host is unreachable, or the peer speaks neither of its protocols)."""


def native_endpoint(endpoint: str, timeout: float, client_id: str = "kafkalite") -> str:
    """The native ZeroMQ endpoint to use for ``endpoint`` ("tcp://host:port",
    a native port or a Kafka listener); BootstrapError when nothing there
    answers as a kafkalite server would."""
    known = _resolved.get(endpoint)
    if known is not None:
        try:
            _probe(known, timeout, client_id, native_only=True)
            return known
        except BootstrapError:
            _resolved.pop(endpoint, None)
    named = _probe(endpoint, timeout, client_id)
    if named is None:
        return endpoint
    try:
        _probe(named, timeout, client_id, native_only=True)
    except BootstrapError as exc:
        raise BootstrapError(f"{_address(endpoint)} is a Kafka listener whose server names "
                             f"its native port {_address(named)}, but: {exc.message}") from None
    _resolved[endpoint] = named
    return named


def _address(endpoint: str) -> str:
    return endpoint[len("tcp://"):] if endpoint.startswith("tcp://") else endpoint


def _probe(endpoint: str, timeout: float, client_id: str, native_only: bool = False) -> str | None:
    """None for a native port; the native endpoint a Kafka listener names."""
    address = _address(endpoint)
    host, _, port = address.rpartition(":")
    timeout = max(timeout, 0.1)         # 0 would make the socket non-blocking
    connect_timeout = min(timeout, CONNECT_TIMEOUT_MS / 1000)
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=connect_timeout)
    except socket.timeout:
        raise BootstrapError(f"cannot connect to {address}: no answer within "
                             f"{connect_timeout:.1f} s (is the host up?)") from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise BootstrapError(f"cannot connect to {address}: {reason.lower()} "
                             f"(is the server running?)") from None
    try:
        with sock:
            first = _greeting(sock, timeout if native_only else GREETING_WAIT_S, address)
            if first is not None:
                if zmtp_signature(first):
                    return None
                raise BootstrapError(f"{address} answered with bytes that are neither ZeroMQ "
                                     f"nor Kafka; is it a kafkalite server?")
            if native_only:
                raise BootstrapError(f"{address} does not speak kafkalite's native protocol "
                                     f"(no ZeroMQ greeting within {timeout:.1f} s)")
            try:
                return _ask_kafka(sock, address, timeout, client_id)
            except (ConnectionResetError, BrokenPipeError):
                # A native port whose greeting came after the question (a
                # loaded host): libzmq takes the Kafka bytes for a bad
                # greeting and resets the connection, and the reset drops
                # the greeting that was on its way. Ask again, waiting for it.
                pass
        return _probe(endpoint, timeout, client_id, native_only=True)
    except socket.timeout:
        raise BootstrapError(f"{address} accepted the connection but answered nothing "
                             f"within {timeout:.1f} s") from None
    except OSError as exc:
        raise BootstrapError(f"{address}: {exc.strerror or exc}") from None


def _greeting(sock: socket.socket, wait: float, address: str) -> bytes | None:
    """The first bytes the peer sends unasked, up to a ZMTP signature's
    worth (None: it sent nothing within ``wait``)."""
    sock.settimeout(wait)
    got = b""
    try:
        while not got or zmtp_signature(got) is None:
            chunk = sock.recv(ZMTP_SIGNATURE_SIZE - len(got))
            if not chunk:
                raise BootstrapError(f"{address} closed the connection at once")
            got += chunk
    except socket.timeout:
        if not got:
            return None
    return got


def _ask_kafka(sock: socket.socket, address: str, timeout: float, client_id: str) -> str | None:
    """Ask a silent peer, in Kafka's protocol, for the native bootstrap address."""
    frame = encode_request(ApiKey.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION, 1, client_id, {
        "resources": [{"resource_type": ConfigResourceType.BROKER, "resource_name": "",
                       "configuration_keys": [NATIVE_BOOTSTRAP_CONFIG]}],
        "include_synonyms": False, "include_documentation": False})
    sock.settimeout(timeout)
    sock.sendall(_size.pack(len(frame)) + frame)
    head = _recv_exactly(sock, 4, address)
    if zmtp_signature(head) is not False:
        return None                     # a native port whose greeting came late
    if head == b"HTTP":
        raise BootstrapError(f"{address} is an HTTP port (it answered the Kafka question "
                             f"with HTTP); give the native port, which `kafkalite server` "
                             f"prints as bootstrap.servers")
    size, = _size.unpack(head)
    if not 0 < size <= MAX_ANSWER_BYTES:
        raise BootstrapError(f"{address} answered with bytes that are neither ZeroMQ nor Kafka")
    try:
        _, body = decode_response(ApiKey.DESCRIBE_CONFIGS, _DESCRIBE_CONFIGS_VERSION,
                                  _recv_exactly(sock, size, address))
    except ProtocolError as exc:
        raise BootstrapError(f"{address} answered DescribeConfigs with bytes that do not "
                             f"decode: {exc}") from None
    for result in body["results"]:
        for entry in result["configs"]:
            if entry["name"] == NATIVE_BOOTSTRAP_CONFIG and entry["value"]:
                return "tcp://" + entry["value"]
    raise BootstrapError(f"{address} speaks Kafka's protocol but names no kafkalite native "
                         f"port ({NATIVE_BOOTSTRAP_CONFIG}); kafkalite's clients need a "
                         f"kafkalite server (for other Kafka brokers use a Kafka client)")


def _recv_exactly(sock: socket.socket, n: int, address: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BootstrapError(f"{address} closed the connection without answering (a TLS "
                                 f"or SASL listener? give the native port, which `kafkalite "
                                 f"server` prints as bootstrap.servers)")
        buf += chunk
    return bytes(buf)
