"""DeleteRecords (API 21) from Kafka's clients against kafkalite's Kafka
listener: kafkajs, kafka-python, aiokafka and confluent-kafka each delete
the records of one partition before an offset and of another up to its
high watermark (offset -1); then the new log start is the earliest offset,
a read below it is OFFSET_OUT_OF_RANGE (or, with auto.offset.reset, starts
at the new log start), and an offset above the high watermark, an unknown
partition and an internal topic get Kafka's error codes.

Before DeleteRecords was advertised and served, every client here failed
(kafkajs and confluent-kafka with an unsupported-feature error, kafka-python
with IncompatibleBrokerVersion, aiokafka likewise).
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import time

import confluent_kafka as ck
import confluent_kafka.admin as ck_admin
import pytest
from compat_helpers import KafkaWire, create_topic, kafka_conf, native_produce, sample_records
from test_kafkajs import NODE, kafkajs  # noqa: F401 (kafkajs: the fixture installing it)

from kafkalite import errors
from kafkalite.client import AdminClient, Consumer, TopicPartition
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

PER_PARTITION = 10
DELETE_BEFORE = 4           # partition 0's new log start; partition 1 is emptied (-1)


def topic_with_records(server, name: str) -> None:
    create_topic(server, name, 2)
    for p in (0, 1):
        assert native_produce(server, name, sample_records(PER_PARTITION, f"p{p}"),
                              partition=p) == list(range(PER_PARTITION))


def assert_deleted(server, topic: str) -> None:
    """Partition 0 starts at DELETE_BEFORE and partition 1 at its end, for
    ListOffsets and for consumers: below the log start is out of range."""
    admin = AdminClient(server.config())
    try:
        assert admin.list_offsets({(topic, 0): -2, (topic, 1): -2}) == {
            (topic, 0): DELETE_BEFORE, (topic, 1): PER_PARTITION}
        assert admin.list_offsets({(topic, 0): -1}) == {(topic, 0): PER_PARTITION}
    finally:
        admin.close()
    strict = Consumer(server.config(**{"auto.offset.reset": "error"}))
    try:
        strict.assign([TopicPartition(topic, 0, DELETE_BEFORE - 2)])
        with pytest.raises(errors.OffsetOutOfRangeError):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                strict.consume(100, 0.2)
    finally:
        strict.close()
    resetting = Consumer(server.config(**{"auto.offset.reset": "earliest"}))
    try:
        resetting.assign([TopicPartition(topic, 0, 1)])
        got, deadline = [], time.monotonic() + 10
        while len(got) < PER_PARTITION - DELETE_BEFORE and time.monotonic() < deadline:
            got += [m.offset() for m in resetting.consume(100, 0.2)]
        assert got == list(range(DELETE_BEFORE, PER_PARTITION))
    finally:
        resetting.close()


def test_confluent_kafka_delete_records(server, topic_name):
    topic_with_records(server, topic_name)
    admin = ck_admin.AdminClient(kafka_conf(server))
    futures = admin.delete_records([ck.TopicPartition(topic_name, 0, DELETE_BEFORE),
                                    ck.TopicPartition(topic_name, 1, -1)])
    assert sorted((tp.partition, f.result(10).low_watermark) for tp, f in futures.items()) == [
        (0, DELETE_BEFORE), (1, PER_PARTITION)]
    assert_deleted(server, topic_name)
    # librdkafka reads from the new start: auto.offset.reset=error reports it
    c = ck.Consumer(kafka_conf(server, **{"group.id": f"{topic_name}-g",
                                          "auto.offset.reset": "error"}))
    try:
        c.assign([ck.TopicPartition(topic_name, 0, 1)])
        deadline, err = time.monotonic() + 15, None
        while err is None and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                err = m.error()
        assert err is not None and err.code() == ck.KafkaError._AUTO_OFFSET_RESET, err
    finally:
        c.close()

    def code_of(tp):
        (f,) = admin.delete_records([tp], request_timeout=10).values()
        with pytest.raises(ck.KafkaException) as caught:
            f.result(15)
        return caught.value.args[0].code()
    assert code_of(ck.TopicPartition(topic_name, 0, 1000)) == ck.KafkaError.OFFSET_OUT_OF_RANGE
    assert code_of(ck.TopicPartition("__consumer_offsets", 0, 1)) == ck.KafkaError.TOPIC_EXCEPTION


def test_kafka_python_delete_records(server, topic_name):
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import OffsetOutOfRangeError
    topic_with_records(server, topic_name)
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        got = admin.delete_records({KTP(topic_name, 0): DELETE_BEFORE, KTP(topic_name, 1): -1})
        assert {tp.partition: r["low_watermark"] for tp, r in got.items()} == {
            0: DELETE_BEFORE, 1: PER_PARTITION}
        assert_deleted(server, topic_name)
        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({KTP(topic_name, 0): PER_PARTITION + 1})
    finally:
        admin.close()


def test_aiokafka_delete_records(server, topic_name):
    from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
    from aiokafka.errors import OffsetOutOfRangeError
    from aiokafka.structs import TopicPartition as ATP
    topic_with_records(server, topic_name)

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
        await admin.start()
        try:
            got = await admin.delete_records({ATP(topic_name, 0): RecordsToDelete(DELETE_BEFORE),
                                              ATP(topic_name, 1): RecordsToDelete(-1)})
            with pytest.raises(OffsetOutOfRangeError):
                await admin.delete_records({ATP(topic_name, 0): RecordsToDelete(1000)})
            return got
        finally:
            await admin.close()
    got = asyncio.run(run())
    assert {tp.partition: low for tp, low in got.items()} == {0: DELETE_BEFORE, 1: PER_PARTITION}
    assert_deleted(server, topic_name)


@pytest.mark.skipif(NODE is None, reason="node is not installed "
                    "(tools/install-system-deps installs nodejs and npm)")
def test_kafkajs_delete_topic_records(server, topic_name, kafkajs):
    topic_with_records(server, topic_name)
    r = subprocess.run([NODE, str(kafkajs / "delete_records.js"), server.kafka_bootstrap,
                        topic_name],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["offsets"] == [{"partition": 0, "low": DELETE_BEFORE, "high": PER_PARTITION},
                              {"partition": 1, "low": PER_PARTITION, "high": PER_PARTITION}]
    assert out["aboveHighWatermark"] == ["OFFSET_OUT_OF_RANGE"]
    assert out["firstRead"] == {"0": DELETE_BEFORE}
    assert_deleted(server, topic_name)


def test_delete_records_at_the_wire_on_the_supervisor_and_a_worker(server, topic_name):
    """Advertised on every Kafka listener (v0-2); the supervisor, which
    Metadata names the internal topics' leader, refuses those
    INVALID_TOPIC_EXCEPTION as Kafka does and sends the rest to their
    leaders; a worker answers NOT_LEADER_OR_FOLLOWER for what it does not
    lead, and the high watermark for -1."""
    create_topic(server, topic_name, 2)
    native_produce(server, topic_name, sample_records(5, "w"), partition=0)
    missing = topic_name + "-missing"
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic_name}]})
        leaders = {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]}
        brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in md["brokers"]}
        body = {"timeout_ms": 5000, "topics": [
            {"name": "__consumer_offsets", "partitions": [{"partition_index": 0, "offset": 1}]},
            {"name": missing, "partitions": [{"partition_index": 0, "offset": 1}]},
            {"name": topic_name, "partitions": [{"partition_index": 0, "offset": 1},
                                                {"partition_index": 9, "offset": 1}]}]}
        answer = wire.request(ApiKey.DELETE_RECORDS, 2, body)
        codes = {(t["name"], p["partition_index"]): p["error_code"]
                 for t in answer["topics"] for p in t["partitions"]}
        assert codes == {("__consumer_offsets", 0): errors.InvalidTopicError.code,
                         (missing, 0): errors.UnknownTopicOrPartitionError.code,
                         (topic_name, 0): errors.NotLeaderOrFollowerError.code,
                         (topic_name, 9): errors.UnknownTopicOrPartitionError.code}
    finally:
        wire.close()
    for address in [server.kafka_bootstrap, *brokers.values()]:
        wire = KafkaWire(address)
        try:
            versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in wire.request(
                ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                         "client_software_version": "1"})["api_keys"]}
            assert versions[ApiKey.DELETE_RECORDS] == SUPPORTED_VERSIONS[ApiKey.DELETE_RECORDS]
        finally:
            wire.close()
    leader = leaders[0]
    other = next(b for b in brokers if b != leader)
    for version in (0, 1, 2):
        for broker, topic, offset, want in (
                (leader, topic_name, -1, (0, 5)),
                (other, topic_name, 2, (errors.NotLeaderOrFollowerError.code, -1)),
                (leader, "__transaction_state", 0, (errors.InvalidTopicError.code, -1))):
            wire = KafkaWire(brokers[broker])
            try:
                p = wire.request(ApiKey.DELETE_RECORDS, version, {"timeout_ms": 5000, "topics": [
                    {"name": topic, "partitions": [{"partition_index": 0, "offset": offset}]}]}
                                 )["topics"][0]["partitions"][0]
                assert (p["error_code"], p["low_watermark"]) == want, (version, broker, p)
            finally:
                wire.close()
