"""Kafka's ACL authorizer: who may do what to which resource.

The model is Kafka's (``kafka.security.authorizer.AclAuthorizer``,
``StandardAuthorizer``): an ACL binds a resource pattern (resource type
Topic, Group, Cluster or TransactionalId; a name; pattern type LITERAL,
where the name ``*`` matches every resource of the type, or PREFIXED) to an
entry (principal ``User:alice`` or ``User:*``, host ``*`` or an IP,
operation, ALLOW or DENY). ``Authorizer.authorize`` decides one action:

- a super user (``super_users``) may do anything;
- a resource no ACL matches is allowed only with
  ``allow_everyone_if_no_acl_found`` (default false);
- a matching DENY wins over any ALLOW; an ACL for ``ALL`` covers every
  operation;
- DESCRIBE is allowed by an ALLOW for READ, WRITE, DELETE or ALTER, and
  DESCRIBE_CONFIGS by one for ALTER_CONFIGS, as Kafka implies them.

Server settings (config.py): ``authorizer_enabled`` (our boolean in place
of Kafka's ``authorizer.class.name``; off by default, so the embedded
default serves everyone as before), ``super_users`` (Kafka's
``super.users``: ``User:admin;User:ops``) and
``allow_everyone_if_no_acl_found``.

The ACLs are cluster metadata, kept and changed by the controller's side
(acl_control.py: CreateAcls, DescribeAcls, DeleteAcls) and sent to every
process that serves Kafka requests, each of which decides with an
``Authorizer`` of its own.

What each API checks is request_authorization.py's; this module knows
only the model. Denials are logged (Kafka's authorizer log: principal,
host, operation, resource) and counted per resource type and operation in
the process's metrics. The log is rate-limited (``AuditLog``): a burst of
denials, a client retrying what it may not do, logs the first few lines of
each interval; the rest are not lost without a trace: the next line logged
says how many were left out since the one before it, and the process's
metrics count them (kafkalite_authorizer_audit_lines_dropped).

Who may call: the broker processes, on their event-loop thread, and in
the supervisor also the HTTP port's connection threads (http_login.py: the
/metrics login and the web console's decisions), all on one Authorizer.
So a decision reads the ACLs from one immutable index (``replace`` swaps
it whole, in one store), and a denial's counts and audit-log state change
under the authorizer's lock. An allowed decision takes no lock: it is the
request path's common case, and it changes nothing.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from kafkalite import errors
from kafkalite.protocol.enums import AclOperation, AclPermissionType, PatternType, ResourceType

log = logging.getLogger("kafkalite.authorizer")

# The audit log's rate limit (AuditLog): at most this many denial lines per interval.
AUDIT_LINES_PER_INTERVAL = 5
AUDIT_INTERVAL_S = 10.0

WILDCARD = "*"                       # a literal resource name, principal name or host: any
CLUSTER_NAME = "kafka-cluster"       # the one Cluster resource's name
WILDCARD_PRINCIPAL = "User:*"
# The resource types an ACL may name (not ANY/UNKNOWN; DelegationToken and
# User resources are not served).
RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                  ResourceType.TRANSACTIONAL_ID)
# An ALLOW for any of these allows DESCRIBE (DESCRIBE_CONFIGS): Kafka's implied operations.
_IMPLYING = {
    AclOperation.DESCRIBE: (AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                            AclOperation.DELETE, AclOperation.ALTER),
    AclOperation.DESCRIBE_CONFIGS: (AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
}


@dataclass(frozen=True)
class AclBinding:
    """One ACL: a resource pattern and an access-control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def to_json(self) -> list:
        return [self.resource_type.name if self.resource_type != ResourceType.CLUSTER
                else "CLUSTER", self.resource_name, self.pattern_type.name, self.principal,
                self.host, self.operation.name, self.permission.name]

    @classmethod
    def from_json(cls, raw: list) -> "AclBinding":
        rt, name, pt, principal, host, op, perm = raw
        return cls(ResourceType[rt], name, PatternType[pt], principal, host, AclOperation[op],
                   AclPermissionType[perm])

    def matches_resource(self, resource_type: int, name: str) -> bool:
        """Whether this ACL's pattern covers resource ``name`` of ``resource_type``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return name.startswith(self.resource_name)           # PREFIXED

    def applies_to(self, principal: str, host: str) -> bool:
        return (self.principal == principal or self.principal == WILDCARD_PRINCIPAL) and (
            self.host == WILDCARD or self.host == host)


@dataclass(frozen=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter (Kafka's AclBindingFilter):
    ANY (or None for names) matches everything."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    @classmethod
    def from_request(cls, f: dict) -> "AclFilter":
        return cls(f["resource_type_filter"], f["resource_name_filter"],
                   f.get("pattern_type_filter", PatternType.LITERAL), f["principal_filter"],
                   f["host_filter"], f["operation"], f["permission_type"])

    def validate(self) -> None:
        for value, enum, what in ((self.resource_type, ResourceType, "resource type"),
                                  (self.pattern_type, PatternType, "pattern type"),
                                  (self.operation, AclOperation, "operation"),
                                  (self.permission, AclPermissionType, "permission type")):
            if value not in enum._value2member_map_ or value == 0:
                raise errors.InvalidRequestError(f"invalid {what} {value} in an ACL filter")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        pt, name = self.pattern_type, self.resource_name
        if pt == PatternType.MATCH:
            if name is not None and not acl.matches_resource(acl.resource_type, name):
                return False
        else:
            if pt != PatternType.ANY and acl.pattern_type != pt:
                return False
            if name is not None and acl.resource_name != name:
                return False
        return ((self.principal is None or acl.principal == self.principal)
                and (self.host is None or acl.host == self.host)
                and (self.operation == AclOperation.ANY or acl.operation == self.operation)
                and (self.permission == AclPermissionType.ANY
                     or acl.permission == self.permission))


def binding_from_request(c: dict) -> AclBinding:
    """A CreateAcls creation as an ACL; InvalidRequestError names what is wrong
    (Kafka's AclControlManager checks)."""
    try:
        rt = ResourceType(c["resource_type"])
        pt = PatternType(c.get("resource_pattern_type", PatternType.LITERAL))
        op = AclOperation(c["operation"])
        perm = AclPermissionType(c["permission_type"])
    except ValueError as exc:
        raise errors.InvalidRequestError(f"invalid ACL: {exc}") from None
    if rt not in RESOURCE_TYPES:
        raise errors.InvalidRequestError(f"ACLs on resource type {rt.name} are not supported")
    if pt not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise errors.InvalidRequestError(f"an ACL's pattern type must be LITERAL or PREFIXED, "
                                         f"not {pt.name}")
    if op in (AclOperation.ANY, AclOperation.UNKNOWN) or perm in (AclPermissionType.ANY,
                                                                  AclPermissionType.UNKNOWN):
        raise errors.InvalidRequestError("an ACL's operation and permission must be concrete")
    name, principal, host = c["resource_name"], c["principal"], c["host"]
    if not name:
        raise errors.InvalidRequestError("an ACL's resource name must not be empty")
    if rt == ResourceType.CLUSTER and name != CLUSTER_NAME:
        raise errors.InvalidRequestError(
            f"the only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if pt == PatternType.PREFIXED and name == WILDCARD:
        raise errors.InvalidRequestError("a PREFIXED ACL may not name '*'; use LITERAL '*'")
    kind, _, who = (principal or "").partition(":")
    if not kind or not who:
        raise errors.InvalidRequestError(f"invalid principal {principal!r}: expected Type:name, "
                                         f"e.g. User:alice")
    if not host:
        raise errors.InvalidRequestError("an ACL's host must be '*' or an address")
    return AclBinding(rt, name, pt, principal, host, op, perm)


class AuditLog:
    """Kafka's authorizer log of denials, at most ``per_interval`` lines
    each ``interval_s``. A denial beyond that is counted, not logged: in
    ``dropped`` until the next line logged, which ends with "(N more denials
    not logged)", and for good in ``stats.audit_lines_dropped`` (a
    metrics.RequestStats, when the process has metrics). Denials left out
    at the end of a burst are told by the next denial logged, however much
    later; the metric has them at once.

    Not locked itself: its one caller, ``Authorizer.denied``, calls it
    under the authorizer's lock."""

    __slots__ = ("stats", "per_interval", "interval_s", "dropped", "_window_start", "_logged")

    def __init__(self, stats=None, per_interval: int = AUDIT_LINES_PER_INTERVAL,
                 interval_s: float = AUDIT_INTERVAL_S):
        self.stats = stats
        self.per_interval = per_interval
        self.interval_s = interval_s
        self.dropped = 0                 # since the last line logged
        self._window_start = time.monotonic()
        self._logged = 0

    def denied(self, msg: str, *args) -> None:
        now = time.monotonic()
        if now - self._window_start >= self.interval_s:
            self._window_start, self._logged = now, 0
        if self._logged >= self.per_interval:
            self.dropped += 1
            if self.stats is not None:
                self.stats.audit_lines_dropped += 1
            return
        self._logged += 1
        if self.dropped:
            log.warning(msg + " (%d more denials not logged)", *args, self.dropped)
            self.dropped = 0
        else:
            log.warning(msg, *args)


class _AclIndex:
    """The ACLs in force, indexed for decisions; never changed once built
    (``Authorizer.replace`` builds a new one), so a thread deciding reads
    one consistent set however the ACLs change meanwhile.

    A decision looks only at the ACLs that can match: literal ones by
    (resource type, name) -- ``*`` included, under its own name -- and the
    type's prefixed ones (few, in practice), so thousands of topic ACLs
    cost a request two dict lookups."""

    __slots__ = ("acls", "by_type", "literal", "prefixed")

    def __init__(self, acls):
        self.acls: tuple[AclBinding, ...] = tuple(dict.fromkeys(acls))
        self.by_type: dict[int, list[AclBinding]] = {}
        self.literal: dict[tuple[int, str], list[AclBinding]] = {}
        self.prefixed: dict[int, list[AclBinding]] = {}
        for acl in self.acls:
            self.by_type.setdefault(acl.resource_type, []).append(acl)
            if acl.pattern_type == PatternType.LITERAL:
                self.literal.setdefault((acl.resource_type, acl.resource_name), []).append(acl)
            else:
                self.prefixed.setdefault(acl.resource_type, []).append(acl)

    def matching(self, resource_type: int, name: str) -> list[AclBinding]:
        found = self.literal.get((resource_type, name), [])
        if name != WILDCARD:
            found = found + self.literal.get((resource_type, WILDCARD), [])
        return found + [a for a in self.prefixed.get(resource_type, ())
                        if name.startswith(a.resource_name)]


class Authorizer:
    """The ACLs in force in one process and the decisions over them.
    ``stats`` (a metrics.RequestStats, or None) counts denials, and the
    denials the audit log left out. Callable from several threads (the
    module's docstring says how)."""

    def __init__(self, super_users=(), allow_everyone_if_no_acl_found: bool = False,
                 acls=(), stats=None):
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.stats = stats
        self.audit = AuditLog(stats)
        # a denial's count is a read-modify-write of a dict entry, and the
        # audit log's window a few fields: several threads lose updates
        # without it (an allowed decision never takes it)
        self._lock = threading.Lock()
        self._index = _AclIndex(())
        self.replace(acls)

    @property
    def acls(self) -> tuple[AclBinding, ...]:
        return self._index.acls

    def replace(self, acls) -> None:
        self._index = _AclIndex(acls)       # one store: a decision sees the old set or the new

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, audit: bool = True) -> bool:
        """Whether ``principal`` from ``host`` may do ``operation`` on the
        resource; a denial is logged and counted unless ``audit`` is false
        (a filter, such as Metadata hiding topics, is not an attempt)."""
        allowed = self._decide(principal, host, operation, resource_type, name)
        if not allowed and audit:
            self.denied(principal, host, operation, resource_type, name)
        return allowed

    def _decide(self, principal, host, operation, resource_type, name) -> bool:
        if principal in self.super_users:
            return True
        matching = self._index.matching(resource_type, name)
        if not matching:
            return self.allow_everyone_if_no_acl_found
        for a in matching:
            if (a.permission == AclPermissionType.DENY and a.applies_to(principal, host)
                    and a.operation in (operation, AclOperation.ALL)):
                return False
        allowing = _IMPLYING.get(operation, (operation,))
        return any(a.permission == AclPermissionType.ALLOW and a.applies_to(principal, host)
                   and (a.operation == AclOperation.ALL or a.operation in allowing)
                   for a in matching)

    def authorize_any(self, principal: str, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of
        ``resource_type`` (Kafka's authorizeByResourceType, used for
        idempotent producers): an ALLOW for it on any such resource that no
        DENY on every resource (literal ``*``) takes back."""
        if principal in self.super_users:
            return True
        acls = self._index.by_type.get(resource_type, ())
        if not acls:
            return self.allow_everyone_if_no_acl_found
        for a in acls:
            if (a.permission == AclPermissionType.DENY and a.applies_to(principal, host)
                    and a.operation in (operation, AclOperation.ALL)
                    and a.pattern_type == PatternType.LITERAL and a.resource_name == WILDCARD):
                return False
        return any(a.permission == AclPermissionType.ALLOW and a.applies_to(principal, host)
                   and a.operation in (operation, AclOperation.ALL) for a in acls)

    def denied(self, principal: str, host: str, operation: AclOperation,
               resource_type: ResourceType, name: str) -> None:
        """Kafka's authorizer log line for a denial, and its count."""
        rt = "Cluster" if resource_type == ResourceType.CLUSTER else _title(resource_type.name)
        op = _title(operation.name)
        with self._lock:
            # at most a few lines logged per interval (AuditLog): holding
            # the lock while one is written costs a burst nothing
            self.audit.denied("Principal = %s is Denied Operation = %s from host = %s on "
                              "resource = %s:LITERAL:%s", principal, op, host, rt, name)
            if self.stats is not None:
                key = f"{rt}:{op}"
                self.stats.denied[key] = self.stats.denied.get(key, 0) + 1


def acls_to_json(acls) -> list:
    """ACLs as the control channel and the ACL file carry them."""
    return [a.to_json() for a in acls]


def acls_from_json(raw: list) -> list[AclBinding]:
    return [AclBinding.from_json(a) for a in raw]


def _title(name: str) -> str:
    """DESCRIBE_CONFIGS -> DescribeConfigs, Kafka's spelling in logs and tools."""
    return "".join(part.capitalize() for part in name.split("_"))


def _principals(value) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(";") if v.strip()]
    return [str(v).strip() for v in value or ()]


def authorizer_from_config(config, stats=None) -> Authorizer | None:
    """The process's authorizer, None when ``authorizer_enabled`` is off."""
    if not config.authorizer_enabled:
        return None
    supers = _principals(config.super_users)
    # the brokers' own native traffic, under CURVE (a key file, or security
    # on: security.native_security); no one else can be it (SASL users may
    # not take the name, credentials.py)
    from kafkalite.protocol.curve import BROKER_PRINCIPAL
    supers.append(BROKER_PRINCIPAL)
    return Authorizer(supers, config.allow_everyone_if_no_acl_found, stats=stats)


def validate(config) -> None:
    """Raise InvalidConfigurationError when the authorizer's settings cannot work."""
    for name in ("authorizer_enabled", "allow_everyone_if_no_acl_found"):
        if not isinstance(getattr(config, name), bool):
            raise errors.InvalidConfigurationError(f"{name} must be true or false, not "
                                                   f"{getattr(config, name)!r}")
    if not isinstance(config.super_users, str):
        raise errors.InvalidConfigurationError("super_users must be a string of principals "
                                               "separated by ';'")
    for p in _principals(config.super_users):
        kind, _, who = p.partition(":")
        if not kind or not who:
            raise errors.InvalidConfigurationError(
                f"super_users: {p!r} is not a principal (Type:name, e.g. User:admin; "
                f"separate several with ';')")
