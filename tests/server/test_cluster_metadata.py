"""Cluster metadata in PostgreSQL (``kafkalite server --cluster``):
the controller lease, fenced writes, partition-epoch conditions,
notifications, and a node living through PostgreSQL going away.

A real PostgreSQL from the distribution's packages (tests/postgres.py):
one for the module, a fresh database per test; tests that stop PostgreSQL
start their own. Faults are real: ``pg_ctl stop -m immediate``, SIGKILL.
"""
import os
import signal
import threading
import time
import uuid

import psycopg
import pytest

from harness import ServerProcess, TcpRelay, pid_alive, wait_until
from jepsen import History, check
from postgres import PostgresServer, find_binaries
from replicas import read_log, wait_for
from kafkalite import errors
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.server.controller import cluster_store
from kafkalite.server.controller.cluster_store import (ControllerLease, MetadataWatcher,
                                            PostgresMetadataStore)

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")


@pytest.fixture(scope="module")
def pg():
    srv = PostgresServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def db(pg):
    """A DSN of a database of its own."""
    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg.dsn, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    return pg.dsn.rsplit("/", 1)[0] + "/" + name


@pytest.fixture
def own_pg():
    """A PostgreSQL this test may stop and start."""
    srv = PostgresServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def nodes(tmp_path):
    started = []

    def start(dsn, node_id=1, lease_ms=2000, workers=2, name=None):
        s = ServerProcess(str(tmp_path / (name or f"node{node_id}")), workers=workers,
                          extra_args=["--cluster", dsn, "--node-id", str(node_id),
                                      "--controller-lease-ms", str(lease_ms)])
        started.append(s)
        return s.start()
    yield start
    for s in started:
        if s.proc is not None and s.proc.poll() is None:
            s.stop()


def leases(db, *node_ids, ttl_ms=1000):
    out = [ControllerLease(db, n, ttl_ms=ttl_ms) for n in node_ids]
    return out[0] if len(out) == 1 else out


def hold(lease) -> None:
    """Take ``lease`` and keep renewing it while the test writes, as a
    controller does: a 1 s lease taken once lapsed under the full suite's
    load before the writes after it were done."""
    assert lease.acquire()
    lease.start()


def lapse(old, new) -> None:
    """``old`` stops renewing without letting go (its lease runs out, as a
    cut-off node's does); ``new`` takes the lease once PostgreSQL says it
    has expired."""
    old.close(release=False)
    wait_until(new.acquire, 10, f"node {new.node_id} to take the lapsed lease")


# ---- the store ---------------------------------------------------------------------------


def test_a_deposed_controller_cannot_write(db):
    a, b = leases(db, 1, 2)
    hold(a)
    assert a.epoch == 1
    sa = PostgresMetadataStore(db, a)
    sa.create_topic("orders", 2, {"retention.ms": "1000"}, workers=3, replication_factor=3)
    assert not b.acquire() and b.holder == 1        # a's lease is still running
    lapse(a, b)                                     # a stops renewing: it lapses
    assert b.epoch == 2
    sb = PostgresMetadataStore(db, b)
    assert sb.get("orders").partitions == sa.get("orders").partitions
    assert sb.get("orders").configs == {"retention.ms": "1000"}
    # a was paused (a long GC, a frozen VM): by its own clock it still holds
    # the lease. PostgreSQL's lock on the lease row is what stops it.
    a._valid_until = time.monotonic() + 60
    with pytest.raises(errors.NotControllerError, match="controller lease"):
        sa.create_topic("payments", 1, {}, workers=3)
    assert "payments" not in sa.topics              # put back: nothing to act on
    before = sa.get("orders").partitions[0].isr
    p = sa.get("orders").partitions[0]
    p.isr, p.partition_epoch = p.isr[:1], p.partition_epoch + 1
    with pytest.raises(errors.NotControllerError):
        sa.save(["orders"])
    assert sa.get("orders").partitions[0].isr == before
    sb.reload()
    assert set(sb.topics) == {"orders"} and sb.get("orders").partitions[0].isr == before
    assert not a.renew() and a.lost and not a.held
    sb.close()
    sa.close()


