"""CURVE on the native ZeroMQ protocol (issue 18): encryption and
authentication by public key, the ZAP principal checked by the authorizer.

One real server for the module: 2 workers, ``native_curve_secret_key_file``
and ``native_curve_authorized_keys`` (a directory of ``kafkalite curve
keygen`` files: admin, alice, bob), ``authorizer_enabled`` with super user
``User:admin``. ACLs are created over the native path itself with admin's
key. Clients without the server's key, with an unknown key or with a wrong
server key are refused at once with an exception naming the refusal, and
nothing they sent is in the log afterwards; plain ZeroMQ ingest without
keys is refused; a principal without Write gets TOPIC_AUTHORIZATION_FAILED
over the native path and cannot attach a shared-memory ring; replication
(RF 2, the brokers' own traffic over CURVE) still works.
"""
from __future__ import annotations

import os
import time

import pytest
import zmq

from curve_helpers import client_keys, keygen, start_curve_server
from harness import read_all, shm_entries, wait_until

from kafkalite import errors
from kafkalite.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from kafkalite.client.connection import AuthenticationRefusedError, Connection, client_context
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AclOperation, AclPermissionType, PatternType, ResourceType

TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
# "at once": far below the 30 s request timeout a hang would run into
REFUSAL_WITHIN_S = 10.0


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("curve")
    for name in ("admin", "alice", "bob"):
        keygen(root / "authorized", name)
    keygen(root, "server")
    keygen(root / "strangers", "mallory")
    return root


@pytest.fixture(scope="module")
def srv(keys):
    s = start_curve_server(keys)
    try:
        yield s
    finally:
        s.stop()
        s.kill()


def as_user(srv, keys, user: str, **extra) -> dict:
    return srv.config(**client_keys(keys, user), **extra)


def create_topic(srv, keys, name: str, partitions: int = 1, rf: int = 1, **configs) -> None:
    admin = AdminClient(as_user(srv, keys, "admin"))
    try:
        for f in admin.create_topics([NewTopic(name, partitions, rf, config=configs)]).values():
            f.result()
    finally:
        admin.close()


def native(srv, keys, user: str, endpoint: str | None = None) -> Connection:
    ctx = client_context(client_keys(keys, user))
    return Connection(endpoint or f"tcp://{srv.bootstrap}", f"test-{user}", ctx)


def grant(srv, keys, principal: str, topic: str, *ops) -> None:
    """CreateAcls over the native path, as the super user."""
    conn = native(srv, keys, "admin")
    try:
        resp = conn.request(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": ResourceType.TOPIC, "resource_name": topic,
             "resource_pattern_type": PatternType.LITERAL, "principal": principal, "host": "*",
             "operation": op, "permission_type": AclPermissionType.ALLOW} for op in ops]},
            version=3)
        assert all(r["error_code"] == 0 for r in resp["results"]), resp
    finally:
        conn.close()
        conn.sock.context.term()


def produce(config: dict, topic: str, values: list[bytes], timeout: float = 20.0) -> list:
    """Produce ``values``; the delivery errors (None for a stored record)."""
    results = []
    p = Producer({**config, "kafkalite.transport": "zmq"})
    try:
        for v in values:
            p.produce(topic, v, on_delivery=lambda err, msg: results.append(err))
        assert p.flush(timeout) == 0
    finally:
        p.close()
    return results


def stored(srv, keys, topic: str, expect: int, timeout: float = 5.0) -> list[bytes]:
    return [m.value() for m in read_all(srv, topic, 1, expect, timeout,
                                        **client_keys(keys, "admin"))]


def stored_now(srv, keys, topic: str) -> list[bytes]:
    """Everything in the topic's partition 0 now: up to its high watermark."""
    c = Consumer(as_user(srv, keys, "admin"))
    try:
        end = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()
    return stored(srv, keys, topic, end, 20.0)


def test_a_client_with_the_right_keys_produces_and_fetches(srv, keys):
    create_topic(srv, keys, "curve-ok")
    assert produce(as_user(srv, keys, "admin"), "curve-ok", [b"a", b"b", b"c"]) == [None] * 3
    assert stored(srv, keys, "curve-ok", 3, 20.0) == [b"a", b"b", b"c"]


