"""Security of the listeners: TLS and SASL on the Kafka listeners, as Kafka
configures them, and CURVE on the native ZeroMQ ports.

``listener_security(config, protocol)`` turns the server settings into a
``ListenerSecurity`` that every broker process (the supervisor and each
worker) gives each of its ``KafkaListener``s; None means PLAINTEXT. The
settings keep Kafka's names:

- each listener's protocol, PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL:
  ``kafka_security_protocol`` for the one listener of a node without
  ``listeners``, else ``listener_security_protocol_map`` (listeners.py);
- ``ssl_certfile``/``ssl_keyfile`` (PEM; Kafka's ``ssl.keystore.*``),
  ``ssl_cafile`` (Kafka's ``ssl.truststore.*``) and ``ssl_client_auth``
  (required, requested, none) for mutual TLS;
- ``sasl_enabled_mechanisms``: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512;
- ``listener_overrides``: per listener name, any of ``LISTENER_SETTINGS``
  in place of the server-wide value (Kafka's ``listener.name.<name>.*``
  prefix), so one listener can ask for client certificates or allow only
  SCRAM while another does not;
- ``sasl_users_file``: the credentials (credentials.py);
- ``connections_max_reauth_ms``: the SASL session lifetime (KIP-368; the
  listener enforces it, kafka_listener.py);
- ``connection_failed_authentication_delay_ms``: how long a connection
  whose login failed stays open after the answer (kafka_listener.py).

``SaslServer`` is one connection's SASL exchange (KIP-43, KIP-152): the
mechanism chosen by SaslHandshake, then the tokens of SaslAuthenticate.
PLAIN is RFC 4616; SCRAM (RFC 5802, RFC 7677) is the ``scramp`` library's
server. A failed exchange raises ``SaslAuthenticationFailedError`` with the
message the client is told; the listener answers it and closes the
connection, as Kafka does.

``native_curve(config)`` is the native protocol's CURVE (protocol/curve.py):
None when ``native_curve_secret_key_file`` is unset (the embedded default),
else a ``CurveServer`` holding the server's key pair. Every broker process
(the supervisor, each worker, the ingest gateway) builds its own from the
same settings, makes its native ROUTER a CURVE server with it, and connects
to the other broker processes (replica fetches, transaction markers,
verification) with the same key pair, which the ZAP handler maps to
``protocol.curve.BROKER_PRINCIPAL``: a super user, so inter-broker APIs pass the
authorizer. Client keys map to the principals of
``native_curve_authorized_keys``. The controller's control channel and
relay (processes.bind_control, relay.py) are CURVE servers with the same
pair but open to the server's own key only (curve.NODE_ZAP_DOMAIN), and
the workers of every node connect to them with it: in a cluster all nodes
hold the same key pair.

Without a key file a single node makes a key pair for the run
(``node_curve``) that its control channel and relay take, always; and
with security on (``security_enabled``: a listener other than PLAINTEXT,
or the authorizer) its native ports and ingest gateway take it too
(``native_security``), so that no door stays open beside authenticated
Kafka listeners. The workers and the gateway read it from a pipe; the
owner's tools from ``<data dir>/owner.key_secret`` (0600,
``write_owner_keys``); with the authorizer on, other local users through
each native port's local door, as ``User:unix:<name>``
(native_listener.py), and at the ingest gateway's, a socket file in a
directory only the server's user can add to, which ``check_local_door_dir``
makes or checks before the server starts (it does not start otherwise). A
cluster without a key file leaves those channels
open, and one that listens beyond loopback says so once at start
(``warn_if_node_channels_open``); with security on it does not start
(``refuse_open_node_channels``).

Who may call: the listener, on its process's one event-loop thread.
"""
from __future__ import annotations

import logging
import os
import ssl
from typing import TYPE_CHECKING

