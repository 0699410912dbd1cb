# cython: language_level=3
# The facts a leader's append reads and changes on a partition's log and its
# active segment, as the C fields of their classes' bases (log_state.pyx),
# declared here so that the one-pass append (leader_append.pyx) reads and
# sets them without a Python attribute lookup.
from libc.stdint cimport int64_t


cdef class PartitionLogState:
    cdef public int64_t _log_start, _log_end, _high_watermark
    cdef public int64_t _leader_epoch
    cdef public int64_t _unflushed_messages, _last_flush_ms
    cdef public bint _closed
    cdef public object config, _clock, producer_state, leader_epoch_cache
    cdef public object _segments, _pending_flushes
    # leader_append.pyx's C copy of ``config``'s settings, remade when config changes
    cdef object append_config


cdef class LogSegmentState:
    cdef public int64_t base_offset, created_ms
    cdef public int64_t _size, next_offset
    cdef public int64_t max_timestamp, offset_of_max_timestamp, first_batch_timestamp
    cdef public int64_t _bytes_since_last_index_entry, _tail_end
    cdef public object config, file, offset_index, time_index
    cdef object append_config          # as PartitionLogState's
    # the in-memory tail (log_state.pyx): rows of (base offset, last offset,
    # position, size), oldest first
    cdef int64_t* tail
    cdef Py_ssize_t tail_count, tail_capacity

    cdef int tail_add_row(self, int64_t base_offset, int64_t last_offset, int64_t position,
                          int64_t size) except -1
    cdef void tail_clear_rows(self) noexcept
    cdef void tail_trim_rows(self) noexcept
    # tail_lookup's search in C: the row (base, last, position, size) or NULL;
    # ``known`` false when the tail cannot say
    cdef const int64_t* tail_row(self, int64_t offset, int64_t start_position,
                                 bint* known) noexcept


cdef class PartitionState:
    cdef public object topic, index, broker_id, leader_id, leader_epoch
    cdef public object log, replicas, isr, pending_isr


cdef class IndexState:
    cdef public int64_t base_offset
    cdef public int64_t _full_size
    cdef public bint full
    cdef public object _data, _last

    # OffsetIndex.append and TimeIndex.maybe_append of their common case:
    # 1 done; 0 when it is not (the entry before not known yet, an entry
    # out of order or out of range): the caller calls the Python method,
    # which does it or raises
    cdef int offset_append(self, int64_t offset, int64_t position) except -1
    cdef int time_maybe_append(self, int64_t timestamp, int64_t offset) except -1
    cdef int _append_entry(self, bytearray data, int64_t a, int a_size, int64_t b,
                           int b_size) except -1
