"""Malformed input raises ProtocolError, fast, and says what and where."""
from __future__ import annotations

import random
import struct
import time
import uuid

import pytest

from kafkalite.errors import InvalidRequestError
from kafkalite.protocol import (
    SUPPORTED_VERSIONS,
    ApiKey,
    ProtocolError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_header_version,
)

PRODUCE = {"transactional_id": "tx-1", "acks": -1, "timeout_ms": 1500, "topic_data": [
    {"name": "orders", "partition_data": [{"index": 0, "records": b"\x00" * 40},
                                          {"index": 1, "records": b"r" * 9}]}]}
FETCH_REQUEST = {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "cluster_id": "kl", "rack_id": "r1",
                 "topics": [{"topic": "orders", "topic_id": uuid.UUID(int=0x5EED_0001), "partitions": [
                     {"partition": 0, "fetch_offset": 42, "partition_max_bytes": 1 << 20}]}],
                 "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2, 3]}]}
METADATA = {"topics": [{"name": "orders"}, {"name": None, "topic_id": uuid.UUID(int=0x5EED_0002)}],
            "include_topic_authorized_operations": True}
JOIN_GROUP = {"group_id": "g", "session_timeout_ms": 10000, "member_id": "", "group_instance_id": None,
              "protocol_type": "consumer", "protocols": [{"name": "range", "metadata": b"\x00\x01abc"}]}
FETCH_RESPONSE = {"responses": [{"topic": "orders", "partitions": [
    {"partition_index": 0, "high_watermark": 99,
     "aborted_transactions": [{"producer_id": 7, "first_offset": 3}],
     "current_leader": {"leader_id": 1, "leader_epoch": 4}, "records": b"\x01" * 33}]}],
    "node_endpoints": [{"node_id": 1, "host": "localhost", "port": 9092, "rack": None}]}

REQUESTS = [
    (ApiKey.PRODUCE, 3, PRODUCE),
    (ApiKey.PRODUCE, 9, PRODUCE),
    (ApiKey.FETCH, 12, FETCH_REQUEST),
    (ApiKey.FETCH, 13, FETCH_REQUEST),
    (ApiKey.METADATA, 12, METADATA),
    (ApiKey.METADATA, 4, {"topics": [{"name": "a"}, {"name": "b"}]}),
    (ApiKey.JOIN_GROUP, 5, JOIN_GROUP),
    (ApiKey.JOIN_GROUP, 9, JOIN_GROUP),
    (ApiKey.API_VERSIONS, 3, {"client_software_name": "kafkalite", "client_software_version": "0.1"}),
]
RESPONSES = [
    (ApiKey.FETCH, 4, FETCH_RESPONSE),
    (ApiKey.FETCH, 16, FETCH_RESPONSE),
    (ApiKey.PRODUCE, 10, {"responses": [{"name": "orders", "partition_responses": [
        {"index": 0, "error_code": 6, "current_leader": {"leader_id": 2, "leader_epoch": 1}}]}]}),
]


def request_frames():
    return [(key, version, encode_request(key, version, 11, "fuzz", body)) for key, version, body in REQUESTS]


def response_frames():
    return [(key, version, encode_response(key, version, 11, body)) for key, version, body in RESPONSES]


def decodes_or_raises_protocol_error(decode, data):
    try:
        decode(data)
    except ProtocolError as exc:
        assert str(exc)
        return False
    return True


def test_protocol_error_is_an_invalid_request_error():
    assert issubclass(ProtocolError, InvalidRequestError)
    with pytest.raises(InvalidRequestError) as info:
        decode_request(b"\x00")
    assert info.value.code == 42


@pytest.mark.parametrize("key, version, frame", request_frames(), ids=lambda x: str(x)[:12])
def test_truncation_at_every_byte_of_a_request_raises_protocol_error(key, version, frame):
    assert decode_request(frame)[0].api_version == version
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:end])
        with pytest.raises(ProtocolError):
            decode_request(memoryview(frame)[:end])


