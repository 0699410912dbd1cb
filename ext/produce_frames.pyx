# cython: language_level=3
"""The Produce requests at the head of a Kafka connection's read buffer,
split off and answered in one call, for the worker's Kafka listener
(kafkalite/server/network/kafka_listener.py, issue 72).

librdkafka at 100 partitions sends about one Produce request per message,
and the listener's Python steps around each one -- the size prefix, a copy
of the frame, a ``RequestHeader``, a slot in the connection's queue of
requests waiting for answers, the dispatcher's checks and clock reads, then
the slot filled and emptied again -- cost about as much as the append. A
request answered at once never needs its slot: when nothing read earlier
is still waiting for its answer, its answer can go straight after the
answers already queued, and the order Kafka requires (answers in request
order per connection) holds by construction. ``ProduceFrames.serve``
walks the complete frames of one read that way, each through the
one-pass Produce path (``ReplicaManager.produce_frame_at_once``), and
appends their answers to the connection's write queue, which the listener
then writes in one ``sendmsg``.

Frame (Kafka's): size int32, then size bytes: request header v1/v2 =>
api_key int16, api_version int16, correlation_id int32, ...

Contract: ``serve`` is called only while the connection has no request
waiting for an answer, the dispatcher has no authorizer and no client
quota to apply, and the connection is not on a SASL listener (the
listener checks; those need a request context, or a check of the SASL
session on each request). It takes frames from the
head of the buffer while each is complete, within ``0..max_request_bytes``,
at least 8 bytes (the header's api key, version and correlation id, so
that the listener can peek at a frame handed back), a Produce request of
a version in ``first_version..last_version``, and the
one-pass path answers it with a frame (bytes) or ``no_response`` (acks 0:
nothing queued). It stops *before* the first frame it may not take (not a
Produce, incomplete, a bad size: the listener's own steps serve or refuse
it), and *after* the first Produce the path answered otherwise (None: not
the common kind, nothing done; a response body: a refused batch; or an
exception the path raised), handing that frame and its result back so the
listener carries on from where the path left it, as it would have
without this loop. The caller deletes the bytes consumed from the buffer.
Each request answered is timed into ``stats`` (a metrics.RequestStats, or
None) as the dispatcher times the one-pass path.

``answer_one_frame`` is that path's common request -- one topic, one
partition, one batch -- in one C pass from the frame: read into a C
struct (``produce_wire.read_one_produce``), checked, appended where it is
in the frame (``leader_append.append_batch``) and answered into one
bytearray (``produce_wire.write_one_answer``). When the answer given is
``produce_at_once.answer_frame`` bound to a replica manager (it says so
with its ``one_pass`` attribute), ``serve`` calls that pass itself,
without the Python function around it; any other answer (a test's
wrapper) is called as it is. Reading, checking and answering in Python
around the append had been 14,800 instructions a request, and the Python
function and the objects between the C steps 7,000 after that
(callgrind, one-record 1 KB requests to 100 partitions;
docs/performance.md).
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize, \
    PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL

from wire_c cimport KL_ATTR_TRANSACTIONAL, KL_OFF_ATTRIBUTES, KL_OFF_RECORDS_COUNT

from kafkalite._ext.leader_append cimport Appended, append_batch
from kafkalite._ext.log_state cimport PartitionState
from kafkalite._ext.produce_wire cimport (MAX_ROWS, MORE_ROWS, ONE_ANSWER_BYTES, OneProduce, ProduceHead,
                                         ProduceRow, read_one_produce, read_produce_rows,
                                         rows_answer_bytes, write_one_answer, write_rows_answer)
from kafkalite.errors import KafkaError

cdef enum:
    PRODUCE = 0
    STACK_ROWS = 128        # a request of more partitions reads into rows on the heap
    SIZE_BYTES = 4          # the frame's size prefix
    # api_key int16, api_version int16, correlation_id int32: what the
    # listener peeks of a frame handed back (peek_request_header)
    PEEKED_BYTES = 8


cdef inline double _monotonic() noexcept:
    # time.perf_counter's clock on Linux, without a Python call
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + ts.tv_nsec * 1e-9


cdef inline int64_t _be32(const uint8_t* p) noexcept:
    return <int>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


@cython.final
cdef class ProduceFrames:
    """The one-pass Produce path (``answer``: payload -> the answer's
    frame, a response body, ``no_response`` or None) applied to a read
    buffer's frames (module docstring)."""

    cdef object answer
    cdef object no_response
    # when ``answer`` is produce_at_once.answer_frame bound to a replica
    # manager (its ``one_pass`` names its two Python paths): that manager
    # and those paths, for ``_answer_one_frame`` called without the Python
    # function around it
    cdef object rm, slow, general, rows_slowly
    cdef int64_t first_version, last_version, max_request_bytes
    # requests answered here, for the listener's tests and metrics
    cdef public int64_t served

    def __init__(self, answer, no_response, int first_version, int last_version,
                 int64_t max_request_bytes):
        self.answer = answer
        self.no_response = no_response
        self.first_version = first_version
        self.last_version = last_version
        self.max_request_bytes = max_request_bytes
        self.served = 0
        one_pass = getattr(getattr(answer, "__func__", None), "one_pass", None)
        if one_pass is not None:
            self.rm = answer.__self__
            self.slow, self.general = one_pass[0], one_pass[1]
            self.rows_slowly = one_pass[2] if len(one_pass) > 2 else None

    def serve(self, bytearray rbuf not None, out, stats):
        """(bytes consumed, payload, result): the frames at the head of
        ``rbuf`` answered (their answers appended to ``out``), and the
        Produce frame the path did not answer with a frame -- its payload
        (a writable copy) and the path's result or exception -- or (n,
        None, None) when it stopped before a frame it may not take."""
        cdef Py_ssize_t pos = 0, end
        cdef const uint8_t* p
        cdef int64_t size, api_key, version
        cdef bytearray payload
        cdef double started
        cdef object result
        append = out.append
        no_response = self.no_response
        while True:
            # the buffer is re-read each time: the path may run code that
            # grows nothing here, but the pointer is cheap to take again
            p = <const uint8_t*>PyByteArray_AS_STRING(rbuf)
            end = PyByteArray_GET_SIZE(rbuf)
            if end - pos < SIZE_BYTES + PEEKED_BYTES:
                return pos, None, None
            size = _be32(p + pos)
            if size < PEEKED_BYTES or size > self.max_request_bytes \
                    or end - pos - SIZE_BYTES < size:
                return pos, None, None
            api_key = <short>((p[pos + 4] << 8) | p[pos + 5])
            version = <short>((p[pos + 6] << 8) | p[pos + 7])
            if api_key != PRODUCE or not self.first_version <= version <= self.last_version:
                return pos, None, None
            # a writable copy: the log patches the batch's header in place
            payload = PyByteArray_FromStringAndSize(
                <const char*>(p + pos + SIZE_BYTES), size)
            pos += SIZE_BYTES + size
            started = _monotonic()
            try:
                if self.rm is not None:
                    result = _answer_one_frame(self.rm, payload, no_response, self.slow,
                                               self.general, self.rows_slowly)
                else:
                    result = self.answer(payload)
            except Exception as exc:
                return pos, payload, exc
            if result is None:
                return pos, payload, None
            if stats is not None:
                stats.observe(PRODUCE, _monotonic() - started)
            if result is no_response:
                self.served += 1
                continue
            if type(result) is dict:
                return pos, payload, result
            append(result)
            self.served += 1


