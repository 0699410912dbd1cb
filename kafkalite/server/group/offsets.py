"""Committed offsets (Kafka's ``OffsetMetadataManager``): OffsetCommit,
OffsetFetch, OffsetDelete, TxnOffsetCommit and the transaction markers
that settle it, and offset expiry, for the groups of the group table
whatever their protocol.

- A commit is checked against the committing member's group (its
  generation, or a consumer group's member epoch) and written to
  ``__consumer_offsets`` (group_log.py) before it is answered; a commit
  from outside any group is taken for an empty group.
- TxnOffsetCommit: offsets committed inside a producer's transaction
  (checked with the transaction coordinator through ``verify_txn``; v5,
  transactions v2, adds the group's offsets to the transaction there) are
  written as part of that transaction and stay pending, invisible to
  OffsetFetch, until ``complete_transaction`` -- the transaction
  coordinator's marker for this partition -- commits or discards them.
  While offsets are pending for a partition, OffsetFetch with
  ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for it (KIP-447).
- Offsets of an empty group expire ``offsets_retention_minutes`` after the
  group became empty (after their commit, for groups that never had
  members); a group with none left is deleted.

Share groups have no committed offsets here: their records' state (and
start offsets) is kept by the partition leaders (replica/share_partition.py).

Which process runs it: the supervisor, on its event loop, through
coordinator.py (the handlers, ``tick()``) and the transaction coordinator
(``complete_transaction``).

What it may import: groups.py, classic_group.py (a classic member's
generation), consumer_group.py (a consumer group member's epoch),
group_log.py, network/, kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.server.group.classic_group import ClassicGroupManager
from kafkalite.server.group.consumer_group import ConsumerGroupCoordinator
from kafkalite.server.group.group_log import GroupMetadataLog, OffsetAndMetadata
from kafkalite.server.group.groups import (INVALID_GROUP_ID, NONE, ConsumerGroupRecords, Group,
                                           now_ms)
from kafkalite.server.network.requests import RequestContext

log = logging.getLogger("kafkalite.coordinator")
# Transaction verification answers a TxnOffsetCommit turns into
# COORDINATOR_LOAD_IN_PROGRESS (see txn_offset_commit).
_VERIFY_RETRIABLE = frozenset({errors.ConcurrentTransactionsError.code,
                               errors.CoordinatorLoadInProgressError.code,
                               errors.CoordinatorNotAvailableError.code,
                               errors.NotCoordinatorError.code, errors.RequestTimedOutError.code,
                               errors.NetworkError.code})
OFFSET_METADATA_MAX_BYTES = 4096


class OffsetMetadataManager:
    """The committed offsets of the group table ``groups`` and the
    transactional ones awaiting their markers."""

    def __init__(self, groups: dict[str, Group], store: GroupMetadataLog,
                 classic: ClassicGroupManager, consumer: ConsumerGroupCoordinator,
                 consumer_records: ConsumerGroupRecords, *, partition_count,
                 offsets_retention_ms: int, clock):
        self.groups = groups
        self.store = store
        self.classic = classic
        self.consumer = consumer
        self.consumer_records = consumer_records
        self.partition_count = partition_count    # topic -> partition count, or None if unknown
        self.offsets_retention_ms = offsets_retention_ms
        self._clock = clock                       # wall-clock ms: commit times and expiry
        # producer id -> group -> {(topic, partition): OffsetAndMetadata} awaiting its marker
        self.pending_txn_offsets: dict[int, dict[str, dict]] = {}
        # (transactional id, producer id, epoch, group) -> error code; set by the supervisor
        self.verify_txn = lambda tid, pid, epoch, group, add=False: \
            errors.CoordinatorNotAvailableError.code

    def load(self, stored_offsets: dict, pending: dict) -> None:
        """The offsets replayed from ``__consumer_offsets`` (after the
        classic groups: a group with offsets only is made Empty) and the
        transactional ones still awaiting their marker."""
        self.pending_txn_offsets = pending
        for gid, offsets in stored_offsets.items():
            g = self.groups.get(gid) or self.groups.setdefault(gid, Group(gid))
            g.offsets.update(offsets)

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
                self.consumer_records.drop(g)
                del self.groups[g.group_id]

    def offset_commit(self, ctx: RequestContext, body: dict):
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
        else:
            code = self.classic.validate_offset_commit(g, member_id, instance, generation)
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

    def txn_offset_commit(self, ctx: RequestContext, body: dict):
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
            else:
                # KIP-447: a consumer's group metadata fences zombies of
                # earlier generations; without it, the commit is a producer's
                code = self.classic.validate_offset_commit(
                    g, member_id, body.get("group_instance_id"), generation, transactional=True)
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

    def offset_fetch(self, ctx: RequestContext, body: dict):
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

    def offset_delete(self, ctx: RequestContext, body: dict):
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
            self.store.write_offsets(g.group_id, deleted, now_ms())
            for tp in deleted:
                del g.offsets[tp]
        return {"error_code": NONE, "throttle_time_ms": 0, "topics": topics_out}
