"""The console's schemas and decoded records under the registry's SUBJECT
ACLs (kafkalite/webconsole/schemas.py, registry/authorization.py).

A user who may read a topic's records but not its value subject sees the
records' bytes with the reason, not the decoded values, and no schema of
that subject on the topic's page or the Schemas page; the subject they
may read (the key's) is decoded and listed. The registry is asked with the
user's own login, and the console asks its authorizer too.

One server for the module: SASL_PLAINTEXT listeners, the authorizer on,
User:admin a super user; alice may Read and Describe topic T, and Read
(so Describe) subject ``T-key`` only.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from harness import sasl_config, secured_server, stop_server

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
T = "team-a.readings"
VALUE = json.dumps({"type": "record", "name": "Reading", "fields": [
    {"name": "celsius", "type": "double"}]})
KEY = json.dumps({"type": "record", "name": "Site", "fields": [
    {"name": "site", "type": "string"}]})


def allow(admin: AdminClient, name: str, *operations) -> None:
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL,
                                           "User:alice", "*", op, AclPermissionType.ALLOW)
                                for op in operations]).values():
        f.result(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("console-schemas"), PASSWORDS, ["--console"])
    try:
        admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
        for f in admin.create_topics([NewTopic(T, 1, 1)]).values():
            f.result(30)
        registry = SchemaRegistryClient({"url": srv.info["schema_registry"],
                                         "basic.auth.user.info": "admin:admin-secret"})
        key = AvroSerializer(registry, KEY)({"site": "north"},
                                            SerializationContext(T, MessageField.KEY))
        value = AvroSerializer(registry, VALUE)({"celsius": 4.5},
                                                SerializationContext(T, MessageField.VALUE))
        producer = Producer(sasl_config(srv, "admin", PASSWORDS["admin"]))
        producer.produce(T, value, key)
        assert producer.flush(30) == 0
        allow(admin, T, AclOperation.READ, AclOperation.DESCRIBE)
        allow(admin, f"subject:{T}-key", AclOperation.READ)
        srv.value_id = registry.get_latest_version(f"{T}-value").schema_id
        srv.key_id = registry.get_latest_version(f"{T}-key").schema_id
        yield srv
    finally:
        stop_server(srv)


def call(srv, path: str, user: str):
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    request = urllib.request.Request(srv.info["console"] + "api/" + path, headers={
        "Authorization": f"Basic {token}", "X-Kafkalite-Console": "1"})
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_subject_the_user_may_not_read_shows_bytes_and_no_schema(server):
    status, read = call(server, f"topics/{T}/messages", "alice")
    assert status == 200, read
    [record] = read["records"]
    assert record["key_schema"] == {
        "schema": {"id": server.key_id, "subject": f"{T}-key", "version": 1, "type": "AVRO"},
        "decoded": {"site": "north"}}
    # the value: its bytes, a reason, and nothing of the schema but the id the bytes carry
    assert record["value_schema"]["schema"] == {"id": server.value_id}
    assert "decoded" not in record["value_schema"]
    # (the registry answers alice as for an id never given: the hidden subject is not
    # named, issue 67)
    error = record["value_schema"]["error"]
    assert f"schema {server.value_id} is not in the registry, or not under a subject you " \
           f"may see" in error and f"{T}-value" not in error, error
    assert base64.b64decode(record["value"])[1:5] == server.value_id.to_bytes(4, "big")
    # the super user sees both decoded
    status, read = call(server, f"topics/{T}/messages", "admin")
    assert read["records"][0]["value_schema"]["decoded"] == {"celsius": 4.5}

    # the topic's page: the key subject described, the value subject not
    status, answer = call(server, f"topics/{T}/schemas", "alice")
    assert status == 200 and answer["error"] is None, answer
    key, value = answer["subjects"]
    assert (key["subject"], key["versions"], key["id"]) == (f"{T}-key", [1], server.key_id)
    # Read on the subject does not give DescribeConfigs: no level shown, the refusal said
    assert key["compatibility"] is None and "DescribeConfigs" in key["compatibility_source"]
    assert value == {"subject": f"{T}-value", "kind": "value",
                     "denied": f"you may not read subject {T}-value"}
    # the Schemas page: the registry lists alice only the subject she may describe
    status, answer = call(server, "schemas", "alice")
    assert status == 200 and [s["subject"] for s in answer["subjects"]] == [f"{T}-key"]
    status, answer = call(server, "schemas", "admin")
    by_name = {s["subject"]: s for s in answer["subjects"]}
    assert by_name[f"{T}-value"]["compatibility_source"] == "global"
