"""kafka-python against kafkalite's Kafka listener, unchanged."""
from __future__ import annotations

import time

import pytest
from compat_helpers import (ACKS, COMPRESSIONS, create_topic, expected_shape, native_produce,
                            native_read, normalize, sample_records, strip)
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from harness import scrape, wait_until
from kafkalite._ext.partitioner import partition_for_key


def kp_read(server, topic, partitions, expect, timeout=20.0) -> list:
    c = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest")
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        c.seek_to_beginning()
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for msgs in c.poll(500).values():
                out += [normalize(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp)
                        for m in msgs]
        return sorted(out)
    finally:
        c.close()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("acks", ACKS)
def test_produce_with_acks_and_compression_is_read_by_native_client(server, topic_name, acks,
                                                                    compression):
    create_topic(server, topic_name)
    records = sample_records(30, compression, null_headers=False)
    p = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, acks="all" if acks == -1 else acks,
                      compression_type=None if compression == "none" else compression,
                      linger_ms=5)
    try:
        for key, value, headers in records:
            p.send(topic_name, value=value, key=key, headers=headers, partition=0)
        p.flush(20)
    finally:
        p.close(5)
    got = native_read(server, topic_name, 1, len(records))
    assert strip(got) == expected_shape(records)


def test_idempotent_producer_writes_each_record_once(server, topic_name):
    create_topic(server, topic_name)
    p = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, enable_idempotence=True,
                      acks="all", linger_ms=2)
    try:
        futures = [p.send(topic_name, value=b"v%d" % i, partition=0) for i in range(500)]
        p.flush(20)
        assert [f.get(10).offset for f in futures] == list(range(500))
    finally:
        p.close(5)
    got = native_read(server, topic_name, 1, 500)
    assert [r[3] for r in got] == [b"v%d" % i for i in range(500)]


def test_reads_native_records_byte_for_byte(server, topic_name):
    create_topic(server, topic_name)
    records = sample_records(40, "native", null_headers=False)
    base = int(time.time() * 1000) - 5_000
    native_produce(server, topic_name, records, timestamps=[base + i for i in range(40)])
    got = kp_read(server, topic_name, 1, 40)
    assert got == native_read(server, topic_name, 1, 40)
    assert strip(got) == expected_shape(records)


def test_keyed_records_land_on_the_murmur2_partition(server, topic_name):
    create_topic(server, topic_name, partitions=5)
    p = KafkaProducer(bootstrap_servers=server.kafka_bootstrap)
    keys = [b"order-%d" % i for i in range(100)]
    try:
        futures = {k: p.send(topic_name, value=b"x", key=k) for k in keys}
        p.flush(20)
        placed = {k: f.get(10).partition for k, f in futures.items()}
    finally:
        p.close(5)
    assert placed == {k: partition_for_key(k, 5) for k in keys}


def test_admin_creates_lists_and_deletes_topics(server, topic_name):
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        admin.create_topics([NewTopic(topic_name, 2, 1)])
        assert topic_name in admin.list_topics()
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic(topic_name, 2, 1)])
        admin.delete_topics([topic_name])
        wait_until(lambda: topic_name not in admin.list_topics(), 10, "the topic to be gone")
    finally:
        admin.close()


def fetches_by_kind(server) -> dict:
    """The workers' fetches so far by session metadata (kafkalite_fetch_requests)."""
    from prometheus_client.parser import text_string_to_metric_families
    return {s.labels["kind"]: s.value for family in text_string_to_metric_families(scrape(server))
            for s in family.samples if s.name == "kafkalite_fetch_requests_total"}


def test_a_consumer_fetches_in_incremental_sessions(server, topic_name):
    """kafka-python opens a fetch session (KIP-227) with each worker and
    then fetches incrementally: the workers see incremental fetches, and
    records produced to any of its partitions while it polls still arrive."""
    create_topic(server, topic_name, partitions=12)
    for p in range(12):
        native_produce(server, topic_name, [(None, b"first-%d" % p, None)], partition=p)
    before = fetches_by_kind(server)
    c = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, enable_auto_commit=False,
                      auto_offset_reset="earliest", fetch_max_wait_ms=100)
    try:
        c.assign([TopicPartition(topic_name, p) for p in range(12)])
        got: list = []

        def polled(n):
            for msgs in c.poll(200).values():
                got.extend(m.value for m in msgs)
            return len(got) >= n
        wait_until(lambda: polled(12), 30)
        for p in (3, 11):
            native_produce(server, topic_name, [(None, b"later-%d" % p, None)], partition=p)
        wait_until(lambda: polled(14), 30)
        assert sorted(got) == sorted([b"first-%d" % p for p in range(12)] + [b"later-3", b"later-11"])

        def incremental():
            polled(14)
            now = fetches_by_kind(server)
            return now.get("incremental", 0) - before.get("incremental", 0) >= 10 and \
                now.get("full", 0) > before.get("full", 0)
        wait_until(incremental, 30)
    finally:
        c.close()
