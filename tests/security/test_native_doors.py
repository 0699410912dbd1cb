"""The native doors of a server with security on and no CURVE key file
(issue 40): the native ports of the supervisor and of every worker, the
shared-memory rings attached through them, and the ZeroMQ ingest gateway.

Before, with the README's TLS/SASL + authorizer set-up, an anonymous
``kafkalite.client`` listed, created and deleted topics and read and wrote
a topic its user had no ACL for, an anonymous ingest PUSH landed records
(auto-creating the topic) and an anonymous ring produce was delivered: the
authorizer checked the Kafka listeners only. Now, once security is on (a
listener other than PLAINTEXT, the authorizer, or CURVE), the native TCP
ports and the gateway are CURVE servers with the node's key pair of the
run (server/auth/security.py native_security), which admits the server's own
processes and the owner's tools -- the key pair is written 0600 into the
data directory, named by server.json -- and no one else: a ZeroMQ client
without keys is refused at the handshake. A client on this host without
keys comes in by the port's local door instead (local_socket.py,
server/network/native_listener.py), as ``User:unix:<its user>``, which the
kernel's peer credentials vouch for; the ACLs then decide, on the native
port and a ring as on the Kafka listener.

One server for the module: SASL_PLAINTEXT listeners and the authorizer on,
SCRAM users ``admin`` (a super user) and ``alice``.
"""
from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
import time

import confluent_kafka
import pytest
import zmq
import zmq.utils.monitor

from harness import (child_env, create, read_all, sasl_config, secured_server, stop_server,
                     wait_until)
from kafkalite import errors
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)
from kafkalite.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from kafkalite.client.connection import Connection
from kafkalite.client.ring_link import RingLink

REFUSED_WITHIN_S = 10.0      # "at once": far below the 30 s request timeout a hang would hit
HANDSHAKE_OUTCOMES = (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                      zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                      zmq.EVENT_DISCONNECTED)
ME = "User:unix:" + pwd.getpwuid(os.getuid()).pw_name
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("doors"), PASSWORDS)
    yield srv
    stop_server(srv)


def native_endpoints(srv) -> list[str]:
    return [srv.info["native"], *(w["endpoint"] for w in srv.info["workers"])]


def stranger_handshake(endpoint: str) -> list[int]:
    """The handshake events of a plain ZeroMQ DEALER (no keys) to ``endpoint``."""
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        monitor = s.get_monitor_socket()
        s.connect(endpoint)
        s.send(b"anything", zmq.NOBLOCK)
        events = []
        deadline = time.monotonic() + REFUSED_WITHIN_S
        while not any(e in HANDSHAKE_OUTCOMES for e in events) and time.monotonic() < deadline:
            if monitor.poll(100):
                events.append(zmq.utils.monitor.recv_monitor_message(monitor)["event"])
        s.disable_monitor()
        monitor.close()
        s.close()
        return events
    finally:
        ctx.destroy(linger=0)


def test_every_native_tcp_port_refuses_a_client_without_keys(server, topic_name):
    for endpoint in native_endpoints(server):
        events = stranger_handshake(endpoint)
        assert any(e in HANDSHAKE_OUTCOMES for e in events), (endpoint, events)
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in events, (endpoint, events)
    # kafkalite's client without keys, on this host, comes in by the local
    # door as its Unix user, whom the authorizer knows nothing of
    began = time.monotonic()
    admin = AdminClient({"bootstrap.servers": server.bootstrap, "request.timeout.ms": 5000})
    try:
        with pytest.raises(errors.TopicAuthorizationFailedError, match=ME):
            admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
    finally:
        admin.close()
    assert time.monotonic() - began < REFUSED_WITHIN_S
    owner = AdminClient(server.config())
    try:
        assert topic_name not in owner.list_topics(timeout=10).topics
    finally:
        owner.close()


def test_no_ring_is_handed_to_a_local_user_who_may_not_write(server, topic_name):
    """A ring is attached through the worker's native port: refused there."""
    for endpoint in native_endpoints(server)[1:]:
        conn = Connection(endpoint, "keyless")
        assert conn.door is not None
        try:
            with pytest.raises(errors.TopicAuthorizationFailedError, match="attach a ring"):
                RingLink(conn, 1 << 16, 5.0).close()
        finally:
            conn.close()


def kafka_producer(srv, user: str) -> confluent_kafka.Producer:
    return confluent_kafka.Producer({**sasl_config(srv, user, PASSWORDS[user]),
                                     "message.timeout.ms": 10000})


