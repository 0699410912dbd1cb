"""The consumer: confluent-kafka's call shapes over kafkalite's native protocol.

Assigned partitions are fetched from the workers that lead them, one fetch
in flight per worker, long-polling (``fetch.min.bytes`` /
``fetch.max.wait.ms``) so an idle consumer waits on the server rather than
spinning; in an incremental fetch session with each worker (KIP-227,
protocol/fetch_sessions.py), so a fetch names only the partitions whose
position moved and its answer only those with something new. Fetched
bytes are kept as they came (RecordBatch v2) and decoded only when asked
for: ``poll``/``consume`` make the Messages of one batch
at a time in Cython (kafkalite._ext.messages.batch_messages);
``consume_batch`` decodes whole batches in Cython into one pyarrow
RecordBatch (see arrow.py) with no Python object per record.

Positions start from an explicit offset, OFFSET_BEGINNING / OFFSET_END,
the group's committed offset, or ``auto.offset.reset`` ("earliest",
"latest", or "error"). ``subscribe`` needs ``group.id`` and makes this
consumer a member of its consumer group: with ``group.protocol=classic``
(group.py) partitions are shared out by the group's assignor, with
``consumer`` (KIP-848, consumer_membership.py) by the coordinator's
``group.remote.assignor``; they are handed over in ``poll``/``consume``,
where ``on_assign`` / ``on_revoke`` / ``on_lost`` are called. Offsets are
committed to the group coordinator: explicitly (``commit``) or, with
``enable.auto.commit``, every ``auto.commit.interval.ms`` from within
``poll`` (positions of records already returned), before partitions are
revoked, and at ``close``.

Thread safety: none, as with confluent-kafka's Consumer; use one consumer
per thread.
"""
from __future__ import annotations

import collections
import re
import time

import numpy as np
import zmq

from kafkalite import errors
from kafkalite._ext.messages import batch_messages
from kafkalite.client import arrow, serialization
from kafkalite.client.config import (CONSUMER, CONSUMER_ALIASES, OFFSET_RESETS,
                                     check_group_protocol, resolve)
from kafkalite.client.connection import Connection, PeerLostError, client_context, parse_bootstrap
from kafkalite.client.link import Link
from kafkalite.client.metadata import Metadata, cluster_metadata, list_offsets
from kafkalite.client.tcp_link import fetch_answer_bound, resolve_transport, tcp_link_or
from kafkalite.client.consumer_fetch_state import _Assigned, _Chunk
from kafkalite.client.consumer_membership import ConsumerProtocolMembership
from kafkalite.protocol.fetch_sessions import FetchSessionHandler
from kafkalite.client.group import Change, GroupMembership
from kafkalite.client.types import (OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID,
                                    ConsumerGroupMetadata, Message, TopicPartition)
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.record import batches_extent, decode_chunks, iter_batches
from kafkalite.record.layout import CONTROL_ABORT

# An assigned partition without a leader (its worker restarting, an
# election under way) has the metadata asked again this often.
LEADERLESS_REFRESH_S = 0.2

_LATEST, _EARLIEST = -1, -2


