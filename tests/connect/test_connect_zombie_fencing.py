"""Zombie fencing by task count (KIP-618, connect/distributed/): two ``kafkalite
connect distributed`` workers with ``exactly.once.source.support=enabled``
on a real server; the zombie is Kafka's own client (confluent-kafka)
holding a task's transactional id, the topic and the config topic read
back read_committed with it.

A source connector with 3 tasks (task ``i`` writes partition ``i``) is
reconfigured to 1. Task 2 is gone from the new generation, so no new
incarnation of it will ever claim its transactional id
(``<group.id>-<connector>-2``): without fencing, whoever holds that id last
(a worker that lost its group membership but still runs the old task) keeps
committing. The leader fences every earlier task's producer and writes
``task-count-record-<connector>`` ``{"task-count": 1}`` after the new task
configs' commit, before the new generation starts: the zombie's next
commit fails, and what it wrote never reaches a read_committed consumer.
"""
from __future__ import annotations

import os
import time
import uuid

import pytest
import requests
from harness import create, wait_until
from test_connect_distributed import get, start_worker
from test_connect_leader_writes import config_records, group_name, stop_all

SOURCE = "connect_fencing_plugins:TaskPerPartitionSourceConnector"


def committed_values(server, topic, partitions=3, timestamps=False):
    """The values of ``topic`` a read_committed consumer sees up to the end
    of each partition as it stands now (the tasks keep writing); with
    ``timestamps``: (value, CreateTime ms)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    out = []
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        # an open transaction holds a partition's read_committed end below its end: bounded
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                value = None if m.value() is None else m.value().decode()
                out.append((value, m.timestamp()[1]) if timestamps else value)
            if all(c.position([TopicPartition(topic, p)])[0].offset >= ends[p]
                   for p in range(partitions) if ends[p] > 0):
                break
    finally:
        c.close()
    return out


def config_timestamp(server, topic, key):
    """The CreateTime (ms) of the last record of ``key`` in the config topic."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed"})
    found = None
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and \
                c.position([TopicPartition(topic, 0)])[0].offset < end:
            m = c.poll(0.2)
            if m is not None and not m.error() and m.key() == key.encode():
                found = m.timestamp()[1]
    finally:
        c.close()
    assert found is not None, f"{key} in {topic}"
    return found


def task_count_order(recs, name):
    """The config topic's task config commits and task count records of
    ``name``, in order: [("commit", n) or ("count", n)]."""
    out = []
    for k, v, _ in recs:
        if k == f"commit-{name}":
            out.append(("commit", v["tasks"]))
        elif k == f"task-count-record-{name}":
            out.append(("count", v["task-count"]))
    return out


def test_a_task_the_new_generation_drops_is_fenced_before_it_starts(server, tmp_path,
                                                                    topic_name, monkeypatch):
    from confluent_kafka import KafkaException, Producer
    # the workers import the test connector from this folder
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(__file__) + os.pathsep +
                       os.environ.get("PYTHONPATH", ""))
    group = group_name("zf")
    workers = [start_worker(server, tmp_path, i, group, **{
        "exactly.once.source.support": "enabled"}) for i in range(2)]
    urls = [u for _, u in workers]
    configs_topic = f"{group}-configs"
    create(server, topic_name, partitions=3)
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="2 REST APIs")
        r = requests.post(urls[0] + "/connectors", timeout=60, json={"name": "z", "config": {
            "connector.class": SOURCE, "topic": topic_name, "tag": "g1", "tasks.max": "3"}})
        assert r.status_code == 201, r.text

        def tasks_running(n):
            st = get(urls[1], "/connectors/z/status")
            return st and len(st["tasks"]) == n and all(t["state"] == "RUNNING"
                                                        for t in st["tasks"])
        wait_until(lambda: tasks_running(3), timeout=60, message="3 tasks RUNNING")
        # the first generation started after its (empty) predecessor was fenced
        assert task_count_order(config_records(server, configs_topic), "z") == \
            [("commit", 3), ("count", 3)]
        wait_until(lambda: {v.rsplit("-", 1)[0] for v in committed_values(server, topic_name)} >=
                   {"g1-0", "g1-1", "g1-2"}, timeout=60, message="every task's records")

        # the zombie: the latest holder of task 2's transactional id (as a worker that lost
        # its membership would be); it still writes before the new generation
        zombie = Producer({"bootstrap.servers": server.kafka_bootstrap,
                           "transactional.id": f"{group}-z-2"})
        zombie.init_transactions(30)
        zombie.begin_transaction()
        zombie.produce(topic_name, value=b"zombie-before", partition=2)
        zombie.commit_transaction(30)

        r = requests.put(urls[1] + "/connectors/z/config", timeout=60, json={
            "connector.class": SOURCE, "topic": topic_name, "tag": "g2", "tasks.max": "1"})
        assert r.status_code == 200, r.text
        # the new task configs are committed, then fenced and recorded, in that order
        wait_until(lambda: task_count_order(config_records(server, configs_topic), "z")[-2:]
                   == [("commit", 1), ("count", 1)], timeout=60,
                   message=lambda: task_count_order(config_records(server, configs_topic), "z"))
        wait_until(lambda: tasks_running(1), timeout=60, message="the new generation RUNNING")
        wait_until(lambda: any(v.startswith("g2-0-") for v in committed_values(server, topic_name)),
                   timeout=60, message="the new generation's records")
        # ... and its first record was produced after the task count record (one host's clock)
        counted_at = config_timestamp(server, configs_topic, "task-count-record-z")
        first = min(ts for v, ts in committed_values(server, topic_name, timestamps=True)
                    if v.startswith("g2-"))
        assert first >= counted_at, (first, counted_at)

        # the zombie's next transaction is refused: it was fenced
        with pytest.raises(KafkaException):
            zombie.begin_transaction()
            zombie.produce(topic_name, value=b"zombie-after", partition=2)
            zombie.commit_transaction(30)
        values = committed_values(server, topic_name)
        assert "zombie-before" in values and "zombie-after" not in values
        assert not any(v.startswith(("g2-1-", "g2-2-")) for v in values)
        assert [t["config"]["tag"] for t in get(urls[0], "/connectors/z/tasks")] == ["g2"]
    finally:
        stop_all(workers)
