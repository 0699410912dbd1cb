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

import os
import select

import pytest
import zmq

from harness import shm_entries
from kafkalite import errors
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica.replica_manager import ReplicaManager
from kafkalite.server.replica.ring_gateway import RingGateway
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


def attach_request(ring, **body) -> dict:
    """``shm_attach`` as the ring's producer sends it (client/ring_link.py)."""
    return {"op": "shm_attach", "ring": ring.name, "secret": ring.attach_secret.hex(), **body}


def test_only_the_rings_producer_attaches_it(gateway):
    """Issue 67: a local user who read a ring's name in /dev/shm named it in
    shm_attach to the worker draining it, which took it over under that
    user's principal (the owner's entries were then refused as theirs).
    Without the ring's secret, or as another uid than the files' owner
    (a local door's peer), the attach is CLUSTER_AUTHORIZATION_FAILED and
    the ring stays its producer's, drained as before."""
    rm, gw, ring = gateway
    gw.attach(attach_request(ring, acks=1), "User:owner", os.geteuid())
    (fd,) = gw.rings
    for body, uid in [({"op": "shm_attach", "ring": ring.name}, None),
                      ({"op": "shm_attach", "ring": ring.name, "secret": "zz"}, None),
                      (attach_request(ring, secret=bytes(16).hex()), None),
                      (attach_request(ring), os.geteuid() + 1)]:
        with pytest.raises(errors.ClusterAuthorizationFailedError,
                           match="may not attach ring .*(not its own|belongs to uid)"):
            gw.attach(body, "User:intruder", uid)
    assert list(gw.rings) == [fd] and gw.principals[fd] == "User:owner"
    assert ring.worker_epoch == 1
    assert ring.try_append("t", 0, one_record()) >= 0
    gw.on_events({fd: zmq.POLLIN})
    assert [(code, base) for _, code, base in ring.poll_acks()] == [(0, 0)]


def test_a_busy_ring_is_drained_a_bounded_slice_at_a_time(gateway):
    rm, gw, ring = gateway
    gw.attach(attach_request(ring, acks=1), "User:ANONYMOUS")
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


def lead_with_a_follower(rm, partition: int) -> None:
    assert rm.become_leader({"topic": "r", "partition": partition, "topic_id": None,
                             "leader_epoch": 1, "configs": {}, "replicas": [0, 1],
                             "isr": [0, 1]})["error"] == 0


def follower_caught_up(rm, partition: int) -> None:
    part = rm.partition("r", partition)
    rm.update_follower_end(part, 1, part.log_end_offset, now=0.0)


@pytest.mark.parametrize("partitions", [1, 2])
def test_acks_all_entries_are_acknowledged_in_ring_order(gateway, partitions):
    """acks=all: each entry waits for its partition's high watermark, and
    the ring takes acks in sequence order only. Entries whose high
    watermark moved first (another partition), or many that one move
    completes at once, are acknowledged behind the ones before them. Taking
    them in completion order broke the ring (an exception in the purgatory)
    and the producer waited for acks that never came."""
    rm, gw, ring = gateway
    for partition in range(partitions):
        lead_with_a_follower(rm, partition)
    gw.attach(attach_request(ring, acks=-1), "User:ANONYMOUS")
    batch = one_record()
    entries = 64
    for i in range(entries):
        assert ring.try_append("r", i % partitions, batch) >= 0
    (fd,) = gw.rings
    while sum(rm.partition("r", p).log_end_offset for p in range(partitions)) < entries:
        gw.on_events({fd: zmq.POLLIN})
        gw.arm()
    assert ring.poll_acks() == []            # nothing is committed yet
    if partitions == 2:
        follower_caught_up(rm, 1)            # the second partition's entries first...
        assert ring.poll_acks() == []        # ...wait behind the first entry
    follower_caught_up(rm, 0)
    acks = ring.poll_acks()
    assert [seq for seq, _, _ in acks] == sorted(seq for seq, _, _ in acks)
    assert [(code, base) for _, code, base in acks] == [
        (0, i // partitions) for i in range(entries)]
    # and the ring goes on: an entry appended now is acknowledged once committed
    assert ring.try_append("r", 0, batch) >= 0
    gw.on_events({fd: zmq.POLLIN})
    follower_caught_up(rm, 0)
    assert [(code, base) for _, code, base in ring.poll_acks()] == [(0, entries // partitions)]


def test_an_entry_refused_behind_a_waiting_one_is_acknowledged_after_it(gateway):
    """An acks=all entry waits; the entry after it is refused at once (its
    partition is not led here): its error goes to the ring after the first
    entry's acknowledgement, not before."""
    rm, gw, ring = gateway
    lead_with_a_follower(rm, 0)
    gw.attach(attach_request(ring, acks=-1), "User:ANONYMOUS")
    batch = one_record()
    assert ring.try_append("r", 0, batch) >= 0
    assert ring.try_append("nowhere", 0, batch) >= 0
    (fd,) = gw.rings
    gw.on_events({fd: zmq.POLLIN})
    assert ring.poll_acks() == []
    follower_caught_up(rm, 0)
    acks = ring.poll_acks()
    assert [code for _, code, _ in acks][0] == 0
    assert [code for _, code, _ in acks][1] != 0
    assert len(acks) == 2


def test_a_drain_makes_no_python_call_per_entry(gateway):
    """Issue 72: at 100 partitions a ring's entries carry a record or a few
    each, and the drain's Python calls per entry (a tuple and a bytearray
    from poll, then ReplicaManager.append's dozen calls, an ack and a
    release) cost 17-23 us of worker CPU a message. The common entry is
    now read, appended, acknowledged and released in C
    (WorkerCore.append_entries with ring_append.LeaderSink): one drain of
    a hundred entries over a hundred partitions makes a few Python calls
    in all, however many entries it appends."""
    import sys
    rm, gw, ring = gateway
    for p in range(1, 100):
        assert rm.become_leader({"topic": "t", "partition": p, "topic_id": None,
                                 "leader_epoch": 1, "configs": {}})["error"] == 0
    gw.attach(attach_request(ring, acks=1), "User:ANONYMOUS")
    (fd,) = gw.rings
    batch = one_record()
    for i in range(100):
        assert ring.try_append("t", i, batch) >= 0
    calls = [0]

    def count(frame, event, arg):
        if event == "call":
            calls[0] += 1
    sys.setprofile(count)
    try:
        gw.on_events({fd: zmq.POLLIN})
    finally:
        sys.setprofile(None)
    assert [(s, code, base) for s, code, base in ring.poll_acks()] == \
        [(i, 0, 0) for i in range(100)]
    assert all(rm.partition("t", p).log_end_offset == 1 for p in range(100))
    assert calls[0] < 25, f"one drain of 100 entries made {calls[0]} Python calls"
