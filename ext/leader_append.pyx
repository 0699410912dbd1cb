# cython: language_level=3
"""The common leader append of one record batch in one pass, for the
broker's one-pass Produce path (kafkalite/server/replica/produce_at_once.py,
issue 72).

librdkafka at 100 partitions sends about one Produce request per message,
one partition of one record each, and the write path a partition's batch
takes -- ``ReplicaManager.append`` -> ``Partition.append_as_leader`` ->
``PartitionLog.append`` -> ``_write`` -> ``LogSegment.append`` ->
``_write_at``, then the high watermark, the leader states and the
wake-ups -- was a dozen Python calls a batch: measured with callgrind,
43,000 instructions an append, of which validating the batch took 2,000
and the rest was the interpreter. ``append_once`` does the same steps in
one C function, on the same objects; the facts of the partition, its log
and its active segment it reads and sets are C fields of their classes'
bases (ext/log_state.pyx), each a load or a store here (through the
instance dicts and slots they had been a third of the function's
instructions, and an int object made for each number set).

Contract: it serves only the common kind -- a partition led here with no
other replica (so its high watermark follows its log end at once), its log
open with no rolled segment's fsync to collect, a writable buffer (a
bytearray or a writable view, as the frame's records are) holding
batches that validate (one, as Kafka's clients send; or several, as the
native producer sends behind a request in flight: one write, a tail row
and an index check each, as LogSegment.append's loop), are not a retry,
need no new leader epoch, no roll and no flush -- and returns None for anything else, having changed
nothing in the log (the batch's header may be patched, with what the full
path patches it with again): the caller then appends through
``ReplicaManager.append``. What it serves it serves as that path would,
step for step (the same validation and its errors, producer-state checks
and updates, file write and its rollback on an I/O error, index entries,
in-memory tail, high watermark, leader states, topic stats, wake-ups);
tests/_ext/test_leader_append.py holds it to that path on random appends,
comparing logs, indexes and every state they change.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from posix.unistd cimport pwrite

from kafkalite._ext.batch_scan cimport (COL_BASE_OFFSET, COL_LAST_OFFSET, COL_MAX_TIMESTAMP,
                                       COL_POSITION, COL_SIZE, N_COLS, AppendScan,
                                       validate_batches)
from kafkalite._ext.log_state cimport (IndexState, LogSegmentState, PartitionLogState,
                                      PartitionState)
from kafkalite.storage.leader_epoch import UNDEFINED_EPOCH
from kafkalite.storage.log import _wall_clock_ms
from kafkalite.storage.segment import _INT32_MAX

cdef int64_t INT32_MAX = _INT32_MAX

# A LogConfig's settings this path reads, as C values. LogConfig is frozen
# (a config change gives a log a new one), so these stay the config's own:
# kept on the log and on each segment (their ``append_config``, a C field of
# log_state.pyx's bases), made again when the config object is another.
@cython.final
cdef class _AppendConfig:
    cdef object source
    cdef bint log_append_time, compact
    cdef int64_t max_message_bytes, segment_bytes, segment_ms, segment_jitter_ms
    cdef int64_t flush_messages, flush_ms, index_interval_bytes


cdef _AppendConfig _config_of(cfg):
    cdef _AppendConfig c = _AppendConfig.__new__(_AppendConfig)
    c.source = cfg
    c.log_append_time = cfg.log_append_time
    c.compact = cfg.compact
    c.max_message_bytes = cfg.max_message_bytes
    c.segment_bytes = cfg.segment_bytes
    c.segment_ms = cfg.segment_ms
    c.segment_jitter_ms = cfg.segment_jitter_ms
    c.flush_messages = cfg.flush_messages
    c.flush_ms = cfg.flush_ms
    c.index_interval_bytes = cfg.index_interval_bytes
    return c


cdef inline int64_t _now_ms() noexcept:
    # _wall_clock_ms's int(time.time() * 1000), without its Python call
    cdef timespec ts
    clock_gettime(CLOCK_REALTIME, &ts)
    return <int64_t>ts.tv_sec * 1000 + ts.tv_nsec // 1000000


def append_once(rm, part, records, index):
    """Append ``records`` to ``part`` (a Partition of ReplicaManager ``rm``)
    as ``ReplicaManager.append`` would: the Produce answer (``index``, base
    offset, log append time, log start offset), or None when the append
    is not the common kind (module docstring), nothing appended. Raises
    what that path raises for a batch the log refuses."""
    cdef Appended done
    cdef Py_buffer view
    kind = type(records)
    if not (kind is bytearray or (kind is memoryview and not records.readonly)):
        return None
    try:
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    except BufferError:
        return None     # not one block of writable bytes: the full path's (it copies it)
    try:
        if not append_batch(rm, part, records, 0, view.len, <unsigned char*>view.buf, &done):
            return None
    finally:
        PyBuffer_Release(&view)
    return (index, done.base_offset, done.log_append_time, done.log_start_offset)


cdef int append_batch(rm, part, records, Py_ssize_t at, Py_ssize_t size, unsigned char* data,
                      Appended* out) except -1:
    # append_once's steps, its answer in ``out`` (leader_append.pxd)
    if not isinstance(part, PartitionState):
        return 0
    cdef PartitionState p = <PartitionState>part
    if p.leader_id != p.broker_id or len(p.replicas) != 1 or p.pending_isr is not None:
        return 0
    isr = p.isr
    if len(isr) != 1 or isr[0] != p.broker_id:
        return 0
    if not isinstance(p.log, PartitionLogState):
        return 0
    cdef PartitionLogState log = <PartitionLogState>p.log
    if log._closed or log._pending_flushes:
        return 0
    return _append(rm, p, log, records, at, size, data, out)


cdef inline _AppendConfig _log_config(PartitionLogState log):
    # the log's config as C values, remade when the log is given a new config
    cdef _AppendConfig c = <_AppendConfig>log.append_config
    if c is None or c.source is not log.config:
        c = log.append_config = _config_of(log.config)
    return c


cdef int _append(rm, PartitionState part, PartitionLogState log, records, Py_ssize_t at,
                 Py_ssize_t size_in_bytes, unsigned char* data, Appended* out) except -1:
    # PartitionLog.append, origin CLIENT, no control batches; the log's,
    # segment's and partition's facts are the C fields of their bases
    # (log_state.pyx)
    cdef int64_t epoch = log._leader_epoch
    clock = log._clock
    cdef int64_t now
    if clock is _wall_clock_ms:
        now = _now_ms()
    else:
        now = clock()
    cdef _AppendConfig cfg = _log_config(log)
    cdef int64_t append_time = now if cfg.log_append_time else -1
    # validate_for_append's defaults but these: assign_offsets, deep
    cdef AppendScan scan = validate_batches(
        data, size_in_bytes, log._log_end, <int32_t>epoch, cfg.max_message_bytes, cfg.compact,
        append_time, True, False, True)
    if scan.batch_count < 1:
        return 0
    producer_state = log.producer_state
    cdef bint producer = scan.producer_batch_count != 0
    if producer and producer_state.check(scan) is not None:
        return 0         # a retry: the full path answers its original offsets
    # the cache's latest_epoch, read without its property's Python call
    epochs = log.leader_epoch_cache._entries
    if epoch > (epochs[len(epochs) - 1][0] if epochs else UNDEFINED_EPOCH):
        return 0         # the first append of an epoch: the cache learns it there
    # PartitionLog._write
    cdef int64_t size = scan.size_in_bytes
    cdef int64_t first = scan.first_offset
    cdef int64_t last = scan.last_offset
    cdef int64_t bmax = scan.max_timestamp
    if size > cfg.segment_bytes:
        return 0         # RecordListTooLargeError, the full path's
    segments = log._segments
    if type(segments) is not list or not segments:
        return 0
    seg = (<list>segments)[len(<list>segments) - 1]   # (no negative indexes: wraparound=False)
    if not isinstance(seg, LogSegmentState):
        return 0
    cdef LogSegmentState active = <LogSegmentState>seg
    if _should_roll(active, cfg, size, last, bmax, now):
        return 0
    _segment_append(active, scan, records, at, data, first, last, size, bmax)
    log._log_end = last + 1
    cdef int64_t record_count = scan.record_count
    if producer:
        for txn in producer_state.update(scan):
            if txn.aborted:
                log._index_aborted(txn, seg)
    log._unflushed_messages += record_count
    if log._unflushed_messages >= cfg.flush_messages or now - log._last_flush_ms >= cfg.flush_ms:
        log.flush()
    # Partition.maybe_increment_high_watermark: the leader is the whole ISR
    cdef int64_t end = log._log_end
    cdef bint moved = end > log._high_watermark
    if moved:
        log._high_watermark = end
    cdef int64_t log_start = log._log_start
    _published(rm, part, log, size, record_count, moved)
    out.base_offset = first
    out.log_append_time = append_time
    out.log_start_offset = log_start
    return 1


cdef int _published(rm, PartitionState part, PartitionLogState log, int64_t size,
                    int64_t record_count, bint moved) except -1:
    # ReplicaManager._publish, then ReplicaManager.append's stats and wake-ups
    cdef int64_t hw = log._high_watermark
    cdef int64_t lso = hw
    producer_state = log.producer_state
    if producer_state.ongoing:
        lso = min(hw, <int64_t>producer_state.first_unstable_offset())
    rm.leader_states.publish(part.topic, part.index, hw, lso, log._log_start, part.leader_epoch)
    cdef dict topic_stats = rm.topic_stats
    stats = topic_stats.get(part.topic)
    if stats is None:
        stats = topic_stats[part.topic] = [0, 0, 0]
    stats[0] += size
    stats[1] += record_count
    # ``rm.purgatory`` is true while operations wait (its __len__, a Python call)
    if size and moved and rm.purgatory.__dict__["_heap"]:
        woken = rm._woken
        key = (part.topic, part.index)
        if woken is None:
            rm._wake_now(key, size)
        else:
            woken[key] = woken.get(key, 0) + size
    return 0


cdef inline bint _full(index) except -1:
    # an index's ``full``, a C field of IndexState
    if isinstance(index, IndexState):
        return (<IndexState>index).full
    return index.full


cdef bint _should_roll(LogSegmentState seg, _AppendConfig cfg, int64_t size, int64_t last,
                       int64_t max_timestamp, int64_t now) except -1:
    # LogSegment.should_roll
    cdef int64_t seg_size = seg._size
    if not seg_size:
        return False
    cdef int64_t first_ts = seg.first_batch_timestamp
    cdef int64_t waited = max_timestamp - first_ts if first_ts >= 0 else now - seg.created_ms
    return (seg_size + size > cfg.segment_bytes
            or waited > cfg.segment_ms - cfg.segment_jitter_ms
            or _full(seg.offset_index) or _full(seg.time_index)
            or last - seg.base_offset > INT32_MAX)


cdef int _index_entries(LogSegmentState seg, int64_t last, int64_t position, int64_t max_ts,
                        int64_t max_off) except -1:
    # seg.offset_index.append(last, position), seg.time_index.maybe_append(max_ts, max_off):
    # in C when the indexes are IndexStates and the entries the common case
    oi, ti = seg.offset_index, seg.time_index
    if not (isinstance(oi, IndexState) and (<IndexState>oi).offset_append(last, position)):
        oi.append(last, position)
    if not (isinstance(ti, IndexState) and (<IndexState>ti).time_maybe_append(max_ts, max_off)):
        ti.maybe_append(max_ts, max_off)
    return 0


cdef int _segment_append(LogSegmentState seg, AppendScan scan, records, Py_ssize_t at,
                         unsigned char* data, int64_t first, int64_t last, int64_t size,
                         int64_t bmax) except -1:
    # LogSegment.append of the scan's batches (one write), and its _write_at
    cdef int64_t start = seg._size
    # SegmentFile.fileno() without its Python call; a closed one's raises
    segment_file = seg.file
    cdef int fd = segment_file._fd
    if fd < 0:
        fd = segment_file.fileno()
    cdef Py_ssize_t total = size
    cdef Py_ssize_t done
    with nogil:
        done = pwrite(fd, data, total, start)
    if done != total:
        # a short write or an error: the Python path resumes it, or rolls
        # the file back and raises KafkaStorageError
        seg._write_at(memoryview(records)[at:at + total], start)
    else:
        seg._size = start + total
    # the segment's own config (a config change reaches the next segment)
    cdef _AppendConfig cfg = <_AppendConfig>seg.append_config
    if cfg is None or cfg.source is not seg.config:
        cfg = seg.append_config = _config_of(seg.config)
    cdef int64_t since = seg._bytes_since_last_index_entry
    cdef int64_t max_ts = seg.max_timestamp
    cdef int64_t max_off = seg.offset_of_max_timestamp
    if seg._tail_end != start:
        seg.tail_clear_rows()           # what it held no longer ends at the file's end
    cdef Py_ssize_t n = scan.batch_count
    cdef Py_ssize_t i
    cdef int64_t* row
    cdef int64_t pos
    if n == 1:
        # one batch: its figures are the scan's own
        seg.tail_add_row(first, last, start, size)
        if bmax > max_ts:
            max_ts, max_off = bmax, last
        if since > cfg.index_interval_bytes:
            _index_entries(seg, last, start, max_ts, max_off)
            since = 0
        since += size
    else:
        # several batches of a partition in one records field (the native
        # producer's, behind a request in flight): LogSegment.append's loop,
        # a tail row and Kafka's index rule per batch, from the scan's table
        for i in range(n):
            row = &(<int64_t*>scan.table.data.as_voidptr)[i * N_COLS]
            pos = start + row[COL_POSITION]
            seg.tail_add_row(row[COL_BASE_OFFSET], row[COL_LAST_OFFSET], pos, row[COL_SIZE])
            if row[COL_MAX_TIMESTAMP] > max_ts:
                max_ts, max_off = row[COL_MAX_TIMESTAMP], row[COL_LAST_OFFSET]
            if since > cfg.index_interval_bytes:
                _index_entries(seg, row[COL_LAST_OFFSET], pos, max_ts, max_off)
                since = 0
            since += row[COL_SIZE]
        # LogSegment.append's first_batch_timestamp: the first batch's
        bmax = (<int64_t*>scan.table.data.as_voidptr)[COL_MAX_TIMESTAMP]
    seg._bytes_since_last_index_entry = since
    seg.max_timestamp = max_ts
    seg.offset_of_max_timestamp = max_off
    seg.tail_trim_rows()
    seg._tail_end = seg._size
    if start == 0:
        seg.first_batch_timestamp = bmax
    seg.next_offset = last + 1
    return 0
