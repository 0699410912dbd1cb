"""queue.buffering.max.kbytes: the producer's bound on the bytes of records
waiting for delivery (librdkafka's setting; Kafka's Java producer has
buffer.memory).

The accumulator counts each record's key, value, headers and framing when
produce() takes it (``Accumulator.queued_bytes``). The count falls when the
sender reports the record's batch or, for a record with a delivery callback
(which holds its key and value), when poll() serves that callback.
produce() raises BufferError when a record would pass the bound;
produce_batch() waits, serving callbacks. Checked against a real server:
- a producer whose records cannot leave (a stopped server) stays under the
  bound and raises, and every record it took is delivered once the server
  runs again;
- the count comes back to exactly zero after every way a batch ends:
  delivered with and without callbacks, in bulk, split because its topic
  allows less than batch.size, failed. A leak here would shrink the queue
  for good, one batch at a time.
"""
from __future__ import annotations

import os
import signal
import time

import pytest

from harness import create, read_all, wait_until
from kafkalite import errors
from kafkalite.client import Producer

OVERHEAD = 21       # what the accumulator counts per record besides its bytes


def test_a_record_past_the_bound_raises_buffer_error(server, topic_name):
    create(server, topic_name, 1)
    # linger.ms keeps the records in their open batch: nothing leaves
    p = Producer(server.config(**{"acks": 1, "linger.ms": 600_000,
                                  "queue.buffering.max.kbytes": 64}))
    try:
        for i in range(6):                      # 6 x 10,021 bytes fit in 65,536
            p.produce(topic_name, b"%d" % i * 10_000, partition=0)
        assert p._acc.queued_bytes == 6 * (10_000 + OVERHEAD)
        with pytest.raises(BufferError, match=r"queue.buffering.max.kbytes \(64\)"):
            p.produce(topic_name, b"6" * 10_000, partition=0)
        assert len(p) == 6
        assert p.flush(30) == 0
        assert p._acc.queued_bytes == 0
        p.produce(topic_name, b"6" * 10_000, partition=0)
        assert p.flush(30) == 0
    finally:
        p.close()
    got = read_all(server, topic_name, 1, 7)
    assert [m.value() for m in got] == [b"%d" % i * 10_000 for i in range(7)]


def test_a_record_larger_than_the_whole_bound_goes_when_nothing_waits(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config(**{"acks": 1, "linger.ms": 600_000,
                                  "queue.buffering.max.kbytes": 4}))
    try:
        p.produce(topic_name, b"x" * 10_000, partition=0)       # alone: taken
        with pytest.raises(BufferError):
            p.produce(topic_name, b"y", partition=0)
        assert p.flush(30) == 0
        p.produce(topic_name, b"y", partition=0)
        assert p.flush(30) == 0
    finally:
        p.close()
    assert [len(m.value()) for m in read_all(server, topic_name, 1, 2)] == [10_000, 1]


@pytest.mark.parametrize("bad", [{"queue.buffering.max.kbytes": 0},
                                 {"queue.buffering.max.messages": 0}])
def test_a_bound_below_one_is_refused(server, bad):
    with pytest.raises(ValueError, match="must be at least 1"):
        Producer(server.config(**bad))


def test_a_stalled_server_holds_the_producer_under_its_bound(own_server, topic_name):
    """The workers are stopped (SIGSTOP): nothing is acknowledged. A
    producer writing 100 KB records as fast as it may (until refused 50
    times) stays under 2 MiB of records and raises BufferError; once the
    workers run again, every record it took is delivered once, in order."""
    create(own_server, topic_name, 1)
    p = Producer(own_server.config(**{"acks": 1, "linger.ms": 0,
                                      "queue.buffering.max.kbytes": 2048}))
    pids = own_server.worker_pids()
    taken, refused, peak = [], 0, 0
    try:
        p.produce(topic_name, b"first", partition=0)
        assert p.flush(30) == 0                 # connected: the stall below is the server's
        taken.append(b"first")
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            end = time.monotonic() + 10.0
            i = 0
            while refused < 50 and time.monotonic() < end:
                value = b"%08d" % i + b"v" * 100_000
                try:
                    p.produce(topic_name, value, partition=0)
                    taken.append(value)
                    i += 1
                except BufferError:
                    refused += 1
                    p.poll(0.01)
                peak = max(peak, p._acc.queued_bytes)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert refused > 0
        assert 2048 * 1024 // 100_100 <= len(taken) - 1 <= 2048 * 1024 // 100_000
        assert peak <= 2048 * 1024
        assert p.flush(60) == 0
        assert p._acc.queued_bytes == 0
    finally:
        p.close()
    got = read_all(own_server, topic_name, 1, len(taken), 60.0)
    assert [m.value() for m in got] == taken


