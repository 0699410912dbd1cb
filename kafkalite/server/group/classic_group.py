"""The classic group protocol: membership, rebalances and generations (the
classic half of Kafka's ``GroupMetadataManager``, its ``ClassicGroup``).

- JoinGroup / SyncGroup / Heartbeat / LeaveGroup with member ids and
  generations. A rebalance (state PreparingRebalance) starts when a member
  joins, leaves, misses its session timeout, changes its subscription, or
  when a topic its group subscribes to gains partitions; it completes when
  every known member has rejoined (or the rebalance timeout, the members'
  ``max.poll.interval.ms``, passes): a new generation, a protocol every
  member supports, and the leader's member list. The leader computes the
  assignment (client side, kafkalite/client/assignors.py) and hands it over
  in SyncGroup; the group is then Stable.
- After a restart the members come back with their generation and a
  fresh session (``load``). One whose client gave up its membership while
  the coordinator was away -- librdkafka drops its member id when its own
  session runs out without an answer, and joins anew, sending no
  LeaveGroup -- is replaced by that client's new member at once
  (``_replace_abandoned``): the rebalance its join starts would otherwise
  wait a whole session for the old member, and a kill during that wait
  started it again (issue 68: a group starved through repeated restarts).
- Static membership (``group.instance.id``, KIP-345): a member that comes
  back under the same instance id while its session is alive takes its old
  place (and assignment) without a rebalance; the old incarnation is fenced.
- New dynamic members are first answered MEMBER_ID_REQUIRED (KIP-394).
- Cooperative rebalancing needs nothing here: members keep what they own
  and revoke only what the new assignment takes away (client side).
- The classic members of a consumer group (KIP-848's online migration,
  migration.py) are the consumer group's: their JoinGroup, SyncGroup,
  Heartbeat and LeaveGroup go to consumer_group.py; where the policy
  forbids it, a classic JoinGroup to a consumer group gets
  INCONSISTENT_GROUP_PROTOCOL.

A classic group's membership is written to ``__consumer_offsets``
(group_log.py) at each new generation; after a restart ``load`` takes it
back and members carry on in their generation.

Which process runs it: the supervisor, on its event loop, through
coordinator.py: the handlers, ``tick()`` from its poll loop and
``on_partitions_changed()`` after CreatePartitions. JoinGroup and
SyncGroup answers that must wait are DEFERRED: the member keeps the
request's context and the answer goes out through ``ctx.respond`` when the
group gets there.

What it may import: groups.py (the group table), consumer_group.py,
group_log.py, share/ (the share groups, whose ids a classic group may not
take), network/, kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging
import time
import uuid

from kafkalite import errors
from kafkalite.server.group.consumer_group import ConsumerGroupCoordinator
from kafkalite.server.group.group_log import GroupMetadataLog
from kafkalite.server.group.groups import (COMPLETING_REBALANCE, DEAD, EMPTY, INVALID_GROUP_ID,
                                           MIGRATION_DISABLED, NONE, PREPARING_REBALANCE, STABLE,
                                           ConsumerGroupRecords, Group, Member, now_ms)
from kafkalite.server.network.requests import DEFERRED, RequestContext
from kafkalite.server.share.share_group import ShareGroupCoordinator

log = logging.getLogger("kafkalite.coordinator")


class ClassicGroupManager:
    """The classic groups of the group table ``groups``: their members,
    rebalances and generations. A consumer group's classic members are
    handed to ``consumer``; ``share``'s group ids are taken."""

    def __init__(self, groups: dict[str, Group], store: GroupMetadataLog,
                 consumer: ConsumerGroupCoordinator, consumer_records: ConsumerGroupRecords,
                 share: ShareGroupCoordinator, *, min_session_timeout_ms: int,
                 max_session_timeout_ms: int, initial_rebalance_delay_ms: int,
                 migration_policy: str):
        self.groups = groups
        self.store = store
        self.consumer = consumer
        self.consumer_records = consumer_records
        self.share = share
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.migration_policy = migration_policy

    def load(self, stored_groups: dict) -> None:
        """The classic groups replayed from ``__consumer_offsets``: each
        member back with its assignment, its session starting now."""
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
                           mv["assignment"], last_heartbeat=now, restored=True)
                g.members[m.member_id] = m
                if m.group_instance_id:
                    g.static[m.group_instance_id] = m.member_id
            g.state = STABLE if g.members else EMPTY

    def persist(self, g: Group) -> None:
        """Write ``g``'s membership and generation (GroupMetadataValue)."""
        self.store.write_group(g.group_id, {
            "protocol_type": g.protocol_type or "", "generation": g.generation_id,
            "protocol": g.protocol_name, "leader": g.leader_id,
            "current_state_timestamp": g.state_timestamp,
            "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "client_host": m.client_host,
                         "rebalance_timeout": m.rebalance_timeout_ms,
                         "session_timeout": m.session_timeout_ms,
                         "subscription": m.metadata(g.protocol_name),
                         "assignment": m.assignment} for m in g.members.values()]}, now_ms())

    # ---- the rebalance state machine ----------------------------------------------------------

    def prepare_rebalance(self, g: Group, reason: str) -> None:
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
            self.persist(g)
            return
        g.protocol_name = self.select_protocol(g)
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
    def select_protocol(g: Group) -> str:
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
            self.prepare_rebalance(g, reason)
        elif g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    def tick(self, now: float) -> None:
        """Expire sessions and pending members and finish timed-out
        rebalances (``now``: time.monotonic())."""
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

    def on_partitions_changed(self, topic: str) -> None:
        """A topic gained partitions: rebalance the groups that consume it."""
        for g in self.groups.values():
            if g.state in (STABLE, COMPLETING_REBALANCE) and topic in g.subscribed_topics():
                self.prepare_rebalance(g, f"topic {topic} gained partitions")

    # ---- JoinGroup -------------------------------------------------------------------------------

    def join_group(self, ctx: RequestContext, body: dict):
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
                self.consumer_records.persist(gid)
                return resp
            self.consumer_records.drop(g)          # an empty consumer group becomes classic
        if g is None:
            if member_id:
                return self._join_error(member_id, errors.UnknownMemberIdError.code)
            g = self.groups[gid] = Group(gid)
            g.state_timestamp = now_ms()
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
        return self._rejoin(g, ctx, member_id, instance, protocols, session, rebalance)

    def _rejoin(self, g: Group, ctx: RequestContext, member_id: str, instance, protocols: list,
                session: int, rebalance: int):
        """JoinGroup of a member the group knows (or claims to be one): its
        answer now, or DEFERRED until the rebalance it joins completes."""
        m = g.members.get(member_id)
        if instance and g.static.get(instance) not in (None, member_id):
            return self._join_error(member_id, errors.FencedInstanceIdError.code)
        if m is None:
            return self._join_error(member_id, errors.UnknownMemberIdError.code)
        changed = m.protocols != protocols
        m.protocols = protocols
        m.session_timeout_ms, m.rebalance_timeout_ms = session, rebalance
        m.last_heartbeat, m.restored = time.monotonic(), False
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
        self.prepare_rebalance(g, f"member {member_id} rejoined"
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

    def _replace_abandoned(self, g: Group, new: Member) -> None:
        """Remove the member that dynamic member ``new`` was before a restart
        of this coordinator: one taken back from the log that has not joined
        or synced since nor sent a second heartbeat, of the same client id
        and host (of several, the one heard from least recently). librdkafka
        gives up its membership when its session runs out without an answer
        (a slow restart) and joins with no member id; its old member would
        never rejoin, and the rebalance would wait for it until its session
        ran out here too. A first heartbeat does not count: the one in
        flight when the old coordinator died is re-sent to this one by the
        worker that relayed it, after the client gave up on it. Two clients
        of one id on one host (librdkafka's default client.id is "rdkafka")
        may be told apart wrongly, until the group's first rebalance after
        the restart has every member join: the other's next heartbeat is
        then answered UNKNOWN_MEMBER_ID and it joins anew, taking the place
        of the one left."""
        candidates = [m for m in g.members.values()
                      if m.restored and m.group_instance_id is None
                      and (m.client_id, m.client_host) == (new.client_id, new.client_host)]
        if new.group_instance_id or not candidates:
            return
        old = min(candidates, key=lambda m: m.last_heartbeat)
        log.info("group %s: member %s (client %s at %s) joined again as %s, its own session "
                 "over while the coordinator restarted; removing %s", g.group_id, old.member_id,
                 old.client_id, old.client_host, new.member_id, old.member_id)
        self._remove_member(g, old.member_id)

    def _add_member(self, g: Group, m: Member, ctx: RequestContext, reason: str):
        self._replace_abandoned(g, m)
        if g.protocol_type is None or not g.members:
            g.protocol_type = m.protocol_type
        g.members[m.member_id] = m
        m.join = ctx
        if g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        else:
            self.prepare_rebalance(g, reason)
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
            self.persist(g)
            return self._join_response(g, new_id, [])
        old.join = ctx
        if g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)
        else:
            self.prepare_rebalance(g, f"static member {old.group_instance_id} rejoined")
        return DEFERRED

    # ---- SyncGroup / Heartbeat / LeaveGroup ------------------------------------------------------

    def check_member(self, g: Group | None, member_id: str, instance: str | None,
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

    def validate_offset_commit(self, g: Group, member_id: str, instance: str | None,
                               generation: int, transactional: bool = False) -> int:
        """The error of an (Txn)OffsetCommit to classic group ``g``, in
        Kafka's order (``ClassicGroup.validateOffsetCommit``): the member
        and its generation first, so a zombie of an old generation hears
        ILLEGAL_GENERATION and a stranger UNKNOWN_MEMBER_ID even while the
        group completes a rebalance; only a member of the new generation is
        told REBALANCE_IN_PROGRESS (commit again once synced)."""
        if g.state == DEAD:
            return errors.CoordinatorNotAvailableError.code
        if generation < 0 and g.state == EMPTY:
            return NONE                   # the admin client, or a consumer without a group
        # before v7 the request has no group_instance_id: it decodes as ""
        if generation >= 0 or member_id or instance:
            if instance:
                known = g.static.get(instance)
                if known is None:
                    return errors.UnknownMemberIdError.code
                if known != member_id:
                    return errors.FencedInstanceIdError.code
            elif member_id not in g.members:
                return errors.UnknownMemberIdError.code
            if generation != g.generation_id:
                return errors.IllegalGenerationError.code
        elif not transactional and g.state != EMPTY:
            return errors.UnknownMemberIdError.code   # v0 commits only to an empty group
        if not transactional and g.state == COMPLETING_REBALANCE:
            return errors.RebalanceInProgressError.code
        return NONE

    def sync_group(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:            # Kafka's GroupCoordinatorService, every group API
            return {"throttle_time_ms": 0, "error_code": INVALID_GROUP_ID, "protocol_type": None,
                    "protocol_name": None, "assignment": b""}
        g = self.groups.get(body["group_id"])
        if g is not None and g.consumer is not None:
            return self.consumer.classic_sync(body, g.consumer)     # changes nothing kept
        member_id = body["member_id"]
        code = self.check_member(g, member_id, body.get("group_instance_id"),
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
        m.restored = False
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
            self.persist(g)
            log.info("group %s: generation %d is stable with %d member(s), protocol %s",
                     g.group_id, g.generation_id, len(g.members), g.protocol_name)
            for member in g.members.values():
                if member.sync is not None:
                    self._answer_sync(member, NONE, member.assignment, g)
        return DEFERRED

    def heartbeat(self, ctx: RequestContext, body: dict):
        if not body["group_id"]:
            return {"throttle_time_ms": 0, "error_code": INVALID_GROUP_ID}
        g = self.groups.get(body["group_id"])
        if g is not None and g.consumer is not None:
            code = self.consumer.classic_heartbeat(body, g.consumer)
            self.consumer_records.persist(g.group_id)          # a new target, maybe
            return {"throttle_time_ms": 0, "error_code": code}
        member_id = body["member_id"]
        code = self.check_member(g, member_id, body.get("group_instance_id"),
                                  body["generation_id"])
        if code == NONE:
            m = g.members[member_id]
            m.last_heartbeat = time.monotonic()
            # a restored member's first heartbeat is no sign of life: the one
            # in flight to the dead coordinator (a client has one at a time)
            # is re-sent to this one by the worker that relayed it, maybe
            # after its client gave up waiting for it; a second one is
            m.heartbeats_since_restored += m.restored
            m.restored = m.restored and m.heartbeats_since_restored < 2
            if g.state == PREPARING_REBALANCE:
                code = errors.RebalanceInProgressError.code
        elif g is not None and g.state == EMPTY and code == errors.IllegalGenerationError.code:
            code = errors.UnknownMemberIdError.code
        return {"throttle_time_ms": 0, "error_code": code}

    def leave_group(self, ctx: RequestContext, body: dict):
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
                self.consumer_records.persist(g.group_id)
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

