"""Tiered storage (KIP-405) and a replica whose log ends below its leader's
local log start: the records it lacks are only in the remote store.

Two ways to get there, on a 3-worker server whose remote store is a
directory or a bucket on moto's S3 server:

- a replica added by a reassignment, its log empty;
- a follower stopped (SIGSTOP) while the leader copied and deleted past
  its local retention, fenced out of the ISR, then let go on.

As Kafka's followers (ReplicaFetcherTierStateMachine), such a replica is
answered OFFSET_MOVED_TO_TIERED_STORAGE and starts its local log at the
leader's local log start, with the leader epochs and the producer state
of the remote segment just below it: the leader reads nothing from the
store for it (the history is not pulled back onto a local disk through
the leader's remote reads). The replica then joins the ISR, keeps its
local disk within local retention, and once it leads (the old leader
killed -9) serves every record from offset 0 byte for byte through
confluent-kafka, knows the idempotent producers that wrote only the
remote part, and copies again nothing its predecessor copied."""
import os
import signal

import confluent_kafka as ck
import pytest

from harness import (ServerProcess, kafka_read_from_zero, kafka_send_numbered, local_segments,
                     run_cli, stop_server, wait_until)
from moto_s3 import tiered_store_config
from replicas import create, state
from kafkalite.client import AdminClient as LiteAdmin, TopicPartition

SEGMENT_BYTES = 16384
LOCAL_RETENTION_BYTES = 32768
COUNT = 3000
EARLY = 200           # records of the idempotent producer that then waits
BOUND = LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES   # local retention, the active and a rolling one
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
          "local.retention.bytes": str(LOCAL_RETENTION_BYTES)}


@pytest.fixture(params=["directory", "s3"])
def store_config(request, tmp_path):
    """(the server's config file, the store as a client sees it)."""
    with tiered_store_config(request.param, tmp_path, "lagging") as both:
        yield both


def _server(tmp_path, config) -> ServerProcess:
    # a stopped worker is fenced out of the ISR (replica lag), not out of
    # the cluster (session timeout)
    return ServerProcess(str(tmp_path / "data"), workers=3, extra_args=[
        "--config", str(config), "--no-auto-leader-rebalance",
        "--replica-lag-time-max-ms", "1500", "--broker-session-timeout-ms", "60000"]).start()


def _kafka(srv) -> dict:
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{b['port']}"
                                          for b in srv.info["kafka_brokers"])}


def _replica_dir(srv, broker: int, topic: str) -> str:
    return os.path.join(srv.data_dir, f"broker-{broker}", f"{topic}-0")


def _local_bytes(directory: str) -> int:
    return sum(n for _, n in local_segments(directory)) if os.path.isdir(directory) else 0


def _remote_reads(srv, broker: int, topic: str) -> list[str]:
    """The remote segments the broker's replica brought into its read cache
    (remote-log-cache/, the last few read from the store, kept while it is
    open): what it read from the store to serve fetches below its local
    log start."""
    cache = os.path.join(_replica_dir(srv, broker, topic), "remote-log-cache")
    return sorted(n for n in os.listdir(cache) if n.endswith(".log")) \
        if os.path.isdir(cache) else []


def _produce(srv, topic, start, count, **config) -> list[bytes]:
    producer = ck.Producer({**_kafka(srv), "acks": "all", "linger.ms": 5, "batch.size": 4096,
                            **config})
    values = kafka_send_numbered(producer, topic, start, count)
    return values


def _store_segments(store, topic: str) -> dict[str, int]:
    """The store's copies of partition 0: id -> base offset."""
    return {n.split("-", 1)[1]: int(n.split("-", 1)[0])
            for n in store.list_segments(f"{topic}-0")}


def _producers(srv, topic) -> dict[int, int]:
    """DescribeProducers on the leader: producer id -> its last sequence."""
    admin = LiteAdmin(srv.config())
    try:
        tp = TopicPartition(topic, 0)
        return {p.producer_id: p.last_sequence
                for p in admin.describe_producers([tp])[tp].result()}
    finally:
        admin.close()


