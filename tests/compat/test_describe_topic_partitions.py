"""DescribeTopicPartitions (API 75, KIP-966) through kafka-python's admin
client: leaders, replicas, ISR and offline replicas as Metadata has them,
paged by a partition limit and resumed from a cursor, across topics."""
from __future__ import annotations

import os
import signal

import pytest

from harness import ServerProcess
from replicas import create, wait_for

# one cluster for the module's tests: they go to one xdist worker
pytestmark = pytest.mark.xdist_group("describe_topic_partitions")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three workers, for the module (each test on topics of its own; the
    one that stops a worker waits for it to be back before it ends). A
    worker stopped for 1.5 s is fenced: its replicas are offline."""
    s = ServerProcess(str(tmp_path_factory.mktemp("cluster") / "data"), workers=3,
                      extra_args=["--broker-session-timeout-ms", "1500",
                                  "--replica-lag-time-max-ms", "1500"]).start()
    yield s
    s.stop()


def describe(s, topics, limit=2000, cursor=None):
    from kafka.admin import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=s.kafka_bootstrap, request_timeout_ms=3000)
    try:
        return admin.describe_topic_partitions(topics, response_partition_limit=limit,
                                               cursor=cursor)
    finally:
        admin.close()


def offline_at_the_controller(s, topic) -> list:
    """Partition 0's offline replicas as the supervisor (the controller)
    answers DescribeTopicPartitions on a bare connection: waiting on this
    rather than on kafka-python's admin client, which, while the stopped
    worker is still in Metadata (until it is fenced), may pick it and hang
    for 10 s."""
    from compat_helpers import KafkaWire
    from kafkalite.protocol import ApiKey
    wire = KafkaWire(s.kafka_bootstrap)
    try:
        r = wire.request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, {
            "topics": [{"name": topic}], "response_partition_limit": 10, "cursor": None})
    finally:
        wire.close()
    return r["topics"][0]["partitions"][0]["offline_replicas"]


def test_pages_through_topics_with_a_partition_limit(cluster):
    s = cluster
    create(s, "alpha", partitions=5, rf=3)
    create(s, "beta", partitions=3, rf=1)
    whole = describe(s, ["beta", "alpha", "missing"])
    assert [t["name"] for t in whole["topics"]] == ["alpha", "beta", "missing"]
    assert whole["next_cursor"] is None
    alpha, beta, missing = whole["topics"]
    assert [p["partition_index"] for p in alpha["partitions"]] == [0, 1, 2, 3, 4]
    assert all(sorted(p["replica_nodes"]) == [0, 1, 2] and p["leader_id"] in p["isr_nodes"]
               for p in alpha["partitions"])
    assert all(len(p["replica_nodes"]) == 1 for p in beta["partitions"])
    assert missing["error_code"] == 3 and missing["partitions"] == []   # UNKNOWN_TOPIC_OR_PARTITION
    # pages of 3: alpha 0-2 | alpha 3-4, beta 0 | beta 1-2, missing
    pages, cursor = [], None
    while True:
        page = describe(s, ["alpha", "beta", "missing"], limit=3, cursor=cursor)
        pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]])
                      for t in page["topics"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == [[("alpha", [0, 1, 2])],
                     [("alpha", [3, 4]), ("beta", [0])],
                     [("beta", [1, 2]), ("missing", [])]]
    # no topics named: every topic, the internal ones too
    every = {t["name"]: t for t in describe(s, [])["topics"]}
    assert {"alpha", "beta", "__consumer_offsets"} <= set(every)
    assert every["__consumer_offsets"]["is_internal"]


def test_a_stopped_replica_is_offline_and_out_of_the_isr(cluster):
    s = cluster
    create(s, "gamma", partitions=1, rf=3)
    wait_for(lambda: sorted(describe(s, ["gamma"])["topics"][0]["partitions"][0]["isr_nodes"])
             == [0, 1, 2], what="a full ISR")
    leader = describe(s, ["gamma"])["topics"][0]["partitions"][0]["leader_id"]
    victim = next(b for b in (0, 1, 2) if b != leader)
    pid = s.worker_pid(victim)
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: offline_at_the_controller(s, "gamma") == [victim], timeout=30,
                 what="the stopped replica reported offline")
        # fenced: out of Metadata, so kafka-python's admin client talks to the others
        p = describe(s, ["gamma"])["topics"][0]["partitions"][0]
        assert p["offline_replicas"] == [victim]
        assert victim not in p["isr_nodes"] and victim in p["replica_nodes"]
        assert p["leader_id"] == leader and p["error_code"] == 0
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: describe(s, ["gamma"])["topics"][0]["partitions"][0]["offline_replicas"]
             == [], timeout=30, what="the replica back")


def test_a_cursor_outside_the_request_is_refused(cluster):
    s = cluster
    create(s, "delta", partitions=1, rf=1)
    page = describe(s, ["delta"], cursor={"topic_name": "elsewhere", "partition_index": 0})
    assert [(t["name"], t["error_code"]) for t in page["topics"]] == [("delta", 42)]  # INVALID_REQUEST
    assert page["next_cursor"] is None
