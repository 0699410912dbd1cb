"""The idempotent producer under faults, checked record by record.

A writer produces records with values unique in the run to three
partitions; now and then (and always just after a DeleteRecords) one
larger than the topic's max.message.bytes, so that batches are refused as
too large and split while later ones are on their way. Meanwhile faults
hit the server, in rounds of five in random order, every 0.2-0.6 s: a worker
killed (SIGKILL; the supervisor starts it again), a worker stopped
(SIGSTOP) briefly, one stopped for longer than request.timeout.ms, and
twice DeleteRecords up to a partition's end (the worker forgets the
producer, as Kafka's brokers do when retention deletes a producer's last
batch). At the end:

- every record reported delivered is in the log, at the offset its report
  names (or anywhere, for the few reported with offset -1), unless
  DeleteRecords deleted it;
- no record is in the log twice;
- each partition holds the records in produce order;
- every record got a report;
- a record reported failed is not in the log: the only failures allowed are
  a record larger than the topic takes, and a batch overtaken after the
  worker forgot the producer, and neither was written.

The checker is first shown to catch a lost, a moved, a duplicated and a
reordered record, one without a report and a failed one in the log. The
run lasts KAFKALITE_PRODUCER_FAULT_SECONDS per transport (tests/soak.py: 4 s
by default, 300 under tools/soak), and at least until each kind of fault
happened once.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import threading
import time

import pytest

from harness import create
from kafkalite import errors
from kafkalite.client import AdminClient, Producer, TopicPartition
from replicas import log_bounds, read_log
from soak import setting

SECONDS = setting("KAFKALITE_PRODUCER_FAULT_SECONDS")
PARTITIONS = 3
# small records and limits: the test is about batches refused and split,
# not volume (a 4 s run writes under 50 MB per transport)
TOPIC_MAX = 6_000
TOO_LARGE = 7_000
# records waiting for delivery, at most: hundreds of batches in flight when a
# fault hits, without a backlog that takes longer to deliver than the run
BACKLOG = 5_000


def check(produced, reports, log, log_starts):
    """Problems found, as lines. ``produced``: values per partition in
    produce order; ``reports``: value -> (error, offset); ``log``:
    [(partition, offset, value)] read back; ``log_starts``: the first
    offset of each partition's log."""
    problems = []
    where = {}
    for partition, offset, value in log:
        if value in where:
            problems.append(f"{value[:12]!r}... stored twice: {where[value]} and {(partition, offset)}")
        where[value] = (partition, offset)
    for partition, values in produced.items():
        last = -1
        for value in values:
            report = reports.get(value)
            if report is None:
                problems.append(f"{value[:12]!r}... got no delivery report")
                continue
            err, offset = report
            at = where.get(value)
            if err is None:
                if at is None:
                    # deleted by DeleteRecords: its offset (if known) is below the log start
                    if offset < 0 or offset >= log_starts[partition]:
                        problems.append(f"{value[:12]!r}... reported delivered at {partition}/{offset}"
                                        f", not in the log")
                elif at[0] != partition or (offset >= 0 and at[1] != offset):
                    problems.append(f"{value[:12]!r}... reported at {partition}/{offset}, stored at "
                                    f"{at[0]}/{at[1]}")
            elif at is not None:
                # the failures this run allows all mean "not written"
                problems.append(f"{value[:12]!r}... reported failed ({err}), stored at {at}")
            if at is not None:
                if at[1] < last:
                    problems.append(f"{value[:12]!r}... stored at {at[1]}, before an earlier record "
                                    f"of partition {partition} (at {last})")
                last = max(last, at[1])
    return problems


