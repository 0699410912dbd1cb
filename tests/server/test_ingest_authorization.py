"""The plain ZeroMQ ingest gateway under CURVE, the authorizer and quotas
(issue 18): each message is produced on behalf of its publisher's principal.

One real server for the module: 2 workers, ``native_curve_secret_key_file``
and ``native_curve_authorized_keys`` (``kafkalite curve keygen`` files:
admin, alice, carol, dave), ``authorizer_enabled`` with super user
``User:admin``. Publishers are plain ZeroMQ PUSH sockets with their own
keys; what landed is read back with admin's key.

- alice may write topic A only: her messages to B never land (and the
  gateway logs the denial naming her and B) while hers to A keep landing;
  admin, a super user, writes both;
- a native client that is not the server (even the super user) naming
  another principal in its Produce request is refused with
  CLUSTER_AUTHORIZATION_FAILED and writes nothing;
- carol, with a producer_byte_rate quota, is held near it through the
  gateway while dave, without one, publishing as fast beside her, is not
  slowed; carol's records are delayed, not dropped (they all land once her
  quota is lifted);
- erin, over her quota, flooding as fast as ZeroMQ takes it, is held back
  by ZeroMQ's high-water marks once her backlog in the gateway is full:
  the gateway's memory stays bounded, and her records all land later.
"""
from __future__ import annotations

import re
import time

import pytest
import zmq

from curve_helpers import ADMIN_PASSWORD, client_keys, keygen, start_curve_server
from harness import child_pids, read_all, reset_peak_rss, rss_mb, scrape, wait_until

from kafkalite import errors
from kafkalite.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from kafkalite.client.admin import ClientQuotaAlteration, ClientQuotaEntity
from kafkalite.client.connection import Connection, client_context
from kafkalite.client.ingest import PRINCIPAL_BACKLOG_BYTES
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AclOperation, AclPermissionType, PatternType, ResourceType

USERS = ("admin", "alice", "carol", "dave", "erin")


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    root = tmp_path_factory.mktemp("ingest-curve")
    for name in USERS:
        keygen(root / "authorized", name)
    keygen(root, "server")
    return root


@pytest.fixture(scope="module")
def srv(keys):
    s = start_curve_server(keys)
    try:
        yield s
    finally:
        s.stop()
        s.kill()


def admin_client(srv, keys) -> AdminClient:
    return AdminClient(srv.config(**client_keys(keys, "admin")))


def create_topics(srv, keys, *names: str) -> None:
    admin = admin_client(srv, keys)
    try:
        for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
            f.result()
    finally:
        admin.close()


def grant_write(srv, keys, principal: str, topic: str) -> None:
    conn = Connection(f"tcp://{srv.bootstrap}", "test-admin",
                      client_context(client_keys(keys, "admin")))
    try:
        resp = conn.request(ApiKey.CREATE_ACLS, {"creations": [
            {"resource_type": ResourceType.TOPIC, "resource_name": topic,
             "resource_pattern_type": PatternType.LITERAL, "principal": principal, "host": "*",
             "operation": AclOperation.WRITE, "permission_type": AclPermissionType.ALLOW}]},
            version=3)
        assert all(r["error_code"] == 0 for r in resp["results"]), resp
    finally:
        conn.close()
        conn.sock.context.term()


def publisher(ctx: zmq.Context, srv, keys, user: str) -> zmq.Socket:
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 5000)
    push.curve_serverkey = zmq.auth.load_certificate(keys / "server.key")[0]
    push.curve_publickey, push.curve_secretkey = zmq.auth.load_certificate(
        keys / "authorized" / f"{user}.key_secret")
    push.connect(srv.info["ingest"])
    return push


def stored(srv, keys, topic: str, expect: int, timeout: float = 20.0) -> list[bytes]:
    return [m.value() for m in read_all(srv, topic, 1, expect, timeout,
                                        **client_keys(keys, "admin"))]


def set_quota(srv, keys, user: str, rate: int | None) -> None:
    admin = admin_client(srv, keys)
    try:
        for f in admin.alter_client_quotas([ClientQuotaAlteration(
                ClientQuotaEntity({"user": user}), {"producer_byte_rate": rate})]).values():
            f.result()
    finally:
        admin.close()


