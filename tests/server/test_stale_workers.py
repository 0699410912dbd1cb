"""A worker that outlives its supervisor because it could not run when the
supervisor died (SIGSTOPped, or starved), and wakes after a new server
started on the same data directory: it would append to the partitions the
new server's workers opened, and answer its old connections with what it
last knew (issue 47, item 5: 25 acknowledged records missing from a first
read, an OUT_OF_ORDER_SEQUENCE_NUMBER). Each worker holds a lock file in
the data directory for its life. A new server adopts the running workers
of the dead one (tests/server/test_adoption.py); one that does not say
hello within processes.ADOPT_WAIT_S (stopped) is killed and replaced
before the new server is ready.

Servers of the test's own: it kills them."""
from __future__ import annotations

import os
import signal

import pytest

from harness import ServerProcess, create, pid_alive, read_all, stop_server, wait_until
from kafkalite.client import Producer


def produce(srv, topic: str, values) -> None:
    p = Producer(srv.config(acks="all", **{"enable.idempotence": True}))
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 2)
    assert p.flush(30) == 0
    p.close()


@pytest.mark.processes
def test_a_stopped_worker_of_a_dead_server_is_killed_before_a_new_server_serves(tmp_path):
    data = str(tmp_path / "data")
    old = ServerProcess(data, log_path=str(tmp_path / "old.log")).start()
    stopped = None
    new = None
    try:
        create(old, "t", 2)
        produce(old, "t", [b"before-%d" % i for i in range(200)])
        stopped, other = old.worker_pids()
        os.kill(stopped, signal.SIGSTOP)
        os.kill(old.proc.pid, signal.SIGKILL)
        old.proc.wait(10)
        assert pid_alive(stopped)

        new = ServerProcess(data, log_path=str(tmp_path / "new.log")).start()
        assert not pid_alive(stopped), "the stopped worker of the dead server still runs"
        assert f"worker 0 (pid {stopped}) of the previous supervisor did not say hello" \
            in new.output()
        assert new.worker_pids()[1] == other, "the running worker is adopted"
        produce(new, "t", [b"after-%d" % i for i in range(200)])
        values = sorted(m.value() for m in read_all(new, "t", 2, 400))
        assert values == sorted([b"before-%d" % i for i in range(200)]
                                + [b"after-%d" % i for i in range(200)])
    finally:
        if stopped is not None and pid_alive(stopped):
            os.kill(stopped, signal.SIGKILL)
        for srv in (new, old):
            if srv is not None:
                stop_server(srv)


def test_a_restarted_worker_takes_over_its_lock(own_server, topic_name):
    """The lock of a worker killed -9 and restarted by its supervisor is
    taken by the new process (the lock goes with the dead one)."""
    create(own_server, topic_name, 2)
    first = own_server.worker_pids()[0]
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: len(own_server.worker_pids()) == 2 and first not in
               own_server.worker_pids(), 30, "the worker restarted")
    wait_until(lambda: open(os.path.join(own_server.data_dir, ".workers", "0.lock")).read().split()
               == [str(own_server.worker_pids()[0])], 30, "the new worker's pid in its lock")
    produce(own_server, topic_name, [b"%d" % i for i in range(50)])
    assert len(read_all(own_server, topic_name, 2, 50)) == 50


@pytest.mark.processes
def test_a_worker_the_new_configuration_has_no_place_for_is_killed(tmp_path):
    """Three workers of a dead server, a new one with two: the third is
    killed before the new server starts anything
    (processes.fence_stale_workers); the first two run another
    configuration (three workers) and are replaced too
    (tests/server/test_adoption.py)."""
    data = str(tmp_path / "data")
    old = ServerProcess(data, workers=3, log_path=str(tmp_path / "old.log")).start()
    new = None
    pids = old.worker_pids()
    try:
        old.kill()
        new = ServerProcess(data, workers=2, log_path=str(tmp_path / "new.log")).start()
        assert not pid_alive(pids[2])
        assert f"(pid {pids[2]}) still holds" in new.output()
        assert not set(new.worker_pids()) & set(pids)
    finally:
        for pid in pids:
            if pid_alive(pid) and (new is None or pid not in new.worker_pids()):
                os.kill(pid, signal.SIGKILL)
        for srv in (new, old):
            if srv is not None:
                stop_server(srv)