def _leader_with_remote_history(srv, topic, leader: int, start: int = 0):
    """Write EARLY records with an idempotent producer kept open (its state
    then only in segments that go remote), then COUNT with another, until
    the leader's local log starts well past the early ones. Returns (the
    idempotent producer, every value sent, the early producer's id)."""
    early = ck.Producer({**_kafka(srv), "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": 4096})
    sent = kafka_send_numbered(early, topic, start, EARLY)
    [early_pid] = [pid for pid, seq in _producers(srv, topic).items() if seq == EARLY - 1]
    sent += _produce(srv, topic, start + EARLY, COUNT)
    leader_dir = _replica_dir(srv, leader, topic)
    wait_until(lambda: local_segments(leader_dir)[0][0] > COUNT // 2, 60,
               lambda: f"the leader's local log start past {COUNT // 2}: "
                       f"{local_segments(leader_dir)}")
    # and within local retention: a replica starting at the leader's local log
    # start copies what the leader holds then (three segments and the active
    # one once settled), and under load, its copies to the store late, the
    # leader can hold a segment more (a fresh-clone run's failure: the
    # joining replica held 66,089 bytes, four segments and an active one)
    wait_until(lambda: _local_bytes(leader_dir) <= BOUND, 60,
               lambda: f"the leader's local log within local retention: "
                       f"{local_segments(leader_dir)}")
    return early, sent, early_pid


def _watch_joining(directory: str, seen: dict):
    """A wait_until predicate's side: the smallest base offset of a local
    segment holding records and the largest local size of the joining
    replica seen so far (its log is created empty at offset 0)."""
    segs = [s for s in local_segments(directory) if s[1]] if os.path.isdir(directory) else []
    if segs:
        seen["first"] = min(seen.get("first", segs[0][0]), segs[0][0])
        seen.setdefault("bases", set()).update(b for b, _ in segs)
        seen["bytes"] = max(seen.get("bytes", 0), sum(n for _, n in segs))


def _lead_and_check(srv, store, topic, old_leader, new_leader, early, early_pid, sent):
    """Kill -9 the old leader; the replica that started at the local log
    start leads: every record reads back from offset 0, the early
    producer is known and goes on, nothing is copied twice."""
    before = _store_segments(store, topic)
    highest = max(before.values())
    victim = srv.worker_pid(old_leader)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: state(srv, topic)[0][0] == new_leader, 60,
               lambda: f"broker {new_leader} leading: {state(srv, topic)}")
    # the producer state of the remote segment it started from: the early
    # producer, which wrote nothing since, is known with its last sequence
    assert _producers(srv, topic).get(early_pid) == EARLY - 1, _producers(srv, topic)
    sent += kafka_send_numbered(early, topic, len(sent), 100)
    early.flush(30)
    assert _producers(srv, topic).get(early_pid) == EARLY + 99
    sent += _produce(srv, topic, len(sent), COUNT)
    srv.wait_for_worker_restart(old_leader, victim, 60)

    got = kafka_read_from_zero(_kafka(srv), topic, len(sent))
    assert [o for o, _ in got] == list(range(len(sent)))
    assert [v for _, v in got] == sent

    # its copier goes on from what the metadata lists: of the segments up to
    # what its predecessor copied, at most the one straddling its first offset
    wait_until(lambda: max(_store_segments(store, topic).values()) > highest + COUNT // 2, 60,
               "the new leader's copies")
    after = _store_segments(store, topic)
    recopied = sorted(b for i, b in after.items() if i not in before and b <= highest)
    assert len(recopied) <= 1, f"copied again: segments at {recopied} (copied up to {highest})"
    wait_until(lambda: _local_bytes(_replica_dir(srv, new_leader, topic)) <= BOUND, 60,
               "the new leader's local log within local retention")


