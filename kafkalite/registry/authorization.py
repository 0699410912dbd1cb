"""What each registry request asks of the server's authorizer, as the user logged in.

Confluent's RBAC names a registry resource type "Subject" (operations
Read, Write, Delete, Describe, DescribeConfigs, AlterConfigs) and puts the
global config and mode under the cluster. Kafka's ACL model has no such
type, and ``kafkalite acls`` (kafka-acls.sh's flags, over confluent-kafka's
AdminClient, whose resource types are Kafka's) could not name one, so a
subject is a resource of Kafka's TOPIC type whose name is
``subject:<subject>``: no topic can have that name (``:`` is not allowed
in a topic name), a PREFIXED ACL on ``subject:`` covers every subject and
one on ``subject:orders-`` a family, and a Kafka operator grants it as any
topic ACL::

    kafkalite acls add --allow-principal User:alice --operation Write \\
        --topic subject:orders-value

(an ACL on every topic, the literal ``*``, covers every subject too.)
What each endpoint needs (``RULES`` below, one per route of rest.py):

- register (``POST /subjects/{s}/versions``): Write on the subject;
- a schema's references (register, look up, check compatibility): Read on
  each subject they name; one the user may not Describe is answered as a
  subject that is not there (rest.py ``_readable_references``);
- read a subject's versions, a version, its schema, its referencers, look a
  schema up (``POST /subjects/{s}``), check compatibility against it: Read;
- delete a version or the subject (soft or permanent): Delete;
- a subject's compatibility level or mode: DescribeConfigs to read,
  AlterConfigs to set or delete (Kafka's AlterConfigs implies its
  DescribeConfigs, and the authorizer does so here too);
- the global ones (``/config``, ``/mode``): DescribeConfigs and
  AlterConfigs on the cluster, as Kafka's broker configs are;
- ``GET /schemas/ids/{id}`` (and ``/schema``): Read on some subject the
  schema is registered under (soft-deleted versions count);
- lists: ``GET /subjects`` and ``/schemas/ids/{id}/subjects|versions``
  keep the subjects the user may Describe (Read, Write, Delete imply it),
  left out unaudited, as Kafka's Metadata leaves out topics;
- by id, an id none of whose subjects the user may Describe is answered
  as an id never given (40403, rest.py ``_hidden``), never a 403 naming
  one: ids are sequential, and walking them must reveal no hidden subject;
- ``/``, ``/schemas/types``, ``/contexts``: any user who logged in.

A denial is HTTP 403 with Confluent's body ``{"error_code": 40301,
"message": "User:alice is denied operation Write on Subject: x"}``,
logged and counted by the authorizer as a Kafka request's is. A super
user and ``allow_everyone_if_no_acl_found`` are the authorizer's, so they
act as on a Kafka listener.

Where the decision comes from: the login in front of the registry, through
kafkalite/http_access.py (the one authorization layer of the HTTP apps);
without it (security off: anonymous access; or the authorizer off)
everything is allowed. This module never imports ``kafkalite.server``.

Who may call: rest.py, on the HTTP server's threads; an ``Access`` is one
request's.
"""
from __future__ import annotations

from dataclasses import dataclass

from kafkalite.http_access import CLUSTER_NAME, RequestAccess
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.registry.errors import RegistryError

SUBJECT_PREFIX = "subject:"           # a subject's ACL resource: TOPIC subject:<name>
AUTHORIZATION_FAILED = 40301          # Confluent's: HTTP 403


def resource_name(subject: str) -> str:
    """The TOPIC resource name the ACLs of ``subject`` name."""
    return SUBJECT_PREFIX + subject


@dataclass(frozen=True)
class Rule:
    """What a route needs: ``operation`` on the route's subject (its first
    path group), or on the cluster when the route names none (``/config``,
    ``/mode``). ``filtered``: the handler decides itself, through the
    ``access`` it is handed (lists, schemas by id); ``operation`` None and
    not filtered: open to any user who logged in."""

    operation: Op | None = None
    filtered: bool = False


OPEN = Rule()
FILTERED = Rule(filtered=True)


def _title(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


class Access(RequestAccess):
    """One request's decisions for the user of ``environ``: a subject is
    the TOPIC resource ``subject:<name>``."""

    __slots__ = ()
    CLUSTER = Res.CLUSTER

    def apply(self, rule: Rule, args) -> None:
        """A route's rule before its handler runs: 40301 when denied."""
        if rule.operation is None:
            return
        if args:
            self.require_subject(rule.operation, args[0])
        else:
            self.require_cluster(rule.operation)

    def may_subject(self, operation: Op, subject: str, audit: bool = True) -> bool:
        return self.may(operation, Res.TOPIC, resource_name(subject), audit)

    def require_subject(self, operation: Op, subject: str) -> None:
        if not self.may_subject(operation, subject):
            raise self.denied(operation, f"Subject: {subject}")

    def require_cluster(self, operation: Op) -> None:
        if not self.may_cluster(operation):
            raise self.denied(operation, f"Cluster: {CLUSTER_NAME}")

    def sees_subject(self, subject: str) -> bool:
        """Whether a list keeps ``subject`` (a filter is not an attempt:
        not audited)."""
        return self.may_subject(Op.DESCRIBE, subject, audit=False)

    def denied(self, operation: Op, what: str) -> RegistryError:
        return RegistryError(AUTHORIZATION_FAILED, f"{self.principal or 'User'} is denied "
                                                   f"operation {_title(operation.name)} on "
                                                   f"{what}")
