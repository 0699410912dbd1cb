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
    key (v3, v5-v8: group[, member])  -> a KIP-848 group's records, or null
                                         (consumer_group_log.py)

The last value of each key wins; a null value (tombstone) deletes. After a
restart, ``load()`` replays every partition and the coordinator resumes with
the same groups, generations, assignments and offsets. Compaction keeps the
topic from growing without bound.

Offsets committed inside a transaction (TxnOffsetCommit) are written as a
transactional batch of the producer's and count only once the transaction
coordinator's COMMIT marker follows in the same partition; an ABORT marker
discards them. ``load()`` returns those still waiting for their marker.

The partitions themselves are an ``InternalTopicLog`` (internal_topic.py).

Who may call: the group coordinator (coordinator.py), on the supervisor's
single thread. Workers never open these partitions, and the topic is not in
the cluster metadata: clients reach it only through the group APIs (it is one
of metadata.INTERNAL_TOPICS, which no client may create, write, delete or
alter).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.group_records import (
    CONSUMER_GROUP_KEY_VERSIONS,
    GROUP_METADATA_KEY_VERSION,
    OFFSET_COMMIT_KEY_VERSION,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from kafkalite.server.group import consumer_group_log
from kafkalite.server.internal_topic import InternalTopicLog
from kafkalite.server.topic import OFFSETS_TOPIC

log = logging.getLogger("kafkalite.coordinator")

_LOG_PROPERTIES = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 << 20),
    # tombstones of deleted groups and expired offsets linger a day, as in Kafka
    "delete.retention.ms": str(86_400_000),
    "compression.type": "producer",
}


@dataclass
class OffsetAndMetadata:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass
class LoadedGroups:
    groups: dict            # group -> GroupMetadataValue body
    offsets: dict           # group -> {(topic, partition): OffsetAndMetadata}
    pending: dict           # producer id -> {group -> {(topic, partition): OffsetAndMetadata}}
    consumer: dict = None   # KIP-848 groups: group -> consumer_group_log.replay's record


class GroupMetadataLog(InternalTopicLog):
    def __init__(self, data_dir: str, partitions: int, mirror=None):
        super().__init__(data_dir, OFFSETS_TOPIC, partitions, _LOG_PROPERTIES, mirror)

    # ---- writing ----------------------------------------------------------------------------

    @staticmethod
    def _offset_key(group: str, topic: str, partition: int) -> bytes:
        return encode_data(OffsetCommitKey, OFFSET_COMMIT_KEY_VERSION,
                           {"group": group, "topic": topic, "partition": partition})

    @staticmethod
    def _group_key(group: str) -> bytes:
        return encode_data(GroupMetadataKey, GROUP_METADATA_KEY_VERSION, {"group": group})

    def write_offsets(self, group: str, offsets: dict, now_ms: int, *, producer_id: int = -1,
                      producer_epoch: int = -1) -> None:
        """Append {(topic, partition): OffsetAndMetadata or None (delete)} in
        one batch; with a producer id, as part of its transaction."""
        entries = []
        for (topic, partition), om in offsets.items():
            value = None if om is None else encode_data(OffsetCommitValue, 3, {
                "offset": om.offset, "leader_epoch": om.leader_epoch,
                "metadata": om.metadata or "", "commit_timestamp": om.commit_timestamp})
            entries.append((self._offset_key(group, topic, partition), value))
        if entries:
            self.append(self.partition_for(group), entries, now_ms, producer_id=producer_id,
                        producer_epoch=producer_epoch)

    def write_group(self, group: str, value: dict | None, now_ms: int,
                    offsets_deleted: list | None = None) -> None:
        """Append the group's metadata (a GroupMetadataValue body), or its
        tombstone (None) together with tombstones for ``offsets_deleted``."""
        entries = [(self._offset_key(group, t, p), None) for t, p in offsets_deleted or ()]
        entries.append((self._group_key(group),
                        None if value is None else encode_data(GroupMetadataValue, 3, value)))
        self.append(self.partition_for(group), entries, now_ms)

    def write_records(self, group: str, entries: list, now_ms: int) -> None:
        """Append (key, value or None) records of ``group`` in one batch
        (a consumer group's, from consumer_group_log.diff)."""
        if entries:
            self.append(self.partition_for(group), entries, now_ms)

    # ---- loading ----------------------------------------------------------------------------

    def load(self) -> LoadedGroups:
        """Replay every partition, tombstones and transaction markers applied.

        Only each key's last value is decoded: the log is read in order
        keeping the raw bytes of each key's latest value (a committed
        transaction's offsets where its marker stands), then each survivor
        is decoded once. A group committing every few seconds leaves many
        values per key between two compactions, and decoding them all was
        the coordinator's load at a restart (issue 68)."""
        loaded = LoadedGroups({}, {}, {}, {})
        latest: dict[bytes, bytes | None] = {}      # raw key -> its last raw value, or None
        # producer id -> partition -> raw key -> raw value: a transaction's
        # offsets, until its marker
        waiting: dict[int, dict[int, dict[bytes, bytes]]] = {}

        def on_record(index, producer_id, transactional, key, value):
            if key is None or len(key) < 2:
                return
            key = bytes(key)
            value = None if value is None else bytes(value)
            if transactional and int.from_bytes(key[:2], "big", signed=True) in (0, 1):
                offsets = waiting.setdefault(producer_id, {}).setdefault(index, {})
                if value is None:
                    offsets.pop(key, None)
                else:
                    offsets[key] = value
            else:
                latest[key] = value

        def on_marker(index, producer_id, commit):
            offsets = waiting.get(producer_id, {}).pop(index, None)
            if commit and offsets:
                latest.update(offsets)

        self.replay(on_record, on_marker)
        for key, value in latest.items():
            self._replay(key, value, loaded.groups, loaded.offsets, loaded.consumer)
        for producer_id, by_partition in waiting.items():
            for offsets in by_partition.values():
                decoded: dict = {}
                for key, value in offsets.items():
                    self._replay(key, value, loaded.groups, decoded, loaded.consumer)
                for group, tps in decoded.items():
                    loaded.pending.setdefault(producer_id, {}).setdefault(group, {}).update(tps)
        return loaded

    @staticmethod
    def _replay(key, value, groups: dict, offsets: dict, consumer: dict) -> None:
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
            elif version in CONSUMER_GROUP_KEY_VERSIONS:
                consumer_group_log.replay(version, key, value, consumer)
        except ProtocolError as exc:
            # An unknown key version (a newer writer) or a damaged record: skip
            # it rather than refuse to start the coordinator.
            log.error("skipped an unreadable %s record: %s", OFFSETS_TOPIC, exc)
