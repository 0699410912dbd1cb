"""The group coordinator's front: the handler table of every group API,
routed to the manager of its concern (Kafka's ``GroupCoordinatorService``
and ``GroupCoordinatorShard``, which route to ``GroupMetadataManager`` and
``OffsetMetadataManager``).

- classic_group.py: JoinGroup, SyncGroup, Heartbeat, LeaveGroup;
- offsets.py: OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit;
- consumer_group.py: ConsumerGroupHeartbeat and ConsumerGroupDescribe
  (KIP-848); migration.py converts between the two protocols;
- share/share_group.py: ShareGroupHeartbeat, ShareGroupDescribe,
  Describe/AlterShareGroupOffsets (KIP-932);
- admin.py: DescribeGroups, ListGroups, DeleteGroups;
- FindCoordinator is answered here: every coordinator is this process.

The managers share the group table (groups.py), the ``__consumer_offsets``
log (group_log.py) and each other's public methods, all handed to them
here; none keeps a copy of another's state. State is kept in memory and
written to ``__consumer_offsets`` at each new generation and each commit;
after a restart the coordinator replays it (classic groups, then offsets,
then consumer groups) and members carry on in their generation.

Which process runs it: the supervisor (supervisor.py; in a cluster, the
controller node's), on its single thread: it registers ``handlers()``,
calls ``tick()`` from its poll loop, ``on_partitions_changed()`` after
CreatePartitions, and sets ``verify_txn`` and ``share_group_deleted``; the
transaction coordinator calls ``complete_transaction`` with its markers.

What it may import: the modules of group/, share/ (the share-group
coordinator it routes to), server/config.py, network/ and the folders below
them; kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging
import time

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import CoordinatorType
from kafkalite.server.group.admin import GroupAdmin
from kafkalite.server.group.classic_group import ClassicGroupManager
from kafkalite.server.group.consumer_group import ConsumerGroupCoordinator
from kafkalite.server.group.group_log import GroupMetadataLog
from kafkalite.server.group.groups import (MIGRATION_BIDIRECTIONAL, NONE, ConsumerGroupRecords,
                                           Group, now_ms)
from kafkalite.server.group.migration import GroupMigration
from kafkalite.server.group.offsets import OffsetMetadataManager
from kafkalite.server.network.requests import RequestContext
from kafkalite.server.share.share_group import ShareGroupCoordinator
from kafkalite.server.share.share_state_log import parse_coordinator_key

log = logging.getLogger("kafkalite.coordinator")
NO_NODE = {"node_id": -1, "host": "", "port": -1}   # a FindCoordinator key not answered
SHARE_COORDINATOR_KEYS_FROM = 6         # FindCoordinator's first version with key type 2
EXPIRY_CHECK_S = 5.0                    # how often tick() expires offsets


class GroupCoordinator:
    def __init__(self, data_dir: str, *, partition_count, coordinator_node,
                 offsets_partitions: int = 16, min_session_timeout_ms: int = 1_000,
                 max_session_timeout_ms: int = 1_800_000, initial_rebalance_delay_ms: int = 0,
                 offsets_retention_minutes: int = 10_080, clock=now_ms, topics=dict,
                 consumer_session_timeout_ms: int = 45_000,
                 consumer_heartbeat_interval_ms: int = 5_000,
                 share_session_timeout_ms: int = 45_000,
                 share_heartbeat_interval_ms: int = 5_000, internal_mirror=None,
                 migration_policy: str = MIGRATION_BIDIRECTIONAL):
        # (Listener, Kafka listener name, key) -> {"node_id", "host", "port"}, or
        # None while no node can be named (controller.coordinator_node)
        self.coordinator_node = coordinator_node
        # internal_mirror: PostgreSQL's copy of __consumer_offsets in a cluster
        self.store = GroupMetadataLog(data_dir, offsets_partitions, internal_mirror)
        # the group table: group id -> Group, whatever its protocol (groups.py)
        self.groups: dict[str, Group] = {}
        # topics: () -> {name: TopicMetadata}, for KIP-848's topic ids. Its
        # groups are the table's: migration makes and converts them
        self.consumer = ConsumerGroupCoordinator(
            topics=topics,
            group_of=lambda gid, create: self.migration.consumer_group(gid, create),
            session_timeout_ms=consumer_session_timeout_ms,
            heartbeat_interval_ms=consumer_heartbeat_interval_ms)
        self.share = ShareGroupCoordinator(
            topics=topics, taken=lambda gid: gid in self.groups,
            session_timeout_ms=share_session_timeout_ms,
            heartbeat_interval_ms=share_heartbeat_interval_ms)
        self.consumer_records = ConsumerGroupRecords(self.groups, self.store, self.consumer,
                                                     clock)
        self.classic = ClassicGroupManager(
            self.groups, self.store, self.consumer, self.consumer_records, self.share,
            min_session_timeout_ms=min_session_timeout_ms,
            max_session_timeout_ms=max_session_timeout_ms,
            initial_rebalance_delay_ms=initial_rebalance_delay_ms,
            migration_policy=migration_policy)
        self.migration = GroupMigration(self.groups, self.classic, self.consumer,
                                        self.consumer_records, self.share, migration_policy)
        self.consumer.only_classic_left = self.migration.downgrade
        self.offsets = OffsetMetadataManager(
            self.groups, self.store, self.classic, self.consumer, self.consumer_records,
            partition_count=partition_count,
            offsets_retention_ms=offsets_retention_minutes * 60_000, clock=clock)
        self.admin = GroupAdmin(self.groups, self.store, self.consumer, self.consumer_records,
                                self.share, coordinator_node)
        self._next_expiry_check = 0.0
        self._load()

    def handlers(self) -> dict:
        return {
            ApiKey.FIND_COORDINATOR: self._find_coordinator,
            ApiKey.JOIN_GROUP: self.classic.join_group,
            ApiKey.SYNC_GROUP: self.classic.sync_group,
            ApiKey.HEARTBEAT: self.classic.heartbeat,
            ApiKey.LEAVE_GROUP: self.classic.leave_group,
            ApiKey.OFFSET_COMMIT: self.offsets.offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.offsets.txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offsets.offset_fetch,
            ApiKey.OFFSET_DELETE: self.offsets.offset_delete,
            ApiKey.DESCRIBE_GROUPS: self.admin.describe_groups,
            ApiKey.LIST_GROUPS: self.admin.list_groups,
            ApiKey.DELETE_GROUPS: self.admin.delete_groups,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._consumer_group_describe,
            ApiKey.SHARE_GROUP_HEARTBEAT: self.share.heartbeat,
            ApiKey.SHARE_GROUP_DESCRIBE: self.share.describe,
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: self.share.describe_offsets,
            ApiKey.ALTER_SHARE_GROUP_OFFSETS: self.share.alter_offsets,
            ApiKey.DELETE_SHARE_GROUP_OFFSETS: self.share.delete_offsets,
        }

    # The hooks the supervisor sets, kept by the managers that call them.

    @property
    def verify_txn(self):
        """(transactional id, producer id, epoch, group, add) -> error code:
        the transaction coordinator's check of a TxnOffsetCommit."""
        return self.offsets.verify_txn

    @verify_txn.setter
    def verify_txn(self, verify) -> None:
        self.offsets.verify_txn = verify

    @property
    def share_group_deleted(self):
        """group id -> None: has the partition leaders drop a deleted share
        group's state."""
        return self.admin.share_group_deleted

    @share_group_deleted.setter
    def share_group_deleted(self, deleted) -> None:
        self.admin.share_group_deleted = deleted

    def _consumer_group_heartbeat(self, ctx: RequestContext, body: dict):
        resp = self.consumer.heartbeat(ctx, body)
        code = self.consumer_records.persist(body["group_id"])
        if code != NONE and resp["error_code"] == NONE:
            # not written: the member retries, as after a lost answer
            resp = {**resp, "error_code": errors.CoordinatorNotAvailableError.code,
                    "error_message": "the group's state could not be written",
                    "assignment": None}
        return resp

    def _consumer_group_describe(self, ctx: RequestContext, body: dict):
        resp = self.consumer.describe(ctx, body)       # may compute a new target
        for gid in body["group_ids"]:
            self.consumer_records.persist(gid)
        return resp

    def _load(self) -> None:
        loaded = self.store.load()
        self.classic.load(loaded.groups)
        self.offsets.load(loaded.offsets, loaded.pending)
        self.consumer_records.load(loaded.consumer)
        if self.groups:
            log.info("coordinator loaded %d group(s) from __consumer_offsets", len(self.groups))

    def close(self) -> None:
        self.store.close()

    def extend_sessions(self, seconds: float) -> None:
        """Every member's session (classic, consumer and share groups) is
        ``seconds`` longer: the supervisor's loop stalled that long
        (loop_clock.py), and the heartbeats sent meanwhile wait unread on
        its sockets. Kafka's coordinators check a session against the time
        they were able to look; a member is not expired for the
        coordinator's own absence."""
        members = [m for g in self.groups.values() for m in g.members.values()]
        members += [m for cg in self.consumer.groups.values() for m in cg.members.values()]
        members += [m for sg in self.share.groups.values() for m in sg.members.values()]
        for m in {id(m): m for m in members}.values():
            m.last_heartbeat += seconds

    def tick(self) -> None:
        """Expire sessions and pending members, finish timed-out rebalances,
        and expire offsets; called often from the supervisor's loop."""
        now = time.monotonic()
        self.classic.tick(now)
        for gid in self.consumer.tick():
            self.consumer_records.persist(gid)
        self.share.tick()
        if now >= self._next_expiry_check:
            self._next_expiry_check = now + EXPIRY_CHECK_S
            self.offsets.expire_offsets()
            self.store.housekeeping()

    def expire_offsets(self) -> None:
        self.offsets.expire_offsets()

    def complete_transaction(self, partition: int, producer_id: int, producer_epoch: int,
                             commit: bool, coordinator_epoch: int) -> None:
        self.offsets.complete_transaction(partition, producer_id, producer_epoch, commit,
                                          coordinator_epoch)

    def on_partitions_changed(self, topic: str) -> None:
        self.classic.on_partitions_changed(topic)

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
