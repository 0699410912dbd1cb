"""Share-partitions (KIP-932): which member holds which records of a partition.

A share group reads a partition through its *share-partition*, kept by the
partition's leader (this worker), since the state follows the data:

- the share-partition start offset (SPSO): every record below it is done
  (acknowledged or archived);
- the in-flight records from the SPSO up to ``next_offset`` (the offset
  after the last record ever acquired), as **ranges** of offsets sharing
  one state, delivery count and holder -- a fetched batch becomes one
  range, split only where acknowledgements differ -- never one object per
  record. A range is AVAILABLE (to be redelivered), ACQUIRED by a member
  until its lock deadline, ACKNOWLEDGED, or ARCHIVED (rejected, past the
  delivery count limit, or a gap).

ShareFetch acquires for the member: from the first AVAILABLE offset (an
earlier release or expired lock) or ``next_offset``, it reads the log like
a consumer's fetch (committed batches, whole batches) and acquires every
offset of those batches that is AVAILABLE or new, counting one more
delivery, locked for ``group.share.record.lock.duration.ms``. The answer
carries the batches and the acquired ranges; the client drops the records
it does not hold. Acknowledgements (in ShareFetch or ShareAcknowledge)
move the member's ACQUIRED records to ACKNOWLEDGED (ACCEPT), ARCHIVED
(REJECT, GAP) or back to AVAILABLE (RELEASE) -- or ARCHIVED when it has had
``group.share.delivery.count.limit`` deliveries; an acknowledgement of a
record the member does not hold is INVALID_RECORD_STATE and changes
nothing in that partition. A lock that expires releases the record the
same way, so a member that dies loses its records to the others. The SPSO
then moves past the leading done ranges. At most
``group.share.partition.max.record.locks`` records are in flight: past
that, only AVAILABLE records are handed out until the SPSO moves.

The SPSOs the group coordinator reports (DescribeShareGroupOffsets) and
sets (AlterShareGroupOffsets) are the share coordinator's: a reset there
starts a new state epoch, the workers drop the group's share-partitions
(``delete_group``) and read them again.

A state file of an older kafkalite (``share-<hex of the group id>.state``
in the partition's directory: magic "KLSS" | crc32c | key length | key |
value, Kafka's ShareSnapshot formats) is taken up when the coordinator has
no state for the share-partition, and removed once written there.

Who may call: the share-partition manager (share_partition_manager.py),
on the worker's event-loop thread: it makes the share-partitions of the
partitions this worker leads, applies the state it read, calls
``acquire``, ``acknowledge``, ``expire`` and the rest for its requests,
and writes ``state()``. Nothing here does I/O but reading the older state
file once.

Which process runs it: each partition worker.

What it may import: kafkalite.protocol (the state's record formats),
kafkalite.record, the bottom.
"""
from __future__ import annotations

import bisect
import logging
import struct

from kafkalite import errors
from kafkalite._ext.crc32c import crc32c
from kafkalite.errors import KafkaError
from kafkalite.protocol.codec import decode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.share_records import (ACKNOWLEDGED, ACQUIRED, ARCHIVED,
                                                       AVAILABLE, ShareSnapshotValue)
from kafkalite.protocol.messages.shares import ACCEPT, GAP, REJECT, RELEASE
from kafkalite.record import batches_extent, iter_batches

log = logging.getLogger("kafkalite.share_partition")

STATE_SUFFIX = ".state"
STATE_MAGIC = b"KLSS"
_HEADER = struct.Struct(">4sIi")            # magic, crc32c, key length
DONE = (ACKNOWLEDGED, ARCHIVED)


class InFlight:
    """Offsets ``first``..``last`` (inclusive) sharing one state."""

    __slots__ = ("first", "last", "state", "count", "member", "deadline")

    def __init__(self, first, last, state, count, member=None, deadline=0.0):
        self.first = first
        self.last = last
        self.state = state
        self.count = count            # deliveries so far
        # the holder while ACQUIRED; while AVAILABLE, the member that released
        # it in the request being served (which then hands it to others first)
        self.member = member
        self.deadline = deadline      # monotonic s, while ACQUIRED

    def same(self, other: InFlight) -> bool:
        return (self.state == other.state and self.count == other.count
                and self.member == other.member and self.deadline == other.deadline)

    def __repr__(self):
        return f"InFlight({self.first}-{self.last}, state={self.state}, count={self.count})"


