"""The schema registry of a server with security on: HTTP Basic with the
server's SASL users (server/http_login.py, as on the HTTP port), no
anonymous access, and the registry still reaching its own node (with the
owner's key pair) to write and read ``_schemas``. SUBJECT ACLs are not
checked yet: any user who logged in may use it.

One server for the module: SASL_PLAINTEXT listeners, the authorizer on,
User:admin a super user, alice a user without ACLs.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from harness import secured_server, stop_server

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
SCHEMA = json.dumps({"type": "record", "name": "Secured", "fields": [{"name": "a", "type": "int"}]})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("registry-login"), PASSWORDS)
    yield srv
    stop_server(srv)


def call(url, user=None, password=None, method="GET", body=None):
    request = urllib.request.Request(url, method=method,
                                     data=None if body is None else json.dumps(body).encode())
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:
            return resp.status, resp.headers, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def test_anonymous_and_wrong_passwords_are_refused(server):
    url = server.info["schema_registry"]
    status, headers, _ = call(f"{url}/subjects")
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")
    assert call(f"{url}/subjects", "alice", "wrong")[0] == 401
    assert call(f"{url}/subjects/x/versions", method="POST", body={"schema": SCHEMA})[0] == 401


def test_a_sasl_user_registers_and_reads_through_confluents_client(server):
    url = server.info["schema_registry"]
    client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "alice:alice-secret"})
    sid = client.register_schema("secured-value", Schema(SCHEMA, "AVRO"))
    assert client.get_schema(sid).schema_str == SCHEMA.replace(" ", "")
    status, _, body = call(f"{url}/subjects", "admin", "admin-secret")
    assert status == 200 and "secured-value" in json.loads(body)
    anonymous = SchemaRegistryClient({"url": url})
    with pytest.raises(SchemaRegistryError) as refused:
        anonymous.get_subjects()
    assert refused.value.http_status_code == 401
