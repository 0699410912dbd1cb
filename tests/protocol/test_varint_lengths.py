"""Compact lengths of one, two and more varint bytes decode to the same
values (the decoder reads one- and two-byte lengths inline, longer ones
with read_uvarint), and a frame cut inside a length is refused as malformed."""
from __future__ import annotations

import pytest

from kafkalite.protocol import ApiKey, ProtocolError, decode_request, encode_request

# records sizes whose compact length (size + 1) takes 1, 2 and 3 varint bytes, at each edge
SIZES = [0, 1, 126, 127, 128, 255, 256, 1024, 16382, 16383, 16384, 70_000]


def produce(records: list) -> bytes:
    return encode_request(ApiKey.PRODUCE, 9, 3, "rdkafka", {
        "acks": -1, "timeout_ms": 1000, "topic_data": [{"name": "t" * 200, "partition_data": [
            {"index": i, "records": r} for i, r in enumerate(records)]}]})


def test_every_length_width_decodes_to_the_bytes_sent():
    records = [bytes([i % 251]) * size for i, size in enumerate(SIZES)]
    _, body = decode_request(produce(records))
    assert body["topic_data"][0]["name"] == "t" * 200      # a two-byte string length
    got = [bytes(p["records"]) for p in body["topic_data"][0]["partition_data"]]
    assert got == records


@pytest.mark.parametrize("size", [200, 16382, 70_000])
def test_a_frame_cut_after_the_first_byte_of_a_length_is_refused(size):
    frame = produce([b"x" * size])
    start = frame.index(b"x" * size)
    width = 2 if size + 1 < 16384 else 3
    with pytest.raises(ProtocolError) as refused:
        decode_request(frame[:start - width + 1])
    assert refused.value.code == 42        # INVALID_REQUEST, as any malformed request
