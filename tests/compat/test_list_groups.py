"""Listing groups through Kafka's admin clients.

Kafka's clients list groups by asking every broker Metadata names for the
groups it coordinates (ListGroups) and joining the answers: each group must
come back once, whichever processes of the node were asked.
"""
from __future__ import annotations

import collections

import confluent_kafka as ck
import kafka
from compat_helpers import create_topic, kafka_conf as conf
from confluent_kafka.admin import AdminClient


def commit_as(server, group: str, topic: str) -> None:
    c = ck.Consumer(conf(server, **{"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[ck.TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()


def test_every_group_is_listed_once_by_confluent_kafka_and_kafka_python(server, topic_name,
                                                                         group_name):
    create_topic(server, topic_name, 1)
    groups = [f"{group_name}-a", f"{group_name}-b"]
    for g in groups:
        commit_as(server, g, topic_name)
    admin = AdminClient(conf(server))
    listed = admin.list_consumer_groups(request_timeout=15).result(20)
    assert not listed.errors, listed.errors
    counts = collections.Counter(g.group_id for g in listed.valid)
    assert {g: counts[g] for g in groups} == {g: 1 for g in groups}, counts
    assert max(counts.values()) == 1, counts

    kp = kafka.KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        counts = collections.Counter(g["group_id"] if isinstance(g, dict) else g[0]
                                     for g in kp.list_groups())
    finally:
        kp.close()
    assert {g: counts[g] for g in groups} == {g: 1 for g in groups}, counts
    assert max(counts.values()) == 1, counts
