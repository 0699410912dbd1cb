# cython: language_level=3
"""Rows of PostgreSQL's COPY text format (``COPY ... TO STDOUT``, the
default format) as each column's text: what the type's output function
wrote, the escapes undone -- the same text a query's result or pgoutput
carries (the CDC snapshot reads its tables so: connectors/copy_out.py).

Format (PostgreSQL's "COPY", File Formats, Text Format): one row a line,
columns separated by a tab, ``\\N`` alone for NULL; in a value a backslash
starts an escape: ``\\b \\f \\n \\r \\t \\v`` (the control character), ``\\``
and a digit (up to three octal digits: that byte), ``\\x`` and up to two hex
digits (that byte), ``\\`` and any other character (that character).

A row is a tuple, out of the cyclic garbage collector's lists from the
start (it holds only bytes and None, so it can be in no cycle): the CDC
snapshot keeps its rows until the worker's offset commit, and a list (or a
tracked tuple) would be walked by every older-generation collection until
then (issue 75).

Who calls: any thread; no state.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdlib cimport free, realloc

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void *o)


cdef inline int _hex(unsigned char c) noexcept:
    if c >= c'0' and c <= c'9':
        return c - c'0'
    if c >= c'a' and c <= c'f':
        return c - c'a' + 10
    if c >= c'A' and c <= c'F':
        return c - c'A' + 10
    return -1


cdef object _value(const unsigned char *s, Py_ssize_t n, unsigned char *tmp):
    """One column's text: None for ``\\N``, else the bytes, unescaped."""
    cdef Py_ssize_t i = 0, o = 0, k
    cdef unsigned char c
    cdef int v, d
    if n == 2 and s[0] == c'\\' and s[1] == c'N':
        return None
    while i < n:
        c = s[i]
        i += 1
        if c != c'\\' or i >= n:
            tmp[o] = c
            o += 1
            continue
        c = s[i]
        i += 1
        if c >= c'0' and c <= c'7':
            v = c - c'0'
            for k in range(2):
                if i < n and s[i] >= c'0' and s[i] <= c'7':
                    v = v * 8 + (s[i] - c'0')
                    i += 1
            tmp[o] = <unsigned char>(v & 0xFF)
        elif c == c'x' and i < n and _hex(s[i]) >= 0:
            v = _hex(s[i])
            i += 1
            if i < n and _hex(s[i]) >= 0:
                v = v * 16 + _hex(s[i])
                i += 1
            tmp[o] = <unsigned char>v
        elif c == c'b':
            tmp[o] = 0x08
        elif c == c'f':
            tmp[o] = 0x0c
        elif c == c'n':
            tmp[o] = c'\n'
        elif c == c'r':
            tmp[o] = c'\r'
        elif c == c't':
            tmp[o] = c'\t'
        elif c == c'v':
            tmp[o] = 0x0b
        else:
            tmp[o] = c
        o += 1
    return PyBytes_FromStringAndSize(<char *>tmp, o)


def copy_text_rows(list lines, Py_ssize_t ncols) -> list:
    """Each line (bytes-like: one row, its newline at the end or not) as a
    tuple of ``ncols`` values: None or bytes. ValueError for a line of
    another number of columns."""
    cdef list out = []
    cdef tuple row
    cdef Py_buffer view
    cdef Py_ssize_t cap = 0
    cdef unsigned char *tmp = NULL      # a value unescaped (never longer than its line)
    cdef unsigned char *grown
    try:
        for line in lines:
            PyObject_GetBuffer(line, &view, PyBUF_SIMPLE)
            try:
                if view.len + 1 > cap:
                    cap = max(view.len + 1, 2 * cap)
                    grown = <unsigned char *>realloc(tmp, cap)
                    if grown == NULL:
                        raise MemoryError()
                    tmp = grown
                row = _row(<const unsigned char *>view.buf, view.len, ncols, tmp)
            finally:
                PyBuffer_Release(&view)
            out.append(row)
    finally:
        free(tmp)
    return out


cdef tuple _row(const unsigned char *s, Py_ssize_t n, Py_ssize_t ncols, unsigned char *tmp):
    """One line's values (``tmp``: room for the line), as an untracked tuple."""
    cdef tuple row
    cdef Py_ssize_t start = 0, i, col = 0
    if n and s[n - 1] == c'\n':
        n -= 1
    if ncols == 0:      # a table of no columns: an empty line a row
        if n:
            raise ValueError("a COPY row of columns, the table has none")
        return ()
    # a tuple freed half made (an error below) has NULL slots: its dealloc skips them
    row = PyTuple_New(ncols)
    for i in range(n + 1):
        if i < n and s[i] != c'\t':
            continue
        if col >= ncols:
            raise ValueError(f"a COPY row of more than {ncols} columns")
        v = _value(s + start, i - start, tmp)
        Py_INCREF(v)            # PyTuple_SET_ITEM takes the reference
        PyTuple_SET_ITEM(row, col, v)
        col += 1
        start = i + 1
    if col != ncols:
        raise ValueError(f"a COPY row of {col} columns, not {ncols}")
    PyObject_GC_UnTrack(<void *>row)      # bytes and None only
    return row
