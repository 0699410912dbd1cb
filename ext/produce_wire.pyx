# cython: language_level=3
"""The common Produce request read straight from its TCP frame, and its
answer written straight into one, for the broker's one-pass path
(kafkalite/server/replica/produce_at_once.py, issue 72).

librdkafka at 100 partitions sends about one Produce request per message,
one partition of one record each; decoding it into the generic codec's
dicts (every schema field, a RequestHeader, a body dict, a dict per topic
and partition) and encoding the answer from dicts cost more than the
append itself. ``read_produce`` gives only what the one-pass path needs;
``write_produce_answer`` writes an answer of appended partitions.

Contract: ``read_produce`` takes only the common kind -- Produce v3-v12,
header and body well formed, a client id of ASCII, no transactional id,
every tagged-field section empty (so no ``request_principal``), every
records value present, no bytes after the body -- and returns None for
anything else, having looked at nothing but the frame: the caller then
decodes it with the generic codec, which serves (or refuses) it exactly as
before. ``write_produce_answer`` gives the bytes the generic encoder gives
(``encode_response_wire``) for the same answer: error code 0, no record
errors, no error message, no tagged fields, throttle time 0.
tests/protocol/test_produce_wire.py compares both with the generic codec
on random requests and answers of every version.

Layouts (Kafka's ProduceRequest.json / ProduceResponse.json; flexible
from v9, where lengths are unsigned varints of length + 1 and each struct
ends in a tagged-field section):

  request header v1 (v3-v8) / v2 (v9+) => api_key int16, api_version
      int16, correlation_id int32, client_id nullable string (int16
      length in every version), tags (v2)
  ProduceRequest => transactional_id nullable string, acks int16,
      timeout_ms int32, [topic_data: name string, [partition_data: index
      int32, records nullable bytes, tags], tags], tags
  response header v0 / v1 (v9+) => correlation_id int32, tags (v1)
  ProduceResponse => [responses: name string, [partition_responses:
      index int32, error_code int16, base_offset int64,
      log_append_time_ms int64, log_start_offset int64 (5+),
      [record_errors] (8+), error_message nullable string (8+), tags],
      tags], throttle_time_ms int32, tags
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.list cimport PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

cdef enum:
    PRODUCE = 0
    FIRST_VERSION = 3           # message format v2
    LAST_VERSION = 12           # v13 names topics by id
    FIRST_FLEXIBLE = 9
    MAX_STRING_BYTES = 32767    # Kafka's cap on a string (compiler.MAX_STRING_BYTES)
    # an answer's partition at most: index, error, three offsets, record
    # errors, error message, tags
    PARTITION_BYTES = 4 + 2 + 8 * 3 + 4 + 2 + 1
    NOT_TAKEN = -2              # a length or field the common kind does not have


cdef struct Reader:
    const uint8_t* p
    Py_ssize_t pos
    Py_ssize_t end


cdef inline bint has(Reader* r, Py_ssize_t n) noexcept:
    return n <= r.end - r.pos


cdef inline int64_t read_int(Reader* r, int size) noexcept:
    """A big-endian signed int of ``size`` bytes (2 or 4); the caller checked ``has``."""
    cdef uint64_t v = 0
    cdef int k
    for k in range(size):
        v = (v << 8) | r.p[r.pos + k]
    r.pos += size
    if size == 2:
        return <int64_t>(<short>v)
    return <int64_t>(<int>v)


cdef inline int64_t read_length(Reader* r, bint flexible, int size) noexcept:
    """A length or count, -1 for null; NOT_TAKEN past the end or for a
    varint over 32 bits (as types.read_uvarint refuses)."""
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    if not flexible:
        if not has(r, size):
            return NOT_TAKEN
        return read_int(r, size)
    while True:
        if not has(r, 1):
            return NOT_TAKEN
        b = r.p[r.pos]
        r.pos += 1
        if b < 0x80:
            if shift == 28 and b > 0x0F:
                return NOT_TAKEN
            return <int64_t>(value | (<uint64_t>b << shift)) - 1
        value |= <uint64_t>(b & 0x7F) << shift
        shift += 7
        if shift > 28:
            return NOT_TAKEN


cdef inline bint no_tags(Reader* r) noexcept:
    """An empty tagged-field section, read; False for any other."""
    if not has(r, 1) or r.p[r.pos] != 0:
        return False
    r.pos += 1
    return True


cdef int64_t read_head(Reader* r, int64_t* version, int64_t* correlation_id,
                       int64_t* acks) noexcept:
    """The request header and the body up to its topics, read: their
    count, NOT_TAKEN when the frame is not the common kind (module docstring)."""
    cdef int64_t api_key, n
    cdef Py_ssize_t k
    cdef bint flexible
    if not has(r, 10):
        return NOT_TAKEN
    api_key = read_int(r, 2)
    version[0] = read_int(r, 2)
    if api_key != PRODUCE or not FIRST_VERSION <= version[0] <= LAST_VERSION:
        return NOT_TAKEN
    correlation_id[0] = read_int(r, 4)
    n = read_int(r, 2)              # client_id: int16 length in every header version
    if n >= 0:
        if not has(r, n):
            return NOT_TAKEN
        # ASCII is UTF-8; anything else the generic decoder checks
        for k in range(r.pos, r.pos + n):
            if r.p[k] >= 0x80:
                return NOT_TAKEN
        r.pos += n
    elif n != -1:
        return NOT_TAKEN
    flexible = version[0] >= FIRST_FLEXIBLE
    if flexible and not no_tags(r):
        return NOT_TAKEN
    if read_length(r, flexible, 2) != -1:      # transactional_id: null only
        return NOT_TAKEN
    if not has(r, 6):
        return NOT_TAKEN
    acks[0] = read_int(r, 2)
    r.pos += 4                      # timeout_ms: the one-pass path never waits
    n = read_length(r, flexible, 4)
    # each topic takes at least a byte: a count past the bytes left is malformed
    if n < 0 or n > r.end - r.pos:
        return NOT_TAKEN
    return n


cdef int read_one_produce(const uint8_t* p, Py_ssize_t size, OneProduce* out) noexcept:
    """``read_produce`` of a request of one topic of one partition, into
    ``out`` (positions in ``p``, no Python object): 1; 0 for any other
    frame, ``read_produce``'s to read or refuse."""
    cdef Reader r
    cdef int64_t version, correlation_id, acks, n
    cdef bint flexible
    r.p = p
    r.pos = 0
    r.end = size
    if read_head(&r, &version, &correlation_id, &acks) != 1:
        return 0
    flexible = version >= FIRST_FLEXIBLE
    n = read_length(&r, flexible, 2)
    if n < 0 or n > MAX_STRING_BYTES or not has(&r, n):
        return 0
    out.name_at = r.pos
    out.name_size = n
    r.pos += n
    if read_length(&r, flexible, 4) != 1 or not has(&r, 4):
        return 0
    out.index = <int32_t>read_int(&r, 4)
    n = read_length(&r, flexible, 4)
    if n < 0 or not has(&r, n):
        return 0                    # null records, or malformed
    out.records_at = r.pos
    out.records_size = n
    r.pos += n
    # the partition's, the topic's and the body's tagged fields
    if flexible and not (no_tags(&r) and no_tags(&r) and no_tags(&r)):
        return 0
    if r.pos != r.end:
        return 0
    out.version = <int32_t>version
    out.correlation_id = <int32_t>correlation_id
    out.acks = <int32_t>acks
    return 1


