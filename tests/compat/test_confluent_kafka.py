"""confluent-kafka (librdkafka) against kafkalite's Kafka listener, unchanged."""
from __future__ import annotations

import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient as KafkaAdmin
from confluent_kafka.admin import NewTopic as KafkaNewTopic
from compat_helpers import (ACKS, COMPRESSIONS, create_topic, expected_shape, native_produce,
                            native_read, normalize, sample_records, strip)

from kafkalite._ext.partitioner import partition_for_key
from kafkalite.client import Producer as NativeProducer


def conf(server, **extra) -> dict:
    return {"bootstrap.servers": server.kafka_bootstrap, "socket.timeout.ms": 10000, **extra}


def ck_read(server, topic, partitions, expect, timeout=20.0, **extra) -> list:
    # (assigned, never committing: the group id is only librdkafka's requirement)
    c = ck.Consumer(conf(server, **{"group.id": f"{topic}-reader", "enable.auto.commit": False,
                                    **extra}))
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                assert m.error() is None, m.error()
                out.append(normalize(m.partition(), m.offset(), m.key(), m.value(), m.headers(),
                                     m.timestamp()[1]))
        return sorted(out)
    finally:
        c.close()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("acks", ACKS)
def test_produce_with_acks_and_compression_is_read_by_native_client(server, topic_name, acks,
                                                                    compression):
    create_topic(server, topic_name)
    records = sample_records(40, compression)
    p = ck.Producer(conf(server, acks=str(acks), **{"compression.type": compression,
                                                     "linger.ms": 5}))
    for key, value, headers in records:
        p.produce(topic_name, value=value, key=key, headers=headers, partition=0)
    assert p.flush(20) == 0
    got = native_read(server, topic_name, 1, len(records))
    assert strip(got) == expected_shape(records)
    assert [r[1] for r in got] == list(range(len(records)))


def test_idempotent_producer_writes_each_record_once_in_order(server, topic_name):
    create_topic(server, topic_name, partitions=2)
    p = ck.Producer(conf(server, **{"enable.idempotence": True, "linger.ms": 2,
                                    "compression.type": "lz4"}))
    errors = []
    for i in range(3000):
        p.produce(topic_name, value=b"v%d" % i, key=b"k%d" % (i % 2), partition=i % 2,
                  on_delivery=lambda err, msg: err and errors.append(err))
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    got = native_read(server, topic_name, 2, 3000)
    for part in (0, 1):
        values = [r[3] for r in got if r[0] == part]
        assert values == [b"v%d" % i for i in range(part, 3000, 2)]


def test_reads_native_records_byte_for_byte(server, topic_name):
    create_topic(server, topic_name)
    records = sample_records(60, "native")
    base = int(time.time() * 1000) - 10_000
    offsets = native_produce(server, topic_name, records, timestamps=[base + i for i in range(60)])
    assert offsets == list(range(60))
    got = ck_read(server, topic_name, 1, 60)
    assert got == native_read(server, topic_name, 1, 60)
    assert strip(got) == expected_shape(records)
    assert [r[5] for r in got] == [base + i for i in range(60)]


def test_large_fetches_arrive_whole(server, topic_name):
    """Several MiB per fetch: the sendfile path with partial writes."""
    create_topic(server, topic_name)
    p = NativeProducer(server.config(acks=1))
    failed = []
    try:
        for chunk in range(8):   # 900 KB batches, under max.message.bytes
            p.produce_batch(topic_name, [bytes([chunk]) * 1000] * 900, partition=0,
                            on_delivery=lambda err, d: err and failed.append(err))
        assert p.flush(30) == 0 and failed == []
    finally:
        p.close()
    c = ck.Consumer(conf(server, **{"group.id": f"{topic_name}-big", "fetch.max.bytes": 50 << 20,
                                    "max.partition.fetch.bytes": 20 << 20}))
    try:
        c.assign([ck.TopicPartition(topic_name, 0, ck.OFFSET_BEGINNING)])
        seen, deadline = 0, time.monotonic() + 30
        while seen < 7200 and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                assert m.error() is None
                assert m.offset() == seen and m.value() == bytes([seen // 900]) * 1000
                seen += 1
        assert seen == 7200
    finally:
        c.close()


def test_keyed_records_land_on_the_murmur2_partition(server, topic_name):
    create_topic(server, topic_name, partitions=6)
    p = ck.Producer(conf(server, partitioner="murmur2_random"))
    placed = {}
    keys = [b"user-%d" % i for i in range(120)]
    for key in keys:
        p.produce(topic_name, value=b"x", key=key,
                  on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()))
    assert p.flush(20) == 0
    assert placed == {k: partition_for_key(k, 6) for k in keys}
    got = native_read(server, topic_name, 6, len(keys))
    assert {r[2]: r[0] for r in got} == placed


def test_admin_creates_lists_and_deletes_topics(server, topic_name):
    admin = KafkaAdmin(conf(server))
    for f in admin.create_topics([KafkaNewTopic(topic_name, 3, 1)],
                                 operation_timeout=20).values():
        f.result(20)
    md = admin.list_topics(timeout=10)
    assert topic_name in md.topics and len(md.topics[topic_name].partitions) == 3
    assert {b.id for b in md.brokers.values()} == {0, 1}
    with pytest.raises(ck.KafkaException, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([KafkaNewTopic(topic_name, 1, 1)])[topic_name].result(20)
    for f in admin.delete_topics([topic_name], operation_timeout=20).values():
        f.result(20)
    assert topic_name not in admin.list_topics(timeout=10).topics
