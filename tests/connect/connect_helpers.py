"""Helpers of the Connect tests: a standalone worker with its REST API on a
free port, and waits bounded for a loaded machine."""
from __future__ import annotations

import time

import requests

from kafkalite.connect import Herder, Worker
from kafkalite.connect.offsets import FileOffsetStore
from kafkalite.connect.rest import RestServer


class Connect:
    """A worker, its herder and REST server; ``url`` is the REST root."""

    def __init__(self, server, offsets=None, offset_file=None, **worker_config):
        cfg = {**server.config(), "offset.flush.interval.ms": 300, **worker_config}
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


def wait_for(cond, timeout=60.0, what="condition"):
    """Polls ``cond`` until it returns a true value (returned), at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            what = what() if callable(what) else what
            raise AssertionError(f"timed out waiting for {what}; last: {got!r}")
        time.sleep(0.1)


def lines_of(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []
