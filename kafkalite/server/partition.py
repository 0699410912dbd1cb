"""A partition this broker hosts: its log, its leadership, its high watermark.

The replica manager (replica_manager.py) keeps one ``Partition`` per
topic-partition its worker hosts, and the group coordinator keeps one per
``__consumer_offsets`` partition. What a Partition knows:

- ``leader_epoch``: the epoch of the current leadership; the controller
  bumps it at every change of leader. A request naming an older epoch is
  FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
- ``replicas`` (leader first) and ``isr``, the in-sync replicas, as broker
  ids. Until replication lands every partition has one copy: both are
  ``[this broker]``.
- The high watermark: the offset below which every in-sync replica holds
  the log. It is what makes a record committed: consumers read below it
  and acks=all producers are answered when it passes their records. Only
  this class moves it (``maybe_increment_high_watermark``, from the log end
  offsets of the ISR); the log keeps it so that it is checkpointed.
- The last stable offset (LSO): the high watermark held back by the first
  open transaction (the log derives it from its producer state).
  read_committed consumers read below it.

Who may call: the owner of the partition (a worker's replica manager, or
the supervisor's group coordinator), on its event-loop thread.
"""
from __future__ import annotations

from kafkalite import errors
from kafkalite.storage import AppendOrigin
from kafkalite.storage.log import (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP,
                                   FetchDataInfo, LogAppendInfo, PartitionLog)


class Partition:
    __slots__ = ("topic", "index", "topic_id", "log", "broker_id", "leader_epoch", "replicas",
                 "isr", "_replica_ends")

    def __init__(self, topic: str, index: int, topic_id, plog: PartitionLog, broker_id: int):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = plog
        self.broker_id = broker_id
        self.leader_epoch = -1
        self.replicas: list[int] = [broker_id]
        self.isr: list[int] = [broker_id]
        # log end offsets of the other replicas, as their fetches report them
        self._replica_ends: dict[int, int] = {}

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
                    isr: list[int] | None = None) -> None:
        """Lead at ``leader_epoch``; batches appended from now on carry it."""
        self.leader_epoch = leader_epoch
        self.replicas = list(replicas) if replicas else [self.broker_id]
        self.isr = list(isr) if isr else [self.broker_id]
        if leader_epoch > self.log.leader_epoch:
            self.log.leader_epoch = leader_epoch
        self.maybe_increment_high_watermark()

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

    def update_follower_end(self, broker_id: int, log_end_offset: int) -> bool:
        """A follower's fetch told its log end offset; returns whether the
        high watermark moved as a result."""
        if broker_id not in self.replicas:
            raise errors.NotLeaderOrFollowerError(
                f"broker {broker_id} is not a replica of {self.name} ({self.replicas})")
        self._replica_ends[broker_id] = min(log_end_offset, self.log.log_end_offset)
        return self.maybe_increment_high_watermark()

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark up to the smallest log end offset in the
        ISR; returns whether it moved. It never moves down here (only a
        truncation of the log lowers it)."""
        end = self.log.log_end_offset
        for broker in self.isr:
            if broker != self.broker_id:
                end = min(end, self._replica_ends.get(broker, 0))
        if end > self.log.high_watermark:
            self.log.high_watermark = end
            return True
        return False

    # ---- reads -------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, *, min_one_message: bool,
             read_committed: bool = False) -> FetchDataInfo:
        """What a consumer may read from ``offset``: committed batches only
        (below the high watermark); read_committed, below the LSO and with
        the aborted transactions the batches may belong to. A read that
        meets a damaged batch has the log repair it at once and reads again
        (past the damage, which becomes a gap)."""
        try:
            return self._read(offset, max_bytes, min_one_message, read_committed)
        except errors.KafkaStorageError:
            if not self.log.repair_damaged():
                raise
            return self._read(offset, max_bytes, min_one_message, read_committed)

    def _read(self, offset: int, max_bytes: int, min_one_message: bool,
              read_committed: bool) -> FetchDataInfo:
        if read_committed:
            return self.log.read(offset, max_bytes, max_offset=self.log.last_stable_offset,
                                 min_one_message=min_one_message, collect_aborted=True)
        return self.log.read(offset, max_bytes, max_offset=self.log.high_watermark,
                             min_one_message=min_one_message)

    def offset_for_timestamp(self, timestamp: int,
                             read_committed: bool = False) -> tuple[int, int] | None:
        """ListOffsets: (offset, timestamp) for a timestamp or one of Kafka's
        special values (latest -- the LSO for read_committed --, earliest,
        max timestamp), None when none."""
        if timestamp == LATEST_TIMESTAMP:
            if read_committed:
                return self.log.last_stable_offset, -1
            return self.log.high_watermark, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return self.log.log_start_offset, -1
        if timestamp == MAX_TIMESTAMP or timestamp >= 0:
            return self.log.offset_for_timestamp(timestamp)
        raise errors.InvalidRequestError(f"unsupported ListOffsets timestamp {timestamp}")

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
        return (f"Partition({self.name}, epoch={self.leader_epoch}, hw={self.log.high_watermark}, "
                f"leo={self.log.log_end_offset})")
