"""The driver contract: how the harness talks to one system under test.

A driver has two halves that run in different processes:

* the **parent** half (an instance): ``unavailable()`` says why it cannot
  run here (None if it can); ``setup(workload, topics, work_dir)`` starts
  whatever server it needs on free loopback ports inside ``work_dir``,
  creates the topics, and returns an *endpoint*: a picklable dict that is
  all the children need; ``teardown()`` stops and removes everything
  setup made, and must work after a partial setup, an error or Ctrl-C.
* the **child** half (two class methods): ``producer(endpoint, workload)``
  and ``consumer(endpoint, workload, assignment)`` make the clients used
  by kafkalite.bench.runner in its producer and consumer processes.

A ProducerClient's ``send`` gets a batch of same-size values for one
partition as one contiguous block (see recorder.Payloads) and calls
``on_ack()`` once the driver's system has the batch (its own notion of
acknowledged: a broker's ack, a pipeline reply, a write() returning);
``poll`` serves pending acknowledgements. ``on_ack`` also takes a client's
delivery-callback arguments ``(err, report)`` and raises when ``err`` is
not None, so a driver may hand it to its client as is (a wrapper made per
send is an object per send for the collector: runner.py, acks.py). A ConsumerClient's ``receive``
returns the intended send times (the first 8 bytes) of what arrived and
its byte count. Drivers never see latencies or rates: the runner measures.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time

import numpy as np


class ProducerClient:
    def send(self, topic: str, partition: int, block: bytes, count: int,
             keys: list[bytes] | None, on_ack) -> None:
        raise NotImplementedError

    def poll(self, timeout: float) -> None:
        """Serve acknowledgements; wait up to ``timeout`` s for one if none is pending."""

    def flush(self, timeout: float) -> None:
        """Wait (up to ``timeout`` s) until every batch sent is acknowledged."""

    def close(self) -> None:
        pass


class ConsumerClient:
    def receive(self, timeout: float) -> tuple[np.ndarray, int]:
        """(stamps of the messages that arrived, their bytes); waits up to
        ``timeout`` s for the first."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class Driver:
    name = ""            # what --drivers and the report call it
    label = ""           # one line for the report: what is measured
    kind = "peer"        # "kafkalite", "peer" or "ceiling"
    fan_out = True       # can several subscriptions each get every message?
    holds_backlog = True  # are messages kept for consumers that start later?

    def unavailable(self) -> str | None:
        return None

    def setup(self, workload, topics: list[str], work_dir: str) -> dict:
        raise NotImplementedError

    def teardown(self) -> None:
        pass

    def server_pids(self) -> list[int]:
        """The processes of the system under test, once set up: the run
        counts their CPU time and that of all their descendants (none for a
        driver with no server of its own: a ceiling)."""
        return []

    def server_requests(self) -> int | None:
        """Requests the system under test has answered so far, where it
        counts them (None: it does not)."""
        return None

    @classmethod
    def producer(cls, endpoint: dict, workload) -> ProducerClient:
        raise NotImplementedError

    @classmethod
    def consumer(cls, endpoint: dict, workload, assignment: list[tuple[str, int]]) -> ConsumerClient:
        raise NotImplementedError


# ---- helpers for drivers that run a server ----------------------------------------------

def free_ports(n: int) -> list[int]:
    """``n`` distinct loopback TCP ports nobody listens on now (the servers
    bind them a moment later). All are held open until all are picked, so
    the kernel cannot hand out one twice."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def free_port() -> int:
    return free_ports(1)[0]


def find_binary(name: str, *extra_dirs: str) -> str | None:
    """``name`` on PATH or in one of ``extra_dirs`` (Debian puts nats-server in /usr/sbin)."""
    found = shutil.which(name)
    if found:
        return found
    for d in extra_dirs:
        path = os.path.join(d, name)
        if os.access(path, os.X_OK):
            return path
    return None


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    """Until ``port`` accepts connections; RuntimeError if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on port {port} in {timeout:.0f} s")
            time.sleep(0.05)


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    """SIGTERM, wait, then SIGKILL: a server we started never outlives the run."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class PeerServerDriver(Driver):
    """A driver whose peer is a server process the harness starts (Redis,
    NATS): ``start_server`` launches it with its output in the work dir and
    waits for its port; ``teardown`` stops it."""

    def __init__(self):
        self.proc = None
        self._log = None

    def start_server(self, argv: list, port: int, work_dir: str, what: str) -> None:
        self._log = open(os.path.join(work_dir, f"{what}.log"), "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for_port(port, self.proc, 20, what)

    def server_pids(self):
        return [self.proc.pid] if self.proc is not None else []

    def teardown(self):
        stop_process(self.proc)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

