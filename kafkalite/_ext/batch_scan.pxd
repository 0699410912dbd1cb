# cython: language_level=3
# The broker's batch validation (batch_scan.pyx), declared here so that the
# one-pass leader append (leader_append.pyx) validates a batch in place in
# its request's frame and reads what was found as C fields.
cimport cython
from cpython cimport array
from libc.stdint cimport int32_t, int64_t


# Columns of AppendScan's per-batch table (``table``: batch_count rows of
# N_COLS int64s), in batch_scan.pyx's order.
cdef enum:
    COL_POSITION, COL_SIZE, COL_BASE_OFFSET, COL_LAST_OFFSET, COL_MAX_TIMESTAMP
    COL_LEADER_EPOCH, COL_PRODUCER_ID, COL_PRODUCER_EPOCH, COL_BASE_SEQUENCE
    COL_ATTRIBUTES, COL_RECORD_COUNT, COL_CONTROL_TYPE, N_COLS


@cython.final
cdef class AppendScan:
    cdef readonly int64_t first_offset
    cdef readonly int64_t last_offset
    cdef readonly int64_t record_count
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_of_max_timestamp  # last offset of the batch holding it
    cdef readonly Py_ssize_t batch_count
    cdef readonly Py_ssize_t producer_batch_count
    cdef readonly Py_ssize_t size_in_bytes
    cdef readonly array.array table                 # int64, batch_count rows of N_COLS

    cdef array.array _column(self, Py_ssize_t col)


# validate_for_append of the ``n`` bytes at ``base`` (writable when it
# patches: assign_offsets, deep or log_append_time >= 0), its arguments in
# its order, without a Python call
cdef AppendScan validate_batches(unsigned char *base, Py_ssize_t n, int64_t next_offset,
                                 int32_t leader_epoch, Py_ssize_t max_batch_bytes,
                                 bint require_keys, int64_t log_append_time, bint assign_offsets,
                                 bint allow_control, bint deep)
