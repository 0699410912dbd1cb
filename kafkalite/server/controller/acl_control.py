"""The controller's side of ACLs: CreateAcls, DescribeAcls, DeleteAcls,
where the ACLs are kept, and how they reach the workers (Kafka's
AclControlManager).

On-disk format: ``<data_dir>/acls.json``, beside the cluster metadata
(with ``--cluster``, the ``kafkalite_acls`` row of the cluster's PostgreSQL
instead, cluster_store.py: ``PostgresAclStore``), replaced atomically
(write, fsync, rename) at every change::

    {"version": 1, "acl_version": 7,
     "acls": [["TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"], ...]}

(resource type, resource name, pattern type, principal, host, operation,
permission: the enums' names, protocol/enums.py; ``version`` is the
file's format, ``acl_version`` the ACLs' own, below). A change is written
before it is answered, so an acknowledged ACL survives a restart.

ACL versions (issue 67: after a fence and rejoin, a change made while the
worker's start was on its way never reached it, and a revoked user kept
access until the next change). Every change bumps ``version``, kept with
the ACLs (in PostgreSQL, where the row holds only the list, a controller
starts from its clock in milliseconds, so that it never repeats a number
an earlier controller gave). Every worker the controller has a link to,
fenced or not, gets the whole list with its version on the control
channel, an ``acls`` message, after each change (the change is answered
once every unfenced worker has confirmed it, or after
``PROPAGATION_TIMEOUT_MS``); the ``assign`` that starts a (re)started or
rejoining worker carries the list and its version too. Every other
message to a worker carries the current version (supervisor.py
``_send_worker``), and every heartbeat of a worker the version it
applied: a worker that sees a version it has not applied refuses the
requests its ACLs decide with a retriable error until it has the list
(request_authorization.py ``RequestGate.acls_behind``), and the
controller sends the list again to a worker whose heartbeat names another
version (``catch_up``). The supervisor's own ``Authorizer`` is changed in
place. With the authorizer off the three APIs answer SECURITY_DISABLED, as
Kafka does without an authorizer.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import json
import logging
import os
import time

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.server.auth.authorizer import (AclBinding, AclFilter, Authorizer, acls_from_json,
                                         acls_to_json, binding_from_request)
from kafkalite.server.network.requests import DEFERRED, RequestContext
from kafkalite.storage.checkpoint import write_atomically

log = logging.getLogger("kafkalite.acls")

ACLS_FILE = "acls.json"
PROPAGATION_TIMEOUT_MS = 10_000
# how often a worker whose heartbeats name an old version is sent the list again
ACL_RESEND_S = 1.0
_DISABLED = "No Authorizer is configured on the broker (authorizer_enabled is off)"


class AclStore:
    """The ACLs on disk (format in the module docstring)."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, ACLS_FILE)

    def load(self) -> tuple[list[AclBinding], int]:
        """(the ACLs, their version); a file of before versions: 0."""
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            return acls_from_json(raw["acls"]), int(raw.get("acl_version", 0))
        except FileNotFoundError:
            return [], 0
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise errors.KafkaStorageError(f"cannot read {self.path}: {exc}") from None

    def save(self, acls, version: int) -> None:
        data = json.dumps({"version": 1, "acl_version": version, "acls": acls_to_json(acls)},
                          indent=1)
        # the owner's only: who may do what, and who is a target (issue 40)
        write_atomically(self.path, data.encode(), mode=0o600)


class PostgresAclStore:
    """The ACLs in the cluster's PostgreSQL, through the controller's
    PostgresMetadataStore (its connection, and the lease fence)."""

    def __init__(self, metadata):
        self.metadata = metadata

    def load(self) -> tuple[list[AclBinding], int]:
        # the row has no version: this controller's start from its clock,
        # above every version an earlier controller gave (one a millisecond
        # at most)
        return acls_from_json(self.metadata.read_acls()), int(time.time() * 1000)

    def save(self, acls, version: int) -> None:
        self.metadata.write_acls(acls_to_json(acls))


