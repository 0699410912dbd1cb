"""Produce: writing record batches to partition leaders.

``records`` holds one or more record batches (message format v2 from v3 on;
MessageSet v0/v1 before). Over kafkalite's ZeroMQ transport it travels in
its own frame (see the package docstring).

``request_principal`` (a tagged field of kafkalite's own: its tag is past
schema.OWN_TAGS_FROM, far above Kafka's tags) names the principal a
proxy produces for, as the RequestPrincipal of Kafka's Envelope (KIP-590)
does: the ingest gateway forwards its publishers' records with it. A broker
takes it only from a connection authenticated as the server itself
(server/network/requests.py); from anyone else the request is refused.
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import OWN_TAGS_FROM, Array, Field, Request, Response, Struct

# Produce, API key 0. v3: transactional_id and message format v2 (KIP-98). v4:
# may return KAFKA_STORAGE_ERROR. v5: log_start_offset in the response. v7:
# zstd (KIP-110). v8: per-record errors (KIP-467). v9: flexible. v10: the
# response names the new leader on NOT_LEADER_OR_FOLLOWER (KIP-951). v11: may
# return TRANSACTION_ABORTABLE (KIP-890). v12: the same; a transactional
# producer speaking it adds partitions to its transaction by producing to
# them (transactions v2, KIP-890 part 2). v13: topic ids replace topic names
# (KIP-516); an id the broker does not know is UNKNOWN_TOPIC_ID.
ProduceRequest = Request(ApiKey.PRODUCE, "0-13", flexible="9+", fields=[
    Field("transactional_id", "string", "3+", nullable="3+"),
    Field("acks", "int16"),
    Field("timeout_ms", "int32"),
    Array("topic_data", fields=[
        Field("name", "string", "0-12"),
        Field("topic_id", "uuid", "13+"),
        Array("partition_data", fields=[
            Field("index", "int32"),
            Field("records", "records", nullable="0+"),
        ]),
    ]),
    Field("request_principal", "string", "9+", nullable="9+", tag=OWN_TAGS_FROM),
])
ProduceResponse = Response(ApiKey.PRODUCE, "0-13", flexible="9+", fields=[
    Array("responses", fields=[
        Field("name", "string", "0-12"),
        Field("topic_id", "uuid", "13+"),
        Array("partition_responses", fields=[
            Field("index", "int32"),
            Field("error_code", "int16"),
            Field("base_offset", "int64"),
            Field("log_append_time_ms", "int64", "2+", default=-1),
            Field("log_start_offset", "int64", "5+", default=-1),
            Array("record_errors", "8+", fields=[
                Field("batch_index", "int32"),
                Field("batch_index_error_message", "string", nullable="0+"),
            ]),
            Field("error_message", "string", "8+", nullable="8+"),
            Struct("current_leader", "10+", tag=0, fields=[
                Field("leader_id", "int32", default=-1),
                Field("leader_epoch", "int32", default=-1),
            ]),
        ]),
    ]),
    Field("throttle_time_ms", "int32", "1+"),
    Array("node_endpoints", "10+", tag=0, fields=[
        Field("node_id", "int32"),
        Field("host", "string"),
        Field("port", "int32"),
        Field("rack", "string", nullable="0+"),
    ]),
])