from kafkalite import errors, local_socket
from kafkalite.errors import InvalidConfigurationError
from kafkalite.server.auth.credentials import MECHANISMS, CredentialStore, users_file
from kafkalite.server.listeners import SECURITY_PROTOCOLS, kafka_listeners

if TYPE_CHECKING:
    from kafkalite.protocol import curve

log = logging.getLogger("kafkalite.security")

CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
# The settings a listener may have of its own (``listener_overrides``).
LISTENER_SETTINGS = ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "ssl_client_auth",
                     "sasl_enabled_mechanisms")
_PATHS = ("ssl_certfile", "ssl_keyfile", "ssl_cafile")
# Kafka's message for every credential failure: it does not tell an unknown
# user from a wrong password.
INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"


class ListenerSecurity:
    """What a Kafka listener asks of a connection before serving it."""

    def __init__(self, protocol: str, ssl_context: ssl.SSLContext | None,
                 mechanisms: tuple[str, ...], credentials: CredentialStore | None,
                 reauth_ms: int = 0, failed_auth_delay_ms: int = 100):
        self.protocol = protocol
        self.ssl_context = ssl_context
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.reauth_ms = reauth_ms      # connections.max.reauth.ms; 0: sessions never expire
        # connection.failed.authentication.delay.ms: the close after a failed login waits
        self.failed_auth_delay_ms = failed_auth_delay_ms

    @property
    def sasl(self) -> bool:
        return self.credentials is not None

    def sasl_server(self) -> "SaslServer":
        return SaslServer(self.mechanisms, self.credentials)


def _split(value) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value]


def normalized_overrides(overrides) -> dict:
    """``listener_overrides`` checked for shape, with upper-case listener
    names (as listeners.py has them) and absolute paths (workers get the
    config as JSON and may run from another directory)."""
    if not isinstance(overrides, dict):
        raise InvalidConfigurationError(
            f"listener_overrides must be a table per listener name, not {overrides!r}")
    out: dict[str, dict] = {}
    for listener, settings in overrides.items():
        name = str(listener).upper()
        if not isinstance(settings, dict):
            raise InvalidConfigurationError(
                f"listener_overrides.{listener} must be a table of settings, not {settings!r}")
        if name in out:
            raise InvalidConfigurationError(
                f"listener_overrides names listener {name} more than once")
        for key, value in settings.items():
            if key not in LISTENER_SETTINGS:
                raise InvalidConfigurationError(
                    f"listener_overrides.{listener}.{key}: a listener may set only "
                    f"{', '.join(LISTENER_SETTINGS)} of its own")
            if not isinstance(value, str):
                raise InvalidConfigurationError(
                    f"listener_overrides.{listener}.{key} must be a string, not {value!r}")
        out[name] = {k: (os.path.abspath(v) if k in _PATHS and v else v)
                     for k, v in settings.items()}
    return out


def listener_settings(config, listener: str | None) -> dict:
    """The TLS and SASL settings of the listener named ``listener``: its
    own overrides over the server-wide values."""
    own = config.listener_overrides.get((listener or "").upper(), {})
    return {key: own.get(key, getattr(config, key)) for key in LISTENER_SETTINGS}


