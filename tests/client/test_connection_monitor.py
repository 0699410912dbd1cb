"""A watched Connection's socket monitor never stalls its ZeroMQ context.

libzmq sends monitor events from the context's I/O thread with a blocking
send. Two ways that once froze every socket of a context (seen as whole
runs of tests whose requests on the shared context timed out, and as a
producer whose flush never finished after worker kills):

- the monitor's queue filling up: a socket retrying a dead endpoint makes
  an event per retry, read only when the owner asks alive();
- the monitor's reader closed before the socket stopped sending events.

The contexts here retry every millisecond (a context's default socket
option), so thousands of events come in seconds rather than minutes.
"""
import socket
import threading
import time

import zmq

from kafkalite.client.connection import Connection


def dead_endpoint() -> str:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def fast_retrying_context() -> zmq.Context:
    ctx = zmq.Context()
    ctx.setsockopt(zmq.RECONNECT_IVL, 1)
    return ctx


def context_still_moves_messages(ctx: zmq.Context, timeout_ms: int = 3000) -> bool:
    """Whether a socket of ``ctx`` still gets an echo from a live peer."""
    peer_ctx = zmq.Context()
    router = peer_ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")

    def echo():
        if router.poll(timeout_ms):
            router.send_multipart(router.recv_multipart())

    t = threading.Thread(target=echo, daemon=True)
    t.start()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    try:
        dealer.send(b"ping")
        return bool(dealer.poll(timeout_ms)) and dealer.recv() == b"ping"
    finally:
        dealer.close()
        t.join()
        router.close()
        peer_ctx.term()


def test_unread_events_of_a_link_retrying_a_dead_worker_do_not_stall_the_context():
    ctx = fast_retrying_context()
    conn = Connection(dead_endpoint(), "test", ctx, watch=True)
    try:
        # thousands of retries, none of their events read: time is the subject
        # (a queue limited to libzmq's default 1,000 stalled the context after
        # 3 s here, not after 2 s)
        time.sleep(4)
        assert context_still_moves_messages(ctx)
        assert not conn.alive()
        # seen dead: its events stop and those queued are dropped, so
        # nothing piles up until it is closed
        time.sleep(0.5)             # no event may come meanwhile
        assert not conn._monitor.poll(0)
    finally:
        conn.close()
    assert context_still_moves_messages(ctx)
    ctx.term()


def test_closing_links_to_dead_workers_does_not_stall_the_context():
    ctx = fast_retrying_context()
    for _ in range(200):
        conn = Connection(dead_endpoint(), "test", ctx, watch=True)
        time.sleep(0.003)           # a few retries, each an event, before the close
        conn.close()
    assert context_still_moves_messages(ctx)
    ctx.term()
