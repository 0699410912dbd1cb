"""The next-generation consumer group protocol (KIP-848), coordinator side.

A *consumer* group (``group.protocol=consumer`` in Kafka's clients) has no
JoinGroup/SyncGroup rounds and no client-side leader: each member sends
ConsumerGroupHeartbeat (API 68) and the coordinator answers with the
partitions it may own now.

- The **group epoch** bumps whenever what the assignment depends on
  changes: a member joins or leaves (or is fenced), a member's subscription
  or assignor changes, or a subscribed topic gains partitions (or appears).
- When the group epoch is ahead of the **assignment epoch**, the
  server-side assignor (``uniform``, the default, or ``range``) computes the
  **target assignment** for every member, at the group epoch.
- Each member then converges on its target on its own, one heartbeat at a
  time (incremental reconciliation, no global barrier):

  * partitions it owns that its target takes away are *revoked* first: the
    member keeps its epoch and state UNREVOKED_PARTITIONS until a heartbeat's
    owned partitions no longer hold them (or it is fenced after its
    rebalance timeout);
  * then it moves to the target epoch and is given the target partitions no
    other member still owns; those still owned elsewhere wait (state
    UNRELEASED_PARTITIONS) and are handed over at a later heartbeat once
    their previous owner revoked them. A partition has at most one owner at
    any time (``ConsumerGroup.owners``).

- **Member epochs** fence zombies: a heartbeat with a newer epoch than the
  member's, or an older one that is not the previous epoch with owned
  partitions inside the current assignment (a lost response), gets
  FENCED_MEMBER_EPOCH; an unknown member id gets UNKNOWN_MEMBER_ID.
  OffsetCommit (v9+) uses the member epoch as its generation
  (STALE_MEMBER_EPOCH when it differs).
- Epoch -1 leaves the group; a static member (``group.instance.id``) leaves
  temporarily with epoch -2, keeps its assignment for its session timeout
  and a new incarnation joining under the same instance id takes it over
  without a rebalance (UNRELEASED_INSTANCE_ID while the old one is active).
- A member that sends no heartbeat for ``group.consumer.session.timeout.ms``
  is removed and its partitions move.

Classic members (KIP-848's online migration): a member of a classic
client in a consumer group joins with JoinGroup; its subscription and owned
partitions come from the consumer protocol's metadata and it is reconciled
as a heartbeat would reconcile it, then answered at once, never as the
leader, with its member epoch as generation. SyncGroup hands it what it
may own now (partitions it must revoke left out, which is how a
cooperative member learns to give them up), and its Heartbeat answers
REBALANCE_IN_PROGRESS -- rejoin -- while the group epoch is ahead of it,
it holds partitions to revoke, or the partitions it waits for are free.
A member that says it owns none of the partitions taken from it (an eager
member revokes everything before rejoining) moves on at once. Its own
session timeout applies; its commits are checked against its member epoch
with ILLEGAL_GENERATION. When the last consumer-protocol member leaves,
``only_classic_left`` lets migration.py turn the group back.

The state lives here, in memory; the group coordinator writes what each
request or tick changed to ``__consumer_offsets`` in Kafka's ConsumerGroup*
records (groups.py's ConsumerGroupRecords, consumer_group_log.py) and
restores the groups from them after a restart, so members carry on at their
epochs. Committed offsets go through offsets.py and its log (group_log.py)
like any group's.
Regular-expression subscriptions (ConsumerGroupHeartbeat v1) are evaluated
here, as Kafka does, against the non-internal topic names (a full match,
with the ``regex`` package and a time limit per match instead of Kafka's
RE2/J: a pattern that backtracks too long matches nothing); a topic created
later that matches bumps the group epoch at the next heartbeat.

Who may call: the group coordinator (coordinator.py), on the supervisor's
thread: it routes ConsumerGroupHeartbeat and ConsumerGroupDescribe here,
and the classic requests of a consumer group's classic members (``classic_*``),
asks ``validate_commit`` for OffsetCommit/OffsetFetch of consumer groups and
calls ``tick()`` from its own.
"""
from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import decode_subscription, encode_assignment
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.groups import partitions_by_topic_id, topic_id_partitions
from kafkalite.server.topic import INTERNAL_TOPICS

log = logging.getLogger("kafkalite.consumer_group")

NONE = 0
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# member states (Kafka's MemberState)
STABLE = "STABLE"
UNREVOKED_PARTITIONS = "UNREVOKED_PARTITIONS"
UNRELEASED_PARTITIONS = "UNRELEASED_PARTITIONS"

