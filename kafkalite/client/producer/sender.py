"""The producer's sender thread (Kafka's Sender): it takes the batches the
accumulator closed (or that lingered ``linger.ms``), gives an idempotent
producer's their producer id, epoch and sequences (asking InitProducerId,
and with transactions v1 AddPartitionsToTxn, first), routes each to the
leader of its partition over a link (link.py: a TCP link, ZeroMQ or a
shared-memory ring; ``Sender._link``), and turns the answers into delivery
reports for api.Producer's ``poll()``: retries with backoff until
``delivery.timeout.ms``, at most five requests of a partition out at once
under idempotence (a retried batch alone, the later ones behind it),
batches refused as too large split in halves, a refused batch's sequence
gap closed, a partition whose next sequence no batch carries any more
numbered again from 0 under a new epoch (KIP-360).

Which process runs it: the application's, on the producer's
``kafkalite-producer`` thread, which alone touches the links; it takes
batches from the producer under the producer's lock.

What it may import: client/ (connection.py, metadata.py, tcp_link.py,
ring_link.py, buffer_pool.py), sequence_numbers.py (its part: the
sequence bookkeeping after a refusal), transaction_manager.py's constants,
kafkalite._ext (the batches), kafkalite.record, kafkalite.protocol and
kafkalite.errors; never api.py (the producer is handed in: the sender
runs on it, it does not build one).
"""
from __future__ import annotations

import collections
import logging
import math
import os
import time

import zmq

from kafkalite import errors
from kafkalite._ext.accumulator import CALLBACK_FIELDS, ProducerBatch
from kafkalite.client.buffer_pool import BufferPool
from kafkalite.client.connection import Connection, endpoint_host_port
from kafkalite.client.metadata import Metadata
from kafkalite.client.producer.sequence_numbers import INT32_SPAN, SequenceNumbers
from kafkalite.client.producer.transaction_manager import (SHORT_TXN_BACKOFF_S, TXN_RETRIABLE,
                                                           TXN_V2_PRODUCE_VERSION)
from kafkalite.client.tcp_link import tcp_link_or
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.record import RecordBatchBuilder

log = logging.getLogger(__name__)


# Records of one partition: open (builder), then built (raw) and sent, then
# its delivery report (a C type: produce() fills it without Python calls)
_Batch = ProducerBatch


# An idempotent producer's requests carrying one partition out at once:
# a worker recognises a retried batch among the last five appends it took
# from the producer (Kafka's brokers: the last five batches).
MAX_APPENDS_OUT = 5
# Uncompressed batches this big or bigger are built into buffers the sender
# keeps (buffer_pool.py), at most RAW_BUFFERS of them: each in use until
# its batch is answered, so about the requests in flight. Sizes are powers
# of two: with the default batch.size (1 MB) a busy producer keeps up to
# 16 MB of them.
RAW_BUFFER_MIN = 64 << 10
RAW_BUFFERS = 8
RAW_BUFFER_MAX = 32 << 20


class _Node:
    """The sender's view of one worker: the link that carries its Produce
    requests (ZeroMQ or a ring), what is in flight on it, what waits."""

    def __init__(self, node_id, endpoint, link):
        self.node_id = node_id
        self.endpoint = endpoint
        self.link = link
        # correlation id -> ({(topic, partition): [batches]}, sent at)
        self.in_flight: dict[int, tuple[dict, float]] = {}
        self.queue: collections.deque = collections.deque()


# Produce errors after which the batch may be in the log all the same (it
# was appended, then the wait for replicas or the write failed): a batch
# that saw one is ``maybe_written``, like one whose answer never came.
# refused for its size by max.message.bytes or segment.bytes: nothing written,
# halves may fit (Kafka's 16 KB batch.size rarely meets the second; ours did)
_SPLIT_CODES = frozenset((errors.MessageTooLargeError.code, errors.RecordListTooLargeError.code))

MAYBE_APPENDED = frozenset({
    errors.RequestTimedOutError.code, errors.NotEnoughReplicasAfterAppendError.code,
    errors.UnknownServerError.code, errors.KafkaStorageError.code})


def _unanswered(groups: dict) -> list:
    """The batches of a request sent with no definite answer (the link
    died, it timed out, it failed whole): each ``maybe_written`` now."""
    out = [b for batches in groups.values() for b in batches]
    for b in out:
        b.maybe_written = True
    return out


