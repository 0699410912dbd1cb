"""The Kafka release kafkalite claims, as Kafka's clients see it on the wire.

kafkalite claims Kafka 4.1 (tests/protocol/test_claimed_release.py compares
every API's range with a 4.1 broker's), and every broker process advertises
the same ranges: ListOffsets v10 (KIP-1005 latest-tiered spec, KIP-1075
timeout), Fetch v18, Produce v13 (topic ids), FindCoordinator v6 (KIP-932
share coordinator keys), ApiVersions v4 (KAFKA-17011), DescribeQuorum (its
controller lease as the metadata quorum) and AlterReplicaLogDirs (one log
dir per broker). kafka-python infers the broker's release from those ranges
(4.1 from Produce v13; ListOffsets v11, which made it say 4.2, is Kafka
4.2's and not advertised) and picks its request versions by them.
tests/compat/test_kafka_4_1_apis.py has the clients pinned to 4.0 and 4.1.

Each test speaks to the shared server with a Kafka client where one exposes
the call (kafka-python's KafkaAdminClient and KafkaConsumer) and with exact
requests over a bare connection (``KafkaWire``) where the answer's bytes
matter; the authorization of the new APIs and key types is checked on a
server of this module's own with the authorizer on (SASL/PLAIN).
"""
from __future__ import annotations

import base64
import os
import struct
import uuid

import pytest
from compat_helpers import KafkaWire, add_user, native_produce
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
from kafka.structs import TopicPartitionReplica

from harness import ServerProcess, create, wait_until
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, decode_response

NONE, UNKNOWN_TOPIC_OR_PARTITION, REPLICA_NOT_AVAILABLE = 0, 3, 9
CLUSTER_DENIED, UNSUPPORTED_VERSION, INVALID_REQUEST, LOG_DIR_NOT_FOUND = 31, 35, 42, 57
CONTROLLER = 1000                   # the supervisor's node id on Kafka's wire
METADATA_LOG = "__cluster_metadata"
# ListOffsets' timestamp specs
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# what kafka-python infers: Kafka 4.1, from Produce v13
KAFKA_PYTHON_INFERS = (4, 1)


def wire_to(server, node_id: int) -> KafkaWire:
    """A bare connection to broker ``node_id``'s Kafka listener (the
    supervisor's, node 1000, is the bootstrap address: Metadata lists the
    workers only)."""
    if node_id == CONTROLLER:
        return KafkaWire(server.kafka_bootstrap)
    port = next(b["port"] for b in server.info["kafka_brokers"] if b["node_id"] == node_id)
    return KafkaWire(f"127.0.0.1:{port}")


def node_ids(server) -> list[int]:
    return [b["node_id"] for b in server.info["kafka_brokers"]]


def metadata(server, topic: str | None = None) -> dict:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        return wire.request(ApiKey.METADATA, 12, {
            "topics": None if topic is None else [{"topic_id": uuid.UUID(int=0), "name": topic}],
            "allow_auto_topic_creation": False})
    finally:
        wire.close()


def leader_of(server, topic: str, partition: int = 0) -> int:
    [t] = metadata(server, topic)["topics"]
    return next(p["leader_id"] for p in t["partitions"] if p["partition_index"] == partition)


def list_offsets(wire: KafkaWire, version: int, topic: str, *timestamps: int,
                 timeout_ms: int = 0) -> list[dict]:
    """ListOffsets of partition 0 at each of ``timestamps``: the answers, in order."""
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
        for ts in timestamps]}]}
    if version >= 10:
        body["timeout_ms"] = timeout_ms
    r = wire.request(ApiKey.LIST_OFFSETS, version, body)
    [t] = r["topics"]
    return t["partitions"]


# ---- the release clients infer -------------------------------------------------------------------

def test_kafka_python_infers_kafka_4_1_from_every_broker_and_reads_with_its_versions(
        server, topic_name):
    """kafka-python picks the broker's release from ApiVersions (Produce v13
    => 4.1); then its consumer lists offsets with v10 and fetches (at its
    own cap, v12), and reads what was written."""
    create(server, topic_name)
    values = [b"v%d" % i for i in range(20)]
    native_produce(server, topic_name, [(None, v, []) for v in values])
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        for node in node_ids(server):
            assert admin.get_broker_version_data(node).broker_version == KAFKA_PYTHON_INFERS, \
                node
    finally:
        admin.close()
    consumer = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic_name, 0)
        assert consumer.end_offsets([tp]) == {tp: 20}            # ListOffsets v10, latest
        assert consumer.beginning_offsets([tp]) == {tp: 0}       # ... earliest
        assert consumer.config["api_version"] == KAFKA_PYTHON_INFERS
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        got: list = []

        def read_all() -> bool:
            for records in consumer.poll(500).values():
                got.extend(r.value for r in records)
            return len(got) >= len(values)
        wait_until(read_all, 20, "kafka-python's consumer to read the 20 records")
        assert got == values
    finally:
        consumer.close()


