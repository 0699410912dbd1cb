"""Header versions per API and version, and header bytes as Kafka clients write them."""
from __future__ import annotations

import struct

import pytest

from kafkalite.protocol import (
    ApiKey,
    ProtocolError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
    response_header_version,
)

# (api key, last non-flexible version, first flexible version)
FLEXIBLE_BOUNDARIES = [
    (ApiKey.PRODUCE, 8, 9),
    (ApiKey.FETCH, 11, 12),
    (ApiKey.LIST_OFFSETS, 5, 6),
    (ApiKey.METADATA, 8, 9),
    (ApiKey.OFFSET_COMMIT, 7, 8),
    (ApiKey.OFFSET_FETCH, 5, 6),
    (ApiKey.FIND_COORDINATOR, 2, 3),
    (ApiKey.JOIN_GROUP, 5, 6),
    (ApiKey.HEARTBEAT, 3, 4),
    (ApiKey.CREATE_TOPICS, 4, 5),
    (ApiKey.DELETE_TOPICS, 3, 4),
    (ApiKey.INIT_PRODUCER_ID, 1, 2),
    (ApiKey.DESCRIBE_CONFIGS, 3, 4),
    (ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1),
]


@pytest.mark.parametrize("key, last_plain, first_flexible", FLEXIBLE_BOUNDARIES, ids=lambda x: str(x))
def test_header_versions_switch_at_the_first_flexible_version(key, last_plain, first_flexible):
    assert request_header_version(key, last_plain) == 1
    assert request_header_version(key, first_flexible) == 2
    assert response_header_version(key, last_plain) == 0
    assert response_header_version(key, first_flexible) == 1


def test_api_versions_responses_always_use_header_v0():
    assert [request_header_version(ApiKey.API_VERSIONS, v) for v in range(5)] == [1, 1, 1, 2, 2]
    assert [response_header_version(ApiKey.API_VERSIONS, v) for v in range(5)] == [0, 0, 0, 0, 0]
    frame = encode_response(ApiKey.API_VERSIONS, 3, 0x01020304, {"api_keys": []})
    # correlation id, then straight into the flexible body: error_code, compact array, throttle, tags
    assert frame == b"\x01\x02\x03\x04" + b"\x00\x00" + b"\x01" + b"\x00\x00\x00\x00" + b"\x00"


def test_never_flexible_and_always_flexible_apis():
    assert request_header_version(ApiKey.SASL_HANDSHAKE, 1) == 1
    assert response_header_version(ApiKey.OFFSET_DELETE, 0) == 0
    assert request_header_version(ApiKey.DESCRIBE_CLUSTER, 0) == 2
    assert response_header_version(ApiKey.DESCRIBE_PRODUCERS, 0) == 1


def test_unknown_api_key_has_no_header_version():
    with pytest.raises(ProtocolError, match="unknown API key 7"):
        request_header_version(7, 0)  # ControlledShutdown: not a kafkalite API
    with pytest.raises(ProtocolError):
        response_header_version(1000, 0)


def test_request_header_bytes():
    v1 = encode_request(ApiKey.PRODUCE, 8, 7, "cli", {})
    assert v1.startswith(struct.pack(">hhih", 0, 8, 7, 3) + b"cli")
    v2 = encode_request(ApiKey.PRODUCE, 9, 7, "cli", {})
    # client_id keeps its int16 length in header v2, then an empty tagged-field section
    assert v2.startswith(struct.pack(">hhih", 0, 9, 7, 3) + b"cli" + b"\x00")
    null_client = encode_request(ApiKey.PRODUCE, 9, 7, None, {})
    assert null_client.startswith(struct.pack(">hhih", 0, 9, 7, -1) + b"\x00")


def test_request_header_matches_kafka_python():
    from kafka.protocol.old.api import RequestHeader as KpHeader, RequestHeaderV2 as KpHeaderV2

    for key, version, cls in [(ApiKey.FETCH, 11, KpHeader), (ApiKey.FETCH, 12, KpHeaderV2),
                              (ApiKey.API_VERSIONS, 2, KpHeader), (ApiKey.API_VERSIONS, 3, KpHeaderV2)]:
        theirs = cls(key, version, 123, "kafka-python").encode() if cls is KpHeader else \
            cls(key, version, 123, "kafka-python", {}).encode()
        assert encode_request(key, version, 123, "kafka-python", {}).startswith(theirs)


def test_decoded_request_header():
    header, _ = decode_request(encode_request(ApiKey.METADATA, 12, -5, "ünïcode-client", {}))
    assert header == RequestHeader(ApiKey.METADATA, 12, -5, "ünïcode-client")
    assert header.api_key is ApiKey.METADATA
    header, _ = decode_request(encode_request(3, 1, 9, None, {}))
    assert header.client_id is None and header.api_key is ApiKey.METADATA


def test_tagged_fields_in_request_and_response_headers_are_skipped():
    frame = encode_request(ApiKey.HEARTBEAT, 4, 1, "c", {"group_id": "g", "member_id": "m"})
    prefix = struct.pack(">hhih", ApiKey.HEARTBEAT, 4, 1, 1) + b"c"
    assert frame.startswith(prefix + b"\x00")
    with_tag = prefix + b"\x01\x09\x02hi" + frame[len(prefix) + 1:]
    assert decode_request(with_tag) == decode_request(frame)

    response = encode_response(ApiKey.HEARTBEAT, 4, 77, {"error_code": 25})
    assert response[4:5] == b"\x00"
    with_tag = response[:4] + b"\x01\x00\x01z" + response[5:]
    assert decode_response(ApiKey.HEARTBEAT, 4, with_tag) == (77, {"throttle_time_ms": 0, "error_code": 25})


def test_api_versions_response_falls_back_to_v0_as_kafka_clients_do():
    # A broker that does not know ApiVersions v3 answers UNSUPPORTED_VERSION with a v0 body.
    v0 = encode_response(ApiKey.API_VERSIONS, 0, 12, {"error_code": 35, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 2}]})
    correlation_id, body = decode_response(ApiKey.API_VERSIONS, 3, v0)
    assert correlation_id == 12 and body["error_code"] == 35
    assert body["api_keys"] == [{"api_key": 18, "min_version": 0, "max_version": 2}]
