"""The group coordinator: consumer group membership and committed offsets.

Kafka's classic group protocol, served by the supervisor for every group:

- JoinGroup / SyncGroup / Heartbeat / LeaveGroup with member ids and
  generations. A rebalance (state PreparingRebalance) starts when a member
  joins, leaves, misses its session timeout, changes its subscription, or
  when a topic its group subscribes to gains partitions; it completes when
  every known member has rejoined (or the rebalance timeout, the members'
  ``max.poll.interval.ms``, passes): a new generation, a protocol every
  member supports, and the leader's member list. The leader computes the
  assignment (client side, kafkalite/client/assignors.py) and hands it over
  in SyncGroup; the group is then Stable.
- Static membership (``group.instance.id``, KIP-345): a member that comes
  back under the same instance id while its session is alive takes its old
  place (and assignment) without a rebalance; the old incarnation is fenced.
- New dynamic members are first answered MEMBER_ID_REQUIRED (KIP-394).
- Cooperative rebalancing needs nothing here: members keep what they own
  and revoke only what the new assignment takes away (client side).
- OffsetCommit / OffsetFetch / OffsetDelete, DescribeGroups, ListGroups,
  DeleteGroups, FindCoordinator.
- Groups of the next-generation protocol (KIP-848, ``group.protocol=consumer``)
  live in consumer_group.py: this module routes ConsumerGroupHeartbeat and
  ConsumerGroupDescribe there and keeps such a group's committed offsets
  here like any group's (``Group.consumer`` holds its membership). An
  empty group changes type on the first member of the other kind. A group
  in use migrates online as Kafka 4's does (``group.consumer.migration.policy``):
  a ConsumerGroupHeartbeat joining a Stable classic group turns it into a
  consumer group whose members are the classic ones, with their
  assignments (``_upgrade``); classic JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup to a consumer group go to its classic members there; when its
  last consumer-protocol member leaves, the rest become a classic group
  again and rebalance (``_downgrade``). Where the policy forbids it, a
  classic JoinGroup to a consumer group gets INCONSISTENT_GROUP_PROTOCOL
  and a ConsumerGroupHeartbeat to a classic group in use (or rebalancing)
  GROUP_ID_NOT_FOUND.
- Share groups (KIP-932) live in share_group.py: ShareGroupHeartbeat,
  ShareGroupDescribe and Describe/AlterShareGroupOffsets go there;
  ListGroups lists them (type "share") and DeleteGroups deletes empty
  ones. They have no committed offsets here: their records' state (and
  start offsets) is kept by the partition leaders (share_partition.py).
- TxnOffsetCommit: offsets committed inside a producer's transaction
  (checked with the transaction coordinator through ``verify_txn``; v5,
  transactions v2, adds the group's offsets to the transaction there) are
  written as part of that transaction and stay pending, invisible to
  OffsetFetch, until ``complete_transaction`` -- the transaction
  coordinator's marker for this partition -- commits or discards them.
  While offsets are pending for a partition, OffsetFetch with
  ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for it (KIP-447).

State is kept in memory and written to ``__consumer_offsets`` (group_log.py)
at each new generation and each commit; after a restart the coordinator
replays it and members carry on in their generation. Offsets of an empty
group expire ``offsets_retention_minutes`` after the group became empty
(after their commit, for groups that never had members).

Who may call: the supervisor (supervisor.py), on its single thread: it
registers ``handlers()``, calls ``tick()`` from its poll loop and
``on_partitions_changed()`` after CreatePartitions. JoinGroup and SyncGroup
answers that must wait are DEFERRED: the member keeps the request's
context and the answer goes out through ``ctx.respond`` when the group
gets there.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey, decode_assignment, decode_subscription
from kafkalite.protocol import encode_assignment, encode_subscription
from kafkalite.protocol.enums import CoordinatorType
from kafkalite.protocol.errors import ProtocolError
from kafkalite.server.group import consumer_group_log
from kafkalite.server.config import MIGRATION_POLICIES
from kafkalite.server.group.consumer_group import (ClassicMetadata, ConsumerGroup,
                                             ConsumerGroupCoordinator, ConsumerGroupMember)
from kafkalite.server.share.share_group import ShareGroupCoordinator
from kafkalite.server.share.share_state_log import parse_coordinator_key
from kafkalite.server.group.group_log import GroupMetadataLog, OffsetAndMetadata
from kafkalite.server.controller.metadata import OFFSETS_TOPIC
from kafkalite.server.network.requests import DEFERRED, RequestContext

log = logging.getLogger("kafkalite.coordinator")
# Transaction verification answers a TxnOffsetCommit turns into
# COORDINATOR_LOAD_IN_PROGRESS (see _txn_offset_commit).
_VERIFY_RETRIABLE = frozenset({errors.ConcurrentTransactionsError.code,
                               errors.CoordinatorLoadInProgressError.code,
                               errors.CoordinatorNotAvailableError.code,
                               errors.NotCoordinatorError.code, errors.RequestTimedOutError.code,
                               errors.NetworkError.code})

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"
CONSUMER_PROTOCOL = "consumer"
CLASSIC_TYPE, CONSUMER_TYPE, SHARE_TYPE = "classic", "consumer", "share"   # ListGroups v5 types
# group.consumer.migration.policy: which online conversions between a
# classic group and a consumer group are allowed (Kafka 4's default: both)
MIGRATION_DISABLED, MIGRATION_UPGRADE, MIGRATION_DOWNGRADE, MIGRATION_BIDIRECTIONAL = \
    MIGRATION_POLICIES
OFFSET_METADATA_MAX_BYTES = 4096
NONE = 0
# an empty group id: refused by the group APIs but those Kafka keeps it for
# (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups: its group
# coordinator's "backwards compatibility", a group named "" is a group)
INVALID_GROUP_ID = errors.InvalidGroupIdError.code
NO_NODE = {"node_id": -1, "host": "", "port": -1}   # a FindCoordinator key not answered
SHARE_COORDINATOR_KEYS_FROM = 6         # FindCoordinator's first version with key type 2


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


class GroupCoordinator:
    def __init__(self, data_dir: str, *, partition_count, coordinator_node,
                 offsets_partitions: int = 16, min_session_timeout_ms: int = 1_000,
                 max_session_timeout_ms: int = 1_800_000, initial_rebalance_delay_ms: int = 0,
                 offsets_retention_minutes: int = 10_080, clock=_now_ms, topics=dict,
                 consumer_session_timeout_ms: int = 45_000,
                 consumer_heartbeat_interval_ms: int = 5_000,
                 share_session_timeout_ms: int = 45_000,
                 share_heartbeat_interval_ms: int = 5_000, internal_mirror=None,
                 migration_policy: str = MIGRATION_BIDIRECTIONAL):
        self.partition_count = partition_count    # topic -> partition count, or None if unknown
        # (Listener, Kafka listener name, key) -> {"node_id", "host", "port"}, or
        # None while no node can be named (controller.coordinator_node)
        self.coordinator_node = coordinator_node
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.offsets_retention_ms = offsets_retention_minutes * 60_000
        self.migration_policy = migration_policy
        self._clock = clock                       # wall-clock ms: commit times and expiry
        # internal_mirror: PostgreSQL's copy of __consumer_offsets in a cluster
        self.store = GroupMetadataLog(data_dir, offsets_partitions, internal_mirror)
        self.groups: dict[str, Group] = {}
        # group id -> the consumer group records last written (consumer_group_log)
        self._consumer_records: dict[str, dict] = {}
        self._consumer_rendering = consumer_group_log.GroupRecords()
        # producer id -> group -> {(topic, partition): OffsetAndMetadata} awaiting its marker
        self.pending_txn_offsets: dict[int, dict[str, dict]] = {}
        # (transactional id, producer id, epoch, group) -> error code; set by the supervisor
        self.verify_txn = lambda tid, pid, epoch, group, add=False: \
            errors.CoordinatorNotAvailableError.code
        self._next_expiry_check = 0.0
        # topics: () -> {name: TopicMetadata}, for KIP-848's topic ids
        self.consumer = ConsumerGroupCoordinator(
            topics=topics, group_of=self._consumer_group,
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms)
        self.consumer.only_classic_left = self._downgrade
        # group id -> None: the supervisor has the partition leaders drop
        # the deleted share group's state
        self.share_group_deleted = lambda gid: None
        self.share = ShareGroupCoordinator(
            topics=topics, taken=lambda gid: gid in self.groups,
            session_timeout_ms=share_session_timeout_ms,
            heartbeat_interval_ms=share_heartbeat_interval_ms)
        self._load()

    def handlers(self) -> dict:
        return {
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self._join_group,
            ApiKey.SYNC_GROUP: self._sync_group,
            ApiKey.HEARTBEAT: self._heartbeat,
            ApiKey.LEAVE_GROUP: self._leave_group,
            ApiKey.OFFSET_COMMIT: self._offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self._txn_offset_commit,
            ApiKey.OFFSET_FETCH: self._offset_fetch,
            ApiKey.OFFSET_DELETE: self._offset_delete,
            ApiKey.DESCRIBE_GROUPS: self._describe_groups,
            ApiKey.LIST_GROUPS: self._list_groups,
            ApiKey.DELETE_GROUPS: self._delete_groups,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._consumer_group_describe,
            ApiKey.SHARE_GROUP_HEARTBEAT: self.share.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.share.describe,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.share.describe_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.share.alter_offsets,
        }

    def _consumer_group(self, gid: str, create: bool) -> ConsumerGroup | None:
        """The KIP-848 group ``gid`` (made, or converted from an empty classic
        group keeping its offsets, if ``create``); None if there is none."""
        g = self.groups.get(gid)
        if g is not None and g.consumer is not None:
            return g.consumer
        if gid in self.share.groups:
            raise errors.GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
        if g is not None and g.in_use:
            if create and self._may_upgrade(g):
                return self._upgrade(g)
            raise errors.GroupIdNotFoundError(f"Group {gid} is not a consumer group.")
        if not create:
            return None
        if g is None:
            g = self.groups[gid] = Group(gid)
        g.consumer = self.consumer.groups[gid] = ConsumerGroup(gid)
        g.protocol_type, g.protocol_name, g.leader_id = CONSUMER_PROTOCOL, None, None
        g.set_state(EMPTY)
        return g.consumer

    # ---- online migration between the protocols (KIP-848) ------------------------------------

    def _may_upgrade(self, g: Group) -> bool:
        """A classic group in use may become a consumer group when the
        policy allows it, its members are consumers, and it is Stable (each
        member's assignment known)."""
        if self.migration_policy not in (MIGRATION_UPGRADE, MIGRATION_BIDIRECTIONAL):
            return False
        if g.protocol_type != CONSUMER_PROTOCOL or g.state != STABLE:
            log.info("group %s: not upgraded to a consumer group: it is %s with protocol type "
                     "%s", g.group_id, g.state, g.protocol_type)
            return False
        return True

    def _upgrade(self, g: Group) -> ConsumerGroup:
        """Turn the Stable classic group ``g`` into a consumer group whose
        members are its classic members, each keeping its assignment at a
        member epoch of the group's generation: they carry on fetching and
        heartbeating, and rejoin (REBALANCE_IN_PROGRESS) once the joining
        consumer-protocol member bumps the group epoch."""
        cg = ConsumerGroup(g.group_id, group_epoch=g.generation_id,
                           assignment_epoch=g.generation_id)
        for m in g.members.values():
            try:
                subscription = decode_subscription(m.metadata(g.protocol_name))[1]
                assigned = (self.consumer._named_partitions(
                    decode_assignment(m.assignment)[1]["assigned_partitions"])
                    if m.assignment else frozenset())
            except ProtocolError:
                subscription, assigned = {"topics": []}, frozenset()
            cm = ConsumerGroupMember(m.member_id, m.group_instance_id,
                                     subscription.get("rack_id"), m.client_id, m.client_host,
                                     m.rebalance_timeout_ms,
                                     subscribed_topic_names=sorted(set(subscription["topics"])),
                                     member_epoch=g.generation_id, assigned=assigned,
                                     last_heartbeat=m.last_heartbeat,
                                     classic=ClassicMetadata(m.session_timeout_ms, m.protocols))
            cg.members[cm.member_id] = cm
            if cm.instance_id is not None:
                cg.static[cm.instance_id] = cm.member_id
            cg.target[cm.member_id] = assigned
            for tp in assigned:
                cg.owners[tp] = cm.member_id
        cg.subscription_metadata = self.consumer._subscription_metadata(cg)[0]
        g.members.clear()
        g.static.clear()
        for mid in list(g.pending):
            del g.pending[mid]
        g.consumer = self.consumer.groups[g.group_id] = cg
        g.protocol_type, g.protocol_name, g.leader_id = CONSUMER_PROTOCOL, None, None
        g.set_state(EMPTY)
        self._persist(g)          # a restart finds an empty group, not the classic members
        log.info("group %s: upgraded from a classic group (generation %d, %d member(s)) to a "
                 "consumer group", g.group_id, g.generation_id, len(cg.members))
        return cg

    def _downgrade(self, cg: ConsumerGroup) -> bool:
        """The last consumer-protocol member of ``cg`` left: its classic
        members become a classic group again (True), with their assignments,
        at the group epoch as generation -- the leave does not bump it, so
        reconciled members' heartbeats match and learn of the rebalance
        (REBALANCE_IN_PROGRESS) instead of losing their partitions."""
        if self.migration_policy not in (MIGRATION_DOWNGRADE, MIGRATION_BIDIRECTIONAL):
            return False
        common = None
        for cm in cg.members.values():
            names = {name for name, _ in cm.classic.protocols}
            common = names if common is None else common & names
        if not common:
            log.info("group %s: not downgraded: its members share no classic protocol",
                     cg.group_id)
            return False
        g = self.groups[cg.group_id]
        self._drop_consumer_group(g)
        g.protocol_type, g.generation_id = CONSUMER_PROTOCOL, cg.group_epoch
        now = time.monotonic()
        for cm in cg.members.values():
            m = Member(cm.member_id, cm.instance_id, cm.client_id, cm.client_host,
                       cm.classic.session_timeout_ms, cm.rebalance_timeout_ms, CONSUMER_PROTOCOL,
                       cm.classic.protocols, self.consumer.classic_assignment(cm.assigned),
                       last_heartbeat=now)
            g.members[m.member_id] = m
            if m.group_instance_id:
                g.static[m.group_instance_id] = m.member_id
        g.protocol_name = self._select_protocol(g)
        g.leader_id = next(iter(g.members))
        g.set_state(STABLE)
        self._persist(g)          # its consumer records become tombstones (_drop_consumer_group)
        log.info("group %s: downgraded to a classic group (%d member(s))", g.group_id,
                 len(g.members))
        self._prepare_rebalance(g, "the last consumer-protocol member left")
        return True

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

    def _consumer_group_heartbeat(self, ctx: RequestContext, body: dict):
        resp = self.consumer.heartbeat(ctx, body)
        code = self._persist_consumer(body["group_id"])
        if code != NONE and resp["error_code"] == NONE:
            # not written: the member retries, as after a lost answer
            resp = {**resp, "error_code": errors.CoordinatorNotAvailableError.code,
                    "error_message": "the group's state could not be written",
                    "assignment": None}
        return resp

    def _consumer_group_describe(self, ctx: RequestContext, body: dict):
        resp = self.consumer.describe(ctx, body)       # may compute a new target
        for gid in body["group_ids"]:
            self._persist_consumer(gid)
        return resp

    # ---- persistence ------------------------------------------------------------------------

    def _load(self) -> None:
        loaded = self.store.load()
        stored_groups, stored_offsets = loaded.groups, loaded.offsets
        self.pending_txn_offsets = loaded.pending
        now = time.monotonic()
        for gid, value in stored_groups.items():
            g = self.groups[gid] = Group(gid)
            g.generation_id = value["generation"]
            g.protocol_type = value["protocol_type"] or None
            g.protocol_name = value["protocol"]
            g.leader_id = value["leader"]
            g.state_timestamp = value["current_state_timestamp"]
            for mv in value["members"]:
                m = Member(mv["member_id"], mv["group_instance_id"], mv["client_id"],
                           mv["client_host"], mv["session_timeout"], mv["rebalance_timeout"],
                           g.protocol_type or "", [(g.protocol_name, mv["subscription"])],
                           mv["assignment"], last_heartbeat=now)
                g.members[m.member_id] = m
                if m.group_instance_id:
                    g.static[m.group_instance_id] = m.member_id
            g.state = STABLE if g.members else EMPTY
        for gid, offsets in stored_offsets.items():
            g = self.groups.get(gid) or self.groups.setdefault(gid, Group(gid))
            g.offsets.update(offsets)
        for gid, stored in loaded.consumer.items():
            cg = consumer_group_log.restore(gid, stored)
            if cg is None:
                continue
            g = self.groups.get(gid) or self.groups.setdefault(gid, Group(gid))
            g.members.clear()
            g.static.clear()
            g.protocol_type, g.protocol_name, g.leader_id = CONSUMER_PROTOCOL, None, None
            g.state = EMPTY
            cg.subscription_metadata = self.consumer._subscription_metadata(cg)[0]
            g.consumer = self.consumer.groups[gid] = cg
            self._consumer_records[gid] = stored["records"]
        if self.groups:
            log.info("coordinator loaded %d group(s) from __consumer_offsets", len(self.groups))

    def _persist(self, g: Group) -> None:
        self.store.write_group(g.group_id, {
            "protocol_type": g.protocol_type or "", "generation": g.generation_id,
            "protocol": g.protocol_name, "leader": g.leader_id,
            "current_state_timestamp": g.state_timestamp,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "rebalance_timeout": m.rebalance_timeout_ms,
                         "session_timeout": m.session_timeout_ms,
                         "subscription": m.metadata(g.protocol_name),
                         "assignment": m.assignment} for m in g.members.values()]}, _now_ms())

    def close(self) -> None:
        self.store.close()

    # ---- the rebalance state machine ----------------------------------------------------------

    def _prepare_rebalance(self, g: Group, reason: str) -> None:
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = b""
                if m.sync is not None:
                    self._answer_sync(m, errors.RebalanceInProgressError.code, b"", g)
        delay = 0.0
        if g.state == EMPTY and self.initial_rebalance_delay_ms > 0:
            delay = self.initial_rebalance_delay_ms / 1000.0
        timeout = max((m.rebalance_timeout_ms for m in g.members.values()), default=0) / 1000.0
        g.rebalance_deadline = time.monotonic() + max(timeout, delay)
        g.initial_delay_until = time.monotonic() + delay
        log.info("group %s: rebalancing (generation %d): %s", g.group_id, g.generation_id, reason)
        g.set_state(PREPARING_REBALANCE)
        self._maybe_complete_join(g)

    def _maybe_complete_join(self, g: Group) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        if time.monotonic() < g.initial_delay_until:
            return
        if all(m.join is not None for m in g.members.values()) and not g.pending:
            self._complete_join(g)

    def _complete_join(self, g: Group) -> None:
        for mid in [mid for mid, m in g.members.items() if m.join is None]:
            log.info("group %s: member %s did not rejoin in time; removing it", g.group_id, mid)
            self._remove_member(g, mid)
        g.pending.clear()
        g.generation_id += 1
        if not g.members:
            g.protocol_name = None
            g.leader_id = None
            g.set_state(EMPTY)
            self._persist(g)
            return
        g.protocol_name = self._select_protocol(g)
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.set_state(COMPLETING_REBALANCE)
        now = time.monotonic()
        everyone = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                     "metadata": m.metadata(g.protocol_name)} for m in g.members.values()]
        for m in g.members.values():
            ctx, m.join = m.join, None
            m.last_heartbeat = now
            ctx.respond(self._join_response(
                g, m.member_id, everyone if m.member_id == g.leader_id else []))

    @staticmethod
    def _select_protocol(g: Group) -> str:
        members = list(g.members.values())
        candidates = set(name for name, _ in members[0].protocols)
        for m in members[1:]:
            candidates &= {name for name, _ in m.protocols}
        votes: dict[str, int] = {}
        for m in members:
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] = votes.get(name, 0) + 1
                    break
        # most votes; ties go to the leader's (first member's) preference
        order = [name for name, _ in members[0].protocols]
        return max(votes, key=lambda n: (votes[n], -order.index(n)))

    def _join_response(self, g: Group, member_id: str, members: list, code: int = NONE) -> dict:
        return {"throttle_time_ms": 0, "error_code": code,
                "generation_id": g.generation_id if code == NONE else -1,
                "protocol_type": g.protocol_type, "protocol_name": g.protocol_name or "",
                "leader": g.leader_id or "", "skip_assignment": False,
                "member_id": member_id, "members": members}

    @staticmethod
    def _join_error(member_id: str, code: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1,
                "protocol_type": None, "protocol_name": "", "leader": "",
                "skip_assignment": False, "member_id": member_id, "members": []}

    def _answer_sync(self, m: Member, code: int, assignment: bytes, g: Group) -> None:
        ctx, m.sync = m.sync, None
        ctx.respond({"throttle_time_ms": 0, "error_code": code,
                     "protocol_type": g.protocol_type, "protocol_name": g.protocol_name,
                     "assignment": assignment})

    def _remove_member(self, g: Group, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.group_instance_id and g.static.get(m.group_instance_id) == member_id:
            del g.static[m.group_instance_id]
        if m.join is not None:
            ctx, m.join = m.join, None
            ctx.respond(self._join_error(member_id, errors.UnknownMemberIdError.code))
        if m.sync is not None:
            self._answer_sync(m, errors.UnknownMemberIdError.code, b"", g)

    def _member_left(self, g: Group, member_id: str, reason: str) -> None:
        self._remove_member(g, member_id)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, reason)
        elif g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    def tick(self) -> None:
        """Expire sessions and pending members, finish timed-out rebalances,
        and expire offsets; called often from the supervisor's loop."""
        now = time.monotonic()
        for g in list(self.groups.values()):
            for mid, expiry in list(g.pending.items()):
                if now >= expiry:
                    del g.pending[mid]
                    self._maybe_complete_join(g)
            for mid, m in list(g.members.items()):
                if m.join is None and now - m.last_heartbeat > m.session_timeout_ms / 1000.0:
                    log.info("group %s: member %s missed its session timeout (%d ms)",
                             g.group_id, mid, m.session_timeout_ms)
                    self._member_left(g, mid, f"member {mid} left: session timeout")
            if g.state == PREPARING_REBALANCE:
                if now >= g.rebalance_deadline:
                    self._complete_join(g)
                else:
                    self._maybe_complete_join(g)
        for gid in self.consumer.tick():
            self._persist_consumer(gid)
        self.share.tick()
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + 5.0
            self.expire_offsets()
            self.store.housekeeping()

    def expire_offsets(self) -> None:
        """Drop the committed offsets of empty groups older than the
        retention (and such groups once they have none left)."""
        now = self._clock()
        for g in list(self.groups.values()):
            if g.in_use:
                continue
            expired = [tp for tp, om in g.offsets.items()
                       if (om.commit_timestamp if g.protocol_type is None
                           else max(g.state_timestamp, om.commit_timestamp))
                       + self.offsets_retention_ms <= now]
            if expired:
                for tp in expired:
                    del g.offsets[tp]
                if g.offsets:
                    self.store.write_offsets(g.group_id, {tp: None for tp in expired}, now)
                log.info("group %s: %d committed offset(s) expired", g.group_id, len(expired))
            if not g.offsets:
                self.store.write_group(g.group_id, None, now, offsets_deleted=expired)
                self._drop_consumer_group(g)
                del self.groups[g.group_id]

    def on_partitions_changed(self, topic: str) -> None:
        """A topic gained partitions: rebalance the groups that consume it."""
        for g in self.groups.values():
            if g.state in (STABLE, COMPLETING_REBALANCE) and topic in g.subscribed_topics():
                self._prepare_rebalance(g, f"topic {topic} gained partitions")

    # ---- FindCoordinator -----------------------------------------------------------------------

    def _find_coordinator(self, ctx: RequestContext, body: dict):
        """The coordinator of each key: the group coordinator (key type 0; a
        share group's members ask for theirs so too), the transaction
        coordinator (1) and, from v6, the share coordinator of a
        share-partition (2, KIP-932), keyed "groupId:topicId:partition" as
        partition leaders ask for it, are all this process; Kafka's clients
        are named the broker that relays to it for the key
        (controller.coordinator_node). A key type Kafka does not define, a
        share key before v6 and a share key of another shape are answered
        INVALID_REQUEST, as Kafka answers them. v5 (KIP-890) only tells
        that the client takes TRANSACTION_ABORTABLE, which no lookup here
        returns."""
        key_type = body.get("key_type", CoordinatorType.GROUP)

        def answer(key: str) -> dict:
            refused = self._refused_coordinator_key(ctx.api_version, key_type, key)
            if refused is not None:
                return {**NO_NODE, "error_code": refused.code, "error_message": refused.message}
            node = self.coordinator_node(ctx.listener, ctx.listener_name, key)
            if node is None:
                return {**NO_NODE, "error_code": errors.CoordinatorNotAvailableError.code,
                        "error_message": "no broker is up to be the coordinator"}
            return {**node, "error_code": NONE, "error_message": None}
        if ctx.api_version >= 4:
            return {"throttle_time_ms": 0, "coordinators": [
                {"key": key, **answer(key)} for key in body["coordinator_keys"]]}
        return {"throttle_time_ms": 0, **answer(body.get("key") or "")}

    @staticmethod
    def _refused_coordinator_key(api_version: int, key_type: int, key: str) -> KafkaError | None:
        try:
            key_type = CoordinatorType(key_type)
        except ValueError:
            return errors.InvalidRequestError(f"unknown coordinator key type {key_type}")
        if key_type != CoordinatorType.SHARE:
            return None
        if api_version < SHARE_COORDINATOR_KEYS_FROM:
            return errors.InvalidRequestError(
                f"FindCoordinator v{api_version} has no share coordinator keys (v6+)")
        try:
            parse_coordinator_key(key)
        except ValueError as exc:
            return errors.InvalidRequestError(f"share coordinator key: {exc}")
        return None

    # ---- JoinGroup -------------------------------------------------------------------------------

    def _join_group(self, ctx: RequestContext, body: dict):
        gid = body["group_id"]
        member_id = body["member_id"]
        instance = body.get("group_instance_id")
        session = body["session_timeout_ms"]
        rebalance = body.get("rebalance_timeout_ms", -1)
        if rebalance is None or rebalance < 0:
            rebalance = session
        if not gid:
            return self._join_error(member_id, errors.InvalidGroupIdError.code)
        if not self.min_session_timeout_ms <= session <= self.max_session_timeout_ms:
            return self._join_error(member_id, errors.InvalidSessionTimeoutError.code)
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        if not body["protocol_type"] or not protocols:
            return self._join_error(member_id, errors.InconsistentGroupProtocolError.code)
        if gid in self.share.groups:              # one group id, one kind of group
            return self._join_error(member_id, errors.InconsistentGroupProtocolError.code)
        g = self.groups.get(gid)
        if g is not None and g.consumer is not None:
            if g.consumer.members:
                # a classic member of a consumer group (online migration)
                if self.migration_policy == MIGRATION_DISABLED:
                    return self._join_error(member_id,
                                            errors.InconsistentGroupProtocolError.code)
                resp = self.consumer.classic_join(ctx, body, g.consumer)
                self._persist_consumer(gid)
                return resp
            self._drop_consumer_group(g)          # an empty consumer group becomes classic
        if g is None:
            if member_id:
                return self._join_error(member_id, errors.UnknownMemberIdError.code)
            g = self.groups[gid] = Group(gid)
            g.state_timestamp = _now_ms()
        if g.members and (g.protocol_type != body["protocol_type"] or not self._supports_common(
                g, protocols, exclude=member_id)):
            return self._join_error(member_id, errors.InconsistentGroupProtocolError.code)

        def new_member(mid: str) -> Member:
            return Member(mid, instance, ctx.header.client_id or "", "/" + ctx.client_host,
                          session, rebalance, body["protocol_type"], protocols,
                          last_heartbeat=time.monotonic())

        if not member_id:
            new_id = f"{ctx.header.client_id or 'member'}-{uuid.uuid4()}"
            if instance:
                old_id = g.static.get(instance)
                if old_id is not None and old_id in g.members:
                    return self._static_rejoin(g, ctx, old_id, new_id, protocols, session,
                                               rebalance)
                m = new_member(new_id)
                g.static[instance] = new_id
                return self._add_member(g, m, ctx, f"static member {instance} joined")
            if ctx.api_version >= 4:
                g.pending[new_id] = time.monotonic() + session / 1000.0
                return self._join_error(new_id, errors.MemberIdRequiredError.code)
            return self._add_member(g, new_member(new_id), ctx, f"member {new_id} joined")

        if member_id in g.pending:
            del g.pending[member_id]
            return self._add_member(g, new_member(member_id), ctx, f"member {member_id} joined")
        m = g.members.get(member_id)
        if instance and g.static.get(instance) not in (None, member_id):
            return self._join_error(member_id, errors.FencedInstanceIdError.code)
        if m is None:
            return self._join_error(member_id, errors.UnknownMemberIdError.code)
        changed = m.protocols != protocols
        m.protocols = protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance
        m.last_heartbeat = time.monotonic()
        if g.state == PREPARING_REBALANCE:
            self._await_join(m, ctx)
            self._maybe_complete_join(g)
            return DEFERRED
        if g.state == COMPLETING_REBALANCE and not changed:
            # it lost our answer: give it again
            return self._join_response(g, member_id, self._member_list(g)
                                       if member_id == g.leader_id else [])
        if g.state == STABLE and not changed and member_id != g.leader_id:
            return self._join_response(g, member_id, [])
        self._await_join(m, ctx)
        self._prepare_rebalance(g, f"member {member_id} rejoined"
                                   + (" with a new subscription" if changed else ""))
        return DEFERRED

    def _await_join(self, m: Member, ctx: RequestContext) -> None:
        if m.join is not None and m.join is not ctx:  # a retried JoinGroup replaces the one before
            m.join.respond(self._join_error(m.member_id, errors.RebalanceInProgressError.code))
        m.join = ctx

    @staticmethod
    def _member_list(g: Group) -> list:
        return [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                 "metadata": m.metadata(g.protocol_name)} for m in g.members.values()]

    @staticmethod
    def _supports_common(g: Group, protocols, exclude: str) -> bool:
        names = {name for name, _ in protocols}
        for mid, m in g.members.items():
            if mid != exclude:
                names &= {name for name, _ in m.protocols}
        return bool(names)

    def _add_member(self, g: Group, m: Member, ctx: RequestContext, reason: str):
        if g.protocol_type is None or not g.members:
            g.protocol_type = m.protocol_type
        g.members[m.member_id] = m
        m.join = ctx
        if g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        else:
            self._prepare_rebalance(g, reason)
        return DEFERRED

    def _static_rejoin(self, g: Group, ctx: RequestContext, old_id, new_id, protocols, session,
                       rebalance):
        """A static member restarted: it takes over its old member's place."""
        old = g.members.pop(old_id)
        if old.join is not None:
            fenced, old.join = old.join, None
            fenced.respond(self._join_error(old_id, errors.FencedInstanceIdError.code))
        if old.sync is not None:
            self._answer_sync(old, errors.FencedInstanceIdError.code, b"", g)
        changed = old.protocols != protocols
        old.member_id = new_id
        old.protocols = protocols
        old.session_timeout_ms, old.rebalance_timeout_ms = session, rebalance
        old.client_id = ctx.header.client_id or old.client_id
        old.last_heartbeat = time.monotonic()
        g.members[new_id] = old
        g.static[old.group_instance_id] = new_id
        if g.leader_id == old_id:
            g.leader_id = new_id
        log.info("group %s: static member %s came back as %s", g.group_id,
                 old.group_instance_id, new_id)
        if g.state == STABLE and not changed:
            self._persist(g)
            return self._join_response(g, new_id, [])
        old.join = ctx
        if g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        else:
            self._prepare_rebalance(g, f"static member {old.group_instance_id} rejoined")
        return DEFERRED

    # ---- SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------------

    def _check_member(self, g: Group | None, member_id: str, instance: str | None,
                      generation: int) -> int:
        if g is None or g.state == DEAD:
            return errors.UnknownMemberIdError.code
        if instance and g.static.get(instance) not in (None, member_id):
            return errors.FencedInstanceIdError.code
        if member_id not in g.members:
            return errors.UnknownMemberIdError.code
        if generation != g.generation_id:
            return errors.IllegalGenerationError.code
        return NONE

    def _sync_group(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:            # Kafka's GroupCoordinatorService, every group API
            return {"throttle_time_ms": 0, "error_code": INVALID_GROUP_ID, "protocol_type": None,
                    "protocol_name": None, "assignment": b""}
        g = self.groups.get(body["group_id"])
        if g is not None and g.consumer is not None:
            return self.consumer.classic_sync(body, g.consumer)     # changes nothing kept
        member_id = body["member_id"]
        code = self._check_member(g, member_id, body.get("group_instance_id"),
                                  body["generation_id"])
        if code == NONE:
            # below v5 the fields do not exist (they decode as "")
            if (body.get("protocol_type") not in (None, "", g.protocol_type)
                    or body.get("protocol_name") not in (None, "", g.protocol_name)):
                code = errors.InconsistentGroupProtocolError.code
            elif g.state == PREPARING_REBALANCE:
                code = errors.RebalanceInProgressError.code
        if code != NONE:
            return {"throttle_time_ms": 0, "error_code": code, "protocol_type": None,
                    "protocol_name": None, "assignment": b""}
        m = g.members[member_id]
        m.last_heartbeat = time.monotonic()
        if g.state == STABLE:
            return {"throttle_time_ms": 0, "error_code": NONE, "protocol_type": g.protocol_type,
                    "protocol_name": g.protocol_name, "assignment": m.assignment}
        # CompletingRebalance: wait for the leader's assignment
        m.sync = ctx
        if member_id == g.leader_id:
            given = {a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]}
            for mid, member in g.members.items():
                member.assignment = given.get(mid, b"")
            g.set_state(STABLE)
            self._persist(g)
            log.info("group %s: generation %d is stable with %d member(s), protocol %s",
                     g.group_id, g.generation_id, len(g.members), g.protocol_name)
            for member in g.members.values():
                if member.sync is not None:
                    self._answer_sync(member, NONE, member.assignment, g)
        return DEFERRED

    def _heartbeat(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:
            return {"throttle_time_ms": 0, "error_code": INVALID_GROUP_ID}
        g = self.groups.get(body["group_id"])
        if g is not None and g.consumer is not None:
            code = self.consumer.classic_heartbeat(body, g.consumer)
            self._persist_consumer(g.group_id)          # a new target, maybe
            return {"throttle_time_ms": 0, "error_code": code}
        member_id = body["member_id"]
        code = self._check_member(g, member_id, body.get("group_instance_id"),
                                  body["generation_id"])
        if code == NONE:
            g.members[member_id].last_heartbeat = time.monotonic()
            if g.state == PREPARING_REBALANCE:
                code = errors.RebalanceInProgressError.code
        elif g is not None and g.state == EMPTY and code == errors.IllegalGenerationError.code:
            code = errors.UnknownMemberIdError.code
        return {"throttle_time_ms": 0, "error_code": code}

    def _leave_group(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:
            return {"throttle_time_ms": 0, "error_code": INVALID_GROUP_ID, "members": []}
        g = self.groups.get(body["group_id"])
        if ctx.api_version < 3:
            leaving = [{"member_id": body["member_id"], "group_instance_id": None}]
        else:
            leaving = body["members"]
        results = []
        for entry in leaving:
            mid, instance = entry["member_id"], entry.get("group_instance_id")
            code = NONE
            if g is not None and g.consumer is not None:
                mid, code = self.consumer.classic_leave(g.consumer, mid, instance)
                self._persist_consumer(g.group_id)
                results.append({"member_id": mid, "group_instance_id": instance,
                                "error_code": code})
                continue
            if g is None:
                code = errors.UnknownMemberIdError.code
            elif instance:
                known = g.static.get(instance)
                if known is None:
                    code = errors.UnknownMemberIdError.code
                elif mid and mid != known:
                    code = errors.FencedInstanceIdError.code
                else:
                    mid = known
            elif mid in g.pending:
                del g.pending[mid]
                self._maybe_complete_join(g)
            elif mid not in g.members:
                code = errors.UnknownMemberIdError.code
            if code == NONE and g is not None and mid in g.members:
                self._member_left(g, mid, f"member {mid} left the group")
            results.append({"member_id": mid, "group_instance_id": instance, "error_code": code})
        top = results[0]["error_code"] if ctx.api_version < 3 and results else NONE
        return {"throttle_time_ms": 0, "error_code": top, "members": results}

    # ---- offsets -------------------------------------------------------------------------------

    def _offset_commit(self, ctx: RequestContext, body: dict):
        gid = body["group_id"]
        generation = body.get("generation_id_or_member_epoch", -1)
        member_id = body.get("member_id", "")
        instance = body.get("group_instance_id")
        g = self.groups.get(gid)
        code = NONE
        if g is None:
            if generation >= 0:
                # v9 (KIP-848) tells a group that is gone from a stale generation
                code = errors.GroupIdNotFoundError.code if ctx.api_version >= 9 \
                    else errors.IllegalGenerationError.code
        elif g.consumer is not None:
            code = self.consumer.validate_commit(g.consumer, member_id, generation)
            if (code == NONE and member_id and ctx.api_version < 9
                    and not self.consumer.is_classic_member(g.consumer, member_id)):
                code = errors.UnsupportedVersionError.code    # KIP-848 members need v9+
        elif generation < 0 and g.state == EMPTY:
            pass                                          # a commit from outside any group
        elif g.state == COMPLETING_REBALANCE:
            code = errors.RebalanceInProgressError.code
        else:
            code = self._check_member(g, member_id, instance, generation)
        topics_out, accepted = self._write_offsets(gid, code, body["topics"])
        if accepted:
            self._group_for_commit(gid).offsets.update(accepted)
        return {"throttle_time_ms": 0, "topics": topics_out}

    def _write_offsets(self, gid: str, code: int, topics: list, producer_id: int = -1,
                       producer_epoch: int = -1) -> tuple[list, dict]:
        """Check each partition of an (Txn)OffsetCommit whose group checks
        gave ``code`` and write the good ones in one batch (of the
        producer's transaction, with a producer id). Returns the response
        topics and {(topic, partition): OffsetAndMetadata} written."""
        now = self._clock()
        accepted: dict = {}
        topics_out = []
        for t in topics:
            count = self.partition_count(t["name"])
            parts_out = []
            for p in t["partitions"]:
                pcode = code
                if pcode == NONE:
                    if count is None or not 0 <= p["partition_index"] < count:
                        pcode = errors.UnknownTopicOrPartitionError.code
                    elif len((p.get("committed_metadata") or "").encode()) > OFFSET_METADATA_MAX_BYTES:
                        pcode = errors.OffsetMetadataTooLargeError.code
                    else:
                        accepted[(t["name"], p["partition_index"])] = OffsetAndMetadata(
                            p["committed_offset"], p.get("committed_leader_epoch", -1),
                            p.get("committed_metadata") or "", now)
                parts_out.append({"partition_index": p["partition_index"], "error_code": pcode})
            topics_out.append({"name": t["name"], "partitions": parts_out})
        if accepted:
            try:
                self.store.write_offsets(gid, accepted, now, producer_id=producer_id,
                                         producer_epoch=producer_epoch)
            except KafkaError as exc:
                for t in topics_out:
                    for p in t["partitions"]:
                        if p["error_code"] == NONE:
                            p["error_code"] = exc.code
                return topics_out, {}
        return topics_out, accepted

    def _group_for_commit(self, gid: str) -> "Group":
        """The group offsets are committed to, made (Empty) if it is new."""
        g = self.groups.get(gid)
        if g is None:
            g = self.groups[gid] = Group(gid)
            g.state_timestamp = self._clock()
        return g

    def _txn_offset_commit(self, ctx: RequestContext, body: dict):
        gid = body["group_id"]
        pid, epoch = body["producer_id"], body["producer_epoch"]
        generation = body.get("generation_id", -1)
        member_id = body.get("member_id") or ""
        g = self.groups.get(gid)
        if not gid:
            code = errors.InvalidGroupIdError.code
        else:
            # v5 (transactions v2): the commit adds the offsets to the transaction
            code = self.verify_txn(body["transactional_id"], pid, epoch, gid,
                                   add=ctx.api_version >= 5)
            if code in _VERIFY_RETRIABLE:
                # "not now" from the transaction coordinator (usually the
                # previous transaction's markers): as Kafka (KAFKA-16386),
                # an error every client retries on this API, which
                # CONCURRENT_TRANSACTIONS is not (Java's producer: fatal)
                code = errors.CoordinatorLoadInProgressError.code
        if code == NONE:
            if g is None:
                if generation >= 0:
                    code = errors.IllegalGenerationError.code
            elif g.consumer is not None:
                code = self.consumer.validate_commit(g.consumer, member_id, generation,
                                                     transactional=True)
            elif generation >= 0 or member_id:
                # KIP-447: a consumer's group metadata fences zombies of
                # earlier generations; without it, the commit is a producer's
                code = self._check_member(g, member_id, body.get("group_instance_id"),
                                          generation)
        topics_out, accepted = self._write_offsets(gid, code, body["topics"], pid, epoch)
        if accepted:
            self._group_for_commit(gid)
            self.pending_txn_offsets.setdefault(pid, {}).setdefault(gid, {}).update(accepted)
        return {"throttle_time_ms": 0, "topics": topics_out}

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                             commit: bool, coordinator_epoch: int) -> None:
        """The transaction coordinator's marker for ``__consumer_offsets``
        partition ``partition``: write it, then make the producer's pending
        offsets of the groups in that partition visible (commit) or drop
        them (abort)."""
        self.store.append_marker(partition, producer_id, producer_epoch, commit,
                                 coordinator_epoch)
        pending = self.pending_txn_offsets.get(producer_id)
        if not pending:
            return
        for gid in [gid for gid in pending if self.store.partition_for(gid) == partition]:
            offsets = pending.pop(gid)
            if commit:
                g = self.groups.get(gid) or self.groups.setdefault(gid, Group(gid))
                g.offsets.update(offsets)
        if not pending:
            del self.pending_txn_offsets[producer_id]

    def _unstable(self, gid: str) -> set:
        """The partitions of ``gid`` with transactional offsets pending."""
        out: set = set()
        for by_group in self.pending_txn_offsets.values():
            out |= set(by_group.get(gid, ()))
        return out

    def _fetch_offsets(self, gid: str, topics, require_stable: bool = False) -> list:
        g = self.groups.get(gid)
        offsets = g.offsets if g is not None else {}
        if topics is None:
            by_topic: dict[str, list] = {}
            for (t, p) in sorted(offsets):
                by_topic.setdefault(t, []).append(p)
            topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        unstable = self._unstable(gid) if require_stable else set()
        out = []
        for t in topics:
            parts = []
            for p in t["partition_indexes"]:
                om = offsets.get((t["name"], p))
                code = errors.UnstableOffsetCommitError.code if (t["name"], p) in unstable else NONE
                parts.append({"partition_index": p,
                              "committed_offset": om.offset if om and not code else -1,
                              "committed_leader_epoch": om.leader_epoch if om and not code else -1,
                              "metadata": om.metadata if om and not code else "",
                              "error_code": code})
            out.append({"name": t["name"], "partitions": parts})
        return out

    def _offset_fetch(self, ctx: RequestContext, body: dict):
        stable = bool(body.get("require_stable"))
        if ctx.api_version >= 8:
            out = []
            for grp in body["groups"]:
                code = self._check_fetch_member(grp) if ctx.api_version >= 9 else NONE
                out.append({"group_id": grp["group_id"], "error_code": code,
                            "topics": [] if code else
                            self._fetch_offsets(grp["group_id"], grp["topics"], stable)})
            return {"throttle_time_ms": 0, "groups": out}
        return {"throttle_time_ms": 0, "error_code": NONE,
                "topics": self._fetch_offsets(body["group_id"], body["topics"], stable)}

    def _check_fetch_member(self, grp: dict) -> int:
        """OffsetFetch v9 of a consumer group's member: its epoch must be
        current (no member id: an admin's fetch, not checked)."""
        g = self.groups.get(grp["group_id"])
        if g is None or g.consumer is None or grp.get("member_id") is None:
            return NONE
        return self.consumer.validate_commit(g.consumer, grp["member_id"],
                                             grp.get("member_epoch", -1))

    def _offset_delete(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:
            return {"error_code": INVALID_GROUP_ID, "throttle_time_ms": 0, "topics": []}
        g = self.groups.get(body["group_id"])
        if g is None:
            return {"error_code": errors.GroupIdNotFoundError.code, "throttle_time_ms": 0,
                    "topics": []}
        subscribed = g.subscribed_topics() if g.members else set()
        if g.consumer is not None:
            subscribed = g.consumer.subscribed_topics()
        deleted = {}
        topics_out = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                tp = (t["name"], p["partition_index"])
                code = NONE
                if t["name"] in subscribed:
                    code = errors.GroupSubscribedToTopicError.code
                elif tp in g.offsets:
                    deleted[tp] = None
                parts.append({"partition_index": p["partition_index"], "error_code": code})
            topics_out.append({"name": t["name"], "partitions": parts})
        if deleted:
            self.store.write_offsets(g.group_id, deleted, _now_ms())
            for tp in deleted:
                del g.offsets[tp]
        return {"error_code": NONE, "throttle_time_ms": 0, "topics": topics_out}

    # ---- admin ----------------------------------------------------------------------------------

    def _describe_groups(self, ctx: RequestContext, body: dict):
        out = []
        for gid in body["groups"]:
            g = self.groups.get(gid)
            if g is None:
                out.append({"error_code": NONE, "group_id": gid, "group_state": DEAD,
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            if g.consumer is not None:
                out.append(self._describe_consumer_group(g.consumer))
                continue
            stable = g.state == STABLE
            out.append({
                "error_code": NONE, "group_id": gid, "group_state": g.state,
                "protocol_type": g.protocol_type or "",
                "protocol_data": (g.protocol_name or "") if stable else "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                             "member_assignment": m.assignment if stable else b""}
                            for m in g.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    def _describe_consumer_group(self, cg: ConsumerGroup) -> dict:
        """A KIP-848 group in DescribeGroups' classic shape, for tools that
        do not speak ConsumerGroupDescribe: members with a consumer-protocol
        subscription and their current assignment. (Kafka 4 answers
        GROUP_ID_NOT_FOUND here and such tools show nothing.)"""
        names = {t.topic_id: name for name, t in self.consumer.topics().items()}

        def assignment(tps) -> bytes:
            by: dict = {}
            for tid, p in tps:
                by.setdefault(names.get(tid, ""), []).append(p)
            return encode_assignment(0, {"assigned_partitions": [
                {"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by.items())],
                "user_data": None})

        return {"error_code": NONE, "group_id": cg.group_id, "group_state": cg.state,
                "protocol_type": CONSUMER_PROTOCOL, "protocol_data": cg.assignor,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": encode_subscription(0, {
                                 "topics": m.subscribed_topic_names, "user_data": None}),
                             "member_assignment": assignment(m.assigned)}
                            for m in cg.members.values()]}

    def _list_groups(self, ctx: RequestContext, body: dict):
        # Kafka's ListGroups lists the groups of the broker asked, which
        # clients ask one by one (list_consumer_groups asks every broker
        # Metadata names): relayed by a worker, the groups FindCoordinator
        # names that worker for; asked here directly (the bootstrap address,
        # not among Metadata's brokers), every group
        def listed(gid: str) -> bool:
            if ctx.relayed_from is None:
                return True
            node = self.coordinator_node(ctx.listener, ctx.listener_name, gid)
            return node is not None and node["node_id"] == ctx.relayed_from
        states = {s.lower() for s in body.get("states_filter") or ()}
        types = {s.lower() for s in body.get("types_filter") or ()}
        out = []
        for g in self.groups.values():
            if not listed(g.group_id):
                continue
            kind = CONSUMER_TYPE if g.consumer is not None else CLASSIC_TYPE
            state = g.consumer.state if g.consumer is not None else g.state
            if (states and state.lower() not in states) or (types and kind not in types):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                        "group_state": state, "group_type": kind})
        # share groups only for clients that know group types (v5+): older
        # tools would take them for consumer groups
        for sg in self.share.groups.values() if ctx.api_version >= 5 else ():
            if not listed(sg.group_id):
                continue
            if (states and sg.state.lower() not in states) or (types and SHARE_TYPE not in types):
                continue
            out.append({"group_id": sg.group_id, "protocol_type": SHARE_TYPE,
                        "group_state": sg.state, "group_type": SHARE_TYPE})
        return {"throttle_time_ms": 0, "error_code": NONE, "groups": out}

    def _delete_groups(self, ctx: RequestContext, body: dict):
        results = []
        for gid in body["groups_names"]:
            g = self.groups.get(gid)
            if g is None:
                code = self.share.delete(gid)
                if code == NONE:
                    self.share_group_deleted(gid)
            elif g.in_use:
                code = errors.NonEmptyGroupError.code
            else:
                code = NONE
                self.store.write_group(gid, None, _now_ms(), offsets_deleted=list(g.offsets))
                self._drop_consumer_group(g)
                del self.groups[gid]
            results.append({"group_id": gid, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}
