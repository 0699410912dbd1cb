"""Connect workers whose own cluster is reached over Kafka's protocol
(``kafkalite.client.protocol=kafka``): the workers are pointed at the
server's Kafka listener and make every client with confluent-kafka, and
the distributed group's membership over Kafka's TCP protocol
(kafka_group.py).

What shows the transport: each worker process's established TCP
connections (read from /proc) go only to the Kafka listener's ports (the
bootstrap listener and the brokers its Metadata names), never to the
server's native ports. A worker given the same Kafka address with the
native clients resolves it to the native endpoint (client/bootstrap.py) and
connects to the server's native ports, so this check fails for the wrong
transport (the standalone test's ``native`` case shows it does)."""
from __future__ import annotations

import signal
import subprocess
import sys
import urllib.parse

import confluent_kafka
import pytest
import requests
from confluent_kafka.admin import AdminClient, NewTopic
from connect_cluster import free_ports, get, group_name, start_worker
from connect_helpers import lines_of
from harness import child_env, run_cli, socket_inodes, wait_until

KAFKA = {"kafkalite.client.protocol": "kafka"}


def kafka_config(server) -> dict:
    return {"bootstrap.servers": server.kafka_bootstrap, "socket.timeout.ms": 10000}


def create_topic(server, name, partitions):
    admin = AdminClient(kafka_config(server))
    admin.create_topics([NewTopic(name, partitions)])[name].result(30)


def kafka_ports(server) -> set[int]:
    """The Kafka listener's ports: its bootstrap port and the brokers'."""
    md = AdminClient(kafka_config(server)).list_topics(timeout=30)
    return {int(server.kafka_bootstrap.rsplit(":", 1)[1])} | {b.port for b in md.brokers.values()}


def native_port(server) -> int:
    return urllib.parse.urlsplit(server.bootstrap).port


def established_peers(pid: int, accepted_on=()) -> set[int]:
    """Remote ports of the process's established TCP connections, but those
    it accepted on a port of ``accepted_on`` (whose remote port is the
    client's ephemeral one)."""
    inodes = socket_inodes(pid)
    peers = set()
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                rows = f.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if cols[3] == "01" and cols[9] in inodes:        # ESTABLISHED, ours
                if int(cols[1].rsplit(":", 1)[1], 16) in accepted_on:
                    continue
                peers.add(int(cols[2].rsplit(":", 1)[1], 16))
    return peers


def assert_kafka_transport(server, pid: int, rest_ports) -> None:
    """Every established connection of the worker process, its REST API's
    aside (to the workers' REST ports, or accepted on its own: in a full CI
    run a stray client once reached its REST port, a ZeroMQ socket of an
    earlier test still retrying the port's previous owner), goes to a Kafka
    listener; at least one does."""
    peers = established_peers(pid, set(rest_ports)) - set(rest_ports)
    allowed = kafka_ports(server)
    assert native_port(server) not in peers, \
        f"the worker is connected to the native port {native_port(server)}: {sorted(peers)}"
    assert peers and peers <= allowed, \
        f"the worker's connections {sorted(peers)} are not all to the Kafka listener " \
        f"{sorted(allowed)}"


