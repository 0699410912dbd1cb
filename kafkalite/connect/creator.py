"""A connector acts as the principal that created it (issue 40), not as
the worker's.

Kafka's way: per-connector client overrides (``producer.override.*``,
``consumer.override.*``, ``admin.override.*``, KIP-458) carrying the
creator's login. When the REST API asks for logins (rest_login.py) and the
worker's clients speak Kafka's protocol (clients.py; kafkalite's native
clients log in with the worker's key pair and take no SASL settings), a
create (``POST /connectors``) or a config write (``PUT
/connectors/{name}/config``) gets, for each kind of client, the worker-owned
keys ``<kind>.override.sasl.username`` and ``<kind>.override.sasl.password``:
the caller's user name and the password that request logged in with. So the
connector's tasks' producers and consumers, its dead-letter queue and the
admin client of its offsets endpoints log in as that user, and the brokers'
ACLs apply to the creator. A later PUT by another user makes that user the
principal. Whatever ``<kind>.override.sasl.*`` or
``<kind>.override.security.*`` the body carries is replaced (a caller may
not name another principal; the worker's own ``security.protocol`` and
``sasl.mechanism`` are the ones the login was checked with), so a config
read back and written again, with its ``[hidden]`` values, stays good.

The REST API never shows these passwords: ``hide_credentials`` answers
``"[hidden]"`` for them, as Kafka shows PASSWORD values. They are stored
with the connector's config (the config topic, or the standalone worker's
memory), as Kafka stores client overrides there: the config topic is the
worker's, and its ACLs should leave it to the worker's principal.

A connector created from a file at start (``kafkalite connect standalone
worker.properties connector.properties``) has no creator and runs as the
worker.

Who calls: rest.py (as_creator, hide_credentials), herder.py
(admin_config); pure functions.
"""
from __future__ import annotations

CLIENT_KINDS = ("producer", "consumer", "admin")
HIDDEN = "[hidden]"
# under <kind>.override.: what the worker sets from the request's login, and what a caller's
# body may not set
_OWNED_PREFIXES = ("sasl.", "security.")
_SECRET_SUFFIXES = ("sasl.password", "sasl.jaas.config", ".password")


def _override_prefixes() -> tuple[str, ...]:
    return tuple(f"{kind}.override." for kind in CLIENT_KINDS)


def _is_owned(key: str) -> bool:
    for prefix in _override_prefixes():
        if key.startswith(prefix):
            return key[len(prefix):].startswith(_OWNED_PREFIXES)
    return False


def as_creator(config: dict, user: str, password: str) -> dict:
    """``config`` whose clients log in as ``user`` (a copy)."""
    out = {k: v for k, v in config.items() if not _is_owned(k)}
    for kind in CLIENT_KINDS:
        out[f"{kind}.override.sasl.username"] = user
        out[f"{kind}.override.sasl.password"] = password
    return out


def hide_credentials(config: dict) -> dict:
    """``config`` as the REST API shows it: client override passwords hidden."""
    prefixes = _override_prefixes()
    return {k: HIDDEN if k.startswith(prefixes) and k.endswith(_SECRET_SUFFIXES) else v
            for k, v in config.items()}


def admin_config(client_config: dict, connector_config: dict) -> dict:
    """The worker's client config with the connector's ``admin.override.*``
    (Kafka's admin client of a connector's offsets endpoints), as ``admin.``
    settings: clients.AdminClient applies those last, over the worker's."""
    prefix = "admin.override."
    return {**client_config, **{"admin." + k[len(prefix):]: v
                                for k, v in connector_config.items() if k.startswith(prefix)}}