def read_produce(payload):
    """(api_version, correlation_id, acks, [(topic name, [(partition index,
    records)])]) of a Produce request frame (header + body, no size
    prefix) of the common kind (module docstring), records as memoryview
    slices of ``payload``; None for any other frame."""
    cdef Py_buffer view
    cdef Reader r
    cdef int64_t version, correlation_id, n, acks, topics, partitions, t, i, index
    cdef bint flexible
    cdef list topic_data, partition_data
    cdef str name
    if PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE) != 0:
        return None
    try:
        r.p = <const uint8_t*>view.buf
        r.pos = 0
        r.end = view.len
        topics = read_head(&r, &version, &correlation_id, &acks)
        if topics == NOT_TAKEN:
            return None
        flexible = version >= FIRST_FLEXIBLE
        mv = memoryview(payload)
        topic_data = []
        for t in range(topics):
            n = read_length(&r, flexible, 2)
            if n < 0 or n > MAX_STRING_BYTES or not has(&r, n):
                return None
            try:
                name = PyUnicode_DecodeUTF8(<const char*>(r.p + r.pos), n, NULL)
            except UnicodeDecodeError:
                return None
            r.pos += n
            partitions = read_length(&r, flexible, 4)
            if partitions < 0 or partitions > r.end - r.pos:
                return None
            partition_data = []
            for i in range(partitions):
                if not has(&r, 4):
                    return None
                index = read_int(&r, 4)
                n = read_length(&r, flexible, 4)
                if n < 0 or not has(&r, n):
                    return None         # null records, or malformed
                partition_data.append((index, mv[r.pos:r.pos + n]))
                r.pos += n
                if flexible and not no_tags(&r):
                    return None
            if flexible and not no_tags(&r):
                return None
            topic_data.append((name, partition_data))
        if flexible and not no_tags(&r):
            return None
        if r.pos != r.end:
            return None
        return (version, correlation_id, acks, topic_data)
    finally:
        PyBuffer_Release(&view)


