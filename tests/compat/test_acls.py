"""Kafka's ACLs on the Kafka listeners: the authorization matrix.

A real server (SASL_PLAINTEXT, PLAIN; ``authorizer_enabled``, super user
``User:admin``) and users added with ``kafkalite users add``. For each API,
``User:alice`` without the ACL Kafka's authorizer asks for is denied with
Kafka's error code and nothing changes (checked afterwards as the super
user); with the ACL the same call succeeds. Kafka's own clients
(confluent-kafka) make the calls they can express; the rest go over a bare
Kafka connection that authenticates with SASL/PLAIN (``SaslWire``), which
also pins exact error codes per API and version. ACLs are created,
listed and deleted with confluent-kafka's AdminClient and ``kafkalite acls``,
and survive a restart; denials and failed logins show in ``/metrics``.
"""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, add_user, first_client_error
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, AlterConfigOpType,
                                   ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourcePatternType, ResourceType)

from harness import ServerProcess, run_cli, scrape, wait_until

from kafkalite.protocol import ApiKey
from soak import setting

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
SECURITY_DISABLED = 54
USERS = ("admin", "alice")
ALICE = "User:alice"
EVERY_ACL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                             AclOperation.ANY, AclPermissionType.ANY)

# the module's server (ACLs, users) is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("acls")


def password(user: str) -> str:
    return f"{user}-secret-1"


def start(root, *, allow_everyone: bool = False) -> ServerProcess:
    data = str(root / "data")
    os.makedirs(data, exist_ok=True)
    config = root / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n'
                      f'allow_everyone_if_no_acl_found = {str(allow_everyone).lower()}\n')
    for user in USERS:
        add_user(data, user, password(user), "PLAIN")
    return ServerProcess(data, extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN"]).start()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = start(tmp_path_factory.mktemp("acls"))
    try:
        yield s
    finally:
        _ADMINS.clear()          # no client left retrying a server that is gone
        s.stop()
        s.kill()


def conf(srv, user: str, **extra) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": password(user),
            "socket.timeout.ms": 10000, **extra}


_ADMINS: dict = {}


def admin(srv, user: str = "admin") -> AdminClient:
    """One AdminClient per server and user, kept: a client dropped before its
    futures complete fails them (_DESTROY)."""
    key = (srv.kafka_bootstrap, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf(srv, user))
    return _ADMINS[key]


def grant(srv, rtype, name, *ops, principal=ALICE, pattern=ResourcePatternType.LITERAL,
          permission=AclPermissionType.ALLOW) -> None:
    bindings = [AclBinding(rtype, name, pattern, principal, "*", op, permission) for op in ops]
    client = admin(srv)
    for f in client.create_acls(bindings, request_timeout=10).values():
        f.result(15)


@pytest.fixture
def clean(srv):
    """Every test starts and ends without ACLs."""
    yield
    client = admin(srv)
    for f in client.delete_acls([EVERY_ACL], request_timeout=10).values():
        f.result(15)


def create_topic(srv, name: str, partitions: int = 1) -> None:
    client = admin(srv)
    client.create_topics([NewTopic(name, partitions)])[name].result(15)


def topics(srv) -> set:
    return set(admin(srv).list_topics(timeout=10).topics)


class SaslWire(KafkaWire):
    """A bare Kafka connection authenticated with SASL/PLAIN."""

    def __init__(self, address: str, user: str = "alice"):
        super().__init__(address)
        assert self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        token = b"\0" + user.encode() + b"\0" + password(user).encode()
        answer = self.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert answer["error_code"] == 0, answer


def wire(srv, user="alice", address=None) -> SaslWire:
    return SaslWire(address or srv.kafka_bootstrap, user)


def leader_address(srv, topic: str) -> str:
    """host:port of the Kafka listener leading partition 0 of ``topic``."""
    w = wire(srv, "admin")
    try:
        md = w.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}],
                                             "allow_auto_topic_creation": False})
    finally:
        w.close()
    leader = md["topics"][0]["partitions"][0]["leader_id"]
    b = next(b for b in md["brokers"] if b["node_id"] == leader)
    return f"{b['host']}:{b['port']}"


def high_watermark(srv, topic: str) -> int:
    c = ck.Consumer(conf(srv, "admin", **{"group.id": "hw-probe"}))
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def produce(srv, user: str, topic: str, value: bytes = b"v", **extra):
    """The delivery error (None: delivered)."""
    p = ck.Producer(conf(srv, user, **{"message.timeout.ms": 8000, **extra}))
    outcome = []
    p.produce(topic, value, on_delivery=lambda err, msg: outcome.append(err))
    p.flush(15)
    return outcome[0] if outcome else "not delivered"


# ---- Produce, Fetch, Metadata -----------------------------------------------------------------

def test_produce_needs_topic_write(srv, clean):
    create_topic(srv, "acl-produce")
    err = produce(srv, "alice", "acl-produce")
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(srv, ResourceType.TOPIC, "acl-produce", AclOperation.DESCRIBE)
    # Metadata allowed now: the Produce request itself is refused
    err = produce(srv, "alice", "acl-produce")
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert high_watermark(srv, "acl-produce") == 0
    grant(srv, ResourceType.TOPIC, "acl-produce", AclOperation.WRITE)
    assert produce(srv, "alice", "acl-produce") is None
    assert high_watermark(srv, "acl-produce") == 1
    # DeleteAcls is answered once the workers have dropped the ACL too
    client = admin(srv)
    deleted = list(client.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "acl-produce", ResourcePatternType.LITERAL, ALICE, None,
        AclOperation.WRITE, AclPermissionType.ALLOW)]).values())[0].result(15)
    assert len(deleted) == 1
    err = produce(srv, "alice", "acl-produce")
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert high_watermark(srv, "acl-produce") == 1


