"""Logins on a Connect worker's REST API when security is on (issue 40;
Kafka Connect's REST extension point, as its BasicAuthSecurityRestExtension
fills it).

A Connect worker is a process of its own: it cannot read the brokers'
credential store, but it can ask the brokers whether a user's credentials
are good by logging in with them. So a REST request's HTTP Basic
credentials are checked by a SASL login to the worker's bootstrap servers
(client/blocking_kafka_client.BlockingKafkaClient: the worker's
``security.protocol``, ``sasl.mechanism`` and ``ssl.*``, the request's user
name and password); the principal is ``User:<name>``, as the brokers see it.

``rest.authentication`` (worker setting):

- unset (the default): ``sasl`` when the worker's own ``security.protocol``
  is SASL_PLAINTEXT or SASL_SSL, else ``none``;
- ``sasl``: logins required (the worker refuses to start unless its
  ``security.protocol`` is SASL_*: there is no other login to check);
- ``none``: no logins, even on a secured cluster (logged as a warning at
  start: anyone who reaches the port then acts as the worker's principal).

With logins on, every path but ``GET /`` (version, as Kafka's) needs them,
except Kafka's internal ``POST /connectors/{name}/tasks``, which another
worker of the cluster sends signed with the session key (signature.py
checks it: 400 unsigned, 403 a wrong key), as Kafka's JaasBasicAuthFilter
lets it through. A request forwarded to the leader, or to a connector's
owner, carries its caller's ``Authorization`` header (``CALLER``).

Failed logins answer 401 with ``WWW-Authenticate: Basic``, never telling
an unknown user from a wrong password, and no sooner than
FAILED_LOGIN_DELAY_S after the login began: a client trying passwords on
one connection gets at most one answer per delay, as on the Kafka
listeners. (The brokers answer a failed SASL login at once and delay
only their close, which the login does not wait for: a refused REST
login took 6 ms before this floor. The floor tops up what the brokers
took rather than adding to it.) The wait is on the request's thread,
holding no lock. A login that passed is remembered
for LOGIN_CACHE_S, keyed by a keyed hash of the header, so a client
polling ``/status`` does not make the worker pay a SCRAM exchange each
time. When no bootstrap server answers, the request
is answered 503 (the credentials could not be checked), not 401.

Who may call: rest.py's request threads (BrokerLogin is thread-safe).
"""
from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import logging
import os
import threading
import time
from dataclasses import dataclass

from kafkalite import errors
from kafkalite.client.blocking_kafka_client import BlockingKafkaClient, parse_servers

log = logging.getLogger("kafkalite.connect")

REST_AUTHENTICATION = "rest.authentication"
SASL, NONE = "sasl", "none"
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
REALM = "kafka-connect"
LOGIN_CACHE_S = 60.0
LOGIN_CACHE_MAX = 1024
LOGIN_TIMEOUT_S = 10.0
# Kafka's connection.failed.authentication.delay.ms default (a Connect worker has no
# broker config to read the cluster's from)
FAILED_LOGIN_DELAY_S = 0.1
# the caller's Authorization header, while a REST thread serves its request: what the
# herder passes on when it forwards the request to another worker
CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "kafkalite_connect_rest_caller", default=None)


@dataclass(frozen=True)
class Credentials:
    """A REST caller who logged in."""
    user: str
    password: str

    @property
    def principal(self) -> str:
        return f"User:{self.user}"


class BrokersUnreachable(ConnectionError):
    """No bootstrap server answered: the credentials could not be checked."""


def authentication_of(config: dict) -> str:
    """``sasl`` or ``none`` for a worker config (ValueError naming the
    setting for a bad value, or ``sasl`` without a SASL security.protocol)."""
    security = str(config.get("security.protocol", "PLAINTEXT")).strip().upper()
    value = config.get(REST_AUTHENTICATION)
    if value is None or not str(value).strip():
        return SASL if security in SASL_PROTOCOLS else NONE
    value = str(value).strip().lower()
    if value not in (SASL, NONE):
        raise ValueError(f"{REST_AUTHENTICATION}={config[REST_AUTHENTICATION]!r}: "
                         f"{SASL} or {NONE}")
    if value == SASL and security not in SASL_PROTOCOLS:
        raise ValueError(f"{REST_AUTHENTICATION}=sasl checks logins with a SASL login to the "
                         f"brokers, but the worker's security.protocol is {security}: set "
                         f"security.protocol to SASL_PLAINTEXT or SASL_SSL")
    return value


def broker_login(config: dict) -> "BrokerLogin | None":
    """The REST API's login for a worker config; None when logins are off."""
    mode = authentication_of(config)
    if mode == NONE:
        if str(config.get("security.protocol", "")).strip().upper() in SASL_PROTOCOLS:
            log.warning("%s=none: the REST API asks for no login although the cluster is "
                        "secured; whoever reaches it acts as the worker's principal",
                        REST_AUTHENTICATION)
        return None
    return BrokerLogin(config)


class BrokerLogin:
    """Checks HTTP Basic credentials by a SASL login to the brokers."""

    def __init__(self, config: dict):
        self.servers = parse_servers(config["bootstrap.servers"])
        # what the login takes of the worker's settings: how to reach and log in, not who
        self._config = {k: v for k, v in config.items()
                        if k == "security.protocol" or k.startswith(("sasl.mechanism", "ssl."))}
        self._client_id = f"{config.get('client.id') or 'connect'}-rest-login"
        self.failures = 0
        self._key = os.urandom(32)
        self._passed: dict[bytes, float] = {}      # hash of the header -> until
        self._lock = threading.Lock()

    def login(self, authorization: str | None) -> Credentials | None:
        """The caller of an ``Authorization`` header, or None (no Basic
        credentials, or the brokers refused them). BrokersUnreachable when
        no bootstrap server answered."""
        scheme, _, value = (authorization or "").partition(" ")
        value = value.strip()
        if scheme.lower() != "basic" or not value:
            return None
        try:
            user, colon, password = base64.b64decode(value, validate=True) \
                .decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if not colon or not user:
            return None
        creds = Credentials(user, password)
        digest = hmac.new(self._key, value.encode(), hashlib.sha256).digest()
        now = time.monotonic()
        with self._lock:
            if self._passed.get(digest, 0.0) > now:
                return creds
        if not self._sasl_login(creds):
            with self._lock:
                self.failures += 1
            time.sleep(max(0.0, now + FAILED_LOGIN_DELAY_S - time.monotonic()))
            return None
        with self._lock:
            if len(self._passed) >= LOGIN_CACHE_MAX:
                self._passed.clear()
            self._passed[digest] = now + LOGIN_CACHE_S
        return creds

    def _sasl_login(self, creds: Credentials) -> bool:
        """Whether a bootstrap server takes the credentials (the first that
        answers decides)."""
        config = {**self._config, "sasl.username": creds.user, "sasl.password": creds.password}
        unreachable = []
        for host, port in self.servers:
            try:
                BlockingKafkaClient(host, port, config, self._client_id, LOGIN_TIMEOUT_S).close()
                return True
            except (errors.SaslAuthenticationFailedError, errors.UnsupportedSaslMechanismError):
                return False
            except errors.KafkaError as e:
                # a settings problem (a bad mechanism): the same for every server
                log.warning("REST login: %s", e)
                return False
            except OSError as e:
                unreachable.append(f"{host}:{port}: {e}")
        raise BrokersUnreachable("no bootstrap server answered to check the credentials: " +
                                 "; ".join(unreachable))
