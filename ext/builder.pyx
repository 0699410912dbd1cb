# cython: language_level=3
"""Building RecordBatch v2: the producer's builder, transaction markers, and
the cleaner's re-encoding of a batch's surviving records.

``RecordBatchBuilder`` encodes records straight into one C buffer and
closes them into a batch at ``build()`` (compression applied once, to the
whole records section, by ``kafkalite.record.compression``). The byte
layout is ``wire.h``; the helpers shared with the reader and the columnar
decoder are in ``batch.pxd``.

Who may call: any thread; a builder is not shared between threads.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, INT32_MAX
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from batch cimport as_bytes, codecs, finish, header_key, now_ms, write_header
cimport crc32c_c as crcmod
from wire_c cimport *

from kafkalite._ext.reader import RecordBatch
from kafkalite.errors import CorruptRecordError, InvalidRecordError


cdef object _numpy = None


cdef object _np():
    """numpy, imported on the first call that needs it rather than with this
    module: a partition worker imports the builder for control batches and
    should not pay numpy's 50-70 ms at start-up for it."""
    global _numpy
    if _numpy is None:
        import numpy
        _numpy = numpy
    return _numpy


crcmod.kl_crc32c_init()

cdef int CREATE_TIME = 0
cdef int LOG_APPEND_TIME = 1


