"""Where Kafka's documented answer is the spec: the byte limits of Fetch,
group defaults, fencing codes, checked at the wire with exact requests."""
from __future__ import annotations

import time

import pytest
from compat_helpers import KafkaWire, create_topic, kafka_conf
from confluent_kafka.admin import AdminClient, NewTopic
from harness import ServerProcess

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder
from kafkalite.record import compression as comp
from kafkalite.server.config import ServerConfig


def metadata(server, topic: str) -> dict:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        return wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    finally:
        wire.close()


def test_a_fetch_whose_first_batch_overruns_max_bytes_answers_it_alone_and_the_rest_empty(
        server, topic_name):
    """KIP-74: the response holds at least the first partition's first batch
    even when it is larger than the request's max_bytes; the partitions
    after it come back empty and error-free, never INVALID_REQUEST."""
    create_topic(server, topic_name, partitions=4)
    md = metadata(server, topic_name)
    by_leader: dict = {}
    for p in md["topics"][0]["partitions"]:
        by_leader.setdefault(p["leader_id"], []).append(p["partition_index"])
    leader, partitions = max(by_leader.items(), key=lambda kv: len(kv[1]))
    assert len(partitions) >= 2, by_leader
    broker = next(b for b in md["brokers"] if b["node_id"] == leader)
    wire = KafkaWire(f"{broker['host']}:{broker['port']}")
    try:
        for index in partitions:
            b = RecordBatchBuilder()
            b.append(1_700_000_000_000, None, bytes([index]) * 5000)
            resp = wire.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic_name, "partition_data": [
                    {"index": index, "records": bytes(b.build())}]}]})
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        r = wire.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1000,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic_name, "partitions": [
                {"partition": index, "fetch_offset": 0, "current_leader_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                for index in partitions]}],
            "forgotten_topics_data": [], "rack_id": ""})
    finally:
        wire.close()
    assert r["error_code"] == 0
    answered = r["responses"][0]["partitions"]
    assert [p["partition_index"] for p in answered] == partitions
    assert [p["error_code"] for p in answered] == [0] * len(partitions)
    first, rest = answered[0], answered[1:]
    assert len(first["records"]) > 5000            # the whole batch, over max_bytes
    assert all(len(p["records"] or b"") == 0 for p in rest)
    assert all(p["high_watermark"] == 1 for p in answered)


def first_join_seconds(server, group: str) -> float:
    """How long a lone member's JoinGroup (v9, after its MEMBER_ID_REQUIRED
    round) waits for its answer from a new group's coordinator."""
    wire = KafkaWire(server.kafka_bootstrap, timeout=30.0)
    try:
        body = {"group_id": group, "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 10_000, "member_id": "", "group_instance_id": None,
                "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b""}],
                "reason": None}
        r = wire.request(ApiKey.JOIN_GROUP, 9, body)
        assert r["error_code"] == errors.MemberIdRequiredError.code
        started = time.monotonic()
        r = wire.request(ApiKey.JOIN_GROUP, 9, {**body, "member_id": r["member_id"]})
        took = time.monotonic() - started
        assert r["error_code"] == 0 and r["leader"] == r["member_id"]
        return took
    finally:
        wire.close()


@pytest.mark.processes
def test_a_new_group_waits_kafkas_initial_rebalance_delay_by_default(tmp_path, group_name):
    """group.initial.rebalance.delay.ms is Kafka's 3000 unless configured;
    test servers (the launcher, kafkalite.testing) set 0, as Kafka's own
    test brokers do, and the shared server answers at once."""
    assert ServerConfig().group_initial_rebalance_delay_ms == 3000
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        group_initial_rebalance_delay_ms=None).start()
    try:
        assert first_join_seconds(srv, group_name) >= 2.9
    finally:
        srv.stop()


def test_test_servers_start_groups_without_the_delay(server, group_name):
    assert first_join_seconds(server, group_name) < 2.0


@pytest.mark.parametrize("codec", [0, comp.GZIP, comp.ZSTD], ids=["none", "gzip", "zstd"])
def test_a_batch_with_keyless_records_on_a_compacted_topic_names_each_in_record_errors(
        server, topic_name, codec):
    """KIP-467: the batch is refused whole (INVALID_RECORD, nothing stored)
    and record_errors names every record that caused it, so that a client
    can fail those records alone."""
    admin = AdminClient(kafka_conf(server))
    for f in admin.create_topics([NewTopic(topic_name, 1, config={
            "cleanup.policy": "compact"})]).values():
        f.result()
    keyless = set(range(5, 100, 10))
    b = RecordBatchBuilder(codec)
    for i in range(100):
        b.append(1_700_000_000_000 + i, None if i in keyless else b"k%d" % i, b"v%d" % i)
    md = metadata(server, topic_name)
    leader = md["topics"][0]["partitions"][0]["leader_id"]
    broker = next(x for x in md["brokers"] if x["node_id"] == leader)
    wire = KafkaWire(f"{broker['host']}:{broker['port']}")
    try:
        resp = wire.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": bytes(b.build())}]}]})
        p = resp["responses"][0]["partition_responses"][0]
        assert p["error_code"] == errors.InvalidRecordError.code, p
        assert sorted(e["batch_index"] for e in p["record_errors"]) == sorted(keyless)
        assert all("key" in e["batch_index_error_message"] for e in p["record_errors"])
        assert p["error_message"]
        offsets = wire.request(ApiKey.LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic_name, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]})
        assert offsets["topics"][0]["partitions"][0]["offset"] == 0      # nothing stored
    finally:
        wire.close()


def test_every_broker_metadata_names_can_hold_a_replica(server, topic_name):
    """Tools place replicas on, and ask log dirs of, every broker Metadata
    lists (kafka-python's own integration tests do): each must be a broker
    with a log dir, so the supervisor, which holds none, is not listed."""
    import kafka
    from kafka.structs import TopicPartition as KpTopicPartition
    admin = kafka.KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        brokers = sorted(b.node_id for b in admin._manager.cluster.brokers())
        assert brokers == [0, 1]
        dirs = {r["broker"]: r for r in admin.describe_log_dirs()}
        for b in brokers:
            assert dirs[b]["log_dirs"] and all(d["error_code"] == 0 for d in dirs[b]["log_dirs"])
        admin.create_topics([kafka.admin.NewTopic(topic_name, 1, len(brokers))])
        tp = KpTopicPartition(topic_name, 0)
        assert admin.alter_partition_reassignments({tp: list(reversed(brokers))}) == {tp: None}
    finally:
        admin.close()
