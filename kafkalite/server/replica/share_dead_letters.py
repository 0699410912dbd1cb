"""Share groups' dead-letter topic: records rejected or past their delivery limit.

When a share-partition (share_partition.py) archives records because a
member rejected them or they reached ``group.share.delivery.count.limit``,
and the server names a dead-letter topic (``share_dead_letter_topic``,
Kafka 4.2's ``errors.deadletterqueue.topic.name`` from KIP-1191 -- a group
config there, one server-wide topic here), copies of those records are
written to it: key, value and headers as they were, plus headers saying
where they came from and why:

    __dlq.errors.group.id         the share group
    __dlq.errors.topic            the source topic
    __dlq.errors.partition        the source partition (decimal text)
    __dlq.errors.offset           the source offset (decimal text)
    __dlq.errors.delivery.count   deliveries it had (decimal text)
    __dlq.errors.reason           "rejected", "released" or
                                  "acquisition lock timed out" (the limit reached)

The archived ranges are read from the source log (at once, or at a later
tick) and their records kept in memory (at most ``MAX_PENDING`` ranges to
read and ``MAX_PENDING`` records to write; past that they are dropped with
a rate-limited warning) until written. A range below a tiered log's local
start whose remote segment is not in the cache is not read on this
thread: as a ShareFetch of it, the segment is downloaded on the remote
reader's threads (RemoteReadPending meanwhile), and the range -- with the
ranges of its partition after it, to keep their order -- is read again at
the next ticks until it is there; a read that fails drops the range.

The topic must exist (it is not created here); its partition is the
source partition's index modulo its partition count, so one source
partition's dead letters keep their order.
The writer asks the controller (the supervisor, over the coordinator
channel) for the topic's leaders, then sends Produce (acks=all) to the
leading worker -- or appends here when this worker leads it -- one request
at a time, retrying after ``RETRY_S`` on any error. Dead letters not yet
written when the worker stops are lost (the archived state itself is
persisted with the share-partition).

Who may call: the share-partition manager and the worker, on the worker's
event-loop thread.
"""
from __future__ import annotations

import collections
import logging
import time

from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.record import RecordBatchBuilder, iter_batches
from kafkalite.storage.remote.remote_log import RemoteReadPending

log = logging.getLogger("kafkalite.share_dead_letters")

MAX_PENDING = 100_000          # dead letters kept in memory at most
MAX_PER_REQUEST = 500          # records per Produce
RETRY_S = 1.0
METADATA_MAX_AGE_S = 30.0
PRODUCE_VERSION = 9
METADATA_VERSION = 12
READ_BYTES = 1 << 20


class _ArchivedRange:
    """Records ``offset``..``last`` of ``part`` archived for ``group``, still
    to be read (``offset``: the next one, moved on as they are)."""

    __slots__ = ("group", "part", "offset", "last", "count", "reason")

    def __init__(self, group: str, part, first: int, last: int, count: int, reason: str):
        self.group, self.part, self.offset, self.last = group, part, first, last
        self.count, self.reason = count, reason