@cython.final
cdef class RecordBatchBuilder:
    """Accumulates records and closes them into one RecordBatch v2 (``build``).

    Mirrors Kafka's MemoryRecordsBuilder: offsets are deltas from
    ``base_offset`` (0 for a producer; the broker patches baseOffset), the
    batch's baseTimestamp is the first record's timestamp (or the delete
    horizon, when one is given), and compression is applied to the whole
    records section at ``build()``.
    """
    # attributes: builder.pxd (the producer's accumulator, accumulator.pyx, writes
    # records through _write_record directly)

    def __cinit__(self, compression=0, *, int64_t base_offset=0,
                  int32_t partition_leader_epoch=-1, int64_t producer_id=-1,
                  int producer_epoch=-1, int32_t base_sequence=-1,
                  bint transactional=False, bint control=False, int timestamp_type=0,
                  compression_level=None, delete_horizon_ms=None,
                  Py_ssize_t initial_capacity=4096):
        self.codec = codecs().codec_id(compression)
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

    def set_producer(self, int64_t producer_id, int producer_epoch, int32_t base_sequence,
                     bint transactional=False):
        """Stamp the batch with its producer (an idempotent producer assigns
        the sequence only when the batch is sent, so after the records are in)."""
        if not -1 <= producer_epoch <= 32767:
            raise ValueError(f"producer_epoch {producer_epoch} is outside -1..32767 (an int16)")
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        self.producer_id = producer_id
        self.producer_epoch = <int16_t>producer_epoch
        self.base_sequence = base_sequence
        if transactional:
            self._attributes |= KL_ATTR_TRANSACTIONAL
        else:
            self._attributes &= ~KL_ATTR_TRANSACTIONAL

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
        """A record from Python objects (the general path)."""
        cdef Py_ssize_t key_len = -1, value_len = -1
        cdef const unsigned char *key_p = NULL
        cdef const unsigned char *value_p = NULL
        cdef bytes kb = as_bytes(key)
        cdef bytes vb = as_bytes(value)
        cdef list hdrs = None
        if kb is not None:
            key_p = <const unsigned char *>PyBytes_AS_STRING(kb)
            key_len = PyBytes_GET_SIZE(kb)
        if vb is not None:
            value_p = <const unsigned char *>PyBytes_AS_STRING(vb)
            value_len = PyBytes_GET_SIZE(vb)
        if headers:
            hdrs = [(header_key(h[0]), as_bytes(h[1])) for h in headers]
        return self._write_record(offset_delta, now_ms() if timestamp is None else timestamp,
                                  key_p, key_len, value_p, value_len, hdrs)

    cdef int _write_record(self, int64_t offset_delta, int64_t ts,
                           const unsigned char *key_p, Py_ssize_t key_len,
                           const unsigned char *value_p, Py_ssize_t value_len,
                           list hdrs) except -1:
        """Encode one record (key/value length -1: null; ``hdrs``: a list of
        (bytes key, bytes value | None), or None) at the end of the buffer."""
        cdef int64_t ts_delta
        cdef Py_ssize_t body, hk_len, hv_len
        cdef bytes hk, hv
        cdef unsigned char *w
        if offset_delta <= self._last_delta:
            raise ValueError(f"offsets must increase within a batch: delta {offset_delta} "
                             f"after {self._last_delta}")
        if offset_delta > INT32_MAX:
            raise ValueError(f"offset delta {offset_delta} does not fit a batch")
        if self._count == 0 and not self._fixed_base_ts:
            self._base_ts = ts
        ts_delta = ts - self._base_ts
        body = (1 + kl_varint_size(ts_delta) + kl_varint_size(offset_delta)
                + kl_varint_size(key_len) + (key_len if key_len > 0 else 0)
                + kl_varint_size(value_len) + (value_len if value_len > 0 else 0))
        if hdrs:
            for hk, hv in hdrs:
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
        if not hdrs:
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
                      Py_ssize_t max_bytes=-1, headers=None):
        """Add one record per value (keys, when given, pair up with values).
        ``timestamp``: one for every record (None: now), or a sequence or
        int64 array of one per value (a negative one: now). ``headers``:
        None, or one header list (or None) per value. ``values`` is a
        sequence of bytes-like objects (None: a null value) or a 2-D uint8
        array, one fixed-size value per row, read in place with no Python
        object per record. With ``indices`` (an integer array), only
        ``values[i]`` (and ``keys[i]``, its timestamp and headers) for those
        i, in that order. With ``max_bytes`` > 0, stops once the batch holds
        that many bytes (it takes at least one record), so that a caller can
        cut batches by size. Returns the count added."""
        cdef Py_ssize_t i, j, n = len(values), count
        cdef int64_t now = now_ms()
        cdef int64_t ts = now
        cdef bint per_record_ts = timestamp is not None and _np().ndim(timestamp) == 1
        cdef const int64_t[::1] stamps
        cdef const int64_t[::1] idx
        cdef const uint8_t[:, ::1] rows
        cdef bint as_rows = isinstance(values, _np().ndarray) and values.ndim == 2
        cdef bytes kb
        cdef list hdrs
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if headers is not None and len(headers) != n:
            raise ValueError(f"{len(headers)} header lists for {n} values")
        if per_record_ts:
            stamps = _np().ascontiguousarray(timestamp, dtype=_np().int64)
            if stamps.shape[0] != n:
                raise ValueError(f"{stamps.shape[0]} timestamps for {n} values")
        elif timestamp is not None:
            ts = int(timestamp)
        if as_rows:
            rows = _np().ascontiguousarray(values, dtype=_np().uint8)
        if indices is not None:
            idx = _np().ascontiguousarray(indices, dtype=_np().int64)
        count = n if indices is None else idx.shape[0]
        for j in range(count):
            i = j if indices is None else idx[j]
            if i < 0 or i >= n:
                raise IndexError(f"index {i} is outside the {n} values")
            if per_record_ts:
                ts = stamps[i] if stamps[i] >= 0 else now
            if as_rows:
                kb = None if keys is None else as_bytes(keys[i])
                hdrs = None
                if headers is not None and headers[i]:
                    hdrs = [(header_key(h[0]), as_bytes(h[1])) for h in headers[i]]
                self._write_record(self._last_delta + 1, ts,
                                   NULL if kb is None else <const unsigned char *>PyBytes_AS_STRING(kb),
                                   -1 if kb is None else PyBytes_GET_SIZE(kb),
                                   &rows[i, 0], rows.shape[1], hdrs)
            else:
                self._append(self._last_delta + 1, ts, None if keys is None else keys[i],
                             values[i], None if headers is None else headers[i])
            if 0 < max_bytes <= self._len:
                return j + 1
        return count

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
        if self.codec == KL_CODEC_NONE:
            write_header(self._buf, self._len, self.base_offset, self.partition_leader_epoch,
                          self._attributes, lod, self._base_ts, self._max_ts, self.producer_id,
                          self.producer_epoch, self.base_sequence, self._count)
            return PyBytes_FromStringAndSize(<const char *>self._buf, self._len)
        return finish(self._buf + KL_BATCH_HEADER_SIZE, self._len - KL_BATCH_HEADER_SIZE,
                      self.codec, self._level, self.base_offset, self.partition_leader_epoch,
                      self._attributes, lod, self._base_ts, self._max_ts, self.producer_id,
                      self.producer_epoch, self.base_sequence, self._count)


    def build_into(self, bytearray out):
        """``build()`` into ``out`` for an uncompressed batch: a memoryview of
        its first ``size_in_bytes`` bytes. The producer's sender keeps such
        buffers and builds into them again once nothing refers to the last
        batch (writing a batch into fresh memory faults a page every 4 KiB).
        ValueError for a compressed batch, or when ``out`` is too small."""
        if self.codec != KL_CODEC_NONE:
            raise ValueError("build_into() takes uncompressed batches; use build()")
        if self._count == 0:
            raise InvalidRecordError("a record batch must hold at least one record")
        if PyByteArray_GET_SIZE(out) < self._len:
            raise ValueError(f"a buffer of {PyByteArray_GET_SIZE(out)} bytes cannot hold a batch "
                             f"of {self._len}")
        write_header(self._buf, self._len, self.base_offset, self.partition_leader_epoch,
                     self._attributes, self._last_delta, self._base_ts, self._max_ts,
                     self.producer_id, self.producer_epoch, self.base_sequence, self._count)
        memcpy(PyByteArray_AS_STRING(out), self._buf, self._len)
        return memoryview(out)[:self._len]


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
    b = batch if isinstance(batch, RecordBatch) else RecordBatch(batch)
    cdef bytes section = b.records_section()
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(section)
    cdef const unsigned char *end = p + PyBytes_GET_SIZE(section)
    cdef const uint8_t[::1] keep_mv = _np().ascontiguousarray(keep, dtype=_np().uint8)
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
        return finish(out_buf + KL_BATCH_HEADER_SIZE, (w - out_buf) - KL_BATCH_HEADER_SIZE,
                      attributes & KL_ATTR_COMPRESSION_MASK, None, b.base_offset,
                      b.partition_leader_epoch, attributes, b.last_offset_delta, new_base_ts,
                      max_ts, b.producer_id, b.producer_epoch, b.base_sequence, kept)
    finally:
        free(out_buf)