class SharePartition:
    """The share group ``group_id``'s view of one partition led here."""

    def __init__(self, group_id: str, part, topic_id, settings, legacy_path: str):
        self.group_id = group_id
        self.part = part
        self.topic_id = topic_id
        self.settings = settings      # SharePartitionManager: lock_ms, delivery_limit, max_locks
        self.legacy_path = legacy_path  # a state file of an older kafkalite (module docstring)
        self.ranges: list[InFlight] = []
        self.start_offset = -1        # SPSO; -1 until initialized (share.auto.offset.reset)
        self.next_offset = -1
        self.dirty = False
        self.state_epoch = 0          # the share coordinator's, from the read
        # read from the share coordinator yet? While it is being read the
        # requests touching it wait (``waiters``); a read that failed leaves
        # its error here, answered until the next read
        self.loaded = False
        self.loading = False
        self.load_error: KafkaError | None = None
        self.waiters: list = []
        self.dead_letters: list = []  # (offset range, delivery count, reason) archived

    # ---- state --------------------------------------------------------------------------------

    def _initialize(self) -> None:
        log_ = self.part.log
        if self.start_offset < 0:
            self.start_offset = (log_.log_start_offset if self.settings.reset == "earliest"
                                 else self.part.high_watermark)
            self.next_offset = self.start_offset
            self.dirty = True
        if log_.log_start_offset > self.start_offset:
            # retention or DeleteRecords moved the log start past us
            self._drop_below(log_.log_start_offset)
            self.dirty = True

    def _drop_below(self, offset: int) -> None:
        self._split(offset)
        self.ranges = [r for r in self.ranges if r.first >= offset]
        self.start_offset = max(self.start_offset, offset)
        self.next_offset = max(self.next_offset, offset)

    def _index(self, offset: int) -> int:
        """Index of the range holding ``offset``, or of the first after it."""
        firsts = [r.first for r in self.ranges]
        i = bisect.bisect_right(firsts, offset) - 1
        if i >= 0 and self.ranges[i].last >= offset:
            return i
        return i + 1

    def _split(self, offset: int) -> None:
        """Make ``offset`` the first offset of a range if a range holds it."""
        i = self._index(offset)
        if i < len(self.ranges):
            r = self.ranges[i]
            if r.first < offset <= r.last:
                tail = InFlight(offset, r.last, r.state, r.count, r.member, r.deadline)
                r.last = offset - 1
                self.ranges.insert(i + 1, tail)

    def _covering(self, first: int, last: int) -> list[InFlight] | None:
        """The ranges exactly covering ``first``..``last`` (split to fit), or
        None if some of those offsets are not in flight."""
        if first < self.start_offset or last >= self.next_offset:
            return None
        self._split(first)
        self._split(last + 1)
        i = self._index(first)
        out = []
        expect = first
        while i < len(self.ranges) and self.ranges[i].first <= last:
            r = self.ranges[i]
            if r.first != expect:
                return None
            out.append(r)
            expect = r.last + 1
            i += 1
        return out if expect == last + 1 else None

    def _settle(self) -> None:
        """Merge neighbours in one state, and move the SPSO past done ranges."""
        merged: list[InFlight] = []
        for r in self.ranges:
            if merged and merged[-1].last + 1 == r.first and (
                    merged[-1].same(r) or (r.state in DONE and merged[-1].state == r.state)):
                merged[-1].last = r.last
            else:
                merged.append(r)
        while merged and merged[0].state in DONE:
            self.start_offset = merged.pop(0).last + 1
        if not merged:
            self.start_offset = self.next_offset
        self.ranges = merged

    def _release(self, r: InFlight, reason: str, by: str | None = None) -> None:
        """An acquired range goes back: AVAILABLE, or ARCHIVED at the limit."""
        r.member, r.deadline = by, 0.0
        if r.count >= self.settings.delivery_limit:
            r.state = ARCHIVED
            self.dead_letters.append((r.first, r.last, r.count,
                                      f"delivery count limit reached ({reason})"))
        else:
            r.state = AVAILABLE

    # ---- ShareFetch ---------------------------------------------------------------------------

    def acquire(self, member: str, max_bytes: int, now: float,
                max_records: int) -> tuple[bytes | None, list]:
        """Records for ``member``: (whole batches, [(first, last, delivery
        count)] it now holds among them, at most ``max_records`` offsets);
        (None, []) when there is nothing."""
        self._initialize()
        self.expire(now)
        available = next((r for r in self.ranges
                          if r.state == AVAILABLE and r.member != member), None)
        if available is not None:
            start = available.first
        elif self.next_offset - self.start_offset >= self.settings.max_locks:
            return None, []
        else:
            start = self.next_offset
        data = self.part.read(start, max_bytes, min_one_message=True)
        if data.region is None:
            return None, []
        records = data.region.read()
        end, complete = batches_extent(records)
        if complete < len(records):
            records = records[:complete]
        if end <= start:
            return None, []
        deadline = now + self.settings.lock_ms / 1000.0
        acquired = []
        quota = max_records
        if self.ranges:
            for r in self._covering_available(start, min(end, self.next_offset) - 1, member):
                if quota <= 0:
                    break
                if r.last - r.first + 1 > quota:
                    self._split(r.first + quota)
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                r.count += 1
                quota -= r.last - r.first + 1
                acquired.append(r)
        end = min(end, self.next_offset + max(quota, 0))
        if end > self.next_offset and (available is None or
                                       self.next_offset - self.start_offset
                                       < self.settings.max_locks):
            fresh = InFlight(self.next_offset, end - 1, ACQUIRED, 1, member, deadline)
            self.ranges.append(fresh)
            acquired.append(fresh)
            self.next_offset = end
        if not acquired:
            return None, []
        # not written now (an acquisition changes no record's fate; after a
        # restart an acquired record is AVAILABLE either way): a crash loses
        # only the delivery counts of records acquired since the last write
        out = [(r.first, r.last, r.count) for r in acquired]
        self._settle()
        return _through(records, max(last for _, last, _ in out)), out

    def _covering_available(self, first: int, last: int, member: str) -> list[InFlight]:
        if last < first:
            return []
        self._split(first)
        self._split(last + 1)
        return [r for r in self.ranges if first <= r.first and r.last <= last
                and r.state == AVAILABLE and r.member != member]

    # ---- acknowledgements -------------------------------------------------------------------

    def acknowledge(self, member: str, batches: list) -> None:
        """Apply ``batches`` (AcknowledgementBatch dicts) for ``member``, all
        or none: InvalidRecordStateError if any offset is not held by it."""
        self._initialize()
        plan = []
        for b in batches:
            first, last, types = b["first_offset"], b["last_offset"], b["acknowledge_types"]
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise errors.InvalidRequestError(
                    f"acknowledgement batch {first}-{last} with {len(types)} types")
            if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
                raise errors.InvalidRequestError(f"unknown acknowledge type in {list(types)}")
            # runs of one type: one step per run, not per record
            runs = [(first, last, types[0])] if len(types) == 1 else _runs(first, types)
            for lo, hi, kind in runs:
                covered = self._covering(lo, hi)
                if covered is None or any(r.state != ACQUIRED or r.member != member
                                          for r in covered):
                    raise errors.InvalidRecordStateError(
                        f"records {lo}-{hi} of {self.part.name} are not acquired by member "
                        f"{member} of share group {self.group_id}")
                plan.append((covered, kind))
        for covered, kind in plan:
            for r in covered:
                if kind == ACCEPT:
                    r.state, r.member, r.deadline = ACKNOWLEDGED, None, 0.0
                elif kind == RELEASE:
                    self._release(r, "released", by=member)
                else:
                    r.state, r.member, r.deadline = ARCHIVED, None, 0.0
                    if kind == REJECT:
                        self.dead_letters.append((r.first, r.last, r.count, "rejected"))
        if plan:
            self.dirty = True
            self._settle()

    def reset(self, offset: int) -> None:
        """AlterShareGroupOffsets: the SPSO is ``offset``, nothing in flight
        (every record from it on is new to the group, delivery counts 0)."""
        self.ranges = []
        self.start_offset = self.next_offset = offset
        self.dirty = True

    def end_request(self) -> None:
        """What was released in the request just served may go to anyone now."""
        for r in self.ranges:
            if r.state == AVAILABLE:
                r.member = None
        self._settle()

    def release_member(self, member: str) -> bool:
        """Release everything ``member`` holds (its share session closed)."""
        released = False
        for r in self.ranges:
            if r.state == ACQUIRED and r.member == member:
                self._release(r, "released")
                released = True
        if released:
            self.dirty = True
            self._settle()
        return released

    def expire(self, now: float) -> bool:
        """Release the ranges whose acquisition lock passed."""
        expired = False
        for r in self.ranges:
            if r.state == ACQUIRED and r.deadline <= now:
                self._release(r, "acquisition lock timed out")
                expired = True
        if expired:
            self.dirty = True
            self._settle()
        return expired

    def next_deadline(self) -> float | None:
        deadlines = [r.deadline for r in self.ranges if r.state == ACQUIRED]
        return min(deadlines) if deadlines else None

    # ---- persistence (the share coordinator's state) ------------------------------------

    def apply_state(self, answer: dict) -> None:
        """The state ReadShareGroupState answered (start offset -1: none
        yet, or a state file an older kafkalite wrote, taken up once)."""
        self.state_epoch = answer["state_epoch"]
        batches = answer["state_batches"]
        start = answer["start_offset"]
        if start < 0 and not batches:
            legacy = _read_legacy(self.legacy_path, self.group_id, self.part.name)
            if legacy is not None:
                start, batches = legacy["start_offset"], legacy["state_batches"]
                self.dirty = True          # written to the coordinator at the next flush
        self.ranges = []
        self.start_offset = self.next_offset = start
        if start >= 0:
            for b in batches:
                state = b["delivery_state"] if b["delivery_state"] in DONE else AVAILABLE
                self.ranges.append(InFlight(b["first_offset"], b["last_offset"], state,
                                            b["delivery_count"]))
                self.next_offset = max(self.next_offset, b["last_offset"] + 1)
            self._settle()
        self.loaded, self.loading, self.load_error = True, False, None

    def state(self) -> dict:
        """The whole state as a WriteShareGroupState partition: acquired
        records as AVAILABLE (a lock does not outlive its leader)."""
        batches = [{"first_offset": r.first, "last_offset": r.last,
                    "delivery_state": r.state if r.state in DONE else AVAILABLE,
                    "delivery_count": r.count} for r in self.ranges]
        if not self.ranges and self.next_offset > self.start_offset:
            # records past the last acquisition are not in flight yet
            batches = [{"first_offset": self.start_offset, "last_offset": self.next_offset - 1,
                        "delivery_state": ARCHIVED, "delivery_count": 0}]
        return {"partition": self.part.index, "state_epoch": self.state_epoch,
                "leader_epoch": self.part.leader_epoch, "start_offset": self.start_offset,
                "state_batches": batches}


