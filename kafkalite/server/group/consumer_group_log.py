"""A KIP-848 consumer group's state as records of ``__consumer_offsets``.

On-disk format: the records Kafka's group coordinator writes for consumer
groups (kafkalite/protocol/messages/group_records.py), in the group's
partition of ``__consumer_offsets`` beside its committed offsets:

    key v3 (group)          -> ConsumerGroupMetadataValue: the group epoch
    key v5 (group, member)  -> ConsumerGroupMemberMetadataValue: subscription,
                               client, timeouts, classic protocols
    key v6 (group)          -> ConsumerGroupTargetAssignmentMetadataValue
    key v7 (group, member)  -> ConsumerGroupTargetAssignmentMemberValue
    key v8 (group, member)  -> ConsumerGroupCurrentMemberAssignmentValue:
                               member epochs, state, assigned and
                               pending-revocation partitions

A null value deletes the key (a member gone, the group deleted).

The coordinator changes a group in memory and then writes what changed:
``GroupRecords.snapshot`` renders a group as {key: value} (re-encoding only
records whose inputs changed), and ``diff`` turns two
snapshots into the records to append (changed keys, tombstones for keys
that went away), so every path that changes a group (heartbeats, classic
requests of classic members, timeouts, migrations, deletion) is written the
same way. After a restart ``restore`` rebuilds the groups from the replayed
records: members keep their epochs and assignments and go on heartbeating
as if nothing happened, each given a full session timeout to do so.

Who may call: the group coordinator (coordinator.py) on the supervisor's
thread; group_log.py's replay hands records here through ``replay``.
"""
from __future__ import annotations

import time
from collections import Counter