def test_produce_over_the_wire_answers_denied_topics_and_serves_the_others(srv, clean):
    create_topic(srv, "acl-mixed-a")
    create_topic(srv, "acl-mixed-b")
    address = leader_address(srv, "acl-mixed-a")
    if leader_address(srv, "acl-mixed-b") != address:
        pytest.skip("the two topics have different leaders")
    grant(srv, ResourceType.TOPIC, "acl-mixed-a", AclOperation.WRITE)
    from kafkalite.record import RecordBatchBuilder
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, None, b"x")
    batch = bytes(builder.build())
    w = wire(srv, address=address)
    try:
        answer = w.request(ApiKey.PRODUCE, 9, {"acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": t, "partition_data": [{"index": 0, "records": batch}]}
            for t in ("acl-mixed-a", "acl-mixed-b")]})
    finally:
        w.close()
    codes = {t["name"]: t["partition_responses"][0]["error_code"] for t in answer["responses"]}
    assert codes == {"acl-mixed-a": 0, "acl-mixed-b": TOPIC_DENIED}
    assert high_watermark(srv, "acl-mixed-a") == 1
    assert high_watermark(srv, "acl-mixed-b") == 0


def consume(srv, user: str, topic: str, n: int, timeout: float = 15.0, **extra):
    """(values, first error code) reading ``topic`` from the beginning."""
    c = ck.Consumer(conf(srv, user, **{"group.id": extra.pop("group", "acl-reader"),
                                       "enable.auto.commit": False,
                                       "auto.offset.reset": "earliest", **extra}))
    values, error = [], None
    try:
        c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while len(values) < n and error is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() != ck.KafkaError._PARTITION_EOF:
                    error = m.error().code()
                continue
            values.append(m.value())
    finally:
        c.close()
    return values, error


def test_fetch_needs_topic_read(srv, clean):
    create_topic(srv, "acl-fetch")
    assert produce(srv, "admin", "acl-fetch", b"secret") is None
    grant(srv, ResourceType.TOPIC, "acl-fetch", AclOperation.DESCRIBE)
    # librdkafka's consumer finds its group's coordinator before it fetches
    grant(srv, ResourceType.GROUP, "acl-reader", AclOperation.READ)
    w = wire(srv, "admin")
    try:
        topic_id = w.request(ApiKey.METADATA, 12, {"topics": [{"name": "acl-fetch"}]})[
            "topics"][0]["topic_id"]
    finally:
        w.close()
    w = wire(srv, address=leader_address(srv, "acl-fetch"))

    def fetch(version: int) -> tuple:
        r = w.request(ApiKey.FETCH, version, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
            "session_id": 0, "session_epoch": -1, "topics": [{
                "topic": "acl-fetch", "topic_id": topic_id, "partitions": [{
                    "partition": 0, "fetch_offset": 0, "current_leader_epoch": -1,
                    "partition_max_bytes": 1 << 20}]}]})
        p = r["responses"][0]["partitions"][0]
        return p["error_code"], len(p["records"] or b"")

    try:
        # by name (v12) and by topic id (v13+)
        assert fetch(12) == (TOPIC_DENIED, 0) and fetch(13) == (TOPIC_DENIED, 0)
        grant(srv, ResourceType.TOPIC, "acl-fetch", AclOperation.READ)
        assert fetch(12)[0] == 0 and fetch(13)[0] == 0 and fetch(13)[1] > 0
    finally:
        w.close()
    values, error = consume(srv, "alice", "acl-fetch", 1)
    assert values == [b"secret"] and error is None


def test_metadata_hides_topics_and_auto_create_needs_create(srv, clean):
    create_topic(srv, "acl-md-visible")
    create_topic(srv, "acl-md-hidden")
    grant(srv, ResourceType.TOPIC, "acl-md-visible", AclOperation.READ)
    seen = set(admin(srv, "alice").list_topics(timeout=10).topics)
    assert "acl-md-visible" in seen and "acl-md-hidden" not in seen
    w = wire(srv)
    try:
        md = w.request(ApiKey.METADATA, 12, {"topics": [{"name": "acl-md-hidden"},
                                                        {"name": "acl-md-new"}],
                                             "allow_auto_topic_creation": True})
        assert {t["name"]: t["error_code"] for t in md["topics"]} == {
            "acl-md-hidden": TOPIC_DENIED, "acl-md-new": TOPIC_DENIED}
        assert "acl-md-new" not in topics(srv)
        # auto-creation needs Describe and Create, as Kafka's
        grant(srv, ResourceType.TOPIC, "acl-md-new", AclOperation.DESCRIBE)
        md = w.request(ApiKey.METADATA, 12, {"topics": [{"name": "acl-md-new"}],
                                             "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] == TOPIC_DENIED
        assert "acl-md-new" not in topics(srv)
        grant(srv, ResourceType.TOPIC, "acl-md-new", AclOperation.CREATE)
        md = w.request(ApiKey.METADATA, 12, {"topics": [{"name": "acl-md-new"}],
                                             "allow_auto_topic_creation": True})
        assert md["topics"][0]["error_code"] in (0, 5)     # created (leader maybe not yet)
        assert "acl-md-new" in topics(srv)
    finally:
        w.close()


def test_list_offsets_offset_for_leader_epoch_and_delete_records(srv, clean):
    create_topic(srv, "acl-offsets")
    assert produce(srv, "admin", "acl-offsets", b"a") is None
    assert produce(srv, "admin", "acl-offsets", b"b") is None
    w = wire(srv, address=leader_address(srv, "acl-offsets"))
    try:
        def list_offsets():
            r = w.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": [
                {"name": "acl-offsets", "partitions": [{"partition_index": 0,
                                                        "timestamp": -1}]}]})
            return r["topics"][0]["partitions"][0]

        def epoch():
            r = w.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": [
                {"topic": "acl-offsets", "partitions": [
                    {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]})
            return r["topics"][0]["partitions"][0]["error_code"]

        def delete_records():
            r = w.request(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 5000, "topics": [
                {"name": "acl-offsets", "partitions": [{"partition_index": 0, "offset": 1}]}]})
            return r["topics"][0]["partitions"][0]["error_code"]

        assert list_offsets()["error_code"] == TOPIC_DENIED
        assert epoch() == TOPIC_DENIED
        assert delete_records() == TOPIC_DENIED
        grant(srv, ResourceType.TOPIC, "acl-offsets", AclOperation.DESCRIBE)
        answer = list_offsets()
        assert answer["error_code"] == 0 and answer["offset"] == 2
        assert epoch() == 0
        assert delete_records() == TOPIC_DENIED
        values, _ = consume(srv, "admin", "acl-offsets", 2)
        assert values == [b"a", b"b"]                     # nothing was deleted
        grant(srv, ResourceType.TOPIC, "acl-offsets", AclOperation.DELETE)
        assert delete_records() == 0
        values, _ = consume(srv, "admin", "acl-offsets", 1)
        assert values == [b"b"]
    finally:
        w.close()


