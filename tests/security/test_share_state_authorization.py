"""The share coordinator's APIs (KIP-932's 83-87) against a logged-in user
who is not a broker.

InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState and ReadShareGroupStateSummary are brokers' APIs:
Kafka asks CLUSTER_ACTION on the cluster for them. Before, any user who
could log in could rewrite a share group's state -- move its start offset
back (every record delivered again), mark records acknowledged (never
delivered), delete it, or read it with a high leader epoch (the real
leader's writes fenced from then on).

One server for the module: SASL/PLAIN on the Kafka listener, the
authorizer on (``allow_everyone_if_no_acl_found = false``, super user
``User:admin``) and CURVE on the native port, so that the partition
leaders' own reads and writes of share state (over the supervisor's native
port, with the server's key) go through the same checks as the attacker's.
``User:alice`` sends each API over Kafka's wire and gets
CLUSTER_AUTHORIZATION_FAILED for each partition; afterwards the state read
by the super user is what it was, and a share consumer of the group gets
the new records and no old one again. Granted CLUSTER_ACTION, alice may.
"""
from __future__ import annotations

import os
import sys
import uuid

import pytest

from harness import ServerProcess, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, NewTopic, Producer, ShareConsumer
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AclOperation, AclPermissionType, PatternType, ResourceType
from kafkalite.server.auth.authorizer import CLUSTER_NAME

for _helpers in ("compat", "server"):     # KafkaWire and add_user; the CURVE key helpers
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", _helpers))
from compat_helpers import KafkaWire, add_user  # noqa: E402
from curve_helpers import client_keys, keygen  # noqa: E402

CLUSTER_DENIED = errors.ClusterAuthorizationFailedError.code
USERS = ("admin", "alice", "bob")
GROUP = "queue-workers"
FIRST = 10                    # records consumed before the attack


def password(user: str) -> str:
    return f"{user}-pw-40"


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("share-state-keys")
    keygen(root / "authorized", "admin")
    keygen(root, "server")
    return root


@pytest.fixture(scope="module")
def srv(keys):
    data = str(keys / "data")
    os.makedirs(data, exist_ok=True)
    for user in USERS:
        add_user(data, user, password(user), "PLAIN")
    config = keys / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n'
                      'allow_everyone_if_no_acl_found = false\n'
                      'share_auto_offset_reset = "earliest"\n')
    s = ServerProcess(data, extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN",
        "--native-curve-secret-key-file", str(keys / "server.key_secret"),
        "--native-curve-authorized-keys", str(keys / "authorized")]).start()
    try:
        yield s
    finally:
        s.stop()
        s.kill()


def native_admin(srv, keys, **extra) -> dict:
    """The super user's native client settings (its CURVE key)."""
    return srv.config(**client_keys(keys, "admin"), **extra)


class SaslWire(KafkaWire):
    """A Kafka connection logged in with SASL/PLAIN."""

    def __init__(self, srv, user: str):
        super().__init__(srv.kafka_bootstrap)
        assert self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0" + user.encode() + b"\0" + password(user).encode()
        answer = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert answer["error_code"] == 0, answer


def state_request(wire, api, group, topic_id, fields: dict) -> dict:
    """Partition 0's answer to ``api`` for ``group`` and ``topic_id``."""
    answer = wire.request(api, 0, {"group_id": group, "topics": [
        {"topic_id": topic_id, "partitions": [{"partition": 0, **fields}]}]})
    [result] = answer["results"]
    assert result["topic_id"] == topic_id
    [partition] = result["partitions"]
    assert partition["partition"] == 0
    return partition


def read_state(wire, group, topic_id) -> tuple:
    """(error, state epoch, start offset, batches); a leader epoch of -1 changes nothing."""
    p = state_request(wire, ApiKey.READ_SHARE_GROUP_STATE, group, topic_id,
                      {"leader_epoch": -1})
    return (p["error_code"], p["state_epoch"], p["start_offset"],
            [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
             for b in p["state_batches"]])


# What an attacker would send: each one, let through, changes what the group delivers.
def attacks(state_epoch: int, end: int) -> list:
    replay = [{"first_offset": 0, "last_offset": end - 1, "delivery_state": 0,
               "delivery_count": 0}]
    return [
        # back to offset 0 under a newer state epoch: everything delivered again
        (ApiKey.INITIALIZE_SHARE_GROUP_STATE,
         {"state_epoch": state_epoch + 1, "start_offset": 0}),
        # a leader epoch far ahead: the real leader's next writes are fenced
        (ApiKey.READ_SHARE_GROUP_STATE, {"leader_epoch": 1_000_000}),
        # the consumed records made available again
        (ApiKey.WRITE_SHARE_GROUP_STATE,
         {"state_epoch": state_epoch, "leader_epoch": 1_000_000, "start_offset": 0,
          "state_batches": replay}),
        (ApiKey.DELETE_SHARE_GROUP_STATE, {}),
        (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, {"leader_epoch": 1_000_000}),
    ]


def consume(config: dict, topic: str, n: int, timeout: float = 30.0) -> list[int]:
    """The offsets a share consumer of ``GROUP`` gets until it has ``n``
    (each accepted), then a little longer to see that no other comes."""
    got: list[int] = []
    c = ShareConsumer({**config, "group.id": GROUP, "fetch.max.wait.ms": 100})
    try:
        c.subscribe([topic])

        def more():
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
            return len(got) >= n
        wait_until(more, timeout, lambda: f"{n} records of {topic} (got {got})", interval=0)
        for _ in range(4):                       # nothing more: no record handed out twice
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.offset())
        c.commit_sync(10)
    finally:
        c.close()
    return got