@pytest.mark.parametrize("who", ["unknown key", "wrong server key"])
def test_a_refused_client_is_told_at_once_and_writes_nothing(srv, keys, who):
    topic = "curve-refused-" + who.replace(" ", "-")
    create_topic(srv, keys, topic)
    produce(as_user(srv, keys, "admin"), topic, [b"before"])
    config = {"unknown key": as_user(srv, keys, "mallory"),
              "wrong server key": srv.config(**client_keys(
                  keys, "alice", server=keys / "strangers" / "mallory.key"))}[who]
    started = time.monotonic()
    with pytest.raises(AuthenticationRefusedError, match="refused this client"):
        produce(config, topic, [b"intruder"])
    with pytest.raises(AuthenticationRefusedError, match="refused this client"):
        read_all(srv, topic, 1, 1, 30.0, **{k: v for k, v in config.items()
                                            if k != "bootstrap.servers"})
    assert time.monotonic() - started < 2 * REFUSAL_WITHIN_S
    # refused at the handshake: nothing of it reached a worker
    assert stored_now(srv, keys, topic) == [b"before"]


def test_plain_ingest_without_keys_is_refused(srv, keys):
    topic = "curve-ingest"
    create_topic(srv, keys, topic)
    # the gateway writes as alice (test_ingest_authorization.py)
    grant(srv, keys, "User:alice", topic, AclOperation.WRITE)
    ctx = zmq.Context()
    try:
        plain = ctx.socket(zmq.PUSH)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(srv.info["ingest"])
        with_keys = ctx.socket(zmq.PUSH)
        with_keys.setsockopt(zmq.LINGER, 2000)
        with_keys.curve_serverkey = zmq.auth.load_certificate(keys / "server.key")[0]
        with_keys.curve_publickey, with_keys.curve_secretkey = zmq.auth.load_certificate(
            keys / "authorized" / "alice.key_secret")
        with_keys.connect(srv.info["ingest"])
        for i in range(20):
            try:
                # the refused handshake drops the pipe at any moment, even between
                # a poll that saw it writable and the send: Again is a refusal too
                plain.send_multipart([topic.encode(), b"", b"plain-%d" % i], zmq.NOBLOCK)
            except zmq.Again:
                pass
            with_keys.send_multipart([topic.encode(), b"", b"keyed-%d" % i])
        stored(srv, keys, topic, 20, 20.0)          # the keyed ones are in ...
        # ... and a plain one, were it taken, would have come with them: a
        # short look past them, not the whole timeout for 40 that never come
        values = stored(srv, keys, topic, 21, 2.0)
    finally:
        ctx.destroy(linger=0)
    assert sorted(values) == sorted(b"keyed-%d" % i for i in range(20))


def test_a_principal_without_write_is_refused_over_the_native_path(srv, keys):
    topic = "curve-acl"
    create_topic(srv, keys, topic)
    with pytest.raises(errors.TopicAuthorizationFailedError):    # Metadata: not even Describe
        produce(as_user(srv, keys, "bob"), topic, [b"denied"])
    grant(srv, keys, "User:bob", topic, AclOperation.DESCRIBE)
    # not idempotent: that would ask for the cluster's IdempotentWrite first
    bob = as_user(srv, keys, "bob", **{"enable.idempotence": False, "retries": 0})
    assert produce(bob, topic, [b"denied"])[0].code == TOPIC_DENIED
    grant(srv, keys, "User:alice", topic, AclOperation.WRITE, AclOperation.DESCRIBE)
    alice = as_user(srv, keys, "alice", **{"enable.idempotence": False})
    assert produce(alice, topic, [b"allowed"]) == [None]
    # bob's were answered TOPIC_AUTHORIZATION_FAILED before alice's went
    assert stored_now(srv, keys, topic) == [b"allowed"]


