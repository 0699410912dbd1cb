# cython: language_level=3
"""pgoutput's (protocol version 1) change messages -- Insert, Update,
Delete -- parsed in one C pass: the CDC source's per-change parse
(connectors/cdc.py's ``parse_message`` hands these three kinds here and
parses the rest, once per transaction or relation, itself).

Layout (PostgreSQL's "Logical Replication Message Formats"), big-endian:

    Insert    => 'I', relation oid uint32, 'N', TupleData
    Update    => 'U', relation oid uint32, ['K' | 'O', TupleData], 'N', TupleData
    Delete    => 'D', relation oid uint32, 'K' | 'O', TupleData
    TupleData => column count int16, per column: kind byte
                 'n' (null) | 'u' (unchanged TOASTed value) | 't' / 'b' (int32 length, bytes)

Returns what ``parse_message`` documents: ("I", relid, new), ("U", relid,
old_kind, old, new), ("D", relid, old_kind, old), a row as a tuple of
None (null), ``unchanged`` (the caller's marker) or bytes. Raises
ValueError naming what is wrong with a message that does not follow the
layout (truncated, an unknown kind); never reads past the message.

``change_run`` takes a transaction's run of Inserts and Updates of one
relation -- the bulk of a stream -- at once: each message parsed and made
into the task's change tuple in this loop, not in a Python call each.

Why rows are tuples, and untracked: a change lives from the poll that
reads it until the worker's offset commit (a second or more: 100,000s of
them), and a list -- or a tuple holding one -- stays in the cyclic
garbage collector's lists all that time, so every older-generation
collection walked each change again (two-thirds of change_run's time was
the collector's, issue 75). A tuple of bytes, None and ints can be in no
cycle; CPython's collector itself untracks such a tuple when it first
meets it, and ``_untracked`` does it when the tuple is made, so the
collector never walks it at all.

Who calls: the task's thread; no state.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int16_t, int32_t, uint32_t

cdef extern from "Python.h":
    int PyObject_GC_IsTracked(object o)
    void PyObject_GC_UnTrack(void *o)

cdef enum:
    RELID_AT = 1            # after the message kind
    TUPLE_TAG_AT = 5        # after the relation oid


cdef inline uint32_t _u32(const unsigned char *p) noexcept:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline tuple _untracked(tuple t):
    """``t``, out of the collector's lists when none of its items is in them
    (what CPython's collector does to such a tuple at its first pass)."""
    cdef Py_ssize_t k
    for k in range(PyTuple_GET_SIZE(t)):
        if PyObject_GC_IsTracked(<object>PyTuple_GET_ITEM(t, k)):
            return t
    PyObject_GC_UnTrack(<void *>t)
    return t


cdef inline void _set(tuple t, Py_ssize_t k, object v):
    Py_INCREF(v)            # PyTuple_SET_ITEM takes the reference
    PyTuple_SET_ITEM(t, k, v)


cdef tuple _tuple_data(const unsigned char *p, Py_ssize_t n, Py_ssize_t *at, object unchanged):
    cdef Py_ssize_t i = at[0]
    cdef int16_t ncols
    cdef int32_t size
    cdef tuple out
    cdef int k
    if i + 2 > n:
        raise ValueError("truncated or malformed message: no column count")
    ncols = <int16_t>((p[i] << 8) | p[i + 1])
    i += 2
    # a tuple freed half made (an error below) has NULL slots: its dealloc skips them
    out = PyTuple_New(max(ncols, 0))
    for k in range(ncols):
        if i >= n:
            raise ValueError("truncated or malformed message: a column missing")
        kind = p[i]
        i += 1
        if kind == c'n':
            _set(out, k, None)
        elif kind == c'u':
            _set(out, k, unchanged)
        elif kind == c't' or kind == c'b':
            if i + 4 > n:
                raise ValueError("truncated or malformed message: no column length")
            size = <int32_t>_u32(p + i)
            i += 4
            if size < 0 or size > n - i:
                raise ValueError("truncated or malformed message: a column past its end")
            _set(out, k, PyBytes_FromStringAndSize(<const char *>p + i, size))
            i += size
        else:
            raise ValueError(f"unknown tuple column kind {bytes([kind])!r}")
    at[0] = i
    return _untracked(out)



def parse_change(bytes data, unchanged) -> tuple:
    """An Insert, Update or Delete message (see the module's docstring)."""
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
    cdef Py_ssize_t at = TUPLE_TAG_AT + 1
    cdef unsigned char kind, tag
    if n < TUPLE_TAG_AT + 1:
        raise ValueError("truncated or malformed message: no relation")
    kind = p[0]
    relid = _u32(p + RELID_AT)
    tag = p[TUPLE_TAG_AT]
    if kind == c'I':
        if tag != c'N':
            raise ValueError("Insert without a new tuple")
        return ("I", relid, _tuple_data(p, n, &at, unchanged))
    if kind == c'U':
        old_kind, old = None, None
        if tag == c'K' or tag == c'O':
            old_kind = "K" if tag == c'K' else "O"
            old = _tuple_data(p, n, &at, unchanged)
            if at >= n:
                raise ValueError("Update without a new tuple")
            tag = p[at]
            at += 1
        if tag != c'N':
            raise ValueError("Update without a new tuple")
        return ("U", relid, old_kind, old, _tuple_data(p, n, &at, unchanged))
    if kind == c'D':
        return ("D", relid, chr(tag), _tuple_data(p, n, &at, unchanged))
    raise ValueError(f"not a change message: {bytes([kind])!r}")


def change_run(list msgs, Py_ssize_t at, uint32_t relid, unchanged, object ts_ms, object xid,
               object final_lsn, Py_ssize_t i, list changes) -> Py_ssize_t:
    """From ``msgs[at]`` (the stream's (lsn, message) pairs), while they are
    Inserts or Updates of relation ``relid``: each one's change tuple --
    (op, before, key_only, after, ts_ms, "false", xid, lsn, final_lsn, i),
    as cdc.py's ``_records`` makes it, ``i`` counting on -- appended to
    ``changes``, the tuple and its rows untracked by the collector (see
    the module's docstring). Returns the index of the first message not
    taken."""
    cdef Py_ssize_t n = len(msgs)
    cdef bytes data
    cdef const unsigned char *p
    cdef unsigned char kind
    cdef tuple change
    while at < n:
        lsn, data = msgs[at]
        if PyBytes_GET_SIZE(data) < TUPLE_TAG_AT + 1:
            break       # parse_change's error, raised by the caller's path
        p = <const unsigned char *>PyBytes_AS_STRING(data)
        kind = p[0]
        if (kind != c'I' and kind != c'U') or _u32(p + RELID_AT) != relid:
            break
        msg = parse_change(data, unchanged)
        if kind == c'I':
            change = ("c", None, False, msg[2], ts_ms, "false", xid, lsn, final_lsn, i)
        else:
            change = ("u", msg[3], msg[2] == "K", msg[4], ts_ms, "false", xid, lsn,
                      final_lsn, i)
        changes.append(_untracked(change))
        i += 1
        at += 1
    return at
