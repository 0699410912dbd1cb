# cython: language_level=3
"""The client's Message type, and the consumer's per-batch decoding into Messages.

``Message`` is what ``Consumer.poll()``/``consume()`` return and what a
producer's delivery callback receives: confluent-kafka's accessors
(``msg.value()``, ``msg.offset()``...), as a C type so that a Message costs
one allocation and a few pointer stores. ``batch_messages`` turns one
RecordBatch v2 (a kafkalite._ext.reader.RecordBatch) into the list of its
records' Messages in one loop, so that the consumer does no Python work per
record (kafkalite.client.consumer calls it once per batch);
``share_messages`` does the same for a share group's consumer, keeping the
records the member acquired, with their delivery counts. Re-exported by
kafkalite.client.types; any thread may create and read Messages.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport INT64_MAX, int32_t, int64_t

from wire_c cimport *

from kafkalite.errors import CorruptRecordError


cdef extern from "Python.h":
    void PyObject_GC_Track(object)
    void PyObject_GC_UnTrack(object)
    int PyObject_GC_IsTracked(object)


# A Message refers to few objects, and a consumed one's are all atomic
# (str, bytes, ints, None), so it cannot be part of a reference cycle:
# new_message() takes it out of the cyclic GC's sight, as CPython does for
# tuples and dicts of atomic values. Otherwise the 10,000 Messages a
# consume() returns are 10,000 objects each collection walks (consume() of
# 100-byte records ran at 3.6 M records/s with gc on, 10.7 M with it off).
# set_key/set_value/set_headers give it back to the GC if they store
# something that could hold references.
cdef inline bint atomic(object x):
    return x is None or type(x) is bytes or type(x) is str


cdef inline void track_for(Message m, object x):
    if not atomic(x) and not PyObject_GC_IsTracked(m):
        PyObject_GC_Track(m)

# kafkalite.client.types' constants (that module imports this one)
cdef enum:
    TIMESTAMP_CREATE_TIME = 1
    TIMESTAMP_LOG_APPEND_TIME = 2


# a consumer makes and drops one per record: reuse the memory of dropped ones
@cython.freelist(1024)
cdef class Message:
    """One consumed record, or a delivery report of a produced one."""

    def __init__(self, topic, partition, offset, key, value, headers=None,
                 timestamp=-1, timestamp_type=TIMESTAMP_CREATE_TIME, error=None,
                 leader_epoch=None):
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._key = key
        self._value = value
        self._headers = headers
        self._timestamp = timestamp
        self._timestamp_type = timestamp_type
        self._error = error
        self._leader_epoch = leader_epoch

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def key(self):
        return self._key

    def value(self):
        return self._value

    def headers(self):
        return self._headers or None

    def timestamp(self):
        """(timestamp type, epoch milliseconds), as confluent-kafka returns it."""
        return (self._timestamp_type, self._timestamp)

    def error(self):
        return self._error

    def leader_epoch(self):
        return self._leader_epoch

    def delivery_count(self):
        """How many times a share group delivered this record, this
        delivery included (KIP-932); None outside share groups."""
        return self._delivery_count or None

    def set_value(self, value):
        track_for(self, value)
        self._value = value

    def set_key(self, key):
        track_for(self, key)
        self._key = key

    def set_headers(self, headers):
        track_for(self, headers)
        self._headers = headers

    def __len__(self):
        return len(self._value) if self._value is not None else 0

    def __repr__(self):
        if self._error is not None:
            return f"Message({self._topic}-{self._partition}, error={self._error})"
        return (f"Message({self._topic}-{self._partition}@{self._offset}, key={self._key!r}, "
                f"value={self._value!r:.60})")

    def __reduce__(self):
        return (Message, (self._topic, self._partition, self._offset, self._key, self._value,
                          self._headers, self._timestamp, self._timestamp_type, self._error,
                          self._leader_epoch))


cdef Message new_message(object topic, int32_t partition, int64_t offset, object key,
                         object value, object headers, int64_t timestamp, int timestamp_type,
                         object error):
    """A Message without the Python call (the hot paths' constructor)."""
    cdef Message m = Message.__new__(Message)
    m._topic = topic
    m._partition = partition
    m._offset = offset
    m._key = key
    m._value = value
    m._headers = headers
    m._timestamp = timestamp
    m._timestamp_type = timestamp_type
    m._error = error
    if headers is None and error is None and atomic(key) and atomic(value) \
            and type(topic) is str:
        PyObject_GC_UnTrack(m)      # see atomic() above
    return m


def batch_messages(batch, topic, int32_t partition, int64_t min_offset,
                   int64_t max_offset=INT64_MAX):
    """The Messages of ``batch``'s records from ``min_offset`` to
    ``max_offset``, in offset order (``batch``: a reader.RecordBatch, data
    not control); the others are parsed (the batch is checked whole) but
    no Message is made for them.
    Records with headers take theirs from ``batch.records()``, decoded only
    when a record has any."""
    cdef bytes section = batch.records_section()
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(section)
    cdef const unsigned char *end = p + PyBytes_GET_SIZE(section)
    cdef kl_record r
    cdef int rc
    cdef int32_t i, count = batch.record_count
    cdef int64_t base_offset = batch.base_offset
    cdef int64_t base_ts = batch.base_timestamp
    cdef int64_t max_ts = batch.max_timestamp
    cdef bint log_append = (batch.attributes & KL_ATTR_TIMESTAMP_TYPE) != 0
    cdef int ts_type = TIMESTAMP_LOG_APPEND_TIME if log_append else TIMESTAMP_CREATE_TIME
    cdef int64_t offset
    cdef list out = []
    cdef list decoded = None
    cdef object key, value, headers
    if count < 0:
        raise CorruptRecordError(f"batch at offset {base_offset} has record count {count}")
    for i in range(count):
        rc = kl_parse_record(p, end, &r)
        if rc != KL_REC_OK:
            raise CorruptRecordError(f"batch at offset {base_offset}, record {i}: "
                                     f"{kl_record_error(rc).decode()}")
        p = r.end
        offset = base_offset + r.offset_delta
        if offset < min_offset or offset > max_offset:
            continue
        key = None if r.key_len < 0 else PyBytes_FromStringAndSize(<const char *>r.key, r.key_len)
        value = None if r.value_len < 0 else PyBytes_FromStringAndSize(<const char *>r.value,
                                                                       r.value_len)
        if r.header_count:
            if decoded is None:
                decoded = batch.records()
            headers = decoded[i].headers
        else:
            headers = None      # headers() is None for none either way
        out.append(new_message(topic, partition, offset, key, value, headers,
                               max_ts if log_append else base_ts + r.timestamp_delta, ts_type,
                               None))
    if p != end:
        raise CorruptRecordError(f"batch at offset {base_offset} has {end - p} bytes after "
                                 f"its {count} records")
    return out


def share_messages(batch, topic, int32_t partition, list acquired):
    """The Messages of ``batch``'s records that lie in ``acquired`` -- the
    (first offset, last offset, delivery count) ranges a share group member
    holds, sorted -- each with its delivery count (KIP-932): one pass over
    the batch, no Python call per record."""
    cdef Py_ssize_t i = 0, n = len(acquired)
    cdef list out = []
    if n == 0:
        return out
    cdef int64_t first, last
    cdef int count
    first, last, count = acquired[0]
    cdef list made = batch_messages(batch, topic, partition, first, acquired[n - 1][1])
    cdef Message m
    for m in made:
        while m._offset > last:
            i += 1
            if i == n:
                return out
            first, last, count = acquired[i]
        if m._offset >= first:
            m._delivery_count = count
            out.append(m)
    return out
