# cython: language_level=3
# The one-pass leader append (leader_append.pyx), declared here so that the
# one-pass Produce path (produce_frames.pyx) appends a request's batch and
# writes its answer from this C struct, without the tuple ``append_once``
# answers Python callers with.
from libc.stdint cimport int64_t


# What a Produce answer says of an appended batch.
cdef struct Appended:
    int64_t base_offset
    int64_t log_append_time         # -1: CreateTime
    int64_t log_start_offset


# 1: the batch of ``size`` bytes at ``data`` -- ``at`` bytes into
# ``records``, a bytearray or writable memoryview, whose bytes the caller
# holds still -- appended to ``part`` as ReplicaManager.append would, ``out``
# filled; 0: not the common kind, nothing appended. Raises what that path
# raises for a batch the log refuses.
cdef int append_batch(rm, part, records, Py_ssize_t at, Py_ssize_t size, unsigned char* data,
                      Appended* out) except -1
