"""Committed offsets and group metadata, kept in ``__consumer_offsets``.

On-disk format: the internal topic ``__consumer_offsets`` with
``offsets_topic_num_partitions`` partitions in ``<data_dir>/__consumer_offsets-N``,
ordinary PartitionLogs (the same log engine as every topic) with
``cleanup.policy=compact``. A group lives in partition
``abs(java_string_hash(group)) % partitions``, as in Kafka, so all of a
group's records are in one partition, in order. Record keys and values are
the versioned structures of kafkalite/protocol/messages/group_records.py:

    key (v1: group, topic, partition) -> OffsetCommitValue v3, or null
    key (v2: group)                   -> GroupMetadataValue v3, or null

The last value of each key wins; a null value (tombstone) deletes. After a
restart, ``load()`` replays every partition and the coordinator resumes with
the same groups, generations, assignments and offsets. Compaction keeps the
topic from growing without bound.

Each partition is a ``Partition`` (partition.py) this process leads, as a
worker's are: the coordinator's appends (``AppendOrigin.COORDINATOR``) go
through it, and it owns the high watermark. Periodic work is the log's own
``housekeeping()``.

Who may call: the group coordinator (coordinator.py), on the supervisor's
single thread. Workers never open these partitions, and the topic is not in
the cluster metadata: clients reach it only through the group APIs (it is one
of metadata.INTERNAL_TOPICS, which no client may create, write, delete or
alter).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from kafkalite.errors import KafkaError
from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.group_records import (
    GROUP_METADATA_KEY_VERSION,
    OFFSET_COMMIT_KEY_VERSION,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from kafkalite.record import RecordBatchBuilder, iter_batches
from kafkalite.server.metadata import OFFSETS_TOPIC
from kafkalite.server.partition import Partition
from kafkalite.storage import AppendOrigin
from kafkalite.storage.config import LogConfig
from kafkalite.storage.log import PartitionLog

log = logging.getLogger("kafkalite.coordinator")

_LOG_PROPERTIES = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 << 20),
    # tombstones of deleted groups and expired offsets linger a day, as in Kafka
    "delete.retention.ms": str(86_400_000),
    "compression.type": "producer",
}
_READ_CHUNK = 4 << 20


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, partitions: int) -> int:
    h = java_string_hash(group)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


# The supervisor's broker id for its own partitions' replica lists.
COORDINATOR_BROKER_ID = -1


class GroupMetadataLog:
    def __init__(self, data_dir: str, partitions: int):
        if partitions < 1:
            raise ValueError("offsets_topic_num_partitions must be at least 1")
        self.partitions = partitions
        config = LogConfig.from_properties(_LOG_PROPERTIES)
        self.parts: list[Partition] = []
        for i in range(partitions):
            plog = PartitionLog.open(os.path.join(data_dir, f"{OFFSETS_TOPIC}-{i}"), config)
            part = Partition(OFFSETS_TOPIC, i, None, plog, COORDINATOR_BROKER_ID)
            part.make_leader(max(plog.leader_epoch, 0))
            self.parts.append(part)

    @property
    def logs(self) -> list[PartitionLog]:
        return [p.log for p in self.parts]

    # ---- writing ----------------------------------------------------------------------------

    def _append(self, group: str, entries: list[tuple[bytes, bytes | None]], now_ms: int) -> None:
        builder = RecordBatchBuilder()
        for key, value in entries:
            builder.append(now_ms, key, value)
        self.parts[partition_for(group, self.partitions)].append_as_leader(
            builder.build(), AppendOrigin.COORDINATOR)

    @staticmethod
    def _offset_key(group: str, topic: str, partition: int) -> bytes:
        return encode_data(OffsetCommitKey, OFFSET_COMMIT_KEY_VERSION,
                           {"group": group, "topic": topic, "partition": partition})

    @staticmethod
    def _group_key(group: str) -> bytes:
        return encode_data(GroupMetadataKey, GROUP_METADATA_KEY_VERSION, {"group": group})

    def write_offsets(self, group: str, offsets: dict, now_ms: int) -> None:
        """Append {(topic, partition): OffsetAndMetadata or None (delete)} in one batch."""
        entries = []
        for (topic, partition), om in offsets.items():
            value = None if om is None else encode_data(OffsetCommitValue, 3, {
                "offset": om.offset, "leader_epoch": om.leader_epoch,
                "metadata": om.metadata or "", "commit_timestamp": om.commit_timestamp})
            entries.append((self._offset_key(group, topic, partition), value))
        if entries:
            self._append(group, entries, now_ms)

    def write_group(self, group: str, value: dict | None, now_ms: int,
                    offsets_deleted: list | None = None) -> None:
        """Append the group's metadata (a GroupMetadataValue body), or its
        tombstone (None) together with tombstones for ``offsets_deleted``."""
        entries = [(self._offset_key(group, t, p), None) for t, p in offsets_deleted or ()]
        entries.append((self._group_key(group),
                        None if value is None else encode_data(GroupMetadataValue, 3, value)))
        self._append(group, entries, now_ms)

    # ---- loading ----------------------------------------------------------------------------

    def load(self) -> tuple[dict[str, dict], dict[str, dict]]:
        """Replay every partition: ({group: GroupMetadataValue body},
        {group: {(topic, partition): OffsetAndMetadata}}), tombstones applied."""
        groups: dict[str, dict] = {}
        offsets: dict[str, dict] = {}
        for plog in self.logs:
            position = plog.log_start_offset
            while position < plog.log_end_offset:
                data = plog.read(position, _READ_CHUNK).read()
                if not data:
                    break
                for batch in iter_batches(data):
                    if batch.is_control:
                        position = batch.next_offset
                        continue
                    for record in batch.records():
                        self._replay(record.key, record.value, groups, offsets)
                    position = batch.next_offset
        return groups, offsets

    @staticmethod
    def _replay(key, value, groups: dict, offsets: dict) -> None:
        if key is None or len(key) < 2:
            return
        version = int.from_bytes(bytes(key[:2]), "big", signed=True)
        try:
            if version in (0, 1):
                _, k = decode_data(OffsetCommitKey, key)
                tp = (k["topic"], k["partition"])
                if value is None:
                    offsets.get(k["group"], {}).pop(tp, None)
                else:
                    _, v = decode_data(OffsetCommitValue, value)
                    offsets.setdefault(k["group"], {})[tp] = OffsetAndMetadata(
                        v["offset"], v["leader_epoch"], v["metadata"], v["commit_timestamp"])
            elif version == GROUP_METADATA_KEY_VERSION:
                _, k = decode_data(GroupMetadataKey, key)
                if value is None:
                    groups.pop(k["group"], None)
                else:
                    groups[k["group"]] = decode_data(GroupMetadataValue, value)[1]
        except ProtocolError as exc:
            # An unknown key version (a newer writer) or a damaged record: skip
            # it rather than refuse to start the coordinator.
            log.error("skipped an unreadable %s record: %s", OFFSETS_TOPIC, exc)

    # ---- housekeeping -----------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Each log's periodic work (compaction by the topic's policy) and
        checkpoint, as a worker does for its partitions."""
        for plog in self.logs:
            try:
                plog.housekeeping()
                plog.maybe_checkpoint()
            except KafkaError as exc:
                log.error("housekeeping of %s failed: %s", plog.name, exc)

    def close(self) -> None:
        for plog in self.logs:
            plog.close()
