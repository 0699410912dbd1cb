# cython: language_level=3
"""Compiled twins of the generated codecs of the per-partition messages on a
broker's hot path: decoding a ProduceRequest (v3+) and a FetchRequest
(v4+), encoding a ProduceResponse (v3+) and a FetchResponse (v4+).
kafkalite.protocol.compiler generates Python for every message; these cost
~1.2 us of it per partition, and librdkafka sends requests of a few
partitions each, many per second (issue 46), and fetches naming every
partition it consumes, most of them with nothing new (issue 72).

Contract: each twin is a drop-in for the generated function it stands for
(``decode(buf, pos, end, records_in) -> (body, pos)``,
``encode(body, ap, records_out) -> None``) and gives exactly what it gives:
the same dicts (every schema field, defaults for absent ones, records as
slices of ``buf``), the same bytes. It takes only the common shape -- empty
tagged-field sections, exact dicts and ints, str topic names -- and on
anything else, including every malformed input, it calls the generated
function on the same arguments. So an error is the generated code's own
ProtocolError (field path, byte offset), and a case the twin gets wrong can
only be one it took, which tests/protocol/test_produce_fetch.py compares
with the generated codec on random bodies of every version.

Two values are not lists of dicts, so that the Fetch path's per-partition
work is done in C (fetch_state.pyx): a decoded FetchRequest
topic's ``partitions`` is a ``FetchPartitionList`` (the partitions as C
structs), and a FetchResponse topic's ``partitions`` may be a
``FetchedPartitions`` (partitions answered inline, from three offsets,
among dicts). Each is a read-only sequence of the dicts the generated code
gives or takes (made on first use, then kept), equal to that list, so any
Python code reads it as it would the list; the twins read and write the C
entries without making them.

Never trusts the input: every read is checked against ``end`` before it is
made, an array count against the bytes left before it is looped over.

The wire layouts (Kafka's ProduceRequest.json / FetchRequest.json /
FetchResponse.json; in a flexible version lengths are unsigned varints of
length + 1, compact):

  ProduceRequest v3-v12 => transactional_id nullable string, acks int16,
      timeout_ms int32, [topic_data: name string,
      [partition_data: index int32, records nullable bytes, tags(9+)],
      tags(9+)], tags(9+)
  FetchRequest v4+ => replica_id int32 (<=14), max_wait_ms int32,
      min_bytes int32, max_bytes int32, isolation_level int8,
      session_id int32 (7+), session_epoch int32 (7+), [topics: topic
      string (<=12) | topic_id uuid (13+), [partitions: partition int32,
      current_leader_epoch int32 (9+), fetch_offset int64,
      last_fetched_epoch int32 (12+), log_start_offset int64 (5+),
      partition_max_bytes int32, tags(12+)], tags(12+)],
      [forgotten_topics_data (7+): topic string (<=12) | topic_id uuid
      (13+), [partitions int32], tags(12+)], rack_id string (11+),
      tags(12+: cluster_id 0, replica_state 1 (15+), local_host)
  FetchResponse v4+ => throttle_time_ms int32, error_code int16 (7+),
      session_id int32 (7+), [responses: topic string (<=12) | topic_id
      uuid (13+), [partitions: partition_index int32, error_code int16,
      high_watermark int64, last_stable_offset int64,
      log_start_offset int64 (5+), aborted_transactions nullable
      [producer_id int64, first_offset int64, tags(12+)],
      preferred_read_replica int32 (11+), records nullable bytes,
      tags(12+)], tags(12+)], tags(12+)
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem
from cpython.list cimport PyList_GET_SIZE
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport (
    INT16_MAX, INT16_MIN, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
    int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t,
)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from wire_c cimport kl_be32, kl_be64, kl_put_be16, kl_put_be32, kl_put_be64

from uuid import UUID

cdef object _ZERO_UUID = UUID(int=0)

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL
    int PyLong_CheckExact(object)
    long long PyLong_AsLongLongAndOverflow(object, int*) except? -1

cdef enum:
    # Kafka's cap on a string's bytes (compiler.MAX_STRING_BYTES)
    MAX_STRING_BYTES = 32767
    # a FetchResponse partition answered inline, at most: index, error,
    # three offsets, aborted transactions, preferred replica, records, tags
    MAX_INLINE_ENTRY = 4 + 2 + 8 * 3 + 4 + 4 + 4 + 1


class _NotTaken(Exception):
    """Raised inside a twin for input it leaves to the generated codec."""


# what field() gives for a key the dict lacks
cdef object _MISSING = object()
cdef bytes ZERO_UUID_BYTES = bytes(16)
cdef object ZERO_UUID = UUID(int=0)


# ---------------------------------------------------------------- decoding

cdef struct Reader:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end


cdef inline int need(Reader* r, Py_ssize_t n) except -1:
    if n > r.end - r.pos:
        raise _NotTaken
    return 0


cdef inline int64_t read_i16(Reader* r) except? -0x7fffffffffff:
    need(r, 2)
    cdef int16_t v = <int16_t>((<uint32_t>r.p[r.pos] << 8) | r.p[r.pos + 1])
    r.pos += 2
    return v


cdef inline int64_t read_i32(Reader* r) except? -0x7fffffffffff:
    need(r, 4)
    cdef const uint8_t* b = r.p + r.pos
    cdef int32_t v = <int32_t>((<uint32_t>b[0] << 24) | (<uint32_t>b[1] << 16) | (<uint32_t>b[2] << 8) | b[3])
    r.pos += 4
    return v


cdef inline int64_t read_uvarint(Reader* r) except? -0x7fffffffffff:
    """As types.read_uvarint: at most 5 bytes, at most 32 bits."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        need(r, 1)
        b = r.p[r.pos]
        r.pos += 1
        if b < 0x80:
            if shift == 28 and b > 0x0F:
                raise _NotTaken
            return <int64_t>(value | (<uint64_t>b << shift))
        value |= <uint64_t>(b & 0x7F) << shift
        shift += 7
        if shift > 28:
            raise _NotTaken


