# cython: language_level=3
"""Decoding many RecordBatch v2 batches into Arrow-layout columns at once.

The consumer's bulk path (``Consumer.consume_batch``), the Spark source and
the storage tools decode whole fetch responses here: no Python object per
record, one pass over the headers to size the output, one pass over the
records to fill it. In steps:

1. ``_scan_batches``: walk the batch headers (length, magic, optional CRC),
   decompress each compressed batch once, and total the records and bytes;
2. ``_allocate``: the output arrays, sized by those totals (an upper bound
   for the byte columns; untouched pages of ``numpy.empty`` cost nothing);
3. ``_decode_batch_records``: per batch, parse its records straight into
   the arrays through raw pointers;
4. ``_assemble``: trim the byte columns and wrap everything in a
   ``RecordColumns``.

``decode_columns`` does this for one buffer; ``decode_chunks`` for the
chunks of many partitions a fetch brought, into one set of arrays (a
consumer's ``consume_batch``), each chunk from its partition's position.

The byte layout is ``wire.h``; the record parser is ``kl_parse_record``
there; shared helpers are in ``batch.pxd``.

Who may call: any thread.
"""
cimport cython
cimport numpy as cnp
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, INT32_MAX, INT64_MIN
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

from batch cimport batch_crc, decompressed_section
cimport crc32c_c as crcmod
from wire_c cimport *

import numpy as np

from kafkalite.errors import (CorruptRecordError, UnsupportedCompressionTypeError,
                              UnsupportedForMessageFormatError)

cnp.import_array()
crcmod.kl_crc32c_init()

# Every record takes at least 7 bytes (length, attributes, three varints
# and a header count); a larger count is corrupt and must not size arrays.
cdef int MIN_RECORD_BYTES = 7


class RecordColumns:
    """Records of many batches as Arrow-layout columns (numpy arrays).

    Per record: ``offsets`` int64, ``timestamps`` int64 (epoch ms),
    ``timestamp_types`` uint8; key/value as Arrow binary columns
    (``*_offsets`` int32[n+1] into ``*_data`` uint8, ``*_valid`` bool);
    headers as an Arrow list<struct<key string, value binary>>
    (``header_offsets`` int32[n+1] into per-header key/value binary columns).
    Per batch: ``batch_base_offsets``, ``batch_last_offsets``,
    ``batch_producer_ids``, ``batch_attributes``, ``batch_base_timestamps``,
    ``batch_positions`` / ``batch_sizes`` (bytes in the input),
    ``batch_record_starts`` (index of the batch's first record) and
    ``batch_skipped`` (1 for a batch whose records were left out: a control
    batch with ``skip_control``, an aborted transaction's batch given
    ``aborted_transactions``). ``next_offset`` is the offset after the last
    complete batch (-1 if none) and ``bytes_consumed`` its end position.
    """

    def __len__(self):
        return len(self.offsets)

    @staticmethod
    def _binary(data, offsets, valid, i):
        return bytes(data[offsets[i]:offsets[i + 1]]) if valid[i] else None

    def key(self, i):
        return RecordColumns._binary(self.key_data, self.key_offsets, self.key_valid, i)

    def value(self, i):
        return RecordColumns._binary(self.value_data, self.value_offsets, self.value_valid, i)

    def headers(self, i):
        out = []
        for h in range(self.header_offsets[i], self.header_offsets[i + 1]):
            k = bytes(self.header_key_data[self.header_key_offsets[h]:self.header_key_offsets[h + 1]])
            out.append((k.decode("utf-8", "replace"),
                        RecordColumns._binary(self.header_value_data, self.header_value_offsets,
                                              self.header_value_valid, h)))
        return out

    def keys(self):
        return [self.key(i) for i in range(len(self))]

    def values(self):
        return [self.value(i) for i in range(len(self))]

    def to_records(self):
        """Per-record tuples (offset, timestamp, timestamp_type, key, value, headers)."""
        return [(int(self.offsets[i]), int(self.timestamps[i]), int(self.timestamp_types[i]),
                 self.key(i), self.value(i), self.headers(i)) for i in range(len(self))]


