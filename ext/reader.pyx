# cython: language_level=3
"""Reading RecordBatch v2: batch views, records as Python objects, and the
walk over concatenated batches.

``RecordBatch`` is a zero-copy view of one batch inside a larger buffer:
header fields read in place, ``validate()`` checks the CRC, ``records()``
decompresses and decodes (the convenience path: one Python object per
record; bulk reads go through ``decode_columns`` in columns.pyx).
``iter_batches`` walks a fetch response's concatenated batches and
``batches_extent`` finds where its complete batches end without decoding.
The byte layout is ``wire.h``; shared helpers are in ``batch.pxd``.

Who may call: any thread; objects are not shared between threads. A
``RecordBatch`` holds a buffer export on the object it reads from, so a
bytearray cannot be resized while a batch or record view of it is alive.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, INT32_MAX

from batch cimport batch_crc, decompressed_section
cimport crc32c_c as crcmod
from wire_c cimport *

from kafkalite.errors import (CorruptRecordError, UnsupportedCompressionTypeError,
                              UnsupportedForMessageFormatError)

crcmod.kl_crc32c_init()

cdef int NO_SEQUENCE = -1


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
        if length < KL_MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at position {position} has length {length}, "
                                     f"less than the {KL_MIN_BATCH_LENGTH}-byte header")
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
    def control_type(self):
        """A transaction marker's type (layout.CONTROL_ABORT or CONTROL_COMMIT);
        CONTROL_UNKNOWN for a data batch."""
        return kl_control_type(self._p, self.size_in_bytes)

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
        return batch_crc(self._p, self.size_in_bytes)

    def is_valid(self):
        """Whether the stored CRC matches the batch contents."""
        return self.crc == batch_crc(self._p, self.size_in_bytes)

    def validate(self):
        """Raise CorruptRecordError unless the CRC matches."""
        cdef uint32_t computed = batch_crc(self._p, self.size_in_bytes)
        if computed != self.crc:
            raise CorruptRecordError(
                f"batch at offset {self.base_offset} (position {self.position}) is corrupt: "
                f"stored CRC {self.crc:#010x}, computed {computed:#010x}")

    def tobytes(self):
        return PyBytes_FromStringAndSize(<const char *>self._p, self.size_in_bytes)

    def records_section(self):
        """The records section, decompressed (bytes)."""
        cdef int codec = self.compression
        if codec > KL_CODEC_MAX:
            raise UnsupportedCompressionTypeError(
                f"batch at offset {self.base_offset} uses unknown compression codec {codec}")
        return decompressed_section(self._p, self.size_in_bytes, codec)

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
        from kafkalite._ext.columns import decode_columns
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
        if length >= KL_MIN_BATCH_LENGTH and position + KL_LOG_OVERHEAD + length > n:
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
            if length < KL_MIN_BATCH_LENGTH or pos + KL_LOG_OVERHEAD + length > n:
                break
            next_offset = <int64_t>kl_be64(p + KL_OFF_BASE_OFFSET) + \
                <int32_t>kl_be32(p + KL_OFF_LAST_OFFSET_DELTA) + 1
            pos += KL_LOG_OVERHEAD + length
    finally:
        PyBuffer_Release(&view)
    return next_offset, pos
