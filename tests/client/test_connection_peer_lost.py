"""A request waited on over a Connection ends when its answer cannot come.

The peer here is a real process: a ZeroMQ ROUTER speaking the native
extension framing, which answers after a delay it is told, or never.
Killing it -9 while a request waits is what a broker node's death looks
like to the clients connected to it (the node-kill tests saw requests to a
dead node wait out their 30 s timeout). A context destroyed with such a
link still open must not hang: a first version of this that kept every
link's socket monitor hung a test run in Context.destroy (the monitor's
reader closed first, and the next event blocked the context's I/O
thread); the test below guards it, though it did not reproduce that hang
on demand.
"""
import subprocess
import threading
import sys
import time

import pytest
import zmq

from harness import free_port
from kafkalite.client import connection as connection_mod
from kafkalite.client.connection import Connection, KafkaTimeoutError, PeerLostError

PEER = r"""
import sys, time, zmq
from kafkalite.protocol import native
ctx = zmq.Context()
router = ctx.socket(zmq.ROUTER)
router.bind(sys.argv[1])
print("ready", flush=True)
while True:
    ident, payload = router.recv_multipart()
    cid, body = native.decode_extension_request(payload)
    if body.get("never"):
        continue
    time.sleep(body.get("delay", 0))
    router.send_multipart([ident, native.encode_extension_response(cid, {"echo": body})])
"""


def free_endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture(autouse=True)
def short_grace(monkeypatch):
    """A refused endpoint gives up after 1 s, probed every 0.25 s (3 s and
    1 s in production): how long the grace is is not what these tests are
    about, that it ends (or does not) is."""
    monkeypatch.setattr(connection_mod, "PEER_DOWN_GRACE_S", 1.0)
    monkeypatch.setattr(connection_mod, "PROBE_EVERY_S", 0.25)


class Peer:
    def __init__(self, endpoint):
        self.proc = subprocess.Popen([sys.executable, "-c", PEER, endpoint],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def kill(self):
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def peers():
    started = []

    def start(endpoint):
        started.append(Peer(endpoint))
        return started[-1]
    yield start
    for p in started:
        if p.proc.poll() is None:
            p.kill()


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.destroy(linger=0)


@pytest.mark.processes
def test_a_request_to_a_peer_killed_while_it_waits_ends_within_the_grace(peers, ctx):
    endpoint = free_endpoint()
    peer = peers(endpoint)
    conn = Connection(endpoint, "test", ctx)
    try:
        assert conn.extension({"op": "echo"}, 10)["echo"] == {"op": "echo"}
        cid = conn.send_extension({"op": "echo", "never": True})
        started = time.monotonic()
        peer.kill()
        with pytest.raises(PeerLostError, match="refused connections"):
            conn.wait_for(cid, 30.0)
        took = time.monotonic() - started
        assert took < connection_mod.PEER_DOWN_GRACE_S + 3.0, \
            f"waited {took:.1f} s for an answer that could not come"
    finally:
        conn.close()


def test_a_request_to_an_endpoint_nothing_listens_on_ends_after_the_grace(ctx):
    conn = Connection(free_endpoint(), "test", ctx)
    try:
        started = time.monotonic()
        with pytest.raises(PeerLostError, match="refused connections"):
            conn.extension({"op": "echo"}, 30.0)
        took = time.monotonic() - started
        assert took < connection_mod.PEER_DOWN_GRACE_S + 3.0, took
    finally:
        conn.close()


@pytest.mark.processes
def test_the_link_is_usable_again_once_its_peer_is_back(peers, ctx):
    endpoint = free_endpoint()
    peer = peers(endpoint)
    conn = Connection(endpoint, "test", ctx)
    try:
        assert conn.extension({"op": "echo", "n": 1}, 10)["echo"]["n"] == 1
        cid = conn.send_extension({"op": "echo", "never": True})
        peer.kill()
        with pytest.raises(PeerLostError):
            conn.wait_for(cid, 30.0)
        peers(endpoint)                      # the process restarted on its address
        assert conn.extension({"op": "echo", "n": 2}, 15)["echo"]["n"] == 2
    finally:
        conn.close()


@pytest.mark.processes
def test_a_slow_live_peer_is_waited_for(peers, ctx):
    """No early end while the connection stands: a slow answer comes, and a
    missing one ends at the request's own timeout."""
    endpoint = free_endpoint()
    peers(endpoint)
    conn = Connection(endpoint, "test", ctx)
    try:
        assert conn.extension({"op": "echo", "delay": 1.5}, 10)["echo"]["delay"] == 1.5
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError) as info:
            conn.extension({"op": "echo", "never": True}, connection_mod.PEER_DOWN_GRACE_S + 1.0)
        assert type(info.value) is KafkaTimeoutError
        assert time.monotonic() - started >= connection_mod.PEER_DOWN_GRACE_S + 1.0
    finally:
        conn.close()


@pytest.mark.processes
def test_a_context_destroyed_with_links_still_open_does_not_hang(peers):
    """Links to a live peer, then to one just killed (their sockets retry,
    and a monitor would get an event per retry), dropped with the context."""
    for _ in range(10):
        endpoint = free_endpoint()
        peer = peers(endpoint)
        ctx = zmq.Context()
        ctx.setsockopt(zmq.RECONNECT_IVL, 1)     # many retries, many events
        conns = [Connection(endpoint, "test", ctx) for _ in range(3)]
        assert conns[0].extension({"op": "echo"}, 10)["echo"] == {"op": "echo"}
        peer.kill()
        time.sleep(0.3)         # retries, each an event for a monitor, pile up meanwhile
        done = threading.Event()
        t = threading.Thread(target=lambda: (ctx.destroy(linger=0), done.set()), daemon=True)
        t.start()
        assert done.wait(10), "Context.destroy hung on a link's socket monitor"


@pytest.mark.processes
def test_a_client_whose_context_cannot_end_still_closes(peers, monkeypatch, caplog):
    """A socket left open on a client's context (planted here: a leak)
    made close() wait in term() for ever; it now returns, naming it."""
    from kafkalite.client import Producer
    monkeypatch.setattr(connection_mod, "TERM_WAIT_S", 1.0)
    endpoint = free_endpoint()
    peers(endpoint)
    producer = Producer({"bootstrap.servers": endpoint.removeprefix("tcp://")})
    leak = producer._ctx.socket(zmq.DEALER)
    leak.connect(endpoint)
    started = time.monotonic()
    with caplog.at_level("ERROR", logger="kafkalite.client.connection"):
        producer.close(5)
    assert time.monotonic() - started < 10
    assert "did not end" in caplog.text and "tcp://" in caplog.text, caplog.text
    leak.close(0)

