"""The REST proxy acts as the user logged in, under the server's ACLs
(kafkalite/rest_proxy/authorization.py).

Its clients reach the node with the server's own key pair (a super user);
before, any user who logged in could produce, read and delete any topic
through it. Now each request is decided as the same Kafka request from
that user would be on a Kafka listener (Write to produce, Describe a
topic, Create, Delete, DescribeConfigs, Read on a group and its topics to
consume and commit, Describe to list), and a denial is Confluent's 403
with error_code 40301.

One server for the module: SASL_PLAINTEXT listeners, the authorizer on
(allow_everyone_if_no_acl_found off), User:admin a super user; alice may
write and read the ``team-a.`` topics, create and delete ``team-a.new.``
ones and read group ``team-a.app``; bob has no ACLs; topic ``other`` has
none at all. A second server (only for the last test) allows everyone when
no ACL is found.
"""
from __future__ import annotations

import base64

import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from harness import sasl_config, secured_server, stop_server, wait_until
from proxy_client import V2, V2_JSON, call, stream_records

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
A, OTHER, GA, GB = "team-a.orders", "other", "team-a.app", "team-b.app"


def login(user: str) -> dict:
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def allow(admin: AdminClient, rtype, name: str, *operations, principal="User:alice",
          pattern=ResourcePatternType.LITERAL) -> None:
    for f in admin.create_acls([AclBinding(rtype, name, pattern, principal, "*", op,
                                           AclPermissionType.ALLOW)
                                for op in operations]).values():
        f.result(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("proxy-acls"), PASSWORDS)
    try:        # a setup that fails stops the server too
        admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
        for f in admin.create_topics([NewTopic(A, 1, 1), NewTopic(OTHER, 1, 1)]).values():
            f.result(30)
        allow(admin, ResourceType.TOPIC, "team-a.", AclOperation.WRITE, AclOperation.READ,
              pattern=ResourcePatternType.PREFIXED)
        allow(admin, ResourceType.TOPIC, "team-a.new.", AclOperation.CREATE, AclOperation.DELETE,
              pattern=ResourcePatternType.PREFIXED)
        allow(admin, ResourceType.GROUP, GA, AclOperation.READ)
        srv.admin = admin
        url = srv.info["rest_proxy"]
        srv.cluster = call(f"{url}/v3/clusters", headers=login("admin"))[1]["data"][0]["cluster_id"]
        srv.topics = f"{url}/v3/clusters/{srv.cluster}/topics"
        yield srv
    finally:
        stop_server(srv)


def refused(answer, status: int, what: str) -> bool:
    """Confluent REST Proxy's answer to an authorization failure."""
    return status == 403 and answer["error_code"] == 40301 and what in answer["message"]


def test_producing_needs_write_on_the_topic(server):
    records = f"{server.topics}/{A}/records"
    status, answer, _ = call(records, "POST", {"value": {"data": 1}}, headers=login("alice"))
    assert status == 200 and answer["offset"] >= 0
    status, answer, _ = call(records, "POST", {"value": {"data": 2}}, headers=login("bob"))
    assert refused(answer, status, f"Not authorized to access topics: [{A}]")
    # the streaming mode and v2 are refused whole, before any record is produced
    status, body = stream_records(records, [{"value": {"data": 3}}], headers=login("bob"))
    assert "403" in status
    status, answer, _ = call(f"{server.info['rest_proxy']}/topics/{A}", "POST",
                             {"records": [{"value": 4}]}, content_type=V2_JSON,
                             headers=login("bob"))
    assert refused(answer, status, A)
    # no ACL on the topic and allow_everyone_if_no_acl_found off: denied, but a super user
    status, answer, _ = call(f"{server.topics}/{OTHER}/records", "POST",
                             {"value": {"data": 5}}, headers=login("alice"))
    assert refused(answer, status, OTHER)
    assert call(f"{server.topics}/{OTHER}/records", "POST", {"value": {"data": 6}},
                headers=login("admin"))[0] == 200


