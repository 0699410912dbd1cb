"""The record formats of the internal ``__consumer_offsets`` topic.

Every record's key and value starts with an int16 version, as Kafka's do,
so a log written by kafkalite's group coordinator reads the same as one
written by Kafka's (and ``kafkalite dump-log`` can show it):

    key v0/v1  OffsetCommitKey    -> value OffsetCommitValue (v3 written)
    key v2     GroupMetadataKey   -> value GroupMetadataValue (v3 written)
    key v3     (group)            -> ConsumerGroupMetadataValue (KIP-848)
    key v5     (group, member)    -> ConsumerGroupMemberMetadataValue
    key v6     (group)            -> ConsumerGroupTargetAssignmentMetadataValue
    key v7     (group, member)    -> ConsumerGroupTargetAssignmentMemberValue
    key v8     (group, member)    -> ConsumerGroupCurrentMemberAssignmentValue

A null value is a tombstone: the committed offset, or the whole group, is
gone (deleted or expired), and compaction drops the key in time.
"""
from __future__ import annotations

from kafkalite.protocol.schema import Array, Data, Field, Struct

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

# ---- KIP-848 consumer groups ----------------------------------------------------------------
# A consumer group's state as Kafka's group coordinator writes it (key
# versions 3-8, every value flexible v0): the group epoch, each member's
# metadata, the target assignment (its epoch and each member's partitions)
# and each member's current assignment. Version 4 (the subscribed topics'
# metadata) is not written: it is recomputed from the cluster metadata.
CONSUMER_GROUP_METADATA_KEY_VERSION = 3
CONSUMER_GROUP_MEMBER_METADATA_KEY_VERSION = 5
CONSUMER_GROUP_TARGET_METADATA_KEY_VERSION = 6
CONSUMER_GROUP_TARGET_MEMBER_KEY_VERSION = 7
CONSUMER_GROUP_CURRENT_ASSIGNMENT_KEY_VERSION = 8
CONSUMER_GROUP_KEY_VERSIONS = (3, 5, 6, 7, 8)

# keys 3 and 6 name the group; keys 5, 7 and 8 a member of it
ConsumerGroupKey = Data("ConsumerGroupKey", "3-8", fields=[
    Field("group_id", "string"),
])
ConsumerGroupMemberKey = Data("ConsumerGroupMemberKey", "3-8", fields=[
    Field("group_id", "string"),
    Field("member_id", "string"),
])
CONSUMER_GROUP_MEMBER_KEY_VERSIONS = (5, 7, 8)

ConsumerGroupMetadataValue = Data("ConsumerGroupMetadataValue", "0", flexible="0+", fields=[
    Field("epoch", "int32"),
])

_TOPIC_PARTITIONS = [Field("topic_id", "uuid"), Field("partitions", "[]int32")]

# ClassicMemberMetadata: Kafka's is a nullable tagged struct; kafkalite's
# schema language has no nullable tagged structs, so it is written only for
# classic members, without Kafka's null marker (empty protocols: a
# consumer-protocol member).
ConsumerGroupMemberMetadataValue = Data("ConsumerGroupMemberMetadataValue", "0", flexible="0+",
                                        fields=[
    Field("instance_id", "string", nullable="0+"),
    Field("rack_id", "string", nullable="0+"),
    Field("client_id", "string"),
    Field("client_host", "string"),
    Field("subscribed_topic_names", "[]string"),
    Field("subscribed_topic_regex", "string", nullable="0+"),
    Field("rebalance_timeout_ms", "int32", default=-1),
    Field("server_assignor", "string", nullable="0+"),
    Struct("classic_member_metadata", tag=0, fields=[
        Field("session_timeout_ms", "int32"),
        Array("supported_protocols", fields=[
            Field("name", "string"),
            Field("metadata", "bytes"),
        ]),
    ]),
])

ConsumerGroupTargetAssignmentMetadataValue = Data(
    "ConsumerGroupTargetAssignmentMetadataValue", "0", flexible="0+", fields=[
        Field("assignment_epoch", "int32"),
    ])

ConsumerGroupTargetAssignmentMemberValue = Data(
    "ConsumerGroupTargetAssignmentMemberValue", "0", flexible="0+", fields=[
        Array("topic_partitions", fields=_TOPIC_PARTITIONS),
    ])

ConsumerGroupCurrentMemberAssignmentValue = Data(
    "ConsumerGroupCurrentMemberAssignmentValue", "0", flexible="0+", fields=[
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Array("assigned_partitions", fields=_TOPIC_PARTITIONS),
        Array("partitions_pending_revocation", fields=_TOPIC_PARTITIONS),
    ])
