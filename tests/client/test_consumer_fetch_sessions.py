"""kafkalite's consumer fetches in an incremental fetch session with each
worker (KIP-227, protocol/fetch_sessions.py): after the first fetch it
names only the partitions whose position moved, the workers count its
fetches as incremental, and nothing is missed -- records on any partition,
on partitions paused (forgotten from the session) and resumed, and after
a worker lost the session; unassign() abandons the fetch in flight."""
from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from harness import scrape, wait_until
from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                              TopicPartition)

PARTITIONS = 12


def fetches_by_kind(server) -> dict:
    return {s.labels["kind"]: s.value for family in text_string_to_metric_families(scrape(server))
            for s in family.samples if s.name == "kafkalite_fetch_requests_total"}


def produce(server, topic, values_by_partition: dict) -> None:
    p = Producer(server.config(acks="all"))
    try:
        for partition, values in values_by_partition.items():
            for v in values:
                p.produce(topic, v, partition=partition)
        assert p.flush(30) == 0
    finally:
        p.close()


def test_the_consumer_fetches_incrementally_and_misses_nothing(server, topic_name):
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(topic_name, PARTITIONS)]).values():
            f.result()
    finally:
        admin.close()
    produce(server, topic_name, {p: [b"a%d" % p] for p in range(PARTITIONS)})
    before = fetches_by_kind(server)
    c = Consumer(server.config(**{"fetch.wait.max.ms": 50}))
    got: list = []

    def consumed(n):
        got.extend(m.value() for m in c.consume(100, 0.2) if m.error() is None)
        return len(got) >= n
    try:
        c.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        wait_until(lambda: consumed(PARTITIONS), 30)
        # each worker it fetches from holds a session of its partitions
        assert c._sessions and all(s.session_id and s.epoch >= 1 for s in c._sessions.values()), \
            [(s.session_id, s.epoch, len(s.partitions)) for s in c._sessions.values()]
        # paused partitions are forgotten from the session; their records wait
        paused = [TopicPartition(topic_name, p) for p in (0, 1)]
        c.pause(paused)
        wait_until(lambda: consumed(0) or all(
            (topic_name, p) not in s.partitions for s in c._sessions.values() for p in (0, 1)), 10)
        produce(server, topic_name, {0: [b"b0"], 5: [b"b5"]})
        wait_until(lambda: consumed(PARTITIONS + 1), 30)
        assert b"b5" in got and b"b0" not in got
        c.resume(paused)
        wait_until(lambda: consumed(PARTITIONS + 2), 30)
        # a worker that lost the session (evicted, restarted): opened again
        for s in c._sessions.values():
            s.session_id += 1           # the worker has no such session
        produce(server, topic_name, {p: [b"c%d" % p] for p in range(PARTITIONS)})
        wait_until(lambda: consumed(2 * PARTITIONS + 2), 30)
        assert sorted(got) == sorted([b"a%d" % p for p in range(PARTITIONS)] + [b"b0", b"b5"]
                                     + [b"c%d" % p for p in range(PARTITIONS)])

        def counted():
            consumed(0)
            now = fetches_by_kind(server)
            return (now.get("incremental", 0) - before.get("incremental", 0) >= 10
                    and now.get("refused", 0) > before.get("refused", 0))
        wait_until(counted, 30)
    finally:
        c.close()


def test_unassign_abandons_the_fetch_in_flight(server, topic_name):
    """A consumer that read a partition to its end has a long-poll fetch
    out; after unassign() the next assignment is fetched at once, not after
    that fetch's fetch.max.wait.ms (the Spark source's workers keep one
    consumer from task to task this way), and reads exactly its records."""
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(topic_name, 1)]).values():
            f.result()
    finally:
        admin.close()
    produce(server, topic_name, {0: [b"r%d" % i for i in range(10)]})
    c = Consumer(server.config(**{"fetch.max.wait.ms": 20_000}))
    try:
        c.assign([TopicPartition(topic_name, 0, 0)])
        got = []
        wait_until(lambda: got.extend(c.consume_batch(1.0).column(2).to_pylist())
                   or len(got) >= 10, 30)
        assert got == list(range(10))     # and now a fetch at offset 10 waits on the worker
        c.unassign()
        c.assign([TopicPartition(topic_name, 0, 4)])
        t0 = time.monotonic()
        batch = c.consume_batch(15.0)
        waited = time.monotonic() - t0
        assert batch.column(2).to_pylist() == list(range(4, 10)), (batch.num_rows, waited)
        assert waited < 10, f"the new assignment waited {waited:.1f} s behind the old fetch"
        assert c.position([TopicPartition(topic_name, 0)])[0].offset == 10
    finally:
        c.close()
