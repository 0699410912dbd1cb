"""A classic consumer group sees the topics it subscribes to change.

Kafka's group leader watches the subscribed topics' partition counts and
starts a rebalance when a topic appears or gains partitions; members
subscribed before their topic exists (a Connect sink created first) must
get its partitions soon after it is made, not after metadata.max.age.ms.
"""
from __future__ import annotations

import time

from harness import create, wait_until
from kafkalite.client import AdminClient, Consumer, NewPartitions, Producer


def consumer(server, group):
    return Consumer(server.config(**{"group.id": group, "auto.offset.reset": "earliest",
                                     "session.timeout.ms": 6000,
                                     "heartbeat.interval.ms": 500}))


def produce(server, topic, partitions, per_partition, tag):
    p = Producer(server.config())
    try:
        for part in range(partitions):
            p.produce_batch(topic, [b"%s-%d-%d" % (tag, part, i) for i in range(per_partition)],
                            partition=part)
        assert p.flush(20) == 0
    finally:
        p.close()


def read(members, want, timeout):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for c in members:
            got += [m.value() for m in c.consume(1000, 0.2)]
    return got


def test_a_group_subscribed_before_its_topic_exists_reads_it_once_made(server, topic_name,
                                                                       group_name):
    members = [consumer(server, group_name) for _ in range(2)]
    try:
        for c in members:
            c.subscribe([topic_name])
        read(members, 1, 3.0)                     # joined, with nothing to read
        assert not any(c.assignment() for c in members)
        create(server, topic_name, 3)
        produce(server, topic_name, 3, 10, b"first")
        started = time.monotonic()
        got = read(members, 30, 20.0)
        assert sorted(got) == sorted(b"first-%d-%d" % (p, i) for p in range(3) for i in range(10))
        # the leader looks for a missing topic every second, not every 5 minutes
        assert time.monotonic() - started < 15
        assert sorted(tp.partition for c in members for tp in c.assignment()) == [0, 1, 2]
    finally:
        for c in members:
            c.close()


def test_partitions_added_to_a_subscribed_topic_are_assigned(server, topic_name, group_name):
    create(server, topic_name, 2)
    members = [Consumer(server.config(**{"group.id": group_name, "auto.offset.reset": "earliest",
                                         "metadata.max.age.ms": 1000}))]
    try:
        members[0].subscribe([topic_name])
        produce(server, topic_name, 2, 5, b"old")
        assert len(read(members, 10, 20.0)) == 10
        admin = AdminClient(server.config())
        try:
            for f in admin.create_partitions([NewPartitions(topic_name, 4)]).values():
                f.result()
        finally:
            admin.close()
        produce(server, topic_name, 4, 5, b"new")
        got = read(members, 20, 20.0)
        assert sorted(got) == sorted(b"new-%d-%d" % (p, i) for p in range(4) for i in range(5))
        wait_until(lambda: len(members[0].assignment()) == 4, 10, "all four partitions assigned")
    finally:
        for c in members:
            c.close()
