# cython: language_level=3
"""Log-side batch scanning: validate-and-assign on append, verify on recovery.

Two entry points, both a single C loop over concatenated RecordBatch v2
bytes (layout in ``wire.h``):

``validate_for_append`` is the broker's LogValidator: it checks every batch a
producer (or a leader, for a follower) sent -- length, magic, CRC, size
limit, codec, control bit, record framing, offset deltas, keys for compacted
topics -- and only when *all* batches pass does it patch baseOffset and
partitionLeaderEpoch in place (neither is covered by the CRC), plus the
LogAppendTime timestamp (which is, so the CRC is recomputed then). A
rejected append therefore leaves the caller's buffer untouched.

``scan_log`` walks a segment file's bytes for recovery and verification and
reports where the valid prefix ends, what the indexes should contain, and
which leader epochs start where.

Who may call: the partition's owner (storage layer); no shared state.
"""
cimport cython
from cpython cimport array
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t, INT32_MAX
from libc.stdlib cimport free, malloc, realloc

from batch cimport batch_crc, decompressed_section
cimport crc32c_c as crcmod
from wire_c cimport *

import array

from kafkalite.errors import (CorruptRecordError, InvalidRecordError, InvalidTimestampError,
                              MessageTooLargeError, UnsupportedCompressionTypeError,
                              UnsupportedForMessageFormatError)

crcmod.kl_crc32c_init()


cdef array.array _INT64 = array.array("q")



ctypedef struct RecordCheck:
    int64_t max_timestamp
    int64_t offset_of_max   # as a delta
    int error               # 0 ok, else a code below
    int32_t index           # record index of the error
    int64_t detail

cdef enum:
    ERR_NONE = 0
    ERR_FRAMING = 1         # detail: kl_parse_record code
    ERR_COUNT = 2           # fewer records than the header says
    ERR_TRAILING = 3        # bytes after the last record
    ERR_OFFSET_DELTA = 4    # detail: the delta found
    ERR_NO_KEY = 5
    ERR_LAST_DELTA = 6


cdef void _check_records(const unsigned char *p, const unsigned char *end, int32_t count,
                         int64_t base_ts, bint sequential, bint require_keys,
                         int32_t last_offset_delta, RecordCheck *out) noexcept nogil:
    """Walk a (decompressed) records section; fills ``out``."""
    cdef kl_record r
    cdef int rc
    cdef int32_t i
    cdef int64_t prev = -1, ts
    out.error = ERR_NONE
    out.max_timestamp = -1
    out.offset_of_max = -1
    for i in range(count):
        rc = kl_parse_record(p, end, &r)
        if rc != KL_REC_OK:
            out.error = ERR_FRAMING
            out.index = i
            out.detail = rc
            return
        if (sequential and r.offset_delta != i) or r.offset_delta <= prev \
                or r.offset_delta > last_offset_delta:
            out.error = ERR_OFFSET_DELTA
            out.index = i
            out.detail = r.offset_delta
            return
        prev = r.offset_delta
        if require_keys and r.key_len < 0:
            out.error = ERR_NO_KEY
            out.index = i
            return
        ts = base_ts + r.timestamp_delta
        if i == 0 or ts > out.max_timestamp:
            out.max_timestamp = ts
            out.offset_of_max = r.offset_delta
        p = r.end
    if p != end:
        out.error = ERR_TRAILING
        out.detail = end - p
        return
    if sequential and count > 0 and last_offset_delta != count - 1:
        out.error = ERR_LAST_DELTA
        out.detail = last_offset_delta


cdef int _check_batch_records(const unsigned char *b, Py_ssize_t size, int32_t count,
                              int codec, bint sequential, bint require_keys,
                              RecordCheck *chk) except -1:
    """Walk the records of the batch at ``b`` (``size`` bytes), decompressing
    them first if needed; the compression codecs raise CorruptRecordError
    when the section does not decompress."""
    cdef bytes section
    cdef int64_t base_ts = <int64_t>kl_be64(b + KL_OFF_BASE_TIMESTAMP)
    cdef int32_t last_delta = <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA)
    if codec == KL_CODEC_NONE:
        _check_records(b + KL_BATCH_HEADER_SIZE, b + size, count, base_ts, sequential,
                       require_keys, last_delta, chk)
        return 0
    section = decompressed_section(b, size, codec)
    _check_records(<const unsigned char *>PyBytes_AS_STRING(section),
                   <const unsigned char *>PyBytes_AS_STRING(section) + PyBytes_GET_SIZE(section),
                   count, base_ts, sequential, require_keys, last_delta, chk)
    return 0


