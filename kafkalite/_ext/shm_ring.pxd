# cython: language_level=3
# The shared-memory ring's sink of entries (shm_ring.pyx), declared here so
# that the replica layer appends a ring's entries in C (ring_append.pyx)
# through WorkerCore.append_entries, without the ring knowing the log.
from libc.stdint cimport int16_t, int32_t, int64_t


cdef class EntrySink:
    # 1: the batch of ``size`` bytes at ``data`` (``batch``'s, a private
    # copy) taken, its answer in ``error_code`` (0: appended) and
    # ``base_offset``; 0: declined, nothing appended (poll() hands the
    # entry over). Must not raise for an entry.
    cdef int take(self, str topic, int32_t partition, object batch, unsigned char *data,
                  Py_ssize_t size, int64_t *base_offset, int16_t *error_code) except -1
