"""The producer: confluent-kafka's call shapes over kafkalite's native protocol.

``produce()`` appends a record to the open RecordBatch of its partition
in one call into Cython (kafkalite._ext.accumulator); a background
sender thread closes batches when they reach ``batch.size`` /
``batch.num.messages`` or are ``linger.ms`` old,
sends them to the worker that leads the partition through a link
(link.py) -- a direct TCP link to the worker's Kafka listener by default
(``kafkalite.transport`` "tcp"; tcp_link.resolve_transport), ZeroMQ when it
is "zmq", a shared-memory ring when it is "shm" (or "auto" and the worker
is on this host) -- and turns the acknowledgements
into delivery reports, which ``poll()`` and ``flush()`` hand to the
callbacks in the caller's thread. ``produce_batch()`` is the bulk path:
many values in one call, encoded in one Cython loop.

Keys are partitioned with murmur2, byte-compatible with Kafka's Java
client; keyless records stick to one partition until its batch closes.

Delivery: acks=all (the default) reports success once the records are
committed (below the high watermark), acks=1 once the worker has appended,
acks=0 when the request is sent. Failed sends are retried (``retries``,
``retry.backoff.ms``) until ``delivery.timeout.ms``. A batch of several
records refused as larger than its topic's ``max.message.bytes`` goes again
as halves (and the topic's later batches close smaller); a single record
too large fails with MessageTooLargeError, and an idempotent producer's
later batches of that partition are renumbered past it.

Idempotence (``enable.idempotence``, on by default as in Kafka's clients
since 3.0; it gives way to an explicit acks other than all or more than 5
requests in flight): the producer gets a producer id from the supervisor
and the sender numbers each partition's batches when it first takes them,
so the worker writes a retried batch once and refuses one that would
reorder; a batch whose retry would overtake an earlier one waits for it.

Transactions (``transactional.id``; confluent-kafka's calls):
``init_transactions`` (fences older producers of the id),
``begin_transaction``, ``send_offsets_to_transaction`` (a consumer's
offsets committed with the output), ``commit_transaction``,
``abort_transaction``. Transactions v2 (KIP-890 part 2;
``kafkalite.transaction.version`` 2, the default): a transactional Produce
(v12) adds its partition to the transaction at the leader and
TxnOffsetCommit v5 adds the group's offsets, and every commit or abort
hands the producer a bumped epoch (late writes of an ended transaction are
refused); a shared-memory ring names the transactional id when attached,
and the worker adds the partitions its batches open alike. With 1 the
sender adds each partition itself (AddPartitionsToTxn) before its first
batch goes out. Errors carry ``fatal`` (fenced: the
producer is done) and ``txn_requires_abort`` (abort_transaction() and
carry on).

Thread safety: ``produce``, ``produce_batch``, ``poll``, ``flush`` and
``len()`` may be called from any thread; callbacks run in the thread that
calls ``poll``/``flush``. The transaction calls belong to one thread at a
time. ``close`` once, when done.

This module holds ``Producer`` (and ``idempotence``, its configuration's
rule); the sender thread is sender.py's, the transactions
transaction_manager.py's.
"""
from __future__ import annotations

import collections
import logging
import math
import os
import random
import threading
import time

from kafkalite import errors
from kafkalite._ext.accumulator import Accumulator, FastLock, ProducerBatch
from kafkalite._ext.partitioner import partition_for_key, partitions_for_keys
from kafkalite.client import serialization
from kafkalite.client.config import PRODUCER, PRODUCER_ALIASES, resolve
from kafkalite.client.connection import client_context, parse_bootstrap
from kafkalite.client.metadata import Metadata, cluster_metadata
from kafkalite.client.producer.sender import Sender
from kafkalite.client.producer.transaction_manager import IN_TXN, READY, TransactionManager
from kafkalite.client.tcp_link import resolve_transport
from kafkalite.client.types import BatchDelivery
from kafkalite.errors import KafkaError
from kafkalite.record import codec_id

log = logging.getLogger(__name__)


