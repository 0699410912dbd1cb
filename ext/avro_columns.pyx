# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Avro records of one flat schema decoded into columns (numpy arrays),
one payload at a time within its own bounds: what the AvroConverter's batch
reader (kafkalite/connect/batch_readers.py) makes Arrow columns of, in
place of fastavro's reader, which made a dict per record (58% of the
Iceberg sink's CPU on Avro).

Field kinds: 0 long or int (a zig-zag varint), 1 double, 2 float, 3
boolean, 4 string or bytes (a varint length, then the bytes). ``nulls``:
per field, the union branch index that is null (0 for ["null", T], 1 for
[T, "null"]) or -1 (not a union). A payload is read as fastavro reads it
(a varint written long is read, a union index other than the two is an
error), and must end exactly where its record ends: anything else (bytes
left over, a payload too short, a boolean byte other than 0 or 1) returns
None and the converter decodes record by record, which names the error.
"""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

cnp.import_array()


cdef inline bint _varint(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end,
                         int64_t* out) noexcept nogil:
    cdef uint64_t acc = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos[0] >= end or shift > 63:
            return False
        b = buf[pos[0]]
        pos[0] += 1
        acc |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
    out[0] = <int64_t>(acc >> 1) ^ -(<int64_t>(acc & 1))
    return True


cdef inline bint _value(const uint8_t* buf, Py_ssize_t* pos, Py_ssize_t end, int kind,
                        Py_ssize_t i, int64_t[::1] ints, double[::1] doubles,
                        uint8_t[::1] bools, uint8_t[::1] text, int32_t[::1] text_at,
                        Py_ssize_t* used) noexcept nogil:
    """One field's value of record ``i`` (not null) into its column."""
    cdef int64_t v
    cdef double d
    cdef float fl
    if kind == 0:
        if not _varint(buf, pos, end, &v):
            return False
        ints[i] = v
    elif kind == 1:
        if pos[0] + 8 > end:
            return False
        memcpy(&d, buf + pos[0], 8)
        doubles[i] = d
        pos[0] += 8
    elif kind == 2:
        if pos[0] + 4 > end:
            return False
        memcpy(&fl, buf + pos[0], 4)
        doubles[i] = fl
        pos[0] += 4
    elif kind == 3:
        if pos[0] >= end or buf[pos[0]] > 1:
            return False
        bools[i] = buf[pos[0]]
        pos[0] += 1
    else:
        if not _varint(buf, pos, end, &v) or v < 0 or pos[0] + v > end:
            return False
        memcpy(&text[used[0]], buf + pos[0], <size_t>v)
        used[0] += v
        text_at[i + 1] = <int32_t>used[0]
        pos[0] += v
    return True


cdef bint _field(const uint8_t* buf, const int32_t[::1] offsets, int64_t[::1] at, int kind,
                 int null_at, uint8_t[::1] valid, int64_t[::1] ints, double[::1] doubles,
                 uint8_t[::1] bools, uint8_t[::1] text, int32_t[::1] text_at,
                 Py_ssize_t* used) noexcept nogil:
    """One field of every record, each read from where its record's
    previous field ended (``at``, moved on past this one)."""
    cdef Py_ssize_t i, pos, end
    cdef int64_t branch
    for i in range(offsets.shape[0] - 1):
        pos = at[i]
        end = offsets[i + 1]
        if null_at >= 0:
            if not _varint(buf, &pos, end, &branch) or (branch != 0 and branch != 1):
                return False
            if branch == null_at:
                valid[i] = 0
                if kind == 4:
                    text_at[i + 1] = <int32_t>used[0]
                at[i] = pos
                continue
        if not _value(buf, &pos, end, kind, i, ints, doubles, bools, text, text_at, used):
            return False
        at[i] = pos
    return True


def decode_flat(const uint8_t[::1] data, const int32_t[::1] offsets, kinds, nulls,
                Py_ssize_t skip=0):
    """(per field: (values, valid) or, for strings and bytes, ((offsets,
    data), valid)) of the ``len(offsets) - 1`` payloads, or None.
    ``skip``: bytes before each payload within its slot (5: Confluent's
    wire header, so a column of wire-format values is read without a copy
    of it); a slot shorter than that is an error (None)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t total = offsets[n] - offsets[0]
    cdef const uint8_t* buf = &data[0] if data.shape[0] else NULL
    cdef int64_t[::1] at = np.array(offsets[:n], dtype=np.int64) + skip
    cdef Py_ssize_t i0
    for i0 in range(n):
        if at[i0] > offsets[i0 + 1]:
            return None
    cdef Py_ssize_t used, i
    cdef int k, na
    cdef bint ok
    # a column of each kind, the unused ones of one element (typed memoryviews need one)
    cdef int64_t[::1] ints
    cdef double[::1] doubles
    cdef uint8_t[::1] bools, text, valid_of
    cdef int32_t[::1] text_at
    out = []
    for kind, null_at in zip(kinds, nulls):
        valid = np.ones(n, dtype=np.uint8)
        valid_of = valid        # a typed view made here: the nogil call below cannot make one
        ints = np.zeros(n if kind == 0 else 1, dtype=np.int64)
        doubles = np.zeros(n if kind in (1, 2) else 1, dtype=np.float64)
        bools = np.zeros(n if kind == 3 else 1, dtype=np.uint8)
        text_at = np.zeros(n + 1 if kind == 4 else 1, dtype=np.int32)
        text = np.empty(max(total, 1) if kind == 4 else 1, dtype=np.uint8)
        used = 0
        k, na = kind, null_at
        with nogil:
            ok = _field(buf, offsets, at, k, na, valid_of, ints, doubles, bools, text,
                        text_at, &used)
        if not ok:
            return None
        if kind == 4:
            out.append(((np.asarray(text_at), np.asarray(text)[:used]), valid))
        elif kind == 0:
            out.append((np.asarray(ints), valid))
        elif kind == 3:
            out.append((np.asarray(bools), valid))
        else:
            out.append((np.asarray(doubles), valid))
    # every record read to its payload's end, not short of it
    for i in range(n):
        if at[i] != offsets[i + 1]:
            return None
    return out
