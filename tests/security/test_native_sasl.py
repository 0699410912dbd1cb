"""A SASL login on the native protocol for remote clients without a key pair
(issue 40; server/auth/native_login.py, client/connection.py).

Before, a client that had only the SASL user and password it uses on the
Kafka listeners could not use the native protocol at all: its CURVE key
was not among the authorized keys, so the handshake was refused. Now, with
the server's public key (``curve.server.key``) and Kafka's client settings
(``security.protocol``, ``sasl.mechanism``, ``sasl.username``,
``sasl.password``), kafkalite's client makes a throwaway key pair, logs in
with SaslHandshake and SaslAuthenticate on every link (the supervisor's
and each worker's, and a ring's), and is that user under the ACLs. A key
that has not logged in is served nothing but the login.

These clients pass ``curve.server.key``, so they take the TCP ports as a
remote client does (never the local door). One server for the module:
SASL_PLAINTEXT listeners, the authorizer, a CURVE key pair of its own
(``kafkalite curve keygen``) and no authorized keys; SCRAM users ``admin``
(a super user), ``alice`` and ``bob``. Topics and ACLs are made through
the Kafka listener, as ``admin``.
"""
from __future__ import annotations

import os
import signal
import time

import confluent_kafka
import pytest
import zmq
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   ResourcePatternType, ResourceType)

from harness import run_cli, sasl_config, secured_server, stop_server, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, Consumer, Producer
from kafkalite.client.connection import Connection, KafkaTimeoutError, client_context
from kafkalite.client.ring_link import RingLink
from kafkalite.protocol import ApiKey, decode_response, encode_request, native
from kafkalite.record import RecordBatchBuilder

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
# "at once": far below the 30 s request timeout a hang would run into
ANSWERED_WITHIN_S = 10.0
FAILED_AUTH_DELAY_S = 0.1           # connection_failed_authentication_delay_ms's default


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("native-sasl")


@pytest.fixture(scope="module")
def server(root):
    r = run_cli("curve", "keygen", "server", "--dir", str(root))
    assert r.returncode == 0, r.stderr
    srv = secured_server(root, PASSWORDS, extra_args=[
        "--native-curve-secret-key-file", str(root / "server.key_secret")])
    yield srv
    stop_server(srv)


def native_config(server, root, user: str | None, password: str | None = None,
                  **extra) -> dict:
    """A kafkalite client's settings as a remote one: the server's public
    key and, with ``user``, a SASL login."""
    config = {"bootstrap.servers": server.bootstrap, "curve.server.key": str(root / "server.key"),
              "request.timeout.ms": 10000, **extra}
    if user is not None:
        config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                       "sasl.username": user,
                       "sasl.password": PASSWORDS[user] if password is None else password})
    return config


def make_topic(server, name: str, partitions: int = 2) -> None:
    admin = confluent_kafka.admin.AdminClient(sasl_config(server, "admin", PASSWORDS["admin"]))
    for f in admin.create_topics([confluent_kafka.admin.NewTopic(name, partitions, 1)]).values():
        f.result(30)


