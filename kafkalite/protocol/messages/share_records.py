"""The record formats of share-partition state (Kafka's ``__share_group_state``).

The share coordinator keeps each share-partition's state in
``__share_group_state`` (server/share/share_state_log.py) in these formats: the key
names the share-partition, the value is a whole snapshot of its state
(Kafka's ShareSnapshot records; kafkalite writes no ShareUpdate deltas, it
writes the snapshot again). Each starts with an int16 version, as Kafka's
do. Older kafkalite versions wrote the same records into a file beside the
partition's log (server/replica/share_partition.py takes such a file up).
"""
from __future__ import annotations

from kafkalite.protocol.schema import Array, Data, Field

# Record states as Kafka numbers
# them; an acquired record is written as AVAILABLE (its lock does not
# survive the broker).
AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
ShareSnapshotKey = Data("ShareSnapshotKey", "0", fields=[
    Field("group_id", "string"),
    Field("topic_id", "uuid"),
    Field("partition", "int32"),
])
ShareSnapshotValue = Data("ShareSnapshotValue", "0", flexible="0+", fields=[
    Field("snapshot_epoch", "int32"),
    Field("state_epoch", "int32"),
    Field("leader_epoch", "int32"),
    Field("start_offset", "int64"),
    Field("create_timestamp", "int64"),
    Field("write_timestamp", "int64"),
    Array("state_batches", fields=[
        Field("first_offset", "int64"),
        Field("last_offset", "int64"),
        Field("delivery_state", "int8"),
        Field("delivery_count", "int16"),
    ]),
])
