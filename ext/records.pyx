# cython: language_level=3
"""Kafka RecordBatch v2 codec: build batches, read them, decode them to columns.

The byte layout is documented field by field in ``wire.h`` (and in Kafka's
docs: https://kafka.apache.org/documentation/#recordbatch). Everything here
works on whole batches: the builder encodes records straight into one C
buffer, the bulk decoder turns any number of concatenated batches into
Arrow-layout numpy columns in one pass with no Python object per record, and
``filter_batch`` re-encodes a batch keeping a subset of its records (the log
cleaner's only re-encoding). Compression is delegated once per batch to
``kafkalite.record.compression``.

Who may call: any thread; objects are not shared between threads. A
``RecordBatch`` holds a buffer export on the object it reads from, so a
bytearray cannot be resized while a batch or record view of it is alive.
"""
cimport cython
cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_CheckBuffer, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_Check, PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t, INT32_MAX
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

cimport crc32c_c as crcmod
from wire_c cimport *

import numpy as np

from kafkalite.errors import (CorruptRecordError, InvalidRecordError,
                              UnsupportedCompressionTypeError, UnsupportedForMessageFormatError)

cnp.import_array()
crcmod.kl_crc32c_init()

# ---- constants (Kafka's names) ---------------------------------------------------

MAGIC = KL_MAGIC_V2
BATCH_HEADER_SIZE = KL_BATCH_HEADER_SIZE
LOG_OVERHEAD = KL_LOG_OVERHEAD
CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
cdef int MAX_CODEC = 4

# The smallest legal batchLength: the header after baseOffset/batchLength.
cdef int MIN_BATCH_LENGTH = KL_BATCH_HEADER_SIZE - KL_LOG_OVERHEAD

# ---- helpers -----------------------------------------------------------------------

cdef object _compression = None


cdef object _codecs():
    # Imported on first use: kafkalite.record imports this module, so a
    # top-level import of its submodule would be circular.
    global _compression
    if _compression is None:
        import kafkalite.record.compression as module
        _compression = module
    return _compression


cdef inline int64_t _now_ms() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline bytes _as_bytes(object obj):
    """A bytes object for a key/value/header (None stays None)."""
    if obj is None or PyBytes_CheckExact(obj):
        return obj
    if PyUnicode_Check(obj):
        raise TypeError("record keys, values and header values must be bytes-like, not str "
                        "(encode it first)")
    if not PyObject_CheckBuffer(obj):
        # bytes(5) would silently be five zero bytes
        raise TypeError(f"record keys, values and header values must be bytes-like, "
                        f"not {type(obj).__name__}")
    return bytes(obj)


cdef inline bytes _header_key(object key):
    if PyUnicode_Check(key):
        return PyUnicode_AsUTF8String(key)
    if PyBytes_CheckExact(key):
        return key
    if key is None:
        raise TypeError("record header keys may not be None")
    if not PyObject_CheckBuffer(key):
        raise TypeError(f"record header keys must be str or bytes-like, not {type(key).__name__}")
    return bytes(key)


cdef inline uint32_t _batch_crc(const unsigned char *batch, Py_ssize_t size) noexcept nogil:
    return crcmod.kl_crc32c(0, batch + KL_OFF_ATTRIBUTES, size - KL_OFF_ATTRIBUTES)


cdef inline void _write_header(unsigned char *b, Py_ssize_t size, int64_t base_offset,
                               int32_t leader_epoch, int16_t attributes,
                               int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                               int64_t producer_id, int16_t producer_epoch,
                               int32_t base_sequence, int32_t count) noexcept:
    kl_put_be64(b + KL_OFF_BASE_OFFSET, <uint64_t>base_offset)
    kl_put_be32(b + KL_OFF_LENGTH, <uint32_t>(size - KL_LOG_OVERHEAD))
    kl_put_be32(b + KL_OFF_LEADER_EPOCH, <uint32_t>leader_epoch)
    b[KL_OFF_MAGIC] = KL_MAGIC_V2
    kl_put_be16(b + KL_OFF_ATTRIBUTES, <uint16_t>attributes)
    kl_put_be32(b + KL_OFF_LAST_OFFSET_DELTA, <uint32_t>last_offset_delta)
    kl_put_be64(b + KL_OFF_BASE_TIMESTAMP, <uint64_t>base_ts)
    kl_put_be64(b + KL_OFF_MAX_TIMESTAMP, <uint64_t>max_ts)
    kl_put_be64(b + KL_OFF_PRODUCER_ID, <uint64_t>producer_id)
    kl_put_be16(b + KL_OFF_PRODUCER_EPOCH, <uint16_t>producer_epoch)
    kl_put_be32(b + KL_OFF_BASE_SEQUENCE, <uint32_t>base_sequence)
    kl_put_be32(b + KL_OFF_RECORDS_COUNT, <uint32_t>count)
    kl_put_be32(b + KL_OFF_CRC, _batch_crc(b, size))


