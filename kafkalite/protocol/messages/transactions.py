"""Idempotent and transactional producers (KIP-98) and producer state."""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response

# InitProducerId, API key 22. v2: flexible. v3: producer_id and producer_epoch
# so a producer can bump its epoch after INVALID_PRODUCER_EPOCH (KIP-360). v4:
# PRODUCER_FENCED. v5: TRANSACTION_ABORTABLE (KIP-890).
InitProducerIdRequest = Request(ApiKey.INIT_PRODUCER_ID, "0-5", flexible="2+", fields=[
    Field("transactional_id", "string", nullable="0+"),
    Field("transaction_timeout_ms", "int32"),
    Field("producer_id", "int64", "3+", default=-1),
    Field("producer_epoch", "int16", "3+", default=-1),
])
InitProducerIdResponse = Response(ApiKey.INIT_PRODUCER_ID, "0-5", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("producer_id", "int64", default=-1),
    Field("producer_epoch", "int16"),
])

# AddPartitionsToTxn, API key 24. v2: PRODUCER_FENCED. v3: flexible. v4:
# broker-to-broker batching of several transactions with verify_only
# (KIP-890); clients use v3 and below, whose fields are the v3_and_below_*
# ones. v5: TRANSACTION_ABORTABLE; a partition leader adding partitions for a
# transactions-v2 producer sends it with verify_only false.
AddPartitionsToTxnRequest = Request(ApiKey.ADD_PARTITIONS_TO_TXN, "0-5", flexible="3+", fields=[
    Array("transactions", "4+", fields=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Field("verify_only", "bool"),
        Array("topics", fields=[
            Field("name", "string"),
            Field("partitions", "[]int32"),
        ]),
    ]),
    Field("v3_and_below_transactional_id", "string", "0-3"),
    Field("v3_and_below_producer_id", "int64", "0-3"),
    Field("v3_and_below_producer_epoch", "int16", "0-3"),
    Array("v3_and_below_topics", "0-3", fields=[
        Field("name", "string"),
        Field("partitions", "[]int32"),
    ]),
])
AddPartitionsToTxnResponse = Response(ApiKey.ADD_PARTITIONS_TO_TXN, "0-5", flexible="3+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16", "4+"),
    Array("results_by_transaction", "4+", fields=[
        Field("transactional_id", "string"),
        Array("topic_results", fields=[
            Field("name", "string"),
            Array("results_by_partition", fields=[
                Field("partition_index", "int32"),
                Field("partition_error_code", "int16"),
            ]),
        ]),
    ]),
    Array("results_by_topic_v3_and_below", "0-3", fields=[
        Field("name", "string"),
        Array("results_by_partition", fields=[
            Field("partition_index", "int32"),
            Field("partition_error_code", "int16"),
        ]),
    ]),
])

# AddOffsetsToTxn, API key 25. v2: PRODUCER_FENCED. v3: flexible. v4:
# TRANSACTION_ABORTABLE.
AddOffsetsToTxnRequest = Request(ApiKey.ADD_OFFSETS_TO_TXN, "0-4", flexible="3+", fields=[
    Field("transactional_id", "string"),
    Field("producer_id", "int64"),
    Field("producer_epoch", "int16"),
    Field("group_id", "string"),
])
AddOffsetsToTxnResponse = Response(ApiKey.ADD_OFFSETS_TO_TXN, "0-4", flexible="3+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
])

# EndTxn, API key 26. v2: PRODUCER_FENCED. v3: flexible. v4:
# TRANSACTION_ABORTABLE. v5: transactions v2 -- every EndTxn bumps the
# producer epoch (a new producer id when epochs run out), and the response
# carries the producer id and epoch of the next transaction.
EndTxnRequest = Request(ApiKey.END_TXN, "0-5", flexible="3+", fields=[
    Field("transactional_id", "string"),
    Field("producer_id", "int64"),
    Field("producer_epoch", "int16"),
    Field("committed", "bool"),
])
EndTxnResponse = Response(ApiKey.END_TXN, "0-5", flexible="3+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("producer_id", "int64", "5+", default=-1),
    Field("producer_epoch", "int16", "5+", default=-1),
])

