"""The native listener gives back the memory of answers a client left
unread when it goes (server/network/native_listener.py), driven here on a
real ROUTER in this process, whose resident memory the test reads.

A worker in a fresh-clone suite run kept 91 MiB of 101 after a client that
never read its fetches left (tests/server/test_hostile_input.py): the
answers ZeroMQ still held for it were dropped by libzmq, but the listener
had already forgotten the client when the ROUTER said it was gone, so their
bytes were never counted as released and the heap was not trimmed. libzmq
drops those messages before the ROUTER forgets the peer, but pyzmq's
garbage thread reports each drop (the tracker) only when it gets the GIL:
on a loaded machine, after the ROUTER's EHOSTUNREACH. The test makes that
thread late on purpose, 50 ms a message.

The scenario runs in a Python process of its own (this file run as a
script): in a test process that earlier tests grew to hundreds of MiB, the
process's RSS moves with what they left behind (a fresh-clone run saw the
answers' 120 MiB show as 32), which would make the figure meaningless."""
import os
import subprocess
import sys
import time

import pytest
import zmq
from zmq.utils import garbage

from harness import rss_mb, wait_until
from kafkalite.server.network.native_listener import NativeListener, _Answer, _trim as trim
from kafkalite.server.network.requests import RequestDispatcher

ANSWER_BYTES = 10 << 20
ANSWERS = 12            # 120 MiB: more than the listener's bound, so some wait unsent
ROUNDS = 3


def _identity(listener: NativeListener) -> bytes:
    assert listener.socket.poll(5000), "the client's request did not arrive"
    return listener.socket.recv_multipart()[0]


class _LateRefs(dict):
    """pyzmq's garbage thread's table of frames libzmq holds: while
    ``delay`` is set, each release it reports comes that late, as when the
    thread waits for the GIL."""

    delay = 0.0

    def pop(self, *args):
        if self.delay:
            time.sleep(self.delay)
        return super().pop(*args)


def late_garbage_thread() -> None:
    zmq.Frame(b"x" * 100, copy=False, track=True)     # starts the thread and its table
    garbage.gc.refs = _LateRefs(garbage.gc.refs)
    garbage.gc.refs.delay = 0.05


@pytest.mark.processes
def test_the_answers_of_a_client_that_left_unread_go_back_to_the_system():
    if trim is None:
        pytest.skip("not glibc: the listener has no heap to trim")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env,
                         capture_output=True, text=True, timeout=120)
    print(run.stdout)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.count("after the client left") == ROUNDS


def scenario() -> None:
    """Run in a process of its own (``__main__``): prints a line a round,
    raises AssertionError on a round that kept the answers' memory."""
    late_garbage_thread()
    zctx = zmq.Context()
    listener = NativeListener(zctx, "127.0.0.1", 0, RequestDispatcher("test worker", {}),
                              name="test worker")
    poller = zmq.Poller()
    listener.attach(poller)
    # as in a worker after its first big answer: glibc's mmap threshold has
    # risen past an answer's size, so answers come from the heap, and what
    # is freed there stays in the process until the heap is trimmed
    warm_up = bytearray(ANSWER_BYTES)
    del warm_up
    pinned = []
    dealer = None
    try:
        start = rss_mb(os.getpid())
        for rnd in range(ROUNDS):
            dealer = zctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.RCVHWM, 1)          # reads nothing past one answer
            dealer.setsockopt(zmq.RCVBUF, 64 * 1024)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(f"tcp://127.0.0.1:{listener.port}")
            dealer.send(b"never reads")
            identity = _identity(listener)
            for cid in range(ANSWERS):
                # each answer a fresh heap allocation, as a fetch's records read from its segment
                listener._answer(identity, _Answer(cid, [bytearray(ANSWER_BYTES)]))
            # the worker goes on allocating meanwhile (other clients' requests and
            # answers): memory above the answers in the heap, so freeing them
            # leaves a hole glibc keeps unless the heap is trimmed
            pinned.append(bytearray(256 << 10))
            held = rss_mb(os.getpid())
            assert held - start > 80, f"round {rnd}: the answers took only {held - start:.0f} MiB"
            dealer.close(0)

            # the worker's event loop: the ROUTER learns the client went
            # as it is polled, and the listener looks at what ZeroMQ released
            def settled():
                listener.on_events(dict(poller.poll(10)))
                now = rss_mb(os.getpid())
                return now if now - start < 50 else None
            try:
                after = wait_until(settled, 10, interval=0.02)
            except AssertionError:
                after = rss_mb(os.getpid())
            print(f"round {rnd}: RSS {start:.0f} MiB at start, {held:.0f} with the answers "
                  f"unread, {after:.0f} after the client left", flush=True)
            assert after - start < 50, \
                f"round {rnd}: kept {after - start:.0f} MiB after the client left"
            wait_until(lambda: listener.on_events(dict(poller.poll(10))) or not listener._clients,
                       10, f"round {rnd}: the listener to forget the client")
    finally:
        if dealer is not None:
            dealer.close(0)
        listener.close()
        zctx.destroy(linger=0)


if __name__ == "__main__":
    scenario()