# ---- topic administration and configs ---------------------------------------------------------

def test_create_delete_topics_and_partitions(srv, clean):
    alice = admin(srv, "alice")
    with pytest.raises(ck.KafkaException) as exc:
        alice.create_topics([NewTopic("team-a.orders", 1)])["team-a.orders"].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "team-a.orders" not in topics(srv)
    grant(srv, ResourceType.TOPIC, "team-a.", AclOperation.CREATE,
          pattern=ResourcePatternType.PREFIXED)
    alice.create_topics([NewTopic("team-a.orders", 1)])["team-a.orders"].result(15)
    assert "team-a.orders" in topics(srv)
    with pytest.raises(ck.KafkaException) as exc:
        alice.create_partitions([NewPartitions("team-a.orders", 3)])["team-a.orders"].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin(srv).list_topics(timeout=10).topics["team-a.orders"].partitions) == 1
    with pytest.raises(ck.KafkaException) as exc:
        alice.delete_topics(["team-a.orders"])["team-a.orders"].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert "team-a.orders" in topics(srv)
    grant(srv, ResourceType.TOPIC, "team-a.", AclOperation.ALTER, AclOperation.DELETE,
          pattern=ResourcePatternType.PREFIXED)
    alice.create_partitions([NewPartitions("team-a.orders", 3)])["team-a.orders"].result(15)
    assert len(admin(srv).list_topics(timeout=10).topics["team-a.orders"].partitions) == 3
    alice.delete_topics(["team-a.orders"])["team-a.orders"].result(15)
    assert "team-a.orders" not in topics(srv)


def test_create_topics_with_create_on_the_cluster(srv, clean):
    grant(srv, ResourceType.BROKER, "kafka-cluster", AclOperation.CREATE)
    admin(srv, "alice").create_topics([NewTopic("acl-any-name", 1)])["acl-any-name"].result(15)
    assert "acl-any-name" in topics(srv)


def test_describe_and_alter_configs(srv, clean):
    create_topic(srv, "acl-configs")
    alice = admin(srv, "alice")
    resource = ConfigResource("TOPIC", "acl-configs")
    with pytest.raises(ck.KafkaException) as exc:
        alice.describe_configs([resource])[resource].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    change = ConfigResource("TOPIC", "acl-configs", incremental_configs=[
        ConfigEntry("retention.ms", "1234567", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as exc:
        alice.incremental_alter_configs([change])[change].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    configs = admin(srv).describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value != "1234567"
    w = wire(srv)                   # the legacy AlterConfigs too
    try:
        answer = w.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [{
            "resource_type": 2, "resource_name": "acl-configs",
            "configs": [{"name": "retention.ms", "value": "1234567"}]}], "validate_only": False})
        assert answer["responses"][0]["error_code"] == TOPIC_DENIED
    finally:
        w.close()
    broker = ConfigResource("BROKER", "0")
    with pytest.raises(ck.KafkaException) as exc:
        alice.describe_configs([broker])[broker].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    grant(srv, ResourceType.TOPIC, "acl-configs", AclOperation.ALTER_CONFIGS)
    # AlterConfigs implies DescribeConfigs
    assert "retention.ms" in alice.describe_configs([resource])[resource].result(15)
    alice.incremental_alter_configs([change])[change].result(15)
    configs = admin(srv).describe_configs([resource])[resource].result(15)
    assert configs["retention.ms"].value == "1234567"


# ---- groups ------------------------------------------------------------------------------------

def test_consumer_group_needs_group_read(srv, clean):
    create_topic(srv, "acl-group-topic")
    assert produce(srv, "admin", "acl-group-topic", b"g") is None
    grant(srv, ResourceType.TOPIC, "acl-group-topic", AclOperation.READ)

    def member() -> ck.Consumer:
        return ck.Consumer(conf(srv, "alice", **{"group.id": "acl-group", "auto.offset.reset":
                                                 "earliest", "enable.auto.commit": False}))
    c = member()
    try:
        c.subscribe(["acl-group-topic"])
        error, deadline = None, time.monotonic() + 15
        while error is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error():
                error = m.error().code()
        assert error == ck.KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        c.close()
    grant(srv, ResourceType.GROUP, "acl-group", AclOperation.READ)
    c = member()
    try:
        c.subscribe(["acl-group-topic"])
        m, deadline = None, time.monotonic() + 20
        while (m is None or m.error()) and time.monotonic() < deadline:
            m = c.poll(0.5)
        assert m is not None and not m.error() and m.value() == b"g"
        c.commit(message=m, asynchronous=False)
    finally:
        c.close()
    committed = admin(srv).list_consumer_group_offsets(
        [ck.ConsumerGroupTopicPartitions("acl-group")])["acl-group"].result(15)
    assert [(tp.topic, tp.offset) for tp in committed.topic_partitions] == [
        ("acl-group-topic", 1)]


def test_group_apis_over_the_wire(srv, clean):
    create_topic(srv, "acl-g-topic")
    w = wire(srv)
    try:
        def commit(version=8):
            r = w.request(ApiKey.OFFSET_COMMIT, version, {
                "group_id": "acl-g", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": "acl-g-topic", "partitions": [
                    {"partition_index": 0, "committed_offset": 7}]}]})
            return r["topics"][0]["partitions"][0]["error_code"]

        def fetch_offsets():
            return w.request(ApiKey.OFFSET_FETCH, 7, {"group_id": "acl-g", "topics": [
                {"name": "acl-g-topic", "partition_indexes": [0]}]})

        find = w.request(ApiKey.FIND_COORDINATOR, 3, {"key": "acl-g", "key_type": 0})
        assert find["error_code"] == GROUP_DENIED
        find = w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                      "coordinator_keys": ["acl-g"]})
        assert find["coordinators"][0]["error_code"] == GROUP_DENIED
        join = w.request(ApiKey.JOIN_GROUP, 9, {
            "group_id": "acl-g", "session_timeout_ms": 10000, "rebalance_timeout_ms": 10000,
            "member_id": "", "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}]})
        assert join["error_code"] == GROUP_DENIED
        hb = w.request(ApiKey.HEARTBEAT, 4, {"group_id": "acl-g", "generation_id": 1,
                                             "member_id": "m"})
        assert hb["error_code"] == GROUP_DENIED
        assert commit() == GROUP_DENIED
        assert fetch_offsets()["error_code"] == GROUP_DENIED
        # nothing changed: the coordinator has no such group
        assert "acl-g" not in {g.group_id for g in
                               admin(srv).list_consumer_groups().result(15).valid}
        grant(srv, ResourceType.GROUP, "acl-g", AclOperation.READ)
        assert commit() == TOPIC_DENIED               # the group may, the topic may not
        assert w.request(ApiKey.FIND_COORDINATOR, 3, {"key": "acl-g", "key_type": 0})[
            "error_code"] == 0
        offsets = fetch_offsets()
        assert offsets["error_code"] == 0
        assert offsets["topics"][0]["partitions"][0]["error_code"] == TOPIC_DENIED
        grant(srv, ResourceType.TOPIC, "acl-g-topic", AclOperation.READ)
        assert commit() == 0
        offsets = fetch_offsets()
        assert offsets["topics"][0]["partitions"][0]["committed_offset"] == 7
        # the group's offsets of a topic alice may not describe: left out of
        # "every topic" (v8+ groups, topics null)
        create_topic(srv, "acl-g-hidden")
        a = wire(srv, "admin")
        try:
            a.request(ApiKey.OFFSET_COMMIT, 8, {
                "group_id": "acl-g", "generation_id_or_member_epoch": -1, "member_id": "",
                "topics": [{"name": "acl-g-hidden", "partitions": [
                    {"partition_index": 0, "committed_offset": 3}]}]})
        finally:
            a.close()
        every = w.request(ApiKey.OFFSET_FETCH, 9, {"groups": [
            {"group_id": "acl-g", "member_id": None, "member_epoch": -1, "topics": None}]})
        assert [t["name"] for t in every["groups"][0]["topics"]] == ["acl-g-topic"]
        # describe, list, delete
        described = w.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["acl-g", "acl-other"]})
        assert {g["group_id"]: g["error_code"] for g in described["groups"]} == {
            "acl-g": 0, "acl-other": GROUP_DENIED}
        listed = w.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert "acl-g" in {g["group_id"] for g in listed["groups"]}
        deleted = w.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["acl-g"]})
        assert deleted["results"][0]["error_code"] == GROUP_DENIED
        assert fetch_offsets()["topics"][0]["partitions"][0]["committed_offset"] == 7
        grant(srv, ResourceType.GROUP, "acl-g", AclOperation.DELETE)
        deleted = w.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["acl-g"]})
        assert deleted["results"][0]["error_code"] == 0
    finally:
        w.close()
    # the super user sees every group; alice, none she may not describe
    w = wire(srv)
    try:
        admin_groups = {g.group_id for g in admin(srv).list_consumer_groups().result(15).valid}
        alice_groups = {g["group_id"] for g in
                        w.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})["groups"]}
        assert alice_groups <= admin_groups and not alice_groups & {"acl-group", "hw-probe"}
    finally:
        w.close()