class DeadLetterWriter:
    def __init__(self, replica_manager):
        self.rm = replica_manager
        self.topic = ""
        # the worker's ways out: (api key, version, body, on_done) to the
        # controller, (broker id, api key, version, body, on_done) to a worker
        self.ask_controller = None
        self.ask_broker = None
        self.to_read: collections.deque = collections.deque()   # _ArchivedRange
        self.pending: collections.deque = collections.deque()   # (partition, key, value, headers)
        self.leaders: dict[int, int] = {}
        self._metadata_at = 0.0
        self._busy = False
        self._next_try = 0.0
        self._warn = RateLimitedLog(log)
        self.written = 0

    # ---- collecting ------------------------------------------------------------------------

    def add(self, group: str, part, first: int, last: int, count: int, reason: str) -> None:
        """Copy the records ``first``..``last`` of ``part`` for the topic."""
        if not self.topic:
            return
        if len(self.to_read) >= MAX_PENDING:
            self._warn.warning("dead-letter topic %s: %d ranges waiting to be read; dropping "
                               "%s %d-%d", self.topic, len(self.to_read), part.name, first, last)
            return
        self.to_read.append(_ArchivedRange(group, part, first, last, count, reason))
        self._read()

    @property
    def busy(self) -> bool:
        """Whether ranges wait to be read or records to be written."""
        return bool(self.to_read or self.pending)

    def _read(self) -> None:
        """Read what can be read of the archived ranges now, in order per
        source partition; those waiting for a remote download stay."""
        waiting = collections.deque()
        blocked: set = set()            # partitions whose earlier range waits for a download
        for r in self.to_read:
            key = r.part.key
            if key in blocked:
                waiting.append(r)
                continue
            if self.rm.partitions.get(key) is not r.part:
                self._warn.warning("dead letters of %s %d-%d not read: the replica is gone",
                                   r.part.name, r.offset, r.last)
                continue
            try:
                self.rm.read_remote_in_background(r.part, lambda: self._read_range(r))
            except RemoteReadPending:
                blocked.add(key)
                waiting.append(r)
            except KafkaError as exc:
                self._warn.warning("dead letters of %s %d-%d not read: %s", r.part.name,
                                   r.offset, r.last, exc)
        self.to_read = waiting

    def _read_range(self, r: _ArchivedRange) -> None:
        """Queue the records of ``r`` from ``r.offset`` on, moving it along
        (a RemoteReadPending leaves it where the download is needed)."""
        part = r.part
        while r.offset <= r.last:
            data = part.log.read(r.offset, READ_BYTES, max_offset=part.high_watermark,
                                 min_one_message=True)
            if data.region is None:
                return
            moved = False
            for batch in iter_batches(data.region.read(), 0):
                if batch.next_offset <= r.offset:
                    continue
                moved = True
                first, r.offset = r.offset, batch.next_offset
                if batch.is_control:
                    continue
                for rec in batch.records():
                    if first <= rec.offset <= r.last:
                        self._queue(r.group, part, rec, r.count, r.reason)
                if r.offset > r.last:
                    break
            if not moved:
                return

    def _queue(self, group, part, rec, count, reason) -> None:
        if len(self.pending) >= MAX_PENDING:
            self._warn.warning("dead-letter topic %s: %d records waiting; dropping %s@%d",
                               self.topic, len(self.pending), part.name, rec.offset)
            return
        headers = list(rec.headers or ()) + [
            ("__dlq.errors.group.id", group.encode()),
            ("__dlq.errors.topic", part.topic.encode()),
            ("__dlq.errors.partition", str(part.index).encode()),
            ("__dlq.errors.offset", str(rec.offset).encode()),
            ("__dlq.errors.delivery.count", str(count).encode()),
            ("__dlq.errors.reason", reason.encode())]
        self.pending.append((part.index, rec.key, rec.value, headers))

    # ---- writing ----------------------------------------------------------------------------

    def tick(self) -> None:
        """Read what waits to be read; write what is pending, one request at a time."""
        if self.to_read:
            self._read()
        now = time.monotonic()
        if not self.pending or self._busy or now < self._next_try or self.ask_controller is None:
            return
        if not self.leaders or now - self._metadata_at > METADATA_MAX_AGE_S:
            self._busy = True
            self.ask_controller(ApiKey.METADATA, METADATA_VERSION, {
                "topics": [{"name": self.topic}], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}, self._on_metadata)
            return
        target = self.pending[0][0] % len(self.leaders)
        batch = []
        for entry in self.pending:
            if entry[0] % len(self.leaders) == target:
                batch.append(entry)
                if len(batch) >= MAX_PER_REQUEST:
                    break
        builder = RecordBatchBuilder()
        for _, key, value, headers in batch:
            builder.append(None, key, value, headers)
        records = builder.build()
        leader = self.leaders[target]
        if leader == self.rm.broker_id:
            try:
                with self.rm.gathered_wakeups():
                    self.rm.append(self.rm.partition(self.topic, target), records)
            except KafkaError as exc:
                self._failed(exc)
                return
            self._written(batch)
            return
        self._busy = True
        self.ask_broker(leader, ApiKey.PRODUCE, PRODUCE_VERSION, {
            "transactional_id": None, "acks": -1, "timeout_ms": 10_000,
            "topic_data": [{"name": self.topic, "partition_data": [
                {"index": target, "records": records}]}]},
            lambda answer: self._on_produce(answer, batch))

    def _on_metadata(self, answer) -> None:
        self._busy = False
        if isinstance(answer, KafkaError):
            self._failed(answer)
            return
        topic = next((t for t in answer["topics"] if t["name"] == self.topic), None)
        if topic is None or topic["error_code"] or not topic["partitions"]:
            self._failed(KafkaError(f"dead-letter topic {self.topic} is not available "
                                    f"(error {topic and topic['error_code']})"))
            return
        self.leaders = {p["partition_index"]: p["leader_id"] for p in topic["partitions"]}
        self._metadata_at = time.monotonic()

    def _on_produce(self, answer, batch) -> None:
        self._busy = False
        if isinstance(answer, KafkaError):
            self._failed(answer)
            return
        code = answer["responses"][0]["partition_responses"][0]["error_code"]
        if code:
            self._failed(KafkaError(f"error {code}"))
            return
        self._written(batch)

    def _written(self, batch) -> None:
        done = {id(e) for e in batch}
        self.pending = collections.deque(e for e in self.pending if id(e) not in done)
        self.written += len(batch)

    def _failed(self, exc) -> None:
        self._warn.warning("dead-letter topic %s: %s; retrying", self.topic, exc)
        self.leaders = {}
        self._next_try = time.monotonic() + RETRY_S