def test_every_broker_advertises_the_kafka_4_1_versions(server):
    """The same ranges from the supervisor and each worker: a client may ask
    any broker and must hear one release. A version past our newest gets a
    v0 answer with UNSUPPORTED_VERSION and the list (KIP-511)."""
    newest = {ApiKey.LIST_OFFSETS: 10, ApiKey.FETCH: 18, ApiKey.FIND_COORDINATOR: 6,
              ApiKey.API_VERSIONS: 4, ApiKey.DESCRIBE_QUORUM: 2,
              ApiKey.ALTER_REPLICA_LOG_DIRS: 2, ApiKey.PRODUCE: 13, ApiKey.METADATA: 13}
    for node in node_ids(server):
        wire = wire_to(server, node)
        try:
            r = wire.request(ApiKey.API_VERSIONS, 4, {"client_software_name": "conformance",
                                                      "client_software_version": "1"})
            ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
            assert r["error_code"] == NONE
            for key, high in newest.items():
                assert ranges[key] == (0, high), (node, key.name)
            assert ranges == {int(k): v for k, v in SUPPORTED_VERSIONS.items()
                              if k not in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)}
            # header v1 of ApiVersions v5 (api key, version, correlation id,
            # null client id); a v5 body is not ours to guess
            wire.send_frame(struct.pack(">hhih", ApiKey.API_VERSIONS, 5, 99, -1))
            _, v0 = decode_response(ApiKey.API_VERSIONS, 0, wire.recv_frame())
            assert v0["error_code"] == UNSUPPORTED_VERSION
            assert {k["api_key"]: k["max_version"] for k in v0["api_keys"]}[
                ApiKey.API_VERSIONS] == 4
        finally:
            wire.close()


def test_api_versions_v4_tells_a_feature_from_level_0_and_v3_leaves_it_out(server):
    """KAFKA-17011: a Java client before 3.9 (ApiVersions v3) cannot parse a
    supported range that starts at 0, so a v3 answer leaves transaction.version
    (0-2) out of the supported features and a v4 answer has it; the
    finalized level, which clients decide by, is in both. kafka-python's
    describe_features asks v4."""
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        body = {"client_software_name": "conformance", "client_software_version": "1"}
        v3 = wire.request(ApiKey.API_VERSIONS, 3, body)
        v4 = wire.request(ApiKey.API_VERSIONS, 4, body)
    finally:
        wire.close()
    finalized = [{"name": "transaction.version", "max_version_level": 2, "min_version_level": 2}]
    assert v3["supported_features"] == []
    assert v3["finalized_features"] == finalized
    assert v4["supported_features"] == [{"name": "transaction.version", "min_version": 0,
                                         "max_version": 2}]
    assert v4["finalized_features"] == finalized
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        assert admin.describe_features()["transaction.version"] == {
            "supported": (0, 2), "finalized": (2, 2), "finalized_epoch": 1}
    finally:
        admin.close()


# ---- ListOffsets v9 and v10 ----------------------------------------------------------------------