def grant(server, principal: str, resource: ResourceType, name: str, *operations) -> None:
    admin = confluent_kafka.admin.AdminClient(sasl_config(server, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([AclBinding(
            resource, name, ResourcePatternType.LITERAL, principal, "*", op,
            AclPermissionType.ALLOW) for op in operations]).values():
        f.result(30)


def produce(producer, topic: str, n: int) -> list:
    """Produce ``n`` records; the delivery error of each (None: stored)."""
    outcome = []
    for i in range(n):
        producer.produce(topic, b"%d" % i, partition=i % 2,
                         on_delivery=lambda err, msg: outcome.append(err))
    assert producer.flush(30) == 0
    return outcome


def end_offsets(server, topic: str) -> list[int]:
    """The topic's log end offsets, asked through the Kafka listener as admin."""
    consumer = confluent_kafka.Consumer({**sasl_config(server, "admin", PASSWORDS["admin"]),
                                         "group.id": "offsets-probe"})
    try:
        return [consumer.get_watermark_offsets(confluent_kafka.TopicPartition(topic, p),
                                               timeout=10)[1] for p in range(2)]
    finally:
        consumer.close()


def test_a_scram_user_produces_and_consumes_over_the_native_protocol(server, root, topic_name,
                                                                     group_name):
    """alice, with ACLs on her topic and group, writes and reads them with
    kafkalite's client over the native ports: the supervisor's, then the
    workers' its metadata sends it to, each logged in."""
    make_topic(server, topic_name)
    grant(server, "User:alice", ResourceType.TOPIC, topic_name,
          AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)
    grant(server, "User:alice", ResourceType.GROUP, group_name, AclOperation.READ)
    p = Producer(native_config(server, root, "alice", **{"kafkalite.transport": "zmq"}))
    try:
        assert produce(p, topic_name, 20) == [None] * 20
    finally:
        p.close()
    c = Consumer(native_config(server, root, "alice", **{
        "group.id": group_name, "auto.offset.reset": "earliest"}))
    got = []
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert sorted(got) == sorted(b"%d" % i for i in range(20))


def test_a_ring_attached_through_a_login_is_that_users(server, root, topic_name):
    """A shared-memory ring is attached over a worker's native link: alice
    (Write on a topic) gets one, bob (no ACL) is refused as himself."""
    make_topic(server, topic_name)
    grant(server, "User:alice", ResourceType.TOPIC, topic_name, AclOperation.WRITE)
    worker = server.info["workers"][0]["endpoint"]
    for user in ("alice", "bob"):
        ctx = client_context(native_config(server, root, user))
        conn = Connection(worker, f"ring-{user}", ctx)
        try:
            if user == "alice":
                RingLink(conn, 1 << 16, 5.0).close()
            else:
                with pytest.raises(errors.TopicAuthorizationFailedError, match="User:bob"):
                    RingLink(conn, 1 << 16, 5.0).close()
        finally:
            conn.close()
            ctx.destroy(linger=0)


def test_a_logged_in_user_is_denied_a_topic_it_may_not_use(server, root, topic_name):
    make_topic(server, topic_name)
    grant(server, "User:bob", ResourceType.TOPIC, topic_name, AclOperation.DESCRIBE)
    p = Producer(native_config(server, root, "bob", **{"enable.idempotence": False,
                                                       "kafkalite.transport": "zmq"}))
    try:
        denied = produce(p, topic_name, 4)
    finally:
        p.close()
    assert {e.code for e in denied} == {errors.TopicAuthorizationFailedError.code}, denied
    assert end_offsets(server, topic_name) == [0, 0]


@pytest.mark.parametrize("login, told", [
    (("alice", "not-her-password"), "Authentication failed: Invalid username or password"),
    ((None,), "METADATA request before a SASL login"),
], ids=["a wrong password: Kafka's message", "no login: told at the first request"])
def test_a_refused_login_is_an_error_with_its_reason_at_once(server, root, login, told):
    began = time.monotonic()
    admin = AdminClient(native_config(server, root, *login))
    try:
        with pytest.raises(errors.SaslAuthenticationFailedError, match=told):
            admin.list_topics(timeout=10)
    finally:
        admin.close()
    assert time.monotonic() - began < ANSWERED_WITHIN_S


def test_the_cli_logs_in_with_a_kafka_client_properties_file(server, root, topic_name):
    """The client.properties a Kafka user hands Kafka's tools, with the
    server's public key, lists what its user may see."""
    make_topic(server, topic_name)
    grant(server, "User:alice", ResourceType.TOPIC, topic_name, AclOperation.DESCRIBE)
    props = root / f"{topic_name}.properties"
    props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
                     "sasl.username=alice\nsasl.password=alice-secret\n"
                     f"curve.server.key={root / 'server.key'}\n")
    r = run_cli("topics", "list", "--bootstrap-server", server.bootstrap,
                "--command-config", props)
    assert r.returncode == 0, r.stderr.decode()
    assert topic_name in r.stdout.decode().split()


class RawClient:
    """A bare ZeroMQ DEALER with a throwaway CURVE key pair and the server's
    public key: what a client that skips (or fails) the login can send."""

    def __init__(self, endpoint: str, server_key: bytes):
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        public, secret = zmq.curve_keypair()
        self.sock.setsockopt(zmq.CURVE_SERVERKEY, server_key)
        self.sock.setsockopt(zmq.CURVE_PUBLICKEY, public)
        self.sock.setsockopt(zmq.CURVE_SECRETKEY, secret)
        self.sock.connect(endpoint)
        self.cid = 0

    def request(self, api: ApiKey, version: int, body: dict):
        """The answer's body, or (code, message) of an error reply."""
        self.cid += 1
        self.sock.send_multipart([encode_request(api, version, self.cid, "raw", body)])
        assert self.sock.poll(int(ANSWERED_WITHIN_S * 1000)), f"no answer to {api!r}"
        frames = self.sock.recv_multipart()
        if frames[0] == native.ERROR_FRAME:
            cid, code, message = native.decode_error(frames[1])
            assert cid == self.cid
            return code, message
        cid, body = decode_response(api, version, frames[0])
        assert cid == self.cid
        return body

    def close(self):
        self.sock.close()
        self.ctx.destroy(linger=0)


def test_a_raw_zeromq_client_that_skips_the_login_is_served_nothing(server, root, topic_name):
    """Every request of a key that has not logged in is refused (nothing
    is appended), however far into a login it got: not at all, only its
    SaslHandshake, or a failed SaslAuthenticate (answered only after the
    failed-authentication delay); another client's login does not let it in."""
    make_topic(server, topic_name)
    grant(server, "User:alice", ResourceType.TOPIC, topic_name, AclOperation.WRITE,
          AclOperation.DESCRIBE)
    alice = Producer(native_config(server, root, "alice", **{"kafkalite.transport": "zmq"}))
    try:
        assert produce(alice, topic_name, 2) == [None] * 2
    finally:
        alice.close()
    from kafkalite.protocol import curve
    server_key = curve.load_key(str(root / "server.key"))
    denied = errors.SaslAuthenticationFailedError.code
    record = _one_record_batch()
    for endpoint in (server.info["native"], server.info["workers"][0]["endpoint"],
                     server.info["workers"][1]["endpoint"]):
        raw = RawClient(endpoint, server_key)
        try:
            for step in ("none", "handshake", "wrong password"):
                if step == "handshake":
                    assert raw.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}
                                       )["error_code"] == 0
                elif step == "wrong password":
                    began = time.monotonic()
                    answer = raw.request(ApiKey.SASL_AUTHENTICATE, 2, {
                        "auth_bytes": b"n,,n=alice,r=0123456789abcdef"})
                    assert answer["error_code"] == 0     # SCRAM's server-first message
                    answer = raw.request(ApiKey.SASL_AUTHENTICATE, 2, {
                        "auth_bytes": b"c=biws,r=" + _server_nonce(answer) + b",p=AAAA"})
                    assert answer["error_code"] == denied, answer
                    assert answer["error_message"] == ("Authentication failed: Invalid "
                                                       "username or password")
                    assert time.monotonic() - began >= FAILED_AUTH_DELAY_S
                answer = raw.request(ApiKey.METADATA, 12, {
                    "topics": None, "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False})
                assert isinstance(answer, tuple) and answer[0] == denied, (step, answer)
                answer = raw.request(ApiKey.PRODUCE, 9, {
                    "acks": -1, "timeout_ms": 5000,
                    "topic_data": [{"name": topic_name, "partition_data": [
                        {"index": 0, "records": record}]}]})
                assert isinstance(answer, tuple) and answer[0] == denied, (step, answer)
                assert "before a SASL login" in answer[1]
        finally:
            raw.close()
    assert sum(end_offsets(server, topic_name)) == 2


def _server_nonce(answer: dict) -> bytes:
    first = dict(p.split(b"=", 1) for p in bytes(answer["auth_bytes"]).split(b","))
    return first[b"r"]


def _one_record_batch() -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"raw")
    return bytes(b.build())


def test_a_link_logs_in_again_to_a_worker_restarted_on_its_address(server, root):
    """ZeroMQ reconnects a link to a worker that restarted on the same port
    without telling its owner; the new process has no session for the
    link's key, so the link logs in again and its request is answered
    (before, a non-watched link -- an AdminClient's to a worker -- was
    refused for good). Last in the module: it kills a worker."""
    worker = server.info["workers"][0]
    ctx = client_context(native_config(server, root, "alice"))
    conn = Connection(worker["endpoint"], "relogin", ctx)
    body = {"replica_id": -1, "isolation_level": 0, "topics": []}
    try:
        conn.request(ApiKey.LIST_OFFSETS, body, 10)
        os.kill(worker["pid"], signal.SIGKILL)
        server.wait_for_worker_restart(0, worker["pid"], timeout=30)
        assert server.refresh()["workers"][0]["endpoint"] == worker["endpoint"]
        wait_until(lambda: _answered(conn, body), 30, "an answer from the restarted worker")
    finally:
        conn.close()
        ctx.destroy(linger=0)


def _answered(conn, body) -> bool:
    try:
        conn.request(ApiKey.LIST_OFFSETS, body, 5)
    except (KafkaTimeoutError, errors.NetworkError):
        return False            # not back yet
    return True
