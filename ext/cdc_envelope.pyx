# cython: language_level=3
"""The CDC source's Debezium envelopes written as JsonConverter's bytes,
straight from pgoutput's column texts (connectors/cdc.py, ``ChangeValues``).

What it writes, for one change (a descriptor tuple, see ``CHANGE``):

    head {"before":ROW|null,"after":ROW|null,"source":SOURCE,"op":"c","ts_ms":N} tail
    ROW    => {"col":TEXT,...}           every column in the relation's order
    SOURCE => source_pieces[0] ts_ms [1] snapshot [2] sequence [3] ts_us [4] ts_ns
              [5] txId [6] lsn [7] lsn_commit [8] change [9]

and for its key ``head {"col":TEXT,...} tail`` (the key columns). ``head``
and ``tail`` are the converter's (``{"schema":...,"payload":`` and ``}``
with schemas, nothing without); every constant text -- field names,
the source block's fixed part, the placeholder of an unchanged TOASTed
value -- is made in Python (cdc.py) and only copied here.

Contract: the bytes are those JsonConverter's struct_writer writes of the
dicts cdc.py's Python path decodes from the same texts, byte for byte. A
column's text goes the fast way only where this module reads it exactly as
that path does (integers as PostgreSQL writes them, finite floats by
Python's own parser and repr, booleans, ASCII text, ISO timestamps, dates);
anything else -- non-ASCII text, NaN, numeric, bytea, a BC date, an
unfamiliar DateStyle -- is handed to the column's ``fallback`` (Python: the
value decoded and written by the general path), so the shortcut never
decides what a value means. A change the layout does not fit raises
ValueError (the converter then takes the general path); any exception
from a fallback propagates.

Who calls: one task's worker thread; a writer holds no state between calls
but its buffer.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.math cimport isfinite
from libc.string cimport memcpy, strlen
from cpython.ref cimport PyObject

cdef extern from "Python.h":
    double PyOS_string_to_double(const char *s, char **endptr,
                                 PyObject *overflow_exception) except? -1.0
    char *PyOS_double_to_string(double val, char format_code, int precision, int flags,
                                int *ptype) except NULL
    void PyMem_Free(void *p)
    const char *PyUnicode_AsUTF8AndSize(object s, Py_ssize_t *size) except NULL
    int Py_DTSF_ADD_DOT_0

# column kinds (cdc.py's _KINDS maps PostgreSQL type oids to these)
KIND_FALLBACK = 0     # the column's fallback, always
KIND_INT = 1          # int2, int4, int8
KIND_FLOAT = 2        # float4, float8
KIND_BOOL = 3
KIND_TEXT = 4         # text and every type cdc.py reads as its text (json, uuid, arrays)
KIND_TIMESTAMP = 5    # timestamp (without time zone): UTC
KIND_TIMESTAMPTZ = 6
KIND_DATE = 7

# a change: (op, before, before_key_only, after, ts_ms, snapshot, txId, lsn, lsn_commit,
# change); before/after: a row of pgoutput's column texts (bytes, None, or the UNCHANGED marker),
# a tuple (pgoutput.pyx, copy_text.pyx) or a list
CHANGE = ("op", "before", "before_key_only", "after", "ts_ms", "snapshot", "txId", "lsn",
          "lsn_commit", "change")

cdef enum:
    FLOAT_TEXT_MAX = 64
cdef int64_t US_PER_DAY = 86400000000
# a commit time whose ns fit an int64 (the year 2262); past it the Python path's ts_ns
# would not fit the schema's INT64 either
cdef int64_t TS_MS_LIMIT = 9223372036854
# Python's datetime range (years 1..9999) in ms, data.VALUE_RANGES' TIMESTAMP: psycopg's
# loaders refuse a value past it, so the fallback decides those
cdef int64_t TIMESTAMP_MIN_MS = -62135596800000
cdef int64_t TIMESTAMP_MAX_MS = 253402300799999


cdef struct Buf:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef inline int _grow(Buf *b, Py_ssize_t more) except -1:
    cdef Py_ssize_t cap
    cdef char *p
    if b.n + more <= b.cap:
        return 0
    cap = b.cap * 2 if b.cap else 4096
    while cap < b.n + more:
        cap *= 2
    p = <char *>realloc(b.p, cap)
    if p == NULL:
        raise MemoryError()
    b.p, b.cap = p, cap
    return 0


cdef inline int _put(Buf *b, const char *s, Py_ssize_t n) except -1:
    _grow(b, n)
    memcpy(b.p + b.n, s, n)
    b.n += n
    return 0


cdef inline int _put_bytes(Buf *b, bytes s) except -1:
    return _put(b, PyBytes_AS_STRING(s), PyBytes_GET_SIZE(s))


cdef inline int _put_i64(Buf *b, int64_t v) except -1:
    """v in decimal, as int.__repr__ writes it."""
    cdef char tmp[24]
    cdef int i = 24
    cdef uint64_t u = <uint64_t>(-(v + 1)) + 1 if v < 0 else <uint64_t>v
    while True:
        i -= 1
        tmp[i] = <char>(c'0' + u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        i -= 1
        tmp[i] = c'-'
    return _put(b, tmp + i, 24 - i)


cdef inline int _put_str(Buf *b, str s) except -1:
    """An ASCII str (an op, a snapshot marker) as a JSON string."""
    cdef Py_ssize_t n
    cdef const char *p = PyUnicode_AsUTF8AndSize(s, &n)
    if not _put_ascii_string(b, <const unsigned char *>p, n):
        raise ValueError(f"not ASCII: {s!r}")
    return 0


cdef inline int _put_int_or_null(Buf *b, object v) except -1:
    if v is None:
        return _put(b, "null", 4)
    return _put_i64(b, <int64_t>v)


cdef const char *HEX = "0123456789abcdef"


cdef bint _put_ascii_string(Buf *b, const unsigned char *s, Py_ssize_t n) except -1:
    """``s`` as json.encoder.encode_basestring_ascii writes it; False (nothing
    written) when it holds a byte past ASCII (UTF-8, decoded by the fallback)."""
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(n):
        if s[i] >= 0x80:
            return False
    _grow(b, 2 + 6 * n)
    b.p[b.n] = c'"'
    b.n += 1
    for i in range(n):
        c = s[i]
        if c >= 0x20 and c <= 0x7e and c != c'"' and c != c'\\':
            b.p[b.n] = c
            b.n += 1
            continue
        b.p[b.n] = c'\\'
        if c == c'"' or c == c'\\':
            b.p[b.n + 1] = c
        elif c == c'\n':
            b.p[b.n + 1] = c'n'
        elif c == c'\r':
            b.p[b.n + 1] = c'r'
        elif c == c'\t':
            b.p[b.n + 1] = c't'
        elif c == 0x08:
            b.p[b.n + 1] = c'b'
        elif c == 0x0c:
            b.p[b.n + 1] = c'f'
        else:
            memcpy(b.p + b.n + 1, b"u00", 3)
            b.p[b.n + 4] = HEX[c >> 4]
            b.p[b.n + 5] = HEX[c & 15]
            b.n += 6
            continue
        b.n += 2
    b.p[b.n] = c'"'
    b.n += 1
    return True


cdef bint _put_int_text(Buf *b, const char *s, Py_ssize_t n) except -1:
    """PostgreSQL's integer text as int.__repr__ of int() of it: the same
    digits when there is no sign but '-', no leading zero, no blank."""
    cdef Py_ssize_t i = 1 if n and s[0] == c'-' else 0
    if i >= n or (s[i] == c'0' and (n - i > 1 or i == 1)):
        return False
    for i in range(i, n):
        if s[i] < c'0' or s[i] > c'9':
            return False
    _put(b, s, n)
    return True


cdef bint _put_float_text(Buf *b, const char *s, Py_ssize_t n) except -1:
    """float.__repr__(float(text)) of a finite float; False for NaN,
    infinities and anything float() would not read whole."""
    cdef char tmp[FLOAT_TEXT_MAX]
    cdef char *end
    cdef char *out
    cdef double x
    if n == 0 or n >= FLOAT_TEXT_MAX:
        return False
    memcpy(tmp, s, n)
    tmp[n] = 0
    try:
        x = PyOS_string_to_double(tmp, &end, NULL)
    except ValueError:
        return False
    if end != tmp + n or not isfinite(x):
        return False
    out = PyOS_double_to_string(x, c'r', 0, Py_DTSF_ADD_DOT_0, NULL)
    try:
        _put(b, out, strlen(out))
    finally:
        PyMem_Free(out)
    return True


cdef inline int _digits(const char *s, int n) noexcept:
    """The decimal number of ``n`` digits at ``s``, or -1."""
    cdef int v = 0, i
    for i in range(n):
        if s[i] < c'0' or s[i] > c'9':
            return -1
        v = v * 10 + (s[i] - c'0')
    return v


cdef inline int64_t _days_from_civil(int64_t y, int64_t m, int64_t d) noexcept:
    """Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's)."""
    cdef int64_t era, yoe, doy, doe
    y -= m <= 2
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


