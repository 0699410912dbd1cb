"""The web console acts as the user logged in, under the ACLs (issue 40,
kafkalite/webconsole/authorization.py).

Before, only super users could use the console on a server with the
authorizer on (everyone else got 403 for everything), because it reaches
the node with the server's own key pair and would have shown anyone what
their ACLs deny. Now any SASL user logs in, and each action is decided
as that user's equivalent Kafka request would be: topics they may not
describe are not listed or counted, records need Read, a change needs
Create, Delete or Read on the group and its topics; a denial is a 403 whose
JSON names the operation and resource, and nothing is done.

One server for the module: SASL_PLAINTEXT listeners, the authorizer on,
User:admin a super user; alice may Read and Describe topic A and Read group
GA only; topic B and group GB are another team's.
"""
from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from harness import sasl_config, secured_server, stop_server, wait_until

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
A, B, GA, GB = "team-a.orders", "team-b.payroll", "team-a.app", "team-b.app"
RECORDS = 3


def sasl(srv, user: str) -> dict:
    return sasl_config(srv, user, PASSWORDS[user])


def allow(admin: AdminClient, rtype, name: str, *operations) -> None:
    for f in admin.create_acls([AclBinding(rtype, name, ResourcePatternType.LITERAL,
                                           "User:alice", "*", op, AclPermissionType.ALLOW)
                                for op in operations]).values():
        f.result(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("console-as-user"), PASSWORDS, ["--console"])
    admin = AdminClient(sasl(srv, "admin"))
    for f in admin.create_topics([NewTopic(A, 1, 1), NewTopic(B, 1, 1)]).values():
        f.result(30)
    producer = Producer(sasl(srv, "admin"))
    for topic in (A, B):
        for i in range(RECORDS):
            producer.produce(topic, f"{topic}-{i}".encode())
    assert producer.flush(30) == 0
    del producer
    for group, topic in ((GA, A), (GB, B)):
        for f in admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
                group, [TopicPartition(topic, 0, RECORDS)])]).values():
            f.result(30)
    allow(admin, ResourceType.TOPIC, A, AclOperation.READ, AclOperation.DESCRIBE)
    allow(admin, ResourceType.GROUP, GA, AclOperation.READ)
    srv.admin = admin
    yield srv
    stop_server(srv)


