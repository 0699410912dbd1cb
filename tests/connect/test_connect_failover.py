"""Failover of a Connect cluster after kill -9 of a worker, with the
low-latency settings docs/connect.md shows (Kafka's defaults,
``session.timeout.ms`` 10000 and ``scheduled.rebalance.max.delay.ms``
300000, give a dead worker's tasks five minutes to come back): two
``kafkalite connect distributed`` workers, a file source tailing a file
the test appends to at a steady rate; the worker running the source's
task is killed. Measured and printed: the time from the kill until the
task runs on the survivor, and the lines sent twice. Asserted: the task
runs elsewhere within 3 s, every line arrives, and the lines sent twice
are at most what one ``offset.flush.interval.ms`` reads (the source
resumes at its last committed offset) -- also when the kill comes before
the task's first offset commit (then it re-reads what it had sent, and
nothing before its stored offset)."""
from __future__ import annotations

import signal
import threading
import time

import pytest
import requests
from connect_cluster import free_ports, get, group_name, start_worker, status
from connect_helpers import read_to_end, stop_all
from harness import create, wait_until

SRC = "org.apache.kafka.connect.file.FileStreamSourceConnector"
RATE = 2_000            # lines a second appended to the source's file
FLUSH_MS = 1_000        # offset.flush.interval.ms
# the low-latency setting docs/connect.md shows
LOW_LATENCY = {"session.timeout.ms": 1500, "heartbeat.interval.ms": 250,
               "scheduled.rebalance.max.delay.ms": 0, "offset.flush.interval.ms": FLUSH_MS}


class Appender(threading.Thread):
    """Appends numbered lines to ``path`` at RATE a second until stopped;
    ``written`` counts them, ``at(t)`` says how many were written by
    monotonic time ``t``."""

    def __init__(self, path, first=0):
        super().__init__(daemon=True)
        self.path, self.written = path, first
        self.log: list[tuple[float, int]] = []
        self.done = threading.Event()

    def run(self):
        start = time.monotonic()
        with open(self.path, "a") as f:
            while not self.done.is_set():
                due = int((time.monotonic() - start) * RATE)
                if due > self.written:
                    f.write("".join(f"line-{n}\n" for n in range(self.written, due)))
                    f.flush()
                    self.written = due
                    self.log.append((time.monotonic(), due))
                self.done.wait(0.01)

    def at(self, t: float) -> int:
        return max((n for when, n in self.log if when <= t), default=0)


def task_worker(url, name):
    st = status(url, name)
    if st and st["tasks"] and st["tasks"][0]["state"] == "RUNNING":
        return st["tasks"][0]["worker_id"]
    return None


@pytest.mark.parametrize("kill", ["after-commits", "before-first-commit"])
def test_a_killed_workers_source_runs_elsewhere_within_3_s_resending_one_flush_interval(
        server, tmp_path, topic_name, kill):
    group = group_name("failover")
    ports = free_ports(2)
    workers = [start_worker(server, tmp_path, i, group, port, **LOW_LATENCY)
               for i, port in enumerate(ports)]
    urls = [u for _, u in workers]
    source = tmp_path / "in.txt"
    appender = None
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="2 REST APIs")
        create(server, topic_name)
        if kill == "after-commits":
            source.write_text("")
        else:
            # lines a previous incarnation sent and committed: the offset to resume from
            source.write_text("".join(f"line-{n}\n" for n in range(1000)))
        r = requests.post(urls[0] + "/connectors", timeout=60, json={
            "name": "tail", "config": {"connector.class": SRC, "file": str(source),
                                       "topic": topic_name}})
        assert r.status_code == 201, r.text
        owner = wait_until(lambda: task_worker(urls[0], "tail"), timeout=60,
                           message="the source's task RUNNING")
        if kill == "before-first-commit":
            # the first 1,000 lines committed, then the task restarted: the kill comes
            # before the new incarnation's first commit
            wait_until(lambda: get(urls[0], "/connectors/tail/offsets") == {"offsets": [
                {"partition": {"filename": str(source)},
                 "offset": {"position": source.stat().st_size}}]}, timeout=30,
                message="the first 1,000 lines' offset committed")
            r = requests.post(f"http://{owner}/connectors/tail/tasks/0/restart", timeout=60)
            assert r.status_code in (202, 204), r.text
        appender = Appender(source, 1000 if kill == "before-first-commit" else 0)
        appender.start()
        if kill == "after-commits":
            wait_until(lambda: appender.written >= 3 * RATE, timeout=30,
                       message="3 s of lines appended")
        else:
            # the restarted task has sent lines of its own, not yet committed
            wait_until(lambda: len(read_to_end(server, topic_name)) > 1000 + RATE // 10,
                       timeout=30, message="the restarted task sending")
        victim = next(p for p, u in workers if u == f"http://{owner}")
        survivor = next(u for _, u in workers if u != f"http://{owner}")
        victim.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        victim.wait(30)
        sent_before = appender.at(killed)
        moved = wait_until(lambda: (w := task_worker(survivor, "tail")) and w != owner and w,
                           timeout=60, message="the source's task RUNNING on the survivor")
        took = time.monotonic() - killed
        wait_until(lambda: appender.written >= appender.at(killed + took) + RATE // 2,
                   timeout=30, message="lines appended after the failover")
        appender.done.set()
        appender.join()
        want = [b"line-%d" % n for n in range(appender.written)]
        got = wait_until(lambda: (m := read_to_end(server, topic_name)) and
                         {x.value() for x in m} >= set(want) and m, timeout=60,
                         message="every line in the topic")
        values = [m.value() for m in got]
        resent = len(values) - len(set(values))
        one_interval = appender.at(killed) - appender.at(killed - FLUSH_MS / 1000)
        print(f"\n{kill}: the task ran on {moved} {took:.2f} s after the kill of {owner} "
              f"(session.timeout.ms={LOW_LATENCY['session.timeout.ms']}, "
              f"scheduled.rebalance.max.delay.ms=0); {resent} of {sent_before} lines sent "
              f"twice (one offset.flush.interval.ms={FLUSH_MS} reads {one_interval})")
        assert took <= 3.0, f"the task ran elsewhere {took:.2f} s after the kill"
        # in order, each line once, except those sent after the last commit
        assert sorted(set(values), key=lambda v: int(v[5:])) == want
        # at most one flush interval's lines (plus the commit's own flush and one poll's
        # batch: a commit that starts just before the kill may not have finished)
        assert resent <= one_interval + RATE // 4 + 2000, (resent, one_interval)
        if kill == "before-first-commit":
            # nothing from before the committed offset is read again
            assert values.count(b"line-0") == 1 and values.count(b"line-999") == 1
    finally:
        if appender is not None:
            appender.done.set()
        stop_all(workers)
