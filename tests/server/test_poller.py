"""The event loop's poller (kafkalite/server/network/poller.py): zmq.Poller's
answers from one persistent epoll set, and never a ZeroMQ message left
waiting for a signal that a send or a receive on its socket already took.

Real ZeroMQ sockets over loopback TCP and real socket pairs."""
from __future__ import annotations

import select
import socket
import threading
import time

import pytest
import zmq

from harness import wait_until
from kafkalite.server.network.poller import EpollPoller, PolledSocket, polled_context

# libzmq processes a socket's mailbox on a send at most once per
# max_command_delay (3 million TSC ticks: about 1 ms at 3 GHz); the test's
# send must come later than that after the socket's previous look, or it
# leaves the signal alone and there is nothing to test
PAST_COMMAND_THROTTLE_S = 0.02


@pytest.fixture
def pair():
    """(a ROUTER standing for the supervisor, a connected DEALER from
    polled_context() standing for the worker's control channel, the
    DEALER's identity)."""
    router = zmq.Context.instance().socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    dealer = polled_context().socket(zmq.DEALER)
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.setsockopt(zmq.IDENTITY, b"worker-0")
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send(b"hello")
    assert router.recv_multipart() == [b"worker-0", b"hello"]
    yield router, dealer
    dealer.close()
    router.close()


def signalled(sock: zmq.Socket) -> bool:
    """Is the socket's ZMQ_FD readable? (select does not touch its mailbox.)"""
    return bool(select.select([sock.get(zmq.FD)], [], [], 0)[0])


def hide_a_message_behind_a_send(router, dealer) -> None:
    """The supervisor sends while the worker's loop is between polls; the
    loop then sends on the same socket (a heartbeat), which processes the
    mailbox: the message waits, and its ZMQ_FD no longer says so."""
    router.send_multipart([b"worker-0", b"assign"])
    wait_until(lambda: signalled(dealer), 5, "the message's signal on ZMQ_FD", interval=0.001)
    time.sleep(PAST_COMMAND_THROTTLE_S)
    dealer.send(b"heartbeat")
    assert not signalled(dealer), "the send left the signal: the scenario did not arise"


@pytest.mark.parametrize("socket_class", [PolledSocket, zmq.Socket])
def test_a_message_that_arrived_before_a_send_on_its_socket_is_reported_at_once(pair,
                                                                                  socket_class):
    router, dealer = pair
    if socket_class is zmq.Socket:
        # a plain socket cannot say it was used: read every poll instead
        dealer = zmq.Socket.shadow(dealer.underlying)
    poller = EpollPoller()
    poller.register(dealer, zmq.POLLIN)
    assert poller.poll(0) == []             # the hello's answer: nothing waits
    hide_a_message_behind_a_send(router, dealer)
    start = time.monotonic()
    events = poller.poll(3000)
    # at once, not after the timeout (or the next message the supervisor sends)
    assert events == [(dealer, zmq.POLLIN)] and time.monotonic() - start < 1.0
    assert dealer.recv(zmq.NOBLOCK) == b"assign"
    poller.close()


def test_a_blocked_poll_wakes_for_a_zmq_message(pair):
    router, dealer = pair
    poller = EpollPoller()
    poller.register(dealer, zmq.POLLIN)
    assert poller.poll(0) == []
    timer = threading.Timer(0.1, router.send_multipart, ([b"worker-0", b"shutdown"],))
    timer.start()
    start = time.monotonic()
    events = poller.poll(5000)
    timer.join()
    assert events == [(dealer, zmq.POLLIN)] and time.monotonic() - start < 4.0
    assert dealer.recv() == b"shutdown"
    assert poller.poll(0) == []
    poller.close()


def test_a_reported_socket_its_handler_left_messages_on_is_reported_again(pair):
    router, dealer = pair
    poller = EpollPoller()
    poller.register(dealer, zmq.POLLIN)
    for body in (b"one", b"two"):
        router.send_multipart([b"worker-0", body])
    events = poller.poll(5000)
    assert events == [(dealer, zmq.POLLIN)]
    wait_until(lambda: dealer.poll(0), 5, "both messages")
    # a bounded drain takes one; the other is reported without a new signal,
    # as zmq.Poller reports it (the native listener drains so many a pass)
    assert dealer.recv() == b"one"
    # (under load "two" may still be on its way: then its arrival signals)
    wait_until(lambda: poller.poll(0) == [(dealer, zmq.POLLIN)], 5, "the second reported")
    assert poller.poll(0) == [(dealer, zmq.POLLIN)]     # not read: still there
    assert dealer.recv() == b"two"
    assert poller.poll(0) == []
    poller.unregister(dealer)
    router.send_multipart([b"worker-0", b"three"])
    wait_until(lambda: signalled(dealer), 5, "the message's signal", interval=0.001)
    assert poller.poll(0) == [] and dealer.touched is None
    poller.close()


def test_descriptors_are_reported_as_zmq_poller_reports_them():
    a, b = socket.socketpair()
    ours, theirs = EpollPoller(), zmq.Poller()

    def both(timeout=0):
        got = sorted(ours.poll(timeout))
        assert got == sorted(theirs.poll(timeout))
        return got

    for poller in (ours, theirs):
        poller.register(a.fileno(), zmq.POLLIN)
    assert both() == []
    b.send(b"x")
    assert both(1000) == [(a.fileno(), zmq.POLLIN)]
    for poller in (ours, theirs):
        poller.register(a.fileno(), zmq.POLLIN | zmq.POLLOUT)      # modified
    assert both() == [(a.fileno(), zmq.POLLIN | zmq.POLLOUT)]
    for poller in (ours, theirs):
        poller.register(a.fileno(), zmq.POLLOUT)
    assert both() == [(a.fileno(), zmq.POLLOUT)]
    for poller in (ours, theirs):
        poller.register(a.fileno(), 0)                             # no events: unregistered
    assert both() == []
    for poller in (ours, theirs):
        poller.register(a.fileno(), zmq.POLLIN)
    b.close()       # the peer hangs up: readable (the end) and an error bit
    assert both() == [(a.fileno(), zmq.POLLIN | zmq.POLLERR)]
    with pytest.raises(KeyError):
        ours.unregister(b.fileno())
    ours.unregister(a.fileno())
    a.close()
    ours.close()


def test_a_descriptor_closed_before_unregistering_leaves_its_number_usable():
    poller = EpollPoller()
    a, b = socket.socketpair()
    fd = a.fileno()
    poller.register(fd, zmq.POLLIN)
    a.close()                           # epoll dropped it
    c, d = socket.socketpair()
    assert c.fileno() == fd             # the number comes back at once
    poller.register(fd, zmq.POLLIN)     # registered anew, not refused as known
    d.send(b"x")
    assert poller.poll(1000) == [(fd, zmq.POLLIN)]
    poller.unregister(fd)
    assert poller.poll(0) == []
    for s in (b, c, d):
        s.close()
    poller.close()
