"""The Fetch API of a worker: consumers' and followers' fetches, in full or
in an incremental fetch session, answered now or after a long poll.

A fetch is read in two parts, and answered with both in request order
(or, incremental, the session's order):

- its *idle* partitions -- a consumer's, led here, with nothing new at its
  fetch offset (ext/fetch_state.pyx says exactly when) -- are answered in
  C from the replica manager's table of leader states, without a Python
  object per partition: the FetchRequest twin decoder gives their request
  entries as C structs, the plan answers them inline, the FetchResponse
  twin encoder writes them (ext/produce_fetch.pyx); a consumer's
  partitions with new records in the active segment's last batches are
  read by the plan too (ext/tail_read.pyx), one pread each into the
  answer, until a partition in request order needs the Python read;
- every other partition -- older records, an error, a follower's, a
  tiered read, a request the twin decoder did not take -- is read by
  ``read_partitions``, in Python, per partition, with KIP-74's byte
  budget over them in order, from what the plan's reads left of it
  (idle partitions read nothing, so leaving them out of it changes
  nothing).

Sessions (KIP-227, fetch_session.py): an incremental fetch reads the
session's partitions, and its answer lists only those with records, an
error, or offsets that moved since the last answer; its idle partitions
with nothing changed cost a C loop's step each.

A fetch that finds fewer than ``min_bytes`` waits as a ``DelayedFetch``
until appends bring enough or ``max_wait_ms`` passes, then is read and
answered again. It watches the partitions read in Python by their
purgatory keys, as before, and its idle ones through the table: one
purgatory key of its own (``watch_key``), whose id each idle partition's
state lists, so that the replica manager's wake-up of a partition reaches
it (ReplicaManager._wake_readers) -- no purgatory entry per partition.
One below a tiered partition's local log start waits as a
``DelayedRemoteFetch`` while the remote reader's threads download the
segment.

With the authorizer on, the gate (server/auth/request_authorization.py)
takes a consumer's denied topics out of the request and answers them; it
also leaves on the context ``topic_readable``, which the partitions of a
session that the request does not name are checked against at every
fetch (TOPIC_AUTHORIZATION_FAILED), and the denied topics themselves
(``denied_topics``), which stay in the session as Kafka's do.

Who may call: the replica manager (its ``fetch`` handler), on the
worker's event-loop thread.
"""
from __future__ import annotations

import itertools
import os
import time

from kafkalite import errors
from kafkalite._ext.fetch_session_state import SessionPartitions
from kafkalite._ext.fetch_state import plan_full_fetch
from kafkalite.protocol.enums import IsolationLevel
from kafkalite.server.network.kafka_listener import INLINE_ANSWER_BYTES, INLINE_REGION_BYTES
from kafkalite.server.network.per_partition import Shape, each_partition
from kafkalite.server.network.requests import DEFERRED
from kafkalite.server.replica.fetch_session import (FULL, INCREMENTAL, INVALID_SESSION_ID,
                                                    SESSIONLESS,
                                                    TOPIC_IDS_VERSION, FetchSessionCache,
                                                    new_context, session_error_response)
from kafkalite.server.replica.purgatory import DelayedFetch, DelayedRemoteFetch, replica_key
from kafkalite.storage.local_region import same_host
from kafkalite.storage.remote.remote_log import RemoteReadPending

DEFAULT_FETCH_MAX_BYTES = 52428800        # Kafka's fetch.max.bytes default
FETCH = Shape("topic", "partitions", "partition",
              "topic", "partitions", "partition_index")


def watch_key(waiter: int) -> tuple:
    """The purgatory key a long-poll fetch's idle partitions wake it by."""
    return ("fetch-watch", waiter)


def offset_is_local(part, data) -> bool:
    """Whether a read came from a local segment (not a tiered log's remote
    copy, fetched into a cache a follower on this host cannot rely on)."""
    return part.log.remote is None or data.fetch_offset >= part.log.local_log_start_offset