def produce_errors(producer, topic: str, n: int) -> list:
    """Produce ``n`` records; the delivery error of each (None: stored)."""
    outcome = []
    for i in range(n):
        producer.produce(topic, b"%d" % i, on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome


def grant(srv, principal: str, topic: str, *operations, host: str = "*") -> None:
    """ACLs made by the super user through Kafka's listener."""
    admin = confluent_kafka.admin.AdminClient(sasl_config(srv, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([AclBinding(
            ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, host, op,
            AclPermissionType.ALLOW) for op in operations]).values():
        f.result(30)


@pytest.mark.parametrize("transport", ["zmq", "shm"])
def test_a_local_client_without_keys_is_its_unix_user_on_every_door(server, topic_name,
                                                                     transport):
    """The same ACLs on every door: a write its principal may not make is
    denied through Kafka's listener (a SASL user), the native port and a
    ring (a local user, by the kernel's peer credentials) alike; granted,
    the local user writes and reads with no key file."""
    create(server, topic_name, 1)
    kafka = kafka_producer(server, "alice")
    try:
        denied = produce_errors(kafka, topic_name, 3)
        assert {e.code() for e in denied} == {confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED}
    finally:
        kafka.flush(5)
    config = {"bootstrap.servers": server.bootstrap, "kafkalite.transport": transport,
              "message.timeout.ms": 10000}
    p = Producer(config)
    try:    # the topic's metadata is denied (no Describe): produce() says so
        with pytest.raises(errors.TopicAuthorizationFailedError):
            produce_errors(p, topic_name, 3)
    finally:
        p.close()
    grant(server, ME, topic_name, AclOperation.DESCRIBE)
    p = Producer({**config, "enable.idempotence": False})
    try:    # and with Describe but no Write, every record's delivery
        denied = produce_errors(p, topic_name, 3)
    finally:
        p.close()
    assert {e.code for e in denied} == {errors.TopicAuthorizationFailedError.code}, denied
    p = Producer(config)
    try:    # idempotent: the producer id first, refused while the user may write
        began = time.monotonic()    # no topic (Kafka 3's rule), then the topic's write
        denied = produce_errors(p, topic_name, 3)
        assert time.monotonic() - began < REFUSED_WITHIN_S      # not delivery.timeout.ms
    finally:
        p.close()
    assert len({e.code for e in denied}) == 1, denied
    assert denied[0].code in (errors.ClusterAuthorizationFailedError.code,
                              errors.TopicAuthorizationFailedError.code), denied
    # an ACL for this host, as for a loopback TCP client (the door's peer
    # address is loopback's, not libzmq's "localhost:<uid>:<gid>")
    grant(server, ME, topic_name, AclOperation.WRITE, AclOperation.READ, host="127.0.0.1")
    p = Producer(config)
    try:
        assert produce_errors(p, topic_name, 50) == [None] * 50
    finally:
        p.close()
    values = [m.value() for m in read_all(server, topic_name, 1, 50, 20.0,
                                          **{"bootstrap.servers": server.bootstrap})]
    assert values == [b"%d" % i for i in range(50)]


ANOTHER_USER = """
import os, sys
from kafkalite.client import Producer
import zmq.utils.monitor
import encodings.idna   # what the client imports lazily: nobody may not read our interpreter's
os.setgid(65534)
os.setuid(65534)    # nobody: from here on another local user
p = Producer({"bootstrap.servers": sys.argv[1], "message.timeout.ms": 10000})
for topic in sys.argv[2:]:
    try:
        out = []
        p.produce(topic, b"x", on_delivery=lambda err, msg: out.append(err))
        p.flush(30)
        print(topic, out[0])
    except Exception as exc:
        print(topic, exc)
p.close()
"""


@pytest.mark.skipif(os.getuid() != 0, reason="becoming another user needs root")
def test_another_local_user_is_another_principal(server, topic_name):
    """What this user may write, nobody (uid 65534) may not, and the other
    way round: the door's principal is the peer's own user."""
    ours, theirs = topic_name + "-ours", topic_name + "-nobodys"
    create(server, ours, 1)
    create(server, theirs, 1)
    grant(server, ME, ours, AclOperation.WRITE, AclOperation.DESCRIBE)
    grant(server, "User:unix:nobody", theirs, AclOperation.WRITE, AclOperation.DESCRIBE)
    r = subprocess.run([sys.executable, "-c", ANOTHER_USER, server.bootstrap, ours, theirs],
                       capture_output=True, timeout=60, cwd=os.getcwd())
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    outcome = dict(line.split(" ", 1) for line in r.stdout.decode().splitlines())
    assert "TOPIC_AUTHORIZATION_FAILED" in outcome[ours], outcome
    assert outcome[theirs] == "None", outcome


def test_the_ingest_gateway_lands_nothing_from_an_anonymous_publisher(server, topic_name):
    ctx = zmq.Context()
    try:
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        monitor = push.get_monitor_socket()     # every event: a failure shows its story
        push.connect(server.info["ingest"])
        for i in range(10):
            push.send_multipart([topic_name.encode(), b"", b"%d" % i], zmq.NOBLOCK)
        outcomes = (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
                    zmq.EVENT_HANDSHAKE_FAILED_AUTH, zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
        events = []
        deadline = time.monotonic() + REFUSED_WITHIN_S
        while not any(e in outcomes for e in events) and time.monotonic() < deadline:
            if monitor.poll(100):
                events.append(zmq.utils.monitor.recv_monitor_message(monitor)["event"])
        assert any(e in outcomes for e in events), (events, server.info["ingest"],
                                                    server.output()[-2000:])
        assert zmq.EVENT_HANDSHAKE_SUCCEEDED not in events, events
        push.disable_monitor()
        monitor.close()
        push.close()
    finally:
        ctx.destroy(linger=0)
    owner = AdminClient(server.config())
    try:
        # before, the gateway auto-created the topic with the first record
        assert topic_name not in owner.list_topics(timeout=10).topics
    finally:
        owner.close()


def test_the_owners_key_pair_is_theirs_only_and_lets_their_tools_in(server, topic_name):
    path = server.info["owner.key_file"]
    assert os.path.dirname(path) == os.path.abspath(server.data_dir)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    owner = AdminClient(server.config())
    try:
        owner.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    finally:
        owner.close()
    p = Producer(server.config())
    try:
        for i in range(20):
            p.produce(topic_name, b"%d" % i)
        assert p.flush(30) == 0
    finally:
        p.close()
    wait_until(lambda: server.proc.poll() is None, 1, "the server running")


def test_a_local_publisher_without_keys_is_its_unix_user_at_the_ingest_gateway(server,
                                                                               topic_name):
    """The gateway's local door (client/ingest.py): a PUSH on this host
    without keys publishes as User:unix:<its user>, under the same ACLs:
    what it may write lands, what it may not is dropped and counted."""
    allowed, denied = topic_name + "-allowed", topic_name + "-denied"
    create(server, allowed, 1)
    create(server, denied, 1)
    grant(server, ME, allowed, AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.READ)
    grant(server, ME, denied, AclOperation.DESCRIBE, AclOperation.READ)
    port = int(server.info["ingest"].rsplit(":", 1)[1])
    # the address docs/security.md gives: a socket file of the server's user
    assert server.info["ingest.local"] == (
        f"ipc:///run/kafkalite/ingest-{port}" if os.getuid() == 0
        else f"ipc:///tmp/kafkalite-{os.getuid()}/ingest-{port}")
    door = server.info["ingest.local"].removeprefix("ipc://")
    assert os.stat(door).st_uid == os.stat(os.path.dirname(door)).st_uid == os.getuid()
    ctx = zmq.Context()
    try:
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 2000)
        push.setsockopt(zmq.SNDTIMEO, 10_000)     # no door: a PUSH without a peer waits
        push.connect(server.info["ingest.local"])
        for i in range(20):
            push.send_multipart([denied.encode(), b"", b"%d" % i])
            push.send_multipart([allowed.encode(), b"", b"%d" % i])
    finally:
        ctx.destroy(linger=2000)    # what is queued still goes
    config = {"bootstrap.servers": server.bootstrap}
    values = [m.value() for m in read_all(server, allowed, 1, 20, 20.0, **config)]
    assert values == [b"%d" % i for i in range(20)]
    # the denied topic's records were behind the allowed ones' on one socket:
    # by now they were dropped, not stored
    c = Consumer(server.config(**{"group.id": "doors-check"}))
    try:
        assert c.get_watermark_offsets(TopicPartition(denied, 0), timeout=10)[1] == 0
    finally:
        c.close()


def test_a_standalone_registry_refuses_a_secured_server(server):
    """``python -m kafkalite.registry`` has no login: against a server with
    security on it would let every HTTP caller write as its own Unix user
    (its client takes the native port's local door). It says so in one
    line and exits 2 instead of serving."""
    proc = subprocess.run([sys.executable, "-m", "kafkalite.registry", "--bootstrap",
                           server.info["native"], "--port", "0"],
                          capture_output=True, text=True, timeout=60, env=child_env())
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""            # never served: no "schema registry <url>" line
    line, = [x for x in proc.stderr.splitlines() if x.startswith("python -m kafkalite.registry")]
    assert "security on" in line and "no login" in line, line