@pytest.mark.parametrize("protocol", ["kafka", "native"])
def test_standalone_file_round_trip_over_the_kafka_listener(server, tmp_path, topic_name,
                                                            protocol):
    """``kafka``: the round trip, every connection to the Kafka listener.
    ``native`` (the control): the same worker with kafkalite's own clients
    also makes the round trip from the Kafka address, and the transport
    check sees its connections to the server's native ports."""
    create_topic(server, topic_name, 1)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"line-{i}\n" for i in range(50)))
    port, = free_ports(1)
    (tmp_path / "worker.properties").write_text(
        f"bootstrap.servers={server.kafka_bootstrap}\nkafkalite.client.protocol={protocol}\n"
        f"key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
        f"offset.flush.interval.ms=300\nconsumer.session.timeout.ms=6000\n"
        f"listeners=http://127.0.0.1:{port}\nkafkalite.file.allowed.paths={tmp_path}\n")
    (tmp_path / "source.properties").write_text(
        f"name=src\nconnector.class=FileStreamSource\ntasks.max=1\nfile={src}\n"
        f"topic={topic_name}\n")
    (tmp_path / "sink.properties").write_text(
        f"name=sa-sink-{protocol}\nconnector.class=FileStreamSink\ntasks.max=1\nfile={out}\n"
        f"topics={topic_name}\n")
    log = open(tmp_path / "worker.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "standalone",
                             str(tmp_path / "worker.properties"),
                             str(tmp_path / "source.properties"),
                             str(tmp_path / "sink.properties")],
                            env=child_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        want = [f"line-{i}" for i in range(50)]
        wait_until(lambda: lines_of(out) == want or proc.poll() is not None, timeout=90,
                   message=lambda: f"the sink file ({len(lines_of(out))} lines)")
        assert proc.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
        if protocol == "kafka":
            assert_kafka_transport(server, proc.pid, [port])
        else:
            with pytest.raises(AssertionError, match="not all to the Kafka listener"):
                assert_kafka_transport(server, proc.pid, [port])
        # the records really are in the topic, as a Kafka consumer reads them
        c = confluent_kafka.Consumer({**kafka_config(server), "group.id": f"check-{topic_name}",
                                      "auto.offset.reset": "earliest"})
        c.subscribe([topic_name])
        got = []
        wait_until(lambda: got.extend(m.value().decode() for m in c.consume(50, 1)
                                    if not m.error()) or len(got) >= 50, timeout=60,
                   message="the topic")
        c.close()
        assert got == want
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]


def test_distributed_group_over_the_kafka_listener(server, tmp_path, topic_name, workers):
    group = group_name("kproto")
    create_topic(server, topic_name, 2)
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"a-{i}\n" for i in range(40)))
    ports = free_ports(2)
    for i, port in enumerate(ports):
        # exactly-once source support: the leader's config writes and the source task go
        # through transactional producers (and zombie fencing) too
        workers.append(start_worker(server, tmp_path, i, group, port, **KAFKA,
                                    **{"bootstrap.servers": server.kafka_bootstrap,
                                       "exactly.once.source.support": "enabled"}))
    (p0, u0), (p1, u1) = workers
    wait_until(lambda: get(u0, "/connectors") == [] and get(u1, "/connectors") == [],
               timeout=90, message="both workers' REST APIs")
    r = requests.post(u0 + "/connectors", timeout=60, json={"name": "d-sink", "config": {
        "connector.class": "FileStreamSink", "tasks.max": "2", "topics": topic_name,
        "file": str(out)}})
    assert r.status_code == 201, r.text
    r = requests.post(u0 + "/connectors", timeout=60, json={"name": "src", "config": {
        "connector.class": "FileStreamSource", "tasks.max": "1", "file": str(src),
        "topic": topic_name}})
    assert r.status_code == 201, r.text

    def sink_spread():
        st = get(u1, "/connectors/d-sink/status")     # created through u0, read through u1
        if st and len(st["tasks"]) == 2 and all(t["state"] == "RUNNING" for t in st["tasks"]):
            on = {t["worker_id"] for t in st["tasks"]}
            return st if len(on) == 2 else None
        return None
    st = wait_until(sink_spread, timeout=90, message=lambda: f"two sink tasks on two workers: "
                    f"{get(u1, '/connectors/d-sink/status')}")
    assert get(u1, "/connectors/src/config")["file"] == str(src)
    first = {f"a-{i}" for i in range(40)}
    wait_until(lambda: first <= set(lines_of(out)), timeout=60,
               message=lambda: f"the first lines in the sink file ({len(lines_of(out))})")
    for p, _ in workers:
        assert_kafka_transport(server, p.pid, ports)

    # kill -9 the second worker: its sink task runs on the first after the session timeout
    victim = f"127.0.0.1:{ports[1]}"
    assert victim in {t["worker_id"] for t in st["tasks"]}
    p1.send_signal(signal.SIGKILL)
    p1.wait(30)

    def moved():
        st = get(u0, "/connectors/d-sink/status")
        return st and len(st["tasks"]) == 2 and all(
            t["state"] == "RUNNING" and t["worker_id"] == f"127.0.0.1:{ports[0]}"
            for t in st["tasks"]) and get(u0, "/connectors/src/status")["connector"][
                "worker_id"] == f"127.0.0.1:{ports[0]}"
    wait_until(moved, timeout=90, message=lambda: f"the tasks on the survivor: "
               f"{get(u0, '/connectors/d-sink/status')}")
    with open(src, "a") as f:
        f.write("".join(f"b-{i}\n" for i in range(40)))
    # at least once: a moved source may repeat what it sent since its last offset flush
    every = first | {f"b-{i}" for i in range(40)}
    wait_until(lambda: every <= set(lines_of(out)), timeout=90,
               message=lambda: f"every line in the sink file after the kill "
                          f"({len(set(lines_of(out)) & every)} of {len(every)})")


