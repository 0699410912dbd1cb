"""What each Kafka API asks of the authorizer before its handler runs.

``RequestGate.check(ctx, body)`` is called by the dispatcher (requests.py)
for every request that arrived on a Kafka listener (directly or relayed
from a worker), and on the native protocol under CURVE, when the
authorizer is on, before the handler. It does what
Kafka's KafkaApis does around its handlers:

- a resource the principal may not act on is taken out of the request, and
  its answer (TOPIC_AUTHORIZATION_FAILED 29, GROUP_AUTHORIZATION_FAILED 30,
  CLUSTER_AUTHORIZATION_FAILED 31, TRANSACTIONAL_ID_AUTHORIZATION_FAILED 53)
  is put into the handler's response when it is sent (``ctx.amend``), so
  the handler never sees, and never changes, what was denied;
- a request denied as a whole raises the error (the dispatcher answers it
  with the response's top-level ``error_code``), or, for APIs whose
  response has none (Produce, OffsetCommit, TxnOffsetCommit, ...), answers
  every resource with the error; where nothing is left to serve, the check
  returns the response itself and the handler is not called;
- lists are filtered silently where Kafka filters them: Metadata for all
  topics, ListGroups, OffsetFetch of all a group's topics;
- the ``*_authorized_operations`` fields (KIP-430) of Metadata,
  DescribeCluster, DescribeGroups and DescribeTopicPartitions are filled in
  (with the authorizer off they keep answering "omitted");
- while ``acls_behind`` (a worker that learned of an ACL version it has
  not applied: server/controller/acl_control.py), nothing is decided with
  the old ACLs: every request but a super user's is answered with the
  retriable stale_acls.STALE_ACLS_CODE where its check would have denied
  (each resource, or the whole request), and nothing else of it is served.

The checks per API are Kafka 3.x's (see ``_CHECKS``), and for the APIs
of KIP-932 Kafka 4.x's: the share coordinator's (InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState,
ReadShareGroupStateSummary) are brokers' APIs, as WriteTxnMarkers and a
follower's Fetch are, and need ClusterAction on the cluster; denied, every
partition named is answered CLUSTER_AUTHORIZATION_FAILED and the share
coordinator never sees the request. Only the APIs of ``_NO_CHECK``
(ApiVersions and the SASL APIs, answered before authentication) ask the
authorizer nothing; an API in neither table is denied as a whole, so an
API added without a rule is closed, not open (and
tests/server/test_request_authorization_rules.py fails for it). Requests on the
native ZeroMQ protocol are checked the same way when CURVE is on
(``native_curve_secret_key_file``; protocol/curve.py): the ZAP handler
maps each client's public key to its principal, which rides on the
context as a Kafka listener's does, and the brokers' own native traffic
(replica fetches, transaction markers, verification) uses the server's
key, whose principal (protocol/curve.py's BROKER_PRINCIPAL) is a super user;
the ingest gateway's Produce requests, made with that key, name the
publisher they forward for (``request_principal``), and the dispatcher
(requests.py) makes that principal the request's before these checks. With
the authorizer on (security on) the native ports are always CURVE: without
a key file they take the node's key pair of the run only (the server's own
processes and its owner's tools, a super user; server/auth/security.py
native_security). Only with security off is the native protocol unchecked.

Who may call: the dispatcher, on its process's event-loop thread.
"""
from __future__ import annotations

import uuid

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ConfigResourceType, CoordinatorType
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.auth import stale_acls
from kafkalite.server.auth.authorizer import CLUSTER_NAME, Authorizer

TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
GROUP_DENIED = errors.GroupAuthorizationFailedError.code
CLUSTER_DENIED = errors.ClusterAuthorizationFailedError.code
TXN_DENIED = errors.TransactionalIdAuthorizationFailedError.code
NOT_ATTEMPTED = errors.OperationNotAttemptedError.code
TOKEN_DENIED = errors.DelegationTokenAuthorizationFailedError.code
TOKEN_NOT_ALLOWED = errors.DelegationTokenRequestNotAllowedError.code


class RequestGate:
    """The checks of one process. ``topic_name_of(uuid) -> name | None``
    names topics given by id (Fetch v13+); ``topic_exists(name)`` tells
    Metadata's auto-creation apart (the supervisor's)."""

    def __init__(self, authorizer: Authorizer, topic_name_of=None, topic_exists=None):
        self.authorizer = authorizer
        self.topic_name_of = topic_name_of or (lambda topic_id: None)
        self.topic_exists = topic_exists or (lambda name: True)
        self.acls_behind = False    # set by the worker (acl_control.py's versions)

    def check(self, ctx, body: dict) -> dict | None:
        """None: the handler serves what is left of ``body``; a dict: the
        response itself (nothing was left to serve)."""
        if ctx.api_key in _NO_CHECK:
            return None
        check = _CHECKS.get(ctx.api_key)
        if self.acls_behind and ctx.principal not in self.authorizer.super_users:
            return self._behind(check, ctx, body)
        if check is not None:
            return check(_Request(self, ctx), body)
        # an API nobody wrote a rule for: closed until someone does
        raise errors.ClusterAuthorizationFailedError(
            f"{ctx.principal} may not use API {ctx.api_key}: it has no authorization rule")

    def _behind(self, check, ctx, body: dict) -> dict | None:
        """The API's check as if every decision were a denial (none is
        made, nor audited), each denial answered stale_acls.STALE_ACLS_CODE."""
        why = "this broker's ACLs are out of date; retry (it is catching up)"
        if check is None:
            raise errors.NotLeaderOrFollowerError(why)
        request = _Behind(self, ctx)
        try:
            result = check(request, body)
        except errors.KafkaError as exc:
            if exc.code in stale_acls.DENIED_CODES:
                raise errors.NotLeaderOrFollowerError(why) from None
            raise
        request.amend(stale_acls.retriable)
        return result


