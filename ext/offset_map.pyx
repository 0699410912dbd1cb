# cython: language_level=3
"""The log cleaner's key -> latest offset map (Kafka's SkimpyOffsetMap).

Keys are not stored, only their 128-bit XXH3 hash, so memory is fixed per
entry (24 bytes: two hash halves and the offset) whatever the key size; with
a 128-bit hash a false match between two distinct keys is not a practical
concern. Open addressing with linear probing; the table doubles while it is
under ``max_entries`` and reports "full" after that, so the cleaner can stop
its dirty range at a segment boundary as Kafka does.

Keys are fed in bulk from ``decode_columns`` output (Arrow binary layout),
so the per-record loop -- hash, probe, store -- runs in C.

Who may call: the cleaner, single-threaded.
"""
cimport cython
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #define XXH_INLINE_ALL
    #include "xxhash.h"
    """
    ctypedef struct XXH128_hash_t:
        uint64_t low64
        uint64_t high64
    XXH128_hash_t XXH3_128bits(const void *data, size_t len) nogil

ctypedef struct Slot:
    uint64_t lo
    uint64_t hi
    int64_t offset      # -1: empty

DEF ENTRY_BYTES = 24


cdef object _as_u8(object mask):
    """A bool validity mask as uint8 without a copy."""
    arr = np.ascontiguousarray(mask)
    return arr.view(np.uint8) if arr.dtype == np.bool_ else arr


def key_hash(key):
    """The 128-bit XXH3 hash the map uses, as (low64, high64); equals
    ``xxhash.xxh3_128_intdigest(key)`` split in halves."""
    cdef const unsigned char[::1] k = key
    cdef XXH128_hash_t h = XXH3_128bits(&k[0] if k.shape[0] else NULL, k.shape[0])
    return (h.low64, h.high64)


@cython.final
cdef class OffsetMap:
    cdef Slot *_slots
    cdef Py_ssize_t _capacity      # power of two
    cdef Py_ssize_t _size
    cdef readonly Py_ssize_t max_entries
    cdef readonly int64_t latest_offset

    def __cinit__(self, Py_ssize_t max_entries, Py_ssize_t initial_capacity=1 << 12):
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self.max_entries = max_entries
        self._capacity = 1
        while self._capacity < initial_capacity:
            self._capacity <<= 1
        self._alloc(self._capacity)
        self.latest_offset = -1

    @staticmethod
    def for_memory(Py_ssize_t buffer_bytes, double load_factor=0.75):
        """A map sized for ``log.cleaner.dedupe.buffer.size`` bytes."""
        return OffsetMap(max(1, <Py_ssize_t>(buffer_bytes / ENTRY_BYTES * load_factor)))

    cdef int _alloc(self, Py_ssize_t capacity) except -1:
        cdef Py_ssize_t i
        self._slots = <Slot *>calloc(capacity, sizeof(Slot))
        if self._slots == NULL:
            raise MemoryError()
        for i in range(capacity):
            self._slots[i].offset = -1
        self._capacity = capacity
        return 0

    def __dealloc__(self):
        free(self._slots)

    def __len__(self):
        return self._size

    @property
    def capacity(self):
        return self._capacity

    def clear(self):
        cdef Py_ssize_t i
        for i in range(self._capacity):
            self._slots[i].offset = -1
        self._size = 0
        self.latest_offset = -1

    cdef Py_ssize_t _find(self, uint64_t lo, uint64_t hi) noexcept nogil:
        cdef Py_ssize_t mask = self._capacity - 1
        cdef Py_ssize_t i = <Py_ssize_t>(lo & <uint64_t>mask)
        while True:
            if self._slots[i].offset < 0 or (self._slots[i].lo == lo and self._slots[i].hi == hi):
                return i
            i = (i + 1) & mask

    cdef int _grow(self) except -1:
        cdef Slot *old = self._slots
        cdef Py_ssize_t old_cap = self._capacity, i, j
        self._alloc(old_cap * 2)
        for i in range(old_cap):
            if old[i].offset >= 0:
                j = self._find(old[i].lo, old[i].hi)
                self._slots[j] = old[i]
        free(old)
        return 0

    cdef inline int _put(self, uint64_t lo, uint64_t hi, int64_t offset) except -1:
        cdef Py_ssize_t i = self._find(lo, hi)
        if self._slots[i].offset < 0:
            self._size += 1
            self._slots[i].lo = lo
            self._slots[i].hi = hi
            self._slots[i].offset = offset
            if self._size * 4 > self._capacity * 3:
                self._grow()
        elif offset > self._slots[i].offset:
            self._slots[i].offset = offset
        if offset > self.latest_offset:
            self.latest_offset = offset
        return 0

    def put(self, key, int64_t offset):
        """Record ``offset`` for ``key`` (kept if it is the largest seen)."""
        if offset < 0:
            raise ValueError(f"offsets are >= 0, not {offset}")
        cdef const unsigned char[::1] k = key
        cdef XXH128_hash_t h = XXH3_128bits(&k[0] if k.shape[0] else NULL, k.shape[0])
        self._put(h.low64, h.high64, offset)

    def get(self, key):
        """Latest offset recorded for ``key``, or -1."""
        cdef const unsigned char[::1] k = key
        cdef XXH128_hash_t h = XXH3_128bits(&k[0] if k.shape[0] else NULL, k.shape[0])
        return self._slots[self._find(h.low64, h.high64)].offset

    @property
    def free_entries(self):
        return self.max_entries - self._size

    def put_columns(self, key_data, key_offsets, key_valid, offsets):
        """Add every non-null key of a decoded batch set with its offset
        (the RecordColumns arrays: key_data, key_offsets, key_valid, offsets)."""
        self._put_columns(key_data, key_offsets, _as_u8(key_valid), offsets)

    def _put_columns(self, const uint8_t[::1] key_data, const int32_t[::1] key_offsets,
                     const uint8_t[::1] key_valid, const int64_t[::1] offsets):
        cdef Py_ssize_t i, n = offsets.shape[0]
        cdef XXH128_hash_t h
        cdef const unsigned char *base = &key_data[0] if key_data.shape[0] else NULL
        for i in range(n):
            if key_valid[i]:
                h = XXH3_128bits(base + key_offsets[i], key_offsets[i + 1] - key_offsets[i])
                self._put(h.low64, h.high64, offsets[i])

    def latest_offsets(self, key_data, key_offsets, key_valid):
        """For each record, the latest offset of its key in the map (-1 when
        absent or the key is null)."""
        return self._latest_offsets(key_data, key_offsets, _as_u8(key_valid))

    def _latest_offsets(self, const uint8_t[::1] key_data, const int32_t[::1] key_offsets,
                        const uint8_t[::1] key_valid):
        cdef Py_ssize_t i, n = key_valid.shape[0]
        cdef XXH128_hash_t h
        cdef const unsigned char *base = &key_data[0] if key_data.shape[0] else NULL
        out = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] o = out
        for i in range(n):
            if key_valid[i]:
                h = XXH3_128bits(base + key_offsets[i], key_offsets[i + 1] - key_offsets[i])
                o[i] = self._slots[self._find(h.low64, h.high64)].offset
            else:
                o[i] = -1
        return out
