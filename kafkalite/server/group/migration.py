"""Online migration between the classic protocol and KIP-848's consumer
protocol, as Kafka 4's group coordinator does it
(``group.consumer.migration.policy``; Kafka's ``GroupMetadataManager``
conversions).

- An empty group changes type on the first member of the other kind; a
  consumer group's committed offsets are kept in its ``Group`` like any
  group's (``Group.consumer`` holds its membership).
- Upgrade: a ConsumerGroupHeartbeat joining a Stable classic group turns it
  into a consumer group whose members are the classic ones, with their
  assignments; classic JoinGroup, SyncGroup, Heartbeat and LeaveGroup to a
  consumer group then go to its classic members (classic_group.py hands
  them to consumer_group.py).
- Downgrade: when a consumer group's last consumer-protocol member leaves,
  the rest become a classic group again and rebalance.
- Where the policy forbids it, a ConsumerGroupHeartbeat to a classic group
  in use (or rebalancing) gets GROUP_ID_NOT_FOUND (and a classic JoinGroup
  to a consumer group INCONSISTENT_GROUP_PROTOCOL, in classic_group.py).

Which process runs it: the supervisor, on its event loop: consumer_group.py
asks ``consumer_group`` for a group (its ``group_of``) and calls
``downgrade`` (its ``only_classic_left``).

What it may import: groups.py, classic_group.py, consumer_group.py, share/
(the share groups, whose ids a consumer group may not take),
kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging
import time

from kafkalite import errors
from kafkalite.protocol import decode_assignment, decode_subscription
from kafkalite.protocol.errors import ProtocolError
from kafkalite.server.group.classic_group import ClassicGroupManager
from kafkalite.server.group.consumer_group import (ClassicMetadata, ConsumerGroup,
                                                   ConsumerGroupCoordinator, ConsumerGroupMember)
from kafkalite.server.group.groups import (CONSUMER_PROTOCOL, EMPTY, MIGRATION_BIDIRECTIONAL,
                                           MIGRATION_DOWNGRADE, MIGRATION_UPGRADE, STABLE,
                                           ConsumerGroupRecords, Group, Member)
from kafkalite.server.share.share_group import ShareGroupCoordinator

log = logging.getLogger("kafkalite.coordinator")


class GroupMigration:
    """Makes, hands out and converts the consumer groups of the group table
    ``groups``, under ``migration_policy``."""

    def __init__(self, groups: dict[str, Group], classic: ClassicGroupManager,
                 consumer: ConsumerGroupCoordinator, consumer_records: ConsumerGroupRecords,
                 share: ShareGroupCoordinator, migration_policy: str):
        self.groups = groups
        self.classic = classic
        self.consumer = consumer
        self.consumer_records = consumer_records
        self.share = share
        self.migration_policy = migration_policy

    def consumer_group(self, gid: str, create: bool) -> ConsumerGroup | None:
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
                assigned = (self.consumer.named_partitions(
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
        cg.subscription_metadata = self.consumer.subscription_metadata(cg)[0]
        g.members.clear()
        g.static.clear()
        for mid in list(g.pending):
            del g.pending[mid]
        g.consumer = self.consumer.groups[g.group_id] = cg
        g.protocol_type, g.protocol_name, g.leader_id = CONSUMER_PROTOCOL, None, None
        g.set_state(EMPTY)
        self.classic.persist(g)     # a restart finds an empty group, not the classic members
        log.info("group %s: upgraded from a classic group (generation %d, %d member(s)) to a "
                 "consumer group", g.group_id, g.generation_id, len(cg.members))
        return cg

    def downgrade(self, cg: ConsumerGroup) -> bool:
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
        self.consumer_records.drop(g)
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
        g.protocol_name = self.classic.select_protocol(g)
        g.leader_id = next(iter(g.members))
        g.set_state(STABLE)
        self.classic.persist(g)     # its consumer records are tombstones (dropped above)
        log.info("group %s: downgraded to a classic group (%d member(s))", g.group_id,
                 len(g.members))
        self.classic.prepare_rebalance(g, "the last consumer-protocol member left")
        return True
