"""DeleteRecords on a real server: the native AdminClient, the log start
offset surviving a kill -9 and a restart, and on a replicated partition the followers moving
their log start too (the answer waits for the in-sync ones, within
timeout_ms) and a new leader serving from the new start after the old one
is killed.

The Kafka clients' side (kafkajs, kafka-python, aiokafka, confluent-kafka)
is tests/compat/test_delete_records_clients.py, ``kafkalite delete-records``
tests/cli/test_delete_records_cli.py.
"""
from __future__ import annotations

import glob
import os
import signal
import time

import pytest

from harness import ServerProcess, create
from replicas import create as create_replicated
from replicas import produce, state, wait_for
from kafkalite import errors
from kafkalite.client import AdminClient, Consumer, TopicPartition


def earliest(server, topic, partition=0) -> int:
    admin = AdminClient(server.config())
    try:
        return admin.list_offsets({(topic, partition): -2})[(topic, partition)]
    finally:
        admin.close()


def delete(server, *tps, **kwargs) -> dict:
    """{partition: low watermark or the KafkaError} of delete_records(tps)."""
    admin = AdminClient(server.config())
    try:
        out = {}
        for tp, f in admin.delete_records(list(tps), **kwargs).items():
            try:
                out[(tp.topic, tp.partition)] = f.result().low_watermark
            except errors.KafkaError as exc:
                out[(tp.topic, tp.partition)] = exc
        return out
    finally:
        admin.close()


def first_offset_read(server, topic, start, reset="earliest", partition=0):
    """The first offset a consumer assigned at ``start`` gets (or the error)."""
    c = Consumer(server.config(**{"auto.offset.reset": reset}))
    try:
        c.assign([TopicPartition(topic, partition, start)])
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for m in c.consume(10, 0.2):
                if m.error() is None:
                    return m.offset()
        raise AssertionError("nothing read")
    except errors.OffsetOutOfRangeError as exc:
        return exc
    finally:
        c.close()


def log_start_on_disk(data_dir, broker, topic, partition=0) -> int:
    """The log start offset in a replica's partition.checkpoint (read, not
    through PartitionCheckpoint.read, which tidies the directory)."""
    path = os.path.join(data_dir, f"broker-{broker}", f"{topic}-{partition}",
                        "partition.checkpoint")
    try:
        with open(path) as f:
            lines = dict(line.split() for line in f.read().splitlines()[1:] if line.strip())
    except FileNotFoundError:
        return -1
    return int(lines["log-start-offset"])


# ---- one node ------------------------------------------------------------------------------

def test_native_admin_moves_the_log_start_and_refuses_what_kafka_refuses(server, topic_name):
    create(server, topic_name, 2)
    create(server, topic_name + "-compacted", 1, **{"cleanup.policy": "compact"})
    acked, failed = produce(server, topic_name, [b"v%d" % i for i in range(40)])
    assert len(acked) == 40 and not failed                  # 20 per partition
    got = delete(server, TopicPartition(topic_name, 0, 7), TopicPartition(topic_name, 1, -1))
    assert got == {(topic_name, 0): 7, (topic_name, 1): 20}
    assert earliest(server, topic_name, 0) == 7 and earliest(server, topic_name, 1) == 20
    assert isinstance(first_offset_read(server, topic_name, 3, "error"), errors.OffsetOutOfRangeError)
    assert first_offset_read(server, topic_name, 3, "earliest") == 7
    assert first_offset_read(server, topic_name, 9, "error") == 9
    # below the log start: nothing moves, the answer is the log start
    assert delete(server, TopicPartition(topic_name, 0, 2)) == {(topic_name, 0): 7}
    got = delete(server, TopicPartition(topic_name, 0, 21), TopicPartition(topic_name, 5, 1),
                 TopicPartition(topic_name + "-none", 0, 1),
                 TopicPartition("__consumer_offsets", 0, 1),
                 TopicPartition(topic_name + "-compacted", 0, 0))
    assert {k: type(v) for k, v in got.items()} == {
        (topic_name, 0): errors.OffsetOutOfRangeError,
        (topic_name, 5): errors.UnknownTopicOrPartitionError,
        (topic_name + "-none", 0): errors.UnknownTopicOrPartitionError,
        ("__consumer_offsets", 0): errors.InvalidTopicError,
        (topic_name + "-compacted", 0): errors.PolicyViolationError}
    assert earliest(server, topic_name, 0) == 7
    admin = AdminClient(server.config())
    try:
        for bad in ([TopicPartition(topic_name, 0, -2)],
                    [TopicPartition(topic_name, 0, 1), TopicPartition(topic_name, 0, 2)],
                    [(topic_name, 0, 1)]):
            with pytest.raises((ValueError, TypeError)):
                admin.delete_records(bad)
    finally:
        admin.close()


