"""A supervisor killed -9 while it restarts a worker, before the new
worker process took its lock (``<data dir>/.workers/<index>.lock``): the
next supervisor finds the lock free and starts a worker of that index of
its own, so two processes of one index race for one lock (issue 68,
item 1). Whichever takes it, the next supervisor must come up with one
process per index and leave none behind.

The moment is made deterministic by processes.FAULT_ENV: a worker of an
index the test names stops just before it takes its lock, until the test
lets it go, so the test decides which of the two processes gets there
first.

Servers of the tests' own: they kill them."""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from harness import ServerProcess, create, pid_alive, read_all, stop_server, wait_until
from kafkalite.client import Producer
from kafkalite.server.node.processes import FAULT_ENV, LOCK_HOLD_FAULT, WORKER_LOCKS

# How long the next supervisor may take to be ready once both processes of
# the index are let go (an unloaded start takes 2-4 s)
READY_S = 30.0


def produce(srv: ServerProcess, values) -> None:
    p = Producer(srv.config(acks="all", **{"enable.idempotence": True}))
    for i, v in enumerate(values):
        p.produce("t", v, partition=i % 2)
    assert p.flush(30) == 0
    p.close()


def workers_of(data_dir: str) -> dict[int, list[int]]:
    """{index: pids} of the live worker processes on ``data_dir``, whoever
    started them (a process blocked on its lock counts)."""
    found: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or not pid_alive(int(pid)):
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if "kafkalite.server.node.worker" in argv and any(data_dir in a for a in argv):
            found.setdefault(int(argv[argv.index("--index") + 1]), []).append(int(pid))
    return {i: sorted(pids) for i, pids in sorted(found.items())}


def lock_holder(data_dir: str, index: int) -> int:
    """The pid a worker's lock file names (written once it holds the lock)."""
    try:
        with open(os.path.join(data_dir, WORKER_LOCKS, f"{index}.lock")) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class Starting(threading.Thread):
    """A ServerProcess's start (which returns once the server is ready),
    while the test lets its held workers go."""

    def __init__(self, srv: ServerProcess):
        super().__init__(daemon=True)
        self.srv = srv
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.srv.start(timeout=READY_S + 30)
        except BaseException as exc:        # reported by ready()
            self.error = exc

    def ready(self, since: float) -> float:
        """Seconds from ``since`` to the server's being ready."""
        self.join(max(0.0, since + READY_S - time.monotonic()))
        log = self.srv.output()[-3000:]
        assert not self.is_alive() and self.error is None, \
            f"the next supervisor did not become ready in {READY_S:.0f} s " \
            f"({self.error or 'still starting'}); its log ends:\n{log}"
        return time.monotonic() - since


