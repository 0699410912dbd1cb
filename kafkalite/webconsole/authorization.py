"""What each console action asks of the authorizer, as the user logged in.

The console's clients reach the node with the server's own key pair (a
super user), so the ACLs are applied here, before an action runs, as
Kafka applies them to the equivalent Kafka request
(server/auth/request_authorization.py is the broker's side of the same
mapping):

- ``RULES``: the one table, action -> what it needs. An action is a route
  of app.py's ``ROUTES``; a route whose action has no rule is refused
  (403), so a route added without one is closed, not open (and
  tests/webconsole/test_authorization.py fails for it).
- A ``Need`` with ``REFUSE`` is the action's own resource: denied, the
  action is answered 403 (``Denied``, naming the operation and resource)
  and does nothing. The resource is the cluster, the route's ``<topic>`` or
  ``<group>`` (checked by app.py before the action runs), or names the
  action finds in the request body (the new topic's, the topics whose
  offsets are reset), which the action passes to ``Access.require``
  before it does anything. Denials are audited (the authorizer's log).
- A ``Need`` with ``FILTER`` is about what an answer lists: resources the
  user may not act on are left out silently, as Kafka's Metadata leaves out
  topics a principal may not describe (not audited: a filter is not an
  attempt).
- ``or_cluster``: the same operation on the cluster allows it for every
  resource of the type (Kafka's CreateTopics with Create on the cluster,
  ListGroups with Describe on the cluster).

Where the decision comes from: the login in front of the console, through
kafkalite/http_access.py (the one authorization layer of the HTTP apps);
without it (security off, or the authorizer off) every action is
allowed. This module never imports ``kafkalite.server``.

Who may call: app.py, on the HTTP server's threads (an ``Access`` is one
request's).
"""
from __future__ import annotations

from dataclasses import dataclass

from kafkalite.http_access import (  # noqa: F401 -- the environ's names, for tests
    CLUSTER_NAME, ENVIRON_AUTHORIZE, ENVIRON_PRINCIPAL, RequestAccess)
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res

REFUSE = "refuse"       # the action's own resource: denied -> 403, nothing done
FILTER = "filter"       # resources an answer lists: denied ones left out


@dataclass(frozen=True)
class Need:
    operation: Op
    resource_type: Res
    scope: str                      # REFUSE or FILTER
    or_cluster: bool = False        # the operation on the cluster allows every resource


# action -> its needs. The operations are those Kafka checks for the
# request(s) the action makes (kafka-docs: "Operations and Resources on
# Protocols"), named in the comment.
RULES: dict[str, tuple[Need, ...]] = {
    # the page and its scripts: nothing of the cluster is in them
    "page": (),
    # Metadata (topics), ListGroups (groups): counts over what the user may describe
    "cluster": (Need(Op.DESCRIBE, Res.TOPIC, FILTER),
                Need(Op.DESCRIBE, Res.GROUP, FILTER, or_cluster=True)),
    # node-wide rates and metric families: what /metrics needs (http_login.may_scrape)
    "throughput": (Need(Op.DESCRIBE, Res.CLUSTER, REFUSE),),
    "metrics": (Need(Op.DESCRIBE, Res.CLUSTER, REFUSE),),
    # Metadata for all topics
    "list_topics": (Need(Op.DESCRIBE, Res.TOPIC, FILTER),),
    # CreateTopics
    "create_topic": (Need(Op.CREATE, Res.TOPIC, REFUSE, or_cluster=True),),
    # Metadata + ListOffsets; DescribeConfigs (the configs are left out without it)
    "describe_topic": (Need(Op.DESCRIBE, Res.TOPIC, REFUSE),
                       Need(Op.DESCRIBE_CONFIGS, Res.TOPIC, FILTER)),
    # DeleteTopics
    "delete_topic": (Need(Op.DELETE, Res.TOPIC, REFUSE),),
    # IncrementalAlterConfigs
    "alter_topic_configs": (Need(Op.ALTER_CONFIGS, Res.TOPIC, REFUSE),),
    # Fetch (ListOffsets' Describe is implied by Read); a record is shown
    # decoded through the registry only when the user may Read its schema's
    # subject (the registry's TOPIC ``subject:<name>``), else as bytes
    "read_records": (Need(Op.READ, Res.TOPIC, REFUSE),
                     Need(Op.READ, Res.TOPIC, FILTER)),
    # the registry's subjects of a topic, of all topics: those the user may
    # Read (the registry itself also decides, asked as the user)
    "topic_subjects": (Need(Op.DESCRIBE, Res.TOPIC, REFUSE),
                       Need(Op.READ, Res.TOPIC, FILTER)),
    "list_subjects": (Need(Op.READ, Res.TOPIC, FILTER),),
    # ListGroups + DescribeGroups; lag summed over topics the user may describe
    "list_groups": (Need(Op.DESCRIBE, Res.GROUP, FILTER, or_cluster=True),
                    Need(Op.DESCRIBE, Res.TOPIC, FILTER)),
    # DescribeGroups; OffsetFetch of all the group's topics (filtered, as Kafka's)
    "describe_group": (Need(Op.DESCRIBE, Res.GROUP, REFUSE),
                       Need(Op.DESCRIBE, Res.TOPIC, FILTER)),
    # OffsetCommit (Read on the group and on each topic reset, a dry run too:
    # it shows what the change would do); by default the topics with
    # committed offsets the user may describe (OffsetFetch)
    "reset_offsets": (Need(Op.READ, Res.GROUP, REFUSE),
                      Need(Op.READ, Res.TOPIC, REFUSE),
                      Need(Op.DESCRIBE, Res.TOPIC, FILTER)),
}


