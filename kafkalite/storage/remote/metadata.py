"""Which of a partition's segments are remote, and in what state (Kafka's
RemoteLogSegmentMetadata and its RemoteLogMetadataManager).

Kafka keeps these as events in the ``__remote_log_metadata`` topic, which
every replica reads. kafkalite shares them through the remote store
(metadata_store.py: versions the leader writes, fenced by leader epoch);
each replica keeps its own copy in ``remote-log-metadata``, a JSON file in
the partition's log directory written atomically (checkpoint.py's
``write_atomically``: a temporary file, fsync, rename) at every change,
so what a crash leaves is the file before or after the change. A log with
no replicas (a PartitionLog opened on its own) has only this file:

    {"version": 1, "segments": [
        {"id": "<hex>", "base_offset": 0, "end_offset": 99, "max_timestamp": 1700000000000,
         "leader_epochs": [[0, 0], [3, 57]], "size": 104857, "state": "COPY_SEGMENT_FINISHED",
         "event_timestamp": 1700000000123, "txn_idx_empty": true}, ...]}

``end_offset`` is inclusive, as Kafka's; ``leader_epochs`` are the epochs
the segment's batches carry, each with its first offset in it.
``txn_idx_empty`` (Kafka's txnIdxEmpty, KIP-1058) says whether the segment
had no aborted transaction to index when it was copied: a read_committed
read's walk for aborted transactions skips such a segment without asking
the store for an index that was never uploaded. An entry written before
the flag existed has none (None: unknown, its index is fetched). States
follow Kafka's RemoteLogSegmentState: COPY_SEGMENT_STARTED (written before
the copy: a crash leaves the id, whose partial copy is then deleted),
COPY_SEGMENT_FINISHED (readable), DELETE_SEGMENT_STARTED (written before
the delete: it is finished after a crash), DELETE_SEGMENT_FINISHED (the
entry is then dropped from the file). Only COPY_SEGMENT_FINISHED segments
are read from or counted; they never overlap, and lie in offset order.

Who may call: the partition's owner, from its thread.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, replace
from enum import Enum

from kafkalite.errors import KafkaStorageError
from kafkalite.storage.checkpoint import write_atomically

REMOTE_LOG_METADATA_FILE = "remote-log-metadata"
_VERSION = 1


class RemoteLogSegmentState(str, Enum):
    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


# Kafka's RemoteLogSegmentState.isValidTransition
_TRANSITIONS = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


@dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    id: str
    base_offset: int
    end_offset: int                 # inclusive
    max_timestamp: int
    leader_epochs: tuple            # ((epoch, first offset), ...)
    size: int
    state: RemoteLogSegmentState
    event_timestamp: int
    txn_idx_empty: bool | None = None   # None: written before the flag, fetch the index

    def to_json(self) -> dict:
        out = asdict(self)
        out["state"] = self.state.value
        out["leader_epochs"] = [list(e) for e in self.leader_epochs]
        if self.txn_idx_empty is None:
            del out["txn_idx_empty"]
        return out

    @classmethod
    def from_json(cls, d: dict) -> "RemoteLogSegmentMetadata":
        return cls(d["id"], int(d["base_offset"]), int(d["end_offset"]), int(d["max_timestamp"]),
                   tuple((int(e), int(o)) for e, o in d["leader_epochs"]), int(d["size"]),
                   RemoteLogSegmentState(d["state"]), int(d["event_timestamp"]),
                   _flag(d.get("txn_idx_empty")))


def _flag(value) -> bool | None:
    if value is None or isinstance(value, bool):
        return value
    raise ValueError(f"txn_idx_empty: {value!r} is not a boolean")


class RemoteLogMetadataFile:
    """The remote segments of one partition (see the module docstring)."""

    def __init__(self, directory: str):
        self.path = os.path.join(directory, REMOTE_LOG_METADATA_FILE)
        self._segments: list[RemoteLogSegmentMetadata] = self._read()

    def _read(self) -> list[RemoteLogSegmentMetadata]:
        try:
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            # never guessed at: the remote copies it names would be lost
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from exc
        if doc.get("version") != _VERSION:
            raise KafkaStorageError(f"{self.path}: unknown version {doc.get('version')!r}")
        return [RemoteLogSegmentMetadata.from_json(d) for d in doc["segments"]]

    def _write(self) -> None:
        doc = {"version": _VERSION, "segments": [s.to_json() for s in self._segments]}
        write_atomically(self.path, json.dumps(doc, separators=(",", ":")).encode())

    @property
    def all(self) -> tuple[RemoteLogSegmentMetadata, ...]:
        """Every entry, whatever its state."""
        return tuple(self._segments)

    @property
    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """The readable (COPY_SEGMENT_FINISHED) segments, by offset."""
        return [s for s in self._segments if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]

    def replace(self, segments) -> None:
        """Take ``segments`` as the entries (what the store's shared copy
        says, metadata_store.py), written to the file only if they differ."""
        segments = sorted(segments, key=lambda s: s.base_offset)
        if segments != self._segments:
            self._segments = segments
            self._write()

    def add_copy_started(self, *metadata: RemoteLogSegmentMetadata) -> None:
        """New entries, COPY_SEGMENT_STARTED, in one write: a batch of copies
        handed over together costs one fsynced write, not one each."""
        for m in metadata:
            if m.state is not RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                raise ValueError(f"a new remote segment starts as COPY_SEGMENT_STARTED, "
                                 f"not {m.state.value}")
        self._segments.extend(metadata)
        self._segments.sort(key=lambda s: s.base_offset)
        self._write()

    def update_state(self, segment_id: str, state: RemoteLogSegmentState,
                     event_timestamp: int) -> None:
        self.update_states((segment_id,), state, event_timestamp)

    def update_states(self, segment_ids, state: RemoteLogSegmentState,
                      event_timestamp: int) -> None:
        """Move each of ``segment_ids`` to ``state``, in one write (all or
        none: a bad transition or an unknown id changes nothing)."""
        segments = list(self._segments)
        for segment_id in segment_ids:
            for i, s in enumerate(segments):
                if s.id == segment_id:
                    if state not in _TRANSITIONS[s.state]:
                        raise ValueError(f"remote segment {segment_id}: {s.state.value} cannot "
                                         f"become {state.value}")
                    segments[i] = replace(s, state=state, event_timestamp=event_timestamp)
                    break
            else:
                raise KeyError(f"no remote segment {segment_id}")
        if state is RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            segments = [s for s in segments if s.state is not state]
        self._segments = segments
        self._write()

    # ---- derived offsets and sizes --------------------------------------------------------

    @property
    def log_start_offset(self) -> int | None:
        """The first remote offset, None when nothing is remote."""
        segs = self.segments
        return segs[0].base_offset if segs else None

    @property
    def highest_offset(self) -> int:
        """Kafka's highest offset in remote storage: the last offset copied, -1 for none."""
        segs = self.segments
        return segs[-1].end_offset if segs else -1

    def find(self, offset: int) -> RemoteLogSegmentMetadata | None:
        """The readable segment holding ``offset``."""
        for s in self.segments:
            if s.base_offset <= offset <= s.end_offset:
                return s
        return None


@dataclass(frozen=True)
class RemoteAuxState:
    """What a follower starts its log from when it ends below its leader's
    local log start (Kafka's remote log "auxiliary state"): the remote
    segments as the shared metadata lists them, the offset after the copied
    segment holding the one just below the leader's local log start (where
    the follower's log starts), the leader epochs up to there (that
    segment's leader-epoch checkpoint) and the producer snapshot taken at
    its end (None if it had none)."""
    segments: tuple
    next_offset: int
    leader_epochs: list
    producer_snapshot: bytes | None