def test_a_publisher_writes_only_the_topics_it_may(srv, keys):
    create_topics(srv, keys, "ingest-a", "ingest-b")
    grant_write(srv, keys, "User:alice", "ingest-a")
    ctx = zmq.Context()
    try:
        alice = publisher(ctx, srv, keys, "alice")
        for i in range(20):
            alice.send_multipart([b"ingest-a", b"", b"alice-a-%d" % i])
            alice.send_multipart([b"ingest-b", b"", b"alice-b-%d" % i])
        wait_until(lambda: re.search(r"dropped a message of User:alice to topic ingest-b",
                                     srv.output()), 20, "the gateway's denial log line")
        # after the denials, alice's messages to A keep landing
        for i in range(20, 30):
            alice.send_multipart([b"ingest-a", b"", b"alice-a-%d" % i])
        admin = publisher(ctx, srv, keys, "admin")
        admin.send_multipart([b"ingest-a", b"", b"admin-a"])
        admin.send_multipart([b"ingest-b", b"", b"admin-b"])
        a = stored(srv, keys, "ingest-a", 31)
        # all of alice's were let through or dropped before her last to A
        # landed; 2 s more for any of hers to B that got through to land
        b = stored(srv, keys, "ingest-b", 21, 2.0)
    finally:
        ctx.destroy(linger=0)
    assert sorted(a) == sorted([b"alice-a-%d" % i for i in range(30)] + [b"admin-a"])
    assert b == [b"admin-b"]


@pytest.mark.parametrize("user", ["alice", "admin"])
def test_only_the_server_may_produce_on_behalf_of_another_principal(srv, keys, user):
    topic = f"ingest-behalf-{user}"
    create_topics(srv, keys, topic)
    grant_write(srv, keys, "User:alice", topic)
    results = []
    p = Producer(srv.config(**client_keys(keys, user), **{
        "kafkalite.request.principal": "User:dave", "enable.idempotence": False,
        "retries": 0, "kafkalite.transport": "zmq"}))
    try:
        p.produce(topic, b"impersonated", on_delivery=lambda err, msg: results.append(err))
        assert p.flush(20) == 0
    finally:
        p.close()
    assert results[0] is not None and \
        results[0].code == errors.ClusterAuthorizationFailedError.code, results
    assert "may not produce on behalf of User:dave" in str(results[0])
    # the same client without the field writes (it may); the refused record
    # would be before it
    p = Producer(srv.config(**client_keys(keys, user), **{"kafkalite.transport": "zmq"}))
    try:
        p.produce(topic, b"own")
        assert p.flush(20) == 0
    finally:
        p.close()
    assert stored(srv, keys, topic, 1) == [b"own"]


def high_watermark(consumer: Consumer, topic: str) -> int:
    return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]