# ---- step 1: batch headers -----------------------------------------------------------------

ctypedef struct BatchDesc:
    const unsigned char *header      # the batch in the input
    const unsigned char *records     # its records section (decompressed when it was not)
    Py_ssize_t size                  # the batch's bytes in the input
    Py_ssize_t records_len
    int64_t base_offset
    int64_t base_ts
    int64_t max_ts
    int32_t count
    int16_t attributes
    bint skipped                     # a control or aborted batch, left out


ctypedef struct Scan:
    BatchDesc *batches
    Py_ssize_t count
    Py_ssize_t capacity
    Py_ssize_t records               # records of the batches not skipped
    Py_ssize_t record_bytes          # their records sections' bytes
    Py_ssize_t consumed              # end of the last complete batch
    int64_t next_offset


@cython.final
cdef class AbortedFilter:
    """read_committed: which batches of a fetched partition a consumer
    drops, as Kafka's consumer decides it. ``aborted`` is the fetch
    response's list of (producer id, first offset) for the partition.
    Walking the batches in log order, a producer joins the aborted set once
    a batch reaches the first offset of one of its aborted transactions and
    leaves it at its ABORT marker; a transactional batch of a producer in
    the set is dropped, and so is every control batch. One filter per
    fetched chunk, fed every batch of it in order."""
    cdef list pending                # (first offset, producer id), by first offset, reversed
    cdef set producers

    def __init__(self, aborted):
        self.pending = sorted(((int(first), int(pid)) for pid, first in aborted), reverse=True)
        self.producers = set()

    cpdef bint skips(self, int64_t producer_id, int attributes, int64_t last_offset,
                     bint abort_marker) except -1:
        """Whether the batch with these header fields is dropped."""
        if attributes & KL_ATTR_CONTROL:
            if abort_marker:
                self._reach(last_offset)
                self.producers.discard(producer_id)
            return True
        if producer_id < 0:
            return False
        self._reach(last_offset)
        return (attributes & KL_ATTR_TRANSACTIONAL) != 0 and producer_id in self.producers

    cdef int _reach(self, int64_t last_offset) except -1:
        # (no negative indexes: this module is compiled with wraparound off)
        while self.pending and self.pending[len(self.pending) - 1][0] <= last_offset:
            self.producers.add(self.pending.pop()[1])
        return 0

    cdef bint skip(self, const unsigned char *p, Py_ssize_t size, int16_t attributes,
                   int64_t last_offset) except -1:
        return self.skips(<int64_t>kl_be64(p + KL_OFF_PRODUCER_ID), attributes, last_offset,
                          (attributes & KL_ATTR_CONTROL) != 0
                          and kl_control_type(p, size) == KL_CONTROL_ABORT)


