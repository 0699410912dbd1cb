"""Consumer group membership and committed offsets."""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response, Struct

# JoinGroup, API key 11. v1: rebalance_timeout_ms. v4: a new member is first
# told MEMBER_ID_REQUIRED and rejoins with its id (KIP-394). v5:
# group_instance_id for static membership (KIP-345). v6: flexible. v7:
# protocol_type in the response (KIP-559). v8: reason (KIP-800). v9:
# skip_assignment (KIP-814).
JoinGroupRequest = Request(ApiKey.JOIN_GROUP, "0-9", flexible="6+", fields=[
    Field("group_id", "string"),
    Field("session_timeout_ms", "int32"),
    Field("rebalance_timeout_ms", "int32", "1+", default=-1),
    Field("member_id", "string"),
    Field("group_instance_id", "string", "5+", nullable="5+"),
    Field("protocol_type", "string"),
    Array("protocols", fields=[
        Field("name", "string"),
        Field("metadata", "bytes"),
    ]),
    Field("reason", "string", "8+", nullable="8+"),
])
JoinGroupResponse = Response(ApiKey.JOIN_GROUP, "0-9", flexible="6+", fields=[
    Field("throttle_time_ms", "int32", "2+"),
    Field("error_code", "int16"),
    Field("generation_id", "int32", default=-1),
    Field("protocol_type", "string", "7+", nullable="7+"),
    Field("protocol_name", "string", nullable="7+"),
    Field("leader", "string"),
    Field("skip_assignment", "bool", "9+"),
    Field("member_id", "string"),
    Array("members", fields=[
        Field("member_id", "string"),
        Field("group_instance_id", "string", "5+", nullable="5+"),
        Field("metadata", "bytes"),
    ]),
])

# SyncGroup, API key 14. v3: group_instance_id. v4: flexible. v5:
# protocol_type and protocol_name on both sides (KIP-559).
SyncGroupRequest = Request(ApiKey.SYNC_GROUP, "0-5", flexible="4+", fields=[
    Field("group_id", "string"),
    Field("generation_id", "int32"),
    Field("member_id", "string"),
    Field("group_instance_id", "string", "3+", nullable="3+"),
    Field("protocol_type", "string", "5+", nullable="5+"),
    Field("protocol_name", "string", "5+", nullable="5+"),
    Array("assignments", fields=[
        Field("member_id", "string"),
        Field("assignment", "bytes"),
    ]),
])
SyncGroupResponse = Response(ApiKey.SYNC_GROUP, "0-5", flexible="4+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16"),
    Field("protocol_type", "string", "5+", nullable="5+"),
    Field("protocol_name", "string", "5+", nullable="5+"),
    Field("assignment", "bytes"),
])

# Heartbeat, API key 12. v1: throttle_time_ms. v3: group_instance_id. v4:
# flexible.
HeartbeatRequest = Request(ApiKey.HEARTBEAT, "0-4", flexible="4+", fields=[
    Field("group_id", "string"),
    Field("generation_id", "int32"),
    Field("member_id", "string"),
    Field("group_instance_id", "string", "3+", nullable="3+"),
])
HeartbeatResponse = Response(ApiKey.HEARTBEAT, "0-4", flexible="4+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16"),
])

# LeaveGroup, API key 13. v3: batched members with group_instance_id replace
# member_id (KIP-345). v4: flexible. v5: reason (KIP-800).
LeaveGroupRequest = Request(ApiKey.LEAVE_GROUP, "0-5", flexible="4+", fields=[
    Field("group_id", "string"),
    Field("member_id", "string", "0-2"),
    Array("members", "3+", fields=[
        Field("member_id", "string"),
        Field("group_instance_id", "string", nullable="0+"),
        Field("reason", "string", "5+", nullable="5+"),
    ]),
])
LeaveGroupResponse = Response(ApiKey.LEAVE_GROUP, "0-5", flexible="4+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16"),
    Array("members", "3+", fields=[
        Field("member_id", "string"),
        Field("group_instance_id", "string", nullable="0+"),
        Field("error_code", "int16"),
    ]),
])

# OffsetCommit, API key 8. v1: generation_id, member_id, per-partition
# commit_timestamp. v2: retention time replaces commit_timestamp. v3:
# throttle_time_ms. v5: retention_time_ms removed. v6: committed_leader_epoch.
# v7: group_instance_id. v8: flexible. v9: usable with the KIP-848 consumer
# protocol.
OffsetCommitRequest = Request(ApiKey.OFFSET_COMMIT, "0-9", flexible="8+", fields=[
    Field("group_id", "string"),
    Field("generation_id_or_member_epoch", "int32", "1+", default=-1),
    Field("member_id", "string", "1+"),
    Field("group_instance_id", "string", "7+", nullable="7+"),
    Field("retention_time_ms", "int64", "2-4", default=-1),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("committed_offset", "int64"),
            Field("committed_leader_epoch", "int32", "6+", default=-1),
            Field("commit_timestamp", "int64", "1", default=-1),
            Field("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
])
OffsetCommitResponse = Response(ApiKey.OFFSET_COMMIT, "0-9", flexible="8+", fields=[
    Field("throttle_time_ms", "int32", "3+"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
        ]),
    ]),
])

