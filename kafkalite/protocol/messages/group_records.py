"""The record formats of the internal ``__consumer_offsets`` topic.

Every record's key and value starts with an int16 version, as Kafka's do,
so a log written by kafkalite's group coordinator reads the same as one
written by Kafka's (and ``kafkalite dump-log`` can show it):

    key v0/v1  OffsetCommitKey    -> value OffsetCommitValue (v3 written)
    key v2     GroupMetadataKey   -> value GroupMetadataValue (v3 written)

A null value is a tombstone: the committed offset, or the whole group, is
gone (deleted or expired), and compaction drops the key in time.
"""
from __future__ import annotations

from kafkalite.protocol.schema import Array, Data, Field

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2

OffsetCommitKey = Data("OffsetCommitKey", "0-1", fields=[
    Field("group", "string"),
    Field("topic", "string"),
    Field("partition", "int32"),
])

# v1: expire_timestamp (dropped again in v2, KIP-211). v3: leader_epoch.
OffsetCommitValue = Data("OffsetCommitValue", "0-3", fields=[
    Field("offset", "int64"),
    Field("leader_epoch", "int32", "3+", default=-1),
    Field("metadata", "string"),
    Field("commit_timestamp", "int64"),
    Field("expire_timestamp", "int64", "1", default=-1),
])

GroupMetadataKey = Data("GroupMetadataKey", "2", fields=[
    Field("group", "string"),
])

# v1: rebalance_timeout. v2: current_state_timestamp. v3: group_instance_id.
GroupMetadataValue = Data("GroupMetadataValue", "0-3", fields=[
    Field("protocol_type", "string"),
    Field("generation", "int32"),
    Field("protocol", "string", nullable="0+"),
    Field("leader", "string", nullable="0+"),
    Field("current_state_timestamp", "int64", "2+", default=-1),
    Array("members", fields=[
        Field("member_id", "string"),
        Field("group_instance_id", "string", "3+", nullable="3+"),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("rebalance_timeout", "int32", "1+", default=-1),
        Field("session_timeout", "int32"),
        Field("subscription", "bytes"),
        Field("assignment", "bytes"),
    ]),
])