cdef class _TopicName:
    """The str of the last topic name read (a frame's UTF-8 bytes): the
    partitions dict is keyed by str, and a connection's requests name the
    same few topics, so the name is decoded (and hashed) again only when
    it changes."""
    cdef str name
    cdef const char* utf8        # the str's own UTF-8, kept with it
    cdef Py_ssize_t size

    cdef str of(self, const char* at, Py_ssize_t size):
        """The str of ``size`` bytes at ``at``; None when they are not UTF-8."""
        cdef str name
        if self.name is not None and size == self.size and memcmp(at, self.utf8, size) == 0:
            return self.name
        try:
            name = PyUnicode_DecodeUTF8(at, size, NULL)
        except UnicodeDecodeError:
            return None
        self.utf8 = PyUnicode_AsUTF8AndSize(name, &self.size)
        self.name = name
        return name


cdef _TopicName _names = _TopicName()


def answer_one_frame(rm, payload, no_response, slow, general, rows_slowly=None):
    """``produce_at_once.answer_frame`` (see there) with its common request
    -- one topic of one partition, librdkafka's at many partitions -- in
    one C pass: read (``produce_wire.read_one_produce``), checked as
    ``produce_at_once.qualifying`` checks, appended (``append_batch``) and
    answered (``write_one_answer``: its frame, or ``no_response`` for acks
    0), without a Python object per field. None when it is not the common
    kind, nothing done. When ``append_batch`` does not serve the append, or
    the log refuses the batch, ``slow(rm, plan, version, correlation_id,
    acks, refusal)`` answers it (plan: qualifying's shape; refusal: the
    KafkaError, or None: to be appended through ``ReplicaManager.append``).
    With ``rows_slowly``, a request of several partitions (up to
    MAX_ROWS; the native producer's) is served in one C pass too
    (``_answer_rows``). A request of any other shape, or a frame not in a
    bytearray (whose batch the log could not patch in place), is
    ``general(rm, payload)``'s."""
    if type(payload) is not bytearray:
        return general(rm, payload)
    return _answer_one_frame(rm, payload, no_response, slow, general, rows_slowly)