# TxnOffsetCommit, API key 28. v2: committed_leader_epoch. v3: flexible;
# generation_id, member_id and group_instance_id for fencing zombie producers
# (KIP-447). v4: TRANSACTION_ABORTABLE. v5: transactions v2 -- the commit
# adds the group's offsets to the transaction itself (no AddOffsetsToTxn).
TxnOffsetCommitRequest = Request(ApiKey.TXN_OFFSET_COMMIT, "0-5", flexible="3+", fields=[
    Field("transactional_id", "string"),
    Field("group_id", "string"),
    Field("producer_id", "int64"),
    Field("producer_epoch", "int16"),
    Field("generation_id", "int32", "3+", default=-1),
    Field("member_id", "string", "3+"),
    Field("group_instance_id", "string", "3+", nullable="3+"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("committed_offset", "int64"),
            Field("committed_leader_epoch", "int32", "2+", default=-1),
            Field("committed_metadata", "string", nullable="0+"),
        ]),
    ]),
])
TxnOffsetCommitResponse = Response(ApiKey.TXN_OFFSET_COMMIT, "0-5", flexible="3+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
        ]),
    ]),
])

# DescribeProducers, API key 61. Active producers of partitions and their last
# sequence (KIP-664).
DescribeProducersRequest = Request(ApiKey.DESCRIBE_PRODUCERS, "0", flexible="0+", fields=[
    Array("topics", fields=[
        Field("name", "string"),
        Field("partition_indexes", "[]int32"),
    ]),
])
DescribeProducersResponse = Response(ApiKey.DESCRIBE_PRODUCERS, "0", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
            Array("active_producers", fields=[
                Field("producer_id", "int64"),
                Field("producer_epoch", "int32"),
                Field("last_sequence", "int32", default=-1),
                Field("last_timestamp", "int64", default=-1),
                Field("coordinator_epoch", "int32"),
                Field("current_txn_start_offset", "int64", default=-1),
            ]),
        ]),
    ]),
])

# WriteTxnMarkers, API key 27: the transaction coordinator asks partition
# leaders to write COMMIT or ABORT markers. v1: flexible.
WriteTxnMarkersRequest = Request(ApiKey.WRITE_TXN_MARKERS, "0-1", flexible="1+", fields=[
    Array("markers", fields=[
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Field("transaction_result", "bool"),
        Array("topics", fields=[
            Field("name", "string"),
            Field("partition_indexes", "[]int32"),
        ]),
        Field("coordinator_epoch", "int32"),
    ]),
])
WriteTxnMarkersResponse = Response(ApiKey.WRITE_TXN_MARKERS, "0-1", flexible="1+", fields=[
    Array("markers", fields=[
        Field("producer_id", "int64"),
        Array("topics", fields=[
            Field("name", "string"),
            Array("partitions", fields=[
                Field("partition_index", "int32"),
                Field("error_code", "int16"),
            ]),
        ]),
    ]),
])

# DescribeTransactions, API key 65 (KIP-664): the coordinator's view of
# transactional ids.
DescribeTransactionsRequest = Request(ApiKey.DESCRIBE_TRANSACTIONS, "0", flexible="0+", fields=[
    Field("transactional_ids", "[]string"),
])
DescribeTransactionsResponse = Response(ApiKey.DESCRIBE_TRANSACTIONS, "0", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("transaction_states", fields=[
        Field("error_code", "int16"),
        Field("transactional_id", "string"),
        Field("transaction_state", "string"),
        Field("transaction_timeout_ms", "int32"),
        Field("transaction_start_time_ms", "int64"),
        Field("producer_id", "int64"),
        Field("producer_epoch", "int16"),
        Array("topics", fields=[
            Field("topic", "string"),
            Field("partitions", "[]int32"),
        ]),
    ]),
])

# ListTransactions, API key 66 (KIP-664). v1: duration_filter (KIP-994). v2:
# transactional_id_pattern, a regular expression the ids must match (KIP-1152).
ListTransactionsRequest = Request(ApiKey.LIST_TRANSACTIONS, "0-2", flexible="0+", fields=[
    Field("state_filters", "[]string"),
    Field("producer_id_filters", "[]int64"),
    Field("duration_filter", "int64", "1+", default=-1),
    Field("transactional_id_pattern", "string", "2+", nullable="2+", default=None),
])
ListTransactionsResponse = Response(ApiKey.LIST_TRANSACTIONS, "0-2", flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("unknown_state_filters", "[]string"),
    Array("transaction_states", fields=[
        Field("transactional_id", "string"),
        Field("producer_id", "int64"),
        Field("transaction_state", "string"),
    ]),
])