cdef int _scan_batches(const unsigned char *base, Py_ssize_t n, bint skip_control,
                       bint verify_crc, Scan *s, list keep_alive,
                       AbortedFilter aborted) except -1:
    cdef Py_ssize_t pos = 0
    cdef int64_t length
    cdef const unsigned char *p
    cdef BatchDesc *bd
    cdef uint32_t stored, computed
    cdef int codec
    cdef object section
    while pos + KL_LOG_OVERHEAD <= n:
        p = base + pos
        length = <int32_t>kl_be32(p + KL_OFF_LENGTH)
        if length < KL_MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch at position {pos} has length {length}, "
                                     f"less than the {KL_MIN_BATCH_LENGTH}-byte header")
        if pos + KL_LOG_OVERHEAD + length > n:
            break                    # a partial batch at the end of a fetch
        if p[KL_OFF_MAGIC] != KL_MAGIC_V2:
            raise UnsupportedForMessageFormatError(
                f"batch at position {pos} has magic {p[KL_OFF_MAGIC]}; only v2 is supported")
        if verify_crc:
            stored = kl_be32(p + KL_OFF_CRC)
            computed = batch_crc(p, KL_LOG_OVERHEAD + length)
            if stored != computed:
                raise CorruptRecordError(f"batch at position {pos} is corrupt: stored CRC "
                                         f"{stored:#010x}, computed {computed:#010x}")
        if s.count == s.capacity:
            s.capacity *= 2
            bd = <BatchDesc *>realloc(s.batches, s.capacity * sizeof(BatchDesc))
            if bd == NULL:
                raise MemoryError()
            s.batches = bd
        bd = &s.batches[s.count]
        s.count += 1
        bd.header = p
        bd.size = KL_LOG_OVERHEAD + length
        bd.base_offset = <int64_t>kl_be64(p + KL_OFF_BASE_OFFSET)
        bd.attributes = <int16_t>kl_be16(p + KL_OFF_ATTRIBUTES)
        bd.base_ts = <int64_t>kl_be64(p + KL_OFF_BASE_TIMESTAMP)
        bd.max_ts = <int64_t>kl_be64(p + KL_OFF_MAX_TIMESTAMP)
        bd.count = <int32_t>kl_be32(p + KL_OFF_RECORDS_COUNT)
        s.next_offset = bd.base_offset + <int32_t>kl_be32(p + KL_OFF_LAST_OFFSET_DELTA) + 1
        bd.skipped = skip_control and (bd.attributes & KL_ATTR_CONTROL) != 0
        if aborted is not None and aborted.skip(p, bd.size, bd.attributes, s.next_offset - 1):
            bd.skipped = True
        if bd.count < 0:
            raise CorruptRecordError(f"batch at offset {bd.base_offset} has record count "
                                     f"{bd.count}")
        bd.records = p + KL_BATCH_HEADER_SIZE
        bd.records_len = bd.size - KL_BATCH_HEADER_SIZE
        codec = bd.attributes & KL_ATTR_COMPRESSION_MASK
        if not bd.skipped and codec != KL_CODEC_NONE:
            if codec > KL_CODEC_MAX:
                raise UnsupportedCompressionTypeError(
                    f"batch at offset {bd.base_offset} uses unknown compression codec {codec}")
            section = decompressed_section(p, bd.size, codec)
            keep_alive.append(section)
            bd.records = <const unsigned char *>PyBytes_AS_STRING(section)
            bd.records_len = PyBytes_GET_SIZE(section)
        if not bd.skipped:
            if <int64_t>bd.count * MIN_RECORD_BYTES > bd.records_len:
                raise CorruptRecordError(f"batch at offset {bd.base_offset} claims {bd.count} "
                                         f"records in {bd.records_len} bytes")
            s.records += bd.count
            s.record_bytes += bd.records_len
        pos += bd.size
    s.consumed = pos
    return 0


# ---- step 2: the output arrays -------------------------------------------------------------

ctypedef struct Out:
    # per record
    int64_t *offsets
    int64_t *timestamps
    uint8_t *timestamp_types
    int32_t *key_offsets
    uint8_t *key_valid
    uint8_t *key_data
    int32_t *value_offsets
    uint8_t *value_valid
    uint8_t *value_data
    int32_t *header_offsets
    # per header
    int32_t *header_key_offsets
    uint8_t *header_key_data
    int32_t *header_value_offsets
    uint8_t *header_value_valid
    uint8_t *header_value_data
    # fill positions
    Py_ssize_t record
    Py_ssize_t header
    Py_ssize_t key_pos
    Py_ssize_t value_pos
    Py_ssize_t header_key_pos
    Py_ssize_t header_value_pos


cdef inline void *_data(cnp.ndarray a) noexcept:
    return cnp.PyArray_DATA(a)


