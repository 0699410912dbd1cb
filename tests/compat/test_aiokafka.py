"""aiokafka against kafkalite's Kafka listener, unchanged."""
from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from compat_helpers import (ACKS, COMPRESSIONS, create_topic, expected_shape, native_produce,
                            native_read, normalize, sample_records, strip)

from kafkalite._ext.partitioner import partition_for_key


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


async def produce(server, topic, records, **config) -> list:
    p = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap, **config)
    await p.start()
    try:
        futures = [await p.send(topic, value=v, key=k, headers=h, partition=0)
                   for k, v, h in records]
        return [await f for f in futures]
    finally:
        await p.stop()


async def read(server, topic, partitions, expect, timeout=20.0) -> list:
    c = AIOKafkaConsumer(bootstrap_servers=server.kafka_bootstrap, enable_auto_commit=False)
    await c.start()
    try:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        await c.seek_to_beginning()
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            for msgs in (await c.getmany(timeout_ms=500)).values():
                out += [normalize(m.partition, m.offset, m.key, m.value, m.headers, m.timestamp)
                        for m in msgs]
        return sorted(out)
    finally:
        await c.stop()


@pytest.mark.parametrize("compression", COMPRESSIONS)
@pytest.mark.parametrize("acks", ACKS)
def test_produce_with_acks_and_compression_is_read_by_native_client(server, topic_name, acks,
                                                                    compression):
    create_topic(server, topic_name)
    records = sample_records(30, compression, null_headers=False)
    run(produce(server, topic_name, records, acks="all" if acks == -1 else acks,
                compression_type=None if compression == "none" else compression, linger_ms=5))
    got = native_read(server, topic_name, 1, len(records))
    assert strip(got) == expected_shape(records)


def test_idempotent_producer_writes_each_record_once(server, topic_name):
    create_topic(server, topic_name)
    records = [(None, b"v%d" % i, []) for i in range(300)]
    meta = run(produce(server, topic_name, records, enable_idempotence=True))
    assert [m.offset for m in meta] == list(range(300))
    got = native_read(server, topic_name, 1, 300)
    assert [r[3] for r in got] == [b"v%d" % i for i in range(300)]


def test_reads_native_records_byte_for_byte(server, topic_name):
    create_topic(server, topic_name)
    records = sample_records(40, "native")
    base = int(time.time() * 1000) - 5_000
    native_produce(server, topic_name, records, timestamps=[base + i for i in range(40)])
    got = run(read(server, topic_name, 1, 40))
    assert got == native_read(server, topic_name, 1, 40)
    assert strip(got) == expected_shape(records)


def test_keyed_records_land_on_the_murmur2_partition(server, topic_name):
    create_topic(server, topic_name, partitions=4)
    keys = [b"device-%d" % i for i in range(80)]

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap)
        await p.start()
        try:
            return {k: (await p.send_and_wait(topic_name, value=b"x", key=k)).partition
                    for k in keys}
        finally:
            await p.stop()
    assert run(go()) == {k: partition_for_key(k, 4) for k in keys}


def test_admin_creates_lists_and_deletes_topics(server, topic_name):
    async def go():
        admin = AIOKafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic_name, 2, 1)])
            assert topic_name in await admin.list_topics()
            await admin.delete_topics([topic_name])
            assert topic_name not in await admin.list_topics()
        finally:
            await admin.close()
    run(go())