def read_kafka(server, topic, isolation, expect, timeout=30.0) -> list[bytes]:
    """Values of ``topic`` (one partition) read from the beginning over the
    Kafka listener, once ``expect`` arrived (or the timeout ran out)."""
    c = confluent_kafka.Consumer({**kafka_config(server), "group.id": f"r-{topic}-{isolation}",
                                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got: list = []
    try:
        wait_until(lambda: got.extend(m.value() for m in c.consume(100, 0.5) if not m.error())
                   or len(got) >= expect, timeout=timeout, message=f"{expect} records of {topic}")
    finally:
        c.close()
    return got


def test_exactly_once_source_and_sink_offsets_over_the_kafka_listener(server, tmp_path,
                                                                      topic_name, sink_name):
    """The transactional producers (a task's, and the offsets topic's
    records in its transactions) and the admin client of the sink offsets
    endpoints, through confluent-kafka."""
    from connect_helpers import Connect

    from kafkalite.connect.clients import worker_client_config
    from kafkalite.connect.offsets import KafkaOffsetStore
    create_topic(server, topic_name, 1)
    worker = {"bootstrap.servers": server.kafka_bootstrap, **KAFKA,
              "exactly.once.source.support": "enabled", "group.id": f"eos-{topic_name}"}
    store = KafkaOffsetStore(worker_client_config(worker), f"{topic_name}-offsets", 1)
    c = Connect(server, offsets=store, **worker)
    try:
        c.create("txn", **{"connector.class": "connect_plugins:TransactionalSourceConnector",
                           "transaction.boundary": "connector", "topic": topic_name,
                           "count": "30", "abort.at": "12",
                           "value.converter": "org.apache.kafka.connect.storage.StringConverter"})
        want = [b"r%d" % n for n in range(30)]
        assert read_kafka(server, topic_name, "read_committed", 30) == want
        # (the aborted transaction's records may never reach the log: librdkafka's
        # abort_transaction purges what it has not sent yet)
        wait_until(lambda: c.http("GET", "/connectors/txn/offsets").json()["offsets"] == [
            {"partition": {"source": "r"}, "offset": {"n": 29}}], timeout=60,
                   message="the source offsets")

        out = tmp_path / "out.txt"
        c.create(sink_name, **{"connector.class": "FileStreamSink", "topics": topic_name,
                               "file": str(out),
                               "consumer.override.isolation.level": "read_committed",
                               # librdkafka's incremental assignment (clients.py's on_assign)
                               "consumer.override.partition.assignment.strategy":
                                   "cooperative-sticky",
                               "value.converter":
                                   "org.apache.kafka.connect.storage.StringConverter"})
        wait_until(lambda: lines_of(out) == [v.decode() for v in want], timeout=60,
                   message="the sink file")
        assert c.http("PUT", f"/connectors/{sink_name}/stop").status_code == 204

        def sink_offsets():
            r = c.http("GET", f"/connectors/{sink_name}/offsets")
            return r.status_code == 200 and r.json()["offsets"]
        got = wait_until(sink_offsets, timeout=60, message="the sink's committed offsets")
        assert got[0]["partition"] == {"kafka_topic": topic_name, "kafka_partition": 0}
        assert got[0]["offset"]["kafka_offset"] >= 30
        r = c.http("PATCH", f"/connectors/{sink_name}/offsets", json={"offsets": [
            {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
             "offset": {"kafka_offset": 5}}]})
        assert r.status_code == 200, r.text
        assert wait_until(sink_offsets, timeout=60)[0]["offset"] == {"kafka_offset": 5}
        r = c.http("DELETE", f"/connectors/{sink_name}/offsets")
        assert r.status_code == 200, r.text
        assert c.http("GET", f"/connectors/{sink_name}/offsets").json()["offsets"] == []
    finally:
        c.close()


def test_group_membership_over_kafka_protocol_survives_a_dropped_connection(server):
    """WorkerGroupMember over kafka_group.py: join as the only member (its own
    assignment), a heartbeat after the coordinator's connection broke finds
    the coordinator again, leave; and a bootstrap address nobody listens on
    is an error naming it, within the request's timeout."""
    import socket

    from kafkalite.connect.distributed import WorkerGroupMember
    from kafkalite.connect.kafka_group import KafkaCoordinatorLink
    from kafkalite.protocol import ApiKey
    g = WorkerGroupMember({"bootstrap.servers": server.kafka_bootstrap, **KAFKA},
                          group_name("kgroup"), "http://127.0.0.1:1", 6000, 10000)
    try:
        got = g.join(lambda members: {m: {"members": [x for x, _ in members]}
                                      for m, _ in members})
        assert got == {"members": [g.member_id]}
        assert g.heartbeat() == 0
        g._link._conn.sock.shutdown(socket.SHUT_RDWR)     # the coordinator connection breaks
        assert g.heartbeat() == 0
        g.leave()
    finally:
        g.close()
    free, = free_ports(1)
    link = KafkaCoordinatorLink({"bootstrap.servers": f"127.0.0.1:{free}"}, "g", "c")
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{free}"):
        link.request(ApiKey.HEARTBEAT, {"group_id": "g", "generation_id": 1, "member_id": "m",
                                        "group_instance_id": None}, 2)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_distributed_worker_over_sasl_ssl(tmp_path, workers, mechanism):
    """A server whose Kafka listener takes SASL_SSL only: the worker's
    ``security.protocol``, ``sasl.*`` and ``ssl.*`` reach every client, its
    Kafka-protocol group client included (TLS, then SASL PLAIN or SCRAM);
    with a wrong password the group client's error says authentication
    failed."""
    from harness import ServerProcess
    from kafkalite.connect.distributed import WorkerGroupMember
    from kafkalite.tools.dev_certs import make_certs
    certs = make_certs(str(tmp_path / "certs"))
    data = str(tmp_path / "data")
    r = run_cli("users", "add", "alice", "--data-dir", data, stdin=b"alice-secret-1\n")
    assert r.returncode == 0, r.stderr
    srv = ServerProcess(data, extra_args=[
        "--kafka-security-protocol", "SASL_SSL", "--ssl-certfile", certs["server"],
        "--ssl-keyfile", certs["server_key"]]).start()
    try:
        security = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                    "sasl.username": "alice", "sasl.password": "alice-secret-1",
                    "ssl.ca.location": certs["ca"]}
        src, group = tmp_path / "in.txt", group_name("ksasl")
        src.write_text("".join(f"s-{i}\n" for i in range(10)))
        port, = free_ports(1)
        workers.append(start_worker(srv, tmp_path, 0, group, port, **KAFKA, **security,
                                    **{"bootstrap.servers": srv.kafka_bootstrap}))
        (p, u), = workers
        # a SASL worker's REST API asks for a login of the cluster (rest_login.py)
        login = ("alice", "alice-secret-1")
        wait_until(lambda: get(u, "/connectors", login) == [], timeout=90,
                   message="the REST API")
        r = requests.post(u + "/connectors", timeout=60, auth=login, json={
            "name": "s-src", "config": {"connector.class": "FileStreamSource",
                                        "file": str(src), "topic": "sasl-t"}})
        assert r.status_code == 201, r.text
        wait_until(lambda: (st := get(u, "/connectors/s-src/status", login)) and st["tasks"] and
                   st["tasks"][0]["state"] == "RUNNING", timeout=60, message="the source RUNNING")
        c = confluent_kafka.Consumer({"bootstrap.servers": srv.kafka_bootstrap, **security,
                                      "group.id": "sasl-check", "auto.offset.reset": "earliest"})
        c.subscribe(["sasl-t"])
        got: list = []
        try:
            wait_until(lambda: got.extend(m.value() for m in c.consume(10, 1) if not m.error())
                       or len(got) >= 10, timeout=60, message="the records")
        finally:
            c.close()
        assert sorted(got) == sorted(b"s-%d" % i for i in range(10))

        g = WorkerGroupMember({"bootstrap.servers": srv.kafka_bootstrap, **KAFKA, **security,
                               "sasl.password": "wrong"}, group, "http://127.0.0.1:1", 6000, 10000)
        try:
            with pytest.raises(Exception, match="authentication failed"):
                g.join(lambda members: {})
        finally:
            g.close()
    finally:
        for w, _ in workers:
            w.kill()
        srv.stop()
        srv.kill()
