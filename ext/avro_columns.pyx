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


def decode_flat(const uint8_t[::1] data, const int32_t[::1] offsets, kinds, nulls):
    """(per field: (values, valid) or, for strings and bytes, ((offsets,
    data), valid)) of the ``len(offsets) - 1`` payloads, or None."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef Py_ssize_t nf = len(kinds)
    cdef Py_ssize_t i, f, pos, end
    cdef int64_t v, branch
    cdef double d
    cdef float fl
    cdef int kind, null_at
    cdef Py_ssize_t total = offsets[n] - offsets[0] if n >= 0 else 0
    cdef const uint8_t* buf = &data[0] if data.shape[0] else NULL
    cols, valids, texts, lens = [], [], [], []
    for f in range(nf):
        kind = kinds[f]
        valids.append(np.ones(n, dtype=np.uint8))
        if kind == 4:
            cols.append(np.zeros(n + 1, dtype=np.int32))
            texts.append(np.empty(max(total, 1), dtype=np.uint8))
        else:
            cols.append(np.zeros(n, dtype=np.int64 if kind == 0 else
                                 np.uint8 if kind == 3 else np.float64))
            texts.append(None)
        lens.append(0)
    cdef int64_t[::1] ints
    cdef double[::1] doubles
    cdef uint8_t[::1] bools, valid, text
    cdef int32_t[::1] text_at
    cdef int[64] kind_of
    cdef int[64] null_of
    if nf > 64:
        return None
    for f in range(nf):
        kind_of[f] = kinds[f]
        null_of[f] = nulls[f]
    positions = np.array(offsets[:n], dtype=np.int64) if n > 0 else np.zeros(0, np.int64)
    cdef int64_t[::1] at = positions
    cdef Py_ssize_t[64] used
    for f in range(nf):
        used[f] = 0
    for f in range(nf):
        kind = kind_of[f]
        null_at = null_of[f]
        valid = valids[f]
        if kind == 0:
            ints = cols[f]
        elif kind == 3:
            bools = cols[f]
        elif kind == 4:
            text_at = cols[f]
            text = texts[f]
        else:
            doubles = cols[f]
        with nogil:
            for i in range(n):
                pos = at[i]
                end = offsets[i + 1]
                if null_at >= 0:
                    if not _varint(buf, &pos, end, &branch) or (branch != 0 and branch != 1):
                        with gil:
                            return None
                    if branch == null_at:
                        valid[i] = 0
                        if kind == 4:
                            text_at[i + 1] = <int32_t>used[f]
                        at[i] = pos
                        continue
                if kind == 0:
                    if not _varint(buf, &pos, end, &v):
                        with gil:
                            return None
                    ints[i] = v
                elif kind == 1:
                    if pos + 8 > end:
                        with gil:
                            return None
                    memcpy(&d, buf + pos, 8)
                    doubles[i] = d
                    pos += 8
                elif kind == 2:
                    if pos + 4 > end:
                        with gil:
                            return None
                    memcpy(&fl, buf + pos, 4)
                    doubles[i] = fl
                    pos += 4
                elif kind == 3:
                    if pos >= end or buf[pos] > 1:
                        with gil:
                            return None
                    bools[i] = buf[pos]
                    pos += 1
                else:
                    if not _varint(buf, &pos, end, &v) or v < 0 or pos + v > end:
                        with gil:
                            return None
                    memcpy(&text[used[f]], buf + pos, <size_t>v)
                    used[f] += v
                    text_at[i + 1] = <int32_t>used[f]
                    pos += v
                at[i] = pos
    # every record read to its payload's end, not short of it
    for i in range(n):
        if at[i] != offsets[i + 1]:
            return None
    out = []
    for f in range(nf):
        if kind_of[f] == 4:
            out.append(((cols[f], texts[f][:used[f]]), valids[f]))
        else:
            out.append((cols[f], valids[f]))
    return out