cdef bytes _finish(const unsigned char *header, const unsigned char *records,
                   Py_ssize_t records_len, int codec, object level,
                   int64_t base_offset, int32_t leader_epoch, int16_t attributes,
                   int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                   int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                   int32_t count):
    """Assemble header + (compressed) records into a new bytes object."""
    cdef bytes out
    cdef unsigned char *b
    cdef Py_ssize_t size
    cdef const unsigned char *payload = records
    cdef Py_ssize_t payload_len = records_len
    cdef bytes compressed
    if codec != COMPRESSION_NONE:
        compressed = _codecs().compress(
            codec, PyBytes_FromStringAndSize(<const char *>records, records_len), level)
        payload = <const unsigned char *>PyBytes_AS_STRING(compressed)
        payload_len = PyBytes_GET_SIZE(compressed)
    size = KL_BATCH_HEADER_SIZE + payload_len
    out = PyBytes_FromStringAndSize(NULL, size)
    b = <unsigned char *>PyBytes_AS_STRING(out)
    memcpy(b + KL_BATCH_HEADER_SIZE, payload, payload_len)
    _write_header(b, size, base_offset, leader_epoch, attributes, last_offset_delta,
                  base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    return out


# ---- builder -------------------------------------------------------------------------

@cython.final
cdef class RecordBatchBuilder:
    """Accumulates records and closes them into one RecordBatch v2 (``build``).

    Mirrors Kafka's MemoryRecordsBuilder: offsets are deltas from
    ``base_offset`` (0 for a producer; the broker patches baseOffset), the
    batch's baseTimestamp is the first record's timestamp (or the delete
    horizon, when one is given), and compression is applied to the whole
    records section at ``build()``.
    """
    cdef unsigned char *_buf      # header space + uncompressed records
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef readonly int64_t base_offset
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int codec
    cdef object _level
    cdef int16_t _attributes
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef int64_t _base_ts
    cdef bint _fixed_base_ts
    cdef int64_t _max_ts
    cdef int32_t _count
    cdef int64_t _last_delta

    def __cinit__(self, compression=0, *, int64_t base_offset=0,
                  int32_t partition_leader_epoch=-1, int64_t producer_id=-1,
                  int producer_epoch=-1, int32_t base_sequence=-1,
                  bint transactional=False, bint control=False, int timestamp_type=0,
                  compression_level=None, delete_horizon_ms=None,
                  Py_ssize_t initial_capacity=4096):
        self.codec = _codecs().codec_id(compression)
        self._level = compression_level
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        if not -1 <= producer_epoch <= 32767:
            raise ValueError(f"producer_epoch {producer_epoch} is outside -1..32767 (an int16)")
        self.producer_epoch = <int16_t>producer_epoch
        self.base_sequence = base_sequence
        self._attributes = <int16_t>self.codec
        if timestamp_type == LOG_APPEND_TIME:
            self._attributes |= KL_ATTR_TIMESTAMP_TYPE
        elif timestamp_type != CREATE_TIME:
            raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), "
                             f"not {timestamp_type}")
        if transactional:
            if producer_id < 0:
                raise ValueError("a transactional batch needs a producer id")
            self._attributes |= KL_ATTR_TRANSACTIONAL
        if control:
            self._attributes |= KL_ATTR_CONTROL
        self._fixed_base_ts = delete_horizon_ms is not None
        if self._fixed_base_ts:
            self._base_ts = delete_horizon_ms
            self._attributes |= KL_ATTR_DELETE_HORIZON
        if initial_capacity < KL_BATCH_HEADER_SIZE + 64:
            initial_capacity = KL_BATCH_HEADER_SIZE + 64
        self._buf = <unsigned char *>malloc(initial_capacity)
        if self._buf == NULL:
            raise MemoryError()
        self._cap = initial_capacity
        self.reset()

    def __dealloc__(self):
        free(self._buf)

    def reset(self):
        """Forget the records appended so far; settings are kept."""
        self._len = KL_BATCH_HEADER_SIZE
        self._count = 0
        self._last_delta = -1
        self._max_ts = -1
        if not self._fixed_base_ts:
            self._base_ts = -1

    @property
    def record_count(self):
        return self._count

    @property
    def size_in_bytes(self):
        """Bytes of the batch so far, before compression."""
        return self._len

    @property
    def attributes(self):
        return self._attributes

    @property
    def last_offset_delta(self):
        return self._last_delta

    cdef int _reserve(self, Py_ssize_t extra) except -1:
        cdef Py_ssize_t need = self._len + extra
        cdef Py_ssize_t cap = self._cap
        cdef unsigned char *p
        if need <= cap:
            return 0
        while cap < need:
            cap *= 2
        p = <unsigned char *>realloc(self._buf, cap)
        if p == NULL:
            raise MemoryError()
        self._buf = p
        self._cap = cap
        return 0

    cdef int _append(self, int64_t offset_delta, object timestamp, object key, object value,
                     object headers) except -1:
        cdef int64_t ts
        cdef int64_t ts_delta
        cdef Py_ssize_t key_len = -1, value_len = -1, body, hk_len, hv_len
        cdef const unsigned char *key_p = NULL
        cdef const unsigned char *value_p = NULL
        cdef bytes kb = _as_bytes(key)
        cdef bytes vb = _as_bytes(value)
        cdef list hdrs = None
        cdef bytes hk, hv
        cdef unsigned char *w
        if offset_delta <= self._last_delta:
            raise ValueError(f"offsets must increase within a batch: delta {offset_delta} "
                             f"after {self._last_delta}")
        if offset_delta > INT32_MAX:
            raise ValueError(f"offset delta {offset_delta} does not fit a batch")
        if timestamp is None:
            ts = _now_ms()
        else:
            ts = timestamp
        if kb is not None:
            key_p = <const unsigned char *>PyBytes_AS_STRING(kb)
            key_len = PyBytes_GET_SIZE(kb)
        if vb is not None:
            value_p = <const unsigned char *>PyBytes_AS_STRING(vb)
            value_len = PyBytes_GET_SIZE(vb)
        if self._count == 0 and not self._fixed_base_ts:
            self._base_ts = ts
        ts_delta = ts - self._base_ts
        body = (1 + kl_varint_size(ts_delta) + kl_varint_size(offset_delta)
                + kl_varint_size(key_len) + (key_len if key_len > 0 else 0)
                + kl_varint_size(value_len) + (value_len if value_len > 0 else 0))
        if headers:
            hdrs = []
            for h in headers:
                hk = _header_key(h[0])
                hv = _as_bytes(h[1])
                hdrs.append((hk, hv))
                hk_len = PyBytes_GET_SIZE(hk)
                hv_len = -1 if hv is None else PyBytes_GET_SIZE(hv)
                body += (kl_varint_size(hk_len) + hk_len
                         + kl_varint_size(hv_len) + (hv_len if hv_len > 0 else 0))
            body += kl_varint_size(len(hdrs))
        else:
            body += 1
        self._reserve(kl_varint_size(body) + body)
        w = self._buf + self._len
        w = kl_write_varint(w, body)
        w[0] = 0
        w += 1
        w = kl_write_varint(w, ts_delta)
        w = kl_write_varint(w, offset_delta)
        w = kl_write_varint(w, key_len)
        if key_len > 0:
            memcpy(w, key_p, key_len)
            w += key_len
        w = kl_write_varint(w, value_len)
        if value_len > 0:
            memcpy(w, value_p, value_len)
            w += value_len
        if hdrs is None:
            w[0] = 0
            w += 1
        else:
            w = kl_write_varint(w, len(hdrs))
            for hk, hv in hdrs:
                hk_len = PyBytes_GET_SIZE(hk)
                w = kl_write_varint(w, hk_len)
                memcpy(w, PyBytes_AS_STRING(hk), hk_len)
                w += hk_len
                if hv is None:
                    w = kl_write_varint(w, -1)
                else:
                    hv_len = PyBytes_GET_SIZE(hv)
                    w = kl_write_varint(w, hv_len)
                    memcpy(w, PyBytes_AS_STRING(hv), hv_len)
                    w += hv_len
        self._len = w - self._buf
        if ts > self._max_ts or self._count == 0:
            self._max_ts = ts
        self._count += 1
        self._last_delta = offset_delta
        return 0

    def append(self, timestamp, key, value, headers=None):
        """Add a record at the next offset; returns its offset delta.

        ``timestamp`` is epoch milliseconds (None: now); ``key``/``value`` are
        bytes-like or None; ``headers`` a sequence of ``(str, bytes | None)``.
        """
        self._append(self._last_delta + 1, timestamp, key, value, headers)
        return self._last_delta

    def append_with_offset(self, int64_t offset, timestamp, key, value, headers=None):
        """Add a record at an absolute offset (greater than the previous one)."""
        self._append(offset - self.base_offset, timestamp, key, value, headers)
        return self._last_delta

    def append_values(self, values, keys=None, timestamp=None, indices=None,
                      Py_ssize_t max_bytes=-1):
        """Add one record per value (keys, when given, pair up with values);
        every record gets ``timestamp`` (None: now). With ``indices`` (an
        integer array), only ``values[i]`` (and ``keys[i]``) for those i, in
        that order. With ``max_bytes`` > 0, stops once the batch holds that
        many bytes (it takes at least one record), so that a caller can cut
        batches by size. Returns the count added."""
        cdef Py_ssize_t i, j, n = len(values)
        cdef int64_t ts = _now_ms() if timestamp is None else timestamp
        cdef const int64_t[::1] idx
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if indices is None:
            for i in range(n):
                self._append(self._last_delta + 1, ts, None if keys is None else keys[i],
                             values[i], None)
                if 0 < max_bytes <= self._len:
                    return i + 1
            return n
        idx = np.ascontiguousarray(indices, dtype=np.int64)
        for j in range(idx.shape[0]):
            i = idx[j]
            if i < 0 or i >= n:
                raise IndexError(f"index {i} is outside the {n} values")
            self._append(self._last_delta + 1, ts, None if keys is None else keys[i],
                         values[i], None)
            if 0 < max_bytes <= self._len:
                return j + 1
        return idx.shape[0]

    def build(self, last_offset_delta=None):
        """Close the records into batch bytes (the builder can be reset and reused).

        ``last_offset_delta`` overrides the header field; the cleaner keeps a
        batch's original value when it drops trailing records, as Kafka does.
        """
        cdef int32_t lod
        if self._count == 0:
            raise InvalidRecordError("a record batch must hold at least one record")
        lod = self._last_delta if last_offset_delta is None else last_offset_delta
        if lod < self._last_delta:
            raise ValueError("last_offset_delta cannot be below the last record's delta")
        if self.codec == COMPRESSION_NONE:
            _write_header(self._buf, self._len, self.base_offset, self.partition_leader_epoch,
                          self._attributes, lod, self._base_ts, self._max_ts, self.producer_id,
                          self.producer_epoch, self.base_sequence, self._count)
            return PyBytes_FromStringAndSize(<const char *>self._buf, self._len)
        return _finish(self._buf, self._buf + KL_BATCH_HEADER_SIZE,
                       self._len - KL_BATCH_HEADER_SIZE, self.codec, self._level,
                       self.base_offset, self.partition_leader_epoch, self._attributes, lod,
                       self._base_ts, self._max_ts, self.producer_id, self.producer_epoch,
                       self.base_sequence, self._count)