def test_the_checker_catches_a_lost_a_moved_a_duplicated_and_a_reordered_record():
    produced = {0: [b"a", b"b", b"c"]}
    reports = {b"a": (None, 0), b"b": (None, 1), b"c": (None, 2)}
    good = [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c")]
    assert check(produced, reports, good, {0: 0}) == []
    assert check(produced, reports, good[:2], {0: 0})                      # lost
    assert check(produced, reports, good[1:], {0: 1}) == []                # deleted, excused
    assert check(produced, reports, [(0, 0, b"a"), (0, 1, b"b"), (0, 3, b"c")], {0: 0})  # moved
    assert check(produced, reports, good + [(0, 3, b"c")], {0: 0})         # twice
    assert check(produced, {**reports, b"b": (None, -1), b"c": (None, -1)},
                 [(0, 0, b"a"), (0, 1, b"c"), (0, 2, b"b")], {0: 0})       # reordered
    assert check(produced, {b"a": (None, 0)}, good, {0: 0})               # no report
    assert check(produced, {**reports, b"c": (errors.MessageTooLargeError("x"), -1)}, good,
                 {0: 0})                                                   # failed, yet stored


def fault_loop(server, topic, stop, done, rng, forgotten):
    """Random faults until ``stop`` is set; the names of those made go in
    ``done``, and the partitions DeleteRecords emptied in ``forgotten``."""
    admin = AdminClient(server.config())
    try:
        actions = []
        while not stop.is_set():
            stop.wait(rng.uniform(0.2, 0.6))
            if stop.is_set():
                break
            if not actions:     # each kind in every round of five, in random order
                actions = ["kill", "stop", "long-stop", "delete", "delete"]
                rng.shuffle(actions)
            action = actions.pop()
            index = rng.randrange(len(server.worker_pids()))
            if action == "kill":
                pid = server.worker_pid(index)
                os.kill(pid, signal.SIGKILL)
                server.wait_for_worker_restart(index, pid, timeout=30)
            elif action in ("stop", "long-stop"):
                pid = server.worker_pid(index)
                os.kill(pid, signal.SIGSTOP)
                try:
                    # request.timeout.ms is 1 s: a long stop times requests out
                    stop.wait(rng.uniform(0.05, 0.4) if action == "stop" else 1.5)
                finally:
                    os.kill(pid, signal.SIGCONT)
            elif action == "delete":
                partition = rng.randrange(PARTITIONS)
                try:     # up to the high watermark
                    for f in admin.delete_records(
                            [TopicPartition(topic, partition, -1)]).values():
                        f.result()
                except errors.KafkaError:
                    continue        # its worker is restarting: another time
                forgotten.append(partition)
            done.append(action)
    finally:
        admin.close()


@pytest.fixture(scope="module")
def server(module_server):
    """Its workers are killed and stopped: a server of the module's own (each
    test leaves every worker running again)."""
    return module_server


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["zmq", "tcp", "shm"])
def test_idempotent_producer_loses_nothing_under_faults(server, topic_name, transport):
    create(server, topic_name, PARTITIONS, **{"max.message.bytes": str(TOPIC_MAX)})
    rng = random.Random(f"{topic_name}-{SECONDS}")
    reports, produced = {}, {p: [] for p in range(PARTITIONS)}

    def on_delivery(err, msg):
        reports[msg.value()] = (err, msg.offset())
    p = Producer(server.config(**{
        "linger.ms": 2, "batch.size": 10_000, "max.request.size": 40_000,
        "request.timeout.ms": 1000, "delivery.timeout.ms": 120_000,
        "kafkalite.transport": transport}))
    stop, done, forgotten = threading.Event(), [], collections.deque()
    faults = threading.Thread(target=fault_loop, args=(server, topic_name, stop, done,
                                                       random.Random(rng.random()), forgotten))
    faults.start()
    try:
        end = time.monotonic() + SECONDS
        n = 0
        # the short run too meets every kind of fault (a round of five)
        while time.monotonic() < end or (len(done) < 5 and faults.is_alive()):
            if len(p) > BACKLOG:
                p.poll(0.05)
                continue
            partition = rng.randrange(PARTITIONS)
            # now and then a record larger than the topic takes: its batch is
            # refused and split (with later ones on their way) down to it;
            # always one just after the worker forgot the producer
            size = TOO_LARGE if rng.random() < 0.002 else rng.choice([5, 50, 500, 2_000])
            if forgotten:
                partition, size = forgotten.popleft(), TOO_LARGE
            value = b"%d-%08d-" % (partition, n) + b"v" * size
            try:
                p.produce(topic_name, value, partition=partition, on_delivery=on_delivery)
            except BufferError:
                p.poll(0.05)
                continue
            produced[partition].append(value)
            n += 1
            if n % 50 == 0:
                p.poll(0)
                time.sleep(0.002)       # a steady stream, not one burst per poll
    finally:
        stop.set()
        faults.join(60)
    assert p.flush(180) == 0
    p.close()
    failed = [(v, err) for v, (err, _) in reports.items() if err is not None]
    # failures allowed: the records too large, and a batch overtaken after
    # the worker forgot the producer (the producer cannot know better)
    wrong = [(v[:12], e) for v, e in failed
             if isinstance(e, errors.MessageTooLargeError) != (len(v) > TOPIC_MAX)
             or not isinstance(e, (errors.MessageTooLargeError,
                                   errors.OutOfOrderSequenceNumberError))]
    total = sum(len(v) for v in produced.values())
    log_starts = {p: low for p, (low, _) in log_bounds(server, topic_name, PARTITIONS).items()}
    log = [(part, offset, value)
           for part, records in read_log(server, topic_name, PARTITIONS).items()
           for offset, value in records]
    problems = check(produced, reports, log, log_starts)
    problems += [f"{v!r}... failed with {e!r}" for v, e in wrong]
    too_large = sum(len(v) > TOPIC_MAX for vs in produced.values() for v in vs)
    print(f"{total} records ({too_large} too large), {len(failed)} failed, faults: "
          f"{ {a: done.count(a) for a in set(done)} }")
    assert problems == [], (len(problems), problems[:10])


