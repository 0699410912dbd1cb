# cython: language_level=3
"""A plain Kafka connection's whole wake-up in one call, for the worker's
Kafka listener (kafkalite/server/network/kafka_listener.py, issue 72).

librdkafka at 100 partitions sends one Produce request per message, and
each one wakes the worker: the read, the frame split, the one-pass
Produce path and the write of the answer. The Produce path itself was
already one C call (produce_frames.pyx); the listener's Python around it
-- ``_read`` (``recv_into``, the read buffer grown through a memoryview),
``_process`` (its checks, ``_produce_frames``, the buffer trimmed),
``_flush`` / ``write_gathered`` (a list of the answers, ``sendmsg``) and
``_update_interest`` -- cost as much again. ``KafkaWake.serve`` does the
same steps for a readable connection in one call, and gives the
connection back to those Python steps at the first thing it does not take,
so what goes on the wire is byte for byte what they would have sent.

Contract: the listener calls ``serve`` for a connection reported readable
(not writable), with ``frames`` the one-pass Produce path it may use now
(``KafkaListener._frames``: no authorizer, no client quota). ``serve``
first checks the connection may take this way: not TLS, no SASL login or
raw SASL token pending, not muted (closed, closing, throttled), no request
waiting for its answer, nothing queued to write, and polled for reading
only (``interest`` POLLIN); else ``NOT_TAKEN`` and nothing is done. Then:
one ``recv`` of at most ``chunk`` bytes onto the read buffer (``rbuf``);
``frames.serve`` over it (produce_frames.pyx: the complete Produce frames
at its head answered, their answers appended to ``out``); and, when what
is left is nothing or the start of a frame within bounds, the answers
written in one ``sendmsg`` (at most ``GATHERED_WRITES``, as
``KafkaConnection.write_gathered``) and ``SERVED``. It returns, for the
listener to carry on exactly where its own steps would be:

- ``PEER_CLOSED``: the peer closed (a read of 0 bytes) or reset it
  (ECONNRESET, EPIPE); ``FAILED``: another error, its errno in ``error``.
- ``HANDED``: the one-pass path did not answer a Produce with a frame;
  its payload and result are in ``payload`` / ``result`` (``serve``'s
  third case), to be served by the listener's own steps, which then go on
  with the rest of the buffer and write every answer queued.
- ``PROCESS``: a frame it does not take is at the head of the buffer
  (not a Produce, a bad size, a frame too short to peek at): the
  listener's steps serve the buffer and write every answer queued.
- ``WRITE_PENDING``: the socket took only part of the answers (the rest
  stays at the head of ``out``, as ``write_gathered`` leaves it) or a
  queued item is not bytes: the listener flushes and polls for writing.

Each request ``frames.serve`` answers is timed into ``stats`` (a
metrics.RequestStats) through ``KafkaWake.observe``: RequestStats.observe's
own steps on its ``by_api`` entry, in C (a Python call per request was a
twentieth of the request's instructions); an API key without an entry
yet takes RequestStats.observe itself.

Only the calling loop's thread may call it (the listener's contract).
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.errno cimport EAGAIN, EINTR, errno
from libc.stdint cimport int64_t, uint8_t, uint32_t
from libc.string cimport memcpy

cdef extern from "<sys/uio.h>":
    cdef struct iovec:
        void* iov_base
        size_t iov_len

cdef extern from "<sys/socket.h>":
    cdef struct msghdr:
        void* msg_name
        unsigned int msg_namelen
        iovec* msg_iov
        size_t msg_iovlen
        void* msg_control
        size_t msg_controllen
        int msg_flags
    ssize_t recv(int fd, void* buf, size_t n, int flags) nogil
    ssize_t sendmsg(int fd, const msghdr* msg, int flags) nogil
    enum: MSG_NOSIGNAL

cdef enum:
    SIZE_BYTES = 4              # a frame's size prefix
    GATHERED_WRITES = 64        # answers a sendmsg takes at most (kafka_connection.py)
    POLLIN = 1                  # ZeroMQ's event bit, the listener's interest
    # (EWOULDBLOCK is EAGAIN on Linux)
    MAX_BUCKETS = 32            # latency histogram bounds (metrics.LATENCY_BUCKETS_MS: 15)
    ECONNRESET_ = 104
    EPIPE_ = 32

# what ``serve`` returns (module docstring)
NOT_TAKEN = 0
SERVED = 1
PEER_CLOSED = 2
FAILED = 3
HANDED = 4
PROCESS = 5
WRITE_PENDING = 6


cdef inline int64_t _be32(const uint8_t* p) noexcept:
    return <int>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


@cython.final
cdef class KafkaWake:
    """One listener's wake-ups of plain connections (module docstring)."""

    # what a read lands in before the read buffer (the listener's own steps
    # read into it too: one per listener, RECV_CHUNK bytes)
    cdef public bytearray scratch
    cdef Py_ssize_t chunk
    cdef int64_t max_request_bytes
    # the handed-back Produce of the last HANDED, and the errno of the last FAILED
    cdef public object payload, result
    cdef public int error
    # wake-ups served wholly here (SERVED), for the listener's tests and metrics
    cdef public int64_t served
    # the RequestStats of the wake being served, and its histogram's bounds (ms)
    cdef object stats
    cdef double bounds[MAX_BUCKETS]
    cdef Py_ssize_t nbounds

    def __cinit__(self, Py_ssize_t chunk, int64_t max_request_bytes):
        self.nbounds = -1           # read from the first stats observed into
        self.scratch = bytearray(chunk)
        self.chunk = chunk
        self.max_request_bytes = max_request_bytes
        self.served = 0
        self.error = 0

    def serve(self, conn, frames, stats):
        """One readable connection's wake-up; what is left for the
        listener (module docstring)."""
        if (conn.tls or conn.handshake_wants or conn.dispatching or conn.closed or conn.closing
                or conn.throttled_until or conn.sasl is not None or conn.sasl_raw
                or conn.waiting or conn.out or conn.interest != POLLIN):
            return NOT_TAKEN
        cdef int fd = conn.fd
        cdef bytearray rbuf = conn.rbuf
        cdef ssize_t n
        cdef char* scratch = PyByteArray_AS_STRING(self.scratch)
        with nogil:
            n = recv(fd, scratch, self.chunk, 0)
        if n < 0:
            if errno == EAGAIN or errno == EINTR:
                return SERVED if not conn.out else WRITE_PENDING
            if errno == ECONNRESET_ or errno == EPIPE_:
                return PEER_CLOSED
            self.error = errno
            return FAILED
        if n == 0:
            return PEER_CLOSED
        cdef Py_ssize_t had = PyByteArray_GET_SIZE(rbuf)
        PyByteArray_Resize(rbuf, had + n)
        memcpy(PyByteArray_AS_STRING(rbuf) + had, scratch, n)
        out = conn.out
        # as the listener's own steps serve a read: an answer given meanwhile
        # to this connection waits for the others' (kafka_listener._answered)
        conn.dispatching = True
        self.stats = stats
        try:
            consumed, payload, result = frames.serve(rbuf, out, self if stats is not None else None)
        finally:
            conn.dispatching = False
            self.stats = None
        if consumed:
            del rbuf[:consumed]
        if payload is not None:
            self.payload, self.result = payload, result
            return HANDED
        if not self._rest_is_a_frames_start(rbuf):
            return PROCESS
        return self._write(fd, out)

    def observe(self, int api_key, double seconds):
        """RequestStats.observe(api_key, seconds) on the stats of the wake
        being served (what ``frames.serve`` is given as its ``stats``)."""
        self.observe_into(self.stats, api_key, seconds)

    def observe_into(self, stats, int api_key, double seconds):
        """RequestStats.observe(api_key, seconds) on ``stats``, in C once
        the API key has its entry."""
        if self.nbounds < 0:
            bounds_ms = getattr(stats, "buckets_ms", ())
            if len(bounds_ms) > MAX_BUCKETS:
                bounds_ms = ()      # RequestStats.observe's own, every time
            for i, bound in enumerate(bounds_ms):
                self.bounds[i] = bound
            self.nbounds = len(bounds_ms)
        entry = stats.by_api.get(api_key)
        if entry is None or self.nbounds == 0:
            stats.observe(api_key, seconds)
            return
        cdef double ms = seconds * 1000.0
        # bisect_left: the first bound not below ms
        cdef Py_ssize_t lo = 0, hi = self.nbounds, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self.bounds[mid] < ms:
                lo = mid + 1
            else:
                hi = mid
        entry[0] += 1
        entry[1] += ms
        buckets = entry[2]
        buckets[lo] += 1

    cdef bint _rest_is_a_frames_start(self, bytearray rbuf):
        """Whether what is left in ``rbuf`` is nothing or the start of a
        frame within bounds: what the listener's steps would leave there."""
        cdef Py_ssize_t left = PyByteArray_GET_SIZE(rbuf)
        if left < SIZE_BYTES:
            return True
        cdef int64_t size = _be32(<const uint8_t*>PyByteArray_AS_STRING(rbuf))
        return 0 <= size <= self.max_request_bytes and left < SIZE_BYTES + size

    cdef int _write(self, int fd, out) except -1:
        """``out``'s answers in one sendmsg, as write_gathered writes them."""
        cdef iovec iov[GATHERED_WRITES]
        cdef msghdr msg
        cdef Py_ssize_t count = 0, i, total = 0
        cdef ssize_t sent
        if not out:
            self.served += 1
            return SERVED
        for item in out:
            if count == GATHERED_WRITES:
                break
            if type(item) is bytearray:
                iov[count].iov_base = PyByteArray_AS_STRING(item)
                iov[count].iov_len = PyByteArray_GET_SIZE(item)
            elif type(item) is bytes:
                iov[count].iov_base = PyBytes_AS_STRING(item)
                iov[count].iov_len = PyBytes_GET_SIZE(item)
            else:
                return WRITE_PENDING        # a file region or a view: _flush's
            total += iov[count].iov_len
            count += 1
        if count < len(out):
            return WRITE_PENDING            # more than one sendmsg's worth: _flush's loop
        msg.msg_name = NULL
        msg.msg_namelen = 0
        msg.msg_iov = iov
        msg.msg_iovlen = count
        msg.msg_control = NULL
        msg.msg_controllen = 0
        msg.msg_flags = 0
        with nogil:
            sent = sendmsg(fd, &msg, MSG_NOSIGNAL)
        if sent < 0:
            if errno == EAGAIN or errno == EINTR:
                return WRITE_PENDING
            if errno == ECONNRESET_ or errno == EPIPE_:
                return PEER_CLOSED
            self.error = errno
            return FAILED
        if sent == total:
            out.clear()
            self.served += 1
            return SERVED
        # part of it went: what went leaves the queue, the rest of the
        # first answer not wholly sent stays at its head as a view
        for i in range(count):
            if <size_t>sent < iov[i].iov_len:
                if sent:
                    out[0] = memoryview(out[0])[sent:]
                return WRITE_PENDING
            sent -= iov[i].iov_len
            out.popleft()
        return WRITE_PENDING