def test_the_metadata_offset_counts_fenced_writes_and_the_next_controller_goes_on(db):
    """DescribeQuorum's high watermark with the metadata in PostgreSQL: one
    per committed write, none for a refused one, and a new controller starts
    from it (it never goes back)."""
    a, b = leases(db, 1, 2)
    hold(a)
    sa = PostgresMetadataStore(db, a)
    assert sa.offset == 0
    sa.create_topic("orders", 1, {}, workers=3)
    sa.set_configs("orders", {"retention.ms": "1000"})
    assert sa.offset == 2
    lapse(a, b)
    a._valid_until = time.monotonic() + 60
    with pytest.raises(errors.NotControllerError):
        sa.create_topic("payments", 1, {}, workers=3)
    assert sa.offset == 2
    sb = PostgresMetadataStore(db, b)
    assert sb.offset == 2
    sb.create_topic("payments", 1, {}, workers=3)
    assert sb.offset == 3
    sb.close()
    sa.close()


def test_without_the_fence_a_deposed_controller_overwrites(db, monkeypatch):
    """The planted fault: with the lease check taken out of the write, the
    same scenario corrupts the new controller's state, which is what the
    test above would then catch."""
    a, b = leases(db, 1, 2)
    hold(a)
    sa = PostgresMetadataStore(db, a)
    sa.create_topic("orders", 1, {}, workers=3, replication_factor=3)
    lapse(a, b)
    a._valid_until = time.monotonic() + 60
    monkeypatch.setattr(PostgresMetadataStore, "_fence", lambda self, conn: None)
    sa.create_topic("payments", 1, {}, workers=3)   # nothing refuses it
    sb = PostgresMetadataStore(db, b)
    assert "payments" in sb.topics
    sb.close()
    sa.close()


def test_coordinator_logs_and_producer_ids_follow_the_lease(db, tmp_path):
    """__consumer_offsets as the controller node writes it reaches
    PostgreSQL first (internal_topic.py): a controller on another node,
    with an empty data dir, starts from the same offsets, with the leader
    (coordinator) epoch one higher; producer id blocks continue past
    every block reserved before. A deposed controller can write neither."""
    from kafkalite.server.group.group_log import GroupMetadataLog, OffsetAndMetadata
    a, b = leases(db, 1, 2)
    hold(a)
    sa = PostgresMetadataStore(db, a)
    assert sa.reserve_producer_ids(1000, 0) == 0
    assert sa.reserve_producer_ids(1000, 1000) == 1000
    mine = GroupMetadataLog(str(tmp_path / "node1"), 4, sa)
    mine.write_offsets("g", {("t", 0): OffsetAndMetadata(42, -1, "m", 1),
                             ("t", 1): OffsetAndMetadata(7, -1, "", 1)}, 1)
    mine.write_offsets("g", {("t", 0): OffsetAndMetadata(43, -1, "", 2)}, 2)
    index = mine.partition_for("g")
    epoch = mine.parts[index].leader_epoch
    mine.close()
    # the same node again: its log is PostgreSQL's, kept as it is
    again = GroupMetadataLog(str(tmp_path / "node1"), 4, sa)
    assert again.parts[index].leader_epoch == epoch
    again.close()
    lapse(a, b)
    sb = PostgresMetadataStore(db, b)
    assert sb.reserve_producer_ids(1000, 0) == 2000  # past a's blocks, not from 0
    theirs = GroupMetadataLog(str(tmp_path / "node2"), 4, sb)
    loaded = theirs.load()
    assert {tp: o.offset for tp, o in loaded.offsets["g"].items()} == {("t", 0): 43,
                                                                         ("t", 1): 7}
    assert theirs.parts[index].leader_epoch == epoch + 1
    assert theirs.logs[index].log_end_offset == 3
    # the deposed node (paused: by its own clock it still holds the lease)
    a._valid_until = time.monotonic() + 60
    zombie = GroupMetadataLog(str(tmp_path / "node1"), 4, sa)
    with pytest.raises(errors.CoordinatorNotAvailableError, match="PostgreSQL"):
        zombie.write_offsets("g", {("t", 0): OffsetAndMetadata(99, -1, "", 3)}, 3)
    with pytest.raises(errors.NotControllerError):
        sa.reserve_producer_ids(1000, 0)
    assert zombie.logs[index].log_end_offset == 3   # nothing appended here either
    theirs.write_offsets("g", {("t", 1): OffsetAndMetadata(8, -1, "", 4)}, 4)
    assert [base for base, _ in sb.read_internal("__consumer_offsets")[index]] == [0, 2, 3]
    for log_ in (theirs, zombie):
        log_.close()
    sb.close()
    sa.close()