cdef dict _allocate(Scan *s, Out *o):
    cdef Py_ssize_t nr = s.records, nbytes = s.record_bytes, nb = s.count
    # every header costs at least 2 bytes (two varints)
    cdef Py_ssize_t max_headers = nbytes // 2
    arrays = {
        "offsets": np.empty(nr, dtype=np.int64),
        "timestamps": np.empty(nr, dtype=np.int64),
        "timestamp_types": np.empty(nr, dtype=np.uint8),
        "key_offsets": np.empty(nr + 1, dtype=np.int32),
        "key_valid": np.empty(nr, dtype=np.bool_),
        "key_data": np.empty(nbytes, dtype=np.uint8),
        "value_offsets": np.empty(nr + 1, dtype=np.int32),
        "value_valid": np.empty(nr, dtype=np.bool_),
        "value_data": np.empty(nbytes, dtype=np.uint8),
        "header_offsets": np.empty(nr + 1, dtype=np.int32),
        "header_key_offsets": np.empty(max_headers + 1, dtype=np.int32),
        "header_key_data": np.empty(nbytes, dtype=np.uint8),
        "header_value_offsets": np.empty(max_headers + 1, dtype=np.int32),
        "header_value_valid": np.empty(max_headers, dtype=np.bool_),
        "header_value_data": np.empty(nbytes, dtype=np.uint8),
        "batch_base_offsets": np.empty(nb, dtype=np.int64),
        "batch_last_offsets": np.empty(nb, dtype=np.int64),
        "batch_producer_ids": np.empty(nb, dtype=np.int64),
        "batch_attributes": np.empty(nb, dtype=np.int16),
        "batch_record_starts": np.empty(nb, dtype=np.int64),
        "batch_positions": np.empty(nb, dtype=np.int64),
        "batch_sizes": np.empty(nb, dtype=np.int64),
        "batch_base_timestamps": np.empty(nb, dtype=np.int64),
        "batch_skipped": np.empty(nb, dtype=np.uint8),
    }
    o.offsets = <int64_t *>_data(arrays["offsets"])
    o.timestamps = <int64_t *>_data(arrays["timestamps"])
    o.timestamp_types = <uint8_t *>_data(arrays["timestamp_types"])
    o.key_offsets = <int32_t *>_data(arrays["key_offsets"])
    o.key_valid = <uint8_t *>_data(arrays["key_valid"])
    o.key_data = <uint8_t *>_data(arrays["key_data"])
    o.value_offsets = <int32_t *>_data(arrays["value_offsets"])
    o.value_valid = <uint8_t *>_data(arrays["value_valid"])
    o.value_data = <uint8_t *>_data(arrays["value_data"])
    o.header_offsets = <int32_t *>_data(arrays["header_offsets"])
    o.header_key_offsets = <int32_t *>_data(arrays["header_key_offsets"])
    o.header_key_data = <uint8_t *>_data(arrays["header_key_data"])
    o.header_value_offsets = <int32_t *>_data(arrays["header_value_offsets"])
    o.header_value_valid = <uint8_t *>_data(arrays["header_value_valid"])
    o.header_value_data = <uint8_t *>_data(arrays["header_value_data"])
    o.key_offsets[0] = 0
    o.value_offsets[0] = 0
    o.header_offsets[0] = 0
    o.header_key_offsets[0] = 0
    o.header_value_offsets[0] = 0
    o.record = o.header = 0
    o.key_pos = o.value_pos = o.header_key_pos = o.header_value_pos = 0
    return arrays


# ---- step 3: records -----------------------------------------------------------------------

cdef inline int32_t _check_i32(Py_ssize_t v) except -1:
    if v > INT32_MAX:
        raise OverflowError("decoded column exceeds 2 GiB; decode fewer batches at once")
    return <int32_t>v