# group states (Kafka's ConsumerGroupState, as ListGroups/describe show them)
EMPTY = "Empty"
ASSIGNING = "Assigning"
RECONCILING = "Reconciling"
STABLE_GROUP = "Stable"

CONSUMER_PROTOCOL = "consumer"          # the classic protocol type of consumers
MEMBER_TYPE_CLASSIC, MEMBER_TYPE_CONSUMER = 0, 1    # ConsumerGroupDescribe v1's MemberType

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)

TopicPartition = tuple  # (topic id: uuid.UUID, partition: int)
REGEX_MATCH_TIMEOUT_S = 0.05     # per topic name; Kafka's RE2/J cannot backtrack at all


@dataclass
class ClassicMetadata:
    """What a member that speaks the classic protocol (JoinGroup, SyncGroup,
    Heartbeat) inside a consumer group brought along: its own session
    timeout and the protocols of its JoinGroup, kept for a downgrade."""
    session_timeout_ms: int
    protocols: list                                # [(name, subscription bytes)]


@dataclass
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_topic_names: list = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    topics: frozenset = frozenset()                # names, and the regex's matches
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: str = STABLE
    assigned: frozenset = frozenset()              # partitions it may own now
    pending_revocation: frozenset = frozenset()    # taken away, not yet acknowledged
    last_heartbeat: float = 0.0                    # monotonic s
    revocation_deadline: float | None = None       # monotonic s, in UNREVOKED_PARTITIONS
    classic: ClassicMetadata | None = None         # a classic-protocol member (migration)


@dataclass
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = UNIFORM
    members: dict = field(default_factory=dict)        # member id -> ConsumerGroupMember
    static: dict = field(default_factory=dict)         # instance id -> member id
    target: dict = field(default_factory=dict)         # member id -> frozenset of partitions
    owners: dict = field(default_factory=dict)         # partition -> member id owning it
    subscription_metadata: dict = field(default_factory=dict)  # topic -> (id, partitions)

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ASSIGNING
        if any(m.state != STABLE or m.member_epoch != self.assignment_epoch
               for m in self.members.values()):
            return RECONCILING
        return STABLE_GROUP

    def subscribed_topics(self) -> set:
        return {t for m in self.members.values() for t in m.topics}


# ---- server-side assignors ------------------------------------------------------------------

def assign_range(members: dict, topics: dict, current: dict) -> dict:
    """Kafka's range assignor: per topic, its subscribers in member-id order
    get consecutive ranges, the first ``partitions % subscribers`` one more."""
    out = {mid: set() for mid in members}
    for name, (tid, count) in sorted(topics.items()):
        subs = sorted(mid for mid, m in members.items() if name in m.topics)
        if not subs:
            continue
        quota, extra = divmod(count, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            n = quota + (1 if i < extra else 0)
            out[mid].update((tid, p) for p in range(start, start + n))
            start += n
    return {mid: frozenset(tps) for mid, tps in out.items()}


def assign_uniform(members: dict, topics: dict, current: dict) -> dict:
    """Kafka's uniform assignor, in spirit: balanced (member counts differ by
    at most one among members that could take each other's partitions) and
    sticky (a partition stays with its current target owner unless balance
    needs it elsewhere), for homogeneous and heterogeneous subscriptions."""
    subscribers: dict = {}                          # partition -> member ids that may own it
    names = {tid: name for name, (tid, _) in topics.items()}
    for name, (tid, count) in topics.items():
        subs = [mid for mid, m in members.items() if name in m.topics]
        for p in range(count):
            subscribers[(tid, p)] = subs
    out = {mid: set() for mid in members}
    previous = {tp: mid for mid, tps in current.items() if mid in members for tp in tps}
    unassigned = []
    for tp, subs in subscribers.items():
        if not subs:
            continue
        kept = previous.get(tp)
        if kept is not None and names[tp[0]] in members[kept].topics:
            out[kept].add(tp)
        else:
            unassigned.append(tp)
    # fewest candidates first, so constrained partitions find room
    for tp in sorted(unassigned, key=lambda tp: (len(subscribers[tp]), str(tp[0]), tp[1])):
        mid = min(subscribers[tp], key=lambda m: (len(out[m]), m))
        out[mid].add(tp)
    # one partition at a time from the most loaded member that has one another
    # member may take to the least loaded such member: no more moves than
    # balance needs
    moved = True
    while moved:
        moved = False
        order = sorted(out, key=lambda m: (-len(out[m]), m))
        least = len(out[order[-1]]) if order else 0
        for i, big in enumerate(order):
            if len(out[big]) - least <= 1:
                break                           # nobody may take one from here on
            # the next most loaded member: big gives while it is not below it
            runner_up = len(out[order[i + 1]]) if i + 1 < len(order) else 0
            for tp in sorted(out[big], key=lambda tp: (str(tp[0]), -tp[1])):
                if len(out[big]) < runner_up:
                    break
                small = min(subscribers[tp], key=lambda m: (len(out[m]), m))
                if len(out[big]) - len(out[small]) > 1:
                    out[big].discard(tp)
                    out[small].add(tp)
                    moved = True
            if moved:
                break
    return {mid: frozenset(tps) for mid, tps in out.items()}


ASSIGNOR_FUNCTIONS = {UNIFORM: assign_uniform, RANGE: assign_range}


def _join_error(member_id: str, code: int) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "generation_id": -1,
            "protocol_type": None, "protocol_name": "", "leader": "",
            "skip_assignment": False, "member_id": member_id, "members": []}