cdef list _keyless_records(const unsigned char *b, Py_ssize_t size, int32_t count, int codec):
    """The indexes of the batch's records that have no key (KIP-467's
    record_errors of a compacted topic's refused batch); the error path
    only, once the batch is known to hold one. A record that does not
    parse ends the walk: the framing error is reported on its own."""
    cdef bytes section
    cdef const unsigned char *p
    cdef const unsigned char *end
    cdef kl_record r
    cdef int32_t i
    cdef list out = []
    if codec == KL_CODEC_NONE:
        p, end = b + KL_BATCH_HEADER_SIZE, b + size
    else:
        section = decompressed_section(b, size, codec)
        p = <const unsigned char *>PyBytes_AS_STRING(section)
        end = p + PyBytes_GET_SIZE(section)
    for i in range(count):
        if kl_parse_record(p, end, &r) != KL_REC_OK:
            break
        if r.key_len < 0:
            out.append(i)
        p = r.end
    return out


cdef object _record_error(RecordCheck *c, int64_t position, int32_t count):
    where = f"batch at byte {position}"
    if c.error == ERR_FRAMING:
        return CorruptRecordError(f"{where}, record {c.index}: "
                                  f"{kl_record_error(<int>c.detail).decode()}")
    if c.error == ERR_COUNT:
        return CorruptRecordError(f"{where} holds fewer records than its count of {count}")
    if c.error == ERR_TRAILING:
        return CorruptRecordError(f"{where} has {c.detail} bytes after its {count} records")
    if c.error == ERR_OFFSET_DELTA:
        return InvalidRecordError(f"{where}, record {c.index}: offset delta {c.detail} is out "
                                  f"of sequence")
    if c.error == ERR_NO_KEY:
        return InvalidRecordError(f"{where}, record {c.index}: compacted topics require a "
                                  f"key on every record")
    if c.error == ERR_LAST_DELTA:
        return InvalidRecordError(f"{where}: lastOffsetDelta {c.detail} does not match its "
                                  f"{count} records")
    return CorruptRecordError(f"{where} is malformed")


# Columns of AppendScan's per-batch table: COL_* and N_COLS, declared in
# kafkalite/_ext/batch_scan.pxd (the one-pass append reads a scan's rows).