def _title(name: str) -> str:
    return name.replace("_", " ").title().replace(" ", "")


def type_name(resource_type: Res) -> str:
    # CLUSTER and BROKER are one number (4), which the enum calls BROKER
    return "CLUSTER" if resource_type == Res.CLUSTER else resource_type.name


class Denied(Exception):
    """An action refused: answered 403 with ``as_json()``."""

    status = 403
    _CODES = {Res.TOPIC: "TOPIC_AUTHORIZATION_FAILED", Res.GROUP: "GROUP_AUTHORIZATION_FAILED",
              Res.CLUSTER: "CLUSTER_AUTHORIZATION_FAILED"}

    def __init__(self, principal: str | None, operation: Op, resource_type: Res, name: str):
        self.operation, self.resource_type, self.name = operation, resource_type, name
        what = "the cluster" if resource_type == Res.CLUSTER else \
            f"{resource_type.name.lower()} {name!r}"
        super().__init__(f"{principal or 'this user'} may not {_title(operation.name)} {what}")

    def as_json(self) -> dict:
        return {"error": str(self), "code": self._CODES.get(self.resource_type, "UNKNOWN"),
                "operation": self.operation.name,
                "resource": {"type": type_name(self.resource_type), "name": self.name}}


class NoRule(Exception):
    """An action without a rule (a bug): refused, as Denied is."""

    status = 403

    def as_json(self) -> dict:
        return {"error": str(self), "code": "CLUSTER_AUTHORIZATION_FAILED"}


class Access(RequestAccess):
    """One request's decisions: ``action``'s rule applied for the user of
    ``environ``. ``check_route`` and ``require`` raise ``Denied``; ``sees``
    filters. Asking about a need the rule does not declare raises
    ``KeyError``: a rule and its action must agree (the tests find it)."""

    __slots__ = ("action", "needs", "environ", "_unchecked")
    CLUSTER = Res.CLUSTER

    def __init__(self, environ: dict, action: str):
        if action not in RULES:
            raise NoRule(f"the console's {action!r} has no authorization rule")
        super().__init__(environ)
        self.action = action
        self.needs = RULES[action]
        self.environ = environ
        self._unchecked = {(n.operation, n.resource_type) for n in self.needs
                           if n.scope == REFUSE}

    def check_route(self, params: dict) -> None:
        """The REFUSE needs on the cluster and on the route's ``<topic>`` /
        ``<group>``; the rest are the action's to ``require``."""
        named = {Res.TOPIC: params.get("topic"), Res.GROUP: params.get("group")}
        for need in self.needs:
            if need.scope != REFUSE:
                continue
            if need.resource_type == Res.CLUSTER:
                self._require(need, CLUSTER_NAME)
            elif named.get(need.resource_type) is not None:
                self._require(need, named[need.resource_type])

    def require(self, operation: Op, resource_type: Res, names) -> None:
        """Refuse unless the user may do ``operation`` on each of ``names``
        (given by the action: names from the request body)."""
        need = self._need(operation, resource_type, REFUSE)
        for name in names:
            self._require(need, name)
        self._unchecked.discard((operation, resource_type))   # also for no names

    def sees(self, operation: Op, resource_type: Res, or_cluster: bool = False):
        """A predicate name -> bool: whether a resource of the type is kept in
        the answer (on the cluster too when the rule's need says so)."""
        need = self._need(operation, resource_type, FILTER)
        return super().sees(operation, resource_type, need.or_cluster)

    def unchecked(self) -> list[str]:
        """REFUSE needs nothing checked (a bug in the action, when it returned)."""
        return sorted(f"{op.name} on {type_name(rt)}" for op, rt in self._unchecked)

    def _need(self, operation: Op, resource_type: Res, scope: str) -> Need:
        for need in self.needs:
            if (need.operation, need.resource_type, need.scope) == (
                    operation, resource_type, scope):
                return need
        raise KeyError(f"the rule of {self.action!r} has no {scope} need "
                       f"{operation.name} on {type_name(resource_type)}")

    def _require(self, need: Need, name: str) -> None:
        self._unchecked.discard((need.operation, need.resource_type))
        if need.or_cluster and self.may_cluster(need.operation, audit=False):
            return
        if not self.may(need.operation, need.resource_type, name):
            raise Denied(self.principal, need.operation, need.resource_type, name)
