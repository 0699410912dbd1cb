"""SASL re-authentication (KIP-368, ``connections_max_reauth_ms``).

A real server (SASL_PLAINTEXT, sessions of 1.5 s) and Kafka's own client:
a confluent-kafka producer (librdkafka re-authenticates SCRAM sessions when
the broker gives them a lifetime) keeps producing over one connection per
broker across several lifetimes, and the broker counts its
re-authentications in /metrics; a user deleted meanwhile fails its next
re-authentication and its connection is closed. On a bare connection: the
lifetime is told to SaslAuthenticate v1+ only, a v1 client that does not
re-authenticate is closed at its first request after the lifetime, a v0
client keeps its connection, and a re-authentication as another user is
refused.
"""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
import pytest
import scramp
from compat_helpers import KafkaWire
from confluent_kafka.admin import AdminClient, NewTopic

from harness import ServerProcess, run_cli, scrape, wait_until

from kafkalite.protocol import ApiKey

LIFETIME_MS = 1500
USERS = {"alice": "alice-secret-1", "bob": "bob-secret-1", "carol": "carol-secret-1"}

# the module's server is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("sasl_reauthentication")


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("reauth")
    data = str(root / "data")
    os.makedirs(data)
    config = root / "server.toml"
    config.write_text(f"connections_max_reauth_ms = {LIFETIME_MS}\n")
    for user, password in USERS.items():
        users(data, "add", user, input=password + "\n")
    s = ServerProcess(data, extra_args=["--config", str(config),
                                        "--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    try:
        a = AdminClient(conf(s, "alice"))
        a.create_topics([NewTopic("reauth", 2, 1)])["reauth"].result(15)
        yield s
    finally:
        s.stop()
        s.kill()


def users(data: str, *args: str, input: str = "") -> None:
    r = run_cli("users", *args, "--data-dir", data, stdin=input.encode())
    assert r.returncode == 0, r.stderr.decode()


def conf(srv, user: str, mechanism: str = "SCRAM-SHA-512", **extra) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": user, "sasl.password": USERS[user],
            "socket.timeout.ms": 10000, **extra}


def security_counts(srv) -> dict:
    user = next(iter(USERS))     # security on: /metrics asks for a login (http_login.py)
    text = scrape(srv, user, USERS[user])
    counts = {}
    for name in ("reauthentications", "expired_sessions_closed", "authentication_failures"):
        line = next(line for line in text.splitlines()
                    if line.startswith(f"kafkalite_{name}_total "))
        counts[name] = float(line.split()[-1])
    return counts


def wait_for_counts(srv, done, timeout: float = 15.0) -> dict:
    """The counts once ``done(counts)`` (workers report their figures every few seconds)."""
    seen = [None]

    def check():
        seen[0] = counts = security_counts(srv)
        return counts if done(counts) else None
    return wait_until(check, timeout, lambda: f"the security counts, at {seen[0]}",
                      interval=0.5)


def login(w: KafkaWire, user: str, version: int, mechanism: str = "SCRAM-SHA-256") -> int:
    """SCRAM over SaslHandshake v1 + SaslAuthenticate ``version``; the session
    lifetime the broker told (0 for v0, which cannot carry one)."""
    assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mechanism})["error_code"] == 0
    client = scramp.ScramClient([mechanism], user, USERS[user])
    first = w.request(ApiKey.SASL_AUTHENTICATE, version,
                      {"auth_bytes": client.get_client_first().encode()})
    assert first["error_code"] == 0, first
    client.set_server_first(first["auth_bytes"].decode())
    final = w.request(ApiKey.SASL_AUTHENTICATE, version,
                      {"auth_bytes": client.get_client_final().encode()})
    assert final["error_code"] == 0, final
    client.set_server_final(final["auth_bytes"].decode())
    return final.get("session_lifetime_ms")


def metadata(w: KafkaWire) -> dict:
    return w.request(ApiKey.METADATA, 4, {"topics": [], "allow_auto_topic_creation": False})


@pytest.mark.timeout(60)
def test_a_producer_reauthenticates_and_keeps_its_connections(srv):
    before = wait_for_counts(srv, lambda c: True)
    stats, errors, delivered = [], [], []
    p = ck.Producer(conf(srv, "alice", **{"statistics.interval.ms": 500,
                                          "stats_cb": stats.append, "error_cb": errors.append,
                                          "linger.ms": 0}))
    end = time.monotonic() + 3 * LIFETIME_MS / 1000       # several lifetimes
    n = 0
    while time.monotonic() < end:
        p.produce("reauth", b"m-%d" % n, partition=n % 2,
                  on_delivery=lambda err, msg: delivered.append(err))
        n += 1
        p.poll(0.1)
    assert p.flush(15) == 0
    assert delivered == [None] * n, errors
    assert not errors, errors
    import json
    brokers = json.loads(stats[-1])["brokers"]
    # one connection each to the supervisor and the two workers, never re-made
    assert all(b["connects"] <= 1 and b["disconnects"] == 0 for b in brokers.values()
               if b["nodeid"] >= 0), {b["name"]: (b["connects"], b["disconnects"])
                                      for b in brokers.values()}
    after = wait_for_counts(srv, lambda c: c["reauthentications"] >= before["reauthentications"] + 4)
    assert after["reauthentications"] >= before["reauthentications"] + 4, (before, after)
    assert after["expired_sessions_closed"] == before["expired_sessions_closed"]