def test_list_offsets_v10_answers_every_timestamp_spec(server, topic_name):
    """Five records with timestamps 1000, 2000, 9000, 3000, 4000, the first
    deleted (log start 1). Without tiered storage the earliest local offset
    is the log start, and nothing is tiered: -5 answers offset -1 with no
    epoch, as Kafka answers for a topic without remote storage (KIP-1005);
    v10's timeout_ms (KIP-1075) changes nothing, every lookup is local."""
    create(server, topic_name)
    native_produce(server, topic_name, [(None, b"r%d" % i, []) for i in range(5)],
                   timestamps=[1000, 2000, 9000, 3000, 4000])
    wire = wire_to(server, leader_of(server, topic_name))
    try:
        deleted = wire.request(ApiKey.DELETE_RECORDS, 2, {"timeout_ms": 10_000, "topics": [
            {"name": topic_name, "partitions": [{"partition_index": 0, "offset": 1}]}]})
        assert deleted["topics"][0]["partitions"][0]["error_code"] == NONE
        for timeout_ms in (0, 1, 30_000):
            answers = list_offsets(wire, 10, topic_name, LATEST, EARLIEST, MAX_TIMESTAMP,
                                   EARLIEST_LOCAL, LATEST_TIERED, 1500, 10_000,
                                   timeout_ms=timeout_ms)
            assert all(a["error_code"] == NONE for a in answers), answers
            got = [(a["offset"], a["timestamp"]) for a in answers]
            assert got == [(5, -1), (1, -1), (2, 9000), (1, -1), (-1, -1), (1, 2000), (-1, -1)]
            epochs = [a["leader_epoch"] for a in answers]
            assert epochs[0] >= 0 and epochs[2] == epochs[0] and epochs[3] == epochs[0]
            assert epochs[4] == -1                              # nothing tiered: no epoch
        # v9 has the latest-tiered spec too, without timeout_ms
        [tiered] = list_offsets(wire, 9, topic_name, LATEST_TIERED)
        assert (tiered["error_code"], tiered["offset"], tiered["leader_epoch"]) == (NONE, -1, -1)
    finally:
        wire.close()


def test_list_offsets_refuses_a_spec_its_version_predates(server, topic_name):
    """As Kafka's ReplicaManager: a timestamp spec newer than the request's
    version (-3 before v7, -4 before v8, -5 before v9) or one Kafka does not
    define is UNSUPPORTED_VERSION for that partition alone."""
    create(server, topic_name)
    native_produce(server, topic_name, [(None, b"x", [])])
    wire = wire_to(server, leader_of(server, topic_name))
    try:
        cases = [(6, MAX_TIMESTAMP), (7, EARLIEST_LOCAL), (8, LATEST_TIERED), (10, -6)]
        for version, spec in cases:
            refused, latest = list_offsets(wire, version, topic_name, spec, LATEST)
            assert refused["error_code"] == UNSUPPORTED_VERSION, (version, spec)
            assert (latest["error_code"], latest["offset"]) == (NONE, 1), (version, spec)
        for version, spec in [(7, MAX_TIMESTAMP), (8, EARLIEST_LOCAL), (9, LATEST_TIERED)]:
            [answer] = list_offsets(wire, version, topic_name, spec)
            assert answer["error_code"] == NONE, (version, spec)
    finally:
        wire.close()


# ---- Fetch v17 -----------------------------------------------------------------------------------

def test_fetch_v17_with_a_replica_directory_id_reads_the_records(server, topic_name):
    """v17 adds the fetching replica's directory id (KIP-853, tagged), which
    only KRaft's voters read: a consumer's fetch that carries one is
    answered as a v16 fetch is."""
    create(server, topic_name)
    native_produce(server, topic_name, [(None, b"a", []), (None, b"b", [])])
    [topic] = metadata(server, topic_name)["topics"]
    wire = wire_to(server, leader_of(server, topic_name))
    try:
        r = wire.request(ApiKey.FETCH, 17, {
            "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "rack_id": "",
            "topics": [{"topic_id": topic["topic_id"], "partitions": [{
                "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                "last_fetched_epoch": -1, "log_start_offset": -1,
                "partition_max_bytes": 1 << 20, "replica_directory_id": uuid.uuid4()}]}],
            "forgotten_topics_data": []})
    finally:
        wire.close()
    [part] = r["responses"][0]["partitions"]
    assert (part["error_code"], part["high_watermark"]) == (NONE, 2)
    assert part["records"], "no records"


# ---- DescribeQuorum ------------------------------------------------------------------------------

def describe_quorum(wire: KafkaWire, version: int, topic: str = METADATA_LOG,
                    partitions=(0,)) -> dict:
    return wire.request(ApiKey.DESCRIBE_QUORUM, version, {"topics": [
        {"topic_name": topic, "partitions": [{"partition_index": p} for p in partitions]}]})


