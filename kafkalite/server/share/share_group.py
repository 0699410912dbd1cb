"""Share groups (KIP-932), coordinator side: membership and assignment.

A *share* group is Kafka's queue: its members share partitions, and each
record is handed to one member at a time by the partition's leader
(share_partition.py), which tracks what each member acquired and
acknowledged. The coordinator only says which partitions each member
fetches from:

- Members send ShareGroupHeartbeat (API 76): member epoch 0 joins (the
  coordinator makes the member id when the member sends none), -1 leaves,
  any other epoch must be the member's current one (else
  FENCED_MEMBER_EPOCH; an unknown member id gets UNKNOWN_MEMBER_ID).
- The **group epoch** bumps when a member joins, leaves, times out or
  changes its subscription, or a subscribed topic gains partitions. A new
  target assignment is then computed by the *simple* assignor below and
  every member takes its part at its next heartbeat, at once: partitions
  are shared, so there is nothing to revoke first and no member waits for
  another (Kafka's share groups have no reconciliation either).
- The simple assignor (``assign_simple``), per topic, over the topic's
  subscribers in member-id order: with at least as many partitions as
  subscribers, partitions are dealt round-robin (each partition one
  member); with fewer, members are dealt round-robin over the partitions
  (each member one partition, each partition ``members / partitions``
  members, rounded). Either way every partition has a member and every
  member a partition: what Kafka's share assignor promises.
- A member that sends no heartbeat for the session timeout is removed;
  records it held are released by the partition leaders when their
  acquisition locks expire, not by the coordinator.

Membership lives in memory only: after a restart members get
UNKNOWN_MEMBER_ID and rejoin with epoch 0 (the records' state is the share
coordinator's and survives: share_coordinator.py, share_partition.py); a
group the share coordinator has state of exists again, empty.

The share-partition start offsets (SPSO) are the share coordinator's
(``attach_state``): DescribeShareGroupOffsets (API 90) reads them there;
AlterShareGroupOffsets (API 91) needs a group without members (else
NON_EMPTY_GROUP) and starts each share-partition afresh at the given offset
under a new state epoch there, then has the partitions' leaders drop what
they hold of the group (``state_reset``), so that they read it again (a
leader that writes first is fenced by the epoch). DeleteGroups deletes the
group's state there too.

Who may call: the group coordinator (coordinator.py), on the supervisor's
thread: it routes ShareGroupHeartbeat, ShareGroupDescribe and the offsets
APIs here, lists
share groups in ListGroups, and calls ``tick()`` from its own.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.server.topic import INTERNAL_TOPICS

log = logging.getLogger("kafkalite.share_group")

NONE = 0
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
SIMPLE = "simple"
NO_TOPIC_ID = uuid.UUID(int=0)

# group states, as ListGroups and ShareGroupDescribe show them
EMPTY = "Empty"
STABLE = "Stable"


@dataclass
class ShareGroupMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: list = field(default_factory=list)
    member_epoch: int = 0
    assigned: frozenset = frozenset()              # (topic id, partition)
    last_heartbeat: float = 0.0                    # monotonic s


@dataclass
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict = field(default_factory=dict)    # member id -> ShareGroupMember
    target: dict = field(default_factory=dict)     # member id -> frozenset of partitions
    subscription_metadata: dict = field(default_factory=dict)   # topic -> (id, partitions)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def assign_simple(members: dict, topics: dict) -> dict:
    """{member id: frozenset((topic id, partition))}: every partition of a
    subscribed topic to at least one of its subscribers, every subscriber at
    least one partition of each topic it subscribes to (see the module
    docstring)."""
    out: dict = {mid: set() for mid in members}
    for name, (tid, count) in sorted(topics.items()):
        subs = sorted(mid for mid, m in members.items() if name in m.subscribed_topic_names)
        if not subs or not count:
            continue
        if count >= len(subs):
            for p in range(count):
                out[subs[p % len(subs)]].add((tid, p))
        else:
            for i, mid in enumerate(subs):
                out[mid].add((tid, i % count))
    return {mid: frozenset(tps) for mid, tps in out.items()}


def _error(code: int, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "member_id": None, "member_epoch": -1, "heartbeat_interval_ms": 0,
            "assignment": None}


class ShareGroupCoordinator:
    """ShareGroupHeartbeat and ShareGroupDescribe over the share groups."""

    def __init__(self, *, topics, taken, session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 5_000, clock=time.monotonic):
        self.topics = topics                      # () -> {name: TopicMetadata}
        self.taken = taken                        # group id -> True if another kind of group has it
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # group id -> its own group configs (group_config.py), which override
        # the two above; set by the supervisor (the controller keeps them)
        self.group_config = lambda group_id: {}
        self._clock = clock
        self.groups: dict[str, ShareGroup] = {}
        # set by the supervisor: the share coordinator (attach_state), the
        # partitions' leader epochs, and how the leaders drop a group's state
        self.state = None                         # share_coordinator.ShareCoordinator
        self.leader_epoch_of = lambda tp: -1      # (topic, index) -> leader epoch
        self.state_reset = lambda gid: None       # group id -> None

    # ---- ShareGroupHeartbeat -------------------------------------------------------------------

    def heartbeat(self, ctx, body: dict) -> dict:
        try:
            return self._heartbeat(ctx, body)
        except KafkaError as exc:
            return _error(exc.code, str(exc) or exc.name)

    def _heartbeat(self, ctx, body: dict) -> dict:
        gid, mid, epoch = body["group_id"], body["member_id"], body["member_epoch"]
        names = body.get("subscribed_topic_names")
        if not gid:
            raise errors.InvalidRequestError("GroupId can't be empty.")
        if epoch < LEAVE_EPOCH:
            raise errors.InvalidRequestError(f"MemberEpoch {epoch} is invalid.")
        if epoch != JOIN_EPOCH and not mid:
            raise errors.InvalidRequestError("MemberId can't be empty.")
        if epoch == JOIN_EPOCH and names is None:
            raise errors.InvalidRequestError("SubscribedTopicNames must be set in first request.")
        sg = self.groups.get(gid)
        if sg is None:
            if self.taken(gid):
                raise errors.GroupIdNotFoundError(f"Group {gid} is not a share group.")
            if epoch != JOIN_EPOCH:
                # as Kafka's getOrMaybeCreateShareGroup: only a join creates
                raise errors.GroupIdNotFoundError(f"Share group {gid} not found.")
            sg = self.groups[gid] = ShareGroup(gid)
        now = self._clock()
        if epoch == LEAVE_EPOCH:
            m = sg.members.get(mid)
            if m is None:
                raise errors.UnknownMemberIdError(f"Member {mid} is not a member of group {gid}.")
            self.remove_member(sg, m, f"member {mid} left the group")
            return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                    "member_id": mid, "member_epoch": LEAVE_EPOCH, "heartbeat_interval_ms": 0,
                    "assignment": None}
        m = sg.members.get(mid) if mid else None
        if epoch == JOIN_EPOCH:
            if m is None:
                host = "/" + ctx.client_host if ctx is not None else ""
                m = ShareGroupMember(mid or str(uuid.uuid4()), body.get("rack_id"), "", host)
                sg.members[m.member_id] = m
                self._bump(sg, f"member {m.member_id} joined")
            m.assigned = frozenset()       # a member (re)joining holds nothing yet
        elif m is None:
            raise errors.UnknownMemberIdError(f"Member {mid} is not a member of group {gid}.")
        elif epoch != m.member_epoch:
            raise errors.FencedMemberEpochError(
                f"The share group member has member epoch {epoch}, the group coordinator "
                f"knows {m.member_epoch}. The member must rejoin.")
        before = (m.assigned, m.member_epoch)
        m.last_heartbeat = now
        if ctx is not None:
            m.client_id = ctx.header.client_id or m.client_id
        if body.get("rack_id") is not None:
            m.rack_id = body["rack_id"]
        if names is not None and sorted(set(names)) != m.subscribed_topic_names:
            m.subscribed_topic_names = sorted(set(names))
            self._bump(sg, f"member {m.member_id} changed its subscription")
        self._refresh_target(sg)
        m.assigned = sg.target.get(m.member_id, frozenset())
        m.member_epoch = sg.assignment_epoch
        send = epoch == JOIN_EPOCH or (m.assigned, m.member_epoch) != before
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "member_id": m.member_id, "member_epoch": m.member_epoch,
                "heartbeat_interval_ms": int(self.group_config(sg.group_id).get(
                    "share.heartbeat.interval.ms", self.heartbeat_interval_ms)),
                "assignment": {"topic_partitions": _by_topic_id(m.assigned)} if send else None}

    # ---- the group's state -----------------------------------------------------------------------

    def _bump(self, sg: ShareGroup, reason: str) -> None:
        sg.group_epoch += 1
        log.info("share group %s: epoch %d: %s", sg.group_id, sg.group_epoch, reason)

    def remove_member(self, sg: ShareGroup, m: ShareGroupMember, reason: str) -> None:
        sg.members.pop(m.member_id, None)
        sg.target.pop(m.member_id, None)
        self._bump(sg, reason)

    def _refresh_target(self, sg: ShareGroup) -> None:
        """Bump the group epoch if the subscribed topics changed (created,
        gained partitions), and compute the target when it is behind."""
        topics = self.topics()
        metadata = {}
        for name in sg.subscribed_topics():
            t = topics.get(name)
            if t is not None and name not in INTERNAL_TOPICS:
                metadata[name] = (t.topic_id, len(t.partitions))
        if metadata != sg.subscription_metadata:
            sg.subscription_metadata = metadata
            if sg.group_epoch == sg.assignment_epoch:
                self._bump(sg, "the subscribed topics changed")
        if sg.group_epoch != sg.assignment_epoch:
            sg.target = assign_simple(sg.members, metadata)
            sg.assignment_epoch = sg.group_epoch

    def tick(self) -> None:
        """Remove members past their session timeout."""
        now = self._clock()
        for sg in list(self.groups.values()):
            session_ms = int(self.group_config(sg.group_id).get("share.session.timeout.ms",
                                                                self.session_timeout_ms))
            for m in list(sg.members.values()):
                if now - m.last_heartbeat > session_ms / 1000.0:
                    log.info("share group %s: member %s missed its session timeout (%d ms)",
                             sg.group_id, m.member_id, session_ms)
                    self.remove_member(sg, m, f"member {m.member_id} timed out")

    def delete(self, gid: str) -> int:
        """DeleteGroups of a share group: the error code."""
        sg = self.groups.get(gid)
        if sg is None:
            return errors.GroupIdNotFoundError.code
        if sg.members:
            return errors.NonEmptyGroupError.code
        del self.groups[gid]
        if self.state is not None:
            self.state.delete_group(gid)
        return NONE

    # ---- ShareGroupDescribe ----------------------------------------------------------------------

    def describe(self, ctx, body: dict) -> dict:
        out = []
        names = {t.topic_id: name for name, t in self.topics().items()}
        for gid in body["group_ids"]:
            sg = self.groups.get(gid)
            if sg is None:
                out.append({"error_code": errors.GroupIdNotFoundError.code,
                            "error_message": f"Group {gid} not found.", "group_id": gid,
                            "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                            "assignor_name": "", "members": []})
                continue
            self._refresh_target(sg)
            out.append({
                "error_code": NONE, "error_message": None, "group_id": gid,
                "group_state": sg.state, "group_epoch": sg.group_epoch,
                "assignment_epoch": sg.assignment_epoch, "assignor_name": SIMPLE,
                "members": [{
                    "member_id": m.member_id, "rack_id": m.rack_id,
                    "member_epoch": m.member_epoch, "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": m.subscribed_topic_names,
                    "assignment": {"topic_partitions": [
                        {"topic_id": t["topic_id"], "topic_name": names.get(t["topic_id"], ""),
                         "partitions": t["partitions"]} for t in _by_topic_id(m.assigned)]},
                } for m in sg.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}


    # ---- DescribeShareGroupOffsets and AlterShareGroupOffsets ------------------------------

    def attach_state(self, state) -> None:
        """The share coordinator (share_coordinator.py) keeps the
        share-partitions' state: a group some share-partition has state of
        exists, empty, until members join (after a restart too)."""
        self.state = state
        for gid in state.groups():
            if not self.taken(gid):
                self.groups.setdefault(gid, ShareGroup(gid))

    def _kind_error(self, gid: str) -> KafkaError | None:
        if not gid:
            return errors.InvalidRequestError("GroupId can't be empty.")
        if gid not in self.groups and self.taken(gid):
            return errors.GroupIdNotFoundError(f"Group {gid} is not a share group.")
        return None

    def describe_offsets(self, ctx, body: dict) -> dict:
        return {"throttle_time_ms": 0,
                "groups": [self._describe_group_offsets(g) for g in body["groups"]]}

    def _describe_group_offsets(self, g: dict) -> dict:
        gid = g["group_id"]
        err = self._kind_error(gid)
        if err is None and gid not in self.groups:
            err = errors.GroupIdNotFoundError(f"Group {gid} not found.")
        if err is not None:
            return {"group_id": gid, "topics": [], "error_code": err.code,
                    "error_message": str(err)}
        topics = self.topics()
        out: dict = {}                            # (topic, index) -> partition answer
        if g.get("topics") is None:
            # every share-partition of the group the share coordinator has
            names = {t.topic_id: name for name, t in topics.items()}
            asked = [(names[tid], p) for (group, tid, p) in self.state.states
                     if group == gid and tid in names]
        else:
            asked = [(t["topic_name"], index) for t in g["topics"] for index in t["partitions"]]
        for name, index in asked:
            meta = topics.get(name)
            if meta is None or not 0 <= index < len(meta.partitions):
                out[(name, index)] = _offset_error(index, errors.UnknownTopicOrPartitionError(
                    f"{name}-{index} does not exist"))
                continue
            leader = self.leader_epoch_of((name, index))
            out[(name, index)] = {
                "partition_index": index, "error_code": NONE, "error_message": None,
                "start_offset": self.state.summary(gid, meta.topic_id, index),
                "leader_epoch": leader}
        return {"group_id": gid, "topics": _offsets_by_topic(out, topics),
                "error_code": NONE, "error_message": None}

    def alter_offsets(self, ctx, body: dict) -> dict:
        gid = body["group_id"]
        topics = self.topics()
        out: dict = {}
        err = self._kind_error(gid)
        sg = self.groups.get(gid)
        if err is None and sg is not None and sg.members:
            err = errors.NonEmptyGroupError(
                f"Share group {gid} has {len(sg.members)} member(s): its offsets can be "
                f"reset only while it has none.")
        starts: dict = {}                         # (topic id, index) -> start offset
        names: dict = {}                          # (topic id, index) -> (topic, index)
        for t in body["topics"]:
            for p in t["partitions"]:
                index, offset = p["partition_index"], p["start_offset"]
                tp = (t["topic_name"], index)
                meta = topics.get(tp[0])
                if err is not None:
                    out[tp] = _offset_error(index, err)
                elif meta is None or not 0 <= index < len(meta.partitions):
                    out[tp] = _offset_error(index, errors.UnknownTopicOrPartitionError(
                        f"{tp[0]}-{index} does not exist"))
                elif offset < 0:
                    out[tp] = _offset_error(index, errors.InvalidRequestError(
                        f"start offset {offset} of {tp[0]}-{index} is negative"))
                else:
                    starts[(meta.topic_id, index)] = offset
                    names[(meta.topic_id, index)] = tp
                    out[tp] = _offset_error(index, None)
        if starts:
            if sg is None:
                self.groups[gid] = ShareGroup(gid)    # Kafka's alter makes the group too
            for key, exc in self.state.initialize(gid, starts).items():
                out[names[key]] = _offset_error(key[1], exc)
            # the leaders drop what they hold of the group and read the new state
            self.state_reset(gid)
        return {"throttle_time_ms": 0, "responses": [
            {"topic_name": t["topic_name"], "topic_id": t["topic_id"],
             "partitions": [{k: p[k] for k in ("partition_index", "error_code",
                                               "error_message")}
                            for p in t["partitions"]]}
            for t in _offsets_by_topic(out, topics)]}


    def delete_offsets(self, ctx, body: dict) -> dict:
        """DeleteShareGroupOffsets (Kafka 4.1): forget the group's state of
        whole topics, only while it has no members; a topic it holds no
        state of is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers one it
        never initialized. As Kafka's GroupCoordinatorService, the empty
        id is INVALID_GROUP_ID and no topics nothing to do, before the
        group is looked up."""
        gid = body["group_id"]
        if not body["topics"] and gid:
            return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                    "responses": []}
        err = errors.InvalidGroupIdError("The group id can't be empty.") if not gid \
            else self._kind_error(gid)
        sg = self.groups.get(gid)
        if err is None and sg is None and gid not in (self.state.groups() if self.state else ()):
            err = errors.GroupIdNotFoundError(f"Group {gid} not found.")
        if err is None and sg is not None and sg.members:
            err = errors.NonEmptyGroupError(
                f"Share group {gid} has {len(sg.members)} member(s): its offsets can be "
                f"deleted only while it has none.")
        if err is not None:
            return {"throttle_time_ms": 0, "error_code": err.code,
                    "error_message": str(err) or err.name, "responses": []}
        topics = self.topics()
        responses = []
        for t in body["topics"]:
            name = t["topic_name"]
            meta = topics.get(name)
            out = {"topic_name": name, "topic_id": meta.topic_id if meta else NO_TOPIC_ID,
                   "error_code": NONE, "error_message": None}
            try:
                if meta is None or self.state is None or not self.state.delete_group_topic(
                        gid, meta.topic_id):
                    raise errors.UnknownTopicOrPartitionError(
                        f"Share group {gid} has no offsets of topic {name}.")
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, str(exc) or exc.name
            responses.append(out)
        self.state_reset(gid)
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "responses": responses}


def _offset_error(index: int, exc: KafkaError | None) -> dict:
    if exc is None:
        return {"partition_index": index, "start_offset": -1, "leader_epoch": -1,
                "error_code": NONE, "error_message": None}
    return {"partition_index": index, "start_offset": -1, "leader_epoch": -1,
            "error_code": exc.code, "error_message": str(exc) or exc.name}


def _offsets_by_topic(out: dict, topics: dict) -> list:
    by: dict = {}
    for (name, _), p in sorted(out.items()):
        by.setdefault(name, []).append(p)
    return [{"topic_name": name, "topic_id": topics[name].topic_id if name in topics
             else NO_TOPIC_ID, "partitions": ps} for name, ps in by.items()]


def _by_topic_id(tps) -> list:
    by: dict = {}
    for tid, p in tps:
        by.setdefault(tid, []).append(p)
    return [{"topic_id": tid, "partitions": sorted(ps)} for tid, ps in by.items()]