class _Request:
    """One request's questions to the authorizer."""

    __slots__ = ("gate", "ctx", "principal", "host")

    def __init__(self, gate: RequestGate, ctx):
        self.gate, self.ctx = gate, ctx
        self.principal, self.host = ctx.principal, ctx.client_host.strip("[]")   # IPv6

    def may(self, op: Op, res: Res, name: str, audit: bool = True) -> bool:
        return self.gate.authorizer.authorize(self.principal, self.host, op, res, name,
                                              audit=audit)

    def may_cluster(self, op: Op, audit: bool = True) -> bool:
        return self.may(op, Res.CLUSTER, CLUSTER_NAME, audit)

    def require(self, op: Op, res: Res, name: str) -> None:
        if not self.may(op, res, name):
            raise _ERRORS[res](f"{self.principal} may not {_verb(op)} {_noun(res)} {name!r}")

    def require_cluster(self, op: Op) -> None:
        self.require(op, Res.CLUSTER, CLUSTER_NAME)

    def amend(self, fn) -> None:
        """Run ``fn(response)`` on the handler's response before it is sent."""
        before = self.ctx.amend
        self.ctx.amend = fn if before is None else (lambda body: (before(body), fn(body)))

    def hide(self, field: str, res: Res, key: str) -> None:
        """Leave out of the response's ``field`` the entries whose ``key``
        names a resource the principal may not describe (a listing: the
        left-out entries are not attempts, so not audited)."""
        self.amend(lambda resp: resp.__setitem__(field, [
            e for e in resp.get(field) or ()
            if self.may(Op.DESCRIBE, res, e[key], audit=False)]))

    def operations(self, res: Res, name: str) -> int:
        """KIP-430's authorized operations: a bit (1 << operation) for each
        operation of the resource type the principal may do."""
        bits = 0
        for op in _OPERATIONS[res]:
            if self.may(op, res, name, audit=False):
                bits |= 1 << op
        return bits

    def split(self, body: dict, field: str, allowed, name=lambda t: t["name"]) -> list:
        """Keep in ``body[field]`` the entries ``allowed(name)``; the others, returned."""
        entries = body.get(field)
        if not entries:
            return []
        kept, denied = [], []
        for entry in entries:
            (kept if allowed(name(entry)) else denied).append(entry)
        body[field] = kept
        return denied

    def add_to(self, field: str, entries: list) -> None:
        if entries:
            self.amend(lambda body: body.setdefault(field, []).extend(entries)
                       if body.get(field) is not None else body.__setitem__(field, entries))


class _Behind(_Request):
    """A request's questions while the ACLs are behind: nothing is allowed,
    nothing audited (no decision was made)."""

    __slots__ = ()

    def may(self, op: Op, res: Res, name: str, audit: bool = True) -> bool:
        return False


