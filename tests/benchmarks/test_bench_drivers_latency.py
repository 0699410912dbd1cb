"""The bench drivers measure fairly: a driver's own client calls must not add
latency that the system under test does not cause.

- kafkalite-kafka's consumer: confluent-kafka's ``consume(n, timeout)``
  waits until it has ``n`` messages or the timeout passed, so a driver that
  asks for 10,000 with the harness's receive timeout charged every message
  the rest of that timeout (p50 55 ms at 10,000 msg/s, half the 100 ms
  timeout). ``receive`` must hand over what arrived as soon as something
  has, whatever its timeout.

These check what a call returns and that it does not sit out a long
timeout (30 s, against milliseconds of work), never how fast anything is.
"""
import time

import pytest

from harness import create
from kafkalite.bench.drivers import driver_class
from kafkalite.bench.workload import Workload

LONG_TIMEOUT = 30.0


def _workload(**fields) -> Workload:
    base = dict(name="driver check", path="<test>", topics=1, partitions_per_topic=1, message_size=64,
                key_distributor="NO_KEY", producers_per_topic=1, subscriptions_per_topic=1,
                consumers_per_subscription=1, producer_rate=0)
    base.update(fields)
    return Workload(**base)


def _stamped(n: int, size: int) -> bytes:
    import numpy as np
    rows = np.zeros((n, size), dtype=np.uint8)
    rows[:, :8] = np.arange(1, n + 1, dtype="<i8").view(np.uint8).reshape(n, 8)
    return rows.tobytes()


@pytest.mark.parametrize("name", ["kafkalite-kafka", "kafkalite-kafka-tuned"])
def test_kafka_consumer_hands_over_what_arrived_before_its_timeout(server, topic_name, name):
    pytest.importorskip("confluent_kafka")
    create(server, topic_name, 1)
    workload = _workload()
    endpoint = {"bootstrap.servers": server.bootstrap,
                "kafka": server.info["kafka.bootstrap.servers"]}
    driver = driver_class(name)
    producer = driver.producer(endpoint, workload)
    consumer = driver.consumer(endpoint, workload, [(topic_name, 0)])
    try:
        acked = []
        producer.send(topic_name, 0, _stamped(5, 64), 5, None, lambda: acked.append(1))
        producer.flush(30)
        assert acked == [1]
        got = []
        started = time.monotonic()
        while len(got) < 5 and time.monotonic() - started < LONG_TIMEOUT:
            stamps, _ = consumer.receive(LONG_TIMEOUT)
            got += stamps.tolist()
        waited = time.monotonic() - started
        assert sorted(got) == [1, 2, 3, 4, 5]
        # 5 messages, far fewer than a consume() call asks for: the old
        # driver returned them only when its 30 s timeout ran out
        assert waited < LONG_TIMEOUT / 2, f"receive sat out its timeout ({waited:.1f} s)"
    finally:
        consumer.close()
        producer.close()


@pytest.mark.parametrize("name", ["kafkalite-kafka", "kafkalite-kafka-tuned"])
def test_kafka_producer_acknowledges_one_message_sends_each_once(server, topic_name, name):
    """A paced producer sends one message at a time (the driver's own path
    for it: on_ack is the delivery callback, no object per message): each is
    acknowledged once, with its key, in its partition."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create(server, topic_name, 2)
    endpoint = {"bootstrap.servers": server.bootstrap,
                "kafka": server.info["kafka.bootstrap.servers"]}
    producer = driver_class(name).producer(endpoint, _workload(message_size=64))
    try:
        acked = []
        for i in range(6):
            producer.send(topic_name, i % 2, _stamped(6, 64)[i * 64:(i + 1) * 64], 1,
                          [b"key-%d" % i], lambda err=None, msg=None, i=i: acked.append(i))
        producer.flush(30)
        assert sorted(acked) == list(range(6))
    finally:
        producer.close()
    consumer = confluent_kafka.Consumer({"bootstrap.servers": endpoint["kafka"],
                                         "group.id": topic_name, "enable.auto.offset.store": False})
    consumer.assign([confluent_kafka.TopicPartition(topic_name, p, 0) for p in (0, 1)])
    try:
        got = []
        deadline = time.monotonic() + LONG_TIMEOUT
        while len(got) < 6 and time.monotonic() < deadline:
            m = consumer.poll(1.0)
            if m is not None and m.error() is None:
                got.append((m.partition(), m.key(), int.from_bytes(m.value()[:8], "little")))
        assert sorted(got) == sorted((i % 2, b"key-%d" % i, i + 1) for i in range(6))
    finally:
        consumer.close()