@cython.final
cdef class AppendScan:
    """What ``validate_for_append`` found and assigned.

    Per batch, as int64 columns (``array.array('q')``) of one table, in order:
    ``positions`` within the buffer, ``sizes``, ``base_offsets`` and
    ``last_offsets`` (as assigned), ``max_timestamps``, ``leader_epochs``
    (as written), ``producer_ids``, ``producer_epochs``, ``base_sequences``,
    ``attributes``, ``record_counts``, ``control_types`` (the marker type of
    a control batch, CONTROL_ABORT or CONTROL_COMMIT; CONTROL_UNKNOWN for
    data batches). ``producer_batch_count`` says how
    many batches carry a producer id (idempotent or transactional), so the
    common case needs no look at the table at all.
    """
    # its fields: kafkalite/_ext/batch_scan.pxd (the one-pass append reads them from C)

    @property
    def next_offset(self):
        return self.last_offset + 1

    @property
    def positions(self):
        return self._column(COL_POSITION)

    @property
    def sizes(self):
        return self._column(COL_SIZE)

    @property
    def base_offsets(self):
        return self._column(COL_BASE_OFFSET)

    @property
    def last_offsets(self):
        return self._column(COL_LAST_OFFSET)

    @property
    def max_timestamps(self):
        return self._column(COL_MAX_TIMESTAMP)

    @property
    def leader_epochs(self):
        return self._column(COL_LEADER_EPOCH)

    @property
    def producer_ids(self):
        return self._column(COL_PRODUCER_ID)

    @property
    def producer_epochs(self):
        return self._column(COL_PRODUCER_EPOCH)

    @property
    def base_sequences(self):
        return self._column(COL_BASE_SEQUENCE)

    @property
    def attributes(self):
        return self._column(COL_ATTRIBUTES)

    @property
    def record_counts(self):
        return self._column(COL_RECORD_COUNT)

    @property
    def control_types(self):
        return self._column(COL_CONTROL_TYPE)

    cdef array.array _column(self, Py_ssize_t col):
        cdef array.array out = array.clone(_INT64, self.batch_count, zero=False)
        cdef const int64_t[::1] t = self.table
        cdef Py_ssize_t i
        for i in range(self.batch_count):
            out.data.as_longlongs[i] = t[i * N_COLS + col]
        return out

    def producer_rows(self):
        """(producer id, producer epoch, first sequence, last sequence, base
        offset, last offset, max timestamp, attributes, control type) of the
        batches that carry a producer id, in order: what the producer state
        checks and records (producer_state.py), read straight from the
        table, a tuple per batch and no column copied out (one-record
        batches of many partitions make this a per-append cost). The last
        sequence wraps after INT32 max, and is the first one when that is
        negative (no sequence), as Kafka's RecordBatch.lastSequence."""
        cdef const int64_t *t
        cdef Py_ssize_t i
        cdef const int64_t *r
        cdef int64_t seq, last_seq
        cdef list out = []
        if self.producer_batch_count == 0:
            return out
        # the array's own pointer: a typed memoryview of it costs more to
        # set up than a one-batch append's rows take to read
        t = <const int64_t *>self.table.data.as_longlongs
        for i in range(self.batch_count):
            r = &t[i * N_COLS]
            if r[COL_PRODUCER_ID] < 0:
                continue
            seq = r[COL_BASE_SEQUENCE]
            last_seq = seq
            if seq >= 0:
                last_seq = seq + (r[COL_LAST_OFFSET] - r[COL_BASE_OFFSET])
                if last_seq > INT32_MAX:
                    last_seq -= <int64_t>INT32_MAX + 1
            out.append((r[COL_PRODUCER_ID], r[COL_PRODUCER_EPOCH], seq, last_seq,
                        r[COL_BASE_OFFSET], r[COL_LAST_OFFSET], r[COL_MAX_TIMESTAMP],
                        r[COL_ATTRIBUTES], r[COL_CONTROL_TYPE]))
        return out

    def batches(self):
        """(position, size, last offset, max timestamp) per batch, as Python ints."""
        cdef const int64_t[::1] t = self.table
        cdef Py_ssize_t i
        return [(t[i * N_COLS + COL_POSITION], t[i * N_COLS + COL_SIZE],
                 t[i * N_COLS + COL_LAST_OFFSET], t[i * N_COLS + COL_MAX_TIMESTAMP])
                for i in range(self.batch_count)]


ctypedef struct Pending:
    Py_ssize_t position
    Py_ssize_t size
    int64_t base_offset
    int64_t last_offset
    int64_t max_ts
    int64_t offset_of_max
    int32_t epoch
    int32_t count
    int16_t attributes
    int control_type
    bint patch_ts


def validate_for_append(data, *, int64_t next_offset, int32_t leader_epoch=-1,
                        Py_ssize_t max_batch_bytes=1048588, bint require_keys=False,
                        int64_t log_append_time=-1, bint assign_offsets=True,
                        bint allow_control=False, bint deep=True):
    """Validate every batch in ``data`` (writable, unless nothing is to be
    patched: no ``assign_offsets``, ``deep`` or ``log_append_time``) and
    assign offsets in place.

    ``assign_offsets``: producer appends get consecutive offsets from
    ``next_offset`` and the leader epoch ``leader_epoch``; otherwise
    (replication) the batches keep their offsets and epochs, which must be
    at or beyond ``next_offset`` and increasing. ``log_append_time`` >= 0
    turns the batches into LogAppendTime batches stamped with it. ``deep``
    also walks the records (decompressing compressed batches) to check their
    framing, offset deltas and, with ``require_keys``, that each has a key.
    Raises a KafkaError subclass naming the batch and the problem; on error
    ``data`` is unchanged.
    """
    cdef Py_buffer view
    # a follower's append (offsets kept, no record walk, no append time)
    # changes no byte: a read-only buffer (the fetched bytes as they came)
    # is taken as it is, without the copy a writable one would cost
    cdef bint patches = assign_offsets or deep or log_append_time >= 0
    PyObject_GetBuffer(data, &view, PyBUF_WRITABLE if patches else PyBUF_SIMPLE)
    try:
        return validate_batches(<unsigned char *>view.buf, view.len, next_offset, leader_epoch,
                                max_batch_bytes, require_keys, log_append_time, assign_offsets,
                                allow_control, deep)
    finally:
        PyBuffer_Release(&view)