def _error(code: int, message: str | None = None, member_id: str | None = None,
           epoch: int = -1) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "member_id": member_id, "member_epoch": epoch, "heartbeat_interval_ms": 0,
            "assignment": None}


class ConsumerGroupCoordinator:
    """ConsumerGroupHeartbeat and ConsumerGroupDescribe over the consumer
    groups ``group_of`` hands out (the group coordinator owns the group
    table, migration.py makes and converts its consumer groups, offsets.py
    keeps the offsets)."""

    def __init__(self, *, topics, group_of, session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 5_000, clock=time.monotonic):
        self.topics = topics                      # () -> {name: TopicMetadata}
        # (group id, create) -> ConsumerGroup or None; raises KafkaError
        # (GROUP_ID_NOT_FOUND) when the id is a classic group in use
        self.group_of = group_of
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # group id -> its own group configs (group_config.py), which override
        # the two above; set by the supervisor (the controller keeps them)
        self.group_config = lambda group_id: {}
        self._clock = clock
        self.groups: dict[str, ConsumerGroup] = {}
        # cg -> bool: the group's last consumer-protocol member left;
        # migration.py may turn it back into a classic group (True)
        self.only_classic_left = lambda cg: False

    # ---- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, ctx, body: dict) -> dict:
        try:
            return self._heartbeat(ctx, body)
        except KafkaError as exc:
            return _error(exc.code, str(exc) or exc.name)

    def _heartbeat(self, ctx, body: dict) -> dict:
        gid, mid, epoch = body["group_id"], body["member_id"], body["member_epoch"]
        instance = body.get("instance_id")
        owned_raw = body.get("topic_partitions")
        if not gid:
            raise errors.InvalidRequestError("GroupId can't be empty.")
        if epoch < STATIC_LEAVE_EPOCH:
            raise errors.InvalidRequestError(f"MemberEpoch {epoch} is invalid.")
        if epoch != JOIN_EPOCH and not mid:
            raise errors.InvalidRequestError("MemberId can't be empty.")
        if epoch == STATIC_LEAVE_EPOCH and instance is None:
            raise errors.InvalidRequestError("InstanceId can't be null.")
        if epoch == JOIN_EPOCH:
            if body.get("rebalance_timeout_ms", -1) < 0:
                raise errors.InvalidRequestError("RebalanceTimeoutMs must be provided in first "
                                                 "request.")
            if owned_raw:
                raise errors.InvalidRequestError("TopicPartitions must be empty when (re-)joining.")
            if body.get("subscribed_topic_names") is None and not body.get(
                    "subscribed_topic_regex"):
                raise errors.InvalidRequestError("SubscribedTopicNames or SubscribedTopicRegex "
                                                 "must be set in first request.")
        assignor = body.get("server_assignor")
        # v0 has no regex (the decoder gives "" there; in v1 "" clears it)
        pattern = body.get("subscribed_topic_regex") if ctx is None or ctx.api_version >= 1 \
            else None
        if pattern:
            self._compile(pattern)
        if epoch == JOIN_EPOCH and body.get("subscribed_topic_names") is None and pattern:
            body = {**body, "subscribed_topic_names": []}
        if assignor is not None and assignor not in ASSIGNORS:
            raise errors.UnsupportedAssignorError(
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(ASSIGNORS)}.")
        cg = self.group_of(gid, create=epoch == JOIN_EPOCH)
        if cg is None:
            # Kafka's getOrMaybeCreateConsumerGroup / consumerGroup: only a
            # join creates a group; any other epoch names one that is gone
            raise errors.GroupIdNotFoundError(f"Consumer group {gid} not found.")
        if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(cg, mid, instance, epoch)
        now = self._clock()
        if epoch == JOIN_EPOCH:
            m = self._join(cg, ctx, mid or str(uuid.uuid4()), instance, body)
        else:
            m = self._known_member(cg, mid, instance, epoch, owned_raw)
        before = (m.assigned, m.member_epoch)
        m.last_heartbeat = now
        if ctx is not None:
            m.client_id = ctx.header.client_id or m.client_id
        if body.get("rack_id") is not None:
            m.rack_id = body["rack_id"]
        if body.get("rebalance_timeout_ms", -1) >= 0:
            m.rebalance_timeout_ms = body["rebalance_timeout_ms"]
        names = body.get("subscribed_topic_names")
        if names is not None and sorted(set(names)) != m.subscribed_topic_names:
            m.subscribed_topic_names = sorted(set(names))
        if pattern is not None:
            m.subscribed_topic_regex = pattern or None
        if assignor is not None and assignor != m.server_assignor:
            m.server_assignor = assignor
            self._bump(cg, f"member {m.member_id} asked for assignor {assignor}")
        self._refresh_target(cg)
        owned = None if owned_raw is None else topic_id_partitions(owned_raw)
        self._reconcile(cg, m, owned, now)
        send = (epoch == JOIN_EPOCH or (m.assigned, m.member_epoch) != before
                or (owned is not None and owned != m.assigned))
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "member_id": m.member_id, "member_epoch": m.member_epoch,
                "heartbeat_interval_ms": int(self.group_config(cg.group_id).get(
                    "consumer.heartbeat.interval.ms", self.heartbeat_interval_ms)),
                "assignment": {"topic_partitions": partitions_by_topic_id(m.assigned)}
                if send else None}

    def _join(self, cg: ConsumerGroup, ctx, mid: str, instance, body) -> ConsumerGroupMember:
        host = "/" + ctx.client_host if ctx is not None else ""
        if instance is not None:
            old_id = cg.static.get(instance)
            old = cg.members.get(old_id) if old_id is not None else None
            if old is not None and old_id != mid:
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    raise errors.UnreleasedInstanceIdError(
                        f"Static member {old_id} with instance id {instance} is not released.")
                old.client_host = host
                old.member_epoch = old.previous_member_epoch
                self._replace_static(cg, old, mid)
                return old
        m = cg.members.get(mid)
        if m is not None:
            # a member that rejoins with epoch 0 gave up all its partitions
            self._release(cg, m)
            m.assigned = m.pending_revocation = frozenset()
            m.member_epoch, m.previous_member_epoch, m.state = 0, -1, STABLE
            m.revocation_deadline = None
            self._bump(cg, f"member {mid} rejoined")
            return m
        m = ConsumerGroupMember(mid, instance, body.get("rack_id"), "", host,
                                body["rebalance_timeout_ms"])
        cg.members[mid] = m
        if instance is not None:
            cg.static[instance] = mid
        self._bump(cg, f"member {mid} joined")
        return m

    @staticmethod
    def _replace_static(cg: ConsumerGroup, old: ConsumerGroupMember, mid: str) -> None:
        """A static member's new incarnation ``mid`` takes over ``old``'s
        place, target and partitions."""
        old_id, old.member_id = old.member_id, mid
        del cg.members[old_id]
        cg.members[mid] = old
        cg.static[old.instance_id] = mid
        if old_id in cg.target:
            cg.target[mid] = cg.target.pop(old_id)
        for tp in old.assigned | old.pending_revocation:
            cg.owners[tp] = mid
        log.info("group %s: static member %s came back as %s", cg.group_id, old.instance_id,
                 mid)

    def _known_member(self, cg, mid, instance, epoch, owned_raw) -> ConsumerGroupMember:
        m = cg.members.get(mid)
        if m is None or m.classic is not None:
            raise errors.UnknownMemberIdError(
                f"Member {mid} is not a member of group {cg.group_id}"
                + (" that uses the consumer protocol." if m is not None else "."))
        if instance is not None and cg.static.get(instance) != mid:
            raise errors.FencedInstanceIdError(
                f"Instance id {instance} is used by another member of group {cg.group_id}.")
        if epoch > m.member_epoch:
            raise errors.FencedMemberEpochError(
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({m.member_epoch}). The member must abandon "
                "all its partitions and rejoin.")
        if epoch < m.member_epoch:
            # its last answer was lost: fine if it still owns a subset of what it has
            if (epoch != m.previous_member_epoch or owned_raw is None
                    or not topic_id_partitions(owned_raw) <= m.assigned):
                raise errors.FencedMemberEpochError(
                    f"The consumer group member has a smaller member epoch ({epoch}) than the "
                    f"one known by the group coordinator ({m.member_epoch}). The member must "
                    "abandon all its partitions and rejoin.")
        return m

    def _leave(self, cg: ConsumerGroup, mid: str, instance, epoch: int) -> dict:
        m = cg.members.get(mid)
        if m is None and instance is not None:
            m = cg.members.get(cg.static.get(instance))
        if m is None:
            raise errors.UnknownMemberIdError(
                f"Member {mid} is not a member of group {cg.group_id}.")
        if instance is not None and m.member_id != mid:
            raise errors.FencedInstanceIdError(
                f"Instance id {instance} is used by another member of group {cg.group_id}.")
        if epoch == STATIC_LEAVE_EPOCH:
            # keeps its assignment until its session times out or it comes back
            if m.member_epoch != STATIC_LEAVE_EPOCH:
                m.previous_member_epoch = m.member_epoch
            m.member_epoch = STATIC_LEAVE_EPOCH
            log.info("group %s: static member %s left temporarily", cg.group_id, mid)
        else:
            self.remove_member(cg, m, f"member {mid} left the group")
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "member_id": mid, "member_epoch": epoch, "heartbeat_interval_ms": 0,
                "assignment": None}

    # ---- classic members (KIP-848's online migration) ------------------------------------------

    def classic_join(self, ctx, body: dict, cg: ConsumerGroup) -> dict:
        """A classic JoinGroup to a consumer group with members: the member
        is one of the group's, its subscription and owned partitions taken
        from the consumer protocol's metadata, reconciled as a heartbeat
        would be, and answered at once -- never the leader (no members
        list; the group's server-side assignor decides), its generation
        its member epoch."""
        mid, instance = body["member_id"], body.get("group_instance_id")
        protocols = [(p["name"], bytes(p["metadata"])) for p in body["protocols"]]
        if body["protocol_type"] != CONSUMER_PROTOCOL or not protocols:
            return _join_error(mid, errors.InconsistentGroupProtocolError.code)
        try:
            version, subscription = decode_subscription(protocols[0][1])
        except ProtocolError:
            return _join_error(mid, errors.InconsistentGroupProtocolError.code)
        unknown = not mid
        if unknown:
            mid = f"{ctx.header.client_id or 'member'}-{uuid.uuid4()}"
            if instance is None and ctx.api_version >= 4:
                return _join_error(mid, errors.MemberIdRequiredError.code)
        now = self._clock()
        m = cg.members.get(mid)
        if instance is not None:
            old_id = cg.static.get(instance)
            old = cg.members.get(old_id) if old_id is not None else None
            if old is not None and old_id != mid:
                if not unknown:
                    return _join_error(mid, errors.FencedInstanceIdError.code)
                # a restarted static member takes its old incarnation's place
                # (the classic protocol has no temporary leave to wait for)
                self._replace_static(cg, old, mid)
                m = old
        if m is not None and m.classic is None:
            return _join_error(mid, errors.InconsistentGroupProtocolError.code)
        rebalance = body.get("rebalance_timeout_ms", -1)
        if rebalance is None or rebalance < 0:
            rebalance = body["session_timeout_ms"]
        if m is None:
            m = ConsumerGroupMember(mid, instance, subscription.get("rack_id"),
                                    ctx.header.client_id or "", "/" + ctx.client_host, rebalance)
            cg.members[mid] = m
            if instance is not None:
                cg.static[instance] = mid
            self._bump(cg, f"classic member {mid} joined")
        m.classic = ClassicMetadata(body["session_timeout_ms"], protocols)
        m.rebalance_timeout_ms, m.last_heartbeat = rebalance, now
        m.client_id = ctx.header.client_id or m.client_id
        topics = sorted(set(subscription["topics"]))
        if topics != m.subscribed_topic_names:
            m.subscribed_topic_names = topics
            self._bump(cg, f"classic member {mid} changed its subscription")
        self._refresh_target(cg)
        # an eager member revoked everything before it rejoined and owns nothing
        self._reconcile(cg, m, self.named_partitions(subscription.get("owned_partitions")), now)
        return {"throttle_time_ms": 0, "error_code": NONE, "generation_id": m.member_epoch,
                "protocol_type": CONSUMER_PROTOCOL, "protocol_name": protocols[0][0],
                "leader": "", "skip_assignment": False, "member_id": mid, "members": []}

    def _classic_member(self, cg: ConsumerGroup, mid: str, instance, generation: int):
        m = cg.members.get(mid)
        if instance is not None and cg.static.get(instance) not in (None, mid):
            raise errors.FencedInstanceIdError(
                f"Instance id {instance} is used by another member of group {cg.group_id}.")
        if m is None or m.classic is None:
            raise errors.UnknownMemberIdError(
                f"Member {mid} is not a classic member of group {cg.group_id}.")
        if generation != m.member_epoch:
            raise errors.IllegalGenerationError(
                f"Member {mid} is at generation {m.member_epoch}, not {generation}.")
        return m

    def classic_sync(self, body: dict, cg: ConsumerGroup) -> dict:
        """SyncGroup of a classic member: its current assignment (what it
        may own now; partitions it must revoke are left out, which is how
        a cooperative member learns to revoke them)."""
        try:
            m = self._classic_member(cg, body["member_id"], body.get("group_instance_id"),
                                     body["generation_id"])
            if (body.get("protocol_type") not in (None, "", CONSUMER_PROTOCOL)
                    or body.get("protocol_name") not in (None, "", m.classic.protocols[0][0])):
                raise errors.InconsistentGroupProtocolError("")
            if m.member_epoch < cg.group_epoch and m.state != UNREVOKED_PARTITIONS:
                raise errors.RebalanceInProgressError("")
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "protocol_type": None,
                    "protocol_name": None, "assignment": b""}
        m.last_heartbeat = self._clock()
        return {"throttle_time_ms": 0, "error_code": NONE, "protocol_type": CONSUMER_PROTOCOL,
                "protocol_name": m.classic.protocols[0][0],
                "assignment": self.classic_assignment(m.assigned)}

    def classic_heartbeat(self, body: dict, cg: ConsumerGroup) -> int:
        """Heartbeat of a classic member: REBALANCE_IN_PROGRESS (rejoin) when
        the group moved on, it has partitions to revoke, or the partitions it
        waits for are free."""
        try:
            m = self._classic_member(cg, body["member_id"], body.get("group_instance_id"),
                                     body["generation_id"])
        except KafkaError as exc:
            return exc.code
        m.last_heartbeat = self._clock()
        self._refresh_target(cg)
        waiting = any(cg.owners.get(tp, m.member_id) != m.member_id
                      for tp in cg.target.get(m.member_id, frozenset()) - m.assigned)
        if (m.member_epoch < cg.group_epoch or m.state == UNREVOKED_PARTITIONS
                or (m.state == UNRELEASED_PARTITIONS and not waiting)):
            return errors.RebalanceInProgressError.code
        return NONE

    def classic_leave(self, cg: ConsumerGroup, mid: str, instance) -> tuple[str, int]:
        """LeaveGroup of a classic member (static ones leave for good):
        (the member id, error code)."""
        if instance is not None:
            known = cg.static.get(instance)
            if known is None:
                return mid, errors.UnknownMemberIdError.code
            if mid and mid != known:
                return mid, errors.FencedInstanceIdError.code
            mid = known
        m = cg.members.get(mid)
        if m is None:
            return mid, errors.UnknownMemberIdError.code
        self.remove_member(cg, m, f"member {mid} left the group")
        return mid, NONE

    def classic_assignment(self, tps) -> bytes:
        """Partitions as a consumer protocol Assignment (topic names)."""
        names = {t.topic_id: name for name, t in self.topics().items()}
        by: dict = {}
        for tid, p in tps:
            if tid in names:
                by.setdefault(names[tid], []).append(p)
        return encode_assignment(0, {"assigned_partitions": [
            {"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by.items())],
            "user_data": None})

    def named_partitions(self, named) -> frozenset:
        """[{"topic", "partitions"}] as (topic id, partition); unknown topics dropped."""
        topics = self.topics()
        return frozenset((topics[t["topic"]].topic_id, p) for t in named or ()
                         if t["topic"] in topics for p in t["partitions"])

    # ---- the group's state -----------------------------------------------------------------------

    def _bump(self, cg: ConsumerGroup, reason: str) -> None:
        cg.group_epoch += 1
        log.info("group %s: epoch %d: %s", cg.group_id, cg.group_epoch, reason)

    def _release(self, cg: ConsumerGroup, m: ConsumerGroupMember) -> None:
        for tp in m.assigned | m.pending_revocation:
            if cg.owners.get(tp) == m.member_id:
                del cg.owners[tp]

    def remove_member(self, cg: ConsumerGroup, m: ConsumerGroupMember, reason: str) -> None:
        """Take ``m`` out of the group (left, fenced, timed out): its
        partitions are free for their next owners at once."""
        self._release(cg, m)
        cg.members.pop(m.member_id, None)
        cg.target.pop(m.member_id, None)
        if m.instance_id is not None and cg.static.get(m.instance_id) == m.member_id:
            del cg.static[m.instance_id]
        if (m.classic is None and cg.members and self.groups.get(cg.group_id) is cg
                and all(other.classic is not None for other in cg.members.values())
                and self.only_classic_left(cg)):
            return      # a classic group now, at this group epoch (migration.py's downgrade)
        self._bump(cg, reason)

    @staticmethod
    def _compile(pattern: str):
        # imported at the first regex subscription, not at every start
        import regex
        try:
            return regex.compile(pattern)
        except (regex.error, ValueError, OverflowError) as exc:
            raise errors.InvalidRegularExpressionError(
                f"SubscribedTopicRegex {pattern!r} is not a valid regular expression: {exc}") \
                from None

    def _resolve(self, cg: ConsumerGroup, topics: dict) -> bool:
        """Each member's topics: its names and its regex's matches; whether
        any member's changed."""
        matches: dict = {}
        changed = False
        for m in cg.members.values():
            found = set(m.subscribed_topic_names)
            if m.subscribed_topic_regex:
                if m.subscribed_topic_regex not in matches:
                    compiled = self._compile(m.subscribed_topic_regex)
                    hits = set()
                    for name in topics:
                        if name in INTERNAL_TOPICS:
                            continue
                        try:
                            if compiled.fullmatch(name, timeout=REGEX_MATCH_TIMEOUT_S):
                                hits.add(name)
                        except TimeoutError:
                            pass
                    matches[m.subscribed_topic_regex] = hits
                found |= matches[m.subscribed_topic_regex]
            changed |= m.topics != found
            m.topics = frozenset(found)
        return changed

    def subscription_metadata(self, cg: ConsumerGroup) -> tuple[dict, bool]:
        """{topic: (topic id, partitions)} of what the group subscribes to,
        and whether a member's subscribed topics changed."""
        topics = self.topics()
        changed = self._resolve(cg, topics)
        out = {}
        for name in cg.subscribed_topics():
            t = topics.get(name)
            if t is not None and name not in INTERNAL_TOPICS:
                out[name] = (t.topic_id, len(t.partitions))
        return out, changed

    def _refresh_target(self, cg: ConsumerGroup) -> None:
        """Bump the group epoch if the subscribed topics changed, and compute
        a new target assignment when the group epoch is ahead of it."""
        metadata, changed = self.subscription_metadata(cg)
        if changed or metadata != cg.subscription_metadata:
            cg.subscription_metadata = metadata
            if cg.group_epoch == cg.assignment_epoch:     # else bumped already
                self._bump(cg, "the subscriptions or the subscribed topics changed")
        if cg.group_epoch == cg.assignment_epoch:
            return
        wanted = Counter(m.server_assignor for m in cg.members.values() if m.server_assignor)
        cg.assignor = wanted.most_common(1)[0][0] if wanted else UNIFORM
        active = {mid: m for mid, m in cg.members.items()}
        cg.target = ASSIGNOR_FUNCTIONS[cg.assignor](active, metadata, cg.target)
        cg.assignment_epoch = cg.group_epoch

    def _reconcile(self, cg: ConsumerGroup, m: ConsumerGroupMember, owned, now: float) -> None:
        """Move ``m`` one step towards its target (Kafka's CurrentAssignmentBuilder)."""
        if m.state == UNREVOKED_PARTITIONS:
            if owned is None or owned & m.pending_revocation:
                return                                # still revoking
            for tp in m.pending_revocation:
                if cg.owners.get(tp) == m.member_id:
                    del cg.owners[tp]
            m.pending_revocation = frozenset()
            m.revocation_deadline = None
            m.state = STABLE
        if m.state == STABLE and m.member_epoch == cg.assignment_epoch:
            return
        target = cg.target.get(m.member_id, frozenset())
        revoke = m.assigned - target
        if revoke and (owned is None or owned & revoke):
            m.assigned = m.assigned & target
            m.pending_revocation = revoke
            m.state = UNREVOKED_PARTITIONS
            m.revocation_deadline = now + m.rebalance_timeout_ms / 1000.0
            return
        if revoke:
            # it says it owns none of them already (an eager classic member
            # revokes everything before it rejoins): nothing to wait for
            for tp in revoke:
                if cg.owners.get(tp) == m.member_id:
                    del cg.owners[tp]
            m.assigned = m.assigned & target
        free = {tp for tp in target - m.assigned if cg.owners.get(tp, m.member_id) == m.member_id}
        for tp in free:
            cg.owners[tp] = m.member_id
        m.assigned = m.assigned | free
        if m.member_epoch != cg.assignment_epoch:
            m.previous_member_epoch = m.member_epoch
            m.member_epoch = cg.assignment_epoch
        m.state = STABLE if m.assigned == target else UNRELEASED_PARTITIONS

    def tick(self) -> set:
        """Remove members past their session timeout, and fence members that
        did not revoke within their rebalance timeout; the ids of the groups
        changed."""
        now = self._clock()
        changed = set()
        for cg in list(self.groups.values()):
            for m in list(cg.members.values()):
                if self.groups.get(cg.group_id) is not cg:
                    break                               # it became a classic group
                session_ms = (m.classic.session_timeout_ms if m.classic is not None
                              else int(self.group_config(cg.group_id).get(
                                  "consumer.session.timeout.ms", self.session_timeout_ms)))
                if now - m.last_heartbeat > session_ms / 1000.0:
                    log.info("group %s: member %s missed its session timeout (%d ms)",
                             cg.group_id, m.member_id, session_ms)
                    self.remove_member(cg, m, f"member {m.member_id} timed out")
                    changed.add(cg.group_id)
                elif m.revocation_deadline is not None and now > m.revocation_deadline:
                    log.info("group %s: member %s did not revoke within its rebalance timeout "
                             "(%d ms)", cg.group_id, m.member_id, m.rebalance_timeout_ms)
                    self.remove_member(cg, m, f"member {m.member_id} fenced: rebalance timeout")
                    changed.add(cg.group_id)
        return changed

    # ---- offsets -------------------------------------------------------------------------------

    @staticmethod
    def validate_commit(cg: ConsumerGroup, member_id: str | None, epoch: int,
                        transactional: bool = False) -> int:
        """The error code an offset commit (or fetch) of ``member_id`` at
        member epoch ``epoch`` gets in ``cg``: none from outside the group
        (no member id, negative epoch) while the group is empty; else the
        member must exist and be at that epoch."""
        if epoch < 0 and not member_id and not cg.members:
            return NONE
        m = cg.members.get(member_id or "")
        if m is None:
            return errors.UnknownMemberIdError.code
        if epoch != m.member_epoch:
            # a classic member's generation is its member epoch, and its
            # clients know ILLEGAL_GENERATION, not STALE_MEMBER_EPOCH
            return (errors.IllegalGenerationError.code
                    if transactional or m.classic is not None
                    else errors.StaleMemberEpochError.code)
        return NONE

    @staticmethod
    def is_classic_member(cg: ConsumerGroup, member_id: str | None) -> bool:
        m = cg.members.get(member_id or "")
        return m is not None and m.classic is not None

    # ---- ConsumerGroupDescribe -------------------------------------------------------------------

    def describe(self, ctx, body: dict) -> dict:
        out = []
        names = {t.topic_id: name for name, t in self.topics().items()}
        for gid in body["group_ids"]:
            try:
                cg = self.group_of(gid, create=False)
            except KafkaError as exc:
                out.append(self._described_error(gid, exc.code, str(exc)))
                continue
            if cg is None:
                out.append(self._described_error(
                    gid, errors.GroupIdNotFoundError.code, f"Group {gid} not found."))
                continue
            self._refresh_target(cg)

            def assignment(tps) -> dict:
                return {"topic_partitions": [
                    {"topic_id": t["topic_id"], "topic_name": names.get(t["topic_id"], ""),
                     "partitions": t["partitions"]} for t in partitions_by_topic_id(tps)]}

            out.append({
                "error_code": NONE, "error_message": None, "group_id": gid,
                "group_state": cg.state, "group_epoch": cg.group_epoch,
                "assignment_epoch": cg.assignment_epoch, "assignor_name": cg.assignor,
                "members": [{
                    "member_id": m.member_id, "instance_id": m.instance_id,
                    "rack_id": m.rack_id, "member_epoch": m.member_epoch,
                    "client_id": m.client_id, "client_host": m.client_host,
                    "subscribed_topic_names": m.subscribed_topic_names,
                    "subscribed_topic_regex": m.subscribed_topic_regex,
                    "assignment": assignment(m.assigned),
                    "target_assignment": assignment(cg.target.get(m.member_id, ())),
                    "member_type": MEMBER_TYPE_CLASSIC if m.classic is not None
                    else MEMBER_TYPE_CONSUMER,
                } for m in cg.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    @staticmethod
    def _described_error(gid: str, code: int, message: str) -> dict:
        return {"error_code": code, "error_message": message, "group_id": gid,
                "group_state": "", "group_epoch": -1, "assignment_epoch": -1,
                "assignor_name": "", "members": []}
