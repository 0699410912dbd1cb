# cython: language_level=3
"""The facts a leader's append reads and changes, as C fields: the bases of
``PartitionLog`` (kafkalite/storage/log.py), ``LogSegment``
(kafkalite/storage/segment.py) and ``Partition``
(kafkalite/server/replica/partition.py), issue 72.

librdkafka at 100 partitions sends about one Produce request per message,
and the one-pass append (ext/leader_append.pyx) read and set about fifty of
these objects' attributes a batch through their instance dicts and slots:
a dict lookup or a walk of the type for each, and an int object made for
each number set -- 10,000 instructions of an append's 22,000 (callgrind).
As fields of a C base class each is a load or a store from C, and the
Python classes keep using them as before (``self._log_end``: a member
descriptor of the base, as quick from Python as a dict entry). Each fact
still has one owner, the object itself: there is no copy to keep in step.

``LogSegmentState`` also keeps the active segment's in-memory tail -- the
places of the batches this process appended last, up to the end of the
file, which a consumer at the log end finds its batch in without an index
lookup or a header read -- as a C array of rows instead of a list of
tuples: an append adds a row, not a tuple of four new ints.

The int64 fields hold ints only (a float or None assigned is a TypeError);
every other field is any object, as before. The declarations, with their
meanings where the classes define them, are in kafkalite/_ext/log_state.pxd.
Who may call: as the classes they are the bases of.
"""
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from libc.stdint cimport INT32_MAX, int64_t, uint64_t
from libc.string cimport memmove


cdef class PartitionLogState:
    """The base of ``PartitionLog``: its log start and end, high watermark,
    leader epoch, flush counters and what an append walks to."""


cdef enum:
    # batches the tail keeps: between KEPT_BATCHES and twice as many, the newest
    KEPT_BATCHES = 16
    ROW = 4                          # int64s a row: base, last, position, size
    BASE = 0
    LAST = 1
    POSITION = 2
    SIZE = 3

TAIL_BATCHES = KEPT_BATCHES          # for Python (segment.py's _TAIL_BATCHES)

# tail_lookup's answer when the tail cannot say (empty, not at the file's
# end, or the offset or position before its first batch)
NOT_IN_TAIL = False


cdef class LogSegmentState:
    """The base of ``LogSegment``: its base offset, size, next offset,
    largest timestamp, index cursor and in-memory tail.

    The tail: the batches appended last, oldest first, valid while
    ``_tail_end`` is the file's size (``tail_lookup`` checks)."""

    def __dealloc__(self):
        PyMem_Free(self.tail)

    cdef int tail_add_row(self, int64_t base_offset, int64_t last_offset, int64_t position,
                          int64_t size) except -1:
        cdef Py_ssize_t capacity
        cdef int64_t* grown
        cdef int64_t* row
        if self.tail_count == self.tail_capacity:
            capacity = max(2 * self.tail_capacity, 2 * KEPT_BATCHES + 1)
            grown = <int64_t*>PyMem_Realloc(self.tail, capacity * ROW * sizeof(int64_t))
            if grown == NULL:
                raise MemoryError()
            self.tail, self.tail_capacity = grown, capacity
        row = self.tail + self.tail_count * ROW
        row[BASE], row[LAST], row[POSITION], row[SIZE] = base_offset, last_offset, position, size
        self.tail_count += 1
        return 0

    cdef void tail_clear_rows(self) noexcept:
        self.tail_count = 0

    cdef void tail_trim_rows(self) noexcept:
        # past twice KEPT_BATCHES, the newest KEPT_BATCHES kept
        if self.tail_count > 2 * KEPT_BATCHES:
            memmove(self.tail, self.tail + (self.tail_count - KEPT_BATCHES) * ROW,
                    KEPT_BATCHES * ROW * sizeof(int64_t))
            self.tail_count = KEPT_BATCHES

    def tail_add(self, int64_t base_offset, int64_t last_offset, int64_t position,
                 int64_t size):
        """Keep the place of a batch just appended (after those kept)."""
        self.tail_add_row(base_offset, last_offset, position, size)

    def tail_clear(self):
        """Forget the batches kept (they no longer end at the file's end,
        or the segment is no longer the active one)."""
        self.tail_clear_rows()
        PyMem_Free(self.tail)
        self.tail, self.tail_capacity = NULL, 0

    def tail_trim(self):
        """After an append: past twice KEPT_BATCHES kept, only the newest KEPT_BATCHES."""
        self.tail_trim_rows()

    cdef const int64_t* tail_row(self, int64_t offset, int64_t start_position,
                                 bint* known) noexcept:
        # tail_lookup's search, in C: the row (base, last, position, size),
        # NULL past the last batch kept; ``known`` false when the tail
        # cannot say (tail_lookup's NOT_IN_TAIL)
        cdef Py_ssize_t lo = 0, hi = self.tail_count, mid
        known[0] = (hi and self._tail_end == self._size and offset >= self.tail[BASE]
                    and start_position <= self.tail[POSITION])
        if not known[0]:
            return NULL
        while lo < hi:                  # bisect_left on the last offsets
            mid = (lo + hi) // 2
            if self.tail[mid * ROW + LAST] < offset:
                lo = mid + 1
            else:
                hi = mid
        return NULL if lo == self.tail_count else self.tail + lo * ROW

    def tail_lookup(self, int64_t offset, int64_t start_position):
        """(base offset, last offset, position, size) of the first batch kept
        whose last offset is >= ``offset``, None when none is; NOT_IN_TAIL
        when the tail cannot say: nothing kept, not up to the file's end, or
        ``offset`` before its first batch or ``start_position`` after it."""
        cdef bint known
        cdef const int64_t* row = self.tail_row(offset, start_position, &known)
        if not known:
            return NOT_IN_TAIL
        if row == NULL:
            return None
        return (row[BASE], row[LAST], row[POSITION], row[SIZE])

    @property
    def tail_batches(self):
        """The batches kept, as (base offset, last offset, position, size), oldest first."""
        cdef Py_ssize_t i
        return [(self.tail[i * ROW + BASE], self.tail[i * ROW + LAST],
                 self.tail[i * ROW + POSITION], self.tail[i * ROW + SIZE])
                for i in range(self.tail_count)]