def build_control_batch(bint commit, int64_t producer_id, int producer_epoch,
                        int32_t coordinator_epoch, timestamp=None, int64_t base_offset=0,
                        int32_t partition_leader_epoch=-1):
    """A transaction marker: a control batch with one COMMIT (1) or ABORT (0) record.

    Control record key: version int16 (0), type int16; value: version int16
    (0), coordinatorEpoch int32.
    """
    cdef bytes key = bytes([0, 0, 0, 1 if commit else 0])
    cdef bytes value = bytes([0, 0]) + (coordinator_epoch & 0xFFFFFFFF).to_bytes(4, "big")
    builder = RecordBatchBuilder(0, base_offset=base_offset,
                                 partition_leader_epoch=partition_leader_epoch,
                                 producer_id=producer_id, producer_epoch=producer_epoch,
                                 transactional=True, control=True)
    builder.append(timestamp, key, value)
    return builder.build()


# ---- reading ---------------------------------------------------------------------------

@cython.final
@cython.freelist(64)
cdef class Record:
    """One record as Python objects (the convenience path; see decode_columns)."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly int timestamp_type
    cdef readonly object key
    cdef readonly object value
    cdef readonly list headers

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, "
                f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp
                and self.timestamp_type == o.timestamp_type and self.key == o.key
                and self.value == o.value and self.headers == o.headers)

    def __hash__(self):
        return hash((self.offset, self.timestamp, self.key, self.value))


cdef list _decode_headers(const unsigned char *p, const unsigned char *end, int64_t count):
    cdef list out = []
    cdef int64_t n = 0
    cdef object hk, hv
    cdef int64_t i
    for i in range(count):
        p = kl_read_varint(p, end, &n)
        hk = PyUnicode_DecodeUTF8(<const char *>p, n, "replace")
        p += n
        p = kl_read_varint(p, end, &n)
        if n < 0:
            hv = None
        else:
            hv = PyBytes_FromStringAndSize(<const char *>p, n)
            p += n
        out.append((hk, hv))
    return out


@cython.final
cdef class RecordBatch:
    """A read-only view of one RecordBatch v2 inside a larger buffer.

    Construction checks that the whole batch is present and that its magic is
    2; ``validate()`` checks the CRC; ``records()`` and ``to_columns()``
    decompress and decode.
    """
    cdef object _owner
    cdef Py_buffer _view
    cdef bint _has_view
    cdef const unsigned char *_p
    cdef readonly Py_ssize_t position
    cdef readonly Py_ssize_t size_in_bytes

    def __cinit__(self, data, Py_ssize_t position=0):
        cdef int64_t length
        PyObject_GetBuffer(data, &self._view, PyBUF_SIMPLE)
        self._has_view = True
        self._owner = data
        if position < 0 or position + KL_LOG_OVERHEAD > self._view.len:
            raise CorruptRecordError(f"no batch header at position {position} "
                                     f"(buffer holds {self._view.len} bytes)")
        self._p = <const unsigned char *>self._view.buf + position
        self.position = position
        length = <int32_t>kl_be32(self._p + KL_OFF_LENGTH)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at position {position} has length {length}, "
                                     f"less than the {MIN_BATCH_LENGTH}-byte header")
        if position + KL_LOG_OVERHEAD + length > self._view.len:
            raise CorruptRecordError(f"batch at position {position} is truncated: it needs "
                                     f"{KL_LOG_OVERHEAD + length} bytes, "
                                     f"{self._view.len - position} remain")
        if self._p[KL_OFF_MAGIC] != KL_MAGIC_V2:
            raise UnsupportedForMessageFormatError(
                f"batch at position {position} has magic {self._p[KL_OFF_MAGIC]}; "
                f"only RecordBatch v2 (magic 2) is supported")
        self.size_in_bytes = KL_LOG_OVERHEAD + length

    def __dealloc__(self):
        if self._has_view:
            PyBuffer_Release(&self._view)

    # header fields, in layout order
    @property
    def base_offset(self):
        return <int64_t>kl_be64(self._p + KL_OFF_BASE_OFFSET)

    @property
    def batch_length(self):
        return self.size_in_bytes - KL_LOG_OVERHEAD

    @property
    def partition_leader_epoch(self):
        return <int32_t>kl_be32(self._p + KL_OFF_LEADER_EPOCH)

    @property
    def magic(self):
        return self._p[KL_OFF_MAGIC]

    @property
    def crc(self):
        return kl_be32(self._p + KL_OFF_CRC)

    @property
    def attributes(self):
        return <int16_t>kl_be16(self._p + KL_OFF_ATTRIBUTES)

    @property
    def last_offset_delta(self):
        return <int32_t>kl_be32(self._p + KL_OFF_LAST_OFFSET_DELTA)

    @property
    def base_timestamp(self):
        return <int64_t>kl_be64(self._p + KL_OFF_BASE_TIMESTAMP)

    @property
    def max_timestamp(self):
        return <int64_t>kl_be64(self._p + KL_OFF_MAX_TIMESTAMP)

    @property
    def producer_id(self):
        return <int64_t>kl_be64(self._p + KL_OFF_PRODUCER_ID)

    @property
    def producer_epoch(self):
        return <int16_t>kl_be16(self._p + KL_OFF_PRODUCER_EPOCH)

    @property
    def base_sequence(self):
        return <int32_t>kl_be32(self._p + KL_OFF_BASE_SEQUENCE)

    @property
    def record_count(self):
        return <int32_t>kl_be32(self._p + KL_OFF_RECORDS_COUNT)

    # derived
    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def compression(self):
        return self.attributes & KL_ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self):
        return 1 if self.attributes & KL_ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self):
        return bool(self.attributes & KL_ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(self.attributes & KL_ATTR_CONTROL)

    @property
    def has_delete_horizon(self):
        return bool(self.attributes & KL_ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self):
        """The compaction delete horizon, or None when the batch has none."""
        return self.base_timestamp if self.has_delete_horizon else None

    @property
    def last_sequence(self):
        cdef int64_t base = self.base_sequence
        if base == NO_SEQUENCE:
            return NO_SEQUENCE
        # sequences wrap at INT32_MAX back to 0, as in Kafka
        return (base + self.last_offset_delta) % (<int64_t>INT32_MAX + 1)

    def computed_crc(self):
        return _batch_crc(self._p, self.size_in_bytes)

    def is_valid(self):
        """Whether the stored CRC matches the batch contents."""
        return self.crc == _batch_crc(self._p, self.size_in_bytes)

    def validate(self):
        """Raise CorruptRecordError unless the CRC matches."""
        cdef uint32_t computed = _batch_crc(self._p, self.size_in_bytes)
        if computed != self.crc:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} (position {self.position}) is corrupt: "
                f"stored CRC {self.crc:#010x}, computed {computed:#010x}")

    def tobytes(self):
        return PyBytes_FromStringAndSize(<const char *>self._p, self.size_in_bytes)

    def records_section(self):
        """The records section, decompressed (bytes)."""
        cdef int codec = self.compression
        cdef bytes raw = PyBytes_FromStringAndSize(
            <const char *>self._p + KL_BATCH_HEADER_SIZE,
            self.size_in_bytes - KL_BATCH_HEADER_SIZE)
        if codec == COMPRESSION_NONE:
            return raw
        if codec > MAX_CODEC:
            raise UnsupportedCompressionTypeError(
                f"batch at offset {self.base_offset} uses unknown compression codec {codec}")
        return _codecs().decompress(codec, raw)

    def records(self):
        """All records as ``Record`` objects (control batches included)."""
        cdef bytes section = self.records_section()
        cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(section)
        cdef const unsigned char *end = p + PyBytes_GET_SIZE(section)
        cdef kl_record r
        cdef int rc
        cdef int32_t i, count = self.record_count
        cdef int64_t base_offset = self.base_offset
        cdef int64_t base_ts = self.base_timestamp
        cdef int64_t max_ts = self.max_timestamp
        cdef bint log_append = (self.attributes & KL_ATTR_TIMESTAMP_TYPE) != 0
        cdef list out = []
        cdef Record rec
        if count < 0:
            raise CorruptRecordError(f"batch at offset {base_offset} has record count {count}")
        for i in range(count):
            rc = kl_parse_record(p, end, &r)
            if rc != KL_REC_OK:
                raise CorruptRecordError(f"batch at offset {base_offset}, record {i}: "
                                         f"{kl_record_error(rc).decode()}")
            rec = Record.__new__(Record)
            rec.offset = base_offset + r.offset_delta
            rec.timestamp = max_ts if log_append else base_ts + r.timestamp_delta
            rec.timestamp_type = 1 if log_append else 0
            rec.key = None if r.key_len < 0 else PyBytes_FromStringAndSize(<const char *>r.key, r.key_len)
            rec.value = None if r.value_len < 0 else PyBytes_FromStringAndSize(<const char *>r.value, r.value_len)
            rec.headers = _decode_headers(r.headers, r.end, r.header_count) if r.header_count else []
            out.append(rec)
            p = r.end
        if p != end:
            raise CorruptRecordError(f"batch at offset {base_offset} has {end - p} bytes after "
                                     f"its {count} records")
        return out

    def __iter__(self):
        return iter(self.records())

    def to_columns(self, bint skip_control=True):
        return decode_columns(self.tobytes(), skip_control=skip_control)

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.record_count}, size={self.size_in_bytes}, "
                f"compression={self.compression}, max_timestamp={self.max_timestamp}, "
                f"producer_id={self.producer_id}, control={self.is_control})")


def iter_batches(data, Py_ssize_t position=0):
    """Yield each complete RecordBatch in ``data`` from ``position`` on.

    A trailing partial batch (a fetch cut at max_bytes) ends the iteration
    silently, as Kafka consumers expect; a malformed header raises.
    """
    cdef Py_ssize_t n = len(memoryview(data).cast("B"))
    cdef int64_t length
    cdef RecordBatch batch
    hdr = memoryview(data).cast("B")
    while position + KL_LOG_OVERHEAD <= n:
        length = int.from_bytes(hdr[position + 8:position + 12], "big", signed=True)
        if length >= MIN_BATCH_LENGTH and position + KL_LOG_OVERHEAD + length > n:
            return
        batch = RecordBatch(data, position)
        yield batch
        position += batch.size_in_bytes


def batches_extent(data):
    """(next offset, bytes) of the complete batches at the start of ``data``:
    the offset after the last complete batch (-1 if none) and where that
    batch ends. Reads headers only (a fetch response's next fetch offset)."""
    cdef Py_buffer view
    cdef const unsigned char *p
    cdef Py_ssize_t pos = 0, n
    cdef int64_t length, next_offset = -1
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        n = view.len
        while pos + KL_LOG_OVERHEAD <= n:
            p = <const unsigned char *>view.buf + pos
            length = <int32_t>kl_be32(p + KL_OFF_LENGTH)
            if length < MIN_BATCH_LENGTH or pos + KL_LOG_OVERHEAD + length > n:
                break
            next_offset = <int64_t>kl_be64(p + KL_OFF_BASE_OFFSET) + \
                <int32_t>kl_be32(p + KL_OFF_LAST_OFFSET_DELTA) + 1
            pos += KL_LOG_OVERHEAD + length
    finally:
        PyBuffer_Release(&view)
    return next_offset, pos


# ---- bulk decode to columns ----------------------------------------------------------

ctypedef struct BatchDesc:
    const unsigned char *records
    Py_ssize_t records_len
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts
    int32_t count
    int16_t attributes
    bint skipped


class RecordColumns:
    """Records of many batches as Arrow-layout columns (numpy arrays).

    Per record: ``offsets`` int64, ``timestamps`` int64 (epoch ms),
    ``timestamp_types`` uint8; key/value as Arrow binary columns
    (``*_offsets`` int32[n+1] into ``*_data`` uint8, ``*_valid`` bool);
    headers as an Arrow list<struct<key string, value binary>>
    (``header_offsets`` int32[n+1] into per-header key/value binary columns).
    Per batch: ``batch_base_offsets``, ``batch_last_offsets``,
    ``batch_producer_ids``, ``batch_attributes``, ``batch_base_timestamps``,
    ``batch_positions`` / ``batch_sizes`` (bytes in the input) and
    ``batch_record_starts`` (index of the batch's first record; control
    batches contribute no records when skipped). ``next_offset`` is the offset after the last
    complete batch (-1 if none) and ``bytes_consumed`` its end position.
    """

    def __len__(self):
        return len(self.offsets)

    @staticmethod
    def _binary(data, offsets, valid, i):
        return bytes(data[offsets[i]:offsets[i + 1]]) if valid[i] else None

    def key(self, i):
        return RecordColumns._binary(self.key_data, self.key_offsets, self.key_valid, i)

    def value(self, i):
        return RecordColumns._binary(self.value_data, self.value_offsets, self.value_valid, i)

    def headers(self, i):
        out = []
        for h in range(self.header_offsets[i], self.header_offsets[i + 1]):
            k = bytes(self.header_key_data[self.header_key_offsets[h]:self.header_key_offsets[h + 1]])
            out.append((k.decode("utf-8", "replace"),
                        RecordColumns._binary(self.header_value_data, self.header_value_offsets,
                                              self.header_value_valid, h)))
        return out

    def keys(self):
        return [self.key(i) for i in range(len(self))]

    def values(self):
        return [self.value(i) for i in range(len(self))]

    def to_records(self):
        """Per-record tuples (offset, timestamp, timestamp_type, key, value, headers)."""
        return [(int(self.offsets[i]), int(self.timestamps[i]), int(self.timestamp_types[i]),
                 self.key(i), self.value(i), self.headers(i)) for i in range(len(self))]


cdef inline int32_t _check_i32(Py_ssize_t v) except -1:
    if v > INT32_MAX:
        raise OverflowError("decoded column exceeds 2 GiB; decode fewer batches at once")
    return <int32_t>v


def decode_columns(data, *, bint skip_control=True, bint verify_crc=False):
    """Decode every complete batch in ``data`` into a ``RecordColumns``.

    One pass over the batch headers sizes the output (decompressing
    compressed batches once each), a second pass decodes records straight
    into the arrays. Malformed batches raise CorruptRecordError; a trailing
    partial batch is ignored (see ``bytes_consumed``).
    """
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef const unsigned char *p
    cdef const unsigned char *end
    cdef const unsigned char *hp
    cdef Py_ssize_t n, pos = 0, nb = 0, cap_b = 16, total_records = 0, total_bytes = 0
    cdef int64_t length
    cdef BatchDesc *batches = NULL
    cdef BatchDesc *bd
    cdef list keep_alive = []
    cdef int codec
    cdef object section
    cdef uint32_t stored, computed
    cdef kl_record r
    cdef int rc
    cdef Py_ssize_t i, j, ri = 0, hi = 0, kpos = 0, vpos = 0, hkpos = 0, hvpos = 0
    cdef int64_t hn
    cdef int64_t next_offset = -1
    cdef bint log_append
    cdef uint8_t ts_type
    cdef int64_t[::1] c_off
    cdef int64_t[::1] c_ts
    cdef uint8_t[::1] c_tt
    cdef int32_t[::1] c_ko
    cdef int32_t[::1] c_vo
    cdef uint8_t[::1] c_kv
    cdef uint8_t[::1] c_vv
    cdef int32_t[::1] c_ho
    cdef uint8_t[::1] c_kd
    cdef uint8_t[::1] c_vd
    cdef int32_t[::1] c_hko
    cdef int32_t[::1] c_hvo
    cdef uint8_t[::1] c_hvv
    cdef uint8_t[::1] c_hkd
    cdef uint8_t[::1] c_hvd
    cdef int64_t[::1] c_bb
    cdef int64_t[::1] c_bl
    cdef int64_t[::1] c_bp
    cdef int16_t[::1] c_ba
    cdef int64_t[::1] c_bs
    cdef int64_t[::1] c_bpos
    cdef int64_t[::1] c_bsize
    cdef int64_t[::1] c_bts
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        batches = <BatchDesc *>malloc(cap_b * sizeof(BatchDesc))
        if batches == NULL:
            raise MemoryError()
        base = <const unsigned char *>view.buf
        n = view.len
        # pass 1: batch headers
        while pos + KL_LOG_OVERHEAD <= n:
            p = base + pos
            length = <int32_t>kl_be32(p + KL_OFF_LENGTH)
            if length < MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch at position {pos} has length {length}, "
                                         f"less than the {MIN_BATCH_LENGTH}-byte header")
            if pos + KL_LOG_OVERHEAD + length > n:
                break
            if p[KL_OFF_MAGIC] != KL_MAGIC_V2:
                raise UnsupportedForMessageFormatError(
                    f"batch at position {pos} has magic {p[KL_OFF_MAGIC]}; only v2 is supported")
            if verify_crc:
                stored = kl_be32(p + KL_OFF_CRC)
                computed = _batch_crc(p, KL_LOG_OVERHEAD + length)
                if stored != computed:
                    raise CorruptRecordError(f"batch at position {pos} is corrupt: stored CRC "
                                             f"{stored:#010x}, computed {computed:#010x}")
            if nb == cap_b:
                cap_b *= 2
                bd = <BatchDesc *>realloc(batches, cap_b * sizeof(BatchDesc))
                if bd == NULL:
                    raise MemoryError()
                batches = bd
            bd = &batches[nb]
            nb += 1
            bd.base_offset = <int64_t>kl_be64(p + KL_OFF_BASE_OFFSET)
            bd.attributes = <int16_t>kl_be16(p + KL_OFF_ATTRIBUTES)
            bd.base_ts = <int64_t>kl_be64(p + KL_OFF_BASE_TIMESTAMP)
            bd.max_ts = <int64_t>kl_be64(p + KL_OFF_MAX_TIMESTAMP)
            bd.count = <int32_t>kl_be32(p + KL_OFF_RECORDS_COUNT)
            next_offset = bd.base_offset + <int32_t>kl_be32(p + KL_OFF_LAST_OFFSET_DELTA) + 1
            bd.skipped = skip_control and (bd.attributes & KL_ATTR_CONTROL) != 0
            if bd.count < 0:
                raise CorruptRecordError(f"batch at offset {bd.base_offset} has record count "
                                         f"{bd.count}")
            bd.records = p + KL_BATCH_HEADER_SIZE
            bd.records_len = KL_LOG_OVERHEAD + length - KL_BATCH_HEADER_SIZE
            codec = bd.attributes & KL_ATTR_COMPRESSION_MASK
            if not bd.skipped and codec != COMPRESSION_NONE:
                if codec > MAX_CODEC:
                    raise UnsupportedCompressionTypeError(
                        f"batch at offset {bd.base_offset} uses unknown compression codec {codec}")
                section = _codecs().decompress(
                    codec, PyBytes_FromStringAndSize(<const char *>bd.records, bd.records_len))
                keep_alive.append(section)
                bd.records = <const unsigned char *>PyBytes_AS_STRING(section)
                bd.records_len = PyBytes_GET_SIZE(section)
            if not bd.skipped:
                # Every record takes at least 7 bytes; a larger count is
                # corrupt and must not size the output arrays.
                if <int64_t>bd.count * 7 > bd.records_len:
                    raise CorruptRecordError(f"batch at offset {bd.base_offset} claims {bd.count} "
                                             f"records in {bd.records_len} bytes")
                total_records += bd.count
                total_bytes += bd.records_len
            pos += KL_LOG_OVERHEAD + length

        # The byte columns are sized by the records bytes, an upper bound;
        # numpy.empty leaves untouched pages unallocated.
        offsets = np.empty(total_records, dtype=np.int64)
        timestamps = np.empty(total_records, dtype=np.int64)
        ts_types = np.empty(total_records, dtype=np.uint8)
        key_offsets = np.empty(total_records + 1, dtype=np.int32)
        value_offsets = np.empty(total_records + 1, dtype=np.int32)
        key_valid = np.empty(total_records, dtype=np.bool_)
        value_valid = np.empty(total_records, dtype=np.bool_)
        header_offsets = np.empty(total_records + 1, dtype=np.int32)
        key_data = np.empty(total_bytes, dtype=np.uint8)
        value_data = np.empty(total_bytes, dtype=np.uint8)
        # every header costs at least 2 bytes
        hk_offsets = np.empty(total_bytes // 2 + 1, dtype=np.int32)
        hv_offsets = np.empty(total_bytes // 2 + 1, dtype=np.int32)
        hv_valid = np.empty(total_bytes // 2, dtype=np.bool_)
        hk_data = np.empty(total_bytes, dtype=np.uint8)
        hv_data = np.empty(total_bytes, dtype=np.uint8)
        b_base = np.empty(nb, dtype=np.int64)
        b_last = np.empty(nb, dtype=np.int64)
        b_pid = np.empty(nb, dtype=np.int64)
        b_attr = np.empty(nb, dtype=np.int16)
        b_start = np.empty(nb, dtype=np.int64)
        b_pos = np.empty(nb, dtype=np.int64)
        b_size = np.empty(nb, dtype=np.int64)
        b_ts = np.empty(nb, dtype=np.int64)

        c_off = offsets
        c_ts = timestamps
        c_tt = ts_types
        c_ko = key_offsets
        c_vo = value_offsets
        c_kv = key_valid.view(np.uint8)
        c_vv = value_valid.view(np.uint8)
        c_ho = header_offsets
        c_kd = key_data
        c_vd = value_data
        c_hko = hk_offsets
        c_hvo = hv_offsets
        c_hvv = hv_valid.view(np.uint8)
        c_hkd = hk_data
        c_hvd = hv_data
        c_bb = b_base
        c_bl = b_last
        c_bp = b_pid
        c_ba = b_attr
        c_bs = b_start
        c_bpos = b_pos
        c_bsize = b_size
        c_bts = b_ts

        c_ko[0] = 0
        c_vo[0] = 0
        c_ho[0] = 0
        c_hko[0] = 0
        c_hvo[0] = 0
        # pass 2: records
        pos = 0
        for i in range(nb):
            bd = &batches[i]
            hp = base + pos
            length = <int32_t>kl_be32(hp + KL_OFF_LENGTH)
            c_bpos[i] = pos
            c_bsize[i] = KL_LOG_OVERHEAD + length
            c_bts[i] = bd.base_ts
            pos += KL_LOG_OVERHEAD + length
            c_bb[i] = bd.base_offset
            c_bl[i] = bd.base_offset + <int32_t>kl_be32(hp + KL_OFF_LAST_OFFSET_DELTA)
            c_bp[i] = <int64_t>kl_be64(hp + KL_OFF_PRODUCER_ID)
            c_ba[i] = bd.attributes
            c_bs[i] = ri
            if bd.skipped:
                continue
            log_append = (bd.attributes & KL_ATTR_TIMESTAMP_TYPE) != 0
            ts_type = 1 if log_append else 0
            p = bd.records
            end = p + bd.records_len
            for j in range(bd.count):
                rc = kl_parse_record(p, end, &r)
                if rc != KL_REC_OK:
                    raise CorruptRecordError(f"batch at offset {bd.base_offset}, record {j}: "
                                             f"{kl_record_error(rc).decode()}")
                c_off[ri] = bd.base_offset + r.offset_delta
                c_ts[ri] = bd.max_ts if log_append else bd.base_ts + r.timestamp_delta
                c_tt[ri] = ts_type
                if r.key_len >= 0:
                    memcpy(&c_kd[kpos], r.key, r.key_len)
                    kpos += r.key_len
                    c_kv[ri] = 1
                else:
                    c_kv[ri] = 0
                c_ko[ri + 1] = _check_i32(kpos)
                if r.value_len >= 0:
                    memcpy(&c_vd[vpos], r.value, r.value_len)
                    vpos += r.value_len
                    c_vv[ri] = 1
                else:
                    c_vv[ri] = 0
                c_vo[ri + 1] = _check_i32(vpos)
                hp = r.headers
                for hn in range(r.header_count):
                    hp = kl_read_varint(hp, r.end, &length)
                    memcpy(&c_hkd[hkpos], hp, length)
                    hkpos += length
                    hp += length
                    c_hko[hi + 1] = _check_i32(hkpos)
                    hp = kl_read_varint(hp, r.end, &length)
                    if length >= 0:
                        memcpy(&c_hvd[hvpos], hp, length)
                        hvpos += length
                        hp += length
                        c_hvv[hi] = 1
                    else:
                        c_hvv[hi] = 0
                    c_hvo[hi + 1] = _check_i32(hvpos)
                    hi += 1
                c_ho[ri + 1] = _check_i32(hi)
                ri += 1
                p = r.end
            if p != end:
                raise CorruptRecordError(f"batch at offset {bd.base_offset} has {end - p} bytes "
                                         f"after its {bd.count} records")
    finally:
        PyBuffer_Release(&view)
        free(batches)

    cols = RecordColumns()
    cols.offsets = offsets
    cols.timestamps = timestamps
    cols.timestamp_types = ts_types
    cols.key_offsets = key_offsets
    cols.key_data = key_data[:kpos]
    cols.key_valid = key_valid
    cols.value_offsets = value_offsets
    cols.value_data = value_data[:vpos]
    cols.value_valid = value_valid
    cols.header_offsets = header_offsets
    cols.header_key_offsets = hk_offsets[:hi + 1]
    cols.header_key_data = hk_data[:hkpos]
    cols.header_value_offsets = hv_offsets[:hi + 1]
    cols.header_value_data = hv_data[:hvpos]
    cols.header_value_valid = hv_valid[:hi]
    cols.batch_base_offsets = b_base
    cols.batch_last_offsets = b_last
    cols.batch_producer_ids = b_pid
    cols.batch_attributes = b_attr
    cols.batch_record_starts = b_start
    cols.batch_positions = b_pos
    cols.batch_sizes = b_size
    cols.batch_base_timestamps = b_ts
    cols.next_offset = next_offset
    cols.bytes_consumed = pos
    return cols


# ---- re-encoding a subset (the log cleaner) --------------------------------------------

def filter_batch(batch, keep, delete_horizon_ms=None):
    """Re-encode ``batch`` keeping the records whose ``keep[i]`` is true.

    Offsets, producer id/epoch, base sequence and lastOffsetDelta are kept
    from the original, as Kafka's cleaner does, so a reloaded log restores
    the same producer state. Kept records are copied byte for byte unless
    ``delete_horizon_ms`` is given, in which case the batch's baseTimestamp
    becomes the horizon (attribute bit 6) and each record's timestamp delta
    is re-based so record timestamps do not change. Returns None when no
    record is kept.
    """
    cdef RecordBatch b = batch if isinstance(batch, RecordBatch) else RecordBatch(batch)
    cdef bytes section = b.records_section()
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(section)
    cdef const unsigned char *end = p + PyBytes_GET_SIZE(section)
    cdef const uint8_t[::1] keep_mv = np.ascontiguousarray(keep, dtype=np.uint8)
    cdef int32_t count = b.record_count
    cdef int32_t kept = 0, i
    cdef kl_record r
    cdef int rc
    cdef int16_t attributes = b.attributes
    cdef int64_t old_base_ts = b.base_timestamp
    cdef int64_t new_base_ts = old_base_ts
    cdef int64_t ts, max_ts = -1, ts_delta, body
    cdef bint rebase = delete_horizon_ms is not None
    cdef bint log_append = (attributes & KL_ATTR_TIMESTAMP_TYPE) != 0
    cdef const unsigned char *q
    cdef unsigned char *out_buf
    cdef unsigned char *w
    cdef Py_ssize_t out_cap
    cdef int64_t tmp
    if keep_mv.shape[0] != count:
        raise ValueError(f"keep mask has {keep_mv.shape[0]} entries for {count} records")
    if rebase:
        new_base_ts = delete_horizon_ms
        attributes |= KL_ATTR_DELETE_HORIZON
    # re-based deltas can grow by at most 10 bytes each (a varlong)
    out_cap = KL_BATCH_HEADER_SIZE + PyBytes_GET_SIZE(section) + (<Py_ssize_t>count) * 20 + 16
    out_buf = <unsigned char *>malloc(out_cap)
    if out_buf == NULL:
        raise MemoryError()
    try:
        w = out_buf + KL_BATCH_HEADER_SIZE
        for i in range(count):
            rc = kl_parse_record(p, end, &r)
            if rc != KL_REC_OK:
                raise CorruptRecordError(f"batch at offset {b.base_offset}, record {i}: "
                                         f"{kl_record_error(rc).decode()}")
            if keep_mv[i]:
                ts = old_base_ts + r.timestamp_delta
                if kept == 0 or ts > max_ts:
                    max_ts = ts
                if not rebase:
                    memcpy(w, r.start, r.end - r.start)
                    w += r.end - r.start
                else:
                    # length varint, attributes, timestampDelta, then the rest verbatim
                    q = kl_read_varint(r.start, r.end, &tmp)
                    q += 1
                    q = kl_read_varint(q, r.end, &tmp)
                    ts_delta = ts - new_base_ts
                    body = 1 + kl_varint_size(ts_delta) + (r.end - q)
                    w = kl_write_varint(w, body)
                    w[0] = 0
                    w += 1
                    w = kl_write_varint(w, ts_delta)
                    memcpy(w, q, r.end - q)
                    w += r.end - q
                kept += 1
            p = r.end
        if kept == 0:
            return None
        if log_append:
            max_ts = b.max_timestamp
        return _finish(out_buf, out_buf + KL_BATCH_HEADER_SIZE,
                       (w - out_buf) - KL_BATCH_HEADER_SIZE,
                       attributes & KL_ATTR_COMPRESSION_MASK, None, b.base_offset,
                       b.partition_leader_epoch, attributes, b.last_offset_delta, new_base_ts,
                       max_ts, b.producer_id, b.producer_epoch, b.base_sequence, kept)
    finally:
        free(out_buf)
