"""Several nodes in one cluster (``--cluster DSN --node-id N``): three
nodes on this machine, each with its own data directory and ports, sharing
a real PostgreSQL (tests/postgres.py). Node 1 takes the controller lease;
nodes 2 and 3 run as its broker nodes.

Faults are real: SIGKILL of a whole node (its process; its workers follow
their parent out), and of the controller node. Every run that claims no
loss is judged by the Jepsen-style checker (tests/jepsen.py), which
tests/server/test_replication.py shows catching a planted loss.

``KAFKALITE_CLUSTER_KILLS`` sets how many node kills the long run makes
(default 2; 20 for a soak).

One PostgreSQL for the module, a fresh database (a cluster of its own) per
test.
"""
import os
import shutil
import signal
import subprocess
import threading
import time

import psycopg
import pytest

from harness import ServerProcess, wait_until
from jepsen import History, check
from postgres import find_binaries, new_database
from replicas import Traffic, create, read_log, state, wait_for
from kafkalite.client import Consumer, Producer
from soak import setting

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

KILLS = setting("KAFKALITE_CLUSTER_KILLS")
TIMEOUTS = ["--controller-lease-ms", "3000", "--broker-session-timeout-ms", "2000",
            "--replica-lag-time-max-ms", "2000"]


@pytest.fixture
def pg(pg_server):
    """A database of the test's own on the module's PostgreSQL: a cluster
    of its own."""
    return new_database(pg_server)


@pytest.fixture
def three_nodes(pg, tmp_path):
    nodes = {}

    def start(node_id, workers=2):
        s = ServerProcess(str(tmp_path / f"node{node_id}"), workers=workers,
                          extra_args=["--cluster", pg.dsn, "--node-id", str(node_id), *TIMEOUTS])
        nodes[node_id] = s
        return s.start()
    start(1)                    # the controller first; its broker nodes together
    in_parallel(lambda: start(2), lambda: start(3))
    wait_for(lambda: live_brokers(nodes[1]) == 6, what="every node's workers registered")
    yield nodes, start
    # the controller (node 1) last: stopped first, it would leave the others
    # taking over from each other while they stop
    in_parallel(*[s.stop for n, s in nodes.items()
                  if n != 1 and s.proc is not None and s.proc.poll() is None])
    if nodes[1].proc is not None and nodes[1].proc.poll() is None:
        nodes[1].stop()


def read_log_settled(server_of, topic, partitions, timeout=60.0) -> dict:
    """replicas.read_log, asked again while a leader answers a retriable
    error (NOT_LEADER_OR_FOLLOWER: a leadership moving, say back to its
    preferred replica, just as the reader looks); ``server_of()`` gives the
    node to ask each time."""
    from kafkalite.errors import KafkaError

    def attempt():
        try:
            return read_log(server_of(), topic, partitions)
        except KafkaError as exc:
            if not exc.retriable:
                raise
            return None
    return wait_for(attempt, timeout=timeout, what=f"the whole of {topic} readable")


def in_parallel(*calls) -> None:
    """Run ``calls`` at once, each on a thread; the first exception raised."""
    errors_ = []

    def run(call):
        try:
            call()
        except BaseException as exc:      # noqa: BLE001 (re-raised below)
            errors_.append(exc)
    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors_:
        raise errors_[0]


def live_brokers(c) -> int:
    from kafkalite.client import AdminClient
    admin = AdminClient(c.config())
    try:
        return len(admin.list_topics(timeout=10).brokers)
    finally:
        admin.close()


def node_of(dsn) -> dict:
    with psycopg.connect(dsn) as c:
        return dict(c.execute("SELECT broker_id, node_id FROM kafkalite_brokers").fetchall())


def full_isr(c, topic, partitions, rf=3):
    st = state(c, topic)
    return len(st) == partitions and all(len(isr) == rf and leader >= 0
                                         for leader, _, isr in st.values())


def produce_acked(c, topic, prefix, n=30):
    """``n`` records ``<prefix>-<i>`` over 3 partitions, acks=all, all acknowledged."""
    p = Producer(c.config(acks="all"))
    for i in range(n):
        p.produce(topic, b"%s-%d" % (prefix.encode(), i), partition=i % 3)
    assert p.flush(30) == 0
    p.close()