def validate(config) -> None:
    """Raise InvalidConfigurationError when the security settings cannot work."""
    protocol = config.kafka_security_protocol
    if protocol not in SECURITY_PROTOCOLS:
        raise InvalidConfigurationError(
            f"kafka_security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
            f"not {protocol!r}")
    listeners = kafka_listeners(config)
    names = [spec.name for spec in listeners]
    for name in config.listener_overrides:
        if name not in names:
            raise InvalidConfigurationError(
                f"listener_overrides names listener {name}, which is not one of this "
                f"server's listeners ({', '.join(names)})")
    for spec in listeners:
        s = listener_settings(config, spec.name)
        own = config.listener_overrides.get(spec.name, {})
        named = {key: f"listener_overrides.{spec.name}.{key}" if key in own else key
                 for key in LISTENER_SETTINGS}   # what an error calls each setting
        if s["ssl_client_auth"] not in CLIENT_AUTH:
            raise InvalidConfigurationError(
                f"{named['ssl_client_auth']} must be one of {', '.join(CLIENT_AUTH)}, "
                f"not {s['ssl_client_auth']!r}")
        if spec.protocol.endswith("SSL") and not s["ssl_certfile"]:
            what = (f"kafka_security_protocol {spec.protocol}" if not config.listeners.strip()
                    else f"listener {spec.name} ({spec.protocol})")
            raise InvalidConfigurationError(
                f"{what} needs ssl_certfile (and ssl_keyfile unless the key is in the "
                f"certificate file)")
        if s["ssl_client_auth"] != "none" and not s["ssl_cafile"]:
            raise InvalidConfigurationError(
                f"{named['ssl_client_auth']} requested/required needs ssl_cafile (the CA of "
                f"client certificates)")
        mechanisms = _split(s["sasl_enabled_mechanisms"])
        unknown = [m for m in mechanisms if m not in MECHANISMS]
        if unknown or (spec.protocol.startswith("SASL") and not mechanisms):
            raise InvalidConfigurationError(
                f"{named['sasl_enabled_mechanisms']} must name some of "
                f"{', '.join(MECHANISMS)}, not {s['sasl_enabled_mechanisms']!r}")
    for name in ("connections_max_reauth_ms", "connection_failed_authentication_delay_ms"):
        ms = getattr(config, name)
        if type(ms) is not int or ms < 0:
            raise InvalidConfigurationError(
                f"{name} must be a whole number of milliseconds >= 0, not {ms!r}")
    if config.native_curve_authorized_keys and not config.native_curve_secret_key_file:
        raise InvalidConfigurationError(
            "native_curve_authorized_keys needs native_curve_secret_key_file (the server's "
            "CURVE key pair: kafkalite curve keygen)")
    if config.native_curve_secret_key_file:
        native_curve(config)        # the keys must load


def native_curve(config) -> curve.CurveServer | None:
    """The native protocol's CURVE from the server config; None when off."""
    if not config.native_curve_secret_key_file:
        return None
    # Imported here: server.config validates through this module, and the
    # supervisor loads that config before it spawns its workers, so a
    # module-level import would load the protocol's codecs (kafkalite.protocol)
    # ahead of the spawn (tests/server/test_startup.py).
    from kafkalite.protocol import curve
    if not curve.zmq.has("curve"):
        raise InvalidConfigurationError("native_curve_secret_key_file is set but this libzmq "
                                        "was built without CURVE")
    try:
        public, secret = curve.load_keypair_file(config.native_curve_secret_key_file)
        authorized = config.native_curve_authorized_keys or None
        if authorized:
            curve.load_authorized_keys(authorized)
    except curve.CurveKeyError as exc:
        raise InvalidConfigurationError(str(exc)) from None
    return curve.CurveServer(public, secret, authorized, curve.BROKER_PRINCIPAL)


def native_security(config, native, node):
    """The CURVE of the native ports (and the ingest gateway, and the rings
    attached through them): ``native`` (the key file's) when there is one;
    else, with security on (``security_enabled``), ``node`` -- the node's
    key pair of this run, which admits the server's own processes and no
    one else, so that no native door stays open beside authenticated Kafka
    listeners; else None: open, as the embedded default is."""
    if native is not None:
        return native
    return node if node is not None and security_enabled(config) else None


# <data dir>/OWNER_KEY_FILE: the node's key pair of this run, when it is
# the native ports' (security on without a key file), 0600. Whoever can
# read it can read the data directory's segments too: the server's owner.
# Their tools (the kafkalite CLI, the test harness) connect with it, as the
# server's principal; server.json names it ("owner.key_file").
OWNER_KEY_FILE = "owner.key_secret"


