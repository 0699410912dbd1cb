"""SASL logins on the native protocol, for remote clients without a key pair.

A client that holds no CURVE key pair listed in the authorized keys --
only the SASL user and password it uses on the Kafka listeners -- makes a
throwaway key pair, connects with the server's public key
(``curve.server.key``) and logs in with SaslHandshake and SaslAuthenticate
as its first native requests, exactly the requests and answers Kafka's
SASL listeners take (KIP-43, KIP-152): the exchange is security.py's
``SaslServer`` against the same credentials (credentials.py), so PLAIN,
SCRAM-SHA-256 and SCRAM-SHA-512 users log in here as there.

How a connection gets its principal. The native port is a CURVE server of
protocol/curve.py's ``LOGIN_ZAP_DOMAIN``: a key in the authorized keys is
its principal as before; any other key is accepted with the User-Id
``Pending:<key>``, which the listener (native_listener.py) hands here. A
successful login binds that key to ``User:<name>`` (a *session*); every
later request whose key is bound is the bound principal's, authorized as a
listed key's request is (and a ring attached through it is that principal's,
ring_gateway.py). The key is what is bound, not the ROUTER's identity: the
key is proven by every CURVE handshake, while an identity is only a name
the ROUTER gave a connection (ZeroMQ reconnects a link under a new one,
and ROUTER_HANDOVER lets a peer claim one). A session therefore lasts
while its key is in use; a client makes a new key pair per client object
and logs in again on each new link, to each broker process (each keeps its
own sessions: the supervisor and every worker read the same users file,
or in a cluster the mirror of the cluster's users).

Before its login, a pending key is served SaslHandshake and
SaslAuthenticate only; anything else is answered SASL_AUTHENTICATION_FAILED
(an extension request too), so a client that forgot its login is told at
its first request rather than left waiting. Out of order SASL requests are
ILLEGAL_SASL_STATE, as on a Kafka listener. A failed login (Kafka's
message: an unknown user and a wrong password read the same) leaves the
key unbound -- and unbinds it, for a key logging in again -- and its answer
and everything that connection sends after it wait
``connection_failed_authentication_delay_ms`` (the listener's ``hold``),
as Kafka keeps a failed connection open that long before closing it: a
client trying passwords on one connection gets one answer per delay.
Logging in again as another user on a bound key is refused (Kafka: "Cannot
change principals during re-authentication").

Bounds (a key costs its sender nothing to make): at most MAX_EXCHANGES
logins in progress and MAX_SESSIONS sessions per process, the least
recently used dropped first; a client whose session was dropped (or whose
process restarted) is told SASL_AUTHENTICATION_FAILED "... before a SASL
login" (curve.LOGIN_NEEDED) at its next request, and kafkalite's client
logs in again on that link. Sessions do not expire
(``session_lifetime_ms`` 0: no KIP-368 re-authentication here).

``native_login(config)`` is on (a ``NativeLogin``) when
``native_sasl_enabled`` (the default) and the server has CURVE on its
native ports (server/auth/security.py native_security) and a SASL Kafka
listener: the mechanisms are the union of those listeners'.

Who may call: the owning process's event loop (the native listener);
nothing here is thread-safe.
"""
from __future__ import annotations

import collections
import logging

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.protocol.curve import LOGIN_NEEDED
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.auth.credentials import CredentialStore, users_file
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.auth.security import SaslServer, _split, listener_settings

log = logging.getLogger("kafkalite.native")

