# cython: language_level=3
# The replica manager's table of leader states and a long poll's watches
# (fetch_state.pyx), declared here so that an incremental fetch session's
# partitions (fetch_session_state.pyx) plan a fetch from the same table.
cimport cython
from libc.stdint cimport int32_t, int64_t

from kafkalite._ext.produce_fetch cimport FetchedPartitions, FetchPartitionEntry


cdef struct LeaderState:
    int64_t high_watermark
    int64_t last_stable_offset
    int64_t log_start_offset
    int64_t* waiters            # purgatory ids of the long-poll fetches watching it
    int32_t n_waiters
    int32_t cap_waiters
    int32_t leader_epoch
    int32_t leading             # this broker leads it, its log open


# What a fetch's reads in C (tail_read.pyx) have used so far, in its order:
# KIP-74's byte budget left, whether the next read is the first with
# records, and the answer's bytes read into memory, each read at most
# ``region_max``, all at most ``answer_max`` (larger ones are sent from the
# file).
cdef struct ReadBudget:
    int64_t budget
    int64_t read_bytes
    int64_t region_max
    int64_t answer_max
    Py_ssize_t read_count
    bint first


@cython.final
cdef class TopicStates:
    cdef readonly str name
    cdef LeaderState* states
    cdef Py_ssize_t size
    cdef list partitions        # by partition number: its Partition, for reads in C (or None)

    cdef LeaderState* at(self, int32_t partition) noexcept
    cdef LeaderState* make(self, int32_t partition) except NULL


@cython.final
cdef class LeaderStates:
    cdef dict topics                    # name -> TopicStates
    cdef readonly Py_ssize_t watching   # waiters registered, over all partitions

    cpdef TopicStates topic(self, name)
    cdef int add_waiter(self, LeaderState* s, int64_t waiter) except -1
    cdef void remove_waiter(self, LeaderState* s, int64_t waiter) noexcept


@cython.final
cdef class Watches:
    cdef list topics                     # TopicStates, by the index in ``topic``
    cdef dict topic_index                # TopicStates -> its index
    cdef int32_t* topic
    cdef int32_t* partition
    cdef Py_ssize_t size
    cdef Py_ssize_t cap
    cdef list answered                   # (TopicStates, FetchedPartitions)
    cdef Py_ssize_t inline

    cdef int add_inline_of(self, TopicStates ts, FetchedPartitions fp, Py_ssize_t n) except -1
    cdef int32_t index_of(self, TopicStates ts) except -1
    cdef int add(self, int32_t topic, int32_t partition) except -1
    cdef int each(self, LeaderStates table, int64_t waiter, bint add) except -1


cdef object read_new_records(TopicStates ts, FetchPartitionEntry* e, bint read_committed,
                             ReadBudget* b, dict sent)


cdef inline LeaderState* idle_state(TopicStates ts, FetchPartitionEntry* e,
                                    bint read_committed) noexcept:
    """The state answering ``e`` when it is idle (fetch_state.pyx's
    docstring), else NULL."""
    cdef LeaderState* s = ts.at(e.partition)
    if s == NULL or not s.leading:
        return NULL
    if e.current_leader_epoch >= 0 and e.current_leader_epoch != s.leader_epoch:
        return NULL
    if e.fetch_offset != (s.last_stable_offset if read_committed else s.high_watermark):
        return NULL
    if e.fetch_offset < s.log_start_offset:
        # records deleted past an open transaction's start: the LSO is below
        # the log start, and a read there is out of range
        return NULL
    return s