def test_truncation_at_every_byte_of_a_response_raises_protocol_error():
    for key, version, frame in response_frames():
        for end in range(len(frame)):
            with pytest.raises(ProtocolError):
                decode_response(key, version, frame[:end])


def test_truncation_with_records_in_frames_raises_protocol_error():
    frames: list = []
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", PRODUCE, records_out=frames)
    for end in range(len(frame)):
        with pytest.raises(ProtocolError):
            decode_request(frame[:end], records_in=frames)


def test_bit_flips_raise_protocol_error_or_decode():
    cases = [(lambda data: decode_request(data), frame) for _, _, frame in request_frames()]
    cases += [(lambda data, k=key, v=version: decode_response(k, v, data), frame)
              for key, version, frame in response_frames()]
    for decode, frame in cases:
        for bit in range(len(frame) * 8):
            flipped = bytearray(frame)
            flipped[bit // 8] ^= 1 << (bit % 8)
            decodes_or_raises_protocol_error(decode, bytes(flipped))


def test_random_garbage_raises_protocol_error_or_decodes():
    rng = random.Random(20240601)
    keys = [(key, version) for key, (low, high) in SUPPORTED_VERSIONS.items()
            for version in range(low, high + 1)]
    decoded = 0
    for i in range(4000):
        size = rng.choice((0, 1, 5, 9, 12, 20, 40, 100, 300))
        garbage = bytes(rng.getrandbits(8) for _ in range(size))
        key, version = rng.choice(keys)
        if i % 4 == 0:
            frame = garbage  # anything at all, even the header
        else:  # a valid request header, then garbage: exercises the body decoders
            frame = struct.pack(">hhih", key, version, i, 4) + b"fuzz" + garbage
        decoded += decodes_or_raises_protocol_error(decode_request, frame)
        decoded += decodes_or_raises_protocol_error(lambda data: decode_response(key, version, data), garbage)
        decoded += decodes_or_raises_protocol_error(
            lambda data: decode_request(data, records_in=[b"x"]), frame)
    assert decoded < 12000


def test_huge_counts_and_lengths_fail_fast_without_allocating():
    def header(key, version, client_id=b"c"):
        flexible = b"\x00" if request_header_version(key, version) == 2 else b""
        return struct.pack(">hhih", key, version, 1, len(client_id)) + client_id + flexible

    fetch_v12_fixed = struct.pack(">iiiibii", -1, 0, 0, 0, 0, 0, 0)
    bogus = [
        (header(ApiKey.METADATA, 1) + struct.pack(">i", 0x7FFFFFFF) + b"\x00\x01a",
         r"topics at byte \d+: array count 2147483647 cannot fit in the 3 bytes left"),
        (header(ApiKey.METADATA, 9) + b"\xff\xff\xff\xff\x0f" + b"\x02a",
         r"topics at byte \d+: array count 4294967294 cannot fit"),
        (struct.pack(">hhih", ApiKey.PRODUCE, 3, 1, 0x7FFF) + b"x" * 10,
         r"client_id of 32767 bytes runs past the end"),
        (header(ApiKey.SASL_AUTHENTICATE, 0) + struct.pack(">i", 0x7FFFFFFF),
         r"auth_bytes at byte \d+: bytes of 2147483647 bytes runs past the end"),
        (header(ApiKey.PRODUCE, 8) + b"\xff\xff" + struct.pack(">hii", 1, 1, 1) + b"\x00\x01t"
         + struct.pack(">iii", 1, 0, 0x7FFFFFF0) + b"batch",
         r"partition_data\[0\]\.records at byte \d+: records of 2147483632 bytes runs past the end"),
        (header(ApiKey.FETCH, 12) + fetch_v12_fixed + b"\x01" + b"\x02" + b"\x01" + b"\xfe\xff\xff\xff\x0f",
         r"forgotten_topics_data\[0\]\.partitions at byte \d+: array count 4294967293 cannot fit"),
        (header(ApiKey.API_VERSIONS, 3) + b"\x01\x01" + b"\xff\xff\xff\xff\x0f",
         r"tagged fields at byte \d+: 4294967295 tagged fields cannot fit"),
    ]
    # fast: this thread's CPU time, not the wall clock (a loaded CI run
    # took 53 ms of wall time over one); without allocating: tracemalloc's
    # peak, which no load moves (a count believed would ask for gigabytes)
    import tracemalloc
    for frame, expected in bogus:
        tracemalloc.start()
        started = time.thread_time()
        try:
            with pytest.raises(ProtocolError, match=expected):
                decode_request(frame)
            cpu = time.thread_time() - started
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert cpu < 0.05 and peak < 1 << 20, (expected, cpu, peak)


def test_messages_say_what_and_where():
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", PRODUCE)
    with pytest.raises(ProtocolError, match=r"ProduceRequest v9: topic_data\[0\]\.partition_data\[1\]"
                                            r"\.records at byte \d+: records of 9 bytes runs past the end"):
        decode_request(frame[:-4])
    # header 11 bytes, transactional_id 6, then acks and timeout_ms read together
    with pytest.raises(ProtocolError, match=r"ProduceRequest v3: \(acks, timeout_ms\) at byte 17: "
                                            r"truncated, the input ends at byte 20"):
        decode_request(encode_request(ApiKey.PRODUCE, 3, 1, "c", PRODUCE)[:20])
    with pytest.raises(ProtocolError, match=r"ProduceRequest v3: topic_data\[0\]\.partition_data at byte 39: "
                                            r"array count 2 cannot fit in the 6 bytes left"):
        decode_request(encode_request(ApiKey.PRODUCE, 3, 1, "c", PRODUCE)[:45])
    with pytest.raises(ProtocolError, match="unknown API key 99"):
        decode_request(struct.pack(">hhih", 99, 0, 1, -1))
    with pytest.raises(ProtocolError, match=r"request header truncated: 3 bytes"):
        decode_request(b"\x00\x03\x00")


def test_negative_lengths_other_than_null_are_rejected():
    prefix = struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 1, 1, -1)
    with pytest.raises(ProtocolError, match="invalid string length -1"):  # mechanism is not nullable
        decode_request(prefix + struct.pack(">h", -1))
    with pytest.raises(ProtocolError, match="invalid string length -2"):
        decode_request(prefix + struct.pack(">h", -2))
    with pytest.raises(ProtocolError, match="invalid client_id length -3"):
        decode_request(struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 1, 1, -3))
    metadata_v1 = struct.pack(">hhih", ApiKey.METADATA, 1, 1, -1)
    assert decode_request(metadata_v1 + struct.pack(">i", -1))[1]["topics"] is None
    with pytest.raises(ProtocolError, match="invalid array length -2"):
        decode_request(metadata_v1 + struct.pack(">i", -2))
    with pytest.raises(ProtocolError, match="invalid array length -1"):  # v0 topics are not nullable
        decode_request(struct.pack(">hhih", ApiKey.METADATA, 0, 1, -1) + struct.pack(">i", -1))