def test_a_kip848_groups_records_follow_the_lease(db, tmp_path):
    """A KIP-848 group's records (consumer_group_log.py) go to PostgreSQL with
    the rest of __consumer_offsets: the controller on another node restores
    the group with its members' epochs, assignments and target."""
    import uuid as uuid_
    from kafkalite.server.group import consumer_group_log
    from kafkalite.server.group.consumer_group import (UNREVOKED_PARTITIONS, ConsumerGroup,
                                                 ConsumerGroupMember)
    from kafkalite.server.group.group_log import GroupMetadataLog
    a, b = leases(db, 1, 2)
    hold(a)
    sa = PostgresMetadataStore(db, a)
    mine = GroupMetadataLog(str(tmp_path / "node1"), 4, sa)
    tid = uuid_.uuid4()
    cg = ConsumerGroup("g848", group_epoch=5, assignment_epoch=5)
    m = ConsumerGroupMember("m1", "i1", None, "c", "/h", 30_000, subscribed_topic_names=["t"],
                            member_epoch=4, previous_member_epoch=3,
                            state=UNREVOKED_PARTITIONS, assigned=frozenset({(tid, 0)}),
                            pending_revocation=frozenset({(tid, 1)}))
    cg.members["m1"], cg.target["m1"] = m, frozenset({(tid, 0)})
    rendering = consumer_group_log.GroupRecords()
    first = rendering.snapshot(cg)
    mine.write_records("g848", consumer_group_log.diff({}, first), 1)
    m.member_epoch, m.state, m.pending_revocation = 5, "STABLE", frozenset()
    changed = consumer_group_log.diff(first, rendering.snapshot(cg))
    assert len(changed) == 1                          # only the member's current assignment
    mine.write_records("g848", changed, 2)
    mine.close()
    lapse(a, b)
    sb = PostgresMetadataStore(db, b)
    theirs = GroupMetadataLog(str(tmp_path / "node2"), 4, sb)
    restored = consumer_group_log.restore("g848", theirs.load().consumer["g848"])
    r = restored.members["m1"]
    assert (restored.group_epoch, restored.assignment_epoch) == (5, 5)
    assert (r.member_epoch, r.previous_member_epoch, r.state) == (5, 3, "STABLE")
    assert (r.assigned, r.pending_revocation) == (frozenset({(tid, 0)}), frozenset())
    assert (r.instance_id, r.subscribed_topic_names) == ("i1", ["t"])
    assert restored.target == {"m1": frozenset({(tid, 0)})}
    assert restored.owners == {(tid, 0): "m1"} and restored.static == {"i1": "m1"}
    theirs.close()
    sb.close()
    sa.close()


def test_without_the_copy_another_node_starts_from_nothing(db, tmp_path):
    """The planted fault for the test above: without PostgreSQL's copy the
    controller of another node loads no offsets, which it would catch."""
    from kafkalite.server.group.group_log import GroupMetadataLog, OffsetAndMetadata
    mine = GroupMetadataLog(str(tmp_path / "node1"), 4)
    mine.write_offsets("g", {("t", 0): OffsetAndMetadata(42, -1, "", 1)}, 1)
    mine.close()
    theirs = GroupMetadataLog(str(tmp_path / "node2"), 4)
    assert "g" not in theirs.load().offsets
    theirs.close()


def test_a_partition_change_from_a_stale_epoch_is_refused(db):
    lease = leases(db, 1, ttl_ms=10_000)
    lease.acquire()
    fresh = PostgresMetadataStore(db, lease)
    fresh.create_topic("t", 1, {}, workers=3, replication_factor=3)
    stale = PostgresMetadataStore(db, lease)        # read now, then left behind
    p = fresh.get("t").partitions[0]
    p.isr, p.partition_epoch = [p.leader], p.partition_epoch + 1
    fresh.save(["t"])
    q = stale.get("t").partitions[0]
    old = (q.leader, list(q.isr))
    q.leader, q.leader_epoch, q.partition_epoch = q.replicas[1], q.leader_epoch + 1, \
        q.partition_epoch + 1
    with pytest.raises(errors.NotControllerError, match="partition epoch"):
        stale.save(["t"])
    q = stale.get("t").partitions[0]
    assert (q.leader, q.isr) == old                 # put back as it last knew it
    stale.reload(["t"])
    assert stale.get("t").partitions[0].isr == [p.leader]
    # the row still holds the fresh store's change
    with psycopg.connect(db) as c:
        state, epoch = c.execute("SELECT state, partition_epoch FROM kafkalite_partitions "
                                 "WHERE topic = 't'").fetchone()
    assert state["isr"] == [p.leader] and epoch == p.partition_epoch
    stale.close()
    fresh.close()


