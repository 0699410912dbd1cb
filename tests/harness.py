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


def processes_with(marker: str) -> list[str]:
    """Command lines of the live processes whose command line contains ``marker``
    (to check that a test left no server, worker or client process behind)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
                with open(f"/proc/{pid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            if marker in cmd:
                out.append(cmd)
    return out
