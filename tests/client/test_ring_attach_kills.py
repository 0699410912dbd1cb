"""A shared-memory ring producer whose worker dies while the ring attaches.

The producer makes its ring and has the worker attach it when it first
sends to that worker, and again after the worker restarts. A worker killed
in that moment must cost the producer a retry, not its sender thread:
every record is delivered once the worker is back, within the flush's time.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from harness import create, read_all, wait_until
from kafkalite.client import Producer

ROUNDS = 12
RECORDS = 200
PRODUCERS = 4


def test_a_worker_killed_while_rings_attach_costs_only_retries(own_server, topic_name):
    srv = own_server
    create(srv, topic_name, 2)
    stop = threading.Event()
    kills = []

    def killer():
        # kill worker 0 just as it is back: that is when the producers,
        # waiting for it, attach their rings to it
        while not stop.is_set() and len(kills) < ROUNDS:
            old = srv.worker_pid(0)
            assert old > 1, srv.info        # os.kill(0) would kill this process group
            os.kill(old, signal.SIGKILL)
            kills.append(old)
            srv.wait_for_worker_restart(0, old, timeout=30)
            stop.wait(0.05)

    producers, delivered, failed = [], [], []

    def report(err, msg):
        if err is not None:
            failed.append(err)
        else:
            delivered.append(msg.count)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        sent = 0
        while thread.is_alive():
            # a new producer now and then (its first send attaches its
            # rings), and every one keeps sending (each worker restart
            # attaches its ring again)
            if len(producers) < PRODUCERS and len(kills) >= 2 * len(producers):
                producers.append(Producer(srv.config(**{
                    "kafkalite.transport": "shm", "acks": "all", "delivery.timeout.ms": 60_000})))
            for p in producers:
                for part in (0, 1):
                    p.produce_batch(topic_name, [b"%d-%d" % (sent, i) for i in range(RECORDS)],
                                    partition=part, on_delivery=report)
                sent += 2 * RECORDS
                p.poll(0)
            stop.wait(0.05)
        deadline = time.monotonic() + 60
        remaining = [p.flush(max(0.0, deadline - time.monotonic())) for p in producers]
    finally:
        stop.set()
        thread.join(60)
        for p in producers:
            p.close()
    assert len(kills) == ROUNDS
    assert remaining == [0] * len(producers), remaining
    assert not failed, failed[:3]
    assert sum(delivered) == sent
    wait_until(lambda: len(read_all(srv, topic_name, 2, sent, timeout=5)) >= sent, 30,
               "every delivered record to be readable")
