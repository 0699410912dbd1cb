# cython: language_level=3
"""A consumer's read of the records just appended, in C (issue 72): the
read the fetch plan (fetch_state.pyx) makes of a partition with new
records, without the Python read's calls.

librdkafka's consumers at 100 partitions fetch every millisecond or so,
and each fetch finds a few partitions with a record or two more, all of
them in the active segment's last batches, which the segment keeps in
memory (LogSegment's tail rows, log_state.pyx: base offset, last offset,
position and size of each). The Python read of such a partition -- Partition.read ->
PartitionLog.read -> LogSegment.read -> translate_offset -> FileRegion,
then the listener's pread of the region -- was the largest piece of the
Fetch side per message. ``read_tail`` makes the same read on the same
objects: the bytes are read with one pread into the answer's bytes.

Contract: it serves only the common kind -- a local log (not tiered),
open, its high watermark at its log end (no replica behind: the read
goes to the log end, as the Python read's would), ``offset`` inside the
active segment's in-memory tail, and a region that needs no CRC check
(appended by this process); for read_committed (librdkafka's default),
also the last stable offset at the high watermark (no open transaction)
and no aborted transaction in the active segment -- and returns None for
anything else, having read nothing: the caller then reads in Python.
What it returns is what ``Partition.read(offset, max_bytes,
min_one_message=first, read_committed=...)`` gives as its region, read
(KIP-74: the first batch whole when larger than ``max_bytes`` with
``first``; otherwise the region may end inside a batch), with no aborted
transactions. tests/server/test_fetch_handler.py holds
the answers to the Python path's, on the wire.

Who may call: the fetch plan, on the worker's event-loop thread.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport int64_t
from posix.unistd cimport pread

from kafkalite._ext.log_state cimport LogSegmentState, PartitionLogState


cdef object read_tail(object log_obj, int64_t offset, int64_t high_watermark, int64_t max_bytes,
                      bint first, int64_t most, bint read_committed):
    """The records of ``log`` from ``offset`` (below ``high_watermark``,
    the leader state's), as bytes; None when the read is not the common
    kind (module docstring) or would be longer than ``most`` bytes (the
    caller sends those from the file: sendfile). ``read_committed``: the
    caller has seen that the last stable offset is the high watermark; the
    read is served only when the active segment holds no aborted
    transaction (the answer's list of them is then empty)."""
    cdef int64_t size, position, batch_size, length, verified_end, trusted_from
    cdef int fd
    cdef Py_ssize_t n
    cdef bint known
    cdef const int64_t* entry
    cdef PartitionLogState log = <PartitionLogState?>log_obj
    cdef LogSegmentState seg
    if log._closed or log_obj.remote is not None:
        return None
    if log._log_end != high_watermark or log._high_watermark != high_watermark:
        return None
    segments = log._segments
    # not segments[-1]: the extensions are compiled with wraparound off,
    # where -1 reads before the list's first item
    seg = <LogSegmentState?>segments[len(segments) - 1]
    # translate_offset's search of the in-memory tail, in C (log_state.pyx):
    # the row (base offset, last offset, position, size)
    entry = seg.tail_row(offset, 0, &known)
    if entry == NULL:
        return None             # the tail cannot say, or past its last batch
    # the entries' list itself, not len(txn_index): TransactionIndex.__len__
    # is a Python call, made for every partition read here (librdkafka's
    # consumers read_committed by default)
    if read_committed and len(<list?>seg.txn_index._entries):
        return None         # aborted_from's search: the Python read's
    size = seg._size
    position = entry[2]
    batch_size = entry[3]
    if position >= size:
        return None
    length = min(max_bytes, size - position)
    if first and length < batch_size:
        length = min(batch_size, size - position)
    if length <= 0 or length > most:
        return None
    verified_end = seg.verified_end
    trusted_from = seg.trusted_from
    if max(position, verified_end) < min(position + length, trusted_from):
        return None         # bytes this process did not write: their CRCs are checked first
    fd = seg.file._fd
    if fd < 0:
        return None
    data = PyBytes_FromStringAndSize(NULL, length)
    n = pread(fd, PyBytes_AS_STRING(data), <size_t>length, position)
    if n != length:
        return None         # the Python read reports what is wrong
    return data
