"""Requests that wait: delayed fetches, produces, record deletions and remote
offset lookups (Kafka's purgatory).

A fetch that cannot be answered yet (fewer than ``fetch.min.bytes``
committed bytes to read, or a remote segment to download first), a
ListOffsets whose lookup by timestamp needs a remote segment, an
acks=all produce whose records are not yet below the high watermark, and
a DeleteRecords whose new log start the in-sync followers have not taken
yet (the low watermark) wait here, watched by the partitions they touch
(or the downloads they need), until their condition holds or
their deadline passes. Each is completed exactly once: by ``check(partition
key)`` when the partition makes progress (an append, a high watermark
move, a follower's new log start), by ``expire()`` at the deadline, or by
``complete_watchers_of`` / ``complete_all`` when a partition goes away or
the process stops. Completing an operation sends its response.

The owning event loop sleeps until ``next_deadline()``, so an idle broker
does not spin.

Who may call: the replica manager, on its worker's event-loop thread.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import time

from kafkalite import errors

log = logging.getLogger("kafkalite.purgatory")



def replica_key(key: tuple[str, int]) -> tuple:
    """The purgatory key followers' fetches of a partition wait under."""
    return ("replica", *key)


class DelayedOperation:
    """Base: subclasses say when they can complete and what completing does.
    ``ctx`` is the request being answered."""

    __slots__ = ("ctx", "deadline", "keys", "done")

    def __init__(self, ctx, deadline: float, keys):
        self.ctx = ctx
        self.deadline = deadline
        self.keys = tuple(keys)
        self.done = False

    def ready(self, key, progress: int) -> bool:
        """Whether ``progress`` (new committed bytes) on ``key`` completes it."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Build and send the response (called once)."""
        raise NotImplementedError


class DelayedFetch(DelayedOperation):
    """A fetch waiting for ``min_bytes`` of committed data across its partitions."""

    __slots__ = ("bytes_seen", "min_bytes", "respond")

    def __init__(self, ctx, deadline: float, keys, min_bytes: int, bytes_seen: int, respond):
        super().__init__(ctx, deadline, keys)
        self.min_bytes = min_bytes
        self.bytes_seen = bytes_seen
        self.respond = respond          # () -> None: read again and answer

    def ready(self, key, progress: int | None) -> bool:
        if progress is None:        # the high watermark moved: read again
            return True
        self.bytes_seen += progress
        return self.bytes_seen >= self.min_bytes

    def on_complete(self) -> None:
        self.respond()


class DelayedRemoteFetch(DelayedOperation):
    """A fetch waiting for the remote segments it reads to be downloaded
    (Kafka's DelayedRemoteFetch): ``keys`` are the downloads' purgatory
    keys (RemoteLog.read_key), each checked once when its download ends.
    Complete when all have, or at ``remote.fetch.max.wait.ms``; completing
    reads again and answers (what is still not downloaded: no records)."""

    __slots__ = ("waiting", "respond")

    def __init__(self, ctx, deadline: float, keys, respond):
        super().__init__(ctx, deadline, keys)
        self.waiting = set(self.keys)
        # (all downloaded: bool) -> None: read again and answer, or wait for
        # the next downloads when all were (not at the deadline or shutdown)
        self.respond = respond

    def ready(self, key, progress) -> bool:
        self.waiting.discard(key)
        return not self.waiting

    def on_complete(self) -> None:
        self.respond(not self.waiting)


class DelayedRemoteListOffsets(DelayedRemoteFetch):
    """A ListOffsets waiting for the remote segments its lookups by
    timestamp need (Kafka's DelayedRemoteListOffsets, KIP-1075): the same
    wait as a DelayedRemoteFetch, on the same download keys, bounded by the
    request's ``timeout_ms`` (v10) or ``remote.list.offsets.request.timeout.ms``;
    completing looks up again and answers (what is still not downloaded:
    REQUEST_TIMED_OUT). A class of its own for the purgatory's sizes, as
    Kafka keeps a purgatory of its own for it."""

    __slots__ = ()