cdef AppendScan validate_batches(unsigned char *base, Py_ssize_t n, int64_t next_offset,
                                 int32_t leader_epoch, Py_ssize_t max_batch_bytes,
                                 bint require_keys, int64_t log_append_time, bint assign_offsets,
                                 bint allow_control, bint deep):
    # validate_for_append of the n bytes at ``base`` (writable when it patches)
    cdef unsigned char *b
    cdef Py_ssize_t pos = 0, nb = 0, cap = 8, i, producer_batches = 0
    cdef int64_t length, expected = next_offset
    cdef int32_t last_delta, count
    cdef int16_t attrs
    cdef int codec, control_type
    cdef uint32_t stored, computed
    cdef Pending *pend = NULL
    cdef Pending *pp
    cdef RecordCheck chk
    cdef bytes section
    cdef int64_t total_records = 0, max_ts = -1, offset_of_max = -1
    cdef AppendScan result
    cdef array.array table
    cdef int64_t *t
    cdef bint patches = assign_offsets or deep or log_append_time >= 0
    try:
        pend = <Pending *>malloc(cap * sizeof(Pending))
        if pend == NULL:
            raise MemoryError()
        if n == 0:
            raise CorruptRecordError("the append holds no record batches")
        while pos < n:
            b = base + pos
            if n - pos < KL_LOG_OVERHEAD:
                raise CorruptRecordError(f"{n - pos} stray bytes at byte {pos}: too short for a "
                                         f"batch header")
            length = <int32_t>kl_be32(b + KL_OFF_LENGTH)
            if length < KL_MIN_BATCH_LENGTH:
                raise CorruptRecordError(f"batch at byte {pos} has length {length}, less than "
                                         f"the {KL_MIN_BATCH_LENGTH}-byte header")
            if length + KL_LOG_OVERHEAD > n - pos:
                raise CorruptRecordError(f"batch at byte {pos} is truncated: it claims "
                                         f"{length + KL_LOG_OVERHEAD} bytes, {n - pos} remain")
            if length + KL_LOG_OVERHEAD > max_batch_bytes:
                raise MessageTooLargeError(f"batch at byte {pos} is {length + KL_LOG_OVERHEAD} "
                                           f"bytes, more than max.message.bytes "
                                           f"({max_batch_bytes})")
            if b[KL_OFF_MAGIC] != KL_MAGIC_V2:
                raise UnsupportedForMessageFormatError(
                    f"batch at byte {pos} has magic {b[KL_OFF_MAGIC]}; only RecordBatch v2 "
                    f"(magic 2) is accepted")
            stored = kl_be32(b + KL_OFF_CRC)
            computed = batch_crc(b, length + KL_LOG_OVERHEAD)
            if stored != computed:
                raise CorruptRecordError(f"batch at byte {pos} is corrupt: stored CRC "
                                         f"{stored:#010x}, computed {computed:#010x}")
            attrs = <int16_t>kl_be16(b + KL_OFF_ATTRIBUTES)
            codec = attrs & KL_ATTR_COMPRESSION_MASK
            if codec > KL_CODEC_MAX:
                raise UnsupportedCompressionTypeError(f"batch at byte {pos} uses unknown "
                                                      f"compression codec {codec}")
            control_type = KL_CONTROL_UNKNOWN
            if attrs & KL_ATTR_CONTROL:
                if not allow_control:
                    raise InvalidRecordError(f"batch at byte {pos} is a control batch; producers "
                                             f"may not write control batches")
                control_type = kl_control_type(b, length + KL_LOG_OVERHEAD)
                if control_type == KL_CONTROL_UNKNOWN or not (attrs & KL_ATTR_TRANSACTIONAL):
                    raise InvalidRecordError(f"batch at byte {pos} is a control batch but not a "
                                             f"transactional COMMIT or ABORT marker")
            count = <int32_t>kl_be32(b + KL_OFF_RECORDS_COUNT)
            last_delta = <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA)
            if count < 0 or last_delta < 0 or (assign_offsets and count == 0):
                raise InvalidRecordError(f"batch at byte {pos} has record count {count} and "
                                         f"lastOffsetDelta {last_delta}")
            if nb == cap:
                cap *= 2
                pp = <Pending *>realloc(pend, cap * sizeof(Pending))
                if pp == NULL:
                    raise MemoryError()
                pend = pp
            pp = &pend[nb]
            nb += 1
            pp.position = pos
            pp.size = length + KL_LOG_OVERHEAD
            pp.count = count
            pp.attributes = attrs
            pp.control_type = control_type
            if assign_offsets:
                pp.base_offset = expected
                pp.epoch = leader_epoch
            else:
                pp.base_offset = <int64_t>kl_be64(b + KL_OFF_BASE_OFFSET)
                pp.epoch = <int32_t>kl_be32(b + KL_OFF_LEADER_EPOCH)
                if pp.base_offset < expected:
                    raise InvalidRecordError(f"batch at byte {pos} starts at offset "
                                             f"{pp.base_offset}, below the next offset {expected}")
            pp.last_offset = pp.base_offset + last_delta
            expected = pp.last_offset + 1
            pp.max_ts = <int64_t>kl_be64(b + KL_OFF_MAX_TIMESTAMP)
            pp.offset_of_max = pp.last_offset
            pp.patch_ts = False
            if deep and count > 0:
                try:
                    _check_batch_records(b, length + KL_LOG_OVERHEAD, count, codec, assign_offsets,
                                         require_keys, &chk)
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"batch at byte {pos}: {exc.message}") from None
                if chk.error != ERR_NONE:
                    exc = _record_error(&chk, pos, count)
                    if chk.error == ERR_NO_KEY:
                        exc.record_errors = [
                            (k, "compacted topics require a key on every record")
                            for k in _keyless_records(b, length + KL_LOG_OVERHEAD, count, codec)]
                    raise exc
                if not (attrs & KL_ATTR_TIMESTAMP_TYPE):
                    # The header's maxTimestamp is what the time index trusts;
                    # make it agree with the records, as Kafka's validator does.
                    if chk.max_timestamp != pp.max_ts:
                        pp.max_ts = chk.max_timestamp
                        pp.patch_ts = True
            if log_append_time >= 0:
                pp.max_ts = log_append_time
                pp.offset_of_max = pp.last_offset
                pp.patch_ts = True
            total_records += count
            if nb == 1 or pp.max_ts > max_ts:
                max_ts = pp.max_ts
                offset_of_max = pp.offset_of_max
            pos += length + KL_LOG_OVERHEAD

        # every batch passed: patch in place
        table = array.clone(_INT64, nb * N_COLS, zero=False)
        t = <int64_t *>table.data.as_longlongs
        for i in range(nb):
            pp = &pend[i]
            b = base + pp.position
            if patches:
                kl_put_be64(b + KL_OFF_BASE_OFFSET, <uint64_t>pp.base_offset)
                kl_put_be32(b + KL_OFF_LEADER_EPOCH, <uint32_t>pp.epoch)
            if pp.patch_ts:
                if log_append_time >= 0:
                    pp.attributes = pp.attributes | KL_ATTR_TIMESTAMP_TYPE
                    kl_put_be16(b + KL_OFF_ATTRIBUTES, <uint16_t>pp.attributes)
                kl_put_be64(b + KL_OFF_MAX_TIMESTAMP, <uint64_t>pp.max_ts)
                kl_put_be32(b + KL_OFF_CRC, batch_crc(b, pp.size))
            t[i * N_COLS + COL_POSITION] = pp.position
            t[i * N_COLS + COL_SIZE] = pp.size
            t[i * N_COLS + COL_BASE_OFFSET] = pp.base_offset
            t[i * N_COLS + COL_LAST_OFFSET] = pp.last_offset
            t[i * N_COLS + COL_MAX_TIMESTAMP] = pp.max_ts
            t[i * N_COLS + COL_LEADER_EPOCH] = pp.epoch
            t[i * N_COLS + COL_PRODUCER_ID] = <int64_t>kl_be64(b + KL_OFF_PRODUCER_ID)
            if t[i * N_COLS + COL_PRODUCER_ID] >= 0:
                producer_batches += 1
            t[i * N_COLS + COL_PRODUCER_EPOCH] = <int16_t>kl_be16(b + KL_OFF_PRODUCER_EPOCH)
            t[i * N_COLS + COL_BASE_SEQUENCE] = <int32_t>kl_be32(b + KL_OFF_BASE_SEQUENCE)
            t[i * N_COLS + COL_ATTRIBUTES] = pp.attributes
            t[i * N_COLS + COL_RECORD_COUNT] = pp.count
            t[i * N_COLS + COL_CONTROL_TYPE] = pp.control_type
    finally:
        free(pend)

    result = AppendScan.__new__(AppendScan)
    result.first_offset = t[COL_BASE_OFFSET]
    result.last_offset = t[(nb - 1) * N_COLS + COL_LAST_OFFSET]
    result.record_count = total_records
    result.max_timestamp = max_ts
    result.offset_of_max_timestamp = offset_of_max
    result.batch_count = nb
    result.producer_batch_count = producer_batches
    result.size_in_bytes = n
    result.table = table
    return result


