# cython: language_level=3
"""The producer's per-record path: ``Producer.produce()`` is
``Accumulator.produce``, one call that checks and encodes the record,
picks its partition and appends it to that partition's open batch (a
builder.RecordBatchBuilder, written through its C interface), keeping the
record's delivery callback with the batch. ``Accumulator.serve`` hands the
delivery reports the sender queued, one entry per batch, to the callbacks,
one Message per record, in order.

Owned by kafkalite.client.producer.Producer, which keeps the rest: the
sender thread, retries, transactions. ``FastLock`` is the producer's lock
(``Producer._lock``): Python code uses it with ``with``; here it costs a C
call rather than two Python ones per record.

Who may call: any thread (the lock guards the open batches and the count
of queued records; the sender thread takes batches under the same lock).
"""
cimport cython
from cpython.pythread cimport (NOWAIT_LOCK, WAIT_LOCK, PyThread_acquire_lock,
                               PyThread_allocate_lock, PyThread_free_lock,
                               PyThread_release_lock, PyThread_type_lock)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_Check
from libc.stdint cimport int16_t, int32_t, int64_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

from batch cimport as_bytes, header_key, now_ms
from kafkalite._ext.builder cimport RecordBatchBuilder
from kafkalite._ext.messages cimport new_message
from wire_c cimport KL_BATCH_HEADER_SIZE

import random

from kafkalite import errors
from kafkalite._ext.partitioner import partition_for_key

# Kafka's DefaultRecord.MAX_RECORD_OVERHEAD: a record's length, attributes,
# timestamp and offset deltas, key and value lengths and header count take
# at most this many bytes besides the key, value and headers (the bound the
# Java producer checks max.request.size against).
cdef Py_ssize_t MAX_RECORD_OVERHEAD = 21
cdef int TIMESTAMP_CREATE_TIME = 1
# Builders kept for reuse once their batch is built (``recycle``), as
# Kafka's BufferPool keeps batch.size buffers: a new builder's buffer is
# fresh memory, and writing records into it faults a page every 4 KiB
# (74,000 faults in 4 s of produce() of 100-byte records on the development
# VM). At most this many, each at most SPARE_MAX_BATCHES batch.size.
cdef Py_ssize_t SPARE_BUILDERS = 4
cdef Py_ssize_t SPARE_MAX_BATCHES = 4
# A batch keeps what each record produced with a delivery callback needs
# for its report as CALLBACK_FIELDS entries in one flat list: (index in the
# batch, callback, key, value, headers, timestamp). A tuple per record was
# an object the cyclic GC tracks, one per record until poll() served it:
# with gc enabled the collections walking them cost 500 ns of a produce()
# with a callback, which took 840 ns (333 ns with gc disabled).
cdef enum:
    CB_FIELDS = 6
CALLBACK_FIELDS = CB_FIELDS


cdef inline double monotonic() noexcept:
    """time.monotonic() (CLOCK_MONOTONIC) without the Python call."""
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


@cython.final
cdef class FastLock:
    """A non-reentrant lock like threading.Lock, with a C fast path."""
    cdef PyThread_type_lock _lock
    cdef bint _locked

    def __cinit__(self):
        self._lock = PyThread_allocate_lock()
        if self._lock == NULL:
            raise MemoryError()

    def __dealloc__(self):
        if self._lock != NULL:
            PyThread_free_lock(self._lock)

    cdef inline void take(self) noexcept:
        if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
            # another thread holds it: wait without the GIL, which it may need
            with nogil:
                PyThread_acquire_lock(self._lock, WAIT_LOCK)
        self._locked = True

    cdef inline void give(self) noexcept:
        self._locked = False
        PyThread_release_lock(self._lock)

    def acquire(self, bint blocking=True):
        if not blocking:
            if not PyThread_acquire_lock(self._lock, NOWAIT_LOCK):
                return False
            self._locked = True
            return True
        self.take()
        return True

    def release(self):
        if not self._locked:
            raise RuntimeError("release unlocked lock")
        self.give()

    def locked(self):
        return self._locked

    def __enter__(self):
        self.take()
        return True

    def __exit__(self, *exc):
        self.give()
        return False


