"""The native doors of a server with security on and no CURVE key file
(issue 40): the native ports of the supervisor and of every worker, the
shared-memory rings attached through them, and the ZeroMQ ingest gateway.

Before, with the README's TLS/SASL + authorizer set-up, an anonymous
``kafkalite.client`` listed, created and deleted topics and read and wrote
a topic its user had no ACL for, an anonymous ingest PUSH landed records
(auto-creating the topic) and an anonymous ring produce was delivered: the
authorizer checked the Kafka listeners only. Now, once security is on (a
listener other than PLAINTEXT, the authorizer, or CURVE), the native ports
and the gateway are CURVE servers with the node's key pair of the run
(server/security.py native_security), which admits the server's own
processes and the owner's tools -- the key pair is written 0600 into the
data directory, named by server.json -- and no one else: a client without
keys is refused at once (AuthenticationRefusedError), before any request.

One server for the module: SASL_PLAINTEXT listeners and the authorizer on.
"""
from __future__ import annotations

import os
import stat
import time

import pytest
import zmq
import zmq.utils.monitor

from harness import ServerProcess, wait_until
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.client.connection import AuthenticationRefusedError, Connection
from kafkalite.client.ring_link import RingLink
from kafkalite.errors import KafkaError

REFUSED_WITHIN_S = 10.0      # "at once": far below the 30 s request timeout a hang would hit


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("doors")
    config = root / "server.toml"
    config.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n')
    srv = ServerProcess(str(root / "data"), extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    yield srv
    srv.stop()
    srv.kill()


def native_endpoints(srv) -> list[str]:
    return [srv.info["native"], *(w["endpoint"] for w in srv.info["workers"])]


def test_every_native_port_refuses_a_client_without_keys(server, topic_name):
    for endpoint in native_endpoints(server):
        began = time.monotonic()
        with pytest.raises(AuthenticationRefusedError, match="requires CURVE"):
            Connection(endpoint, "anonymous").close()
        assert time.monotonic() - began < REFUSED_WITHIN_S
    began = time.monotonic()
    with pytest.raises(KafkaError):
        admin = AdminClient({"bootstrap.servers": server.bootstrap, "request.timeout.ms": 5000})
        try:
            admin.create_topics([NewTopic(topic_name, 1)])[topic_name].result()
        finally:
            admin.close()
    assert time.monotonic() - began < REFUSED_WITHIN_S
    owner = AdminClient(server.config())
    try:
        assert topic_name not in owner.list_topics(timeout=10).topics
    finally:
        owner.close()


def test_no_ring_is_handed_to_a_client_without_keys(server, topic_name):
    """A ring is attached through the worker's native port: refused there."""
    for endpoint in native_endpoints(server)[1:]:
        with pytest.raises(AuthenticationRefusedError):
            conn = Connection(endpoint, "anonymous")
            try:
                RingLink(conn, 1 << 16, 5.0).close()
            finally:
                conn.close()


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
