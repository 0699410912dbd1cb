"""A blocking client of one broker that speaks Kafka's protocol over TCP
(``BlockingKafkaClient``), for the few callers that must send Kafka
requests themselves rather than through confluent-kafka:

- the Connect group's membership over Kafka's protocol
  (connect/kafka_group.py: confluent-kafka cannot join a group of protocol
  type ``connect``);
- the Connect REST API's login check (connect/rest_login.py: a SASL login
  with a request's credentials, then the connection is closed);
- ``kafkalite users --bootstrap-server`` (cli/users.py: librdkafka
  mishandles one of the SCRAM answers).

client/connection.py takes its SASL exchange (``sasl_login``,
``sasl_mechanism``) for the native protocol's logins.

Why blocking, and outside the client's ``Link`` seam (link.py): a Link is
for a client's hot path, many requests in flight, answers collected by a
poll loop on the owner's thread (the producer's sender, the consumer).
These callers send one request at a time and wait for its answer on
their own thread (the Connect herder's membership thread, a REST request's
thread, a command), so a socket they block on, with a timeout per
request, is all they need. (Not the server's KafkaConnection,
server/network/kafka_listener.py: that is a broker's end of a client's
connection.)

``BlockingKafkaClient(host, port, config, client_id, timeout)`` connects,
wraps TLS and logs in as librdkafka's settings in ``config`` say:

- ``security.protocol``: PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL;
- TLS: ``ssl.ca.location``, ``ssl.certificate.location``,
  ``ssl.key.location``, ``ssl.key.password``,
  ``ssl.endpoint.identification.algorithm`` (``none``: no host check);
- SASL: ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``) PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512 (the ``scramp`` library's client, the
  server's signature checked), ``sasl.username``, ``sasl.password``.

It asks ApiVersions first (KIP-511; v0 when the broker refuses v3), so
``request`` sends each API in the highest version both sides know.
Requests and responses are framed as Kafka's clients frame them (a 4-byte
size, then the header and body) and encoded by kafkalite.protocol.

Errors: a settings problem is InvalidConfigurationError, a refused login
SaslAuthenticationFailedError (or UnsupportedSaslMechanismError), a broker
with no common version of an API UnsupportedVersionError, all with a
message naming the broker; a broken or closed connection is
ConnectionError (OSError), which callers retry or report.

Who may call: one thread per connection (no locking).
"""
from __future__ import annotations

import socket
import ssl
import struct

from kafkalite import errors
from kafkalite.errors import InvalidConfigurationError
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, decode_response, encode_request

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# an answer to these requests is small; a bigger size prefix is a peer
# speaking something else (a TLS listener answering plaintext, say)
_MAX_RESPONSE = 64 << 20
_size = struct.Struct(">i")


def parse_servers(bootstrap: str) -> list[tuple[str, int]]:
    """[(host, port)] of a Kafka ``bootstrap.servers`` ("host:port,...", an
    optional ``PLAINTEXT://``-style prefix each)."""
    out = []
    for item in str(bootstrap).split(","):
        item = item.strip()
        if "://" in item:
            item = item.split("://", 1)[1]
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidConfigurationError(f"bootstrap.servers {bootstrap!r}: host:port expected")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise InvalidConfigurationError("bootstrap.servers is empty")
    return out


def tls_context(config: dict) -> ssl.SSLContext:
    """The client TLS context of librdkafka's ``ssl.*`` settings."""
    ctx = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if config.get("ssl.certificate.location"):
        ctx.load_cert_chain(config["ssl.certificate.location"],
                            config.get("ssl.key.location") or None,
                            config.get("ssl.key.password") or None)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    return ctx


def sasl_mechanism(config: dict) -> str:
    """``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``; GSSAPI when
    unset, as librdkafka's default) upper-cased; InvalidConfigurationError
    for one this client cannot speak."""
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms")
                    or "GSSAPI").upper()
    if mechanism not in MECHANISMS:
        raise InvalidConfigurationError(
            f"sasl.mechanism {mechanism}: this client supports {', '.join(MECHANISMS)}")
    return mechanism


