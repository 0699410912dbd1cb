"""Share-partition state, kept in ``__share_group_state``.

On-disk format: the internal topic ``__share_group_state`` with
``share_coordinator_state_topic_num_partitions`` partitions in
``<data_dir>/__share_group_state-N``, ordinary PartitionLogs with
``cleanup.policy=compact`` (internal_topic.InternalTopicLog: in a cluster
every batch is in PostgreSQL too, so the state outlives the controller's
node). A share-partition lives in the partition of its key
``"<group>:<topic id>:<partition>"`` (the topic id as Kafka prints a Uuid),
as Kafka's share coordinator places it. Records are Kafka's
(protocol/messages/share_records.py):

    ShareSnapshotKey (v0: group, topic id, partition) -> ShareSnapshotValue v0, or null

Each write is a whole snapshot of the share-partition (kafkalite writes no
ShareUpdate deltas); the last value of a key wins and a null value
(tombstone) deletes, so compaction keeps one record per share-partition.
``load()`` replays every partition after a restart.

Who may call: the share coordinator (share_coordinator.py), on the
supervisor's single thread. Workers never open these partitions; clients
reach the state only through the share coordinator's APIs.
"""
from __future__ import annotations

import base64
import logging
import re
import uuid

from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.share_records import ShareSnapshotKey, ShareSnapshotValue
from kafkalite.server.internal_topic import InternalTopicLog
from kafkalite.server.topic import SHARE_STATE_TOPIC

log = logging.getLogger("kafkalite.share_coordinator")

SNAPSHOT_KEY_VERSION = 0
_LOG_PROPERTIES = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 << 20),
    # tombstones of deleted share groups linger a day, as __consumer_offsets' do
    "delete.retention.ms": str(86_400_000),
    "compression.type": "producer",
}


def coordinator_key(group: str, topic_id: uuid.UUID, partition: int) -> str:
    """Kafka's SharePartitionKey as the share coordinator hashes it."""
    tid = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"{group}:{tid}:{partition}"


def parse_coordinator_key(key: str) -> tuple[str, uuid.UUID, int]:
    """(group, topic id, partition) of a ``coordinator_key`` (what a share
    FindCoordinator names, KIP-932); ValueError saying what is wrong with
    any other string, as Kafka's SharePartitionKey.validate refuses it."""
    parts = key.split(":")
    if len(parts) != 3:
        raise ValueError(f"expected groupId:topicId:partition, found {key!r}")
    group, tid, partition = parts
    if not group.strip():
        raise ValueError(f"no group id in {key!r}")
    try:
        raw = base64.b64decode(tid + "=" * (-len(tid) % 4), altchars=b"-_", validate=True)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"{tid!r} is not a topic id (Kafka's base64 of 16 bytes)")
    if not re.fullmatch(r"[+-]?[0-9]{1,10}", partition) or not -2**31 <= int(partition) < 2**31:
        raise ValueError(f"{partition!r} is not a partition index")
    return group, uuid.UUID(bytes=raw), int(partition)


class ShareStateLog(InternalTopicLog):
    def __init__(self, data_dir: str, partitions: int, mirror=None):
        super().__init__(data_dir, SHARE_STATE_TOPIC, partitions, _LOG_PROPERTIES, mirror)

    def write(self, snapshots: list, now_ms: int) -> None:
        """Append [((group, topic id, partition), ShareSnapshotValue body or
        None)], one batch per log partition."""
        by_partition: dict[int, list] = {}
        for (group, topic_id, partition), value in snapshots:
            key = encode_data(ShareSnapshotKey, SNAPSHOT_KEY_VERSION, {
                "group_id": group, "topic_id": topic_id, "partition": partition})
            by_partition.setdefault(
                self.partition_for(coordinator_key(group, topic_id, partition)), []).append(
                (key, None if value is None else encode_data(ShareSnapshotValue, 0, value)))
        for index, entries in by_partition.items():
            self.append(index, entries, now_ms)

    def load(self) -> dict:
        """{(group, topic id, partition): ShareSnapshotValue body}, tombstones applied."""
        states: dict = {}

        def on_record(_index, _producer_id, _transactional, key, value):
            if key is None or len(key) < 2:
                return
            try:
                version, k = decode_data(ShareSnapshotKey, key)
                if version != SNAPSHOT_KEY_VERSION:
                    raise ProtocolError(f"key version {version}")
                sp = (k["group_id"], k["topic_id"], k["partition"])
                if value is None:
                    states.pop(sp, None)
                else:
                    states[sp] = decode_data(ShareSnapshotValue, value)[1]
            except ProtocolError as exc:
                # a ShareUpdate (Kafka's deltas, never written here) or a
                # damaged record: skip it rather than refuse to start
                log.error("skipped an unreadable %s record: %s", SHARE_STATE_TOPIC, exc)

        self.replay(on_record)
        return states
