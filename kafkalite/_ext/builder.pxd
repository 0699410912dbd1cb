# cython: language_level=3
# RecordBatchBuilder's C-level layout, declared here so that the producer's
# accumulator (accumulator.pyx) can append records through _append /
# _write_record without a Python call per record. The implementation is
# builder.pyx.
cimport cython
from libc.stdint cimport int16_t, int32_t, int64_t


@cython.final
cdef class RecordBatchBuilder:
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

    cdef int _reserve(self, Py_ssize_t extra) except -1
    cdef int _append(self, int64_t offset_delta, object timestamp, object key, object value,
                     object headers) except -1
    cdef int _write_record(self, int64_t offset_delta, int64_t ts,
                           const unsigned char *key_p, Py_ssize_t key_len,
                           const unsigned char *value_p, Py_ssize_t value_len,
                           list hdrs) except -1