# ---- recovery / verification scan -------------------------------------------------------

@cython.final
cdef class LogScan:
    """What ``scan_log`` found in a segment's bytes.

    ``valid_bytes``: end of the valid prefix (the file should be truncated
    there); ``error``: why the scan stopped early (None if it reached the
    end); ``next_offset``: offset after the last valid batch (-1 if none);
    index entries as parallel ``array.array("q")`` (``index_offsets``,
    ``index_positions``; ``time_index_timestamps``, ``time_index_offsets``)
    following the segment's index.interval.bytes rule; ``epoch_starts``: a
    list of (leader epoch, first offset) where the epoch changes;
    ``abort_markers``: the offsets of the ABORT markers among the batches
    (what the segment's transaction index must hold an entry for).
    """
    cdef readonly Py_ssize_t valid_bytes
    cdef readonly object error
    cdef readonly int64_t next_offset
    cdef readonly int64_t first_offset
    cdef readonly Py_ssize_t batch_count
    cdef readonly int64_t record_count
    cdef readonly int64_t max_timestamp
    cdef readonly int64_t offset_of_max_timestamp
    cdef readonly int64_t first_batch_timestamp
    cdef readonly Py_ssize_t bytes_since_last_index_entry
    cdef readonly object index_offsets, index_positions
    cdef readonly object time_index_timestamps, time_index_offsets
    cdef readonly list epoch_starts
    cdef readonly list abort_markers