def test_a_node_starting_takes_no_lock_a_controller_write_holds(db):
    """A node that starts (or loses the race for an expired lease and
    becomes a broker node) asks for its broker ids while the controller
    writes metadata. The schema being there already, it takes no table
    lock: ``ADD COLUMN IF NOT EXISTS`` locked kafkalite_cluster and
    kafkalite_controller exclusively, in the order opposite to the
    controller's write, and PostgreSQL failed one of them as a deadlock
    (the losing node's process ended with its workers)."""
    assert cluster_store.broker_ids(db, 1, 1) == [0]        # the schema, made once
    with psycopg.connect(db) as writer:                    # a metadata write under way
        writer.execute("UPDATE kafkalite_cluster SET metadata_offset = metadata_offset + 1 "
                       "WHERE id = 1")
        got = []
        t = threading.Thread(target=lambda: got.append(cluster_store.broker_ids(db, 2, 1)),
                             daemon=True)
        t.start()
        t.join(5)
        done = not t.is_alive()
        writer.rollback()
    t.join(10)
    assert done, "broker_ids waited for the controller's write to end"
    assert got == [[1]]


def test_the_schema_is_made_on_a_connection_whose_own_timeout_is_shorter(db):
    """A lease's first acquire makes the schema on its own connection,
    whose statements wait 2 s: on a fresh-clone suite run's loaded
    machine, a fresh database's first statements took longer and the
    acquire failed ("canceling statement due to statement timeout").
    Making the schema waits START_TIMEOUT_S whatever the connection's own
    timeout; here that is 1 ms, which every DDL statement passes; after
    it, the connection's own timeout is back."""
    conn = cluster_store.connect(db, 0.001, autocommit=True)
    try:
        assert cluster_store.create_schema(conn)
        assert conn.execute("SHOW statement_timeout").fetchone()[0] == "1ms"
        assert cluster_store.create_schema(conn)            # in place: reads only
    finally:
        conn.close()


def test_the_same_node_takes_its_lease_back_at_once(db):
    first = leases(db, 4, ttl_ms=60_000)
    assert first.acquire()
    again = leases(db, 4, ttl_ms=60_000)            # the node restarted
    assert again.acquire() and again.epoch == first.epoch + 1
    assert not first.renew() and first.lost         # the old incarnation is fenced
    again.close()
    assert leases(db, 5).acquire()                  # released: no wait for the expiry


def test_observers_hear_each_committed_change_and_nothing_else(db):
    watcher = MetadataWatcher(db)
    assert watcher.poll(1.0) is None                # connected: reload everything
    lease = leases(db, 1, ttl_ms=10_000)
    lease.acquire()
    store = PostgresMetadataStore(db, lease)
    store.create_topic("a", 1, {}, workers=1)
    store.create_topic("b", 1, {}, workers=1)
    got = watcher.poll(5.0)
    got += watcher.poll(0.5) if len(got) < 2 else []
    assert [n["topics"] for n in got] == [["a"], ["b"]]
    assert all(n["node"] == 1 and n["epoch"] == lease.epoch for n in got)
    other = PostgresMetadataStore(db, lease)
    store.delete_topic("a")
    with pytest.raises(errors.NotControllerError, match="no longer the one"):
        other.delete_topic("a")                     # already gone: a stale write
    assert "a" in other.topics                      # put back until it reloads
    assert [n["topics"] for n in watcher.poll(5.0)] == [["a"]]
    assert watcher.poll(0.5) == []                  # the refused write told nobody
    watcher.close()
    other.close()
    store.close()


def test_unreachable_postgresql_refuses_changes_and_keeps_memory_as_stored(own_pg):
    lease = ControllerLease(own_pg.dsn, 1, ttl_ms=30_000)
    lease.acquire()
    store = PostgresMetadataStore(own_pg.dsn, lease)
    store.create_topic("kept", 1, {}, workers=1)
    own_pg.halt()
    with pytest.raises(errors.KafkaStorageError, match="PostgreSQL"):
        store.create_topic("lost", 1, {}, workers=1)
    assert set(store.topics) == {"kept"}
    t0 = time.monotonic()                           # the next try fails at once
    with pytest.raises(errors.KafkaStorageError):
        store.create_topic("lost", 1, {}, workers=1)
    assert time.monotonic() - t0 < 0.5
    own_pg.resume()
    time.sleep(cluster_store.RETRY_BACKOFF_S)      # before it, the store does not try again
    assert lease.renew()
    store.create_topic("later", 1, {}, workers=1)
    store.reload()
    assert set(store.topics) == {"kept", "later"}
    store.close()
    lease.close()


