"""Many partitions cost what changes, not how many there are (issue 12, finding 2).

Behaviour, not timing (benchmarks/bench_many_partitions.py has the figures):

- creating a topic appends it to ``cluster-metadata.log`` and leaves the
  snapshot ``cluster-metadata.json`` as it was (the old code rewrote the
  whole file, every topic, for every topic created: quadratic), and every
  topic is back after a kill -9 of the whole server;
- a worker keeps its partitions' checkpoints in one file
  (``broker-<id>.partition-checkpoints``), not one file per partition: the
  changed partitions' lines are written there, and an idle worker hosting
  hundreds of partitions writes nothing at all;
- after a kill -9 and a restart every acknowledged record is readable, with
  the high watermark where the broker file had it.
"""
from __future__ import annotations

import glob
import os
import signal
import time

import pytest

from harness import wait_until
from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer
from kafkalite.client import TopicPartition
from kafkalite.storage.checkpoint import PartitionCheckpoint

TOPICS = 60
PARTITIONS = 4
CHECKPOINT_INTERVAL_S = 5.0     # kafkalite/server/node/worker.py's, not configurable


@pytest.fixture
def srv(own_server):
    return own_server


def create(server, names, partitions=PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for f in admin.create_topics([NewTopic(n, partitions) for n in names]).values():
            f.result()
    finally:
        admin.close()


def topics(server) -> set:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        return set(admin.list_topics().topics)
    finally:
        admin.close()


def kill_all(server) -> None:
    pids = server.worker_pids()
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    server.stop()


def test_creating_a_topic_appends_to_the_metadata_log_not_rewrite_the_snapshot(srv):
    create(srv, [f"t{i}" for i in range(TOPICS)])
    snapshot = os.path.join(srv.data_dir, "cluster-metadata.json")
    changes = os.path.join(srv.data_dir, "cluster-metadata.log")
    before = os.stat(snapshot)
    size = os.path.getsize(changes)
    create(srv, ["one-more"])
    after = os.stat(snapshot)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (
        before.st_ino, before.st_mtime_ns, before.st_size)
    grown = os.path.getsize(changes) - size
    assert 0 < grown < 2000            # one topic's line, not the cluster's
    kill_all(srv)
    srv.start()
    assert {f"t{i}" for i in range(TOPICS)} | {"one-more"} <= topics(srv)
    assert srv.stop() == 0


def mtimes(data_dir: str) -> dict:
    """Modification times of every checkpoint file the workers write."""
    paths = glob.glob(os.path.join(data_dir, "*", "partition.checkpoint")) + glob.glob(
        os.path.join(data_dir, "broker-*.partition-checkpoints"))
    return {p: os.stat(p).st_mtime_ns for p in paths if "__consumer_offsets" not in p}


def broker_lines(data_dir: str) -> dict:
    """{partition directory: (high watermark, recovery point)} from the broker files."""
    out = {}
    for path in glob.glob(os.path.join(data_dir, "broker-*.partition-checkpoints")):
        with open(path) as f:
            for line in f.read().splitlines()[1:]:
                name, _, _, _, recovery, hw, _ = line.split()
                out[name] = (int(hw), int(recovery))
    return out


def test_idle_partitions_write_nothing_and_changed_ones_survive_kill_9(srv):
    create(srv, [f"idle{i}" for i in range(TOPICS)])
    create(srv, ["busy"], partitions=2)
    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "linger.ms": 5})
    try:
        for i in range(500):
            p.produce("busy", b"v%d" % i, partition=i % 2)
        assert p.flush(20) == 0
    finally:
        p.close()
    # each worker's next checkpoint (within an interval) writes its file
    lines = wait_until(lambda: (lambda got: got if len(got) == TOPICS * PARTITIONS + 2 and all(
        got.get(f"busy-{i}", (0,))[0] == 250 for i in (0, 1)) else None)(
        broker_lines(srv.data_dir)), CHECKPOINT_INTERVAL_S + 10,
        lambda: f"both workers' checkpoint files with every partition, busy's at 250 "
                f"({len(broker_lines(srv.data_dir))} lines)", interval=0.2)
    assert [lines[f"busy-{i}"][0] for i in (0, 1)] == [250, 250]
    # the partitions' own files were written when they were created, not since
    for i in (0, 1):
        assert PartitionCheckpoint.read(os.path.join(srv.data_dir, f"busy-{i}")) in (
            None, PartitionCheckpoint())
    written = mtimes(srv.data_dir)
    # idle for more than an interval: each worker's checkpoint ran and
    # rewrote not one file
    time.sleep(CHECKPOINT_INTERVAL_S + 1)
    assert mtimes(srv.data_dir) == written

    kill_all(srv)
    srv.start()
    c = Consumer({"bootstrap.servers": srv.bootstrap})
    try:
        c.assign([TopicPartition("busy", i, OFFSET_BEGINNING) for i in (0, 1)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 500 and time.monotonic() < deadline:
            got += c.consume(1000, 0.5)
        assert sorted(int(m.value()[1:]) for m in got) == list(range(500))
        assert [c.get_watermark_offsets(TopicPartition("busy", i))[1] for i in (0, 1)] == [250, 250]
    finally:
        c.close()
    assert srv.stop() == 0
