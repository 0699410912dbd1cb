"""The per-message client paths against a real server: ``Producer.produce()``
(the Cython accumulator, kafkalite._ext.accumulator) and ``Consumer.poll()``
/ ``consume()`` (Messages made per batch, kafkalite._ext.messages).

- the batch produce() builds is byte for byte the one the RecordBatchBuilder
  builds from the same records (the builder produce() used before), plain and
  compressed, and the records read back are the ones produced;
- every refusal produce() makes raises with a message and leaves the
  producer working: bad types, unknown partition, a record larger than
  max.request.size, a full queue, a closed producer, a transactional one
  outside a transaction;
- delivery callbacks: one per record, in produce order per partition, with
  the record's key, value, headers and offset; a callback that raises leaves
  the batch's later callbacks to the next poll();
- poll(), consume() and consume_batch() mixed part-way through batches
  deliver every record once, in order.
"""
from __future__ import annotations

import gc
import pickle
import threading
import time

import pytest

from harness import create, wait_until
from kafkalite import errors
from kafkalite.client import OFFSET_BEGINNING, Consumer, Message, Producer, TopicPartition
from kafkalite.client.types import TIMESTAMP_CREATE_TIME
from kafkalite.record import RecordBatchBuilder, codec_id

TS = 1_700_000_000_000


def records(n):
    """(timestamp, key, value, headers) of ``n`` varied records: null keys and
    values, str and bytes, headers as dicts and lists, empty values."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else (f"k{i}" if i % 2 else b"k%d" % i)
        value = None if i % 7 == 3 else (b"" if i % 11 == 4 else b"v" * (i % 300))
        headers = None
        if i % 4 == 1:
            headers = {"h": b"x", "s": "text"}
        elif i % 4 == 2:
            headers = [("a", None), ("b", b"\x00\xff")]
        out.append((TS + i * 3 - (i % 2), key, value, headers))
    return out


def old_builder_bytes(recs, compression="none"):
    """The batch the producer built before the accumulator: its builder's
    append() per record, with produce()'s own str / header conversions."""
    b = RecordBatchBuilder(codec_id(compression))
    for ts, key, value, headers in recs:
        if isinstance(key, str):
            key = key.encode()
        if isinstance(value, str):
            value = value.encode()
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
        b.append(ts or None, key, value, headers)
    return b.build()


def consume_all(server, topic, n, partitions=1, **cfg):
    c = Consumer(server.config(**cfg))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = []
        for _ in range(200):
            out += c.consume(1000, 0.2)
            if len(out) >= n:
                break
        return out
    finally:
        c.close()


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_produced_batch_is_byte_identical_to_the_builders(server, topic_name, compression):
    create(server, topic_name, 1)
    recs = records(500)
    # one batch held open (long linger, no size limit hit) so it can be compared
    p = Producer(server.config(**{"linger.ms": 600_000, "acks": 1,
                                  "compression.type": compression}))
    try:
        for ts, key, value, headers in recs:
            p.produce(topic_name, value, key, partition=0, timestamp=ts, headers=headers)
        with p._lock:
            batch = p._open[(topic_name, 0)]
            assert batch.count == len(recs)
            produced = batch.builder.build()
        assert produced == old_builder_bytes(recs, compression)
        assert p.flush(30) == 0
    finally:
        p.close()
    got = consume_all(server, topic_name, len(recs))
    assert [(m.offset(), m.timestamp(), m.key(), m.value()) for m in got] == [
        (i, (TIMESTAMP_CREATE_TIME, ts), key.encode() if isinstance(key, str) else key, value)
        for i, (ts, key, value, _) in enumerate(recs)]
    want_headers = [None if not h else [(k, v.encode() if isinstance(v, str) else v)
                                        for k, v in (h.items() if isinstance(h, dict) else h)]
                    for _, _, _, h in recs]
    assert [m.headers() for m in got] == want_headers