class RestartKill:
    """A server whose supervisor was killed -9 while it restarted worker 0,
    the new process held before its lock (``restarted``), and a new
    supervisor starting, its own worker 0 held there too (``spawned``)."""

    def __init__(self, tmp_path, monkeypatch):
        self.data = str(tmp_path / "data")
        self.hold = tmp_path / "hold"
        self.hold.mkdir()
        monkeypatch.setenv(FAULT_ENV, f"{LOCK_HOLD_FAULT}{self.hold}")
        self.old = ServerProcess(self.data, workers=2, log_path=str(tmp_path / "old.log"))
        self.new = ServerProcess(self.data, workers=2, log_path=str(tmp_path / "new.log"))
        self.starting: Starting | None = None

    def held(self, known=()) -> list[int]:
        return [int(n.rsplit("-", 1)[1]) for n in os.listdir(self.hold)
                if n.startswith("held-0-") and int(n.rsplit("-", 1)[1]) not in known]

    def let_go(self, pid: int) -> None:
        (self.hold / f"go-{pid}").touch()

    def set_up(self) -> None:
        self.old.start()
        create(self.old, "t", 2)
        produce(self.old, [b"before-%d" % i for i in range(200)])
        first, self.other = self.old.worker_pids()
        (self.hold / "hold-0").touch()
        os.kill(first, signal.SIGKILL)
        self.restarted = wait_until(self.held, 30, "the supervisor's restart of worker 0")[0]
        self.old.kill()
        assert pid_alive(self.restarted) and pid_alive(self.other)
        self.starting = Starting(self.new)
        self.starting.start()
        self.spawned = wait_until(lambda: self.held([self.restarted]), 30,
                                  "the next supervisor's worker 0")[0]

    def check_served(self, serving: int) -> None:
        """One process per index, ``serving`` for 0 and the adopted one
        for 1, and every acknowledged record there."""
        wait_until(lambda: workers_of(self.data) == {0: [serving], 1: [self.other]}, 10,
                   lambda: f"one process per index, {serving} and {self.other}: "
                           f"{workers_of(self.data)}")
        assert self.new.worker_pids() == [serving, self.other]
        produce(self.new, [b"after-%d" % i for i in range(200)])
        values = sorted(m.value() for m in read_all(self.new, "t", 2, 400))
        assert values == sorted([b"before-%d" % i for i in range(200)]
                                + [b"after-%d" % i for i in range(200)])

    def clean_up(self) -> None:
        if self.starting is not None and self.starting.is_alive():
            self.new.kill()         # a start that never ends: its start() gives up now
            self.starting.join(30)
        try:
            stop_server(self.new)
        finally:
            self.old.kill()
            for pids in workers_of(self.data).values():     # what a failed run left
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.processes
def test_the_dead_supervisors_worker_reaches_the_lock_first_and_gives_way(tmp_path,
                                                                         monkeypatch):
    """The killed supervisor's new worker reaches the free lock first, then
    the next supervisor's own: the first, its supervisor gone, lets go of
    the lock and exits, and the next supervisor's worker takes it. Before,
    the first kept the lock, the other waited for it for ever (a blocking
    flock), the first's hello was ignored ("pid Y runs it") and the node
    never became ready."""
    kills = RestartKill(tmp_path, monkeypatch)
    try:
        kills.set_up()
        kills.let_go(kills.restarted)
        wait_until(lambda: lock_holder(kills.data, 0) == kills.restarted
                   or not pid_alive(kills.restarted), 10,
                   "the dead supervisor's worker 0 to reach its lock")
        kills.let_go(kills.spawned)
        took = kills.starting.ready(time.monotonic())
        print(f"next supervisor ready {took:.2f} s after its worker 0 was let go")
        wait_until(lambda: not pid_alive(kills.restarted), 10,
                   "the dead supervisor's worker 0 to exit")
        assert "died before it took its lock" in kills.old.output()
        kills.check_served(kills.spawned)
        assert "ignored a hello" not in kills.new.output()
    finally:
        kills.clean_up()


@pytest.mark.processes
def test_the_next_supervisors_worker_reaches_the_lock_first_and_the_other_exits(tmp_path,
                                                                                monkeypatch):
    """The mirror image: the next supervisor's worker takes the lock first.
    The killed supervisor's new worker, its supervisor gone and the lock
    another's, exits instead of waiting for the lock for ever as an
    orphan nobody knows of."""
    kills = RestartKill(tmp_path, monkeypatch)
    try:
        kills.set_up()
        kills.let_go(kills.spawned)
        wait_until(lambda: lock_holder(kills.data, 0) == kills.spawned, 10,
                   "the next supervisor's worker 0 to take its lock")
        kills.let_go(kills.restarted)
        took = kills.starting.ready(time.monotonic())
        print(f"next supervisor ready {took:.2f} s after the dead one's worker 0 was let go")
        wait_until(lambda: not pid_alive(kills.restarted), 10,
                   "the dead supervisor's worker 0, waiting for the lock, to exit")
        assert "died before it took its lock" in kills.old.output()
        kills.check_served(kills.spawned)
    finally:
        kills.clean_up()
