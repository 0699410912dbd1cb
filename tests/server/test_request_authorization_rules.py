"""Every API the server serves has an authorization rule
(kafkalite/server/auth/request_authorization.py): a check in ``_CHECKS``, or a
place in ``_NO_CHECK``, the short list of APIs that ask the authorizer
nothing (ApiVersions and the SASL APIs, as in Kafka's KafkaApis). An API
added without a rule fails these tests; the server would deny it (a rule
forgotten closes the API, it never opens it). The share coordinator's APIs
(83-87) once had no rule, and any logged-in user could rewrite share-group
state.

The APIs are taken from the server's table (``SUPPORTED_VERSIONS``, which
ApiVersions answers from) and from the ApiVersions answers of a running
server, on its Kafka listeners (the supervisor's and each worker's) and its
native ports.
"""
from __future__ import annotations

import os
import sys

import pytest

from kafkalite import errors
from kafkalite.client.connection import Connection, client_context
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, RequestHeader
from kafkalite.server.auth import request_authorization
from kafkalite.server.auth.authorizer import Authorizer
from kafkalite.server.auth.request_authorization import _CHECKS, _NO_CHECK, RequestGate
from kafkalite.server.network.requests import Listener, RequestContext

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire  # noqa: E402


def without_a_rule(api_keys) -> list[str]:
    """The names of those of ``api_keys`` with no rule."""
    return sorted(ApiKey(k).name for k in api_keys if k not in _CHECKS and k not in _NO_CHECK)


def test_every_supported_api_has_exactly_one_rule():
    assert without_a_rule(SUPPORTED_VERSIONS) == [], (
        "APIs without an authorization rule: give each a check in "
        "request_authorization._CHECKS (Kafka's KafkaApis says which), or, if Kafka "
        "asks nothing of it, add it to _NO_CHECK with the reason")
    assert not set(_CHECKS) & _NO_CHECK, "an API both checked and unchecked"
    # only what Kafka answers before authentication goes unchecked
    assert _NO_CHECK == {ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


@pytest.mark.parametrize("api", [ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                                 ApiKey.READ_SHARE_GROUP_STATE,
                                 ApiKey.WRITE_SHARE_GROUP_STATE,
                                 ApiKey.DELETE_SHARE_GROUP_STATE,
                                 ApiKey.READ_SHARE_GROUP_STATE_SUMMARY])
def test_share_state_apis_need_cluster_action(api):
    """Answered with the denial per partition, no handler; a super user passes."""
    gate = RequestGate(Authorizer(super_users=["User:broker"]))
    body = {"group_id": "g", "topics": [{"topic_id": "t", "partitions": [{"partition": 3}]}]}
    answer = gate.check(_context(api, "User:alice"), body)
    [part] = answer["results"][0]["partitions"]
    assert part["partition"] == 3
    assert part["error_code"] == errors.ClusterAuthorizationFailedError.code
    assert gate.check(_context(api, "User:broker"), body) is None


def test_an_api_without_a_rule_is_denied(monkeypatch):
    gate = RequestGate(Authorizer(allow_everyone_if_no_acl_found=True))
    ctx = _context(ApiKey.DESCRIBE_LOG_DIRS, "User:alice")
    assert gate.check(ctx, {"topics": None}) is None            # allowed: no ACL at all
    monkeypatch.delitem(request_authorization._CHECKS, ApiKey.DESCRIBE_LOG_DIRS)
    assert without_a_rule(SUPPORTED_VERSIONS) == ["DESCRIBE_LOG_DIRS"]
    with pytest.raises(errors.ClusterAuthorizationFailedError):
        gate.check(ctx, {"topics": None})


def _context(api: ApiKey, principal: str) -> RequestContext:
    header = RequestHeader(api, SUPPORTED_VERSIONS[api][1], 1, "rules-test")
    return RequestContext(header, Listener.KAFKA, None, None, principal=principal)


def test_every_api_a_running_server_advertises_has_a_rule(server):
    host = server.kafka_bootstrap.rsplit(":", 1)[0]
    kafka = [server.kafka_bootstrap] + [f"{host}:{b['port']}"
                                        for b in server.info["kafka_brokers"]]
    advertised = {}
    for address in kafka:
        w = KafkaWire(address)
        try:
            answer = w.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "rules",
                                                        "client_software_version": "1"})
        finally:
            w.close()
        assert answer["error_code"] == 0
        advertised[address] = {k["api_key"] for k in answer["api_keys"]}
    for endpoint in [server.info["native"]] + [w["endpoint"] for w in server.info["workers"]]:
        conn = Connection(endpoint, "rules-test", client_context({}))
        try:
            answer = conn.request(ApiKey.API_VERSIONS, {"client_software_name": "rules",
                                                        "client_software_version": "1"})
        finally:
            conn.close()
        advertised[endpoint] = {k["api_key"] for k in answer["api_keys"]}
    # the share coordinator's APIs among them (the node's every API, on Kafka listeners)
    assert ApiKey.WRITE_SHARE_GROUP_STATE in advertised[server.kafka_bootstrap]
    assert {where: without_a_rule(keys) for where, keys in advertised.items()} == {
        where: [] for where in advertised}
