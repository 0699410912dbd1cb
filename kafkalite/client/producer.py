"""The producer: confluent-kafka's call shapes over kafkalite's native protocol.

``produce()`` appends a record to the open RecordBatch of its partition
(a Cython builder); a background sender thread closes batches when they
reach ``batch.size`` / ``batch.num.messages`` or are ``linger.ms`` old,
sends them to the worker that leads the partition through a link
(link.py) -- ZeroMQ, or a shared-memory ring when ``kafkalite.transport``
is "shm" (or "auto" and the worker is on this host) -- and turns the acknowledgements
into delivery reports, which ``poll()`` and ``flush()`` hand to the
callbacks in the caller's thread. ``produce_batch()`` is the bulk path:
many values in one call, encoded in one Cython loop.

Keys are partitioned with murmur2, byte-compatible with Kafka's Java
client; keyless records stick to one partition until its batch closes.

Delivery: acks=1 (and "all", which is the same until replication exists)
reports success once the worker has appended; failed sends are retried
(``retries``, ``retry.backoff.ms``) until ``delivery.timeout.ms``, so a
retry after a lost acknowledgement can write a record twice (at least
once). acks=0 reports success when the request is sent.

Thread safety: ``produce``, ``produce_batch``, ``poll``, ``flush`` and
``len()`` may be called from any thread; callbacks run in the thread that
calls ``poll``/``flush``. ``close`` once, when done.
"""
from __future__ import annotations

import collections
import logging
import os
import random
import threading
import time

import numpy as np
import zmq

from kafkalite import errors
from kafkalite._ext.partitioner import partition_for_key, partitions_for_keys
from kafkalite.client.config import PRODUCER, PRODUCER_ALIASES, resolve
from kafkalite.client.connection import Connection, parse_bootstrap
from kafkalite.client.metadata import Metadata, cluster_metadata
from kafkalite.client.types import BatchDelivery, Message, TIMESTAMP_CREATE_TIME
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder, codec_id

log = logging.getLogger(__name__)


class _Batch:
    """Records of one partition: open (builder), then built (raw) and sent."""

    __slots__ = ("topic", "partition", "builder", "raw", "count", "created", "callbacks",
                 "batch_callback", "attempts", "deadline", "retry_at", "node")

    def __init__(self, topic, partition, builder, now):
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.raw = None
        self.count = 0
        self.created = now
        self.callbacks = []          # (index, callback, key, value, headers, timestamp)
        self.batch_callback = None   # produce_batch's on_delivery
        self.attempts = 0
        self.deadline = 0.0
        self.retry_at = 0.0
        self.node = None


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


