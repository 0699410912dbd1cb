"""The share consumer: a member of a share group (KIP-932, Kafka's queues).

A share group's members share partitions; the partitions' leaders hand
each record to one member at a time, locked for the broker's
``group.share.record.lock.duration.ms``, and the member acknowledges it:

    from kafkalite.client import ShareConsumer, AcknowledgeType
    c = ShareConsumer({"bootstrap.servers": "localhost:7092", "group.id": "jobs"})
    c.subscribe(["tasks"])
    while True:
        msg = c.poll(1.0)
        if msg is not None:
            handle(msg)        # msg.delivery_count(): 1 the first time
    c.close()

``poll``/``consume`` return Messages with a delivery count. With
``share.acknowledgement.mode`` "implicit" (the default, as Kafka's), what
the last poll returned is accepted at the next poll, ``commit_sync``,
``commit_async`` or ``close``, unless ``acknowledge(msg, type)`` said
otherwise: ACCEPT (done), RELEASE (give it to a member again) or REJECT
(never deliver it again; the broker archives it). In "explicit" mode only
what ``acknowledge`` names is acknowledged; records left unacknowledged go
back to the group when their lock expires. Acknowledgements travel with the
next ShareFetch to the partition's leader, or in a ShareAcknowledge at
``commit_sync``/``commit_async``/``close``; ``on_commit(offsets, error)``
hears each answer (Kafka's AcknowledgementCommitCallback): offsets is
{(topic, partition): [(offset, AcknowledgeType)]}, error None or the
KafkaError (then the acknowledgements may or may not have been applied).

Membership (share_membership.py): ShareGroupHeartbeat to the group
coordinator every heartbeat interval the coordinator names, from a
background thread, so a member that processes slowly stays in the group as
long as it polls at least every ``max.poll.interval.ms``. The assignment
names partitions, which several members may share.

Fetched bytes stay as they came; the Messages of a batch are made in
Cython (kafkalite._ext.messages.share_messages) keeping only the acquired
records. Offsets acquired but holding no record (transaction markers,
compacted records) are acknowledged as gaps at once.

Thread safety: none; use one ShareConsumer per thread.
"""
from __future__ import annotations

import collections
import time
from enum import IntEnum

import zmq

from kafkalite import errors
from kafkalite._ext.messages import share_messages
from kafkalite.client.config import SHARE_CONSUMER, resolve
from kafkalite.client.connection import Connection, client_context, parse_bootstrap
from kafkalite.client.metadata import Metadata
from kafkalite.client.share_membership import ShareMembership
from kafkalite.client.types import Message, TopicPartition
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.messages.shares import ACCEPT, GAP, REJECT, RELEASE
from kafkalite.record import iter_batches

METADATA_RETRY_S = 0.2       # metadata asked again at most this often after a leader moved
SHARE_VERSION = 0            # ShareGroupHeartbeat/ShareFetch/ShareAcknowledge v0
COORDINATOR_RETRY_S = 0.5    # FindCoordinator asked again at most this often after a failure
_OPEN, _CLOSE = 0, -1        # share session epochs
# Share-session errors: the broker forgot the session (restarted); open a new one.
_SESSION_LOST = frozenset({errors.ShareSessionNotFoundError.code,
                           errors.InvalidShareSessionEpochError.code})


class AcknowledgeType(IntEnum):
    """How a record is acknowledged (Kafka's AcknowledgeType)."""
    ACCEPT = ACCEPT
    RELEASE = RELEASE
    REJECT = REJECT


class _Node:
    """A share session with one broker (worker): its link, the epoch the
    next request carries, and the request in flight."""
    __slots__ = ("conn", "epoch", "in_flight")

    def __init__(self, conn: Connection):
        self.conn = conn
        self.epoch = _OPEN
        self.in_flight = None        # (correlation id, kind, acks sent {tp: [(f, l, t)]}, sent at)


