"""What a worker answers while its ACLs are behind the controller's.

A worker that learned of an ACL version it has not applied
(server/controller/acl_control.py) decides nothing with the ACLs it has:
request_authorization.py ``RequestGate`` runs each API's check as if every
decision were a denial, and the denials it put in the response become
STALE_ACLS_CODE here (``retriable``); the ring gateway refuses attaches
and entries with the same code.

Who may call: the worker's event loop (the gate, the ring gateway).
"""
from __future__ import annotations

from kafkalite import errors

# What a worker whose ACLs are behind answers. Kafka has no code for "this
# broker's ACLs are out of date"; NOT_LEADER_OR_FOLLOWER is what a broker
# answers when the client's view of it is stale: every client retries it
# (after a metadata refresh, which the controller answers with the current
# ACLs), where an authorization error would be final and a wrong "allowed"
# would serve a revoked user.
STALE_ACLS_CODE = errors.NotLeaderOrFollowerError.code
DENIED_CODES = frozenset({errors.TopicAuthorizationFailedError.code,
                          errors.GroupAuthorizationFailedError.code,
                          errors.ClusterAuthorizationFailedError.code,
                          errors.TransactionalIdAuthorizationFailedError.code})


def retriable(body) -> None:
    """Every authorization error code in a response, at any depth, made
    STALE_ACLS_CODE."""
    if isinstance(body, dict):
        if body.get("error_code") in DENIED_CODES:
            body["error_code"] = STALE_ACLS_CODE
        for value in body.values():
            if isinstance(value, (dict, list)):
                retriable(value)
    elif isinstance(body, list):
        for item in body:
            retriable(item)
