"""Batches larger than their topic's max.message.bytes.

A topic may allow smaller batches than the producer's batch.size (a topic
config of 2,000 bytes against the default batch.size of 1 MB). The worker
refuses such a batch whole (MESSAGE_TOO_LARGE, nothing written); the
producer then sends it again as halves, in its place in the partition's
order, and closes that topic's later batches smaller (producer/sender.py
``Sender._split``). Before, every record of such a batch failed, however
small. Checked here against a real server: every record is delivered once,
in produce order, at the offset its delivery report names, on the
idempotent and plain paths, per record and in bulk, compressed; a single
record larger than the topic allows still fails, with MESSAGE_TOO_LARGE.
"""
from __future__ import annotations

import os
import signal
import threading

import pytest

from harness import create, read_all, wait_until
from kafkalite import errors
from kafkalite.client import Producer


def check_log(server, topic, partitions, delivered):
    """Every delivered record is in the log once, at its reported offset, and
    each partition holds the records in produce order."""
    got = read_all(server, topic, partitions, len(delivered), 30.0)
    log = {(m.partition(), m.offset()): m.value() for m in got}
    problems = []
    if len(got) != len(log) or len(got) != len(delivered):
        problems.append(f"{len(got)} records read, {len(log)} distinct, {len(delivered)} delivered")
    for partition, offset, value in delivered:
        if log.get((partition, offset)) != value:
            problems.append(f"{value!r} reported at {partition}/{offset}, "
                            f"log has {log.get((partition, offset))!r}")
    for p in range(partitions):
        produced = [v for q, _, v in delivered if q == p]
        in_log = [m.value() for m in sorted(got, key=lambda m: m.offset()) if m.partition() == p]
        if produced != in_log:
            problems.append(f"partition {p}: log order differs from produce order")
    return problems


def reports():
    """(delivered, failed, on_delivery): (partition, offset, value) of each
    record delivered, the error of each that failed."""
    delivered, failed = [], []

    def report(err, msg):
        if err is None:
            delivered.append((msg.partition(), msg.offset(), msg.value()))
        else:
            failed.append(err)
    return delivered, failed, report