def test_refused_records_raise_and_leave_the_producer_working(server, topic_name):
    """Each refusal raises with a message; nothing of a refused record is
    queued. A bad value for a partition with no open batch used to leave an
    empty batch behind, which failed the sender thread and every later
    record."""
    create(server, topic_name, 2)
    delivered = []
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1, "message.max.bytes": 100_000}))
    try:
        cb = (lambda err, msg: delivered.append((err, msg.partition(), msg.value())))
        with pytest.raises(TypeError, match="bytes-like, not int"):
            p.produce(topic_name, 5, partition=1, on_delivery=cb)
        with pytest.raises(TypeError, match="bytes-like, not float"):
            p.produce(topic_name, b"v", key=2.5, partition=0, on_delivery=cb)
        with pytest.raises(TypeError, match="header keys may not be None"):
            p.produce(topic_name, b"v", partition=0, headers=[(None, b"x")], on_delivery=cb)
        with pytest.raises(TypeError, match="bytes-like, not int"):
            p.produce(topic_name, b"v", partition=0, headers={"h": 7}, on_delivery=cb)
        with pytest.raises(errors.UnknownTopicOrPartitionError, match="no partition 2"):
            p.produce(topic_name, b"v", partition=2, on_delivery=cb)
        with pytest.raises(TypeError):
            p.produce(topic_name, b"v", partition="0")
        assert len(p) == 0
        p.produce(topic_name, b"ok1", partition=1, on_delivery=cb)
        p.produce(topic_name, "ok0", partition=0, on_delivery=cb)
        assert p.flush(30) == 0
        assert sorted(delivered) == [(None, 0, b"ok0"), (None, 1, b"ok1")]
    finally:
        p.close()
    with pytest.raises(RuntimeError, match="closed"):
        p.produce(topic_name, b"late")


def test_bad_record_on_a_partition_without_open_batch_keeps_the_sender_alive(server,
                                                                            topic_name):
    """Before: the refused record's new (empty) batch stayed open, its
    build failed the sender thread, and nothing produced after was sent."""
    create(server, topic_name, 1)
    delivered = []
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1}))
    try:
        with pytest.raises(TypeError, match="bytes-like"):
            p.produce(topic_name, 5, partition=0)
        time.sleep(0.2)     # past linger.ms: the sender would take an empty batch now
        p.produce(topic_name, b"ok", partition=0, on_delivery=lambda e, m: delivered.append(e))
        assert p.flush(10) == 0
        assert delivered == [None]
    finally:
        p.close(5)


def test_record_larger_than_max_request_size_raises(server, topic_name):
    """Kafka's producer refuses in send() a record that cannot fit a request
    (RecordTooLargeException); before, produce() took it and the worker
    refused the whole batch."""
    create(server, topic_name, 1)
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1, "message.max.bytes": 100_000}))
    try:
        with pytest.raises(errors.MessageTooLargeError, match="max.request.size"):
            p.produce(topic_name, b"x" * 100_000, partition=0)
        assert len(p) == 0
        p.produce(topic_name, b"x" * 90_000, partition=0)
        assert p.flush(10) == 0
    finally:
        p.close(5)


def test_full_queue_raises_buffer_error(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config(**{"acks": 1, "linger.ms": 600_000,
                                  "queue.buffering.max.messages": 3}))
    try:
        for i in range(3):
            p.produce(topic_name, b"%d" % i, partition=0)
        with pytest.raises(BufferError, match="queue.buffering.max.messages"):
            p.produce(topic_name, b"3", partition=0)
        assert len(p) == 3
        assert p.flush(30) == 0
        p.produce(topic_name, b"3", partition=0)
        assert p.flush(30) == 0
    finally:
        p.close()
    assert [m.value() for m in consume_all(server, topic_name, 4)] == [b"0", b"1", b"2", b"3"]


def test_transactional_producer_refuses_produce_outside_a_transaction(server, topic_name):
    create(server, topic_name, 1)
    p = Producer(server.config(**{"transactional.id": topic_name}))
    try:
        with pytest.raises(errors.InvalidTxnStateError):
            p.produce(topic_name, b"v", partition=0)
        p.init_transactions(30)
        with pytest.raises(errors.InvalidTxnStateError, match="begin_transaction"):
            p.produce(topic_name, b"v", partition=0)
        p.begin_transaction()
        p.produce(topic_name, b"v", partition=0)
        p.commit_transaction(30)
    finally:
        p.close()