def write_owner_keys(config, curve_server) -> str | None:
    """Write the node's key pair of this run to OWNER_KEY_FILE when it is
    what the native ports take; its path, or None (removed) when it is not."""
    path = os.path.join(config.data_dir, OWNER_KEY_FILE)
    if curve_server is None or config.native_curve_secret_key_file:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return None
    from kafkalite.protocol import curve
    curve.write_keypair_file(path, curve_server.public, curve_server.secret,
                             "this run's, for the server's owner (kafkalite server wrote it)")
    return os.path.abspath(path)


def node_curve(config, native, keys: tuple[bytes, bytes] | None = None):
    """The CURVE identity of the node's own channels (the control channel
    and the relay, which only the server's processes may speak on): the
    native protocol's (``native``, from the key file) when there is one,
    else, on a single node, a key pair of this run -- ``keys`` (public,
    secret), or a new one -- that the supervisor hands its workers through
    a pipe (processes.spawn_worker). None for a cluster without a key file:
    other nodes' workers could not know a key made here
    (``warn_if_node_channels_open``)."""
    if native is not None:
        return native
    if config.cluster:
        return None
    from kafkalite.protocol import curve
    public, secret = keys or curve.zmq.curve_keypair()
    return curve.CurveServer(public, secret, None, curve.BROKER_PRINCIPAL)


# With security on, what the server creates is its owner's and group's only
# (directories 0750, files 0640): the log segments hold the records the ACLs
# protect, and a local user who could read them would need no listener.
SECURE_UMASK = 0o027


def security_enabled(config) -> bool:
    """Security is on once the authorizer is, a Kafka listener
    authenticates or encrypts, or the native protocol runs CURVE."""
    return bool(config.authorizer_enabled or config.native_curve_secret_key_file
                or any(spec.protocol != "PLAINTEXT" for spec in kafka_listeners(config)))


def restrict_file_modes(config) -> None:
    """With security on: the process's umask (the workers inherit it)
    becomes SECURE_UMASK, and an existing data directory loses what other
    users could do in it. Called by ``kafkalite server`` before it creates
    anything."""
    if not security_enabled(config):
        return
    old = os.umask(SECURE_UMASK)
    os.umask(old | SECURE_UMASK)        # a stricter umask of the user's stays
    try:
        mode = os.stat(config.data_dir).st_mode & 0o777
        if mode & 0o007:
            os.chmod(config.data_dir, mode & ~0o007)
    except FileNotFoundError:
        pass                            # made under the umask


def check_local_door_dir(config) -> None:
    """The directory of the ingest gateway's local door, made or checked
    (local_socket.door_directory) before anything starts: OSError naming
    what is wrong, so the server refuses to start rather than leave local
    publishers a door another user could put a socket in place of."""
    if config.ingest_door_dir:
        local_socket.door_directory(config.ingest_door_dir)


def refuse_open_node_channels(config) -> None:
    """With security on, a cluster without a key file would leave its
    control channel and relay -- which decide who leads, who is in sync and
    what a relayed request's principal is -- open to anyone who reaches
    them (a single node makes a key pair for the run; nodes cannot share
    one made here): refused before anything starts, naming the fix."""
    if config.cluster and security_enabled(config) and not config.native_curve_secret_key_file:
        raise InvalidConfigurationError(
            "with security on (a listener other than PLAINTEXT, or the authorizer) a cluster's "
            "control channel and relay need CURVE: give every node the same key pair "
            "(kafkalite curve keygen NAME --dir DIR; native_curve_secret_key_file = "
            "\"DIR/NAME.key_secret\")")


def warn_if_node_channels_open(config) -> None:
    """One warning (the controller's, at start) when a cluster's control
    channel and relay listen beyond loopback without CURVE."""
    if config.cluster and not config.native_curve_secret_key_file \
            and config.host not in ("127.0.0.1", "::1", "localhost"):
        log.warning("without CURVE (native_curve_secret_key_file) this cluster's control "
                    "channel and relay on %s are neither authenticated nor encrypted: anyone "
                    "who reaches them can join as a broker, change ISRs, or have Kafka "
                    "requests relayed as a broker. Give every node the same key pair "
                    "(kafkalite curve keygen)", config.host or "*")