def test_share_group_offsets_need_group_and_topic_acls(srv, clean):
    """DescribeShareGroupOffsets: Describe on the group and the topic;
    AlterShareGroupOffsets: Read on both (Kafka's)."""
    create_topic(srv, "acl-s-topic")
    named = {"groups": [{"group_id": "acl-s", "topics": [
        {"topic_name": "acl-s-topic", "partitions": [0]}]}]}
    every = {"groups": [{"group_id": "acl-s", "topics": None}]}

    def alter(w, offset):
        r = w.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, {"group_id": "acl-s", "topics": [
            {"topic_name": "acl-s-topic", "partitions": [
                {"partition_index": 0, "start_offset": offset}]}]})
        return r["responses"][0]["partitions"][0]["error_code"]

    def described(w, body):
        return w.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, 0, body)["groups"][0]
    a, w = wire(srv, "admin"), wire(srv)
    try:
        assert alter(a, 0) == 0                  # the super user makes the group's state
        assert described(w, named)["error_code"] == GROUP_DENIED
        assert alter(w, 0) == GROUP_DENIED
        grant(srv, ResourceType.GROUP, "acl-s", AclOperation.DESCRIBE)
        g = described(w, named)
        assert g["error_code"] == 0
        assert g["topics"][0]["partitions"][0]["error_code"] == TOPIC_DENIED
        assert described(w, every)["topics"] == []        # all topics: left out
        assert alter(w, 0) == GROUP_DENIED                # Describe is not Read
        grant(srv, ResourceType.GROUP, "acl-s", AclOperation.READ)
        assert alter(w, 0) == TOPIC_DENIED
        grant(srv, ResourceType.TOPIC, "acl-s-topic", AclOperation.READ)
        assert alter(w, 0) == 0
        assert described(w, every)["topics"][0]["partitions"][0]["start_offset"] == 0
    finally:
        a.close()
        w.close()


# ---- transactions and idempotence -------------------------------------------------------------

def test_transactional_producer_needs_transactional_id_write(srv, clean):
    create_topic(srv, "acl-txn")
    grant(srv, ResourceType.TOPIC, "acl-txn", AclOperation.WRITE)
    p = ck.Producer(conf(srv, "alice", **{"transactional.id": "acl-tx"}))
    with pytest.raises(ck.KafkaException) as exc:
        p.init_transactions(15)
    assert exc.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    grant(srv, ResourceType.TRANSACTIONAL_ID, "acl-tx", AclOperation.WRITE)
    p = ck.Producer(conf(srv, "alice", **{"transactional.id": "acl-tx"}))
    p.init_transactions(15)
    p.begin_transaction()
    p.produce("acl-txn", b"in a transaction")
    p.commit_transaction(15)
    values, _ = consume(srv, "admin", "acl-txn", 1, **{"isolation.level": "read_committed"})
    assert values == [b"in a transaction"]