def test_delivery_callbacks_per_record_in_order(server, topic_name):
    create(server, topic_name, 3)
    seen = {0: [], 1: [], 2: []}
    other = []
    default = []
    p = Producer(server.config(**{"acks": 1, "linger.ms": 2, "batch.num.messages": 37,
                                  "on_delivery": lambda err, m: default.append(
                                      (m.partition(), m.value()))}))
    try:
        def cb(err, msg):
            assert err is None and msg.error() is None
            seen[msg.partition()].append((msg.offset(), msg.key(), msg.value(), msg.headers(),
                                          msg.timestamp()))
        n = 1000
        for i in range(n):
            part = i % 3
            if i % 10 == 9:
                p.produce(topic_name, b"%d" % i, partition=part,
                          callback=lambda err, m: other.append((m.partition(), m.value())))
            elif i % 10 == 8:
                p.produce(topic_name, b"%d" % i, partition=part)     # the default callback
            else:
                p.produce(topic_name, b"%d" % i, key=b"k%d" % i, partition=part, on_delivery=cb,
                          headers={"i": str(i)}, timestamp=TS + i)
            if i % 100 == 0:
                p.poll(0)
        assert p.flush(30) == 0
    finally:
        p.close()
    for part in range(3):     # in order per partition (partitions report independently)
        assert [v for q, v in other if q == part] == [b"%d" % i for i in range(part, n, 3)
                                                      if i % 10 == 9]
        assert [v for q, v in default if q == part] == [b"%d" % i for i in range(part, n, 3)
                                                        if i % 10 == 8]
        mine = [i for i in range(part, n, 3)]
        want = [(mine.index(i), b"k%d" % i, b"%d" % i, [("i", str(i).encode())],
                 (TIMESTAMP_CREATE_TIME, TS + i)) for i in mine if i % 10 < 8]
        assert seen[part] == want


def test_raising_callback_leaves_the_rest_for_the_next_poll(server, topic_name):
    create(server, topic_name, 1)
    got = []

    def cb(err, msg):
        got.append(msg.value())
        if msg.value() == b"2":
            raise ValueError("callback failed")
    p = Producer(server.config(**{"acks": 1, "linger.ms": 600_000}))
    try:
        for i in range(5):
            p.produce(topic_name, b"%d" % i, partition=0, on_delivery=cb)
        with pytest.raises(ValueError, match="callback failed"):
            p.flush(30)
        assert got == [b"0", b"1", b"2"]
        assert len(p) == 2
        assert p.flush(30) == 0
        assert got == [b"0", b"1", b"2", b"3", b"4"]
    finally:
        p.close()


def test_produce_from_threads(server, topic_name):
    """produce() and poll() from several threads at once: every record once,
    each thread's records in its order."""
    create(server, topic_name, 2)
    n, threads = 3000, 4
    delivered = []
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1, "batch.num.messages": 50}))

    def work(t):
        for i in range(n):
            p.produce(topic_name, b"%d-%d" % (t, i), key=b"%d" % t,
                      on_delivery=lambda err, m: delivered.append(err))
            if i % 97 == 0:
                p.poll(0)
    try:
        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert p.flush(30) == 0
    finally:
        p.close()
    assert delivered == [None] * (n * threads)
    got = consume_all(server, topic_name, n * threads, partitions=2)
    for t in range(threads):
        mine = [m.value() for m in got if m.key() == b"%d" % t]
        assert mine == [b"%d-%d" % (t, i) for i in range(n)]


