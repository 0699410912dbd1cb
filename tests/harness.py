"""Test harness: a real kafkalite server in its own processes.

``ServerProcess`` starts ``python -m kafkalite server`` on free loopback
ports in a temporary data directory, waits until every worker is ready
(``server.json``), and on ``stop()`` sends SIGTERM and checks that every
process of the server exited and nothing of it is left in /dev/shm.
"""
import json
import os
import signal
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child_env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped) does not count
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[1].split()[0] != "Z"
    except OSError:
        return False


class ServerProcess:
    def __init__(self, data_dir: str, workers: int = 2, extra_args=()):
        self.data_dir = data_dir
        self.workers = workers
        self.extra_args = list(extra_args)
        self.proc = None
        self.info = None

    @property
    def bootstrap(self) -> str:
        return self.info["bootstrap.servers"]

    def config(self, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, **extra}

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        path = os.path.join(self.data_dir, "server.json")
        if os.path.exists(path):
            os.unlink(path)
        # Output goes to a file: a pipe nobody drains would block the server.
        os.makedirs(self.data_dir, exist_ok=True)
        self.log_path = self.data_dir.rstrip("/") + ".log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalite", "server", "--data-dir", self.data_dir,
             "--port", "0", "--ingest-port", "0", "--worker-base-port", "0",
             "--workers", str(self.workers), *self.extra_args],
            env=child_env(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.exists(path):
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: "
                                   f"{self.output()[-2000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("server did not become ready")
            time.sleep(0.05)
        self.refresh()
        return self

    def output(self) -> str:
        """Everything the server printed so far."""
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def refresh(self) -> dict:
        with open(os.path.join(self.data_dir, "server.json")) as f:
            self.info = json.load(f)
        return self.info

    def worker_pid(self, index: int) -> int:
        return self.refresh()["workers"][index]["pid"]

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
        raise AssertionError(f"worker {index} was not restarted")

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM; returns the exit code after checking nothing is left."""
        pids = [w["pid"] for w in self.refresh()["workers"]]
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout)
        deadline = time.monotonic() + 5
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(p) for p in pids), "a worker outlived the server"
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def shm_entries() -> set:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("kafkalite")}
    except FileNotFoundError:
        return set()