LOGIN_APIS = (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
MAX_EXCHANGES = 4096
MAX_SESSIONS = 65536
NOT_LOGGED_IN = ("Authentication failed: {api} request " + LOGIN_NEEDED + " on the native "
                 "port (a client without an authorized CURVE key logs in first: "
                 "security.protocol SASL_PLAINTEXT or SASL_SSL, sasl.mechanism, "
                 "sasl.username, sasl.password)")


class NativeLogin:
    """One process's SASL logins on its native port(s): logins in progress
    and sessions, both by client key (Z85 text)."""

    def __init__(self, mechanisms: tuple[str, ...], credentials: CredentialStore,
                 failed_auth_delay_ms: int):
        self.mechanisms = mechanisms
        self.credentials = credentials
        self.failed_auth_delay_ms = failed_auth_delay_ms
        self._sessions: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._exchanges: collections.OrderedDict[str, SaslServer] = collections.OrderedDict()
        self._failures = RateLimitedLog(log)
        self.failures = 0

    def principal(self, key: str) -> str | None:
        """The principal ``key`` logged in as, or None."""
        principal = self._sessions.get(key)
        if principal is not None:
            self._sessions.move_to_end(key)
        return principal

    def refusal(self, api: int | str) -> errors.SaslAuthenticationFailedError:
        """The error for a request (an API key, or what else it is) of a key
        that has not logged in."""
        if isinstance(api, int):
            api = ApiKey(api).name if api in ApiKey._value2member_map_ else f"API {api}"
        return errors.SaslAuthenticationFailedError(NOT_LOGGED_IN.format(api=api))

    def exchange(self, key: str, api_key: int, body: dict, where: str) -> tuple[dict, bool]:
        """One SaslHandshake or SaslAuthenticate of ``key``: (the answer's
        body, whether the login failed). ``where`` names the peer in logs."""
        if api_key == ApiKey.SASL_HANDSHAKE:
            sasl = SaslServer(self.mechanisms, self.credentials)
            code = sasl.handshake(body["mechanism"])
            answer = {"error_code": code, "mechanisms": list(self.mechanisms)}
            if code:
                self._exchanges.pop(key, None)
                self._failed(key, where, f"SASL mechanism {body['mechanism']!r} is not enabled")
                return answer, True
            self._exchanges[key] = sasl
            self._exchanges.move_to_end(key)
            while len(self._exchanges) > MAX_EXCHANGES:
                self._exchanges.popitem(last=False)
            return answer, False
        sasl = self._exchanges.get(key)
        try:
            if sasl is None:
                raise errors.IllegalSaslStateError(
                    "SaslAuthenticate before SaslHandshake, or after authentication completed")
            token = sasl.authenticate(body["auth_bytes"])
            bound = self._sessions.get(key)
            if sasl.principal is not None and bound not in (None, sasl.principal):
                raise errors.SaslAuthenticationFailedError(
                    f"Cannot change principals during re-authentication from {bound} to "
                    f"{sasl.principal}")
        except errors.KafkaError as exc:
            self._exchanges.pop(key, None)
            why = (sasl.failure if sasl is not None else "") or exc.message
            self._failed(key, where, f"{sasl.mechanism if sasl else 'SASL'}: {why}")
            return {"error_code": exc.code, "error_message": exc.message, "auth_bytes": b"",
                    "session_lifetime_ms": 0}, True
        if sasl.principal is not None:      # the exchange is complete: a session
            del self._exchanges[key]
            self._sessions[key] = sasl.principal
            self._sessions.move_to_end(key)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return {"error_code": 0, "error_message": None, "auth_bytes": token,
                "session_lifetime_ms": 0}, False

    def _failed(self, key: str, where: str, why: str) -> None:
        self._sessions.pop(key, None)       # a failed login again ends the session it had
        self.failures += 1
        self._failures.warning("native SASL login of %s failed: %s", where, why)


def native_login(config, curve) -> NativeLogin | None:
    """The native ports' SASL logins of a broker process with ``config``
    and ``curve`` (its native ports' CURVE, or None), or None when off."""
    if curve is None or not config.native_sasl_enabled:
        return None
    mechanisms: list[str] = []
    for spec in kafka_listeners(config):
        if spec.protocol.startswith("SASL"):
            for m in _split(listener_settings(config, spec.name)["sasl_enabled_mechanisms"]):
                if m not in mechanisms:
                    mechanisms.append(m)
    if not mechanisms:
        return None
    return NativeLogin(tuple(mechanisms), CredentialStore(users_file(config.data_dir,
                                                                     config.sasl_users_file)),
                       config.connection_failed_authentication_delay_ms)
