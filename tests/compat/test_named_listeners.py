"""Named Kafka listeners (``--listeners``, ``--listener-security-protocol-map``,
``--advertised-listeners``), with Kafka's own clients.

One real server with two workers and two listeners: INTERNAL (PLAINTEXT on
127.0.0.1) and EXTERNAL (SASL_SSL, advertised as ``localhost``, which the
test certificate names). Every broker process opens both. A client is told
the endpoints of the listener it connected to, so a SASL_SSL client talks
SASL_SSL to every broker (the partition leaders on the workers and the
group coordinator on the supervisor, whose requests workers relay) and a
plaintext one plaintext. Were an answer to name the other listener's
ports, the clients here would fail their handshakes and time out.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, add_user, first_client_error

from harness import ServerProcess, child_env, run_cli

from kafkalite.protocol import ApiKey
from kafkalite.tools.dev_certs import make_certs

USER, PASSWORD = "carol", "carol-secret-1"
N = 200

# the module's server is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("named_listeners")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("listeners")
    certs = make_certs(str(root / "certs"))
    data = str(root / "data")
    add_user(data, USER, PASSWORD)
    srv = ServerProcess(data, workers=2, extra_args=[
        "--listeners", "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--listener-security-protocol-map", "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "--advertised-listeners", "EXTERNAL://localhost:0",
        "--ssl-certfile", certs["server"], "--ssl-keyfile", certs["server_key"]]).start()
    srv.certs = certs
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


def listeners_of(srv) -> dict:
    with open(os.path.join(srv.data_dir, "server.json")) as f:
        return json.load(f)["kafka_listeners"]


def internal(srv, **extra) -> dict:
    return {"bootstrap.servers": listeners_of(srv)["INTERNAL"]["bootstrap.servers"],
            "socket.timeout.ms": 10000, **extra}


def external(srv, **extra) -> dict:
    return {"bootstrap.servers": listeners_of(srv)["EXTERNAL"]["bootstrap.servers"],
            "security.protocol": "SASL_SSL", "ssl.ca.location": srv.certs["ca"],
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": USER,
            "sasl.password": PASSWORD, "socket.timeout.ms": 10000, **extra}


def test_server_json_names_each_listener_and_the_first_is_primary(server):
    listeners = listeners_of(server)
    assert list(listeners) == ["INTERNAL", "EXTERNAL"]
    assert listeners["INTERNAL"]["security.protocol"] == "PLAINTEXT"
    assert listeners["EXTERNAL"]["security.protocol"] == "SASL_SSL"
    assert listeners["EXTERNAL"]["bootstrap.servers"].startswith("localhost:")
    with open(os.path.join(server.data_dir, "server.json")) as f:
        doc = json.load(f)
    assert doc["kafka.bootstrap.servers"] == listeners["INTERNAL"]["bootstrap.servers"]
    assert doc["kafka.security.protocol"] == "PLAINTEXT"


def test_each_listener_tells_its_own_endpoints(server):
    from confluent_kafka.admin import AdminClient
    seen = {}
    for name, conf in (("INTERNAL", internal(server)), ("EXTERNAL", external(server))):
        md = AdminClient(conf).list_topics(timeout=20)
        seen[name] = {b.id: (b.host, b.port) for b in md.brokers.values()}
    # both answers name the same brokers: the two workers (the supervisor,
    # which holds no replica, answers at the bootstrap address, unlisted)
    assert set(seen["INTERNAL"]) == set(seen["EXTERNAL"]) == {0, 1}
    assert {h for h, _ in seen["INTERNAL"].values()} == {"127.0.0.1"}
    assert {h for h, _ in seen["EXTERNAL"].values()} == {"localhost"}
    internal_ports = {p for _, p in seen["INTERNAL"].values()}
    external_ports = {p for _, p in seen["EXTERNAL"].values()}
    assert len(internal_ports) == len(external_ports) == 2
    assert not internal_ports & external_ports
    # each port speaks what its listener says: a bare plaintext request to an
    # internal worker port is answered, with the internal endpoints again
    worker_port = seen["INTERNAL"][1][1]
    wire = KafkaWire(f"127.0.0.1:{worker_port}")
    try:
        body = wire.request(ApiKey.METADATA, 12, {"topics": None,
                                                  "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
    finally:
        wire.sock.close()
    assert {b["node_id"]: b["port"] for b in body["brokers"]} == \
        {i: p for i, (_, p) in seen["INTERNAL"].items()}


def test_produce_on_one_listener_consume_in_a_group_on_the_other(server):
    from confluent_kafka.admin import AdminClient, NewTopic
    topic = "across-listeners"
    admin = AdminClient(internal(server))
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(20)
    p = ck.Producer(internal(server, **{"linger.ms": 5}))
    sent = [b"v-%04d" % i for i in range(N)]
    for i, v in enumerate(sent):
        p.produce(topic, v, partition=i % 2)        # leaders on both workers
    assert p.flush(20) == 0
    # the group's coordinator is the supervisor: FindCoordinator, JoinGroup
    # and the commit reach it through a worker's relay, on the external listener
    c = ck.Consumer(external(server, **{"group.id": "g-across", "auto.offset.reset": "earliest",
                                        "enable.auto.commit": False}))
    got, deadline = [], time.monotonic() + 30
    try:
        c.subscribe([topic])
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted(got) == sent
    committed = ck.Consumer(internal(server, **{"group.id": "g-across"})).committed(
        [ck.TopicPartition(topic, 0), ck.TopicPartition(topic, 1)], timeout=20)
    assert sorted(tp.offset for tp in committed) == [N // 2, N // 2]


def test_a_plaintext_client_on_the_external_listener_is_not_served(server):
    # the external port speaks TLS: a plaintext client gets nothing it can use
    conf = {**external(server), "security.protocol": "PLAINTEXT"}
    for key in ("ssl.ca.location", "sasl.mechanisms", "sasl.username", "sasl.password"):
        conf.pop(key)
    err = first_client_error({**conf, "socket.timeout.ms": 3000}, "never-served")
    assert err.code() in (ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN), err


@pytest.mark.processes
@pytest.mark.parametrize("args, message", [
    (["--listeners", "SECRET://127.0.0.1:0"], "listener SECRET has no security protocol"),
    (["--listeners", "PLAINTEXT:9092"], "is not NAME://host:port"),
    (["--listeners", "PLAINTEXT://127.0.0.1:0", "--advertised-listeners", "OTHER://h:1"],
     "advertised_listeners names OTHER"),
    (["--listeners", "A://127.0.0.1:0", "--listener-security-protocol-map", "A:TLS"],
     "is not NAME:PROTOCOL"),
    (["--listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"],
     "listener SSL (SSL) needs ssl_certfile"),
])
def test_bad_listener_settings_are_one_line_and_a_non_zero_exit(tmp_path, args, message):
    r = subprocess.run([sys.executable, "-m", "kafkalite", "server", "--data-dir",
                        str(tmp_path / "d"), *args], capture_output=True, text=True,
                       env=child_env(), timeout=60)
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_cluster_info_shows_each_listener(server):
    # (--data-dir: its server.json names the owner's key pair, the CURVE
    # keys this secured server's native port asks for)
    r = run_cli("cluster", "info", "--data-dir", server.data_dir, "--bootstrap-server",
                server.bootstrap)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    listeners = listeners_of(server)
    assert (f"kafka INTERNAL: {listeners['INTERNAL']['bootstrap.servers']} (PLAINTEXT)"
            in out), out
    assert (f"kafka EXTERNAL: {listeners['EXTERNAL']['bootstrap.servers']} (SASL_SSL)"
            in out), out
