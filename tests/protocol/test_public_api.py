"""The public surface others code against: names, signatures, ApiKey values."""
from __future__ import annotations

import inspect

import kafkalite.protocol as protocol
from kafkalite.errors import InvalidRequestError

SIGNATURES = {
    "encode_request": "(api_key, api_version, correlation_id, client_id, body, *, records_out=None)",
    "decode_request": "(buf, *, records_in=None, ignore_trailing=False)",
    "peek_request_header": "(buf)",
    "encode_response": "(api_key, api_version, correlation_id, body, *, records_out=None)",
    "encode_response_parts": "(api_key, api_version, correlation_id, body)",
    "encode_response_wire": "(api_key, api_version, correlation_id, body)",
    "decode_response": "(api_key, api_version, buf, *, records_in=None)",
    "request_header_version": "(api_key, api_version)",
    "response_header_version": "(api_key, api_version)",
    "encode_subscription": "(version, body)",
    "decode_subscription": "(buf)",
    "encode_assignment": "(version, body)",
    "decode_assignment": "(buf)",
}

API_KEYS = dict(PRODUCE=0, FETCH=1, LIST_OFFSETS=2, METADATA=3, OFFSET_COMMIT=8, OFFSET_FETCH=9,
                FIND_COORDINATOR=10, JOIN_GROUP=11, HEARTBEAT=12, LEAVE_GROUP=13, SYNC_GROUP=14,
                DESCRIBE_GROUPS=15, LIST_GROUPS=16, SASL_HANDSHAKE=17, API_VERSIONS=18, CREATE_TOPICS=19,
                DELETE_TOPICS=20, DELETE_RECORDS=21, INIT_PRODUCER_ID=22, OFFSET_FOR_LEADER_EPOCH=23,
                ADD_PARTITIONS_TO_TXN=24, ADD_OFFSETS_TO_TXN=25, END_TXN=26, WRITE_TXN_MARKERS=27,
                TXN_OFFSET_COMMIT=28, DESCRIBE_ACLS=29, CREATE_ACLS=30, DELETE_ACLS=31,
                DESCRIBE_CONFIGS=32, ALTER_CONFIGS=33, ALTER_REPLICA_LOG_DIRS=34,
                DESCRIBE_LOG_DIRS=35, SASL_AUTHENTICATE=36,
                CREATE_PARTITIONS=37, CREATE_DELEGATION_TOKEN=38, RENEW_DELEGATION_TOKEN=39,
                EXPIRE_DELEGATION_TOKEN=40, DESCRIBE_DELEGATION_TOKEN=41, DELETE_GROUPS=42, ELECT_LEADERS=43, INCREMENTAL_ALTER_CONFIGS=44,
                ALTER_PARTITION_REASSIGNMENTS=45, LIST_PARTITION_REASSIGNMENTS=46, OFFSET_DELETE=47,
                DESCRIBE_CLIENT_QUOTAS=48, ALTER_CLIENT_QUOTAS=49,
                DESCRIBE_USER_SCRAM_CREDENTIALS=50, ALTER_USER_SCRAM_CREDENTIALS=51,
                DESCRIBE_QUORUM=55, UPDATE_FEATURES=57, DESCRIBE_CLUSTER=60, DESCRIBE_PRODUCERS=61,
                UNREGISTER_BROKER=64, DESCRIBE_TRANSACTIONS=65,
                LIST_TRANSACTIONS=66, CONSUMER_GROUP_HEARTBEAT=68, CONSUMER_GROUP_DESCRIBE=69,
                LIST_CONFIG_RESOURCES=74, DESCRIBE_TOPIC_PARTITIONS=75, SHARE_GROUP_HEARTBEAT=76, SHARE_GROUP_DESCRIBE=77,
                SHARE_FETCH=78, SHARE_ACKNOWLEDGE=79, ADD_RAFT_VOTER=80, REMOVE_RAFT_VOTER=81,
                INITIALIZE_SHARE_GROUP_STATE=83,
                READ_SHARE_GROUP_STATE=84, WRITE_SHARE_GROUP_STATE=85,
                DELETE_SHARE_GROUP_STATE=86, READ_SHARE_GROUP_STATE_SUMMARY=87,
                DESCRIBE_SHARE_GROUP_OFFSETS=90, ALTER_SHARE_GROUP_OFFSETS=91,
                DELETE_SHARE_GROUP_OFFSETS=92)


def shape(function) -> str:
    """A signature without annotations, e.g. "(buf, *, records_in=None)"."""
    parts = []
    for p in inspect.signature(function).parameters.values():
        if p.kind is p.KEYWORD_ONLY and "*" not in parts:
            parts.append("*")
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return "(" + ", ".join(parts) + ")"


def test_public_names_and_signatures():
    assert set(protocol.__all__) == set(SIGNATURES) | {"ApiKey", "SUPPORTED_VERSIONS", "RequestHeader",
                                                       "ProtocolError"}
    for name, signature in SIGNATURES.items():
        assert shape(getattr(protocol, name)) == signature, name


def test_api_keys_and_supported_versions():
    assert {key.name: int(key) for key in protocol.ApiKey} == API_KEYS
    assert set(protocol.SUPPORTED_VERSIONS) == set(protocol.ApiKey)
    for low, high in protocol.SUPPORTED_VERSIONS.values():
        assert low == 0 <= high
    # What Kafka 4.1 advertises for the versions clients key their behaviour
    # on (kafka-python infers 4.1 from Produce v13, and 4.2 from ListOffsets
    # v11, which is left out), transactions v2 included (KIP-890 parts 1 and
    # 2); tests/compat/test_api_versions_conformance.py compares every API.
    versions = protocol.SUPPORTED_VERSIONS
    assert versions[protocol.ApiKey.PRODUCE] == (0, 13)
    assert versions[protocol.ApiKey.END_TXN] == (0, 5)
    assert versions[protocol.ApiKey.TXN_OFFSET_COMMIT] == (0, 5)
    assert versions[protocol.ApiKey.FETCH] == (0, 18)
    assert versions[protocol.ApiKey.METADATA] == (0, 13)
    assert versions[protocol.ApiKey.API_VERSIONS] == (0, 4)
    assert versions[protocol.ApiKey.LIST_OFFSETS] == (0, 10)
    assert versions[protocol.ApiKey.FIND_COORDINATOR] == (0, 6)
    # share groups (KIP-932): v0 as Kafka 4.0 defined them, v1 as Kafka 4.1
    # (librdkafka's ShareConsumer asks v1 only)
    for key in ("SHARE_GROUP_HEARTBEAT", "SHARE_GROUP_DESCRIBE", "SHARE_FETCH",
                "SHARE_ACKNOWLEDGE"):
        assert versions[protocol.ApiKey[key]] == (0, 1)
    for key in ("DESCRIBE_SHARE_GROUP_OFFSETS", "ALTER_SHARE_GROUP_OFFSETS",
                "INITIALIZE_SHARE_GROUP_STATE", "READ_SHARE_GROUP_STATE", "WRITE_SHARE_GROUP_STATE",
                "DELETE_SHARE_GROUP_STATE", "READ_SHARE_GROUP_STATE_SUMMARY"):
        assert versions[protocol.ApiKey[key]] == (0, 0)


def test_request_header_and_error_types():
    assert protocol.RequestHeader._fields == ("api_key", "api_version", "correlation_id", "client_id")
    assert issubclass(protocol.ProtocolError, InvalidRequestError)