def test_bad_varints_are_rejected():
    flexible = struct.pack(">hhih", ApiKey.METADATA, 9, 1, -1) + b"\x00"
    with pytest.raises(ProtocolError, match="longer than 5 bytes"):
        decode_request(flexible + b"\x80\x80\x80\x80\x80\x01")
    with pytest.raises(ProtocolError, match="does not fit in 32 bits"):
        decode_request(flexible + b"\x80\x80\x80\x80\x7f")


def test_trailing_bytes_invalid_utf8_and_bad_frame_indexes():
    frame = encode_request(ApiKey.HEARTBEAT, 3, 1, "c", {"group_id": "g"})
    with pytest.raises(ProtocolError, match="2 unexpected bytes after the body"):
        decode_request(frame + b"xx")
    with pytest.raises(ProtocolError, match="invalid UTF-8"):
        decode_request(struct.pack(">hhih", ApiKey.SASL_HANDSHAKE, 1, 1, -1) + b"\x00\x02\xc3\x28")
    frames: list = []
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", PRODUCE, records_out=frames)
    with pytest.raises(ProtocolError, match="records frame index 1 but 1 frames"):
        decode_request(frame, records_in=frames[:1])


def test_unsupported_version_carries_the_header_and_unsupported_version_code():
    newest = SUPPORTED_VERSIONS[ApiKey.API_VERSIONS][1]
    frame = (struct.pack(">hhih", ApiKey.API_VERSIONS, newest + 1, 321, 4) + b"kcat" + b"\x00"
             + b"\x03kl\x020\x00")
    with pytest.raises(ProtocolError) as info:
        decode_request(frame)
    assert info.value.code == 35 and info.value.name == "UNSUPPORTED_VERSION"
    assert info.value.header == (ApiKey.API_VERSIONS, newest + 1, 321, "kcat")
    with pytest.raises(ProtocolError) as info:
        decode_request(struct.pack(">hhih", 1000, 0, 5, -1))
    # an API key kafkalite does not know: unsupported, not malformed
    assert info.value.code == 35 and info.value.header.api_key == 1000
    with pytest.raises(ProtocolError) as info:
        decode_request(struct.pack(">hhih", ApiKey.PRODUCE, 3, 5, -1) + b"\x00\x01")
    assert info.value.header == (ApiKey.PRODUCE, 3, 5, None)


