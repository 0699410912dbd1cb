"""Strings above Kafka's 32,767-byte cap (kafkalite/protocol/compiler.py).

A response string that long is cut to fit, on a character boundary and
marked, in flexible and non-flexible versions alike: what makes one that
long is client input quoted in an error message, and an answer that cannot
be encoded is never sent. A request string that long is the caller's
mistake and fails to encode, naming the field.
"""
from __future__ import annotations

import pytest

from kafkalite.protocol import (ApiKey, ProtocolError, decode_response, encode_request,
                                encode_response)
from kafkalite.protocol.compiler import MAX_STRING_BYTES, fit_response_string

# a quoted config value: 'é' is two bytes, '😀' four, so cuts land inside characters
LONG = "invalid value '" + "é" * 9000 + "😀" * 4000 + "' for cleanup.policy"


def create_topics_answer(message: str) -> dict:
    return {"throttle_time_ms": 0, "topics": [{"name": "t", "error_code": 40,
                                               "error_message": message}]}


@pytest.mark.parametrize("version", [2, 5, 7])      # int16 lengths (v2, v4), compact (v5+)
def test_a_long_error_message_is_cut_to_fit_and_the_answer_decodes(version):
    frame = encode_response(ApiKey.CREATE_TOPICS, version, 9, create_topics_answer(LONG))
    correlation, body = decode_response(ApiKey.CREATE_TOPICS, version, frame)
    topic = body["topics"][0]
    assert correlation == 9 and topic["error_code"] == 40
    message = topic["error_message"]
    encoded = message.encode()
    assert len(encoded) <= MAX_STRING_BYTES
    assert len(encoded) > MAX_STRING_BYTES - 40                 # cut, not emptied
    total = len(LONG.encode())
    assert message.endswith(f"\u2026 (cut from {total} bytes)")
    kept = message[:message.rindex("\u2026")]
    assert LONG.startswith(kept)                                 # whole characters only


def test_the_cut_never_splits_a_character():
    for filler in ("é", "€", "😀"):
        for shift in range(4):
            text = "x" * shift + filler * (MAX_STRING_BYTES // len(filler.encode()) + 10)
            cut = fit_response_string(text.encode())
            assert len(cut) <= MAX_STRING_BYTES
            decoded = cut.decode("utf-8")                       # strict: raises on a split
            assert text.startswith(decoded[:decoded.rindex("\u2026")])


def test_a_string_at_the_cap_is_sent_whole():
    exact = "a" * MAX_STRING_BYTES
    frame = encode_response(ApiKey.CREATE_TOPICS, 7, 1, create_topics_answer(exact))
    assert decode_response(ApiKey.CREATE_TOPICS, 7, frame)[1]["topics"][0]["error_message"] == exact


@pytest.mark.parametrize("version", [2, 7])
def test_a_long_request_string_fails_to_encode_naming_the_field(version):
    body = {"topics": [{"name": "t", "num_partitions": 1, "replication_factor": 1,
                        "assignments": [], "configs": [{"name": "cleanup.policy", "value": LONG}]}],
            "timeout_ms": 1000, "validate_only": False}
    with pytest.raises(ProtocolError, match=r"topics\[\]\.configs\[\]\.value.*at most 32767"):
        encode_request(ApiKey.CREATE_TOPICS, version, 1, "c", body)