@pytest.mark.parametrize("partitions", [1, 3])
def test_poll_consume_and_consume_batch_mixed(server, topic_name, partitions):
    """Switching between the three part-way through batches loses and
    repeats nothing, in each partition's order; with several partitions,
    consume_batch decodes chunks of all of them into one batch, some from a
    position part-way into a batch poll() or consume() began."""
    create(server, topic_name, partitions)
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1, "batch.num.messages": 25}))
    n = 400 * partitions
    try:
        for i in range(n):
            p.produce(topic_name, b"%d" % i, key=None if i % 3 else b"k", partition=i % partitions,
                      headers=[("n", b"%d" % i)] if i % 50 == 0 else None)
        assert p.flush(30) == 0
    finally:
        p.close()
    c = Consumer(server.config())
    try:
        c.assign([TopicPartition(topic_name, part, OFFSET_BEGINNING) for part in range(partitions)])
        got = {part: [] for part in range(partitions)}
        step = seen = 0
        while seen < n:
            step += 1
            if step % 3 == 0:
                batch = c.consume_batch(1.0)
                batch.validate(full=True)
                batch = batch.to_pydict()
                for part, offset, value, headers in zip(batch["partition"], batch["offset"],
                                                        batch["value"], batch["headers"]):
                    got[part].append((offset, value))
                    assert headers == ([{"key": "n", "value": value}] if int(value) % 50 == 0
                                       else [])
                    seen += 1
            elif step % 3 == 1:
                m = c.poll(1.0)
                if m is not None:
                    got[m.partition()].append((m.offset(), m.value()))
                    seen += 1
                    if int(m.value()) % 50 == 0:
                        assert m.headers() == [("n", m.value())]
                    else:
                        assert m.headers() is None
            else:
                ms = c.consume(7, 1.0)
                got_now = [(m.partition(), m.offset(), m.value()) for m in ms]
                for part, offset, value in got_now:
                    got[part].append((offset, value))
                seen += len(got_now)
        for part in range(partitions):
            assert got[part] == [(i // partitions, b"%d" % i) for i in range(part, n, partitions)]
        assert c.consume(10, 0.3) == []
    finally:
        c.close()


def test_message_type():
    m = Message("t", 3, 42, b"k", b"value", [("h", b"x")], 123, TIMESTAMP_CREATE_TIME)
    assert (m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.headers(),
            m.timestamp(), m.error(), m.leader_epoch(), len(m)) == \
        ("t", 3, 42, b"k", b"value", [("h", b"x")], (TIMESTAMP_CREATE_TIME, 123), None, None, 5)
    m.set_value(None)
    m.set_key(b"k2")
    m.set_headers([])
    assert (m.value(), m.key(), m.headers(), len(m)) == (None, b"k2", None, 0)
    assert "t-3@42" in repr(m)
    again = pickle.loads(pickle.dumps(m))
    assert (again.topic(), again.offset(), again.key()) == ("t", 42, b"k2")
    err = errors.MessageTooLargeError("too big")
    assert "error=" in repr(Message("t", 0, -1, None, None, error=err))


def test_messages_of_atomic_values_are_out_of_the_gc_until_they_hold_more(server, topic_name):
    """Consumed Messages and delivery reports whose key and value are bytes
    (no headers, no error) are not tracked by the cyclic GC: they cannot be
    in a reference cycle. One given a container by set_value / set_key /
    set_headers is tracked again, and a cycle through it is collected."""
    create(server, topic_name, 1)
    reports = []
    p = Producer(server.config(**{"acks": 1, "linger.ms": 1}))
    try:
        p.produce(topic_name, b"plain", key=b"k", partition=0,
                  on_delivery=lambda err, msg: reports.append(msg))
        p.produce(topic_name, memoryview(b"view"), partition=0,
                  on_delivery=lambda err, msg: reports.append(msg))
        p.produce(topic_name, b"with headers", partition=0, headers=[("h", b"x")])
        assert p.flush(30) == 0
    finally:
        p.close()
    assert [gc.is_tracked(m) for m in reports] == [False, True]    # a memoryview refers on
    got = consume_all(server, topic_name, 3)
    assert [m.value() for m in got] == [b"plain", b"view", b"with headers"]
    assert [gc.is_tracked(m) for m in got] == [False, False, True]
    m = got[0]
    m.set_key(b"still bytes")
    m.set_headers(None)
    assert not gc.is_tracked(m)
    m.set_value([m])                          # a cycle through the Message
    assert gc.is_tracked(m)
    m.set_value(b"again")                     # tracked it stays: harmless
    assert gc.is_tracked(m) and m.value() == b"again"
    gc.collect()
    cycle = got[1]
    cycle.set_headers([("self", cycle)])
    del got, m, cycle
    assert gc.collect() >= 2                  # the Message and its header list


@pytest.mark.parametrize("settings", [
    {},
    {"enable.idempotence": True, "acks": "all"},
    {"compression.type": "gzip"},
], ids=["plain", "idempotent", "gzip"])
def test_reused_builders_carry_nothing_from_earlier_batches(server, topic_name, settings):
    """Builders are kept once their batch is built and reused for later
    ones (Accumulator.recycle): every record comes back once, in order, with
    its own key, value, headers and timestamp, through many batches made
    by produce() and produce_batch() into three partitions. A reused builder
    that kept a record, a count or a timestamp of its last batch would add,
    shift or misdate records here."""
    create(server, topic_name, 3)
    recs = records(3000)
    p = Producer(server.config(**{"linger.ms": 0, "batch.num.messages": 37, **settings}))
    try:
        for i, (ts, key, value, headers) in enumerate(recs):
            if i % 500 == 250:   # the bulk path takes from and gives to the same builders
                p.produce_batch(topic_name, [b"bulk-%d-%d" % (i, j) for j in range(60)],
                                partition=i % 3, timestamp=TS + i)
            p.produce(topic_name, value, key, partition=i % 3, timestamp=ts, headers=headers)
            if i % 300 == 0:
                p.flush(30)     # the sender builds, and gives builders back, part-way
        assert p.flush(30) == 0
        assert p._acc.spare_builders > 0        # the builders were kept, and reused
    finally:
        p.close()
    got = consume_all(server, topic_name, len(recs) + 6 * 60, partitions=3)
    for part in range(3):
        mine = [m for m in got if m.partition() == part]
        assert [m.offset() for m in mine] == list(range(len(mine)))
        singles = [m for m in mine if not (m.value() or b"").startswith(b"bulk-")]
        want = [(ts, key.encode() if isinstance(key, str) else key, value,
                 None if not h else [(k, v.encode() if isinstance(v, str) else v)
                                     for k, v in (h.items() if isinstance(h, dict) else h)])
                for i, (ts, key, value, h) in enumerate(recs) if i % 3 == part]
        assert [(m.timestamp()[1], m.key(), m.value(), m.headers()) for m in singles] == want
        bulk = [m.value() for m in mine if (m.value() or b"").startswith(b"bulk-")]
        assert bulk == [b"bulk-%d-%d" % (i, j) for i in range(250, 3000, 500) if i % 3 == part
                        for j in range(60)]
    assert len(got) == len(recs) + 6 * 60


def test_a_reported_batch_waiting_for_poll_holds_no_bytes(server, topic_name):
    """A batch whose delivery reports wait for poll() keeps its callbacks'
    records, not its encoded bytes: an application that polls rarely holds
    one copy of its records, not two."""
    create(server, topic_name, 1)
    delivered = []
    p = Producer(server.config(**{"linger.ms": 0, "batch.num.messages": 100}))
    try:
        for i in range(1000):
            p.produce(topic_name, b"v%d" % i, partition=0,
                      on_delivery=lambda err, msg: delivered.append(msg.value()))
        # acknowledged, not yet polled
        wait_until(lambda: sum(b.count for b in list(p._reports)) >= 1000, 30,
                   "every batch acknowledged", interval=0.01)
        waiting = list(p._reports)
        assert sum(b.count for b in waiting) == 1000 and not delivered
        assert all(b.raw is None and b.builder is None for b in waiting)
        assert p.flush(30) == 0
        assert delivered == [b"v%d" % i for i in range(1000)]
    finally:
        p.close()


@pytest.mark.parametrize("settings", [
    {"acks": 1},
    {"acks": "all", "enable.idempotence": True},
    {"acks": 0, "enable.idempotence": False},     # sent zero-copy, reported at once
    {"acks": 1, "kafkalite.transport": "tcp"},
], ids=["acks1", "idempotent", "acks0", "tcp"])
def test_batches_built_into_kept_buffers_arrive_intact(server, topic_name, settings):
    """Uncompressed batches of 64 KiB or more are built into buffers the
    sender keeps and reuses once nothing refers to the batch in them. A
    buffer reused while ZeroMQ still sends from it (zero-copy), or while its
    batch waits for an answer or a retry, would put one batch's bytes under
    another's records: every record must come back as produced."""
    create(server, topic_name, 2)
    values = [b"%05d:" % i + bytes([i % 251]) * (1_000 + 37 * (i % 50)) for i in range(4000)]
    p = Producer(server.config(**{"linger.ms": 2, "batch.num.messages": 120, **settings}))
    try:
        for i, v in enumerate(values):
            p.produce(topic_name, v, partition=i % 2)
            if i % 700 == 0:
                time.sleep(0.01)        # batches of every size, reused buffers among them
        assert p.flush(30) == 0
        assert p._sending.raw_buffers.kept      # the path was taken
    finally:
        p.close()
    got = consume_all(server, topic_name, len(values), partitions=2)
    for part in range(2):
        assert [m.value() for m in got if m.partition() == part] == values[part::2]
