from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import decode_subscription
from kafkalite.protocol.errors import ProtocolError
from kafkalite.server.group import consumer_group_log
from kafkalite.server.group.consumer_group import ConsumerGroup
from kafkalite.server.network.requests import RequestContext

log = logging.getLogger("kafkalite.coordinator")

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
CONSUMER_PROTOCOL = "consumer"
NONE = 0
# an empty group id: refused by the group APIs but those Kafka keeps it for
# (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups: its group
# coordinator's "backwards compatibility", a group named "" is a group)
INVALID_GROUP_ID = errors.InvalidGroupIdError.code



def _now_ms() -> int:
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
        self.state_timestamp = _now_ms()

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



class GroupsMixin:
    def _drop_consumer_group(self, g: Group) -> None:
        if g.consumer is not None:
            self.consumer.groups.pop(g.group_id, None)
            g.consumer = None
            self._persist_consumer(g.group_id)

    def _persist_consumer(self, gid: str) -> int:
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

