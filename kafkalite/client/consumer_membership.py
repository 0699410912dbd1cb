"""A consumer's membership in a KIP-848 group (``group.protocol=consumer``).

There is no JoinGroup/SyncGroup and no client-side assignor: the member
sends ConsumerGroupHeartbeat (API 68) every ``HeartbeatIntervalMs`` the
coordinator returns, and each answer may carry the partitions it may own
now (by topic id) and its new member epoch. The member converges on that
assignment as Kafka's consumer does (AbstractMembershipManager, librdkafka's
rd_kafka_cgrp_consumer_*):

1. partitions it owns that the assignment no longer holds are revoked first
   (``on_revoke``, after a commit with ``enable.auto.commit``);
2. then the new ones are added (``on_assign``, incrementally, as with
   cooperative-sticky);
3. then the next heartbeat, sent at once, carries the partitions it owns
   (TopicPartitions): the acknowledgement the coordinator waits for before
   it hands revoked partitions to their next owner.

The owned partitions are sent when they changed since the last heartbeat,
and again after a failed one. FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID lose
every partition (``on_lost``) before the member rejoins with epoch 0, so
no partition is consumed here once another member may own it.
COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
look the coordinator up again and retry; UNSUPPORTED_ASSIGNOR,
GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, INVALID_REGULAR_EXPRESSION and
the other errors are fatal to the membership: raised from every following
``poll``/``consume`` with the coordinator's message. Leaving sends epoch -1
(a static member, ``group.instance.id``: -2, keeping its assignment for its
session timeout). OffsetCommit (v9) carries the member epoch as its
generation.

Threads: the heartbeat thread (private) sends every heartbeat on its own
connection and keeps what the answers say (epoch, assignment, errors)
under ``_lock``; ``step()``, on the application's thread, turns that into a
``Change`` for the consumer to apply and hands back what it owns for the
next heartbeat. Who may call: kafkalite.client.consumer.Consumer, from one
thread, as GroupMembership (group.py), whose coordinator lookup and offset
commits/fetches this reuses.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

import zmq

from kafkalite import errors
from kafkalite.client.connection import Connection, KafkaTimeoutError
from kafkalite.client.group import (JOINING, STABLE, UNJOINED, Change, GroupMembership)
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.messages.groups import partitions_by_topic_id, topic_id_partitions

log = logging.getLogger("kafkalite.consumer")

HEARTBEAT_VERSION = 1          # v1: SubscribedTopicRegex
OFFSET_COMMIT_VERSION = 9      # v9: the member epoch is checked (STALE_MEMBER_EPOCH)
JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
# waiting for the application to drop its partitions before rejoining
FENCED = "fenced"
FATAL = "fatal"

_RETRY_COORDINATOR = {errors.CoordinatorNotAvailableError.code, errors.NotCoordinatorError.code,
                      errors.CoordinatorLoadInProgressError.code}
_FENCED = {errors.FencedMemberEpochError.code, errors.UnknownMemberIdError.code}


def subscription_fields(subscription: list[str]) -> tuple[list[str], str | None]:
    """(SubscribedTopicNames, SubscribedTopicRegex) for a subscription of
    names and '^' patterns: the patterns become one regex, evaluated by the
    coordinator (a full match, as Kafka's RE2/J)."""
    names = sorted({t for t in subscription if not t.startswith("^")})
    patterns = [t for t in subscription if t.startswith("^")]
    if not patterns:
        return names, None
    if len(patterns) == 1:
        return names, patterns[0]
    return names, "|".join(f"(?:{p})" for p in patterns)


class _Wakeup:
    """An inproc PAIR the heartbeat thread signals when an answer has news
    (an assignment, an error), so that a consumer waiting on its fetches
    (up to fetch.max.wait.ms) reconciles at once. Only the heartbeat thread
    sends, only the application's thread receives."""

    def __init__(self, ctx: zmq.Context):
        endpoint = f"inproc://kafkalite-consumer-membership-{uuid.uuid4().hex}"
        self._in = ctx.socket(zmq.PAIR)
        self._in.bind(endpoint)
        self._out = ctx.socket(zmq.PAIR)
        self._out.connect(endpoint)

    def signal(self) -> None:
        try:
            self._out.send(b"", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass             # a signal is already waiting (or the consumer is closing)

    def drain(self) -> None:
        try:
            while True:
                self._in.recv(zmq.NOBLOCK)
        except zmq.ZMQError:
            pass

    def close(self) -> None:
        self._out.close(linger=0)
        self._in.close(linger=0)


class _Links:
    """What the consumer's poller waits on for the group: the wake-up, and
    the coordinator's connection while commits are in flight."""

    def __init__(self, membership: "ConsumerProtocolMembership"):
        self._m = membership

    def register(self, poller: zmq.Poller) -> None:
        poller.register(self._m._wakeup._in, zmq.POLLIN)
        conn = self._m._commit_link()
        if conn is not None:
            conn.register(poller)

    def arm(self) -> bool:
        conn = self._m._commit_link()
        return conn.arm() if conn is not None else True


class ConsumerProtocolMembership(GroupMembership):
    def __init__(self, cfg: dict, meta, ctx: zmq.Context):
        super().__init__(cfg, meta, ctx)
        self.cooperative = True    # incremental assign/revoke, as cooperative-sticky
        self.remote_assignor = cfg.get("group.remote.assignor") or None
        # The member id is this client's, for its whole life (Kafka 4's
        # consumers, KIP-1082): a join whose answer was lost and is sent
        # again is the same member, not a second one holding partitions
        # until its session times out.
        self.member_id = str(uuid.uuid4())
        self.heartbeat_interval = 0.1      # until the coordinator says (HeartbeatIntervalMs)
        self.retry_backoff = cfg["retry.backoff.ms"] / 1000.0
        # shared with the heartbeat thread, under _lock:
        self._assignment: frozenset | None = None   # (topic id, p) from the last answer
        self._owned_ids: frozenset = frozenset()     # what the application owns, by topic id
        self._sent_owned: frozenset | None = None    # as the last heartbeat carried it
        self._full = True              # send every field next (joining, after an error)
        self._coordinator_lost = False
        self._coordinator_checked = 0.0  # when FindCoordinator was last sent
        self._ids_checked = 0.0        # when metadata was last asked for topic ids
        self._ids: dict = {}           # topic id -> name
        self._names: dict = {}         # name -> topic id
        self._wakeup = _Wakeup(ctx)
        self._links = _Links(self)

    @property
    def link(self):
        return self._links if self.subscription or self._pending else None

    def _commit_link(self):
        return self._conn if self._conn is not None and self._pending else None

    # ---- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        with self._lock:
            self.subscription = list(topics)
            self.topics = [t for t in topics if not t.startswith("^")]
            self._full = True
            if self.state not in (FENCED, FATAL):
                if self.state == UNJOINED:
                    self.state = JOINING
        self._start_heartbeats()
        self._hb_wake.set()

    # ---- heartbeats (background thread) -----------------------------------------------------

    def _heartbeat_body(self) -> dict:
        """The next heartbeat, under _lock: every field when joining or after
        an error, else only what changed (Kafka's 'null if unchanged')."""
        joining = self.member_epoch_to_send() == JOIN_EPOCH
        full = self._full or joining
        names, regex = subscription_fields(self.subscription)
        owned = frozenset() if joining else self._owned_ids
        body = {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": self.member_epoch_to_send(),
                "instance_id": self.instance_id, "rack_id": None,
                "rebalance_timeout_ms": self.max_poll_interval_ms if full else -1,
                "subscribed_topic_names": names if full else None,
                "subscribed_topic_regex": (regex or "") if full else None,
                "server_assignor": self.remote_assignor if full else None,
                "topic_partitions": None}
        if full or owned != self._sent_owned:
            body["topic_partitions"] = partitions_by_topic_id(owned)
        return body

    def member_epoch_to_send(self) -> int:
        return JOIN_EPOCH if self.state == JOINING else self.generation

    def _heartbeat_loop(self) -> None:
        # watched: a coordinator that went away (restarted) fails the
        # heartbeat at once rather than after request.timeout.ms
        conn = None
        wait = 0.0
        try:
            while not self._stop.is_set():
                self._hb_wake.wait(wait)
                self._hb_wake.clear()
                if self._stop.is_set():
                    return
                wait = self.heartbeat_interval
                with self._lock:
                    state = self.state
                    endpoint = self._conn.endpoint if self._conn is not None else None
                    lost_coordinator = self._coordinator_lost
                if state not in (JOINING, STABLE) or endpoint is None or lost_coordinator:
                    wait = min(self.heartbeat_interval, 0.05)
                    continue
                if conn is not None and conn.endpoint != endpoint:
                    conn.close()
                    conn = None
                if state == STABLE and (time.monotonic() - self.last_poll) * 1000 \
                        > self.max_poll_interval_ms:
                    try:
                        conn = conn or Connection(endpoint, self.client_id, self._ctx,
                                                  watch=True)
                    except KafkaError as exc:
                        log.warning("group %s: no link to leave the group by: %s",
                                    self.group_id, exc)
                        wait = self.retry_backoff
                        continue
                    self._leave_for_poll_timeout(conn)
                    continue
                with self._lock:
                    body = self._heartbeat_body()
                try:
                    # a link that cannot be made now fails this beat, not the thread
                    conn = conn or Connection(endpoint, self.client_id, self._ctx, watch=True)
                    resp = conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body,
                                        timeout=self.request_timeout,
                                        version=HEARTBEAT_VERSION)
                except zmq.ZMQError:
                    raise
                except Exception as exc:    # noqa: BLE001 (the thread must outlive any answer)
                    log.warning("group %s: heartbeat failed: %s", self.group_id, exc)
                    if conn is not None:
                        conn.close()
                    conn = None
                    with self._lock:
                        self._full = True
                    wait = self.retry_backoff
                    continue
                wait = self._on_heartbeat(body, resp)
        except zmq.ZMQError as exc:   # the consumer closed its context under us
            log.debug("group %s: heartbeat thread stops: %s", self.group_id, exc)
        finally:
            if conn is not None:
                conn.close()
            if self._stop.is_set():
                self._wakeup.close()   # close() left them to this thread, still running then

    def _on_heartbeat(self, body: dict, resp: dict) -> float:
        """Keep what a heartbeat's answer says; the seconds until the next one."""
        code = resp["error_code"]
        message = resp.get("error_message") or None
        with self._lock:
            if self.state not in (JOINING, STABLE) or body["member_epoch"] != \
                    self.member_epoch_to_send():
                return 0.0          # answered for a membership since given up
            if code == 0:
                if resp.get("heartbeat_interval_ms", 0) > 0:
                    self.heartbeat_interval = resp["heartbeat_interval_ms"] / 1000.0
                self.member_id = resp["member_id"] or self.member_id
                self.generation = resp["member_epoch"]
                self.state = STABLE
                self._full = False
                if body["topic_partitions"] is not None:
                    self._sent_owned = topic_id_partitions(body["topic_partitions"])
                if resp.get("assignment") is not None:
                    self._assignment = topic_id_partitions(resp["assignment"]["topic_partitions"])
                    self._wakeup.signal()
                return self.heartbeat_interval
            self._full = True
            self._wakeup.signal()
            if code in _FENCED:
                log.info("group %s: %s; the member gives its partitions up and rejoins",
                         self.group_id, message or errors.error_for_code(code).name)
                self._lost_reason = errors.error_for_code(code).name
                self.state = FENCED
                return 0.0
            if code in _RETRY_COORDINATOR:
                self._coordinator_lost = True
                return self.retry_backoff
            if code == errors.UnreleasedInstanceIdError.code and self.state == JOINING:
                # the previous incarnation of this static member has not left yet
                return max(self.retry_backoff, 0.5)
            self._fatal = errors.error_for_code(code)(
                message or f"ConsumerGroupHeartbeat of group {self.group_id!r} failed")
            self.state = FATAL
            return 0.0

    def _leave_for_poll_timeout(self, conn: Connection) -> None:
        log.warning("group %s: poll() was not called for %d ms (max.poll.interval.ms); "
                    "leaving the group", self.group_id, self.max_poll_interval_ms)
        with self._lock:
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "member_epoch": STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH,
                    "instance_id": self.instance_id, "rack_id": None,
                    "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                    "subscribed_topic_regex": None, "server_assignor": None,
                    "topic_partitions": None}
            self._lost_reason = "max.poll.interval.ms exceeded"
            self.state = FENCED
            self._full = True
        conn.send(ApiKey.CONSUMER_GROUP_HEARTBEAT, body, expect_response=False,
                  version=HEARTBEAT_VERSION)

    # ---- reconciliation, driven from poll() --------------------------------------------------

    def step(self, owned: set) -> Change | None:
        """Advance without blocking; a Change for the consumer to apply, or None."""
        self.last_poll = time.monotonic()
        self._wakeup.drain()
        if self._fatal is not None:
            raise self._fatal
        if not self.subscription:
            return self._take_responses(owned)     # commits of an assign()ed consumer
        if (self._coordinator_lost or self._conn is None) and \
                time.monotonic() - self._coordinator_checked > self.retry_backoff:
            self._find_coordinator()
        with self._lock:
            state, lost = self.state, self._lost_reason
            assignment = self._assignment
        if state == FENCED:
            if owned:
                log.info("group %s: membership lost (%s)", self.group_id, lost)
                return Change(lost=sorted(owned))
            with self._lock:          # nothing is owned any more: rejoin with epoch 0
                self._lost_reason = None
                self._assignment = None
                self._owned_ids = frozenset()
                self._sent_owned = None
                self.generation = JOIN_EPOCH
                self.state = JOINING
            self._hb_wake.set()
            return None
        change = None
        if assignment is not None:
            change = self._reconcile(owned, assignment)
            if change is not None:
                return change
        self._acknowledge(owned)
        return self._take_responses(owned)

    def _reconcile(self, owned: set, assignment: frozenset) -> Change | None:
        """Revoke what the assignment no longer holds; once that is done, add
        what it newly holds (those of topics this client knows the id of)."""
        if any(tid not in self._ids for tid, _ in assignment) and \
                time.monotonic() - self._ids_checked > self.retry_backoff:
            self._learn_topic_ids()
        target = {(self._ids[tid], p) for tid, p in assignment if tid in self._ids}
        revoke = sorted(set(owned) - target)
        if revoke:
            return Change(revoke=revoke)
        assign = sorted(target - set(owned))
        with self._lock:
            if self._assignment is assignment and len(target) == len(assignment):
                self._assignment = None       # reconciled (a newer answer may replace it)
        if assign:
            self.rebalances += 1
            log.info("group %s: member epoch %d, %d partition(s) added", self.group_id,
                     self.generation, len(assign))
            return Change(assign=assign)
        return None

    def _acknowledge(self, owned: set) -> None:
        """What the application owns now goes in the next heartbeat, at once
        when it changed: the coordinator hands revoked partitions on (and
        moves this member to its new epoch) only once it is told."""
        ids = frozenset((self._names[t], p) for t, p in owned if t in self._names)
        with self._lock:
            changed = ids != self._owned_ids
            self._owned_ids = ids
            send = self.state == STABLE and (changed or ids != self._sent_owned)
        if changed and send:
            self._hb_wake.set()

    def _learn_topic_ids(self) -> None:
        self._ids_checked = time.monotonic()
        try:
            self._meta.refresh(None, False, self.request_timeout)
        except KafkaError as exc:
            log.info("group %s: metadata for the assignment's topics: %s", self.group_id, exc)
            return
        for name, info in self._meta.topics.items():
            if info.topic_id is not None:
                self._ids[info.topic_id] = name
                self._names[name] = info.topic_id

    def _find_coordinator(self) -> None:
        """The coordinator moved or is not there yet: look it up again (the
        heartbeat thread follows the new connection)."""
        self._coordinator_checked = time.monotonic()
        with self._lock:
            old, self._conn = self._conn, None
            self._pending = {}
        if old is not None:
            old.close()
        try:
            self.conn        # noqa: B018 (looks the coordinator up)
        except KafkaError as exc:
            log.info("group %s: coordinator lookup failed: %s", self.group_id, exc)
            return
        with self._lock:
            self._coordinator_lost = False
        self._hb_wake.set()

    # ---- commits ---------------------------------------------------------------------------

    def commit_body(self, offsets: dict) -> dict:
        body = super().commit_body(offsets)
        with self._lock:
            joined = self.state == STABLE
        if not joined:      # from outside the group (assign()ed, or between memberships)
            body.update(member_id="", generation_id_or_member_epoch=-1)
        return body

    def commit(self, offsets: dict) -> dict:
        """OffsetCommit at the current member epoch; retried at the new epoch
        when the coordinator moved this member on meanwhile (STALE_MEMBER_EPOCH),
        as Kafka's consumer does."""
        for _ in range(3):
            resp = self.request(ApiKey.OFFSET_COMMIT, self.commit_body(offsets),
                                version=OFFSET_COMMIT_VERSION)
            codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]}
            if codes != {errors.StaleMemberEpochError.code}:
                return resp
            time.sleep(self.retry_backoff)
        return resp

    def commit_async(self, offsets: dict, callback) -> None:
        cid = self.conn.send(ApiKey.OFFSET_COMMIT, self.commit_body(offsets),
                             version=OFFSET_COMMIT_VERSION)
        self._pending[cid] = ("commit", callback)

    # ---- leaving ---------------------------------------------------------------------------

    def close(self, leave: bool = True) -> None:
        self._stop.set()
        self._hb_wake.set()
        if self._hb_thread is not None:
            self._hb_thread.join(timeout=5)
        with self._lock:
            joined = self.state == STABLE and bool(self.member_id)
        if leave and joined and self._conn is not None:
            epoch = STATIC_LEAVE_EPOCH if self.instance_id else LEAVE_EPOCH
            try:
                resp = self._conn.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
                    "group_id": self.group_id, "member_id": self.member_id,
                    "member_epoch": epoch, "instance_id": self.instance_id, "rack_id": None,
                    "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
                    "subscribed_topic_regex": None, "server_assignor": None,
                    "topic_partitions": None}, timeout=self.request_timeout,
                    version=HEARTBEAT_VERSION)
                if resp["error_code"]:
                    log.info("group %s: leaving: %s", self.group_id,
                             resp.get("error_message") or resp["error_code"])
            except (KafkaTimeoutError, KafkaError) as exc:
                log.info("group %s: leaving failed: %s", self.group_id, exc)
        with self._lock:
            self.state = UNJOINED
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._hb_thread is None or not self._hb_thread.is_alive():
            self._wakeup.close()       # else the thread closes them as it ends
