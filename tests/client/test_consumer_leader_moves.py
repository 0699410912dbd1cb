"""The native clients' ListOffsets through a leader change: a consumer (and
an admin client) whose metadata still names the old leader asks it, hears
NOT_LEADER_OR_FOLLOWER, refreshes its metadata and asks the new leader, as
Kafka's consumer retries a retriable ListOffsets error (client/metadata.py
list_offsets). Found by a soak of test_replication_clients.py: read_log's
consumer, assigned at OFFSET_BEGINNING right after the last kill, raised
instead of reading."""
from __future__ import annotations

import os
import signal

import pytest

from harness import ServerProcess
from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, Producer, TopicPartition
from replicas import create, state, wait_for

pytestmark = pytest.mark.xdist_group("consumer_leader_moves")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Three workers; the test kills a leader and waits for its restart."""
    s = ServerProcess(str(tmp_path_factory.mktemp("cluster") / "data"), workers=3).start()
    yield s
    s.stop()


def test_list_offsets_after_the_leader_moved_asks_the_new_leader(cluster):
    s = cluster
    create(s, "moves", partitions=1, rf=3, **{"min.insync.replicas": "2"})
    p = Producer(s.config(acks="all"))
    for i in range(20):
        p.produce("moves", b"v%d" % i, partition=0)
    assert p.flush(30) == 0
    p.close()
    tp = TopicPartition("moves", 0)
    consumer = Consumer(s.config())
    admin = AdminClient(s.config())
    try:
        # both learn the leader now
        assert consumer.get_watermark_offsets(tp, timeout=10) == (0, 20)
        assert admin.list_offsets({("moves", 0): -1})[("moves", 0)] == 20
        wait_for(lambda: state(s, "moves")[0][2] == [0, 1, 2], what="a full ISR")
        old = state(s, "moves")[0][0]
        pid = s.worker_pid(old)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: state(s, "moves")[0][0] not in (old, -1), what="a new leader")
        s.wait_for_worker_restart(old, pid)
        # the old leader is back, as a follower: their metadata still names it
        assert consumer.get_watermark_offsets(tp, timeout=10) == (0, 20)
        assert admin.list_offsets({("moves", 0): -2})[("moves", 0)] == 0
        consumer.assign([TopicPartition("moves", 0, OFFSET_BEGINNING)])
        got = []
        wait_for(lambda: got.extend(m.value() for m in consumer.consume(100, 0.5)
                                    if m.error() is None) or len(got) >= 20,
                 what="the partition read")
        assert got == [b"v%d" % i for i in range(20)]
    finally:
        consumer.close()
        admin.close()
