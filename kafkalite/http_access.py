"""The one authorization layer of kafkalite's HTTP apps: the decisions the login hands a request.

With security on, every HTTP port is behind the node's login
(server/auth/http_login.py ``HttpLogin.wrap``): it puts the principal who
logged in in ``environ[ENVIRON_PRINCIPAL]`` and, with the authorizer on,
``environ[ENVIRON_AUTHORIZE]``: ``(operation, resource type, name, audit)
-> bool`` for that principal and host, with the node's authorizer (its
super users, ``allow_everyone_if_no_acl_found``, its audit log and
counts). ``RequestAccess`` is one request's view of it, what every app's
``Access`` builds on: the schema registry's, the REST proxy's, the
Iceberg REST catalog's and the console's each add their own rules (which
Kafka request an HTTP call stands for) and their own refusal (Confluent's
40301, the Iceberg spec's 403, the console's JSON). Without a decision
function (security off, or the authorizer off) everything is allowed.

Who may call: the apps, on the HTTP server's threads (a RequestAccess is
one request's); http_login.py for the environ's names. What it may
import: the standard library only (it sits at the bottom of the layers,
so that server/ and the apps share it without importing each other; the
operations and resource types are the caller's, protocol/enums.py's).
"""
from __future__ import annotations

ENVIRON_AUTHORIZE = "kafkalite.authorize"
ENVIRON_PRINCIPAL = "kafkalite.principal"
CLUSTER_NAME = "kafka-cluster"        # the one Cluster resource (server/auth/authorizer.py's)


class RequestAccess:
    """One request's decisions for the user of ``environ``. A subclass sets
    ``CLUSTER`` to ResourceType.CLUSTER (this module imports no enums)."""

    __slots__ = ("principal", "_authorize")
    CLUSTER = None

    def __init__(self, environ: dict):
        self.principal = environ.get(ENVIRON_PRINCIPAL)
        self._authorize = environ.get(ENVIRON_AUTHORIZE)

    @property
    def decides(self) -> bool:
        """Whether an authorizer decides (else everything is allowed)."""
        return self._authorize is not None

    def may(self, operation, resource_type, name: str, audit: bool = True) -> bool:
        """Whether the user may; ``audit``: an attempt, logged and counted
        when denied (a list's filter is not one)."""
        return self._authorize is None or bool(
            self._authorize(operation, resource_type, name, audit))

    def may_cluster(self, operation, audit: bool = True) -> bool:
        return self.may(operation, self.CLUSTER, CLUSTER_NAME, audit)

    def sees(self, operation, resource_type, or_cluster: bool = False):
        """A predicate name -> bool: whether a list keeps a resource (not
        audited). ``or_cluster``: the operation on the cluster keeps every
        one (ListGroups' Describe)."""
        if self._authorize is None or (or_cluster and self.may_cluster(operation, audit=False)):
            return lambda name: True
        return lambda name: self.may(operation, resource_type, name, audit=False)


def basic_credentials(environ: dict) -> str | None:
    """``user:password`` of the request's HTTP Basic login, or None (none,
    or not valid base64 of UTF-8): what an app hands on to the schema
    registry it calls as the same user."""
    import base64
    import binascii
    header = environ.get("HTTP_AUTHORIZATION") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        return base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return None