def test_transaction_apis_over_the_wire(srv, clean):
    create_topic(srv, "acl-txn-wire")
    w = wire(srv)
    try:
        init = w.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": "acl-tw",
                                                      "transaction_timeout_ms": 10000,
                                                      "producer_id": -1, "producer_epoch": -1})
        assert init["error_code"] == TXN_DENIED
        idem = w.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                      "transaction_timeout_ms": 10000,
                                                      "producer_id": -1, "producer_epoch": -1})
        assert idem["error_code"] == CLUSTER_DENIED
        for api, version, body in (
                (ApiKey.END_TXN, 3, {"transactional_id": "acl-tw", "producer_id": 1,
                                     "producer_epoch": 0, "committed": True}),
                (ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": "acl-tw", "producer_id": 1,
                                                "producer_epoch": 0, "group_id": "g"})):
            assert w.request(api, version, body)["error_code"] == TXN_DENIED, api
        added = w.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": "acl-tw", "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "acl-txn-wire", "partitions": [0]}]})
        assert added["results_by_topic_v3_and_below"][0]["results_by_partition"][0][
            "partition_error_code"] == TXN_DENIED
        added = w.request(ApiKey.ADD_PARTITIONS_TO_TXN, 4, {"transactions": [{
            "transactional_id": "acl-tw", "producer_id": 1, "producer_epoch": 0,
            "verify_only": False, "topics": [{"name": "acl-txn-wire", "partitions": [0]}]}]})
        assert added["results_by_transaction"][0]["topic_results"][0][
            "results_by_partition"][0]["partition_error_code"] == TXN_DENIED
        committed = w.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": "acl-tw", "group_id": "g", "producer_id": 1,
            "producer_epoch": 0, "generation_id": -1, "member_id": "", "topics": [
                {"name": "acl-txn-wire", "partitions": [{"partition_index": 0,
                                                         "committed_offset": 1}]}]})
        assert committed["topics"][0]["partitions"][0]["error_code"] == TXN_DENIED
        # a transactional Produce: every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        grant(srv, ResourceType.TOPIC, "acl-txn-wire", AclOperation.WRITE)
        from kafkalite.record import RecordBatchBuilder
        builder = RecordBatchBuilder(producer_id=1, producer_epoch=0, base_sequence=0,
                                     transactional=True)
        builder.append(1_700_000_000_000, None, b"t")
        leader = wire(srv, address=leader_address(srv, "acl-txn-wire"))
        try:
            answer = leader.request(ApiKey.PRODUCE, 9, {
                "transactional_id": "acl-tw", "acks": -1, "timeout_ms": 5000, "topic_data": [
                    {"name": "acl-txn-wire", "partition_data": [
                        {"index": 0, "records": bytes(builder.build())}]}]})
        finally:
            leader.close()
        assert answer["responses"][0]["partition_responses"][0]["error_code"] == TXN_DENIED
        assert high_watermark(srv, "acl-txn-wire") == 0
        # Kafka 3.x: Write on any topic lets an idempotent producer have an id
        grant(srv, ResourceType.TOPIC, "acl-txn-wire", AclOperation.WRITE)
        idem = w.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                      "transaction_timeout_ms": 10000,
                                                      "producer_id": -1, "producer_epoch": -1})
        assert idem["error_code"] == 0 and idem["producer_id"] >= 0
    finally:
        w.close()


def test_idempotent_producer_with_topic_write(srv, clean):
    create_topic(srv, "acl-idem")
    grant(srv, ResourceType.TOPIC, "acl-idem", AclOperation.WRITE)
    assert produce(srv, "alice", "acl-idem", **{"enable.idempotence": True}) is None
    assert high_watermark(srv, "acl-idem") == 1


# ---- ACL administration, patterns, super users -------------------------------------------------

