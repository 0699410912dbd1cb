"""A consumer's membership in its group: join, sync, heartbeat, commit.

The consumer drives this from ``poll``/``consume``: ``step()`` advances the
rebalance without blocking and returns a ``Change`` (partitions to revoke,
to assign, or lost) for the consumer to apply and report to the
application's callbacks, on the application's thread, as confluent-kafka
does. A background thread only heartbeats (every ``heartbeat.interval.ms``)
and watches ``max.poll.interval.ms``; what it learns (a rebalance has
started, this member was fenced) is picked up by the next ``step()``.

Eager assignors (range, roundrobin): every owned partition is revoked
before rejoining, and the new assignment arrives whole. Cooperative
(cooperative-sticky): the member keeps consuming what it owns while the
group rebalances, revokes only what the new assignment takes away, and
rejoins at once so the next round can hand those partitions on.

Who may call: kafkalite.client.consumer.Consumer, from one thread; the
heartbeat thread is private to this module.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field

import zmq

from kafkalite import errors
from kafkalite.client.assignors import (ASSIGNORS, COOPERATIVE, MemberSubscription,
                                        parse_strategies, rebalance_protocol)
from kafkalite.client.connection import Connection, KafkaTimeoutError
from kafkalite.client.metadata import Metadata
from kafkalite.errors import KafkaError
from kafkalite.protocol import (ApiKey, decode_assignment, decode_subscription, encode_assignment,
                                encode_subscription)
from kafkalite.protocol.errors import ProtocolError

log = logging.getLogger("kafkalite.consumer")

UNJOINED, JOINING, SYNCING, STABLE = "unjoined", "joining", "syncing", "stable"
_SUBSCRIPTION_VERSION = 2
# how often the leader looks again for a subscribed topic that does not
# exist yet (the Java client refreshes metadata for a missing topic within
# its retry backoff; metadata.max.age.ms, 5 minutes, is far too long)
MISSING_TOPIC_RECHECK_S = 1.0


@dataclass
class Change:
    """What the consumer must do to its assignment, in this order."""
    revoke: list = field(default_factory=list)     # (topic, partition): commit, then drop
    lost: list = field(default_factory=list)       # drop without committing: no longer ours
    assign: list = field(default_factory=list)     # add, starting from committed offsets


def _grouped(tps) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t, p in sorted(tps):
        out.setdefault(t, []).append(p)
    return out


class GroupMembership:
    def __init__(self, cfg: dict, meta: Metadata, ctx: zmq.Context):
        self.group_id = cfg["group.id"]
        self.instance_id = cfg.get("group.instance.id") or None
        self.client_id = cfg["client.id"]
        self.session_timeout_ms = cfg["session.timeout.ms"]
        self.heartbeat_interval = cfg["heartbeat.interval.ms"] / 1000.0
        self.max_poll_interval_ms = cfg["max.poll.interval.ms"]
        self.strategies = parse_strategies(cfg["partition.assignment.strategy"])
        self.cooperative = rebalance_protocol(self.strategies) == COOPERATIVE
        self.request_timeout = cfg["request.timeout.ms"] / 1000.0
        self.metadata_max_age = cfg["metadata.max.age.ms"] / 1000.0
        self._meta = meta
        self._ctx = ctx
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id: str | None = None
        self.state = UNJOINED
        self.subscription: list[str] = []        # as given: names and '^' patterns
        self.topics: list[str] = []              # the names it currently matches
        self._topics_checked = 0.0
        # the leader's: (topics the group subscribes to, their partition counts)
        # as of its last assignment, and when it last compared them
        self._assigned_counts: tuple[list, dict] | None = None
        self._counts_checked = 0.0
        self.auto_create_topics = bool(cfg.get("allow.auto.create.topics", False))
        self._conn: Connection | None = None
        self._pending: dict[int, tuple] = {}     # correlation id -> (kind, context)
        self._rejoin = False                      # set by the heartbeat thread
        self._lost_reason: str | None = None      # set by the heartbeat thread
        self._fatal: KafkaError | None = None
        self.last_poll = time.monotonic()
        self.rebalances = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hb_thread: threading.Thread | None = None
        self._heartbeat_link_failed = False
        self._hb_wake = threading.Event()

    # ---- coordinator connection ------------------------------------------------------------

    def _coordinator_endpoint(self) -> str:
        resp = self._meta.admin_request(ApiKey.FIND_COORDINATOR, {
            "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]},
            self.request_timeout)
        node = resp["coordinators"][0] if resp.get("coordinators") else resp
        if node.get("error_code"):
            raise errors.error_for_code(node["error_code"])(
                f"FindCoordinator for group {self.group_id!r}")
        return f"tcp://{node['host']}:{node['port']}"

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self._coordinator_endpoint(), self.client_id, self._ctx)
        return self._conn

    @property
    def link(self):
        """The link to the coordinator, when a response is awaited (for the
        consumer's poller)."""
        return self._conn if self._conn is not None and self._pending else None

    def request(self, api_key: int, body: dict, version: int | None = None):
        """A synchronous request to the coordinator (commits, offset fetches)."""
        cid = self.conn.send(api_key, body, version=version)
        got = self.conn.wait_for(cid, self.request_timeout)
        if isinstance(got, KafkaError):
            raise got
        return got

    # ---- subscription ----------------------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        self.subscription = list(topics)
        self.topics = self._matching_topics()
        self._request_rejoin()
        self._start_heartbeats()

    def _matching_topics(self) -> list[str]:
        patterns = [re.compile(t) for t in self.subscription if t.startswith("^")]
        names = [t for t in self.subscription if not t.startswith("^")]
        if patterns:
            self._meta.refresh(None, False, self.request_timeout)
        self._topics_checked = time.monotonic()
        matched = {t for t in self._meta.topics for p in patterns if p.match(t)
                   if not t.startswith("__")}
        return sorted(set(names) | matched)

    def _request_rejoin(self) -> None:
        if self.state == STABLE:
            self.state = UNJOINED
        else:
            self._rejoin = True

    # ---- heartbeats (background thread) -----------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._hb_thread is None:
            self._hb_thread = threading.Thread(target=self._heartbeat_loop,
                                               name=f"kafkalite-heartbeat-{self.group_id}",
                                               daemon=True)
            self._hb_thread.start()

    def _heartbeat_connection(self, endpoint: str) -> Connection | None:
        """A link to the coordinator for heartbeats, or None when it cannot be
        made now (a restarting worker, a port taken over): the thread tries again
        at its next beat. Were the error to escape, the thread would end and the
        member, heartbeating no more, would be expelled at every session timeout
        while its consumer polled on."""
        try:
            conn = Connection(endpoint, self.client_id, self._ctx)
        except KafkaError as exc:
            if not self._heartbeat_link_failed:     # once, not at every beat
                log.warning("group %s: no link to the coordinator at %s for heartbeats "
                            "(tried again at each beat): %s", self.group_id, endpoint, exc)
            self._heartbeat_link_failed = True
            return None
        self._heartbeat_link_failed = False
        return conn

    def _heartbeat_loop(self) -> None:
        conn = None
        try:
            while not self._stop.wait(self.heartbeat_interval):
                with self._lock:
                    state, member_id, generation = self.state, self.member_id, self.generation
                endpoint = self._conn.endpoint if self._conn is not None else None
                if state not in (STABLE, SYNCING) or not member_id or endpoint is None:
                    continue
                if (time.monotonic() - self.last_poll) * 1000 > self.max_poll_interval_ms:
                    log.warning("group %s: poll() was not called for %d ms "
                                "(max.poll.interval.ms); leaving the group", self.group_id,
                                self.max_poll_interval_ms)
                    if conn is None:
                        conn = self._heartbeat_connection(endpoint)
                    if conn is not None and not self.instance_id:
                        conn.send(ApiKey.LEAVE_GROUP, {
                            "group_id": self.group_id, "member_id": member_id,
                            "members": [{"member_id": member_id, "group_instance_id": None,
                                         "reason": "max.poll.interval.ms exceeded"}]},
                            expect_response=False)
                    with self._lock:
                        if self.generation == generation:
                            self._lost_reason = "max.poll.interval.ms exceeded"
                    continue
                if conn is None:
                    conn = self._heartbeat_connection(endpoint)
                    if conn is None:
                        continue
                try:
                    resp = conn.request(ApiKey.HEARTBEAT, {
                        "group_id": self.group_id, "generation_id": generation,
                        "member_id": member_id, "group_instance_id": self.instance_id},
                        timeout=max(self.session_timeout_ms / 1000.0, 1.0))
                except KafkaTimeoutError:
                    conn.close()
                    conn = None
                    continue
                except KafkaError as exc:
                    log.warning("group %s: heartbeat failed: %s", self.group_id, exc)
                    continue
                code = resp["error_code"]
                with self._lock:
                    if self.generation != generation or self.member_id != member_id:
                        continue  # answered for a generation we have left
                    if code == errors.RebalanceInProgressError.code:
                        self._rejoin = True
                    elif code in (errors.UnknownMemberIdError.code,
                                  errors.IllegalGenerationError.code):
                        self._lost_reason = errors.error_for_code(code).name
                    elif code == errors.FencedInstanceIdError.code:
                        self._fatal = errors.FencedInstanceIdError(
                            f"group.instance.id {self.instance_id!r} was taken over by "
                            f"another consumer")
        except zmq.ZMQError as exc:   # the consumer closed its context under us
            log.debug("group %s: heartbeat thread stops: %s", self.group_id, exc)
        finally:
            if conn is not None:
                conn.close()

    # ---- the rebalance, driven from poll() ---------------------------------------------------

    def step(self, owned: set) -> Change | None:
        """Advance without blocking; a Change for the consumer to apply, or None."""
        self.last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        if not self.subscription:
            return self._take_responses(owned)     # commits of an assign()ed consumer
        with self._lock:
            lost, self._lost_reason = self._lost_reason, None
            rejoin, self._rejoin = self._rejoin, False
            if lost is not None:
                log.info("group %s: membership lost (%s); rejoining", self.group_id, lost)
                self.generation = -1
                if lost != errors.IllegalGenerationError.name:
                    self.member_id = ""
                self.state = UNJOINED
                self._pending = {cid: v for cid, v in self._pending.items() if v[0] == "commit"}
        if lost is not None and owned:
            return Change(lost=sorted(owned))
        if rejoin:
            if self.state == STABLE:
                self.state = UNJOINED
            elif self.state == SYNCING:
                self._rejoin = True    # the sync answer may predate the new rebalance
        if self.state == STABLE and self._leader_counts_changed():
            self.state = UNJOINED
        if (self.subscription and any(t.startswith("^") for t in self.subscription)
                and time.monotonic() - self._topics_checked > self.metadata_max_age):
            matched = self._matching_topics()
            if matched != self.topics:
                self.topics = matched
                if self.state == STABLE:
                    self.state = UNJOINED
                else:
                    self._rejoin = True
        if self.state == UNJOINED:
            if not self.cooperative and owned:
                return Change(revoke=sorted(owned))
            self._send_join(owned)
        return self._take_responses(owned)

    def _leader_counts_changed(self) -> bool:
        """The leader's watch (Kafka's ConsumerCoordinator does the same): the
        partition counts of the topics the group subscribes to, against those
        it last assigned, every metadata.max.age.ms, or every
        MISSING_TOPIC_RECHECK_S while one of them does not exist yet (a sink
        subscribed before its topic is made must see it soon after). A
        change (a topic made, partitions added) is a new rebalance."""
        if self.member_id != self.leader_id or self._assigned_counts is None:
            return False
        wanted, counts = self._assigned_counts
        now = time.monotonic()
        every = (self.metadata_max_age if len(counts) == len(wanted)
                 else min(self.metadata_max_age, MISSING_TOPIC_RECHECK_S))
        if now - self._counts_checked < every:
            return False
        self._counts_checked = now
        try:
            now_counts = self._partition_counts(wanted)
        except KafkaError as exc:
            log.debug("group %s: metadata for the leader's watch failed: %s", self.group_id, exc)
            return False
        if now_counts == counts:
            return False
        log.info("group %s: the subscribed topics changed (%s -> %s partitions); rebalancing",
                 self.group_id, counts, now_counts)
        return True

    def _partition_counts(self, topics: list[str]) -> dict:
        self._meta.refresh(topics, self.auto_create_topics, self.request_timeout)
        return {t: len(self._meta.topics[t].partitions) for t in topics
                if t in self._meta.topics and self._meta.topics[t].partitions}

    def _subscription_metadata(self, owned) -> bytes:
        return encode_subscription(_SUBSCRIPTION_VERSION, {
            "topics": self.topics, "user_data": None,
            "owned_partitions": [{"topic": t, "partitions": ps}
                                 for t, ps in _grouped(owned).items()],
            "generation_id": self.generation})

    def _send_join(self, owned) -> None:
        meta = self._subscription_metadata(owned)
        cid = self.conn.send(ApiKey.JOIN_GROUP, {
            "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
            "rebalance_timeout_ms": self.max_poll_interval_ms, "member_id": self.member_id,
            "group_instance_id": self.instance_id, "protocol_type": "consumer",
            "protocols": [{"name": s, "metadata": meta} for s in self.strategies],
            "reason": None})
        self._pending[cid] = ("join", time.monotonic())
        self.state = JOINING

    def _take_responses(self, owned) -> Change | None:
        while self._pending and self._conn is not None:
            got = self._conn.recv(0)
            if got is None:
                break
            cid, body = got
            entry = self._pending.pop(cid, None)
            if entry is None:
                continue
            kind = entry[0]
            if kind == "commit":
                entry[1](body)
                continue
            change = (self._on_join if kind == "join" else self._on_sync)(body, owned)
            if change is not None:
                return change
        now = time.monotonic()
        for cid, entry in list(self._pending.items()):
            if entry[0] in ("join", "sync") and now - entry[1] > (
                    self.max_poll_interval_ms / 1000.0 + self.request_timeout):
                del self._pending[cid]
                log.warning("group %s: no %s response; retrying", self.group_id, entry[0])
                self.state = UNJOINED
        return None

    def _retry_join(self, owned, reset_member: bool = False) -> None:
        if reset_member:
            self.member_id = ""
            self.generation = -1
        self.state = UNJOINED
        if self.cooperative or not owned:
            self._send_join(owned)

    def _on_join(self, body, owned) -> Change | None:
        if isinstance(body, KafkaError):
            raise body
        code = body["error_code"]
        if code == errors.MemberIdRequiredError.code:
            self.member_id = body["member_id"]
            self._send_join(owned)
            return None
        if code == errors.UnknownMemberIdError.code:
            lost = sorted(owned)
            self._retry_join(set(), reset_member=True)
            return Change(lost=lost) if lost else None
        if code in (errors.RebalanceInProgressError.code, errors.CoordinatorLoadInProgressError.code,
                    errors.CoordinatorNotAvailableError.code, errors.NotCoordinatorError.code):
            self._retry_join(owned)
            return None
        if code:
            raise errors.error_for_code(code)(f"JoinGroup of group {self.group_id!r} failed")
        with self._lock:
            self.member_id = body["member_id"]
            self.generation = body["generation_id"]
            self.protocol = body["protocol_name"]
            self.leader_id = body["leader"]
            self.state = SYNCING
        assignments = []
        if self.member_id == self.leader_id:
            assignments = self._assign(body["members"])
        cid = self.conn.send(ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": self.instance_id,
            "protocol_type": "consumer", "protocol_name": self.protocol,
            "assignments": assignments})
        self._pending[cid] = ("sync", time.monotonic())
        return None

    def _assign(self, members) -> list:
        """The leader's job: run the chosen assignor over every member's subscription."""
        subs = []
        for m in members:
            try:
                _, s = decode_subscription(m["metadata"])
            except ProtocolError:
                s = {"topics": [], "owned_partitions": [], "generation_id": -1}
            subs.append(MemberSubscription(
                m["member_id"], list(s["topics"]),
                [(o["topic"], p) for o in s.get("owned_partitions") or () for p in o["partitions"]],
                s.get("generation_id", -1), m.get("group_instance_id")))
        wanted = sorted({t for s in subs for t in s.topics})
        counts = self._partition_counts(wanted) if wanted else {}
        self._assigned_counts = (wanted, counts)
        self._counts_checked = time.monotonic()
        fn = ASSIGNORS[self.protocol][0]
        result = fn(subs, counts)
        version = 1 if self.cooperative else 0
        return [{"member_id": mid, "assignment": encode_assignment(version, {
            "assigned_partitions": [{"topic": t, "partitions": ps}
                                    for t, ps in _grouped(tps).items()],
            "user_data": None})} for mid, tps in result.items()]

    def _on_sync(self, body, owned) -> Change | None:
        if isinstance(body, KafkaError):
            raise body
        code = body["error_code"]
        if code == errors.RebalanceInProgressError.code:
            self._retry_join(owned)
            return None
        if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code):
            lost = sorted(owned)
            self._retry_join(set(), reset_member=code == errors.UnknownMemberIdError.code)
            return Change(lost=lost) if lost else None
        if code == errors.FencedInstanceIdError.code:
            raise errors.FencedInstanceIdError(
                f"group.instance.id {self.instance_id!r} was taken over by another consumer")
        if code:
            raise errors.error_for_code(code)(f"SyncGroup of group {self.group_id!r} failed")
        try:
            _, a = decode_assignment(body["assignment"]) if body["assignment"] else (0, {
                "assigned_partitions": []})
        except ProtocolError as exc:
            raise errors.InconsistentGroupProtocolError(f"unreadable assignment: {exc}") from None
        new = {(t["topic"], p) for t in a["assigned_partitions"] for p in t["partitions"]}
        with self._lock:
            self.state = STABLE
        self.rebalances += 1
        log.info("group %s: generation %d, assigned %d partition(s)", self.group_id,
                 self.generation, len(new))
        if self.cooperative:
            revoked = sorted(set(owned) - new)
            if revoked:
                self._rejoin = True   # so the next round can give them to their new owner
            return Change(revoke=revoked, assign=sorted(new - set(owned)))
        return Change(assign=sorted(new))

    # ---- commits ---------------------------------------------------------------------------

    def commit_body(self, offsets: dict) -> dict:
        """OffsetCommit for {(topic, partition): (offset, metadata)}."""
        by_topic: dict[str, list] = {}
        for (t, p), (off, md) in sorted(offsets.items()):
            by_topic.setdefault(t, []).append({"partition_index": p, "committed_offset": off,
                                               "committed_leader_epoch": -1,
                                               "committed_metadata": md})
        with self._lock:
            generation, member_id = self.generation, self.member_id
        return {"group_id": self.group_id, "generation_id_or_member_epoch": generation,
                "member_id": member_id, "group_instance_id": self.instance_id,
                "retention_time_ms": -1,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}

    def commit(self, offsets: dict) -> dict:
        """OffsetCommit of {(topic, partition): (offset, metadata)}; the response."""
        return self.request(ApiKey.OFFSET_COMMIT, self.commit_body(offsets))

    def commit_async(self, offsets: dict, callback) -> None:
        cid = self.conn.send(ApiKey.OFFSET_COMMIT, self.commit_body(offsets))
        self._pending[cid] = ("commit", callback)

    def drain_commits(self, timeout: float) -> None:
        """Wait up to ``timeout`` for async commits still in flight (at close)."""
        deadline = time.monotonic() + timeout
        while any(v[0] == "commit" for v in self._pending.values()):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._conn is None:
                return
            got = self._conn.recv(int(remaining * 1000) + 1)
            if got is None:
                continue
            entry = self._pending.pop(got[0], None)
            if entry is not None and entry[0] == "commit":
                entry[1](got[1])

    def committed(self, tps) -> dict:
        """{(topic, partition): (offset, metadata)}; offset -1 when none is committed."""
        resp = self.request(ApiKey.OFFSET_FETCH, {
            "group_id": self.group_id, "require_stable": False,
            "topics": [{"name": t, "partition_indexes": ps} for t, ps in _grouped(tps).items()],
            "groups": [{"group_id": self.group_id, "member_id": None, "member_epoch": -1,
                        "topics": [{"name": t, "partition_indexes": ps}
                                   for t, ps in _grouped(tps).items()]}]})
        topics = resp["groups"][0]["topics"] if "groups" in resp and resp["groups"] else resp["topics"]
        out = {}
        for t in topics:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise errors.error_for_code(p["error_code"])(
                        f"committed offset of {t['name']}-{p['partition_index']}")
                out[(t["name"], p["partition_index"])] = (p["committed_offset"], p["metadata"])
        return out

    # ---- leaving ---------------------------------------------------------------------------

    def close(self, leave: bool = True) -> None:
        self._stop.set()
        if self._hb_thread is not None:
            self._hb_thread.join(timeout=self.heartbeat_interval + 5)
        if leave and self.member_id and not self.instance_id and self._conn is not None:
            # Static members do not leave: they may come back within the session timeout.
            try:
                self.request(ApiKey.LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": self.member_id,
                    "members": [{"member_id": self.member_id, "group_instance_id": None,
                                 "reason": "the consumer is closing"}]})
            except KafkaError as exc:
                log.info("group %s: LeaveGroup failed: %s", self.group_id, exc)
        if self._conn is not None:
            self._conn.close()
            self._conn = None