# The operations each resource type has (Kafka's AclEntry.supportedOperations).
_OPERATIONS = {
    Res.TOPIC: (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
                Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    Res.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    Res.CLUSTER: (Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                  Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE),
}
_ERRORS = {Res.TOPIC: errors.TopicAuthorizationFailedError,
           Res.GROUP: errors.GroupAuthorizationFailedError,
           Res.CLUSTER: errors.ClusterAuthorizationFailedError,
           Res.TRANSACTIONAL_ID: errors.TransactionalIdAuthorizationFailedError}


def _verb(op: Op) -> str:
    return op.name.lower().replace("_", " ")


def _noun(res: Res) -> str:
    return "the cluster" if res == Res.CLUSTER else res.name.lower().replace("_", " ")


def _partitions_with(code: int, topics, name_field: str, parts_field: str, index_field: str,
                     out_name: str, out_parts: str, out_index: str, **extra) -> list:
    """Response topics answering every partition of ``topics`` with ``code``."""
    return [{out_name: t[name_field], **({"topic_id": t["topic_id"]} if "topic_id" in t else {}),
             out_parts: [{out_index: p[index_field] if isinstance(p, dict) else p,
                          "error_code": code, **extra} for p in t[parts_field]]}
            for t in topics]


# ---- data APIs (the workers') ------------------------------------------------------------------

def _produce(r: _Request, body: dict) -> None:
    if r.ctx.api_version >= 13:
        # v13 names topics by id (KIP-516); named here as the handler names
        # them (per_partition.name_produce_topics), "" for an unknown id
        for t in body.get("topic_data") or ():
            t["name"] = r.gate.topic_name_of(t.get("topic_id")) or ""
    txn = body.get("transactional_id")
    if txn is not None and not r.may(Op.WRITE, Res.TRANSACTIONAL_ID, txn):
        denied, code = body["topic_data"], TXN_DENIED
        body["topic_data"] = []
    else:
        # an unknown id is the handler's UNKNOWN_TOPIC_ID, answered before the authorizer
        denied, code = r.split(body, "topic_data", lambda t: t == "" and r.ctx.api_version >= 13
                               or r.may(Op.WRITE, Res.TOPIC, t)), TOPIC_DENIED
    r.add_to("responses", _partitions_with(code, denied, "name", "partition_data", "index",
                                           "name", "partition_responses", "index",
                                           base_offset=-1, log_append_time_ms=-1,
                                           log_start_offset=-1))


def _fetch(r: _Request, body: dict) -> None:
    if body.get("replica_id", -1) >= 0 or (body.get("replica_state") or {}).get(
            "replica_id", -1) >= 0:
        r.require_cluster(Op.CLUSTER_ACTION)     # a follower's fetch
        return

    def name(t: dict) -> str:
        if t.get("topic"):
            return t["topic"]
        topic_id = t.get("topic_id")
        return r.gate.topic_name_of(topic_id) if topic_id is not None else None

    def allowed(n) -> bool:
        return n is None or r.may(Op.READ, Res.TOPIC, n)   # an unknown id: the handler's answer

    denied = r.split(body, "topics", allowed, name)
    # an incremental fetch session's partitions the request does not name
    # are checked by the fetch path, at every fetch, as Kafka's handleFetch does
    r.ctx.topic_readable = lambda n: r.may(Op.READ, Res.TOPIC, n)
    r.ctx.denied_topics = denied
    r.add_to("responses", _partitions_with(TOPIC_DENIED, denied, "topic", "partitions",
                                           "partition", "topic", "partitions",
                                           "partition_index", high_watermark=-1,
                                           last_stable_offset=-1, log_start_offset=-1))


def _topic_partitions(op: Op, req_topics: str, name_field: str, parts: str, index: str,
                      resp_topics: str, out_name: str, out_parts: str, out_index: str, **extra):
    """A check for an API of topics and partitions: ``op`` on each topic."""
    def check(r: _Request, body: dict) -> None:
        denied = r.split(body, req_topics, lambda t: r.may(op, Res.TOPIC, t),
                         lambda t: t[name_field])
        r.add_to(resp_topics, _partitions_with(TOPIC_DENIED, denied, name_field, parts, index,
                                               out_name, out_parts, out_index, **extra))
    return check


# ---- metadata and admin (the supervisor's) -----------------------------------------------------

def _authorized_operations(r: _Request, body: dict) -> None:
    """Metadata's and DescribeCluster's *_authorized_operations, when asked."""
    if body.get("include_topic_authorized_operations"):
        def topics(resp: dict) -> None:
            for t in resp.get("topics") or ():
                if not t.get("error_code") and t.get("name"):
                    t["topic_authorized_operations"] = r.operations(Res.TOPIC, t["name"])
        r.amend(topics)
    if body.get("include_cluster_authorized_operations"):
        r.amend(lambda resp: resp.__setitem__("cluster_authorized_operations",
                                              r.operations(Res.CLUSTER, CLUSTER_NAME)))


def _metadata(r: _Request, body: dict) -> None:
    _authorized_operations(r, body)
    topics = body.get("topics")
    if topics is None or (not topics and r.ctx.api_version == 0):   # v0: [] is every topic
        r.hide("topics", Res.TOPIC, "name")    # those not describable are not there
        return
    may_create = None
    denied = []
    kept = []
    for t in topics:
        name = t.get("name")
        if name is None:             # by id: answered by the handler, then filtered
            kept.append(t)
            continue
        if not r.gate.topic_exists(name) and body.get("allow_auto_topic_creation"):
            if may_create is None:
                may_create = r.may_cluster(Op.CREATE, audit=False)
            if not (may_create or r.may(Op.CREATE, Res.TOPIC, name)):
                denied.append(name)
                continue
        if r.may(Op.DESCRIBE, Res.TOPIC, name):
            kept.append(t)
        else:
            denied.append(name)
    body["topics"] = kept

    asked = None if any(t.get("name") is None for t in topics) else {t["name"] for t in kept}

    def finish(resp: dict) -> None:
        # by its id and not describable: denied by id ("not considered sensitive", Kafka)
        out = [t if t.get("name") is None or t.get("error_code")
               or r.may(Op.DESCRIBE, Res.TOPIC, t["name"]) else
               {"error_code": TOPIC_DENIED, "name": None, "topic_id": t.get("topic_id"),
                "is_internal": False, "partitions": []}
               for t in resp.get("topics") or ()
               if asked is None or t.get("name") in asked]       # v0: [] would be every topic
        out.extend({"error_code": TOPIC_DENIED, "name": n, "is_internal": False,
                    "partitions": []} for n in denied)
        resp["topics"] = out
    r.amend(finish)


def _create_topics(r: _Request, body: dict) -> None:
    if r.may_cluster(Op.CREATE, audit=False):
        return
    denied = r.split(body, "topics", lambda t: r.may(Op.CREATE, Res.TOPIC, t))
    r.add_to("topics", [{"name": t["name"], "error_code": TOPIC_DENIED,
                         "error_message": f"{r.principal} may not create topic {t['name']!r}",
                         "num_partitions": -1, "replication_factor": -1, "configs": None}
                        for t in denied])


def _delete_topics(r: _Request, body: dict) -> None:
    def message(name):
        return f"{r.principal} may not delete topic {name!r}"
    if body.get("topics"):                     # v6+: by name or id
        def name(t):
            return t.get("name") or r.gate.topic_name_of(t.get("topic_id")) or ""
        denied = r.split(body, "topics",
                         lambda n: n == "" or r.may(Op.DELETE, Res.TOPIC, n), name)
        r.add_to("responses", [{"name": name(t), "topic_id": t.get("topic_id"),
                                "error_code": TOPIC_DENIED, "error_message": message(name(t))}
                               for t in denied])
    if body.get("topic_names"):
        denied = r.split(body, "topic_names", lambda n: r.may(Op.DELETE, Res.TOPIC, n),
                         lambda n: n)
        r.add_to("responses", [{"name": n, "error_code": TOPIC_DENIED,
                                "error_message": message(n)} for n in denied])


def _create_partitions(r: _Request, body: dict) -> None:
    denied = r.split(body, "topics", lambda t: r.may(Op.ALTER, Res.TOPIC, t))
    r.add_to("results", [{"name": t["name"], "error_code": TOPIC_DENIED,
                          "error_message": f"{r.principal} may not alter topic {t['name']!r}"}
                         for t in denied])


def _configs(op: Op, out_field: str):
    """DescribeConfigs / AlterConfigs / IncrementalAlterConfigs: ``op`` on
    each topic or group, or on the cluster for broker (and broker logger)
    resources."""
    acl_resource = {ConfigResourceType.TOPIC: Res.TOPIC, ConfigResourceType.GROUP: Res.GROUP,
                    ConfigResourceType.BROKER: Res.CLUSTER,
                    ConfigResourceType.BROKER_LOGGER: Res.CLUSTER}
    codes = {Res.TOPIC: TOPIC_DENIED, Res.GROUP: GROUP_DENIED, Res.CLUSTER: CLUSTER_DENIED}

    def check(r: _Request, body: dict) -> None:
        def allowed(res: dict) -> bool:
            kind = acl_resource.get(res["resource_type"])
            if kind is None:
                return True                      # the handler answers what it does not serve
            return r.may(op, kind, CLUSTER_NAME if kind == Res.CLUSTER else res["resource_name"])
        denied = r.split(body, "resources", allowed, lambda res: res)
        r.add_to(out_field, [{
            "error_code": codes[acl_resource[res["resource_type"]]],
            "error_message": f"{r.principal} may not {_verb(op)} of {res['resource_name']!r}",
            "resource_type": res["resource_type"], "resource_name": res["resource_name"],
            **({"configs": []} if out_field == "results" else {})} for res in denied])
    return check


def _cluster(op: Op):
    def check(r: _Request, body: dict) -> None:
        r.require_cluster(op)
    return check


def _describe_log_dirs(r: _Request, body: dict) -> dict | None:
    # denied: no log dirs, and the error (in the response from v3)
    return None if r.may_cluster(Op.DESCRIBE) else {
        "throttle_time_ms": 0, "error_code": CLUSTER_DENIED, "results": []}


def _create_delegation_token(r: _Request, body: dict) -> None:
    """A token for another owner needs CreateTokens on that user (Kafka's
    handleCreateTokenRequest), yielding to cluster_admin's REQUEST_NOT_ALLOWED."""
    owner = f"{body.get('owner_principal_type')}:{body.get('owner_principal_name')}"
    if body.get("owner_principal_name") and owner != r.principal \
            and not r.may(Op.CREATE_TOKENS, Res.USER, owner):
        r.amend(lambda resp: resp.__setitem__("error_code", TOKEN_DENIED) if
                resp["error_code"] != TOKEN_NOT_ALLOWED else None)


def _alter_replica_log_dirs(r: _Request, body: dict) -> dict | None:
    """Alter on the cluster, as Kafka asks; the response has no top-level
    error_code, so denied, every partition named is answered with the
    error (Kafka's getErrorResponse) and the broker moves nothing."""
    if r.may_cluster(Op.ALTER):
        return None
    results: dict[str, list] = {}
    for d in body.get("dirs") or ():
        for t in d["topics"]:
            results.setdefault(t["name"], []).extend(
                {"partition_index": p, "error_code": CLUSTER_DENIED} for p in t["partitions"])
    return {"throttle_time_ms": 0, "results": [{"topic_name": name, "partitions": parts}
                                                for name, parts in results.items()]}


def _write_txn_markers(r: _Request, body: dict) -> dict | None:
    """ClusterAction on the cluster (the transaction coordinator's API); the
    response has no top-level error_code, so denied, every partition of
    every marker is answered with the error, as Kafka's getErrorResponse."""
    if r.may_cluster(Op.CLUSTER_ACTION):
        return None
    return {"markers": [{"producer_id": m["producer_id"], "topics": [
        {"name": t["name"], "partitions": [{"partition_index": p, "error_code": CLUSTER_DENIED}
                                           for p in t["partition_indexes"]]}
        for t in m["topics"]]} for m in body.get("markers") or ()]}


def _elect_leaders(r: _Request, body: dict) -> dict | None:
    """Alter on the cluster; denied, the partitions named are each answered
    with the error (v0 has no top-level error_code) and the top level too."""
    if r.may_cluster(Op.ALTER):
        return None
    message = f"{r.principal} may not alter the cluster"
    return {"throttle_time_ms": 0, "error_code": CLUSTER_DENIED, "replica_election_results": [
        {"topic": t["topic"], "partition_result": [
            {"partition_id": p, "error_code": CLUSTER_DENIED, "error_message": message}
            for p in t["partitions"]]} for t in body.get("topic_partitions") or ()]}


def _delete_records(r: _Request, body: dict) -> None:
    _topic_partitions(Op.DELETE, "topics", "name", "partitions", "partition_index", "topics",
                      "name", "partitions", "partition_index", low_watermark=-1)(r, body)


# ---- groups ------------------------------------------------------------------------------------

def _find_coordinator(r: _Request, body: dict) -> None:
    key_type = body.get("key_type")
    if key_type == CoordinatorType.SHARE:
        # a share-partition's share coordinator (v6+, KIP-932): the partition
        # leaders' question, ClusterAction on the cluster as Kafka asks;
        # before v6 (one key before v4) the handler refuses the key type
        if r.ctx.api_version >= 6 and not r.may_cluster(Op.CLUSTER_ACTION):
            message = f"{r.principal} may not look up share coordinators (ClusterAction)"
            denied = r.split(body, "coordinator_keys", lambda k: False, lambda k: k)
            r.add_to("coordinators", [{"key": k, "node_id": -1, "host": "", "port": -1,
                                       "error_code": CLUSTER_DENIED, "error_message": message}
                                      for k in denied])
        return
    if key_type not in (CoordinatorType.GROUP, CoordinatorType.TRANSACTION, None):
        return                                   # the handler refuses the key type
    res = Res.TRANSACTIONAL_ID if key_type == CoordinatorType.TRANSACTION else Res.GROUP
    if r.ctx.api_version < 4:                    # one key
        r.require(Op.DESCRIBE, res, body.get("key") or "")
        return
    denied = r.split(body, "coordinator_keys", lambda k: r.may(Op.DESCRIBE, res, k),
                     lambda k: k)
    code = TXN_DENIED if res == Res.TRANSACTIONAL_ID else GROUP_DENIED
    r.add_to("coordinators", [{"key": k, "node_id": -1, "host": "", "port": -1,
                               "error_code": code,
                               "error_message": f"{r.principal} may not describe {k!r}"}
                              for k in denied])


def _group(op: Op):
    def check(r: _Request, body: dict) -> None:
        r.require(op, Res.GROUP, body["group_id"])
    return check


def _offset_commit(r: _Request, body: dict):
    group_denied = not r.may(Op.READ, Res.GROUP, body["group_id"])
    if group_denied:
        denied, code = body.get("topics") or [], GROUP_DENIED
    else:
        denied = r.split(body, "topics", lambda t: r.may(Op.READ, Res.TOPIC, t))
        code = TOPIC_DENIED
    r.add_to("topics", _partitions_with(code, denied, "name", "partitions", "partition_index",
                                        "name", "partitions", "partition_index"))
    if group_denied:                 # the coordinator never hears of the group
        return {"throttle_time_ms": 0, "topics": []}
    return None


def _offset_fetch(r: _Request, body: dict) -> dict | None:
    groups = body.get("groups")
    if groups:                                   # v8+: several groups
        denied = r.split(body, "groups", lambda g: r.may(Op.DESCRIBE, Res.GROUP, g),
                         lambda g: g["group_id"])
        r.add_to("groups", [{"group_id": g["group_id"], "topics": [],
                             "error_code": GROUP_DENIED} for g in denied])
    elif r.ctx.api_version >= 2:
        r.require(Op.DESCRIBE, Res.GROUP, body["group_id"])
    elif not r.may(Op.DESCRIBE, Res.GROUP, body["group_id"]):
        # before v2 the response has no error_code: each partition asked has it
        return {"throttle_time_ms": 0, "topics": [
            {"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                 "metadata": "", "error_code": GROUP_DENIED} for p in t["partition_indexes"]]}
            for t in body.get("topics") or ()]}
    asked = {}                                   # group -> topics named, or None: all
    for g in groups or [body]:
        asked[g.get("group_id")] = (None if g.get("topics") is None
                                    else {t["name"] for t in g["topics"]})

    def answer(topics: list, named) -> list:
        out = []
        for t in topics or ():
            if r.may(Op.DESCRIBE, Res.TOPIC, t["name"], audit=named is not None):
                out.append(t)
            elif named is not None:              # asked by name: told; all: not there
                out.append({**t, "partitions": [{**p, "committed_offset": -1,
                                                 "error_code": TOPIC_DENIED}
                                                for p in t["partitions"]]})
        return out

    def finish(resp: dict) -> None:
        if resp.get("groups"):
            for g in resp["groups"]:
                if g.get("error_code") != GROUP_DENIED:
                    g["topics"] = answer(g.get("topics"), asked.get(g["group_id"]))
        if resp.get("topics"):
            resp["topics"] = answer(resp["topics"], asked.get(body.get("group_id")))
    r.amend(finish)


def _describe_groups(r: _Request, body: dict) -> None:
    denied = r.split(body, "groups", lambda g: r.may(Op.DESCRIBE, Res.GROUP, g), lambda g: g)
    if body.get("include_authorized_operations"):
        def operations(resp: dict) -> None:
            for g in resp.get("groups") or ():
                if not g.get("error_code"):
                    g["authorized_operations"] = r.operations(Res.GROUP, g["group_id"])
        r.amend(operations)
    r.add_to("groups", [{"error_code": GROUP_DENIED, "group_id": g, "group_state": "",
                         "protocol_type": "", "protocol_data": "", "members": []}
                        for g in denied])


def _list_groups(r: _Request, body: dict) -> None:
    if not r.may_cluster(Op.DESCRIBE, audit=False):
        r.hide("groups", Res.GROUP, "group_id")


def _delete_groups(r: _Request, body: dict) -> None:
    denied = r.split(body, "groups_names", lambda g: r.may(Op.DELETE, Res.GROUP, g),
                     lambda g: g)
    r.add_to("results", [{"group_id": g, "error_code": GROUP_DENIED} for g in denied])


def _offset_delete(r: _Request, body: dict) -> None:
    r.require(Op.DELETE, Res.GROUP, body["group_id"])
    _topic_partitions(Op.READ, "topics", "name", "partitions", "partition_index", "topics",
                      "name", "partitions", "partition_index")(r, body)


def _consumer_group_heartbeat(r: _Request, body: dict) -> None:
    r.require(Op.READ, Res.GROUP, body["group_id"])
    for name in body.get("subscribed_topic_names") or ():
        r.require(Op.DESCRIBE, Res.TOPIC, name)


def _share_data(r: _Request, body: dict) -> None:
    """ShareFetch/ShareAcknowledge: Read on the share group and on each
    topic (Kafka denies per partition; here the whole request)."""
    r.require(Op.READ, Res.GROUP, body.get("group_id") or "")
    for t in body.get("topics") or ():
        name = r.gate.topic_name_of(t["topic_id"])
        if name is not None:                      # an unknown id: the handler's answer
            r.require(Op.READ, Res.TOPIC, name)


_NO_TOPIC_ID = uuid.UUID(int=0)


def _describe_share_group_offsets(r: _Request, body: dict) -> None:
    """Describe on each group (denied: the group's error) and on each topic
    (denied: its partitions' error; asked for all, left out)."""
    denied = r.split(body, "groups", lambda g: r.may(Op.DESCRIBE, Res.GROUP, g),
                     lambda g: g["group_id"])
    r.add_to("groups", [{"group_id": g["group_id"], "topics": [], "error_code": GROUP_DENIED,
                         "error_message": f"{r.principal} may not describe group "
                                          f"{g['group_id']!r}"} for g in denied])

    def finish(resp: dict) -> None:
        for g in resp.get("groups") or ():
            kept = []
            for t in g.get("topics") or ():
                if r.may(Op.DESCRIBE, Res.TOPIC, t["topic_name"], audit=False):
                    kept.append(t)
                elif any(a.get("topics") for a in body["groups"]):
                    kept.append({**t, "partitions": [
                        {**p, "start_offset": -1, "error_code": TOPIC_DENIED}
                        for p in t["partitions"]]})
            g["topics"] = kept
    r.amend(finish)


def _alter_share_group_offsets(r: _Request, body: dict) -> None:
    """Read on the group (denied: every partition's error) and on each topic."""
    if not r.may(Op.READ, Res.GROUP, body["group_id"]):
        denied, code = body["topics"], GROUP_DENIED
    else:
        denied = r.split(body, "topics", lambda t: r.may(Op.READ, Res.TOPIC, t),
                         lambda t: t["topic_name"])
        code = TOPIC_DENIED
    r.add_to("responses", [{"topic_name": t["topic_name"], "topic_id": _NO_TOPIC_ID, "partitions": [
        {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
        for t in denied])
    if code == GROUP_DENIED:
        body["topics"] = []


def _delete_share_group_offsets(r: _Request, body: dict) -> dict | None:
    """Delete on the group (denied: the whole request), Read on each topic."""
    if not r.may(Op.DELETE, Res.GROUP, body["group_id"]):
        return {"throttle_time_ms": 0, "error_code": GROUP_DENIED,
                "error_message": f"{r.principal} may not delete offsets of group "
                                 f"{body['group_id']}", "responses": []}
    denied = r.split(body, "topics", lambda t: r.may(Op.READ, Res.TOPIC, t),
                     lambda t: t["topic_name"])
    r.add_to("responses", [{"topic_name": t["topic_name"], "topic_id": _NO_TOPIC_ID,
                            "error_code": TOPIC_DENIED, "error_message": None} for t in denied])
    return None


# ---- transactions ------------------------------------------------------------------------------

def _init_producer_id(r: _Request, body: dict) -> None:
    txn = body.get("transactional_id")
    if txn is not None:
        r.require(Op.WRITE, Res.TRANSACTIONAL_ID, txn)
    elif not (r.may_cluster(Op.IDEMPOTENT_WRITE, audit=False)
              or r.gate.authorizer.authorize_any(r.principal, r.host, Op.WRITE, Res.TOPIC)):
        # Kafka 3.x: IdempotentWrite on the cluster, or Write on some topic
        r.require_cluster(Op.IDEMPOTENT_WRITE)


def _txn(extra=None):
    """EndTxn, AddOffsetsToTxn: Write on the transactional id (and ``extra``)."""
    def check(r: _Request, body: dict) -> None:
        r.require(Op.WRITE, Res.TRANSACTIONAL_ID, body["transactional_id"])
        if extra is not None:
            extra(r, body)
    return check


def _add_partitions_to_txn(r: _Request, body: dict):
    def results(txn_id, topics) -> list:
        # Kafka adds nothing when anything is denied: the rest OPERATION_NOT_ATTEMPTED
        if not r.may(Op.WRITE, Res.TRANSACTIONAL_ID, txn_id):
            return _partitions_with(TXN_DENIED, topics, "name", "partitions", "partitions",
                                    "name", "results_by_partition", "partition_index")
        denied = {t["name"] for t in topics if not r.may(Op.WRITE, Res.TOPIC, t["name"])}
        if not denied:
            return []
        return [{"name": t["name"], "results_by_partition": [
            {"partition_index": p, "partition_error_code":
             TOPIC_DENIED if t["name"] in denied else NOT_ATTEMPTED} for p in t["partitions"]]}
            for t in topics]

    def rename(topics):
        for t in topics:
            for p in t["results_by_partition"]:
                p["partition_error_code"] = p.pop("error_code", p.get("partition_error_code"))
        return topics

    if body.get("transactions"):                 # v4+: several transactions
        if any(t.get("verify_only") for t in body["transactions"]):
            r.require_cluster(Op.CLUSTER_ACTION)   # a broker's verification
            return
        out = []

        def kept(t) -> bool:
            answer = results(t["transactional_id"], t["topics"])
            if answer:
                out.append({"transactional_id": t["transactional_id"],
                            "topic_results": rename(answer)})
            return not answer
        body["transactions"] = [t for t in body["transactions"] if kept(t)]
        r.add_to("results_by_transaction", out)
        if not body["transactions"]:
            return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": []}
        return None
    answer = results(body.get("v3_and_below_transactional_id") or "",
                     body.get("v3_and_below_topics") or [])
    if answer:
        r.add_to("results_by_topic_v3_and_below", rename(answer))
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": []}
    return None


def _txn_offset_commit(r: _Request, body: dict):
    whole = True
    if not r.may(Op.WRITE, Res.TRANSACTIONAL_ID, body["transactional_id"]):
        denied, code = body.get("topics") or [], TXN_DENIED
    elif not r.may(Op.READ, Res.GROUP, body["group_id"]):
        denied, code = body.get("topics") or [], GROUP_DENIED
    else:
        denied = r.split(body, "topics", lambda t: r.may(Op.READ, Res.TOPIC, t))
        code, whole = TOPIC_DENIED, False
    r.add_to("topics", _partitions_with(code, denied, "name", "partitions", "partition_index",
                                        "name", "partitions", "partition_index"))
    return {"throttle_time_ms": 0, "topics": []} if whole else None


def _group_read(r: _Request, body: dict) -> None:
    r.require(Op.READ, Res.GROUP, body["group_id"])


def _describe_transactions(r: _Request, body: dict) -> None:
    denied = r.split(body, "transactional_ids",
                     lambda t: r.may(Op.DESCRIBE, Res.TRANSACTIONAL_ID, t), lambda t: t)
    r.add_to("transaction_states", [{"error_code": TXN_DENIED, "transactional_id": t,
                                     "transaction_state": "", "producer_id": -1,
                                     "producer_epoch": -1, "topics": []} for t in denied])


def _list_transactions(r: _Request, body: dict) -> None:
    r.hide("transaction_states", Res.TRANSACTIONAL_ID, "transactional_id")


def _consumer_group_describe(r: _Request, body: dict) -> None:
    denied = r.split(body, "group_ids", lambda g: r.may(Op.DESCRIBE, Res.GROUP, g),
                     lambda g: g)
    r.add_to("groups", [{"error_code": GROUP_DENIED, "group_id": g, "group_state": "",
                         "error_message": f"{r.principal} may not describe group {g!r}",
                         "members": []} for g in denied])


def _describe_topic_partitions(r: _Request, body: dict):
    named = bool(body.get("topics"))
    denied = r.split(body, "topics", lambda t: r.may(Op.DESCRIBE, Res.TOPIC, t))

    def operations(resp: dict) -> None:          # always there, as Kafka's
        for t in resp.get("topics") or ():
            if not t.get("error_code"):
                t["topic_authorized_operations"] = r.operations(Res.TOPIC, t["name"])
    r.amend(operations)

    if not named:                    # every topic: those not describable are not there
        r.hide("topics", Res.TOPIC, "name")
    r.add_to("topics", [{"error_code": TOPIC_DENIED, "name": t["name"], "is_internal": False,
                         "partitions": []} for t in denied])
    if named and not body["topics"]:
        # nothing left to describe (an empty list would mean every topic)
        return {"throttle_time_ms": 0, "topics": [], "next_cursor": None}


# ---- the share coordinator's (brokers' APIs) ---------------------------------------------------

def _share_state(blank: dict):
    """InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
    DeleteShareGroupState, ReadShareGroupStateSummary: ClusterAction on the
    cluster, as Kafka asks of these brokers' APIs. The responses have no
    top-level error_code: denied, each partition named is answered with the
    error (and ``blank``, so that a read tells nothing of the state), as
    Kafka's getErrorResponse does. The partition leaders' own requests come
    with the server's principal, a super user (native_curve_secret_key_file),
    or on the unchecked native path without CURVE."""
    def check(r: _Request, body: dict) -> dict | None:
        if r.may_cluster(Op.CLUSTER_ACTION):
            return None
        message = (f"{r.principal} may not read or change share-group state (a broker's "
                   f"API: ClusterAction on the cluster)")
        return {"results": [{"topic_id": t["topic_id"], "partitions": [
            {"partition": p["partition"], "error_code": CLUSTER_DENIED,
             "error_message": message, **blank} for p in t["partitions"]]}
            for t in body.get("topics") or ()]}
    return check


# ---- the ACL APIs ------------------------------------------------------------------------------

def _create_acls(r: _Request, body: dict) -> None:
    # no top-level error_code: every creation is answered with the denial
    if not r.may_cluster(Op.ALTER):
        message = f"{r.principal} may not alter the cluster's ACLs"
        r.add_to("results", [{"error_code": CLUSTER_DENIED, "error_message": message}
                             for _ in body["creations"]])
        body["creations"] = []


def _delete_acls(r: _Request, body: dict) -> None:
    if not r.may_cluster(Op.ALTER):
        message = f"{r.principal} may not alter the cluster's ACLs"
        r.add_to("filter_results", [{"error_code": CLUSTER_DENIED, "error_message": message,
                                     "matching_acls": []} for _ in body["filters"]])
        body["filters"] = []


def _describe_user_scram_credentials(r: _Request, body: dict) -> dict | None:
    # Kafka's getErrorResponse: the top-level error, and each user named with it.
    # (librdkafka up to at least 2.12 corrupts its heap on any top-level
    # error of this API; kafka-python and Kafka's Java client read it.)
    if r.may_cluster(Op.DESCRIBE):
        return None
    message = f"{r.principal} may not describe the cluster's SCRAM credentials"
    return {"throttle_time_ms": 0, "error_code": CLUSTER_DENIED, "error_message": message,
            "results": [{"user": u["name"], "error_code": CLUSTER_DENIED,
                         "error_message": message, "credential_infos": []}
                        for u in body.get("users") or ()]}


def _alter_user_scram_credentials(r: _Request, body: dict) -> None:
    # no top-level error_code: every user named is answered with the denial
    if not r.may_cluster(Op.ALTER):
        message = f"{r.principal} may not alter the cluster's SCRAM credentials"
        names = dict.fromkeys(op["name"] for op in (*body["deletions"], *body["upsertions"]))
        r.add_to("results", [{"user": name, "error_code": CLUSTER_DENIED,
                              "error_message": message} for name in names])
        body["deletions"], body["upsertions"] = [], []
def _alter_client_quotas(r: _Request, body: dict) -> None:
    # no top-level error_code: every entry is answered with the denial
    if not r.may_cluster(Op.ALTER_CONFIGS):
        message = f"{r.principal} may not alter the cluster's client quotas"
        r.add_to("entries", [{"error_code": CLUSTER_DENIED, "error_message": message,
                              "entity": e["entity"]} for e in body["entries"]])
        body["entries"] = []


# The APIs that ask the authorizer nothing, as in Kafka's KafkaApis: answered
# before (or as) the client authenticates, they never reach RequestGate.check.
# Every other API has its check in _CHECKS; an API in neither is denied.
_NO_CHECK = frozenset({
    ApiKey.API_VERSIONS,          # what a client asks first, before it logs in
    ApiKey.SASL_HANDSHAKE,        # logging in itself
    ApiKey.SASL_AUTHENTICATE,
})

# API -> its check.
_CHECKS = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _topic_partitions(
        Op.DESCRIBE, "topics", "name", "partitions", "partition_index", "topics", "name",
        "partitions", "partition_index", timestamp=-1, offset=-1, leader_epoch=-1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _topic_partitions(
        Op.DESCRIBE, "topics", "topic", "partitions", "partition", "topics", "topic",
        "partitions", "partition", leader_epoch=-1, end_offset=-1),
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: _describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: _alter_share_group_offsets,
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: _delete_share_group_offsets,
    ApiKey.CREATE_DELEGATION_TOKEN: _create_delegation_token,
    ApiKey.RENEW_DELEGATION_TOKEN: lambda r, body: None,      # one's own tokens: no ACL
    ApiKey.EXPIRE_DELEGATION_TOKEN: lambda r, body: None,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: lambda r, body: None,
    ApiKey.UPDATE_FEATURES: _cluster(Op.ALTER),
    ApiKey.UNREGISTER_BROKER: _cluster(Op.ALTER),
    ApiKey.ADD_RAFT_VOTER: _cluster(Op.ALTER),
    ApiKey.REMOVE_RAFT_VOTER: _cluster(Op.ALTER),
    ApiKey.LIST_CONFIG_RESOURCES: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.METADATA: _metadata,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DESCRIBE_CONFIGS: _configs(Op.DESCRIBE_CONFIGS, "results"),
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses"),
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Op.DESCRIBE),
    ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _alter_replica_log_dirs,
    ApiKey.DESCRIBE_QUORUM: _cluster(Op.DESCRIBE),
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group(Op.READ),
    ApiKey.SYNC_GROUP: _group(Op.READ),
    ApiKey.HEARTBEAT: _group(Op.READ),
    ApiKey.LEAVE_GROUP: _group(Op.READ),
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _consumer_group_heartbeat,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _txn(_group_read),
    ApiKey.END_TXN: _txn(),
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_PRODUCERS: _topic_partitions(
        Op.READ, "topics", "name", "partition_indexes", "partition_indexes", "topics", "name",
        "partitions", "partition_index"),
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.SHARE_GROUP_HEARTBEAT: _consumer_group_heartbeat,      # the same checks
    ApiKey.SHARE_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.SHARE_FETCH: _share_data,
    ApiKey.SHARE_ACKNOWLEDGE: _share_data,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    ApiKey.DESCRIBE_CLUSTER: _authorized_operations,
    ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _describe_user_scram_credentials,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _alter_client_quotas,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: _share_state({}),
    ApiKey.READ_SHARE_GROUP_STATE: _share_state({"state_epoch": 0, "start_offset": -1,
                                                 "state_batches": []}),
    ApiKey.WRITE_SHARE_GROUP_STATE: _share_state({}),
    ApiKey.DELETE_SHARE_GROUP_STATE: _share_state({}),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: _share_state({"state_epoch": 0, "start_offset": -1}),
}
