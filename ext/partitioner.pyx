# cython: language_level=3
"""Kafka's default key partitioner: murmur2, as in the Java client.

``partition_for_key(key, n) == toPositive(murmur2(key)) % n`` with
``toPositive(h) = h & 0x7fffffff`` and seed 0x9747b28c: the same partition
Kafka's Java producer (and librdkafka's "murmur2_random") picks for a key.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE


cdef inline int32_t _murmur2(const unsigned char *data, Py_ssize_t length) noexcept nogil:
    cdef uint32_t seed = 0x9747b28c
    cdef uint32_t m = 0x5bd1e995
    cdef int r = 24
    cdef uint32_t h = seed ^ <uint32_t>length
    cdef Py_ssize_t i, length4 = length // 4
    cdef uint32_t k
    for i in range(length4):
        k = (<uint32_t>data[i * 4] | (<uint32_t>data[i * 4 + 1] << 8)
             | (<uint32_t>data[i * 4 + 2] << 16) | (<uint32_t>data[i * 4 + 3] << 24))
        k *= m
        k ^= k >> r
        k *= m
        h *= m
        h ^= k
    cdef Py_ssize_t tail = length & ~3
    cdef int rest = length % 4
    if rest == 3:
        h ^= <uint32_t>data[tail + 2] << 16
    if rest >= 2:
        h ^= <uint32_t>data[tail + 1] << 8
    if rest >= 1:
        h ^= <uint32_t>data[tail]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return <int32_t>h


cdef int32_t _hash(object key) except? -1:
    cdef Py_buffer view
    cdef int32_t h
    if PyBytes_CheckExact(key):
        return _murmur2(<const unsigned char *>PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key))
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        h = _murmur2(<const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return h


def murmur2(key):
    """Kafka's murmur2 hash of ``key`` (bytes-like) as a signed 32-bit int."""
    return _hash(key)


def partition_for_key(key, int num_partitions):
    """The partition Kafka's Java producer chooses for ``key``."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    return (_hash(key) & 0x7fffffff) % num_partitions


def partitions_for_keys(keys, int num_partitions, int keyless=-1):
    """``partition_for_key`` of every key as an int32 array; a None key
    gets ``keyless``."""
    if num_partitions <= 0:
        raise ValueError(f"a topic has at least one partition, not {num_partitions}")
    cdef Py_ssize_t i, n = len(keys)
    import numpy as np      # here: a producer that partitions one key at a time never loads it
    out = np.empty(n, dtype=np.int32)
    cdef int32_t[::1] o = out
    for i in range(n):
        k = keys[i]
        o[i] = keyless if k is None else (_hash(k) & 0x7fffffff) % num_partitions
    return out
