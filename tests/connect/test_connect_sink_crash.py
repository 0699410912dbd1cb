"""A file sink's duplicates after kill -9 of its worker (issue 68, item 8):
at-least-once, as Kafka's sinks, and bounded by what the sink had committed.

A sink task writes what it is handed, and its consumer group's offset is
committed only after the task's ``flush`` (every ``offset.flush.interval.ms``,
10 s by default). A worker killed between two commits is restarted from the
last committed offset C; what it wrote after C (up to L, the file's length
at the kill) is written again. So the duplicates are exactly the lines
C .. L-1, never more, and nothing is missing or out of order: the file is
records 0 .. L-1 and then C .. N-1. ``sink_file_problems`` checks that, and
is shown to catch a lost line, a replay from before C and a swap.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest
from harness import child_env, create, free_port, wait_until

from kafkalite.client import Producer

pytestmark = pytest.mark.processes


def sink_file_problems(lines: list[str], n: int, committed: int, at_kill: int) -> list[str]:
    """What is wrong with a sink's file of records ``0 .. n-1`` (each line
    its record's number) written by a worker killed when its group had
    committed ``committed`` and the file had ``at_kill`` lines: anything
    but the lines 0 .. at_kill-1 and then committed .. n-1."""
    if committed > at_kill:
        return [f"the group committed {committed} with only {at_kill} lines in the file: "
                f"records committed before they were written"]
    want = [str(i) for i in range(at_kill)] + [str(i) for i in range(committed, n)]
    if lines == want:
        return []
    problems = []
    missing = sorted(set(want) - set(lines), key=int)
    if missing:
        problems.append(f"{len(missing)} records missing, first {missing[:5]}")
    counts: dict[str, int] = {}
    for line in lines:
        counts[line] = counts.get(line, 0) + 1
    extra = [v for v, c in counts.items() if c > want.count(v)]
    if extra:
        problems.append(f"{len(extra)} records more often than the replay from the committed "
                        f"offset {committed} explains, first {sorted(extra, key=int)[:5]}")
    if not problems:
        first = next(i for i, (a, b) in enumerate(zip(lines, want)) if a != b)
        problems.append(f"out of order at line {first}: {lines[first]} where {want[first]} "
                        f"was due")
    return problems


def test_the_checker_catches_a_lost_line_a_replay_from_before_the_commit_and_a_swap():
    good = [str(i) for i in range(60)] + [str(i) for i in range(40, 100)]
    assert sink_file_problems(good, 100, 40, 60) == []
    lost = good[:10] + good[11:]
    assert sink_file_problems(lost, 100, 40, 60)[0].startswith("1 records missing")
    replay = [str(i) for i in range(60)] + [str(i) for i in range(35, 100)]
    assert "more often than the replay" in sink_file_problems(replay, 100, 40, 60)[0]
    swapped = list(good)
    swapped[70], swapped[71] = swapped[71], swapped[70]
    assert sink_file_problems(swapped, 100, 40, 60)[0].startswith("out of order")
    assert "committed before they were written" in sink_file_problems(good, 100, 61, 60)[0]


class StandaloneSink:
    """``kafkalite connect standalone`` running one FileStreamSink into
    ``out`` in its own process, to be killed and started again."""

    def __init__(self, server, tmp_path, topic: str, flush_ms: int):
        self.port = free_port()
        self.out = tmp_path / "out.txt"
        (tmp_path / "worker.properties").write_text(
            f"bootstrap.servers={server.bootstrap}\n"
            f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
            f"offset.flush.interval.ms={flush_ms}\n"
            f"listeners=http://127.0.0.1:{self.port}\n"
            "value.converter=org.apache.kafka.connect.storage.StringConverter\n"
            # the killed worker's consumer leaves the group by its session's end:
            # 6 s, not 45, for the restarted one to be handed the partition
            "consumer.session.timeout.ms=6000\nconsumer.heartbeat.interval.ms=1000\n"
            f"kafkalite.file.allowed.paths={tmp_path}\n")
        (tmp_path / "sink.properties").write_text(
            f"name=sink-{topic}\nconnector.class=FileStreamSink\ntopics={topic}\n"
            f"file={self.out}\n")
        self.args = [sys.executable, "-m", "kafkalite", "connect", "standalone",
                     str(tmp_path / "worker.properties"), str(tmp_path / "sink.properties")]
        self.log = open(tmp_path / "worker.log", "ab")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, env=child_env(), stdout=self.log,
                                     stderr=subprocess.STDOUT)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def lines(self) -> list[str]:
        try:
            return self.out.read_text().splitlines()
        except FileNotFoundError:
            return []

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()


def committed_offset(server, group: str, topic: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    fut = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])
    return max(fut[group].result(timeout=30).topic_partitions[0].offset, 0)


def test_a_file_sink_killed_between_commits_repeats_only_what_followed_its_commit(
        server, tmp_path, topic_name):
    """The worker is killed while records stream in, with lines written
    past its last commit; restarted, the file holds every record, in order,
    the duplicates exactly the lines after the committed offset."""
    n, rate = 15_000, 3_000
    create(server, topic_name)
    sink = StandaloneSink(server, tmp_path, topic_name, flush_ms=2000)
    group = f"connect-sink-{topic_name}"

    def produce():
        p = Producer(server.config())
        try:
            for i in range(100):
                p.produce(topic_name, value=str(i).encode())
            p.flush(30)
            # the rest paced from when the task runs, so that the kill falls mid-stream
            # however long the worker took to start
            wait_until(lambda: sink.lines(), timeout=60, message="the sink's first lines")
            started = time.monotonic()
            for i in range(100, n):
                p.produce(topic_name, value=str(i).encode())
                if i % 300 == 299:
                    time.sleep(max(0.0, started + (i - 99) / rate - time.monotonic()))
            assert p.flush(60) == 0
        finally:
            p.close()
    writer = threading.Thread(target=produce, daemon=True)
    try:
        sink.start()
        writer.start()
        # at least one commit, and lines written since it: the window a kill replays
        wait_until(lambda: committed_offset(server, group, topic_name) > 0 and
                   len(sink.lines()) > committed_offset(server, group, topic_name) + 500,
                   timeout=60, message="a commit, and lines past it")
        sink.kill9()
        at_kill = len(sink.lines())
        committed = committed_offset(server, group, topic_name)
        assert at_kill > committed, (at_kill, committed)
        writer.join(60)
        sink.start()
        wait_until(lambda: len(sink.lines()) >= at_kill + n - committed, timeout=120,
                   message=lambda: f"the rest after the restart: {len(sink.lines())} lines of "
                                   f"{at_kill + n - committed}")
        # the worker commits again; nothing more may come
        wait_until(lambda: committed_offset(server, group, topic_name) == n, timeout=30,
                   message="the last commit")
        lines = sink.lines()
        assert sink_file_problems(lines, n, committed, at_kill) == []
        print(f"killed with {at_kill} lines written and {committed} committed: "
              f"{at_kill - committed} duplicates of {n} records")
    finally:
        sink.stop()