class Sender(SequenceNumbers):
    """The producer's background thread (Kafka's Sender): owns every socket
    and ring. ``producer``: the api.Producer whose batches it sends."""

    RETRIABLE_REFRESH = {errors.NotLeaderOrFollowerError.code, errors.LeaderNotAvailableError.code,
                         errors.UnknownTopicOrPartitionError.code, errors.KafkaStorageError.code}

    def __init__(self, producer):
        self.p = producer
        cfg = producer.config
        self.meta = Metadata(producer._bootstrap, cfg["client.id"], producer._ctx)
        # a server that is down refuses each retry at once, every retry.backoff.ms
        self.retry_log = RateLimitedLog(log)
        self.nodes: dict[int, _Node] = {}
        # per partition, in sequence order: batches not routed to a worker
        # yet (no leader known, backing off, or held back, see below)
        self.waiting: dict[tuple[str, int], collections.deque] = {}
        self.need_metadata = False
        self.poller = zmq.Poller()
        self.poller.register(producer._wake_r, zmq.POLLIN)
        self.request_timeout = cfg["request.timeout.ms"] / 1000.0
        self.backoff = cfg["retry.backoff.ms"] / 1000.0
        self.link_retry_at: dict[int, float] = {}  # broker -> when a failed link is tried again
        self.delivery_timeout = cfg["delivery.timeout.ms"] / 1000.0
        self.max_in_flight = max(1, cfg["max.in.flight.requests.per.connection"])
        self.max_request = cfg["max.request.size"]
        self.retries = cfg["retries"]
        self.transport = cfg["kafkalite.transport"]
        self.refresh_at = 0.0
        # idempotence: per partition, the next sequence to give a batch and
        # the sequence after the last one acknowledged
        self.sequences: dict[tuple[str, int], int] = {}
        self.acked: dict[tuple[str, int], int] = {}
        # idempotence without transactions: per partition, the epoch its
        # batches carry when it is not the producer's (_bump_epoch)
        self.epochs: dict[tuple[str, int], int] = {}
        # idempotence: per partition, batches routed to a worker and not
        # answered yet, requests carrying it not answered yet, and the
        # retried batch it waits on. A worker recognises a retried batch
        # among the last five appends it took from the producer, so no more
        # than five requests carry a partition at once; a retried batch goes
        # out alone, once nothing else of its partition is out, and the later
        # batches wait for its answer (as Kafka's producer does). Pipelined
        # behind a retry, later batches could be appended first when the
        # retried one had been written before a crash, and push it out of
        # that window.
        self.in_flight_batches: collections.Counter = collections.Counter()
        self.requests_out: collections.Counter = collections.Counter()
        self.retrying: dict[tuple[str, int], _Batch] = {}
        # per partition: the (sequence, count) of refused batches whose gap
        # the later batches close once none of them is out (_close_sequence_gap)
        self.gaps: dict[tuple[str, int], list[tuple[int, int]]] = {}
        # the batches of one partition whose answer is being handled (they
        # are out of in_flight already; _close_sequence_gap moves them too)
        self.answering: list[_Batch] = []
        # buffers uncompressed batches of RAW_BUFFER_MIN bytes or more are
        # built into (_build); one is reused once nothing refers to its last
        # batch: its bytes answered and sent (a zero-copy ZeroMQ send holds
        # a reference until the I/O thread is done with it)
        self.raw_buffers = BufferPool(RAW_BUFFERS, RAW_BUFFER_MAX)
        self.pid_generation = 0
        self.init_at = 0.0              # next InitProducerId attempt (idempotent, not transactional)
        self.unstamped: list[_Batch] = []   # ready, waiting for a producer id or AddPartitionsToTxn
        self.txn_generation = 0
        self.txn_partitions: set = set()
        self.txn_retry_at = 0.0
        self.txn_backoff = SHORT_TXN_BACKOFF_S

    # links to workers

    def _node(self, node_id: int) -> _Node | None:
        endpoint = self.meta.brokers.get(node_id)
        if endpoint is None:
            return None
        node = self.nodes.get(node_id)
        if node is not None and node.endpoint == endpoint:
            return node
        if node is not None:
            self._drop_node(node, errors.NotLeaderOrFollowerError("worker moved"))
        now = time.monotonic()
        if now < self.link_retry_at.get(node_id, 0.0):
            return None
        try:
            link = self._link(endpoint)
        except KafkaError as exc:
            # the worker went away while the link was made (a ring's attach
            # met its kill) or refuses it: what is for it waits, metadata is
            # asked again, and the link is tried again after a backoff; the
            # batches fail at delivery.timeout.ms if it never comes, never
            # the sender thread
            log.warning("no link to broker %d at %s: %s", node_id, endpoint, exc)
            self.link_retry_at[node_id] = now + max(self.backoff, 0.05)
            return None
        self.link_retry_at.pop(node_id, None)
        node = self.nodes[node_id] = _Node(node_id, endpoint, link)
        node.link.register(self.poller)
        return node

    def _link(self, endpoint: str):
        """A ring to the worker when the transport says so (and it is on this
        host), else the ZeroMQ connection."""
        cfg = self.p.config
        conn = Connection(endpoint, cfg["client.id"], self.p._ctx, watch=True,
                          max_in_flight=self.max_in_flight)
        if self.transport == "tcp":
            return tcp_link_or(conn, self.request_timeout, self.max_in_flight,
                               chosen=self.p._transport_chosen,
                               local=cfg["kafkalite.local.socket"])
        if not self._use_ring(endpoint):
            return conn
        from kafkalite.client.ring_link import RingLink
        try:
            link = RingLink(conn, cfg["kafkalite.shm.ring.bytes"], self.request_timeout,
                            self.p._transactional_id, 2 if self.p._txn_v2 else 1, cfg["acks"])
        except KafkaError:
            if self.transport == "shm":
                conn.close()
                raise
            return conn          # "auto": the worker will not take a ring; use ZeroMQ
        conn.close()             # the ring carries everything now and watches the worker itself
        return link

    def _use_ring(self, endpoint: str) -> bool:
        if self.transport == "zmq":
            return False
        if self.transport == "shm":
            return True
        host = endpoint_host_port(endpoint)[0]
        return host in ("127.0.0.1", "localhost", "::1") or host == os.uname().nodename

    def _drop_node(self, node: _Node, err: KafkaError) -> None:
        """The worker went away: everything in flight to it is retried."""
        self.nodes.pop(node.node_id, None)
        node.link.unregister(self.poller)
        retry = []
        for groups, _ in node.in_flight.values():
            self._answered(groups)
            retry += _unanswered(groups)
        self._landed(node.queue)
        retry += list(node.queue)
        node.queue.clear()
        node.link.close()
        for b in retry:
            self._retry(b, err)
        self.refresh_at, self.need_metadata = 0.0, True

    # sending

    def _take_ready(self, now: float) -> float:
        """Move closed and lingered batches to their workers; returns the
        next linger deadline."""
        p = self.p
        next_deadline = now + 0.1
        with p._lock:
            lingering = []
            for b in list(p._open.values()):
                if p._flushing or now - b.created >= p._linger:
                    p._close_batch(b)
                else:
                    lingering.append(b)
            # Kafka's drain: a worker that is sent a request now takes the
            # open batch of every partition it leads along. linger.ms bounds
            # how long a record waits for company; it is no reason to send
            # the same worker another request a moment later. (Records spread
            # over many partitions made a request of 1.7 batches each, 2,900
            # requests/s for 5,000 records/s, whatever linger.ms.)
            # each batch's leader, looked up once here for _route too
            leaders = [self._leader_of(b) for b in p._ready]
            if lingering:
                due = set(leaders)
                due.discard(-1)
                for b in lingering:
                    leader = self._leader_of(b) if due else -1
                    if leader in due:
                        p._close_batch(b)
                        leaders.append(leader)
                    else:
                        next_deadline = min(next_deadline, b.created + p._linger)
            ready, p._ready = p._ready, []
        for b in ready:
            b.deadline = b.created + self.delivery_timeout
        if not p._idempotent:
            for b, leader in zip(ready, leaders):
                self._build(b)
                if not self._route(b, leader):
                    self._wait(b)
            return next_deadline
        self.unstamped += ready
        if self.unstamped and self._stamp_ready(now):
            stamped, self.unstamped = self.unstamped, []
            for b in stamped:
                self._wait(b)        # _flush_waiting routes them, in sequence order
        elif self.unstamped:
            expired = [b for b in self.unstamped if now >= b.deadline]
            if expired:
                self.unstamped = [b for b in self.unstamped if now < b.deadline]
                for b in expired:
                    self.p._report(b, errors.RequestTimedOutError(
                        f"delivery.timeout.ms expired before {b.topic}-{b.partition} could be "
                        f"sent (no producer id, or not added to the transaction)"), -1)
            retry = self.txn_retry_at if self.p._transactional_id is not None else self.init_at
            next_deadline = min(next_deadline, max(retry, now + 0.001), now + self.backoff)
        return next_deadline

    def _build(self, b: _Batch) -> None:
        if b.raw is None:
            builder = b.builder
            size = builder.size_in_bytes
            if builder.codec == 0 and size >= RAW_BUFFER_MIN:
                b.raw = builder.build_into(self.raw_buffers.take(size))
            else:
                b.raw = builder.build()
            self.p._acc.recycle(builder)   # its buffer, for a later batch
            b.builder = None

    def _stamp_ready(self, now: float) -> bool:
        """Idempotence: give the unstamped batches their producer id, epoch
        and sequences -- in the order produce() closed them, which is each
        partition's order -- once the producer id is known and (in a
        transaction) their partitions are in it. False: not yet."""
        p = self.p
        if p._pid_generation != self.pid_generation:
            self.pid_generation = p._pid_generation
            self.sequences.clear()
            self.acked.clear()
            self.epochs.clear()
            self.gaps.clear()
        if p._transactional_id is None and p._pid < 0 and not self._init_producer_id(now):
            return False
        if p._txn_v2:
            p._txn.added = True         # its writes add the partitions
        elif p._transactional_id is not None and not self._add_partitions(now):
            return False
        transactional = p._transactional_id is not None
        for b in self.unstamped:
            if b.raw is None:
                key = (b.topic, b.partition)
                b.sequence = self.sequences.get(key, 0)
                self.sequences[key] = (b.sequence + b.count) % INT32_SPAN
                b.builder.set_producer(p._pid, self.epochs.get(key, p._epoch), b.sequence,
                                       transactional)
                self._build(b)
        return True

    def _init_producer_id(self, now: float) -> bool:
        if now < self.init_at:
            return False
        try:
            resp = self.meta.admin_request(ApiKey.INIT_PRODUCER_ID, {
                "transactional_id": None, "transaction_timeout_ms": -1,
                "producer_id": -1, "producer_epoch": -1}, self.request_timeout)
            if resp["error_code"]:
                raise errors.error_for_code(resp["error_code"])("InitProducerId failed")
        except KafkaError as exc:
            if not exc.retriable:
                # refused for good (no IdempotentWrite, nor Write on any topic):
                # the waiting records fail with why, as Kafka's producer's do,
                # rather than wait out delivery.timeout.ms
                refused, self.unstamped = self.unstamped, []
                for b in refused:
                    self.p._report(b, type(exc)(
                        f"no producer id for {b.topic}-{b.partition}: {exc}"), -1)
            self.retry_log.warning("cannot get a producer id yet (%s); retrying", exc)
            self.init_at = now + max(self.backoff, 0.05)
            return False
        with self.p._lock:
            self.p._pid, self.p._epoch = resp["producer_id"], resp["producer_epoch"]
        return True

    def _add_partitions(self, now: float) -> bool:
        """AddPartitionsToTxn for the partitions of unstamped batches new to
        the transaction. A refusal fails those batches (and dooms the
        transaction); "not now" retries after the backoff."""
        p = self.p
        if p._txn.generation != self.txn_generation:
            self.txn_generation = p._txn.generation
            self.txn_partitions = set()
        new = {(b.topic, b.partition) for b in self.unstamped} - self.txn_partitions
        if not new:
            return True
        if now < self.txn_retry_at:
            return False
        topics: dict[str, list] = {}
        for topic, index in sorted(new):
            topics.setdefault(topic, []).append(index)
        try:
            resp = self.meta.admin_request(ApiKey.ADD_PARTITIONS_TO_TXN, {
                "v3_and_below_transactional_id": p._transactional_id,
                "v3_and_below_producer_id": p._pid, "v3_and_below_producer_epoch": p._epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                self.request_timeout)
        except KafkaError as exc:
            self.retry_log.warning("AddPartitionsToTxn failed (%s); retrying", exc)
            self.txn_retry_at = now + max(self.backoff, 0.05)
            return False
        codes = {(t["name"], r["partition_index"]): r["partition_error_code"]
                 for t in resp["results_by_topic_v3_and_below"] for r in t["results_by_partition"]}
        if any(c in TXN_RETRIABLE for c in codes.values()):
            self.txn_retry_at = now + self.txn_backoff
            self.txn_backoff = min(self.txn_backoff * 2, max(self.backoff, SHORT_TXN_BACKOFF_S))
            return False
        self.txn_backoff = SHORT_TXN_BACKOFF_S
        failed = {k: c for k, c in codes.items() if c}
        if failed:
            keep = []
            for b in self.unstamped:
                code = failed.get((b.topic, b.partition))
                if code is None:
                    keep.append(b)
                else:
                    self.p._report(b, errors.error_for_code(code)(
                        f"{b.topic}-{b.partition} could not join the transaction"), -1)
            self.unstamped = keep
        self.txn_partitions |= {k for k, c in codes.items() if not c}
        p._txn.added = p._txn.added or bool(self.txn_partitions)
        return True

    def _leader_of(self, b: _Batch) -> int:
        """The leader of ``b``'s partition as metadata has it, -1 if none."""
        try:
            return self.meta.leader(b.topic, b.partition)
        except errors.UnknownTopicOrPartitionError:
            return -1

    def _route(self, b: _Batch, leader: int | None = None) -> bool:
        """Queue ``b`` for its leader (``leader``: looked up already); False
        (and ``b`` waits) when none is known."""
        if leader is None:
            leader = self._leader_of(b)
        node = self._node(leader) if leader >= 0 else None
        if node is None:
            self.need_metadata = True
            return False
        b.node = node.node_id
        node.queue.append(b)
        if self.p._idempotent:
            self.in_flight_batches[(b.topic, b.partition)] += 1
        return True

    def _send(self, node: _Node) -> None:
        acks = self.p._acks
        link = node.link
        while node.queue and link.ready():
            # Kafka allows one records field per partition per request: batches
            # of the same partition travel concatenated, appended in one go
            # with consecutive offsets.
            groups: dict[tuple[str, int], list[_Batch]] = {}
            size = 0
            while node.queue and (not groups or size + len(node.queue[0].raw) <= self.max_request):
                b = node.queue[0]
                key = (b.topic, b.partition)
                same = groups.get(key)
                if (same is None and self.p._idempotent
                        and self.requests_out[key] >= self._appends_allowed(key)):
                    self._hold_back(node, key)
                    continue
                if same and (b.alone or same[0].alone or (
                        (b.attempts or same[0].attempts) and self.p._idempotent)):
                    # a retried batch travels alone: the worker recognises a
                    # duplicate only as a whole append; so does one sent again
                    # because a request it shared was refused as too large
                    break
                node.queue.popleft()
                size += len(b.raw)
                groups.setdefault(key, []).append(b)
            if not groups:
                break
            topics: dict[str, list] = {}
            for (topic, partition), batches in groups.items():
                records = batches[0].raw if len(batches) == 1 else b"".join(b.raw for b in batches)
                topics.setdefault(topic, []).append({"index": partition, "records": records})
                for b in batches:
                    b.attempts += 1
            body = {"transactional_id": self.p._transactional_id, "acks": acks,
                    "timeout_ms": int(self.request_timeout * 1000),
                    "topic_data": [{"name": t, "partition_data": parts}
                                   for t, parts in topics.items()]}
            if self.p._request_principal is not None:
                body["request_principal"] = self.p._request_principal
            cid = link.send(ApiKey.PRODUCE, body, expect_response=acks != 0,
                            version=TXN_V2_PRODUCE_VERSION if self.p._txn_v2 else None)
            if acks == 0:
                for batches in groups.values():
                    for b in batches:
                        self.p._report(b, None, -1)
            else:
                node.in_flight[cid] = (groups, time.monotonic())
                if self.p._idempotent:
                    self.requests_out.update(groups.keys())

    # outcomes

    def _appends_allowed(self, key) -> int:
        """How many requests carrying partition ``key`` may be out at once
        (idempotence). One until the partition's first append under this
        producer id and epoch is acknowledged: a worker takes any sequence
        from a producer it knows nothing of yet, as Kafka's brokers do, so a
        second batch sent behind a first that is then refused (too large:
        split and sent again) would be appended ahead of it -- and the
        first, answered OUT_OF_ORDER_SEQUENCE_NUMBER behind an acknowledged
        later batch, taken for one already in the log. Once the worker has
        the producer's state it refuses any batch out of sequence."""
        return MAX_APPENDS_OUT if key in self.acked else 1

    def _wait(self, b: _Batch) -> None:
        """Put ``b`` among its partition's waiting batches, in sequence order."""
        queue = self.waiting.setdefault((b.topic, b.partition), collections.deque())
        queue.append(b)
        if len(queue) > 1 and b.sequence >= 0 and b.sequence < queue[-2].sequence:
            # a retried batch behind later ones (sequences wrap only after 2**31)
            ordered = sorted(queue, key=lambda q: q.sequence)
            queue.clear()
            queue.extend(ordered)

    def _answered(self, groups: dict) -> None:
        """Idempotence: a request is answered or given up on."""
        if self.p._idempotent:
            self.requests_out.subtract(groups.keys())
            for key in groups:
                if self.requests_out[key] <= 0:
                    del self.requests_out[key]
            self._landed(b for batches in groups.values() for b in batches)

    def _hold_back(self, node: _Node, key) -> None:
        """Take a partition's batches out of ``node``'s queue, back to waiting."""
        later = [q for q in node.queue if (q.topic, q.partition) == key]
        if later:
            node.queue = collections.deque(q for q in node.queue if (q.topic, q.partition) != key)
            self._landed(later)
            if self.retrying.get(key) in later:
                # the partition's retried batch goes back unsent: it is no
                # longer out, so nothing may wait for its answer (it would
                # never come: the partition stalled until delivery.timeout.ms);
                # routed again at the head of the waiting ones, it is
                # retrying once more
                del self.retrying[key]
            for q in later:
                q.node = None
                self._wait(q)

    def _landed(self, batches) -> None:
        """Idempotence: these batches are answered, given up on, or back to waiting."""
        if self.p._idempotent:
            for b in batches:
                key = (b.topic, b.partition)
                self.in_flight_batches[key] -= 1
                if self.in_flight_batches[key] <= 0:
                    del self.in_flight_batches[key]

    def _retry(self, b: _Batch, err: KafkaError) -> None:
        now = time.monotonic()
        if self.retrying.get((b.topic, b.partition)) is b:
            del self.retrying[(b.topic, b.partition)]
        if now >= b.deadline:
            # told as when the batch expires waiting for its retry (the
            # timing decides which comes first): the timeout, and what the
            # last attempt met
            self.p._report(b, errors.RequestTimedOutError(
                f"delivery.timeout.ms expired before {b.topic}-{b.partition} was acknowledged "
                f"({b.attempts} attempts, the last failed: {err})"), -1)
            return
        if b.attempts > self.retries:
            self.p._report(b, type(err)(f"{err.message} (retries exhausted)"), -1)
            return
        b.retry_at = now + self.backoff
        b.last_error = err
        b.node = None
        self._wait(b)
        if self.p._idempotent:
            # the partition's later batches not sent yet must not overtake it
            for node in self.nodes.values():
                self._hold_back(node, (b.topic, b.partition))

    def _on_partition_result(self, b: _Batch, code: int, message, base_offset: int) -> None:
        key = (b.topic, b.partition)
        if self.retrying.get(key) is b:
            del self.retrying[key]
        if code == 0:
            if b.sequence >= 0:
                self.acked[key] = (b.sequence + b.count) % INT32_SPAN
            self.p._report(b, None, base_offset)
            return
        err = errors.error_for_code(code)(message or errors.error_for_code(code).name)
        if code in MAYBE_APPENDED:
            b.maybe_written = True
        if code in _SPLIT_CODES and b.count > 1:
            self._split(b)
            return
        if (code == errors.OutOfOrderSequenceNumberError.code and b.sequence >= 0
                and b.sequence != self.acked.get(key, 0)):
            if (self.acked.get(key, 0) - b.sequence) % INT32_SPAN <= INT32_SPAN // 2:
                # A later batch was acknowledged. A worker that knows the
                # producer takes its batches only in sequence order, so if
                # this one was ever sent without a definite answer it is in
                # the log (written before a crash, its answer lost), just no
                # longer among the few the worker remembers to recognise a
                # retry: delivered, its offset not known. One that every
                # attempt saw refused is not in the log: the later batch was
                # taken by a worker that had no state for the producer (its
                # batches deleted by retention or DeleteRecords, which
                # forgets it, as Kafka's brokers do) -- a gap, reported as
                # the failure it is, never as a delivery.
                if b.maybe_written:
                    self.p._report(b, None, -1)
                else:
                    self.p._report(b, type(err)(
                        f"{err.message}: a later batch of {b.topic}-{b.partition} was "
                        f"written before this one, which was not written"), -1)
                return
            # an earlier batch of the partition failed and is being retried:
            # this one follows it
            self._retry(b, err)
            return
        if err.retriable:
            if code in self.RETRIABLE_REFRESH:
                self.refresh_at, self.need_metadata = 0.0, True
            self._retry(b, err)
        else:
            if b.sequence >= 0:
                self._close_sequence_gap(b)
            self.p._report(b, err, -1)

    def _split(self, b: _Batch) -> None:
        """``b`` was refused as larger than its topic allows (max.message.bytes
        or segment.bytes below batch.size) and has more than one record: nothing of it was
        written, so it goes again as two halves, in its place in the
        partition's order (as Kafka's producer splits such a batch). The
        topic's later batches close at half its size; a half refused again
        is halved again, down to single records, which are reported."""
        from kafkalite.record import RecordBatch
        batch = RecordBatch(b.raw)
        records = list(batch.records())
        half = (len(records) + 1) // 2
        self.p._cap_topic_batches(b.topic, max(len(b.raw) // 2, 1))
        pieces = []
        for lo, hi in ((0, half), (half, len(records))):
            builder = RecordBatchBuilder(batch.compression, compression_level=self.p._level)
            for r in records[lo:hi]:
                builder.append(r.timestamp, r.key, r.value, r.headers or None)
            piece = _Batch(b.topic, b.partition, builder, b.created)
            piece.count = hi - lo
            piece.closed = True
            piece.deadline = b.deadline
            piece.attempts = b.attempts     # travels alone, as a retry does
            piece.batch_callback = b.batch_callback
            width = CALLBACK_FIELDS
            for i in range(0, len(b.callbacks), width):
                if lo <= b.callbacks[i] < hi:
                    piece.callbacks += [b.callbacks[i] - lo, *b.callbacks[i + 1:i + width]]
            if not pieces:
                # the first half carries the whole batch's bytes: they are
                # released with its report (with its last callback, those of
                # records with one), never twice, never lost
                piece.nbytes, piece.callback_bytes = b.nbytes, b.callback_bytes
            if b.sequence >= 0:
                # the refused batch took no sequence numbers: its halves take them
                piece.sequence = (b.sequence + lo) % INT32_SPAN
                builder.set_producer(batch.producer_id, batch.producer_epoch, piece.sequence,
                                     batch.is_transactional)
            self._build(piece)
            pieces.append(piece)
        for piece in pieces:
            self._wait(piece)
        if self.p._idempotent:
            for node in self.nodes.values():   # later batches must not overtake the halves
                self._hold_back(node, (b.topic, b.partition))

    def _on_response(self, node: _Node, cid: int, body) -> None:
        groups, _ = node.in_flight.pop(cid, (None, None))
        if groups is None:
            return
        self._answered(groups)
        if isinstance(body, KafkaError):
            _unanswered(groups)      # refused whole, or the link failed with it out
            for batches in groups.values():
                self.answering = batches
                for b in batches:
                    self._on_partition_result(b, body.code, body.message, -1)
            self.answering = []
            return
        results = {(t["name"], pr["index"]): pr for t in body["responses"]
                   for pr in t["partition_responses"]}
        for key, batches in groups.items():
            pr = results.get(key)
            code = errors.UnknownServerError.code if pr is None else pr["error_code"]
            message = "no result for the partition" if pr is None else pr.get("error_message")
            base = -1 if pr is None else pr["base_offset"]
            if code in _SPLIT_CODES and len(batches) > 1:
                # the worker refuses the partition's whole append for one batch
                # too large: which one is known only when each goes alone
                for b in batches:
                    b.alone = True
                    self._retry(b, errors.MessageTooLargeError(message or "too large"))
                continue
            self.answering = batches
            for b in batches:
                self._on_partition_result(b, code, message, base)
                if base >= 0:
                    base += b.count   # producer batches have consecutive offsets
        self.answering = []

    def _check_timeouts(self, now: float) -> None:
        for node in list(self.nodes.values()):
            if not node.in_flight or now - next(iter(node.in_flight.values()))[1] <= \
                    self.request_timeout:
                # requests go in in the order they are sent: none is late if
                # the oldest is not (this runs after every wake-up)
                continue
            if node.link.acks_in_order and any(now - sent > self.request_timeout
                                               for _, sent in node.in_flight.values()):
                # everything behind the unanswered request waits for it (a
                # ring): retried on this link, the batches would never be
                # answered, nor those queued for it
                self._drop_node(node, errors.RequestTimedOutError(
                    f"no acknowledgement from worker {node.node_id} within request.timeout.ms"))
                continue
            for cid, (groups, sent) in list(node.in_flight.items()):
                if now - sent > self.request_timeout:
                    del node.in_flight[cid]
                    self._answered(groups)
                    for b in _unanswered(groups):
                        self._retry(b, errors.RequestTimedOutError(
                            f"no acknowledgement from worker {node.node_id} within "
                            f"request.timeout.ms"))

    def _take_answers(self, ready) -> None:
        """What the links received (those the poll that reported ``ready``
        woke); a link whose worker is gone is dropped and its requests
        retried."""
        p = self.p
        # the answers' delivery reports are announced to poll() once, at
        # the end, not once per batch: a request carries a batch for each
        # of many partitions
        p._notify_held = True
        try:
            for node in list(self.nodes.values()):
                link = node.link
                if not link.woken(ready):
                    continue
                for cid, body in link.receive():
                    self._on_response(node, cid, body)
                if not link.alive():
                    self._drop_node(node, errors.NetworkError(
                        f"lost the link to worker {node.node_id}"))
        finally:
            p._notify_held = False
            if p._notify_owed:
                p._notify_owed = False
                with p._reported:
                    p._reported.notify_all()

    def _flush_waiting(self, now: float) -> None:
        """Route each partition's waiting batches, oldest first, as far as
        leaders, backoffs and (idempotence) the rules above allow."""
        if not self.waiting:
            return
        if self.need_metadata and now >= self.refresh_at:
            self.need_metadata = False
            topics = sorted({topic for topic, _ in self.waiting})
            try:
                self.meta.refresh(topics, False, self.request_timeout)
            except KafkaError as exc:
                self.retry_log.warning("metadata refresh failed: %s", exc)
            self.refresh_at = now + max(self.backoff, 0.05)
        idempotent = self.p._idempotent
        out = self.in_flight_batches
        for key in list(self.waiting):
            queue = self.waiting[key]
            if key in self.gaps:
                if out[key]:
                    continue        # the moves wait for what is out (_close_sequence_gap)
                self._apply_gaps(key)
            while queue:
                b = queue[0]
                if now >= b.deadline:
                    queue.popleft()
                    last = (f" ({b.attempts} attempts, the last failed: {b.last_error})"
                            if b.last_error is not None else "")
                    self.p._report(b, errors.RequestTimedOutError(
                        f"delivery.timeout.ms expired before {b.topic}-{b.partition} "
                        f"{self._stalled_because(key, b)}{last}"), -1)
                    continue
                if now < b.retry_at:
                    break
                if idempotent and (key in self.retrying
                                   or self.requests_out[key] >= self._appends_allowed(key)
                                   or (b.attempts and out[key])):
                    break
                if idempotent and self._stranded(key, b):
                    self._bump_epoch(key, queue)
                queue.popleft()
                if not self._route(b):
                    # back in front (routing may have dropped a worker and
                    # returned its batches here: _wait keeps sequence order)
                    if idempotent:
                        self._wait(b)
                    else:
                        queue.appendleft(b)
                    break
                if idempotent and b.attempts:
                    self.retrying[key] = b     # the partition's later batches wait for it
                    break
            if not queue and self.waiting.get(key) is queue:
                del self.waiting[key]

    def _stalled_because(self, key, b: _Batch) -> str:
        """Why ``b`` still waits (the end of a delivery timeout's message)."""
        held = self.retrying.get(key)
        if held is b:
            return "could be sent again: taken for out, its retry waited for its own answer"
        if held is not None:
            return (f"could be sent: it waits behind a retried batch (sequence {held.sequence}, "
                    f"{held.attempts} attempts) that was never answered")
        if self.p._idempotent and self.requests_out[key] >= self._appends_allowed(key):
            return (f"could be sent: {self.requests_out[key]} requests carrying the partition "
                    f"were never answered")
        if self.p._idempotent and b.attempts and self.in_flight_batches[key]:
            return (f"could be sent again: {self.in_flight_batches[key]} batches of the "
                    f"partition were never answered")
        leader = self._leader_of(b)
        if leader >= 0 and self.meta.brokers.get(leader) is None:
            return f"knew where its leader, broker {leader}, listens"
        if leader >= 0 and b.attempts:
            return f"was taken by its leader, broker {leader}"     # each attempt refused
        if leader >= 0:
            return f"had a link to its leader, broker {leader}"
        return "had a leader"

    def run(self) -> None:
        p = self.p
        while not p._closed:
            # Announce sleep before looking at the batches: a produce() after
            # _take_ready's look sees the flag and rings the wake pipe.
            p._sender_sleeping = True
            p._sender_wakes_at = math.inf    # until known, every new batch wakes it
            now = time.monotonic()
            next_linger = self._take_ready(now)
            self._flush_waiting(now)
            for node in list(self.nodes.values()):
                self._send(node)
            timeout = max(0.0, min(next_linger, now + 0.05 if self.waiting else now + 0.1) - now)
            for node in list(self.nodes.values()):
                if not node.link.arm():
                    timeout = 0.0  # answers (or ring room) arrived already: no sleeping
            if timeout:
                # poll's whole milliseconds, plus one, from now: by then it is awake
                p._sender_wakes_at = time.monotonic() + (int(timeout * 1000) + 1) / 1000.0
            events = self.poller.poll(int(timeout * 1000) + 1)
            p._sender_sleeping = False
            ready = {sock for sock, _ in events}
            if p._wake_r in ready:
                try:
                    os.read(p._wake_r, 4096)
                except BlockingIOError:
                    pass
            self._take_answers(ready)
            self._check_timeouts(time.monotonic())
        # acks=0 requests may still sit in ZeroMQ's queue: let them go out.
        linger = int(self.request_timeout * 1000) if p._acks == 0 else 0
        for node in list(self.nodes.values()):
            node.link.close(linger)
        self.meta.close()