def scan_log(data, *, Py_ssize_t start=0, int64_t min_offset=0, Py_ssize_t index_interval_bytes=4096,
             Py_ssize_t bytes_since_last_index_entry=0, int64_t last_indexed_timestamp=-1,
             int64_t max_timestamp=-1, int64_t offset_of_max_timestamp=-1,
             bint verify_crc=True, bint deep=False, int32_t last_epoch=-1,
             bint contiguous=False):
    """Walk batches in ``data`` from ``start``; stop at the first invalid one.

    A batch is valid when its header fits, its length is sane and fits the
    data, magic is 2, the CRC matches (``verify_crc``), its base offset is
    at least ``min_offset`` and above the previous batch's last offset
    (exactly the next offset, from ``min_offset`` on, with ``contiguous``:
    true of every log that was never compacted, and the only check that
    covers baseOffset, which the CRC does not), its leader epoch does not go
    down, and (``deep``) its records decode. The leader epochs are not
    checked against the epoch cache: a CRC-valid batch is what every replica
    and consumer is served, so the cache is rebuilt from the batches
    (``epoch_starts``), as Kafka's recovery does. Index entries are produced exactly as
    appends would have produced them, continuing from the given index state.
    """
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef const unsigned char *b
    cdef Py_ssize_t n, pos = start, nb = 0
    cdef int64_t length, base_offset, last_offset, expected = min_offset, batch_max_ts
    cdef int32_t count, epoch
    cdef int16_t attrs
    cdef int codec
    cdef uint32_t stored, computed
    cdef RecordCheck chk
    cdef bytes section
    cdef int64_t total = 0, first_offset = -1, first_ts = -1
    cdef Py_ssize_t since = bytes_since_last_index_entry
    cdef int64_t last_time_entry = last_indexed_timestamp
    cdef list idx_off = [], idx_pos = [], ti_ts = [], ti_off = [], epochs = [], aborts = []
    cdef object error = None
    cdef LogScan result
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char *>view.buf
        n = view.len
        if start < 0 or start > n:
            raise ValueError(f"start {start} is outside the {n}-byte buffer")
        while pos < n:
            b = base + pos
            if n - pos < KL_LOG_OVERHEAD:
                error = f"{n - pos} stray bytes at position {pos}"
                break
            length = <int32_t>kl_be32(b + KL_OFF_LENGTH)
            if length < KL_MIN_BATCH_LENGTH:
                error = f"batch at position {pos} has invalid length {length}"
                break
            if length + KL_LOG_OVERHEAD > n - pos:
                error = (f"batch at position {pos} is torn: it claims {length + KL_LOG_OVERHEAD} "
                         f"bytes, {n - pos} remain")
                break
            if b[KL_OFF_MAGIC] != KL_MAGIC_V2:
                error = f"batch at position {pos} has magic {b[KL_OFF_MAGIC]}"
                break
            if verify_crc:
                stored = kl_be32(b + KL_OFF_CRC)
                computed = batch_crc(b, length + KL_LOG_OVERHEAD)
                if stored != computed:
                    error = (f"batch at position {pos} fails its CRC (stored {stored:#010x}, "
                             f"computed {computed:#010x})")
                    break
            base_offset = <int64_t>kl_be64(b + KL_OFF_BASE_OFFSET)
            count = <int32_t>kl_be32(b + KL_OFF_RECORDS_COUNT)
            last_offset = base_offset + <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA)
            if (base_offset < expected or last_offset < base_offset or count < 0
                    or (contiguous and base_offset != expected)):
                error = (f"batch at position {pos} has offsets {base_offset}..{last_offset}, "
                         f"expected a base offset of {'' if contiguous else 'at least '}{expected}")
                break
            epoch = <int32_t>kl_be32(b + KL_OFF_LEADER_EPOCH)
            if epoch < last_epoch:
                error = (f"batch at position {pos} has leader epoch {epoch}, below the "
                         f"previous batch's {last_epoch}")
                break
            attrs = <int16_t>kl_be16(b + KL_OFF_ATTRIBUTES)
            codec = attrs & KL_ATTR_COMPRESSION_MASK
            if deep and count > 0:
                if codec > KL_CODEC_MAX:
                    error = f"batch at position {pos} uses unknown codec {codec}"
                    break
                try:
                    _check_batch_records(b, length + KL_LOG_OVERHEAD, count, codec, False, False,
                                         &chk)
                except Exception as exc:
                    error = f"batch at position {pos}: {exc}"
                    break
                if chk.error != ERR_NONE:
                    error = str(_record_error(&chk, pos, count))
                    break
            batch_max_ts = <int64_t>kl_be64(b + KL_OFF_MAX_TIMESTAMP)
            if (attrs & KL_ATTR_CONTROL) and kl_control_type(
                    b, length + KL_LOG_OVERHEAD) == KL_CONTROL_ABORT:
                aborts.append(base_offset)
            if epoch >= 0 and epoch > last_epoch:
                epochs.append((epoch, base_offset))
                last_epoch = epoch
            if first_offset < 0:
                first_offset = base_offset
                first_ts = batch_max_ts
            if batch_max_ts > max_timestamp:
                max_timestamp = batch_max_ts
                offset_of_max_timestamp = last_offset
            # Kafka's LogSegment.append rule: index a batch once more than
            # index.interval.bytes were written since the last entry.
            if since > index_interval_bytes:
                idx_off.append(last_offset)
                idx_pos.append(pos)
                if max_timestamp > last_time_entry:
                    ti_ts.append(max_timestamp)
                    ti_off.append(offset_of_max_timestamp)
                    last_time_entry = max_timestamp
                since = 0
            since += length + KL_LOG_OVERHEAD
            total += count
            nb += 1
            expected = last_offset + 1
            pos += length + KL_LOG_OVERHEAD
    finally:
        PyBuffer_Release(&view)

    result = LogScan.__new__(LogScan)
    result.valid_bytes = pos
    result.error = error
    result.next_offset = expected if nb else -1
    result.first_offset = first_offset
    result.batch_count = nb
    result.record_count = total
    result.max_timestamp = max_timestamp
    result.offset_of_max_timestamp = offset_of_max_timestamp
    result.first_batch_timestamp = first_ts
    result.bytes_since_last_index_entry = since
    # array.array, not numpy: the caller walks them as lists, and numpy's
    # import (0.1-0.4 s on a loaded 2-core machine) was most of the time a
    # restarted supervisor or worker took to recover its logs and serve
    result.index_offsets = array.array("q", idx_off)
    result.index_positions = array.array("q", idx_pos)
    result.time_index_timestamps = array.array("q", ti_ts)
    result.time_index_offsets = array.array("q", ti_off)
    result.epoch_starts = epochs
    result.abort_markers = aborts
    return result