def http_tls_context(config) -> ssl.SSLContext | None:
    """The TLS of the HTTP port (``http_tls``: /metrics, /health, the web
    console), with the server's certificate and key; None when off. No
    client certificates are asked for: the port's login is HTTP Basic
    (http_login.py)."""
    if not config.http_tls:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile or None)
    except (OSError, ssl.SSLError) as exc:
        raise InvalidConfigurationError(
            f"cannot load the HTTP port's TLS certificate or key: {exc}") from None
    return context


def listener_security(config, protocol: str | None = None,
                      listener: str | None = None) -> ListenerSecurity | None:
    """The security of the Kafka listener named ``listener`` speaking
    ``protocol`` (None: the primary listener's, listeners.py) from the
    server config, with that listener's overrides; None for PLAINTEXT."""
    if protocol is None:
        spec = kafka_listeners(config)[0]
        protocol, listener = spec.protocol, spec.name
    if protocol == "PLAINTEXT":
        return None
    s = listener_settings(config, listener)
    context = None
    if protocol.endswith("SSL"):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(s["ssl_certfile"], s["ssl_keyfile"] or None)
            if s["ssl_cafile"]:
                context.load_verify_locations(cafile=s["ssl_cafile"])
        except (OSError, ssl.SSLError) as exc:
            what = f" of listener {listener}" if listener in config.listener_overrides else ""
            raise InvalidConfigurationError(
                f"cannot load the TLS certificate or key{what}: {exc}") from None
        context.verify_mode = CLIENT_AUTH[s["ssl_client_auth"]]
    credentials = None
    mechanisms: tuple[str, ...] = ()
    if protocol.startswith("SASL"):
        mechanisms = tuple(_split(s["sasl_enabled_mechanisms"]))
        credentials = CredentialStore(users_file(config.data_dir, config.sasl_users_file))
    return ListenerSecurity(protocol, context, mechanisms, credentials,
                            config.connections_max_reauth_ms,
                            config.connection_failed_authentication_delay_ms)


def certificate_principal(cert: dict | None) -> str | None:
    """Kafka's default SSL principal: ``User:`` and the client certificate's
    distinguished name, most specific part first (RFC 2253 order)."""
    if not cert or not cert.get("subject"):
        return None
    parts = [f"{k}={v}" for rdn in reversed(cert["subject"]) for k, v in rdn]
    names = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
             "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST"}
    for long, short in names.items():
        parts = [p.replace(long + "=", short + "=", 1) if p.startswith(long + "=") else p
                 for p in parts]
    return "User:" + ",".join(parts)


