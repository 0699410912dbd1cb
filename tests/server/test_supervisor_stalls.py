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

import pytest
from harness import ServerProcess, free_port, stop_server, wait_until
from replicas import create, state
from kafkalite.client import Consumer, Producer
from kafkalite.server.node.loop_clock import FAULT_ENV, STALL_FAULT

# each test starts its own server (no server fixture): out of the unit tier
pytestmark = pytest.mark.processes

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
        wait_until(lambda: "planted stall" in srv.output(), 30, "the planted stall")
        # answered by the supervisor's loop, so only after the stall and
        # the heartbeat check that followed it in the same turn
        leaders = state(srv, "t")
        log = srv.output()
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


def test_a_group_member_keeps_its_generation_through_two_restarts_with_stalls(tmp_path,
                                                                              monkeypatch):
    """A member of a classic group, its session 6 s, through two supervisor
    kills (the next supervisor adopting the workers) whose loops then stall
    8 s: its heartbeats wait on the supervisor's socket meanwhile, and it
    stays in its generation. Before, the turn after each stall expired it
    ("missed its session timeout") and the group rebalanced."""
    data, port = str(tmp_path / "data"), free_port()
    servers = [ServerProcess(data, workers=2, extra_args=["--port", str(port)],
                             log_path=str(tmp_path / "s0.log"))]
    servers[0].start()
    consumer = None
    try:
        create(servers[0], "t", 2, rf=2)
        consumer = Consumer(servers[0].config(**{
            "group.id": "g", "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
            "auto.offset.reset": "earliest"}))
        consumer.subscribe(["t"])
        got: list = []

        def read(count: int) -> bool:
            got.extend(m.value() for m in consumer.consume(100, 0.2) if m.error() is None)
            return len(got) >= count
        produce(servers[0], 20)
        wait_until(lambda: read(20), 60, "the first 20 records")
        member = consumer.consumer_group_metadata()
        monkeypatch.setenv(FAULT_ENV, f"{STALL_FAULT}{STALL_S:g}")
        for n in (1, 2):
            servers[-1].kill()
            servers.append(ServerProcess(data, workers=2, extra_args=["--port", str(port)],
                                         log_path=str(tmp_path / f"s{n}.log")))
            servers[-1].start(timeout=120)
            wait_until(lambda: "planted stall" in servers[-1].output(), 30, "the planted stall")
            state(servers[-1], "t")     # answered once the stall and its turn are over
        produce(servers[-1], 20)
        wait_until(lambda: read(40), 60, "the 20 records written after the restarts")
        # the same member at the same generation (a rejoin is a new member
        # id: the group's generation alone could come back to the same number)
        now = consumer.consumer_group_metadata()
        assert (now.member_id, now.generation_id) == (member.member_id, member.generation_id)
    finally:
        if consumer is not None:
            consumer.close()
        servers[-1].stop()
        for srv in servers[:-1]:
            srv.kill()
