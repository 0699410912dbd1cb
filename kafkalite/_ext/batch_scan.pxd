# cython: language_level=3
# The broker's batch validation (batch_scan.pyx), declared here so that the
# one-pass leader append (leader_append.pyx) validates a batch in place in
# its request's frame and reads what was found as C fields.
cimport cython
from cpython cimport array
from libc.stdint cimport int32_t, int64_t


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