cdef list _plan(name, int32_t index, part, bytearray payload, OneProduce* req):
    # produce_at_once.qualifying's plan of the request: its batch a writable view of the frame
    records = memoryview(payload)[req.records_at:req.records_at + req.records_size]
    return [(name, [(index, part, records)])]


cdef object _answer_one_frame(rm, bytearray payload, no_response, slow, general, rows_slowly):
    cdef OneProduce req
    cdef Appended done
    cdef const char* p = PyByteArray_AS_STRING(payload)
    cdef Py_ssize_t name_size
    cdef const char* name_utf8
    cdef char* start
    cdef char* end
    if not read_one_produce(<const uint8_t*>p, PyByteArray_GET_SIZE(payload), &req):
        if rows_slowly is not None:
            return _answer_rows(rm, payload, no_response, general, rows_slowly)
        return general(rm, payload)
    cdef int acks = req.acks
    if acks != 1 and acks != 0 and acks != -1:
        return None
    name = _names.of(p + req.name_at, req.name_size)
    if name is None:
        return None             # not UTF-8: the generic decoder refuses it
    cdef dict partitions = rm.partitions
    found = partitions.get((name, req.index))
    if found is None or not isinstance(found, PartitionState):
        return None
    cdef PartitionState part = <PartitionState>found
    # qualifying's checks, one partition
    if (part.leader_id != part.broker_id
            or req.records_size < KL_OFF_RECORDS_COUNT
            or (<const uint8_t*>p)[req.records_at + KL_OFF_ATTRIBUTES + 1] & KL_ATTR_TRANSACTIONAL):
        return None
    if acks == -1 and (len(part.isr) != 1 or part.pending_isr is not None
                       or (<object>part).under_min_isr):
        return None
    # the frame's batch appended where it is: the log patches its header in place
    try:
        appended = append_batch(rm, part, payload, req.records_at, req.records_size,
                                <unsigned char*>p + req.records_at, &done)
    except KafkaError as exc:
        return slow(rm, _plan(name, req.index, part, payload, &req), req.version,
                    req.correlation_id, acks, exc)
    if not appended:
        return slow(rm, _plan(name, req.index, part, payload, &req), req.version,
                    req.correlation_id, acks, None)
    if not acks:
        return no_response
    name_utf8 = PyUnicode_AsUTF8AndSize(name, &name_size)
    out = PyByteArray_FromStringAndSize(NULL, ONE_ANSWER_BYTES + name_size)
    start = PyByteArray_AS_STRING(out)
    end = write_one_answer(start, req.version, req.correlation_id, name_utf8, name_size,
                           req.index, done.base_offset, done.log_append_time,
                           done.log_start_offset)
    PyByteArray_Resize(out, end - start)
    return out