cdef inline int64_t read_length(Reader* r, bint flexible, bint four_bytes) except? -0x7fffffffffff:
    """A length or count, -1 for null (compact: the varint less one)."""
    if flexible:
        return read_uvarint(r) - 1
    return read_i32(r) if four_bytes else read_i16(r)


cdef inline int empty_tags(Reader* r) except -1:
    """An empty tagged-field section; any tag is left to the generated code."""
    need(r, 1)
    if r.p[r.pos] != 0:
        raise _NotTaken
    r.pos += 1
    return 0


cdef inline str read_string(Reader* r, bint flexible, bint nullable):
    cdef int64_t n = read_length(r, flexible, False)
    if n == -1 and nullable:
        return None
    if n < 0 or (flexible and n > MAX_STRING_BYTES) or n > r.end - r.pos:
        raise _NotTaken
    cdef str s = PyUnicode_DecodeUTF8(<const char*>(r.p + r.pos), n, NULL)
    r.pos += n
    return s


@cython.final
cdef class ProduceRequestDecoder:
    """ProduceRequest's decode at one version and records mode."""

    cdef bint flexible
    cdef bint frames
    cdef object principal_default
    cdef object generated

    def __init__(self, bint flexible, bint frames, principal_default, generated):
        self.flexible = flexible
        self.frames = frames
        self.principal_default = principal_default
        self.generated = generated

    def __call__(self, buf, Py_ssize_t pos, Py_ssize_t end, records_in):
        cdef Py_buffer view
        if PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) != 0:
            return self.generated(buf, pos, end, records_in)
        try:
            if end == view.len and 0 <= pos <= end:
                return self.decode(buf, <const uint8_t*>view.buf, pos, end, records_in)
        except Exception:
            pass
        finally:
            PyBuffer_Release(&view)
        return self.generated(buf, pos, end, records_in)

    cdef tuple decode(self, buf, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end, records_in):
        cdef Reader r
        r.p = p
        r.pos = pos
        r.end = end
        cdef bint flexible = self.flexible
        cdef int64_t n, topics, partitions, t, i, index
        cdef list topic_data, partition_data
        cdef object records
        cdef str name
        transactional_id = read_string(&r, flexible, True)
        acks = read_i16(&r)
        timeout_ms = read_i32(&r)
        topics = read_length(&r, flexible, True)
        # each topic takes at least a byte: a count past the bytes left is
        # malformed, found by the generated code without looping here
        if topics < 0 or topics > r.end - r.pos:
            raise _NotTaken
        topic_data = []
        for t in range(topics):
            name = read_string(&r, flexible, False)
            partitions = read_length(&r, flexible, True)
            if partitions < 0 or partitions > r.end - r.pos:
                raise _NotTaken
            partition_data = []
            for i in range(partitions):
                index = read_i32(&r)
                if self.frames:
                    n = read_i32(&r)
                    if n == -1:
                        records = None
                    elif 0 <= n < len(records_in):
                        records = records_in[n]
                    else:
                        raise _NotTaken
                else:
                    n = read_length(&r, flexible, True)
                    if n == -1:
                        records = None
                    elif n < 0 or n > r.end - r.pos:
                        raise _NotTaken
                    else:
                        records = buf[r.pos:r.pos + n]
                        r.pos += n
                if flexible:
                    empty_tags(&r)
                partition_data.append({"index": index, "records": records})
            if flexible:
                empty_tags(&r)
            # topic_id (v13+, KIP-516) is absent from the versions taken: its default
            topic_data.append({"name": name, "topic_id": _ZERO_UUID,
                               "partition_data": partition_data})
        if flexible:
            empty_tags(&r)
        return {"transactional_id": transactional_id, "acks": acks, "timeout_ms": timeout_ms,
                "topic_data": topic_data, "request_principal": self.principal_default}, r.pos


cdef inline int64_t read_i8(Reader* r) except? -0x7fffffffffff:
    need(r, 1)
    cdef int8_t v = <int8_t>r.p[r.pos]
    r.pos += 1
    return v


cdef inline int64_t read_i64(Reader* r) except? -0x7fffffffffff:
    need(r, 8)
    cdef const uint8_t* b = r.p + r.pos
    cdef uint64_t v = 0
    cdef int k
    for k in range(8):
        v = (v << 8) | b[k]
    r.pos += 8
    return <int64_t>v