# ---- a node --------------------------------------------------------------------------------


def _produce(server, topic, values, partitions):
    acked, failed = [], []
    p = Producer(server.config(acks="all", **{"enable.idempotence": True}))
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % partitions,
                  on_delivery=lambda e, m: (failed if e else acked).append(
                      e or (m.partition(), m.offset(), m.value())))
    p.flush(60)
    p.close()
    return acked, failed


def test_a_cluster_node_keeps_its_metadata_in_postgresql(db, nodes):
    s = nodes(db)
    admin = AdminClient(s.config())
    for f in admin.create_topics([NewTopic("events", 3, config={"retention.ms": "86400000"})]) \
            .values():
        f.result(30)
    acked, failed = _produce(s, "events", [b"v-%d" % i for i in range(300)], 3)
    assert not failed and len(acked) == 300
    s.stop()
    assert not os.path.exists(os.path.join(s.data_dir, "cluster-metadata.json"))
    with psycopg.connect(db) as c:
        assert c.execute("SELECT count(*) FROM kafkalite_partitions WHERE topic = 'events'") \
            .fetchone()[0] == 3
        assert c.execute("SELECT configs FROM kafkalite_topics WHERE name = 'events'") \
            .fetchone()[0] == {"retention.ms": "86400000"}
    s.start()
    report = check(History(acked=acked), read_log(s, "events", 3))
    assert report.ok, report


def test_a_second_node_joins_as_a_broker_node(db, nodes):
    first = nodes(db, node_id=1, lease_ms=1000)
    second = nodes(db, node_id=2, lease_ms=1000)
    assert second.info["role"] == "broker" and second.info["controller"] == 1
    assert second.info["bootstrap.servers"] == first.bootstrap
    assert [w["index"] for w in second.info["workers"]] == [2, 3]   # after node 1's 0, 1
    with psycopg.connect(db) as c:
        assert c.execute("SELECT broker_id, node_id FROM kafkalite_brokers ORDER BY 1") \
            .fetchall() == [(0, 1), (1, 1), (2, 2), (3, 2)]


def test_a_node_that_loses_its_lease_stops_being_the_controller(db, nodes):
    """Its supervisor stops (workers and all) and the node starts again,
    waiting to join the new controller as a broker node (which this one,
    not a real node, never publishes endpoints for); SIGTERM stops it."""
    s = nodes(db, node_id=1, lease_ms=1500)
    workers = s.worker_pids()
    with psycopg.connect(db) as c:                  # another controller takes over
        c.execute("UPDATE kafkalite_controller SET node_id = 9, epoch = epoch + 1, "
                  "endpoints = NULL, lease_until = now() + interval '60 seconds'")
    wait_for(lambda: "joins the new one" in s.output()
             and not any(pid_alive(p) for p in workers), timeout=15,
             what="the deposed controller's workers stopped")
    assert "lost the controller lease" in s.output()
    assert s.proc.poll() is None
    assert s.stop(timeout=10) == 0                  # and no worker outlived it