class DelayedProduce(DelayedOperation):
    """An acks=all produce waiting until the high watermark of each of its
    partitions reaches the end of what it appended there (or its leadership
    there moves away)."""

    __slots__ = ("required", "partitions", "respond")

    def __init__(self, ctx, deadline: float, partitions: dict, required: dict, respond):
        super().__init__(ctx, deadline, required)
        self.partitions = partitions    # key -> Partition
        self.required = required        # key -> offset the high watermark must reach
        self.respond = respond          # (timed_out keys: set) -> None

    def satisfied(self) -> bool:
        return all(self.partitions[k].high_watermark >= offset or not self.partitions[k].is_leader
                   for k, offset in self.required.items())

    def ready(self, key, progress) -> bool:
        return self.satisfied()

    def failures(self) -> dict:
        """{key: KafkaError} of the partitions that did not make it."""
        out = {}
        for k, offset in self.required.items():
            part = self.partitions[k]
            if not part.is_leader or part.log.closed:
                out[k] = errors.NotLeaderOrFollowerError(
                    f"{part.name}: this broker stopped leading it before the in-sync "
                    f"replicas had the records")
            elif part.high_watermark < offset:
                out[k] = errors.RequestTimedOutError(
                    "the in-sync replicas did not take the records in time")
            elif part.under_min_isr:
                out[k] = errors.NotEnoughReplicasAfterAppendError(
                    f"{part.name}: the records were written, but the ISR {part.isr} is smaller "
                    f"than min.insync.replicas {part.log.config.min_insync_replicas}")
        return out

    def on_complete(self) -> None:
        self.respond(self.failures())


class DelayedDeleteRecords(DelayedOperation):
    """A DeleteRecords waiting until the low watermark (Partition.low_watermark)
    of each of its partitions reaches the offset it deleted before, as
    Kafka's DelayedDeleteRecords. ``respond(results)`` gets {key: (low
    watermark, error code)}: NOT_LEADER_OR_FOLLOWER where leadership moved
    away, REQUEST_TIMED_OUT (and the low watermark then) where the
    followers did not get there in time."""

    __slots__ = ("partitions", "required", "respond")

    def __init__(self, ctx, deadline: float, keys, partitions: dict, required: dict, respond):
        super().__init__(ctx, deadline, keys)
        self.partitions = partitions    # key -> Partition
        self.required = required        # key -> offset the low watermark must reach
        self.respond = respond          # ({key: (low watermark, error code)}) -> None

    def satisfied(self) -> bool:
        return all(not p.is_leader or p.log.closed or p.low_watermark >= self.required[k]
                   for k, p in self.partitions.items())

    def ready(self, key, progress) -> bool:
        return self.satisfied()

    def results(self) -> dict:
        out = {}
        for k, part in self.partitions.items():
            if not part.is_leader or part.log.closed:
                out[k] = (-1, errors.NotLeaderOrFollowerError.code)
            else:
                low = part.low_watermark
                out[k] = (low, 0 if low >= self.required[k] else errors.RequestTimedOutError.code)
        return out

    def on_complete(self) -> None:
        self.respond(self.results())


class Purgatory:
    def __init__(self):
        self._heap: list = []                  # (deadline, seq, operation)
        # key -> its operations, in the order they came (a dict used as an
        # ordered set): one high watermark move completes a connection's or
        # a ring's waiting produces oldest first, as Kafka's watcher lists do
        self._watchers: dict = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def watch(self, op: DelayedOperation) -> None:
        for key in op.keys:
            self._watchers.setdefault(key, {})[op] = None
        heapq.heappush(self._heap, (op.deadline, next(self._seq), op))

    def check(self, key, progress: int = 0) -> None:
        """``key`` made progress: complete the operations it now satisfies."""
        watching = self._watchers.get(key)
        if not watching:
            return
        for op in list(watching):
            if not op.done and op.ready(key, progress):
                self._complete(op)

    def next_deadline(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def sizes(self) -> dict[str, int]:
        """Operations waiting, by kind ("Produce", "Fetch", "DeleteRecords"):
        Kafka's PurgatorySize per delayedOperation. Walks the heap: for
        metrics, once a second, not per request."""
        out = {"Produce": 0, "Fetch": 0}
        for _, _, op in self._heap:
            if not op.done:
                kind = type(op).__name__.removeprefix("Delayed")
                out[kind] = out.get(kind, 0) + 1
        return out

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        heap = self._heap
        while heap and (heap[0][0] <= now or heap[0][2].done):
            _, _, op = heapq.heappop(heap)
            if not op.done:
                self._complete(op)

    def complete_watchers_of(self, key) -> None:
        """``key`` is going away: answer everything waiting on it now."""
        for op in list(self._watchers.get(key, ())):
            self._complete(op)
        self._watchers.pop(key, None)

    def complete_all(self) -> None:
        for _, _, op in self._heap:
            if not op.done:
                self._complete(op)
        self._heap.clear()
        self._watchers.clear()

    def _complete(self, op: DelayedOperation) -> None:
        if op.done:
            return
        op.done = True
        for key in op.keys:
            watching = self._watchers.get(key)
            if watching is not None:
                watching.pop(op, None)
                if not watching:
                    del self._watchers[key]
        try:
            op.on_complete()
        except Exception as exc:
            # Completing is triggered by other requests (an append wakes a
            # fetch): a failure here must answer this request, not theirs.
            log.exception("completing a delayed %r failed", op.ctx)
            if op.ctx is not None and not op.ctx.answered:
                op.ctx.respond_error(errors.UnknownServerError.code, f"{type(exc).__name__}: {exc}")