def count_reports():
    delivered, failed = [], []

    def report(err, msg):
        (delivered if err is None else failed).append(msg)
    return delivered, failed, report


def test_callbacks_hold_their_records_bytes_until_poll(server, topic_name):
    create(server, topic_name, 1)
    delivered, _, report = count_reports()
    p = Producer(server.config(**{"acks": 1, "linger.ms": 0, "batch.num.messages": 10}))
    try:
        for i in range(100):
            # half with a callback: only those keep their bytes counted
            p.produce(topic_name, b"v" * 1000, partition=0,
                      on_delivery=report if i % 2 else None)
        wait_until(lambda: len(p) == 50
                   and sum(b.callback_count - b.served for b in list(p._reports)) == 50,
                   30, "every batch acknowledged, callbacks not yet served")
        assert p._acc.queued_bytes == 50 * (1000 + OVERHEAD)
        assert p.flush(30) == 0
        assert len(delivered) == 50
        assert p._acc.queued_bytes == 0
    finally:
        p.close()


def test_a_raising_callback_keeps_its_batchs_bytes_until_the_rest_are_served(
        server, topic_name):
    create(server, topic_name, 1)
    calls = []

    def report(err, msg):
        calls.append(msg.value())
        if len(calls) == 3:
            raise RuntimeError("application callback failed")
    p = Producer(server.config(**{"acks": 1, "linger.ms": 600_000, "on_delivery": report}))
    try:
        for i in range(5):
            p.produce(topic_name, b"%d" % i, partition=0)
        with pytest.raises(RuntimeError):
            p.flush(30)
        # two callbacks not yet served: the batch's records stay counted
        # until its last callback is
        assert p._acc.queued_bytes == 5 * (1 + OVERHEAD)
        assert p.flush(30) == 0
        assert calls == [b"0", b"1", b"2", b"3", b"4"]
        assert p._acc.queued_bytes == 0
    finally:
        p.close()


@pytest.mark.parametrize("settings", [
    {"acks": 1},
    {"acks": "all", "enable.idempotence": True},
    {"acks": 0, "enable.idempotence": False},
    {"acks": 1, "kafkalite.transport": "tcp"},
], ids=["acks1", "idempotent", "acks0", "tcp"])
def test_every_way_a_batch_ends_gives_its_bytes_back(server, topic_name, settings):
    """Per record with and without callbacks, in bulk with and without a
    batch callback, and batches split because the topic allows 20,000
    bytes: the count is back to zero, and the bound still takes a full
    queue's worth afterwards."""
    create(server, topic_name, 2, **{"max.message.bytes": "20000"})
    delivered, failed, report = count_reports()
    bulk = []
    p = Producer(server.config(**{"linger.ms": 5, "queue.buffering.max.kbytes": 1024,
                                  **settings}))
    try:
        for i in range(200):
            p.produce(topic_name, b"%d" % i * 50, partition=i % 2,
                      on_delivery=report if i % 3 else None)
        p.produce_batch(topic_name, [b"b" * 500] * 300, partition=0)
        p.produce_batch(topic_name, [b"c" * 500] * 300, partition=1,
                        on_delivery=lambda err, d: bulk.append((err, d.count)))
        assert p.flush(60) == 0
        assert not failed and len(delivered) == 133
        assert all(err is None for err, _ in bulk) and sum(n for _, n in bulk) == 300
        assert p._acc.queued_bytes == 0
        # a leak would leave less room than this now
        for i in range(1000):
            p.produce(topic_name, b"w" * 1000, partition=0)
        assert p.flush(60) == 0
        assert p._acc.queued_bytes == 0
    finally:
        p.close()
    if settings["acks"] != 0:
        assert len(read_all(server, topic_name, 2, 1800, 60.0)) == 1800


def test_failed_records_give_their_bytes_back(server, topic_name):
    """A record larger than its topic allows fails (MESSAGE_TOO_LARGE, after
    its batch was split down to it); its bytes leave the count with its
    report, and the records around it are delivered."""
    create(server, topic_name, 1, **{"max.message.bytes": "2000"})
    delivered, failed, report = count_reports()
    p = Producer(server.config(**{"linger.ms": 5, "on_delivery": report}))
    try:
        p.produce(topic_name, b"a" * 100, partition=0)
        p.produce(topic_name, b"x" * 5000, partition=0)
        p.produce(topic_name, b"b" * 100, partition=0)
        assert p.flush(30) == 0
        assert [m.value() for m in delivered] == [b"a" * 100, b"b" * 100]
        assert [type(m.error()) for m in failed] == [errors.MessageTooLargeError]
        assert p._acc.queued_bytes == 0
    finally:
        p.close()
    assert [m.value() for m in read_all(server, topic_name, 1, 2)] == [b"a" * 100, b"b" * 100]