def fetch_budget(body: dict) -> int:
    """The fetch's max_bytes (KIP-74's budget over its partitions)."""
    return body.get("max_bytes", DEFAULT_FETCH_MAX_BYTES) or DEFAULT_FETCH_MAX_BYTES


def follower_of(body: dict) -> int:
    """The broker id a follower's fetch names, -1 for a consumer's."""
    replica = body.get("replica_id", -1)
    if (body.get("replica_state") or {}).get("replica_id", -1) >= 0:     # Fetch v15+
        replica = body["replica_state"]["replica_id"]
    return replica


class FetchRead:
    """One reading of a fetch: its plan and the Python read's results."""

    __slots__ = ("plan", "topics", "total", "keys", "sent", "downloads", "read_in_c")

    def __init__(self, plan, read: tuple, read_in_c: int = 0):
        self.plan = plan
        self.topics, self.total, self.keys, self.sent, self.downloads = read
        # partitions with new records the plan read in C (a long poll
        # watches them through the table, as it watches the idle ones)
        self.read_in_c = read_in_c
        if read_in_c:
            self.total += plan.read_bytes
            for topic, n in plan.sent.items():
                self.sent[topic] = self.sent.get(topic, 0) + n

    @property
    def watched(self) -> bool:
        return bool(self.keys) or self.plan.idle_count > 0 or self.read_in_c > 0