def test_describe_quorum_names_the_controller_leader_and_voter_and_the_brokers_observers(server):
    """KRaft's answer, from the controller lease: the controller (the
    supervisor, node 1000, not among Metadata's brokers, as KRaft's
    controllers are not) leads and is the only voter; the brokers (the
    workers) observe; v2 names the voter's listener, where a client reaches
    it. Asked of any broker (a worker relays it), the same answer."""
    controller = CONTROLLER
    assert metadata(server)["controller_id"] in node_ids(server)
    bootstrap_port = int(server.kafka_bootstrap.rsplit(":", 1)[1])
    workers = sorted(node_ids(server))
    for node in [CONTROLLER, *node_ids(server)]:
        wire = wire_to(server, node)
        try:
            for version in (0, 1, 2):
                r = describe_quorum(wire, version)
                assert r["error_code"] == NONE
                [topic] = r["topics"]
                [p] = topic["partitions"]
                assert (topic["topic_name"], p["partition_index"], p["error_code"]) == \
                    (METADATA_LOG, 0, NONE)
                assert p["leader_id"] == controller and p["leader_epoch"] >= 1
                assert [v["replica_id"] for v in p["current_voters"]] == [controller]
                assert sorted(o["replica_id"] for o in p["observers"]) == workers
                if version >= 1:     # the leader's fetch times are now (KIP-836)
                    assert p["current_voters"][0]["last_caught_up_timestamp"] > 0
                if version >= 2:
                    assert r["error_message"] is None
                    [node_entry] = r["nodes"]
                    assert node_entry["node_id"] == controller
                    assert [(lst["host"], lst["port"]) for lst in node_entry["listeners"]] == \
                        [("127.0.0.1", bootstrap_port)]
        finally:
            wire.close()


def test_describe_quorum_of_any_other_partition_is_unknown(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        for topic, partitions in (("orders", (0,)), (METADATA_LOG, (1,)), (METADATA_LOG, (0, 1))):
            r = describe_quorum(wire, 2, topic, partitions)
            assert r["error_code"] == NONE
            codes = [p["error_code"] for p in r["topics"][0]["partitions"]]
            assert codes == [UNKNOWN_TOPIC_OR_PARTITION] * len(partitions), (topic, partitions)
    finally:
        wire.close()


def test_kafka_python_describes_the_metadata_quorum(server):
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        quorum = admin.describe_metadata_quorum()
        cluster = admin.describe_cluster()
    finally:
        admin.close()
    [p] = quorum["topics"][0]["partitions"]
    assert p["error"] is None
    assert p["leader_id"] == CONTROLLER and cluster["controller_id"] in node_ids(server)
    assert [v["replica_id"] for v in p["current_voters"]] == [CONTROLLER]
    assert [n["node_id"] for n in quorum["nodes"]] == [CONTROLLER]


def test_the_metadata_quorum_high_watermark_is_the_metadata_changes_made(server, topic_name):
    """KRaft's metadata log has a high watermark once its leader has
    committed (kafka-python's own integration test asks it to be >= 0; -1 is
    "unknown", a leader just elected): the changes the controller made
    durable. It is the leader's log end offset (each change is committed
    once written) and moves on when the metadata changes."""
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        [before] = admin.describe_metadata_quorum()["topics"][0]["partitions"]
        create(server, topic_name)
        [after] = admin.describe_metadata_quorum()["topics"][0]["partitions"]
    finally:
        admin.close()
    for p in (before, after):
        [leader] = p["current_voters"]
        assert p["high_watermark"] >= 0 and leader["log_end_offset"] == p["high_watermark"]
    assert after["high_watermark"] > before["high_watermark"]


# ---- AlterReplicaLogDirs -------------------------------------------------------------------------

def test_kafka_python_alter_replica_log_dirs_keeps_a_replica_in_its_one_log_dir(
        server, topic_name):
    """A broker has one log dir, the one DescribeLogDirs names: a move to it
    is a move to where the replica is (NoError); a path that is not one of
    the broker's log dirs is LOG_DIR_NOT_FOUND; a broker without a replica
    of the partition answers REPLICA_NOT_AVAILABLE, as Kafka's does."""
    create(server, topic_name)
    leader = leader_of(server, topic_name)
    other = next(n for n in node_ids(server) if n not in (leader, CONTROLLER))
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        [described] = admin.describe_log_dirs({topic_name: [0]}, brokers=[leader])
        [log_dir] = described["log_dirs"]
        assert log_dir["topics"][0]["name"] == topic_name
        here = log_dir["log_dir"]
        assert os.path.isdir(here)
        result = admin.alter_replica_log_dirs({
            TopicPartitionReplica(topic_name, 0, leader): here,
            TopicPartitionReplica(topic_name, 0, other): here})
        assert result == {TopicPartitionReplica(topic_name, 0, leader): NoError,
                          TopicPartitionReplica(topic_name, 0, other): ReplicaNotAvailableError}
        elsewhere = os.path.join(here, "elsewhere")
        result = admin.alter_replica_log_dirs({TopicPartitionReplica(topic_name, 0, leader):
                                               elsewhere})
        assert result == {TopicPartitionReplica(topic_name, 0, leader): LogDirNotFoundError}
    finally:
        admin.close()
    # nothing moved: the replica is where it was, and still serves
    wire = wire_to(server, leader)
    try:
        [latest] = list_offsets(wire, 10, topic_name, LATEST)
        assert (latest["error_code"], latest["offset"]) == (NONE, 0)
    finally:
        wire.close()


def test_alter_replica_log_dirs_on_the_controller_node_keeps_the_internal_topics(server,
                                                                                topic_name):
    """The supervisor (node 1000) keeps the internal topics' replicas in the
    data dir: named with it they stay (NONE); it has no replica of a user
    topic (REPLICA_NOT_AVAILABLE); what does not exist is
    UNKNOWN_TOPIC_OR_PARTITION; another path, LOG_DIR_NOT_FOUND; each
    version's answer is the same."""
    topic = topic_name
    create(server, topic)
    here = os.path.abspath(server.data_dir)
    wire = wire_to(server, CONTROLLER)
    try:
        for version in (0, 1, 2):
            r = wire.request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, {"dirs": [
                {"path": here, "topics": [{"name": "__consumer_offsets", "partitions": [0]},
                                          {"name": topic, "partitions": [0, 7]}]},
                {"path": here + "-other", "topics": [{"name": "__consumer_offsets",
                                                      "partitions": [1]}]}]})
            codes = {(t["topic_name"], p["partition_index"]): p["error_code"]
                     for t in r["results"] for p in t["partitions"]}
            assert codes == {("__consumer_offsets", 0): NONE,
                             ("__consumer_offsets", 1): LOG_DIR_NOT_FOUND,
                             (topic, 0): REPLICA_NOT_AVAILABLE,
                             (topic, 7): UNKNOWN_TOPIC_OR_PARTITION}, version
    finally:
        wire.close()


