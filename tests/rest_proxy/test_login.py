"""The REST proxy of a server with security on: HTTP Basic with the server's
SASL users (server/auth/http_login.py, as on the HTTP port and the schema
registry's), no anonymous access, and the proxy still reaching its own
node (with the owner's key pair) to produce and consume, as the user
logged in under the ACLs (test_proxy_acls.py has the denials).

One server for the module: SASL_PLAINTEXT listeners, the authorizer on;
alice may create, write and read topic ``secured`` and read group ``gs``.
"""
from __future__ import annotations

import base64

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from harness import sasl_config, secured_server, stop_server
from proxy_client import V2, V2_JSON, call, stream_records

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


def basic(user, password):
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("proxy-login"), PASSWORDS)
    admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([
            AclBinding(rtype, name, ResourcePatternType.LITERAL, "User:alice", "*", op,
                       AclPermissionType.ALLOW)
            for rtype, name, op in ((ResourceType.TOPIC, "secured", AclOperation.CREATE),
                                    (ResourceType.TOPIC, "secured", AclOperation.WRITE),
                                    (ResourceType.TOPIC, "secured", AclOperation.READ),
                                    (ResourceType.GROUP, "gs", AclOperation.READ))]).values():
        f.result(30)
    yield srv
    stop_server(srv)


def test_anonymous_and_wrong_passwords_are_refused(server):
    url = server.info["rest_proxy"]
    status, answer, kind = call(f"{url}/v3/clusters")
    # Confluent's error body, which its clients parse
    assert status == 401 and answer["error_code"] == 401 and "application/json" in kind
    assert call(f"{url}/v3/clusters", headers=basic("alice", "wrong"))[0] == 401
    assert call(f"{url}/consumers/g", "POST", {"name": "x"}, content_type=V2)[0] == 401
    status, _ = stream_records(f"{url}/v3/clusters/c/topics/t/records",
                               [{"value": {"data": 1}}])
    assert "401" in status


def test_a_sasl_user_produces_and_consumes(server):
    url, login = server.info["rest_proxy"], basic("alice", "alice-secret")
    cluster = call(f"{url}/v3/clusters", headers=login)[1]["data"][0]["cluster_id"]
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                {"topic_name": "secured", "partitions_count": 1}, headers=login)[0] == 201
    status, answers = stream_records(f"{url}/v3/clusters/{cluster}/topics/secured/records",
                                     [{"value": {"data": {"n": i}}} for i in range(20)],
                                     headers=login)
    assert status.endswith("200 OK") and [a["offset"] for a in answers] == list(range(20))
    assert call(f"{url}/consumers/gs", "POST", {"name": "a", "format": "json",
                                                "auto.offset.reset": "earliest"},
                content_type=V2, headers=login)[0] == 200
    inst = f"{url}/consumers/gs/instances/a"
    assert call(f"{inst}/subscription", "POST", {"topics": ["secured"]}, content_type=V2,
                headers=login)[0] == 204
    got = []
    for _ in range(20):
        got += call(f"{inst}/records?timeout=1000", accept=V2_JSON, headers=login)[1]
        if len(got) == 20:
            break
    assert [r["value"]["n"] for r in got] == list(range(20))
    assert call(inst, "DELETE", headers=login)[0] == 204
