"""Leader epoch -> start offset cache and its checkpoint file.

On-disk format (``leader-epoch-checkpoint``, the same text format as Kafka):

    0                 version
    <n>               number of entries
    <epoch> <offset>  n lines: the first offset written in each leader epoch

Entries are strictly increasing in both fields. The cache answers
OffsetForLeaderEpoch (where did epoch e end?) so that a follower or a
consumer can detect and truncate a diverged log.

Who may call: the partition's owner only. Every change is written through
atomically before the call returns, and an epoch is assigned *before* the
batches that carry it are written. After an unclean shutdown the entries
for the segments recovery scans are rebuilt from their batches (``rebuild``,
as Kafka's LogSegment.recover does): the batches, which passed their CRC,
are what replicas and consumers will be served, so a stale entry yields to
them rather than the other way round.
"""
from __future__ import annotations

import logging
import os

from kafkalite.storage.checkpoint import write_atomically

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


def encode(entries) -> bytes:
    """The checkpoint's bytes for (epoch, start offset) ``entries``."""
    entries = list(entries)
    lines = [str(_VERSION), str(len(entries))] + [f"{e} {o}" for e, o in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode(data: bytes) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries of a checkpoint's bytes (this
    file's, or a remote segment's copy); ValueError when malformed."""
    lines = [line.split() for line in data.decode("ascii").splitlines() if line.strip()]
    try:
        if int(lines[0][0]) != _VERSION:
            raise ValueError(f"version {lines[0][0]}")
        count = int(lines[1][0])
        entries = [(int(e), int(o)) for e, o in lines[2:2 + count]]
    except IndexError as exc:
        raise ValueError(f"truncated ({exc})") from None
    if len(entries) != count:
        raise ValueError(f"{len(entries)} entries, header says {count}")
    return entries


class LeaderEpochFileCache:
    def __init__(self, directory: str):
        self._path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        self._entries: list[tuple[int, int]] = self._read()

    def _read(self) -> list[tuple[int, int]]:
        try:
            with open(self._path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return []
        try:
            return decode(data)
        except (ValueError, UnicodeDecodeError) as exc:
            # Rebuilt from the batches' partitionLeaderEpoch during recovery.
            log.warning("ignoring malformed %s (%s)", self._path, exc)
            return []

    def _write(self) -> None:
        write_atomically(self._path, encode(self._entries))

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Note that ``epoch`` starts at ``start_offset``; ignored unless it is
        a newer epoch than the latest. Returns whether anything changed."""
        return self.assign_all([(epoch, start_offset)])

    def assign_all(self, epoch_starts) -> bool:
        """Assign a run of (epoch, start offset) pairs with one write."""
        changed = False
        for epoch, offset in epoch_starts:
            if epoch < 0 or (self._entries and epoch <= self._entries[-1][0]):
                continue
            # A newer epoch cannot start before an older one; drop stale entries.
            while self._entries and self._entries[-1][1] >= offset:
                self._entries.pop()
            self._entries.append((epoch, offset))
            changed = True
        if changed:
            self._write()
        return changed

    def rebuild(self, start: int, end: int, epoch_starts) -> bool:
        """The batches in offsets [``start``, ``end``) were scanned and carry
        ``epoch_starts`` (each (epoch, first offset) where the epoch goes up):
        within that range they replace the entries. Entries before ``start``
        that a batch contradicts (an epoch at least the batch's) go; entries
        from ``end`` on -- later segments not yet scanned, or an epoch
        assigned at the log end before its first batch was written -- are
        kept while they stay newer than the batches. Cutting the batches
        instead, as an earlier check against this file did, turned a stale
        entry into the loss of acknowledged records. Returns whether
        anything changed."""
        rebuilt = [(e, o) for e, o in self._entries if o < start]

        def add(epoch: int, offset: int, from_batches: bool) -> None:
            if epoch < 0:
                return
            if from_batches:
                while rebuilt and rebuilt[-1][0] > epoch:
                    rebuilt.pop()
            elif rebuilt and (rebuilt[-1][0] > epoch or rebuilt[-1][1] >= offset):
                return                       # contradicted by the batches
            if rebuilt and rebuilt[-1][0] == epoch:
                return                       # the same epoch, started earlier
            rebuilt.append((epoch, offset))

        for epoch, offset in epoch_starts:
            add(epoch, offset, True)
        for epoch, offset in self._entries:
            if offset >= end:
                add(epoch, offset, False)
        if rebuilt == self._entries:
            return False
        log.warning("%s: leader epochs rebuilt from the batches at offsets %d..%d: %s -> %s",
                    self._path, start, end - 1, self._entries, rebuilt)
        self._entries = rebuilt
        self._write()
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (largest epoch <= ``epoch``,
        the offset where it ended), or (-1, -1) if there is none."""
        if not self._entries or epoch < self._entries[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch >= self._entries[-1][0]:
            return self._entries[-1][0], log_end_offset
        for i, (e, _) in enumerate(self._entries):
            nxt_epoch, nxt_offset = self._entries[i + 1]
            if e <= epoch < nxt_epoch:
                return e, nxt_offset
        raise AssertionError("unreachable: entries are sorted")

    def epoch_for(self, offset: int) -> int:
        """The epoch ``offset`` was written in (Kafka's epochForOffset: the
        latest epoch starting at or before it), -1 when none does."""
        epoch = UNDEFINED_EPOCH
        for e, start in self._entries:
            if start > offset:
                break
            epoch = e
        return epoch

    def truncate_from_end(self, end_offset: int, keep_at_end: bool = True) -> None:
        """The log now ends at ``end_offset``: drop epochs that start after it.

        On an open (``keep_at_end``) an epoch starting exactly at the log end
        is kept: it was assigned just before its first batch was written (or
        the log start was moved up to the end), and forgetting it would let
        the leader epoch go back to an older one on the next open. A
        follower's truncation of a diverged tail drops it too, as Kafka's
        truncateFromEnd does: the leader's batches appended from there carry
        their own epochs, and a stale entry above them made the recovery
        after a crash take them for damage and cut acknowledged records out
        (a restart matrix soak lost 8)."""
        kept = [(e, o) for e, o in self._entries
                if o < end_offset or (keep_at_end and o == end_offset)]
        if kept != self._entries:
            self._entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: the epoch in effect there
        is moved up to start at it, older ones are dropped."""
        kept = [(e, o) for e, o in self._entries if o >= start_offset]
        earlier = [(e, o) for e, o in self._entries if o < start_offset]
        if earlier and not (kept and kept[0][1] == start_offset):
            kept.insert(0, (earlier[-1][0], start_offset))
        if kept != self._entries:
            self._entries = kept
            self._write()

    def clear(self) -> None:
        if self._entries:
            self._entries = []
            self._write()
