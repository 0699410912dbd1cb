"""The consumer protocol's Subscription and Assignment, as group members exchange them."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import schema_strategies as strategies
from kafkalite.protocol import (
    ProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from kafkalite.protocol.messages import ConsumerProtocolAssignment, ConsumerProtocolSubscription

CASES = [(ConsumerProtocolSubscription, encode_subscription, decode_subscription),
         (ConsumerProtocolAssignment, encode_assignment, decode_assignment)]


@pytest.mark.parametrize("message, encode, decode", CASES, ids=lambda x: getattr(x, "name", ""))
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip_and_same_bytes_as_kafka_python(message, encode, decode, data):
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KpSubscription

    theirs = KpSubscription if message is ConsumerProtocolSubscription else KpAssignment
    for version in range(4):
        body = data.draw(strategies.body(message, version), label=f"v{version}")
        encoded = encode(version, body)
        got_version, decoded = decode(encoded)
        assert got_version == version
        assert strategies.project(message, version, decoded) == body
        present = {f.name for f in message.fields if f.present(version)}
        full = {k: v for k, v in decoded.items() if k in present}
        if "assigned_partitions" in full:
            full["assigned_partitions"] = [theirs.fields["assigned_partitions"].data_class(**p)
                                           for p in full["assigned_partitions"]]
        if "owned_partitions" in full:
            full["owned_partitions"] = [theirs.fields["owned_partitions"].data_class(**p)
                                        for p in full["owned_partitions"]]
        assert bytes(theirs(version=version, **full).encode()) == encoded


def test_v0_subscription_matches_the_hand_written_kafka_python_layout():
    from kafka.protocol.old.consumer_protocol import ConsumerProtocolMemberMetadata_v0

    body = {"topics": ["orders", "audit"], "user_data": b"\x01\x02"}
    theirs = ConsumerProtocolMemberMetadata_v0(0, ["orders", "audit"], b"\x01\x02")
    assert encode_subscription(0, body) == theirs.encode()


def test_newer_versions_read_as_the_newest_known_ignoring_what_follows():
    v3 = encode_subscription(3, {"topics": ["t"], "generation_id": 4, "rack_id": "eu-1a"})
    v7 = b"\x00\x07" + v3[2:] + b"fields from v4+"
    version, body = decode_subscription(v7)
    assert version == 7 and body["rack_id"] == "eu-1a" and body["generation_id"] == 4
    version, body = decode_assignment(b"\x00\x05" + encode_assignment(3, {"assigned_partitions": [
        {"topic": "t", "partitions": [0, 2]}]})[2:] + b"\x00\x01")
    assert version == 5 and body["assigned_partitions"] == [{"topic": "t", "partitions": [0, 2]}]


def test_malformed_subscriptions_raise_protocol_error():
    encoded = encode_subscription(1, {"topics": ["a", "b"],
                                      "owned_partitions": [{"topic": "a", "partitions": [1]}]})
    for end in range(len(encoded)):
        with pytest.raises(ProtocolError):
            decode_subscription(encoded[:end])
    with pytest.raises(ProtocolError, match="invalid version -1"):
        decode_subscription(b"\xff\xff" + encoded[2:])
    with pytest.raises(ProtocolError, match="v4 does not exist"):
        encode_subscription(4, {})