cdef inline bint _date_fields(const char *s, Py_ssize_t n, int64_t *days) noexcept:
    """ISO ``YYYY-MM-DD`` of year 1..9999 (psycopg's loader's range)."""
    cdef int y, m, d
    if n < 10 or s[4] != c'-' or s[7] != c'-':
        return False
    y, m, d = _digits(s, 4), _digits(s + 5, 2), _digits(s + 8, 2)
    if y < 1 or m < 1 or m > 12 or d < 1 or d > 31:
        return False
    days[0] = _days_from_civil(y, m, d)
    return True


cdef bint _timestamp_us(const char *s, Py_ssize_t n, bint with_zone, int64_t *us) noexcept:
    """µs since the epoch of PostgreSQL's ISO timestamp text
    ``YYYY-MM-DD HH:MM:SS[.ffffff]`` (then ``+HH[:MM[:SS]]`` with a zone)."""
    cdef int64_t days
    cdef int h, mi, sec, frac = 0, scale = 100000, sign, oh, om = 0, os_ = 0
    cdef Py_ssize_t i = 19
    if n < 19 or not _date_fields(s, 10, &days) or s[10] != c' ' or s[13] != c':' \
            or s[16] != c':':
        return False
    h, mi, sec = _digits(s + 11, 2), _digits(s + 14, 2), _digits(s + 17, 2)
    if h < 0 or h > 23 or mi < 0 or mi > 59 or sec < 0 or sec > 59:
        return False
    if i < n and s[i] == c'.':
        i += 1
        if i >= n or s[i] < c'0' or s[i] > c'9':
            return False
        while i < n and s[i] >= c'0' and s[i] <= c'9':
            if scale == 0:
                return False        # more than 6 digits: not PostgreSQL's
            frac += (s[i] - c'0') * scale
            scale //= 10
            i += 1
    us[0] = days * US_PER_DAY + ((h * 60 + mi) * 60 + sec) * <int64_t>1000000 + frac
    if not with_zone:
        return i == n
    if i + 3 > n or (s[i] != c'+' and s[i] != c'-'):
        return False
    sign = 1 if s[i] == c'+' else -1
    oh = _digits(s + i + 1, 2)
    i += 3
    if i < n:
        if i + 3 > n or s[i] != c':':
            return False
        om = _digits(s + i + 1, 2)
        i += 3
    if i < n:
        if i + 3 > n or s[i] != c':':
            return False
        os_ = _digits(s + i + 1, 2)
        i += 3
    if i != n or oh < 0 or om < 0 or os_ < 0:
        return False
    us[0] -= sign * ((oh * 60 + om) * 60 + os_) * <int64_t>1000000
    return True


