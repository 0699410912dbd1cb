"""The share-partition manager (Kafka's ``SharePartitionManager``): ShareFetch
and ShareAcknowledge for the share-partitions (share_partition.py) of the
partitions this worker leads, the members' share sessions, and the reading
and writing of each share-partition's state at the share coordinator.

A share session (the share_session_epoch of ShareFetch/ShareAcknowledge,
per member on this broker) opens with epoch 0 and counts up; a wrong
epoch is INVALID_SHARE_SESSION_EPOCH, an unknown session
SHARE_SESSION_NOT_FOUND; epoch -1 closes it and releases what the member
holds here. The partitions a session fetches accumulate (a fetch may name
only new ones; ``forgotten_topics_data`` drops them), as Kafka's.

Persistence: the share coordinator in the supervisor
(share_coordinator.py, ``__share_group_state``) keeps each share-partition's
state, reached through ``persister`` (the worker's requests to the
coordinator endpoint, Kafka's share coordinator APIs):

- a share-partition is read (ReadShareGroupState, with this leader's epoch,
  which fences older leaders' writes) the first time a request touches it
  here; that request, and any other touching it meanwhile, waits for the
  read (DEFERRED) and then runs. A read that fails is answered as the
  partition's error, and the next request reads again;
- after every request or tick that acknowledged, released, archived or
  initialized records, the whole state is written (WriteShareGroupState,
  acquired records as AVAILABLE: a lock does not outlive its leader) and
  the member is answered only when the coordinator confirmed it: every
  acknowledgement a member was told of is kept. A write that failed is
  answered to the member as its acknowledgement's error, and is written
  again, whole, at the next change; one fenced (a reset, or a newer leader)
  drops the share-partition here, to be read again;
- acquisitions are not written: after a leader change or a restart an
  acquired record is AVAILABLE again with its delivery count as last
  written: none lost, none accepted twice.

Who may call: the replica manager (replica_manager.py), on the worker's
event-loop thread: it routes ShareFetch and ShareAcknowledge here and
calls ``expire()`` at ``next_deadline()``; the worker (worker.py) sets
``persister`` and calls ``delete_group`` for the supervisor.

Which process runs it: each partition worker.

What it may import: share_partition.py, share_dead_letters.py, replica/
(the purgatory), network/, kafkalite.protocol and the bottom.
"""
from __future__ import annotations

import logging
import os
import time

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.messages.share_records import ACKNOWLEDGED, AVAILABLE
from kafkalite.server.replica.purgatory import DelayedFetch
from kafkalite.server.replica.share_dead_letters import DeadLetterWriter
from kafkalite.server.replica.share_partition import InFlight, SharePartition, legacy_state_name
from kafkalite.server.network.requests import DEFERRED
from kafkalite.storage.remote.remote_log import RemoteReadPending

log = logging.getLogger("kafkalite.share_partition")

NONE = 0
OPEN_EPOCH, CLOSE_EPOCH = 0, -1
# Records one ShareFetch acquires per partition at most: the Java client's
# max.poll.records default, which v0 cannot carry (v1's MaxRecords caps the
# whole request further). It lets several members share a partition whose
# batches are large: a batch's offsets may go to different members.
MAX_ACQUIRED_RECORDS = 500
# A share session unused this long is forgotten (its member died or left
# without closing it): the sessions of members that come and go stay bounded.
SESSION_IDLE_S = 300.0
# Fault injection for the exactly-once checker's own tests: "duplicate" hands
# a record out again after it was accepted, "skip" marks records accepted
# that nobody acquired, "amnesia" ignores the state the share coordinator
# keeps (a leader starts every share-partition afresh). Never set outside
# those tests.
FAULT_ENV = "KAFKALITE_SHARE_FAULT"

# Response partition defaults (an erroneous partition stays well-formed).
# No records are empty records, not null, as Kafka's: librdkafka rejects a
# null record set.
def _fetch_blank(index: int) -> dict:
    return {"partition_index": index, "error_code": NONE, "error_message": None,
            "acknowledge_error_code": NONE, "acknowledge_error_message": None,
            "current_leader": {"leader_id": -1, "leader_epoch": -1}, "records": b"",
            "acquired_records": []}


