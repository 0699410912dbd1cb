"""The Connect group's coordinator over Kafka's protocol (TCP), for a
worker whose cluster is reached that way (``kafkalite.client.protocol=kafka``,
clients.py).

confluent-kafka's clients cannot join a group of protocol type
``connect``, so ConnectGroup (distributed.py) sends its JoinGroup,
SyncGroup, Heartbeat and LeaveGroup through ``KafkaCoordinatorLink``: a
blocking socket to the group's coordinator, requests and responses
encoded with kafkalite.protocol's codecs, as Kafka's own clients frame
them (a 4-byte size, then the header and body).

- Each connection asks ApiVersions first and uses, for each request, the
  highest version both sides know (ours: kafkalite.protocol's
  SUPPORTED_VERSIONS; a broker that knows none of them is a ConnectException
  naming the request).
- FindCoordinator, asked of the bootstrap brokers in turn, names the
  coordinator; a response NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
  COORDINATOR_LOAD_IN_PROGRESS, or a connection that broke, makes the link
  find the coordinator again and send the request again, until the
  request's timeout.
- ``security.protocol``: PLAINTEXT, SSL (``ssl.ca.location``,
  ``ssl.certificate.location``, ``ssl.key.location``,
  ``ssl.endpoint.identification.algorithm``), SASL_PLAINTEXT and SASL_SSL
  with ``sasl.mechanism`` PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
  (``sasl.username``/``sasl.password``); another mechanism (GSSAPI,
  OAUTHBEARER) is a ConnectException naming the ones supported, not a
  silent fallback.

Who calls: ConnectGroup, from the herder's membership thread (one thread:
no locking).
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import os
import socket
import ssl
import struct
import time

from kafkalite.connect.errors import ConnectException
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, decode_response, encode_request

# error codes that mean: ask FindCoordinator again
_COORDINATOR_MOVED = (14, 15, 16)     # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_RETRY_BACKOFF_S = 0.2
# a group response is small; a bigger size prefix is a peer speaking something else
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
            raise ConnectException(f"bootstrap.servers {bootstrap!r}: host:port expected")
        out.append((host.strip("[]"), int(port)))
    if not out:
        raise ConnectException("bootstrap.servers is empty")
    return out


class _Connection:
    """One Kafka-protocol connection (ApiVersions asked, SASL done)."""

    def __init__(self, host: str, port: int, config: dict, client_id: str, timeout: float):
        self.address = f"{host}:{port}"
        self.client_id = client_id
        self.correlation = 0
        sock = socket.create_connection((host, port), timeout=timeout)
        security = str(config.get("security.protocol", "PLAINTEXT")).upper()
        try:
            if security in ("SSL", "SASL_SSL"):
                sock = _tls_context(config).wrap_socket(sock, server_hostname=host)
            self.sock = sock
            self.versions = self._api_versions(timeout)
            if security.startswith("SASL_"):
                self._authenticate(config, timeout)
        except BaseException:
            sock.close()
            raise

    def _api_versions(self, timeout: float) -> dict[int, tuple[int, int]]:
        body = self.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "kafkalite-connect",
                                                  "client_software_version": "1"}, timeout)
        if body["error_code"]:
            # KIP-511: a broker without v3 answers UNSUPPORTED_VERSION with its range (v0)
            body = self.send(ApiKey.API_VERSIONS, 0, {}, timeout)
        return {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}

    def version(self, api: ApiKey) -> int:
        ours, theirs = SUPPORTED_VERSIONS[api], self.versions.get(int(api))
        if theirs is None or theirs[0] > ours[1] or theirs[1] < ours[0]:
            raise ConnectException(f"{self.address} does not support {api.name} in a version "
                                   f"we know ({ours[0]}-{ours[1]})")
        return min(ours[1], theirs[1])

    def _authenticate(self, config: dict, timeout: float) -> None:
        mechanism = str(config.get("sasl.mechanism",
                                   config.get("sasl.mechanisms", "GSSAPI"))).upper()
        if mechanism not in _MECHANISMS:
            raise ConnectException(f"sasl.mechanism {mechanism}: the Connect group's Kafka "
                                   f"client supports {', '.join(_MECHANISMS)}")
        hs = self.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism}, timeout)
        if hs["error_code"]:
            raise ConnectException(f"{self.address}: SASL mechanism {mechanism} refused "
                                   f"(enabled: {', '.join(hs.get('mechanisms') or [])})")
        user = str(config.get("sasl.username", ""))
        password = str(config.get("sasl.password", ""))
        version = self.version(ApiKey.SASL_AUTHENTICATE)

        def exchange(token: bytes) -> bytes:
            auth = self.send(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": token}, timeout)
            if auth["error_code"]:
                raise ConnectException(f"{self.address}: SASL authentication failed: "
                                       f"{auth.get('error_message')}")
            return bytes(auth.get("auth_bytes") or b"")
        if mechanism == "PLAIN":
            exchange(b"\0" + user.encode() + b"\0" + password.encode())
        else:
            _scram(exchange, mechanism, user, password, self.address)

    def send(self, api: ApiKey, version: int, body: dict, timeout: float) -> dict:
        self.correlation += 1
        frame = encode_request(api, version, self.correlation, self.client_id, body)
        self.sock.settimeout(timeout)
        self.sock.sendall(_size.pack(len(frame)) + frame)
        size, = _size.unpack(self._exact(4))
        if not 0 <= size <= _MAX_RESPONSE:
            raise ConnectionError(f"{self.address}: a response of {size} bytes: not a Kafka "
                                  f"broker")
        correlation, response = decode_response(api, version, self._exact(size))
        if correlation != self.correlation:
            raise ConnectionError(f"{self.address}: response {correlation} to request "
                                  f"{self.correlation}")
        return response

    def request(self, api: ApiKey, body: dict, timeout: float) -> dict:
        return self.send(api, self.version(api), body, timeout)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"{self.address} closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def _scram(exchange, mechanism: str, user: str, password: str, address: str) -> None:
    """RFC 5802's client side (no channel binding, as Kafka's): two
    exchanges, the server's signature checked."""
    algo = "sha256" if mechanism.endswith("256") else "sha512"
    name = user.replace("=", "=3D").replace(",", "=2C")
    nonce = base64.b64encode(os.urandom(24)).decode()
    first_bare = f"n={name},r={nonce}"
    server_first = exchange(("n,," + first_bare).encode()).decode()
    fields = dict(item.split("=", 1) for item in server_first.split(","))
    if not fields.get("r", "").startswith(nonce):
        raise ConnectException(f"{address}: SCRAM: the server's nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    without_proof = f"c={base64.b64encode(b'n,,').decode()},r={fields['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.new(algo, client_key).digest(), auth_message, algo).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature))
    server_final = exchange(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.new(salted, b"Server Key", algo).digest()
    expected = base64.b64encode(hmac.new(server_key, auth_message, algo).digest()).decode()
    if server_final.decode() != f"v={expected}":
        raise ConnectException(f"{address}: SCRAM: the server's signature is wrong")


def _tls_context(config: dict) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=config.get("ssl.ca.location") or None)
    if config.get("ssl.certificate.location"):
        ctx.load_cert_chain(config["ssl.certificate.location"],
                            config.get("ssl.key.location") or None,
                            config.get("ssl.key.password") or None)
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        ctx.check_hostname = False
    return ctx


class KafkaCoordinatorLink:
    """Requests to a group's coordinator over Kafka's protocol:
    ``request(api, body, timeout)`` -> the response body (the version chosen
    per connection), as the native link's."""

    def __init__(self, client_config: dict, group_id: str, client_id: str):
        self.config, self.group_id, self.client_id = client_config, group_id, client_id
        self.servers = parse_servers(client_config["bootstrap.servers"])
        self._conn: _Connection | None = None

    def _find_coordinator(self, timeout: float) -> _Connection:
        errors = []
        for host, port in self.servers:
            try:
                conn = _Connection(host, port, self.config, self.client_id, min(timeout, 10))
            except (OSError, ConnectionError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            try:
                v = conn.version(ApiKey.FIND_COORDINATOR)
                resp = conn.send(ApiKey.FIND_COORDINATOR, v, {
                    "key": self.group_id, "key_type": 0,
                    "coordinator_keys": [self.group_id]}, min(timeout, 10))
            except (OSError, ConnectionError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            finally:
                conn.close()
            node = resp["coordinators"][0] if v >= 4 else resp
            if node["error_code"]:
                errors.append(f"{host}:{port}: FindCoordinator error {node['error_code']}")
                continue
            return _Connection(node["host"], node["port"], self.config, self.client_id,
                               min(timeout, 10))
        raise ConnectionError(f"no coordinator found for group {self.group_id}: "
                              f"{'; '.join(errors)}")

    def request(self, api: ApiKey, body: dict, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._conn is None:
                    self._conn = self._find_coordinator(max(1.0, deadline - time.monotonic()))
                resp = self._conn.request(api, body, max(1.0, deadline - time.monotonic()))
            except (OSError, ConnectionError) as e:
                self.drop()
                if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise ConnectionError(f"{api.name} to the coordinator of "
                                          f"{self.group_id}: {e}") from None
                time.sleep(_RETRY_BACKOFF_S)
                continue
            if resp.get("error_code") in _COORDINATOR_MOVED and \
                    time.monotonic() + _RETRY_BACKOFF_S < deadline:
                self.drop()
                time.sleep(_RETRY_BACKOFF_S)
                continue
            return resp

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self.drop()