def test_acl_apis_need_alter_or_describe_on_the_cluster(srv, clean):
    alice = admin(srv, "alice")
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, ALICE, "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException) as exc:
        list(alice.create_acls([binding]).values())[0].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.CLUSTER_AUTHORIZATION_FAILED
    assert admin(srv).describe_acls(EVERY_ACL).result(15) == []
    grant(srv, ResourceType.TOPIC, "y", AclOperation.READ)
    # librdkafka does not raise DescribeAcls' top-level error: the wire shows it
    w = wire(srv)
    try:
        for version in (1, 2, 3):
            answer = w.request(ApiKey.DESCRIBE_ACLS, version, {
                "resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1})
            assert answer["error_code"] == CLUSTER_DENIED and answer["resources"] == []
    finally:
        w.close()
    grant(srv, ResourceType.BROKER, "kafka-cluster", AclOperation.ALTER)
    list(alice.create_acls([binding]).values())[0].result(15)
    assert binding in alice.describe_acls(EVERY_ACL).result(15)   # Alter implies Describe
    assert len(admin(srv).describe_acls(EVERY_ACL).result(15)) == 3
    deleted = list(alice.delete_acls([AclBindingFilter(
        ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, None, None, AclOperation.ANY,
        AclPermissionType.ANY)]).values())[0].result(15)
    assert deleted == [binding]


def test_deny_overrides_allow_and_prefixed_patterns(srv, clean):
    create_topic(srv, "team-b.orders")
    create_topic(srv, "team-b.secret")
    grant(srv, ResourceType.TOPIC, "team-b.", AclOperation.ALL,
          pattern=ResourcePatternType.PREFIXED)
    grant(srv, ResourceType.TOPIC, "team-b.secret", AclOperation.WRITE,
          permission=AclPermissionType.DENY)
    assert produce(srv, "alice", "team-b.orders") is None
    err = produce(srv, "alice", "team-b.secret")
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert high_watermark(srv, "team-b.secret") == 0
    # a deny for every principal does not bind the super user
    grant(srv, ResourceType.TOPIC, "team-b.orders", AclOperation.ALL, principal="User:*",
          permission=AclPermissionType.DENY)
    err = produce(srv, "alice", "team-b.orders")
    assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce(srv, "admin", "team-b.orders") is None


def test_invalid_acls_are_refused(srv, clean):
    bad = AclBinding(ResourceType.BROKER, "not-the-cluster", ResourcePatternType.LITERAL,
                     ALICE, "*", AclOperation.ALTER, AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException) as exc:
        list(admin(srv).create_acls([bad]).values())[0].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_REQUEST
    assert admin(srv).describe_acls(EVERY_ACL).result(15) == []


# ---- the CLI, the audit, restarts, the defaults ------------------------------------------------

def acls_cli(srv, user, *args):
    r = run_cli("acls", *args, "--bootstrap-server", srv.kafka_bootstrap,
                "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                "--sasl-username", user, "--sasl-password", password(user))
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def test_kafkalite_acls_cli(srv, clean, tmp_path):
    r = acls_cli(srv, "alice", "add", "--allow-principal", ALICE, "--operation", "Read",
                 "--topic", "cli-topic")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r.stderr
    r = acls_cli(srv, "admin", "add", "--allow-principal", ALICE, "--operation", "Read",
                 "--operation", "Describe", "--topic", "cli-topic", "--group", "cli-group",
                 "--resource-pattern-type", "prefixed")
    assert r.returncode == 0, r.stderr
    assert len(admin(srv).describe_acls(EVERY_ACL).result(15)) == 4
    # --command-config, as kafka-acls.sh takes it
    props = tmp_path / "admin.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     'sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
                     'required username="admin" password="admin-secret-1";\n')
    r = run_cli("acls", "list", "--topic", "cli-topic", "--resource-pattern-type", "prefixed",
                "--bootstrap-server", srv.kafka_bootstrap, "--command-config", props)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("TOPIC:PREFIXED:cli-topic") for line in lines)
    r = acls_cli(srv, "admin", "remove", "--topic", "cli-topic", "--group", "cli-group",
                 "--resource-pattern-type", "prefixed", "--operation", "Read")
    assert r.returncode == 0 and "removed 2 ACL(s)" in r.stdout, r.stdout + r.stderr
    remaining = admin(srv).describe_acls(EVERY_ACL).result(15)
    assert {b.operation for b in remaining} == {AclOperation.DESCRIBE}


def test_denials_and_failed_logins_are_counted(srv, clean):
    create_topic(srv, "acl-audit")
    produce(srv, "alice", "acl-audit")
    err = first_client_error({**conf(srv, "alice"), "sasl.password": "wrong"}, "acl-audit")
    assert err.code() == ck.KafkaError._AUTHENTICATION, err
    seen = [""]

    def counted() -> bool:
        seen[0] = text = scrape(srv, "admin", password("admin"))
        denied = [line for line in text.splitlines()
                  if line.startswith("kafkalite_authorizer_denied_total{")
                  and 'resource_type="Topic"' in line]
        failures = [line for line in text.splitlines()
                    if line.startswith("kafkalite_authentication_failures_total")]
        return bool(denied and failures and float(failures[0].split()[-1]) >= 1)
    wait_until(counted, 20, lambda: "the denial and the failed login in /metrics: "
               + seen[0][-3000:], interval=0.5)
    assert "is Denied Operation = Describe" in srv.output()


@pytest.mark.processes
def test_acls_survive_a_restart_and_allow_everyone_if_no_acl_found(tmp_path):
    s = start(tmp_path, allow_everyone=True)
    try:
        create_topic(s, "open-topic")
        create_topic(s, "closed-topic")
        grant(s, ResourceType.TOPIC, "closed-topic", AclOperation.READ, principal="User:bob")
        assert produce(s, "alice", "open-topic") is None      # no ACL on it: open to all
        err = produce(s, "alice", "closed-topic")               # ACLs exist: they decide
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        s.stop()
        s.start()
        assert len(admin(s).describe_acls(EVERY_ACL).result(15)) == 1
        err = produce(s, "alice", "closed-topic")
        assert err is not None and err.code() == ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert produce(s, "alice", "open-topic") is None
    finally:
        _ADMINS.clear()
        s.stop()
        s.kill()


def test_acl_apis_without_an_authorizer_answer_security_disabled(server):
    from compat_helpers import kafka_conf
    client = AdminClient(kafka_conf(server))
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, ALICE, "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    with pytest.raises(ck.KafkaException) as exc:
        list(client.create_acls([binding]).values())[0].result(15)
    assert exc.value.args[0].code() == ck.KafkaError.SECURITY_DISABLED
    # and nothing else changed: the embedded default serves everyone
    w = KafkaWire(server.kafka_bootstrap)
    try:
        md = w.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False})
        assert md["topics"] is not None
    finally:
        w.close()


def test_describe_apis_over_the_wire(srv, clean):
    """DescribeTopicPartitions, DescribeProducers, DescribeTransactions,
    ListTransactions, ConsumerGroupDescribe: denied entries are answered with
    their error, lists leave out what the principal may not describe."""
    create_topic(srv, "acl-desc-a")
    create_topic(srv, "acl-desc-b")
    p = ck.Producer(conf(srv, "admin", **{"transactional.id": "acl-desc-tx"}))
    p.init_transactions(15)
    w = wire(srv)
    try:
        def describe_partitions(names):
            r = w.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
                "topics": [{"name": n} for n in names], "response_partition_limit": 100,
                "cursor": None})
            return {t["name"]: t["error_code"] for t in r["topics"]}

        assert describe_partitions(["acl-desc-a"]) == {"acl-desc-a": TOPIC_DENIED}
        grant(srv, ResourceType.TOPIC, "acl-desc-a", AclOperation.DESCRIBE)
        assert describe_partitions(["acl-desc-a", "acl-desc-b"]) == {
            "acl-desc-a": 0, "acl-desc-b": TOPIC_DENIED}
        every = describe_partitions([])
        assert "acl-desc-a" in every and "acl-desc-b" not in every

        txns = w.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["acl-desc-tx"]})
        assert txns["transaction_states"][0]["error_code"] == TXN_DENIED
        listed = w.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [],
                                                         "producer_id_filters": []})
        assert listed["error_code"] == 0 and listed["transaction_states"] == []
        grant(srv, ResourceType.TRANSACTIONAL_ID, "acl-desc-tx", AclOperation.DESCRIBE)
        txns = w.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ["acl-desc-tx"]})
        assert txns["transaction_states"][0]["error_code"] == 0
        listed = w.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [],
                                                         "producer_id_filters": []})
        assert [t["transactional_id"] for t in listed["transaction_states"]] == ["acl-desc-tx"]

        groups = w.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {"group_ids": ["acl-desc-g"]})
        assert groups["groups"][0]["error_code"] == GROUP_DENIED
    finally:
        w.close()
    w = wire(srv, address=leader_address(srv, "acl-desc-b"))
    try:
        producers = w.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": "acl-desc-b", "partition_indexes": [0]}]})
        assert producers["topics"][0]["partitions"][0]["error_code"] == TOPIC_DENIED
        grant(srv, ResourceType.TOPIC, "acl-desc-b", AclOperation.READ)
        producers = w.request(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [
            {"name": "acl-desc-b", "partition_indexes": [0]}]})
        assert producers["topics"][0]["partitions"][0]["error_code"] == 0
    finally:
        w.close()