def batch_header(data, Py_ssize_t position=0):
    """(base_offset, last_offset, size, max_timestamp) of the batch at ``position``.

    Only the 61-byte header is needed; used to step through a segment
    between index entries without reading whole batches.
    """
    cdef Py_buffer view
    cdef const unsigned char *b
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if position < 0 or view.len - position < KL_BATCH_HEADER_SIZE:
            raise CorruptRecordError(f"no complete batch header at position {position}")
        b = <const unsigned char *>view.buf + position
        return (<int64_t>kl_be64(b + KL_OFF_BASE_OFFSET),
                <int64_t>kl_be64(b + KL_OFF_BASE_OFFSET) + <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA),
                <int64_t>(<int32_t>kl_be32(b + KL_OFF_LENGTH)) + KL_LOG_OVERHEAD,
                <int64_t>kl_be64(b + KL_OFF_MAX_TIMESTAMP))
    finally:
        PyBuffer_Release(&view)


# ---- producer state: the idempotent batches of a log's tail ------------------------------

def producer_batches(data, Py_ssize_t start=0):
    """The batches carrying a producer id in ``data`` (whole batches of a
    segment already validated by recovery), from byte ``start``.

    Returns (rows, batches walked, end position): ``rows`` a list of one
    tuple per such batch, in log order: (base offset, last offset,
    producer id, producer epoch, base sequence, max timestamp, attributes,
    control type (CONTROL_UNKNOWN for data batches)). Only headers are read,
    and the one record of each control batch. The walk stops at the first length that does
    not fit (a torn tail is recovery's business, not this function's).

    Tuples, not a numpy table: every log with records past its last
    producer snapshot is read here when it opens after a crash -- each of a
    restarted supervisor's internal topics -- and numpy's import (0.2 s of
    CPU, 0.3-0.7 s on a loaded 2-core machine) was on the way of every
    transaction its clients waited to commit (issue 68).
    """
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef const unsigned char *b
    cdef Py_ssize_t n, pos = start, walked = 0
    cdef int64_t length, pid, first
    cdef list rows = []
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char *>view.buf
        n = view.len
        if start < 0 or start > n:
            raise ValueError(f"start {start} is outside the {n}-byte buffer")
        while n - pos >= KL_BATCH_HEADER_SIZE:
            b = base + pos
            length = <int32_t>kl_be32(b + KL_OFF_LENGTH)
            if length < KL_MIN_BATCH_LENGTH or length + KL_LOG_OVERHEAD > n - pos:
                break
            walked += 1
            pid = <int64_t>kl_be64(b + KL_OFF_PRODUCER_ID)
            if pid >= 0:
                first = <int64_t>kl_be64(b + KL_OFF_BASE_OFFSET)
                rows.append((first, first + <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA), pid,
                             <int16_t>kl_be16(b + KL_OFF_PRODUCER_EPOCH),
                             <int32_t>kl_be32(b + KL_OFF_BASE_SEQUENCE),
                             <int64_t>kl_be64(b + KL_OFF_MAX_TIMESTAMP),
                             <int16_t>kl_be16(b + KL_OFF_ATTRIBUTES),
                             kl_control_type(b, length + KL_LOG_OVERHEAD)))
            pos += length + KL_LOG_OVERHEAD
    finally:
        PyBuffer_Release(&view)
    return rows, walked, pos


