# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""JsonConverter envelopes of one flat struct schema read into columns
(numpy arrays), one record at a time within its own bounds: what the
converter's batch path (kafkalite/connect/converters.py, _payload_columns)
makes Arrow columns of, in place of joining the payloads into one text for
pyarrow's JSON reader and checking that text (2.6 µs a record of the
Iceberg sink's 4).

Each record must begin with ``prefix`` (the first record's bytes up to its
payload, the schema text included) and end with the envelope's ``}``; its
payload is one JSON object whose keys are field names (each at most once;
a field left out is null), with JSON whitespace anywhere JSON allows it.
Field kinds: 0 an integer (int64: no fraction or exponent), 1 a number
(double, by strtod, correctly rounded as Python's float()), 3 true or
false, 4 a string (escapes decoded to UTF-8; the text's UTF-8 is checked
by the caller, Arrow's validate). Any other layout or value -- a key that
is not a field, a nested value, a number out of int64 or not finite, a
negative zero in a number field, a control character or a lone surrogate
in a string, a key with an escape, bytes after the payload -- returns
None: the converter then reads the batch as before (pyarrow's reader, or
record by record), which decides it or names the error. So it does when
strtod's decimal point is not "." (a program that set LC_NUMERIC).

``decode_objects``: the schemaless JsonConverter's records, each one
object of scalar values, into a column per key (batch_readers.py,
schemaless_columns); kinds as Arrow infers them from the per-record dicts.
"""
import numpy as np

cimport numpy as cnp
from libc.math cimport isfinite, signbit
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport strtod
from libc.string cimport memcmp

cnp.import_array()

DEF MAX_FIELDS = 64
DEF MAX_NUMBER = 64       # a number token longer than this is left to the other readers


cdef inline bint _c_numbers() noexcept nogil:
    """Whether strtod reads "." as the decimal point (the C locale's
    LC_NUMERIC, which Python keeps unless a program sets another)."""
    return strtod("0.5", NULL) == 0.5


cdef inline Py_ssize_t _ws(const uint8_t* b, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    while p < end and (b[p] == 32 or b[p] == 9 or b[p] == 10 or b[p] == 13):
        p += 1
    return p


cdef inline int _hex4(const uint8_t* b, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """The value of 4 hex digits at ``p``, or -1."""
    cdef int v = 0, i, c
    if p + 4 > end:
        return -1
    for i in range(4):
        c = b[p + i]
        v <<= 4
        if 48 <= c <= 57:
            v |= c - 48
        elif 97 <= c <= 102:
            v |= c - 87
        elif 65 <= c <= 70:
            v |= c - 55
        else:
            return -1
    return v


cdef inline Py_ssize_t _string(const uint8_t* b, Py_ssize_t p, Py_ssize_t end, uint8_t* out,
                               Py_ssize_t* used) noexcept nogil:
    """A string whose opening quote is at ``p - 1``, decoded into ``out``
    from ``used`` on; the position after its closing quote, or -1."""
    cdef uint8_t c
    cdef int u, lo
    cdef Py_ssize_t w = used[0]
    while p < end:
        c = b[p]
        if c == 34:
            used[0] = w
            return p + 1
        if c < 32:
            return -1
        if c != 92:
            out[w] = c
            w += 1
            p += 1
            continue
        if p + 1 >= end:
            return -1
        c = b[p + 1]
        p += 2
        if c == 34 or c == 92 or c == 47:
            out[w] = c
        elif c == 98:
            out[w] = 8
        elif c == 102:
            out[w] = 12
        elif c == 110:
            out[w] = 10
        elif c == 114:
            out[w] = 13
        elif c == 116:
            out[w] = 9
        elif c == 117:
            u = _hex4(b, p, end)
            if u < 0:
                return -1
            p += 4
            if 0xD800 <= u <= 0xDBFF:
                # a high surrogate must have its low one right after it
                if p + 6 > end or b[p] != 92 or b[p + 1] != 117:
                    return -1
                lo = _hex4(b, p + 2, end)
                if lo < 0xDC00 or lo > 0xDFFF:
                    return -1
                p += 6
                u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
            elif 0xDC00 <= u <= 0xDFFF:
                return -1
            if u < 0x80:
                out[w] = <uint8_t>u
            elif u < 0x800:
                out[w] = <uint8_t>(0xC0 | (u >> 6))
                out[w + 1] = <uint8_t>(0x80 | (u & 0x3F))
                w += 1
            elif u < 0x10000:
                out[w] = <uint8_t>(0xE0 | (u >> 12))
                out[w + 1] = <uint8_t>(0x80 | ((u >> 6) & 0x3F))
                out[w + 2] = <uint8_t>(0x80 | (u & 0x3F))
                w += 2
            else:
                out[w] = <uint8_t>(0xF0 | (u >> 18))
                out[w + 1] = <uint8_t>(0x80 | ((u >> 12) & 0x3F))
                out[w + 2] = <uint8_t>(0x80 | ((u >> 6) & 0x3F))
                out[w + 3] = <uint8_t>(0x80 | (u & 0x3F))
                w += 3
        else:
            return -1
        w += 1
    return -1


cdef inline Py_ssize_t _number_end(const uint8_t* b, Py_ssize_t p, Py_ssize_t end,
                                   bint* integral) noexcept nogil:
    """The end of the JSON number at ``p`` (JSON's grammar, not strtod's:
    no +, no leading zeros, no hex, inf or nan), or -1."""
    integral[0] = True
    if p < end and b[p] == 45:
        p += 1
    if p >= end:
        return -1
    if b[p] == 48:
        p += 1
    elif 49 <= b[p] <= 57:
        while p < end and 48 <= b[p] <= 57:
            p += 1
    else:
        return -1
    if p < end and b[p] == 46:
        integral[0] = False
        p += 1
        if p >= end or not 48 <= b[p] <= 57:
            return -1
        while p < end and 48 <= b[p] <= 57:
            p += 1
    if p < end and (b[p] == 101 or b[p] == 69):
        integral[0] = False
        p += 1
        if p < end and (b[p] == 43 or b[p] == 45):
            p += 1
        if p >= end or not 48 <= b[p] <= 57:
            return -1
        while p < end and 48 <= b[p] <= 57:
            p += 1
    return p


cdef inline bint _integer(const uint8_t* b, Py_ssize_t p, Py_ssize_t q, int64_t* out) noexcept nogil:
    """The integer b[p:q] (JSON's grammar checked already) if it fits int64."""
    cdef bint neg = b[p] == 45
    cdef uint64_t acc = 0, limit
    cdef uint64_t d
    if neg:
        p += 1
    limit = (<uint64_t>1 << 63) if neg else (<uint64_t>1 << 63) - 1
    while p < q:
        d = b[p] - 48
        if acc > (limit - d) // 10:
            return False
        acc = acc * 10 + d
        p += 1
    out[0] = -<int64_t>(acc - 1) - 1 if neg and acc else <int64_t>acc
    return True


cdef inline Py_ssize_t _key_end(const uint8_t* b, Py_ssize_t p, Py_ssize_t end) noexcept nogil:
    """The closing quote of the key whose opening quote is at b[p], -1 when
    b[p] is no quote, the key is unterminated or has an escape (declined)."""
    if p >= end or b[p] != 34:
        return -1
    p += 1
    while p < end and b[p] != 34 and b[p] != 92:
        p += 1
    return p if p < end and b[p] == 34 else -1


cdef inline int _field_of(const uint8_t* key, Py_ssize_t size, const uint8_t** names,
                          const Py_ssize_t* name_len, int count, int expect) noexcept nogil:
    """The column of key ``key``, -1 for none: the one after the last key's
    first (the writer's order), then any."""
    cdef int j
    if expect < count and name_len[expect] == size and memcmp(names[expect], key, size) == 0:
        return expect
    for j in range(count):
        if name_len[j] == size and memcmp(names[j], key, size) == 0:
            return j
    return -1


cdef inline bint _double(const uint8_t* b, Py_ssize_t p, Py_ssize_t q, double* out) noexcept nogil:
    """The number b[p:q] as a double; False when too long or not finite."""
    cdef char num[MAX_NUMBER + 1]
    cdef Py_ssize_t j
    if q - p > MAX_NUMBER:
        return False
    for j in range(q - p):
        num[j] = <char>b[p + j]
    num[q - p] = 0
    out[0] = strtod(num, NULL)
    return isfinite(out[0])


cdef bint _record(const uint8_t* b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t i, int nf,
                  const uint8_t** names, const Py_ssize_t* name_len, const int* kinds,
                  int64_t** ints, double** doubles, uint8_t** bools, uint8_t** valid,
                  uint8_t** text, int32_t** text_at, Py_ssize_t* used) noexcept nogil:
    """The payload object b[p:end] of record ``i`` into the columns."""
    cdef uint64_t seen = 0
    cdef Py_ssize_t k0, k1, q
    cdef int f, expect = 0, j
    cdef bint integral
    cdef double d
    p = _ws(b, p, end)
    if p >= end or b[p] != 123:
        return False
    p = _ws(b, p + 1, end)
    if p < end and b[p] == 125:
        p += 1
    else:
        while True:
            k1 = _key_end(b, p, end)
            if k1 < 0:
                return False            # unterminated, or a key with an escape
            k0 = p + 1
            # the schema's order first (Kafka's JsonConverter writes it), then any
            f = _field_of(b + k0, k1 - k0, names, name_len, nf, expect)
            if f < 0 or (seen >> f) & 1:
                return False
            seen |= (<uint64_t>1) << f
            expect = f + 1
            p = _ws(b, k1 + 1, end)
            if p >= end or b[p] != 58:
                return False
            p = _ws(b, p + 1, end)
            if p >= end:
                return False
            if b[p] == 110:
                if p + 4 > end or memcmp(b + p, b"null", 4) != 0:
                    return False
                valid[f][i] = 0
                p += 4
            elif kinds[f] == 4:
                if b[p] != 34:
                    return False
                p = _string(b, p + 1, end, text[f], &used[f])
                if p < 0:
                    return False
            elif kinds[f] == 3:
                if p + 4 <= end and memcmp(b + p, b"true", 4) == 0:
                    bools[f][i] = 1
                    p += 4
                elif p + 5 <= end and memcmp(b + p, b"false", 5) == 0:
                    p += 5
                else:
                    return False
            else:
                q = _number_end(b, p, end, &integral)
                if q < 0:
                    return False
                if kinds[f] == 0:
                    if not integral or not _integer(b, p, q, &ints[f][i]):
                        return False
                else:
                    if not _double(b, p, q, &d) or (d == 0.0 and signbit(d)):
                        return False
                    doubles[f][i] = d
                p = q
            if kinds[f] == 4:
                text_at[f][i + 1] = <int32_t>used[f]
            p = _ws(b, p, end)
            if p < end and b[p] == 44:
                p = _ws(b, p + 1, end)
                continue
            if p < end and b[p] == 125:
                p += 1
                break
            return False
    if _ws(b, p, end) != end:
        return False
    for f in range(nf):
        if not (seen >> f) & 1:
            valid[f][i] = 0             # left out: null, as the other readers have it
            if kinds[f] == 4:
                text_at[f][i + 1] = <int32_t>used[f]
    return True


def decode_envelopes(const uint8_t[::1] data, const int32_t[::1] offsets, bytes prefix,
                     names, kinds):
    """(per field: (values, valid) or, for strings, ((offsets, data),
    valid)) of the ``len(offsets) - 1`` records, or None."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef int nf = len(names)
    cdef Py_ssize_t plen = len(prefix)
    cdef const uint8_t* pre = prefix
    cdef const uint8_t* buf = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t total = offsets[n] - offsets[0] if n else 0
    cdef Py_ssize_t i, start, stop
    cdef const uint8_t* name_p[MAX_FIELDS]
    cdef Py_ssize_t name_len[MAX_FIELDS]
    cdef int kind_of[MAX_FIELDS]
    cdef int64_t* ints[MAX_FIELDS]
    cdef double* doubles[MAX_FIELDS]
    cdef uint8_t* bools[MAX_FIELDS]
    cdef uint8_t* valid[MAX_FIELDS]
    cdef uint8_t* text[MAX_FIELDS]
    cdef int32_t* text_at[MAX_FIELDS]
    cdef Py_ssize_t used[MAX_FIELDS]
    cdef cnp.ndarray arr
    cdef bint ok = True
    if nf == 0 or nf > MAX_FIELDS or n == 0 or buf == NULL or not _c_numbers():
        return None
    keep = []           # the arrays (and names) the pointers point into
    out = []
    for f in range(nf):
        name = names[f]
        keep.append(name)
        name_p[f] = <const uint8_t*><bytes>name
        name_len[f] = len(name)
        kind = kinds[f]
        kind_of[f] = kind
        vals = np.zeros(n if kind == 0 else 1, dtype=np.int64)
        arr = vals
        ints[f] = <int64_t*>arr.data
        dbl = np.zeros(n if kind == 1 else 1, dtype=np.float64)
        arr = dbl
        doubles[f] = <double*>arr.data
        bo = np.zeros(n if kind == 3 else 1, dtype=np.uint8)
        arr = bo
        bools[f] = <uint8_t*>arr.data
        va = np.ones(n, dtype=np.uint8)
        arr = va
        valid[f] = <uint8_t*>arr.data
        # a string's decoded text is never longer than its JSON text
        tx = np.empty(max(total, 1) if kind == 4 else 1, dtype=np.uint8)
        arr = tx
        text[f] = <uint8_t*>arr.data
        ta = np.zeros(n + 1 if kind == 4 else 1, dtype=np.int32)
        arr = ta
        text_at[f] = <int32_t*>arr.data
        used[f] = 0
        keep.append((vals, dbl, bo, tx, ta))
        out.append((kind, vals, dbl, bo, va, tx, ta))
    with nogil:
        for i in range(n):
            start = offsets[i]
            stop = offsets[i + 1]
            if stop - start < plen + 2 or memcmp(buf + start, pre, plen) != 0 or \
                    buf[stop - 1] != 125:
                ok = False
                break
            if not _record(buf, start + plen, stop - 1, i, nf, name_p, name_len, kind_of,
                           ints, doubles, bools, valid, text, text_at, used):
                ok = False
                break
    if not ok:
        return None
    got = []
    for f in range(nf):
        kind, vals, dbl, bo, va, tx, ta = out[f]
        if kind == 4:
            got.append(((ta, tx[:used[f]]), va))
        elif kind == 0:
            got.append((vals, va))
        elif kind == 3:
            got.append((bo, va))
        else:
            got.append((dbl, va))
    return got


# ---- schemaless objects -------------------------------------------------------------------

DEF SEEN_INT = 1
DEF SEEN_FLOAT = 2
DEF SEEN_BOOL = 4
DEF SEEN_STRING = 8
DEF SEEN_BIG_INT = 16     # an integer a double does not hold exactly (past 2**53)


cdef struct _Columns:
    int count
    const uint8_t* name[MAX_FIELDS]
    Py_ssize_t name_len[MAX_FIELDS]
    int seen[MAX_FIELDS]
    int64_t* ints[MAX_FIELDS]
    double* doubles[MAX_FIELDS]
    uint8_t* bools[MAX_FIELDS]
    uint8_t* valid[MAX_FIELDS]
    uint8_t* text[MAX_FIELDS]
    int32_t* text_at[MAX_FIELDS]
    Py_ssize_t used[MAX_FIELDS]
    Py_ssize_t used_before[MAX_FIELDS]     # each string column's text before this record


cdef int _object(const uint8_t* b, Py_ssize_t p, Py_ssize_t end, Py_ssize_t i,
                 _Columns* c) noexcept nogil:
    """Record ``i``, the object b[p:end], into the columns: 1 done, 0 not
    decided here, 2 a key no column has yet (at ``c.count``: the caller
    makes its column and calls again)."""
    cdef uint64_t seen = 0
    cdef Py_ssize_t k0, k1, q
    cdef int f, expect = 0, j
    cdef bint integral
    cdef double d
    cdef int64_t v
    for j in range(c.count):
        c.used_before[j] = c.used[j]
    p = _ws(b, p, end)
    if p >= end or b[p] != 123:
        return 0
    p = _ws(b, p + 1, end)
    if p < end and b[p] == 125:
        return 1 if _ws(b, p + 1, end) == end else 0
    while True:
        k1 = _key_end(b, p, end)
        if k1 < 0:
            return 0
        k0 = p + 1
        f = _field_of(b + k0, k1 - k0, c.name, c.name_len, c.count, expect)
        if f < 0:
            if c.count >= MAX_FIELDS:
                return 0
            c.name[c.count] = b + k0
            c.name_len[c.count] = k1 - k0
            return 2
        if (seen >> f) & 1:
            return 0
        seen |= (<uint64_t>1) << f
        expect = f + 1
        p = _ws(b, k1 + 1, end)
        if p >= end or b[p] != 58:
            return 0
        p = _ws(b, p + 1, end)
        if p >= end:
            return 0
        if b[p] == 110:
            if p + 4 > end or memcmp(b + p, b"null", 4) != 0:
                return 0
            p += 4
        elif b[p] == 34:
            p = _string(b, p + 1, end, c.text[f], &c.used[f])
            if p < 0:
                return 0
            c.text_at[f][i + 1] = <int32_t>c.used[f]
            c.seen[f] |= SEEN_STRING
            c.valid[f][i] = 1
        elif b[p] == 116 or b[p] == 102:
            if p + 4 <= end and memcmp(b + p, b"true", 4) == 0:
                c.bools[f][i] = 1
                p += 4
            elif p + 5 <= end and memcmp(b + p, b"false", 5) == 0:
                p += 5
            else:
                return 0
            c.seen[f] |= SEEN_BOOL
            c.valid[f][i] = 1
        else:
            q = _number_end(b, p, end, &integral)
            if q < 0:
                return 0
            if integral:
                if not _integer(b, p, q, &v):
                    return 0
                c.ints[f][i] = v
                c.doubles[f][i] = <double>v
                c.seen[f] |= SEEN_INT
                if v > (<int64_t>1 << 53) or v < -(<int64_t>1 << 53):
                    c.seen[f] |= SEEN_BIG_INT
            else:
                if not _double(b, p, q, &d):
                    return 0
                c.doubles[f][i] = d
                c.seen[f] |= SEEN_FLOAT
            c.valid[f][i] = 1
            p = q
        p = _ws(b, p, end)
        if p < end and b[p] == 44:
            p = _ws(b, p + 1, end)
            continue
        if p < end and b[p] == 125:
            return 1 if _ws(b, p + 1, end) == end else 0
        return 0


def decode_objects(const uint8_t[::1] data, const int32_t[::1] offsets):
    """[(key bytes, kind, values, valid)] of the ``len(offsets) - 1``
    records, each one JSON object of scalar values, keys in the order they
    first appear; kind "int64", "double", "bool", "string" (values
    (offsets, data)) or "null" (values None); or None where a record is
    anything else or a key's values are of kinds Arrow's inference from
    Python values would refuse or read otherwise (text and numbers, true
    and numbers, an integer past 2**53 beside a fraction)."""
    cdef Py_ssize_t n = offsets.shape[0] - 1
    cdef const uint8_t* buf = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t total = offsets[n] - offsets[0] if n else 0
    cdef Py_ssize_t i = 0, start, stop, j
    cdef _Columns c
    cdef int got = 0
    cdef cnp.ndarray arr
    cdef int32_t* at
    if n == 0 or buf == NULL or not _c_numbers():
        return None
    c.count = 0
    cols = []
    while True:
        with nogil:
            while i < n:
                start = offsets[i]
                stop = offsets[i + 1]
                got = _object(buf, start, stop, i, &c)
                if got != 1:
                    break
                i += 1
        if got == 0:
            return None
        if i >= n:
            break
        # a new key: its column, null in every record before (the record is read again)
        f = c.count
        arrays = [np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.float64),
                  np.zeros(n, dtype=np.uint8), np.zeros(n, dtype=np.uint8),
                  np.empty(max(total, 1), dtype=np.uint8), np.zeros(n + 1, dtype=np.int32)]
        arr = arrays[0]
        c.ints[f] = <int64_t*>arr.data
        arr = arrays[1]
        c.doubles[f] = <double*>arr.data
        arr = arrays[2]
        c.bools[f] = <uint8_t*>arr.data
        arr = arrays[3]
        c.valid[f] = <uint8_t*>arr.data
        arr = arrays[4]
        c.text[f] = <uint8_t*>arr.data
        arr = arrays[5]
        c.text_at[f] = <int32_t*>arr.data
        c.used[f] = 0
        c.seen[f] = 0
        c.count += 1
        name = bytes(data[c.name[f] - buf:c.name[f] - buf + c.name_len[f]])
        cols.append((name, arrays))
        # the record's earlier keys were read into their columns: clear them for the rereading
        for j in range(f):
            c.valid[j][i] = 0
            c.used[j] = c.used_before[j]
            c.text_at[j][i + 1] = 0
            c.bools[j][i] = 0
    out = []
    for f in range(c.count):
        name, arrays = cols[f]
        seen = c.seen[f] & ~SEEN_BIG_INT
        if seen == 0:
            kind, values = "null", None
        elif seen == SEEN_INT:
            kind, values = "int64", arrays[0]
        elif seen == SEEN_FLOAT or seen == SEEN_INT | SEEN_FLOAT:
            if c.seen[f] & SEEN_BIG_INT:
                return None
            kind, values = "double", arrays[1]
        elif seen == SEEN_BOOL:
            kind, values = "bool", arrays[2]
        elif seen == SEEN_STRING:
            # a record without the key (or null there) ends its text where the one before did
            at = c.text_at[f]
            for j in range(n):
                if at[j + 1] < at[j]:
                    at[j + 1] = at[j]
            kind, values = "string", (arrays[5], arrays[4][:c.used[f]])
        else:
            return None
        out.append((name, kind, values, arrays[3]))
    return out
