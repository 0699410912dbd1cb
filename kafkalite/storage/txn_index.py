"""The aborted-transaction index of one segment: ``<base>.txnindex``.

A read_committed consumer must drop the records of aborted transactions.
It learns which they are from the fetch response's ``aborted_transactions``
list, which the broker builds from these files: every transaction that was
aborted, recorded in the index of the segment that holds its ABORT marker.

On-disk format (Kafka's, big-endian, entries back to back, nothing else)::

    entry, 34 bytes:
      version               int16   0
      producer id           int64
      first offset          int64   of the transaction's first batch in this partition
      last offset           int64   of its ABORT marker
      last stable offset    int64   the partition's LSO once the abort completed

Entries are appended in marker order, so last offsets increase through the
file and so do last stable offsets (the LSO never moves back except by
truncation, which truncates this file too). The file is created at the
first entry: most segments have none.

Durability follows the segment's: the owner flushes the index when it
flushes the segment; after an unclean stop the loader rebuilds the indexes
of the segments it recovers by replaying their markers (log.py).

Who may call: the segment that owns it (segment.py) and, through it, the
partition log and its loader, on the log owner's thread.
"""
from __future__ import annotations

import bisect
import os
import struct
from typing import NamedTuple

from kafkalite.errors import KafkaStorageError

TXN_INDEX_SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")
assert ENTRY.size == 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    # ext/tail_read.pyx reads ``_entries``'s length itself (a list, always)
    __slots__ = ("path", "base_offset", "_entries", "_array")

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        # the entries as an int64 table (producer id, first, last, lso), built on demand
        self._array = None      # numpy.ndarray
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise KafkaStorageError(f"cannot read {path}: {exc.strerror or exc}") from exc
        usable = len(data) - len(data) % ENTRY.size   # a torn last entry is dropped
        for version, pid, first, last, lso in ENTRY.iter_unpack(data[:usable]):
            self._entries.append(AbortedTxn(pid, first, last, lso))

    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def has_entry_ending_at(self, last_offset: int) -> bool:
        """Whether an entry's marker is at ``last_offset`` (entries are in
        marker order, so a binary search)."""
        i = bisect.bisect_left(self._entries, last_offset, key=lambda e: e.last_offset)
        return i < len(self._entries) and self._entries[i].last_offset == last_offset

    def __len__(self) -> int:
        return len(self._entries)

    def sanity_check(self) -> str | None:
        """Why the index cannot be trusted (last offsets not increasing, or
        entries outside the segment), or None."""
        prev = -1
        for e in self._entries:
            if e.last_offset <= prev or e.last_offset < self.base_offset or e.first_offset > e.last_offset:
                return f"{self.path}: entry {e} is out of order"
            prev = e.last_offset
        return None

    # ---- writes ------------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise KafkaStorageError(
                f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow "
                f"the last one, ending at {self._entries[-1].last_offset}")
        data = ENTRY.pack(VERSION, *txn)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise KafkaStorageError(f"cannot append to {self.path}: {exc.strerror or exc}") from exc
        self._entries.append(txn)
        self._array = None

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or above ``offset``."""
        keep = [e for e in self._entries if e.last_offset < offset]
        if len(keep) != len(self._entries):
            self._rewrite(keep)

    def reset(self) -> None:
        self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        try:
            if entries:
                with open(self.path, "r+b" if os.path.exists(self.path) else "wb") as f:
                    f.truncate(len(entries) * ENTRY.size)
            elif os.path.exists(self.path):
                os.unlink(self.path)
        except OSError as exc:
            raise KafkaStorageError(f"cannot truncate {self.path}: {exc.strerror or exc}") from exc
        self._entries = entries
        self._array = None

    def flush(self) -> None:
        if not self._entries:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise KafkaStorageError(f"cannot flush {self.path}: {exc.strerror or exc}") from exc

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # ---- reads -------------------------------------------------------------------------------

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions a fetch of [fetch_offset, upper_bound)
        must report (those ending at or after ``fetch_offset`` and starting
        below ``upper_bound``), and whether the search is complete: an entry whose last stable offset reached
        ``upper_bound`` proves that every transaction starting below it had
        ended by then, so later segments need not be looked at."""
        if not self._entries:
            return [], False
        import numpy as np      # here, not at import: only fetches that meet an abort pay for it
        arr = self._array
        if arr is None:
            arr = self._array = np.array([tuple(e) for e in self._entries], dtype=np.int64)
        # entries after the first with lso >= upper_bound cannot start below it
        stop = int(np.searchsorted(arr[:, 3], upper_bound, side="left"))
        complete = stop < len(arr)
        window = arr[:stop + 1]
        hit = (window[:, 2] >= fetch_offset) & (window[:, 1] < upper_bound)
        return [AbortedTxn(*row) for row in window[hit].tolist()], complete


def aborted_from(segments, index: int, start: int, upper_bound: int) -> list:
    """PartitionLog.aborted_transactions over ``segments`` (a log's, each
    with its ``txn_index``) from the one at ``index``, which holds
    ``start`` (a read has found it already)."""
    if index == len(segments) - 1:
        # the active segment alone, as a consumer at the log end reads: no
        # slice of the segment list for each fetched partition
        return segments[index].txn_index.collect(start, upper_bound)[0]
    found: list = []
    for seg in segments[index:]:
        entries, complete = seg.txn_index.collect(start, upper_bound)
        found += entries
        if complete:
            break
    return found