# ---- resynchronising after damage (recovery's salvage) ------------------------------------

def find_next_batch(data, Py_ssize_t start, int64_t min_offset, int32_t min_epoch=-1):
    """The position of the first batch at or after byte ``start`` of
    ``data`` that is whole and sound -- magic 2, a length that fits, a base
    offset of at least ``min_offset`` (and offsets that fit in a segment
    after it), a leader epoch of at least ``min_epoch``, and a CRC that
    matches -- or -1. Recovery uses it to find where intact batches resume
    after a damaged stretch of a segment; a false match would need a
    CRC-32C collision on top of the header checks."""
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef const unsigned char *b
    cdef Py_ssize_t n, pos
    cdef int64_t length, base_offset
    cdef int32_t epoch, last_delta
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        base = <const unsigned char *>view.buf
        n = view.len
        if start < 0:
            start = 0
        pos = start
        while pos + KL_BATCH_HEADER_SIZE <= n:
            b = base + pos
            if b[KL_OFF_MAGIC] == KL_MAGIC_V2:
                length = <int32_t>kl_be32(b + KL_OFF_LENGTH)
                base_offset = <int64_t>kl_be64(b + KL_OFF_BASE_OFFSET)
                epoch = <int32_t>kl_be32(b + KL_OFF_LEADER_EPOCH)
                last_delta = <int32_t>kl_be32(b + KL_OFF_LAST_OFFSET_DELTA)
                if (length >= KL_MIN_BATCH_LENGTH and length + KL_LOG_OVERHEAD <= n - pos
                        and base_offset >= min_offset and base_offset - min_offset <= INT32_MAX
                        and last_delta >= 0 and epoch >= min_epoch
                        and kl_be32(b + KL_OFF_CRC) == batch_crc(b, length + KL_LOG_OVERHEAD)):
                    return pos
            pos += 1
        return -1
    finally:
        PyBuffer_Release(&view)