# OffsetFetch, API key 9. v1: offsets from __consumer_offsets rather than
# ZooKeeper. v2: null topics means all topics; top-level error_code. v3:
# throttle_time_ms. v5: committed_leader_epoch. v6: flexible. v7:
# require_stable (KIP-447). v8: several groups per request (KIP-709). v9:
# member_id and member_epoch (KIP-848).
OffsetFetchRequest = Request(ApiKey.OFFSET_FETCH, "0-9", flexible="6+", fields=[
    Field("group_id", "string", "0-7"),
    Array("topics", "0-7", nullable="2-7", fields=[
        Field("name", "string"),
        Field("partition_indexes", "[]int32"),
    ]),
    Array("groups", "8+", fields=[
        Field("group_id", "string"),
        Field("member_id", "string", "9+", nullable="9+"),
        Field("member_epoch", "int32", "9+", default=-1),
        Array("topics", nullable="0+", fields=[
            Field("name", "string"),
            Field("partition_indexes", "[]int32"),
        ]),
    ]),
    Field("require_stable", "bool", "7+"),
])
OffsetFetchResponse = Response(ApiKey.OFFSET_FETCH, "0-9", flexible="6+", fields=[
    Field("throttle_time_ms", "int32", "3+"),
    Array("topics", "0-7", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("committed_offset", "int64"),
            Field("committed_leader_epoch", "int32", "5-7", default=-1),
            Field("metadata", "string", nullable="0+"),
            Field("error_code", "int16"),
        ]),
    ]),
    Field("error_code", "int16", "2-7"),
    Array("groups", "8+", fields=[
        Field("group_id", "string"),
        Array("topics", fields=[
            Field("name", "string"),
            Array("partitions", fields=[
                Field("partition_index", "int32"),
                Field("committed_offset", "int64"),
                Field("committed_leader_epoch", "int32", default=-1),
                Field("metadata", "string", nullable="0+"),
                Field("error_code", "int16"),
            ]),
        ]),
        Field("error_code", "int16"),
    ]),
])

# OffsetDelete, API key 47. Deletes committed offsets of topics a group no
# longer consumes (KIP-496).
OffsetDeleteRequest = Request(ApiKey.OFFSET_DELETE, "0", flexible="none", fields=[
    Field("group_id", "string"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
        ]),
    ]),
])
OffsetDeleteResponse = Response(ApiKey.OFFSET_DELETE, "0", flexible="none", fields=[
    Field("error_code", "int16"),
    Field("throttle_time_ms", "int32"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
        ]),
    ]),
])

# DescribeGroups, API key 15. v1: throttle_time_ms. v3: authorized operations
# (KIP-430). v4: group_instance_id of members. v5: flexible. v6: a group that
# does not exist is GROUP_ID_NOT_FOUND with an error_message (KIP-1043), not
# a Dead group without members.
DescribeGroupsRequest = Request(ApiKey.DESCRIBE_GROUPS, "0-6", flexible="5+", fields=[
    Field("groups", "[]string"),
    Field("include_authorized_operations", "bool", "3+"),
])
DescribeGroupsResponse = Response(ApiKey.DESCRIBE_GROUPS, "0-6", flexible="5+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Array("groups", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", "6+", nullable="6+"),
        Field("group_id", "string"),
        Field("group_state", "string"),
        Field("protocol_type", "string"),
        Field("protocol_data", "string"),
        Array("members", fields=[
            Field("member_id", "string"),
            Field("group_instance_id", "string", "4+", nullable="4+"),
            Field("client_id", "string"),
            Field("client_host", "string"),
            Field("member_metadata", "bytes"),
            Field("member_assignment", "bytes"),
        ]),
        Field("authorized_operations", "int32", "3+", default=-2147483648),
    ]),
])

# ListGroups, API key 16. v1: throttle_time_ms. v3: flexible. v4:
# states_filter and group_state (KIP-518). v5: types_filter and group_type
# ("classic" or "consumer", KIP-848).
ListGroupsRequest = Request(ApiKey.LIST_GROUPS, "0-5", flexible="3+", fields=[
    Field("states_filter", "[]string", "4+"),
    Field("types_filter", "[]string", "5+"),
])
ListGroupsResponse = Response(ApiKey.LIST_GROUPS, "0-5", flexible="3+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16"),
    Array("groups", fields=[
        Field("group_id", "string"),
        Field("protocol_type", "string"),
        Field("group_state", "string", "4+"),
        Field("group_type", "string", "5+"),
    ]),
])