cdef int _decode_batch_records(BatchDesc *bd, Out *o,
                               int64_t min_offset=INT64_MIN) except -1:
    """Parse the batch's records into ``o``; those below ``min_offset`` (a
    consumer's position part-way into the batch) are checked and left out."""
    cdef const unsigned char *p = bd.records
    cdef const unsigned char *end = p + bd.records_len
    cdef const unsigned char *hp
    cdef kl_record r
    cdef int rc
    cdef Py_ssize_t j, ri
    cdef int64_t hn, length
    cdef bint log_append = (bd.attributes & KL_ATTR_TIMESTAMP_TYPE) != 0
    cdef uint8_t ts_type = 1 if log_append else 0
    for j in range(bd.count):
        rc = kl_parse_record(p, end, &r)
        if rc != KL_REC_OK:
            raise CorruptRecordError(f"batch at offset {bd.base_offset}, record {j}: "
                                     f"{kl_record_error(rc).decode()}")
        if bd.base_offset + r.offset_delta < min_offset:
            p = r.end
            continue
        ri = o.record
        o.offsets[ri] = bd.base_offset + r.offset_delta
        o.timestamps[ri] = bd.max_ts if log_append else bd.base_ts + r.timestamp_delta
        o.timestamp_types[ri] = ts_type
        if r.key_len >= 0:
            memcpy(o.key_data + o.key_pos, r.key, r.key_len)
            o.key_pos += r.key_len
            o.key_valid[ri] = 1
        else:
            o.key_valid[ri] = 0
        o.key_offsets[ri + 1] = _check_i32(o.key_pos)
        if r.value_len >= 0:
            memcpy(o.value_data + o.value_pos, r.value, r.value_len)
            o.value_pos += r.value_len
            o.value_valid[ri] = 1
        else:
            o.value_valid[ri] = 0
        o.value_offsets[ri + 1] = _check_i32(o.value_pos)
        hp = r.headers
        for hn in range(r.header_count):
            hp = kl_read_varint(hp, r.end, &length)
            memcpy(o.header_key_data + o.header_key_pos, hp, length)
            o.header_key_pos += length
            hp += length
            o.header_key_offsets[o.header + 1] = _check_i32(o.header_key_pos)
            hp = kl_read_varint(hp, r.end, &length)
            if length >= 0:
                memcpy(o.header_value_data + o.header_value_pos, hp, length)
                o.header_value_pos += length
                hp += length
                o.header_value_valid[o.header] = 1
            else:
                o.header_value_valid[o.header] = 0
            o.header_value_offsets[o.header + 1] = _check_i32(o.header_value_pos)
            o.header += 1
        o.header_offsets[ri + 1] = _check_i32(o.header)
        o.record += 1
        p = r.end
    if p != end:
        raise CorruptRecordError(f"batch at offset {bd.base_offset} has {end - p} bytes "
                                 f"after its {bd.count} records")
    return 0


# ---- step 4: the result --------------------------------------------------------------------

cdef object _assemble(dict arrays, Out *o, Scan *s):
    cols = RecordColumns()
    for name, array in arrays.items():
        setattr(cols, name, array)
    cols.key_data = arrays["key_data"][:o.key_pos]
    cols.value_data = arrays["value_data"][:o.value_pos]
    cols.header_key_offsets = arrays["header_key_offsets"][:o.header + 1]
    cols.header_key_data = arrays["header_key_data"][:o.header_key_pos]
    cols.header_value_offsets = arrays["header_value_offsets"][:o.header + 1]
    cols.header_value_data = arrays["header_value_data"][:o.header_value_pos]
    cols.header_value_valid = arrays["header_value_valid"][:o.header]
    cols.next_offset = s.next_offset
    cols.bytes_consumed = s.consumed
    return cols


# ---- step 3b: the per-batch columns, and each batch's records ------------------------------