class ShareConsumer:
    def __init__(self, config: dict | None = None, **kwargs):
        cfg = resolve({**(config or {}), **kwargs}, SHARE_CONSUMER)
        if not cfg.get("group.id"):
            raise ValueError("configuration property 'group.id' is required (the share group)")
        if cfg["share.acknowledgement.mode"] not in ("implicit", "explicit"):
            raise ValueError("share.acknowledgement.mode must be implicit or explicit")
        self.config = cfg
        self.group_id = cfg["group.id"]
        self._implicit = cfg["share.acknowledgement.mode"] == "implicit"
        self._ctx = client_context(cfg)
        self._meta = Metadata(parse_bootstrap(cfg["bootstrap.servers"]), cfg["client.id"],
                              self._ctx)
        self._timeout = cfg["request.timeout.ms"] / 1000.0
        self._coordinator: Connection | None = None    # FindCoordinator's answer; leaving
        self._coordinator_retry = 0.0
        self._group = ShareMembership(self.group_id, cfg["client.id"], self._ctx, self._timeout,
                                      cfg["max.poll.interval.ms"])
        self._subscription: list[str] | None = None
        self._assignment_seq = 0                       # the membership's assignment applied
        self._assignment: set = set()                  # {(topic, partition)}
        self._topic_ids: dict = {}                     # topic id -> name
        self._nodes: dict[int, _Node] = {}
        self._buffer: collections.deque = collections.deque()   # [tp, messages, taken]
        self._delivered: dict = {}       # tp -> [(first, last)] returned, not yet acknowledged
        self._acks: dict = {}            # tp -> [(first, last, type)] to send
        self._stale = False              # a leader may have moved: ask the metadata again
        self._closed = False

    # ---- membership ------------------------------------------------------------------------

    @property
    def member_id(self) -> str:
        return self._group.member_id

    @property
    def member_epoch(self) -> int:
        return self._group.state()[0]

    def subscribe(self, topics: list[str]) -> None:
        self._check_open()
        self._subscription = sorted(set(topics))
        self._group.subscribe(self._subscription)

    def unsubscribe(self) -> None:
        self._check_open()
        self._leave(self._group.unsubscribe())
        self._subscription = None
        self._assignment = set()

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self._assignment)]

    def _coordinator_conn(self) -> Connection:
        if self._coordinator is None:
            resp = self._meta.admin_request(ApiKey.FIND_COORDINATOR, {
                "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]},
                self._timeout)
            node = resp["coordinators"][0] if resp.get("coordinators") else resp
            if node.get("error_code"):
                raise errors.error_for_code(node["error_code"])(
                    f"FindCoordinator for share group {self.group_id!r}")
            self._coordinator = Connection(f"tcp://{node['host']}:{node['port']}",
                                           self.config["client.id"], self._ctx)
        return self._coordinator

    def _sync_membership(self) -> None:
        """Find the coordinator for the heartbeat thread when it lost it,
        and take the assignment its last answer carried."""
        if self._group.coordinator_lost() and time.monotonic() >= self._coordinator_retry:
            self._drop_coordinator()
            try:
                self._group.set_coordinator(self._coordinator_conn().endpoint)
            except KafkaError:
                self._coordinator_retry = time.monotonic() + COORDINATOR_RETRY_S
        _, assignment, seq = self._group.state()
        if seq != self._assignment_seq:
            self._assignment_seq = seq
            self._set_assignment(assignment or [])

    def _set_assignment(self, topic_partitions: list) -> None:
        missing = [t["topic_id"] for t in topic_partitions if t["topic_id"] not in self._topic_ids]
        if missing:
            self._refresh_metadata()
        out = set()
        for t in topic_partitions:
            name = self._topic_ids.get(t["topic_id"])
            if name is not None:
                out.update((name, p) for p in t["partitions"])
        self._assignment = out

    def _refresh_metadata(self) -> None:
        try:
            self._meta.refresh(self._subscription or None, False, self._timeout)
        except KafkaError:
            return
        self._topic_ids = {info.topic_id: name for name, info in self._meta.topics.items()}

    def _drop_coordinator(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()
            self._coordinator = None

    def _leave(self, epoch: int) -> None:
        """Leave the group, if the membership had joined (``epoch`` > 0)."""
        if epoch <= 0:
            return
        try:
            self._coordinator_conn().request(ApiKey.SHARE_GROUP_HEARTBEAT,
                                             self._group.leave_body(), self._timeout,
                                             SHARE_VERSION)
        except KafkaError:
            pass

    # ---- acknowledgements ------------------------------------------------------------------

    def acknowledge(self, message: Message, type: int = AcknowledgeType.ACCEPT) -> None:
        """Acknowledge one record poll/consume returned (sent with the next
        fetch or commit)."""
        self._check_open()
        if type not in (ACCEPT, RELEASE, REJECT):
            raise ValueError(f"unknown acknowledge type {type!r}")
        tp = (message.topic(), message.partition())
        offset = message.offset()
        ranges = self._delivered.get(tp)
        if not ranges or not _remove(ranges, offset):
            raise ValueError(f"{tp[0]}-{tp[1]}@{offset} was not delivered by this consumer, or "
                             f"is acknowledged already")
        self._acks.setdefault(tp, []).append((offset, offset, int(type)))

    def _implicit_acks(self) -> None:
        if not self._implicit:
            return
        for tp, ranges in self._delivered.items():
            if ranges:
                self._acks.setdefault(tp, []).extend((f, la, ACCEPT) for f, la in ranges)
        self._delivered = {}

    def _take_acks(self, tps) -> dict:
        """The pending acknowledgements of ``tps``, taken out: {tp: batches}."""
        out = {}
        for tp in tps:
            acks = self._acks.pop(tp, None)
            if acks:
                out[tp] = acks
        return out

    def commit_sync(self, timeout: float | None = None) -> list[TopicPartition]:
        """Send the pending acknowledgements and wait for the answers: the
        partitions, each with ``error`` None or the KafkaError."""
        self._check_open()
        self._implicit_acks()
        sent = self._send_acknowledgements()
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        results: list[TopicPartition] = []
        for node in sent:
            results += self._await(node, deadline)
        return results

    def commit_async(self) -> None:
        """Send the pending acknowledgements; ``on_commit`` hears the answers
        at a later poll/consume/commit/close."""
        self._check_open()
        self._implicit_acks()
        self._send_acknowledgements()

    def _send_acknowledgements(self, close: bool = False) -> list[int]:
        """ShareAcknowledge to each broker with acknowledgements pending
        (or, closing, every broker with a session); the nodes sent to."""
        by_node: dict[int, dict] = {}
        for tp in list(self._acks):
            node = self._leader(tp)
            if node is not None:
                by_node.setdefault(node, {}).update(self._take_acks([tp]))
        nodes = set(by_node) | (set(self._nodes) if close else set())
        sent = []
        for node in nodes:
            n = self._nodes.get(node)
            if n is not None:
                self._collect(node, n, time.monotonic() + self._timeout)   # one at a time
            n = self._node(node)
            if n is None:
                continue
            acks = by_node.get(node, {})
            if n.epoch == _OPEN:
                if acks:
                    self._report(acks, errors.ShareSessionNotFoundError(
                        "no share session with the partition's leader: the records went back "
                        "to the group"))
                continue
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "share_session_epoch": _CLOSE if close else n.epoch,
                    "topics": self._ack_topics(acks)}
            try:
                cid = n.conn.send(ApiKey.SHARE_ACKNOWLEDGE, body, version=SHARE_VERSION)
            except KafkaError as exc:
                self._report(acks, exc)
                self._drop_node(node)
                continue
            n.epoch = _OPEN if close else n.epoch + 1
            n.in_flight = (cid, "ack", acks, time.monotonic())
            sent.append(node)
        return sent

    def _ack_topics(self, acks: dict) -> list:
        ids = {name: tid for tid, name in self._topic_ids.items()}
        by_topic: dict = {}
        for (topic, p), ranges in acks.items():
            by_topic.setdefault(ids[topic], []).append(
                {"partition_index": p, "acknowledgement_batches": _batches(ranges)})
        return [{"topic_id": tid, "partitions": ps} for tid, ps in by_topic.items()]

    def _report(self, acks: dict, error: KafkaError | None) -> None:
        callback = self.config.get("on_commit")
        if callback is None or not acks:
            return
        offsets = {tp: [(o, AcknowledgeType(t)) for f, la, t in ranges if t != GAP
                        for o in range(f, la + 1)] for tp, ranges in acks.items()}
        offsets = {tp: got for tp, got in offsets.items() if got}
        if offsets:
            callback(offsets, error)

    # ---- fetching ----------------------------------------------------------------------------

    def _leader(self, tp) -> int | None:
        info = self._meta.topics.get(tp[0])
        if info is None or tp[1] not in info.partitions:
            return None
        node = info.partitions[tp[1]].leader
        return node if node >= 0 else None

    def _node(self, node: int) -> _Node | None:
        n = self._nodes.get(node)
        if n is None:
            endpoint = self._meta.brokers.get(node)
            if endpoint is None:
                return None
            n = self._nodes[node] = _Node(Connection(endpoint, self.config["client.id"],
                                                     self._ctx, watch=True))
        return n

    def _drop_node(self, node: int) -> None:
        n = self._nodes.pop(node, None)
        if n is not None:
            if n.in_flight is not None:
                acks, n.in_flight = n.in_flight[2], None
                self._report(acks, errors.NetworkError(
                    "the connection to the partition's leader was lost"))
            n.conn.close()
        self._stale = True

    def _send_fetches(self, wait_ms: int) -> None:
        if self.member_epoch <= 0 or not self._assignment:
            return
        if (self._stale or any(self._leader(tp) is None for tp in self._assignment)) and \
                time.monotonic() - self._meta.refreshed_at >= METADATA_RETRY_S:
            # a leader moved or went away: where the partitions are now
            self._stale = False
            self._refresh_metadata()
        by_node: dict[int, list] = {}
        for tp in self._assignment:
            node = self._leader(tp)
            if node is not None:
                by_node.setdefault(node, []).append(tp)
        # acknowledgements of partitions no longer assigned go with the
        # fetches to their leaders, or alone
        cfg = self.config
        ids = {name: tid for tid, name in self._topic_ids.items()}
        for node, tps in by_node.items():
            n = self._node(node)
            if n is None or n.in_flight is not None:
                continue
            acks = self._take_acks([tp for tp in self._acks if self._leader(tp) == node])
            topics: dict = {}
            for tp in set(tps) | set(acks):
                topics.setdefault(ids[tp[0]], []).append({
                    "partition_index": tp[1],
                    "partition_max_bytes": cfg["max.partition.fetch.bytes"] if tp in tps else 0,
                    "acknowledgement_batches": _batches(acks.get(tp, ()))})
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "share_session_epoch": n.epoch, "max_wait_ms": wait_ms,
                    "min_bytes": cfg["fetch.min.bytes"], "max_bytes": cfg["fetch.max.bytes"],
                    "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
                    "forgotten_topics_data": []}
            try:
                cid = n.conn.send(ApiKey.SHARE_FETCH, body, version=SHARE_VERSION)
            except KafkaError as exc:
                self._report(acks, exc)
                self._drop_node(node)
                continue
            n.epoch += 1
            n.in_flight = (cid, "fetch", acks, time.monotonic())

    def _collect(self, node: int, n: _Node, deadline: float) -> list[TopicPartition]:
        """Wait (until ``deadline``) for the request in flight to ``node``."""
        if n.in_flight is None:
            return []
        try:
            body = n.conn.wait_for(n.in_flight[0], max(deadline - time.monotonic(), 0.001))
        except KafkaError as exc:        # no answer in time: the link is given up
            body = exc
        return self._on_answer(node, n, body)

    def _await(self, node: int, deadline: float) -> list[TopicPartition]:
        n = self._nodes.get(node)
        return [] if n is None else self._collect(node, n, deadline)

    def _on_answer(self, node: int, n: _Node, body) -> list[TopicPartition]:
        _, kind, acks, _ = n.in_flight
        n.in_flight = None
        if isinstance(body, KafkaError):
            self._report(acks, body)
            self._drop_node(node)
            if kind == "fetch" and not isinstance(body, errors.RequestTimedOutError):
                n.epoch = _OPEN
            return [_tp(tp, body) for tp in acks]
        code = body["error_code"]
        if code:
            exc = errors.error_for_code(code)(body.get("error_message") or None)
            if code in _SESSION_LOST:
                n.epoch = _OPEN
            self._report(acks, exc)
            return [_tp(tp, exc) for tp in acks]
        results = []
        reported = set()
        for t in body["responses"]:
            name = self._topic_ids.get(t["topic_id"])
            for p in t["partitions"]:
                tp = (name, p["partition_index"])
                if tp in acks:
                    code = p.get("acknowledge_error_code", p.get("error_code", 0)) \
                        if kind == "fetch" else p["error_code"]
                    exc = (errors.error_for_code(code)(
                        p.get("acknowledge_error_message") or p.get("error_message") or None)
                        if code else None)
                    self._report({tp: acks[tp]}, exc)
                    reported.add(tp)
                    results.append(_tp(tp, exc))
                if kind != "fetch":
                    continue
                if p["error_code"]:
                    self._stale = True      # NOT_LEADER_OR_FOLLOWER and the like
                    continue
                if name is not None and p["acquired_records"]:
                    self._take_records(tp, p["records"], p["acquired_records"])
        missing = {tp: a for tp, a in acks.items() if tp not in reported}
        if missing:
            self._report(missing, None)
            results += [_tp(tp, None) for tp in missing]
        return results

    def _take_records(self, tp, records, acquired: list) -> None:
        ranges = sorted((a["first_offset"], a["last_offset"], a["delivery_count"])
                        for a in acquired)
        got = []
        if records is not None and len(records):
            for batch in iter_batches(records, 0):
                if batch.is_control or batch.next_offset <= ranges[0][0] \
                        or batch.base_offset > ranges[-1][1]:
                    continue
                got += share_messages(batch, tp[0], tp[1], ranges)
        held = sum(la - f + 1 for f, la, _ in ranges)
        if len(got) != held:
            # acquired offsets with no record (markers, compacted away): gaps
            seen = {m.offset() for m in got}
            gaps = [(o, o, GAP) for f, la, _ in ranges for o in range(f, la + 1)
                    if o not in seen]
            self._acks.setdefault(tp, []).extend(gaps)
        if got:
            self._buffer.append([tp, got, 0])

    def _pump(self, timeout: float) -> None:
        """Membership news, send fetches, take answers for up to ``timeout`` s."""
        self._sync_membership()
        if self._subscription is not None and self.member_epoch > 0 and not self._topic_ids:
            self._refresh_metadata()
        self._send_fetches(int(min(self.config["fetch.max.wait.ms"], timeout * 1000)))
        waiting = {node: n for node, n in self._nodes.items() if n.in_flight is not None}
        if not waiting:
            time.sleep(min(timeout, 0.05))
            return
        poller = zmq.Poller()
        for n in waiting.values():
            n.conn.register(poller)
        armed = all(n.conn.arm() for n in waiting.values())
        poller.poll(int(max(timeout, 0) * 1000) if armed else 0)
        now = time.monotonic()
        for node, n in waiting.items():
            for cid, body in n.conn.receive():
                if n.in_flight is not None and n.in_flight[0] == cid:
                    self._on_answer(node, n, body)
            if node in self._nodes and (not n.conn.alive() or (
                    n.in_flight is not None and now - n.in_flight[3]
                    > self._timeout + self.config["fetch.max.wait.ms"] / 1000.0)):
                self._drop_node(node)

    # ---- reading -------------------------------------------------------------------------------

    def poll(self, timeout: float | None = None) -> Message | None:
        """One record, or None if none arrived within ``timeout`` seconds."""
        got = self.consume(1, -1 if timeout is None else timeout)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` records, waiting up to ``timeout`` seconds
        (-1: for ever) for the first. What the previous call returned is
        accepted now, in implicit mode, unless acknowledged otherwise."""
        self._check_open()
        self._group.polled()
        self._implicit_acks()
        deadline = None if timeout < 0 else time.monotonic() + timeout
        while not self._buffer:
            remaining = 1.0 if deadline is None else deadline - time.monotonic()
            self._pump(max(min(remaining, 1.0), 0))
            if deadline is not None and time.monotonic() >= deadline:
                break
        if not self._buffer and self._acks:
            self._send_fetches(0)       # acknowledgements go now, not at the next fetch
        out: list[Message] = []
        while self._buffer and len(out) < num_messages:
            entry = self._buffer[0]
            tp, msgs, taken = entry
            end = min(len(msgs), taken + num_messages - len(out))
            part = msgs[taken:end]
            out += part
            first, last = part[0].offset(), part[-1].offset()
            ranges = self._delivered.setdefault(tp, [])
            if last - first + 1 == len(part):
                ranges.append((first, last))         # a run of offsets: one range
            else:
                ranges.extend((m.offset(), m.offset()) for m in part)
            if end == len(msgs):
                self._buffer.popleft()
            else:
                entry[2] = end
        return out

    # ---- closing -------------------------------------------------------------------------------

    def close(self) -> None:
        """Accept what the last poll returned (implicit mode), release every
        record still held (buffered, unacknowledged), leave the group."""
        if self._closed:
            return
        self._implicit_acks()
        deadline = time.monotonic() + self._timeout
        for node in self._send_acknowledgements(close=True):
            self._await(node, deadline)
        self._leave(self._group.close())
        self._closed = True
        for node in list(self._nodes):
            self._drop_node(node)
        self._drop_coordinator()
        self._meta.close()
        self._ctx.term()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("share consumer is closed")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _remove(ranges: list, offset: int) -> bool:
    """Take ``offset`` out of the (first, last) ``ranges``; whether it was there."""
    for i, (f, la) in enumerate(ranges):
        if f <= offset <= la:
            pieces = [r for r in ((f, offset - 1), (offset + 1, la)) if r[0] <= r[1]]
            ranges[i:i + 1] = pieces
            return True
    return False


def _batches(ranges) -> list:
    """AcknowledgementBatches from (first, last, type) ranges: sorted, runs
    of one type merged."""
    out: list = []
    for f, la, t in sorted(ranges):
        if out and out[-1]["last_offset"] + 1 == f and out[-1]["acknowledge_types"][0] == t:
            out[-1]["last_offset"] = la
        else:
            out.append({"first_offset": f, "last_offset": la, "acknowledge_types": [t]})
    return out


def _tp(tp, error) -> TopicPartition:
    out = TopicPartition(tp[0], tp[1])
    out.error = error
    return out