def _read_legacy(path: str, group: str, partition: str) -> dict | None:
    """The ShareSnapshotValue of a state file an older kafkalite wrote into
    the partition's directory; None when there is none (or it is damaged)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        magic, crc, key_len = _HEADER.unpack_from(raw, 0)
        body = raw[_HEADER.size:]
        if magic != STATE_MAGIC or crc32c(body) != crc or not 0 <= key_len <= len(body):
            raise ValueError("bad header or checksum")
        return decode_data(ShareSnapshotValue, body[key_len:])[1]
    except (struct.error, ValueError, ProtocolError) as exc:
        log.error("share group %s, %s: state file %s is damaged (%s); not taken up",
                  group, partition, path, exc)
        return None


def _through(records: bytes, last: int) -> bytes:
    """The leading whole batches of ``records`` up to the one holding
    ``last``: what a member needs of a read that went past what it acquired."""
    size = 0
    for batch in iter_batches(records, 0):
        if batch.base_offset > last:
            break
        size += batch.size_in_bytes
    return records[:size] if size < len(records) else records


def _runs(first: int, types) -> list:
    """[(first, last, type)] of the runs of one type in a per-offset list."""
    out = []
    start = 0
    for i in range(1, len(types) + 1):
        if i == len(types) or types[i] != types[start]:
            out.append((first + start, first + i - 1, types[start]))
            start = i
    return out


def legacy_state_name(group: str) -> str:
    """The name of an older kafkalite's state file of ``group`` in a
    partition's directory."""
    return "share-" + group.encode().hex() + STATE_SUFFIX
