"""Run a kafkalite server in child processes: for tests, benchmarks and tools.

``ServerProcess(data_dir).start()`` runs ``python -m kafkalite server`` on
free loopback ports, waits until every worker is ready (the server writes
``<data_dir>/server.json``), and exposes the endpoints. ``stop()`` sends
SIGTERM, waits, and kills anything that outlived it, recording which pids
had to be killed in ``survivors``. The server's output goes to a file, never
to a pipe nobody drains (a full pipe would block the server).

Who may call: any process; one ServerProcess per server. It imports
nothing of kafkalite but the package root (where it is), so that a client
of the broker (``kafkalite bench``'s drivers, tests, tools) starts a node
without importing the broker; the broker's own processes take ``pid_alive``
from here (server/node/processes.py).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import kafkalite

SERVER_FILE = "server.json"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (an exited, unreaped zombie does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def default_worker_count() -> int:
    """The partition workers a server starts when it is not told a number
    (``workers = 0``): one per two of the cores this process may run on,
    at least one. A kafkalite node shares its host with its clients
    (single-host-first), and each worker is a broker of its own: the more
    workers, the more requests and connections each client needs for the
    same records (a producer's batches to partitions of two workers go as
    two requests, a consumer fetches from each) and the more per-request
    work the node does. On 2 cores, 100 partitions at 20,000 msg/s from
    confluent-kafka's clients, two workers took 0.92-0.97 of a core (47 us
    of server CPU a message) and the clients 51 us a message, one worker
    0.53-0.56 of a core (27-28 us) and the clients 35-37 us
    (docs/performance.md, 2026-11-29). A server that has the host to itself
    sets ``workers`` to its cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def package_env(**extra) -> dict:
    """The environment with this kafkalite importable (even uninstalled)."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(kafkalite.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


class ServerProcess:
    def __init__(self, data_dir: str, workers: int | None = 2, extra_args=(),
                 log_path: str | None = None,
                 program=None, group_initial_rebalance_delay_ms: int | None = 0):
        """``group_initial_rebalance_delay_ms``: 0 unless given, as Kafka's
        test brokers set it, so that a test's group does not wait Kafka's
        3 s for members that will never come; None keeps the server's own."""
        # what runs the `server` subcommand: python -m kafkalite, or a
        # caller's wrapper around the same entry point (tests observe with one)
        self.program = list(program or [sys.executable, "-m", "kafkalite"])
        self.data_dir = data_dir
        self.workers = workers
        self.extra_args = list(extra_args)
        if group_initial_rebalance_delay_ms is not None:
            self.extra_args[:0] = ["--group-initial-rebalance-delay-ms",
                                   str(group_initial_rebalance_delay_ms)]
        self.log_path = log_path or data_dir.rstrip("/") + ".log"
        self.proc: subprocess.Popen | None = None
        self.info: dict | None = None
        self.survivors: list[int] = []
        self._log = None

    @property
    def bootstrap(self) -> str:
        return self.info["bootstrap.servers"]

    @property
    def kafka_bootstrap(self) -> str:
        """host:port of the supervisor's Kafka listener, for Kafka's own clients."""
        return self.info["kafka.bootstrap.servers"]

    def start(self, timeout: float = 60.0) -> "ServerProcess":
        path = os.path.join(self.data_dir, SERVER_FILE)
        os.makedirs(self.data_dir, exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*self.program, "server", "--data-dir", self.data_dir,
             "--port", "0", "--ingest-port", "0", "--worker-base-port", "0",
             "--kafka-port", "0", "--kafka-worker-base-port", "0", "--metrics-port", "0",
             "--schema-registry-port", "0", "--rest-proxy-port", "0", "--iceberg-rest-port", "0",
             # None: the server's own default (default_worker_count)
             *(["--workers", str(self.workers)] if self.workers is not None else []),
             *self.extra_args],
            env=package_env(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: "
                                   f"{self.output()[-2000:]}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"server did not become ready in {timeout:.0f} s")
            time.sleep(0.05)
        self.refresh()
        return self

    def output(self) -> str:
        """Everything the server printed so far."""
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def refresh(self) -> dict:
        """Re-read server.json (a restarted worker has a new pid and maybe port)."""
        with open(os.path.join(self.data_dir, SERVER_FILE)) as f:
            self.info = json.load(f)
        return self.info

    def worker_pids(self) -> list[int]:
        return [w["pid"] for w in self.refresh()["workers"]]

    def worker_pid(self, index: int) -> int:
        return self.worker_pids()[index]

    def wait_for_worker_restart(self, index: int, old_pid: int, timeout: float = 20.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pid = self.worker_pid(index)
            except (OSError, ValueError):
                pid = old_pid
            if pid != old_pid and pid_alive(pid):
                return pid
            time.sleep(0.05)
        raise RuntimeError(f"worker {index} was not restarted within {timeout:.0f} s")

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait; returns the exit code (None if it had to be
        killed). Workers still alive 5 s later are killed and listed in
        ``survivors``; those of a server already dead (killed -9: its
        workers wait for the next one to adopt them) are killed at once."""
        if self.proc is None:
            return None
        try:
            pids = self.worker_pids()
        except (OSError, ValueError, KeyError):
            pids = []
        code = self.proc.poll()
        was_running = code is None
        if code is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                code = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                code = None
        if not was_running:
            # killed before: its workers wait for the next server to adopt
            # them, which is no fault of theirs; they are killed now
            for p in pids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.survivors = [p for p in pids if pid_alive(p)]
        for p in self.survivors:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self._log is not None:
            self._log.close()
            self._log = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
