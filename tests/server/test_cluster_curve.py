"""CURVE between a cluster's nodes (issues 14 and 18): the controller's
control channel and relay open to the cluster's own key pair only.

Two nodes on this machine share a real PostgreSQL (tests/postgres.py) and
one server key pair (``kafkalite curve keygen``); node 1 takes the
controller lease, node 2's workers join it over CURVE. A topic replicated
across both nodes takes acks=all writes from the native client and from
confluent-kafka (whose Metadata a node-2 worker relays to node 1), and a
transaction (the partitions' leaders asking node 1's coordinator), and
reads them back, natively and with a read_committed confluent-kafka group.

Then strangers connect to the control channel and the relay the controller
published in PostgreSQL, as plain ZeroMQ DEALERs: one without CURVE, one
with a key pair of its own, one with a client key the native ports accept
(the authorized ``alice``). Each says "hello" as broker 77 of node 66 and
sends the relay a Metadata request and a CreateTopics as the broker
principal. None is registered (Metadata and DescribeCluster still list the
four brokers, the controller's log has no word of broker 77), no topic is
created, and the relay answers nothing -- while the same requests from a
DEALER holding the server's key pair are answered, so the silence is the
refusal, not a malformed probe.

The handshakes themselves are watched (a socket monitor): the server's key
pair succeeds, any other key fails authentication, no CURVE fails -- on
the cluster's control channel and relay, and on a single node's loopback
control channel, which its workers, started before the supervisor, join.

A node started without the cluster's key pair (none, or another) stops at
once with one readable line instead of starting workers that never join.

The nodes listen on 0.0.0.0; a cluster that does so without CURVE logs one
warning that its control channel and relay are open, these do not.

Last, node 1 is killed (-9): node 2 takes the controller lease and binds
its own control channel and relay under CURVE, its workers join them, node
1 started again joins as a broker node, and the replicated topic takes
acks=all writes again.
"""
from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest
import zmq
from zmq.utils.monitor import recv_monitor_message

from curve_helpers import keygen
from harness import ServerProcess
from postgres import PostgresServer, find_binaries
from replicas import create, state, wait_for

from kafkalite.client import AdminClient, Consumer, Producer, TopicPartition
from kafkalite.protocol import ApiKey, encode_request
from kafkalite.protocol.curve import load_keypair_file, secure_client
from kafkalite.server.controller import cluster_store
from kafkalite.server.network.relay import RESPONSE, decode_relay_reply, encode_relay_request

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

TIMEOUTS = ["--controller-lease-ms", "3000", "--broker-session-timeout-ms", "2000",
            "--replica-lag-time-max-ms", "2000"]
# listening beyond loopback, as a cluster's nodes do, reached at loopback here
EXPOSED = ["--host", "0.0.0.0", "--advertised-host", "127.0.0.1"]
OPEN_WARNING = "control channel and relay on"
ROGUE = 77              # the broker id the strangers claim
ROGUE_TOPIC = "planted-by-a-stranger"
# long enough for the controller's loop to have read and acted on a hello,
# and for a relayed request to be answered (the trusted probe's answers come
# within a few ms)
QUIET_S = 3.0


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-curve")
    keygen(root, "server")
    keygen(root / "authorized", "alice")
    keygen(root / "strangers", "mallory")
    return root


def node(keys, pg, n: int) -> ServerProcess:
    return ServerProcess(str(keys / f"node{n}"), workers=2, extra_args=[
        "--cluster", pg.dsn, "--node-id", str(n), *TIMEOUTS, *EXPOSED,
        "--log-level", "INFO",             # the controller logs every worker that joins
        "--native-curve-secret-key-file", str(keys / "server.key_secret"),
        "--native-curve-authorized-keys", str(keys / "authorized")])


@pytest.fixture(scope="module")
def two_nodes(keys):
    pg = PostgresServer().start()
    nodes = {}
    try:
        for n in (1, 2):
            nodes[n] = node(keys, pg, n).start()
        wait_for(lambda: len(brokers(nodes[1], keys)) == 4, what="both nodes' workers joined")
        yield pg, nodes
    finally:
        for s in reversed(list(nodes.values())):     # the controller (node 1) last
            s.stop()
            s.kill()
        pg.stop()


