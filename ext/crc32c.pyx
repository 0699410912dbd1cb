"""CRC-32C (Castagnoli), the checksum of Kafka RecordBatch v2.

``crc32c`` uses the SSE4.2 instruction when the CPU has it (checked once at
import) and slicing-by-8 tables otherwise; ``crc32c_sw`` and ``crc32c_hw``
force one path (tests and benchmarks compare them). All take any object with
the buffer protocol and an optional running CRC, so that
``crc32c(b, crc32c(a)) == crc32c(a + b)``. The GIL is released for inputs
large enough for that to pay.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE

cimport crc32c_c as c

c.kl_crc32c_init()

# Below this size releasing the GIL costs more than the checksum itself.
DEF NOGIL_THRESHOLD = 65536

HARDWARE = bool(c.kl_crc32c_has_hw())


cdef inline unsigned int _run(object data, unsigned int value, int which) except? 0xFFFFFFFF:
    cdef Py_buffer view
    cdef unsigned int result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if which == 0:
            if view.len >= NOGIL_THRESHOLD:
                with nogil:
                    result = c.kl_crc32c(value, <const unsigned char *>view.buf, view.len)
            else:
                result = c.kl_crc32c(value, <const unsigned char *>view.buf, view.len)
        elif which == 1:
            with nogil:
                result = c.kl_crc32c_sw(value, <const unsigned char *>view.buf, view.len)
        else:
            with nogil:
                result = c.kl_crc32c_hw(value, <const unsigned char *>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return result


def crc32c(data, unsigned int value=0):
    """CRC-32C of ``data``, continuing from ``value`` (a previous result)."""
    return _run(data, value, 0)


def crc32c_sw(data, unsigned int value=0):
    """CRC-32C through the table-driven software path."""
    return _run(data, value, 1)


def crc32c_hw(data, unsigned int value=0):
    """CRC-32C through the SSE4.2 instruction; RuntimeError if the CPU lacks it."""
    if not HARDWARE:
        raise RuntimeError("this CPU has no SSE4.2 crc32 instruction; use crc32c_sw")
    return _run(data, value, 2)