@cython.final
cdef class ProducerBatch:
    """Records of one partition: open (``builder``), then built (``raw``)
    and sent by the producer's sender; then its delivery report waits in the
    producer's report queue (``error``, ``base_offset``) until served."""
    cdef public object topic
    cdef public int32_t partition
    cdef public object builder
    cdef public object raw
    cdef public Py_ssize_t count
    cdef public double created
    # CALLBACK_FIELDS entries per record produced with a callback, flat:
    # (index in the batch, callback, key, value, headers, timestamp)
    cdef public list callbacks
    cdef public object batch_callback     # produce_batch's on_delivery
    cdef public int attempts
    cdef public double deadline
    cdef public double retry_at
    cdef public object node
    cdef public int64_t sequence          # idempotent producers: its base sequence, once sent
    cdef public object error              # the delivery report: error or None ...
    cdef public int64_t base_offset       # ... and the first record's offset (-1: unknown)
    cdef public Py_ssize_t served         # callbacks already called
    cdef public bint closed               # taken out of the open batches (no more appends)
    cdef public Py_ssize_t max_bytes      # closed at this size (batch.size, or its topic's cap)
    cdef public bint alone                # sent in a request of its own (no other batch of its partition)
    # sent at least once without a definite answer (the link died, the
    # request timed out): it may be in the log though never acknowledged
    cdef public bint maybe_written
    # why its last attempt failed (a delivery timeout's message names it)
    cdef public object last_error
    # bytes its records count against queue.buffering.max.kbytes (the
    # accumulator's queued_bytes), and of those, the bytes of records with
    # a callback: their key and value are held until poll() serves them
    cdef public Py_ssize_t nbytes
    cdef public Py_ssize_t callback_bytes

    def __init__(self, topic, int32_t partition, builder, double now):
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.raw = None
        self.count = 0
        self.created = now
        self.callbacks = []
        self.batch_callback = None
        self.attempts = 0
        self.deadline = 0.0
        self.retry_at = 0.0
        self.node = None
        self.sequence = -1
        self.error = None
        self.base_offset = -1
        self.served = 0
        self.closed = False
        self.max_bytes = 0
        self.alone = False
        self.maybe_written = False
        self.last_error = None
        self.nbytes = 0
        self.callback_bytes = 0

    @property
    def callback_count(self):
        """How many of its records have a delivery callback."""
        return len(self.callbacks) // CB_FIELDS