# ---- FindCoordinator v5 and v6 -------------------------------------------------------------------

def share_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's share-partition key: groupId:topicId:partition, the topic id
    in Kafka's base64."""
    return f"{group}:{base64.urlsafe_b64encode(topic_id.bytes).rstrip(b'=').decode()}:{partition}"


def test_find_coordinator_v6_finds_a_share_groups_coordinators(server, topic_name, group_name):
    """A share group's members find their group coordinator with key type 0
    (at any version); v6 adds key type 2, the share coordinator of one of
    the group's share-partitions (KIP-932), which partition leaders ask
    for. Before v6 that key type, and at v6 a key not of Kafka's
    groupId:topicId:partition shape, is INVALID_REQUEST; v5 (KIP-890) is v4's
    lookup."""
    create(server, topic_name, 2)
    [topic] = metadata(server, topic_name)["topics"]
    keys = [share_key(group_name, topic["topic_id"], p) for p in (0, 1)]
    wire = wire_to(server, leader_of(server, topic_name))      # a worker relays it
    try:
        for version in (4, 5, 6):
            group = wire.request(ApiKey.FIND_COORDINATOR, version, {
                "key_type": 0, "coordinator_keys": [group_name]})
            [found] = group["coordinators"]
            assert found["error_code"] == NONE and found["node_id"] in node_ids(server), version
        share = wire.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [
            *keys, group_name, f"{group_name}:not-a-topic-id:0", f"{keys[0]}:9"]})
        answers = {c["key"]: (c["error_code"], c["node_id"]) for c in share["coordinators"]}
        brokers = set(node_ids(server))
        assert {k: (code, node if node == -1 else node in brokers)
                for k, (code, node) in answers.items()} == {
            keys[0]: (NONE, True), keys[1]: (NONE, True), group_name: (INVALID_REQUEST, -1),
            f"{group_name}:not-a-topic-id:0": (INVALID_REQUEST, -1),
            f"{keys[0]}:9": (INVALID_REQUEST, -1)}
        # the coordinator named is a worker (its Kafka listener), which relays to the supervisor
        [c] = share["coordinators"][:1]
        assert (c["host"], c["port"]) == ("127.0.0.1", next(
            b["port"] for b in server.info["kafka_brokers"] if b["node_id"] == c["node_id"]))
        for version in (4, 5):
            early = wire.request(ApiKey.FIND_COORDINATOR, version, {
                "key_type": 2, "coordinator_keys": keys[:1]})
            assert [(c["error_code"], c["node_id"]) for c in early["coordinators"]] == \
                [(INVALID_REQUEST, -1)], version
        single = wire.request(ApiKey.FIND_COORDINATOR, 3, {"key_type": 2, "key": keys[0]})
        assert (single["error_code"], single["node_id"]) == (INVALID_REQUEST, -1)
        unknown = wire.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 7,
                                                            "coordinator_keys": [group_name]})
        assert unknown["coordinators"][0]["error_code"] == INVALID_REQUEST
    finally:
        wire.close()