def test_the_checker_catches_a_lost_a_moved_and_a_reordered_record(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config())
    for v in (b"a", b"b", b"c"):
        p.produce(topic_name, v, partition=0)
    assert p.flush(30) == 0
    p.close()
    assert check_log(server, topic_name, 1,
                     [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c")]) == []
    assert check_log(server, topic_name, 1, [(0, 0, b"a"), (0, 2, b"b"), (0, 1, b"c")])
    assert check_log(server, topic_name, 1, [(0, 0, b"a"), (0, 1, b"b")])


@pytest.mark.parametrize("config", [
    {},                                                    # idempotent (the default)
    {"enable.idempotence": False, "acks": 1},
    {"compression.type": "zstd"},
], ids=["idempotent", "plain", "zstd"])
def test_records_of_a_batch_the_topic_refuses_are_delivered_in_order(server, topic_name, config):
    topic = topic_name
    create(server, topic, 2, **{"max.message.bytes": "2000"})
    p = Producer(server.config(**{"linger.ms": 50, **config}))
    delivered, failed, report = reports()
    for i in range(400):
        # incompressible enough that zstd batches are still too large
        p.produce(topic, b"%05d-" % i + bytes((i * 7 + j * 13) % 251 for j in range(90)),
                  key=b"k%d" % (i % 3), on_delivery=report)
    assert p.flush(60) == 0
    p.close()
    assert failed == []
    assert len(delivered) == 400
    assert check_log(server, topic, 2, delivered) == []


def test_batches_larger_than_a_small_segment_are_split_and_delivered(server, topic_name):
    """A topic of 16 KB segments refuses a batch that cannot fit in one
    (RECORD_LIST_TOO_LARGE, as Kafka's log does); the producer's batches are
    larger by default, so it splits them as it does for max.message.bytes.
    The old code failed every record of such a batch: 8,500 of 15,000 over
    a worker kill in issue 68's item 7 probe, every time."""
    create(server, topic_name, 1, **{"segment.bytes": "16384"})
    p = Producer(server.config(**{"linger.ms": 50}))
    delivered, failed, report = reports()
    for i in range(3000):
        p.produce(topic_name, b"%05d-" % i + b"x" * 60, partition=0, on_delivery=report)
    assert p.flush(60) == 0
    p.close()
    assert failed == []
    assert len(delivered) == 3000
    assert check_log(server, topic_name, 1, delivered) == []


@pytest.mark.parametrize("transport", ["zmq", "tcp"])
def test_a_refused_first_batch_is_not_overtaken_by_the_next(server, topic_name, transport):
    """An idempotent producer's first batch of a partition refused as too
    large while the next is already on its way: the worker takes any
    sequence from a producer it has no state for (as Kafka's brokers do), so
    the next batch was appended first, and the first one's halves, answered
    OUT_OF_ORDER_SEQUENCE_NUMBER behind it, were reported delivered without
    being written -- acknowledged records lost. Here the records a new
    producer queues while it waits for its producer id make a first batch
    of 250 KB (batch.size) against the topic's 200 KB, and a second of
    150 KB, sent in a request of its own (max.request.size 300 KB) behind
    it. Every record must be in the log once, in order, where its report
    says."""
    create(server, topic_name, 1, **{"max.message.bytes": "200000"})
    p = Producer(server.config(**{"linger.ms": 0, "batch.size": 250_000,
                                  "max.request.size": 300_000,
                                  "kafkalite.transport": transport}))
    delivered, failed, report = reports()
    for i in range(16):
        p.produce(topic_name, b"%03d" % i * 8_333, partition=0, on_delivery=report)
    assert p.flush(60) == 0
    for i in range(16, 40):            # and the partition goes on in order after it
        p.produce(topic_name, b"%03d" % i * 8_333, partition=0, on_delivery=report)
    assert p.flush(60) == 0
    p.close()
    assert failed == []
    assert len(delivered) == 40
    assert check_log(server, topic_name, 1, delivered) == []


def test_bulk_batches_are_split_and_reported_once_per_record(server, topic_name):
    create(server, topic_name, 1, **{"max.message.bytes": "3000"})
    p = Producer(server.config())
    reports = []
    values = [b"%04d" % i + b"x" * 60 for i in range(500)]
    p.produce_batch(topic_name, values, partition=0,
                    on_delivery=lambda err, d: reports.append((err, d)))
    assert p.flush(60) == 0
    p.close()
    assert [err for err, _ in reports if err is not None] == []
    assert sum(d.count for _, d in reports) == 500
    got = read_all(server, topic_name, 1, 500, 30.0)
    assert [m.value() for m in got] == values
    # each report's records are where it says
    by_offset = {m.offset(): m.value() for m in got}
    firsts = sorted((d.offset(), d.count) for _, d in reports)
    at = 0
    for offset, count in firsts:
        assert offset == at
        at += count
    assert len(by_offset) == 500


def _known_then_forgotten(server, topic: str, p) -> None:
    """The worker takes a record of ``p`` (it knows the producer), then
    DeleteRecords past it makes the worker forget the producer: its next
    batch is taken whatever its sequence."""
    from kafkalite.client import AdminClient, TopicPartition
    p.produce(topic, b"first", partition=0)
    assert p.flush(30) == 0
    admin = AdminClient(server.config())
    try:
        for f in admin.delete_records([TopicPartition(topic, 0, 1)]).values():
            assert f.result().low_watermark == 1
    finally:
        admin.close()

def test_a_single_record_larger_than_the_topic_allows_still_fails(server, topic_name):
    create(server, topic_name, 1, **{"max.message.bytes": "2000"})
    p = Producer(server.config(**{"linger.ms": 20}))
    outcome = {}
    p.produce(topic_name, b"small", on_delivery=lambda e, m: outcome.setdefault("small", e))
    p.produce(topic_name, b"x" * 5000, on_delivery=lambda e, m: outcome.setdefault("big", e))
    p.produce(topic_name, b"after", on_delivery=lambda e, m: outcome.setdefault("after", e))
    p.flush(60)
    p.close()
    assert outcome["small"] is None and outcome["after"] is None
    assert isinstance(outcome["big"], errors.MessageTooLargeError)
    assert [m.value() for m in read_all(server, topic_name, 1, 2, 30.0)] == [b"small", b"after"]


@pytest.mark.parametrize("transport", ["zmq", "tcp"])
def test_a_refused_batch_overtaken_after_the_worker_forgot_the_producer_fails(
        own_server, topic_name, transport):
    """The same overtaking later in a producer's life: DeleteRecords past the
    producer's last record makes the worker forget it (as retention does,
    and as Kafka's brokers do), so it takes the next batch whatever its
    sequence. A batch refused as too large with the next one out behind it
    is then overtaken; its halves, answered OUT_OF_ORDER_SEQUENCE_NUMBER
    behind an acknowledged batch, were reported delivered though never
    written. Now they fail (nothing was ever written of them), and every
    record reported delivered is in the log, in order, where its report
    says. The workers are stopped while the two batches go out, so that
    both are on their way before the first is answered."""
    create(own_server, topic_name, 1, **{"max.message.bytes": "200000"})
    p = Producer(own_server.config(**{"linger.ms": 0, "batch.size": 250_000,
                                      "max.request.size": 300_000,
                                      "kafkalite.transport": transport}))
    try:
        _known_then_forgotten(own_server, topic_name, p)
        delivered, failed, report = reports()
        pids = own_server.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            # 10 records close a 250 KB batch (over the topic's 200 KB), the
            # other 6 (150 KB) go by flush() in a request of their own
            for i in range(16):
                p.produce(topic_name, b"%03d" % i * 8_333, partition=0, on_delivery=report)
            flusher = threading.Thread(target=p.flush, args=(60,))
            flusher.start()
            wait_until(lambda: sum(len(node.in_flight) for node in list(
                p._sending.nodes.values())) >= 2, 10, "both requests on their way")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        flusher.join(60)
        assert p.flush(60) == 0
        for i in range(16, 20):               # the partition goes on after it
            p.produce(topic_name, b"%03d" % i * 8_333, partition=0, on_delivery=report)
        assert p.flush(60) == 0
    finally:
        p.close()
    assert len(delivered) + len(failed) == 20
    assert all(isinstance(e, errors.OutOfOrderSequenceNumberError) for e in failed), failed
    assert check_log(own_server, topic_name, 1, delivered) == []


def test_a_record_too_large_in_an_overtaken_batch_strands_no_later_sequence(own_server, topic_name):
    """As above, with a record larger than the topic allows in the overtaken
    batch: split down to it, that record fails alone (MESSAGE_TOO_LARGE).
    Its sequence lies below the one the worker expects (the later batch
    took the worker past it), so its failure leaves no gap to close. The
    producer closed one all the same: it numbered the next batches one
    lower, the first of them overlapped the acknowledged batch and failed
    as overtaken, and the one after it started above the worker's next
    sequence and was refused OUT_OF_ORDER_SEQUENCE_NUMBER on every retry
    until delivery.timeout.ms (the fault test's stall of 2026-11-28: the
    worker at sequence 7705, the producer sending 7709 and on). Every
    record after the overtaken batch must be delivered."""
    create(own_server, topic_name, 1, **{"max.message.bytes": "200000"})
    # batches close by size or flush() alone (linger.ms), and a stranded
    # one fails within the test (delivery.timeout.ms)
    p = Producer(own_server.config(**{"linger.ms": 60_000, "batch.size": 250_000,
                                      "max.request.size": 300_000,
                                      "delivery.timeout.ms": 20_000}))
    try:
        _known_then_forgotten(own_server, topic_name, p)
        outcome = {}

        def report(err, msg):
            outcome[msg.value()[:3]] = (err, msg.offset())
        pids = own_server.worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            # 4 records of 25 KB and one of 210 KB close a batch (sequences
            # 1-5, over the topic's 200 KB); the next 5 (6-10) go by flush()
            # in a request of their own
            for i in range(10):
                value = b"%03d" % i * (70_000 if i == 4 else 8_333)
                p.produce(topic_name, value, partition=0, on_delivery=report)
            flusher = threading.Thread(target=p.flush, args=(60,))
            flusher.start()
            sender = p._sending
            wait_until(lambda: not (p._open or p._ready or sender.unstamped or sender.waiting)
                       and not any(node.queue for node in list(sender.nodes.values()))
                       and sum(len(node.in_flight) for node in list(sender.nodes.values())) >= 2,
                       10, "every batch on its way")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        flusher.join(60)
        assert p.flush(60) == 0
        # the partition goes on: a batch of 4, then one of 1 (sequences 11-15)
        for i in range(10, 14):
            p.produce(topic_name, b"%03d" % i * 8_333, partition=0, on_delivery=report)
        assert p.flush(60) == 0
        p.produce(topic_name, b"%03d" % 14 * 8_333, partition=0, on_delivery=report)
        assert p.flush(60) == 0
    finally:
        p.close()
    failed = {k: e for k, (e, _) in outcome.items() if e is not None}
    # the overtaken batch: its small records fail as overtaken, the large one as too large
    assert {k: type(e) for k, e in failed.items()} == {
        **{b"%03d" % i: errors.OutOfOrderSequenceNumberError for i in range(4)},
        b"004": errors.MessageTooLargeError}, failed
    delivered = [(0, offset, b"%03d" % i * 8_333) for i in range(5, 15)
                 for offset in [outcome[b"%03d" % i][1]]]
    assert check_log(own_server, topic_name, 1, delivered) == []
