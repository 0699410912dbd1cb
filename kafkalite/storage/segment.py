"""One log segment: a ``.log`` file of record batches and its two indexes.

On-disk format:

    <base>.log        RecordBatch v2 batches back to back, exactly as
                      appended (offsets and leader epoch assigned, nothing
                      else changed); batch i+1 starts where batch i ends.
    <base>.index      sparse offset index (see index.py)
    <base>.timeindex  sparse time index (see index.py)
    <base>.txnindex   aborted transactions whose markers are in this segment
                      (txn_index.py; only once there is one)

``<base>`` is the segment's base offset as ``%020d``; every batch in the
segment has a base offset >= it and offsets increase through the file.
Suffixes mark files in transit: ``.cleaned`` (written by the cleaner, not yet
committed), ``.deleted`` (about to be unlinked).

Damage: bytes this process did not write itself (a segment opened after a
clean shutdown is not rescanned) are trusted only once checked. ``read``
checks the index entry it starts from against the batch header it points
at (a wrong entry rebuilds both indexes) and the CRC of every whole batch
it returns beyond ``verified_end`` (the prefix of the file known good); a
batch that fails is never served: the read stops before it, or raises
CorruptRecordError (Kafka's CORRUPT_MESSAGE) when it is the first, and the
segment is reported ``damaged``. Damage found by a read is never repaired
away: those records were acknowledged, so their readers get the error
(and ``kafkalite verify`` names the batch) until a person decides (a
replica copied again, records deleted, the reader moved past it). Only
recovery after an unclean stop, of the tail past the recovery point that
may be torn, cuts bytes. ``recover`` does not truncate at the
first bad batch when intact batches follow it: it cuts the damaged stretch
out and hands the rest back as a new segment (``salvaged``).

Who may call: the owning PartitionLog (and the cleaner and loader acting for
it), from one thread. A ``FileRegion`` handed out by ``read`` keeps the file
open by reference, so it stays readable even if the segment is deleted
afterwards; it is bounded by the bytes that existed when it was made.
"""
from __future__ import annotations

import logging
import mmap
import os
import time

from kafkalite._ext.batch_scan import batch_header, find_next_batch, scan_log
from kafkalite._ext.log_state import NOT_IN_TAIL, TAIL_BATCHES, LogSegmentState
from kafkalite.errors import CorruptRecordError, KafkaStorageError
from kafkalite.record import BATCH_HEADER_SIZE, LOG_OVERHEAD, RecordBatch
from kafkalite.record.layout import MIN_BATCH_LENGTH, OFF_LENGTH
from kafkalite.storage.checkpoint import fsync_dir
from kafkalite.storage.config import LogConfig
from kafkalite.storage.index import OffsetIndex, TimeIndex
from kafkalite.storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# The files that only exist beside a .log (the loader removes orphans).
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

log = logging.getLogger(__name__)

# Bytes read at once when stepping through batch headers after an index hit.
_HEADER_SCAN_CHUNK = 64 * 1024
# ... and first, when looking for the batch holding an offset: it starts at
# most about index.interval.bytes past its index entry (LogSegment.append's
# rule), so twice that is read first rather than a whole chunk -- a consumer
# behind the in-memory tail pays for each partition it reads, and would
# otherwise copy 64 KB out of the page cache to find a 1 KB batch.
_FIRST_SCAN_INTERVALS = 2
# Batches appended by this process whose places the active segment keeps in
# memory (the newest, between _TAIL_BATCHES and twice as many, 32 bytes
# each, in LogSegmentState's C array): a consumer at the log end finds its
# batch there, with no index lookup and no header read. One further behind
# reads the index.
_TAIL_BATCHES = TAIL_BATCHES
_INT32_MAX = 0x7FFFFFFF        # an index entry's offset is relative to the base, in 4 bytes