def topic_id_of(wire, name: str) -> uuid.UUID:
    md = wire.request(ApiKey.METADATA, 12, {
        "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    return md["topics"][0]["topic_id"]


def produce(config: dict, topic: str, n: int) -> None:
    p = Producer(config)
    for i in range(n):
        p.produce(topic, b"%d" % i, partition=0)
    assert p.flush(30) == 0
    p.close()


def test_a_user_without_cluster_action_cannot_touch_share_state(srv, keys):
    topic = "share-state-victim"
    admin_native = native_admin(srv, keys)
    client = AdminClient(admin_native)
    try:
        client.create_topics([NewTopic(topic, 1)])[topic].result()
    finally:
        client.close()
    produce(admin_native, topic, FIRST)
    # the group takes the first records, through the partition leader's own
    # share-state reads and writes (CURVE, the server's principal)
    assert sorted(consume(admin_native, topic, FIRST)) == list(range(FIRST))

    admin, alice = SaslWire(srv, "admin"), SaslWire(srv, "alice")
    try:
        tid = topic_id_of(admin, topic)
        before = read_state(admin, GROUP, tid)
        error, state_epoch, start, _ = before
        assert error == 0 and start == FIRST, before      # all accepted: SPSO past them
        for api, fields in attacks(state_epoch, FIRST):
            answer = state_request(alice, api, GROUP, tid, fields)
            assert answer["error_code"] == CLUSTER_DENIED, (api.name, answer)
            assert answer["error_message"], api.name
            # nothing of the state told either
            assert answer.get("start_offset", -1) == -1, (api.name, answer)
            assert not answer.get("state_batches"), (api.name, answer)
        assert read_state(admin, GROUP, tid) == before
    finally:
        admin.close()
        alice.close()
    # the group goes on from where it was: the new records, no old one again
    produce(admin_native, topic, 5)
    assert sorted(consume(admin_native, topic, 5)) == list(range(FIRST, FIRST + 5))
    assert "Principal = User:alice is Denied Operation = ClusterAction" in srv.output()


def test_cluster_action_or_a_super_user_may(srv):
    """The same requests from a principal with CLUSTER_ACTION (as a broker's
    own) and from the super user are served; another user is still denied."""
    tid = uuid.uuid4()                            # a share-partition of its own
    admin, alice, bob = SaslWire(srv, "admin"), SaslWire(srv, "alice"), SaslWire(srv, "bob")
    acl = {"resource_type": ResourceType.CLUSTER, "resource_name": CLUSTER_NAME,
           "resource_pattern_type": PatternType.LITERAL, "principal": "User:alice",
           "host": "*", "operation": AclOperation.CLUSTER_ACTION,
           "permission_type": AclPermissionType.ALLOW}
    try:
        write = {"state_epoch": 0, "leader_epoch": 1, "start_offset": 20,
                 "state_batches": [{"first_offset": 20, "last_offset": 24,
                                    "delivery_state": 0, "delivery_count": 1}]}
        assert state_request(alice, ApiKey.WRITE_SHARE_GROUP_STATE, "g-alice", tid,
                             write)["error_code"] == CLUSTER_DENIED
        created = admin.request(ApiKey.CREATE_ACLS, 3, {"creations": [acl]})
        assert created["results"][0]["error_code"] == 0, created
        # the ACLs reach the supervisor's authorizer through its own control path
        wait_until(lambda: state_request(alice, ApiKey.WRITE_SHARE_GROUP_STATE, "g-alice",
                                         tid, write)["error_code"] == 0,
                   10, "alice's write with CLUSTER_ACTION")
        assert read_state(alice, "g-alice", tid) == (0, 0, 20, [(20, 24, 0, 1)])
        summary = state_request(alice, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, "g-alice", tid,
                                {"leader_epoch": -1})
        assert (summary["error_code"], summary["start_offset"]) == (0, 20)
        assert state_request(alice, ApiKey.INITIALIZE_SHARE_GROUP_STATE, "g-alice", tid,
                             {"state_epoch": 1, "start_offset": 30})["error_code"] == 0
        assert read_state(alice, "g-alice", tid) == (0, 1, 30, [])
        # bob has no ACL: still denied, and the state is alice's
        assert state_request(bob, ApiKey.DELETE_SHARE_GROUP_STATE, "g-alice", tid,
                             {})["error_code"] == CLUSTER_DENIED
        assert read_state(admin, "g-alice", tid) == (0, 1, 30, [])
        # the super user needs no ACL
        assert state_request(admin, ApiKey.DELETE_SHARE_GROUP_STATE, "g-alice", tid,
                             {})["error_code"] == 0
        assert read_state(alice, "g-alice", tid) == (0, 0, -1, [])
    finally:
        admin.request(ApiKey.DELETE_ACLS, 3, {"filters": [{
            "resource_type_filter": ResourceType.CLUSTER, "resource_name_filter": None,
            "pattern_type_filter": PatternType.ANY, "principal_filter": "User:alice",
            "host_filter": None, "operation": AclOperation.ANY,
            "permission_type": AclPermissionType.ANY}]})
        for w in (admin, alice, bob):
            w.close()
