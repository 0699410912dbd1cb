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
one C function, on the same objects.

Contract: it serves only the common kind -- a partition led here with no
other replica (so its high watermark follows its log end at once), its log
open with no rolled segment's fsync to collect, a writable buffer (a
bytearray or a writable view, as the frame's records are) holding one
batch that validates, is not a retry, needs no new leader epoch, no roll
and no flush -- and returns None for anything else, having changed
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
from libc.stdint cimport int64_t
from posix.time cimport CLOCK_REALTIME, clock_gettime, timespec
from posix.unistd cimport pwrite

from kafkalite._ext.batch_scan import validate_for_append
from kafkalite.storage.leader_epoch import UNDEFINED_EPOCH
from kafkalite.storage.log import _wall_clock_ms
from kafkalite.storage.segment import _INT32_MAX, _TAIL_BATCHES

cdef Py_ssize_t TAIL_BATCHES = _TAIL_BATCHES
cdef int64_t INT32_MAX = _INT32_MAX

# A LogConfig's settings this path reads, as C values. LogConfig is frozen
# (a config change gives a log a new one), so the values stay the config's
# own: kept per config object, looked up by its identity, the config held so
# that its id is not reused while kept. Bounded: thrown away and remade if
# configs keep changing.
cdef dict _configs = {}
cdef Py_ssize_t MAX_CONFIGS = 4096


@cython.final
cdef class _AppendConfig:
    cdef object source
    cdef bint log_append_time, compact
    cdef int64_t max_message_bytes, segment_bytes, segment_ms, segment_jitter_ms
    cdef int64_t flush_messages, flush_ms, index_interval_bytes


cdef _AppendConfig _config_of(cfg):
    cdef object key = <Py_ssize_t><void*>cfg
    cdef _AppendConfig c = _configs.get(key)
    if c is not None and c.source is cfg:
        return c
    c = _AppendConfig.__new__(_AppendConfig)
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
    if len(_configs) >= MAX_CONFIGS:
        _configs.clear()
    _configs[key] = c
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
    if not append_batch(rm, part, records, &done):
        return None
    return (index, done.base_offset, done.log_append_time, done.log_start_offset)


