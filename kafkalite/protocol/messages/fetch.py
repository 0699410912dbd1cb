"""Fetch and the offset lookups a consumer or follower makes around it.

``records`` in a FetchResponse partition holds record batches; over
kafkalite's ZeroMQ transport it travels in its own frame.

Two tagged fields of kafkalite's own (tags from schema.OWN_TAGS_FROM, which
a Kafka peer skips) let a follower on the same host as its leader read the
records from the leader's segment file instead of receiving them:
``local_host`` in the request names the follower's host (its kernel boot
and mount namespace: storage/local_region.py), and a leader on that host
answers a follower's partition with ``local_region`` (the segment file's
path, device, inode, and the byte range it would have sent) and empty
``records``. The follower checks the file and the bytes it reads before
appending them, and fetches over the wire when anything does not match
(server/replica/replica_fetcher.py).
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import OWN_TAGS_FROM, Array, Field, Request, Response, Struct

# Fetch, API key 1. v3: max_bytes, partitions served in request order. v4:
# isolation_level, aborted transactions. v5: log_start_offset. v7: fetch
# sessions (KIP-227). v9: current_leader_epoch (KIP-320). v10: zstd. v11:
# rack_id and preferred_read_replica (KIP-392). v12: flexible,
# last_fetched_epoch and diverging epochs (KIP-595). v13: topic ids replace
# topic names (KIP-516). v14: may return OFFSET_MOVED_TO_TIERED_STORAGE. v15:
# replica_state replaces replica_id (KIP-903). v16: node_endpoints for leader
# discovery (KIP-951). v17: a follower names its log directory
# (replica_directory_id, KIP-853); only KRaft's voters read it, so a broker
# ignores it, as Kafka's does; the response is v16's. v18: a follower tells
# the high watermark it knows (KIP-1166, tagged; a consumer sends none), which
# lets Kafka's leader answer it sooner; kafkalite's leader reads it as v17's
# request, the response is v16's again.
FetchRequest = Request(ApiKey.FETCH, "0-18", flexible="12+", fields=[
    Field("cluster_id", "string", "12+", nullable="12+", tag=0),
    Field("replica_id", "int32", "0-14", default=-1),
    Struct("replica_state", "15+", tag=1, fields=[
        Field("replica_id", "int32", default=-1),
        Field("replica_epoch", "int64", default=-1),
    ]),
    Field("max_wait_ms", "int32"),
    Field("min_bytes", "int32"),
    Field("max_bytes", "int32", "3+", default=2147483647),
    Field("isolation_level", "int8", "4+"),
    Field("session_id", "int32", "7+"),
    Field("session_epoch", "int32", "7+", default=-1),
    Array("topics", fields=[
        Field("topic", "string", "0-12"),
        Field("topic_id", "uuid", "13+"),
        Array("partitions", fields=[
            Field("partition", "int32"),
            Field("current_leader_epoch", "int32", "9+", default=-1),
            Field("fetch_offset", "int64"),
            Field("last_fetched_epoch", "int32", "12+", default=-1),
            Field("log_start_offset", "int64", "5+", default=-1),
            Field("partition_max_bytes", "int32"),
            Field("replica_directory_id", "uuid", "17+", tag=0),
            Field("high_watermark", "int64", "18+", tag=1, default=9223372036854775807),
        ]),
    ]),
    Array("forgotten_topics_data", "7+", fields=[
        Field("topic", "string", "7-12"),
        Field("topic_id", "uuid", "13+"),
        Field("partitions", "[]int32"),
    ]),
    Field("rack_id", "string", "11+"),
    Field("local_host", "string", "12+", nullable="12+", tag=OWN_TAGS_FROM),
])
FetchResponse = Response(ApiKey.FETCH, "0-18", flexible="12+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Field("error_code", "int16", "7+"),
    Field("session_id", "int32", "7+"),
    Array("responses", fields=[
        Field("topic", "string", "0-12"),
        Field("topic_id", "uuid", "13+"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("high_watermark", "int64"),
            Field("last_stable_offset", "int64", "4+", default=-1),
            Field("log_start_offset", "int64", "5+", default=-1),
            Struct("diverging_epoch", "12+", tag=0, fields=[
                Field("epoch", "int32", default=-1),
                Field("end_offset", "int64", default=-1),
            ]),
            Struct("current_leader", "12+", tag=1, fields=[
                Field("leader_id", "int32", default=-1),
                Field("leader_epoch", "int32", default=-1),
            ]),
            Struct("snapshot_id", "12+", tag=2, fields=[
                Field("end_offset", "int64", default=-1),
                Field("epoch", "int32", default=-1),
            ]),
            Array("aborted_transactions", "4+", nullable="4+", fields=[
                Field("producer_id", "int64"),
                Field("first_offset", "int64"),
            ]),
            Field("preferred_read_replica", "int32", "11+", default=-1),
            Field("records", "records", nullable="0+"),
            Struct("local_region", "12+", tag=OWN_TAGS_FROM, fields=[
                Field("path", "string"),
                Field("device", "int64", default=-1),
                Field("inode", "int64", default=-1),
                Field("position", "int64", default=-1),
                Field("length", "int32", default=0),
            ]),
        ]),
    ]),
    Array("node_endpoints", "16+", tag=0, fields=[
        Field("node_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("rack", "string", nullable="0+"),
    ]),
])

# ListOffsets, API key 2. v1: one offset per partition (max_num_offsets and
# old_style_offsets dropped), with its timestamp. v2: isolation_level,
# throttle_time_ms. v4: current_leader_epoch and leader_epoch. v6: flexible.
# v7: MAX_TIMESTAMP spec (KIP-734). v8: EARLIEST_LOCAL_TIMESTAMP spec
# (KIP-405). v9: LATEST_TIERED_TIMESTAMP spec (KIP-1005). v10: timeout_ms,
# how long a lookup in remote storage may take (KIP-1075). v11: the
# EARLIEST_PENDING_UPLOAD_TIMESTAMP spec (KIP-1023, Kafka 4.2: not served, since
# kafkalite claims Kafka 4.1 and 4.2 has APIs it lacks, api_keys.py). Without
# tiered storage every lookup is local: timeout_ms bounds nothing, and the tiered
# specs answer as Kafka does for a topic without remote storage
# (server/replica/partition.py).
ListOffsetsRequest = Request(ApiKey.LIST_OFFSETS, "0-10", flexible="6+", fields=[
    Field("replica_id", "int32"),
    Field("isolation_level", "int8", "2+"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("current_leader_epoch", "int32", "4+", default=-1),
            Field("timestamp", "int64"),
            Field("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
    Field("timeout_ms", "int32", "10+"),
])
ListOffsetsResponse = Response(ApiKey.LIST_OFFSETS, "0-10", flexible="6+", fields=[
    Field("throttle_time_ms", "int32", "2+"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("old_style_offsets", "[]int64", "0"),
            Field("timestamp", "int64", "1+", default=-1),
            Field("offset", "int64", "1+", default=-1),
            Field("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])

# OffsetForLeaderEpoch, API key 23. v1: leader_epoch in the response. v2:
# current_leader_epoch for fencing, throttle_time_ms. v3: replica_id (-2 =
# debug consumer, -1 = consumer). v4: flexible.
OffsetForLeaderEpochRequest = Request(ApiKey.OFFSET_FOR_LEADER_EPOCH, "0-4", flexible="4+", fields=[
    Field("replica_id", "int32", "3+", default=-2),
    Array("topics", fields=[
        Field("topic", "string"),
        Array("partitions", fields=[
            Field("partition", "int32"),
            Field("current_leader_epoch", "int32", "2+", default=-1),
            Field("leader_epoch", "int32"),
        ]),
    ]),
])
OffsetForLeaderEpochResponse = Response(ApiKey.OFFSET_FOR_LEADER_EPOCH, "0-4", flexible="4+", fields=[
    Field("throttle_time_ms", "int32", "2+"),
    Array("topics", fields=[
        Field("topic", "string"),
        Array("partitions", fields=[
            Field("error_code", "int16"),
            Field("partition", "int32"),
            Field("leader_epoch", "int32", "1+", default=-1),
            Field("end_offset", "int64", default=-1),
        ]),
    ]),
])
