"""The versions and APIs that make kafkalite's Kafka 4.1 claim whole, on the
wire against the shared server: what a client pinned to Kafka 4.0 or 4.1
sends (kafka-python with ``api_version=(4, 0)`` and ``(4, 1)`` takes that
release's ranges without asking: Metadata v13, with Produce and Fetch at its
own caps, v9 and v12; Produce v13 by topic id and Fetch v18 are sent here
directly), each version bump's new fields, and the APIs a 4.1
broker has that kafkalite answered with nothing before (delegation tokens,
UpdateFeatures, UnregisterBroker, the raft voter APIs, ListConfigResources,
DeleteShareGroupOffsets). A version kafkalite does not advertise closes the
connection, as Kafka's SocketServer does; ApiVersions alone answers
UNSUPPORTED_VERSION (KIP-511)."""
from __future__ import annotations

import uuid

import pytest
from compat_helpers import KafkaWire, native_produce
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata

from harness import create, wait_until
from kafkalite.protocol import ApiKey, encode_request
from kafkalite.record import RecordBatchBuilder

NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICATION_FACTOR = 0, 3, 38
UNSUPPORTED_VERSION, INVALID_REQUEST, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 35, 42, 64
GROUP_ID_NOT_FOUND, INVALID_UPDATE_VERSION, UNKNOWN_TOPIC_ID = 69, 95, 100
BROKER_ID_NOT_REGISTERED, INCONSISTENT_CLUSTER_ID = 102, 104
TOPIC, BROKER, GROUP = 2, 4, 32


def wire(server) -> KafkaWire:
    return KafkaWire(server.kafka_bootstrap)


def leader_wire(server, topic: str) -> KafkaWire:
    w = wire(server)
    try:
        [t] = w.request(ApiKey.METADATA, 13, {"topics": [{"topic_id": uuid.UUID(int=0),
                                                          "name": topic}]})["topics"]
    finally:
        w.close()
    leader = t["partitions"][0]["leader_id"]
    port = next(b["port"] for b in server.info["kafka_brokers"] if b["node_id"] == leader)
    return KafkaWire(f"127.0.0.1:{port}")


@pytest.mark.parametrize("pinned", [(2, 0), (2, 4), (2, 8), (3, 0), (3, 5), (3, 9), (4, 0),
                                    (4, 1)])
def test_kafka_python_pinned_to_kafka_2_0_to_4_1_produces_consumes_and_commits(
        server, topic_name, pinned):
    """kafka-python pinned to a release sends that release's versions
    (Metadata v13 for 4.0 and 4.1); before, kafkalite closed the connection
    on Metadata v13 and every call of a 4.x pin failed (its integration
    suite at 4.0 went from 43 passing to 0). Every release from 2.0 to the
    claimed 4.1 is a client kafkalite must serve (issue 70)."""
    topic = f"{topic_name}-{pinned[0]}-{pinned[1]}"
    common = {"bootstrap_servers": server.kafka_bootstrap, "api_version": pinned}
    admin = KafkaAdminClient(**common)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        wait_until(lambda: topic in admin.list_topics(), 10, "the topic in Metadata")
    finally:
        admin.close()
    producer = KafkaProducer(acks="all", **common)
    try:
        for i in range(5):
            producer.send(topic, b"v%d" % i).get(timeout=20)
    finally:
        producer.close()
    group = f"g-{topic}"
    consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, **common)
    try:
        got: list = []

        def read_all() -> bool:
            for records in consumer.poll(500).values():
                got.extend(r.value for r in records)
            return len(got) >= 5
        wait_until(read_all, 30, "the pinned consumer to read the 5 records")
        assert got == [b"v%d" % i for i in range(5)]
        tp = TopicPartition(topic, 0)
        consumer.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert consumer.committed(tp) == 5
    finally:
        consumer.close()


def test_a_version_not_advertised_closes_the_connection_as_kafka_does(server):
    """Kafka's SocketServer closes a connection whose request has a version
    it does not enable (only ApiVersions is answered, KIP-511): Metadata v14
    is past Kafka 4.1's and kafkalite's."""
    w = wire(server)
    try:
        body = encode_request(ApiKey.METADATA, 13, 1, "c", {"topics": []})
        w.send_frame(body[:2] + (14).to_bytes(2, "big") + body[4:])
        with pytest.raises(ConnectionError):
            w.recv_frame()
    finally:
        w.close()


