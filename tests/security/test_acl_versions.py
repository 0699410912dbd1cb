"""ACL changes always reach the workers, and a worker never decides with
ACLs it knows are out of date (issue 67, item 3;
kafkalite/server/controller/acl_control.py's versions).

Before, a change was sent only to the unfenced workers; a worker fenced
for a stall, rejoining, is unfenced only once its start (the ``assign``
carrying the ACLs of the moment it was sent) is done, so a change made
between the two never reached it: a revoked user kept being served by it
until the next change. Now every change bumps the ACLs' version and goes
to every worker with a process, fenced or not; every control message names
the version, and a worker that sees one it has not applied refuses what its
ACLs decide with the retriable NOT_LEADER_OR_FOLLOWER until the ACLs come,
which the controller sends again to a worker whose heartbeat names another
version.

Servers of the tests' own (the tests stop a worker, or drop its messages):
SASL_PLAINTEXT listeners, the authorizer on, User:admin a super user; alice
and bob may use the topic ``alice-t`` until alice's rights are revoked.
Each asks worker 0 directly (ListOffsets on its Kafka port: Metadata, which
the controller answers, would tell the revocation first).
"""
from __future__ import annotations

import os
import pwd
import signal
import threading
import time

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from harness import sasl_config, secured_server, stop_server, wait_until
from kafkalite import errors
from kafkalite.client.blocking_kafka_client import BlockingKafkaClient, parse_servers
from kafkalite.client.connection import Connection
from kafkalite.client.ring_link import RingLink
from kafkalite.protocol import ApiKey
from kafkalite.server.node.processes import DROP_ACLS_FAULT, FAULT_ENV

# each test starts its own server (no server fixture): out of the unit tier
pytestmark = pytest.mark.processes

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
TOPIC, PARTITIONS = "alice-t", 4
ALLOWED, DENIED, RETRIABLE = 0, 29, 6     # TOPIC_AUTHORIZATION_FAILED, NOT_LEADER_OR_FOLLOWER
ME = "User:unix:" + pwd.getpwuid(os.getuid()).pw_name      # this process on a local door


def start(tmp_path):
    """The server, the topic, alice's and bob's ACLs; worker 0's Kafka port."""
    srv = secured_server(tmp_path, PASSWORDS,
                         ["--log-level", "INFO", "--broker-session-timeout-ms", "2000"])
    try:
        admin = AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(60)
        for f in admin.create_acls([AclBinding(
                ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, principal, "*",
                AclOperation.ALL, AclPermissionType.ALLOW)
                for principal in ("User:alice", "User:bob", ME)]).values():
            f.result(30)
        port = admin.list_topics(timeout=10).brokers[0].port
    except BaseException:
        stop_server(srv)
        raise
    return srv, port


def client(port: int, user: str, host: str = "127.0.0.1") -> BlockingKafkaClient:
    return BlockingKafkaClient(host, port, {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user, "sasl.password": PASSWORDS[user]}, "test-acl-versions", 30)


def codes(port: int, user: str) -> set[int]:
    """The error codes of ``user``'s ListOffsets of every partition, asked
    of the worker on ``port`` (its leaderships answer 0 when allowed)."""
    c = client(port, user)
    try:
        answer = c.request(ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0, "timeout_ms": 1000, "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": p, "timestamp": -1}
                                               for p in range(PARTITIONS)]}]}, 30)
    finally:
        c.close()
    return {p["error_code"] for t in answer["topics"] for p in t["partitions"]}


def attach_ring(srv) -> None:
    """A ring attached to worker 0 through its local door (as ME), and closed."""
    conn = Connection(srv.info["workers"][0]["endpoint"], "keyless")
    try:
        RingLink(conn, 1 << 16, 5.0).close()
    finally:
        conn.close()


