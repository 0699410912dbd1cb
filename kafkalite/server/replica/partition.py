"""A partition this broker hosts: its log, its leadership, its high watermark.

The replica manager (replica_manager.py) keeps one ``Partition`` per
topic-partition its worker hosts, and the group coordinator keeps one per
``__consumer_offsets`` partition. What a Partition knows:

- ``leader_epoch``: the epoch of the current leadership; the controller
  bumps it at every change of leader. A request naming an older epoch is
  FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
- ``replicas`` and ``isr``, the in-sync replicas, as broker ids, and who
  leads (``leader_id``): this broker (``is_leader``) or another, which this
  one follows (its replica fetcher, replica_fetcher.py, appends what it
  fetches with ``log.append_as_follower``). The controller decides all
  three; ``partition_epoch`` is the version of that decision, which an ISR
  proposal names.
- As leader, each follower's log end offset (from the offsets its fetches
  ask for) and when it was last caught up to the log end: a follower not
  caught up for ``replica.lag.time.max.ms`` is proposed out of the ISR, one
  that reached the high watermark in this leader's epoch is proposed back
  in (``isr_change``). While a proposal is pending, the high watermark
  waits for its members too (Kafka's "maximal ISR"), so a shrink never
  commits what only the leaving replica lacked and an expansion never
  counts a replica the controller has not accepted. Also each follower's
  log start offset (its fetches carry it): the low watermark, the
  smallest log start offset in the ISR, is what a DeleteRecords answer
  waits for (``low_watermark``).
- The high watermark: the offset below which every in-sync replica holds
  the log. It is what makes a record committed: consumers read below it
  and acks=all producers are answered when it passes their records. Only
  this class moves it on a leader (``maybe_increment_high_watermark``, from
  the log end offsets of the ISR); a follower takes the leader's, capped at
  its own log end. The log keeps it so that it is checkpointed.
- The last stable offset (LSO): the high watermark held back by the first
  open transaction (the log derives it from its producer state).
  read_committed consumers read below it.

Who may call: the owner of the partition (a worker's replica manager, or
the supervisor's group coordinator), on its event-loop thread.
"""
from __future__ import annotations

import time

from kafkalite import errors
from kafkalite._ext.log_state import PartitionState
from kafkalite.storage import AppendOrigin
from kafkalite.storage.log import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
                                   FetchDataInfo, LogAppendInfo, PartitionLog)

# ListOffsets' specs for the ends of tiered storage: the first offset still
# in local segments (KIP-405), the last one copied to remote storage
# (KIP-1005) and the first one not copied yet (KIP-1023). For a topic that
# is not tiered they are answered as Kafka answers them: the local log
# starts at the log start offset, and nothing is tiered or pending upload
# (offset -1).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6