def test_metadata_v13_answers_a_top_level_error_code(server):
    w = wire(server)
    try:
        r = w.request(ApiKey.METADATA, 13, {"topics": None})
        assert r["error_code"] == NONE and r["brokers"]
    finally:
        w.close()


def test_produce_v13_names_topics_by_id_and_fetch_v18_reads_it(server, topic_name):
    """KIP-516: Produce v13 carries topic ids, answered by id; an id the
    broker does not know is UNKNOWN_TOPIC_ID. Fetch v18 (a consumer sends
    no high watermark) reads both records."""
    create(server, topic_name)
    native_produce(server, topic_name, [(None, b"first", [])])
    w = leader_wire(server, topic_name)
    try:
        [t] = w.request(ApiKey.METADATA, 13, {"topics": [{"topic_id": uuid.UUID(int=0),
                                                          "name": topic_name}]})["topics"]
        builder = RecordBatchBuilder()
        builder.append(1_700_000_000_000, None, b"by id")
        records = bytes(builder.build())
        unknown = uuid.uuid4()
        r = w.request(ApiKey.PRODUCE, 13, {"acks": -1, "timeout_ms": 10_000, "topic_data": [
            {"topic_id": t["topic_id"], "partition_data": [{"index": 0, "records": records}]},
            {"topic_id": unknown, "partition_data": [{"index": 0, "records": records}]}]})
        by_id = {x["topic_id"]: x["partition_responses"][0] for x in r["responses"]}
        assert (by_id[t["topic_id"]]["error_code"], by_id[t["topic_id"]]["base_offset"]) == (
            NONE, 1)
        assert by_id[unknown]["error_code"] == UNKNOWN_TOPIC_ID
        r = w.request(ApiKey.FETCH, 18, {"max_wait_ms": 0, "min_bytes": 1, "topics": [
            {"topic_id": t["topic_id"], "partitions": [
                {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}]})
        [p] = r["responses"][0]["partitions"]
        assert p["error_code"] == NONE and p["high_watermark"] == 2
        assert b"first" in bytes(p["records"]) and b"by id" in bytes(p["records"])
    finally:
        w.close()


def test_describe_groups_v6_tells_a_missing_group(server, group_name):
    w = wire(server)
    try:
        [g] = w.request(ApiKey.DESCRIBE_GROUPS, 6, {"groups": [group_name]})["groups"]
        assert g["error_code"] == GROUP_ID_NOT_FOUND and group_name in g["error_message"]
        [g] = w.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group_name]})["groups"]
        assert (g["error_code"], g["group_state"]) == (NONE, "Dead")
    finally:
        w.close()


def test_describe_cluster_v2_marks_the_brokers_fenced_or_not(server):
    w = wire(server)
    try:
        r = w.request(ApiKey.DESCRIBE_CLUSTER, 2, {"include_fenced_brokers": True})
        assert r["error_code"] == NONE
        assert {b["broker_id"] for b in r["brokers"]} == {
            b["node_id"] for b in server.info["kafka_brokers"]}
        assert not any(b["is_fenced"] for b in r["brokers"])
    finally:
        w.close()


def test_alter_partition_reassignments_v1_can_forbid_a_replication_factor_change(
        server, topic_name):
    create(server, topic_name)
    brokers = [b["node_id"] for b in server.info["kafka_brokers"]]
    w = wire(server)
    try:
        r = w.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 1, {
            "allow_replication_factor_change": False, "topics": [
                {"name": topic_name, "partitions": [{"partition_index": 0,
                                                     "replicas": brokers[:2]}]}]})
        assert r["allow_replication_factor_change"] is False
        [p] = r["responses"][0]["partitions"]
        assert p["error_code"] == INVALID_REPLICATION_FACTOR
        assert "allowReplicationFactorChange" in p["error_message"]
    finally:
        w.close()


