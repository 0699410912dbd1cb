"""The ring gateway in-process: a real shared-memory ring in /dev/shm, a
real replica manager with its partition logs in a temporary directory, and
a zmq.Poller as the worker's loop has.

A busy ring must not hold the loop: each look at it appends a bounded
number of entries and rings the ring's own doorbell, so the loop serves its
sockets (a consumer's fetch that the appends would answer) before coming
back for the rest. With 8,192 entries per look the fetch sat unread behind
half a second of one-record appends. Counted in entries, never timed.
"""
from __future__ import annotations

import select

import pytest
import zmq

from harness import shm_entries
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica_manager import ReplicaManager
from kafkalite.server.ring_gateway import RingGateway
from kafkalite.shm.ring import ProducerRing

ENTRIES = 1000


def one_record() -> bytes:
    b = RecordBatchBuilder()
    b.append(None, None, b"v" * 100)
    return b.build()


@pytest.fixture
def gateway(tmp_path):
    before = shm_entries()
    config = ServerConfig(data_dir=str(tmp_path / "data"))
    rm = ReplicaManager(0, str(tmp_path / "data"), config.log_config)
    assert rm.become_leader({"topic": "t", "partition": 0, "topic_id": None,
                             "leader_epoch": 1, "configs": {}})["error"] == 0
    gw = RingGateway(rm, zmq.Poller(), 0)
    ring = ProducerRing.create(1 << 22)
    yield rm, gw, ring
    gw.close()
    ring.close(unlink=True)
    rm.shutdown()
    assert shm_entries() <= before


def test_a_busy_ring_is_drained_a_bounded_slice_at_a_time(gateway):
    rm, gw, ring = gateway
    gw.attach({"op": "shm_attach", "ring": ring.name, "acks": 1}, "User:ANONYMOUS")
    batch = one_record()
    for _ in range(ENTRIES):
        assert ring.try_append("t", 0, batch) >= 0
    part = rm.partition("t", 0)
    gw.arm()                                 # the loop's look before it sleeps
    first = part.log_end_offset
    assert 0 < first < ENTRIES // 2, f"one look appended {first} of {ENTRIES} entries"
    # ...and the ring's doorbell rings, so the loop does not sleep on the rest
    (fd,) = gw.rings
    assert select.select([fd], [], [], 0)[0] == [fd]
    looks = 1
    while part.log_end_offset < ENTRIES and looks < ENTRIES:
        gw.on_events({fd: zmq.POLLIN})
        gw.arm()
        looks += 1
    assert part.log_end_offset == ENTRIES    # every entry in, in order, acknowledged
    acks = ring.poll_acks()
    assert [base for _, code, base in acks] == list(range(ENTRIES))