def test_a_publisher_over_its_quota_is_held_near_it_and_another_is_not(srv, keys):
    quota = 100_000                         # bytes/s for User:carol
    size, rate, tick_s, seconds = 1000, 300, 0.01, 5.0      # each: 300 KB/s for 5 s
    create_topics(srv, keys, "ingest-carol", "ingest-dave")
    grant_write(srv, keys, "User:carol", "ingest-carol")
    grant_write(srv, keys, "User:dave", "ingest-dave")
    set_quota(srv, keys, "carol", quota)
    ctx = zmq.Context()
    consumer = Consumer(srv.config(**client_keys(keys, "admin")))
    try:
        carol, dave = publisher(ctx, srv, keys, "carol"), publisher(ctx, srv, keys, "dave")
        sent = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            # paced by the clock, not the ticks: a loaded machine's late
            # wake-ups do not lower the rate
            while sent < rate * (time.monotonic() - started):
                carol.send_multipart([b"ingest-carol", b"", b"c" * size])
                dave.send_multipart([b"ingest-dave", b"", b"d" * size])
                sent += 1
            time.sleep(tick_s)
        elapsed = time.monotonic() - started
        carol_landed = high_watermark(consumer, "ingest-carol") * size
        dave_landed = high_watermark(consumer, "ingest-dave")
        sent_bytes = sent * size
        metrics = scrape(srv, "admin", ADMIN_PASSWORD)
        # delayed, not dropped: with her quota lifted the rest of carol's
        # records land (at her quota they would take (sent - landed) / quota)
        set_quota(srv, keys, "carol", None)
        wait_until(lambda: high_watermark(consumer, "ingest-carol") == sent, 30,
                   lambda: f"all {sent} of carol's records "
                           f"({high_watermark(consumer, 'ingest-carol')} landed)", interval=0.2)
    finally:
        consumer.close()
        ctx.destroy(linger=0)
    # she was sending three times her quota: held near it (one window's
    # burst and what was in flight as slack), and not starved either
    assert carol_landed <= 1.25 * quota * (elapsed + 2), \
        f"{carol_landed / elapsed:.0f} B/s landed, quota {quota}, {sent_bytes / elapsed:.0f} sent"
    assert carol_landed >= 0.5 * quota * elapsed, f"{carol_landed / elapsed:.0f} B/s landed"
    # the bound above is well below what she sent: it catches a quota not applied
    assert sent_bytes > 1.2 * 1.25 * quota * (elapsed + 2), f"{sent_bytes} B sent"
    # dave, beside her, is not slowed: all but the last moment's records landed
    assert dave_landed >= 0.9 * sent, f"{dave_landed} of {sent} landed"
    # the throttle is carol's (her quota entity, /users/carol) in /metrics
    throttled = {(labels, float(ms)) for labels, ms in re.findall(
        r'^kafka_server_produce_throttle_time_ms\S*\{([^}]*)\} (\S+)$', metrics, re.M)}
    assert any('user="carol"' in labels and ms > 0 for labels, ms in throttled), throttled
    assert not any('user="dave"' in labels and ms > 0 for labels, ms in throttled), throttled


def test_a_flooding_throttled_publisher_is_held_back_by_zeromq_not_buffered(srv, keys):
    quota = 4_000_000
    size, seconds = 10_000, 3.0
    create_topics(srv, keys, "ingest-erin")
    grant_write(srv, keys, "User:erin", "ingest-erin")
    set_quota(srv, keys, "erin", quota)
    (gateway,) = child_pids(srv.proc.pid, "kafkalite.client.ingest")
    before = rss_mb(gateway)
    reset_peak_rss(gateway)
    ctx = zmq.Context()
    consumer = Consumer(srv.config(**client_keys(keys, "admin")))
    try:
        erin = publisher(ctx, srv, keys, "erin")
        sent = refused = 0
        value = b"e" * size
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            try:
                erin.send_multipart([b"ingest-erin", b"", value], zmq.NOBLOCK)
                sent += 1
            except zmq.Again:
                refused += 1
                time.sleep(0.001)
        elapsed = time.monotonic() - started
        peak = rss_mb(gateway, "VmHWM")
        # delayed, not dropped: with her quota lifted, all of erin's land
        set_quota(srv, keys, "erin", None)
        wait_until(lambda: high_watermark(consumer, "ingest-erin") == sent,
                   3 * sent * size / quota + 10, "all of erin's records", interval=0.2)
    finally:
        consumer.close()
        ctx.destroy(linger=0)
    # ZeroMQ refused her sends: the gateway had stopped reading
    assert refused > 0, f"{sent} sent, none refused in {elapsed:.1f} s"
    # what went in: her quota's worth, her backlog, and what ZeroMQ's queues
    # (1000 messages a side) and TCP hold, with slack
    slack = PRINCIPAL_BACKLOG_BYTES + 2 * 1000 * size + 8_000_000
    assert sent * size <= 1.25 * quota * (elapsed + 2) + slack, \
        f"{sent * size / elapsed:.0f} B/s taken, quota {quota}"
    assert peak - before < (PRINCIPAL_BACKLOG_BYTES + 2 * 1000 * size) / 2**20 + 64, \
        f"gateway RSS {before:.0f} MiB -> peak {peak:.0f} MiB"
