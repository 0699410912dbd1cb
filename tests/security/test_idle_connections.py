"""Connections that never authenticate, and idle ones, against a real server.

Issue 40 found 500 of 500 connections that never authenticated still open
after 45 s, ``connections.max.idle.ms`` refused as an unknown setting, and
the supervisor holding 507 descriptors. Here SASL_SSL servers with short
bounds (``authentication_timeout_ms``; Kafka's own name for the idle one,
as copied from a server.properties) and Kafka's own client:

- 500 raw TCP connections, half to the supervisor's Kafka port and half to
  a worker's, that never send a byte are each closed by the server once
  ``authentication_timeout_ms`` has passed (EOF or a reset), and the
  supervisor's and the workers' descriptor counts return to where they
  started;
- a connection that logged in and then says nothing is closed after
  ``connections.max.idle.ms``, while one that keeps sending requests is not;
- confluent-kafka's producer and admin client keep working across those
  closes: they connect again.

A module of its own servers (one per bound, so that neither closes what the
other test waits for).
"""
from __future__ import annotations

import json
import os
import socket
import ssl
import sys
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire, closed_by_server, raise_fd_limit  # noqa: E402
from harness import ServerProcess, run_cli, wait_until
from kafkalite.protocol import ApiKey
from kafkalite.tools.dev_certs import make_certs

AUTH_TIMEOUT_MS = 2000
IDLE_MS = 1500
N = 500
USER, PASSWORD = "alice", "alice-secret-1"
TOPIC = "idle-connections"
VERSIONS = {"client_software_name": "idle-test", "client_software_version": "1"}

pytestmark = pytest.mark.xdist_group("security_idle_connections")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


def _start(root, certs, settings: str) -> ServerProcess:
    data = str(root / "data")
    os.makedirs(data)
    r = run_cli("users", "add", USER, "--data-dir", data, stdin=PASSWORD.encode() + b"\n")
    assert r.returncode == 0, r.stderr.decode()
    config = root / "server.toml"
    config.write_text(settings)
    return ServerProcess(data, extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_SSL",
        "--ssl-certfile", certs["server"], "--ssl-keyfile", certs["server_key"]]).start()


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory, certs):
    srv = _start(tmp_path_factory.mktemp("auth"), certs,
                 f"authentication_timeout_ms = {AUTH_TIMEOUT_MS}\n")
    yield srv
    srv.stop()
    srv.kill()


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory, certs):
    srv = _start(tmp_path_factory.mktemp("idle"), certs,
                 f'"connections.max.idle.ms" = {IDLE_MS}\n')
    yield srv
    srv.stop()
    srv.kill()


def ck_conf(srv, certs, **extra) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_SSL",
            "ssl.ca.location": certs["ca"], "sasl.mechanisms": "SCRAM-SHA-256",
            "sasl.username": USER, "sasl.password": PASSWORD, "socket.timeout.ms": 10000,
            **extra}


def kafka_ports(srv) -> list[int]:
    """The supervisor's Kafka port and worker 0's."""
    supervisor = int(srv.kafka_bootstrap.rsplit(":", 1)[1])
    worker = next(b["port"] for b in srv.info["kafka_brokers"] if b["node_id"] == 0)
    return [supervisor, worker]


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def logged_in(port: int, certs: dict) -> KafkaWire:
    """A blocking SASL_SSL Kafka-protocol connection, logged in with PLAIN."""
    wire = KafkaWire(f"127.0.0.1:{port}",
                     context=ssl.create_default_context(cafile=certs["ca"]))
    wire.login_plain(USER, PASSWORD)
    return wire