def revoke_alice(srv) -> dict:
    """DeleteAcls of alice's rights, asked of the controller itself (a
    Kafka admin client may send it to the stopped worker)."""
    host, port = parse_servers(srv.kafka_bootstrap)[0]
    c = client(port, "admin", host)
    try:
        return c.request(ApiKey.DELETE_ACLS, {"filters": [{
            "resource_type_filter": ResourceType.TOPIC.value, "resource_name_filter": TOPIC,
            "pattern_type_filter": ResourcePatternType.LITERAL.value,
            "principal_filter": "User:alice", "host_filter": "*",
            "operation": AclOperation.ANY.value, "permission_type": AclPermissionType.ANY.value}]},
            30)
    finally:
        c.close()


def served_alice_never_then_denied(port: int, timeout: float = 20) -> None:
    """Alice is refused by the worker at every ask, until it denies her."""
    def denied() -> bool:
        seen = codes(port, "alice")
        assert ALLOWED not in seen, "worker 0 served alice with the ACLs before the revocation"
        return seen == {DENIED}
    wait_until(denied, timeout, "worker 0 denying alice", interval=0.1)


def test_a_revocation_made_while_a_rejoining_workers_start_is_on_its_way_takes_effect(
        tmp_path):
    srv, port = start(tmp_path)
    worker = srv.worker_pid(0)
    try:
        assert codes(port, "alice") == {ALLOWED, RETRIABLE}   # its leaderships, and the others
        # a stall: the controller fences worker 0 ...
        os.kill(worker, signal.SIGSTOP)
        wait_until(lambda: f"worker 0 (pid {worker}) sent no heartbeat" in srv.output(), 30,
                   "worker 0 fenced")
        # ... which, starved, beats again and is sent its start, but has not
        # done it yet (it runs a millisecond in fifty until the start is sent)
        seen = len(srv.output())
        deadline = time.monotonic() + 60
        while f"worker 0 (pid {worker}) is up" not in srv.output()[seen:]:
            assert time.monotonic() < deadline, "worker 0 was never sent its start again"
            os.kill(worker, signal.SIGCONT)
            time.sleep(0.001)
            os.kill(worker, signal.SIGSTOP)
            time.sleep(0.05)
        answer = revoke_alice(srv)          # the old code sent this to unfenced workers only
        assert answer["filter_results"][0]["matching_acls"], answer
        os.kill(worker, signal.SIGCONT)
        served_alice_never_then_denied(port)
        assert ALLOWED in codes(port, "bob")        # it serves on, with the new ACLs
    finally:
        os.kill(worker, signal.SIGCONT)
        stop_server(srv)


def test_a_worker_whose_acls_push_was_lost_refuses_retriably_until_it_catches_up(
        tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"{DROP_ACLS_FAULT}{tmp_path}")
    (tmp_path / "server").mkdir()
    srv, port = start(tmp_path / "server")
    revoking = None
    try:
        (tmp_path / "drop-acls-0").touch()
        result: dict = {}
        revoking = threading.Thread(target=lambda: result.update(revoke_alice(srv)),
                                    daemon=True)
        revoking.start()
        wait_until(lambda: (tmp_path / "dropped-acls-0").exists(), 20, "the push dropped")
        # told the version by the controller (its heartbeat named the old
        # one), the worker decides nothing with the old ACLs: alice and bob
        # are answered the retriable error, the super user is served
        wait_until(lambda: codes(port, "alice") == {RETRIABLE}, 20,
                   "worker 0 refusing alice retriably")
        assert codes(port, "bob") == {RETRIABLE}
        assert ALLOWED in codes(port, "admin")
        with pytest.raises(errors.NotLeaderOrFollowerError, match="out of date"):
            attach_ring(srv)                    # nor is a ring attached meanwhile
        (tmp_path / "drop-acls-0").unlink()
        served_alice_never_then_denied(port)
        assert ALLOWED in codes(port, "bob")
        attach_ring(srv)
        revoking.join(30)
        assert result["filter_results"][0]["matching_acls"], result
    finally:
        stop_server(srv)
