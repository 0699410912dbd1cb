# cython: language_level=3
"""The shared-memory produce ring: a producer on the same host hands whole
RecordBatch v2 blobs to the worker process that owns the partition, and gets
one ack per batch back, through one shared-memory segment.

Files (all in /dev/shm, mode 0600, created by the producer, owned by its user):

    kafkalite-ring-<id>      the segment (created O_EXCL, sized with fallocate)
    kafkalite-ring-<id>.w    the worker's doorbell FIFO (the producer writes a byte)
    kafkalite-ring-<id>.p    the producer's doorbell FIFO (the worker writes a byte)

Each process opens both FIFOs O_RDWR|O_NONBLOCK, so a writer never gets
ENXIO or SIGPIPE whether or not the other side is there, and a full FIFO
(EAGAIN) simply means the doorbell is already ringing.

Segment => header (4096 bytes) | data region (dataCapacity) | ack region (ackCapacity)

Header (little-endian; offsets are the KLR_OFF_* constants of shm_ring.h):

  line 0: set by create() before the magic, immutable afterwards
    magic u64              @0    the bytes "KLSHMRNG"; written last, with a release store
    version u32            @8    LAYOUT_VERSION
    headerSize u32         @12   4096
    dataCapacity u64       @16   power of two, MIN_CAPACITY..MAX_CAPACITY
    ackCapacity u64        @24   power of two, ackSlots * 32
    dataOffset u64         @32   = headerSize
    ackOffset u64          @40   = dataOffset + dataCapacity
    totalSize u64          @48   = ackOffset + ackCapacity = the file's size
    producerIdent u64      @56   process start time (clock ticks) << 22 | pid
  line 1: producer only
    dataHead u64           @64   data bytes published (release store)
    ackTail u64            @72   ack bytes consumed
    producerState u32      @80   1 open, 2 closed cleanly
    nextSequence u64       @88   sequence of the next entry (for inspection only)
  line 2: worker only
    dataReleased u64       @128  data bytes the worker gave back (release store)
    ackHead u64            @136  ack bytes published (release store)
    workerIdent u64        @144  like producerIdent; 0 = no worker (taken by CAS)
    workerEpoch u64        @152  attach count; a worker is fenced once it changes
  lines 3, 4: sleep flags, set by their owner, taken down by either side (exchange)
    workerSleeping u32     @192
    producerSleeping u32   @256
  line 5: worker only, written once when the worker gives up on the ring
    workerError int32      @320  0, or the Kafka error code it closed the ring with
                                 (release store, after the message)
    workerMessageLen u32   @324  at most 256
    workerMessage          @328  UTF-8: what the worker found wrong
  line 10: set by create() before the magic, immutable afterwards
    attachSecret 16 bytes  @640  random (os.urandom): shown by whoever asks a worker to
                                 attach the ring (see "A peer naming a ring" below)

Data entry (8-byte aligned; never split across the end of the region):
    size u32               @0    whole entry incl. padding, a multiple of 8
    kind u8                @4    'E'
    topicLength u8         @5    1..249 (Kafka's limit)
    reserved u16           @6    0
    sequence u64           @8    0, 1, 2, ... per ring, assigned by the producer
    partition int32        @16
    batchLength u32        @20
    topic                  @24   UTF-8
    batch                  @24 + align8(topicLength)
  An entry that does not fit before the end of the region is preceded by a
  padding marker (size u32 @0 = bytes to the end, kind u8 'P' @4) and starts
  at position 0. The producer also "rewinds" this way before the end, once
  past min(dataCapacity / 4, 2 MiB), whenever everything live plus the new
  entry fits below its position: a worker that keeps up then works in a
  cache-hot window instead of streaming the whole region through memory
  (about twice the throughput of 100 KB batches). No entry may exceed
  dataCapacity / 2, so an empty ring always has room for any legal entry,
  wherever its head is. A padding marker is always followed by an entry at
  position 0, published together with it.

Ack record (32 bytes, ackCapacity / 32 slots):
    sequence u64 @0, baseOffset int64 @8, dataEnd u64 @16 (data cursor just
    past the acked entry), errorCode int16 @24, zero @26..31.

Cursors are 64-bit byte counters that only grow; a position is
cursor & (capacity - 1). One producer and one consumer per direction, no
locks: a side publishes a cursor with a release store after writing the bytes
it covers, and the other side reads it with an acquire load before reading
them, so a worker never sees a torn entry even if the producer dies mid-copy.

Invariants:
  - dataHead - min(dataReleased, producer's acked cursor) <= dataCapacity:
    the producer reuses space only when the worker has both released it
    (it is done with the entry) and acked it (it is not needed for a re-send).
  - entries appended whose ack the producer has not yet collected
    <= ackSlots, so the worker never finds the ack region full.
  - an entry counts as acked once its ack record is published (ackHead). The
    last published ack's dataEnd is the resume point of the next worker to
    attach: every entry after it is delivered again, none before it.

Sleep/wake: before blocking, a side sets its sleep flag, issues a full fence
and re-checks the cursor it waits on; after publishing, the other side issues
a full fence, reads the flag and, if it takes it down (exchange 1 -> 0),
writes one byte to the sleeper's FIFO. Doorbells cost a syscall only when
the peer is actually asleep. Attach and close also write one byte
unconditionally, so a blocked peer re-checks liveness at once; a sleeper
therefore drains its FIFO when it arms and again after waking, and a stale
byte costs at most one spurious wake-up.

A hostile or broken producer:
  The worker trusts nothing in the shared memory beyond the moment it reads
  it. It validates the header once at attach and keeps its own copies of
  the capacities and region pointers; every cursor it reads is checked
  against the capacity, every entry against its bounds, and what it needs
  again later (where each polled entry ends, for its ack and release) it
  keeps in private memory instead of re-reading the ring. poll() copies each
  batch into a private bytearray, so the producer cannot change a batch
  after the worker validated it, and nothing downstream (the log's checks,
  its write(2)) ever reads the shared mapping. Anything impossible raises
  RingCorrupted; the worker then closes the ring with close_with_error(),
  which leaves the error code and message in header line 5 for the
  producer (ProducerRing raises RingPoisoned).
  A producer can also truncate the segment under the worker, and an access
  past the new end of a mapped file raises SIGBUS, which kills a process by
  default. Checking the size with fstat before each access leaves a race
  (the truncation can land between the check and the read), and neither
  MAP_POPULATE nor mlock keeps the pages of a truncated file mapped. Memfd
  seals (F_SEAL_SHRINK) would forbid the truncation itself, but only for a
  memfd handed over by descriptor, not for a ring opened by name in
  /dev/shm. So the worker's mappings are registered with a SIGBUS handler
  (shm_ring.h, klr_guard_*) that maps private zero pages over the rest of a
  mapping that faulted and marks it: the access that faulted completes,
  reading zeros, whichever code it was in (a copy without the GIL
  included), and every WorkerCore operation checks the mark and raises
  RingCorrupted for a truncated ring, however the truncation raced it.

A peer naming a ring:
  A worker runs as the server's user (often root) and opens the ring a
  request names, so whoever can send it ``shm_attach`` could make it
  attach a ring that is not theirs: another local user reads the names in
  /dev/shm, which anyone may list, and the worker's attach took the ring
  over from the worker draining it (the same process may attach again),
  under the asker's principal, so the owner's entries were then refused
  (issue 67). The name, the files behind it and everything in them are the
  asker's to forge: a symbolic or hard link to someone else's ring, a ring
  of their own whose doorbell is a link to someone else's file. So
  attach(name, secret, owner):
  - opens every file with O_NOFOLLOW and checks what it opened (fstat of
    that descriptor, never the path again): the segment a regular file,
    the doorbells FIFOs, each with one link, no permission bits for group
    or others, and all three of one owner -- ``owner``, when the caller
    knows the asker's uid from the kernel (a Unix-domain peer's
    SO_PEERCRED);
  - compares ``secret`` with attachSecret (constant time) before anything
    in the segment is read out or written: the secret is in a file only its
    owner (and root) can read, so showing it proves the asker can read the
    ring, whatever channel it came by (a CURVE key over TCP has no uid);
  - raises RingRefused for an asker who fails either check, saying only why
    the files are not theirs (what stat tells anyone), never what is in
    them; the worker slot is taken only after both checks passed.

Who may call what:
  - ProducerCore: one thread of the process that created the ring.
  - WorkerCore: one thread of the process that attached; at most one live
    worker per ring (attach refuses while another worker process is alive;
    the same process may attach again, which fences its older handle).
  - arm() / disarm() / fileno(): the owning thread, for event loops that
    poll the doorbell with other descriptors.
  - Handles are not for use after fork(); close() in a child process only
    drops its own file descriptors and mapping, it never touches the header
    or unlinks files.
The blocking waits (append, wait_acks, wait), peer liveness and the public
names live in kafkalite/shm/ring.py; this module is the non-blocking core.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_FromStringAndSize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.unicode cimport PyUnicode_Check
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy
from posix.mman cimport MAP_FAILED, MAP_SHARED, PROT_READ, PROT_WRITE, mmap, munmap
from posix.unistd cimport close, read, write

import collections
import errno
import hmac
import os
import secrets
import stat

cdef extern from "Python.h":
    const char *_utf8_and_size "PyUnicode_AsUTF8AndSize"(object, Py_ssize_t *) except NULL
    object PyUnicode_DecodeUTF8(const char *, Py_ssize_t, const char *)

cdef extern from "shm_ring.h" nogil:
    enum:
        KLR_VERSION
        KLR_HEADER_SIZE
        KLR_OFF_MAGIC
        KLR_OFF_VERSION
        KLR_OFF_HEADER_SIZE
        KLR_OFF_DATA_CAPACITY
        KLR_OFF_ACK_CAPACITY
        KLR_OFF_DATA_OFFSET
        KLR_OFF_ACK_OFFSET
        KLR_OFF_TOTAL_SIZE
        KLR_OFF_PRODUCER_IDENT
        KLR_OFF_DATA_HEAD
        KLR_OFF_ACK_TAIL
        KLR_OFF_PRODUCER_STATE
        KLR_OFF_NEXT_SEQUENCE
        KLR_OFF_DATA_RELEASED
        KLR_OFF_ACK_HEAD
        KLR_OFF_WORKER_IDENT
        KLR_OFF_WORKER_EPOCH
        KLR_OFF_WORKER_SLEEPING
        KLR_OFF_PRODUCER_SLEEPING
        KLR_OFF_WORKER_ERROR
        KLR_OFF_WORKER_MESSAGE_LEN
        KLR_OFF_WORKER_MESSAGE
        KLR_MAX_WORKER_MESSAGE
        KLR_OFF_ATTACH_SECRET
        KLR_ATTACH_SECRET_SIZE
        KLR_MAX_GUARDED
        KLR_PRODUCER_OPEN
        KLR_PRODUCER_CLOSED
        KLR_ENT_SIZE
        KLR_ENT_KIND
        KLR_ENT_TOPIC_LEN
        KLR_ENT_RESERVED
        KLR_ENT_SEQUENCE
        KLR_ENT_PARTITION
        KLR_ENT_BATCH_LEN
        KLR_ENT_TOPIC
        KLR_ENT_HEADER_SIZE
        KLR_PAD_HEADER_SIZE
        KLR_KIND_ENTRY
        KLR_KIND_PAD
        KLR_MAX_TOPIC_LEN
        KLR_ACK_SEQUENCE
        KLR_ACK_BASE_OFFSET
        KLR_ACK_DATA_END
        KLR_ACK_ERROR_CODE
        KLR_ACK_SIZE
    unsigned long long KLR_MAGIC
    uint64_t klr_align8(uint64_t n)
    uint64_t klr_load_acquire(const unsigned char *p)
    uint64_t klr_load_relaxed(const unsigned char *p)
    void klr_store_release(unsigned char *p, uint64_t v)
    void klr_store_relaxed(unsigned char *p, uint64_t v)
    uint32_t klr_load32_acquire(const unsigned char *p)
    void klr_store32_release(unsigned char *p, uint32_t v)
    int klr_cas(unsigned char *p, uint64_t expected, uint64_t desired)
    void klr_sleep_announce(unsigned char *flag)
    uint32_t klr_sleep_take(unsigned char *flag)
    int klr_wake_needed(unsigned char *flag)
    int klr_spin_until_change(const unsigned char *a, uint64_t old_a,
                              const unsigned char *b, uint64_t old_b, uint64_t max_ns)
    int klr_guard_add(void *start, size_t size)
    void klr_guard_remove(int slot)
    int klr_guard_faulted(int slot)

# ---- constants -----------------------------------------------------------------------

SHM_DIR = "/dev/shm"
NAME_PREFIX = "kafkalite-ring-"
WORKER_BELL_SUFFIX = ".w"
PRODUCER_BELL_SUFFIX = ".p"

MAGIC = KLR_MAGIC
LAYOUT_VERSION = KLR_VERSION
HEADER_SIZE = KLR_HEADER_SIZE
ENTRY_HEADER_SIZE = KLR_ENT_HEADER_SIZE
ACK_RECORD_SIZE = KLR_ACK_SIZE
MAX_TOPIC_LENGTH = KLR_MAX_TOPIC_LEN

DEFAULT_CAPACITY = 64 << 20
MIN_CAPACITY = 4096
MAX_CAPACITY = 1 << 32          # entry sizes are u32 and at most capacity / 2
MIN_ACK_SLOTS = 16
MAX_ACK_SLOTS = 1 << 24

# Header offsets, for inspection tools and tests.
OFF_MAGIC = KLR_OFF_MAGIC
OFF_VERSION = KLR_OFF_VERSION
OFF_HEADER_SIZE = KLR_OFF_HEADER_SIZE
OFF_DATA_CAPACITY = KLR_OFF_DATA_CAPACITY
OFF_ACK_CAPACITY = KLR_OFF_ACK_CAPACITY
OFF_TOTAL_SIZE = KLR_OFF_TOTAL_SIZE
OFF_PRODUCER_IDENT = KLR_OFF_PRODUCER_IDENT
OFF_DATA_HEAD = KLR_OFF_DATA_HEAD
OFF_DATA_RELEASED = KLR_OFF_DATA_RELEASED
OFF_ACK_HEAD = KLR_OFF_ACK_HEAD
OFF_WORKER_IDENT = KLR_OFF_WORKER_IDENT
OFF_WORKER_EPOCH = KLR_OFF_WORKER_EPOCH
OFF_WORKER_ERROR = KLR_OFF_WORKER_ERROR
OFF_ATTACH_SECRET = KLR_OFF_ATTACH_SECRET
ATTACH_SECRET_SIZE = KLR_ATTACH_SECRET_SIZE
MAX_GUARDED_MAPPINGS = KLR_MAX_GUARDED

# A process ident packs the pid (Linux pids are < 2**22) with the process
# start time, so a recycled pid is not mistaken for the peer.
PID_BITS = 22
cdef uint64_t PID_MASK = (1 << 22) - 1

# Adaptive spin before sleeping: doubles after a spin that saw news, halves
# after one that did not, within these bounds.
cdef uint64_t SPIN_MIN_NS = 1000
cdef uint64_t SPIN_MAX_NS = 20000
# A producer whose worker keeps up goes back to position 0 once past this
# many bytes (see ProducerCore._append).
cdef uint64_t REWIND_BYTES = 2 << 20
# Below this size copying with the GIL held is cheaper than releasing it.
DEF NOGIL_COPY = 65536


class RingError(Exception):
    """Base of the shared-memory ring's errors."""


