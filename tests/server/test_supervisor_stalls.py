"""A supervisor whose loop stalls longer than the workers' session timeout
must not fence them for it (issue 68, item 5): their heartbeats were sent
and queued on the control socket, only not looked at. The stall is
planted (loop_clock.FAULT_ENV: the loop blocks 8 s in its first turn
after the node is ready, past broker_session_timeout_ms's 6 s, between
the coordinators' ticks and the check of the heartbeats); before the
loop clock, every worker was fenced at the end of it ("sent no heartbeat
for 8.0 s; fencing it") and its leaderships moved.

Servers of the test's own: the stall is theirs."""
from __future__ import annotations

from harness import ServerProcess, stop_server
from replicas import create, state
from kafkalite.client import Producer
from kafkalite.server.node.loop_clock import FAULT_ENV, STALL_FAULT

STALL_S = 8.0       # past the 6 s session timeout


def produce(srv: ServerProcess, count: int) -> None:
    p = Producer(srv.config(acks="all", **{"enable.idempotence": True}))
    for i in range(count):
        p.produce("t", b"v%d" % i, partition=i % 2)
    assert p.flush(60) == 0
    p.close()


def test_a_stalled_loop_fences_no_worker_and_moves_no_leadership(tmp_path, monkeypatch):
    data = str(tmp_path / "data")
    first = ServerProcess(data, workers=2, log_path=str(tmp_path / "first.log"))
    first.start()
    try:
        create(first, "t", 2, rf=2)
        produce(first, 20)
    finally:
        stop_server(first)
    # the same node again, its loop stalled once it is ready: the
    # leaderships (one per worker) exist from its start
    monkeypatch.setenv(FAULT_ENV, f"{STALL_FAULT}{STALL_S:g}")
    srv = ServerProcess(data, workers=2, log_path=str(tmp_path / "stalled.log"))
    srv.start(timeout=120)
    try:
        pids = srv.worker_pids()
        # answered by the supervisor's loop, so only after the stall and
        # the heartbeat check that followed it in the same turn
        leaders = state(srv, "t")
        log = srv.output()
        assert "planted stall" in log, log[-2000:]
        assert "fencing it" not in log, log[-3000:]
        assert "did not look at its workers for" in log, log[-2000:]
        assert sorted(leader for leader, _, _ in leaders.values()) == [0, 1], leaders
        assert all(isr == [0, 1] for _, _, isr in leaders.values()), leaders
        produce(srv, 20)
        assert srv.worker_pids() == pids
        assert state(srv, "t") == leaders
        assert "fencing it" not in srv.output()
    finally:
        stop_server(srv)