class SaslServer:
    """One connection's SASL exchange. ``principal`` is set once it succeeded."""

    __slots__ = ("mechanisms", "credentials", "mechanism", "principal", "_scram", "_step", "_user",
                 "failure", "_client_nonce")

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialStore):
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram = None
        self._step = 0
        self._user = ""
        self.failure = ""           # why the exchange failed, for the server's log only
        self._client_nonce = ""

    def handshake(self, mechanism: str) -> int:
        """SaslHandshake: 0, or the error code (the client is then told ours)."""
        if self.mechanism is not None:
            return errors.IllegalSaslStateError.code
        if mechanism not in self.mechanisms:
            return errors.UnsupportedSaslMechanismError.code
        self.mechanism = mechanism
        return 0

    def authenticate(self, token: bytes) -> bytes:
        """One client token in, the server's token out; raises
        SaslAuthenticationFailedError (IllegalSaslStateError before a handshake)."""
        if self.mechanism is None or self.principal is not None:
            raise errors.IllegalSaslStateError(
                "SaslAuthenticate before SaslHandshake, or after authentication completed")
        if self.mechanism == "PLAIN":
            return self._plain(bytes(token))
        return self._scram_step(bytes(token))

    def _plain(self, token: bytes) -> bytes:
        # RFC 4616: [authzid] NUL authcid NUL passwd, UTF-8.
        parts = token.split(b"\0")
        if len(parts) != 3:
            raise errors.SaslAuthenticationFailedError("Invalid SASL/PLAIN response: expected 3 tokens")
        authzid, user, password = (p.decode("utf-8", "replace") for p in parts)
        if not user or not password:
            raise errors.SaslAuthenticationFailedError("Authentication failed: username or password "
                                                       "is empty")
        if authzid and authzid != user:
            raise errors.SaslAuthenticationFailedError(
                "Authentication failed: Client requested an authorization id that is different "
                "from username")
        if not self.credentials.verify_plain(user, password):
            self.failure = f"user {user!r}: unknown, or a wrong password"
            raise errors.SaslAuthenticationFailedError(INVALID_CREDENTIALS)
        self.principal = "User:" + user
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        import scramp
        try:
            text = token.decode("utf-8")
            if self._step == 0:
                mechanism = self.mechanism
                self._scram = scramp.ScramMechanism(mechanism).make_server(
                    lambda user: self._scram_credential(mechanism, user))
                self._scram.set_client_first(text)
                self._client_nonce = _attributes(text).get("r", "")
                self._step = 1
                return self._scram.get_server_first().encode()
            if self._step == 1:
                self._accept_doubled_nonce(text)
                self._scram.set_client_final(text)
                self._step = 2
                self.principal = "User:" + self._user
                return self._scram.get_server_final().encode()
        except scramp.ScramException as exc:
            # scramp wraps what the credential lookup raised; the client-final
            # message fails on a wrong password (the proof).
            unknown = self._user and self.credentials.scram(self.mechanism, self._user) is None
            self.failure = f"unknown user {self._user!r}" if unknown else str(exc)
            message = (INVALID_CREDENTIALS if unknown or self._step == 1
                       else f"Authentication failed: {exc}")
            raise errors.SaslAuthenticationFailedError(message) from None
        except (UnicodeDecodeError, ValueError, KeyError, IndexError) as exc:
            raise errors.SaslAuthenticationFailedError(
                f"Authentication failed: malformed SCRAM message ({exc})") from None
        raise errors.IllegalSaslStateError("SCRAM exchange already complete")

    def _accept_doubled_nonce(self, client_final: str) -> None:
        """librdkafka before 2.6.1 (kcat as Debian and Ubuntu ship it, 2.0.2)
        answers with its client nonce followed by the whole server nonce,
        which already starts with it (confluentinc/librdkafka#4895). Kafka
        3.8.1-3.9 accepted that (the nonce had to end with the server's);
        we accept exactly that doubled form: the server's random part is
        still required, so the exchange cannot be replayed."""
        nonce = getattr(self._scram, "nonce", None)
        sent = _attributes(client_final).get("r")
        if nonce is not None and self._client_nonce and sent == self._client_nonce + str(nonce):
            self._scram.nonce = type(nonce)(sent)

    def _scram_credential(self, mechanism: str, saslname: str):
        # RFC 5802 section 5.1: "," and "=" in a user name arrive as =2C and =3D.
        user = saslname.replace("=2C", ",").replace("=3D", "=")
        self._user = user
        cred = self.credentials.scram(mechanism, user)
        if cred is None:
            raise _UnknownUser(user)
        return cred


class _UnknownUser(Exception):
    pass


def _attributes(message: str) -> dict[str, str]:
    """The a=value attributes of a SCRAM message (RFC 5802 section 5.1)."""
    return dict(p.split("=", 1) for p in message.split(",") if len(p) > 1 and p[1] == "=")
