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

The group coordinator asks for the SPSOs (DescribeShareGroupOffsets) and
sets them (AlterShareGroupOffsets, only while the group has no members)
over the control channel (``offsets``, ``alter_offsets``): a reset drops
every in-flight range and delivery count, and the share-partition starts
afresh at the new SPSO, written to its snapshot before the answer.

A share session (the share_session_epoch of ShareFetch/ShareAcknowledge,
per member on this broker) opens with epoch 0 and counts up; a wrong
epoch is INVALID_SHARE_SESSION_EPOCH, an unknown session
SHARE_SESSION_NOT_FOUND; epoch -1 closes it and releases what the member
holds here. The partitions a session fetches accumulate (a fetch may name
only new ones; ``forgotten_topics_data`` drops them), as Kafka's.

Persistence: each share-partition's state is one snapshot file in the
partition's directory, ``share-<hex of the group id>.state``:

    magic "KLSS" | crc32c of the rest uint32 | key length int32 | key | value

key and value in the formats of Kafka's ``__share_group_state`` records
(protocol/messages/share_records.py: ShareSnapshotKey, ShareSnapshotValue),
acquired records written as AVAILABLE. It is rewritten (to a temporary
file, then renamed over the old one) after every request or tick that
acknowledged, released or archived records, before the answer goes out: a broker killed at any
moment leaves the old or the new snapshot whole, and every acknowledgement
a member was told of is in it. (Not the internal ``__share_group_state``
topic itself: the supervisor's share coordinator Kafka has is not built;
the file is written without fsync, so it survives a killed process, not a
lost machine -- as the logs' own unflushed tail.) After a restart the SPSO
and the done ranges come back, and every in-flight record not done is
AVAILABLE again with its delivery count: none lost, none accepted twice.
A replica that becomes leader of a replicated partition takes the newest
snapshot among its own and those the partition's other replicas on this
node wrote (data/broker-N/topic-P): a failover on one node keeps the state.
Snapshots are not replicated across nodes.

Who may call: the replica manager (replica_manager.py), on the worker's
event-loop thread: it routes ShareFetch and ShareAcknowledge here and
calls ``expire()`` at ``next_deadline()``; the worker's control channel
(worker.py) the offsets calls.
"""
from __future__ import annotations

import bisect
import glob
import logging
import os
import struct
import time
import uuid

from kafkalite import errors
from kafkalite._ext.crc32c import crc32c
from kafkalite.errors import KafkaError
from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.share_records import (ACKNOWLEDGED, ACQUIRED, ARCHIVED,
                                                       AVAILABLE, ShareSnapshotKey,
                                                       ShareSnapshotValue)
from kafkalite.protocol.messages.shares import ACCEPT, GAP, REJECT, RELEASE
from kafkalite.record import batches_extent, iter_batches
from kafkalite.server.purgatory import DelayedFetch
from kafkalite.server.share_dead_letters import DeadLetterWriter
from kafkalite.server.requests import DEFERRED

log = logging.getLogger("kafkalite.share_partition")

NONE = 0
OPEN_EPOCH, CLOSE_EPOCH = 0, -1
STATE_SUFFIX = ".state"
STATE_MAGIC = b"KLSS"
_HEADER = struct.Struct(">4sIi")            # magic, crc32c, key length
DONE = (ACKNOWLEDGED, ARCHIVED)
# Records one ShareFetch acquires per partition at most: the Java client's
# max.poll.records default, which v0 cannot carry (v1's MaxRecords caps the
# whole request further). It lets several members share a partition whose
# batches are large: a batch's offsets may go to different members.
MAX_ACQUIRED_RECORDS = 500
# A share session unused this long is forgotten (its member died or left
# without closing it): the sessions of members that come and go stay bounded.
SESSION_IDLE_S = 300.0
# Fault injection for the exactly-once checker's own test: "duplicate" hands
# a record out again after it was accepted, "skip" marks records accepted
# that nobody acquired. Never set outside that test.
FAULT_ENV = "KAFKALITE_SHARE_FAULT"

# Response partition defaults (an erroneous partition stays well-formed).
# No records are empty records, not null, as Kafka's: librdkafka rejects a
# null record set.
def _fetch_blank(index: int) -> dict:
    return {"partition_index": index, "error_code": NONE, "error_message": None,
            "acknowledge_error_code": NONE, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"",
            "acquired_records": []}


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

    def __init__(self, group_id: str, part, topic_id, settings, path: str,
                 siblings: list | None = None):
        self.group_id = group_id
        self.part = part
        self.topic_id = topic_id
        self.settings = settings      # SharePartitionManager: lock_ms, delivery_limit, max_locks
        self.path = path
        self.ranges: list[InFlight] = []
        self.start_offset = -1        # SPSO; -1 until initialized (share.auto.offset.reset)
        self.next_offset = -1
        self.dirty = False
        self.created = int(time.time() * 1000)
        self.snapshot_epoch = 0
        self.dead_letters: list = []  # (offset range, delivery count, reason) archived
        self._load([path, *(siblings or ())])

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

    # ---- persistence --------------------------------------------------------------------------

    def _read(self, path: str) -> dict | None:
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
            # a rename is atomic, so only damage gets here: start over from
            # the reset policy rather than refuse the partition
            log.error("share group %s, %s: state file %s is damaged (%s); starting afresh",
                      self.group_id, self.part.name, path, exc)
            return None

    def _load(self, paths: list) -> None:
        """The newest snapshot among ``paths``: this replica's, and those
        other replicas of the partition on this node wrote while they led it."""
        found = [v for v in map(self._read, paths) if v is not None]
        if not found:
            return
        value = max(found, key=lambda v: (v["write_timestamp"], v["snapshot_epoch"]))
        self.snapshot_epoch = value["snapshot_epoch"]
        self.created = value["create_timestamp"]
        self.start_offset = value["start_offset"]
        self.next_offset = self.start_offset
        for b in value["state_batches"]:
            state = b["delivery_state"] if b["delivery_state"] in DONE else AVAILABLE
            self.ranges.append(InFlight(b["first_offset"], b["last_offset"], state,
                                        b["delivery_count"]))
            self.next_offset = max(self.next_offset, b["last_offset"] + 1)
        self._settle()

    def flush(self) -> None:
        """Write the snapshot if the state changed (see the module docstring)."""
        if not self.dirty:
            return
        self.dirty = False
        self.snapshot_epoch += 1
        key = encode_data(ShareSnapshotKey, 0, {"group_id": self.group_id,
                                                "topic_id": self.topic_id,
                                                "partition": self.part.index})
        value = encode_data(ShareSnapshotValue, 0, {
            "snapshot_epoch": self.snapshot_epoch, "state_epoch": 0,
            "leader_epoch": self.part.leader_epoch, "start_offset": self.start_offset,
            "create_timestamp": self.created, "write_timestamp": int(time.time() * 1000),
            "state_batches": [{"first_offset": r.first, "last_offset": r.last,
                               "delivery_state": r.state if r.state in DONE else AVAILABLE,
                               "delivery_count": r.count} for r in self.ranges]
            # records past the last acquisition are not in flight yet
            + ([{"first_offset": self.start_offset, "last_offset": self.next_offset - 1,
                 "delivery_state": ARCHIVED, "delivery_count": 0}]
               if not self.ranges and self.next_offset > self.start_offset else [])})
        body = key + value
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(_HEADER.pack(STATE_MAGIC, crc32c(body), len(key)) + body)
        os.replace(tmp, self.path)


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


class ShareSession:
    __slots__ = ("epoch", "partitions", "used")

    def __init__(self):
        self.epoch = 1                 # the epoch the next request must carry
        self.partitions: dict = {}     # (topic id, index) -> partition_max_bytes
        self.used = time.monotonic()


class SharePartitionManager:
    """ShareFetch and ShareAcknowledge for the partitions this broker leads."""

    def __init__(self, replica_manager, *, lock_ms: int = 30_000, delivery_limit: int = 5,
                 max_locks: int = 2_000, reset: str = "latest"):
        self.rm = replica_manager
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks
        self.reset = reset
        self.shares: dict[tuple, SharePartition] = {}     # (group, topic, index) -> state
        self.sessions: dict[tuple, ShareSession] = {}     # (group, member) -> session
        self.fault = os.environ.get(FAULT_ENV, "")
        self._faulted = False
        self._next_session_sweep = 0.0
        self.dead_letter_writer = DeadLetterWriter(replica_manager)

    def share_partition(self, group: str, name: str, index: int, topic_id) -> SharePartition:
        part = self.rm.partition(name, index)
        key = (group, name, index)
        sp = self.shares.get(key)
        if sp is None or sp.part is not part:
            name = "share-" + group.encode().hex() + STATE_SUFFIX
            path = os.path.join(part.log.directory, name)
            # a replicated partition's replicas on this node: data/broker-N/topic-P
            siblings = [p for p in glob.glob(os.path.join(
                self.rm.data_dir, "broker-*", os.path.basename(part.log.directory), name))
                if os.path.abspath(p) != os.path.abspath(path)]
            sp = self.shares[key] = SharePartition(group, part, topic_id, self, path, siblings)
        return sp

    def _name(self, topic_id) -> str:
        name = self.rm.topic_names.get(topic_id)
        if name is None:
            raise errors.UnknownTopicIdError(f"no topic with id {topic_id} here")
        return name

    def _session(self, group: str, member: str, epoch: int) -> ShareSession:
        key = (group, member)
        if epoch == OPEN_EPOCH:
            session = self.sessions[key] = ShareSession()
            return session
        session = self.sessions.get(key)
        if session is None:
            raise errors.ShareSessionNotFoundError(
                f"no share session of member {member} of group {group} on this broker")
        if epoch != CLOSE_EPOCH:
            if epoch != session.epoch:
                raise errors.InvalidShareSessionEpochError(
                    f"share session epoch {epoch}, expected {session.epoch}")
            session.epoch += 1
        session.used = time.monotonic()
        return session

    def _acknowledge(self, group, member, topics, epoch, session) -> tuple[list, dict]:
        """Apply each partition's acknowledgements, and release what the
        member holds if the request closes its session (epoch -1): the
        share-partitions touched, and {(topic id, index): {"ack_error":
        KafkaError}} of the partitions that failed."""
        touched = []
        answers: dict = {}
        for t in topics:
            for p in t["partitions"]:
                batches = p.get("acknowledgement_batches") or ()
                if not batches:
                    continue
                out = answers.setdefault((t["topic_id"], p["partition_index"]), {})
                try:
                    sp = self.share_partition(group, self._name(t["topic_id"]),
                                              p["partition_index"], t["topic_id"])
                    sp.acknowledge(member, batches)
                    touched.append(sp)
                    if self.fault == "duplicate" and not self._faulted:
                        self._reopen(sp, batches[0]["first_offset"])
                except KafkaError as exc:
                    out["ack_error"] = exc
        if epoch == CLOSE_EPOCH:
            self.sessions.pop((group, member), None)
            for sp in self._session_shares(group, session):
                if sp.release_member(member):
                    touched.append(sp)
        return touched, answers

    @staticmethod
    def _check_ids(body: dict) -> None:
        if not body.get("group_id"):
            raise errors.InvalidRequestError("GroupId can't be empty.")
        if not body.get("member_id"):
            raise errors.InvalidRequestError("MemberId can't be empty.")

    def share_fetch(self, ctx, body: dict):
        try:
            self._check_ids(body)
            group, member, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
            session = self._session(group, member, epoch)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message,
                    "responses": [], "node_endpoints": []}
        for f in body.get("forgotten_topics_data") or ():
            for index in f["partitions"]:
                session.partitions.pop((f["topic_id"], index), None)
        # v1 has no per-partition byte limit, and MaxRecords caps the
        # records acquired in all (0: the request only acknowledges)
        v1 = ctx.api_version >= 1
        for t in body["topics"]:
            for p in t["partitions"]:
                session.partitions[(t["topic_id"], p["partition_index"])] = \
                    p.get("partition_max_bytes") or (0x7FFFFFFF if v1 else 1048576)
        max_records = max(body["max_records"], 0) if v1 else 0x7FFFFFFF
        touched, answers = self._acknowledge(group, member, body["topics"], epoch, session)
        if epoch == CLOSE_EPOCH:
            self._flush(touched)
            return self._fetch_response(answers, {}, session, fetched=False)
        budget = [body.get("max_bytes") or 0x7FFFFFFF, max_records]
        got, keys = self._acquire_all(group, member, session, budget)
        self._flush(touched + [sp for sp, _, _ in got.values()])
        total = sum(len(recs) for sp, recs, _ in got.values() if sp is not None)
        wait_ms = body.get("max_wait_ms", 0)
        if (total >= max(body.get("min_bytes", 1), 1) or wait_ms <= 0 or not keys
                or budget[1] <= 0):
            return self._fetch_response(answers, got, session)

        def complete() -> None:
            budget[0] = body.get("max_bytes") or 0x7FFFFFFF
            if (group, member) not in self.sessions:
                ctx.respond(self._fetch_response(answers, got, session))
                return
            more, _ = self._acquire_all(group, member, session, budget)
            self._flush([sp for sp, _, _ in more.values()])
            ctx.respond(self._fetch_response(answers, {**got, **more}, session))
        self.rm.purgatory.watch(DelayedFetch(
            ctx, time.monotonic() + wait_ms / 1000.0, keys, max(body.get("min_bytes", 1), 1),
            total, complete))
        return DEFERRED

    def _session_shares(self, group, session) -> list:
        out = []
        for (topic_id, index) in session.partitions:
            try:
                out.append(self.share_partition(group, self._name(topic_id), index, topic_id))
            except KafkaError:
                pass
        return out

    def _acquire_all(self, group, member, session, budget) -> tuple[dict, list]:
        """{(topic id, index): (share-partition, records, acquired) or the
        KafkaError}, and the purgatory keys a waiting fetch watches.
        ``budget``: [bytes, records] left to the request, spent here."""
        got: dict = {}
        keys = []
        now = time.monotonic()
        for (topic_id, index), max_bytes in session.partitions.items():
            try:
                sp = self.share_partition(group, self._name(topic_id), index, topic_id)
            except KafkaError as exc:
                got[(topic_id, index)] = (None, exc, None)
                continue
            keys += [sp.part.key, share_key(sp.part.key)]
            if budget[0] <= 0 or budget[1] <= 0:
                continue
            records, acquired = sp.acquire(member, min(max_bytes, budget[0]), now,
                                           min(budget[1], MAX_ACQUIRED_RECORDS))
            if self.fault and acquired:
                acquired = self._inject(sp, member, acquired)
            if records is not None:
                budget[0] -= len(records)
                budget[1] -= sum(last - first + 1 for first, last, _ in acquired)
                got[(topic_id, index)] = (sp, records, acquired)
        return got, keys

    def _inject(self, sp: SharePartition, member: str, acquired: list) -> list:
        """FAULT_ENV "skip": the last record acquired is marked accepted and
        never handed out (the exactly-once checker's own test)."""
        first, last, count = acquired[0]
        if self.fault == "skip" and last > first:
            # the last record of the range is marked accepted, never handed out
            sp._split(last)
            for r in sp.ranges:
                if r.first == last:
                    r.state, r.member = ACKNOWLEDGED, None
            sp._settle()
            return [(first, last - 1, count)] + acquired[1:]
        return acquired

    def _reopen(self, sp: SharePartition, offset: int) -> None:
        """FAULT_ENV "duplicate": an acknowledged record is made available
        again (once), so it is delivered and accepted a second time."""
        self._faulted = True
        i = sp._index(offset)
        if i < len(sp.ranges) and sp.ranges[i].first <= offset:
            sp._split(offset)
            sp._split(offset + 1)
            r = sp.ranges[sp._index(offset)]
            if r.state != ACKNOWLEDGED:
                self._faulted = False
                return
            r.state = AVAILABLE
        else:
            sp.ranges.insert(i, InFlight(offset, offset, AVAILABLE, 1))
            sp.start_offset = min(sp.start_offset, offset)
        sp.dirty = True

    def _fetch_response(self, answers: dict, got: dict, session, fetched: bool = True) -> dict:
        by_topic: dict = {}
        keys = list(session.partitions) if fetched else []
        keys += [k for k in answers if k not in session.partitions or not fetched]
        for key in dict.fromkeys(keys):
            topic_id, index = key
            out = _fetch_blank(index)
            ack = answers.get(key, {}).get("ack_error")
            if ack is not None:
                out["acknowledge_error_code"] = ack.code
                out["acknowledge_error_message"] = ack.message
            entry = got.get(key)
            if entry is not None:
                sp, records, acquired = entry
                if sp is None:
                    out["error_code"], out["error_message"] = records.code, records.message
                else:
                    out["records"] = records
                    out["acquired_records"] = [
                        {"first_offset": f, "last_offset": la, "delivery_count": c}
                        for f, la, c in acquired]
                    out["current_leader"] = {"leader_id": sp.part.leader_id,
                                             "leader_epoch": sp.part.leader_epoch}
            by_topic.setdefault(topic_id, []).append(out)
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "acquisition_lock_timeout_ms": self.lock_ms,
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": []}

    # ---- ShareAcknowledge ---------------------------------------------------------------------

    def share_acknowledge(self, ctx, body: dict):
        try:
            self._check_ids(body)
            group, member, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
            if epoch == OPEN_EPOCH:
                raise errors.InvalidShareSessionEpochError(
                    "ShareAcknowledge cannot open a share session (epoch 0)")
            session = self._session(group, member, epoch)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message,
                    "responses": [], "node_endpoints": []}
        touched, answers = self._acknowledge(group, member, body["topics"], epoch, session)
        self._flush(touched)
        responses = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                err = answers.get((t["topic_id"], p["partition_index"]), {}).get("ack_error")
                parts.append({"partition_index": p["partition_index"],
                              "error_code": err.code if err else NONE,
                              "error_message": err.message if err else None,
                              "current_leader": {"leader_id": -1, "leader_epoch": -1}})
            responses.append({"topic_id": t["topic_id"], "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "responses": responses, "node_endpoints": []}

    # ---- time and persistence ----------------------------------------------------------------

    def _flush(self, touched) -> None:
        woken = set()
        for sp in touched:
            if sp is None:                   # a partition answered with an error
                continue
            sp.end_request()
            if sp.dirty:
                sp.flush()
            for first, last, count, reason in sp.dead_letters:
                self.dead_letter_writer.add(sp.group_id, sp.part, first, last, count, reason)
            sp.dead_letters.clear()
            # records to hand out again, or room in the in-flight window:
            # share fetches waiting on the partition try again
            if sp.part.key not in woken:
                woken.add(sp.part.key)
                self.rm.purgatory.check(share_key(sp.part.key), None)
        self.dead_letter_writer.tick()

    def next_deadline(self) -> float | None:
        deadlines = [d for d in (sp.next_deadline() for sp in self.shares.values())
                     if d is not None]
        if self.dead_letter_writer.pending:
            deadlines.append(time.monotonic() + 0.1)
        return min(deadlines) if deadlines else None

    def expire(self) -> None:
        now = time.monotonic()
        if now >= self._next_session_sweep:
            self._next_session_sweep = now + SESSION_IDLE_S / 10
            for key in [k for k, s in self.sessions.items() if now - s.used > SESSION_IDLE_S]:
                del self.sessions[key]
        expired = [sp for sp in self.shares.values() if sp.expire(now)]
        self._flush(expired)
        self.dead_letter_writer.tick()

    def configure(self, config) -> None:
        """The server config's share-group settings (config.py)."""
        self.lock_ms = config.group_share_record_lock_duration_ms
        self.delivery_limit = config.group_share_delivery_count_limit
        self.max_locks = config.group_share_partition_max_record_locks
        self.reset = config.share_auto_offset_reset
        self.dead_letter_writer.topic = config.share_dead_letter_topic

    def _state_file(self, group: str, part) -> str:
        return os.path.join(part.log.directory, "share-" + group.encode().hex() + STATE_SUFFIX)

    def offsets(self, group: str, partitions: list | None) -> list:
        """DescribeShareGroupOffsets, this broker's part: [{"topic",
        "partition", "start_offset", "leader_epoch", "error_code"}] for
        ``partitions`` ([topic, index] pairs) led here, or (None) for every
        partition led here the group has state for. -1: no state."""
        out = []
        if partitions is None:
            partitions = [list(k) for k, part in self.rm.partitions.items() if part.is_leader
                          and ((group, *k) in self.shares
                               or os.path.exists(self._state_file(group, part)))]
        for name, index in partitions:
            entry = {"topic": name, "partition": index, "start_offset": -1,
                     "leader_epoch": -1, "error_code": NONE}
            try:
                part = self.rm.partition(name, index)
                entry["leader_epoch"] = part.leader_epoch
                if (group, name, index) in self.shares or \
                        os.path.exists(self._state_file(group, part)):
                    sp = self.share_partition(group, name, index, _uuid(part.topic_id))
                    entry["start_offset"] = sp.start_offset
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            out.append(entry)
        return out

    def alter_offsets(self, group: str, partitions: list) -> list:
        """AlterShareGroupOffsets, this broker's part: each [topic, index,
        offset]'s share-partition starts afresh at ``offset`` (the group has
        no members: the coordinator checked), written before the answer."""
        out = []
        for name, index, offset in partitions:
            entry = {"topic": name, "partition": index, "error_code": NONE}
            try:
                part = self.rm.partition(name, index)
                sp = self.share_partition(group, name, index, _uuid(part.topic_id))
                sp.reset(offset)
                sp.flush()
            except KafkaError as exc:
                entry["error_code"], entry["error_message"] = exc.code, exc.message
            out.append(entry)
        return out

    def delete_group(self, group: str) -> None:
        """The share group was deleted (DeleteGroups): its sessions and its
        state in every partition hosted here go."""
        for k in [k for k in self.shares if k[0] == group]:
            del self.shares[k]
        for k in [k for k in self.sessions if k[0] == group]:
            del self.sessions[k]
        name = "share-" + group.encode().hex() + STATE_SUFFIX
        for part in self.rm.partitions.values():
            try:
                os.unlink(os.path.join(part.log.directory, name))
            except FileNotFoundError:
                pass

    def forget(self, key: tuple, flush: bool = True) -> None:
        """The partition stopped being led here (or is gone): drop its
        share-partitions; their state is on disk, and a new leadership here
        (or of another replica on this node) reads it again."""
        for k in [k for k in self.shares if (k[1], k[2]) == key]:
            if flush:
                self.shares[k].flush()
            del self.shares[k]


def _uuid(topic_id) -> uuid.UUID:
    """A partition's topic id (a string from the controller's assign) as
    ShareFetch carries it and the snapshot key is written."""
    return topic_id if isinstance(topic_id, uuid.UUID) else uuid.UUID(str(topic_id))


def share_key(key: tuple) -> tuple:
    """The purgatory key share fetches of a partition wait under for
    released records (appends wake them through the partition's own key)."""
    return ("share", *key)
