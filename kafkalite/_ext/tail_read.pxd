# cython: language_level=3
# A consumer's read of the records just appended (tail_read.pyx), declared
# here for the fetch plan (fetch_state.pyx) to call without a Python call.
from libc.stdint cimport int64_t


cdef object read_tail(object log_obj, int64_t offset, int64_t high_watermark, int64_t max_bytes,
                      bint first, int64_t most, bint read_committed)