cdef Py_ssize_t read_produce_rows(const uint8_t* p, Py_ssize_t size, ProduceHead* head,
                                  ProduceRow* rows, Py_ssize_t room) noexcept:
    """``read_produce`` of a request of 1..``room`` partitions, each topic
    with at least one, into ``head`` and ``rows`` (positions in ``p``, no
    Python object): the number of rows; MORE_ROWS for such a request of
    more, 0 for any other frame, ``read_produce``'s to read or refuse."""
    cdef Reader r
    cdef int64_t version, correlation_id, acks, topics, partitions, n, t, i
    cdef Py_ssize_t count = 0, name_at
    cdef bint flexible
    r.p = p
    r.pos = 0
    r.end = size
    topics = read_head(&r, &version, &correlation_id, &acks)
    if topics == NOT_TAKEN or topics < 1:
        return 0
    flexible = version >= FIRST_FLEXIBLE
    for t in range(topics):
        n = read_length(&r, flexible, 2)
        if n < 0 or n > MAX_STRING_BYTES or not has(&r, n):
            return 0
        name_at = r.pos
        r.pos += n
        partitions = read_length(&r, flexible, 4)
        if partitions < 1 or partitions > r.end - r.pos:
            return 0
        if partitions > room - count:
            return MORE_ROWS
        for i in range(partitions):
            if not has(&r, 4):
                return 0
            rows[count].topic = <int32_t>t
            rows[count].name_at = name_at
            rows[count].name_size = n
            rows[count].index = <int32_t>read_int(&r, 4)
            rows[count].records_size = read_length(&r, flexible, 4)
            if rows[count].records_size < 0 or not has(&r, rows[count].records_size):
                return 0                # null records, or malformed
            rows[count].records_at = r.pos
            r.pos += rows[count].records_size
            count += 1
            if flexible and not no_tags(&r):
                return 0
        if flexible and not no_tags(&r):
            return 0
    if flexible and not no_tags(&r):
        return 0
    if r.pos != r.end:
        return 0
    head.version = <int32_t>version
    head.correlation_id = <int32_t>correlation_id
    head.acks = <int32_t>acks
    return count


cdef inline char* put_int(char* at, int64_t v, int size) noexcept:
    cdef int k
    for k in range(size):
        at[k] = <char>(<uint64_t>v >> (8 * (size - 1 - k)))
    return at + size


cdef inline char* put_length(char* at, Py_ssize_t n, bint flexible, int size) noexcept:
    """A length or count (n >= 0, < 2**31; room reserved): a varint of n + 1 when flexible."""
    cdef uint64_t v
    if not flexible:
        return put_int(at, n, size)
    v = n + 1
    while v >= 0x80:
        at[0] = <char>((v & 0x7F) | 0x80)
        at += 1
        v >>= 7
    at[0] = <char>v
    return at + 1


cdef inline char* put_partition(char* at, int version, int64_t index, int64_t base_offset,
                               int64_t log_append_time, int64_t log_start_offset) noexcept:
    """One appended partition's answer (room reserved: PARTITION_BYTES)."""
    cdef bint flexible = version >= FIRST_FLEXIBLE
    at = put_int(at, index, 4)
    at = put_int(at, 0, 2)                      # error_code
    at = put_int(at, base_offset, 8)
    at = put_int(at, log_append_time, 8)
    if version >= 5:
        at = put_int(at, log_start_offset, 8)
    if version >= 8:
        at = put_length(at, 0, flexible, 4)     # record_errors: none
        at = put_length(at, -1, flexible, 2)    # error_message: null
    if flexible:
        at[0] = 0
        at += 1
    return at


cdef inline char* put_answer_head(char* start, int correlation_id, bint flexible) noexcept:
    # after the frame's size prefix: the response header (v1's tags when flexible)
    cdef char* at = put_int(start + 4, correlation_id, 4)
    if flexible:
        at[0] = 0
        at += 1
    return at


cdef inline char* put_answer_tail(char* start, char* at, bint flexible) noexcept:
    # throttle_time_ms and the body's tags, then the size prefix at ``start``
    at = put_int(at, 0, 4)
    if flexible:
        at[0] = 0
        at += 1
    put_int(start, (at - start) - 4, 4)
    return at


