"""Share groups across a cluster's nodes: the share-partition state follows
the partition to another node, and outlives the controller's node.

Three nodes sharing a real PostgreSQL (tests/postgres.py), one worker each;
a share group reads a topic whose one partition has a replica on every
node. The share coordinator (the controller's supervisor) keeps the state in
``__share_group_state``, copied to PostgreSQL. Faults are kill -9 of whole
nodes: first the partition leader's node (a leader on another node reads
the state from the coordinator), then the controller's node (another node
takes the lease and restores the state from PostgreSQL). The checker is
test_share_groups.exactly_once, which that file shows catching a server
that forgets the state (the planted "amnesia" fault).
"""
import os
import time

import pytest

from harness import ServerProcess
from postgres import PostgresServer, find_binaries
from replicas import create, state, wait_for
from test_cluster_nodes import (TIMEOUTS, controller_of, in_parallel, kill_node, live_brokers,
                                node_of)
from test_share_groups import Acks, exactly_once
from kafkalite.client import AdminClient, Producer, ShareConsumer

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")
GROUP = "cluster-queue"


@pytest.fixture
def cluster(tmp_path):
    pg = PostgresServer().start()
    config = tmp_path / "share.toml"
    config.write_text('share_auto_offset_reset = "earliest"\n')
    nodes = {}
    try:
        for n in (1, 2, 3):
            nodes[n] = ServerProcess(str(tmp_path / f"node{n}"), workers=1, extra_args=[
                "--cluster", pg.dsn, "--node-id", str(n), "--config", str(config),
                *TIMEOUTS])
        nodes[1].start()        # the controller first; its broker nodes together
        in_parallel(nodes[2].start, nodes[3].start)
        wait_for(lambda: live_brokers(nodes[1]) == 3, what="every node's worker registered")
        yield pg, nodes
    finally:
        for s in reversed(list(nodes.values())):     # the controller (node 1) last
            if s.proc is not None and s.proc.poll() is None:
                s.stop()
            s.kill()
        pg.stop()


def produce(node, first, n):
    p = Producer(node.config(acks="all"))
    for i in range(first, first + n):
        p.produce("sq", value=b"%d" % i, partition=0)
    assert p.flush(30) == 0
    p.close()
    return [(0, o) for o in range(first, first + n)]


def accept(node, acks, until, delivered, timeout=60.0):
    """A member that accepts what it gets until ``acks`` has ``until`` accepted."""
    c = ShareConsumer(node.config(**{"group.id": GROUP, "on_commit": acks,
                                     "fetch.max.wait.ms": 100}))
    c.subscribe(["sq"])
    deadline = time.monotonic() + timeout
    try:
        while len(acks.accepted) < until and time.monotonic() < deadline:
            delivered += [(m.partition(), m.offset()) for m in c.consume(20, 0.2)]
            c.commit_sync()
    finally:
        c.close()


def start_offset(node) -> int:
    admin = AdminClient(node.config())
    try:
        offsets = admin.list_share_group_offsets({GROUP: None})[GROUP].result()
        return {tp.partition: offset for tp, offset in offsets.items()}[0]
    finally:
        admin.close()


def test_share_state_follows_the_partition_and_outlives_the_controller(cluster):
    pg, nodes = cluster
    broker_of = {n: b for b, n in node_of(pg.dsn).items()}
    # the partition's leader on node 2; the controller (and coordinator) is node 1
    create(nodes[1], "sq", assignments=[[broker_of[2], broker_of[3], broker_of[1]]],
           **{"min.insync.replicas": "2"})
    wait_for(lambda: (lambda st: st[0][0] == broker_of[2] and len(st[0][2]) == 3)(
        state(nodes[1], "sq")), what="node 2 leading with a full ISR")
    produced = produce(nodes[1], 0, 200)
    acks = Acks()
    delivered = []
    accept(nodes[1], acks, 80, delivered)
    assert len(acks.accepted) >= 80
    accepted_before = set(acks.accepted)

    # the leader's node dies: another node leads and reads the state
    kill_node(nodes[2])
    wait_for(lambda: state(nodes[1], "sq")[0][0] in (broker_of[1], broker_of[3]), timeout=60,
             what="the partition led on a live node")
    after = []
    accept(nodes[3], acks, len(produced), after)
    lost, duplicated = exactly_once(set(produced) - set(acks.in_doubt), acks.accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    assert not accepted_before & set(after)
    assert start_offset(nodes[3]) == 200

    # 50 more, 20 of them accepted; then the controller's node dies
    produced += produce(nodes[3], 200, 50)
    accept(nodes[3], acks, 220, after)
    accepted_before = set(acks.accepted)
    kill_node(nodes[1])
    wait_for(lambda: (lambda ctl: ctl and ctl["live"] and ctl["node_id"] == 3)(
        controller_of(pg.dsn)), timeout=60, what="node 3 taking the controller lease")
    wait_for(lambda: os.path.exists(os.path.join(nodes[3].data_dir, "server.json"))
             and nodes[3].refresh().get("role") != "broker", timeout=60,
             what="node 3 serving as the controller")
    wait_for(lambda: state(nodes[3], "sq")[0][0] == broker_of[3], timeout=60,
             what="node 3 leading the partition")
    # its share coordinator restored the state from PostgreSQL
    assert start_offset(nodes[3]) >= 220
    later = []
    accept(nodes[3], acks, len(produced), later)
    lost, duplicated = exactly_once(set(produced) - set(acks.in_doubt), acks.accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    assert not accepted_before & set(later)