def idempotence(cfg: dict, given: dict) -> bool:
    """Whether the producer is idempotent: Kafka's rules. Asked for (or
    implied by transactional.id) with acks other than all, more than 5
    requests in flight or no retries is an error; merely defaulted, it
    gives way to those settings."""
    transactional = bool(cfg.get("transactional.id"))
    explicit = "enable.idempotence" in given
    wanted = cfg["enable.idempotence"] or transactional
    if transactional and explicit and not cfg["enable.idempotence"]:
        raise ValueError("transactional.id requires enable.idempotence=true")
    conflicts = []
    if cfg["acks"] != -1:
        conflicts.append("acks must be all")
    if cfg["max.in.flight.requests.per.connection"] > 5:
        conflicts.append("max.in.flight.requests.per.connection must be at most 5")
    if cfg["retries"] < 1:
        conflicts.append("retries must be at least 1")
    if wanted and conflicts:
        if explicit or transactional:
            raise ValueError(f"{'transactional.id' if transactional else 'enable.idempotence'} "
                             f"needs an idempotent producer: {'; '.join(conflicts)}")
        return False
    return wanted


class Producer:
    def __init__(self, config: dict | None = None, **kwargs):
        given = {**(config or {}), **kwargs}
        # confluent-kafka's serializer objects (serialization.py): not settings
        self._key_serializer, self._value_serializer = serialization.take(
            given, serialization.SERIALIZERS)
        cfg = resolve(given, PRODUCER, PRODUCER_ALIASES)
        self._idempotent = idempotence(cfg, given)
        self._transactional_id = cfg.get("transactional.id") or None
        if cfg["partitioner"] not in ("murmur2_random", "murmur2", "random"):
            raise ValueError(f"unsupported partitioner {cfg['partitioner']!r}: use murmur2_random "
                             f"(Kafka's Java default), murmur2 or random")
        if cfg.get("kafkalite.transport") not in (None, "zmq", "shm", "auto", "tcp"):
            raise ValueError("kafkalite.transport must be 'zmq', 'shm', 'auto' or 'tcp'")
        self._transport_chosen = resolve_transport(cfg)
        # the Produce requests' request_principal: over ZeroMQ only (a ring
        # is attached, and counted, as the connection's own principal)
        self._request_principal = cfg.get("kafkalite.request.principal") or None
        if self._request_principal is not None and cfg["kafkalite.transport"] != "zmq":
            raise ValueError("kafkalite.request.principal needs kafkalite.transport 'zmq'")
        if cfg["kafkalite.transaction.version"] not in (1, 2):
            raise ValueError("kafkalite.transaction.version must be 1 or 2")
        # transactions v2: partitions join the transaction by the writes
        # themselves (a ring names the transactional id when attached)
        self._txn_v2 = (self._transactional_id is not None
                        and cfg["kafkalite.transaction.version"] == 2)
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
        self._max_queued_bytes = cfg["queue.buffering.max.kbytes"] * 1024
        if self._max_queued < 1 or self._max_queued_bytes < 1024:
            raise ValueError("queue.buffering.max.messages and queue.buffering.max.kbytes "
                             "must be at least 1")
        self._default_cb = cfg.get("on_delivery")
        self._bootstrap = parse_bootstrap(cfg["bootstrap.servers"])
        self._ctx = client_context(cfg)
        self._meta = Metadata(self._bootstrap, cfg["client.id"], self._ctx)   # caller threads
        self._meta_lock = threading.Lock()
        self._lock = FastLock()         # a threading.Lock, with a C fast path for produce()
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._ready: list[ProducerBatch] = []
        self._sticky: dict[str, int] = {}
        # delivery reports for poll(): ProducerBatch (one callback per record
        # with one) or (callback, error, BatchDelivery) entries
        self._reports: collections.deque = collections.deque()
        self._reported = threading.Condition(threading.Lock())  # signalled on new reports
        self._flushing = 0
        self._closed = False
        self._sender_sleeping = False   # set by the sender before it blocks
        self._sender_wakes_at = math.inf   # ... and when it will be awake again at the latest
        # while the sender takes a poll's answers, _report leaves notifying
        # poll() (and flush()) to it, once for all of them
        self._notify_held = False
        self._notify_owed = False
        # the producer id and epoch batches are stamped with (idempotence);
        # ``_pid_generation`` tells the sender to restart its sequences
        self._pid, self._epoch, self._pid_generation = -1, -1, 0
        self._txn = TransactionManager(self, self._transactional_id, self._txn_v2)
        # produce() is the accumulator's (one C call per record); its count
        # of queued records is _queued
        self._acc = Accumulator(
            self, self._lock, self._open, self._sticky, self._meta.topics, self._codec, self._level,
            self._batch_count, self._batch_bytes, self._max_queued, self._max_queued_bytes,
            cfg["max.request.size"], cfg["partitioner"] != "random", self._default_cb,
            self._transactional_id is None)
        if type(self).produce is Producer.produce:
            self.produce = self._acc.produce
        if self._key_serializer is not None or self._value_serializer is not None:
            # only then a Python call per record before the accumulator's
            self.produce = serialization.serializing_produce(
                self.produce, self._key_serializer, self._value_serializer)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._sender = threading.Thread(target=self._run, name="kafkalite-producer", daemon=True)
        self._sender.start()

    # ---- application side ----------------------------------------------------------------

    @property
    def _queued(self) -> int:
        """Records produced whose delivery report is not served yet (under _lock)."""
        return self._acc.queued

    @_queued.setter
    def _queued(self, n: int) -> None:
        self._acc.queued = n

    def _partitions(self, topic: str) -> int:
        with self._meta_lock:
            info = self._meta.topic(topic, self.config["allow.auto.create.topics"],
                                    self.config["request.timeout.ms"] / 1000.0)
            return len(info.partitions)

    def _choose(self, topic: str, key) -> int:
        n = self._partitions(topic)
        if key is not None and self.config["partitioner"] != "random":
            return partition_for_key(key, n)
        return self._choose_sticky(topic, n)

    def _choose_sticky(self, topic: str, n: int) -> int:
        """The topic's sticky partition for records without a key (of its ``n``)."""
        p = self._sticky.get(topic)
        if p is None or p >= n:
            p = self._sticky[topic] = random.randrange(n)
        return p

    def _check_partition(self, topic: str, partition: int) -> None:
        n = self._partitions(topic)
        if not 0 <= partition < n:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {topic!r} has {n} partitions; there is no partition {partition}")

    def _wake(self, opened_at: float = -1.0) -> None:
        """Wake the sender if it sleeps (a pipe write costs a syscall and a
        GIL hand-over, so only when there is something new for it).
        ``opened_at`` >= 0: all that is new is a batch opened then, which
        the sender need not hear of if it wakes by its linger deadline."""
        if not self._sender_sleeping:
            return
        if opened_at >= 0 and self._sender_wakes_at <= opened_at + self._linger:
            return
        self._sender_sleeping = False
        try:
            os.write(self._wake_w, b"x")
        except BlockingIOError:
            pass

    def _check_can_produce(self) -> None:
        if self._closed:
            raise RuntimeError("the producer is closed")
        state = self._txn.state
        if state != READY and state != IN_TXN:
            raise self._txn.state_error("produce")
        if self._transactional_id is not None and state != IN_TXN:
            raise errors.InvalidTxnStateError(
                "a transactional producer produces inside a transaction: call "
                "begin_transaction() first")

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None, timestamp=0,
                headers=None, callback=None):
        """Queue one record (see confluent-kafka's Producer.produce). Raises
        TypeError for a key, value or header that is not bytes-like (or
        str), UnknownTopicOrPartitionError for a partition the topic does
        not have, MessageTooLargeError for a record that cannot fit
        max.request.size, BufferError when queue.buffering.max.messages
        records, or queue.buffering.max.kbytes of them, wait. With
        ``key.serializer`` / ``value.serializer`` (serialization.py) the key
        and value go through them first. An instance
        calls the accumulator directly (see __init__); this is for
        subclasses and the docs."""
        self._acc.produce(topic, value, key, partition, on_delivery, timestamp, headers, callback)

    def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None,
                      on_delivery=None, headers=None):
        """Queue many records at once (the bulk path: one Cython loop per
        batch, no Python work per record). ``values`` (and ``keys``) are
        sequences of bytes-like objects (None: null); ``values`` may also be
        a 2-D uint8 numpy array, one fixed-size value per row, which is
        encoded straight from the array. ``timestamp``: milliseconds for
        every record (None: now), or a sequence / int64 array of one per
        record. ``headers``: None, or one header list (or None) per record.
        With ``keys`` each record goes to its key's partition; without, all
        go to ``partition`` (or one sticky partition). ``on_delivery(err,
        BatchDelivery)`` runs once per batch. Blocks (serving callbacks)
        while the queue holds queue.buffering.max.messages records or
        queue.buffering.max.kbytes (the call's records are built first, so
        one call's worth may be held beyond that while it waits)."""
        self._check_can_produce()
        n = len(values)
        if keys is not None and len(keys) != n:
            raise ValueError(f"{len(keys)} keys for {n} values")
        if headers is not None and len(headers) != n:
            raise ValueError(f"{len(headers)} header lists for {n} values")
        import numpy as np      # here: per-record producers (the ingest gateway) never load it
        per_record_ts = timestamp is not None and np.ndim(timestamp) == 1
        if per_record_ts:
            timestamp = np.ascontiguousarray(timestamp, dtype=np.int64)
            if len(timestamp) != n:
                raise ValueError(f"{len(timestamp)} timestamps for {n} values")
        step = self._batch_count
        chunks = self._chunks(topic, n, keys, partition, step)
        self._wait_for_room(n, 0)
        cap = self._acc.topic_bytes.get(topic, self._batch_bytes)
        built = []
        nbytes = 0
        for p, idx, start in chunks:
            # a chunk of batch.num.messages records is cut again at batch.size
            # bytes, so that no request outgrows max.request.size
            todo = step if idx is None else len(idx)
            if idx is None:
                todo = min(step, n - start)
            done = 0
            while done < todo:
                builder = self._acc.new_builder()
                if idx is None:
                    lo, hi = start + done, start + todo
                    count = builder.append_values(
                        values[lo:hi], None if keys is None else keys[lo:hi],
                        timestamp[lo:hi] if per_record_ts else timestamp,
                        max_bytes=cap,
                        headers=None if headers is None else headers[lo:hi])
                else:
                    count = builder.append_values(values, keys, timestamp, idx[done:],
                                                  max_bytes=cap, headers=headers)
                done += count
                # built by the sender, which stamps it first when idempotent
                b = ProducerBatch(topic, p, builder, time.monotonic())
                b.count = count
                b.nbytes = builder.size_in_bytes
                nbytes += b.nbytes
                b.batch_callback = on_delivery or self._default_cb
                built.append(b)
        self._wait_for_room(n, nbytes)
        with self._lock:
            self._queued += n
            self._acc.queued_bytes += nbytes
            self._ready.extend(built)
            self._sticky.pop(topic, None)
        self._wake()

    def _chunks(self, topic, n: int, keys, partition: int, step: int) -> list:
        """produce_batch's records cut into (partition, indices or None, slice
        start) chunks of at most ``step``: all to ``partition`` (or a sticky one)
        without keys, else each to its key's partition, in call order within it."""
        import numpy as np
        chunks = []   # (partition, indices or slice bounds)
        if partition >= 0 or keys is None:
            if partition >= 0:
                self._check_partition(topic, partition)
            else:
                partition = self._choose(topic, None)
            chunks = [(partition, None, start) for start in range(0, n, step)]
        elif (n_parts := self._partitions(topic)) == 1:
            # a topic of one partition takes every record, whatever its key: the keys'
            # hashes and the comparison of their partitions would be 10 % of a CDC
            # task's thread (issue 75)
            chunks = [(0, None, start) for start in range(0, n, step)]
        else:
            parts = partitions_for_keys(keys, n_parts, self._choose_sticky(topic, n_parts))
            first = int(parts[0]) if n else 0
            if n == 1 or not (parts != first).any():
                # one partition (a call of a record or two, at low rates): its
                # records in order, as slices, with none of the grouping below
                chunks = [(first, None, start) for start in range(0, n, step)]
            else:
                order = np.argsort(parts, kind="stable")   # by partition, in call order
                ordered = parts[order]
                cuts = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), n]
                for lo, hi in zip(cuts, cuts[1:]):
                    idx = order[lo:hi]
                    chunks += [(int(ordered[lo]), idx[i:i + step], 0)
                               for i in range(0, len(idx), step)]
        return chunks

    def _wait_for_room(self, n: int, nbytes: int) -> None:
        """Back-pressure for the bulk path: block (serving delivery callbacks)
        until ``n`` more records of ``nbytes`` fit under
        queue.buffering.max.messages and queue.buffering.max.kbytes (or the
        queue is empty, for a call larger than the whole limit)."""
        while self._no_room(n, nbytes):
            if self._reports:
                self.poll(0)
                continue
            with self._reported:  # notified whenever a delivery lowers _queued
                if not self._reports and self._no_room(n, nbytes):
                    self._reported.wait(0.05)

    def _no_room(self, n: int, nbytes: int) -> bool:
        return self._queued > 0 and (self._queued + n > self._max_queued or
                                     self._acc.queued_bytes + nbytes > self._max_queued_bytes)

    def _close_batch(self, b: ProducerBatch) -> None:
        """Caller holds the lock."""
        del self._open[(b.topic, b.partition)]
        b.closed = True          # the accumulator appends to it no more
        self._ready.append(b)
        if self._sticky.get(b.topic) == b.partition:
            del self._sticky[b.topic]

    def poll(self, timeout: float | None = 0) -> int:
        """Serve delivery callbacks; waits up to ``timeout`` seconds (None:
        forever) for at least one. Returns how many were served."""
        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        served = 0
        while True:
            if self._reports:
                served += self._acc.serve(self._reports)
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

    # ---- transactions (transaction_manager.py) -------------------------------------------------

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take the transactional id: a producer id and a new epoch, which
        fences every older producer of the id (a transaction one left open
        is aborted first)."""
        self._txn.init_transactions(timeout)

    def begin_transaction(self) -> None:
        self._txn.begin_transaction()

    def send_offsets_to_transaction(self, positions, group_metadata, timeout: float | None = None):
        """Commit a consumer's ``positions`` (TopicPartitions with the next
        offset to read) to its group as part of this transaction."""
        self._txn.send_offsets_to_transaction(positions, group_metadata, timeout)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Deliver what the transaction produced, then commit it: all of it
        becomes visible to read_committed consumers at once."""
        self._txn.commit_transaction(timeout)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: nothing it produced or committed becomes
        visible to read_committed consumers."""
        self._txn.abort_transaction(timeout)

    def close(self, timeout: float | None = 30.0) -> int:
        """Flush, stop the sender thread and release sockets and rings."""
        if self._closed:
            return 0
        left = self.flush(timeout)
        self._acc.gate = False      # produce() asks _check_can_produce, which refuses
        self._closed = True
        self._wake()
        self._sender.join(10)
        with self._meta_lock:
            self._meta.close()
        os.close(self._wake_r)
        os.close(self._wake_w)
        self._ctx.term_within("producer")
        return left

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- sender thread --------------------------------------------------------------------

    def _cap_topic_batches(self, topic: str, nbytes: int) -> None:
        """Close ``topic``'s batches at ``nbytes`` from now on (the sender
        learnt its max.message.bytes is below batch.size)."""
        caps = self._acc.topic_bytes
        if nbytes < caps.get(topic, self._batch_bytes):
            caps[topic] = nbytes

    def _report(self, b: ProducerBatch, err: KafkaError | None, base_offset: int) -> None:
        """Sender side: queue the delivery reports of a batch for poll()."""
        if err is not None:
            self._txn.batch_failed(err)
        # the batch's bytes leave queue.buffering.max.kbytes now, but for
        # records whose callback still holds their key and value (released
        # as poll() serves them)
        released = b.nbytes
        b.nbytes = 0
        uncalled = 0
        if b.batch_callback is not None:
            self._reports.append((b.batch_callback, err, BatchDelivery(
                b.topic, b.partition, base_offset if err is None else -1, b.count, err)))
        else:
            if b.callbacks:
                # one entry for the batch: poll() makes each record's Message
                # (from its callback entries: the batch's bytes can go now,
                # not when the application gets round to poll())
                b.error, b.base_offset, b.served = err, base_offset, 0
                b.raw = b.builder = None
                released -= b.callback_bytes
                self._reports.append(b)
            uncalled = b.count - b.callback_count
        if uncalled or released:
            with self._lock:
                self._queued -= uncalled
                self._acc.queued_bytes -= released
        if self._notify_held:
            self._notify_owed = True     # the sender notifies once it has taken every answer
            return
        with self._reported:
            self._reported.notify_all()

    def _run(self) -> None:
        try:
            self._sending = Sender(self)     # its state, for tests to look at
            self._sending.run()
        except Exception:
            log.exception("kafkalite producer sender thread failed")
            # Fail everything still queued rather than leave flush() hanging.
            with self._lock:
                pending = self._ready + list(self._open.values())
                self._ready = []
                self._open.clear()       # the accumulator's dict too
                for b in pending:
                    b.closed = True
            for b in pending:
                self._report(b, errors.UnknownServerError("the producer's sender thread failed"), -1)
