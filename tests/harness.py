"""Test harness: a real kafkalite server in its own processes.

The launching itself is kafkalite.server.launcher's ServerProcess; tests add
a client config helper and a stop() that fails when a worker outlived the
server.
"""
import os
import socket
import time

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


_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A loopback port nothing listens on, never one this process was given
    before: binding port 0 and closing can hand the same port to the next
    call (two workers of one test once got the same REST port and one of
    them never started)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _PORTS_GIVEN:
            _PORTS_GIVEN.add(port)
            return port
    raise RuntimeError("no loopback port this process has not used already")


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


def create(server, name, partitions=1, **configs):
    """Create topic ``name`` on ``server`` (a ServerProcess), with topic configs."""
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(name, partitions, config=configs)]).values():
            f.result()
    finally:
        admin.close()


def read_all(server, topic, partitions, expect, timeout=20.0, **config):
    """Consume every partition from the beginning until ``expect`` records
    arrived. A topic that does not exist yet (one a producer elsewhere creates
    on its first record) counts as empty until it appears."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafkalite.errors import UnknownTopicOrPartitionError
    c = Consumer(server.config(**config))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            try:
                out += c.consume(10_000, 0.5)
            except UnknownTopicOrPartitionError:
                time.sleep(0.1)
        return out
    finally:
        c.close()


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory of ``pid`` in MiB (VmRSS of /proc/<pid>/status; VmHWM
    for its peak since start or reset_peak_rss)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no {field} for pid {pid}")


def reset_peak_rss(pid: int) -> None:
    """Start VmHWM of ``pid`` again from its current RSS (proc(5) clear_refs)."""
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


def child_pids(pid: int, marker: str = "") -> list[int]:
    """Children of ``pid`` whose command line contains ``marker``."""
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(kid)
            except OSError:
                pass
    return out


def wait_answers(link, want, timeout=10.0):
    """Poll on what a client link (kafkalite/client/link.py) registered, as
    the producer's sender and the consumer drive it, until ``want`` answers
    came, ``timeout`` passed or the link died; the answers."""
    import zmq
    poller = zmq.Poller()
    link.register(poller)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline and link.alive():
            if link.arm():
                poller.poll(100)
            got += link.receive()
    finally:
        link.unregister(poller)
    return got