# DeleteGroups, API key 42. v1: same body; the broker answers before
# throttling on quota violation (KIP-219). v2: flexible.
DeleteGroupsRequest = Request(ApiKey.DELETE_GROUPS, "0-2", flexible="2+", fields=[
    Field("groups_names", "[]string"),
])
DeleteGroupsResponse = Response(ApiKey.DELETE_GROUPS, "0-2", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("results", fields=[
        Field("group_id", "string"),
        Field("error_code", "int16"),
    ]),
])


# KIP-848's messages and records carry partitions as [{topic_id, partitions}];
# both sides keep them as a set of (topic id, partition).
def partitions_by_topic_id(tps) -> list:
    """(topic id, partition) pairs as [{"topic_id", "partitions"}], sorted."""
    by: dict = {}
    for tid, p in tps:
        by.setdefault(tid, []).append(p)
    return [{"topic_id": tid, "partitions": sorted(ps)}
            for tid, ps in sorted(by.items(), key=lambda kv: str(kv[0]))]


def topic_id_partitions(topic_partitions) -> frozenset:
    """[{"topic_id", "partitions"}] (or None) as a frozenset of (topic id, partition)."""
    return frozenset((t["topic_id"], p) for t in topic_partitions or () for p in t["partitions"])


# ConsumerGroupHeartbeat, API key 68 (KIP-848): the next-generation consumer
# protocol's one request. Null fields mean "unchanged since the last
# heartbeat". Partitions are named by topic id. v1: subscribed_topic_regex,
# evaluated on the broker.
_TOPIC_PARTITIONS = [Field("topic_id", "uuid"), Field("partitions", "[]int32")]
ConsumerGroupHeartbeatRequest = Request(ApiKey.CONSUMER_GROUP_HEARTBEAT, "0-1", flexible="0+",
                                        fields=[
    Field("group_id", "string"),
    Field("member_id", "string"),
    Field("member_epoch", "int32"),
    Field("instance_id", "string", nullable="0+"),
    Field("rack_id", "string", nullable="0+"),
    Field("rebalance_timeout_ms", "int32", default=-1),
    Field("subscribed_topic_names", "[]string", nullable="0+"),
    Field("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
    Field("server_assignor", "string", nullable="0+"),
    Array("topic_partitions", nullable="0+", fields=_TOPIC_PARTITIONS),
])
ConsumerGroupHeartbeatResponse = Response(ApiKey.CONSUMER_GROUP_HEARTBEAT, "0-1", flexible="0+",
                                          fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Field("member_id", "string", nullable="0+"),
    Field("member_epoch", "int32"),
    Field("heartbeat_interval_ms", "int32"),
    Struct("assignment", nullable="0+", fields=[
        Array("topic_partitions", fields=_TOPIC_PARTITIONS),
    ]),
])

# ConsumerGroupDescribe, API key 69 (KIP-848): members with their epochs,
# current and target assignments.
_DESCRIBED_ASSIGNMENT = [Array("topic_partitions", fields=[
    Field("topic_id", "uuid"), Field("topic_name", "string"), Field("partitions", "[]int32")])]
# v1 (Kafka 4.0, KIP-1099): each member's type (classic or consumer protocol).
ConsumerGroupDescribeRequest = Request(ApiKey.CONSUMER_GROUP_DESCRIBE, "0-1", flexible="0+", fields=[
    Field("group_ids", "[]string"),
    Field("include_authorized_operations", "bool"),
])
ConsumerGroupDescribeResponse = Response(ApiKey.CONSUMER_GROUP_DESCRIBE, "0-1", flexible="0+",
                                         fields=[
    Field("throttle_time_ms", "int32"),
    Array("groups", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("group_id", "string"),
        Field("group_state", "string"),
        Field("group_epoch", "int32"),
        Field("assignment_epoch", "int32"),
        Field("assignor_name", "string"),
        Array("members", fields=[
            Field("member_id", "string"),
            Field("instance_id", "string", nullable="0+"),
            Field("rack_id", "string", nullable="0+"),
            Field("member_epoch", "int32"),
            Field("client_id", "string"),
            Field("client_host", "string"),
            Field("subscribed_topic_names", "[]string"),
            Field("subscribed_topic_regex", "string", nullable="0+"),
            Struct("assignment", fields=_DESCRIBED_ASSIGNMENT),
            Struct("target_assignment", fields=_DESCRIBED_ASSIGNMENT),
            Field("member_type", "int8", "1+", default=-1),   # 0 classic, 1 consumer
        ]),
        Field("authorized_operations", "int32", default=-2147483648),
    ]),
])
