"""Admin answers tell the truth (issue 12, finding 6).

A worker that cannot open a partition (here: out of file descriptors, its
RLIMIT_NOFILE lowered with prlimit) reports it, and CreateTopics and
CreatePartitions answer that error (KAFKA_STORAGE_ERROR, naming the cause)
and undo the change, instead of reporting a success that is not there. A
partition a restarted worker could not open is offline: Metadata answers
LEADER_NOT_AVAILABLE with the worker in offline_replicas, and a produce that
reaches the worker anyway is answered KAFKA_STORAGE_ERROR at once, not
after a timeout.
"""
from __future__ import annotations

import os
import resource
import signal
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire  # noqa: E402
from harness import wait_until  # noqa: E402

from kafkalite import errors  # noqa: E402
from kafkalite.client import AdminClient, NewPartitions, NewTopic, Producer  # noqa: E402
from kafkalite.protocol import ApiKey  # noqa: E402
from kafkalite.record import RecordBatchBuilder  # noqa: E402

NOFILE = resource.RLIMIT_NOFILE
PARTITIONS = 200            # 100 a worker: far more files than the lowered limit allows


@pytest.fixture
def srv(own_server):
    return own_server


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def squeeze(pid: int, spare: int) -> tuple[int, int]:
    """Leave ``pid`` ``spare`` file descriptors (its soft limit: raising a
    hard limit again needs privileges); returns its old limits."""
    old = resource.prlimit(pid, NOFILE)
    resource.prlimit(pid, NOFILE, (open_fds(pid) + spare, old[1]))
    return old


def admin(server) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.bootstrap})


def metadata(server, topic: str) -> dict:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        return wire.request(ApiKey.METADATA, 12, {
            "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False})["topics"][0]
    finally:
        wire.close()


def test_create_topics_and_partitions_answer_the_errors_of_the_workers(srv):
    pids = srv.worker_pids()
    limits = [squeeze(pid, 40) for pid in pids]
    a = admin(srv)
    try:
        t0 = time.monotonic()
        with pytest.raises(errors.KafkaStorageError, match="Too many open files"):
            a.create_topics([NewTopic("crowded", PARTITIONS)])["crowded"].result()
        assert time.monotonic() - t0 < 20
        # undone: the topic does not exist, so a client is not told it does
        assert metadata(srv, "crowded")["error_code"] == errors.UnknownTopicOrPartitionError.code

        a.create_topics([NewTopic("growing", 1)])["growing"].result()
        with pytest.raises(errors.KafkaStorageError, match="Too many open files"):
            a.create_partitions([NewPartitions("growing", PARTITIONS)])["growing"].result()
        assert len(metadata(srv, "growing")["partitions"]) == 1

        assert srv.worker_pids() == pids        # no worker died of it
        for pid, old in zip(pids, limits):
            resource.prlimit(pid, NOFILE, old)
        a.create_topics([NewTopic("crowded", PARTITIONS)])["crowded"].result()
        a.create_partitions([NewPartitions("growing", PARTITIONS)])["growing"].result()
    finally:
        a.close()
    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all"})
    try:
        for part in (0, PARTITIONS - 1):
            for topic in ("crowded", "growing"):
                p.produce(topic, b"v", partition=part)
        assert p.flush(20) == 0
    finally:
        p.close()
    assert srv.stop() == 0


def test_a_partition_a_restarted_worker_could_not_open_is_offline_and_says_so(srv):
    a = admin(srv)
    try:
        a.create_topics([NewTopic("many", PARTITIONS)])["many"].result()
    finally:
        a.close()
    # A worker restarted by the supervisor inherits its limit.
    supervisor = srv.proc.pid
    old = squeeze(supervisor, 64)
    pid = srv.worker_pid(0)
    os.kill(pid, signal.SIGKILL)
    new_pid = srv.wait_for_worker_restart(0, pid)
    try:
        offline = wait_until(lambda: [p for p in metadata(srv, "many")["partitions"]
                                      if p["offline_replicas"]], 20,
                             "a partition of worker 0 reported offline", interval=0.2)
    finally:
        resource.prlimit(supervisor, NOFILE, old)
        resource.prlimit(new_pid, NOFILE, old)      # room for the connection below
    assert all(p["error_code"] == errors.LeaderNotAvailableError.code and p["leader_id"] == -1
               and p["offline_replicas"] == [0] and 0 not in p["isr_nodes"] for p in offline)

    broker = next(b for b in srv.refresh()["kafka_brokers"] if b["node_id"] == 0)
    wire = KafkaWire(f"127.0.0.1:{broker['port']}")
    try:
        b = RecordBatchBuilder()
        b.append(1_700_000_000_000, None, b"v")
        t0 = time.monotonic()
        resp = wire.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 8000, "topic_data": [
            {"name": "many", "partition_data": [
                {"index": offline[0]["partition_index"], "records": bytes(b.build())}]}]})
        assert time.monotonic() - t0 < 2
        answer = resp["responses"][0]["partition_responses"][0]
        assert answer["error_code"] == errors.KafkaStorageError.code
        assert "Too many open files" in answer["error_message"]
    finally:
        wire.close()
    assert srv.worker_pid(0) == new_pid

    # With its limit back, the next start of the worker opens them all.
    os.kill(new_pid, signal.SIGKILL)
    srv.wait_for_worker_restart(0, new_pid)
    wait_until(lambda: all(p["error_code"] == 0 and not p["offline_replicas"]
                           for p in metadata(srv, "many")["partitions"]), 20,
               lambda: f"every partition online: {metadata(srv, 'many')['partitions']}",
               interval=0.2)
    assert srv.stop() == 0