def test_encoding_rejects_keys_the_schema_does_not_have():
    # A typo in a handler ("topcs") must not encode as an empty topics array.
    with pytest.raises(ProtocolError, match=r"MetadataResponse v12: cannot encode body: "
                                            r"MalformedInput: unknown field\(s\) 'topcs'"):
        encode_response(ApiKey.METADATA, 12, 1, {"brokers": [], "topcs": []})
    # ... at any depth, naming where
    with pytest.raises(ProtocolError, match=r"cannot encode topic_data\[\]: .*unknown field\(s\) "
                                            r"'partiton_data'"):
        encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [{"name": "t",
                                                                   "partiton_data": []}]})
    # A field this version lacks is fine: bodies are written once for all versions.
    encode_response(ApiKey.METADATA, 0, 1, {"brokers": [], "topics": [], "cluster_id": "c",
                                            "controller_id": 1})
    # The data codec (group records) checks too.
    from kafkalite.protocol.codec import encode_data
    from kafkalite.protocol.messages.group_records import OffsetCommitKey
    with pytest.raises(ProtocolError, match="unknown field"):
        encode_data(OffsetCommitKey, 1, {"group": "g", "topic": "t", "partition": 0, "x": 1})


def test_encoding_a_body_that_does_not_fit_raises_protocol_error():
    with pytest.raises(ProtocolError, match=r"ProduceRequest v9: cannot encode topic_data\[\]\.name"):
        encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [{"name": 5}]})
    with pytest.raises(ProtocolError, match=r"cannot encode \(acks, timeout_ms\)"):
        encode_request(ApiKey.PRODUCE, 9, 1, "c", {"acks": 1 << 20})
    with pytest.raises(ProtocolError, match="not supported"):
        encode_request(ApiKey.PRODUCE, 14, 1, "c", {})
    frames = [b"kept"]
    with pytest.raises(ProtocolError):
        encode_request(ApiKey.PRODUCE, 9, 1, "c", {"topic_data": [{"name": "t", "partition_data": [
            {"index": 0, "records": b"a"}, {"index": "x", "records": b"b"}]}]}, records_out=frames)
    assert frames == [b"kept"]