# topic ids read, by their 16 bytes: uuid.UUID's constructor is Python
# (some 1.5 us), and a consumer's every Fetch names the same few topics;
# a UUID is immutable, so one object serves every request. Cleared when
# full, so a stream of unknown ids cannot grow it without bound.
cdef dict _uuids = {}
cdef Py_ssize_t UUIDS_HELD = 4096


cdef inline object read_uuid(Reader* r):
    need(r, 16)
    raw = PyBytes_FromStringAndSize(<const char*>(r.p + r.pos), 16)
    r.pos += 16
    cdef PyObject* held = PyDict_GetItem(_uuids, raw)
    if held != NULL:
        return <object>held
    topic_id = ZERO_UUID if raw == ZERO_UUID_BYTES else UUID(bytes=raw)
    if len(_uuids) >= UUIDS_HELD:
        _uuids.clear()
    _uuids[raw] = topic_id
    return topic_id


def held_topic_ids() -> int:
    """How many topic ids the decoders hold made (the tests' view)."""
    return len(_uuids)


# the generated code's values for a partition's fields a request version lacks
cdef enum:
    NO_EPOCH = -1
    NO_OFFSET = -1


@cython.final
cdef class FetchPartitionList:
    """A FetchRequest topic's partitions (see the module docstring): a
    read-only sequence of the generated code's partition dicts, kept as C
    entries. ``from_dicts`` makes one from such dicts (a request body built
    in Python, or a test's)."""

    def __cinit__(self):
        self.entries = NULL
        self.size = 0
        self.cap = 0
        self._dicts = None

    def __dealloc__(self):
        free(self.entries)

    @staticmethod
    def from_dicts(partitions) -> FetchPartitionList:
        cdef FetchPartitionList out = FetchPartitionList()
        cdef FetchPartitionEntry e
        for p in partitions:
            e.partition = p["partition"]
            e.current_leader_epoch = p.get("current_leader_epoch", NO_EPOCH)
            e.fetch_offset = p["fetch_offset"]
            e.last_fetched_epoch = p.get("last_fetched_epoch", NO_EPOCH)
            e.log_start_offset = p.get("log_start_offset", NO_OFFSET)
            e.partition_max_bytes = p["partition_max_bytes"]
            out.append_entry(&e)
        return out

    cdef int reserve(self, Py_ssize_t n) except -1:
        """Room for ``n`` more entries."""
        cdef Py_ssize_t cap
        cdef FetchPartitionEntry* grown
        if self.size + n > self.cap:
            cap = max(8, self.cap * 2, self.size + n)
            grown = <FetchPartitionEntry*>realloc(self.entries, cap * sizeof(FetchPartitionEntry))
            if grown == NULL:
                raise MemoryError()
            self.entries, self.cap = grown, cap
        return 0

    cdef int append_entry(self, FetchPartitionEntry* e) except -1:
        if self.size == self.cap:
            self.reserve(1)
        self.entries[self.size] = e[0]
        self.size += 1
        self._dicts = None
        return 0

    cdef dict entry_dict(self, Py_ssize_t i):
        cdef FetchPartitionEntry* e = &self.entries[i]
        return {"partition": e.partition, "current_leader_epoch": e.current_leader_epoch,
                "fetch_offset": e.fetch_offset, "last_fetched_epoch": e.last_fetched_epoch,
                "log_start_offset": e.log_start_offset,
                "partition_max_bytes": e.partition_max_bytes, "replica_directory_id": ZERO_UUID,
                # v18's tagged field (a follower's high watermark), absent below it:
                # its default, as the generated decoder gives it
                "high_watermark": INT64_MAX}

    cdef list as_list(self):
        cdef Py_ssize_t i
        if self._dicts is None:
            self._dicts = [self.entry_dict(i) for i in range(self.size)]
        return self._dicts

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.as_list()[index]

    def __iter__(self):
        return iter(self.as_list())

    def __eq__(self, other):
        if isinstance(other, FetchPartitionList):
            other = (<FetchPartitionList>other).as_list()
        return self.as_list() == other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self):
        return f"FetchPartitionList({self.as_list()!r})"

    def __reduce__(self):
        return (FetchPartitionList.from_dicts, (self.as_list(),))


