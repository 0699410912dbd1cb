# cython: language_level=3
# What the RecordBatch v2 modules share: the builder (builder.pyx), the
# reader (reader.pyx), the columnar decoder (columns.pyx) and the log-side
# scans (batch_scan.pyx). The byte layout itself is ext/wire.h (declared in
# wire_c.pxd); these are the small operations every one of them needs on it,
# defined once and inlined into each module that cimports them.
from cpython.buffer cimport PyObject_CheckBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8String, PyUnicode_Check
from libc.stdint cimport int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec

cimport crc32c_c as crcmod
from wire_c cimport *


cdef inline object codecs():
    # kafkalite.record.compression, imported on use: kafkalite.record imports
    # the modules that call this, so a top-level import would be circular.
    # Called once per compressed batch, never per record.
    import kafkalite.record.compression as module
    return module


cdef inline int64_t now_ms() noexcept:
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


cdef inline bytes as_bytes(object obj):
    """A bytes object for a key/value/header value (None stays None)."""
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


cdef inline bytes header_key(object key):
    if PyUnicode_Check(key):
        return PyUnicode_AsUTF8String(key)
    if PyBytes_CheckExact(key):
        return key
    if key is None:
        raise TypeError("record header keys may not be None")
    if not PyObject_CheckBuffer(key):
        raise TypeError(f"record header keys must be str or bytes-like, not {type(key).__name__}")
    return bytes(key)


cdef inline uint32_t batch_crc(const unsigned char *batch, Py_ssize_t size) noexcept nogil:
    """The CRC-32C a batch of ``size`` bytes at ``batch`` must carry."""
    return crcmod.kl_crc32c(0, batch + KL_CRC_FROM, size - KL_CRC_FROM)


cdef inline void write_header(unsigned char *b, Py_ssize_t size, int64_t base_offset,
                              int32_t leader_epoch, int16_t attributes,
                              int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                              int64_t producer_id, int16_t producer_epoch,
                              int32_t base_sequence, int32_t count) noexcept:
    """Fill the 61-byte header of a ``size``-byte batch whose records follow it, CRC last."""
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
    kl_put_be32(b + KL_OFF_CRC, batch_crc(b, size))


cdef inline bytes finish(const unsigned char *records, Py_ssize_t records_len, int codec,
                         object level, int64_t base_offset, int32_t leader_epoch,
                         int16_t attributes, int32_t last_offset_delta, int64_t base_ts,
                         int64_t max_ts, int64_t producer_id, int16_t producer_epoch,
                         int32_t base_sequence, int32_t count):
    """A new batch: header + the (compressed) records section."""
    cdef bytes out
    cdef unsigned char *b
    cdef Py_ssize_t size
    cdef const unsigned char *payload = records
    cdef Py_ssize_t payload_len = records_len
    cdef bytes compressed
    if codec != KL_CODEC_NONE:
        compressed = codecs().compress(
            codec, PyBytes_FromStringAndSize(<const char *>records, records_len), level)
        payload = <const unsigned char *>PyBytes_AS_STRING(compressed)
        payload_len = PyBytes_GET_SIZE(compressed)
    size = KL_BATCH_HEADER_SIZE + payload_len
    out = PyBytes_FromStringAndSize(NULL, size)
    b = <unsigned char *>PyBytes_AS_STRING(out)
    memcpy(b + KL_BATCH_HEADER_SIZE, payload, payload_len)
    write_header(b, size, base_offset, leader_epoch, attributes, last_offset_delta,
                 base_ts, max_ts, producer_id, producer_epoch, base_sequence, count)
    return out


cdef inline object decompressed_section(const unsigned char *batch, Py_ssize_t size,
                                        int codec):
    """The records section of a batch as bytes, decompressed when ``codec`` says so."""
    cdef bytes raw = PyBytes_FromStringAndSize(<const char *>batch + KL_BATCH_HEADER_SIZE,
                                               size - KL_BATCH_HEADER_SIZE)
    if codec == KL_CODEC_NONE:
        return raw
    return codecs().decompress(codec, raw)