# ---- authorization -------------------------------------------------------------------------------

USERS = {"admin": "admin-secret-1", "alice": "alice-secret-1"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A server with the authorizer on, SASL/PLAIN, super user User:admin."""
    root = tmp_path_factory.mktemp("authorized")
    data = str(root / "data")
    os.makedirs(data)
    config = root / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n')
    for user, secret in USERS.items():
        add_user(data, user, secret, "PLAIN")
    srv = ServerProcess(data, extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN"]).start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill()


def as_user(srv, node_id: int, user: str) -> KafkaWire:
    wire = wire_to(srv, node_id)
    wire.login_plain(user, USERS[user])
    return wire


def grant_alice(srv, operation) -> None:
    """``operation`` on the cluster for User:alice, granted by the super user
    with confluent-kafka's AdminClient (gone when this returns, so none is
    left retrying a stopped server)."""
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap,
                         "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                         "sasl.username": "admin", "sasl.password": USERS["admin"]})
    binding = AclBinding(ResourceType.BROKER, "kafka-cluster", ResourcePatternType.LITERAL,
                         "User:alice", "*", operation, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding], request_timeout=10).values():
        f.result(15)


def test_describe_quorum_needs_describe_on_the_cluster(secured):
    srv = secured
    wire = as_user(srv, CONTROLLER, "alice")
    try:
        denied = describe_quorum(wire, 2)
        assert (denied["error_code"], denied["topics"]) == (CLUSTER_DENIED, [])
        grant_alice(srv, AclOperation.DESCRIBE)
        allowed = wait_until(lambda: (lambda r: r if r["error_code"] == NONE else None)(
            describe_quorum(wire, 2)), 10, "alice's DESCRIBE on the cluster to take effect")
        assert allowed["topics"][0]["partitions"][0]["leader_id"] == CONTROLLER
    finally:
        wire.close()


def test_alter_replica_log_dirs_needs_alter_on_the_cluster(secured):
    """Denied, every partition named is answered CLUSTER_AUTHORIZATION_FAILED
    (the response has no top-level error) and the broker is not asked."""
    srv = secured
    worker = min(n for n in node_ids(srv) if n != CONTROLLER)
    body = {"dirs": [{"path": "/nowhere", "topics": [{"name": "orders", "partitions": [0, 1]}]}]}
    wire = as_user(srv, worker, "alice")
    try:
        denied = wire.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
        assert [(t["topic_name"], [(p["partition_index"], p["error_code"])
                                   for p in t["partitions"]]) for t in denied["results"]] == \
            [("orders", [(0, CLUSTER_DENIED), (1, CLUSTER_DENIED)])]
        grant_alice(srv, AclOperation.ALTER)

        def answered():
            r = wire.request(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, body)
            codes = [p["error_code"] for p in r["results"][0]["partitions"]]
            return codes if CLUSTER_DENIED not in codes else None
        assert wait_until(answered, 10, "alice's ALTER on the cluster to take effect") == \
            [LOG_DIR_NOT_FOUND, LOG_DIR_NOT_FOUND]
    finally:
        wire.close()


def test_share_coordinator_keys_need_cluster_action(secured):
    """Key type 2 is the brokers' question (Kafka asks ClusterAction on the
    cluster); a group key of the same user is answered as before."""
    srv = secured
    key = share_key("g", uuid.uuid4(), 0)
    wire = as_user(srv, CONTROLLER, "alice")
    try:
        denied = wire.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2,
                                                           "coordinator_keys": [key]})
        assert [(c["key"], c["error_code"]) for c in denied["coordinators"]] == \
            [(key, CLUSTER_DENIED)]
        grant_alice(srv, AclOperation.CLUSTER_ACTION)

        def found():
            r = wire.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2,
                                                          "coordinator_keys": [key]})
            return r["coordinators"][0] if r["coordinators"][0]["error_code"] == NONE else None
        assert wait_until(found, 10, "alice's CLUSTER_ACTION to take effect")["node_id"] in \
            node_ids(srv)
    finally:
        wire.close()