class AclControl:
    """``store`` an AclStore or PostgresAclStore; ``authorizer`` the
    supervisor's (None: the authorizer is off);
    ``channel`` the controller's BrokerChannel; ``live_brokers()`` the ids
    of the workers that are up (unfenced), ``linked_brokers()`` of every
    worker with a process the controller talks to, fenced or not."""

    def __init__(self, store, authorizer: Authorizer | None, channel, live_brokers,
                 linked_brokers=None):
        self.authorizer = authorizer
        self.channel = channel
        self.live_brokers = live_brokers
        self.linked_brokers = linked_brokers or live_brokers
        self.store = store
        self.version = 0
        self.applied: dict[int, int] = {}       # worker -> the version its heartbeat named
        self._resent_at: dict[int, float] = {}
        if authorizer is not None:
            acls, self.version = self.store.load()
            authorizer.replace(acls)

    def message(self) -> dict:
        """The ``acls`` control message: the whole list and its version."""
        return {"type": "acls", "acls": acls_to_json(self.acls), "acl_version": self.version}

    def on_heartbeat(self, broker: int, applied) -> None:
        """Worker ``broker``'s heartbeat names the version it ``applied``:
        one behind is told the version (it refuses what the ACLs decide
        from then on) and sent the list again, at most once per
        ACL_RESEND_S (a push lost on the way, a link that reconnected)."""
        if applied is None or self.authorizer is None:
            return
        self.applied[broker] = applied
        if applied == self.version:
            return
        self.channel.tell({broker: {"type": "acl_version", "acl_version": self.version}})
        now = time.monotonic()
        if now >= self._resent_at.get(broker, 0.0) + ACL_RESEND_S:
            self._resent_at[broker] = now
            log.warning("worker %d has applied ACL version %s, not %d: sending the ACLs again",
                        broker, applied, self.version)
            self.channel.tell({broker: self.message()})

    def handlers(self) -> dict:
        return {ApiKey.DESCRIBE_ACLS: self._describe_acls, ApiKey.CREATE_ACLS: self._create_acls,
                ApiKey.DELETE_ACLS: self._delete_acls}

    @property
    def acls(self) -> tuple:
        return self.authorizer.acls if self.authorizer is not None else ()

    def _describe_acls(self, ctx: RequestContext, body: dict):
        if self.authorizer is None:
            raise errors.SecurityDisabledError(_DISABLED)
        f = AclFilter.from_request(body)
        f.validate()
        resources: dict[tuple, list] = {}
        for acl in self.authorizer.acls:
            if f.matches(acl):
                resources.setdefault((int(acl.resource_type), acl.resource_name,
                                      int(acl.pattern_type)), []).append(acl)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "resources": [
            {"resource_type": rt, "resource_name": name, "pattern_type": pt,
             "acls": [{"principal": a.principal, "host": a.host, "operation": int(a.operation),
                       "permission_type": int(a.permission)} for a in acls]}
            for (rt, name, pt), acls in resources.items()]}

    def _create_acls(self, ctx: RequestContext, body: dict):
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "results": [
                {"error_code": errors.SecurityDisabledError.code, "error_message": _DISABLED}
                for _ in body["creations"]]}
        results, added = [], []
        for creation in body["creations"]:
            try:
                added.append(binding_from_request(creation))
                results.append({"error_code": 0, "error_message": None})
            except KafkaError as exc:
                results.append({"error_code": exc.code, "error_message": exc.message})
        try:
            return self._change([*self.authorizer.acls, *added], ctx,
                                {"throttle_time_ms": 0, "results": results})
        except KafkaError as exc:       # not stored: nothing was created
            return {"throttle_time_ms": 0, "results": [
                {"error_code": exc.code, "error_message": exc.message} for _ in results]}

    def _delete_acls(self, ctx: RequestContext, body: dict):
        if self.authorizer is None:
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": errors.SecurityDisabledError.code, "error_message": _DISABLED,
                 "matching_acls": []} for _ in body["filters"]]}
        remaining = list(self.authorizer.acls)
        results = []
        for raw in body["filters"]:
            f = AclFilter.from_request(raw)
            try:
                f.validate()
            except KafkaError as exc:
                results.append({"error_code": exc.code, "error_message": exc.message,
                                "matching_acls": []})
                continue
            matched = [a for a in remaining if f.matches(a)]
            remaining = [a for a in remaining if not f.matches(a)]
            results.append({"error_code": 0, "error_message": None, "matching_acls": [
                {"error_code": 0, "error_message": None, "resource_type": int(a.resource_type),
                 "resource_name": a.resource_name, "pattern_type": int(a.pattern_type),
                 "principal": a.principal, "host": a.host, "operation": int(a.operation),
                 "permission_type": int(a.permission)} for a in matched]})
        try:
            return self._change(remaining, ctx,
                                {"throttle_time_ms": 0, "filter_results": results})
        except KafkaError as exc:       # not stored: nothing was deleted
            return {"throttle_time_ms": 0, "filter_results": [
                {"error_code": exc.code, "error_message": exc.message, "matching_acls": []}
                for _ in results]}

    def _change(self, acls: list, ctx: RequestContext, answer: dict):
        """Make ``acls`` the ACLs: on disk, here, then in every live worker;
        ``answer`` once the workers have them."""
        acls = list(dict.fromkeys(acls))
        if acls == list(self.authorizer.acls):
            return answer
        # raises (KafkaStorageError, ...) before any change
        self.store.save(acls, self.version + 1)
        self.version += 1
        self.authorizer.replace(acls)
        message = self.message()
        live = set(self.live_brokers())
        # a fenced worker whose start is on its way gets it too, queued
        # behind that start: its start's list is already out of date
        # (waited for only where unfenced: a dead one never confirms)
        others = [b for b in self.linked_brokers() if b not in live]
        if others:
            self.channel.tell({b: message for b in others})
        if not live:
            return answer

        def done(results, timed_out: bool) -> None:
            if timed_out:
                log.warning("ACL change: not every worker confirmed within %d ms; they apply "
                            "it when the message arrives", PROPAGATION_TIMEOUT_MS)
            ctx.respond(answer)
        self.channel.send({b: message for b in live}, done, PROPAGATION_TIMEOUT_MS)
        return DEFERRED
