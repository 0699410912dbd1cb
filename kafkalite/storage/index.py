"""The sparse offset index and time index of one segment.

On-disk formats (big-endian, Kafka's):

    <base>.index      8-byte entries: relativeOffset int32, position int32
                      "the batch at byte `position` of the .log ends at offset
                      base+relativeOffset"; offsets and positions increase.
    <base>.timeindex  12-byte entries: timestamp int64, relativeOffset int32
                      "no record before offset base+relativeOffset has a
                      timestamp above `timestamp`"; timestamps increase.

An entry is added per ``index.interval.bytes`` of log (see LogSegment), so
an index is small; it lives in memory (a bytearray searched by the Cython
``kafkalite._ext.index``) and new entries reach the file at ``flush`` (on
roll, ``flush.messages``/``flush.ms`` and close), never on the append path.
That is safe because an index is only trusted for segments below the
recovery point, which are flushed; after an unclean stop the segments above
it are rescanned and their indexes rebuilt. Unlike Kafka the files are not
preallocated, so they never hold trailing zero entries; a torn last entry is
dropped on open, and an index that fails ``sanity_check`` is rebuilt.

Who may call: the owning LogSegment only.
"""
from __future__ import annotations

import os
import struct

from kafkalite._ext import index as _search
from kafkalite._ext.log_state import IndexState
from kafkalite.errors import KafkaStorageError

# One entry of each index file (their formats: the module docstring).
OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class _IndexFile(IndexState):
    # base_offset, _full_size, full, _data and _last are IndexState's C
    # fields (ext/log_state.pyx), whose appends of the common case are the
    # one-pass leader append's
    entry_size = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.entry_size)
        self._full_size = self.max_entries * self.entry_size
        # the last entry as ``entry`` gives it, kept: the append path asks for
        # it each time (None: not known, read it from _data)
        self._last = None
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            size = os.fstat(self._fd).st_size
            whole = size - size % self.entry_size
            self._data = bytearray(os.pread(self._fd, whole, 0)) if whole else bytearray()
            if whole != size:
                os.ftruncate(self._fd, whole)
            self._persisted = whole  # bytes of _data already in the file
            # kept with _data: the active segment asks before every append (should_roll)
            self.full = len(self._data) >= self._full_size
        except OSError as exc:
            raise KafkaStorageError(f"cannot open index {path}: {exc.strerror or exc}") from exc

    @property
    def entries(self) -> int:
        return len(self._data) // self.entry_size

    @property
    def size_in_bytes(self) -> int:
        return len(self._data)

    def is_full(self) -> bool:
        return self.full

    def _last_entry(self):
        """The last entry (``entry``'s tuple), None when there is none."""
        if self._last is None and self._data:
            self._last = self.entry(len(self._data) // self.entry_size - 1)
        return self._last

    def _relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"offset {offset} is out of range for a segment based at "
                             f"{self.base_offset}")
        return rel

    def _append_raw(self, entry: bytes, value: tuple) -> None:
        self._data += entry
        self._last = value
        self.full = len(self._data) >= self._full_size

    def _truncate_entries(self, entries: int) -> None:
        size = entries * self.entry_size
        self._last = None
        if size < len(self._data):
            del self._data[size:]
            self.full = len(self._data) >= self._full_size
        if size < self._persisted:
            os.ftruncate(self._fd, size)
            self._persisted = size

    def write_pending(self) -> None:
        """Write entries added since the last call to the file (no fsync)."""
        if self._persisted == len(self._data):
            return
        at = self._persisted
        try:
            pending = memoryview(self._data)[at:]
            while pending:
                pending = pending[os.pwrite(self._fd, pending, at):]
                at = len(self._data) - len(pending)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._persisted)
            except OSError:
                pass
            raise KafkaStorageError(f"cannot write index {self.path}: "
                                    f"{exc.strerror or exc}") from exc
        self._persisted = len(self._data)

    def reset(self) -> None:
        self._truncate_entries(0)

    def flush(self) -> None:
        self.write_pending()
        os.fsync(self._fd)

    def close(self) -> None:
        """Close the file; entries not yet written are dropped (callers flush
        first when they want them kept)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename(self, path: str) -> None:
        os.replace(self.path, path)
        self.path = path

    def raw(self) -> bytes:
        return bytes(self._data)


class OffsetIndex(_IndexFile):
    entry_size = 8

    def entry(self, slot: int) -> tuple[int, int]:
        """(absolute offset, position) of a slot."""
        rel, pos = _search.offset_index_entry(self._data, slot)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        last = self._last_entry()
        return self.base_offset if last is None else last[0]

    def append(self, offset: int, position: int) -> None:
        last = self._last_entry()
        if last is not None and offset <= last[0]:
            raise ValueError(f"offset index entries must increase: {offset} after {last[0]}")
        self._append_raw(OFFSET_ENTRY.pack(self._relative(offset), position), (offset, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        """The last entry at or below ``offset`` as (offset, position), or
        (base offset, 0) when there is none: where to start scanning."""
        slot = _search.offset_index_floor(self._data, self.entries, offset - self.base_offset)
        return self.entry(slot) if slot >= 0 else (self.base_offset, 0)

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        slot = _search.offset_index_floor(self._data, self.entries,
                                          offset - self.base_offset - 1)
        self._truncate_entries(slot + 1)

    def sanity_check(self, log_size: int) -> str | None:
        """Why this index cannot be trusted for a log of ``log_size`` bytes, or None."""
        prev_off, prev_pos = -1, -1
        for slot in range(self.entries):
            rel, pos = _search.offset_index_entry(self._data, slot)
            if rel <= prev_off or pos <= prev_pos or pos >= log_size or rel < 0:
                return (f"{self.path}: entry {slot} ({rel}, {pos}) is out of order or past the "
                        f"end of the log ({log_size} bytes)")
            prev_off, prev_pos = rel, pos
        return None


class TimeIndex(_IndexFile):
    entry_size = 12

    def entry(self, slot: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of a slot."""
        ts, rel = _search.time_index_entry(self._data, slot)
        return ts, self.base_offset + rel

    @property
    def last_entry(self) -> tuple[int, int]:
        last = self._last_entry()
        return (-1, self.base_offset) if last is None else last

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if it raises the largest timestamp indexed."""
        last_ts, last_off = self.last_entry
        if timestamp > last_ts:
            if self.entries and offset < last_off:
                raise ValueError(f"time index offsets must not decrease: {offset} after "
                                 f"{last_off}")
            self._append_raw(TIME_ENTRY.pack(timestamp, self._relative(offset)),
                             (timestamp, offset))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """The last entry with a timestamp strictly below ``timestamp`` as
        (timestamp, offset), or (-1, base offset): every record with a
        timestamp >= ``timestamp`` is at or after that offset's batch."""
        slot = _search.time_index_floor(self._data, self.entries, timestamp, True)
        return self.entry(slot) if slot >= 0 else (-1, self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        keep = self.entries
        while keep and self.entry(keep - 1)[1] >= offset:
            keep -= 1
        self._truncate_entries(keep)

    def sanity_check(self, next_offset: int) -> str | None:
        prev_ts, prev_off = None, -1
        for slot in range(self.entries):
            ts, off = self.entry(slot)
            if (prev_ts is not None and ts <= prev_ts) or off < prev_off or off >= next_offset:
                return (f"{self.path}: entry {slot} ({ts}, {off}) is out of order or past the "
                        f"log end offset {next_offset}")
            prev_ts, prev_off = ts, off
        return None
