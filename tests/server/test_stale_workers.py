"""A worker that outlives its supervisor because it could not run when the
supervisor died (SIGSTOPped, or starved), and wakes after a new server
started on the same data directory: it would append to the partitions the
new server's workers opened, and answer its old connections with what it
last knew (issue 47, item 5: 25 acknowledged records missing from a first
read, an OUT_OF_ORDER_SEQUENCE_NUMBER). Each worker holds a lock file in
the data directory for its life; a new server kills what still holds one
before its own workers open anything (processes.fence_stale_workers).

Servers of the test's own: it kills them."""
from __future__ import annotations

import os
import signal

from harness import ServerProcess, create, pid_alive, read_all, wait_until
from kafkalite.client import Producer


def produce(srv, topic: str, values) -> None:
    p = Producer(srv.config(acks="all", **{"enable.idempotence": True}))
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 2)
    assert p.flush(30) == 0
    p.close()


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
        wait_until(lambda: not pid_alive(other), 30, "the running worker to notice and exit")
        assert pid_alive(stopped)

        new = ServerProcess(data, log_path=str(tmp_path / "new.log")).start()
        assert not pid_alive(stopped), "the stopped worker of the dead server still runs"
        assert f"(pid {stopped}) still holds" in new.output()
        produce(new, "t", [b"after-%d" % i for i in range(200)])
        values = sorted(m.value() for m in read_all(new, "t", 2, 400))
        assert values == sorted([b"before-%d" % i for i in range(200)]
                                + [b"after-%d" % i for i in range(200)])
    finally:
        if stopped is not None and pid_alive(stopped):
            os.kill(stopped, signal.SIGKILL)
        for srv in (new, old):
            if srv is not None and srv.proc is not None:
                if srv.proc.poll() is None:
                    srv.stop()
                srv.kill()


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
