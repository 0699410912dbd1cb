# cython: language_level=3
"""Binary search over the sparse offset and time indexes.

Entry formats (big-endian, as Kafka writes them):
  offset index  8 bytes: relativeOffset int32, position int32
  time index   12 bytes: timestamp int64, relativeOffset int32
Both are sorted ascending by their first field. Callers pass the raw entry
bytes (a bytes/bytearray/mmap) and the number of whole entries in it.
"""
from libc.stdint cimport int32_t, int64_t
from wire_c cimport kl_be32, kl_be64

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12


def offset_index_floor(const unsigned char[::1] entries, Py_ssize_t count, int64_t relative_offset):
    """Slot of the last entry whose offset <= ``relative_offset``, or -1."""
    cdef Py_ssize_t lo = 0, hi = count - 1, mid, found = -1
    if count * 8 > entries.shape[0]:
        raise ValueError(f"{count} entries do not fit {entries.shape[0]} bytes")
    while lo <= hi:
        mid = (lo + hi) >> 1
        if <int32_t>kl_be32(&entries[mid * 8]) <= relative_offset:
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def offset_index_entry(const unsigned char[::1] entries, Py_ssize_t slot):
    """(relative offset, position) of an offset index slot."""
    return (<int32_t>kl_be32(&entries[slot * 8]), <int32_t>kl_be32(&entries[slot * 8 + 4]))


def time_index_floor(const unsigned char[::1] entries, Py_ssize_t count, int64_t timestamp,
                     bint strict=False):
    """Slot of the last entry whose timestamp <= ``timestamp`` (< when
    ``strict``), or -1."""
    cdef Py_ssize_t lo = 0, hi = count - 1, mid, found = -1
    cdef int64_t ts
    if count * 12 > entries.shape[0]:
        raise ValueError(f"{count} entries do not fit {entries.shape[0]} bytes")
    while lo <= hi:
        mid = (lo + hi) >> 1
        ts = <int64_t>kl_be64(&entries[mid * 12])
        if ts < timestamp or (ts == timestamp and not strict):
            found = mid
            lo = mid + 1
        else:
            hi = mid - 1
    return found


def time_index_entry(const unsigned char[::1] entries, Py_ssize_t slot):
    """(timestamp, relative offset) of a time index slot."""
    return (<int64_t>kl_be64(&entries[slot * 12]), <int32_t>kl_be32(&entries[slot * 12 + 8]))