cdef int _fill_batches(dict arrays, Scan *s, Out *o, Py_ssize_t lo, Py_ssize_t hi,
                       const unsigned char *base, int64_t min_offset) except -1:
    """Batches ``lo:hi`` of the scan (all from the buffer at ``base``): their
    per-batch columns, and their records into ``o`` (those below
    ``min_offset`` left out; a batch wholly below it is not parsed)."""
    cdef int64_t *b_base = <int64_t *>_data(arrays["batch_base_offsets"])
    cdef int64_t *b_last = <int64_t *>_data(arrays["batch_last_offsets"])
    cdef int64_t *b_pid = <int64_t *>_data(arrays["batch_producer_ids"])
    cdef int16_t *b_attr = <int16_t *>_data(arrays["batch_attributes"])
    cdef int64_t *b_start = <int64_t *>_data(arrays["batch_record_starts"])
    cdef int64_t *b_pos = <int64_t *>_data(arrays["batch_positions"])
    cdef int64_t *b_size = <int64_t *>_data(arrays["batch_sizes"])
    cdef int64_t *b_ts = <int64_t *>_data(arrays["batch_base_timestamps"])
    cdef uint8_t *b_skip = <uint8_t *>_data(arrays["batch_skipped"])
    cdef BatchDesc *bd
    cdef Py_ssize_t i
    for i in range(lo, hi):
        bd = &s.batches[i]
        b_pos[i] = bd.header - base
        b_size[i] = bd.size
        b_ts[i] = bd.base_ts
        b_base[i] = bd.base_offset
        b_last[i] = bd.base_offset + <int32_t>kl_be32(bd.header + KL_OFF_LAST_OFFSET_DELTA)
        b_pid[i] = <int64_t>kl_be64(bd.header + KL_OFF_PRODUCER_ID)
        b_attr[i] = bd.attributes
        b_start[i] = o.record
        b_skip[i] = bd.skipped
        if not bd.skipped and b_last[i] >= min_offset:
            _decode_batch_records(bd, o, min_offset)
    return 0


def decode_columns(data, *, bint skip_control=True, bint verify_crc=False,
                   aborted_transactions=None):
    """Decode every complete batch in ``data`` into a ``RecordColumns``.

    ``aborted_transactions`` (read_committed): the fetch response's list of
    (producer id, first offset); the records of aborted transactions are
    left out, as are all control batches. Malformed batches raise
    CorruptRecordError; a trailing partial batch is ignored (see
    ``bytes_consumed``).
    """
    cdef Py_buffer view
    cdef const unsigned char *base
    cdef Scan s
    cdef Out o
    cdef list keep_alive = []       # decompressed sections the descriptors point into
    cdef AbortedFilter aborted = None
    if aborted_transactions is not None:
        aborted = AbortedFilter(aborted_transactions)
        skip_control = True
    s.batches = NULL
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        s.capacity = 16
        s.count = s.records = s.record_bytes = s.consumed = 0
        s.next_offset = -1
        s.batches = <BatchDesc *>malloc(s.capacity * sizeof(BatchDesc))
        if s.batches == NULL:
            raise MemoryError()
        base = <const unsigned char *>view.buf
        _scan_batches(base, view.len, skip_control, verify_crc, &s, keep_alive, aborted)
        arrays = _allocate(&s, &o)
        _fill_batches(arrays, &s, &o, 0, s.count, base, INT64_MIN)
        return _assemble(arrays, &o, &s)
    finally:
        PyBuffer_Release(&view)
        free(s.batches)