cdef int append_batch(rm, part, records, Appended* out) except -1:
    # append_once's steps, its answer in ``out`` (leader_append.pxd)
    if part.leader_id != part.broker_id or len(part.replicas) != 1 or part.pending_isr is not None:
        return 0
    isr = part.isr
    if len(isr) != 1 or isr[0] != part.broker_id:
        return 0
    log = part.log
    if log._closed or log._pending_flushes:
        return 0
    kind = type(records)
    if not (kind is bytearray or (kind is memoryview and not records.readonly)):
        return 0
    cdef Py_buffer view
    try:
        PyObject_GetBuffer(records, &view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    except BufferError:
        return 0    # not one block of writable bytes: the full path's (it copies it)
    try:
        return _append(rm, part, log, records, &view, out)
    finally:
        PyBuffer_Release(&view)


cdef int _append(rm, part, log, records, Py_buffer* view, Appended* out) except -1:
    # PartitionLog.append, origin CLIENT, no control batches. The log's,
    # its segment's and its config's plain attributes are read and set in
    # their instance dicts: from C, ``obj.attr`` walks the type for a
    # descriptor first, and those walks were a third of this function's
    # instructions (none of these names is a descriptor of its class).
    cdef dict ld = log.__dict__
    cdef int64_t epoch = ld["_leader_epoch"]
    clock = ld["_clock"]
    cdef int64_t now
    if clock is _wall_clock_ms:
        now = _now_ms()
    else:
        now = clock()
    cdef _AppendConfig cfg = _config_of(ld["config"])
    cdef int64_t append_time = now if cfg.log_append_time else -1
    scan = validate_for_append(
        records, next_offset=ld["_log_end"], leader_epoch=epoch,
        max_batch_bytes=cfg.max_message_bytes, require_keys=cfg.compact,
        log_append_time=append_time, allow_control=False)
    if scan.batch_count != 1:
        return 0
    producer_state = ld["producer_state"]
    cdef bint producer = scan.producer_batch_count != 0
    if producer and producer_state.check(scan) is not None:
        return 0         # a retry: the full path answers its original offsets
    # the cache's latest_epoch, read without its property's Python call
    epochs = ld["leader_epoch_cache"].__dict__["_entries"]
    if epoch > (epochs[len(epochs) - 1][0] if epochs else UNDEFINED_EPOCH):
        return 0         # the first append of an epoch: the cache learns it there
    # PartitionLog._write
    cdef int64_t size = scan.size_in_bytes
    cdef int64_t first = scan.first_offset
    cdef int64_t last = scan.last_offset
    cdef int64_t bmax = scan.max_timestamp
    if size > cfg.segment_bytes:
        return 0         # RecordListTooLargeError, the full path's
    cdef list segments = ld["_segments"]
    seg = segments[len(segments) - 1]     # (no negative indexes: setup.py's wraparound=False)
    cdef dict sd = seg.__dict__
    if _should_roll(sd, cfg, size, last, bmax, now):
        return 0
    _segment_append(seg, sd, records, view, first, last, size, bmax)
    ld["_log_end"] = last + 1
    if producer:
        for txn in producer_state.update(scan):
            if txn.aborted:
                log._index_aborted(txn, seg)
    cdef int64_t unflushed = ld["_unflushed_messages"] + scan.record_count
    ld["_unflushed_messages"] = unflushed
    if unflushed >= cfg.flush_messages or now - ld["_last_flush_ms"] >= cfg.flush_ms:
        log.flush()
    # Partition.maybe_increment_high_watermark: the leader is the whole ISR
    cdef int64_t end = ld["_log_end"]
    cdef bint moved = end > ld["_high_watermark"]
    if moved:
        ld["_high_watermark"] = end
    # ReplicaManager._publish
    ongoing = producer_state.ongoing
    hw = ld["_high_watermark"]
    lso = hw if not ongoing else min(hw, producer_state.first_unstable_offset())
    log_start = ld["_log_start"]
    rm.leader_states.publish(part.topic, part.index, hw, lso, log_start, part.leader_epoch)
    # ReplicaManager.append: stats and wake-ups
    cdef dict topic_stats = rm.topic_stats
    stats = topic_stats.get(part.topic)
    if stats is None:
        stats = topic_stats[part.topic] = [0, 0, 0]
    stats[0] += size
    stats[1] += scan.record_count
    # ``rm.purgatory`` is true while operations wait (its __len__, a Python call)
    if size and moved and rm.purgatory.__dict__["_heap"]:
        woken = rm._woken
        if woken is None:
            rm._wake_now(part.key, size)
        else:
            key = part.key
            woken[key] = woken.get(key, 0) + size
    out.base_offset = first
    out.log_append_time = append_time
    out.log_start_offset = log_start
    return 1


cdef bint _should_roll(dict sd, _AppendConfig cfg, int64_t size, int64_t last, int64_t max_timestamp,
                       int64_t now) except -1:
    # LogSegment.should_roll (``sd``: the segment's instance dict)
    cdef int64_t seg_size = sd["_size"]
    if not seg_size:
        return False
    cdef int64_t first_ts = sd["first_batch_timestamp"]
    cdef int64_t waited = max_timestamp - first_ts if first_ts >= 0 else now - sd["created_ms"]
    return (seg_size + size > cfg.segment_bytes
            or waited > cfg.segment_ms - cfg.segment_jitter_ms
            or sd["offset_index"].full or sd["time_index"].full
            or last - <int64_t>sd["base_offset"] > INT32_MAX)


cdef int _segment_append(seg, dict sd, records, Py_buffer* view, int64_t first, int64_t last,
                         int64_t size, int64_t bmax) except -1:
    # LogSegment.append of one batch, and its _write_at (``sd``: its instance dict)
    cdef int64_t start = sd["_size"]
    # SegmentFile.fileno() without its Python call; a closed one's raises
    segment_file = sd["file"]
    cdef int fd = segment_file._fd
    if fd < 0:
        fd = segment_file.fileno()
    cdef Py_ssize_t total = view.len
    cdef Py_ssize_t done
    with nogil:
        done = pwrite(fd, view.buf, total, start)
    if done != total:
        # a short write or an error: the Python path resumes it, or rolls
        # the file back and raises KafkaStorageError
        seg._write_at(records, start)
    else:
        sd["_size"] = start + total
    cdef int64_t since = sd["_bytes_since_last_index_entry"]
    # the segment's own config (a config change reaches the next segment)
    cdef int64_t interval = _config_of(sd["config"]).index_interval_bytes
    cdef int64_t max_ts = sd["max_timestamp"]
    max_off = sd["offset_of_max_timestamp"]
    cdef list tail = sd["_tail"]
    cdef list lasts = sd["_tail_lasts"]
    if sd["_tail_end"] != start:
        del tail[:], lasts[:]          # what they held no longer ends at the file's end
    tail.append((first, last, start, size))
    lasts.append(last)
    if bmax > max_ts:
        max_ts, max_off = bmax, last
    if since > interval:
        sd["offset_index"].append(last, start)
        sd["time_index"].maybe_append(max_ts, max_off)
        since = 0
    since += size
    sd["_bytes_since_last_index_entry"] = since
    sd["max_timestamp"] = max_ts
    sd["offset_of_max_timestamp"] = max_off
    cdef Py_ssize_t over = len(tail) - TAIL_BATCHES
    if over > TAIL_BATCHES:
        del tail[:over], lasts[:over]
    sd["_tail_end"] = sd["_size"]
    if start == 0:
        sd["first_batch_timestamp"] = bmax
    sd["next_offset"] = last + 1
    return 0