def test_registering_a_schema_through_the_proxy_needs_the_callers_rights_on_the_subject(server):
    """v2 avro produce registers under <topic>-value as the caller, not as
    the server: Write on the topic is not enough without Write on the
    subject's resource (TOPIC ``subject:<topic>-value``)."""
    schema = '{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}'
    body = {"value_schema": schema, "records": [{"value": {"n": 1}}]}
    avro = "application/vnd.kafka.avro.v2+json"
    topic = "team-a.avro"           # its own: the other tests read A as JSON
    for f in server.admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(30)
    url = f"{server.info['rest_proxy']}/topics/{topic}"
    status, answer, _ = call(url, "POST", body, content_type=avro, headers=login("alice"))
    assert refused(answer, status, f"{topic}-value"), answer
    # a schema by id is fetched from the registry with alice's own login:
    # one registered by admin under a subject she may not read is, to her,
    # an id the registry never gave (issue 67: a 403 named the subject), and
    # the proxy answers as Confluent's for an unknown id
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    admin_registry = SchemaRegistryClient({"url": server.info["schema_registry"],
                                           "basic.auth.user.info": "admin:admin-secret"})
    other = admin_registry.register_schema("team-b-value", Schema(
        '{"type": "record", "name": "S", "fields": [{"name": "s", "type": "string"}]}', "AVRO"))
    status, answer, _ = call(url, "POST", {"value_schema_id": other, "records": [
        {"value": {"s": "x"}}]}, content_type=avro, headers=login("alice"))
    assert status == 408 and answer["error_code"] == 40801, answer
    assert f"Schema {other} not found" in answer["message"] and "team-b" not in answer["message"]
    status, answer, _ = call(url, "POST", {"value_schema_id": other, "records": [
        {"value": {"s": "x"}}]}, content_type=avro, headers=login("admin"))
    assert status == 200, answer
    allow(server.admin, ResourceType.TOPIC, f"subject:{topic}-value", AclOperation.WRITE,
          AclOperation.READ)
    status, answer, _ = call(url, "POST", body, content_type=avro, headers=login("alice"))
    assert status == 200 and answer["value_schema_id"] >= 1, answer
    assert answer["offsets"][0]["error_code"] is None
    # Write removed: the same schema again is refused at once (not
    # answered from the registry client's cache of what it registered)
    for f in server.admin.delete_acls([AclBindingFilter(
            ResourceType.TOPIC, f"subject:{topic}-value", ResourcePatternType.LITERAL,
            "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        assert len(f.result(30)) == 1
    status, answer, _ = call(url, "POST", body, content_type=avro, headers=login("alice"))
    assert refused(answer, status, f"{topic}-value"), answer


def test_topics_are_listed_described_created_and_deleted_under_the_acls(server):
    def listed(user):
        return {t["topic_name"] for t in call(server.topics, headers=login(user))[1]["data"]}
    assert A in listed("alice") and OTHER not in listed("alice")   # Write/Read imply Describe
    assert listed("bob") == set() and {A, OTHER} <= listed("admin")
    assert call(f"{server.topics}/{A}", headers=login("alice"))[0] == 200
    status, answer, _ = call(f"{server.topics}/{OTHER}/partitions", headers=login("alice"))
    assert refused(answer, status, OTHER)
    # configs need DescribeConfigs, which Write and Read do not imply
    status, answer, _ = call(f"{server.topics}/{A}/configs", headers=login("alice"))
    assert refused(answer, status, A)
    allow(server.admin, ResourceType.TOPIC, A, AclOperation.DESCRIBE_CONFIGS)
    assert call(f"{server.topics}/{A}/configs", headers=login("alice"))[0] == 200
    # Create on the topic (or the cluster), Delete on it
    status, answer, _ = call(server.topics, "POST", {"topic_name": "team-a.new.x",
                                                     "partitions_count": 1},
                             headers=login("alice"))
    assert status == 201, answer
    status, answer, _ = call(server.topics, "POST", {"topic_name": "team-b.x",
                                                     "partitions_count": 1},
                             headers=login("alice"))
    assert refused(answer, status, "team-b.x")
    assert "team-b.x" not in listed("admin")
    status, answer, _ = call(f"{server.topics}/{A}", "DELETE", headers=login("alice"))
    assert refused(answer, status, A) and A in listed("admin")
    assert call(f"{server.topics}/team-a.new.x", "DELETE", headers=login("alice"))[0] == 204


def test_a_consumer_instance_reads_and_commits_as_its_user(server):
    url = server.info["rest_proxy"]
    for i in range(3):
        call(f"{server.topics}/{A}/records", "POST", {"value": {"data": {"n": i}}},
             headers=login("admin"))

    def create(user, group, name):
        return call(f"{url}/consumers/{group}", "POST", {"name": name, "format": "json",
                                                          "auto.offset.reset": "earliest"},
                    content_type=V2, headers=login(user))[0]
    assert create("alice", GA, "a") == 200 and create("alice", GB, "b") == 200
    inst, other = f"{url}/consumers/{GA}/instances/a", f"{url}/consumers/{GB}/instances/b"
    # Read on the group: denied for team-b's group, before the consumer joins it
    status, answer, _ = call(f"{other}/subscription", "POST", {"topics": [A]},
                             content_type=V2, headers=login("alice"))
    assert refused(answer, status, f"Not authorized to access group: {GB}")
    # Read on each topic
    status, answer, _ = call(f"{inst}/subscription", "POST", {"topics": [OTHER]},
                             content_type=V2, headers=login("alice"))
    assert refused(answer, status, OTHER)
    assert call(f"{inst}/subscription", "POST", {"topics": [A]}, content_type=V2,
                headers=login("alice"))[0] == 204
    # the instance is alice's: another user cannot drive it, nor read through it
    status, answer, _ = call(f"{inst}/records?timeout=100", accept=V2_JSON, headers=login("bob"))
    assert status == 403 and answer["error_code"] == 40301
    got = []
    wait_until(lambda: got.extend(call(f"{inst}/records?timeout=500", accept=V2_JSON,
                                       headers=login("alice"))[1]) or len(got) >= 3,
               timeout=30, message="alice's records")
    assert call(f"{inst}/offsets", "POST", {}, content_type=V2,
                headers=login("alice"))[0] == 200
    status, answer, _ = call(f"{inst}/offsets", "GET", {"partitions": [
        {"topic": A, "partition": 0}]}, content_type=V2, headers=login("alice"))
    assert status == 200 and answer["offsets"][0]["offset"] >= 3
    status, answer, _ = call(f"{inst}/offsets", "POST", {"offsets": [
        {"topic": OTHER, "partition": 0, "offset": 0}]}, content_type=V2,
        headers=login("alice"))
    assert refused(answer, status, OTHER)
    assert call(inst, "DELETE", headers=login("bob"))[0] == 403
    assert call(inst, "DELETE", headers=login("alice"))[0] == 204


def test_a_pattern_subscription_reads_only_the_topics_the_user_may_read(server):
    url = server.info["rest_proxy"]
    for topic in (A, OTHER):
        assert call(f"{server.topics}/{topic}/records", "POST", {"value": {"data": topic}},
                    headers=login("admin"))[0] == 200
    inst = f"{url}/consumers/{GA}/instances/p"
    assert call(f"{url}/consumers/{GA}", "POST", {"name": "p", "format": "json",
                                                  "auto.offset.reset": "earliest"},
                content_type=V2, headers=login("alice"))[0] == 200
    assert call(f"{inst}/subscription", "POST", {"topic_pattern": "(team-a\\.orders|other)"},
                content_type=V2, headers=login("alice"))[0] == 204
    got = []
    wait_until(lambda: got.extend(call(f"{inst}/records?timeout=500", accept=V2_JSON,
                                       headers=login("alice"))[1])
               or any(r["value"] == A for r in got), timeout=30, message="team-a's record")
    for _ in range(3):          # other's record was fetched by now too: never answered
        got += call(f"{inst}/records?timeout=300", accept=V2_JSON, headers=login("alice"))[1]
    assert {r["topic"] for r in got} == {A}
    assert call(inst, "DELETE", headers=login("alice"))[0] == 204


def test_an_acl_removed_stops_the_next_fetch(server):
    url, group = server.info["rest_proxy"], "team-a.brief"
    allow(server.admin, ResourceType.GROUP, group, AclOperation.READ)
    inst = f"{url}/consumers/{group}/instances/c"
    assert call(f"{url}/consumers/{group}", "POST", {"name": "c", "format": "json"},
                content_type=V2, headers=login("alice"))[0] == 200
    assert call(f"{inst}/subscription", "POST", {"topics": [A]}, content_type=V2,
                headers=login("alice"))[0] == 204
    assert call(f"{inst}/records?timeout=200", accept=V2_JSON, headers=login("alice"))[0] == 200
    for f in server.admin.delete_acls([AclBindingFilter(
            ResourceType.GROUP, group, ResourcePatternType.LITERAL, "User:alice", "*",
            AclOperation.READ, AclPermissionType.ALLOW)]).values():
        assert len(f.result(30)) == 1
    status, answer, _ = call(f"{inst}/records?timeout=200", accept=V2_JSON,
                             headers=login("alice"))
    assert refused(answer, status, f"Not authorized to access group: {group}")
    assert call(inst, "DELETE", headers=login("alice"))[0] == 204


def test_consumer_groups_are_listed_and_described_under_the_acls(server):
    url = f"{server.info['rest_proxy']}/v3/clusters/{server.cluster}/consumer-groups"
    # a group alice may not see, with offsets (the admin's, through the proxy)
    admin_inst = f"{server.info['rest_proxy']}/consumers/{GB}/instances/z"
    assert call(f"{server.info['rest_proxy']}/consumers/{GB}", "POST", {"name": "z"},
                content_type=V2, headers=login("admin"))[0] == 200
    assert call(f"{admin_inst}/offsets", "POST", {"offsets": [
        {"topic": A, "partition": 0, "offset": 0}]}, content_type=V2,
        headers=login("admin"))[0] == 200
    call(admin_inst, "DELETE", headers=login("admin"))
    assert call(f"{url}/{GB}", headers=login("admin"))[0] == 200
    groups = {g["consumer_group_id"] for g in call(url, headers=login("alice"))[1]["data"]}
    assert GB not in groups
    assert GB in {g["consumer_group_id"] for g in call(url, headers=login("admin"))[1]["data"]}
    status, answer, _ = call(f"{url}/{GB}", headers=login("alice"))
    assert refused(answer, status, f"Not authorized to access group: {GB}")
    # alice's own group (Read implies Describe), with its committed offsets
    assert call(f"{server.info['rest_proxy']}/consumers/{GA}", "POST", {"name": "lag"},
                content_type=V2, headers=login("alice"))[0] == 200
    assert call(f"{server.info['rest_proxy']}/consumers/{GA}/instances/lag/offsets", "POST",
                {"offsets": [{"topic": A, "partition": 0, "offset": 0}]}, content_type=V2,
                headers=login("alice"))[0] == 200
    assert GA in {g["consumer_group_id"] for g in call(url, headers=login("alice"))[1]["data"]}
    assert call(f"{url}/{GA}", headers=login("alice"))[0] == 200
    status, answer, _ = call(f"{url}/{GA}/lag-summary", headers=login("alice"))
    assert status == 200 and answer["max_lag_topic_name"] == A, answer
    status, answer, _ = call(f"{url}/{GB}/lag-summary", headers=login("bob"))
    assert refused(answer, status, GB)


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("proxy-acls-open")
    srv = secured_server(root, PASSWORDS, allow_everyone=True)
    try:        # a setup that fails stops the server too
        admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
        for f in admin.create_topics([NewTopic(A, 1, 1), NewTopic(OTHER, 1, 1)]).values():
            f.result(30)
        allow(admin, ResourceType.TOPIC, A, AclOperation.WRITE)
        yield srv
    finally:
        stop_server(srv)


def test_allow_everyone_if_no_acl_found(open_server):
    url = open_server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters", headers=login("bob"))[1]["data"][0]["cluster_id"]
    topics = f"{url}/v3/clusters/{cluster}/topics"
    # no ACL on the topic: everyone may; an ACL for alice only: bob may not
    assert call(f"{topics}/{OTHER}/records", "POST", {"value": {"data": 1}},
                headers=login("bob"))[0] == 200
    status, answer, _ = call(f"{topics}/{A}/records", "POST", {"value": {"data": 1}},
                             headers=login("bob"))
    assert refused(answer, status, A)
    assert call(f"{topics}/{A}/records", "POST", {"value": {"data": 1}},
                headers=login("alice"))[0] == 200