cdef object _answer_rows(rm, bytearray payload, no_response, general, rows_slowly):
    # answer_one_frame's request of several partitions: read into rows
    # (produce_wire.read_produce_rows), every partition checked as
    # produce_at_once.qualifying checks before any is appended (else None:
    # nothing done, the generic path's), each batch appended where it is in
    # the frame (append_batch) and the answer written from the rows. Where
    # append_batch does not serve a partition's append or the log refuses
    # it, ``rows_slowly(rm, version, correlation_id, acks, rows, refusal)``
    # answers the request from there on (rows: [(topic ordinal, name,
    # index, Partition, records view, answer or None)], the first without
    # an answer the one append_batch left; refusal: its KafkaError or None).
    # room for the common request on the stack; a bigger one's on the heap
    cdef ProduceRow few[STACK_ROWS]
    cdef int64_t few_offsets[3 * STACK_ROWS]
    cdef ProduceHead head
    cdef const char* p = PyByteArray_AS_STRING(payload)
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(payload)
    cdef Py_ssize_t n = read_produce_rows(<const uint8_t*>p, size, &head, few, STACK_ROWS)
    if n != MORE_ROWS:
        return _answer_rows_in(rm, payload, no_response, general, rows_slowly, &head, few,
                               few_offsets, n)
    cdef ProduceRow* rows = <ProduceRow*>PyMem_Malloc(
        MAX_ROWS * (sizeof(ProduceRow) + 3 * sizeof(int64_t)))
    if rows == NULL:
        raise MemoryError()
    try:
        n = read_produce_rows(<const uint8_t*>p, size, &head, rows, MAX_ROWS)
        return _answer_rows_in(rm, payload, no_response, general, rows_slowly, &head, rows,
                               <int64_t*>(rows + MAX_ROWS), n)
    finally:
        PyMem_Free(rows)


cdef object _answer_rows_in(rm, bytearray payload, no_response, general, rows_slowly,
                            ProduceHead* h, ProduceRow* rows, int64_t* offsets, Py_ssize_t n):
    # _answer_rows of ``n`` rows read (0 or MORE_ROWS: not taken), room for their offsets
    cdef ProduceHead head = h[0]
    cdef Appended done
    cdef const char* p = PyByteArray_AS_STRING(payload)
    cdef Py_ssize_t j
    cdef int acks
    cdef PartitionState part
    cdef char* start
    cdef char* end
    if n <= 0:
        return general(rm, payload)
    acks = head.acks
    if acks != 1 and acks != 0 and acks != -1:
        return None
    cdef dict partitions = rm.partitions
    cdef list parts = []
    for j in range(n):
        name = _names.of(p + rows[j].name_at, rows[j].name_size)
        if name is None:
            return None         # not UTF-8: the generic decoder refuses it
        found = partitions.get((name, rows[j].index))
        if found is None or not isinstance(found, PartitionState):
            return None
        part = <PartitionState>found
        # qualifying's checks
        if (part.leader_id != part.broker_id
                or rows[j].records_size < KL_OFF_RECORDS_COUNT
                or (<const uint8_t*>p)[rows[j].records_at + KL_OFF_ATTRIBUTES + 1]
                & KL_ATTR_TRANSACTIONAL):
            return None
        if acks == -1 and (len(part.isr) != 1 or part.pending_isr is not None
                           or (<object>part).under_min_isr):
            return None
        parts.append((name, part))
    # what waits on the partitions is woken once the whole request is in,
    # as the full path does
    with rm.gathered_wakeups():
        for j in range(n):
            try:
                appended = append_batch(rm, parts[j][1], payload, rows[j].records_at,
                                        rows[j].records_size,
                                        <unsigned char*>p + rows[j].records_at, &done)
            except KafkaError as exc:
                return rows_slowly(rm, head.version, head.correlation_id, acks,
                                   _rows_plan(payload, rows, offsets, parts, n, j), exc)
            if not appended:
                return rows_slowly(rm, head.version, head.correlation_id, acks,
                                   _rows_plan(payload, rows, offsets, parts, n, j), None)
            offsets[3 * j] = done.base_offset
            offsets[3 * j + 1] = done.log_append_time
            offsets[3 * j + 2] = done.log_start_offset
    if not acks:
        return no_response
    out = PyByteArray_FromStringAndSize(NULL, rows_answer_bytes(rows, n))
    start = PyByteArray_AS_STRING(out)
    end = write_rows_answer(start, head.version, head.correlation_id, p, rows, offsets, n)
    PyByteArray_Resize(out, end - start)
    return out


cdef list _rows_plan(bytearray payload, ProduceRow* rows, const int64_t* offsets, list parts,
                     Py_ssize_t n, Py_ssize_t answered):
    # _answer_rows's rows for ``rows_slowly``: the first ``answered`` with their answers
    view = memoryview(payload)
    plan = []
    for j in range(n):
        name, part = parts[j]
        plan.append((rows[j].topic, name, rows[j].index, part,
                     view[rows[j].records_at:rows[j].records_at + rows[j].records_size],
                     (rows[j].index, offsets[3 * j], offsets[3 * j + 1], offsets[3 * j + 2])
                     if j < answered else None))
    return plan
