"""Test harness: a real kafkalite server in its own processes.

The launching itself is kafkalite.server.launcher's ServerProcess; tests add
a client config helper and a stop() that fails when a worker outlived the
server.
"""
import os

from kafkalite.server import launcher
from kafkalite.server.launcher import package_env as child_env  # noqa: F401 (used by tests)
from kafkalite.server.launcher import pid_alive  # noqa: F401 (used by tests)


class ServerProcess(launcher.ServerProcess):
    def config(self, **extra) -> dict:
        return {"bootstrap.servers": self.bootstrap, **extra}

    def stop(self, timeout: float = 30.0) -> int | None:
        code = super().stop(timeout)
        assert not self.survivors, f"workers {self.survivors} outlived the server"
        return code


def shm_entries() -> set:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("kafkalite")}
    except FileNotFoundError:
        return set()