FUZZ_FRAMES = setting("KAFKALITE_ACL_FUZZ_FRAMES")


@pytest.mark.processes
def test_hostile_requests_with_the_authorizer_on(tmp_path):
    """Valid and mutated requests of every API the fuzz corpus has, plus the
    ACL APIs, from an unauthenticated client with the authorizer on: each is
    answered or its connection closed; no check fails with anything but a
    Kafka error (no UNKNOWN_SERVER_ERROR traceback in the log), the brokers
    stay up. KAFKALITE_ACL_FUZZ_FRAMES (default 1500) sets the mutated frames;
    KAFKALITE_FUZZ_SEED replays a run."""
    import random
    import socket

    from fuzzing import base_requests, fuzz_rng, mutate
    from kafkalite.protocol import encode_request
    data = tmp_path / "data"
    config = tmp_path / "server.toml"
    config.write_text('authorizer_enabled = true\n')
    s = ServerProcess(str(data), extra_args=["--config", str(config)]).start()
    try:
        requests = base_requests("fuzz-topic") + [
            (ApiKey.DESCRIBE_ACLS, 3, {"resource_type_filter": 1, "resource_name_filter": None,
                                       "pattern_type_filter": 1, "principal_filter": None,
                                       "host_filter": None, "operation": 1,
                                       "permission_type": 1}),
            (ApiKey.CREATE_ACLS, 3, {"creations": [{
                "resource_type": 2, "resource_name": "t", "resource_pattern_type": 3,
                "principal": "User:ANONYMOUS", "host": "*", "operation": 2,
                "permission_type": 3}]}),
            (ApiKey.DELETE_ACLS, 3, {"filters": [{
                "resource_type_filter": 1, "resource_name_filter": None,
                "pattern_type_filter": 1, "principal_filter": None, "host_filter": None,
                "operation": 1, "permission_type": 1}]}),
            (ApiKey.OFFSET_COMMIT, 8, {"group_id": "g", "generation_id_or_member_epoch": -1,
                                       "member_id": "", "topics": [{"name": "fuzz-topic",
                                       "partitions": [{"partition_index": 0,
                                                       "committed_offset": 1}]}]}),
            (ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [{
                "transactional_id": "t", "producer_id": 1, "producer_epoch": 0,
                "verify_only": False, "topics": [{"name": "fuzz-topic", "partitions": [0]}]}]}),
            (ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "fuzz-topic"}], "timeout_ms": 1000}),
            (ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {"topics": [{"name": "fuzz-topic"}],
                                                   "response_partition_limit": 10}),
        ]
        frames = [encode_request(k, v, 1, "fuzz", body) for k, v, body in requests]
        rng = fuzz_rng("acl fuzz") if FUZZ_FRAMES else random.Random(0)
        frames += [mutate(rng, rng.choice(frames)) for _ in range(FUZZ_FRAMES)]
        addresses = [s.kafka_bootstrap] + [f"127.0.0.1:{b['port']}"
                                           for b in s.info["kafka_brokers"]]
        pids = s.worker_pids()
        import struct
        for i, frame in enumerate(frames):
            host, port = addresses[i % len(addresses)].rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5) as sock:
                sock.sendall(struct.pack(">i", len(frame)) + frame)
                sock.shutdown(socket.SHUT_WR)
                sock.settimeout(5)
                try:
                    while sock.recv(1 << 16):
                        pass
                except (socket.timeout, ConnectionResetError):
                    pass
        assert s.proc.poll() is None and s.worker_pids() == pids
        assert "request failed" not in s.output(), s.output()[-3000:]
        # the ACL APIs denied the anonymous principal: nothing was created
        w = KafkaWire(s.kafka_bootstrap)
        try:
            create = next(body for k, _, body in requests if k == ApiKey.CREATE_ACLS)
            answer = w.request(ApiKey.CREATE_ACLS, 3, create)
            assert answer["results"][0]["error_code"] == CLUSTER_DENIED
        finally:
            w.close()
        assert not os.path.exists(data / "acls.json")
        assert not os.path.exists(data / "sasl-users.json")     # AlterUserScramCredentials
    finally:
        s.stop()
        s.kill()


