"""The purgatory's order: operations that one event completes are completed
oldest first, as Kafka's watcher lists are walked. A shared-memory ring
takes its acks=all acknowledgements in sequence order only, and a client
reading its answers sees them in the order it asked."""
from __future__ import annotations

import time

from kafkalite.server.replica.purgatory import DelayedFetch, Purgatory


def test_operations_completed_by_one_event_complete_in_the_order_they_came():
    purgatory = Purgatory()
    done: list[int] = []
    key = ("t", 0)
    deadline = time.monotonic() + 60
    for i in range(200):
        purgatory.watch(DelayedFetch(None, deadline, [key], min_bytes=1, bytes_seen=0,
                                     respond=lambda i=i: done.append(i)))
    purgatory.check(key, None)               # the high watermark moved: all can answer
    assert done == list(range(200))
    assert not purgatory._watchers           # nothing left watching the key


def test_operations_expired_together_complete_in_the_order_they_came():
    purgatory = Purgatory()
    done: list[int] = []
    deadline = time.monotonic() - 1
    for i in range(50):
        purgatory.watch(DelayedFetch(None, deadline, [("t", i % 3)], min_bytes=1 << 20,
                                     bytes_seen=0, respond=lambda i=i: done.append(i)))
    purgatory.expire()
    assert done == list(range(50))