def test_list_transactions_v2_filters_by_a_transactional_id_pattern(server, topic_name):
    create(server, topic_name)
    for tid in (f"{topic_name}-a", f"{topic_name}-b"):
        p = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, transactional_id=tid)
        p.init_transactions()
        p.close()
    w = wire(server)
    try:
        r = w.request(ApiKey.LIST_TRANSACTIONS, 2, {"transactional_id_pattern":
                                                    f"{topic_name}-[a]"})
        assert [t["transactional_id"] for t in r["transaction_states"]] == [f"{topic_name}-a"]
        r = w.request(ApiKey.LIST_TRANSACTIONS, 2, {"transactional_id_pattern": "("})
        assert r["error_code"] == 128                    # INVALID_REGULAR_EXPRESSION
    finally:
        w.close()


def test_the_cluster_apis_answer_as_a_kafka_4_1_broker_configured_as_kafkalite_is(server):
    """Delegation tokens disabled (and never asked for on a PLAINTEXT
    listener, as Kafka's allowTokenRequests refuses), features finalized
    where they are, a static one-voter quorum, brokers that are a node's
    workers. tests/compat/test_error_semantics.py has every error case."""
    w = wire(server)
    try:
        r = w.request(ApiKey.CREATE_DELEGATION_TOKEN, 3, {"renewers": [], "max_lifetime_ms": -1})
        assert r["error_code"] == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        for api, version in ((ApiKey.RENEW_DELEGATION_TOKEN, 2),
                             (ApiKey.EXPIRE_DELEGATION_TOKEN, 2)):
            assert w.request(api, version, {"hmac": b"x"})["error_code"] == \
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        assert w.request(ApiKey.DESCRIBE_DELEGATION_TOKEN, 3, {"owners": None})[
            "error_code"] == DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
        same = {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}
        r = w.request(ApiKey.UPDATE_FEATURES, 1, {"feature_updates": [same]})
        assert (r["error_code"], [x["error_code"] for x in r["results"]]) == (NONE, [NONE])
        # one failure fails them all, answered at the top alone (Kafka's QuorumController)
        r = w.request(ApiKey.UPDATE_FEATURES, 1, {"feature_updates": [
            same, {**same, "max_version_level": 1, "upgrade_type": 2}]})
        assert (r["error_code"], r["results"]) == (INVALID_UPDATE_VERSION, [])
        r = w.request(ApiKey.UPDATE_FEATURES, 2, {"feature_updates": [
            {"feature": "metadata.version", "max_version_level": 25}]})
        assert r["error_code"] == INVALID_UPDATE_VERSION and r["error_message"]
        assert w.request(ApiKey.UPDATE_FEATURES, 2, {"feature_updates": [same]})[
            "error_code"] == NONE
        assert w.request(ApiKey.UNREGISTER_BROKER, 0, {"broker_id": 4242})[
            "error_code"] == BROKER_ID_NOT_REGISTERED
        assert w.request(ApiKey.UNREGISTER_BROKER, 0, {"broker_id": 0})[
            "error_code"] == INVALID_REQUEST
        listener = next(iter(server.info["kafka_listeners"]))
        r = w.request(ApiKey.ADD_RAFT_VOTER, 0, {
            "voter_id": 7, "voter_directory_id": uuid.uuid4(),
            "listeners": [{"name": listener, "host": "localhost", "port": 9093}]})
        assert r["error_code"] == UNSUPPORTED_VERSION and "kraft.version" in r["error_message"]
        r = w.request(ApiKey.REMOVE_RAFT_VOTER, 0, {"cluster_id": "another", "voter_id": 7})
        assert r["error_code"] == INCONSISTENT_CLUSTER_ID
    finally:
        w.close()


def test_list_config_resources_lists_topics_and_brokers(server, topic_name):
    create(server, topic_name)
    w = wire(server)
    try:
        assert w.request(ApiKey.LIST_CONFIG_RESOURCES, 0, {})["config_resources"] == []
        r = w.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": []})
        listed = {(c["resource_name"], c["resource_type"]) for c in r["config_resources"]}
        assert (topic_name, TOPIC) in listed and ("0", BROKER) in listed
        r = w.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [BROKER]})
        assert {c["resource_type"] for c in r["config_resources"]} == {BROKER}
        r = w.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [99]})
        assert r["error_code"] == UNSUPPORTED_VERSION
    finally:
        w.close()


