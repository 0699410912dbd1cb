"""Idle and unauthenticated connections on a Kafka listener
(kafkalite/server/network/kafka_listener.py, "Idle connections").

Listeners made in this process with short bounds, on real sockets, run by
one event-loop thread as a broker process runs them (``on_events``, then
``expire``, sleeping until ``next_deadline``): 500 connections that never
start their TLS handshake on a SASL_SSL listener are all closed once
``authentication_timeout_ms`` has passed, and the descriptors they held
with them, while one that logged in meanwhile stays; so are a handshake
begun and not finished and a SASL login dribbled out a byte at a time. A
connection that says nothing is closed after ``connections_max_idle_ms``,
one that keeps sending requests is not, and neither is one whose request
is answered later than that. (tests/security/test_idle_connections.py does
the same against a real server and Kafka's own client.)
"""
from __future__ import annotations

import os
import socket
import ssl
import sys
import struct
import threading
import time

import pytest
import zmq

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire, closed_by_server, raise_fd_limit  # noqa: E402
from harness import wait_until
from kafkalite.protocol import ApiKey
from kafkalite.server.auth.credentials import CredentialStore, make_credential, write_users
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.network.requests import DEFERRED, RequestDispatcher
from kafkalite.server.auth.security import ListenerSecurity
from kafkalite.tools.dev_certs import make_certs

AUTH_TIMEOUT_MS = 2000
IDLE_MS = 600
N = 500
SLOW_ANSWER_S = 3 * IDLE_MS / 1000      # a deferred answer later than the idle bound
USER, PASSWORD = "alice", "alice-pw"


class Loop:
    """Kafka listeners and their poll loop on a thread of this process."""

    def __init__(self, **listener_args):
        self.poller = zmq.Poller()
        self.timers: list = []           # (due, callable), run by the loop
        handlers = {ApiKey.LIST_GROUPS: self._slow}
        self.listener = KafkaListener("127.0.0.1", 0, RequestDispatcher("test", handlers),
                                      name="test", **listener_args)
        self.listener.attach(self.poller)
        self._stop = False
        self.passes = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return self.listener.port

    def _slow(self, ctx, body):
        answer = {"throttle_time_ms": 0, "error_code": 0, "groups": []}
        self.timers.append((time.monotonic() + SLOW_ANSWER_S, lambda: ctx.respond(answer)))
        return DEFERRED

    def _run(self):
        listener = self.listener
        while not self._stop:
            due = [t[0] for t in self.timers]
            if listener.next_deadline() is not None:
                due.append(listener.next_deadline())
            timeout = min([50.0] + [max(0.0, (d - time.monotonic()) * 1000) + 1 for d in due])
            events = dict(self.poller.poll(timeout))
            listener.on_events(events)
            listener.expire()
            self.passes += 1
            now = time.monotonic()
            for timer in [t for t in self.timers if t[0] <= now]:
                self.timers.remove(timer)
                timer[1]()

    def open_connections(self) -> int:
        return len(self.listener.connections)

    def close(self):
        self._stop = True
        self.thread.join(5)
        self.listener.close()


def wait_for_closes(connected: dict, timeout: float) -> list[float]:
    """Wait until the broker has closed every socket of ``connected``
    (socket -> when it connected); how long each stayed open (to within the
    polling interval)."""
    lifetimes: dict = {}

    def all_closed():
        for s, at in connected.items():
            if s not in lifetimes and closed_by_server(s):
                lifetimes[s] = time.monotonic() - at
        return len(lifetimes) == len(connected)
    wait_until(all_closed, timeout, lambda: f"the broker to close every connection "
                                            f"({len(lifetimes)} of {len(connected)} closed)")
    return list(lifetimes.values())


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture
def sasl_ssl(tmp_path, certs):
    users = str(tmp_path / "users.json")
    write_users(users, {USER: {"PLAIN": make_credential("PLAIN", PASSWORD)}})
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs["server"], certs["server_key"])
    loop = Loop(security=ListenerSecurity("SASL_SSL", context, ("PLAIN",),
                                          CredentialStore(users)),
                authentication_timeout_ms=AUTH_TIMEOUT_MS)
    client_context = ssl.create_default_context(cafile=certs["ca"])
    yield loop, client_context
    loop.close()


@pytest.fixture
def plaintext():
    loop = Loop(connections_max_idle_ms=IDLE_MS)
    yield loop
    loop.close()


def test_connections_that_never_authenticate_are_closed_and_their_descriptors_freed(sasl_ssl):
    loop, client_context = sasl_ssl
    raise_fd_limit(open_fds() + 2 * N + 100)
    before = open_fds()
    connected: dict = {}        # socket -> when its connect returned
    try:
        for _ in range(N):
            s = socket.create_connection(("127.0.0.1", loop.port), timeout=10)
            connected[s] = time.monotonic()
        # one that logs in within the bound is served, and kept, past it
        good = KafkaWire(f"127.0.0.1:{loop.port}", context=client_context)
        good.login_plain(USER, PASSWORD)
        lifetimes = wait_for_closes(connected, AUTH_TIMEOUT_MS / 1000 + 5)
        bound = AUTH_TIMEOUT_MS / 1000
        assert min(lifetimes) >= bound - 0.1, "closed before authentication_timeout_ms"
        assert max(lifetimes) <= bound + 5
        assert loop.open_connections() == 1
        # the listener's ends are gone: what is left is the client sockets
        assert open_fds() <= before + N + 1 + 5
        answer = good.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                       "client_software_version": "1"})
        assert answer["error_code"] == 0
        good.close()
    finally:
        for s in connected:
            s.close()