@cython.final
cdef class Accumulator:
    """One producer's open batches, seen from ``produce()``; see the module
    docstring. The dicts are the producer's own (``_open``, ``_sticky``)
    and its caller-side metadata's ``topics``."""
    cdef object producer
    cdef FastLock lock
    cdef dict open
    cdef dict sticky
    cdef dict topics
    cdef dict partition_counts        # topic -> (its TopicInfo, partition count)
    cdef ProducerBatch last           # the batch the last record went to, while open
    cdef object codec
    cdef object level
    cdef Py_ssize_t batch_count
    cdef Py_ssize_t batch_bytes
    # topic -> a batch size below batch.size: the sender learns it when the
    # topic's max.message.bytes refused a batch (Producer.cap_topic_batches)
    cdef public dict topic_bytes
    cdef Py_ssize_t max_queued
    cdef Py_ssize_t max_queued_bytes
    cdef Py_ssize_t max_request
    cdef bint keyed
    cdef object default_cb
    cdef public Py_ssize_t queued     # records produced whose delivery is not yet reported
    # ... and their bytes: keys, values and headers, and each record's
    # framing (ProducerBatch.nbytes); released as the sender reports a batch,
    # or as poll() serves the records' callbacks
    cdef public Py_ssize_t queued_bytes
    # True while produce() needs no check from the producer (open, not
    # transactional); otherwise Producer._check_can_produce() decides
    cdef public bint gate
    cdef list spare                   # built batches' builders, reset, for new batches
    cdef int16_t spare_attributes     # what a reset producer builder's attributes are

    def __init__(self, producer, FastLock lock, dict open_batches, dict sticky, dict topics,
                 codec, level, Py_ssize_t batch_count, Py_ssize_t batch_bytes,
                 Py_ssize_t max_queued, Py_ssize_t max_queued_bytes, Py_ssize_t max_request,
                 bint keyed, default_cb, bint gate):
        self.producer = producer
        self.lock = lock
        self.open = open_batches
        self.sticky = sticky
        self.topics = topics
        self.partition_counts = {}
        self.codec = codec
        self.level = level
        self.batch_count = batch_count
        self.batch_bytes = batch_bytes
        self.topic_bytes = {}
        self.max_queued = max_queued
        self.max_queued_bytes = max_queued_bytes
        self.max_request = max_request
        self.keyed = keyed
        self.default_cb = default_cb
        self.queued = 0
        self.queued_bytes = 0
        self.gate = gate
        self.spare = []
        self.spare_attributes = self._new_builder()._attributes

    cdef RecordBatchBuilder _new_builder(self):
        if self.spare:
            return self.spare.pop()
        return RecordBatchBuilder(self.codec, compression_level=self.level)

    @property
    def spare_builders(self):
        """How many builders are kept for reuse."""
        return len(self.spare)

    def new_builder(self):
        """An empty builder for a batch of this producer (a kept one if any)."""
        return self._new_builder()

    def recycle(self, RecordBatchBuilder builder):
        """Keep ``builder``, whose batch is built (its bytes copied out), for a
        later batch. The sender calls this; a builder not like the ones
        produce() makes (another codec, a control batch) or too big is left
        to be freed."""
        if len(self.spare) >= SPARE_BUILDERS \
                or builder._cap > SPARE_MAX_BATCHES * (self.batch_bytes + 4096) \
                or builder._level is not self.level:
            return
        builder.set_producer(-1, -1, -1, False)
        if builder._attributes != self.spare_attributes or builder._fixed_base_ts \
                or builder.base_offset != 0 or builder.partition_leader_epoch != -1:
            return
        builder.reset()
        self.spare.append(builder)

    cdef Py_ssize_t _partitions(self, topic) except -1:
        """The topic's partition count, as the producer's metadata knows it:
        asked of the producer (which fetches and checks it) only when the
        metadata's entry for the topic is not the one counted last time."""
        info = self.topics.get(topic)
        cached = self.partition_counts.get(topic)
        if info is not None and cached is not None and (<tuple>cached)[0] is info:
            return (<tuple>cached)[1]
        n = self.producer._partitions(topic)
        self.partition_counts[topic] = (self.topics.get(topic), n)
        return n

    cdef int32_t _choose(self, topic, key) except -1:
        cdef Py_ssize_t n = self._partitions(topic)
        if key is not None and self.keyed:
            return partition_for_key(key, n)
        p = self.sticky.get(topic)
        if p is None or p >= n:
            p = self.sticky[topic] = random.randrange(n)
        return p

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None,
                timestamp=0, headers=None, callback=None):
        """Queue one record (see confluent-kafka's Producer.produce)."""
        cdef ProducerBatch b
        cdef RecordBatchBuilder builder
        cdef bytes kb, vb, hk
        cdef object hv
        cdef list hdrs = None
        cdef list cbs
        cdef Py_ssize_t size, record_bytes
        cdef int64_t ts
        cdef int32_t part
        cdef bint wake = False, new = False
        if not self.gate:
            self.producer._check_can_produce()
        if PyUnicode_Check(value):
            value = PyUnicode_AsUTF8String(value)
        if PyUnicode_Check(key):
            key = PyUnicode_AsUTF8String(key)
        # checked and converted before the record's batch is touched, so
        # that a record refused here leaves nothing behind
        kb = as_bytes(key)
        vb = as_bytes(value)
        size = KL_BATCH_HEADER_SIZE + MAX_RECORD_OVERHEAD
        if kb is not None:
            size += PyBytes_GET_SIZE(kb)
        if vb is not None:
            size += PyBytes_GET_SIZE(vb)
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
            hdrs = [(header_key(h[0]), as_bytes(h[1])) for h in headers]
            for hk, hv in hdrs:
                size += 10 + PyBytes_GET_SIZE(hk) + (0 if hv is None else PyBytes_GET_SIZE(hv))
        part = partition
        if part < 0:
            part = self._choose(topic, key)
        else:
            n = self._partitions(topic)
            if part >= n:
                raise errors.UnknownTopicOrPartitionError(
                    f"topic {topic!r} has {n} partitions; there is no partition {part}")
        if size > self.max_request:
            raise errors.MessageTooLargeError(
                f"the record is up to {size} bytes in a batch, more than max.request.size "
                f"({self.max_request})")
        ts = now_ms() if not timestamp else timestamp
        cb = on_delivery or callback or self.default_cb
        record_bytes = size - KL_BATCH_HEADER_SIZE
        self.lock.take()
        try:
            if self.queued >= self.max_queued:
                raise BufferError(f"local queue full: {self.queued} messages waiting for "
                                  f"delivery (queue.buffering.max.messages); call poll()")
            # a record larger than the whole limit still goes when nothing
            # waits, rather than never
            if self.queued and self.queued_bytes + record_bytes > self.max_queued_bytes:
                raise BufferError(f"local queue full: {self.queued_bytes} bytes waiting for "
                                  f"delivery, and {record_bytes} more would pass "
                                  f"queue.buffering.max.kbytes "
                                  f"({self.max_queued_bytes // 1024}); call poll()")
            b = self.last
            if b is None or b.closed or b.partition != part or b.topic is not topic:
                tp = (topic, part)
                b = self.open.get(tp)
            if b is None:
                b = ProducerBatch(topic, part, self._new_builder(), monotonic())
                b.max_bytes = self.batch_bytes if not self.topic_bytes else \
                    self.topic_bytes.get(topic, self.batch_bytes)
                self.open[tp] = b
                self.last = b
                wake = new = True     # the sender must start this batch's linger.ms timer
            builder = <RecordBatchBuilder>b.builder
            try:
                builder._write_record(
                    builder._last_delta + 1, ts,
                    NULL if kb is None else <const unsigned char *>PyBytes_AS_STRING(kb),
                    -1 if kb is None else PyBytes_GET_SIZE(kb),
                    NULL if vb is None else <const unsigned char *>PyBytes_AS_STRING(vb),
                    -1 if vb is None else PyBytes_GET_SIZE(vb), hdrs)
            except BaseException:
                if new:
                    del self.open[tp]     # an empty batch would fail the sender
                    b.closed = True
                raise
            if cb is not None:
                cbs = b.callbacks
                cbs.append(b.count)
                cbs.append(cb)
                cbs.append(key)
                cbs.append(value)
                cbs.append(headers)
                cbs.append(timestamp)
                b.callback_bytes += record_bytes
            b.count += 1
            b.nbytes += record_bytes
            self.queued += 1
            self.queued_bytes += record_bytes
            self.last = b
            if b.count >= self.batch_count or builder._len >= b.max_bytes:
                self.producer._close_batch(b)
                wake = True
                new = False
        finally:
            self.lock.give()
        if wake and self.producer._sender_sleeping:
            # a batch only opened need not wake a sender that wakes before
            # its linger.ms is up anyway (many partitions: one wake-up per
            # linger period, not one per record); and an awake sender needs
            # no wake-up at all: asked here, not in _wake, as that is a
            # Python call for every record that opens a batch
            self.producer._wake(b.created if new else -1.0)

    def serve(self, reports):
        """Call the delivery callbacks of the reports queued in ``reports``
        (a deque the sender appends to: ProducerBatch entries, one callback
        per record, or (callback, error, BatchDelivery) ones), oldest first;
        returns how many callbacks ran. A callback that raises stops here and
        its batch's later records wait for the next call."""
        cdef Py_ssize_t served = 0
        cdef Py_ssize_t done, n, count, i
        cdef ProducerBatch b
        cdef list cbs
        cdef int64_t offset
        while reports:
            try:
                entry = reports[0]
            except IndexError:       # another thread took the last one
                break
            if type(entry) is not ProducerBatch:
                try:
                    entry = reports.popleft()
                except IndexError:
                    break
                cb, err, report = entry
                count = getattr(report, "count", 1)
                try:
                    cb(err, report)
                finally:
                    self.lock.take()
                    self.queued -= count
                    self.lock.give()
                served += 1
                continue
            b = <ProducerBatch>entry
            cbs = b.callbacks
            n = len(cbs) // CB_FIELDS
            done = 0
            try:
                while b.served < n:
                    i = b.served * CB_FIELDS
                    b.served += 1
                    offset = -1
                    if b.error is None and b.base_offset >= 0:
                        offset = b.base_offset + <Py_ssize_t>cbs[i]
                    msg = new_message(b.topic, b.partition, offset, cbs[i + 2], cbs[i + 3],
                                      cbs[i + 4], cbs[i + 5], TIMESTAMP_CREATE_TIME, b.error)
                    done += 1
                    cbs[i + 1](b.error, msg)
            finally:
                if done:
                    self.lock.take()
                    self.queued -= done
                    if b.served >= n and b.callback_bytes:
                        # the batch's last callback: its keys and values go
                        self.queued_bytes -= b.callback_bytes
                        b.callback_bytes = 0
                    self.lock.give()
                    served += done
            try:
                if reports[0] is b:
                    reports.popleft()
            except IndexError:
                pass
        return served
