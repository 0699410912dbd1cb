"""Exactly-once under kill -9 of the server's partition workers (the issue's
test): a Streams application (streams_counter_app.py, its own process,
exactly_once_v2) counts per key and copies every record while a feeder
writes input, and partition worker processes of the server are killed with
SIGKILL at random moments (the supervisor restarts them),
``KAFKALITE_STREAMS_WORKER_KILLS`` times (tests/soak.py: 2 by default, 20
under tools/soak, the issue's soak).

The model is the input topic as it ended up (the feeder's records that were
written, whatever the kills did to the feeder). The checker
(test_streams_exactly_once.check): the copy, read read_committed, holds every
input record exactly once, and each key's counts rise by strictly increasing
values to the model's count. It is shown to fail first on planted faults
over the same output: a dropped record, a lowered count, and the
read_uncommitted view when the kills left aborted transactions in the log.
"""
from __future__ import annotations

import os
import random
import signal
import threading
import time

import pytest

from harness import ServerProcess, wait_until
from test_streams_exactly_once import (KEYS, check, create_topics, log_end, outputs,
                                       read_to_end, start_app, stop_app, wait_caught_up)
from test_streams_scale_out import planted_faults_caught

from kafkalite.client import Producer
from soak import setting

KILLS = setting("KAFKALITE_STREAMS_WORKER_KILLS")
SEED = int(os.environ.get("KAFKALITE_STREAMS_SEED", "11"))


class Feeder(threading.Thread):
    """Writes records of KEYS keys, 50 every 20 ms, until stopped; a record
    whose delivery failed under a kill is simply not in the input (the
    model is read back from the topic)."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.stop_ = threading.Event()
        self.rnd = random.Random(SEED)

    def run(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 2,
                      "request.timeout.ms": 10_000})
        i = 0
        try:
            while not self.stop_.is_set():
                keys = [f"k{self.rnd.randrange(KEYS)}".encode() for _ in range(50)]
                p.produce_batch(self.topic, [b"%d" % (i + j) for j in range(50)], keys)
                i += 50
                p.poll(0)
                time.sleep(0.02)    # input keeps arriving: a stream, not a backlog
            p.flush(60)
        finally:
            p.close(5)


def kill_a_worker(srv, index: int) -> None:
    """SIGKILL worker ``index`` and wait until the supervisor restarted it."""
    pid = srv.worker_pid(index)
    os.kill(pid, signal.SIGKILL)
    srv.wait_for_worker_restart(index, pid, 30)


@pytest.mark.processes
@pytest.mark.slow
def test_exactly_once_v2_through_kills_of_partition_workers(tmp_path):
    rnd = random.Random(SEED)
    srv = ServerProcess(str(tmp_path / "data")).start()
    topic, app_id = "wk-in", "wk-app"
    died = []           # stderr tails of application processes that stopped
    app = feeder = None

    def running():
        nonlocal app
        if app is None or app.poll() is not None:
            if app is not None:
                died.append(app.stderr.read()[-1500:])
                stop_app(app, kill=True)
            app = start_app(srv, app_id, topic, tmp_path / f"state-{len(died)}",
                            "exactly_once_v2")
        return app

    try:
        create_topics(srv, topic)
        feeder = Feeder(srv.bootstrap, topic)
        feeder.start()
        running()
        wait_until(lambda: log_end(srv, f"{topic}-copy") > 0, 30,
                   "the application to write output", interval=0.1)
        for _ in range(KILLS):
            time.sleep(rnd.uniform(0.5, 2.0))      # a random moment of the run
            kill_a_worker(srv, rnd.randrange(srv.workers))
            running()
        # input goes on after the last kill before it stops
        written = log_end(srv, topic)
        wait_until(lambda: log_end(srv, topic) >= written + 500, 60,
                   "input written after the last kill", interval=0.1)
        feeder.stop_.set()
        feeder.join(90)
        assert not feeder.is_alive(), "the feeder did not finish"
        deadline = time.monotonic() + 90
        while True:
            running()
            try:
                wait_caught_up(srv, app_id, topic, timeout=3)
                break
            except AssertionError:
                assert time.monotonic() < deadline, f"the application did not catch up; {died}"
        stop_app(app, kill=False)
        app = None
        inputs = [(k, v) for _, k, v in read_to_end(srv, topic, "read_uncommitted")]
        views = outputs(srv, topic)
    finally:
        if feeder is not None:
            feeder.stop_.set()
        if app is not None:
            stop_app(app, kill=True)
        srv.stop()
    assert len(inputs) > 500
    copy, counts = views["read_committed"]
    planted_faults_caught(inputs, copy, counts)
    assert check(inputs, copy, counts) == [], f"after {KILLS} worker kills, {len(died)} restarts"
    assert not died, f"the application stopped {len(died)} times under worker kills: {died}"