@pytest.mark.processes
def test_a_replica_added_by_a_reassignment_starts_at_the_leaders_local_log_start(
        tmp_path, store_config):
    config, store = store_config
    srv = _server(tmp_path, config)
    try:
        topic = "tiered-join"
        create(srv, topic, assignments=[[0, 1]], **TIERED)
        early, sent, early_pid = _leader_with_remote_history(srv, topic, 0)
        local_start = local_segments(_replica_dir(srv, 0, topic))[0][0]
        assert _remote_reads(srv, 0, topic) == []

        # broker 2 replaces broker 1: its log starts empty
        out = run_cli("topics", "reassign", topic, "--partition", "0", "--replicas", "2,0",
                      "--bootstrap-server", srv.bootstrap)
        assert out.returncode == 0, out.stderr
        joining, seen = _replica_dir(srv, 2, topic), {}
        wait_until(lambda: _watch_joining(joining, seen) or state(srv, topic)[0] == (
            0, [2, 0], [0, 2]), 60, lambda: f"broker 2 in the ISR: {state(srv, topic)}")
        _watch_joining(joining, seen)
        read = _remote_reads(srv, 0, topic)
        assert seen["first"] >= local_start and not read, \
            f"broker 2's log started at {seen['first']} (the leader's local log start: " \
            f"{local_start}); the leader read from the store for it: {read}"
        assert seen["bytes"] <= BOUND, f"broker 2 held {seen['bytes']} bytes locally"

        _lead_and_check(srv, store, topic, 0, 2, early, early_pid, sent)
        early.flush(10)
    finally:
        stop_server(srv)


# the directory store only: the follower's path is the reassignment test's, which
# runs on both stores (to keep the suite within its time)
@pytest.mark.processes
@pytest.mark.parametrize("store_config", ["directory"], indirect=True)
def test_a_follower_fenced_out_while_the_leader_tiered_starts_at_its_local_log_start(
        tmp_path, store_config):
    config, store = store_config
    srv = _server(tmp_path, config)
    try:
        topic = "tiered-lag"
        create(srv, topic, assignments=[[0, 1]], **TIERED)
        first = _produce(srv, topic, 0, 100)
        follower = srv.worker_pid(1)
        follower_dir = _replica_dir(srv, 1, topic)
        wait_until(lambda: _local_bytes(follower_dir) > 0, 30, "the follower's first records")
        os.kill(follower, signal.SIGSTOP)
        try:
            # acks=all waits for the ISR to shrink to the leader
            early, sent, early_pid = _leader_with_remote_history(srv, topic, 0, 100)
            sent = first + sent
            assert state(srv, topic)[0] == (0, [0, 1], [0])
            local_start = local_segments(_replica_dir(srv, 0, topic))[0][0]
            assert _remote_reads(srv, 0, topic) == []
        finally:
            os.kill(follower, signal.SIGCONT)
        # its log held [0, 100): it starts again at the leader's local log
        # start, never holding the records between
        seen = {"bases": set()}
        wait_until(lambda: _watch_joining(follower_dir, seen) or state(srv, topic)[0] == (
            0, [0, 1], [0, 1]), 60, lambda: f"broker 1 back in the ISR: {state(srv, topic)}")
        _watch_joining(follower_dir, seen)
        between = sorted(b for b in seen["bases"] if 0 < b < local_start)
        read = _remote_reads(srv, 0, topic)
        assert not between and not read, \
            f"broker 1 held segments at {between}, below the leader's local log start " \
            f"{local_start}; the leader read from the store for it: {read}"
        assert local_segments(follower_dir)[0][0] >= local_start
        assert seen["bytes"] <= BOUND, f"broker 1 held {seen['bytes']} bytes locally"
        _lead_and_check(srv, store, topic, 0, 1, early, early_pid, sent)
        early.flush(10)
    finally:
        stop_server(srv)