def decode_chunks(list chunks, *, bint verify_crc=False):
    """Decode the fetched chunks of many partitions into one ``RecordColumns``,
    their records one after another in the order given: what the consumer's
    ``consume_batch`` turns into one Arrow batch. Decoding each chunk on
    its own costs a fixed 10 µs or so (two dozen arrays), and wrapping each
    as Arrow twice that again: most of the work when a fetch brings a
    record or two from each of many partitions.

    ``chunks``: (data, aborted_transactions or None, min_offset) per chunk,
    as ``decode_columns`` takes them, control batches always left out, and
    records below ``min_offset`` (the partition's position) left out too.
    The result has, besides the per-record and per-batch columns,
    ``chunk_records`` (int64: records kept of each chunk), and
    ``chunk_next_offsets`` / ``chunk_bytes_consumed`` (``next_offset`` and
    ``bytes_consumed`` of each chunk, as ``decode_columns`` gives them).
    ``batch_positions`` are positions within each batch's own chunk.
    """
    cdef Py_ssize_t nchunks = len(chunks), c, first
    cdef Py_buffer *views = NULL
    cdef Py_ssize_t *first_batch = NULL
    cdef int64_t *min_offsets = NULL
    cdef Py_ssize_t held = 0
    cdef Scan s
    cdef Out o
    cdef list keep_alive = []
    cdef AbortedFilter aborted
    cdef cnp.ndarray per_chunk = np.empty((3, nchunks), dtype=np.int64)
    cdef int64_t *c_records = <int64_t *>_data(per_chunk)
    cdef int64_t *c_next = c_records + nchunks
    cdef int64_t *c_consumed = c_next + nchunks
    s.batches = NULL
    views = <Py_buffer *>malloc(max(nchunks, 1) * sizeof(Py_buffer))
    first_batch = <Py_ssize_t *>malloc((nchunks + 1) * sizeof(Py_ssize_t))
    min_offsets = <int64_t *>malloc(max(nchunks, 1) * sizeof(int64_t))
    try:
        if views == NULL or first_batch == NULL or min_offsets == NULL:
            raise MemoryError()
        s.capacity = 16
        s.count = s.records = s.record_bytes = s.consumed = 0
        s.batches = <BatchDesc *>malloc(s.capacity * sizeof(BatchDesc))
        if s.batches == NULL:
            raise MemoryError()
        for c in range(nchunks):
            data, aborted_list, min_offset = chunks[c]
            min_offsets[c] = min_offset
            PyObject_GetBuffer(data, &views[c], PyBUF_SIMPLE)
            held += 1
            aborted = AbortedFilter(aborted_list) if aborted_list is not None else None
            first_batch[c] = s.count
            s.consumed = 0
            s.next_offset = -1
            _scan_batches(<const unsigned char *>views[c].buf, views[c].len, True, verify_crc,
                          &s, keep_alive, aborted)
            c_next[c] = s.next_offset
            c_consumed[c] = s.consumed
        first_batch[nchunks] = s.count
        arrays = _allocate(&s, &o)
        for c in range(nchunks):
            first = o.record
            _fill_batches(arrays, &s, &o, first_batch[c], first_batch[c + 1],
                          <const unsigned char *>views[c].buf, min_offsets[c])
            c_records[c] = o.record - first
        s.next_offset = c_next[nchunks - 1] if nchunks else -1
        s.consumed = c_consumed[nchunks - 1] if nchunks else 0
        cols = _assemble(arrays, &o, &s)
        if o.record < s.records:     # some were below a position: fewer than sized for
            cols.offsets = cols.offsets[:o.record]
            cols.timestamps = cols.timestamps[:o.record]
            cols.timestamp_types = cols.timestamp_types[:o.record]
            cols.key_offsets = cols.key_offsets[:o.record + 1]
            cols.key_valid = cols.key_valid[:o.record]
            cols.value_offsets = cols.value_offsets[:o.record + 1]
            cols.value_valid = cols.value_valid[:o.record]
            cols.header_offsets = cols.header_offsets[:o.record + 1]
        cols.chunk_records = per_chunk[0]
        cols.chunk_next_offsets = per_chunk[1]
        cols.chunk_bytes_consumed = per_chunk[2]
        return cols
    finally:
        for c in range(held):
            PyBuffer_Release(&views[c])
        free(views)
        free(first_batch)
        free(min_offsets)
        free(s.batches)