class RingTimeout(RingError, TimeoutError):
    """append() found no room in the ring before its timeout."""


class PeerGone(RingError, ConnectionError):
    """The other side of the ring is gone: its process died or it closed."""


class RingFenced(RingError):
    """Another worker attached to this ring; this handle may no longer touch it."""


class RingCorrupted(RingError):
    """The shared memory holds something the ring protocol never writes
    (or the segment was truncated under the worker)."""


class RingRefused(RingError):
    """attach() was asked for a ring the asker did not prove is theirs (the
    module doc's "A peer naming a ring"); nothing of the ring was touched."""


class RingPoisoned(PeerGone):
    """The worker closed the ring because of what it found in it; ``code``
    is the Kafka error code it left in the header, the text its reason."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


# ---- helpers -------------------------------------------------------------------------

def default_ack_slots(capacity):
    """Ack slots of a ring of ``capacity`` data bytes when create() is not told:
    one per KiB of data, at least 256, at most 2**20."""
    return int(min(max(capacity // 1024, 256), 1 << 20))


def entry_size(Py_ssize_t topic_length, Py_ssize_t batch_length):
    """Bytes an entry takes in the data region (header, topic, batch, padding)."""
    return int(klr_align8(KLR_ENT_HEADER_SIZE + klr_align8(topic_length) + batch_length))


def ring_name(name=None):
    """The segment name for ``name``: NAME_PREFIX is added when missing; None
    makes a fresh name from the pid and 48 random bits."""
    if name is None:
        return f"{NAME_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    if not isinstance(name, str):
        raise TypeError(f"a ring name is a str, not {type(name).__name__}")
    if not name.startswith(NAME_PREFIX):
        name = NAME_PREFIX + name
    if "/" in name or "\0" in name or len(name.encode()) > 200 or name in (".", ".."):
        raise ValueError(f"invalid ring name {name!r}: no '/', no NUL, at most 200 bytes")
    return name


def process_ident(pid=None):
    """(start time << 22) | pid of a live process (default: this one), as
    stored in the header; 0 when the process does not exist."""
    if pid is None:
        pid = os.getpid()
    fields = _stat_fields(pid)
    if fields is None:
        return 0
    return (int(fields[19]) << PID_BITS) | pid


def process_alive(uint64_t ident):
    """True when the process named by a header ident is running: it exists,
    is not a zombie, and started when the ident says (so a recycled pid is
    not mistaken for it)."""
    if ident == 0:
        return False
    fields = _stat_fields(<int>(ident & PID_MASK))
    return (fields is not None and fields[0] not in (b"Z", b"X", b"x")
            and int(fields[19]) == (ident >> PID_BITS))


cdef object _stat_fields(int pid):
    # /proc/<pid>/stat after the parenthesised command name: state is [0],
    # starttime (field 22 of proc(5)) is [19].
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return data[data.rindex(b")") + 2:].split()


cdef inline uint64_t _u64(const unsigned char *p) noexcept nogil:
    return (<const uint64_t *>p)[0]


cdef inline uint32_t _u32(const unsigned char *p) noexcept nogil:
    return (<const uint32_t *>p)[0]


cdef void _ring_doorbell(int fd) noexcept nogil:
    # EAGAIN: the FIFO is full, the doorbell is ringing already.
    cdef char one = 1
    if fd >= 0:
        write(fd, &one, 1)


cdef void _drain_doorbell(int fd) noexcept nogil:
    cdef char buf[256]
    if fd >= 0:
        while read(fd, buf, sizeof(buf)) > 0:
            pass


# Opening never follows a link, never blocks (a FIFO), never takes a terminal.
cdef int _OPEN_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NOCTTY


cdef int _open_ring_file(str path, str what) except -1:
    try:
        return os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RingRefused(f"{path} is a symbolic link, not a ring's {what}") from None
        raise


cdef int _check_owned(object st, str path, str what, object owner) except -1:
    """RingRefused unless the file ``st`` (fstat of what was opened) is a
    ring's as its producer makes it: one link, its owner's only, and owned
    by ``owner`` (None: any user)."""
    if owner is not None and st.st_uid != owner:
        raise RingRefused(f"{path} belongs to uid {st.st_uid}, not to uid {owner}")
    if st.st_nlink != 1:
        raise RingRefused(f"{path} has {st.st_nlink} links: not a ring's {what}")
    if st.st_mode & 0o077:
        raise RingRefused(f"{path} has mode {stat.S_IMODE(st.st_mode):04o}: a ring's {what} "
                          f"is its owner's only (0600)")
    return 0


cdef int _open_bell(str path, object owner) except -1:
    """One end of a doorbell FIFO of ``owner`` (a uid), O_RDWR|O_NONBLOCK
    (see the module doc)."""
    cdef int fd
    try:
        fd = _open_ring_file(path, "doorbell FIFO")
    except FileNotFoundError:
        raise ValueError(f"doorbell FIFO {path} is missing: not a complete kafkalite ring") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISFIFO(st.st_mode):
            raise ValueError(f"{path} is not a FIFO: not a kafkalite ring doorbell")
        _check_owned(st, path, "doorbell FIFO", owner)
    except BaseException:
        os.close(fd)
        raise
    return fd


def unlink_ring(name):
    """Remove the segment and both FIFOs of ring ``name`` (those that exist)."""
    path = os.path.join(SHM_DIR, ring_name(name))
    for suffix in ("", WORKER_BELL_SUFFIX, PRODUCER_BELL_SUFFIX):
        _unlink_quietly(path + suffix)


def _unlink_quietly(str path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---- the mapping ---------------------------------------------------------------------

@cython.final
cdef class _Mapping:
    """One mmap of a ring segment, unmapped when its last user lets go
    (a worker's mapping is under the SIGBUS guard: module doc)."""
    cdef unsigned char *addr
    cdef size_t size
    cdef int guard                    # SIGBUS guard slot (worker side), -1: none

    def __cinit__(self):
        self.guard = -1

    cdef inline bint faulted(self) noexcept:
        return klr_guard_faulted(self.guard)

    def __dealloc__(self):
        if self.addr != NULL:
            klr_guard_remove(self.guard)
            munmap(self.addr, self.size)
            self.addr = NULL


cdef _Mapping _map_segment(int fd, size_t size, bint guard=False):
    """Map the segment; with ``guard``, under the SIGBUS guard (module doc)."""
    cdef void *addr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
    if addr == MAP_FAILED:
        raise OSError(f"mmap of {size} bytes of the ring segment failed")
    cdef _Mapping m = _Mapping.__new__(_Mapping)
    m.addr = <unsigned char *>addr
    m.size = size
    if guard:
        m.guard = klr_guard_add(addr, size)
        if m.guard < 0:
            raise OSError(f"this process has {KLR_MAX_GUARDED} rings mapped already")
    return m


# ---- common core ---------------------------------------------------------------------

cdef class _RingCore:
    """State both sides share: the mapping, region pointers, doorbells."""
    cdef _Mapping _map
    cdef unsigned char *_hdr
    cdef unsigned char *_data
    cdef unsigned char *_acks
    cdef uint64_t _cap
    cdef uint64_t _mask
    cdef uint64_t _ack_cap
    cdef uint64_t _ack_mask
    cdef unsigned char *_own_flag     # our sleep flag in the header
    cdef unsigned char *_peer_flag    # the peer's
    cdef int _bell_fd                 # our doorbell, read side (fileno())
    cdef int _peer_bell_fd            # the peer's doorbell, write side
    cdef bint _armed
    cdef uint64_t _spin_ns
    cdef int _owner_pid
    cdef readonly str name
    cdef readonly str path

    def __cinit__(self):
        self._bell_fd = -1
        self._peer_bell_fd = -1
        self._spin_ns = 4 * SPIN_MIN_NS

    def __init__(self, *args, **kwargs):
        raise TypeError(f"use {type(self).__name__}.create() or .attach(), not the constructor")

    def __dealloc__(self):
        self._drop()

    cdef void _drop(self) noexcept:
        """Close our descriptors and let go of the mapping."""
        if self._bell_fd >= 0:
            close(self._bell_fd)
        if self._peer_bell_fd >= 0:
            close(self._peer_bell_fd)
        self._bell_fd = self._peer_bell_fd = -1
        self._hdr = self._data = self._acks = NULL
        self._own_flag = self._peer_flag = NULL
        self._map = None

    cdef int _setup(self, _Mapping m, str name, str path, bint producer, uint64_t cap,
                    uint64_t ack_cap, object owner) except -1:
        # The capacities as validated, never re-read from the shared header:
        # a producer may change it after the check.
        self._map = m
        self._hdr = m.addr
        self._cap = cap
        self._mask = cap - 1
        self._ack_cap = ack_cap
        self._ack_mask = ack_cap - 1
        self._data = m.addr + KLR_HEADER_SIZE
        self._acks = m.addr + KLR_HEADER_SIZE + cap
        if producer:
            self._own_flag = m.addr + KLR_OFF_PRODUCER_SLEEPING
            self._peer_flag = m.addr + KLR_OFF_WORKER_SLEEPING
            self._bell_fd = _open_bell(path + PRODUCER_BELL_SUFFIX, owner)
            self._peer_bell_fd = _open_bell(path + WORKER_BELL_SUFFIX, owner)
        else:
            self._own_flag = m.addr + KLR_OFF_WORKER_SLEEPING
            self._peer_flag = m.addr + KLR_OFF_PRODUCER_SLEEPING
            self._bell_fd = _open_bell(path + WORKER_BELL_SUFFIX, owner)
            self._peer_bell_fd = _open_bell(path + PRODUCER_BELL_SUFFIX, owner)
        self.name = name
        self.path = path
        self._owner_pid = os.getpid()
        return 0

    cdef inline int _check_open(self) except -1:
        if self._hdr == NULL:
            raise ValueError(f"ring {self.name} is closed")
        return 0

    cdef inline void _wake_peer(self) noexcept:
        if klr_wake_needed(self._peer_flag):
            _ring_doorbell(self._peer_bell_fd)

    @property
    def capacity(self):
        """Bytes in the data region."""
        return self._cap

    @property
    def ack_slots(self):
        return self._ack_cap // KLR_ACK_SIZE

    @property
    def max_entry_size(self):
        """Largest entry (see entry_size) the ring accepts: capacity / 2."""
        return self._cap // 2

    @property
    def closed(self):
        return self._hdr == NULL

    @property
    def producer_pid(self):
        self._check_open()
        return int(klr_load_relaxed(self._hdr + KLR_OFF_PRODUCER_IDENT) & PID_MASK)

    @property
    def worker_pid(self):
        """Pid of the attached worker, 0 when none is attached."""
        self._check_open()
        return int(klr_load_acquire(self._hdr + KLR_OFF_WORKER_IDENT) & PID_MASK)

    @property
    def worker_epoch(self):
        """How many times a worker attached to this ring (0: never)."""
        self._check_open()
        return int(klr_load_acquire(self._hdr + KLR_OFF_WORKER_EPOCH))

    def _producer_ident(self):
        return int(klr_load_relaxed(self._hdr + KLR_OFF_PRODUCER_IDENT)) if self._hdr else 0

    def _worker_ident(self):
        return int(klr_load_acquire(self._hdr + KLR_OFF_WORKER_IDENT)) if self._hdr else 0

    def worker_error(self):
        """(Kafka error code, message) the worker closed the ring with, or
        None while it has not given up on it."""
        cdef int32_t code
        cdef uint32_t n
        self._check_open()
        code = <int32_t>klr_load32_acquire(self._hdr + KLR_OFF_WORKER_ERROR)
        if code == 0:
            return None
        n = _u32(self._hdr + KLR_OFF_WORKER_MESSAGE_LEN)
        if n > KLR_MAX_WORKER_MESSAGE:
            n = KLR_MAX_WORKER_MESSAGE
        return (int(code), PyUnicode_DecodeUTF8(<const char *>self._hdr + KLR_OFF_WORKER_MESSAGE,
                                                n, "replace"))

    def _producer_open(self):
        return self._hdr != NULL and \
            klr_load32_acquire(self._hdr + KLR_OFF_PRODUCER_STATE) == KLR_PRODUCER_OPEN

    def fileno(self):
        """This side's doorbell FIFO, for select/poll/zmq.Poller. It turns
        readable only while the side is armed (see arm())."""
        self._check_open()
        return self._bell_fd

    def disarm(self):
        """Take our sleep flag down again; drains the doorbell if the peer rang it."""
        if self._armed and self._hdr != NULL:
            self._armed = False
            if klr_sleep_take(self._own_flag) == 0:
                # the peer took the flag: its byte is in the FIFO or on its way
                _drain_doorbell(self._bell_fd)

    def _drain(self):
        _drain_doorbell(self._bell_fd)

    cdef int _spin_on(self, unsigned char *a, unsigned char *b) except -1:
        """Spin (without the GIL) until cursor a or b moves or the adaptive
        budget runs out; 1 when it moved."""
        cdef uint64_t old_a = klr_load_acquire(a)
        cdef uint64_t old_b = klr_load_acquire(b) if b != NULL else 0
        cdef uint64_t budget = self._spin_ns
        cdef int moved
        with nogil:
            moved = klr_spin_until_change(a, old_a, b, old_b, budget)
        if moved:
            self._spin_ns = min(budget * 2, SPIN_MAX_NS)
        else:
            self._spin_ns = max(budget // 2, SPIN_MIN_NS)
        return moved


# ---- producer ------------------------------------------------------------------------

cdef class ProducerCore(_RingCore):
    """Producer side: creates the ring, appends entries, collects acks.

    Main write interface: try_append. Acks are collected into a pending list
    whenever the producer looks at the ack region (try_append short of room,
    poll_acks, unacked), so a producer that reads its acks late still makes
    progress; poll_acks hands the list over.

    ``attach_secret``: what the worker must be shown with the ring's name
    (shm_attach); tell it to the worker only.
    """
    cdef readonly bytes attach_secret
    cdef uint64_t _head               # == dataHead; only this side writes it
    cdef uint64_t _next_seq
    cdef uint64_t _ack_tail           # ack bytes consumed
    cdef uint64_t _acked_cursor       # data cursor of the first entry without a collected ack
    cdef uint64_t _acked_seq          # its sequence == acks collected so far
    cdef uint64_t _ack_slots
    cdef uint64_t _reclaim            # min(released, acked cursor) at the last room check
    cdef uint64_t _rewind_at          # see _append
    cdef list _pending

    @classmethod
    def create(cls, capacity=DEFAULT_CAPACITY, name=None, *, ack_slots=None):
        """Create a ring: the segment (O_EXCL) and both doorbell FIFOs.

        ``capacity`` (data bytes) must be a power of two in
        MIN_CAPACITY..MAX_CAPACITY; ``ack_slots`` (a power of two) bounds the
        entries in flight, default default_ack_slots(capacity). FileExistsError
        when the name is taken.
        """
        cdef uint64_t cap = _check_capacity(capacity)
        cdef uint64_t slots = default_ack_slots(cap) if ack_slots is None else ack_slots
        if slots < MIN_ACK_SLOTS or slots > MAX_ACK_SLOTS or slots & (slots - 1):
            raise ValueError(f"ack_slots must be a power of two in {MIN_ACK_SLOTS}..{MAX_ACK_SLOTS}, "
                             f"not {ack_slots}")
        cdef uint64_t ack_cap = slots * KLR_ACK_SIZE
        cdef uint64_t total = KLR_HEADER_SIZE + cap + ack_cap
        cdef ProducerCore self = cls.__new__(cls)
        cdef _Mapping m
        cdef unsigned char *h
        ring = ring_name(name)
        path = os.path.join(SHM_DIR, ring)
        created = []
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        created.append(path)
        try:
            # Reserve the memory now: a sparse tmpfs file would SIGBUS on a
            # page fault when /dev/shm fills up, instead of failing here.
            os.posix_fallocate(fd, 0, total)
            for suffix in (WORKER_BELL_SUFFIX, PRODUCER_BELL_SUFFIX):
                os.mkfifo(path + suffix, 0o600)
                created.append(path + suffix)
            m = _map_segment(fd, total)
            h = m.addr
            (<uint32_t *>(h + KLR_OFF_VERSION))[0] = KLR_VERSION
            (<uint32_t *>(h + KLR_OFF_HEADER_SIZE))[0] = KLR_HEADER_SIZE
            (<uint64_t *>(h + KLR_OFF_DATA_CAPACITY))[0] = cap
            (<uint64_t *>(h + KLR_OFF_ACK_CAPACITY))[0] = ack_cap
            (<uint64_t *>(h + KLR_OFF_DATA_OFFSET))[0] = KLR_HEADER_SIZE
            (<uint64_t *>(h + KLR_OFF_ACK_OFFSET))[0] = KLR_HEADER_SIZE + cap
            (<uint64_t *>(h + KLR_OFF_TOTAL_SIZE))[0] = total
            (<uint64_t *>(h + KLR_OFF_PRODUCER_IDENT))[0] = <uint64_t>process_ident()
            (<uint32_t *>(h + KLR_OFF_PRODUCER_STATE))[0] = KLR_PRODUCER_OPEN
            secret = os.urandom(KLR_ATTACH_SECRET_SIZE)
            memcpy(h + KLR_OFF_ATTACH_SECRET, <const char *>secret, KLR_ATTACH_SECRET_SIZE)
            klr_store_release(h + KLR_OFF_MAGIC, KLR_MAGIC)
            self._setup(m, ring, path, True, cap, ack_cap, os.geteuid())
            self.attach_secret = secret
        except BaseException:
            self._drop()
            for p in created:
                _unlink_quietly(p)
            raise
        finally:
            os.close(fd)
        self._ack_slots = slots
        self._rewind_at = min(cap // 4, REWIND_BYTES)
        self._pending = []
        return self

    # -- main write interface --

    def try_append(self, topic, int32_t partition, batch):
        """Append one entry if it fits now: its sequence number (>= 0), or
        -1 when there is no room (nothing was written; back-pressure).

        ``batch`` is any bytes-like object, copied once into the ring.
        ValueError for a topic that is empty or longer than 249 UTF-8 bytes,
        a negative partition, or an entry larger than capacity / 2.
        """
        cdef Py_ssize_t tlen
        cdef const char *t
        cdef Py_buffer view
        self._check_open()
        if not PyUnicode_Check(topic):
            raise TypeError(f"topic must be a str, not {type(topic).__name__}")
        t = _utf8_and_size(topic, &tlen)
        if tlen == 0 or tlen > KLR_MAX_TOPIC_LEN:
            raise ValueError(f"topic name must be 1..{KLR_MAX_TOPIC_LEN} bytes of UTF-8, "
                             f"not {tlen}")
        if partition < 0:
            raise ValueError(f"partition must be >= 0, not {partition}")
        PyObject_GetBuffer(batch, &view, PyBUF_SIMPLE)
        try:
            return self._append(<const unsigned char *>t, tlen, partition,
                                <const unsigned char *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    cdef int64_t _append(self, const unsigned char *topic, Py_ssize_t tlen, int32_t partition,
                         const unsigned char *src, Py_ssize_t blen) except -2:
        cdef uint64_t batch_off = KLR_ENT_HEADER_SIZE + klr_align8(tlen)
        cdef uint64_t size = klr_align8(batch_off + <uint64_t>blen)
        cdef uint64_t pos
        cdef unsigned char *p
        cdef uint64_t seq = self._next_seq
        if size > self._cap // 2:
            raise ValueError(f"entry of {size} bytes (batch {blen}, topic {tlen}) is larger than "
                             f"half the ring ({self._cap // 2} bytes)")
        if not self._has_room(size):
            self._collect()
            if not self._has_room(size):
                return -1
        pos = self._head & self._mask
        # Wrap at the end of the region, or rewind early when everything
        # still live plus this entry fits below the current position: a
        # worker that keeps up then keeps the ring's working set within the
        # first REWIND_BYTES (cache-hot) instead of streaming the whole
        # region through memory. Either way a padding marker covers the rest.
        if pos + size > self._cap or \
                (pos >= self._rewind_at and self._head - self._reclaim + size <= pos):
            p = self._data + pos
            (<uint32_t *>(p + KLR_ENT_SIZE))[0] = <uint32_t>(self._cap - pos)
            p[KLR_ENT_KIND] = KLR_KIND_PAD
            self._head += self._cap - pos
            pos = 0
        p = self._data + pos
        (<uint32_t *>(p + KLR_ENT_SIZE))[0] = <uint32_t>size
        p[KLR_ENT_KIND] = KLR_KIND_ENTRY
        p[KLR_ENT_TOPIC_LEN] = <uint8_t>tlen
        p[KLR_ENT_RESERVED] = 0
        p[KLR_ENT_RESERVED + 1] = 0
        (<uint64_t *>(p + KLR_ENT_SEQUENCE))[0] = seq
        (<int32_t *>(p + KLR_ENT_PARTITION))[0] = partition
        (<uint32_t *>(p + KLR_ENT_BATCH_LEN))[0] = <uint32_t>blen
        memcpy(p + KLR_ENT_TOPIC, topic, tlen)
        if blen >= NOGIL_COPY:
            with nogil:
                memcpy(p + batch_off, src, blen)
        else:
            memcpy(p + batch_off, src, blen)
        self._head += size
        self._next_seq = seq + 1
        klr_store_release(self._hdr + KLR_OFF_DATA_HEAD, self._head)
        klr_store_relaxed(self._hdr + KLR_OFF_NEXT_SEQUENCE, self._next_seq)
        self._wake_peer()
        return <int64_t>seq

    cdef inline bint _has_room(self, uint64_t size) noexcept:
        cdef uint64_t pos = self._head & self._mask
        cdef uint64_t need = size
        cdef uint64_t released, reclaim
        if self._next_seq - self._acked_seq >= self._ack_slots:
            return False
        if pos + size > self._cap:
            need += self._cap - pos
        released = klr_load_acquire(self._hdr + KLR_OFF_DATA_RELEASED)
        # Both conditions free space: released (the worker is done) and acked
        # (not needed for a re-send). A worker's cursor can never make the
        # producer overwrite an entry it has not collected an ack for.
        reclaim = released if released < self._acked_cursor else self._acked_cursor
        self._reclaim = reclaim
        return self._head + need - reclaim <= self._cap

    cdef int _collect(self) except -1:
        """Move published acks into the pending list; the count moved."""
        cdef uint64_t head = klr_load_acquire(self._hdr + KLR_OFF_ACK_HEAD)
        cdef uint64_t tail = self._ack_tail
        cdef uint64_t seq, data_end, cur
        cdef const unsigned char *rec
        cdef const unsigned char *e
        cdef int n = 0
        if head == tail:
            return 0
        if head < tail or head - tail > self._ack_cap or (head - tail) % KLR_ACK_SIZE:
            raise RingCorrupted(f"ring {self.name}: ack head {head} is impossible "
                                f"(consumed {tail}, ack region {self._ack_cap} bytes)")
        while tail != head:
            rec = self._acks + (tail & self._ack_mask)
            seq = _u64(rec + KLR_ACK_SEQUENCE)
            data_end = _u64(rec + KLR_ACK_DATA_END)
            if seq != self._acked_seq:
                raise RingCorrupted(f"ring {self.name}: ack for sequence {seq} arrived where "
                                    f"{self._acked_seq} was due")
            cur = self._acked_cursor
            e = self._data + (cur & self._mask)
            if e[KLR_ENT_KIND] == KLR_KIND_PAD:
                cur += _u32(e + KLR_ENT_SIZE)
                e = self._data + (cur & self._mask)
            cur += _u32(e + KLR_ENT_SIZE)
            if data_end != cur or _u64(e + KLR_ENT_SEQUENCE) != seq:
                raise RingCorrupted(f"ring {self.name}: ack for sequence {seq} does not match "
                                    f"the entry the producer wrote")
            self._acked_cursor = cur
            self._acked_seq = seq + 1
            self._pending.append((<int64_t>seq,
                                  <int>(<const int16_t *>(rec + KLR_ACK_ERROR_CODE))[0],
                                  (<const int64_t *>(rec + KLR_ACK_BASE_OFFSET))[0]))
            tail += KLR_ACK_SIZE
            n += 1
        self._ack_tail = tail
        klr_store_release(self._hdr + KLR_OFF_ACK_TAIL, tail)
        return n

    # -- acks --

    def poll_acks(self):
        """Acks that arrived, as (sequence, error_code, base_offset) in
        sequence order; never blocks. Disarms the doorbell."""
        self._check_open()
        self.disarm()
        self._collect()
        out = self._pending
        self._pending = []
        return out

    def unacked(self):
        """(sequence, topic, partition, batch bytes) of every entry appended
        whose ack has not been published, in order: what a new worker on this
        ring will be handed, or what to re-send elsewhere after a worker died.
        (Acks published but not yet returned by poll_acks count as acked;
        poll_acks still returns them.)"""
        cdef uint64_t cur, size, boff
        cdef const unsigned char *e
        self._check_open()
        self._collect()
        out = []
        cur = self._acked_cursor
        while cur < self._head:
            e = self._data + (cur & self._mask)
            size = _u32(e + KLR_ENT_SIZE)
            if e[KLR_ENT_KIND] == KLR_KIND_ENTRY:
                boff = KLR_ENT_HEADER_SIZE + klr_align8(e[KLR_ENT_TOPIC_LEN])
                out.append((<int64_t>_u64(e + KLR_ENT_SEQUENCE),
                            PyUnicode_DecodeUTF8(<const char *>e + KLR_ENT_TOPIC,
                                                 e[KLR_ENT_TOPIC_LEN], NULL),
                            (<const int32_t *>(e + KLR_ENT_PARTITION))[0],
                            PyBytes_FromStringAndSize(<const char *>e + boff,
                                                      _u32(e + KLR_ENT_BATCH_LEN))))
            cur += size
        return out

    @property
    def next_sequence(self):
        """Sequence number the next appended entry gets."""
        return self._next_seq

    @property
    def data_head(self):
        """Data bytes published so far, padding included: data_head //
        capacity is how many times the producer went back to position 0."""
        return self._head

    @property
    def in_flight(self):
        """Entries appended whose ack the producer has not collected."""
        return self._next_seq - self._acked_seq

    # -- sleeping --

    def arm(self):
        """Set the producer's sleep flag so the worker rings fileno() on its
        next ack or release. True when it is safe to block now, False when
        acks are already waiting (poll_acks, which also disarms)."""
        self._check_open()
        _drain_doorbell(self._bell_fd)      # stale bytes would make the fd readable at once
        klr_sleep_announce(self._own_flag)
        self._armed = True
        return not self._pending and \
            klr_load_acquire(self._hdr + KLR_OFF_ACK_HEAD) == self._ack_tail

    def _spin(self):
        """Spin briefly for an ack or a release from the worker."""
        return self._spin_on(self._hdr + KLR_OFF_ACK_HEAD, self._hdr + KLR_OFF_DATA_RELEASED) == 1

    def close(self, unlink=True):
        """Mark the ring closed for the worker, ring its doorbell, and (by
        default) unlink the segment and FIFOs. Idempotent. The worker keeps
        its mapping until it closes too."""
        if self._hdr == NULL:
            return
        if os.getpid() == self._owner_pid:
            klr_store32_release(self._hdr + KLR_OFF_PRODUCER_STATE, KLR_PRODUCER_CLOSED)
            _ring_doorbell(self._peer_bell_fd)
            if unlink:
                for suffix in ("", WORKER_BELL_SUFFIX, PRODUCER_BELL_SUFFIX):
                    _unlink_quietly(self.path + suffix)
        self._drop()


cdef uint64_t _check_capacity(object capacity) except 0:
    if not isinstance(capacity, int) or capacity < MIN_CAPACITY or capacity > MAX_CAPACITY \
            or capacity & (capacity - 1):
        raise ValueError(f"ring capacity must be a power of two in {MIN_CAPACITY}.."
                         f"{MAX_CAPACITY} bytes, not {capacity!r}")
    return capacity


# ---- worker --------------------------------------------------------------------------

# An entry's header as WorkerCore._entry_at read it (once) and checked it.
cdef struct _Entry:
    const unsigned char *e
    uint64_t size
    unsigned int kind
    unsigned int tlen
    uint64_t blen
    uint64_t seq
    int32_t partition


cdef class EntrySink:
    """Where WorkerCore.append_entries hands a ring's entries, one by one,
    in C: ``take`` appends the batch (``size`` bytes at ``data``, the
    private copy ``batch`` holds, which it may patch in place) and returns
    1 with its answer (error code 0 and the base offset, or the code the
    log refused it with and -1), or 0 when it leaves the entry to poll()'s
    caller (nothing appended). It must not raise: an exception is the
    ring's fault and closes it. Declared in
    kafkalite/_ext/shm_ring.pxd, so that the replica layer implements it
    (ext/ring_append.pyx) without the ring knowing the log; this base
    declines every entry."""

    cdef int take(self, str topic, int32_t partition, object batch, unsigned char *data,
                  Py_ssize_t size, int64_t *base_offset, int16_t *error_code) except -1:
        return 0


cdef class WorkerCore(_RingCore):
    """Worker side: attaches, polls entries as private copies, acks them in
    sequence order and releases their space.

    Main read interface: poll. The ring's space of a polled entry stays the
    producer's to keep (for a re-send) until release_through covers it and
    its ack is published. The shared memory is never trusted twice: see "A
    hostile or broken producer" in the module doc.
    """
    cdef uint64_t _read               # cursor of the next entry to poll
    cdef uint64_t _released
    cdef uint64_t _next_seq           # sequence expected at _read
    cdef uint64_t _ack_head
    cdef uint64_t _ident
    cdef object _unacked              # deque of (sequence, data cursor past it), polled order
    cdef object _unreleased           # the same, for release_through
    cdef readonly uint64_t epoch
    cdef bytes _topic_raw             # last topic seen, to reuse its str
    cdef str _topic_str
    cdef bytearray _scratch           # append_entries' private copy of an entry's batch

    @classmethod
    def attach(cls, name, secret, owner=None):
        """Attach to the ring ``name`` as its worker, for an asker who showed
        ``secret`` (the producer's attach_secret) and, when the kernel told
        the caller who asks, is the user ``owner`` (a uid).

        RingRefused, before anything of the ring is read out or written, when
        the files are not the asker's as the module doc's "A peer naming a
        ring" says. Validates the segment (ValueError naming what is wrong for
        a file that is not a ring, another layout version, a truncated
        segment, or a ring a worker closed with an error), refuses while
        another worker process is alive, records this process and bumps the
        attach epoch. A worker taking over after a crash resumes just past
        the last acked entry: every unacked entry (the producer's unacked())
        is delivered again.
        """
        cdef WorkerCore self = cls.__new__(cls)
        cdef _Mapping m
        cdef uint64_t total, cap, ack_cap, old, ack_head, resume, next_seq, head
        cdef const unsigned char *rec
        ring = ring_name(name)
        path = os.path.join(SHM_DIR, ring)
        if not isinstance(secret, bytes):
            raise TypeError(f"a ring's attach secret is bytes, not {type(secret).__name__}")
        fd = _open_ring_file(path, "segment")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{path} is not a regular file: not a kafkalite ring")
            _check_owned(st, path, "segment", owner)
            if not hmac.compare_digest(
                    secret, os.pread(fd, KLR_ATTACH_SECRET_SIZE, KLR_OFF_ATTACH_SECRET)):
                raise RingRefused(f"the secret shown for ring {ring} is not its own")
            total, cap, ack_cap = _validate_segment(fd, path)
            m = _map_segment(fd, total, True)
        finally:
            os.close(fd)
        try:
            self._setup(m, ring, path, False, cap, ack_cap, st.st_uid)
            self._unacked = collections.deque()
            self._unreleased = collections.deque()
            if klr_load32_acquire(m.addr + KLR_OFF_WORKER_ERROR):
                raise ValueError(f"ring {ring} was closed by a worker: {self.worker_error()[1]}")
            # The resume point first: nothing below writes the header until
            # the worker slot is ours.
            ack_head = klr_load_acquire(m.addr + KLR_OFF_ACK_HEAD)
            head = klr_load_acquire(m.addr + KLR_OFF_DATA_HEAD)
            if ack_head % KLR_ACK_SIZE:
                raise RingCorrupted(f"ring {ring}: ack head {ack_head} is not a whole record")
            if ack_head:
                rec = self._acks + ((ack_head - KLR_ACK_SIZE) & self._ack_mask)
                resume = _u64(rec + KLR_ACK_DATA_END)
                next_seq = _u64(rec + KLR_ACK_SEQUENCE) + 1
            else:
                resume = next_seq = 0
            if resume > head or head - resume > self._cap or resume & 7:
                raise RingCorrupted(f"ring {ring}: last ack ends at {resume}, outside the "
                                    f"published data (head {head})")
            me = process_ident()
            old = klr_load_acquire(m.addr + KLR_OFF_WORKER_IDENT)
            if old != 0 and old != me and process_alive(old):
                raise ValueError(f"ring {ring} already has a live worker (pid {old & PID_MASK})")
            if not klr_cas(m.addr + KLR_OFF_WORKER_IDENT, old, me):
                raise ValueError(f"another worker attached to ring {ring} at the same time")
            self._ident = me
            self.epoch = klr_load_relaxed(m.addr + KLR_OFF_WORKER_EPOCH) + 1
            klr_store_release(m.addr + KLR_OFF_WORKER_EPOCH, self.epoch)
            self._read = self._released = resume
            self._next_seq = next_seq
            self._ack_head = ack_head
            # Never below anything the producer reclaims: it reclaims only up
            # to acks it collected, all of which end at or before `resume`.
            klr_store_release(m.addr + KLR_OFF_DATA_RELEASED, resume)
            # tell a sleeping (or PeerGone-raising) producer a worker is here
            _ring_doorbell(self._peer_bell_fd)
            self._check_fault()
        except BaseException:
            self._drop()
            raise
        return self

    cdef inline int _check_fault(self) except -1:
        if self._map is not None and self._map.faulted():
            raise RingCorrupted(f"ring {self.name}: the segment was truncated under the worker")
        return 0

    cdef inline int _check_epoch(self) except -1:
        self._check_open()
        self._check_fault()
        if klr_load_relaxed(self._hdr + KLR_OFF_WORKER_EPOCH) != self.epoch:
            raise RingFenced(f"another worker attached to ring {self.name} after this one "
                             f"(epoch {self.epoch})")
        return 0

    # -- main read interface --

    def poll(self, Py_ssize_t max_entries=1024):
        """Entries available now, up to ``max_entries``, as (sequence, topic,
        partition, batch) in sequence order; never blocks. ``batch`` is a
        private copy (a bytearray the caller may patch in place, as a broker
        stamps baseOffset). Disarms the doorbell. RingCorrupted for anything
        the protocol never writes, or a segment truncated under the worker."""
        cdef uint64_t head, r, pos, size, boff, blen, seq, next_seq
        cdef unsigned int kind, tlen
        cdef const unsigned char *e
        cdef char *dst
        cdef Py_ssize_t n = 0
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, not {max_entries}")
        self._check_epoch()
        self.disarm()
        head = klr_load_acquire(self._hdr + KLR_OFF_DATA_HEAD)
        r = self._read
        next_seq = self._next_seq
        if head < r or head - r > self._cap:
            self._check_fault()
            raise RingCorrupted(f"ring {self.name}: data head {head} is impossible "
                                f"(read position {r}, capacity {self._cap})")
        out = []
        ends = []
        while r != head and n < max_entries:
            pos = r & self._mask
            e = self._data + pos
            size = _u32(e + KLR_ENT_SIZE)
            kind = e[KLR_ENT_KIND]
            if size < KLR_PAD_HEADER_SIZE or size & 7 or pos + size > self._cap \
                    or size > head - r:
                self._check_fault()
                raise RingCorrupted(f"ring {self.name}: entry at {r} has impossible size {size}")
            if kind == KLR_KIND_PAD:
                r += size
                continue
            tlen = e[KLR_ENT_TOPIC_LEN]
            blen = _u32(e + KLR_ENT_BATCH_LEN)
            seq = _u64(e + KLR_ENT_SEQUENCE)
            boff = KLR_ENT_HEADER_SIZE + klr_align8(tlen)
            if kind != KLR_KIND_ENTRY or tlen == 0 or tlen > KLR_MAX_TOPIC_LEN \
                    or size < KLR_ENT_HEADER_SIZE or boff + blen > size:
                self._check_fault()
                raise RingCorrupted(f"ring {self.name}: malformed entry at {r}")
            if seq != next_seq:
                self._check_fault()
                raise RingCorrupted(f"ring {self.name}: entry at {r} has sequence {seq}, "
                                    f"expected {next_seq}")
            batch = PyByteArray_FromStringAndSize(NULL, <Py_ssize_t>blen)
            dst = PyByteArray_AS_STRING(batch)
            if blen >= NOGIL_COPY:
                with nogil:
                    memcpy(dst, e + boff, blen)
            else:
                memcpy(dst, e + boff, blen)
            r += size
            out.append((<int64_t>seq, self._topic(e + KLR_ENT_TOPIC, tlen),
                        (<const int32_t *>(e + KLR_ENT_PARTITION))[0], batch))
            ends.append((seq, r))
            next_seq = seq + 1
            n += 1
        # A truncation during the copies left zeros in them: none is handed on.
        self._check_fault()
        self._read = r
        self._next_seq = next_seq
        self._unacked.extend(ends)
        self._unreleased.extend(ends)
        return out

    def append_entries(self, EntrySink sink, Py_ssize_t max_entries):
        """Poll, append and acknowledge up to ``max_entries`` entries in C,
        with no Python object per entry: each is copied into private
        memory (one buffer, reused), handed to ``sink.take`` and, once it
        took it, acknowledged with its answer and released, without a
        doorbell (wake_peer() rings it once after a drain). Stops before the
        first entry the sink declines, which the next poll() returns, so
        the order holds. Does nothing (0) while an entry poll() returned is
        not acknowledged and released yet: acks follow the sequence. The
        number of entries taken. Disarms the doorbell; RingCorrupted as
        poll() for what the protocol never writes."""
        cdef uint64_t head, r, ack_head
        cdef _Entry ent
        cdef unsigned char *data
        cdef int64_t base = 0
        cdef int16_t code = 0
        cdef Py_ssize_t n = 0
        self._check_epoch()
        self.disarm()
        if self._unacked or self._unreleased:
            return 0
        head = klr_load_acquire(self._hdr + KLR_OFF_DATA_HEAD)
        r = self._read
        if head < r or head - r > self._cap:
            self._check_fault()
            raise RingCorrupted(f"ring {self.name}: data head {head} is impossible "
                                f"(read position {r}, capacity {self._cap})")
        while r != head and n < max_entries:
            self._entry_at(r, head, &ent)       # each field read once, then checked
            if ent.kind == KLR_KIND_PAD:
                r += ent.size
                continue
            if ent.seq != self._next_seq:
                self._check_fault()
                raise RingCorrupted(f"ring {self.name}: entry at {r} has sequence {ent.seq}, "
                                    f"expected {self._next_seq}")
            # room for its ack before the sink appends it: an entry in the
            # log must never lack one
            ack_head = self._ack_slot()
            if self._scratch is None or len(self._scratch) < <Py_ssize_t>ent.blen:
                self._scratch = PyByteArray_FromStringAndSize(
                    NULL, <Py_ssize_t>max(ent.blen, 4096))
            data = <unsigned char *>PyByteArray_AS_STRING(self._scratch)
            memcpy(data, ent.e + KLR_ENT_HEADER_SIZE + klr_align8(ent.tlen), ent.blen)
            # a truncation during the copy left zeros in it: not handed on
            self._check_fault()
            if not sink.take(self._topic(ent.e + KLR_ENT_TOPIC, ent.tlen), ent.partition,
                             self._scratch, data, <Py_ssize_t>ent.blen, &base, &code):
                break
            r += ent.size
            self._put_ack(ack_head, ent.seq, base, r, code)
            self._read = r
            self._next_seq = ent.seq + 1
            n += 1
        if n:
            self._released = self._read
            klr_store_release(self._hdr + KLR_OFF_DATA_RELEASED, self._released)
        self._check_fault()
        return n

    cdef uint64_t _ack_slot(self) except? 0:
        # The ack head, once there is room for one more ack (the producer
        # keeps no more entries in flight than ack slots: a full region is a
        # corrupt or hostile ring).
        cdef uint64_t ack_head = self._ack_head
        if ack_head - klr_load_acquire(self._hdr + KLR_OFF_ACK_TAIL) >= self._ack_cap:
            self._check_fault()
            raise RingCorrupted(f"ring {self.name}: ack region full; the producer has more "
                                f"entries in flight than ack slots")
        return ack_head

    cdef void _put_ack(self, uint64_t ack_head, uint64_t seq, int64_t base_offset,
                       uint64_t data_end, int16_t code) noexcept:
        # The one writer of an ack record (ack() and append_entries): its
        # fields, the zero pad after the code, then the head published.
        cdef unsigned char *rec = self._acks + (ack_head & self._ack_mask)
        (<uint64_t *>(rec + KLR_ACK_SEQUENCE))[0] = seq
        (<int64_t *>(rec + KLR_ACK_BASE_OFFSET))[0] = base_offset
        (<uint64_t *>(rec + KLR_ACK_DATA_END))[0] = data_end
        (<uint64_t *>(rec + KLR_ACK_ERROR_CODE))[0] = 0
        (<int16_t *>(rec + KLR_ACK_ERROR_CODE))[0] = code
        self._ack_head = ack_head + KLR_ACK_SIZE
        klr_store_release(self._hdr + KLR_OFF_ACK_HEAD, self._ack_head)

    cdef int _entry_at(self, uint64_t r, uint64_t head, _Entry *out) except -1:
        # The entry (or padding marker) at cursor ``r``: each field read
        # once from the shared memory and checked as poll() checks it.
        cdef uint64_t pos = r & self._mask
        cdef const unsigned char *e = self._data + pos
        out.e = e
        out.size = _u32(e + KLR_ENT_SIZE)
        out.kind = e[KLR_ENT_KIND]
        if out.size < KLR_PAD_HEADER_SIZE or out.size & 7 or pos + out.size > self._cap \
                or out.size > head - r:
            self._check_fault()
            raise RingCorrupted(f"ring {self.name}: entry at {r} has impossible size {out.size}")
        if out.kind == KLR_KIND_PAD:
            return 0
        out.tlen = e[KLR_ENT_TOPIC_LEN]
        out.blen = _u32(e + KLR_ENT_BATCH_LEN)
        out.seq = _u64(e + KLR_ENT_SEQUENCE)
        out.partition = (<const int32_t *>(e + KLR_ENT_PARTITION))[0]
        if out.kind != KLR_KIND_ENTRY or out.tlen == 0 or out.tlen > KLR_MAX_TOPIC_LEN \
                or out.size < KLR_ENT_HEADER_SIZE \
                or KLR_ENT_HEADER_SIZE + klr_align8(out.tlen) + out.blen > out.size:
            self._check_fault()
            raise RingCorrupted(f"ring {self.name}: malformed entry at {r}")
        return 0

    cdef str _topic(self, const unsigned char *p, Py_ssize_t n):
        # Most entries repeat the previous topic: reuse its str.
        if self._topic_raw is not None and len(self._topic_raw) == n \
                and memcmp(<const char *>self._topic_raw, p, n) == 0:
            return self._topic_str
        raw = PyBytes_FromStringAndSize(<const char *>p, n)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise RingCorrupted(f"ring {self.name}: topic name is not UTF-8: {raw!r}") from None
        self._topic_raw = raw
        self._topic_str = text
        return text

    def ack(self, uint64_t seq, int error_code, int64_t base_offset, bint wake=True):
        """Acknowledge the oldest polled, unacked entry, which must be ``seq``
        (acks follow sequence order); rings the producer if it sleeps, unless
        ``wake`` is False: a caller acknowledging many entries in a row then
        calls wake_peer() once after the last (a producer woken by the first
        ack re-arms and sleeps again while the rest are written: a doorbell
        write and a wake-up per entry, not per drain)."""
        cdef uint64_t a, ack_head
        self._check_epoch()
        if error_code < -32768 or error_code > 32767:
            raise ValueError(f"error_code must fit an int16, not {error_code}")
        if not self._unacked:
            raise ValueError(f"ack({seq}): no polled entry is waiting for an ack "
                             f"(next to poll: {self._next_seq})")
        first, a = self._unacked[0]
        if first != seq:
            raise ValueError(f"acks follow sequence order: the next entry to ack is "
                             f"{first}, not {seq}")
        ack_head = self._ack_slot()
        self._unacked.popleft()
        self._put_ack(ack_head, seq, base_offset, a, <int16_t>error_code)
        if wake:
            self._wake_peer()
        self._check_fault()

    def release_through(self, uint64_t seq, bint wake=True):
        """Give back the space of every polled entry up to and including
        ``seq``. The producer reuses the space once the entries are also
        acked. ``wake``: as ack's."""
        cdef uint64_t rel
        self._check_epoch()
        if seq >= self._next_seq:
            raise ValueError(f"release_through({seq}): only entries before {self._next_seq} "
                             f"have been polled")
        rel = self._released
        unreleased = self._unreleased
        while unreleased and unreleased[0][0] <= seq:
            rel = unreleased.popleft()[1]
        if rel != self._released:
            self._released = rel
            klr_store_release(self._hdr + KLR_OFF_DATA_RELEASED, rel)
            if wake:
                self._wake_peer()
        self._check_fault()

    def wake_peer(self):
        """Ring the producer's doorbell if it sleeps: after acks and
        releases made with ``wake=False``. A no-op (no system call) while it
        is awake."""
        self._check_epoch()
        self._wake_peer()

    @property
    def next_sequence(self):
        """Sequence of the next entry poll() will return."""
        return self._next_seq

    def _ready(self):
        """True when entries are waiting to be polled (or the ring needs a
        look: a truncated one reads as impossible)."""
        return self._hdr != NULL and (self._map.faulted() or
                                      klr_load_acquire(self._hdr + KLR_OFF_DATA_HEAD) != self._read)

    # -- sleeping --

    def arm(self):
        """Set the worker's sleep flag so the producer rings fileno() on its
        next append. True when it is safe to block now, False when entries
        are already waiting (poll, which also disarms)."""
        self._check_epoch()
        _drain_doorbell(self._bell_fd)      # stale bytes would make the fd readable at once
        klr_sleep_announce(self._own_flag)
        self._armed = True
        idle = klr_load_acquire(self._hdr + KLR_OFF_DATA_HEAD) == self._read
        self._check_fault()
        return idle

    def _nudge(self):
        """Ring this side's own doorbell: an event loop that stopped draining
        a busy ring to serve others wakes at once to come back to it."""
        _ring_doorbell(self._bell_fd)

    def _spin(self):
        """Spin briefly for an append."""
        return self._spin_on(self._hdr + KLR_OFF_DATA_HEAD, NULL) == 1

    def close_with_error(self, int error_code, str message):
        """Give up on the ring: leave ``error_code`` (non-zero, a Kafka error
        code) and ``message`` in header line 5 for the producer, then close()
        (which rings it). Idempotent; a fenced handle only closes."""
        cdef bytes raw
        if self._hdr == NULL:
            return
        if error_code == 0:
            raise ValueError("close_with_error needs a non-zero error code")
        if os.getpid() == self._owner_pid and \
                klr_load_relaxed(self._hdr + KLR_OFF_WORKER_EPOCH) == self.epoch and \
                not klr_load32_acquire(self._hdr + KLR_OFF_WORKER_ERROR):
            raw = message.encode("utf-8")[:KLR_MAX_WORKER_MESSAGE]
            raw = raw.decode("utf-8", "ignore").encode("utf-8")    # whole characters only
            memcpy(self._hdr + KLR_OFF_WORKER_MESSAGE, <const char *>raw, len(raw))
            (<uint32_t *>(self._hdr + KLR_OFF_WORKER_MESSAGE_LEN))[0] = len(raw)
            klr_store32_release(self._hdr + KLR_OFF_WORKER_ERROR, <uint32_t>error_code)
        self.close(False)

    def close(self, unlink=False):
        """Detach: give up the worker slot (the producer sees worker_alive()
        False), ring the producer, and with ``unlink`` remove the segment and
        FIFOs (for a worker cleaning up after a dead producer). Idempotent."""
        if self._hdr == NULL:
            return
        if os.getpid() == self._owner_pid:
            if klr_load_relaxed(self._hdr + KLR_OFF_WORKER_EPOCH) == self.epoch:
                klr_sleep_take(self._own_flag)
                klr_cas(self._hdr + KLR_OFF_WORKER_IDENT, self._ident, 0)
                _ring_doorbell(self._peer_bell_fd)
            if unlink:
                for suffix in ("", WORKER_BELL_SUFFIX, PRODUCER_BELL_SUFFIX):
                    _unlink_quietly(self.path + suffix)
        self._drop()


cdef tuple _validate_segment(int fd, str path):
    """(total size, data capacity, ack capacity) of the segment after
    checking every header field a worker relies on; ValueError saying what
    is wrong otherwise."""
    cdef bytes raw
    cdef const unsigned char *h
    cdef uint64_t cap, ack_cap, total
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path} is not a regular file: not a kafkalite ring")
    if st.st_size < KLR_HEADER_SIZE:
        raise ValueError(f"{path} is {st.st_size} bytes, shorter than a ring header "
                         f"({KLR_HEADER_SIZE}): not a kafkalite ring, or truncated")
    raw = os.pread(fd, 64, 0)
    h = <const unsigned char *>raw
    if _u64(h + KLR_OFF_MAGIC) != KLR_MAGIC:
        raise ValueError(f"{path} is not a kafkalite ring (magic {raw[:8]!r}, "
                         f"expected b'KLSHMRNG'), or its producer has not finished creating it")
    if _u32(h + KLR_OFF_VERSION) != KLR_VERSION:
        raise ValueError(f"{path} has ring layout version {_u32(h + KLR_OFF_VERSION)}; "
                         f"this build reads version {KLR_VERSION}")
    cap = _u64(h + KLR_OFF_DATA_CAPACITY)
    ack_cap = _u64(h + KLR_OFF_ACK_CAPACITY)
    total = _u64(h + KLR_OFF_TOTAL_SIZE)
    if (_u32(h + KLR_OFF_HEADER_SIZE) != KLR_HEADER_SIZE
            or cap < MIN_CAPACITY or cap > MAX_CAPACITY or cap & (cap - 1)
            or ack_cap < MIN_ACK_SLOTS * KLR_ACK_SIZE or ack_cap > MAX_ACK_SLOTS * KLR_ACK_SIZE
            or ack_cap & (ack_cap - 1)
            or _u64(h + KLR_OFF_DATA_OFFSET) != KLR_HEADER_SIZE
            or _u64(h + KLR_OFF_ACK_OFFSET) != KLR_HEADER_SIZE + cap
            or total != KLR_HEADER_SIZE + cap + ack_cap):
        raise ValueError(f"{path} has an inconsistent ring header (header size "
                         f"{_u32(h + KLR_OFF_HEADER_SIZE)}, data {cap}, acks {ack_cap}, "
                         f"total {total})")
    if <uint64_t>st.st_size != total:
        raise ValueError(f"{path} is {st.st_size} bytes but its header says {total}: "
                         f"truncated or not a kafkalite ring")
    return total, cap, ack_cap