def test_a_client_without_keys_on_this_host_is_its_unix_user(srv, keys):
    """The local door (server/network/native_listener.py): no handshake to refuse,
    but a principal, User:unix:<name>, that the ACLs know nothing of here,
    so it writes nothing; a key holder's records are untouched."""
    topic = "curve-keyless"
    create_topic(srv, keys, topic)
    produce(as_user(srv, keys, "admin"), topic, [b"allowed"])
    with pytest.raises(errors.TopicAuthorizationFailedError):
        produce(srv.config(), topic, [b"intruder"])
    assert stored_now(srv, keys, topic) == [b"allowed"]


def test_ring_attach_needs_the_authenticated_channel_and_write(srv, keys):
    from kafkalite.shm.ring import ProducerRing
    before = shm_entries()
    worker = srv.refresh()["workers"][0]["endpoint"]
    ring = ProducerRing.create(1 << 20)
    attach = {"op": "shm_attach", "ring": ring.name, "secret": ring.attach_secret.hex()}
    try:
        # the ring's files: its owner's only
        assert {os.stat(p).st_mode & 0o777 for p in _ring_files(ring.name)} == {0o600}
        bob = native(srv, keys, "bob", worker)
        try:
            with pytest.raises(errors.TopicAuthorizationFailedError, match="attach a ring"):
                bob.extension(attach, 10)
        finally:
            bob.close()
            bob.sock.context.term()
        # without keys, on this host: the local door, as this Unix user, who
        # may write nothing here
        plain = Connection(worker, "test-plain", zmq.Context.instance())
        try:
            assert plain.door is not None
            with pytest.raises(errors.TopicAuthorizationFailedError, match="attach a ring"):
                plain.extension(attach, 10)
        finally:
            plain.close()
        admin = native(srv, keys, "admin", worker)
        try:
            assert admin.extension(attach, 10)["worker"] == 0
        finally:
            admin.close()
            admin.sock.context.term()
    finally:
        ring.close(unlink=True)
    wait_until(lambda: not shm_entries() - before, 10,
               lambda: f"the ring's files gone: {shm_entries() - before}")


def _ring_files(name: str) -> list[str]:
    from kafkalite.shm.ring import SHM_DIR
    return [os.path.join(SHM_DIR, e) for e in os.listdir(SHM_DIR) if e.startswith(name)]


def test_replication_between_workers_runs_over_curve(srv, keys):
    topic = "curve-replicated"
    create_topic(srv, keys, topic, 1, 2, **{"min.insync.replicas": "2"})
    # acks=all with min.insync.replicas=2: stored only once the follower
    # fetched it, over its CURVE connection to the leader
    values = [b"r%d" % i for i in range(50)]
    assert produce(as_user(srv, keys, "admin", acks="all"), topic, values, 60.0) == [None] * 50
    assert stored(srv, keys, topic, 50, 20.0) == values


def test_transactions_run_over_curve(srv, keys):
    """The coordinator's markers to the workers and the workers'
    verification with the coordinator are native requests between broker
    processes: with CURVE they use the server's key."""
    topic = "curve-txn"
    create_topic(srv, keys, topic)
    p = Producer(as_user(srv, keys, "admin", **{"transactional.id": "curve-txn",
                                                "kafkalite.transport": "zmq"}))
    try:
        p.init_transactions(30)
        p.begin_transaction()
        p.produce(topic, b"committed")
        p.commit_transaction(30)
    finally:
        p.close()
    got = read_all(srv, topic, 1, 1, 20.0, **client_keys(keys, "admin"),
                   **{"isolation.level": "read_committed"})
    assert [m.value() for m in got] == [b"committed"]


def test_no_plaintext_tcp_link_is_offered_under_curve(srv, keys):
    """A worker whose native port needs CURVE refuses the ``kafka_endpoint``
    extension (a direct TCP link would be plaintext and ANONYMOUS); a client
    cannot even ask for one with CURVE keys."""
    worker = srv.refresh()["workers"][0]["endpoint"]
    admin = native(srv, keys, "admin", worker)
    try:
        with pytest.raises(errors.SecurityDisabledError, match="requires CURVE"):
            admin.extension({"op": "kafka_endpoint"}, 10)
    finally:
        admin.close()
        admin.sock.context.term()
    with pytest.raises(ValueError, match="cannot be used with CURVE"):
        Producer(as_user(srv, keys, "alice", **{"kafkalite.transport": "tcp"}))
