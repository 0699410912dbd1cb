# cython: language_level=3
# The two partition lists of the Fetch path, declared here so that the
# replica manager's fetch state (fetch_state.pyx) reads a request's
# partitions and writes a response's without a Python object per
# partition. The implementation is produce_fetch.pyx, whose FetchRequest
# decoder makes the first and whose FetchResponse encoder writes the second.
cimport cython
from libc.stdint cimport int32_t, int64_t


# One partition of a FetchRequest topic, every field of the schema but the
# tagged replica_directory_id (v17, a follower's, always the zero UUID
# here: a request that sets it is decoded by the generated code). Fields a
# version lacks hold the schema's defaults (-1).
cdef struct FetchPartitionEntry:
    int64_t fetch_offset
    int64_t log_start_offset
    int32_t partition
    int32_t current_leader_epoch
    int32_t last_fetched_epoch
    int32_t partition_max_bytes


@cython.final
cdef class FetchPartitionList:
    cdef FetchPartitionEntry* entries
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef list _dicts               # the entries as dicts, made when Python code first asks

    cdef int reserve(self, Py_ssize_t n) except -1
    cdef int append_entry(self, FetchPartitionEntry* e) except -1
    cdef dict entry_dict(self, Py_ssize_t i)
    cdef list as_list(self)


# One partition of a FetchResponse topic: answered inline (``slow`` < 0:
# no error, no records, these three offsets, no preferred read replica,
# the list's aborted transactions) or by the dict ``dicts[slow]``.
cdef struct FetchedEntry:
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset
    int32_t partition_index
    int32_t slow


@cython.final
cdef class FetchedPartitions:
    cdef FetchedEntry* entries
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef public list dicts         # the partitions the Python path answered, in order
    # inline entries' aborted_transactions: [] (a read_committed fetch's) or null
    cdef readonly bint aborted_empty
    cdef list _materialized

    cdef int reserve(self, Py_ssize_t n) except -1
    cdef int add_inline(self, int32_t index, int64_t high_watermark, int64_t last_stable_offset,
                        int64_t log_start_offset) except -1
    cdef int add_slow(self, int32_t index, Py_ssize_t slow) except -1
    cdef dict inline_dict(self, FetchedEntry* e)
    cdef FetchedEntry* _next(self) except NULL
    cdef list _list(self)