from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.messages.group_records import (
    CONSUMER_GROUP_CURRENT_ASSIGNMENT_KEY_VERSION as CURRENT,
    CONSUMER_GROUP_MEMBER_KEY_VERSIONS,
    CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION as MEMBER,
    CONSUMER_GROUP_METADATA_KEY_VERSION as GROUP,
    CONSUMER_GROUP_TARGET_MEMBER_KEY_VERSION as TARGET_MEMBER,
    CONSUMER_GROUP_TARGET_METADATA_KEY_VERSION as TARGET,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from kafkalite.protocol.messages.groups import partitions_by_topic_id, topic_id_partitions
from kafkalite.server.group.consumer_group import (STABLE, UNRELEASED_PARTITIONS,
                                             UNREVOKED_PARTITIONS, UNIFORM, ClassicMetadata,
                                             ConsumerGroup, ConsumerGroupMember)

# Kafka's MemberState codes
_STATE_CODES = {STABLE: 0, UNRELEASED_PARTITIONS: 1, UNREVOKED_PARTITIONS: 2}
_STATES = {code: state for state, code in _STATE_CODES.items()}
_VALUES = {GROUP: ConsumerGroupMetadataValue, MEMBER: ConsumerGroupMemberMetadataValue,
           TARGET: ConsumerGroupTargetAssignmentMetadataValue,
           TARGET_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
           CURRENT: ConsumerGroupCurrentMemberAssignmentValue}


def _key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    if member_id is None:
        return encode_data(ConsumerGroupKey, version, {"group_id": group_id})
    return encode_data(ConsumerGroupMemberKey, version,
                       {"group_id": group_id, "member_id": member_id})


class GroupRecords:
    """Renders groups as records, remembering each record's inputs so that
    a heartbeat re-encodes only what changed: a group of 50 members
    heartbeating every 100 ms would otherwise encode 7,500 records a second
    on the supervisor's thread."""

    def __init__(self):
        # group id -> {(key version, member id): (inputs, key, value)}
        self._cache: dict[str, dict] = {}

    def forget(self, group_id: str) -> None:
        self._cache.pop(group_id, None)

    def snapshot(self, cg: ConsumerGroup | None) -> dict[bytes, bytes]:
        """The records that describe ``cg`` now ({} for a group that is gone)."""
        if cg is None:
            return {}
        gid = cg.group_id
        old = self._cache.get(gid, {})
        new: dict = {}
        out: dict = {}

        def put(version, mid, inputs, encode):
            hit = old.get((version, mid))
            if hit is not None and hit[0] == inputs:
                entry = hit
            else:
                entry = (inputs, hit[1] if hit is not None else _key(version, gid, mid),
                         encode())
            new[(version, mid)] = entry
            out[entry[1]] = entry[2]

        put(GROUP, None, cg.group_epoch, lambda: encode_data(
            ConsumerGroupMetadataValue, 0, {"epoch": cg.group_epoch}))
        put(TARGET, None, cg.assignment_epoch, lambda: encode_data(
            ConsumerGroupTargetAssignmentMetadataValue, 0,
            {"assignment_epoch": cg.assignment_epoch}))
        for mid, m in cg.members.items():
            classic = m.classic
            put(MEMBER, mid, (m.instance_id, m.rack_id, m.client_id, m.client_host,
                              tuple(m.subscribed_topic_names), m.subscribed_topic_regex,
                              m.rebalance_timeout_ms, m.server_assignor,
                              None if classic is None else
                              (classic.session_timeout_ms, tuple(classic.protocols))),
                lambda: _member_metadata(m))
            put(CURRENT, mid, (m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                               m.pending_revocation),
                lambda: encode_data(ConsumerGroupCurrentMemberAssignmentValue, 0, {
                    "member_epoch": m.member_epoch,
                    "previous_member_epoch": m.previous_member_epoch,
                    "state": _STATE_CODES[m.state],
                    "assigned_partitions": partitions_by_topic_id(m.assigned),
                    "partitions_pending_revocation": partitions_by_topic_id(
                        m.pending_revocation)}))
        for mid, tps in cg.target.items():
            put(TARGET_MEMBER, mid, tps, lambda: encode_data(
                ConsumerGroupTargetAssignmentMemberValue, 0,
                {"topic_partitions": partitions_by_topic_id(tps)}))
        self._cache[gid] = new
        return out


def _member_metadata(m: ConsumerGroupMember) -> bytes:
    meta = {"instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
            "client_host": m.client_host, "subscribed_topic_names": list(m.subscribed_topic_names),
            "subscribed_topic_regex": m.subscribed_topic_regex,
            "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor}
    if m.classic is not None:
        meta["classic_member_metadata"] = {
            "session_timeout_ms": m.classic.session_timeout_ms,
            "supported_protocols": [{"name": n, "metadata": md} for n, md in m.classic.protocols]}
    return encode_data(ConsumerGroupMemberMetadataValue, 0, meta)


def diff(before: dict[bytes, bytes], after: dict[bytes, bytes]) -> list:
    """The (key, value or None) records that take ``before`` to ``after``."""
    out = [(k, v) for k, v in after.items() if before.get(k) != v]
    out += [(k, None) for k in before if k not in after]
    return out


def replay(version: int, key, value, groups: dict) -> None:
    """Apply one replayed record to ``groups``: group id -> {"records":
    {key bytes: value bytes}, "epoch", "target_epoch", "members",
    "target", "current"} (decoded bodies; raises ProtocolError on a bad one)."""
    schema = ConsumerGroupMemberKey if version in CONSUMER_GROUP_MEMBER_KEY_VERSIONS \
        else ConsumerGroupKey
    k = decode_data(schema, key)[1]
    g = groups.setdefault(k["group_id"], {"records": {}, "epoch": None, "target_epoch": 0,
                                          "members": {}, "target": {}, "current": {}})
    mid = k.get("member_id")
    table = {MEMBER: "members", TARGET_MEMBER: "target", CURRENT: "current"}.get(version)
    if value is None:
        g["records"].pop(bytes(key), None)
        if table is not None:
            g[table].pop(mid, None)
        elif version == GROUP:
            g["epoch"] = None
        return
    body = decode_data(_VALUES[version], value)[1]
    g["records"][bytes(key)] = bytes(value)
    if table is not None:
        g[table][mid] = body
    elif version == GROUP:
        g["epoch"] = body["epoch"]
    else:
        g["target_epoch"] = body["assignment_epoch"]


def restore(group_id: str, stored: dict, clock=time.monotonic) -> ConsumerGroup | None:
    """The consumer group the replayed records describe (None if its group
    epoch record was deleted); its members' sessions start now."""
    if stored["epoch"] is None:
        return None
    now = clock()
    cg = ConsumerGroup(group_id, group_epoch=stored["epoch"],
                       assignment_epoch=stored["target_epoch"])
    for mid, meta in stored["members"].items():
        cur = stored["current"].get(mid)
        classic = meta.get("classic_member_metadata") or {}
        m = ConsumerGroupMember(
            mid, meta["instance_id"], meta["rack_id"], meta["client_id"], meta["client_host"],
            meta["rebalance_timeout_ms"],
            subscribed_topic_names=list(meta["subscribed_topic_names"]),
            subscribed_topic_regex=meta["subscribed_topic_regex"],
            server_assignor=meta["server_assignor"], last_heartbeat=now,
            classic=ClassicMetadata(classic["session_timeout_ms"],
                                    [(p["name"], bytes(p["metadata"]))
                                     for p in classic["supported_protocols"]])
            if classic.get("supported_protocols") else None)
        if cur is not None:
            m.member_epoch, m.previous_member_epoch = cur["member_epoch"], \
                cur["previous_member_epoch"]
            m.state = _STATES.get(cur["state"], STABLE)
            m.assigned = topic_id_partitions(cur["assigned_partitions"])
            m.pending_revocation = topic_id_partitions(cur["partitions_pending_revocation"])
            if m.state == UNREVOKED_PARTITIONS:
                m.revocation_deadline = now + m.rebalance_timeout_ms / 1000.0
        cg.members[mid] = m
        if m.instance_id is not None:
            cg.static[m.instance_id] = mid
        for tp in m.assigned | m.pending_revocation:
            cg.owners[tp] = mid
    cg.target = {mid: topic_id_partitions(t["topic_partitions"])
                 for mid, t in stored["target"].items()}
    wanted = Counter(m.server_assignor for m in cg.members.values() if m.server_assignor)
    cg.assignor = wanted.most_common(1)[0][0] if wanted else UNIFORM
    return cg
