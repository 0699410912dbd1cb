"""The group table every part of the group coordinator shares: one
``Group`` per group id, whatever its protocol, and the writing of its
KIP-848 membership to ``__consumer_offsets``.

What it holds:

- ``Group`` and ``Member``: a group's classic membership and generation
  (classic_group.py runs it), its committed offsets (offsets.py) and, for a
  consumer group (KIP-848), its ``ConsumerGroup`` (consumer_group.py; a
  group id names one group of either protocol, migration.py converts);
- the classic group states (Kafka's ``ClassicGroupState``) and the codes
  every part answers with;
- ``ConsumerGroupRecords``: writes what changed in a consumer group since
  its last write (consumer_group_log.py renders the records), the one way
  any part persists one, and detaches a consumer group from its ``Group``.

The table itself is a plain dict (group id -> Group) that coordinator.py
makes and hands to each manager: they change it only through the group
objects and these methods, never through another manager's state.

Which process runs it: the supervisor, on its event loop (single thread).

What it may import: the rest of group/ below the managers
(consumer_group.py, consumer_group_log.py, group_log.py), network/,
kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import decode_subscription
from kafkalite.protocol.errors import ProtocolError
from kafkalite.server.config import MIGRATION_POLICIES
from kafkalite.server.group import consumer_group_log
from kafkalite.server.group.consumer_group import ConsumerGroup, ConsumerGroupCoordinator
from kafkalite.server.group.group_log import GroupMetadataLog
from kafkalite.server.network.requests import RequestContext

log = logging.getLogger("kafkalite.coordinator")

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
CONSUMER_PROTOCOL = "consumer"
# group.consumer.migration.policy: which online conversions between a
# classic group and a consumer group are allowed (Kafka 4's default: both)
MIGRATION_DISABLED, MIGRATION_UPGRADE, MIGRATION_DOWNGRADE, MIGRATION_BIDIRECTIONAL = \
    MIGRATION_POLICIES
NONE = 0
# an empty group id: refused by the group APIs but those Kafka keeps it for
# (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups: its group
# coordinator's "backwards compatibility", a group named "" is a group)
INVALID_GROUP_ID = errors.InvalidGroupIdError.code


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list                          # [(name, metadata bytes)] in preference order
    assignment: bytes = b""
    join: RequestContext | None = None       # a JoinGroup awaiting its answer
    sync: RequestContext | None = None       # a SyncGroup awaiting its answer
    last_heartbeat: float = 0.0
    # taken back from __consumer_offsets at this coordinator's start, and
    # has not joined or synced since, nor sent a heartbeat past the one the
    # dead coordinator may have left in flight (classic_group.py,
    # _replace_abandoned)
    restored: bool = False
    heartbeats_since_restored: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict = field(default_factory=dict)          # member id -> Member, in join order
    static: dict = field(default_factory=dict)           # group instance id -> member id
    pending: dict = field(default_factory=dict)          # member id -> expiry (MEMBER_ID_REQUIRED)
    offsets: dict = field(default_factory=dict)          # (topic, partition) -> OffsetAndMetadata
    rebalance_deadline: float = 0.0
    initial_delay_until: float = 0.0                     # group.initial.rebalance.delay.ms
    state_timestamp: int = 0                             # ms when the state last changed
    consumer: ConsumerGroup | None = None                # a KIP-848 group's membership

    @property
    def in_use(self) -> bool:
        """Has members (of either protocol) or is rebalancing."""
        return bool(self.members or self.state != EMPTY
                    or (self.consumer is not None and self.consumer.members))

    def set_state(self, state: str) -> None:
        self.state = state
        self.state_timestamp = now_ms()

    def subscribed_topics(self) -> set[str]:
        """Topics the members subscribe to (consumer protocol groups only)."""
        topics: set[str] = set()
        if self.protocol_type != CONSUMER_PROTOCOL:
            return topics
        for m in self.members.values():
            meta = m.metadata(self.protocol_name) or (m.protocols[0][1] if m.protocols else b"")
            try:
                topics.update(decode_subscription(meta)[1]["topics"])
            except ProtocolError:
                pass
        return topics


class ConsumerGroupRecords:
    """Writes the consumer groups of ``groups`` to ``store``: each write
    appends the records that changed since the group's last write (a diff
    of consumer_group_log snapshots), so every path that changes a
    consumer group -- heartbeats, its classic members' requests, timeouts,
    migrations, deletion -- persists it the same way."""

    def __init__(self, groups: dict[str, Group], store: GroupMetadataLog,
                 consumer: ConsumerGroupCoordinator, clock):
        self.groups = groups
        self.store = store
        self.consumer = consumer
        self._clock = clock                       # wall-clock ms, the records' timestamps
        # group id -> the consumer group records last written (consumer_group_log)
        self._consumer_records: dict[str, dict] = {}
        self._consumer_rendering = consumer_group_log.GroupRecords()

    def drop(self, g: Group) -> None:
        """``g`` is a consumer group no longer (deleted, expired, or classic
        now): forget its ConsumerGroup and write its records' tombstones."""
        if g.consumer is not None:
            self.consumer.groups.pop(g.group_id, None)
            g.consumer = None
            self.persist(g.group_id)

    def persist(self, gid: str) -> int:
        """Write what changed in consumer group ``gid`` since its last write
        (tombstones if it is gone or classic now); the error code of a
        failed write (the next write retries the difference)."""
        before = self._consumer_records.get(gid, {})
        after = self._consumer_rendering.snapshot(self.consumer.groups.get(gid))
        entries = consumer_group_log.diff(before, after)
        if not entries:
            return NONE
        try:
            self.store.write_records(gid, entries, self._clock())
        except KafkaError as exc:
            log.warning("group %s: its state was not written: %s", gid, exc)
            return exc.code
        if after:
            self._consumer_records[gid] = after
        else:
            self._consumer_records.pop(gid, None)
            self._consumer_rendering.forget(gid)
        return NONE

    def load(self, stored_groups: dict) -> None:
        """The consumer groups replayed from ``__consumer_offsets`` (after
        the classic groups and offsets, whose Group they take over)."""
        for gid, stored in stored_groups.items():
            cg = consumer_group_log.restore(gid, stored)
            if cg is None:
                continue
            g = self.groups.get(gid) or self.groups.setdefault(gid, Group(gid))
            g.members.clear()
            g.static.clear()
            g.protocol_type, g.protocol_name, g.leader_id = CONSUMER_PROTOCOL, None, None
            g.state = EMPTY
            cg.subscription_metadata = self.consumer.subscription_metadata(cg)[0]
            g.consumer = self.consumer.groups[gid] = cg
            self._consumer_records[gid] = stored["records"]