cdef inline int64_t _floor_div(int64_t a, int64_t b) noexcept:
    cdef int64_t q = a // b     # cdivision: truncates
    if (a % b != 0) and ((a < 0) != (b < 0)):
        q -= 1
    return q


cdef bint _put_text(Buf *b, int kind, bytes raw) except -1:
    """The column's JSON text, if the fast way reads it exactly."""
    cdef const char *s = PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef int64_t v
    if kind == KIND_INT:
        return _put_int_text(b, s, n)
    if kind == KIND_FLOAT:
        return _put_float_text(b, s, n)
    if kind == KIND_BOOL:
        # cdc.py reads a boolean by its first byte, as psycopg does
        if n and s[0] == c't':
            _put(b, "true", 4)
        else:
            _put(b, "false", 5)
        return True
    if kind == KIND_TEXT:
        return _put_ascii_string(b, <const unsigned char *>s, n)
    if kind == KIND_TIMESTAMP or kind == KIND_TIMESTAMPTZ:
        if not _timestamp_us(s, n, kind == KIND_TIMESTAMPTZ, &v):
            return False
        v = _floor_div(v, 1000)
        if v < TIMESTAMP_MIN_MS or v > TIMESTAMP_MAX_MS:
            return False
        _put_i64(b, v)
        return True
    if kind == KIND_DATE:
        if n != 10 or not _date_fields(s, n, &v):
            return False
        _put_i64(b, v)
        return True
    return False