class FetchHandler:
    def __init__(self, rm, sessions: FetchSessionCache | None = None):
        self.rm = rm
        self.sessions = sessions if sessions is not None else FetchSessionCache()
        # False: every partition read in Python (the equality tests' reference)
        self.idle_in_c = True
        self._waiters = itertools.count(1)
        # fetches served, by their session metadata (the metrics' kafkalite_fetch_requests)
        self.kinds = {SESSIONLESS: 0, FULL: 0, INCREMENTAL: 0, "refused": 0}
        # idle partitions of the answers sent, answered from the table in C
        # (kafkalite_fetch_idle_partitions): how much of the fetch load never
        # reached the Python read
        self.idle_partitions = 0
        # partitions with new records of the answers sent, read by the plan
        # in C (ext/tail_read.pyx; kafkalite_fetch_tail_reads)
        self.tail_reads = 0

    def figures(self) -> dict:
        """The metrics' figures: sessions held, their partitions, evictions,
        and the fetches by kind so far."""
        cache = self.sessions
        return {"sessions": len(cache), "partitions": cache.total_partitions,
                "evictions": cache.evictions, "idle_partitions": self.idle_partitions,
                "tail_reads": self.tail_reads, **self.kinds}

    # ---- the API -----------------------------------------------------------------------------

    def fetch(self, ctx, body: dict):
        extra = list(getattr(ctx, "denied_topics", None) or ())
        context = new_context(self.sessions, ctx.api_version, body, extra)
        if context.error is not None:
            self.kinds["refused"] += 1
            return session_error_response(context)
        self.kinds[context.kind] += 1
        read = self._read(ctx, body, context)
        if read.downloads:
            # as Kafka's DelayedRemoteFetch: whatever min_bytes says, the
            # answer waits for the remote reads, up to remote.fetch.max.wait.ms
            self._await_remote_reads(ctx, body, context, time.monotonic()
                                     + self.rm.remote_fetch_max_wait_ms / 1000.0, read.downloads)
            return DEFERRED
        min_bytes = max(body.get("min_bytes", 1), 1)
        wait_ms = body.get("max_wait_ms", 0)
        if read.total >= min_bytes or wait_ms <= 0 or not read.watched:
            return self._answer(ctx, body, context, read)
        waiter = next(self._waiters)
        watches = read.plan.watches
        states = self.rm.leader_states

        def complete() -> None:
            watches.unwatch(states, waiter)
            ctx.respond(self._answer(ctx, body, context, self._read(ctx, body, context)))
        watches.watch(states, waiter)
        self.rm.purgatory.watch(DelayedFetch(
            ctx, time.monotonic() + wait_ms / 1000.0, [*read.keys, watch_key(waiter)], min_bytes,
            read.total, complete))
        return DEFERRED

    def _await_remote_reads(self, ctx, body: dict, context, deadline: float,
                            downloads: list) -> None:
        """Park a fetch until its remote downloads end, then read again: a
        read that needs the next download (the next transaction index of a
        read_committed read) parks again until ``deadline``; at the
        deadline, what is not downloaded goes without records."""
        def complete(downloaded: bool) -> None:
            read = self._read(ctx, body, context)
            if read.downloads and downloaded and time.monotonic() < deadline:
                self._await_remote_reads(ctx, body, context, deadline, read.downloads)
            else:
                ctx.respond(self._answer(ctx, body, context, read))
        self.rm.purgatory.watch(DelayedRemoteFetch(ctx, deadline, downloads, complete))

    # ---- reading -----------------------------------------------------------------------------

    def _read(self, ctx, body: dict, context) -> FetchRead:
        """Plan the fetch's partitions and read those that are not idle."""
        rm = self.rm
        read_committed = body.get("isolation_level", 0) == IsolationLevel.READ_COMMITTED
        consumer = follower_of(body) < 0 and self.idle_in_c
        if context.kind == INCREMENTAL:
            partitions = context.session.partitions
            names = [rm.topic_names.get(i) if partitions.uses_topic_ids else n
                     for n, i in zip(partitions.topic_names, partitions.topic_ids)]
            modes, denied = self._session_modes(ctx, names, partitions)
            plan = partitions.plan(rm.leader_states, names, modes, read_committed, consumer,
                                   fetch_budget(body), INLINE_REGION_BYTES, INLINE_ANSWER_BYTES)
            return FetchRead(plan, self.read_partitions(
                {**body, "topics": plan.slow_topics}, denied, budget=plan.budget,
                first=plan.first), plan.read_count)
        topics = body["topics"]
        names = [self._name_of(topic) for topic in topics]
        # a consumer's partitions with new records in the active segment's
        # last batches are read in C too (ext/tail_read.pyx), as much as the
        # listener would read into memory rather than sendfile
        plan = plan_full_fetch(rm.leader_states, topics, names, read_committed, consumer,
                               fetch_budget(body), INLINE_REGION_BYTES, INLINE_ANSWER_BYTES)
        if not plan.slow_topics:
            # all answered by the plan (a consumer's usual fetch): nothing
            # for the Python read, which would walk no partition at a cost
            return FetchRead(plan, ([], 0, [], {}, []), plan.read_count)
        slow = body if len(plan.slow_topics) == len(topics) and not plan.inline_count else \
            {**body, "topics": plan.slow_topics}
        return FetchRead(plan, self.read_partitions(slow, budget=plan.budget, first=plan.first),
                         plan.read_count)

    def _name_of(self, topic: dict) -> str | None:
        topic_id = topic.get("topic_id")
        if topic_id is not None and topic_id.int:
            return self.rm.topic_names.get(topic_id)
        return topic.get("topic") or ""

    @staticmethod
    def _session_modes(ctx, names: list, partitions: SessionPartitions) -> tuple[list, set]:
        """Per session topic: 0 read, 1 denied (answered with the error), 2
        left out (denied in this very request: the gate answers it)."""
        readable = getattr(ctx, "topic_readable", None)
        if readable is None:
            return [0] * len(names), set()
        here = {(t.get("topic_id") if partitions.uses_topic_ids else t.get("topic") or "")
                for t in getattr(ctx, "denied_topics", None) or ()}
        modes, denied = [], set()
        for name, key in zip(names, partitions.topic_ids if partitions.uses_topic_ids
                             else partitions.topic_names):
            if key in here:
                modes.append(2)
            elif name is not None and not readable(name):
                modes.append(1)
                denied.add(name)
            else:
                modes.append(0)
        return modes, denied

    def read_partitions(self, body: dict, denied: set = frozenset(), *, budget=None,
                        first: bool = True) -> tuple:
        """Read every partition of ``body`` in Python: (response topics, bytes,
        partition keys, {topic: bytes read for a consumer}, the purgatory keys
        of the remote segment downloads it waits for: those partitions have no
        records yet). ``denied``: topics answered TOPIC_AUTHORIZATION_FAILED.
        ``budget``, ``first``: KIP-74's, as the plan's reads in C left them."""
        rm = self.rm
        read_committed = body.get("isolation_level", 0) == IsolationLevel.READ_COMMITTED
        state = {"budget": fetch_budget(body) if budget is None else budget, "total": 0,
                 "first": first}
        keys: list = []
        sent: dict = {}
        downloads: list = []

        def blank() -> dict:
            # Kafka answers an erroneous partition with empty records, not null.
            return {"error_code": 0, "high_watermark": -1, "last_stable_offset": -1,
                    "log_start_offset": -1,
                    "aborted_transactions": [] if read_committed else None,
                    "preferred_read_replica": -1, "records": b""}

        def resolve(topic) -> str:
            topic_id = topic.get("topic_id")
            if topic_id is not None and topic_id.int:
                name = rm.topic_names.get(topic_id)
                if name is None:
                    raise errors.UnknownTopicIdError(f"no topic with id {topic_id} here")
                return name
            return topic.get("topic") or ""

        replica = follower_of(body)
        local = replica >= 0 and same_host(body.get("local_host"))
        now = time.monotonic()

        def serve(name, topic, fp, out):
            if name in denied:
                raise errors.TopicAuthorizationFailedError(f"may not read topic {name!r}")
            part = rm.partition(name, fp["partition"])
            part.check_leader_epoch(fp.get("current_leader_epoch", -1))
            # KIP-74: the first partition with data may overrun the request's
            # max_bytes by one whole batch; the budget left is then below
            # zero, and every later partition gets an empty, error-free entry
            max_bytes = max(0, min(fp.get("partition_max_bytes", 1048576), state["budget"]))
            try:
                if replica >= 0:
                    # a follower: its fetch offset is its log end; it reads
                    # past the high watermark, up to the log end
                    keys.append(replica_key(part.key))
                    offset = fp["fetch_offset"]
                    if not part.log.log_start_offset <= offset <= part.log.log_end_offset:
                        raise errors.OffsetOutOfRangeError(
                            f"follower {replica} fetches {part.name} at {offset}, outside "
                            f"[{part.log.log_start_offset}, {part.log.log_end_offset}]")
                    if part.log.remote is not None and offset < part.log.local_log_start_offset:
                        # KIP-405: the follower starts its log at the local log
                        # start from the remote metadata, rather than pull the
                        # remote history through this leader onto its disk
                        raise errors.OffsetMovedToTieredStorageError(
                            f"follower {replica} fetches {part.name} at {offset}, below the "
                            f"local log start {part.log.local_log_start_offset}")
                    rm.update_follower_end(part, replica, offset, now,
                                           fp.get("log_start_offset", -1))
                    # at least one whole batch for every partition, or a
                    # follower could never get past a batch larger than its
                    # share of the fetch
                    data = rm.read_remote_in_background(
                        part, lambda: part.log.read(offset, max_bytes, min_one_message=True))
                else:
                    keys.append(part.key)
                    data = _consumer_read(rm, part, fp["fetch_offset"], max_bytes,
                                          state["first"], read_committed)
            except RemoteReadPending as pending:
                downloads.append(pending.key)
                out["high_watermark"] = part.high_watermark
                out["log_start_offset"] = part.log.log_start_offset
                return
            except (errors.OffsetOutOfRangeError, errors.OffsetMovedToTieredStorageError):
                out["high_watermark"] = part.high_watermark
                out["log_start_offset"] = part.log.log_start_offset
                raise
            out["high_watermark"] = data.high_watermark
            out["last_stable_offset"] = data.last_stable_offset
            out["log_start_offset"] = data.log_start_offset
            if data.aborted_transactions:
                out["aborted_transactions"] = [
                    {"producer_id": t.producer_id, "first_offset": t.first_offset}
                    for t in data.aborted_transactions]
            if data.region is not None:
                if local and data.region.length and offset_is_local(part, data):
                    # a follower on this host reads the region itself
                    # (storage/local_region.py): where it is, not its bytes
                    st = os.fstat(data.region.fd)
                    out["records"] = b""
                    out["local_region"] = {
                        "path": os.path.abspath(data.region.file.name), "device": st.st_dev,
                        "inode": st.st_ino, "position": data.region.position,
                        "length": data.region.length}
                else:
                    # a file region: sendfile over TCP, read for ZeroMQ
                    out["records"] = data.region
                state["total"] += data.region.length
                state["budget"] -= data.region.length
                state["first"] = False
                if replica < 0:
                    sent[name] = sent.get(name, 0) + data.region.length

        topics = each_partition(FETCH, body["topics"], serve, blank, resolve=resolve,
                                topic_fields=lambda topic: {"topic_id": topic.get("topic_id")})
        return topics, state["total"], keys, sent, downloads

    # ---- answering ---------------------------------------------------------------------------

    def _answer(self, ctx, body: dict, context, read: FetchRead) -> dict:
        """The answer of ``read``; a full fetch at epoch 0 makes its
        session now, an incremental one tells its session what it said."""
        session_id = INVALID_SESSION_ID
        self.idle_partitions += read.plan.idle_count
        self.tail_reads += read.read_in_c
        if context.kind == INCREMENTAL:
            session = context.session
            if session.epoch != context.expected_epoch:
                # another fetch used the session meanwhile (Kafka's check)
                return {"throttle_time_ms": 0,
                        "error_code": errors.InvalidFetchSessionEpochError.code,
                        "session_id": session.id, "responses": []}
            topics = read.plan.respond(read.topics, True)
            session_id = session.id
        else:
            topics = read.plan.merge(read.topics)
            if context.kind == FULL:
                session_id = self._open_session(ctx, body, topics)
        return self.fetch_response(topics, read.sent, session_id)

    def _open_session(self, ctx, body: dict, topics: list) -> int:
        extra = list(getattr(ctx, "denied_topics", None) or ())
        size = sum(len(t.get("partitions") or ()) for t in body["topics"]) + \
            sum(len(t.get("partitions") or ()) for t in extra)

        def make() -> SessionPartitions:
            partitions = SessionPartitions(ctx.api_version >= TOPIC_IDS_VERSION)
            partitions.update(list(body["topics"]) + extra, [])
            partitions.record(topics)
            return partitions
        return self.sessions.maybe_create(self.sessions.clock(), follower_of(body) >= 0,
                                          size, make)

    def fetch_response(self, topics: list, sent: dict, session_id: int = 0) -> dict:
        """The Fetch response; what it carries to consumers counts as bytes
        out (a read a delayed fetch repeats is counted once, when sent)."""
        stats_by_topic = self.rm.topic_stats
        for topic, n in sent.items():
            stats = stats_by_topic.get(topic)
            if stats is None:
                stats = stats_by_topic[topic] = [0, 0, 0]
            stats[2] += n
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": session_id,
                "responses": topics}


def _consumer_read(rm, part, offset: int, max_bytes: int, first: bool, read_committed: bool):
    """A consumer's read of ``part``: a local log (all but tiered topics)
    directly, with no closure and background-read wrapper per partition
    read; a tiered one through the replica manager's background reads."""
    if part.log.remote is None:
        return part.read(offset, max_bytes, min_one_message=first,
                         read_committed=read_committed)
    return rm.read_remote_in_background(part, lambda: part.read(
        offset, max_bytes, min_one_message=first, read_committed=read_committed))