@pytest.mark.parametrize("transport", ["zmq", "tcp"])
def test_a_record_that_times_out_names_why_its_last_attempt_failed(server, topic_name, transport):
    """Every attempt refused with a retriable error (NOT_ENOUGH_REPLICAS:
    min.insync.replicas 2 on one replica) until delivery.timeout.ms: the
    report says the timeout expired and what the last attempt met, not only
    where the batch was waiting."""
    create(server, topic_name, 1, **{"min.insync.replicas": "2"})
    reports = []
    p = Producer(server.config(**{"acks": "all", "delivery.timeout.ms": 1500,
                                  "request.timeout.ms": 500, "retry.backoff.ms": 50,
                                  "kafkalite.transport": transport}))
    p.produce(topic_name, b"v", partition=0, on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(30) == 0
    p.close()
    [err] = reports
    assert isinstance(err, errors.RequestTimedOutError), err
    assert "delivery.timeout.ms expired" in err.message, err.message
    assert "NOT_ENOUGH_REPLICAS" in err.message, err.message


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_batch_taken_while_an_earlier_one_is_refused_is_not_answered_for_the_next(
        server, topic_name, transport):
    """The worker forgot the producer (DeleteRecords), then two batches were
    sent before either was answered: one larger than the topic takes
    (refused, nothing written) and one that the worker took with its number
    (it has no state to find it out of order). Renumbered down while it was
    out, its acknowledgement was counted under the refused batch's number,
    the next record was given the number the worker had just taken, answered
    as a retry of it -- acknowledged at its offset and never written (seen
    once in the fault run above, through the ring)."""
    from harness import wait_until
    create(server, topic_name, 1, **{"max.message.bytes": str(TOPIC_MAX)})
    reports = {}
    p = Producer(server.config(**{"linger.ms": 0, "request.timeout.ms": 30_000,
                                  "kafkalite.transport": transport}))
    sender = p._sending
    key = (topic_name, 0)

    def produce(value):
        p.produce(topic_name, value, partition=0,
                  on_delivery=lambda err, msg: reports.__setitem__(msg.value(), (err, msg.offset())))
    try:
        for i in range(3):
            produce(b"before-%d" % i)
        assert p.flush(30) == 0
        admin = AdminClient(server.config())
        try:     # the worker forgets the producer
            for f in admin.delete_records([TopicPartition(topic_name, 0, -1)]).values():
                f.result()
        finally:
            admin.close()
        pids = server.worker_pids()     # briefly: both batches go out before either answer
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            produce(b"too-large-" + b"x" * TOO_LARGE)
            wait_until(lambda: sender.requests_out[key] == 1, 10, "the large batch sent")
            produce(b"taken")
            wait_until(lambda: sender.requests_out[key] == 2, 10, "the second batch sent")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        assert p.flush(30) == 0
        produce(b"next")
        assert p.flush(30) == 0
    finally:
        p.close()
    assert isinstance(reports[b"too-large-" + b"x" * TOO_LARGE][0], errors.MessageTooLargeError)
    assert reports[b"taken"][0] is None and reports[b"next"][0] is None, reports
    log = dict((value, offset) for offset, value in read_log(server, topic_name, 1)[0])
    for value in (b"taken", b"next"):
        assert log.get(value) == reports[value][1], (
            f"{value!r} reported at {reports[value][1]}, in the log at {log.get(value)}")