def test_the_log_start_survives_a_kill_and_a_restart_and_its_segments_go(own_server, topic_name):
    s = own_server
    create(s, topic_name, 1, **{"segment.bytes": "2048"})
    for _ in range(12):                     # a batch of ~1 KB each: two per segment
        acked, failed = produce(s, topic_name, [b"x" * 200 for _ in range(5)], partition=0)
        assert len(acked) == 5 and not failed
    (leader, _, _), = state(s, topic_name).values()
    directory = os.path.join(s.data_dir, f"{topic_name}-0")     # one replica: no broker-N/
    before = sorted(glob.glob(os.path.join(directory, "*.log")))
    assert len(before) > 4
    # mid-segment, so the log start is not a segment's base offset
    bases = sorted(int(os.path.basename(p)[:-4]) for p in before)
    cut = next(b for b in bases if b > 20) + 1
    assert delete(s, TopicPartition(topic_name, 0, cut)) == {(topic_name, 0): cut}
    left = sorted(int(os.path.basename(p)[:-4]) for p in glob.glob(os.path.join(directory, "*.log")))
    assert left[0] == cut - 1 and len(left) < len(bases)     # the segments below went at once
    # kill -9 at once: no periodic checkpoint write can have happened
    pid = s.worker_pid(leader)
    os.kill(pid, signal.SIGKILL)
    s.wait_for_worker_restart(leader, pid)
    wait_for(lambda: state(s, topic_name)[0][0] >= 0, what="the partition led again")
    assert wait_for(lambda: _earliest_or_none(s, topic_name), what="ListOffsets") == cut
    assert isinstance(first_offset_read(s, topic_name, cut - 1, "error"),
                      errors.OffsetOutOfRangeError)
    s.stop()
    s.start()
    assert earliest(s, topic_name) == cut
    assert first_offset_read(s, topic_name, 0, "earliest") == cut


def _earliest_or_none(server, topic):
    try:
        return earliest(server, topic)
    except errors.KafkaError:
        return None


# ---- replication ---------------------------------------------------------------------------

@pytest.fixture
def three_workers(tmp_path):
    """A 3-worker server whose followers stay in the ISR while stopped
    (replica.lag.time.max.ms 60 s), so a DeleteRecords has to wait for them."""
    s = ServerProcess(str(tmp_path / "data"), workers=3,
                      extra_args=["--replica-lag-time-max-ms", "60000",
                                  "--broker-session-timeout-ms", "60000"]).start()
    yield s
    for pid in s.worker_pids():
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    if s.proc.poll() is None:
        s.stop()
    s.kill()


def test_followers_move_their_log_start_and_a_new_leader_serves_from_it(three_workers):
    s = three_workers
    topic = "replicated"
    create_replicated(s, topic, assignments=[[0, 1, 2]])
    wait_for(lambda: state(s, topic)[0][2] == [0, 1, 2], what="all replicas in sync")
    acked, failed = produce(s, topic, [b"r%d" % i for i in range(30)], partition=0)
    assert len(acked) == 30 and not failed
    assert delete(s, TopicPartition(topic, 0, 12)) == {(topic, 0): 12}
    # answered once every in-sync follower had it: on disk on all three
    assert [log_start_on_disk(s.data_dir, b, topic) for b in (0, 1, 2)] == [12, 12, 12]

    # a follower that cannot fetch holds the answer until timeout_ms:
    # REQUEST_TIMED_OUT, though the leader's log start moved
    leader = state(s, topic)[0][0]
    follower = next(b for b in (0, 1, 2) if b != leader)
    pid = s.worker_pid(follower)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        got = delete(s, TopicPartition(topic, 0, 20), operation_timeout=1.0)[(topic, 0)]
        assert isinstance(got, errors.RequestTimedOutError), got
        assert time.monotonic() - started >= 0.9
        assert earliest(s, topic) == 20
        assert log_start_on_disk(s.data_dir, follower, topic) == 12
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_for(lambda: log_start_on_disk(s.data_dir, follower, topic) == 20,
             what="the resumed follower's log start")
    assert delete(s, TopicPartition(topic, 0, 20)) == {(topic, 0): 20}

    # the leader dies: the new one (a former follower) serves from 20
    pid = s.worker_pid(leader)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: state(s, topic)[0][0] not in (leader, -1), what="a new leader")
    assert wait_for(lambda: _earliest_or_none(s, topic), what="ListOffsets") == 20
    assert isinstance(first_offset_read(s, topic, 15, "error"), errors.OffsetOutOfRangeError)
    assert first_offset_read(s, topic, 0, "earliest") == 20
    s.wait_for_worker_restart(leader, pid)
    acked, failed = produce(s, topic, [b"after"], partition=0)
    assert [a[1] for a in acked] == [30] and not failed