def test_kafka_python_clients(srv, clean):
    """kafka-python raises what librdkafka swallows (DescribeAcls' top-level
    error) and names the denied group on a consumer."""
    import kafka
    from kafka.admin import (ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError, GroupAuthorizationFailedError
    common = {"bootstrap_servers": srv.kafka_bootstrap, "security_protocol": "SASL_PLAINTEXT",
              "sasl_mechanism": "PLAIN", "sasl_plain_username": "alice",
              "sasl_plain_password": password("alice"), "request_timeout_ms": 15000}
    client = kafka.KafkaAdminClient(**common)
    try:
        every = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                          permission_type=ACLPermissionType.ANY,
                          resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None,
                                                                 ACLResourcePatternType.ANY))
        with pytest.raises(ClusterAuthorizationFailedError):
            client.describe_acls(every)
        grant(srv, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
        acls, error = client.describe_acls(every)
        assert len(acls) == 1
    finally:
        client.close()
    create_topic(srv, "acl-kp")
    grant(srv, ResourceType.TOPIC, "acl-kp", AclOperation.READ)
    consumer = kafka.KafkaConsumer("acl-kp", group_id="acl-kp-group",
                                   auto_offset_reset="earliest", **common)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                consumer.poll(500)
    finally:
        consumer.close()


@pytest.mark.parametrize("api, version, body, where, code", [
    (ApiKey.SYNC_GROUP, 5, {"group_id": "acl-w", "generation_id": 1, "member_id": "m",
                            "protocol_type": "consumer", "protocol_name": "range",
                            "assignments": []}, ("error_code",), GROUP_DENIED),
    (ApiKey.LEAVE_GROUP, 5, {"group_id": "acl-w", "members": [{"member_id": "m"}]},
     ("error_code",), GROUP_DENIED),
    (ApiKey.OFFSET_DELETE, 0, {"group_id": "acl-w", "topics": []}, ("error_code",),
     GROUP_DENIED),
    (ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {"group_id": "acl-w", "member_id": "",
                                          "member_epoch": 0, "rebalance_timeout_ms": 10000,
                                          "subscribed_topic_names": ["t"],
                                          "server_assignor": None, "topic_partitions": []},
     ("error_code",), GROUP_DENIED),
    (ApiKey.SHARE_GROUP_HEARTBEAT, 0, {"group_id": "acl-w", "member_id": "", "member_epoch": 0,
                                       "rack_id": None, "subscribed_topic_names": ["t"]},
     ("error_code",), GROUP_DENIED),
    (ApiKey.OFFSET_FETCH, 9, {"groups": [{"group_id": "acl-w", "member_id": None,
                                          "member_epoch": -1, "topics": None}]},
     ("groups", 0, "error_code"), GROUP_DENIED),
    (ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": None,
                               "timeout_ms": 1000}, ("error_code",), CLUSTER_DENIED),
    (ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": []},
     ("error_code",), CLUSTER_DENIED),
    (ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 1000, "topics": None},
     ("error_code",), CLUSTER_DENIED),
    (ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["acl-w-tx"]},
     ("coordinators", 0, "error_code"), TXN_DENIED),
])
def test_whole_request_denials_over_the_wire(srv, clean, api, version, body, where, code):
    w = wire(srv)
    try:
        answer = w.request(api, version, body)
    finally:
        w.close()
    for step in where:
        answer = answer[step]
    assert answer == code


def test_a_workers_listener_relays_the_principal(srv, clean):
    """A worker's Kafka listener passes the APIs it does not serve to the
    supervisor with the connection's principal: checked there as alice, not
    as the worker."""
    create_topic(srv, "acl-relay")
    worker = f"127.0.0.1:{srv.info['kafka_brokers'][0]['port']}"
    create = {"creations": [{"resource_type": 2, "resource_name": "acl-relay",
                             "resource_pattern_type": 3, "principal": ALICE, "host": "*",
                             "operation": 3, "permission_type": 3}]}
    for user, code in (("alice", CLUSTER_DENIED), ("admin", 0)):
        w = wire(srv, user, address=worker)
        try:
            assert w.request(ApiKey.CREATE_ACLS, 3, create)["results"][0]["error_code"] == code
            md = w.request(ApiKey.METADATA, 12, {"topics": None})
            # alice may describe nothing yet; then (admin) the ACL exists
            assert ("acl-relay" in {t["name"] for t in md["topics"]}) == (user == "admin")
        finally:
            w.close()
    w = wire(srv, address=worker)
    try:
        md = w.request(ApiKey.METADATA, 12, {"topics": None})
        assert "acl-relay" in {t["name"] for t in md["topics"]}    # Read implies Describe
    finally:
        w.close()


@pytest.mark.processes
def test_acls_of_a_cluster_are_kept_in_postgresql(tmp_path):
    """With --cluster the ACLs are in the cluster's PostgreSQL: a node started
    on a fresh data directory (as a new controller after a failover would
    be) has them."""
    from postgres import PostgresServer, find_binaries
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    from compat_helpers import kafka_conf
    pg = PostgresServer().start()
    s = None
    try:
        config = tmp_path / "server.toml"
        config.write_text('authorizer_enabled = true\nsuper_users = "User:ANONYMOUS"\n')
        # with security on a cluster's own channels need the nodes' key pair
        assert run_cli("curve", "keygen", "node", "--dir", str(tmp_path / "keys")).returncode == 0

        def node(name):
            return ServerProcess(str(tmp_path / name), extra_args=[
                "--config", str(config), "--cluster", pg.dsn, "--node-id", "1",
                "--controller-lease-ms", "1000",
                "--native-curve-secret-key-file", str(tmp_path / "keys" / "node.key_secret")]
                ).start()
        s = node("first")
        client = AdminClient(kafka_conf(s))
        binding = AclBinding(ResourceType.TOPIC, "pg-topic", ResourcePatternType.PREFIXED,
                             ALICE, "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        list(client.create_acls([binding]).values())[0].result(15)
        del client
        s.stop()
        assert not os.path.exists(tmp_path / "first" / "acls.json")
        # (a clean stop let the controller lease go: the next node takes it at once)
        s = node("second")
        client = AdminClient(kafka_conf(s))
        assert client.describe_acls(EVERY_ACL).result(15) == [binding]
        del client
    finally:
        if s is not None:
            s.stop()
            s.kill()
        pg.stop()


def test_authorized_operations(srv, clean):
    """KIP-430: what the principal may do, as the admin clients show it."""
    from confluent_kafka import TopicCollection
    create_topic(srv, "acl-ops")
    grant(srv, ResourceType.TOPIC, "acl-ops", AclOperation.READ, AclOperation.ALTER_CONFIGS)
    grant(srv, ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE)
    alice = admin(srv, "alice")
    topic = alice.describe_topics(TopicCollection(["acl-ops"]),
                                  include_authorized_operations=True)["acl-ops"].result(15)
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.ALTER_CONFIGS,
        AclOperation.DESCRIBE_CONFIGS}
    cluster = alice.describe_cluster(include_authorized_operations=True).result(15)
    assert set(cluster.authorized_operations) == {AclOperation.DESCRIBE}
    w = wire(srv)
    try:
        md = w.request(ApiKey.METADATA, 10, {"topics": [{"name": "acl-ops"}],
                                             "include_cluster_authorized_operations": True,
                                             "include_topic_authorized_operations": True})
        assert md["cluster_authorized_operations"] == 1 << 8           # Describe
        assert md["topics"][0]["topic_authorized_operations"] == sum(
            1 << op for op in (3, 8, 10, 11))    # Read, Describe, DescribeConfigs, AlterConfigs
    finally:
        w.close()