class Producer:
    def __init__(self, config: dict | None = None, **kwargs):
        cfg = resolve({**(config or {}), **kwargs}, PRODUCER, PRODUCER_ALIASES)
        if cfg["enable.idempotence"]:
            raise ValueError("enable.idempotence is not supported yet: kafkalite's broker does "
                             "not track producer ids until the Kafka-protocol work lands")
        if cfg["partitioner"] not in ("murmur2_random", "murmur2", "random"):
            raise ValueError(f"unsupported partitioner {cfg['partitioner']!r}: use murmur2_random "
                             f"(Kafka's Java default), murmur2 or random")
        if cfg["kafkalite.transport"] not in ("zmq", "shm", "auto"):
            raise ValueError("kafkalite.transport must be 'zmq', 'shm' or 'auto'")
        self.config = cfg
        try:
            self._codec = codec_id(cfg["compression.type"])
        except errors.UnsupportedCompressionTypeError:
            raise ValueError(f"invalid value {cfg['compression.type']!r} for configuration "
                             f"property 'compression.type': use none, gzip, snappy, lz4 or "
                             f"zstd") from None
        self._level = None if cfg["compression.level"] < 0 else cfg["compression.level"]
        self._acks = cfg["acks"]
        self._linger = cfg["linger.ms"] / 1000.0
        self._batch_bytes = cfg["batch.size"]
        self._batch_count = cfg["batch.num.messages"]
        self._max_queued = cfg["queue.buffering.max.messages"]
        self._default_cb = cfg.get("on_delivery")
        self._bootstrap = parse_bootstrap(cfg["bootstrap.servers"])
        self._ctx = zmq.Context()
        self._meta = Metadata(self._bootstrap, cfg["client.id"], self._ctx)   # caller threads
        self._meta_lock = threading.Lock()
        self._lock = threading.Lock()
        self._open: dict[tuple[str, int], _Batch] = {}
        self._ready: list[_Batch] = []
        self._sticky: dict[str, int] = {}
        self._queued = 0
        self._reports: collections.deque = collections.deque()
        self._reported = threading.Condition(threading.Lock())  # signalled on new reports
        self._flushing = 0
        self._closed = False
        self._sender_sleeping = False   # set by the sender before it blocks
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sender = threading.Thread(target=self._run, name="kafkalite-producer", daemon=True)
        self._sender.start()

    # ---- application side ----------------------------------------------------------------

    def _partitions(self, topic: str) -> int:
        with self._meta_lock:
            info = self._meta.topic(topic, self.config["allow.auto.create.topics"],
                                    self.config["request.timeout.ms"] / 1000.0)
            return len(info.partitions)

    def _choose(self, topic: str, key) -> int:
        n = self._partitions(topic)
        if key is not None and self.config["partitioner"] != "random":
            return partition_for_key(key, n)
        p = self._sticky.get(topic)
        if p is None or p >= n:
            p = self._sticky[topic] = random.randrange(n)
        return p

    def _check_partition(self, topic: str, partition: int) -> None:
        n = self._partitions(topic)
        if not 0 <= partition < n:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has {n} partitions; there is no partition {partition}")

    def _wake(self) -> None:
        """Wake the sender if it sleeps (a pipe write costs a syscall and a
        GIL hand-over, so only when there is something new for it)."""
        if not self._sender_sleeping:
            return
        self._sender_sleeping = False
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
                headers=None, callback=None):
        """Queue one record (see confluent-kafka's Producer.produce)."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        if isinstance(value, str):
            value = value.encode()
        if isinstance(key, str):
            key = key.encode()
        if headers:
            items = headers.items() if isinstance(headers, dict) else headers
            headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
        if partition < 0:
            partition = self._choose(topic, key)
        else:
            self._check_partition(topic, partition)
        cb = on_delivery or callback or self._default_cb
        wake = False
        with self._lock:
            if self._queued >= self._max_queued:
                raise BufferError(f"local queue full: {self._queued} messages waiting for "
                                  f"delivery (queue.buffering.max.messages); call poll()")
            b = self._open.get((topic, partition))
            if b is None:
                b = self._open[(topic, partition)] = _Batch(
                    topic, partition, RecordBatchBuilder(self._codec, compression_level=self._level),
                    time.monotonic())
                wake = True  # the sender must start this batch's linger.ms timer
            b.builder.append(timestamp or None, key, value, headers)
            if cb is not None:
                b.callbacks.append((b.count, cb, key, value, headers, timestamp))
            b.count += 1
            self._queued += 1
            if b.count >= self._batch_count or b.builder.size_in_bytes >= self._batch_bytes:
                self._close_batch(b)
                wake = True
        if wake:
            self._wake()

    def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None,
                      on_delivery=None):
        """Queue many records at once (the bulk path: one Cython loop per
        batch, no Python work per record). ``values`` (and ``keys``) are
        sequences of bytes-like objects (None: null); ``values`` may also be
        a 2-D uint8 numpy array, one fixed-size value per row, which is
        encoded straight from the array. With ``keys`` each
        record goes to its key's partition; without, all go to
        ``partition`` (or one sticky partition). ``on_delivery(err,
        BatchDelivery)`` runs once per batch. Blocks (serving callbacks)
        while the queue holds queue.buffering.max.messages records."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        step = self._batch_count
        chunks = []   # (partition, indices or slice bounds)
        if partition >= 0 or keys is None:
            if partition >= 0:
                self._check_partition(topic, partition)
            else:
                partition = self._choose(topic, None)
            chunks = [(partition, None, start) for start in range(0, n, step)]
        else:
            parts = partitions_for_keys(keys, self._partitions(topic),
                                        self._choose(topic, None))
            for p in np.unique(parts).tolist():
                idx = np.flatnonzero(parts == p)
                chunks += [(p, idx[i:i + step], 0) for i in range(0, len(idx), step)]
        self._wait_for_room(n)
        built = []
        for p, idx, start in chunks:
            # a chunk of batch.num.messages records is cut again at batch.size
            # bytes, so that no request outgrows max.request.size
            todo = step if idx is None else len(idx)
            if idx is None:
                todo = min(step, n - start)
            done = 0
            while done < todo:
                builder = RecordBatchBuilder(self._codec, compression_level=self._level)
                if idx is None:
                    lo, hi = start + done, start + todo
                    count = builder.append_values(
                        values[lo:hi], None if keys is None else keys[lo:hi], timestamp,
                        max_bytes=self._batch_bytes)
                else:
                    count = builder.append_values(values, keys, timestamp, idx[done:],
                                                  max_bytes=self._batch_bytes)
                done += count
                b = _Batch(topic, p, None, time.monotonic())
                b.raw = builder.build()
                b.count = count
                b.batch_callback = on_delivery or self._default_cb
                built.append(b)
        with self._lock:
            self._queued += n
            self._ready.extend(built)
            self._sticky.pop(topic, None)
        self._wake()

    def _wait_for_room(self, n: int) -> None:
        """Back-pressure for the bulk path: block (serving delivery callbacks)
        until ``n`` more records fit under queue.buffering.max.messages (or
        the queue is empty, for a call larger than the whole limit)."""
        while self._queued and self._queued + n > self._max_queued:
            if self._reports:
                self.poll(0)
                continue
            with self._reported:  # notified whenever a delivery lowers _queued
                if not self._reports and self._queued and self._queued + n > self._max_queued:
                    self._reported.wait(0.05)

    def _close_batch(self, b: _Batch) -> None:
        """Caller holds the lock."""
        del self._open[(b.topic, b.partition)]
        self._ready.append(b)
        if self._sticky.get(b.topic) == b.partition:
            del self._sticky[b.topic]

    def poll(self, timeout: float | None = 0) -> int:
        """Serve delivery callbacks; waits up to ``timeout`` seconds (None:
        forever) for at least one. Returns how many were served."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        served = 0
        while True:
            while self._reports:
                cb, err, msg = self._reports.popleft()
                try:
                    cb(err, msg)
                finally:
                    with self._lock:
                        self._queued -= msg.count if isinstance(msg, BatchDelivery) else 1
                served += 1
            if served:
                return served
            with self._reported:
                if self._reports:
                    continue
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return 0
                self._reported.wait(remaining)

    def flush(self, timeout: float | None = None) -> int:
        """Send everything and serve every callback; returns how many
        messages are still undelivered (0 unless ``timeout`` ran out)."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
        self._wake()
        try:
            while True:
                self.poll(0)
                if self._queued == 0:
                    return 0
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return self._queued
                with self._reported:
                    if not self._reports and self._queued:
                        self._reported.wait(0.05 if remaining is None else min(0.05, remaining))
        finally:
            with self._lock:
                self._flushing -= 1

    def __len__(self) -> int:
        return self._queued

    def list_topics(self, topic: str | None = None, timeout: float = 30.0):
        with self._meta_lock:
            return cluster_metadata(self._meta, topic, timeout)

    def close(self, timeout: float | None = 30.0) -> int:
        """Flush, stop the sender thread and release sockets and rings."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._closed = True
        self._wake()
        self._sender.join(10)
        with self._meta_lock:
            self._meta.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._ctx.term()
        return left

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- sender thread --------------------------------------------------------------------

    def _report(self, b: _Batch, err: KafkaError | None, base_offset: int) -> None:
        """Sender side: queue the delivery reports of a batch for poll()."""
        if b.batch_callback is not None:
            self._reports.append((b.batch_callback, err, BatchDelivery(
                b.topic, b.partition, base_offset if err is None else -1, b.count, err)))
        else:
            for index, cb, key, value, headers, ts in b.callbacks:
                offset = base_offset + index if err is None and base_offset >= 0 else -1
                self._reports.append((cb, err, Message(b.topic, b.partition, offset, key, value,
                                                       headers, ts, TIMESTAMP_CREATE_TIME, err)))
            uncalled = b.count - len(b.callbacks)
            if uncalled:
                with self._lock:
                    self._queued -= uncalled
        with self._reported:
            self._reported.notify_all()

    def _run(self) -> None:
        try:
            _Sender(self).run()
        except Exception:
            log.exception("kafkalite producer sender thread failed")
            # Fail everything still queued rather than leave flush() hanging.
            with self._lock:
                pending = self._ready + list(self._open.values())
                self._ready, self._open = [], {}
            for b in pending:
                self._report(b, errors.UnknownServerError("the producer's sender thread failed"), -1)


class _Sender:
    """The producer's background thread: owns every socket and ring."""

    RETRIABLE_REFRESH = {errors.NotLeaderOrFollowerError.code, errors.LeaderNotAvailableError.code,
                         errors.UnknownTopicOrPartitionError.code, errors.KafkaStorageError.code}

    def __init__(self, producer: Producer):
        self.p = producer
        cfg = producer.config
        self.meta = Metadata(producer._bootstrap, cfg["client.id"], producer._ctx)
        self.nodes: dict[int, _Node] = {}
        self.waiting: list[_Batch] = []        # no leader known yet / backing off
        self.poller = zmq.Poller()
        self.poller.register(producer._wake_r, zmq.POLLIN)
        self.request_timeout = cfg["request.timeout.ms"] / 1000.0
        self.backoff = cfg["retry.backoff.ms"] / 1000.0
        self.delivery_timeout = cfg["delivery.timeout.ms"] / 1000.0
        self.max_in_flight = max(1, cfg["max.in.flight.requests.per.connection"])
        self.max_request = cfg["max.request.size"]
        self.retries = cfg["retries"]
        self.transport = cfg["kafkalite.transport"]
        self.refresh_at = 0.0

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
        node = self.nodes[node_id] = _Node(node_id, endpoint, self._link(endpoint))
        node.link.register(self.poller)
        return node

    def _link(self, endpoint: str):
        """A ring to the worker when the transport says so (and it is on this
        host), else the ZeroMQ connection."""
        cfg = self.p.config
        conn = Connection(endpoint, cfg["client.id"], self.p._ctx, watch=True,
                          max_in_flight=self.max_in_flight)
        if not self._use_ring(endpoint):
            return conn
        from kafkalite.client.ring_link import RingLink
        try:
            link = RingLink(conn, cfg["kafkalite.shm.ring.bytes"], self.request_timeout)
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
        host = endpoint.rsplit(":", 1)[0][len("tcp://"):]
        return host in ("127.0.0.1", "localhost", "::1") or host == os.uname().nodename

    def _drop_node(self, node: _Node, err: KafkaError) -> None:
        """The worker went away: everything in flight to it is retried."""
        self.nodes.pop(node.node_id, None)
        node.link.unregister(self.poller)
        retry = [b for groups, _ in node.in_flight.values() for batches in groups.values()
                 for b in batches]
        retry += list(node.queue)
        node.link.close()
        for b in retry:
            self._retry(b, err)
        self.refresh_at = 0.0

    # sending

    def _take_ready(self, now: float) -> float:
        """Move closed and lingered batches to their workers; returns the
        next linger deadline."""
        p = self.p
        next_deadline = now + 0.1
        with p._lock:
            for b in list(p._open.values()):
                if p._flushing or now - b.created >= p._linger:
                    p._close_batch(b)
                else:
                    next_deadline = min(next_deadline, b.created + p._linger)
            ready, p._ready = p._ready, []
        for b in ready:
            if b.raw is None:
                b.raw = b.builder.build()
                b.builder = None
            b.deadline = b.created + self.delivery_timeout
            self._route(b)
        return next_deadline

    def _route(self, b: _Batch) -> None:
        try:
            leader = self.meta.leader(b.topic, b.partition)
        except errors.UnknownTopicOrPartitionError:
            leader = -1
        node = self._node(leader) if leader >= 0 else None
        if node is None:
            self.waiting.append(b)
            return
        b.node = node.node_id
        node.queue.append(b)

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
                b = node.queue.popleft()
                size += len(b.raw)
                groups.setdefault((b.topic, b.partition), []).append(b)
            topics: dict[str, list] = {}
            for (topic, partition), batches in groups.items():
                records = batches[0].raw if len(batches) == 1 else b"".join(b.raw for b in batches)
                topics.setdefault(topic, []).append({"index": partition, "records": records})
                for b in batches:
                    b.attempts += 1
            body = {"transactional_id": None, "acks": acks,
                    "timeout_ms": int(self.request_timeout * 1000),
                    "topic_data": [{"name": t, "partition_data": parts}
                                   for t, parts in topics.items()]}
            cid = link.send(ApiKey.PRODUCE, body, expect_response=acks != 0)
            if acks == 0:
                for batches in groups.values():
                    for b in batches:
                        self.p._report(b, None, -1)
            else:
                node.in_flight[cid] = (groups, time.monotonic())

    # outcomes

    def _retry(self, b: _Batch, err: KafkaError) -> None:
        now = time.monotonic()
        if b.attempts > self.retries or now >= b.deadline:
            why = "delivery.timeout.ms expired" if now >= b.deadline else "retries exhausted"
            self.p._report(b, type(err)(f"{err.message} ({why})"), -1)
            return
        b.retry_at = now + self.backoff
        b.node = None
        self.waiting.append(b)

    def _on_partition_result(self, b: _Batch, code: int, message, base_offset: int) -> None:
        if code == 0:
            self.p._report(b, None, base_offset)
            return
        err = errors.error_for_code(code)(message or errors.error_for_code(code).name)
        if err.retriable:
            if code in self.RETRIABLE_REFRESH:
                self.refresh_at = 0.0
            self._retry(b, err)
        else:
            self.p._report(b, err, -1)

    def _on_response(self, node: _Node, cid: int, body) -> None:
        groups, _ = node.in_flight.pop(cid, (None, None))
        if groups is None:
            return
        if isinstance(body, KafkaError):
            for batches in groups.values():
                for b in batches:
                    self._on_partition_result(b, body.code, body.message, -1)
            return
        results = {(t["name"], pr["index"]): pr for t in body["responses"]
                   for pr in t["partition_responses"]}
        for key, batches in groups.items():
            pr = results.get(key)
            code = errors.UnknownServerError.code if pr is None else pr["error_code"]
            message = "no result for the partition" if pr is None else pr.get("error_message")
            base = -1 if pr is None else pr["base_offset"]
            for b in batches:
                self._on_partition_result(b, code, message, base)
                if base >= 0:
                    base += b.count   # producer batches have consecutive offsets

    def _check_timeouts(self, now: float) -> None:
        for node in list(self.nodes.values()):
            for cid, (groups, sent) in list(node.in_flight.items()):
                if now - sent > self.request_timeout:
                    del node.in_flight[cid]
                    for b in (b for batches in groups.values() for b in batches):
                        self._retry(b, errors.RequestTimedOutError(
                            f"no acknowledgement from worker {node.node_id} within "
                            f"request.timeout.ms"))

    def _take_answers(self) -> None:
        """What the links received; a link whose worker is gone is dropped
        and its requests retried."""
        for node in list(self.nodes.values()):
            for cid, body in node.link.receive():
                self._on_response(node, cid, body)
            if not node.link.alive():
                self._drop_node(node, errors.NetworkError(
                    f"lost the link to worker {node.node_id}"))

    def _flush_waiting(self, now: float) -> None:
        if not self.waiting:
            return
        if now >= self.refresh_at:
            topics = sorted({b.topic for b in self.waiting})
            try:
                self.meta.refresh(topics, False, self.request_timeout)
            except KafkaError as exc:
                log.warning("metadata refresh failed: %s", exc)
            self.refresh_at = now + max(self.backoff, 0.05)
        still, self.waiting = self.waiting, []
        for b in still:
            if now >= b.deadline:
                self.p._report(b, errors.RequestTimedOutError(
                    f"delivery.timeout.ms expired before {b.topic}-{b.partition} had a leader"), -1)
            elif now < b.retry_at:
                self.waiting.append(b)
            else:
                self._route(b)

    def run(self) -> None:
        p = self.p
        while not p._closed:
            # Announce sleep before looking at the batches: a produce() after
            # _take_ready's look sees the flag and rings the wake pipe.
            p._sender_sleeping = True
            now = time.monotonic()
            next_linger = self._take_ready(now)
            self._flush_waiting(now)
            for node in list(self.nodes.values()):
                self._send(node)
            timeout = max(0.0, min(next_linger, now + 0.05 if self.waiting else now + 0.1) - now)
            for node in list(self.nodes.values()):
                if not node.link.arm():
                    timeout = 0.0  # answers (or ring room) arrived already: no sleeping
            events = self.poller.poll(int(timeout * 1000) + 1)
            p._sender_sleeping = False
            if any(sock == p._wake_r for sock, _ in events):
                try:
                    os.read(p._wake_r, 4096)
                except BlockingIOError:
                    pass
            self._take_answers()
            self._check_timeouts(time.monotonic())
        # acks=0 requests may still sit in ZeroMQ's queue: let them go out.
        linger = int(self.request_timeout * 1000) if p._acks == 0 else 0
        for node in list(self.nodes.values()):
            node.link.close(linger)
        self.meta.close()