def test_delete_share_group_offsets_of_a_group_that_does_not_exist(server, group_name,
                                                                   topic_name):
    create(server, topic_name)
    w = wire(server)
    try:
        r = w.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
            "group_id": group_name, "topics": [{"topic_name": topic_name}]})
        assert r["error_code"] == GROUP_ID_NOT_FOUND and r["responses"] == []
    finally:
        w.close()


def test_a_broker_answers_every_version_it_advertises(server):
    """Never a closed connection for a version advertised: every API (but
    the SASL exchange, answered only on SASL listeners) at every version,
    with a body of defaults, gets an answer that decodes, from a broker
    Metadata names (the bootstrap-only controller node leaves the data
    APIs to them)."""
    from kafkalite.protocol import SUPPORTED_VERSIONS
    port = server.info["kafka_brokers"][0]["port"]
    bodies = {ApiKey.PRODUCE: {"acks": 1}, ApiKey.ELECT_LEADERS: {"topic_partitions": []},
              ApiKey.API_VERSIONS: {"client_software_name": "conformance",
                                    "client_software_version": "1"}}
    closed = []
    for api, (low, high) in sorted(SUPPORTED_VERSIONS.items()):
        if api in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            continue
        for version in range(low, high + 1):
            w = KafkaWire(f"127.0.0.1:{port}")
            try:
                w.request(api, version, dict(bodies.get(api, {})))
            except ConnectionError as exc:
                closed.append((api.name, version, str(exc)))
            finally:
                w.close()
    assert not closed


class _Reader:
    """Reads a flexible response the way Kafka 4.1's generated code does."""

    def __init__(self, frame: bytes):
        self.buf, self.pos = frame, 0

    def take(self, n: int) -> bytes:
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def int(self, n: int) -> int:
        return int.from_bytes(self.take(n), "big", signed=True)

    def varint(self) -> int:
        value = shift = 0
        while True:
            b = self.take(1)[0]
            value |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return value

    def string(self) -> str | None:           # compact, nullable: length + 1, 0 null
        n = self.varint()
        return None if n == 0 else self.take(n - 1).decode()

    def header(self) -> int:
        correlation = self.int(4)
        assert self.varint() == 0                 # no tagged fields
        return correlation


def test_share_offsets_and_state_answers_have_kafka_4_1s_layout(server, topic_name, group_name):
    """Read as Kafka 4.1's specs lay them out: AlterShareGroupOffsetsResponse
    has a top-level ErrorCode and ErrorMessage after ThrottleTimeMs (kafkalite
    sent Kafka 4.0's layout, without them: a 4.1 admin client took the array
    length for an error code), and ReadShareGroupStateSummaryResponse a
    LeaderEpoch between StateEpoch and StartOffset (KAFKA-19218)."""
    create(server, topic_name)
    w = wire(server)
    try:
        w.send_frame(encode_request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, 0, 1, "c", {
            "group_id": group_name, "topics": [{"topic_name": topic_name, "partitions": [
                {"partition_index": 0, "start_offset": 0}]}]}))
        r = _Reader(w.recv_frame())
        assert r.header() == 1 and r.int(4) == 0               # throttle_time_ms
        assert (r.int(2), r.string()) == (NONE, None)           # error_code, error_message
        assert r.varint() - 1 == 1 and r.string() == topic_name  # one topic, its name
        [tid] = w.request(ApiKey.METADATA, 13, {"topics": [{"topic_id": uuid.UUID(int=0),
                                                            "name": topic_name}]})["topics"]
        w.send_frame(encode_request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 2, "c", {
            "group_id": group_name, "topics": [{"topic_id": tid["topic_id"], "partitions": [
                {"partition": 0, "leader_epoch": 0}]}]}))
        frame = w.recv_frame()
        r = _Reader(frame)
        assert r.header() == 2 and r.varint() - 1 == 1          # one result
        assert uuid.UUID(bytes=r.take(16)) == tid["topic_id"] and r.varint() - 1 == 1
        assert r.int(4) == 0                                     # partition
        assert (r.int(2), r.string()) == (NONE, None)
        state_epoch, leader_epoch, start_offset = r.int(4), r.int(4), r.int(8)
        assert (state_epoch, start_offset) == (1, 0) and leader_epoch >= -1
        assert [r.varint(), r.varint(), r.varint()] == [0, 0, 0] and r.pos == len(frame)
    finally:
        w.close()
