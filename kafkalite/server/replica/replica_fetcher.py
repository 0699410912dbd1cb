"""The follower side of replication: keep each followed partition's log a
copy of its leader's.

For every partition this broker follows (``follow``, from the controller's
assign), the fetcher first finds where its log and the leader's agree and
cuts off the rest, then fetches from the leader's log end onwards:

1. **Truncating.** OffsetForLeaderEpoch to the leader with the latest leader
   epoch in this log (KIP-101/279): the leader answers the end offset of
   the largest epoch it has at or below it; this log is truncated to the
   smaller of that and its own end of the same epoch. Never by the high
   watermark alone: a tail written under an epoch the leader never saw is
   cut exactly where the histories part. A log with no epochs yet (empty,
   or only ever a follower that fetched nothing) has nothing to cut.
2. **Fetching.** A Fetch to each leader, naming this broker as the replica
   (``replica_id``), for the partitions followed from it that have no fetch
   out, each from its log end (a partition just followed does not wait
   for the long poll of the others to return); the leader reads past its high watermark and holds the
   fetch up to ``replica.fetch.wait.max.ms`` when there is nothing new.
   Each leader's fetches go in an incremental fetch session (KIP-227,
   protocol/fetch_sessions.py), as Kafka's followers' do: a fetch names only
   the partitions whose log end moved, and the answer only those with
   records or news (a partition it leaves out has nothing new); a fetch
   made while the session's is out goes outside it (``session_id`` 0,
   epoch -1), and its partitions join the session at its next fetch.
   Whole batches are appended as they are (``append_as_follower``: offsets,
   leader epochs, producer state kept; a batch cut at the fetch's byte
   limit is fetched again whole next time), and the follower's high watermark
   follows the leader's, capped at its own log end. So does its log start
   offset (capped at its high watermark), as Kafka's followers take the
   leader's: records deleted on the leader (DeleteRecords, retention) go
   here too, and the next fetch reports the new log start, which a
   DeleteRecords waiting on the leader needs.

**Same host.** Each Fetch names this host (``local_host``,
storage/local_region.py); a leader on the same host answers each partition
with where the records are in its segment file (``local_region``) instead
of the records, and the fetcher reads them from there: one copy, against
the leader's read, two socket copies and ZeroMQ's work on both sides. The
leader may have truncated and rewritten the region between its answer and
the read (it lost its leadership), so the bytes are appended only if they
are whole valid batches that follow on from this log's end (as any
fetched bytes) and none was written under a newer leader epoch than the
one fetched at: by the leader epochs' guarantee, batches of epochs up to
it at those offsets are the ones the leader answered about. A file that is
gone or is another file, a short read, or bytes that fail those checks
send the leader's fetches over the network for ``NETWORK_AFTER_FAILURE_S``
(and the partition is fetched again at once). ``fetched_bytes`` counts the
bytes appended each way.

A fetch answered FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER or
UNKNOWN_LEADER_EPOCH (the leadership moved, and the controller's assign
saying so is on its way) or not answered (the leader's process died) is
retried after a back-off (still fenced after ``STALE_EPOCH_S``, the
partition is listed in ``stale`` and the worker asks the controller for
its state again); OFFSET_OUT_OF_RANGE below the leader's log start
restarts this log there, above its end truncates again.

**Below a tiered leader's local log start** (KIP-405, Kafka's
ReplicaFetcherTierStateMachine). A fetch from below the offset where the
leader's local segments start (a replica just added by a reassignment, a
follower that was down or fenced out while the leader copied and deleted
past ``local.retention.*``) is answered OFFSET_MOVED_TO_TIERED_STORAGE:
those records are only in the remote store, and are not pulled through
the leader onto this disk. The fetcher asks the leader where its local log
starts (ListOffsets, earliest-local), the remote log reads on its copier
thread (off this one) the shared remote log metadata and, of the copied
segment holding the offset just below, its leader-epoch checkpoint and
producer snapshot; this log then starts after that segment, its log start
offset the leader's, its leader epochs and producer state that segment's
end (``PartitionLog.start_after_remote_segment``), and fetches on from
there. A read that fails (no copied segment holds that offset yet, the
store down) is tried again from the next fetch, TIER_STATE_RETRY_S later.

Any new assign
(new leader or epoch) starts the partition over at step 1, with a new
record of it; answers to requests made for an older record are dropped.

Requests go over the native protocol to the leader's ROUTER
(broker_requests.py), whose endpoints the controller's assigns carry.

Who may call: the worker (worker.py) and the replica manager, on the
worker's event-loop thread.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from kafkalite import errors
from kafkalite.protocol.fetch_sessions import FetchSessionHandler
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.record import batches_extent
from kafkalite.storage.leader_epoch import UNDEFINED_EPOCH
from kafkalite.storage.local_region import LocalRegionReader, host_identity

log = logging.getLogger("kafkalite.replica_fetcher")

FETCH_VERSION = 12               # names topics, replica_id, current_leader_epoch
OFFSET_FOR_EPOCH_VERSION = 4     # replica_id
LIST_OFFSETS_VERSION = 8         # the earliest-local spec (KIP-405)
EARLIEST_LOCAL_TIMESTAMP = -4
TIER_STATE_POLL_S = 0.05         # how often a remote read of the tier state is looked at
TIER_STATE_RETRY_S = 1.0         # after a failed one, the next try
RETRY_BACKOFF_S = 0.05
STALE_EPOCH_S = 2.0              # fenced this long: ask the controller for the partition again
FETCH_MAX_BYTES = 16 << 20
PARTITION_MAX_BYTES = 4 << 20
NETWORK_AFTER_FAILURE_S = 30.0   # a leader's file could not be read: fetch over the network
IDLE_CHECK_S = 1.0

TRUNCATING, FETCHING = "truncating", "fetching"


@dataclass
class FollowedPartition:
    part: object                  # server.partition.Partition
    leader: int
    epoch: int
    state: str = TRUNCATING
    retry_at: float = 0.0
    asking: bool = False          # an OffsetForLeaderEpoch is out
    fetching: bool = False        # a Fetch with it is out
    fenced_since: float = 0.0     # answered FENCED_LEADER_EPOCH since
    # the remote log's read of what the log starts from, below the leader's
    # local log start (a concurrent.futures.Future), and the leader's log start
    tier_state: object = None
    leader_log_start: int = 0


class ReplicaFetcher:
    def __init__(self, broker_id: int, requests, wait_max_ms: int = 500,
                 local_reads: bool = True):
        self.broker_id = broker_id
        self.requests = requests              # BrokerRequests to the other workers
        self.wait_max_ms = wait_max_ms
        self.local_reads = local_reads        # ask leaders on this host for file regions
        self.local = LocalRegionReader()
        self._network_until: dict[int, float] = {}   # leader -> fetch over the network until
        self._next_idle_check = 0.0
        self.fetched_bytes = {"local": 0, "network": 0}
        self.endpoints: dict[int, str] = {}
        self.followed: dict[tuple[str, int], FollowedPartition] = {}
        self._sessions: dict[int, FetchSessionHandler] = {}    # leader -> its fetch session
        self._session_busy: set[int] = set()      # leaders with a session fetch out
        # partitions whose leader has a newer epoch than the one followed
        # for STALE_EPOCH_S: the worker asks the controller to resend them
        self.stale: list = []

    # ---- what to follow ----------------------------------------------------------------------

    def set_endpoints(self, endpoints: dict) -> None:
        """Learn the brokers' endpoints ({broker id: endpoint}). Merged
        into what is known, not in place of it: a controller that has just
        started (a supervisor adopting running workers) names only the
        brokers that have registered with it so far, and a follower told
        that its leader has no endpoint would stop fetching from it."""
        self.endpoints.update({int(b): e for b, e in endpoints.items()})

    def endpoint_of(self, broker_id: int) -> str | None:
        return self.endpoints.get(broker_id)

    def follow(self, part) -> None:
        """Start (over) following ``part`` from its current leader."""
        self.followed[part.key] = FollowedPartition(part, part.leader_id, part.leader_epoch)

    def stop_following(self, key) -> None:
        self.followed.pop(key, None)

    # ---- the loop ----------------------------------------------------------------------------

    def next_deadline(self) -> float | None:
        if not self.followed:
            return None     # asked on every pass of the worker's loop: no list
        waits = [f.retry_at for f in self.followed.values() if f.retry_at]
        return min(waits) if waits else None

    def tick(self, now: float | None = None) -> None:
        """Send what is due: OffsetForLeaderEpoch for partitions to
        truncate, a Fetch to each leader with none out."""
        now = time.monotonic() if now is None else now
        if now >= self._next_idle_check:
            self._next_idle_check = now + IDLE_CHECK_S
            self.local.close_idle(now)
        if not self.followed:
            return
        truncating: dict[int, list] = {}
        fetching: dict[int, list] = {}
        for f in self.followed.values():
            if f.tier_state is not None:
                self._poll_tier_state(f, now)
                continue
            if f.retry_at > now or f.asking or f.fetching:
                continue
            f.retry_at = 0.0
            if f.state == TRUNCATING:
                truncating.setdefault(f.leader, []).append(f)
            else:
                fetching.setdefault(f.leader, []).append(f)
        for leader, fs in truncating.items():
            self._ask_epochs(leader, fs)
        for leader, fs in fetching.items():
            self._fetch(leader, fs)

    def close(self) -> None:
        self.local.close()

    def _back_off(self, f: FollowedPartition, why: str) -> None:
        log.debug("broker %d: %s: %s; retrying", self.broker_id, f.part.name, why)
        f.retry_at = time.monotonic() + RETRY_BACKOFF_S

    def _current(self, f: FollowedPartition) -> bool:
        return self.followed.get(f.part.key) is f

    # ---- truncation --------------------------------------------------------------------------

    def _ask_epochs(self, leader: int, fs: list) -> None:
        todo = []
        for f in fs:
            latest = f.part.log.leader_epoch_cache.latest_epoch
            if latest == UNDEFINED_EPOCH:
                # nothing written under any epoch: nothing can have diverged
                self._truncated(f, f.part.log.log_end_offset)
            else:
                todo.append((f, latest))
        if not todo:
            return
        topics: dict[str, list] = {}
        for f, latest in todo:
            f.asking = True
            topics.setdefault(f.part.topic, []).append(
                {"partition": f.part.index, "current_leader_epoch": f.epoch,
                 "leader_epoch": latest})
        body = {"replica_id": self.broker_id,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}

        def answered(result) -> None:
            for f, _ in todo:
                f.asking = False
            if isinstance(result, KafkaError):
                for f, _ in todo:
                    if self._current(f):
                        self._back_off(f, f"OffsetForLeaderEpoch to broker {leader}: {result}")
                return
            found = {(t["topic"], p["partition"]): p for t in result["topics"]
                     for p in t["partitions"]}
            for f, latest in todo:
                if not self._current(f):
                    continue
                p = found.get(f.part.key)
                if p is None or p["error_code"]:
                    code = p["error_code"] if p else errors.UnknownServerError.code
                    self._back_off(f, f"OffsetForLeaderEpoch: {errors.error_for_code(code).__name__}")
                    continue
                self._truncated(f, self._truncation_offset(f, p["leader_epoch"], p["end_offset"]))

        self.requests.send(leader, ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_EPOCH_VERSION, body,
                           answered)

    @staticmethod
    def _truncation_offset(f: FollowedPartition, leader_epoch: int, leader_end: int) -> int:
        """Where this log and the leader's agree: the leader's end of the
        largest epoch both know, or this log's end of it if smaller."""
        plog = f.part.log
        if leader_epoch == UNDEFINED_EPOCH or leader_end < 0:
            # the leader has no epoch at or below ours: it knows nothing we
            # wrote under an epoch, so what it has not committed may differ
            return min(plog.high_watermark, plog.log_end_offset)
        mine_epoch, mine_end = plog.end_offset_for_epoch(leader_epoch)
        if mine_epoch != leader_epoch:
            return min(leader_end, mine_end if mine_end >= 0 else plog.log_end_offset)
        return min(leader_end, mine_end)

    def _truncated(self, f: FollowedPartition, offset: int) -> None:
        plog = f.part.log
        if offset < plog.log_end_offset:
            log.warning("broker %d: %s: truncating from %d to %d to follow broker %d at epoch %d",
                        self.broker_id, f.part.name, plog.log_end_offset, offset, f.leader,
                        f.epoch)
            plog.truncate_to(offset)
        f.state = FETCHING

    # ---- fetching ----------------------------------------------------------------------------

    def _fetch(self, leader: int, fs: list) -> None:
        wanted = {}
        for f in fs:
            f.fetching = True
            plog = f.part.log
            wanted[f.part.key] = (f.epoch, plog.log_end_offset,
                                  plog.leader_epoch_cache.latest_epoch, plog.log_start_offset)
        session = None
        if leader not in self._session_busy:
            session = self._sessions.get(leader)
            if session is None:
                session = self._sessions[leader] = FetchSessionHandler()
            self._session_busy.add(leader)
            session_id, epoch, send, forget = session.build(wanted)
        else:
            session_id, epoch, send, forget = 0, -1, wanted, []
        topics: dict[str, list] = {}
        for (topic, index), (leader_epoch, end, last_epoch, start) in send.items():
            topics.setdefault(topic, []).append(
                {"partition": index, "current_leader_epoch": leader_epoch, "fetch_offset": end,
                 "last_fetched_epoch": last_epoch, "log_start_offset": start,
                 "partition_max_bytes": PARTITION_MAX_BYTES})
        forgotten: dict[str, list] = {}
        for topic, index in forget:
            forgotten.setdefault(topic, []).append(index)
        local = self.local_reads and self._network_until.get(leader, 0.0) <= time.monotonic()
        body = {"replica_id": self.broker_id, "max_wait_ms": self.wait_max_ms, "min_bytes": 1,
                "max_bytes": FETCH_MAX_BYTES, "isolation_level": 0, "session_id": session_id,
                "session_epoch": epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
                "forgotten_topics_data": [{"topic": t, "partitions": ps}
                                          for t, ps in forgotten.items()],
                "rack_id": "", "local_host": host_identity() if local else None}
        incremental = session is not None and epoch > 0

        def answered(result) -> None:
            for f in fs:
                f.fetching = False
            if session is not None:
                self._session_busy.discard(leader)
            if isinstance(result, KafkaError):
                if session is not None:
                    session.handle_error()
                for f in fs:
                    if self._current(f):
                        self._back_off(f, f"Fetch from broker {leader}: {result}")
                return
            if session is not None:
                session.handle_response(result)
            if result.get("error_code"):
                return      # a session error: every partition is fetched again, in full
            found = {(t["topic"], p["partition_index"]): p for t in result["responses"]
                     for p in t["partitions"]}
            for f in fs:
                p = found.get(f.part.key)
                if self._current(f) and (p is not None or not incremental):
                    self._on_fetched(f, p)

        self.requests.send(leader, ApiKey.FETCH, FETCH_VERSION, body, answered)

    def _on_fetched(self, f: FollowedPartition, p: dict | None) -> None:
        if p is None:
            self._back_off(f, "the leader's answer left the partition out")
            return
        plog = f.part.log
        code = p["error_code"]
        if code == errors.OffsetMovedToTieredStorageError.code:
            self._ask_local_start(f, p.get("log_start_offset", -1))
            return
        if code == errors.OffsetOutOfRangeError.code:
            if plog.log_end_offset < p.get("log_start_offset", -1):
                log.warning("broker %d: %s: the leader's log starts at %d, after this log's "
                            "end %d: starting over there", self.broker_id, f.part.name,
                            p["log_start_offset"], plog.log_end_offset)
                plog.truncate_fully_and_start_at(p["log_start_offset"])
            else:
                f.state = TRUNCATING
            return
        if code:
            if code == errors.FencedLeaderEpochError.code:
                # the leader is at a newer epoch than the one we follow it at:
                # the controller's assign saying so should be on its way;
                # if it does not come, ask for the partition's state again
                if not f.fenced_since:
                    f.fenced_since = time.monotonic()
                elif time.monotonic() - f.fenced_since > STALE_EPOCH_S:
                    f.fenced_since = time.monotonic()
                    self.stale.append(f.part.key)
            self._back_off(f, errors.error_for_code(code).__name__)
            return
        f.fenced_since = 0.0
        records = p.get("records")
        region = p.get("local_region")
        from_file = bool(region) and region.get("length", 0) > 0
        if from_file:
            try:
                records = self.local.read(region["path"], region["device"], region["inode"],
                                          region["position"], region["length"])
            except KafkaError as exc:
                self._over_the_network(f, exc)
                return
        if records is not None and len(records):
            # a fetch may end in the middle of a batch (the leader cuts at
            # the byte limit, as Kafka's does): append the whole ones
            whole = batches_extent(records)[1]
            if whole < len(records):
                records = memoryview(records)[:whole]
        if records is not None and len(records):
            try:
                plog.append_as_follower(records, f.epoch if from_file else None)
            except KafkaError as exc:
                if from_file:
                    # the leader's file changed since it answered: ask again
                    self._over_the_network(f, exc)
                    return
                # a batch that does not follow on from our end: find where
                # the logs agree again
                log.error("broker %d: %s: appending what broker %d sent failed: %s",
                          self.broker_id, f.part.name, f.leader, exc)
                f.state = TRUNCATING
                self._back_off(f, str(exc))
                return
            self.fetched_bytes["local" if from_file else "network"] += len(records)
        f.part.update_follower_high_watermark(p.get("high_watermark", -1))
        leader_start = min(p.get("log_start_offset", -1), plog.high_watermark)
        if leader_start > plog.log_start_offset:
            try:
                plog.delete_records(leader_start)
            except KafkaError as exc:
                log.error("broker %d: %s: cannot move the log start to the leader's %d: %s",
                          self.broker_id, f.part.name, leader_start, exc)

    # ---- below the leader's local log start (KIP-405) -----------------------------------------

    def _ask_local_start(self, f: FollowedPartition, leader_log_start: int) -> None:
        """The leader answered OFFSET_MOVED_TO_TIERED_STORAGE: the records
        from this log's end to the leader's local log start are only
        remote. As Kafka's ReplicaFetcherTierStateMachine: ask the leader
        where its local log starts (ListOffsets, earliest-local), then
        build this log's start from the remote log metadata."""
        plog = f.part.log
        if plog.remote is None:
            self._back_off(f, "the leader's log is tiered and this replica's is not")
            return
        f.asking = True
        body = {"replica_id": self.broker_id, "isolation_level": 0, "topics": [{
            "name": f.part.topic, "partitions": [{
                "partition_index": f.part.index, "current_leader_epoch": f.epoch,
                "timestamp": EARLIEST_LOCAL_TIMESTAMP}]}]}

        def answered(result) -> None:
            f.asking = False
            if not self._current(f):
                return
            if isinstance(result, KafkaError):
                self._back_off(f, f"ListOffsets to broker {f.leader}: {result}")
                return
            found = [p for t in result["topics"] for p in t["partitions"]]
            if not found or found[0]["error_code"]:
                code = found[0]["error_code"] if found else errors.UnknownServerError.code
                self._back_off(f, f"ListOffsets: {errors.error_for_code(code).__name__}")
                return
            local_start = found[0]["offset"]
            if local_start <= plog.log_end_offset:
                f.retry_at = 0.0        # it can be fetched from now: fetch again
                return
            log.info("broker %d: %s: the leader's local log starts at %d, past this log's end "
                     "%d: starting this log there, from the remote log metadata",
                     self.broker_id, f.part.name, local_start, plog.log_end_offset)
            f.leader_log_start = leader_log_start
            f.tier_state = plog.remote.fetch_aux_state(local_start)
            f.retry_at = time.monotonic() + TIER_STATE_POLL_S

        self.requests.send(f.leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body, answered)

    def _poll_tier_state(self, f: FollowedPartition, now: float) -> None:
        """The remote log's read of the tier state ended: start the log
        after the remote segment it names and fetch from there; a failed
        read is tried again from the next fetch."""
        if not f.tier_state.done():
            f.retry_at = now + TIER_STATE_POLL_S
            return
        future, f.tier_state = f.tier_state, None
        try:
            state = future.result()
            f.part.log.start_after_remote_segment(state, f.leader_log_start)
        except Exception as exc:
            log.warning("broker %d: %s: cannot start the log from the remote log metadata "
                        "(tried again in %.0f s): %s", self.broker_id, f.part.name,
                        TIER_STATE_RETRY_S, exc)
            f.retry_at = now + TIER_STATE_RETRY_S
            return
        f.retry_at = 0.0

    def _over_the_network(self, f: FollowedPartition, exc: Exception) -> None:
        """The leader's file region could not be used: fetch from this
        leader over the network for a while, starting with ``f`` now."""
        log.warning("broker %d: %s: reading broker %d's segment file failed (%s); fetching from "
                    "it over the network for %.0f s", self.broker_id, f.part.name, f.leader, exc,
                    NETWORK_AFTER_FAILURE_S)
        self._network_until[f.leader] = time.monotonic() + NETWORK_AFTER_FAILURE_S
        f.retry_at = 0.0
