from __future__ import annotations

import logging
import time

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import CoordinatorType
from kafkalite.server.group import consumer_group_log
from kafkalite.server.group.admin import GroupAdminMixin
from kafkalite.server.group.classic_group import ClassicGroupMixin
from kafkalite.server.group.consumer_group import ConsumerGroupCoordinator
from kafkalite.server.group.groups import (CONSUMER_PROTOCOL, EMPTY, NONE, PREPARING_REBALANCE,
                                           STABLE, Group, GroupsMixin, Member, _now_ms)
from kafkalite.server.group.migration import MIGRATION_BIDIRECTIONAL, MigrationMixin
from kafkalite.server.group.offsets import OffsetsMixin
from kafkalite.server.share.share_group import ShareGroupCoordinator
from kafkalite.server.share.share_state_log import parse_coordinator_key
from kafkalite.server.group.group_log import GroupMetadataLog
from kafkalite.server.network.requests import RequestContext

log = logging.getLogger("kafkalite.coordinator")
NO_NODE = {"node_id": -1, "host": "", "port": -1}   # a FindCoordinator key not answered
SHARE_COORDINATOR_KEYS_FROM = 6         # FindCoordinator's first version with key type 2


class GroupCoordinator(ClassicGroupMixin, OffsetsMixin, MigrationMixin, GroupAdminMixin,
                       GroupsMixin):
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

    def close(self) -> None:
        self.store.close()

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