@cython.final
cdef class FetchRequestDecoder:
    """FetchRequest's decode at one version (4+). ``template``: the generated
    decoder's body for a request of no topics, whose values of the fields
    this version lacks (and of tagged fields not sent) every body starts
    from."""

    cdef int version
    cdef bint flexible
    cdef dict template
    cdef object generated

    def __init__(self, int version, bint flexible, dict template, generated):
        self.version = version
        self.flexible = flexible
        self.template = template
        self.generated = generated

    def __call__(self, buf, Py_ssize_t pos, Py_ssize_t end, records_in):
        cdef Py_buffer view
        if PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) != 0:
            return self.generated(buf, pos, end, records_in)
        try:
            if end == view.len and 0 <= pos <= end:
                return self.decode(<const uint8_t*>view.buf, pos, end)
        except Exception:
            pass
        finally:
            PyBuffer_Release(&view)
        return self.generated(buf, pos, end, records_in)

    cdef tuple decode(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t end):
        cdef Reader r
        r.p = p
        r.pos = pos
        r.end = end
        cdef bint flexible = self.flexible
        cdef int version = self.version
        cdef dict body = dict(self.template)
        if version <= 14:
            body["replica_id"] = read_i32(&r)
        body["max_wait_ms"] = read_i32(&r)
        body["min_bytes"] = read_i32(&r)
        body["max_bytes"] = read_i32(&r)
        body["isolation_level"] = read_i8(&r)
        if version >= 7:
            body["session_id"] = read_i32(&r)
            body["session_epoch"] = read_i32(&r)
        body["topics"] = self.topics(&r)
        if version >= 7:
            body["forgotten_topics_data"] = self.forgotten(&r)
        else:
            body["forgotten_topics_data"] = []
        if version >= 11:
            body["rack_id"] = read_string(&r, flexible, False)
        if flexible:
            empty_tags(&r)
        # a fresh struct for every body, as the generated code makes one
        # (a request that sets it has a tag, left to the generated code)
        body["replica_state"] = {"replica_id": -1, "replica_epoch": -1}
        return body, r.pos

    cdef list topics(self, Reader* r):
        cdef bint flexible = self.flexible
        cdef int version = self.version
        cdef int64_t count, n, i, t
        cdef Py_ssize_t least
        cdef FetchPartitionEntry* e
        cdef FetchPartitionList parts
        cdef const uint8_t* q
        cdef list out = []
        count = read_length(r, flexible, True)
        # each topic takes at least a byte, each partition 16 + its version's
        # fields: a count past the bytes left is malformed, found by the
        # generated code without looping here
        if count < 0 or count > r.end - r.pos:
            raise _NotTaken
        # a partition's fields at fixed places: partition, current leader
        # epoch (9+), fetch offset, last fetched epoch (12+), log start
        # offset (5+), partition max bytes, the tags (flexible)
        cdef Py_ssize_t at_offset = 8 if version >= 9 else 4
        cdef Py_ssize_t at_lso = at_offset + (12 if version >= 12 else 8)
        cdef Py_ssize_t at_max = at_lso + (8 if version >= 5 else 0)
        least = at_max + 4 + (1 if flexible else 0)
        for t in range(count):
            if version >= 13:
                topic_id = read_uuid(r)
                name = ""
            else:
                name = read_string(r, flexible, False)
                topic_id = ZERO_UUID
            n = read_length(r, flexible, True)
            if n < 0 or n > (r.end - r.pos) // least:
                raise _NotTaken
            parts = FetchPartitionList()
            parts.reserve(n)
            # n partitions of ``least`` bytes each fit in what is left (just
            # checked): read in place, a partition a step, a C struct each
            q = r.p + r.pos
            e = parts.entries
            for i in range(n):
                e.partition = <int32_t>kl_be32(q)
                e.current_leader_epoch = <int32_t>kl_be32(q + 4) if version >= 9 else NO_EPOCH
                e.fetch_offset = <int64_t>kl_be64(q + at_offset)
                e.last_fetched_epoch = <int32_t>kl_be32(q + at_offset + 8) \
                    if version >= 12 else NO_EPOCH
                e.log_start_offset = <int64_t>kl_be64(q + at_lso) if version >= 5 else NO_OFFSET
                e.partition_max_bytes = <int32_t>kl_be32(q + at_max)
                if flexible and q[at_max + 4] != 0:
                    raise _NotTaken        # a tagged field: the generated code's
                q += least
                e += 1
            parts.size = n
            r.pos += n * least
            if flexible:
                empty_tags(r)
            out.append({"topic": name, "topic_id": topic_id, "partitions": parts})
        return out

    cdef list forgotten(self, Reader* r):
        cdef bint flexible = self.flexible
        cdef int64_t count, n, i, t
        cdef list out = []
        cdef list indexes
        count = read_length(r, flexible, True)
        if count < 0 or count > r.end - r.pos:
            raise _NotTaken
        for t in range(count):
            if self.version >= 13:
                topic_id = read_uuid(r)
                name = ""
            else:
                name = read_string(r, flexible, False)
                topic_id = ZERO_UUID
            n = read_length(r, flexible, True)
            if n < 0 or n > (r.end - r.pos) // 4:
                raise _NotTaken
            indexes = [read_i32(r) for i in range(n)]
            if flexible:
                empty_tags(r)
            out.append({"topic": name, "topic_id": topic_id, "partitions": indexes})
        return out


# ---------------------------------------------------------------- encoding