def call(srv, path: str, user: str, method: str = "GET", body: dict | None = None):
    """(status, JSON answer) of the console's API, logged in as ``user``,
    with the header and origin the console's own page sends."""
    url = srv.info["console"] + "api/" + path
    host = srv.info["console"].split("/")[2]
    token = base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()
    request = urllib.request.Request(
        url, method=method, data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Basic {token}", "X-Kafkalite-Console": "1",
                 "Origin": f"http://{host}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def denied(answer, operation: str, rtype: str, name: str) -> bool:
    return (answer.get("operation"), answer.get("resource")) == (
        operation, {"type": rtype, "name": name}) and "User:alice may not" in answer["error"]


def topics_of(admin: AdminClient) -> set:
    return set(admin.list_topics(timeout=10).topics)


def test_a_user_sees_and_reads_only_the_topics_their_acls_allow(server):
    status, topics = call(server, "topics", "alice")
    assert status == 200, topics
    assert [t["name"] for t in topics] == [A]              # not B, nor the internal topics
    status, read = call(server, f"topics/{A}/messages", "alice")
    assert status == 200, read
    assert [base64.b64decode(r["value"]).decode() for r in read["records"]] == [
        f"{A}-{i}" for i in range(RECORDS)]
    status, answer = call(server, f"topics/{B}/messages", "alice")
    assert status == 403 and denied(answer, "READ", "TOPIC", B), answer
    assert answer["code"] == "TOPIC_AUTHORIZATION_FAILED" and "records" not in answer
    status, answer = call(server, f"topics/{B}", "alice")
    assert status == 403 and denied(answer, "DESCRIBE", "TOPIC", B), answer
    # A's partitions, but not its configs: Describe does not imply DescribeConfigs
    status, topic = call(server, f"topics/{A}", "alice")
    assert status == 200 and topic["partitions"][0]["end_offset"] == RECORDS, topic
    assert topic["configs"] is None
    status, cluster = call(server, "cluster", "alice")
    assert status == 200 and (cluster["topic_count"], cluster["group_count"]) == (1, 1), cluster
    # node-wide rates and metrics need what /metrics needs: Describe on the cluster
    for path in ("throughput", "metrics"):
        status, answer = call(server, path, "alice")
        assert status == 403 and denied(answer, "DESCRIBE", "CLUSTER", "kafka-cluster"), answer


def test_creating_and_deleting_topics_need_create_and_delete(server, topic_name):
    status, answer = call(server, "topics", "alice", "POST", {"name": topic_name})
    assert status == 403 and denied(answer, "CREATE", "TOPIC", topic_name), answer
    status, answer = call(server, f"topics/{A}", "alice", "DELETE")
    assert status == 403 and denied(answer, "DELETE", "TOPIC", A), answer
    status, answer = call(server, f"topics/{A}/configs", "alice", "POST",
                          {"set": {"retention.ms": "1000"}})
    assert status == 403 and denied(answer, "ALTER_CONFIGS", "TOPIC", A), answer
    assert topic_name not in topics_of(server.admin) and A in topics_of(server.admin)
    allow(server.admin, ResourceType.TOPIC, topic_name, AclOperation.CREATE, AclOperation.DELETE)
    # the ACLs reach the supervisor's authorizer from the controller, at once
    wait_until(lambda: call(server, "topics", "alice", "POST", {"name": topic_name})[0] == 200,
               10, "alice creating the topic once allowed")
    assert topic_name in topics_of(server.admin)
    status, answer = call(server, f"topics/{topic_name}", "alice", "DELETE")
    assert status == 200, answer
    wait_until(lambda: topic_name not in topics_of(server.admin), 10, "the topic deleted")


def test_groups_are_listed_described_and_reset_only_as_the_acls_allow(server):
    status, groups = call(server, "groups", "alice")
    assert status == 200 and [g["group_id"] for g in groups] == [GA], groups
    status, group = call(server, f"groups/{GA}", "alice")
    assert status == 200 and [o["topic"] for o in group["offsets"]] == [A], group
    status, answer = call(server, f"groups/{GB}", "alice")
    assert status == 403 and denied(answer, "DESCRIBE", "GROUP", GB), answer
    status, answer = call(server, f"groups/{GB}/reset-offsets", "alice", "POST",
                          {"spec": "to-earliest"})
    assert status == 403 and denied(answer, "READ", "GROUP", GB), answer
    status, answer = call(server, f"groups/{GA}/reset-offsets", "alice", "POST",
                          {"spec": "to-earliest", "topics": [B]})
    assert status == 403 and denied(answer, "READ", "TOPIC", B), answer
    status, answer = call(server, f"groups/{GA}/reset-offsets", "alice", "POST",
                          {"spec": "to-earliest"})
    assert status == 200 and answer["offsets"] == [{"topic": A, "partition": 0, "offset": 0}]
    committed = server.admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(GB, [TopicPartition(B, 0)])])[GB].result(30)
    assert committed.topic_partitions[0].offset == RECORDS        # the other team's, untouched


def test_a_super_user_still_does_everything(server, topic_name):
    status, topics = call(server, "topics", "admin")
    assert status == 200 and {A, B} <= {t["name"] for t in topics}, topics
    status, read = call(server, f"topics/{B}/messages", "admin")
    assert status == 200 and len(read["records"]) == RECORDS, read
    status, topic = call(server, f"topics/{B}", "admin")
    assert status == 200 and topic["configs"], topic
    for path in ("throughput", "metrics", "groups", f"groups/{GB}"):
        assert call(server, path, "admin")[0] == 200, path
    assert call(server, "topics", "admin", "POST", {"name": topic_name})[0] == 200
    assert call(server, f"topics/{topic_name}", "admin", "DELETE")[0] == 200