def test_a_node_lives_through_a_postgresql_restart(own_pg, nodes):
    """PostgreSQL stops (immediate, longer than the lease) while records
    are produced and a worker is killed: the data path goes on, metadata
    changes wait, the killed worker's partitions come back once
    PostgreSQL does, and nothing acknowledged is lost or reordered."""
    s = nodes(own_pg.dsn, lease_ms=1500)
    admin = AdminClient(s.config())
    for f in admin.create_topics([NewTopic("flow", 4)]).values():
        f.result(30)
    history, stop = History(), threading.Event()
    producer = Producer(s.config(acks="all", **{"enable.idempotence": True,
                                                 "delivery.timeout.ms": 60_000}))

    def write():
        seq = 0
        while not stop.is_set():
            value = b"w-%d" % seq
            try:
                producer.produce("flow", value, partition=seq % 4, on_delivery=lambda e, m, v=value:
                                 e is None and history.ack(m.partition(), m.offset(), v))
            except BufferError:
                producer.poll(0.05)
                continue
            seq += 1
            if seq % 20 == 0:
                producer.poll(0.01)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        wait_until(lambda: len(history.acked) >= 50, 30, "acknowledgements before the halt")
        own_pg.halt()
        acked_before = len(history.acked)
        wait_until(lambda: len(history.acked) > acked_before, 10,
                   "acknowledgements while PostgreSQL is away")     # records still go in
        # refused: KAFKA_STORAGE_ERROR while the lease lasts, NOT_CONTROLLER once
        # it ran out (on a loaded machine the answer can come after 1.5 s)
        with pytest.raises((errors.KafkaStorageError, errors.NotControllerError)) as refused:
            for f in admin.create_topics([NewTopic("during", 1)]).values():
                f.result(30)
        if isinstance(refused.value, errors.KafkaStorageError):
            assert "PostgreSQL" in str(refused.value)
        victim = s.worker_pid(0)
        os.kill(victim, signal.SIGKILL)
        time.sleep(2.5)                             # PostgreSQL away past the lease
        own_pg.resume()
        s.wait_for_worker_restart(0, victim, timeout=30)
        wait_for(lambda: _created(admin, "after"), timeout=30,
                 what="CreateTopics once PostgreSQL is back")
        mark = len(history.acked)
        wait_for(lambda: {p for p, _, _ in history.acked[mark:]} == {0, 1, 2, 3}, timeout=60,
                 what="acknowledgements on every partition again")
    finally:
        stop.set()
        writer.join(30)
        producer.flush(60)
        producer.close()
    report = check(history, read_log(s, "flow", 4))
    assert report.ok, report
    assert len(history.acked) > 100


def _created(admin, name) -> bool:
    try:
        for f in admin.create_topics([NewTopic(name, 1)]).values():
            f.result(10)
        return True
    except errors.TopicAlreadyExistsError:
        return True
    except errors.KafkaError:
        return False


class _SlowFirstAnswer(TcpRelay):
    """A relay to PostgreSQL that holds its first connection ``hold_s``
    before passing it on (the kernel has accepted it: the client waits for
    PostgreSQL's answer, as from a database slow to serve it); the others
    pass at once."""

    def __init__(self, upstream: tuple[str, int], hold_s: float):
        self.hold_s = hold_s
        super().__init__(upstream)

    def before_connect(self, n: int) -> None:
        if n == 0:
            self.closed.wait(self.hold_s)


def test_a_first_start_waits_for_a_postgresql_slow_to_answer(db, tmp_path):
    """The node's first call to PostgreSQL at start-up is answered after
    3 s (a proxy holds it): longer than the 2 s the node's other calls
    wait, which failed a fresh-clone suite run's cluster start ("connection
    timeout expired"). The node waits for it (START_TIMEOUT_S) and serves."""
    host_port, dbname = db.split("@", 1)[1].split("/", 1)
    host, port = host_port.rsplit(":", 1)
    relay = _SlowFirstAnswer((host, int(port)), 3.0)
    try:
        srv = ServerProcess(str(tmp_path / "node1"), workers=1, extra_args=[
            "--cluster", f"postgresql://postgres@127.0.0.1:{relay.port}/{dbname}",
            "--node-id", "1"])
        srv.start()
        try:
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            assert _created(admin, "after-a-slow-start")
        finally:
            srv.stop()
    finally:
        relay.close()


@pytest.mark.processes
@pytest.mark.parametrize("url, says", [
    ("notaurl", "[INVALID_CONFIG] cluster must be a postgresql:// URL"),
    ("postgresql://nobody@127.0.0.1:1/none", "[KAFKA_STORAGE_ERROR] cannot reach the cluster's "
                                             "PostgreSQL"),
])
def test_a_bad_or_unreachable_cluster_url_is_one_line_and_exit_1(tmp_path, url, says):
    import subprocess
    import sys
    from harness import child_env
    r = subprocess.run([sys.executable, "-m", "kafkalite", "server", "--data-dir",
                        str(tmp_path / "d"), "--port", "0", "--ingest-port", "0",
                        "--worker-base-port", "0", "--kafka-port", "0",
                        "--kafka-worker-base-port", "0", "--cluster", url],
                       capture_output=True, text=True, timeout=60, env=child_env())
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and says in r.stderr