def _cut_short(data, at: int) -> bool:
    """Whether the bytes of ``data`` from ``at`` on are the beginning of a
    batch that goes on past the end of ``data`` (rather than a bad one)."""
    rest = len(data) - at
    if rest < LOG_OVERHEAD:
        return True
    length = int.from_bytes(data[at + OFF_LENGTH:at + OFF_LENGTH + 4], "big", signed=True)
    return length >= MIN_BATCH_LENGTH and length + LOG_OVERHEAD > rest


def segment_name(base_offset: int) -> str:
    return "%020d" % base_offset


def segment_path(directory: str, base_offset: int, suffix: str, extra: str = "") -> str:
    return os.path.join(directory, segment_name(base_offset) + suffix + extra)


def parse_segment_file(name: str) -> tuple[int, str] | None:
    """(base offset, rest of the name) for a segment file name, else None."""
    stem, dot, rest = name.partition(".")
    if len(stem) != 20 or not stem.isdigit() or not dot:
        return None
    return int(stem), "." + rest


class SegmentFile:
    """The open descriptor of a ``.log`` file, shared by its segment and the
    FileRegions read from it. It closes when the segment closes it or, after
    the segment was deleted, when the last region referring to it is gone."""

    __slots__ = ("_fd", "name", "__weakref__")

    def __init__(self, path: str, create: bool):
        flags = os.O_RDWR | os.O_CLOEXEC | ((os.O_CREAT | os.O_EXCL) if create else 0)
        self._fd = -1       # until the open succeeds: __del__ of a failed one (EMFILE) has none
        self.name = path
        self._fd = os.open(path, flags, 0o644)

    def fileno(self) -> int:
        if self._fd < 0:
            raise KafkaStorageError(f"{self.name} is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __del__(self):
        self.close()


class FileRegion:
    """A byte range of a segment file: what a fetch returns.

    ``sendfile(socket_fd)`` sends it with zero copies; ``read()`` and
    ``view()`` copy it out of the page cache for in-process readers.
    """

    __slots__ = ("file", "position", "length")

    def __init__(self, file: SegmentFile, position: int, length: int):
        self.file = file
        self.position = position
        self.length = length

    @property
    def fd(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise KafkaStorageError(f"short read from {self.file.name}: {len(data)} of "
                                    f"{self.length} bytes at {self.position}")
        return data

    def view(self) -> memoryview:
        return memoryview(self.read())

    def sendfile(self, out_fd: int) -> int:
        """Send the whole region to ``out_fd`` (a socket); returns bytes sent."""
        sent, fd = 0, self.fd
        while sent < self.length:
            n = os.sendfile(out_fd, fd, self.position + sent, self.length - sent)
            if n == 0:
                raise KafkaStorageError(f"{self.file.name} ended before the region did")
            sent += n
        return sent

    def __repr__(self):
        return f"FileRegion({self.file.name}, position={self.position}, length={self.length})"


class LogSegment(LogSegmentState):
    def __init__(self, directory: str, base_offset: int, config: LogConfig, *,
                 suffix: str = "", create: bool = False):
        self.directory = directory
        self.base_offset = base_offset
        self.config = config
        self._suffix = suffix
        path = self._path = segment_path(directory, base_offset, LOG_SUFFIX, suffix)
        try:
            self.file = SegmentFile(path, create)
            self._size = os.fstat(self.file.fileno()).st_size
        except OSError as exc:
            raise KafkaStorageError(f"cannot open segment {path}: {exc.strerror or exc}") from exc
        # Index entries at or past this position were added by this
        # process's appends, after the batch they point at was written: a
        # lookup trusts them without reading that batch's header. Those
        # found on disk are checked (_entry_sound): the index may not match
        # the log after a crash. (An entry past the log's end on disk fails
        # load_state's sanity check, and recovery rebuilds the index.)
        self._own_index_from = 0 if create else self._size
        self.offset_index = OffsetIndex(segment_path(directory, base_offset, INDEX_SUFFIX, suffix),
                                        base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(segment_path(directory, base_offset, TIME_INDEX_SUFFIX, suffix),
                                    base_offset, config.segment_index_bytes)
        self.txn_index = TransactionIndex(
            segment_path(directory, base_offset, TXN_INDEX_SUFFIX, suffix), base_offset)
        self.created_ms = int(time.time() * 1000)
        # Filled by create (empty segment) or load_state/recover (existing one).
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = base_offset
        self.first_batch_timestamp = -1
        self._bytes_since_last_index_entry = 0
        # What needs no CRC check on read: the prefix [0, verified_end) (a
        # recovery scan or earlier reads checked it) and [trusted_from, end)
        # (appended, and so validated, by this process).
        self.verified_end = 0
        self.trusted_from = 0
        self.damaged: str | None = None         # why a read found a bad batch
        # The last batches appended, up to the end of the file, are kept in
        # memory (LogSegmentState's tail, ext/log_state.pyx); valid while
        # _tail_end is the file's size.
        self._tail_end = 0
        if create:
            self.offset_index.reset()
            self.time_index.reset()
            self.txn_index.reset()

    # ---- state -----------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._path

    @property
    def size(self) -> int:
        return self._size

    @property
    def is_empty(self) -> bool:
        return self._size == 0

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's mtime if no record has one
        (Kafka's rule for time-based retention)."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.file.fileno()).st_mtime * 1000)

    def mapped(self):
        """A read-only map of the whole file (None when empty); the caller closes it."""
        if self._size == 0:
            return None
        return mmap.mmap(self.file.fileno(), self._size, access=mmap.ACCESS_READ)

    def _apply_scan(self, scan, *, index_from_scan: bool) -> None:
        if scan.next_offset >= 0:
            self.next_offset = scan.next_offset
        if scan.max_timestamp > self.max_timestamp:
            self.max_timestamp = scan.max_timestamp
            self.offset_of_max_timestamp = scan.offset_of_max_timestamp
        self._bytes_since_last_index_entry = scan.bytes_since_last_index_entry
        if index_from_scan:
            for off, pos in zip(scan.index_offsets.tolist(), scan.index_positions.tolist()):
                self.offset_index.append(off, pos)
            for ts, off in zip(scan.time_index_timestamps.tolist(),
                               scan.time_index_offsets.tolist()):
                self.time_index.maybe_append(ts, off)

    def _read_first_batch_timestamp(self) -> None:
        if self._size >= BATCH_HEADER_SIZE:
            self.first_batch_timestamp = batch_header(
                os.pread(self.file.fileno(), BATCH_HEADER_SIZE, 0))[3]

    def load_state(self) -> str | None:
        """Restore in-memory state of a segment that was closed cleanly, by
        scanning only the tail after its last index entry. Returns why the
        indexes cannot be trusted (the caller then runs ``recover``), or None."""
        problem = self.offset_index.sanity_check(self._size)
        if problem:
            return problem
        if self.offset_index.entries:
            _, start = self.offset_index.entry(self.offset_index.entries - 1)
        else:
            start = 0
        tail = os.pread(self.file.fileno(), self._size - start, start)
        last_ts, last_off = self.time_index.last_entry
        scan = scan_log(tail, min_offset=self.base_offset,
                        index_interval_bytes=self.config.index_interval_bytes,
                        max_timestamp=last_ts, offset_of_max_timestamp=last_off,
                        verify_crc=False)
        if scan.error:
            return f"{self.path}: {scan.error} (after a clean shutdown)"
        self._apply_scan(scan, index_from_scan=False)
        self._read_first_batch_timestamp()
        self.trusted_from = self._size        # what was there before this process is checked on read
        return self.time_index.sanity_check(self.next_offset)

    def recover(self, salvage: bool = True) -> tuple[int, object, "LogSegment | None"]:
        """Validate every batch (length, magic, CRC, offsets, leader epochs
        that never go down), rebuild both indexes, and cut off what is not
        valid. The epoch cache is rebuilt from the batches by the caller. Offsets must be
        contiguous unless the topic is compacted (cleaned segments have gaps).

        When a sound batch follows the damage (``salvage``), only the
        damaged stretch is lost: the bytes from that batch on move to a new
        segment named by its base offset, returned for the caller to add
        (and recover in turn); the offsets in between become a gap, as
        compaction leaves. Otherwise the file ends before the damage (a
        torn tail). Returns (bytes dropped, the scan -- with the leader
        epochs seen, for the epoch cache -- , the salvaged segment or None).
        """
        mapped = self.mapped()
        salvaged = None
        try:
            data = mapped if mapped is not None else b""
            scan = scan_log(data, min_offset=self.base_offset,
                            index_interval_bytes=self.config.index_interval_bytes,
                            contiguous=not self.config.compact)
            resume = -1
            if salvage and scan.valid_bytes < self._size:
                expected = scan.next_offset if scan.next_offset >= 0 else self.base_offset
                last_epoch = scan.epoch_starts[-1][0] if scan.epoch_starts else -1
                resume = find_next_batch(data, scan.valid_bytes + 1, expected, last_epoch)
            if resume > 0:
                resume_base = batch_header(data, resume)[0]
                if os.path.exists(segment_path(self.directory, resume_base, LOG_SUFFIX)):
                    # a salvage interrupted after the copy: the copy is already
                    # a segment of the log; only the cut is left to do
                    log.warning("%s: the batches after the damage were already copied to "
                                "segment %d", self.path, resume_base)
                else:
                    salvaged = LogSegment(self.directory, resume_base, self.config, create=True)
                    salvaged._write_at(data[resume:], 0)
                    salvaged.flush()
                    fsync_dir(self.directory)     # the copy exists before the cut
        finally:
            if mapped is not None:
                mapped.close()
        truncated = self._size - scan.valid_bytes
        if salvaged is not None:
            truncated -= salvaged.size
        if self._size > scan.valid_bytes:
            self._truncate_file(scan.valid_bytes)
        self.offset_index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = self.base_offset
        self._apply_scan(scan, index_from_scan=True)
        self.first_batch_timestamp = scan.first_batch_timestamp
        self.verified_end = self.trusted_from = self._size
        self.damaged = None
        return truncated, scan, salvaged

    def rebuild_indexes(self, why: str) -> None:
        """Rebuild both indexes from the batch headers (no truncation)."""
        log.warning("rebuilding the indexes of %s: %s", self.path, why)
        mapped = self.mapped()
        try:
            scan = scan_log(mapped if mapped is not None else b"", min_offset=self.base_offset,
                            index_interval_bytes=self.config.index_interval_bytes,
                            verify_crc=False)
        finally:
            if mapped is not None:
                mapped.close()
        self.offset_index.reset()
        self.time_index.reset()
        max_ts, max_off = self.max_timestamp, self.offset_of_max_timestamp
        self.max_timestamp, self.offset_of_max_timestamp = -1, self.base_offset
        self._apply_scan(scan, index_from_scan=True)
        self.max_timestamp = max(self.max_timestamp, max_ts)
        if self.max_timestamp == max_ts:
            self.offset_of_max_timestamp = max_off
        if scan.error:
            self.damaged = f"{scan.error} (found rebuilding the indexes)"

    # ---- main write interface ------------------------------------------------------------

    def should_roll(self, config: LogConfig, size: int, last_offset: int, max_timestamp: int,
                    now: int) -> bool:
        """Whether the log must roll before appending ``size`` bytes of
        batches ending at ``last_offset`` to this (active) segment, by the
        log's current ``config`` (Kafka's LogSegment.shouldRoll): never
        when empty; when the bytes would pass segment.bytes, the segment is
        older than segment.ms (less the jitter), an index is full, or an
        offset would not fit the indexes' 32-bit relative offsets."""
        if not self._size:
            return False
        # segment.ms counts in record time when the segment has a timestamp
        # (the incoming batch's against its first batch's), as Kafka does, so
        # old timestamps do not roll every append; otherwise in wall time.
        if self.first_batch_timestamp >= 0:
            waited = max_timestamp - self.first_batch_timestamp
        else:
            waited = now - self.created_ms
        return (self._size + size > config.segment_bytes
                or waited > config.segment_ms - config.segment_jitter_ms
                or self.offset_index.full or self.time_index.full
                or last_offset - self.base_offset > _INT32_MAX)

    def append(self, data, scan) -> None:
        """Write validated batches (``scan``: their AppendScan from
        validate_for_append) at the end of the file and index them. All or
        nothing: on an I/O error the file is rolled back and
        KafkaStorageError is raised (index entries are only added after the
        write succeeded)."""
        start = self._size
        self._write_at(data, start)
        since = self._bytes_since_last_index_entry
        interval = self.config.index_interval_bytes
        max_ts, max_off = self.max_timestamp, self.offset_of_max_timestamp
        if self._tail_end != start:
            self.tail_clear()           # what it held no longer ends at the file's end
        if scan.batch_count == 1:
            # one batch (a producer's batch per partition per request): its
            # figures are the scan's own, no columns copied out, no loop
            size, last, bmax = scan.size_in_bytes, scan.last_offset, scan.max_timestamp
            self.tail_add(scan.first_offset, last, start, size)
            if bmax > max_ts:
                max_ts, max_off = bmax, last
            if since > interval:        # the rule of the loop below
                self.offset_index.append(last, start)
                self.time_index.maybe_append(max_ts, max_off)
                since = 0
            since += size
            batches = ()
        else:
            batches = zip(scan.positions.tolist(), scan.sizes.tolist(),
                          scan.base_offsets.tolist(), scan.last_offsets.tolist(),
                          scan.max_timestamps.tolist())
        for pos, size, base, last, bmax in batches:
            self.tail_add(base, last, start + pos, size)
            if bmax > max_ts:
                max_ts, max_off = bmax, last
            # Kafka's rule (LogSegment.append), also applied by scan_log when
            # indexes are rebuilt: index a batch once more than
            # index.interval.bytes were written since the last entry.
            if since > interval:
                self.offset_index.append(last, start + pos)
                self.time_index.maybe_append(max_ts, max_off)
                since = 0
            since += size
        self._bytes_since_last_index_entry = since
        self.max_timestamp, self.offset_of_max_timestamp = max_ts, max_off
        self.tail_trim()
        self._tail_end = self._size
        if start == 0:
            self.first_batch_timestamp = (scan.max_timestamp if scan.batch_count == 1
                                          else int(scan.max_timestamps[0]))
        self.next_offset = scan.last_offset + 1

    def _write_at(self, data, position: int) -> None:
        fd = self.file.fileno()
        total = len(data) if type(data) is bytearray else memoryview(data).nbytes
        done = 0
        try:
            # one pwrite of the whole buffer (a view of it only to resume a
            # short write): one-record appends make this a per-batch cost
            done = os.pwrite(fd, data, position)
            if done < total:
                view = memoryview(data).cast("B")
                while done < total:
                    done += os.pwrite(fd, view[done:], position + done)
        except OSError as exc:
            self._truncate_file(position)
            raise KafkaStorageError(
                f"append to {self.path} failed after {done} of {total} bytes: "
                f"{exc.strerror or exc}; the segment was rolled back to {position} bytes") from exc
        self._size = position + total

    def _truncate_file(self, size: int) -> None:
        self._tail_end = -1         # the batches kept in memory may be gone
        try:
            os.ftruncate(self.file.fileno(), size)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate {self.path} to {size} bytes: "
                                    f"{exc.strerror or exc}") from exc
        self._size = size

    def on_become_inactive(self) -> None:
        """The segment was rolled: index its largest timestamp so that time
        lookups and retention never need to scan it. Its last batches are no
        longer kept in memory: only the active segment's are read that often."""
        self.tail_clear()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    # ---- main read interface -------------------------------------------------------------

    def _headers_from(self, position: int, first_chunk: int = _HEADER_SCAN_CHUNK):
        """Yield (base, last, position, size, max_timestamp) of batches from
        ``position``, reading ``first_chunk`` bytes first (at least a batch
        header's), then ``_HEADER_SCAN_CHUNK`` at a time."""
        fd = self.file.fileno()
        chunk_size = first_chunk
        while position < self._size:
            chunk = os.pread(fd, min(chunk_size, self._size - position), position)
            chunk_size = _HEADER_SCAN_CHUNK
            at = 0
            while at + BATCH_HEADER_SIZE <= len(chunk):
                base, last, size, max_ts = batch_header(chunk, at)
                if size < BATCH_HEADER_SIZE:
                    raise KafkaStorageError(f"{self.path}: corrupt batch length {size} at "
                                            f"{position + at}")
                yield base, last, position + at, size, max_ts
                at += size
            if at == 0:
                # A batch header straddles nothing we could read: the file is torn.
                raise KafkaStorageError(f"{self.path}: truncated batch header at {position}")
            position += at

    def _entry_sound(self, entry_offset: int, position: int) -> bool:
        """Whether the batch at ``position`` is whole, v2, and ends at
        ``entry_offset``, as the index entry pointing there says."""
        if position + BATCH_HEADER_SIZE > self._size:
            return False
        head = os.pread(self.file.fileno(), BATCH_HEADER_SIZE, position)
        if len(head) < BATCH_HEADER_SIZE or head[16] != 2:
            return False
        base, last, size, _ = batch_header(head)
        return last == entry_offset and base <= last and position + size <= self._size

    def _start_position(self, offset: int) -> int:
        entry_offset, pos = self.offset_index.lookup(offset)
        if pos and pos < self._own_index_from and not self._entry_sound(entry_offset, pos):
            self.rebuild_indexes(f"its entry for offset {entry_offset} (position {pos}) does "
                                 f"not point at the batch ending there")
            _, pos = self.offset_index.lookup(offset)
        return pos

    def translate_offset(self, offset: int, start_position: int = 0):
        """(base offset, last offset, position, size) of the first batch whose
        last offset is >= ``offset``, or None if the segment has no such batch."""
        # at the log end: the batches appended last, in memory
        kept = self.tail_lookup(offset, start_position)
        if kept is not NOT_IN_TAIL:
            return kept
        pos = self._start_position(offset)
        first_chunk = _FIRST_SCAN_INTERVALS * self.config.index_interval_bytes + BATCH_HEADER_SIZE
        for base, last, position, size, _ in self._headers_from(max(pos, start_position),
                                                               first_chunk):
            if last >= offset:
                return base, last, position, size
        return None

    def read(self, offset: int, max_bytes: int, max_position: int | None = None,
             min_one_message: bool = True) -> FileRegion | None:
        """Up to ``max_bytes`` from the batch holding ``offset`` (None if no
        batch at or after it lies below ``max_position``). As in Kafka the
        region may end inside a batch; with ``min_one_message`` the first
        batch is returned whole even when it is larger than ``max_bytes``."""
        found = self.translate_offset(offset)
        if found is None:
            return None
        _, _, position, batch_size = found
        end = self._size if max_position is None else min(max_position, self._size)
        if position >= end:
            return None
        length = min(max_bytes, end - position)
        if min_one_message and length < batch_size:
            length = min(batch_size, end - position)
        if length <= 0:
            return None
        if max(position, self.verified_end) < min(position + length, self.trusted_from):
            length = self._verify(position, length)
        return FileRegion(self.file, position, length)

    def _verify(self, position: int, length: int) -> int:
        """Check the CRCs of the whole batches of [position, position +
        length) that are not known sound; returns how much of the region
        may be served (up to the first bad batch). A bad first batch raises.
        ``position`` is always a batch start."""
        start = self.verified_end if position <= self.verified_end else position
        end = min(position + length, max(self.trusted_from, start))
        data = os.pread(self.file.fileno(), end - start, start)
        scan = scan_log(data, min_offset=0, verify_crc=True)
        good_end = start + scan.valid_bytes
        # the region may end inside a batch (Kafka's fetches do): a last
        # batch cut short is not damage, unless nothing before it was whole
        partial = scan.error is not None and _cut_short(data, scan.valid_bytes)
        if position <= self.verified_end:
            self.verified_end = max(self.verified_end, good_end)
        if scan.error is None or (partial and good_end > position):
            return length
        first = not self.damaged
        self.damaged = f"{scan.error} at position {good_end} of {self.path}"
        if first:
            log.error("%s: a read found a damaged batch at position %d (%s); it is not served: "
                      "its readers get CORRUPT_MESSAGE, and `kafkalite verify` names it",
                      self.path, good_end, scan.error)
        if good_end <= position:
            raise CorruptRecordError(f"{self.path}: the batch at position {good_end} is damaged "
                                     f"({scan.error})")
        return good_end - position

    def find_offset_by_timestamp(self, timestamp: int,
                                 start_offset: int = 0) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``start_offset``
        with a timestamp >= ``timestamp``."""
        if self.max_timestamp < timestamp:
            return None
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(offset)
        for _, _, pos, size, max_ts in self._headers_from(position):
            if max_ts >= timestamp:
                batch = RecordBatch(os.pread(self.file.fileno(), size, pos))
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= start_offset:
                        return record.offset, record.timestamp
        return None

    # ---- maintenance ---------------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Drop every batch whose base offset is >= ``offset``; returns bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        base, _, position, _ = found
        if base < offset:
            # The batch straddles the offset: Kafka keeps whole batches only.
            position += found[3]
        removed = self._size - position
        if removed <= 0:
            return 0
        self._truncate_file(position)
        self.txn_index.truncate_to(offset)
        # Truncation is rare (replication); rebuilding the indexes and tail
        # state from what is left is simpler than patching them.
        self.recover(salvage=False)
        return removed

    def flush(self) -> None:
        try:
            os.fsync(self.file.fileno())
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"cannot flush {self.path}: {exc}") from exc

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.file.close()

    def file_paths(self, suffix: str | None = None) -> list[str]:
        s = self._suffix if suffix is None else suffix
        return [segment_path(self.directory, self.base_offset, kind, s)
                for kind in SEGMENT_SUFFIXES]

    def rename_to_suffix(self, suffix: str) -> None:
        """Rename all the segment's files to carry ``suffix`` (e.g. "" to commit a
        .cleaned segment). The index files go first so that a crash leaves
        the .log -- the marker the loader trusts -- in the old state."""
        self.offset_index.rename(segment_path(self.directory, self.base_offset, INDEX_SUFFIX, suffix))
        self.time_index.rename(segment_path(self.directory, self.base_offset, TIME_INDEX_SUFFIX, suffix))
        self.txn_index.rename(segment_path(self.directory, self.base_offset, TXN_INDEX_SUFFIX, suffix))
        new_log = segment_path(self.directory, self.base_offset, LOG_SUFFIX, suffix)
        os.replace(self._path, new_log)
        self._path = new_log
        self._suffix = suffix

    def delete(self) -> None:
        """Unlink the files. Open FileRegions keep the data readable until
        they are dropped; the descriptor closes with the last of them."""
        # Indexes first: the .log is what makes a segment exist for the
        # loader, so a crash here never leaves an index without its log.
        for path in reversed(self.file_paths()):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.offset_index.close()
        self.time_index.close()

    def __repr__(self):
        return (f"LogSegment(base={self.base_offset}, size={self._size}, "
                f"next_offset={self.next_offset})")