class Consumer:
    def __init__(self, config: dict | None = None, **kwargs):
        given = {**(config or {}), **kwargs}
        # confluent-kafka's deserializer objects (serialization.py): not settings
        deserializers = serialization.take(given, serialization.DESERIALIZERS)
        cfg = resolve(given, CONSUMER, CONSUMER_ALIASES)
        check_group_protocol(given, cfg)
        reset = OFFSET_RESETS.get(str(cfg["auto.offset.reset"]).lower())
        if reset is None:
            raise ValueError(f"invalid value {cfg['auto.offset.reset']!r} for auto.offset.reset: "
                             f"use earliest, latest or error")
        if cfg["isolation.level"] not in ("read_uncommitted", "read_committed"):
            raise ValueError("isolation.level must be read_uncommitted or read_committed")
        if cfg.get("kafkalite.transport") not in (None, "zmq", "tcp"):
            raise ValueError("a consumer's kafkalite.transport must be 'zmq' or 'tcp'")
        self._transport_chosen = resolve_transport(cfg)
        self.config = cfg
        self._reset = reset
        self._ctx = client_context(cfg)
        self._meta = Metadata(parse_bootstrap(cfg["bootstrap.servers"]), cfg["client.id"],
                              self._ctx)
        self._timeout = cfg["request.timeout.ms"] / 1000.0
        self._assigned: dict[tuple[str, int], _Assigned] = {}
        self._conns: dict[int, Link] = {}    # node -> its fetch link (ZeroMQ, or TCP: tcp_link.py)
        self._in_flight: dict[int, tuple[int, float, dict]] = {}   # node -> (cid, sent, offsets)
        self._sessions: dict[int, FetchSessionHandler] = {}      # node -> its fetch session
        self._chunks: collections.deque[_Chunk] = collections.deque()
        self._subscription: list[str] | None = None
        self._group: GroupMembership | None = None
        self._callbacks: dict = {}
        self._next_auto_commit = time.monotonic() + cfg["auto.commit.interval.ms"] / 1000.0
        self._closed = False
        # no group.id: nothing to commit or keep a membership alive for
        # between fetches (poll()'s fast path)
        self._plain = not cfg.get("group.id")
        if cfg.get("group.id"):
            # fails here, naming the property, rather than at the first rebalance
            from kafkalite.client.assignors import parse_strategies
            parse_strategies(cfg["partition.assignment.strategy"])
        self._deserializers = deserializers
        if deserializers != (None, None):
            # only then a Python call per message after the plain poll/consume
            self.poll, self.consume = self._poll_deserialized, self._consume_deserialized

    # ---- assignment --------------------------------------------------------------------------

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        self._assigned.clear()
        self._chunks.clear()
        self.incremental_assign(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._check_open()
        for tp in partitions:
            if tp.partition < 0:
                raise ValueError(f"assign needs explicit partitions; got {tp}")
            off = tp.offset
            position = off if off >= 0 else {OFFSET_BEGINNING: _EARLIEST,
                                             OFFSET_END: _LATEST}.get(off)
            self._assigned[(tp.topic, tp.partition)] = _Assigned(position)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned.pop((tp.topic, tp.partition), None)
        self._chunks = collections.deque(c for c in self._chunks if c.tp in self._assigned)

    def unassign(self) -> None:
        self._assigned.clear()
        self._chunks.clear()
        # A fetch still out is for partitions no longer assigned: abandoned
        # with its link, or the next assign's first fetch from that worker
        # would wait behind its long poll (fetch.max.wait.ms): a worker
        # answers a link's requests in order, as Kafka's brokers do. The
        # session starts over with a full fetch, as after a lost link.
        for node in list(self._in_flight):
            self._drop_conn(node)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in sorted(self._assigned)]

    def subscribe(self, topics: list[str], on_assign=None, on_revoke=None, on_lost=None) -> None:
        """Join the consumer group (``group.id``) to consume ``topics`` (a
        name starting with '^' is a regex, re-matched every
        ``metadata.max.age.ms``). Partitions arrive in ``poll``/``consume``,
        which call ``on_assign(consumer, partitions)``,
        ``on_revoke(consumer, partitions)`` and ``on_lost(consumer,
        partitions)`` (partitions taken away without a chance to commit;
        ``on_revoke`` is called instead when it is not given). With an eager
        assignor the lists are whole assignments; with cooperative-sticky
        or ``group.protocol=consumer``, the partitions added or removed."""
        self._check_open()
        if not self.config.get("group.id"):
            raise errors.InvalidGroupIdError(
                "subscribe() needs group.id in the consumer config; use assign() to read "
                "partitions without a group")
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        for t in topics:
            if t.startswith("^"):
                try:
                    re.compile(t)
                except re.error as exc:
                    raise ValueError(f"invalid topic pattern {t!r}: {exc}") from None
        if self.config["allow.auto.create.topics"]:
            names = [t for t in topics if not t.startswith("^")]
            if names:
                self._meta.refresh(names, True, self._timeout)
        if self._group is None:
            self._group = self._new_membership()
        self._subscription = topics
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        self._group.subscribe(topics)

    def unsubscribe(self) -> None:
        """Leave the group: commit (with enable.auto.commit), revoke, leave."""
        if self._group is not None and self._subscription is not None:
            self._revoke(self._owned(), lost=False)
            self._group.close(leave=True)
            self._group = None
        self._subscription = None
        self.unassign()

    # ---- group membership -----------------------------------------------------------------------

    def _owned(self) -> list:
        return sorted(self._assigned)

    def _group_step(self) -> None:
        """Let the group membership advance and apply what it hands back."""
        if self._group is None:
            return
        for _ in range(8):     # a revoke is followed at once by the JoinGroup it allows
            change = self._group.step(set(self._assigned))
            if change is None:
                return
            self._apply(change)

    def _apply(self, change: Change) -> None:
        if change.lost:
            self._revoke(change.lost, lost=True)
        if change.revoke:
            self._revoke(change.revoke, lost=False)
        if change.assign or not self._group.cooperative:
            committed = self._group.committed(change.assign) if change.assign else {}
            for key in change.assign:
                off = committed.get(key, (-1, ""))[0]
                self._assigned[key] = _Assigned(off if off >= 0 else None)
            cb = self._callbacks.get("assign")
            if cb is not None:
                cb(self, [TopicPartition(t, p) for t, p in change.assign])

    def _revoke(self, keys, lost: bool) -> None:
        keys = [k for k in keys if k in self._assigned]
        if not lost and self.config["enable.auto.commit"] and keys:
            try:
                self._commit_positions(keys)
            except KafkaError as exc:
                self._report_commit_error(exc)
        tps = [TopicPartition(t, p) for t, p in keys]
        cb = self._callbacks.get("lost" if lost else "revoke") or (
            self._callbacks.get("revoke") if lost else None)
        if cb is not None and (tps or not (self._group and self._group.cooperative)):
            cb(self, tps)
        self.incremental_unassign(tps)

    def _positions(self, keys=None) -> dict:
        out = {}
        for key in keys if keys is not None else list(self._assigned):
            a = self._assigned.get(key)
            if a is not None and a.position is not None and a.position >= 0:
                out[key] = (a.position, "")
        return out

    def _commit_positions(self, keys) -> None:
        offsets = self._positions(keys)
        if offsets:
            self._commit_sync(offsets)

    def _report_commit_error(self, exc) -> None:
        cb = self.config.get("error_cb")
        if cb is not None:
            cb(exc)

    def _maybe_auto_commit(self) -> None:
        if (not self.config.get("group.id") or not self.config["enable.auto.commit"]
                or time.monotonic() < self._next_auto_commit):
            return
        self._next_auto_commit = time.monotonic() + self.config["auto.commit.interval.ms"] / 1000.0
        offsets = self._positions()
        if not offsets:
            return
        group = self._membership()
        if self._subscription is None or group.state == "stable":
            group.commit_async(offsets, lambda body: self._on_commit(body, offsets))

    def pause(self, partitions):
        for tp in partitions:
            self._assigned[(tp.topic, tp.partition)].paused = True
        self._chunks = collections.deque(c for c in self._chunks if not self._assigned[c.tp].paused)

    def resume(self, partitions):
        for tp in partitions:
            self._assigned[(tp.topic, tp.partition)].paused = False

    # ---- positions ----------------------------------------------------------------------------

    def seek(self, partition: TopicPartition) -> None:
        key = (partition.topic, partition.partition)
        if key not in self._assigned:
            raise ValueError(f"cannot seek {partition.topic}-{partition.partition}: it is not "
                             f"assigned to this consumer")
        off = partition.offset
        a = self._assigned[key]
        a.position = a.fetch_position = off if off >= 0 else {
            OFFSET_BEGINNING: _EARLIEST, OFFSET_END: _LATEST}.get(off)
        a.buffered = 0
        self._chunks = collections.deque(c for c in self._chunks if c.tp != key)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for tp in partitions:
            a = self._assigned.get((tp.topic, tp.partition))
            pos = a.position if a is not None and a.position is not None and a.position >= 0 \
                else OFFSET_INVALID
            out.append(TopicPartition(tp.topic, tp.partition, pos))
        return out

    def _list_offsets(self, requests: dict[tuple[str, int], int]) -> dict:
        """ListOffsets for {(topic, partition): timestamp}; -> {key: (offset, ts)}.
        Asked once more on a new link when the first one turned out dead as
        the request was written (an idle link the broker had closed looks
        alive until then), as Kafka's consumer retries a disconnect."""
        try:
            return list_offsets(self._meta, self._conn, requests, self._isolation(),
                                self._timeout)
        except PeerLostError:
            for node in [n for n, c in self._conns.items() if not c.alive()]:
                self._worker_lost(node)
            return list_offsets(self._meta, self._conn, requests, self._isolation(),
                                self._timeout)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int]:
        """(low, high) offsets of a partition: log start and high watermark
        (for a read_committed consumer, the last stable offset: what it can
        read up to, as Kafka's consumers report it)."""
        key = (partition.topic, partition.partition)
        if cached:
            a = self._assigned.get(key)
            if a is None or a.high_watermark < 0:
                return (OFFSET_INVALID, OFFSET_INVALID)
            return (a.log_start, a.high_watermark)
        got = self._list_offsets({key: _EARLIEST})
        low = got[key][0]
        high = self._list_offsets({key: _LATEST})[key][0]
        return (low, high)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None):
        """For each TopicPartition whose offset is a timestamp (ms), the
        earliest offset with a timestamp >= it (OFFSET_END if none)."""
        got = self._list_offsets({(tp.topic, tp.partition): tp.offset for tp in partitions})
        out = []
        for tp in partitions:
            off, _ = got[(tp.topic, tp.partition)]
            out.append(TopicPartition(tp.topic, tp.partition, off if off >= 0 else OFFSET_END))
        return out

    def _resolve_positions(self) -> None:
        todo = {k: a.position for k, a in self._assigned.items()
                if a.position is None or a.position < 0}
        if not todo:
            return
        requests = {}
        for key, pos in todo.items():
            if pos is None:
                if self._reset == "error":
                    raise errors.OffsetOutOfRangeError(
                        f"{key[0]}-{key[1]} has no position and auto.offset.reset is 'error'")
                pos = _EARLIEST if self._reset == "earliest" else _LATEST
            requests[key] = pos
        for key, (offset, _) in self._list_offsets(requests).items():
            a = self._assigned[key]
            a.position = a.fetch_position = offset

    # ---- fetching -----------------------------------------------------------------------------

    def _isolation(self) -> int:
        return 1 if self.config["isolation.level"] == "read_committed" else 0

    def _meta_for(self, topics) -> None:
        missing = [t for t in topics if t not in self._meta.topics]
        if missing:
            self._meta.refresh(sorted(set(missing) | set(self._meta.topics)), False, self._timeout)
            for t in missing:
                if t not in self._meta.topics:
                    raise errors.UnknownTopicOrPartitionError(f"topic {t!r} does not exist")

    def _conn(self, node: int) -> Link:
        endpoint = self._meta.brokers.get(node)
        if endpoint is None:
            raise errors.LeaderNotAvailableError(f"worker {node} is not available")
        conn = self._conns.get(node)
        # a link the worker closed is made anew: the broker closes a
        # connection idle for connections.max.idle.ms, and a consumer that
        # only asks ListOffsets between long pauses (the schema registry's)
        # would otherwise meet that dead link at every call
        if conn is None or conn.endpoint != endpoint or not conn.alive():
            if conn is not None:
                self._drop_conn(node)
            conn = Connection(endpoint, self.config["client.id"], self._ctx, watch=True)
            if self.config["kafkalite.transport"] == "tcp":
                conn = tcp_link_or(conn, self._timeout, max_response=fetch_answer_bound(
                    self.config["fetch.max.bytes"]), chosen=self._transport_chosen,
                    local=self.config["kafkalite.local.socket"])
            self._conns[node] = conn
        return conn

    def _drop_conn(self, node: int) -> None:
        if self._in_flight.pop(node, None) is not None and node in self._sessions:
            self._sessions[node].handle_error()    # the answer will not come: start over
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.close()

    def _send_fetches(self) -> None:
        """One fetch in flight per worker, for its partitions that are not
        paused and have less than one fetch's worth buffered: the next chunk
        is on its way while the application works on the current one."""
        self._meta_for({t for t, _ in self._assigned})
        self._resolve_positions()
        by_node: dict[int, dict] = {}
        limit = self.config["max.partition.fetch.bytes"]
        leaderless = False
        for key, a in self._assigned.items():
            if a.paused or a.buffered >= limit:
                continue
            try:
                node = self._meta.leader(*key)
            except KafkaError:
                continue
            if node < 0:
                leaderless = True
                continue
            if node in self._in_flight:
                continue
            by_node.setdefault(node, {})[key] = a.fetch_position
        if leaderless and time.monotonic() - self._meta.refreshed_at >= LEADERLESS_REFRESH_S:
            # a partition had no leader when metadata was last asked (its
            # worker restarting, an election under way): ask again, or it
            # would never be fetched
            try:
                self._meta.refresh(sorted({t for t, _ in self._assigned}), False, self._timeout)
            except KafkaError:
                pass
        cfg = self.config
        for node, positions in by_node.items():
            session = self._sessions.get(node)
            if session is None:
                session = self._sessions[node] = FetchSessionHandler()
            session_id, epoch, send, forget = session.build(positions)
            topics: dict[str, list] = {}
            for (t, p), pos in send.items():
                topics.setdefault(t, []).append({
                    "partition": p, "current_leader_epoch": -1, "fetch_offset": pos,
                    "last_fetched_epoch": -1, "log_start_offset": -1,
                    "partition_max_bytes": limit})
            forgotten: dict[str, list] = {}
            for t, p in forget:
                forgotten.setdefault(t, []).append(p)
            body = {"replica_id": -1, "max_wait_ms": cfg["fetch.max.wait.ms"],
                    "min_bytes": cfg["fetch.min.bytes"], "max_bytes": cfg["fetch.max.bytes"],
                    "isolation_level": self._isolation(), "session_id": session_id,
                    "session_epoch": epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                    "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                              for t, ps in forgotten.items()],
                    "rack_id": ""}
            try:
                cid = self._conn(node).send(ApiKey.FETCH, body)
            except KafkaError:
                session.handle_error()
                continue
            self._in_flight[node] = (cid, time.monotonic(), positions)

    def _on_fetch(self, node: int, body, positions: dict) -> None:
        session = self._sessions.get(node)
        if isinstance(body, KafkaError):
            if session is not None:
                session.handle_error()
            self._meta.refreshed_at = 0
            return
        if session is not None:
            session.handle_response(body)
        if body.get("error_code"):
            return          # a session error: no partitions; the next fetch is full
        refresh = False
        damaged = []
        for t in body["responses"]:
            for p in t["partitions"]:
                key = (t["topic"], p["partition_index"])
                a = self._assigned.get(key)
                if a is None or a.fetch_position != positions.get(key):
                    continue  # unassigned or sought while the fetch was out
                code = p["error_code"]
                if code == errors.CorruptRecordError.code:
                    # the batch at the position is damaged on the broker's
                    # disk: the application hears it (as from Kafka's own
                    # consumer) on every read until it seeks past it
                    damaged.append(f"{key[0]}-{key[1]} at offset {a.fetch_position}")
                    continue
                if code == errors.OffsetOutOfRangeError.code:
                    if self._reset == "error":
                        raise errors.OffsetOutOfRangeError(
                            f"offset {a.fetch_position} is out of range for {key[0]}-{key[1]}")
                    a.position = a.fetch_position = (
                        _EARLIEST if self._reset == "earliest" else _LATEST)
                    self._chunks = collections.deque(c for c in self._chunks if c.tp != key)
                    a.buffered = 0
                    continue
                if code:
                    refresh = True
                    continue
                a.high_watermark = p["high_watermark"]
                a.log_start = p["log_start_offset"]
                records = p["records"]
                if records is not None and len(records):
                    next_offset, complete = batches_extent(records)
                    if next_offset > a.fetch_position:
                        a.fetch_position = next_offset
                        a.buffered += complete
                        aborted = None
                        if self._isolation():
                            aborted = [(t["producer_id"], t["first_offset"])
                                       for t in p.get("aborted_transactions") or ()]
                        self._chunks.append(_Chunk(key, records, aborted))
        if refresh:
            try:
                self._meta.refresh(sorted({t for t, _ in self._assigned}), False, self._timeout)
            except KafkaError:
                pass
        if damaged:
            raise errors.CorruptRecordError(
                f"the broker holds a damaged record batch (CRC mismatch) for "
                f"{', '.join(damaged)}; seek past it to read on")

    def _pump(self, timeout: float) -> None:
        """Send fetches, take in responses for up to ``timeout`` seconds (0:
        only those already here), and send the follow-up fetches."""
        self._group_step()
        self._send_fetches()
        now = time.monotonic()
        for node, (cid, sent, _) in list(self._in_flight.items()):
            if now - sent > self._timeout + self.config["fetch.max.wait.ms"] / 1000.0:
                self._worker_lost(node)
        group_link = self._group.link if self._group is not None else None
        links = [self._conns[node] for node in self._in_flight]
        if group_link is not None:
            links.append(group_link)
        if not links:
            if timeout > 0:
                time.sleep(min(0.05, timeout))
            return
        if not self._in_flight:
            timeout = min(0.05, timeout)    # only the group is waited on: check back soon
        poller = zmq.Poller()
        for link in links:
            link.register(poller)
        # A link may hold an answer already (a ListOffsets waited on the
        # connection while the fetch was out): then the poller must not sleep.
        armed = all(link.arm() for link in links)
        poller.poll(int(max(timeout, 0) * 1000) if armed else 0)
        if group_link is not None:
            self._group_step()
        got_any = False
        for node in list(self._in_flight):
            conn = self._conns[node]
            for cid, body in conn.receive():
                entry = self._in_flight.get(node)
                if entry is not None and entry[0] == cid:
                    del self._in_flight[node]
                    self._on_fetch(node, body, entry[2])
                    got_any = True
            if not conn.alive():
                self._worker_lost(node)
        if got_any:
            self._send_fetches()

    def _worker_lost(self, node: int) -> None:
        """The worker went away (died, or a fetch never came back): forget
        the fetch, and learn from the supervisor where its partitions are now."""
        self._drop_conn(node)
        try:
            self._meta.refresh(sorted({t for t, _ in self._assigned}), False, self._timeout)
        except KafkaError:
            pass

    def _fill(self, timeout: float) -> None:
        """Fetch until something is buffered or ``timeout`` passes."""
        deadline = time.monotonic() + max(timeout, 0)
        while not self._chunks:
            remaining = deadline - time.monotonic()
            self._pump(max(remaining, 0))
            if time.monotonic() >= deadline:
                return

    # ---- reading ------------------------------------------------------------------------------

    def _next_messages(self, limit: int) -> list[Message]:
        """Up to ``limit`` buffered Messages; a batch's Messages are made at
        once (in Cython) when the first of them is asked for."""
        out = []
        while self._chunks and len(out) < limit:
            chunk = self._chunks[0]
            a = self._assigned.get(chunk.tp)
            if a is None:
                self._chunks.popleft()
                continue
            pending = chunk.pending
            if chunk.taken < len(pending):
                end = min(len(pending), chunk.taken + limit - len(out))
                if not out and end - chunk.taken == len(pending):
                    out = pending                      # the whole batch: no copy ...
                    chunk.pending = []                 # ... and now the caller's list
                    end = 0
                else:
                    out += pending[chunk.taken:end]
                chunk.taken = end
                a.position = out[-1].offset() + 1
                continue
            if chunk.after is not None:
                a.position = max(a.position, chunk.after)   # past the batch's last offset
                chunk.after = None
                continue
            batch = None
            for batch in iter_batches(chunk.data, chunk.pos):
                break
            if batch is None:
                self._chunks.popleft()
                a.buffered = max(0, a.buffered - chunk.pos)
                continue
            chunk.current = chunk.pos
            chunk.pos += batch.size_in_bytes
            dropped = chunk.skip is not None and chunk.skip.skips(
                batch.producer_id, batch.attributes, batch.last_offset,
                batch.control_type == CONTROL_ABORT)
            if batch.next_offset > a.position:
                chunk.pending = ([] if batch.is_control or dropped else
                                 batch_messages(batch, chunk.tp[0], chunk.tp[1], a.position))
                chunk.taken = 0
                chunk.after = batch.next_offset
        return out

    def poll(self, timeout: float | None = None) -> Message | None:
        """One message, or None if none arrived within ``timeout`` seconds."""
        if self._plain and self._chunks:
            # the next Message of a batch already made, with no group to
            # serve or commit for: just that (consume() does the rest)
            chunk = self._chunks[0]
            taken = chunk.taken
            if taken < len(chunk.pending) and not self._closed:
                a = self._assigned.get(chunk.tp)
                if a is not None:
                    msg = chunk.pending[taken]
                    chunk.taken = taken + 1
                    a.position = msg.offset() + 1
                    return msg
        got = self.consume(1, -1 if timeout is None else timeout)
        return got[0] if got else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """Up to ``num_messages`` messages, waiting up to ``timeout`` seconds
        (-1: forever) for the first."""
        self._check_open()
        if num_messages < 1:
            raise ValueError("num_messages must be at least 1")
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._maybe_auto_commit()
        self._group_step()
        if self._chunks and self._in_flight and not self._chunks[0].unfinished():
            # collect prefetched responses without waiting (once per batch,
            # not per poll(): a batch's Messages are already made)
            self._pump(0)
        while True:
            out = self._next_messages(num_messages)
            if out:
                return out
            remaining = 0.5 if deadline is None else deadline - time.monotonic()
            if remaining <= 0:
                return []
            self._fill(min(remaining, 0.5) if deadline is None else remaining)
            if deadline is not None and time.monotonic() >= deadline and not self._chunks:
                return []

    def _poll_deserialized(self, timeout: float | None = None) -> Message | None:
        """poll() with ``key.deserializer`` / ``value.deserializer``: a
        deserializer's failure raises with the message (consumed: the
        position is past it), as confluent-kafka's DeserializingConsumer."""
        got = self._consume_deserialized(1, -1 if timeout is None else timeout)
        return got[0] if got else None

    def _consume_deserialized(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """consume() with the deserializers. A message they refuse ends the
        batch: the messages before it are returned and the next call raises
        for it (its position past it), the ones after it come again (each
        partition sought back to them)."""
        msgs = type(self).consume(self, num_messages, timeout)
        for i, msg in enumerate(msgs):
            try:
                serialization.deserialize(msg, *self._deserializers)
            except serialization.SerializationError:
                again = msgs[i:] if i else msgs[1:]
                first: dict = {}
                for m in again:
                    first.setdefault((m.topic(), m.partition()), m.offset())
                for (topic, partition), offset in first.items():
                    self.seek(TopicPartition(topic, partition, offset))
                if i:
                    return msgs[:i]
                raise
        return msgs

    def consume_batch(self, timeout: float = -1):
        """Every buffered record (fetching if none) as one pyarrow
        RecordBatch (schema in kafkalite.client.arrow); waits up to
        ``timeout`` seconds (-1: forever) for at least one record, and is
        empty if none came."""
        self._check_open()
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._maybe_auto_commit()
        self._group_step()
        if self._chunks:
            self._pump(0)  # collect prefetched responses without waiting
        while True:
            while not self._chunks:
                remaining = 0.5 if deadline is None else deadline - time.monotonic()
                if remaining <= 0:
                    return arrow.empty()
                self._fill(remaining)
            result = self._take_buffered()
            if result.num_rows:
                return result

    def _take_buffered(self):
        """Decode every buffered chunk from each partition's position on."""
        chunks, self._chunks = self._chunks, collections.deque()
        for chunk in chunks:
            if chunk.tp in self._assigned:
                self._assigned[chunk.tp].buffered = 0
        self._send_fetches()  # everything buffered is being taken: fetch the next chunks now
        # every chunk decoded in one call and wrapped as Arrow once (a fetch
        # of many partitions with a record or two each is common: per chunk
        # that was most of the cost). A partition's chunks never overlap
        # (fetch_position moves past what is buffered), so its position
        # bounds each of them.
        inputs, taken, topics = [], [], {}
        for chunk in chunks:
            a = self._assigned.get(chunk.tp)
            if a is None:
                continue
            # from the batch poll() was part-way through, if any
            inputs.append((memoryview(chunk.data)[chunk.current if chunk.unfinished()
                                                  else chunk.pos:],
                           chunk.aborted, a.position))
            taken.append((chunk.tp, a))
            topics.setdefault(chunk.tp[0], len(topics))
        if not inputs:
            return arrow.empty()
        cols = decode_chunks(inputs)
        for (_, a), next_offset in zip(taken, cols.chunk_next_offsets.tolist()):
            if next_offset > a.position:
                a.position = next_offset
        chunk_topics = np.fromiter((topics[tp[0]] for tp, _ in taken), np.int32, len(taken))
        chunk_partitions = np.fromiter((tp[1] for tp, _ in taken), np.int32, len(taken))
        return arrow.chunks_to_arrow(cols, list(topics), chunk_topics, chunk_partitions)

    # ---- misc -----------------------------------------------------------------------------------

    def _membership(self) -> GroupMembership:
        if not self.config.get("group.id"):
            raise errors.InvalidGroupIdError(
                "committed offsets belong to a consumer group: set group.id in the consumer config")
        if self._group is None:
            # assign() with a group.id: commits without membership (generation -1)
            self._group = self._new_membership()
        return self._group

    def _new_membership(self) -> GroupMembership:
        """group.protocol=classic: JoinGroup/SyncGroup; consumer: KIP-848."""
        if self.config["group.protocol"] == "consumer":
            return ConsumerProtocolMembership(self.config, self._meta, self._ctx)
        return GroupMembership(self.config, self._meta, self._ctx)

    def consumer_group_metadata(self) -> ConsumerGroupMetadata:
        """The group membership to hand a transactional producer's
        ``send_offsets_to_transaction``."""
        self._check_open()
        group = self._membership()
        return ConsumerGroupMetadata(group.group_id, group.generation, group.member_id,
                                     group.instance_id)

    def commit(self, message=None, offsets=None, asynchronous=True):
        """Commit offsets to the group: ``message``'s offset + 1, the
        TopicPartitions in ``offsets`` (with optional ``metadata``), or else
        the current position of every assigned partition. Synchronous: the
        committed TopicPartitions, or the KafkaError of a failed partition is
        raised. Asynchronous: returns None; ``on_commit(err, partitions)``
        (config) is called from a later poll."""
        self._check_open()
        group = self._membership()
        if message is not None and offsets is not None:
            raise ValueError("commit() takes message or offsets, not both")
        if message is not None:
            commit = {(message.topic(), message.partition()): (message.offset() + 1, "")}
        elif offsets is not None:
            commit = {}
            for tp in offsets:
                if tp.offset < 0:
                    raise ValueError(f"cannot commit offset {tp.offset} for "
                                     f"{tp.topic}-{tp.partition}: offsets are >= 0")
                commit[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
        else:
            commit = self._positions()
            if not commit:
                raise ValueError("nothing to commit: no assigned partition has a position yet")
        if asynchronous:
            group.commit_async(commit, lambda body: self._on_commit(body, commit))
            return None
        return self._commit_sync(commit)

    def _commit_sync(self, commit: dict) -> list[TopicPartition]:
        resp = self._group.commit(commit)
        result, failed = self._commit_result(resp, commit)
        if failed is not None:
            raise failed
        return result

    @staticmethod
    def _commit_result(resp, commit: dict):
        result, failed = [], None
        for t in resp["topics"]:
            for p in t["partitions"]:
                key = (t["name"], p["partition_index"])
                off, md = commit.get(key, (OFFSET_INVALID, None))
                tp = TopicPartition(key[0], key[1], off, md or None)
                if p["error_code"]:
                    tp.error = errors.error_for_code(p["error_code"])(
                        f"commit of {key[0]}-{key[1]} at offset {off}")
                    failed = failed or tp.error
                result.append(tp)
        return result, failed

    def _on_commit(self, body, commit: dict) -> None:
        cb = self.config.get("on_commit")
        if isinstance(body, KafkaError):
            err, result = body, [TopicPartition(t, p, o) for (t, p), (o, _) in commit.items()]
        else:
            result, err = self._commit_result(body, commit)
        if cb is not None:
            cb(err, result)
        elif err is not None:
            self._report_commit_error(err)

    def committed(self, partitions, timeout=None):
        """The group's committed offsets of ``partitions`` (OFFSET_INVALID
        where none), with their metadata strings."""
        self._check_open()
        got = self._membership().committed([(tp.topic, tp.partition) for tp in partitions])
        out = []
        for tp in partitions:
            off, md = got.get((tp.topic, tp.partition), (-1, None))
            out.append(TopicPartition(tp.topic, tp.partition, off if off >= 0 else OFFSET_INVALID,
                                      md or None))
        return out

    def list_topics(self, topic: str | None = None, timeout: float = 30.0):
        return cluster_metadata(self._meta, topic, timeout)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the consumer is closed")

    def close(self) -> None:
        if self._closed:
            return
        try:
            if self._group is not None:
                try:
                    if self._subscription is not None:
                        self._revoke(self._owned(), lost=False)
                    elif self.config["enable.auto.commit"] and self._positions():
                        self._commit_positions(list(self._assigned))
                    self._group.drain_commits(self._timeout)
                except KafkaError as exc:
                    self._report_commit_error(exc)
                finally:
                    self._group.close(leave=True)
                    self._group = None
        finally:
            # an on_revoke callback that raises still gets its sockets closed: a
            # context left with open sockets blocks the interpreter's exit in term()
            self._closed = True
            for node in list(self._conns):
                self._drop_conn(node)
            self._meta.close()
            self._ctx.term_within("consumer")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
