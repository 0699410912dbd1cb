"""Helpers of the Connect tests: a standalone worker with its REST API on a
free port, a topic read up to its end, and the lines of a sink's file."""
from __future__ import annotations

import signal
import subprocess
import tempfile
import time

import requests

from kafkalite.connect import Herder, Worker
from kafkalite.connect.offsets import FileOffsetStore
from kafkalite.connect.rest import RestServer


# where the tests' file connectors read and write: pytest's temporary directories
# (kafkalite/connect/file_access.py; a worker lets connectors open no file by default)
FILES = {"kafkalite.file.allowed.paths": tempfile.gettempdir()}


class Connect:
    """A worker, its herder and REST server; ``url`` is the REST root."""

    def __init__(self, server, offsets=None, offset_file=None, **worker_config):
        cfg = {**server.config(), "offset.flush.interval.ms": 300, **FILES, **worker_config}
        self.worker = Worker(cfg, offsets or FileOffsetStore(str(offset_file)))
        self.worker.start()
        self.herder = Herder(self.worker)
        self.rest = RestServer(self.herder, port=0).start()
        self.worker.worker_id = f"127.0.0.1:{self.rest.port}"
        self.url = self.rest.url

    def http(self, method, path, **kw):
        return requests.request(method, self.url + path, timeout=60, **kw)

    def create(self, name, **config):
        r = self.http("POST", "/connectors", json={"name": name, "config": config})
        assert r.status_code == 201, r.text
        return r.json()

    def state(self, name):
        return self.http("GET", f"/connectors/{name}/status").json()

    def close(self):
        self.rest.stop()
        self.herder.stop()
        self.worker.stop()


def read_to_end(server, topic, partitions=1, timeout=30.0, **config):
    """Every record of ``topic``'s first ``partitions`` partitions up to their
    ends as they stand now (the last stable offsets for a read_committed
    ``config``), [Message] by partition and offset: what a read until quiet
    would give, without waiting for the quiet. [] for a topic not created yet."""
    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.errors import UnknownTopicOrPartitionError
    c = Consumer(server.config(**config))
    try:
        try:
            bounds = {p: c.get_watermark_offsets(TopicPartition(topic, p))
                      for p in range(partitions)}
        except UnknownTopicOrPartitionError:
            return []
        todo = {p: end for p, (low, end) in bounds.items() if end > low}
        if not todo:
            return []
        c.assign([TopicPartition(topic, p, bounds[p][0]) for p in todo])
        tps = [TopicPartition(topic, p) for p in todo]
        out, deadline = [], time.monotonic() + timeout
        while any(tp.offset < todo[tp.partition] for tp in c.position(tps)):
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic} not read to its ends {todo} within {timeout} s: "
                                     f"at {c.position(tps)}")
            out += [m for m in c.consume(10_000, 0.2) if not m.error()]
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        c.close()


def lines_of(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


STOP_WAIT_S = 20.0        # a worker stops in 1-2 s; one that has not in 20 s is stuck


def stop_all(workers):
    """SIGTERM to each worker process still running, [(Popen, REST url)],
    then wait for it. One that does not stop within STOP_WAIT_S is asked
    for its threads' stacks (SIGUSR1: faulthandler, into its log), which
    are kept for diagnosis with the test's files, then killed: now and then
    under the full suite's load a distributed worker outlived the old 60 s
    wait, cause unknown (2026-11-27)."""
    for p, _ in workers:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p, _ in workers:
        try:
            p.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGUSR1)
            time.sleep(1.0)     # faulthandler writes the stacks at once
            p.kill()
            p.wait(10)
            print(f"a Connect worker (pid {p.pid}, {p.args}) did not stop in "
                  f"{STOP_WAIT_S:.0f} s: its threads' stacks are in its log")
