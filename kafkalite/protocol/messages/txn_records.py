"""The record formats of the internal ``__transaction_state`` topic.

As in Kafka, every key and value starts with an int16 version:

    key v0    TransactionLogKey    -> value TransactionLogValue (v1 written), or null

A null value (tombstone) forgets an expired transactional id. The status
byte uses Kafka's numbering (``TransactionState`` in server/txn/txn_coordinator.py).
"""
from __future__ import annotations

from kafkalite.protocol.schema import Array, Data, Field

TRANSACTION_LOG_KEY_VERSION = 0
TRANSACTION_LOG_VALUE_VERSION = 1

TransactionLogKey = Data("TransactionLogKey", "0", fields=[
    Field("transactional_id", "string"),
])

# v1: flexible, with the KIP-890 producer ids and client version as tagged fields.
TransactionLogValue = Data("TransactionLogValue", "0-1", flexible="1+", fields=[
    Field("producer_id", "int64"),
    Field("previous_producer_id", "int64", "1+", tag=0, default=-1),
    Field("next_producer_id", "int64", "1+", tag=1, default=-1),
    Field("producer_epoch", "int16"),
    Field("transaction_timeout_ms", "int32"),
    Field("transaction_status", "int8"),
    Array("transaction_partitions", nullable="0+", fields=[
        Field("topic", "string"),
        Field("partition_ids", "[]int32"),
    ]),
    Field("transaction_last_update_timestamp_ms", "int64"),
    Field("transaction_start_timestamp_ms", "int64"),
    Field("client_transaction_version", "int16", "1+", tag=2, default=0),
])
