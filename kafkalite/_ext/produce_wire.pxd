# cython: language_level=3
# The common Produce request of one topic of one partition (librdkafka's at
# many partitions) read from its frame and answered into a buffer without a
# Python object (produce_wire.pyx), declared here for the one-pass Produce
# path (produce_frames.pyx).
from libc.stdint cimport int32_t, int64_t, uint8_t


# Positions are from the start of the frame (header + body, no size prefix).
cdef struct OneProduce:
    int32_t version
    int32_t correlation_id
    int32_t acks
    int32_t index                   # the partition's
    Py_ssize_t name_at, name_size   # the topic name's UTF-8 bytes (not checked)
    Py_ssize_t records_at, records_size


cdef enum:
    # an answer of one partition at most, but for the topic name's bytes:
    # size, header and tags, counts and lengths as varints of up to 5
    # bytes, the partition (index, error, three offsets, record errors,
    # error message, tags), the topic's tags, throttle time, tags
    ONE_ANSWER_BYTES = 4 + 4 + 1 + 5 + 5 + 5 + (4 + 2 + 8 * 3 + 4 + 2 + 1) + 1 + 4 + 1


cdef int read_one_produce(const uint8_t* p, Py_ssize_t size, OneProduce* out) noexcept
cdef char* write_one_answer(char* start, int version, int correlation_id, const char* name,
                            Py_ssize_t name_size, int64_t index, int64_t base_offset,
                            int64_t log_append_time, int64_t log_start_offset) noexcept


# A request of several partitions (the native producer's: the partitions a
# worker leads whose batches were ready), read into rows without a Python
# object: the head's fields and one row per partition, in request order
# (``rows`` has room for ``room`` of them, at most MAX_ROWS).
cdef struct ProduceHead:
    int32_t version
    int32_t correlation_id
    int32_t acks


cdef struct ProduceRow:
    int32_t topic                   # the topic's ordinal in the request
    int32_t index                   # the partition's
    Py_ssize_t name_at, name_size   # the topic name's UTF-8 bytes (not checked)
    Py_ssize_t records_at, records_size


cdef enum:
    # more partitions: read_produce's (Python objects). A producer behind
    # sends one batch run of every partition the worker leads: all 100 of
    # the 100-partition workload's under load.
    MAX_ROWS = 4096
    MORE_ROWS = -1                  # read_produce_rows: more partitions than its room


cdef Py_ssize_t read_produce_rows(const uint8_t* p, Py_ssize_t size, ProduceHead* head,
                                  ProduceRow* rows, Py_ssize_t room) noexcept
cdef Py_ssize_t rows_answer_bytes(ProduceRow* rows, Py_ssize_t n) noexcept
cdef char* write_rows_answer(char* start, int version, int correlation_id, const char* p,
                             ProduceRow* rows, const int64_t* offsets, Py_ssize_t n) noexcept
