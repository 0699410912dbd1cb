"""Cluster and topic metadata, coordinator discovery."""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response, Struct

# Metadata, API key 3. v0: an empty topics array means all topics; v1+: null
# means all, empty means none. v1: rack, controller_id, is_internal. v2:
# cluster_id. v3: throttle_time_ms. v4: allow_auto_topic_creation. v5:
# offline_replicas. v7: leader_epoch. v8: authorized operations (KIP-430). v9:
# flexible. v10: topic ids (KIP-516). v11: cluster authorized operations moved
# to DescribeCluster (KIP-700). v12: topics may be named by id only.
MetadataRequest = Request(ApiKey.METADATA, "0-13", flexible="9+", fields=[
    Array("topics", nullable="1+", fields=[
        Field("topic_id", "uuid", "10+"),
        Field("name", "string", nullable="10+"),
    ]),
    Field("allow_auto_topic_creation", "bool", "4+", default=True),
    Field("include_cluster_authorized_operations", "bool", "8-10"),
    Field("include_topic_authorized_operations", "bool", "8+"),
])
MetadataResponse = Response(ApiKey.METADATA, "0-13", flexible="9+", fields=[
    Field("throttle_time_ms", "int32", "3+"),
    Array("brokers", fields=[
        Field("node_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("rack", "string", "1+", nullable="1+"),
    ]),
    Field("cluster_id", "string", "2+", nullable="2+"),
    Field("controller_id", "int32", "1+", default=-1),
    Array("topics", fields=[
        Field("error_code", "int16"),
        Field("name", "string", nullable="12+"),
        Field("topic_id", "uuid", "10+"),
        Field("is_internal", "bool", "1+"),
        Array("partitions", fields=[
            Field("error_code", "int16"),
            Field("partition_index", "int32"),
            Field("leader_id", "int32"),
            Field("leader_epoch", "int32", "7+", default=-1),
            Field("replica_nodes", "[]int32"),
            Field("isr_nodes", "[]int32"),
            Field("offline_replicas", "[]int32", "5+"),
        ]),
        Field("topic_authorized_operations", "int32", "8+", default=-2147483648),
    ]),
    Field("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
    Field("error_code", "int16", "13+"),
])

# FindCoordinator, API key 10. v1: key_type (group or transaction),
# error_message. v3: flexible. v4: batched coordinator_keys / coordinators
# replace key / node (KIP-699). v5: the client can take TRANSACTION_ABORTABLE
# (KIP-890; the bodies are v4's). v6: key_type 2, the share coordinator of a
# share-partition, keyed "groupId:topicId:partition" (KIP-932); below v6
# that key type is INVALID_REQUEST.
FindCoordinatorRequest = Request(ApiKey.FIND_COORDINATOR, "0-6", flexible="3+", fields=[
    Field("key", "string", "0-3"),
    Field("key_type", "int8", "1+"),
    Field("coordinator_keys", "[]string", "4+"),
])
FindCoordinatorResponse = Response(ApiKey.FIND_COORDINATOR, "0-6", flexible="3+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16", "0-3"),
    Field("error_message", "string", "1-3", nullable="1-3"),
    Field("node_id", "int32", "0-3"),
    Field("host", "string", "0-3"),
    Field("port", "int32", "0-3"),
    Array("coordinators", "4+", fields=[
        Field("key", "string"),
        Field("node_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])

# DescribeCluster, API key 60. Flexible from v0 (KIP-700). v1: endpoint_type
# (KIP-919). v2: include_fenced_brokers asks for the fenced brokers too, each
# broker with is_fenced (KIP-1073).
DescribeClusterRequest = Request(ApiKey.DESCRIBE_CLUSTER, "0-2", flexible="0+", fields=[
    Field("include_cluster_authorized_operations", "bool"),
    Field("endpoint_type", "int8", "1+", default=1),
    Field("include_fenced_brokers", "bool", "2+"),
])
DescribeClusterResponse = Response(ApiKey.DESCRIBE_CLUSTER, "0-2", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Field("endpoint_type", "int8", "1+", default=1),
    Field("cluster_id", "string"),
    Field("controller_id", "int32", default=-1),
    Array("brokers", fields=[
        Field("broker_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("rack", "string", nullable="0+"),
        Field("is_fenced", "bool", "2+"),
    ]),
    Field("cluster_authorized_operations", "int32", default=-2147483648),
])


def _replica_state() -> list:
    # a voter or observer of the quorum (Kafka's common struct ReplicaState)
    return [
        Field("replica_id", "int32"),
        Field("replica_directory_id", "uuid", "2+"),
        Field("log_end_offset", "int64"),
        Field("last_fetch_timestamp", "int64", "1+", default=-1),
        Field("last_caught_up_timestamp", "int64", "1+", default=-1),
    ]


# DescribeQuorum, API key 55 (KIP-595): the metadata quorum, topic
# __cluster_metadata partition 0, its leader, voters and observers. Flexible
# from v0. v1: last_fetch_timestamp and last_caught_up_timestamp (KIP-836).
# v2: error messages, each replica's directory id and the voters' listeners
# (KIP-853). kafkalite has no KRaft quorum: its controller is the holder of
# the controller lease (server/controller/controller.py answers).
DescribeQuorumRequest = Request(ApiKey.DESCRIBE_QUORUM, "0-2", flexible="0+", fields=[
    Array("topics", fields=[
        Field("topic_name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
        ]),
    ]),
])
DescribeQuorumResponse = Response(ApiKey.DESCRIBE_QUORUM, "0-2", flexible="0+", fields=[
    Field("error_code", "int16"),
    Field("error_message", "string", "2+", nullable="2+"),
    Array("topics", fields=[
        Field("topic_name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", "2+", nullable="2+"),
            Field("leader_id", "int32"),
            Field("leader_epoch", "int32"),
            Field("high_watermark", "int64"),
            Array("current_voters", fields=_replica_state()),
            Array("observers", fields=_replica_state()),
        ]),
    ]),
    Array("nodes", "2+", fields=[
        Field("node_id", "int32"),
        Array("listeners", fields=[
            Field("name", "string"),
            Field("host", "string"),
            Field("port", "uint16"),
        ]),
    ]),
])


# KIP-966: Metadata's topic descriptions, paged (at most
# ``response_partition_limit`` partitions, resumed from a cursor).
_CURSOR = [Field("topic_name", "string"), Field("partition_index", "int32")]
DescribeTopicPartitionsRequest = Request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, "0", flexible="0+",
                                         fields=[
    Array("topics", fields=[Field("name", "string")]),
    Field("response_partition_limit", "int32", default=2000),
    Struct("cursor", nullable="0+", fields=_CURSOR),
])
DescribeTopicPartitionsResponse = Response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, "0", flexible="0+",
                                           fields=[
    Field("throttle_time_ms", "int32"),
    Array("topics", fields=[
        Field("error_code", "int16"),
        Field("name", "string", nullable="0+"),
        Field("topic_id", "uuid"),
        Field("is_internal", "bool"),
        Array("partitions", fields=[
            Field("error_code", "int16"),
            Field("partition_index", "int32"),
            Field("leader_id", "int32"),
            Field("leader_epoch", "int32", default=-1),
            Field("replica_nodes", "[]int32"),
            Field("isr_nodes", "[]int32"),
            Field("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
            Field("last_known_elr", "[]int32", nullable="0+", default=None),
            Field("offline_replicas", "[]int32"),
        ]),
        Field("topic_authorized_operations", "int32", default=-2147483648),
    ]),
    Struct("next_cursor", nullable="0+", fields=_CURSOR),
])