cdef inline Py_ssize_t _row_size(object row) except -1:
    """A row's column count: a tuple (pgoutput's and COPY's rows) or a list."""
    if type(row) is tuple:
        return PyTuple_GET_SIZE(row)
    if type(row) is list:
        return PyList_GET_SIZE(row)
    raise ValueError(f"a row is a tuple or a list, not {type(row).__name__}")


cdef inline object _row_item(object row, Py_ssize_t i):
    """Column ``i`` of a row _row_size has checked and counted past ``i``."""
    if type(row) is tuple:
        return <object>PyTuple_GET_ITEM(row, i)
    return <object>PyList_GET_ITEM(row, i)


@cython.final
cdef class EnvelopeWriter:
    """One relation's envelopes and keys (see the module's docstring).
    ``kinds``: a KIND_* per column; ``names``: each column's JSON name and
    colon (``"id":``); ``fallbacks``: per column, raw text -> its JSON text
    (str); ``unchanged``: per column, the JSON text of an unchanged TOASTed
    value; ``key_columns``: the key columns' indexes; ``source_pieces``: the
    source block's ten constant parts; ``unchanged_marker``: cdc.py's
    UNCHANGED."""
    cdef list kinds_l, names, fallbacks, unchanged, source_pieces
    cdef int *kinds
    cdef Py_ssize_t ncols
    cdef tuple key_columns
    cdef object marker
    cdef Buf buf

    def __cinit__(self):
        self.kinds = NULL
        self.buf.p = NULL
        self.buf.n = self.buf.cap = 0

    def __init__(self, list kinds, list names, list fallbacks, list unchanged,
                 key_columns, list source_pieces, unchanged_marker):
        cdef Py_ssize_t i
        self.ncols = len(kinds)
        if not (len(names) == len(fallbacks) == len(unchanged) == self.ncols):
            raise ValueError("kinds, names, fallbacks and unchanged: one per column")
        if len(source_pieces) != 10:
            raise ValueError("the source block is ten constant pieces")
        self.kinds = <int *>malloc(max(1, self.ncols) * sizeof(int))
        if self.kinds == NULL:
            raise MemoryError()
        for i in range(self.ncols):
            self.kinds[i] = kinds[i]
        self.kinds_l = list(kinds)
        self.names = [bytes(n) for n in names]
        self.fallbacks = list(fallbacks)
        self.unchanged = [bytes(u) for u in unchanged]
        self.key_columns = tuple(int(i) for i in key_columns)
        for i in self.key_columns:
            if not 0 <= i < self.ncols:
                raise ValueError(f"key column {i} of {self.ncols}")
        self.source_pieces = [bytes(p) for p in source_pieces]
        self.marker = unchanged_marker

    def __dealloc__(self):
        free(self.kinds)
        free(self.buf.p)

    cdef int _column(self, Py_ssize_t i, object raw) except -1:
        cdef Buf *b = &self.buf
        if raw is None:
            return _put(b, "null", 4)
        if raw is self.marker:
            return _put_bytes(b, <bytes>self.unchanged[i])
        if type(raw) is not bytes:
            raw = bytes(raw)
        if self.kinds[i] != KIND_FALLBACK and _put_text(b, self.kinds[i], <bytes>raw):
            return 0
        text = self.fallbacks[i](raw)
        return _put_bytes(b, (<str>text).encode())

    cdef int _row(self, object values, bint key_only) except -1:
        """A ROW of every column; with ``key_only`` null but the key columns."""
        cdef Buf *b = &self.buf
        cdef Py_ssize_t i
        cdef Py_ssize_t size = _row_size(values)
        if size != self.ncols:
            raise ValueError(f"a row of {size} columns, the relation has {self.ncols}")
        for i in range(self.ncols):
            _put(b, "{" if i == 0 else ",", 1)
            _put_bytes(b, <bytes>self.names[i])
            if key_only and i not in self.key_columns:
                _put(b, "null", 4)
            else:
                self._column(i, _row_item(values, i))
        if self.ncols == 0:
            _put(b, "{", 1)
        _put(b, "}", 1)
        return 0

    cdef int _quoted_lsn(self, object lsn) except -1:
        cdef Buf *b = &self.buf
        if lsn is None:
            return _put(b, "null", 4)
        _put(b, "\\\"", 2)
        _put_i64(b, <int64_t>lsn)
        return _put(b, "\\\"", 2)

    cdef int _quoted_sequence(self, object lsn_commit, object lsn) except -1:
        """Debezium's ``sequence``: the JSON text ``["<commit>","<lsn>"]`` as a
        JSON string (cdc.source_block)."""
        cdef Buf *b = &self.buf
        _put(b, "\"[", 2)
        self._quoted_lsn(lsn_commit)
        _put(b, ",", 1)
        self._quoted_lsn(lsn)
        return _put(b, "]\"", 2)

    cdef int _envelope(self, tuple change) except -1:
        cdef Buf *b = &self.buf
        cdef list p = self.source_pieces
        cdef int64_t ts_ms
        if PyTuple_GET_SIZE(change) != 10:
            raise ValueError("a change is a tuple of ten (cdc_envelope.CHANGE)")
        op, before, key_only, after, ts, snapshot, xid, lsn, lsn_commit, i = change
        ts_ms = ts
        if not -TS_MS_LIMIT <= ts_ms <= TS_MS_LIMIT:
            raise ValueError(f"ts_ms {ts_ms}: its ts_ns past 64 bits")
        _put(b, "{\"before\":", 10)
        if before is None:
            _put(b, "null", 4)
        else:
            self._row(before, key_only)
        _put(b, ",\"after\":", 9)
        if after is None:
            _put(b, "null", 4)
        else:
            self._row(after, False)
        _put(b, ",\"source\":", 10)
        _put_bytes(b, <bytes>p[0])
        _put_i64(b, ts_ms)
        _put_bytes(b, <bytes>p[1])
        _put_str(b, snapshot)
        _put_bytes(b, <bytes>p[2])
        self._quoted_sequence(lsn_commit, lsn)
        _put_bytes(b, <bytes>p[3])
        _put_i64(b, ts_ms * 1000)
        _put_bytes(b, <bytes>p[4])
        _put_i64(b, ts_ms * 1_000_000)
        _put_bytes(b, <bytes>p[5])
        _put_int_or_null(b, xid)
        _put_bytes(b, <bytes>p[6])
        _put_int_or_null(b, lsn)
        _put_bytes(b, <bytes>p[7])
        _put_int_or_null(b, lsn_commit)
        _put_bytes(b, <bytes>p[8])
        _put_int_or_null(b, i)
        _put_bytes(b, <bytes>p[9])
        _put(b, ",\"op\":", 6)
        _put_str(b, op)
        _put(b, ",\"ts_ms\":", 9)
        _put_i64(b, ts_ms)
        _put(b, "}", 1)
        return 0

    cdef int _key(self, tuple change) except -1:
        cdef Buf *b = &self.buf
        cdef Py_ssize_t j, i
        op = <object>PyTuple_GET_ITEM(change, 0)
        # the key's row: the new row of an insert, update or snapshot read, the old of a delete
        row = <object>PyTuple_GET_ITEM(change, 1 if op == "d" else 3)
        if row is None:
            raise ValueError(f"a change of op {op!r} without the row of its key")
        for j in range(len(self.key_columns)):
            i = self.key_columns[j]
            _put(b, "{" if j == 0 else ",", 1)
            _put_bytes(b, <bytes>self.names[i])
            if i >= _row_size(row):
                raise ValueError(f"a row of {_row_size(row)} columns, the key's column is {i}")
            self._column(i, _row_item(row, i))
        if not self.key_columns:
            _put(b, "{", 1)
        _put(b, "}", 1)
        return 0

    def envelopes(self, list changes, bytes head, bytes tail) -> list:
        """``head + envelope + tail`` of each change, as bytes."""
        return self._each(changes, head, tail, False)

    def keys(self, list changes, bytes head, bytes tail) -> list:
        """``head + key + tail`` of each change, as bytes."""
        return self._each(changes, head, tail, True)

    cdef list _each(self, list changes, bytes head, bytes tail, bint keys):
        cdef list out = []
        cdef Buf *b = &self.buf
        cdef Py_ssize_t k
        for k in range(PyList_GET_SIZE(changes)):
            b.n = 0
            _put_bytes(b, head)
            if keys:
                self._key(<tuple>PyList_GET_ITEM(changes, k))
            else:
                self._envelope(<tuple>PyList_GET_ITEM(changes, k))
            _put_bytes(b, tail)
            out.append(PyBytes_FromStringAndSize(b.p, b.n))
        return out