@pytest.mark.timeout(60)
def test_a_deleted_user_fails_reauthentication_and_is_disconnected(srv):
    errors, delivered = [], []
    p = ck.Producer(conf(srv, "bob", "SCRAM-SHA-256", **{
        "error_cb": errors.append, "message.timeout.ms": 8000}))
    p.produce("reauth", b"before", partition=0, on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(15) == 0 and delivered == [None]
    users(srv.data_dir, "delete", "bob")
    deadline = time.monotonic() + 4 * LIFETIME_MS / 1000 + 15    # slack for a loaded machine
    while not any(e.code() == ck.KafkaError._AUTHENTICATION for e in errors):
        assert time.monotonic() < deadline, f"no authentication error: {errors}"
        p.produce("reauth", b"after", partition=0, on_delivery=lambda e, m: delivered.append(e))
        p.poll(0.2)
    p.purge()
    p.flush(1)
    # the broker's line may reach its log a moment after the client saw the error
    wait_until(lambda: "re-authentication" in srv.output(), 10,
               lambda: "the failed re-authentication in the log: " + srv.output()[-2000:])


@pytest.mark.timeout(30)
def test_a_v1_client_that_does_not_reauthenticate_is_closed_and_a_v0_one_is_not(srv):
    v1, v0 = KafkaWire(srv.kafka_bootstrap), KafkaWire(srv.kafka_bootstrap)
    try:
        assert login(v1, "carol", 1) == LIFETIME_MS
        assert not login(v0, "carol", 0)          # v0 has no lifetime: never expires
        assert metadata(v1)["brokers"] and metadata(v0)["brokers"]
        time.sleep(LIFETIME_MS / 1000 + 0.5)       # the session's lifetime runs out
        assert metadata(v0)["brokers"]
        with pytest.raises((ConnectionError, OSError)):
            metadata(v1)
    finally:
        v1.close()
        v0.close()
    assert "expired without re-authentication" in srv.output()


@pytest.mark.timeout(30)
def test_reauthentication_keeps_the_connection_and_cannot_change_the_principal(srv):
    w = KafkaWire(srv.kafka_bootstrap)
    try:
        assert login(w, "carol", 2) == LIFETIME_MS
        time.sleep(1.1)                     # Kafka's minimum interval between re-authentications
        assert login(w, "carol", 2) == LIFETIME_MS      # again on the same connection
        # one straight after the last is refused (ILLEGAL_SASL_STATE), the connection kept
        answer = w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        assert answer["error_code"] == 34
        time.sleep(LIFETIME_MS / 1000 * 0.8)
        assert metadata(w)["brokers"]       # the second session is alive past the first's end
        # re-authenticating as someone else is refused and closes the connection
        answer = w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        assert answer["error_code"] == 0
        client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", USERS["alice"])
        first = w.request(ApiKey.SASL_AUTHENTICATE, 2,
                          {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first["auth_bytes"].decode())
        final = w.request(ApiKey.SASL_AUTHENTICATE, 2,
                          {"auth_bytes": client.get_client_final().encode()})
        assert final["error_code"] == 58, final     # SASL_AUTHENTICATION_FAILED
        assert "Cannot change principals" in final["error_message"]
        with pytest.raises((ConnectionError, OSError)):
            metadata(w)
    finally:
        w.close()


@pytest.mark.timeout(30)
def test_a_failed_login_is_answered_and_closed_after_kafkas_delay(srv):
    """connection.failed.authentication.delay.ms (100 ms): the broker answers
    a wrong password, then keeps the connection open, reading nothing, for
    the delay before it closes it (a client that reads its socket to the end
    before handling what it read would otherwise lose the answer)."""
    w = KafkaWire(srv.kafka_bootstrap)
    try:
        assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        answer = w.request(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": b"\0carol\0wrong"})
        answered = time.monotonic()
        assert answer["error_code"] == 58, answer          # SASL_AUTHENTICATION_FAILED
        w.sock.settimeout(10)
        assert w.sock.recv(1) == b""                         # then closed, nothing more sent
        closed = time.monotonic() - answered
    finally:
        w.close()
    assert closed >= 0.08, f"closed {closed * 1000:.0f} ms after the answer"