class ShareSession:
    __slots__ = ("epoch", "partitions", "used")

    def __init__(self):
        self.epoch = 1                 # the epoch the next request must carry
        self.partitions: dict = {}     # (topic id, index) -> partition_max_bytes
        self.used = time.monotonic()


class SharePartitionManager:
    """ShareFetch and ShareAcknowledge for the partitions this broker leads."""

    def __init__(self, replica_manager, *, lock_ms: int = 30_000, delivery_limit: int = 5,
                 max_locks: int = 2_000, reset: str = "latest"):
        self.rm = replica_manager
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_locks = max_locks
        self.reset = reset
        self.shares: dict[tuple, SharePartition] = {}     # (group, topic, index) -> state
        self.sessions: dict[tuple, ShareSession] = {}     # (group, member) -> session
        # how the share coordinator is asked: (api key, version, body,
        # on_done(response body or KafkaError)); set by the worker once it
        # knows the coordinator's endpoint
        self.persister = None
        self.fault = os.environ.get(FAULT_ENV, "")
        self._faulted = False
        self._next_session_sweep = 0.0
        self.dead_letter_writer = DeadLetterWriter(replica_manager)

    def share_partition(self, group: str, name: str, index: int, topic_id) -> SharePartition:
        """The share-partition, read from the share coordinator; a KafkaError
        while it is not (yet) -- a read is then under way."""
        sp = self._entry(group, name, index, topic_id)
        if not sp.loaded:
            if sp.load_error is not None:
                raise sp.load_error
            self._read([sp])
            raise errors.CoordinatorLoadInProgressError(
                f"the state of share group {group} on {name}-{index} is being read")
        return sp

    def _entry(self, group: str, name: str, index: int, topic_id) -> SharePartition:
        part = self.rm.partition(name, index)
        key = (group, name, index)
        sp = self.shares.get(key)
        if sp is None or sp.part is not part:
            legacy = os.path.join(part.log.directory, legacy_state_name(group))
            sp = self.shares[key] = SharePartition(group, part, topic_id, self, legacy)
        return sp

    # ---- the share coordinator ---------------------------------------------------------------

    def _read(self, sps: list) -> None:
        """Read the state of ``sps`` (one group's) that are not being read."""
        sps = [sp for sp in sps if not sp.loading]
        if not sps:
            return
        for sp in sps:
            sp.loading, sp.load_error = True, None
        if self.persister is None:
            self._loaded(sps, errors.CoordinatorNotAvailableError(
                "this broker has no share coordinator yet"))
            return

        def answered(result) -> None:
            if isinstance(result, KafkaError):
                self._loaded(sps, result)
                return
            found = {(r["topic_id"], p["partition"]): p
                     for r in result["results"] for p in r["partitions"]}
            for sp in sps:
                p = found.get((sp.topic_id, sp.part.index))
                if p is None:
                    self._loaded([sp], errors.UnknownServerError(
                        "the share coordinator did not answer for this share-partition"))
                elif p["error_code"] != NONE:
                    self._loaded([sp], errors.error_for_code(p["error_code"])(
                        p["error_message"] or "reading the share-partition state failed"))
                else:
                    if self.fault == "amnesia":
                        p = {**p, "start_offset": -1, "state_batches": []}
                    sp.apply_state(p)
                    self._loaded([sp], None)
        self.persister(ApiKey.READ_SHARE_GROUP_STATE, 0, {
            "group_id": sps[0].group_id, "topics": _by_topic(
                sps, lambda sp: {"partition": sp.part.index,
                                 "leader_epoch": sp.part.leader_epoch})}, answered)

    def _loaded(self, sps: list, error: KafkaError | None) -> None:
        for sp in sps:
            if error is not None:
                sp.loading, sp.load_error = False, error
                log.warning("share group %s, %s: its state could not be read: %s",
                            sp.group_id, sp.part.name, error)
            waiters, sp.waiters = sp.waiters, []
            for waiter in waiters:
                waiter()

    def _when_loaded(self, ctx, body: dict, handler):
        """None when every share-partition the request names (and, but for a
        session being opened, those of its session) has been read; else the
        reads are started, and ``handler(ctx, body, True)`` runs, and answers,
        once they are done (DEFERRED)."""
        group, member = body.get("group_id"), body.get("member_id")
        keys = {(t["topic_id"], p["partition_index"])
                for t in body.get("topics") or () for p in t["partitions"]}
        session = self.sessions.get((group, member))
        if session is not None and body.get("share_session_epoch") != OPEN_EPOCH:
            keys.update(session.partitions)
        waiting = []
        for topic_id, index in keys:
            name = self.rm.topic_names.get(topic_id)
            if name is None or not group:
                continue
            try:
                sp = self._entry(group, name, index, topic_id)
            except KafkaError:
                continue                  # answered as the partition's error
            if not sp.loaded:
                waiting.append(sp)
        if not waiting:
            return None
        left = [len(waiting)]

        def one_done() -> None:
            left[0] -= 1
            if left[0] == 0:
                answer = handler(ctx, body, True)
                if answer is not DEFERRED:
                    ctx.respond(answer)
        for sp in waiting:
            sp.waiters.append(one_done)
        self._read(waiting)
        return DEFERRED

    def _write(self, sps: list, on_done=None) -> None:
        """Write the state of the dirty ``sps`` to the share coordinator;
        ``on_done({share-partition: KafkaError})`` once it answered (at once
        when nothing was dirty). A share-partition the coordinator fenced
        (reset, or led elsewhere since) is dropped, to be read again."""
        dirty = [sp for sp in dict.fromkeys(sps) if sp is not None and sp.dirty and sp.loaded]
        if not dirty:
            if on_done is not None:
                on_done({})
            return
        by_group: dict = {}
        for sp in dirty:
            sp.dirty = False
            by_group.setdefault(sp.group_id, []).append(sp)
        failures: dict = {}
        left = [len(by_group)]

        def answered(group_sps: list, result) -> None:
            if isinstance(result, KafkaError):
                for sp in group_sps:
                    failures[sp] = result
            else:
                codes = {(r["topic_id"], p["partition"]): p
                         for r in result["results"] for p in r["partitions"]}
                for sp in group_sps:
                    p = codes.get((sp.topic_id, sp.part.index))
                    if p is not None and p["error_code"] != NONE:
                        failures[sp] = errors.error_for_code(p["error_code"])(
                            p["error_message"] or "writing the share-partition state failed")
            for sp, exc in failures.items():
                if sp not in group_sps:
                    continue
                if exc.code in (errors.FencedStateEpochError.code,
                                errors.FencedLeaderEpochError.code):
                    log.warning("share group %s, %s: %s; its state is read again",
                                sp.group_id, sp.part.name, exc)
                    key = (sp.group_id, sp.part.name, sp.part.index)
                    if self.shares.get(key) is sp:
                        del self.shares[key]
                else:
                    sp.dirty = True            # written again, whole, at the next flush
            for sp in group_sps:
                if sp not in failures and sp.legacy_path:
                    _unlink(sp.legacy_path)
                    sp.legacy_path = ""
            left[0] -= 1
            if left[0] == 0 and on_done is not None:
                on_done(failures)
        for group, group_sps in by_group.items():
            if self.persister is None:
                answered(group_sps, errors.CoordinatorNotAvailableError(
                    "this broker has no share coordinator yet"))
                continue
            self.persister(ApiKey.WRITE_SHARE_GROUP_STATE, 0, {
                "group_id": group, "topics": _by_topic(group_sps, SharePartition.state)},
                lambda result, group_sps=group_sps: answered(group_sps, result))

    # ---- requests -----------------------------------------------------------------------------

    def _name(self, topic_id) -> str:
        name = self.rm.topic_names.get(topic_id)
        if name is None:
            raise errors.UnknownTopicIdError(f"no topic with id {topic_id} here")
        return name

    def _session(self, group: str, member: str, epoch: int) -> ShareSession:
        key = (group, member)
        if epoch == OPEN_EPOCH:
            session = self.sessions[key] = ShareSession()
            return session
        session = self.sessions.get(key)
        if session is None:
            raise errors.ShareSessionNotFoundError(
                f"no share session of member {member} of group {group} on this broker")
        if epoch != CLOSE_EPOCH:
            if epoch != session.epoch:
                raise errors.InvalidShareSessionEpochError(
                    f"share session epoch {epoch}, expected {session.epoch}")
            session.epoch += 1
        session.used = time.monotonic()
        return session

    def _acknowledge(self, group, member, topics, epoch, session) -> tuple[list, dict]:
        """Apply each partition's acknowledgements, and release what the
        member holds if the request closes its session (epoch -1): the
        share-partitions touched, and {(topic id, index): {"ack_error":
        KafkaError}} of the partitions that failed."""
        touched = []
        answers: dict = {}
        for t in topics:
            for p in t["partitions"]:
                batches = p.get("acknowledgement_batches") or ()
                if not batches:
                    continue
                out = answers.setdefault((t["topic_id"], p["partition_index"]), {})
                try:
                    sp = self.share_partition(group, self._name(t["topic_id"]),
                                              p["partition_index"], t["topic_id"])
                    sp.acknowledge(member, batches)
                    touched.append(sp)
                    if self.fault == "duplicate" and not self._faulted:
                        self._reopen(sp, batches[0]["first_offset"])
                except KafkaError as exc:
                    out["ack_error"] = exc
        if epoch == CLOSE_EPOCH:
            self.sessions.pop((group, member), None)
            for sp in self._session_shares(group, session):
                if sp.release_member(member):
                    touched.append(sp)
        return touched, answers

    @staticmethod
    def _check_ids(body: dict) -> None:
        if not body.get("group_id"):
            raise errors.InvalidRequestError("GroupId can't be empty.")
        if not body.get("member_id"):
            raise errors.InvalidRequestError("MemberId can't be empty.")

    def _after_write(self, ctx, touched: list, answers: dict, response, also: list = ()):
        """Write what the request changed, then answer ``response()``: now,
        if nothing was to be written, else when the coordinator answered
        (DEFERRED). An acknowledgement whose write failed is answered with
        that error: the member was not told it holds."""
        result: list = []

        def written(failures: dict) -> None:
            for sp, exc in failures.items():
                out = answers.get((sp.topic_id, sp.part.index))
                if out is not None and "ack_error" not in out:
                    out["ack_error"] = exc
            if result:                            # the request is waiting: answer it
                answer = response()
                if answer is not DEFERRED:
                    ctx.respond(answer)
            else:
                result.append(response())
        self._flush(touched, written, also)
        if result:
            return result[0]
        result.append(None)
        return DEFERRED

    def share_fetch(self, ctx, body: dict, loaded: bool = False):
        try:
            self._check_ids(body)
            if not loaded:
                waiting = self._when_loaded(ctx, body, self.share_fetch)
                if waiting is not None:
                    return waiting
            group, member, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
            session = self._session(group, member, epoch)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message,
                    "responses": [], "node_endpoints": []}
        for f in body.get("forgotten_topics_data") or ():
            for index in f["partitions"]:
                session.partitions.pop((f["topic_id"], index), None)
        # v1 has no per-partition byte limit, and MaxRecords caps the
        # records acquired in all (0: the request only acknowledges)
        v1 = ctx.api_version >= 1
        for t in body["topics"]:
            for p in t["partitions"]:
                session.partitions[(t["topic_id"], p["partition_index"])] = \
                    p.get("partition_max_bytes") or (0x7FFFFFFF if v1 else 1048576)
        max_records = max(body["max_records"], 0) if v1 else 0x7FFFFFFF
        touched, answers = self._acknowledge(group, member, body["topics"], epoch, session)
        if epoch == CLOSE_EPOCH:
            return self._after_write(ctx, touched, answers, lambda: self._fetch_response(
                answers, {}, session, fetched=False))
        budget = [body.get("max_bytes") or 0x7FFFFFFF, max_records]
        got, keys, visited, downloads = self._acquire_all(group, member, session, budget)
        total = sum(len(recs) for sp, recs, _ in got.values() if sp is not None)
        wait_ms = body.get("max_wait_ms", 0)
        if downloads and budget[1] > 0:
            # as a fetch's DelayedRemoteFetch: whatever min_bytes says, the
            # answer waits for the remote segments being downloaded for it,
            # up to remote.fetch.max.wait.ms (then without their records)
            keys, wait_ms = keys + downloads, self.rm.remote_fetch_max_wait_ms
        elif (total >= max(body.get("min_bytes", 1), 1) or wait_ms <= 0 or not keys
                or budget[1] <= 0):
            return self._after_write(ctx, touched + _holders(got), answers,
                                     lambda: self._fetch_response(answers, got, session), visited)

        def complete() -> None:
            budget[0] = body.get("max_bytes") or 0x7FFFFFFF
            if (group, member) not in self.sessions:
                more, visited_now = {}, []
            else:
                # the partitions that got records already are not read again:
                # what they would acquire now would replace those records
                # in the answer, leaving them held by the member unsent
                more, _, visited_now, _ = self._acquire_all(group, member, session, budget,
                                                            served=got)
            answer = self._after_write(ctx, _holders(more), answers, lambda: self._fetch_response(
                answers, {**got, **more}, session), visited_now)
            if answer is not DEFERRED:
                ctx.respond(answer)

        def watch() -> None:
            self.rm.purgatory.watch(DelayedFetch(
                ctx, time.monotonic() + wait_ms / 1000.0, keys,
                max(body.get("min_bytes", 1), 1), total, complete))
        # the acknowledgements are written before the fetch waits for records
        return self._after_write(ctx, touched + _holders(got), answers,
                                 lambda: (watch(), DEFERRED)[1], visited)

    def _session_shares(self, group, session) -> list:
        out = []
        for (topic_id, index) in session.partitions:
            try:
                out.append(self.share_partition(group, self._name(topic_id), index, topic_id))
            except KafkaError:
                pass
        return out

    def _acquire_all(self, group, member, session, budget,
                     served: dict | None = None) -> tuple[dict, list, list, list]:
        """{(topic id, index): (share-partition, records, acquired) or the
        KafkaError}, the purgatory keys a waiting fetch watches, the
        share-partitions visited (one just initialized is to be written),
        and the purgatory keys of the remote segment downloads started for
        partitions that got no records for want of them (a tiered
        partition's records below its local log start: downloaded on the
        remote reader's threads, not on this one). ``budget``: [bytes,
        records] left to the request, spent here; ``served``: an earlier
        pass's answer, whose partitions with records are left out."""
        got: dict = {}
        keys = []
        visited = []
        downloads = []
        now = time.monotonic()
        for (topic_id, index), max_bytes in session.partitions.items():
            if served is not None and served.get((topic_id, index), (None,))[0] is not None:
                continue
            try:
                sp = self.share_partition(group, self._name(topic_id), index, topic_id)
            except KafkaError as exc:
                got[(topic_id, index)] = (None, exc, None)
                continue
            visited.append(sp)
            keys += [sp.part.key, share_key(sp.part.key)]
            if budget[0] <= 0 or budget[1] <= 0:
                continue
            try:
                # nothing is acquired when the read raises: the records stay
                # available, to be acquired once their segment is here
                records, acquired = self.rm.read_remote_in_background(
                    sp.part, lambda: sp.acquire(member, min(max_bytes, budget[0]), now,
                                                min(budget[1], MAX_ACQUIRED_RECORDS)))
            except RemoteReadPending as pending:
                downloads.append(pending.key)
                continue
            if self.fault and acquired:
                acquired = self._inject(sp, member, acquired)
            if records is not None:
                budget[0] -= len(records)
                budget[1] -= sum(last - first + 1 for first, last, _ in acquired)
                got[(topic_id, index)] = (sp, records, acquired)
        return got, keys, visited, downloads

    def _inject(self, sp: SharePartition, member: str, acquired: list) -> list:
        """FAULT_ENV "skip": the last record acquired is marked accepted and
        never handed out (the exactly-once checker's own test)."""
        first, last, count = acquired[0]
        if self.fault == "skip" and last > first:
            # the last record of the range is marked accepted, never handed out
            sp._split(last)
            for r in sp.ranges:
                if r.first == last:
                    r.state, r.member = ACKNOWLEDGED, None
            sp._settle()
            return [(first, last - 1, count)] + acquired[1:]
        return acquired

    def _reopen(self, sp: SharePartition, offset: int) -> None:
        """FAULT_ENV "duplicate": an acknowledged record is made available
        again (once), so it is delivered and accepted a second time."""
        self._faulted = True
        i = sp._index(offset)
        if i < len(sp.ranges) and sp.ranges[i].first <= offset:
            sp._split(offset)
            sp._split(offset + 1)
            r = sp.ranges[sp._index(offset)]
            if r.state != ACKNOWLEDGED:
                self._faulted = False
                return
            r.state = AVAILABLE
        else:
            sp.ranges.insert(i, InFlight(offset, offset, AVAILABLE, 1))
            sp.start_offset = min(sp.start_offset, offset)
        sp.dirty = True

    def _fetch_response(self, answers: dict, got: dict, session, fetched: bool = True) -> dict:
        by_topic: dict = {}
        keys = list(session.partitions) if fetched else []
        keys += [k for k in answers if k not in session.partitions or not fetched]
        for key in dict.fromkeys(keys):
            topic_id, index = key
            out = _fetch_blank(index)
            ack = answers.get(key, {}).get("ack_error")
            if ack is not None:
                out["acknowledge_error_code"] = ack.code
                out["acknowledge_error_message"] = ack.message
            entry = got.get(key)
            if entry is not None:
                sp, records, acquired = entry
                if sp is None:
                    out["error_code"], out["error_message"] = records.code, records.message
                else:
                    out["records"] = records
                    out["acquired_records"] = [
                        {"first_offset": f, "last_offset": la, "delivery_count": c}
                        for f, la, c in acquired]
                    out["current_leader"] = {"leader_id": sp.part.leader_id,
                                             "leader_epoch": sp.part.leader_epoch}
            by_topic.setdefault(topic_id, []).append(out)
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "acquisition_lock_timeout_ms": self.lock_ms,
                "responses": [{"topic_id": t, "partitions": ps} for t, ps in by_topic.items()],
                "node_endpoints": []}

    # ---- ShareAcknowledge ---------------------------------------------------------------------

    def share_acknowledge(self, ctx, body: dict, loaded: bool = False):
        try:
            self._check_ids(body)
            group, member, epoch = body["group_id"], body["member_id"], body["share_session_epoch"]
            if epoch == OPEN_EPOCH:
                raise errors.InvalidShareSessionEpochError(
                    "ShareAcknowledge cannot open a share session (epoch 0)")
            if not loaded:
                waiting = self._when_loaded(ctx, body, self.share_acknowledge)
                if waiting is not None:
                    return waiting
            session = self._session(group, member, epoch)
        except KafkaError as exc:
            return {"throttle_time_ms": 0, "error_code": exc.code, "error_message": exc.message,
                    "responses": [], "node_endpoints": []}
        touched, answers = self._acknowledge(group, member, body["topics"], epoch, session)

        def response() -> dict:
            responses = []
            for t in body["topics"]:
                parts = []
                for p in t["partitions"]:
                    err = answers.get((t["topic_id"], p["partition_index"]), {}).get("ack_error")
                    parts.append({"partition_index": p["partition_index"],
                                  "error_code": err.code if err else NONE,
                                  "error_message": err.message if err else None,
                                  "current_leader": {"leader_id": -1, "leader_epoch": -1}})
                responses.append({"topic_id": t["topic_id"], "partitions": parts})
            return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                    "responses": responses, "node_endpoints": []}
        return self._after_write(ctx, touched, answers, response)

    # ---- time and persistence ----------------------------------------------------------------

    def _flush(self, touched, on_written=None, also=()) -> None:
        """End the request for the share-partitions it touched: their state
        (and that of ``also``, say one just initialized) written
        (``on_written(failures)`` once answered), dead letters queued, share
        fetches waiting on them woken."""
        woken = set()
        touched = [sp for sp in touched if sp is not None]   # None: answered with an error
        for sp in touched:
            sp.end_request()
            for first, last, count, reason in sp.dead_letters:
                self.dead_letter_writer.add(sp.group_id, sp.part, first, last, count, reason)
            sp.dead_letters.clear()
            # records to hand out again, or room in the in-flight window:
            # share fetches waiting on the partition try again
            if sp.part.key not in woken:
                woken.add(sp.part.key)
                self.rm.purgatory.check(share_key(sp.part.key), None)
        self._write(touched + list(also), on_written)
        self.dead_letter_writer.tick()

    def next_deadline(self) -> float | None:
        if not self.shares and not self.dead_letter_writer.busy:
            return None     # asked on every pass of the worker's loop: no lists
        deadlines = [d for d in (sp.next_deadline() for sp in self.shares.values())
                     if d is not None]
        if self.dead_letter_writer.busy:
            deadlines.append(time.monotonic() + 0.1)
        return min(deadlines) if deadlines else None

    def expire(self) -> None:
        now = time.monotonic()
        if now >= self._next_session_sweep:
            self._next_session_sweep = now + SESSION_IDLE_S / 10
            for key in [k for k, s in self.sessions.items() if now - s.used > SESSION_IDLE_S]:
                del self.sessions[key]
        if not self.shares and not self.dead_letter_writer.busy:
            # the worker's loop calls this on every pass: without share
            # groups, no list, no flush (a few % of a Produce request's CPU)
            return
        expired = [sp for sp in self.shares.values() if sp.loaded and sp.expire(now)]
        self._flush(expired)
        self.dead_letter_writer.tick()

    def configure(self, config) -> None:
        """The server config's share-group settings (config.py)."""
        self.lock_ms = config.group_share_record_lock_duration_ms
        self.delivery_limit = config.group_share_delivery_count_limit
        self.max_locks = config.group_share_partition_max_record_locks
        self.reset = config.share_auto_offset_reset
        self.dead_letter_writer.topic = config.share_dead_letter_topic

    def delete_group(self, group: str) -> None:
        """The share group was deleted (DeleteGroups), or its offsets reset
        (AlterShareGroupOffsets): its sessions and share-partitions here go;
        a share-partition used again is read again from the coordinator."""
        for k in [k for k in self.shares if k[0] == group]:
            del self.shares[k]
        for k in [k for k in self.sessions if k[0] == group]:
            del self.sessions[k]

    def forget(self, key: tuple) -> None:
        """The partition stopped being led here (or is gone): drop its
        share-partitions; their state is the share coordinator's, and a new
        leader (here or elsewhere) reads it again."""
        for k in [k for k in self.shares if (k[1], k[2]) == key]:
            del self.shares[k]


def _holders(got: dict) -> list:
    """The share-partitions that handed records out in ``got``."""
    return [sp for sp, _, _ in got.values() if sp is not None]


def _by_topic(sps: list, entry) -> list:
    """[{"topic_id", "partitions": [entry(sp), ...]}] of share-partitions."""
    by: dict = {}
    for sp in sps:
        by.setdefault(sp.topic_id, []).append(entry(sp))
    return [{"topic_id": tid, "partitions": parts} for tid, parts in by.items()]


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def share_key(key: tuple) -> tuple:
    """The purgatory key share fetches of a partition wait under for
    released records (appends wake them through the partition's own key)."""
    return ("share", *key)