def test_a_tls_handshake_started_and_not_finished_is_closed_too(sasl_ssl):
    """A ClientHello and then nothing: the handshake waits for the client's
    next flight, which never comes."""
    loop, client_context = sasl_ssl
    raw = socket.create_connection(("127.0.0.1", loop.port), timeout=10)
    try:
        tls = client_context.wrap_bio(ssl.MemoryBIO(), outgoing := ssl.MemoryBIO(),
                                      server_hostname="localhost")
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        raw.sendall(outgoing.read())        # the ClientHello, never the Finished
        wait_until(lambda: closed_by_server(raw), AUTH_TIMEOUT_MS / 1000 + 5,
                   "the half-done handshake to be closed")
    finally:
        raw.close()


def test_a_sasl_login_begun_and_never_finished_is_closed(sasl_ssl):
    """TLS done, ApiVersions and SaslHandshake answered, then a byte of the
    SaslAuthenticate frame now and then: activity, but no login."""
    loop, client_context = sasl_ssl
    c = KafkaWire(f"127.0.0.1:{loop.port}", context=client_context)
    try:
        started = time.monotonic()
        assert c.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        c.sock.sendall(struct.pack(">i", 1000))    # a frame that never completes
        c.sock.settimeout(0.3)
        closed = False
        while not closed and time.monotonic() - started < AUTH_TIMEOUT_MS / 1000 + 5:
            try:
                c.sock.sendall(b"\0")             # its body, a byte at a time
                closed = c.sock.recv(1) == b""
            except TimeoutError:
                pass
            except OSError:                         # a reset, or a send after the close
                closed = True
        assert closed, "the connection that never finished its login is still open"
        assert time.monotonic() - started >= AUTH_TIMEOUT_MS / 1000 - 0.05
    finally:
        c.close()


def test_an_idle_connection_is_closed_and_a_busy_one_is_not(plaintext):
    idle, busy = KafkaWire(f"127.0.0.1:{plaintext.port}"), KafkaWire(f"127.0.0.1:{plaintext.port}")
    try:
        versions = {"client_software_name": "t", "client_software_version": "1"}
        for c in (idle, busy):
            assert c.request(ApiKey.API_VERSIONS, 3, versions)["error_code"] == 0
        quiet_since = time.monotonic()
        end = quiet_since + 4 * IDLE_MS / 1000
        while time.monotonic() < end:
            assert busy.request(ApiKey.API_VERSIONS, 3, versions)["error_code"] == 0
            time.sleep(IDLE_MS / 1000 / 4)
        assert idle.closed_by_server()
        assert not busy.closed_by_server()
        assert plaintext.open_connections() == 1
    finally:
        idle.close()
        busy.close()


def test_a_connection_waiting_for_a_late_answer_is_not_idle(plaintext):
    """A request served later than the idle bound (a long poll, a rebalance):
    the connection is busy, not idle; its idle time starts at the answer."""
    c = KafkaWire(f"127.0.0.1:{plaintext.port}")
    try:
        started = time.monotonic()
        answer = c.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
        assert answer["error_code"] == 0
        assert time.monotonic() - started >= SLOW_ANSWER_S - 0.05
        assert not c.closed_by_server()
        wait_until(c.closed_by_server, IDLE_MS / 1000 + 5, "the idle connection to be closed")
    finally:
        c.close()


def test_negative_connections_max_idle_ms_keeps_idle_connections():
    loop = Loop(connections_max_idle_ms=-1)
    c = KafkaWire(f"127.0.0.1:{loop.port}")
    try:
        wait_until(lambda: loop.open_connections() == 1, message="the connection's accept")
        assert loop.listener.next_deadline() is None    # nothing to wake the loop for
        time.sleep(0.2)
        assert not c.closed_by_server()
    finally:
        c.close()
        loop.close()


def test_a_loop_pass_with_nothing_due_does_not_look_at_the_connections():
    """A busy worker makes a loop pass per read: the listener's first
    deadline is kept as one time, not worked out again on each pass. With
    the connection active on every pass its idle deadline moves later, but
    the kept one stays at the first (a lower bound: the loop wakes then,
    ``expire`` looks and works it out again), and nothing closes early."""
    loop = Loop()       # Kafka's 600 s idle bound: nothing falls due in this test
    c = KafkaWire(f"127.0.0.1:{loop.port}")
    try:
        wait_until(lambda: loop.listener.next_deadline() is not None,
                   message="the connection's accept")
        first = loop.listener.next_deadline()
        for _ in range(20):
            assert c.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        passes = loop.passes
        wait_until(lambda: loop.passes >= passes + 5, message="five more passes of the loop")
        assert loop.listener.next_deadline() == first
        assert time.monotonic() + 590 < first
        assert not c.closed_by_server()
    finally:
        c.close()
        loop.close()