def consume_in_group(c, topic, group, n=30, commit=False) -> list:
    """The values a member of ``group`` reads (up to ``n``, 30 s at most),
    its offsets committed at the end when ``commit``."""
    g = Consumer(c.config(**{"group.id": group, "auto.offset.reset": "earliest",
                              "enable.auto.commit": False}))
    g.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        got += [m.value() for m in g.consume(100, 0.5) if m.error() is None]
    if commit:
        g.commit(asynchronous=False)
    g.close()
    return got


def kill_node(s) -> None:
    os.kill(s.proc.pid, signal.SIGKILL)
    s.proc.wait(10)
    for w in s.info["workers"]:           # they leave when their parent is gone
        wait_for(lambda pid=w["pid"]: not _alive(pid), timeout=15,
                 what=f"worker {w['pid']} gone")


def _alive(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_replicas_sit_on_distinct_nodes(pg, three_nodes):
    nodes, _ = three_nodes
    c = nodes[1]
    assert nodes[2].info["role"] == "broker" and nodes[3].info["role"] == "broker"
    create(c, "spread", partitions=6, rf=3)
    where = node_of(pg.dsn)
    assert sorted(set(where.values())) == [1, 2, 3] and len(where) == 6
    for leader, replicas, isr in state(c, "spread").values():
        assert len({where[b] for b in replicas}) == 3, (replicas, where)
    leaders = {where[leader] for leader, _, _ in state(c, "spread").values()}
    assert leaders == {1, 2, 3}                       # leaderships spread over the nodes


@pytest.mark.slow
def test_no_acknowledged_record_is_lost_through_node_kills(pg, three_nodes):
    nodes, start = three_nodes
    c = nodes[1]
    partitions = 6
    create(c, "jep", partitions=partitions, rf=3, **{"min.insync.replicas": "2"})
    wait_for(lambda: full_isr(c, "jep", partitions), what="a full ISR")
    history = History()
    traffic = Traffic(c, "jep", partitions, history)
    watch = traffic.watch
    failovers = []
    where = node_of(pg.dsn)
    try:
        for k in range(KILLS):
            # traffic acknowledged since the last round, before the next kill
            mark = len(history.acked)
            wait_until(lambda: len(history.acked) >= mark + 300, 30,
                       "acknowledgements before the kill")
            victim = 2 + k % 2
            led = [p for p, (leader, _, _) in state(c, "jep").items()
                   if where.get(leader) == victim]
            killed_at = time.monotonic()
            for p in led:
                watch[p] = (killed_at, None)
            kill_node(nodes[victim])
            wait_for(lambda: all(watch[p][1] is not None for p in led), timeout=30,
                     what=f"acknowledgements on node {victim}'s partitions {led} after the kill")
            failovers += [watch.pop(p)[1] - killed_at for p in led]
            start(victim)
            wait_for(lambda: full_isr(c, "jep", partitions), timeout=60,
                     what=f"node {victim} back in every ISR")
    finally:
        traffic.stop()
    report = check(history, read_log_settled(lambda: c, "jep", partitions))
    assert report.ok, report
    assert len(history.acked) > 1000
    assert failovers and max(failovers) < 15, failovers


def test_the_controller_node_comes_back_and_its_broker_nodes_rejoin(pg, three_nodes):
    nodes, start = three_nodes
    c = nodes[1]
    create(c, "ctl", partitions=3, rf=3, **{"min.insync.replicas": "2"})
    wait_for(lambda: full_isr(c, "ctl", 3), what="a full ISR")
    produce_acked(c, "ctl", "a")
    assert len(consume_in_group(c, "ctl", "g", commit=True)) == 30
    workers = {n: [w["pid"] for w in nodes[n].refresh()["workers"]] for n in (2, 3)}
    kill_node(c)
    start(1)
    c = nodes[1]
    wait_for(lambda: live_brokers(c) == 6, timeout=60, what="every node's workers back")
    wait_for(lambda: full_isr(c, "ctl", 3), timeout=60,
             what="every broker node's workers back with the restarted controller")
    # the broker nodes' workers joined the new controller as they were:
    # none was restarted to introduce itself (broker_node.py)
    assert {n: [w["pid"] for w in nodes[n].refresh()["workers"]] for n in (2, 3)} == workers
    produce_acked(c, "ctl", "b")
    again = consume_in_group(c, "ctl", "g")
    assert sorted(again) == sorted(b"b-%d" % i for i in range(30))   # resumed at its commit


def test_kafka_clients_produce_and_consume_across_the_nodes(pg, three_nodes):
    import asyncio

    import confluent_kafka as ck
    nodes, _ = three_nodes
    c = nodes[1]
    create(c, "kc", partitions=3, rf=3, **{"min.insync.replicas": "2"})
    wait_for(lambda: full_isr(c, "kc", 3), what="a full ISR")
    p = ck.Producer({"bootstrap.servers": c.kafka_bootstrap, "acks": "all",
                     "enable.idempotence": True})
    for i in range(90):
        p.produce("kc", b"ck-%d" % i, partition=i % 3)
    assert p.flush(30) == 0
    want = sorted(b"ck-%d" % i for i in range(90))
    # every partition's leader on its own node: the clients talk to all three
    where = node_of(pg.dsn)
    assert {where[leader] for leader, _, _ in state(c, "kc").values()} == {1, 2, 3}

    def confluent():
        cons = ck.Consumer({"bootstrap.servers": c.kafka_bootstrap, "group.id": "ck",
                            "auto.offset.reset": "earliest"})
        cons.subscribe(["kc"])
        out, deadline = [], time.monotonic() + 30
        while len(out) < 90 and time.monotonic() < deadline:
            out += [m.value() for m in cons.consume(100, 0.5) if m.error() is None]
        cons.close()
        return sorted(out)

    def kafka_python():
        from kafka import KafkaConsumer
        cons = KafkaConsumer("kc", bootstrap_servers=c.kafka_bootstrap,
                             auto_offset_reset="earliest")
        out, deadline = [], time.monotonic() + 30
        while len(out) < 90 and time.monotonic() < deadline:
            out += [m.value for msgs in cons.poll(timeout_ms=500).values() for m in msgs]
        cons.close()
        return sorted(out)

    def aiokafka():
        from aiokafka import AIOKafkaConsumer

        async def go():
            cons = AIOKafkaConsumer("kc", bootstrap_servers=c.kafka_bootstrap,
                                    auto_offset_reset="earliest")
            await cons.start()
            out, deadline = [], time.monotonic() + 30
            try:
                while len(out) < 90 and time.monotonic() < deadline:
                    for msgs in (await cons.getmany(timeout_ms=500)).values():
                        out += [m.value for m in msgs]
            finally:
                await cons.stop()
            return sorted(out)
        return asyncio.run(go())

    assert confluent() == want
    assert kafka_python() == want
    assert aiokafka() == want
    kcat = shutil.which("kcat")
    if kcat:
        r = subprocess.run([kcat, "-b", c.kafka_bootstrap, "-C", "-t", "kc", "-e", "-q",
                            "-f", "%s\\n"], capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert sorted(r.stdout.split()) == want


def test_named_listeners_across_the_nodes(pg, tmp_path):
    """Two nodes with two Kafka listeners each (listeners.py): a client of
    listener B on the controller node is told every broker's B endpoint,
    the other node's workers' too (their hello carries them), at B's
    advertised host, and produces and consumes through them."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic
    args = ["--listeners", "A://127.0.0.1:0,B://127.0.0.1:0",
            "--listener-security-protocol-map", "A:PLAINTEXT,B:PLAINTEXT",
            "--advertised-listeners", "B://localhost:0"]
    nodes = [ServerProcess(str(tmp_path / f"node{n}"), workers=1, extra_args=[
        "--cluster", pg.dsn, "--node-id", str(n), *TIMEOUTS, *args]) for n in (1, 2)]
    try:
        for s in nodes:
            s.start()
        wait_for(lambda: live_brokers(nodes[0]) == 2, what="both nodes' workers registered")
        listeners = nodes[0].info["kafka_listeners"]
        seen = {}
        for name in ("A", "B"):
            admin = AdminClient({"bootstrap.servers": listeners[name]["bootstrap.servers"]})
            md = admin.list_topics(timeout=20)
            seen[name] = {b.id: (b.host, b.port) for b in md.brokers.values()}
        # the two nodes' workers (no supervisor: it holds no replica)
        assert set(seen["A"]) == set(seen["B"]) and len(seen["A"]) == 2
        assert {h for h, _ in seen["B"].values()} == {"localhost"}
        assert {h for h, _ in seen["A"].values()} == {"127.0.0.1"}
        assert not {p for _, p in seen["A"].values()} & {p for _, p in seen["B"].values()}
        remote = [b for b, n in node_of(pg.dsn).items() if n == 2]
        assert remote and all(b in seen["B"] for b in remote)
        admin.create_topics([NewTopic("named", num_partitions=2, replication_factor=2)])[
            "named"].result(20)
        wait_for(lambda: full_isr(nodes[0], "named", 2, rf=2), what="the topic's ISR full")
        p = ck.Producer({"bootstrap.servers": listeners["B"]["bootstrap.servers"], "acks": "all"})
        want = sorted(b"n-%03d" % i for i in range(100))
        for i, v in enumerate(want):
            p.produce("named", v, partition=i % 2)
        assert p.flush(30) == 0
        c = ck.Consumer({"bootstrap.servers": listeners["B"]["bootstrap.servers"],
                         "group.id": "named", "auto.offset.reset": "earliest"})
        got, deadline = [], time.monotonic() + 30
        try:
            c.subscribe(["named"])
            while len(got) < 100 and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
        finally:
            c.close()
        assert sorted(got) == want
    finally:
        for s in reversed(nodes):
            if s.proc is not None and s.proc.poll() is None:
                s.stop()



def controller_of(dsn) -> dict | None:
    from kafkalite.server.controller import cluster_store
    return cluster_store.read_controller(dsn)


def test_the_controller_fails_over_to_another_node(pg, three_nodes):
    """kill -9 of the controller node, which is not started again: once its
    lease expires a broker node takes it over with its workers as they run,
    moves the dead node's leaderships to live in-sync replicas, and serves producers, consumers
    and the group's committed offsets (which the coordinators' logs keep in
    PostgreSQL too). The dead node, started later, joins as a broker node."""
    nodes, start = three_nodes
    c = nodes[1]
    create(c, "fo", partitions=3, rf=3, **{"min.insync.replicas": "2"})
    wait_for(lambda: full_isr(c, "fo", 3), what="a full ISR")
    produce_acked(c, "fo", "a")
    assert len(consume_in_group(c, "fo", "fo", commit=True)) == 30
    dead = {b for b, n in node_of(pg.dsn).items() if n == 1}
    workers = {n: [w["pid"] for w in nodes[n].refresh()["workers"]] for n in (2, 3)}
    kill_node(c)
    taken = wait_for(lambda: (lambda ctl: ctl if ctl and ctl["live"] and ctl["node_id"] != 1
                              and ctl["endpoints"] else None)(controller_of(pg.dsn)),
                     timeout=60, what="another node taking the controller lease")
    new = nodes[taken["node_id"]]
    wait_for(lambda: os.path.exists(os.path.join(new.data_dir, "server.json"))
             and new.refresh().get("role") != "broker", timeout=60,
             what="the new controller's server.json")
    wait_for(lambda: live_brokers(new) == 4, timeout=60, what="the live nodes' workers joined")
    # neither the node that took over nor the other broker node restarted
    # its workers: they joined the new controller as they were
    # (broker_node.py hands its workers to the supervisor it starts)
    assert {n: [w["pid"] for w in nodes[n].refresh()["workers"]] for n in (2, 3)} == workers
    wait_for(lambda: all(leader >= 0 and leader not in dead
                         for leader, _, _ in state(new, "fo").values()), timeout=60,
             what="the dead node's leaderships moved")
    produce_acked(new, "fo", "b")
    again = consume_in_group(new, "fo", "fo")
    assert sorted(again) == sorted(b"b-%d" % i for i in range(30))   # resumed at its commit
    old = start(1)
    assert old.info["role"] == "broker"
    wait_for(lambda: live_brokers(new) == 6, timeout=60, what="the old node's workers back")
    wait_for(lambda: full_isr(new, "fo", 3), timeout=60, what="the old node back in the ISRs")


def _registry(url: str, path: str, body: dict | None = None):
    """(status, answer) of the schema registry's REST API."""
    import json
    import urllib.error
    import urllib.request
    request = urllib.request.Request(
        url + path, method="POST" if body is not None else "GET",
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_schema_registry_moves_with_the_controller_and_loses_nothing(pg, three_nodes):
    """The schema registry is served by the controller node; kill -9 of that
    node moves it with the lease. The new controller's registry, rebuilt
    from the _schemas topic, has every registered schema under its id and
    gives the next registration an id past them all (issue 43: "survives
    kill -9 and a leader move with no id reused and no schema lost"). At
    the broker default of one replica _schemas died with the killed node:
    it is replicated as Confluent's kafkastore.topic.replication.factor (3)."""
    import json
    nodes, _ = three_nodes
    c = nodes[1]
    url = c.info["schema_registry"]
    ids = {}
    for i in range(10):
        text = json.dumps({"type": "record", "name": f"R{i}",
                           "fields": [{"name": "f", "type": "int"}]})
        status, answer = _registry(url, f"/subjects/move-{i}-value/versions", {"schema": text})
        assert status == 200, answer
        ids[answer["id"]] = text
    wait_for(lambda: full_isr(c, "_schemas", 1), what="_schemas on three nodes")
    kill_node(c)
    taken = wait_for(lambda: (lambda ctl: ctl if ctl and ctl["live"] and ctl["node_id"] != 1
                              and ctl["endpoints"] else None)(controller_of(pg.dsn)),
                     timeout=60, what="another node taking the controller lease")
    new = nodes[taken["node_id"]]
    wait_for(lambda: os.path.exists(os.path.join(new.data_dir, "server.json"))
             and new.refresh().get("schema_registry"), timeout=60,
             what="the new controller's registry")
    moved = new.info["schema_registry"]
    for sid, text in ids.items():
        status, answer = wait_for(lambda sid=sid: (lambda r: r if r[0] == 200 else None)(
            _registry(moved, f"/schemas/ids/{sid}")), timeout=60,
            what=f"schema {sid} at the new registry")
        assert json.loads(answer["schema"]) == json.loads(text)
    status, answer = _registry(moved, "/subjects/move-next-value/versions", {"schema": json.dumps(
        {"type": "record", "name": "Next", "fields": [{"name": "g", "type": "long"}]})})
    assert status == 200 and answer["id"] > max(ids), (answer, sorted(ids))
    # a schema registered before the move is found, not given a new id
    first = min(ids)
    status, answer = _registry(moved, "/subjects/move-0-value", {"schema": ids[first]})
    assert status == 200 and answer["id"] == first, answer


@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_a_node_told_to_stop_while_it_takes_over_stops(pg, tmp_path, delay):
    """SIGTERM to a broker node just as it sets out to take over from a
    controller that stopped: the node stops, rather than becoming the
    controller and running on (the signal used to be lost with the broker
    node that took it while it wound down)."""
    def start(node_id):
        return ServerProcess(str(tmp_path / f"node{node_id}"), workers=1,
                             extra_args=["--cluster", pg.dsn, "--node-id", str(node_id),
                                         *TIMEOUTS]).start()
    first, second = start(1), start(2)
    try:
        assert second.info["role"] == "broker"
        assert first.stop() == 0
        wait_for(lambda: "tries to take over" in second.output(), timeout=30,
                 what="node 2 setting out to take over")
        time.sleep(delay)
        t0 = time.monotonic()
        second.proc.send_signal(signal.SIGTERM)
        try:
            code = second.proc.wait(20)
        except subprocess.TimeoutExpired:
            code = None
        assert code == 0, (f"node 2 did not stop within 20 s of SIGTERM "
                           f"({time.monotonic() - t0:.1f} s); its output:\n"
                           f"{second.output()[-1500:]}")
    finally:
        second.stop()
        first.stop()