def client_config(s, keys, **extra) -> dict:
    return s.config(**{"curve.server.key": str(keys / "server.key"),
                       "curve.public.key": str(keys / "authorized" / "alice.key"),
                       "curve.secret.key": str(keys / "authorized" / "alice.key_secret")},
                    **extra)


class Keyed:
    """A node as tests/replicas.py's helpers take it, its native clients
    holding alice's keys."""

    def __init__(self, s, keys):
        self.s, self.keys = s, keys

    def config(self, **extra) -> dict:
        return client_config(self.s, self.keys, **extra)


def metadata(s, keys):
    admin = AdminClient(client_config(s, keys))
    try:
        return admin.list_topics(timeout=10)
    finally:
        admin.close()


def brokers(s, keys) -> set[int]:
    return set(metadata(s, keys).brokers)


def kafka_brokers(s) -> dict:
    """{broker id: "host:port"} as DescribeCluster over the Kafka protocol has it."""
    import confluent_kafka.admin as cka
    admin = cka.AdminClient({"bootstrap.servers": s.kafka_bootstrap})
    cluster = admin.describe_cluster(request_timeout=10).result(30)
    return {n.id: f"{n.host}:{n.port}" for n in cluster.nodes}


def test_a_topic_replicated_across_the_nodes_works_over_curve(keys, two_nodes):
    import confluent_kafka as ck
    pg, nodes = two_nodes
    c = nodes[1]
    with psycopg.connect(pg.dsn) as conn:
        node_of = dict(conn.execute("SELECT broker_id, node_id FROM kafkalite_brokers").fetchall())
    assert sorted(node_of.values()) == [1, 1, 2, 2]
    c_keys = Keyed(c, keys)
    create(c_keys, "across", partitions=2, rf=2, **{"min.insync.replicas": "2"})
    wait_for(lambda: all(len(isr) == 2 and leader >= 0
                         for leader, _, isr in state(c_keys, "across").values())
             and len(state(c_keys, "across")) == 2, what="a full ISR on both partitions")
    for leader, replicas, _ in state(c_keys, "across").values():
        assert {node_of[b] for b in replicas} == {1, 2}      # one replica on each node
    # one leader on each node: both nodes' workers serve and verify
    assert {node_of[leader] for leader, _, _ in state(c_keys, "across").values()} == {1, 2}

    p = Producer(client_config(c, keys, acks="all"))
    for i in range(20):
        p.produce("across", b"native-%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    p.close()
    # confluent-kafka bootstrapped at a node-2 worker: its Metadata is
    # relayed to node 1's relay, over CURVE
    node2_worker = next(addr for b, addr in kafka_brokers(c).items() if node_of.get(b) == 2)
    kp = ck.Producer({"bootstrap.servers": node2_worker, "acks": "all"})
    for i in range(20):
        kp.produce("across", b"kafka-%d" % i, partition=i % 2)
    assert kp.flush(30) == 0
    # a transaction: each partition's leader asks the transaction
    # coordinator (node 1's native port, over CURVE) before its first
    # transactional batch goes in
    tp = ck.Producer({"bootstrap.servers": node2_worker, "transactional.id": "across-tx"})
    tp.init_transactions(30)
    tp.begin_transaction()
    for i in range(10):
        tp.produce("across", b"txn-%d" % i, partition=i % 2)
    tp.commit_transaction(30)

    want = sorted([b"native-%d" % i for i in range(20)] + [b"kafka-%d" % i for i in range(20)]
                  + [b"txn-%d" % i for i in range(10)])
    cons = Consumer(client_config(c, keys, **{"auto.offset.reset": "earliest"}))
    cons.assign([TopicPartition("across", p, 0) for p in range(2)])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(want) and time.monotonic() < deadline:
        got += [m.value() for m in cons.consume(100, 0.5) if m.error() is None]
    cons.close()
    assert sorted(got) == want
    committed = ck.Consumer({"bootstrap.servers": node2_worker, "group.id": "across",
                             "auto.offset.reset": "earliest",
                             "isolation.level": "read_committed"})
    committed.subscribe(["across"])
    got, deadline = [], time.monotonic() + 30
    while len(got) < len(want) and time.monotonic() < deadline:
        got += [m.value() for m in committed.consume(100, 0.5) if m.error() is None]
    committed.close()
    assert sorted(got) == want


def dealer(ctx, endpoint: str, keypair: tuple[bytes, bytes] | None, server_key: bytes,
           identity: bytes | None = None):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        s.setsockopt(zmq.IDENTITY, identity)
    if keypair is not None:
        secure_client(s, server_key, *keypair)
    s.connect(endpoint)
    return s


def relay_probe(sock, refused_ok: bool = False) -> None:
    """A Metadata request and a CreateTopics, both as the broker principal.
    ``refused_ok``: a send that cannot go out (the refused handshake dropped
    the connection, so the socket has no peer for a moment) is a refusal."""
    metadata = encode_request(ApiKey.METADATA, 1, 1, "probe", {"topics": None})
    create_topics = encode_request(ApiKey.CREATE_TOPICS, 0, 2, "probe", {
        "topics": [{"name": ROGUE_TOPIC, "num_partitions": 1, "replication_factor": 1}],
        "timeout_ms": 5000})
    for relay_id, frame in ((1, metadata), (2, create_topics)):
        try:
            sock.send_multipart([encode_relay_request(relay_id, "203.0.113.9:4444",
                                                      "User:kafkalite-broker"), frame],
                                flags=zmq.NOBLOCK)
        except zmq.Again:
            if not refused_ok:
                raise


def replies(sock, within_s: float) -> list:
    """The relay's answers to the two probes, waiting ``within_s`` at most
    (0: those already there)."""
    out, deadline = [], time.monotonic() + within_s
    while len(out) < 2:
        if sock.poll(100 if time.monotonic() < deadline else 0):
            out.append(decode_relay_reply(sock.recv_multipart()[0]))
        elif time.monotonic() >= deadline:
            break
    return out


def test_strangers_are_refused_by_the_control_channel_and_the_relay(keys, two_nodes):
    pg, nodes = two_nodes
    c = nodes[1]
    endpoints = cluster_store.read_controller(pg.dsn)["endpoints"]
    server_key = load_keypair_file(str(keys / "server.key"), need_secret=False)[0]
    strangers = {
        "without CURVE": None,
        "with a key pair of its own": load_keypair_file(
            str(keys / "strangers" / "mallory.key_secret")),
        "with a client key the native ports accept": load_keypair_file(
            str(keys / "authorized" / "alice.key_secret")),
    }
    before, kafka_before = brokers(c, keys), kafka_brokers(c)
    assert len(before) == 4 and ROGUE not in kafka_before
    ctx = zmq.Context()
    try:
        # the three at once, then QUIET_S of silence for all of them
        sockets = {}
        for who, keypair in strangers.items():
            # the identity a worker has: the controller addresses broker 77 by it
            control = dealer(ctx, endpoints["control"], keypair, server_key,
                             identity=b"worker-%d" % ROGUE)
            try:
                control.send_json({"type": "hello", "worker": ROGUE, "pid": 1, "port": 1,
                                   "kafka_port": 1, "kafka_listeners": {},
                                   "host": "rogue.example", "node": 66}, zmq.NOBLOCK)
            except zmq.Again:
                pass            # refused already: the connection is gone
            relay = dealer(ctx, endpoints["relay"], keypair, server_key)
            relay_probe(relay, refused_ok=True)
            sockets[who] = control, relay
        time.sleep(QUIET_S)     # nothing may answer within it
        for who, (control, relay) in sockets.items():
            answered = replies(relay, 0)
            assert answered == [], f"the relay answered a stranger {who}: {answered}"
            # a registered broker is sent its assignment at once
            assert not control.poll(0), (f"the controller wrote to a stranger {who}: "
                                         f"{control.recv()[:200]!r}")
            control.close()
            relay.close()
        assert brokers(c, keys) == before, "a stranger joined"
        assert kafka_brokers(c) == kafka_before, "a stranger joined"
        assert f"worker {ROGUE} " not in c.output()
        # the first refused key is logged (the next ones within 10 s are not)
        assert "refused a CURVE connection to the brokers' own channels" in c.output()
        assert "rogue.example" not in c.output()
        assert ROGUE_TOPIC not in metadata(c, keys).topics

        # the same relay probe with the cluster's key pair is answered
        trusted = dealer(ctx, endpoints["relay"],
                         load_keypair_file(str(keys / "server.key_secret")), server_key)
        relay_probe(trusted)
        answered = replies(trusted, 15.0)      # CreateTopics answers once the topic is made
        trusted.close()
        assert sorted(r[0] for r in answered) == [1, 2]
        assert all(r[1] == RESPONSE for r in answered), answered
        wait_for(lambda: ROGUE_TOPIC in metadata(c, keys).topics,
                 what="the trusted probe's topic")
    finally:
        ctx.destroy(linger=0)     # sockets left open by a failed assertion too


def test_an_open_cluster_beyond_loopback_says_so_once(keys, two_nodes):
    pg, nodes = two_nodes
    for s in nodes.values():                    # with CURVE: nothing to warn of
        assert OPEN_WARNING not in s.output()
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE DATABASE open_cluster")
    dsn = pg.dsn.rsplit("/", 1)[0] + "/open_cluster"
    s = ServerProcess(str(keys / "open"), workers=1, extra_args=[
        "--cluster", dsn, "--node-id", "1", *TIMEOUTS, *EXPOSED]).start()
    try:
        wait_for(lambda: s.output().count(OPEN_WARNING) >= 1, what="the warning")
        time.sleep(1.0)         # and not again a moment later
        assert s.output().count(OPEN_WARNING) == 1, s.output()
        assert "kafkalite curve keygen" in s.output()
        # a node with CURVE cannot join this open cluster: it says so and stops
        keyed = ServerProcess(str(keys / "open-keyed"), workers=1, extra_args=[
            "--cluster", dsn, "--node-id", "2", *TIMEOUTS,
            "--native-curve-secret-key-file", str(keys / "server.key_secret")])
        with pytest.raises(RuntimeError, match="server exited with 1") as refused:
            keyed.start(timeout=60)
        assert "the controller (node 1) runs without CURVE" in str(refused.value)
    finally:
        s.stop()
        s.kill()


@pytest.mark.parametrize("key", ["none", "another"])
def test_a_node_without_the_clusters_key_pair_stops_with_a_readable_error(keys, two_nodes,
                                                                          key):
    pg, _ = two_nodes
    curve = [] if key == "none" else [
        "--native-curve-secret-key-file", str(keys / "strangers" / "mallory.key_secret")]
    s = ServerProcess(str(keys / f"node3-{key}"), workers=1, extra_args=[
        "--cluster", pg.dsn, "--node-id", "3", *TIMEOUTS, *curve])
    with pytest.raises(RuntimeError, match="server exited with 1"):
        s.start(timeout=60)
    s.stop()
    lines = [line for line in s.output().splitlines() if line.startswith("kafkalite server:")]
    assert len(lines) == 1, s.output()
    assert "every node of a cluster needs the same CURVE settings and key pair" in lines[0]
    assert ("runs CURVE between the nodes" if key == "none" else "is not the cluster's") \
        in lines[0], lines[0]
    assert "Traceback" not in s.output()


HANDSHAKE_ENDS = {zmq.EVENT_HANDSHAKE_SUCCEEDED: "succeeded",
                  zmq.EVENT_HANDSHAKE_FAILED_AUTH: "refused",
                  zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL: "failed",
                  zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL: "failed"}


def handshake(ctx, endpoint: str, keypair, server_key: bytes) -> str:
    """How a DEALER's first handshake with ``endpoint`` ends."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if keypair is not None:
        secure_client(sock, server_key, *keypair)
    monitor = sock.get_monitor_socket()
    sock.connect(endpoint)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if monitor.poll(200):
                event = recv_monitor_message(monitor)["event"]
                if event in HANDSHAKE_ENDS:
                    return HANDSHAKE_ENDS[event]
        return "no end"
    finally:
        sock.disable_monitor()
        monitor.close()
        sock.close()


def expect_handshakes(endpoint: str, keys) -> None:
    server_key = load_keypair_file(str(keys / "server.key"), need_secret=False)[0]
    ctx = zmq.Context()
    try:
        got = {who: handshake(ctx, endpoint, keypair, server_key) for who, keypair in (
            ("server", load_keypair_file(str(keys / "server.key_secret"))),
            ("alice", load_keypair_file(str(keys / "authorized" / "alice.key_secret"))),
            ("mallory", load_keypair_file(str(keys / "strangers" / "mallory.key_secret"))),
            ("plain", None))}
    finally:
        ctx.destroy(linger=0)
    assert got == {"server": "succeeded", "alice": "refused", "mallory": "refused",
                   "plain": "failed"}, (endpoint, got)


def test_the_cluster_channels_handshake_with_the_server_key_only(keys, two_nodes):
    pg, _ = two_nodes
    endpoints = cluster_store.read_controller(pg.dsn)["endpoints"]
    expect_handshakes(endpoints["control"], keys)
    expect_handshakes(endpoints["relay"], keys)


@pytest.mark.processes
def test_a_single_nodes_control_channel_handshakes_with_the_server_key_only(keys):
    s = ServerProcess(str(keys / "single"), workers=1, extra_args=[
        "--native-curve-secret-key-file", str(keys / "server.key_secret"),
        "--native-curve-authorized-keys", str(keys / "authorized")]).start()
    try:
        # the endpoint its worker was started with (processes.start_early)
        with open(f"/proc/{s.info['workers'][0]['pid']}/cmdline") as f:
            argv = f.read().split("\0")
        expect_handshakes(argv[argv.index("--control") + 1], keys)
    finally:
        s.stop()
        s.kill()


def test_after_a_controller_failover_the_nodes_join_over_curve(keys, two_nodes):
    """Last in the module: it kills the controller node."""
    pg, nodes = two_nodes
    first = cluster_store.read_controller(pg.dsn)
    assert first["node_id"] == 1
    workers = [w["pid"] for w in nodes[1].info["workers"]]
    os.kill(nodes[1].proc.pid, signal.SIGKILL)
    nodes[1].proc.wait(10)
    wait_for(lambda: not any(os.path.exists(f"/proc/{pid}") and open(
        f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z" for pid in workers),
             timeout=15, what="node 1's workers gone with it")
    taken = wait_for(lambda: (lambda c: c if c and c["live"] and c["node_id"] == 2
                              and c["epoch"] != first["epoch"] and c["endpoints"] else None)(
        cluster_store.read_controller(pg.dsn)), timeout=60, what="node 2 taking the lease")
    new = nodes[2]
    wait_for(lambda: os.path.exists(os.path.join(new.data_dir, "server.json"))
             and new.refresh().get("role") != "broker", timeout=60,
             what="node 2's server.json as the controller")
    wait_for(lambda: len(brokers(new, keys)) == 2, timeout=60,
             what="node 2's workers joined their new controller")
    expect_handshakes(taken["endpoints"]["control"], keys)
    expect_handshakes(taken["endpoints"]["relay"], keys)

    nodes[1] = node(keys, pg, 1).start()
    assert nodes[1].info["role"] == "broker"
    wait_for(lambda: len(brokers(new, keys)) == 4, timeout=60,
             what="node 1's workers joined node 2's controller")
    keyed = Keyed(new, keys)
    # both partitions listed (the new controller's first answers listed one
    # only, once under a loaded run), each led, each ISR full
    wait_for(lambda: (lambda st: len(st) == 2 and all(len(isr) == 2 and leader >= 0
                                                      for leader, _, isr in st.values()))(
        state(keyed, "across")), timeout=60, what="node 1 back in the ISRs")
    p = Producer(client_config(new, keys, acks="all"))
    for i in range(10):
        p.produce("across", b"after-%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    p.close()
