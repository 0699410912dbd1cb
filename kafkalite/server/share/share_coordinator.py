"""The share coordinator (KIP-932): where share-partition state is kept.

A share group's records are handed out by each partition's leader
(share_partition.py), which holds the share-partition in memory: its start
offset (SPSO), and the in-flight ranges with their delivery states and
counts. What must outlive that leader -- a restart, a failover to another
worker or another node -- is kept here, in the supervisor (the controller's,
in a cluster), in ``__share_group_state`` (share_state_log.py), and served
through Kafka's share coordinator APIs (protocol/messages/share_state.py):

- ReadShareGroupState: a leader taking a share-partition up reads its
  state. Its leader epoch is remembered (and written): from then on a
  write of an older leader is FENCED_LEADER_EPOCH, so a deposed leader
  that still runs cannot overwrite what its successor does.
- WriteShareGroupState: a leader writes the state after acknowledgements,
  releases and expired locks, before it answers the members. The batches
  are merged over the stored ones (each batch replaces the state of the
  offsets it covers; everything below the start offset goes), so a leader
  may send its whole state or only what changed; kafkalite's leaders send
  the whole. A write under an older state epoch is FENCED_STATE_EPOCH.
- InitializeShareGroupState: the share-partition starts afresh at a start
  offset, nothing in flight, under a new state epoch (the group
  coordinator's AlterShareGroupOffsets through ``initialize``): a leader
  still holding the old state is fenced at its next write and reads again.
- DeleteShareGroupState: the share-partition's state goes (a tombstone).
- ReadShareGroupStateSummary: the state epoch and start offset alone
  (DescribeShareGroupOffsets through ``summary``).

Every change is appended before the answer: an answered write survives a
killed supervisor, and in a cluster a lost controller node
(InternalTopicLog's PostgreSQL copy). A write that cannot be appended is
answered COORDINATOR_NOT_AVAILABLE, and nothing changes in memory.

Who may call: the supervisor, on its single thread: the request handlers
(``handlers``) through its dispatcher (workers reach them over the
coordinator endpoint, other nodes' workers too), and the group
coordinator's share groups (share_group.py) the in-process calls
``summary``, ``initialize``, ``delete_group`` and ``groups``, and the
controller ``delete_topic`` when a topic is deleted.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.messages.share_records import ACKNOWLEDGED, ARCHIVED, AVAILABLE
from kafkalite.server.share.share_state_log import ShareStateLog

log = logging.getLogger("kafkalite.share_coordinator")

NONE = 0
HOUSEKEEPING_INTERVAL_S = 5.0
_STATES = (AVAILABLE, ACKNOWLEDGED, ARCHIVED)


@dataclass
class ShareState:
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    # [(first, last, delivery state, delivery count)], sorted, disjoint
    batches: list = field(default_factory=list)
    snapshot_epoch: int = 0
    created: int = 0

    def value(self, now_ms: int) -> dict:
        """As a ShareSnapshotValue body."""
        return {"snapshot_epoch": self.snapshot_epoch, "state_epoch": self.state_epoch,
                "leader_epoch": self.leader_epoch, "start_offset": self.start_offset,
                "create_timestamp": self.created, "write_timestamp": now_ms,
                "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s,
                                   "delivery_count": c} for f, la, s, c in self.batches]}

    @classmethod
    def of(cls, value: dict) -> ShareState:
        return cls(value["state_epoch"], value["leader_epoch"], value["start_offset"],
                   [(b["first_offset"], b["last_offset"], b["delivery_state"],
                     b["delivery_count"]) for b in value["state_batches"]],
                   value["snapshot_epoch"], value["create_timestamp"])


def merge_batches(old: list, new: list, start_offset: int) -> list:
    """``old`` with each of ``new``'s batches replacing the state of the
    offsets it covers, cut below ``start_offset``, neighbours in one state
    joined."""
    out = list(old)
    for first, last, state, count in sorted(new):
        kept = []
        for b in out:
            if b[1] < first or b[0] > last:
                kept.append(b)
                continue
            if b[0] < first:
                kept.append((b[0], first - 1, b[2], b[3]))
            if b[1] > last:
                kept.append((last + 1, b[1], b[2], b[3]))
        kept.append((first, last, state, count))
        out = sorted(kept)
    joined: list = []
    for first, last, state, count in out:
        if last < start_offset:
            continue
        first = max(first, start_offset)
        if joined and joined[-1][1] + 1 == first and joined[-1][2:] == (state, count):
            joined[-1] = (joined[-1][0], last, state, count)
        else:
            joined.append((first, last, state, count))
    return joined


class ShareCoordinator:
    def __init__(self, data_dir: str, partitions: int, mirror=None):
        self.log = ShareStateLog(data_dir, partitions, mirror)
        self.states: dict[tuple, ShareState] = {
            key: ShareState.of(value) for key, value in self.log.load().items()}
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_INTERVAL_S

    def handlers(self) -> dict:
        return {
            ApiKey.INITIALIZE_SHARE_GROUP_STATE: self._initialize,
            ApiKey.READ_SHARE_GROUP_STATE: self._read,
            ApiKey.WRITE_SHARE_GROUP_STATE: self._write,
            ApiKey.DELETE_SHARE_GROUP_STATE: self._delete,
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: self._summary,
        }

    # ---- the APIs ---------------------------------------------------------------------------

    def _each(self, body: dict, apply, blank: dict) -> dict:
        """Run ``apply(key, partition request)`` for each partition of the
        request: its answer fields, or a KafkaError for that partition.
        Changed states are appended in one write before the answer."""
        group = body["group_id"]
        changed: dict = {}
        results = []
        for t in body["topics"]:
            parts = []
            for p in t["partitions"]:
                out = {"partition": p["partition"], "error_code": NONE, "error_message": None,
                       **blank}
                try:
                    if not group:
                        raise errors.InvalidRequestError("GroupId can't be empty.")
                    key = (group, t["topic_id"], p["partition"])
                    answer = apply(key, p, changed)
                    if answer:
                        out.update(answer)
                except KafkaError as exc:
                    out["error_code"], out["error_message"] = exc.code, exc.message
                parts.append(out)
            results.append({"topic_id": t["topic_id"], "partitions": parts})
        if changed:
            try:
                self._append(changed)
            except KafkaError as exc:
                for r in results:
                    for out in r["partitions"]:
                        if (group, r["topic_id"], out["partition"]) in changed:
                            out["error_code"], out["error_message"] = exc.code, exc.message
                            for k, v in blank.items():
                                out[k] = v
        return {"results": results}

    def _append(self, changed: dict) -> None:
        """Write ``changed`` ({key: ShareState or None}); only once it is
        written does memory take it."""
        now_ms = int(time.time() * 1000)
        snapshots = []
        for key, state in changed.items():
            if state is not None:
                state.snapshot_epoch += 1
            snapshots.append((key, None if state is None else state.value(now_ms)))
        try:
            self.log.write(snapshots, now_ms)
        except KafkaError:
            for state in changed.values():
                if state is not None:
                    state.snapshot_epoch -= 1
            raise
        for key, state in changed.items():
            if state is None:
                self.states.pop(key, None)
            else:
                self.states[key] = state

    def _current(self, key: tuple, changed: dict) -> ShareState | None:
        """The state as this request has left it so far (a copy to change)."""
        state = changed[key] if key in changed else self.states.get(key)
        if state is None:
            return None
        return ShareState(state.state_epoch, state.leader_epoch, state.start_offset,
                          list(state.batches), state.snapshot_epoch, state.created)

    def _read(self, ctx, body: dict) -> dict:
        def apply(key, p, changed):
            state = self._current(key, changed)
            epoch = p["leader_epoch"]
            if state is None:
                return None
            if epoch >= 0 and epoch < state.leader_epoch:
                raise errors.FencedLeaderEpochError(
                    f"leader epoch {epoch} is older than {state.leader_epoch}, the epoch of "
                    f"the leader that read this share-partition last")
            if epoch > state.leader_epoch:
                # from now on older leaders' writes are fenced
                state.leader_epoch = epoch
                changed[key] = state
            return {"state_epoch": state.state_epoch, "start_offset": state.start_offset,
                    "state_batches": [{"first_offset": f, "last_offset": la,
                                       "delivery_state": s, "delivery_count": c}
                                      for f, la, s, c in state.batches]}
        return self._each(body, apply, {"state_epoch": 0, "start_offset": -1,
                                        "state_batches": []})

    def _write(self, ctx, body: dict) -> dict:
        def apply(key, p, changed):
            state = self._current(key, changed)
            if state is None:
                state = ShareState(created=int(time.time() * 1000))
            if p["state_epoch"] < state.state_epoch:
                raise errors.FencedStateEpochError(
                    f"state epoch {p['state_epoch']} is older than {state.state_epoch}: the "
                    f"share-partition was reset since it was read")
            epoch = p["leader_epoch"]
            if 0 <= epoch < state.leader_epoch:
                raise errors.FencedLeaderEpochError(
                    f"leader epoch {epoch} is older than {state.leader_epoch}: another "
                    f"leader has taken this share-partition over")
            new = []
            for b in p["state_batches"]:
                if b["first_offset"] > b["last_offset"] or b["delivery_state"] not in _STATES:
                    raise errors.InvalidRequestError(
                        f"bad state batch {b['first_offset']}-{b['last_offset']} in state "
                        f"{b['delivery_state']}")
                new.append((b["first_offset"], b["last_offset"], b["delivery_state"],
                            b["delivery_count"]))
            state.state_epoch = p["state_epoch"]
            state.leader_epoch = max(state.leader_epoch, epoch)
            if p["start_offset"] >= 0:
                state.start_offset = p["start_offset"]
            state.batches = merge_batches(state.batches, new, state.start_offset)
            changed[key] = state
            return None
        return self._each(body, apply, {})

    def _initialize(self, ctx, body: dict) -> dict:
        def apply(key, p, changed):
            state = self._current(key, changed)
            if state is not None and p["state_epoch"] <= state.state_epoch:
                raise errors.FencedStateEpochError(
                    f"state epoch {p['state_epoch']} is not newer than {state.state_epoch}")
            if p["start_offset"] < 0:
                raise errors.InvalidRequestError(
                    f"start offset {p['start_offset']} is negative")
            changed[key] = ShareState(p["state_epoch"],
                                      state.leader_epoch if state is not None else -1,
                                      p["start_offset"], [],
                                      state.snapshot_epoch if state is not None else 0,
                                      int(time.time() * 1000))
            return None
        return self._each(body, apply, {})

    def _delete(self, ctx, body: dict) -> dict:
        def apply(key, p, changed):
            if key in self.states or changed.get(key) is not None:
                changed[key] = None
            return None
        return self._each(body, apply, {})

    def _summary(self, ctx, body: dict) -> dict:
        def apply(key, p, changed):
            state = self.states.get(key)
            if state is None:
                return None
            return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                    "start_offset": state.start_offset}
        return self._each(body, apply, {"state_epoch": 0, "leader_epoch": -1, "start_offset": -1})

    # ---- for the group coordinator (share_group.py) ---------------------------------------

    def summary(self, group: str, topic_id: uuid.UUID, partition: int) -> int:
        """The share-partition's start offset; -1 when it has no state."""
        state = self.states.get((group, topic_id, partition))
        return -1 if state is None else state.start_offset

    def initialize(self, group: str, starts: dict) -> dict:
        """Start each {(topic id, partition): start offset} afresh under a
        new state epoch; {(topic id, partition): KafkaError} of those that
        could not be written."""
        body = {"group_id": group, "topics": [
            {"topic_id": tid, "partitions": [
                {"partition": p, "start_offset": offset,
                 "state_epoch": self.states[(group, tid, p)].state_epoch + 1
                 if (group, tid, p) in self.states else 1}]}
            for (tid, p), offset in starts.items()]}
        return _failures(self._initialize(None, body))

    def delete_group(self, group: str) -> None:
        """Tombstones for every share-partition of ``group``."""
        keys = [k for k in self.states if k[0] == group]
        if keys:
            try:
                self._append({k: None for k in keys})
            except KafkaError as exc:
                log.error("share group %s: its state could not be deleted: %s", group, exc)

    def delete_group_topic(self, group: str, topic_id) -> bool:
        """Tombstones for ``group``'s share-partitions of one topic; False
        when it has none. Raises the KafkaError of a failed write."""
        keys = [k for k in self.states if k[0] == group and k[1] == topic_id]
        if keys:
            self._append({k: None for k in keys})
        return bool(keys)

    def delete_topic(self, topic_id) -> None:
        """Tombstones for every share-partition of a deleted topic."""
        keys = [k for k in self.states if k[1] == topic_id]
        if keys:
            try:
                self._append({k: None for k in keys})
            except KafkaError as exc:
                log.error("the share state of deleted topic %s could not be deleted: %s",
                          topic_id, exc)

    def groups(self) -> set:
        """The share groups some share-partition has state of."""
        return {k[0] for k in self.states}

    # ---- time -------------------------------------------------------------------------------

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self._next_housekeeping:
            self._next_housekeeping = now + HOUSEKEEPING_INTERVAL_S
            self.log.housekeeping()

    def close(self) -> None:
        self.log.close()


def _failures(response: dict) -> dict:
    return {(r["topic_id"], p["partition"]): errors.error_for_code(p["error_code"])(
        p["error_message"]) for r in response["results"] for p in r["partitions"]
        if p["error_code"] != NONE}
