"""The data APIs a broker's ReplicaManager serves, and what the controller
shares with it: Produce's and DeleteRecords' shapes and blank answers,
AlterReplicaLogDirs' answer.

A module of its own so that the supervisor -- which advertises these
APIs, answers them for the coordinators' internal topics (controller.py)
and checks at start that every advertised API has a handler -- does not
import the replica manager and what it needs (fetch sessions, tiered and
Iceberg storage, share-partitions): a restarted supervisor's imports are
most of the time a dead one's transactional clients wait (issue 68).

Which process runs it: each partition worker and the supervisor.

What it may import: as replica/ (its __init__).
"""
from __future__ import annotations

from kafkalite.protocol import ApiKey
from kafkalite.server.network.per_partition import Shape

# API key -> ReplicaManager's method
API_HANDLERS = {
    ApiKey.PRODUCE: "produce",
    ApiKey.FETCH: "fetch",
    ApiKey.LIST_OFFSETS: "list_offsets",
    ApiKey.OFFSET_FOR_LEADER_EPOCH: "offset_for_leader_epoch",
    ApiKey.WRITE_TXN_MARKERS: "write_txn_markers",
    ApiKey.DESCRIBE_PRODUCERS: "describe_producers",
    ApiKey.DELETE_RECORDS: "delete_records",
    ApiKey.DESCRIBE_LOG_DIRS: "describe_log_dirs",
    ApiKey.ALTER_REPLICA_LOG_DIRS: "alter_replica_log_dirs",
    ApiKey.SHARE_FETCH: "share_fetch",
    ApiKey.SHARE_ACKNOWLEDGE: "share_acknowledge",
}
API_KEYS = frozenset(API_HANDLERS)

PRODUCE = Shape("name", "partition_data", "index",
                "name", "partition_responses", "index", error_message=True)
DELETE_RECORDS = Shape("name", "partitions", "partition_index",
                       "name", "partitions", "partition_index")


def produce_blank() -> dict:
    return {"error_code": 0, "base_offset": -1, "log_append_time_ms": -1,
            "log_start_offset": -1, "record_errors": [], "error_message": None}


def delete_records_blank() -> dict:
    return {"error_code": 0, "low_watermark": -1}


def alter_replica_log_dirs_response(codes: dict[tuple[str, int], int]) -> dict:
    """AlterReplicaLogDirs' answer: {(topic, partition): error code}, by topic."""
    by_topic: dict[str, list] = {}
    for (name, index), code in codes.items():
        by_topic.setdefault(name, []).append({"partition_index": index, "error_code": code})
    return {"throttle_time_ms": 0, "results": [{"topic_name": name, "partitions": parts}
                                                for name, parts in by_topic.items()]}