cdef struct Writer:
    char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int reserve(Writer* w, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char* data
    if w.size + n <= w.cap:
        return 0
    cap = max(w.cap * 2, w.size + n, 256)
    data = <char*>realloc(w.data, cap)
    if data == NULL:
        raise MemoryError()
    w.data = data
    w.cap = cap
    return 0


cdef inline int put_be(Writer* w, uint64_t v, int size) except -1:
    reserve(w, size)
    cdef int k
    for k in range(size):
        w.data[w.size + k] = <char>(v >> (8 * (size - 1 - k)))
    w.size += size
    return 0


cdef inline int put_uvarint(Writer* w, int64_t v) except -1:
    """As types.write_uvarint: 0 <= v < 2**32, else left to the generated code."""
    if v < 0 or v > 0xFFFFFFFF:
        raise _NotTaken
    reserve(w, 5)
    while v >= 0x80:
        w.data[w.size] = <char>((v & 0x7F) | 0x80)
        w.size += 1
        v >>= 7
    w.data[w.size] = <char>v
    w.size += 1
    return 0


cdef inline int put_length(Writer* w, int64_t n, bint flexible, bint four_bytes) except -1:
    if flexible:
        return put_uvarint(w, n + 1)
    if four_bytes:
        if n < -0x80000000 or n > 0x7FFFFFFF:
            raise _NotTaken
        return put_be(w, <uint64_t>n, 4)
    if n < -0x8000 or n > 0x7FFF:
        raise _NotTaken
    return put_be(w, <uint64_t>n, 2)


cdef inline int put_bytes(Writer* w, const char* data, Py_ssize_t n) except -1:
    reserve(w, n)
    memcpy(w.data + w.size, data, n)
    w.size += n
    return 0


cdef inline int flush(Writer* w, list parts) except -1:
    if w.size:
        parts.append(PyBytes_FromStringAndSize(w.data, w.size))
        w.size = 0
    return 0


cdef inline object field(dict d, str key, Py_ssize_t* found):
    """d[key], or _MISSING; counts the keys found, so that a key the schema
    lacks (which the generated code refuses) shows as fewer found than len(d)."""
    cdef PyObject* v = PyDict_GetItem(d, key)
    if v == NULL:
        return _MISSING
    found[0] += 1
    return <object>v


cdef inline int64_t as_int(object v, int64_t default, int64_t low, int64_t high) except? -0x7fffffffffff:
    """An int field's value (``default`` when missing); anything but an int
    in range is left to the generated code (struct.pack's own errors)."""
    cdef int overflow = 0
    cdef long long x
    if v is _MISSING:
        return default
    if not PyLong_CheckExact(v):
        raise _NotTaken
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow or x < low or x > high:
        raise _NotTaken
    return x


cdef inline int put_int16(Writer* w, object v, int64_t default) except -1:
    """An INT16/INT32/INT64 field (these three): as_int's value, or ``default``
    when missing, big-endian; what as_int refuses is left to the generated code."""
    return put_be(w, <uint64_t>as_int(v, default, INT16_MIN, INT16_MAX), 2)


cdef inline int put_int32(Writer* w, object v, int64_t default) except -1:
    return put_be(w, <uint64_t>as_int(v, default, INT32_MIN, INT32_MAX), 4)


cdef inline int put_int64(Writer* w, object v, int64_t default) except -1:
    return put_be(w, <uint64_t>as_int(v, default, INT64_MIN, INT64_MAX), 8)


cdef inline bint set_tag(object v) except -1:
    return v is not _MISSING and bool(v)


cdef inline int put_string(Writer* w, object s, bint flexible, bint nullable) except -1:
    """A string field (None: null, where nullable); anything the generated
    code would refuse or cut to fit is left to it."""
    cdef Py_ssize_t size
    cdef const char* data
    if s is None and nullable:
        return put_length(w, -1, flexible, False)
    if type(s) is not str:
        raise _NotTaken
    data = PyUnicode_AsUTF8AndSize(s, &size)
    if size > MAX_STRING_BYTES:
        raise _NotTaken
    put_length(w, size, flexible, False)
    put_bytes(w, data, size)
    return 0


@cython.final
cdef class FetchedPartitions:
    """A FetchResponse topic's partitions (see the module docstring): a
    read-only sequence of response partition dicts, of which those
    answered inline are C entries until Python code asks for them.
    ``aborted_empty``: inline entries carry an empty list of aborted
    transactions (a read_committed fetch's) rather than null."""

    def __cinit__(self, bint aborted_empty=False):
        self.entries = NULL
        self.size = 0
        self.cap = 0
        self.dicts = []
        self.aborted_empty = aborted_empty
        self._materialized = None

    def __dealloc__(self):
        free(self.entries)

    cdef int reserve(self, Py_ssize_t n) except -1:
        """Room for ``n`` more entries."""
        cdef Py_ssize_t cap
        cdef FetchedEntry* grown
        if self.size + n > self.cap:
            cap = max(8, self.cap * 2, self.size + n)
            grown = <FetchedEntry*>realloc(self.entries, cap * sizeof(FetchedEntry))
            if grown == NULL:
                raise MemoryError()
            self.entries, self.cap = grown, cap
        return 0

    cdef FetchedEntry* _next(self) except NULL:
        if self.size == self.cap:
            self.reserve(1)
        self._materialized = None
        self.size += 1
        return &self.entries[self.size - 1]

    cdef int add_inline(self, int32_t index, int64_t high_watermark, int64_t last_stable_offset,
                        int64_t log_start_offset) except -1:
        cdef FetchedEntry* e = self._next()
        e.partition_index = index
        e.high_watermark = high_watermark
        e.last_stable_offset = last_stable_offset
        e.log_start_offset = log_start_offset
        e.slow = -1
        return 0

    cdef int add_slow(self, int32_t index, Py_ssize_t slow) except -1:
        cdef FetchedEntry* e = self._next()
        e.partition_index = index
        e.slow = <int32_t>slow
        return 0

    cdef dict inline_dict(self, FetchedEntry* e):
        return {"error_code": 0, "high_watermark": e.high_watermark,
                "last_stable_offset": e.last_stable_offset,
                "log_start_offset": e.log_start_offset,
                "aborted_transactions": [] if self.aborted_empty else None,
                "preferred_read_replica": -1, "records": b"",
                "partition_index": e.partition_index}

    def inline_count(self) -> int:
        """How many partitions are answered inline."""
        cdef Py_ssize_t i, n = 0
        for i in range(self.size):
            if self.entries[i].slow < 0:
                n += 1
        return n

    cdef list _list(self):
        cdef Py_ssize_t i
        cdef FetchedEntry* e
        if self._materialized is None:
            out = []
            for i in range(self.size):
                e = &self.entries[i]
                out.append(self.inline_dict(e) if e.slow < 0 else self.dicts[e.slow])
            self._materialized = out
        return self._materialized

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self._list()[index]

    def __iter__(self):
        return iter(self._list())

    def __eq__(self, other):
        if isinstance(other, FetchedPartitions):
            other = (<FetchedPartitions>other)._list()
        return self._list() == other

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = None

    def __repr__(self):
        return f"FetchedPartitions({self._list()!r})"

    def __reduce__(self):
        return (list, (self._list(),))


@cython.final
cdef class FetchResponseEncoder:
    """FetchResponse's encode at one version and records mode."""

    cdef int version
    cdef bint flexible
    cdef bint frames
    cdef object generated
    cdef object byte_length

    def __init__(self, int version, bint flexible, bint frames, generated, byte_length):
        self.version = version
        self.flexible = flexible
        self.frames = frames
        self.generated = generated
        self.byte_length = byte_length   # compiler._byte_length: a records value's size

    def __call__(self, s, ap, records_out):
        cdef Writer w
        cdef list parts = []
        cdef Py_ssize_t mark = len(records_out) if records_out is not None else 0
        w.data = NULL
        w.size = 0
        w.cap = 0
        try:
            if type(s) is dict:
                self.encode(&w, <dict>s, parts, records_out)
                flush(&w, parts)
                for part in parts:
                    ap(part)
                return None
        except Exception:
            if records_out is not None:
                del records_out[mark:]
        finally:
            free(w.data)
        return self.generated(s, ap, records_out)

    cdef int encode(self, Writer* w, dict s, list parts, records_out) except -1:
        cdef Py_ssize_t found = 0
        cdef bint flexible = self.flexible
        cdef int version = self.version
        throttle = field(s, "throttle_time_ms", &found)
        error_code = field(s, "error_code", &found)
        session_id = field(s, "session_id", &found)
        responses = field(s, "responses", &found)
        node_endpoints = field(s, "node_endpoints", &found)
        if found != len(s):
            raise _NotTaken
        put_int32(w, throttle, 0)
        if version >= 7:
            put_int16(w, error_code, 0)
            put_int32(w, session_id, 0)
        if responses is _MISSING:
            responses = []
        if type(responses) is not list:
            raise _NotTaken
        put_length(w, PyList_GET_SIZE(responses), flexible, True)
        for topic in <list>responses:
            if type(topic) is not dict:
                raise _NotTaken
            self.encode_topic(w, <dict>topic, parts, records_out)
        if flexible:
            # node_endpoints (16+) is the only tagged field here: written
            # by the generated code when it is not empty
            if version >= 16 and node_endpoints is not _MISSING and not (
                    type(node_endpoints) is list and PyList_GET_SIZE(node_endpoints) == 0):
                raise _NotTaken
            put_be(w, 0, 1)
        return 0

    cdef int encode_topic(self, Writer* w, dict topic, list parts, records_out) except -1:
        cdef Py_ssize_t found = 0
        cdef bint flexible = self.flexible
        name = field(topic, "topic", &found)
        topic_id = field(topic, "topic_id", &found)
        partitions = field(topic, "partitions", &found)
        if found != len(topic):
            raise _NotTaken
        if self.version >= 13:
            if topic_id is _MISSING:
                put_bytes(w, PyBytes_AS_STRING(ZERO_UUID_BYTES), 16)
            elif type(topic_id) is UUID:
                raw = topic_id.bytes
                put_bytes(w, PyBytes_AS_STRING(raw), 16)
            else:
                raise _NotTaken
        else:
            put_string(w, "" if name is _MISSING else name, flexible, False)
        if partitions is _MISSING:
            partitions = []
        if type(partitions) is FetchedPartitions:
            self.encode_fetched(w, <FetchedPartitions>partitions, parts, records_out)
        elif type(partitions) is list:
            put_length(w, PyList_GET_SIZE(partitions), flexible, True)
            for partition in <list>partitions:
                if type(partition) is not dict:
                    raise _NotTaken
                self.encode_partition(w, <dict>partition, parts, records_out)
        else:
            raise _NotTaken
        if flexible:
            put_be(w, 0, 1)
        return 0

    cdef int encode_fetched(self, Writer* w, FetchedPartitions fetched, list parts,
                            records_out) except -1:
        """Inline entries as the generated code writes their dicts (no
        error, no records: b"", not null), the others as dicts."""
        cdef bint flexible = self.flexible
        cdef bint frames = self.frames
        cdef int version = self.version
        cdef Py_ssize_t i
        cdef FetchedEntry* e
        cdef list dicts = fetched.dicts
        # an inline entry's aborted transactions: an empty array or null
        # (compact: a varint of the count + 1, 0 for null)
        cdef uint64_t aborted = 0 if fetched.aborted_empty else 0xFFFFFFFF
        cdef uint64_t compact_aborted = 1 if fetched.aborted_empty else 0
        cdef unsigned char* at
        put_length(w, fetched.size, flexible, True)
        # room for every entry inline at once; a partition answered by its
        # dict may use it up (or flush it), so each inline one checks
        reserve(w, fetched.size * MAX_INLINE_ENTRY)
        for i in range(fetched.size):
            e = &fetched.entries[i]
            if e.slow >= 0:
                partition = dicts[e.slow]
                if type(partition) is not dict:
                    raise _NotTaken
                self.encode_partition(w, <dict>partition, parts, records_out)
                continue
            if w.size + MAX_INLINE_ENTRY > w.cap:
                reserve(w, MAX_INLINE_ENTRY)
            at = <unsigned char*>w.data + w.size
            kl_put_be32(at, <uint32_t>e.partition_index)
            kl_put_be16(at + 4, 0)                                  # error_code
            kl_put_be64(at + 6, <uint64_t>e.high_watermark)
            kl_put_be64(at + 14, <uint64_t>e.last_stable_offset)
            at += 22
            if version >= 5:
                kl_put_be64(at, <uint64_t>e.log_start_offset)
                at += 8
            if flexible:
                at[0] = <unsigned char>compact_aborted
                at += 1
            else:
                kl_put_be32(at, <uint32_t>aborted)
                at += 4
            if version >= 11:
                kl_put_be32(at, 0xFFFFFFFF)                         # preferred_read_replica
                at += 4
            if frames:
                kl_put_be32(at, <uint32_t>len(records_out))
                at += 4
                records_out.append(b"")
            elif flexible:
                at[0] = 1                       # records: length 0, compact
                at[1] = 0                       # the partition's tags
                at += 2
            else:
                kl_put_be32(at, 0)
                at += 4
            if frames and flexible:
                at[0] = 0
                at += 1
            w.size = at - <unsigned char*>w.data
        return 0

    cdef int encode_partition(self, Writer* w, dict p, list parts, records_out) except -1:
        cdef Py_ssize_t found = 0
        cdef Py_ssize_t afound
        cdef int64_t size
        cdef bint flexible = self.flexible
        cdef int version = self.version
        partition_index = field(p, "partition_index", &found)
        error_code = field(p, "error_code", &found)
        high_watermark = field(p, "high_watermark", &found)
        last_stable_offset = field(p, "last_stable_offset", &found)
        log_start_offset = field(p, "log_start_offset", &found)
        diverging_epoch = field(p, "diverging_epoch", &found)
        current_leader = field(p, "current_leader", &found)
        snapshot_id = field(p, "snapshot_id", &found)
        aborted = field(p, "aborted_transactions", &found)
        preferred_read_replica = field(p, "preferred_read_replica", &found)
        records = field(p, "records", &found)
        local_region = field(p, "local_region", &found)
        if found != len(p):
            raise _NotTaken
        if flexible:
            # a tagged field is written by the generated code when truthy
            # (and its bytes differ from the default's): left to it
            if (set_tag(diverging_epoch) or set_tag(current_leader) or set_tag(snapshot_id)
                    or set_tag(local_region)):
                raise _NotTaken
        put_int32(w, partition_index, 0)
        put_int16(w, error_code, 0)
        put_int64(w, high_watermark, 0)
        put_int64(w, last_stable_offset, -1)
        if version >= 5:
            put_int64(w, log_start_offset, -1)
        if aborted is _MISSING or aborted is None:
            put_length(w, -1, flexible, True)
        elif type(aborted) is list:
            put_length(w, PyList_GET_SIZE(aborted), flexible, True)
            for txn in <list>aborted:
                if type(txn) is not dict:
                    raise _NotTaken
                afound = 0
                producer_id = field(<dict>txn, "producer_id", &afound)
                first_offset = field(<dict>txn, "first_offset", &afound)
                if afound != len(txn):
                    raise _NotTaken
                put_int64(w, producer_id, 0)
                put_int64(w, first_offset, 0)
                if flexible:
                    put_be(w, 0, 1)
        else:
            raise _NotTaken
        if version >= 11:
            put_int32(w, preferred_read_replica, -1)
        if records is _MISSING or records is None:
            if self.frames:
                put_be(w, 0xFFFFFFFF, 4)
            else:
                put_length(w, -1, flexible, True)
        elif self.frames:
            put_be(w, <uint64_t>len(records_out), 4)
            records_out.append(records)
        else:
            if type(records) is bytes:
                size = PyBytes_GET_SIZE(records)
            elif not PyObject_CheckBuffer(records) and hasattr(records, "sendfile"):
                # a file region, as compiler._byte_length takes it
                length = records.length
                if not PyLong_CheckExact(length):
                    raise _NotTaken
                size = length
            else:
                size = self.byte_length(records)
            put_length(w, size, flexible, True)
            flush(w, parts)
            parts.append(records)
        if flexible:
            put_be(w, 0, 1)
        return 0


@cython.final
cdef class ProduceResponseEncoder:
    """ProduceResponse's encode at one version (3+): the answer to every
    Produce request, one partition each from librdkafka's producers."""

    cdef int version
    cdef bint flexible
    cdef object generated

    def __init__(self, int version, bint flexible, generated):
        self.version = version
        self.flexible = flexible
        self.generated = generated

    def __call__(self, s, ap, records_out):
        cdef Writer w
        w.data = NULL
        w.size = 0
        w.cap = 0
        data = None
        try:
            if type(s) is dict:
                self.encode(&w, <dict>s)
                data = PyBytes_FromStringAndSize(w.data, w.size)
        except Exception:
            data = None
        finally:
            free(w.data)
        if data is None:
            return self.generated(s, ap, records_out)
        ap(data)
        return None

    cdef int encode(self, Writer* w, dict s) except -1:
        cdef Py_ssize_t found = 0
        cdef bint flexible = self.flexible
        responses = field(s, "responses", &found)
        throttle = field(s, "throttle_time_ms", &found)
        node_endpoints = field(s, "node_endpoints", &found) if self.version >= 10 else _MISSING
        if found != len(s):
            raise _NotTaken
        if responses is _MISSING:
            responses = []
        if type(responses) is not list:
            raise _NotTaken
        put_length(w, PyList_GET_SIZE(responses), flexible, True)
        for topic in <list>responses:
            if type(topic) is not dict:
                raise _NotTaken
            self.encode_topic(w, <dict>topic)
        put_int32(w, throttle, 0)
        if flexible:
            # node_endpoints (10+) is the only tagged field here: written by
            # the generated code when it is not empty
            if node_endpoints is not _MISSING and not (
                    type(node_endpoints) is list and PyList_GET_SIZE(node_endpoints) == 0):
                raise _NotTaken
            put_be(w, 0, 1)
        return 0

    cdef int encode_topic(self, Writer* w, dict topic) except -1:
        cdef Py_ssize_t found = 0
        cdef bint flexible = self.flexible
        name = field(topic, "name", &found)
        field(topic, "topic_id", &found)          # v13+ only (KIP-516): not in the versions taken
        partitions = field(topic, "partition_responses", &found)
        if found != len(topic):
            raise _NotTaken
        put_string(w, "" if name is _MISSING else name, flexible, False)
        if partitions is _MISSING:
            partitions = []
        if type(partitions) is not list:
            raise _NotTaken
        put_length(w, PyList_GET_SIZE(partitions), flexible, True)
        for partition in <list>partitions:
            if type(partition) is not dict:
                raise _NotTaken
            self.encode_partition(w, <dict>partition)
        if flexible:
            put_be(w, 0, 1)
        return 0

    cdef int encode_partition(self, Writer* w, dict p) except -1:
        cdef Py_ssize_t found = 0
        cdef Py_ssize_t efound
        cdef bint flexible = self.flexible
        cdef int version = self.version
        index = field(p, "index", &found)
        error_code = field(p, "error_code", &found)
        base_offset = field(p, "base_offset", &found)
        log_append_time = field(p, "log_append_time_ms", &found)
        log_start_offset = field(p, "log_start_offset", &found) if version >= 5 else _MISSING
        record_errors = field(p, "record_errors", &found) if version >= 8 else _MISSING
        error_message = field(p, "error_message", &found) if version >= 8 else _MISSING
        current_leader = field(p, "current_leader", &found) if version >= 10 else _MISSING
        if found != len(p):
            raise _NotTaken
        if set_tag(current_leader):
            raise _NotTaken     # a tagged field: written by the generated code when set
        put_int32(w, index, 0)
        put_int16(w, error_code, 0)
        put_int64(w, base_offset, 0)
        put_int64(w, log_append_time, -1)
        if version >= 5:
            put_int64(w, log_start_offset, -1)
        if version >= 8:
            if record_errors is _MISSING:
                record_errors = []
            if type(record_errors) is not list:
                raise _NotTaken
            put_length(w, PyList_GET_SIZE(record_errors), flexible, True)
            for e in <list>record_errors:
                if type(e) is not dict:
                    raise _NotTaken
                efound = 0
                batch_index = field(<dict>e, "batch_index", &efound)
                message = field(<dict>e, "batch_index_error_message", &efound)
                if efound != len(e):
                    raise _NotTaken
                put_int32(w, batch_index, 0)
                put_string(w, None if message is _MISSING else message, flexible, True)
                if flexible:
                    put_be(w, 0, 1)
            put_string(w, None if error_message is _MISSING else error_message, flexible, True)
        if flexible:
            put_be(w, 0, 1)
        return 0

