# cython: language_level=3
# The client's Message (confluent-kafka's accessors), declared here so that
# the producer's accumulator (accumulator.pyx) makes delivery reports
# without a Python call per record. The implementation is messages.pyx.
from libc.stdint cimport int32_t, int64_t


cdef class Message:
    cdef object _topic
    cdef int32_t _partition
    cdef int64_t _offset
    cdef object _key
    cdef object _value
    cdef object _headers
    cdef int64_t _timestamp
    cdef int _timestamp_type
    cdef object _error
    cdef object _leader_epoch
    cdef int _delivery_count       # share groups (KIP-932): deliveries so far; 0: not shared


cdef Message new_message(object topic, int32_t partition, int64_t offset, object key,
                         object value, object headers, int64_t timestamp, int timestamp_type,
                         object error)
