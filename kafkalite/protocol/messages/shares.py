"""Share groups (KIP-932, Kafka's queues): membership, fetch and acknowledgement.

ShareGroupHeartbeat and ShareGroupDescribe go to the group coordinator
(server/share/share_group.py); ShareFetch and ShareAcknowledge to the leader of
each partition (server/replica/share_partition.py). Version 0 of each as Kafka 4.0
defined them (early access) and version 1, the stable versions of Kafka 4.1
(librdkafka's ShareConsumer asks for v1 only): ShareGroupHeartbeat,
ShareGroupDescribe and ShareAcknowledge v1 are v0 unchanged; ShareFetch v1
replaces each partition's PartitionMaxBytes with a request-wide MaxRecords
and BatchSize, and answers the AcquisitionLockTimeoutMs. ``records`` in a
ShareFetchResponse partition holds whole record batches; ``acquired_records``
says which of their offsets this member holds (the client drops the rest).
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response, Struct

# Acknowledge types in AcknowledgementBatch.acknowledge_types (one for the
# whole range, or one per offset).
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3

# ShareGroupHeartbeat, API key 76: join with epoch 0, leave with -1; null
# fields mean "unchanged since the last heartbeat". Partitions by topic id.
_TOPIC_PARTITIONS = [Field("topic_id", "uuid"), Field("partitions", "[]int32")]
ShareGroupHeartbeatRequest = Request(ApiKey.SHARE_GROUP_HEARTBEAT, "0-1", flexible="0+", fields=[
    Field("group_id", "string"),
    Field("member_id", "string"),
    Field("member_epoch", "int32"),
    Field("rack_id", "string", nullable="0+"),
    Field("subscribed_topic_names", "[]string", nullable="0+"),
])
ShareGroupHeartbeatResponse = Response(ApiKey.SHARE_GROUP_HEARTBEAT, "0-1", flexible="0+", fields=[
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

# ShareGroupDescribe, API key 77.
ShareGroupDescribeRequest = Request(ApiKey.SHARE_GROUP_DESCRIBE, "0-1", flexible="0+", fields=[
    Field("group_ids", "[]string"),
    Field("include_authorized_operations", "bool"),
])
ShareGroupDescribeResponse = Response(ApiKey.SHARE_GROUP_DESCRIBE, "0-1", flexible="0+", fields=[
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
            Field("rack_id", "string", nullable="0+"),
            Field("member_epoch", "int32"),
            Field("client_id", "string"),
            Field("client_host", "string"),
            Field("subscribed_topic_names", "[]string"),
            Struct("assignment", fields=[Array("topic_partitions", fields=[
                Field("topic_id", "uuid"), Field("topic_name", "string"),
                Field("partitions", "[]int32")])]),
        ]),
        Field("authorized_operations", "int32", default=-2147483648),
    ]),
])

_ACKNOWLEDGEMENT_BATCHES = Array("acknowledgement_batches", fields=[
    Field("first_offset", "int64"),
    Field("last_offset", "int64"),
    Field("acknowledge_types", "[]int8"),
])
_CURRENT_LEADER = Struct("current_leader", fields=[
    Field("leader_id", "int32"),
    Field("leader_epoch", "int32"),
])
_NODE_ENDPOINTS = Array("node_endpoints", fields=[
    Field("node_id", "int32"),
    Field("host", "string"),
    Field("port", "int32"),
    Field("rack", "string", nullable="0+"),
])

# ShareFetch, API key 78: acquires records for the member (and carries the
# acknowledgements of what it acquired before). share_session_epoch: 0 opens
# a share session, -1 closes it, otherwise the next epoch of the session.
ShareFetchRequest = Request(ApiKey.SHARE_FETCH, "0-1", flexible="0+", fields=[
    Field("group_id", "string", nullable="0+"),
    Field("member_id", "string", nullable="0+"),
    Field("share_session_epoch", "int32"),
    Field("max_wait_ms", "int32"),
    Field("min_bytes", "int32"),
    Field("max_bytes", "int32", default=0x7FFFFFFF),
    # v1: records to acquire in all (0: acknowledge only, fetch nothing)
    # and the batch size the client prefers (advice: acquired ranges follow
    # the log's batches)
    Field("max_records", "int32", "1+"),
    Field("batch_size", "int32", "1+"),
    Array("topics", fields=[
        Field("topic_id", "uuid"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("partition_max_bytes", "int32", "0"),
            _ACKNOWLEDGEMENT_BATCHES,
        ]),
    ]),
    Array("forgotten_topics_data", fields=[
        Field("topic_id", "uuid"),
        Field("partitions", "[]int32"),
    ]),
])
ShareFetchResponse = Response(ApiKey.SHARE_FETCH, "0-1", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Field("acquisition_lock_timeout_ms", "int32", "1+"),
    Array("responses", fields=[
        Field("topic_id", "uuid"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
            Field("acknowledge_error_code", "int16"),
            Field("acknowledge_error_message", "string", nullable="0+"),
            _CURRENT_LEADER,
            Field("records", "records", nullable="0"),      # v1: never null (KAFKA-18889)
            Array("acquired_records", fields=[
                Field("first_offset", "int64"),
                Field("last_offset", "int64"),
                Field("delivery_count", "int16"),
            ]),
        ]),
    ]),
    _NODE_ENDPOINTS,
])

# ShareAcknowledge, API key 79: acknowledgements without fetching.
ShareAcknowledgeRequest = Request(ApiKey.SHARE_ACKNOWLEDGE, "0-1", flexible="0+", fields=[
    Field("group_id", "string", nullable="0+"),
    Field("member_id", "string", nullable="0+"),
    Field("share_session_epoch", "int32"),
    Array("topics", fields=[
        Field("topic_id", "uuid"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            _ACKNOWLEDGEMENT_BATCHES,
        ]),
    ]),
])
ShareAcknowledgeResponse = Response(ApiKey.SHARE_ACKNOWLEDGE, "0-1", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("responses", fields=[
        Field("topic_id", "uuid"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
            _CURRENT_LEADER,
        ]),
    ]),
    _NODE_ENDPOINTS,
])

# DescribeShareGroupOffsets, API key 90: each share-partition's start offset
# (-1 when the group has no state for the partition); null topics: every
# partition the group has state for. Served by the group coordinator.
DescribeShareGroupOffsetsRequest = Request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "0",
                                           flexible="0+", fields=[
    Array("groups", fields=[
        Field("group_id", "string"),
        Array("topics", nullable="0+", fields=[
            Field("topic_name", "string"),
            Field("partitions", "[]int32"),
        ]),
    ]),
])
DescribeShareGroupOffsetsResponse = Response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, "0",
                                             flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("groups", fields=[
        Field("group_id", "string"),
        Array("topics", fields=[
            Field("topic_name", "string"),
            Field("topic_id", "uuid"),
            Array("partitions", fields=[
                Field("partition_index", "int32"),
                Field("start_offset", "int64"),
                Field("leader_epoch", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+"),
            ]),
        ]),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])

# DeleteShareGroupOffsets, API key 92 (Kafka 4.1): forget the share-partition
# state of whole topics (the group must have no members); one result a topic.
DeleteShareGroupOffsetsRequest = Request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, "0",
                                         flexible="0+", fields=[
    Field("group_id", "string"),
    Array("topics", fields=[
        Field("topic_name", "string"),
    ]),
])
DeleteShareGroupOffsetsResponse = Response(ApiKey.DELETE_SHARE_GROUP_OFFSETS, "0",
                                           flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("responses", fields=[
        Field("topic_name", "string"),
        Field("topic_id", "uuid"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])

# AlterShareGroupOffsets, API key 91: set share-partitions' start offsets
# (the group must have no members).
AlterShareGroupOffsetsRequest = Request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, "0",
                                        flexible="0+", fields=[
    Field("group_id", "string"),
    Array("topics", fields=[
        Field("topic_name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("start_offset", "int64"),
        ]),
    ]),
])
AlterShareGroupOffsetsResponse = Response(ApiKey.ALTER_SHARE_GROUP_OFFSETS, "0",
                                          flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("responses", fields=[
        Field("topic_name", "string"),
        Field("topic_id", "uuid"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
        ]),
    ]),
])