class Partition(PartitionState):
    # topic, index, log, broker_id, leader_id, leader_epoch, replicas, isr
    # and pending_isr are PartitionState's C fields (ext/log_state.pyx)
    __slots__ = ("topic_id", "partition_epoch", "pending_since",
                 "_replica_ends", "_replica_starts", "_caught_up", "_epoch_start",
                 "under_min_isr")

    def __init__(self, topic: str, index: int, topic_id, plog: PartitionLog, broker_id: int):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = plog
        self.broker_id = broker_id
        self.leader_epoch = -1
        self.leader_id = broker_id
        self.partition_epoch = -1
        self.replicas: list[int] = [broker_id]
        self.isr: list[int] = [broker_id]
        # an ISR proposed to the controller and not answered yet, and when
        self.pending_isr: list[int] | None = None
        self.pending_since = 0.0
        # as leader: log end offsets of the other replicas, as their fetches
        # report them, and when each was last caught up to the log end
        self._replica_ends: dict[int, int] = {}
        self._replica_starts: dict[int, int] = {}   # their log start offsets, likewise
        self._caught_up: dict[int, float] = {}
        self._epoch_start = 0           # the log end when this leadership began
        # whether the ISR is smaller than min.insync.replicas: a slot, not a
        # property, since the C Produce path asks it of every acks=all
        # request (a property is a Python call there); set again wherever
        # the ISR (make_leader, make_follower) or the log's config
        # (config_changed) changes
        self.under_min_isr = False
        self.config_changed()

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def followers(self) -> list[int]:
        return [b for b in self.replicas if b != self.broker_id] if self.is_leader else []

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    # ---- leadership --------------------------------------------------------------------------

    def make_leader(self, leader_epoch: int, replicas: list[int] | None = None,
                    isr: list[int] | None = None, partition_epoch: int = 0,
                    now: float | None = None) -> bool:
        """Lead at ``leader_epoch``; batches appended from now on carry it.
        Returns whether this is a new leadership (not an ISR update)."""
        new = not self.is_leader or leader_epoch != self.leader_epoch
        self.leader_epoch = leader_epoch
        self.leader_id = self.broker_id
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas) if replicas else [self.broker_id]
        self.isr = list(isr) if isr else [self.broker_id]
        self.pending_isr = None
        self.config_changed()
        if new:
            # Followers start unknown (their ends count as 0 until they
            # fetch) and, as Kafka does, caught up now: a follower is given
            # replica.lag.time.max.ms to show it is alive before it is
            # proposed out.
            now = time.monotonic() if now is None else now
            self._replica_ends = {}
            self._replica_starts = {}
            self._caught_up = {b: now for b in self.replicas if b != self.broker_id}
            self._epoch_start = self.log.log_end_offset
        # The epoch starts at the log end now (Kafka's makeLeader assigns it
        # here too): the leader-epoch checkpoint is written -- a file and a
        # directory fsync, tens of ms -- on becoming leader, not by the
        # first append, which would stall the event loop and every request
        # behind it once per partition. A no-op when assign() did it on its
        # thread pool.
        self.log.leader_epoch_cache.assign(leader_epoch, self.log.log_end_offset)
        if leader_epoch > self.log.leader_epoch:
            self.log.leader_epoch = leader_epoch
        if self.log.remote is not None:
            # KIP-405: the leader copies and writes the shared remote log metadata
            self.log.remote.lead(leader_epoch, self.topic_id)
        self.maybe_increment_high_watermark()
        return new

    def make_follower(self, leader_epoch: int, leader: int, replicas: list[int],
                      isr: list[int], partition_epoch: int = 0) -> bool:
        """Follow ``leader`` at ``leader_epoch``; returns whether that is a
        change (the replica fetcher must then truncate and start again)."""
        changed = self.is_leader or leader != self.leader_id or leader_epoch != self.leader_epoch
        self.leader_epoch = leader_epoch
        self.leader_id = leader
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.pending_isr = None
        self.config_changed()
        self._replica_ends = {}
        self._replica_starts = {}
        self._caught_up = {}
        if self.log.remote is not None:
            # a follower reads the remote log metadata its leader writes
            self.log.remote.follow(self.topic_id)
        return changed

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """The check every data request naming the leader epoch it knows gets."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise errors.FencedLeaderEpochError(
                f"{self.name}: leader epoch {current_leader_epoch} is older than "
                f"{self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise errors.UnknownLeaderEpochError(
                f"{self.name}: leader epoch {current_leader_epoch} is newer than "
                f"{self.leader_epoch}")

    # ---- writes ------------------------------------------------------------------------------

    def append_as_leader(self, records, origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Append batches as the leader (the log checks a client's against its
        producer state; transaction markers come from the coordinator, the
        only origin that may write control batches); the high watermark
        follows when the ISR allows (at once while the leader is the only
        replica)."""
        info = self.log.append(records, origin=origin,
                               allow_control=origin is AppendOrigin.COORDINATOR)
        self.maybe_increment_high_watermark()
        return info

    def update_follower_end(self, broker_id: int, log_end_offset: int,
                            now: float | None = None, log_start_offset: int = -1) -> bool:
        """A follower's fetch asked from ``log_end_offset``, its log end, and
        said its log starts at ``log_start_offset``; returns whether the
        high watermark moved as a result."""
        if broker_id not in self.replicas or broker_id == self.broker_id:
            raise errors.NotLeaderOrFollowerError(
                f"broker {broker_id} is not a follower of {self.name} ({self.replicas})")
        self._replica_starts[broker_id] = log_start_offset
        end = self.log.log_end_offset
        self._replica_ends[broker_id] = min(log_end_offset, end)
        if log_end_offset >= end:
            self._caught_up[broker_id] = time.monotonic() if now is None else now
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up to the smallest log end offset in the
        ISR (and a pending ISR's members); returns whether it moved. It
        never moves down here (only a truncation of the log lowers it)."""
        if self.leader_id != self.broker_id:    # is_leader, without its call (every append)
            return False
        end = self.log.log_end_offset
        members = self.isr if self.pending_isr is None else set(self.isr) | set(self.pending_isr)
        for broker in members:
            if broker != self.broker_id:
                end = min(end, self._replica_ends.get(broker, 0))
        return self.log.raise_high_watermark(end)

    def delete_records(self, offset: int) -> tuple[int, int]:
        """DeleteRecords as leader: move the log start offset to ``offset``
        (-1: the high watermark); returns (that offset, the low watermark
        now), the answer being due once the latter reaches the former. As Kafka:
        POLICY_VIOLATION for a topic without ``cleanup.policy=delete``,
        OFFSET_OUT_OF_RANGE for an offset above the high watermark."""
        if not self.log.config.delete:
            raise errors.PolicyViolationError(
                f"records of {self.name} cannot be deleted: its cleanup.policy is not delete")
        if offset == -1:
            offset = self.log.high_watermark
        self.log.delete_records(offset)
        return offset, self.low_watermark

    @property
    def low_watermark(self) -> int:
        """As leader: the smallest log start offset of the in-sync replicas
        (-1 while a follower's is not known yet), as Kafka's
        lowWatermarkIfLeader. Kafka counts every live replica; the ISR is
        what a leader here knows to be live and fetching."""
        low = self.log.log_start_offset
        for broker in self.isr:
            if broker != self.broker_id:
                low = min(low, self._replica_starts.get(broker, -1))
        return low

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """As follower: the leader's high watermark, capped at our log end."""
        hw = min(leader_high_watermark, self.log.log_end_offset)
        if hw > self.log.high_watermark:
            self.log.high_watermark = hw

    def isr_change(self, now: float, lag_max_ms: int, fetched_by: int | None = None
                   ) -> list[int] | None:
        """As leader with no proposal pending: the ISR to propose, or None.
        Periodically (``fetched_by`` None): without the followers not
        caught up to the log end for ``lag_max_ms``. On a fetch by a
        follower outside the ISR: with it, if its log end reached the high
        watermark and this leadership's start (so it holds everything this
        leader committed), as Kafka decides both."""
        if not self.is_leader or self.pending_isr is not None or len(self.replicas) < 2:
            return None
        if fetched_by is None:
            isr = [b for b in self.isr if b == self.broker_id
                   or (now - self._caught_up.get(b, 0.0)) * 1000.0 <= lag_max_ms]
            return None if len(isr) == len(self.isr) else isr
        end = self._replica_ends.get(fetched_by, -1)
        if (fetched_by in self.isr or end < self.log.high_watermark
                or end < self._epoch_start):
            return None
        return self.isr + [fetched_by]

    def config_changed(self, config=None) -> None:
        """``under_min_isr`` again, after a change of the ISR or of the
        log's config (min.insync.replicas; ``config``: the log's new one,
        set here so that the two never part)."""
        if config is not None:
            self.log.config = config
        self.under_min_isr = len(self.isr) < self.log.config.min_insync_replicas

    # ---- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, min_one_message: bool,
             read_committed: bool = False) -> FetchDataInfo:
        """What a consumer may read from ``offset``: committed batches only
        (below the high watermark); read_committed, below the LSO and with
        the aborted transactions the batches may belong to. A read that
        starts at a batch damaged on disk fails with CORRUPT_MESSAGE (one
        that meets it further on stops before it): acknowledged records are
        never skipped in silence."""
        if read_committed:
            return self.log.read(offset, max_bytes, below_lso=True,
                                 min_one_message=min_one_message, collect_aborted=True)
        return self.log.read(offset, max_bytes, max_offset=self.log.high_watermark,
                             min_one_message=min_one_message)

    def offset_for_timestamp(self, timestamp: int,
                             read_committed: bool = False) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for a timestamp or one of Kafka's
        special values (latest -- the LSO for read_committed --, earliest,
        max timestamp, earliest local, latest tiered, earliest pending
        upload), None when none; an offset of -1: none (nothing is tiered)."""
        if timestamp == LATEST_TIMESTAMP:
            if read_committed:
                return self.log.last_stable_offset, -1
            return self.log.high_watermark, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log.log_start_offset, -1
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return self.log.local_log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            return self.log.highest_remote_offset, -1
        if timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
            return self._earliest_pending_upload(), -1
        if timestamp == MAX_TIMESTAMP or timestamp >= 0:
            return self.log.offset_for_timestamp(timestamp)
        raise errors.InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")

    def listed_offset_epoch(self, timestamp: int, offset: int) -> int:
        """The leader epoch a ListOffsets answer gives with ``offset``, found
        for ``timestamp``, as Kafka's UnifiedLog does: the current leader
        epoch for the latest offset; for any other (the earliest, the
        earliest local, the latest tiered, a timestamp's), the epoch the
        offset was written in, which a consumer seeking there validates
        against (KIP-320), and -1 with no offset."""
        if offset < 0:
            return -1
        if timestamp == LATEST_TIMESTAMP:
            return self.leader_epoch
        return self.log.epoch_for_offset(offset)

    def _earliest_pending_upload(self) -> int:
        """KIP-1023's earliest-pending-upload, by Kafka's rules
        (UnifiedLog.fetchEarliestPendingUploadOffset): the offset after the
        last one copied (not below the log start); with nothing copied yet,
        the log start offset, unless segments below the local log start are
        remote already and this replica's metadata does not know them (-1);
        -1 for a topic that is not tiered."""
        log = self.log
        if log.remote is None:
            return -1
        highest = log.highest_remote_offset
        if highest == -1:
            return log.log_start_offset if log.local_log_start_offset == log.log_start_offset \
                else -1
        return max(highest + 1, log.log_start_offset)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= leader_epoch, its end offset)."""
        return self.log.end_offset_for_epoch(leader_epoch)

    def active_producers(self) -> list[dict]:
        """DescribeProducers: the producers with state in this partition."""
        state = self.log.producer_state
        out = []
        for pid, entry in sorted(state.producers.items()):
            out.append({"producer_id": pid, "producer_epoch": entry.epoch,
                        "last_sequence": entry.last_seq, "last_timestamp": entry.last_timestamp,
                        "coordinator_epoch": entry.coordinator_epoch,
                        "current_txn_start_offset": state.ongoing.get(pid, -1)})
        return out

    def __repr__(self) -> str:
        return (f"Partition({self.name}, leader={self.leader_id}, epoch={self.leader_epoch}, "
                f"isr={self.isr}, hw={self.log.high_watermark}, leo={self.log.log_end_offset})")