cdef char* write_one_answer(char* start, int version, int correlation_id, const char* name,
                            Py_ssize_t name_size, int64_t index, int64_t base_offset,
                            int64_t log_append_time, int64_t log_start_offset) noexcept:
    """``write_produce_answer``'s frame of one topic of one partition, at
    ``start`` (room reserved: ONE_ANSWER_BYTES + name_size; version and
    name size checked by the caller); the end of what it wrote."""
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef char* at = put_answer_head(start, correlation_id, flexible)
    at = put_length(at, 1, flexible, 4)
    at = put_length(at, name_size, flexible, 2)
    memcpy(at, name, name_size)
    at += name_size
    at = put_length(at, 1, flexible, 4)
    at = put_partition(at, version, index, base_offset, log_append_time, log_start_offset)
    if flexible:
        at[0] = 0                       # the topic's tags
        at += 1
    return put_answer_tail(start, at, flexible)


cdef Py_ssize_t rows_answer_bytes(ProduceRow* rows, Py_ssize_t n) noexcept:
    """Room for ``write_rows_answer``'s frame of ``n`` rows."""
    cdef Py_ssize_t size = 4 + 4 + 1 + 5 + 4 + 1 + PARTITION_BYTES * n
    cdef Py_ssize_t j
    for j in range(n):
        if j == 0 or rows[j].topic != rows[j - 1].topic:
            size += 5 + rows[j].name_size + 5 + 1
    return size


cdef char* write_rows_answer(char* start, int version, int correlation_id, const char* p,
                             ProduceRow* rows, const int64_t* offsets, Py_ssize_t n) noexcept:
    """``write_produce_answer``'s frame of ``read_produce_rows``'s request
    whose every partition was appended -- ``offsets``: base offset, log
    append time and log start offset of each row -- at ``start`` (room:
    ``rows_answer_bytes``); the topic names are the request's bytes in
    ``p``. The end of what it wrote."""
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef char* at = put_answer_head(start, correlation_id, flexible)
    cdef Py_ssize_t j = 0, k
    at = put_length(at, rows[n - 1].topic + 1, flexible, 4)
    while j < n:
        at = put_length(at, rows[j].name_size, flexible, 2)
        memcpy(at, p + rows[j].name_at, rows[j].name_size)
        at += rows[j].name_size
        k = j
        while k < n and rows[k].topic == rows[j].topic:
            k += 1
        at = put_length(at, k - j, flexible, 4)
        while j < k:
            at = put_partition(at, version, rows[j].index, offsets[3 * j], offsets[3 * j + 1],
                               offsets[3 * j + 2])
            j += 1
        if flexible:
            at[0] = 0                   # the topic's tags
            at += 1
    return put_answer_tail(start, at, flexible)


@cython.boundscheck(False)
@cython.wraparound(False)
def write_produce_answer(int version, int correlation_id, list topics):
    """The TCP frame (size prefix, response header, body) answering a
    Produce request of ``version`` whose every partition was appended:
    ``topics`` is [(topic name, [(partition index, base offset, log append
    time, log start offset)])]. A bytearray, as encode_response_wire's."""
    cdef bint flexible = version >= FIRST_FLEXIBLE
    cdef Py_ssize_t size = 4 + 4 + 1 + 5 + 4 + 1     # prefix, header, count, throttle, tags
    cdef Py_ssize_t name_size
    cdef list parts
    cdef tuple topic, part
    cdef const char* name
    cdef char* at
    cdef char* start
    if not FIRST_VERSION <= version <= LAST_VERSION:
        raise ValueError(f"Produce v{version} is not one write_produce_answer writes")
    for topic in topics:
        if PyTuple_GET_SIZE(topic) != 2:
            raise ValueError("a topic is (name, partitions)")
        PyUnicode_AsUTF8AndSize(topic[0], &name_size)
        if name_size > MAX_STRING_BYTES:
            raise ValueError("a topic name over 32767 bytes")
        size += 5 + name_size + 5 + 1 + PARTITION_BYTES * PyList_GET_SIZE(<list>topic[1])
    out = PyByteArray_FromStringAndSize(NULL, size)
    start = PyByteArray_AS_STRING(out)
    at = put_answer_head(start, correlation_id, flexible)
    at = put_length(at, len(topics), flexible, 4)
    for topic in topics:
        name = PyUnicode_AsUTF8AndSize(topic[0], &name_size)
        at = put_length(at, name_size, flexible, 2)
        memcpy(at, name, name_size)
        at += name_size
        parts = <list>topic[1]
        at = put_length(at, PyList_GET_SIZE(parts), flexible, 4)
        for part in parts:
            if PyTuple_GET_SIZE(part) != 4:
                raise ValueError("a partition is (index, base offset, append time, log start)")
            at = put_partition(at, version, <int>part[0], <int64_t>part[1], <int64_t>part[2],
                               <int64_t>part[3])
        if flexible:
            at[0] = 0                   # the topic's tags
            at += 1
    at = put_answer_tail(start, at, flexible)
    del out[at - start:]
    return out
