"""Every message of every supported version survives encode -> decode."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schema_strategies as strategies
from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from kafkalite.protocol.messages import REQUESTS, RESPONSES

EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def versions(message):
    return range(message.versions.low, message.versions.high + 1)


@pytest.mark.parametrize("message", REQUESTS.values(), ids=lambda m: m.name)
@EXAMPLES
@given(data=st.data())
def test_request_round_trip(message, data):
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1), label="correlation_id")
    client_id = data.draw(st.none() | st.text(max_size=10), label="client_id")
    for version in versions(message):
        body = data.draw(strategies.body(message, version), label=f"v{version}")
        frame = encode_request(message.api_key, version, correlation_id, client_id, body)
        header, decoded = decode_request(frame)
        assert header == RequestHeader(message.api_key, version, correlation_id, client_id)
        assert strategies.project(message, version, decoded) == body

        frames: list = []
        frame = encode_request(message.api_key, version, correlation_id, client_id, body, records_out=frames)
        assert strategies.project(message, version, decode_request(frame, records_in=frames)[1]) == body


@pytest.mark.parametrize("message", RESPONSES.values(), ids=lambda m: m.name)
@EXAMPLES
@given(data=st.data())
def test_response_round_trip(message, data):
    correlation_id = data.draw(st.integers(-(1 << 31), (1 << 31) - 1), label="correlation_id")
    for version in versions(message):
        body = data.draw(strategies.body(message, version), label=f"v{version}")
        frame = encode_response(message.api_key, version, correlation_id, body)
        got_id, decoded = decode_response(message.api_key, version, frame)
        assert got_id == correlation_id
        assert strategies.project(message, version, decoded) == body

        frames: list = []
        frame = encode_response(message.api_key, version, correlation_id, body, records_out=frames)
        assert strategies.project(message, version, decode_response(
            message.api_key, version, frame, records_in=frames)[1]) == body


@pytest.mark.parametrize("table", [REQUESTS, RESPONSES], ids=["requests", "responses"])
def test_missing_fields_take_defaults_and_absent_fields_decode_to_defaults(table):
    for message, version in strategies.all_versions(table):
        expected = {f.name: f.default(version) for f in message.fields}
        if message.kind == "request":
            _, decoded = decode_request(encode_request(message.api_key, version, 1, None, {}))
        else:
            frame = encode_response(message.api_key, version, 1, {})
            _, decoded = decode_response(message.api_key, version, frame)
        assert decoded == expected, f"{message.name} v{version}"


def test_schema_defaults_reach_the_wire():
    # FetchRequest v12: max_bytes defaults to 0x7fffffff, replica_id to -1.
    _, body = decode_request(encode_request(ApiKey.FETCH, 12, 1, "c", {}))
    assert body["max_bytes"] == 0x7FFFFFFF
    assert body["replica_id"] == -1
    assert body["session_epoch"] == -1
    # v15 has replica_state instead of replica_id; replica_id reads as its default.
    _, body = decode_request(encode_request(ApiKey.FETCH, 15, 1, "c", {"replica_id": 7}))
    assert body["replica_id"] == -1
    assert body["replica_state"] == {"replica_id": -1, "replica_epoch": -1}


def test_fields_of_other_versions_are_ignored_when_encoding():
    body = {"topics": [{"name": "a"}], "allow_auto_topic_creation": False}
    assert encode_request(ApiKey.METADATA, 0, 1, "c", body) == encode_request(
        ApiKey.METADATA, 0, 1, "c", {"topics": [{"name": "a"}]})


def test_nullable_versus_not():
    # Metadata v0 cannot say "all topics" with null; v1+ can.
    _, body = decode_request(encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": None}))
    assert body["topics"] is None
    _, body = decode_request(encode_request(ApiKey.METADATA, 1, 1, "c", {"topics": []}))
    assert body["topics"] == []
    _, body = decode_request(encode_request(ApiKey.METADATA, 0, 1, "c", {}))
    assert body["topics"] == []


def test_tagged_field_written_only_when_it_differs_from_its_default():
    plain = encode_request(ApiKey.FETCH, 12, 1, "c", {"cluster_id": None})
    tagged = encode_request(ApiKey.FETCH, 12, 1, "c", {"cluster_id": "kl"})
    # Top-level tagged section goes from b"\x00" to count 1, tag 0, size 3, compact "kl".
    assert plain.endswith(b"\x00")
    assert tagged == plain[:-1] + b"\x01\x00\x03\x03kl"
    assert decode_request(tagged)[1]["cluster_id"] == "kl"

    leader = {"leader_id": 3, "leader_epoch": 7}
    partition = {"index": 0, "error_code": 6, "base_offset": -1}
    without = encode_response(ApiKey.PRODUCE, 10, 1, {"responses": [{"name": "t", "partition_responses": [
        dict(partition, current_leader={"leader_id": -1, "leader_epoch": -1})]}]})
    assert without == encode_response(ApiKey.PRODUCE, 10, 1, {"responses": [
        {"name": "t", "partition_responses": [partition]}]})
    with_leader = encode_response(ApiKey.PRODUCE, 10, 1, {"responses": [{"name": "t", "partition_responses": [
        dict(partition, current_leader=leader)]}]})
    assert len(with_leader) == len(without) + 1 + 1 + 1 + 9 - 1  # count+tag+size+value, minus the old 0 count
    decoded = decode_response(ApiKey.PRODUCE, 10, with_leader)[1]
    assert decoded["responses"][0]["partition_responses"][0]["current_leader"] == leader


def test_unknown_tagged_fields_are_skipped():
    frame = encode_request(ApiKey.API_VERSIONS, 3, 1, "c", {"client_software_name": "kl",
                                                           "client_software_version": "1"})
    assert frame.endswith(b"\x00")
    with_unknown = frame[:-1] + b"\x02\x05\x03abc\x96\x01\x00"  # tags 5 (3 bytes) and 150 (empty)
    assert decode_request(with_unknown) == decode_request(frame)


def test_every_api_key_has_request_and_response_definitions():
    assert set(REQUESTS) == set(RESPONSES) == set(SUPPORTED_VERSIONS) == set(ApiKey)
    for key, (low, high) in SUPPORTED_VERSIONS.items():
        assert (REQUESTS[key].versions.low, REQUESTS[key].versions.high) == (low, high)