def sasl_login(send, mechanism: str, user: str, password: str, where: str,
               authenticate_version: int) -> None:
    """A client's SASL login, SaslHandshake v1 then SaslAuthenticate in
    ``authenticate_version``, over any link: ``send(api, version, body)``
    returns the answer's body. This module's connections use it, and so do
    the native protocol's (client/connection.py). Raises
    UnsupportedSaslMechanismError or SaslAuthenticationFailedError naming
    ``where`` and the server's message."""
    hs = send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})
    if hs["error_code"]:
        raise errors.UnsupportedSaslMechanismError(
            f"{where}: SASL mechanism {mechanism} refused "
            f"(enabled: {', '.join(hs.get('mechanisms') or [])})")

    def exchange(token: bytes) -> bytes:
        auth = send(ApiKey.SASL_AUTHENTICATE, authenticate_version, {"auth_bytes": token})
        if auth["error_code"]:
            raise errors.SaslAuthenticationFailedError(
                f"{where}: SASL authentication failed for {user!r}: "
                f"{auth.get('error_message')}")
        return bytes(auth.get("auth_bytes") or b"")
    if mechanism == "PLAIN":
        exchange(b"\0" + user.encode() + b"\0" + password.encode())
        return
    import scramp
    client = scramp.ScramClient([mechanism], user, password)
    client.set_server_first(exchange(client.get_client_first().encode()).decode())
    try:
        client.set_server_final(exchange(client.get_client_final().encode()).decode())
    except scramp.ScramException as exc:
        raise errors.SaslAuthenticationFailedError(f"{where}: SCRAM: {exc}") from None


class BlockingKafkaClient:
    """One blocking Kafka-protocol connection to a broker (ApiVersions
    asked, TLS and SASL done)."""

    def __init__(self, host: str, port: int, config: dict, client_id: str, timeout: float):
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.correlation = 0
        security = str(config.get("security.protocol", "PLAINTEXT")).upper()
        if security not in SECURITY_PROTOCOLS:
            raise InvalidConfigurationError(
                f"security.protocol {security!r}: one of {', '.join(SECURITY_PROTOCOLS)}")
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if security in ("SSL", "SASL_SSL"):
                sock = tls_context(config).wrap_socket(sock, server_hostname=host)
            self.sock = sock
            self.versions = self._api_versions(timeout)
            if security.startswith("SASL_"):
                self._authenticate(config, timeout)
        except BaseException:
            sock.close()
            raise

    def _api_versions(self, timeout: float) -> dict[int, tuple[int, int]]:
        body = self.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "kafkalite",
                                                  "client_software_version": "1"}, timeout)
        if body["error_code"]:
            # KIP-511: a broker without v3 answers UNSUPPORTED_VERSION with its range (v0)
            body = self.send(ApiKey.API_VERSIONS, 0, {}, timeout)
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}

    def version(self, api: ApiKey) -> int:
        """The highest version of ``api`` both sides know."""
        ours, theirs = SUPPORTED_VERSIONS[api], self.versions.get(int(api))
        if theirs is None or theirs[0] > ours[1] or theirs[1] < ours[0]:
            raise errors.UnsupportedVersionError(
                f"{self.address} does not support {api.name} in a version we know "
                f"({ours[0]}-{ours[1]})")
        return min(ours[1], theirs[1])

    def _authenticate(self, config: dict, timeout: float) -> None:
        mechanism = sasl_mechanism(config)
        sasl_login(lambda api, version, body: self.send(api, version, body, timeout),
                   mechanism, str(config.get("sasl.username", "")),
                   str(config.get("sasl.password", "")), self.address,
                   self.version(ApiKey.SASL_AUTHENTICATE))

    def send(self, api: ApiKey, version: int, body: dict, timeout: float) -> dict:
        """``api`` in ``version``; the response body."""
        self.correlation += 1
        frame = encode_request(api, version, self.correlation, self.client_id, body)
        self.sock.settimeout(timeout)
        self.sock.sendall(_size.pack(len(frame)) + frame)
        size, = _size.unpack(self._exact(4))
        if not 0 <= size <= _MAX_RESPONSE:
            raise ConnectionError(f"{self.address}: a response of {size} bytes: not a Kafka "
                                  f"broker, or a listener of another security protocol")
        correlation, response = decode_response(api, version, self._exact(size))
        if correlation != self.correlation:
            raise ConnectionError(f"{self.address}: response {correlation} to request "
                                  f"{self.correlation}")
        return response

    def request(self, api: ApiKey, body: dict, timeout: float) -> dict:
        """``api`` in the highest version both sides know."""
        return self.send(api, self.version(api), body, timeout)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.address} closed the connection (a failed login, "
                                      f"or a listener of another security protocol)")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
