"""The controller's side of ACLs: CreateAcls, DescribeAcls, DeleteAcls,
where the ACLs are kept, and how they reach the workers (Kafka's
AclControlManager).

On-disk format: ``<data_dir>/acls.json``, beside the cluster metadata
(with ``--cluster``, the ``kafkalite_acls`` row of the cluster's PostgreSQL
instead, cluster_store.py: ``PostgresAclStore``), replaced atomically
(write, fsync, rename) at every change::

    {"version": 1, "acls": [["TOPIC", "orders", "LITERAL", "User:alice", "*",
                             "READ", "ALLOW"], ...]}

(resource type, resource name, pattern type, principal, host, operation,
permission: the enums' names, protocol/enums.py). A change is written
before it is answered, so an acknowledged ACL survives a restart.

Every worker gets the whole list on the control channel: an ``acls``
message after each change (the change is answered once every live worker
has confirmed it, or after ``PROPAGATION_TIMEOUT_MS``), and the list in
the ``assign`` that starts a (re)started worker. The supervisor's own
``Authorizer`` is changed in place. With the authorizer off the three APIs
answer SECURITY_DISABLED, as Kafka does without an authorizer.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import json
import logging
import os

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
_DISABLED = "No Authorizer is configured on the broker (authorizer_enabled is off)"


class AclStore:
    """The ACLs on disk (format in the module docstring)."""

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, ACLS_FILE)

    def load(self) -> list[AclBinding]:
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read())
            return acls_from_json(raw["acls"])
        except FileNotFoundError:
            return []
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise errors.KafkaStorageError(f"cannot read {self.path}: {exc}") from None

    def save(self, acls) -> None:
        data = json.dumps({"version": 1, "acls": acls_to_json(acls)}, indent=1)
        # the owner's only: who may do what, and who is a target (issue 40)
        write_atomically(self.path, data.encode(), mode=0o600)


class PostgresAclStore:
    """The ACLs in the cluster's PostgreSQL, through the controller's
    PostgresMetadataStore (its connection, and the lease fence)."""

    def __init__(self, metadata):
        self.metadata = metadata

    def load(self) -> list[AclBinding]:
        return acls_from_json(self.metadata.read_acls())

    def save(self, acls) -> None:
        self.metadata.write_acls(acls_to_json(acls))


class AclControl:
    """``store`` an AclStore or PostgresAclStore; ``authorizer`` the
    supervisor's (None: the authorizer is off);
    ``channel`` the controller's BrokerChannel; ``live_brokers()`` the ids
    of the workers that are up."""

    def __init__(self, store, authorizer: Authorizer | None, channel, live_brokers):
        self.authorizer = authorizer
        self.channel = channel
        self.live_brokers = live_brokers
        self.store = store
        if authorizer is not None:
            authorizer.replace(self.store.load())

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
        self.store.save(acls)             # raises (KafkaStorageError, ...) before any change
        self.authorizer.replace(acls)
        brokers = list(self.live_brokers())
        if not brokers:
            return answer
        message = {"type": "acls", "acls": acls_to_json(acls)}

        def done(results, timed_out: bool) -> None:
            if timed_out:
                log.warning("ACL change: not every worker confirmed within %d ms; they apply "
                            "it when the message arrives", PROPAGATION_TIMEOUT_MS)
            ctx.respond(answer)
        self.channel.send({b: message for b in brokers}, done, PROPAGATION_TIMEOUT_MS)
        return DEFERRED