@pytest.mark.timeout(120)
def test_500_connections_that_never_authenticate_are_closed(auth_server, certs):
    srv = auth_server
    pids = [srv.proc.pid, *srv.worker_pids()]
    raise_fd_limit(len(os.listdir("/proc/self/fd")) + N + 100)
    before = {pid: open_fds(pid) for pid in pids}
    ports = kafka_ports(srv)
    connected: dict = {}        # socket -> when its connect returned
    lifetimes: dict = {}        # socket -> how long the server kept it
    peak = dict(before)
    try:
        for i in range(N):
            s = socket.create_connection(("127.0.0.1", ports[i % 2]), timeout=10)
            connected[s] = time.monotonic()

        def all_closed():
            for pid in pids:
                peak[pid] = max(peak[pid], open_fds(pid))
            for s, at in connected.items():
                if s not in lifetimes and closed_by_server(s):
                    lifetimes[s] = time.monotonic() - at
            return len(lifetimes) == N
        wait_until(all_closed, AUTH_TIMEOUT_MS / 1000 + 6,
                   lambda: f"the server to close every connection that never authenticated "
                           f"({len(lifetimes)} of {N} closed)")
        bound = AUTH_TIMEOUT_MS / 1000
        assert min(lifetimes.values()) >= bound - 0.1, "closed before authentication_timeout_ms"
        # (the default bound, 10 s, would not do: the setting is the server's)
        assert max(lifetimes.values()) <= bound + 5
        # they did hold descriptors, on both processes, and hold none now
        assert peak[srv.proc.pid] > before[srv.proc.pid] + N // 4, (before, peak)
        assert peak[pids[1]] > before[pids[1]] + N // 4, (before, peak)
        wait_until(lambda: all(open_fds(pid) <= before[pid] + 5 for pid in pids), 10,
                   lambda: f"the descriptor counts back at {before}: "
                           f"{ {pid: open_fds(pid) for pid in pids} }")
    finally:
        for s in connected:
            s.close()
    # and a client that logs in is served as before
    admin = AdminClient(ck_conf(srv, certs))
    assert admin.list_topics(timeout=15).brokers
    del admin


@pytest.mark.timeout(120)
def test_an_idle_connection_is_closed_and_a_busy_one_is_not(idle_server, certs):
    port = kafka_ports(idle_server)[0]
    idle, busy = logged_in(port, certs), logged_in(port, certs)
    try:
        for c in (idle, busy):
            assert c.request(ApiKey.API_VERSIONS, 3, VERSIONS)["error_code"] == 0
        quiet_since = time.monotonic()
        end = quiet_since + 3 * IDLE_MS / 1000
        while time.monotonic() < end:
            assert busy.request(ApiKey.API_VERSIONS, 3, VERSIONS)["error_code"] == 0
            time.sleep(IDLE_MS / 1000 / 5)
        assert idle.closed_by_server(wait=5)
        assert not busy.closed_by_server(wait=0.1)
        assert busy.request(ApiKey.API_VERSIONS, 3, VERSIONS)["error_code"] == 0
    finally:
        idle.close()
        busy.close()


@pytest.mark.timeout(120)
def test_kafka_clients_keep_working_across_idle_closes(idle_server, certs):
    """librdkafka counts a broker's close in its statistics (``disconnects``)
    and connects again when it next has something to send."""
    stats: list = []
    admin = AdminClient(ck_conf(idle_server, certs))
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(15)
    delivered: list = []
    p = ck.Producer(ck_conf(idle_server, certs, **{"statistics.interval.ms": 200,
                                                   "stats_cb": stats.append, "linger.ms": 0}))
    try:
        for round_ in range(2):
            for n in range(10):
                p.produce(TOPIC, b"r%d-%d" % (round_, n), partition=n % 2,
                          on_delivery=lambda err, msg: delivered.append(err))
            assert p.flush(15) == 0
            assert delivered == [None] * 10 * (round_ + 1)

            def disconnected():
                p.poll(0.1)
                if not stats:
                    return 0
                brokers = json.loads(stats[-1])["brokers"].values()
                return sum(b["disconnects"] for b in brokers if b["nodeid"] >= 0)
            # the broker closed the connections the producer had used
            wait_until(lambda: disconnected() >= round_ + 1, IDLE_MS / 1000 + 10,
                       "the server to close the producer's idle connections")
        # the admin client's connection went idle too: it connects again
        assert TOPIC in admin.list_topics(timeout=15).topics
        assert admin.create_topics([NewTopic(TOPIC + "-2", 1, 1)])[TOPIC + "-2"].result(15) \
            is None
    finally:
        p.flush(5)
        del p, admin        # gone before the server stops, or they keep reconnecting