cdef inline void _put_be(char* at, int64_t v, int size) noexcept:
    cdef int k
    for k in range(size):
        at[k] = <char>(<uint64_t>v >> (8 * (size - 1 - k)))


cdef class IndexState:
    """The base of index.py's ``_IndexFile`` (``OffsetIndex``,
    ``TimeIndex``): its base offset, in-memory entries (``_data``, the
    file's format), last entry and fullness; and their appends of the
    common case from C, byte for byte the Python methods' (the one-pass
    append adds an entry every index.interval.bytes, a quarter of 1 KB
    appends, and the two Python calls were 4,000 instructions)."""

    cdef int offset_append(self, int64_t offset, int64_t position) except -1:
        # OffsetIndex.append: entry relativeOffset int32, position int32
        data = self._data
        last = self._last
        if type(data) is not bytearray or (last is None and len(<bytearray>data)):
            return 0
        if last is not None and (type(last) is not tuple or offset <= <int64_t>last[0]):
            return 0
        cdef int64_t rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX or not 0 <= position <= INT32_MAX:
            return 0
        self._append_entry(<bytearray>data, rel, 4, position, 4)
        self._last = (offset, position)
        return 1

    cdef int time_maybe_append(self, int64_t timestamp, int64_t offset) except -1:
        # TimeIndex.maybe_append: entry timestamp int64, relativeOffset int32
        data = self._data
        last = self._last
        if type(data) is not bytearray or (last is None and len(<bytearray>data)):
            return 0
        if last is not None and type(last) is not tuple:
            return 0
        cdef int64_t last_ts = -1 if last is None else <int64_t>last[0]
        if timestamp <= last_ts:
            return 1                    # it does not raise the largest timestamp indexed
        if last is not None and offset < <int64_t>last[1]:
            return 0
        cdef int64_t rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            return 0
        self._append_entry(<bytearray>data, timestamp, 8, rel, 4)
        self._last = (timestamp, offset)
        return 1

    def try_offset_append(self, int64_t offset, int64_t position):
        """``offset_append`` from Python (for tests): 1 appended, 0 left to ``append``."""
        return self.offset_append(offset, position)

    def try_time_append(self, int64_t timestamp, int64_t offset):
        """``time_maybe_append`` from Python (for tests): 1 done, 0 left to ``maybe_append``."""
        return self.time_maybe_append(timestamp, offset)

    cdef int _append_entry(self, bytearray data, int64_t a, int a_size, int64_t b,
                           int b_size) except -1:
        # _IndexFile._append_raw of an entry of two big-endian fields
        cdef Py_ssize_t n = PyByteArray_GET_SIZE(data)
        PyByteArray_Resize(data, n + a_size + b_size)
        cdef char* at = PyByteArray_AS_STRING(data) + n
        _put_be(at, a, a_size)
        _put_be(at + a_size, b, b_size)
        self.full = n + a_size + b_size >= self._full_size
        return 0


cdef class PartitionState:
    """The base of ``Partition``: its topic and index, leadership and
    replicas, and its log."""
