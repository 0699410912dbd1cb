"""A response as the TCP wire carries it (encode_response_wire): the int32
size, then exactly the bytes encode_response gives; one buffer unless a
records value is a file region, which stays a part of its own, uncopied."""
from __future__ import annotations

import struct

from kafkalite.protocol import ApiKey, encode_response, encode_response_wire
from kafkalite.storage.segment import FileRegion


def produce_response(partitions: int) -> dict:
    return {"responses": [{"name": "orders", "partition_responses": [
        {"index": i, "error_code": 0, "base_offset": 1_000 * i, "log_start_offset": 0}
        for i in range(partitions)]}], "throttle_time_ms": 0}


def fetch_response(records: list) -> dict:
    return {"responses": [{"topic": "orders", "partitions": [
        {"partition_index": i, "high_watermark": 10, "records": r}
        for i, r in enumerate(records)]}]}


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def test_a_response_without_file_regions_is_one_buffer_with_its_size():
    cases = [(ApiKey.PRODUCE, v, produce_response(n)) for v in (3, 8, 9, 11) for n in (0, 1, 3, 100)]
    cases += [(ApiKey.FETCH, v, fetch_response([b"batch-one" * 50, memoryview(b"two"), None]))
              for v in (4, 11, 12, 16)]
    cases.append((ApiKey.API_VERSIONS, 3, {"error_code": 0, "api_keys": []}))
    for api_key, version, body in cases:
        parts = encode_response_wire(api_key, version, 77, body)
        assert len(parts) == 1, (api_key, version)
        assert bytes(parts[0]) == sized(encode_response(api_key, version, 77, body)), \
            (api_key, version)


def test_a_file_region_stays_a_part_of_its_own_and_the_size_counts_it(tmp_path):
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"head" + b"R" * 3000 + b"tail")
    with open(segment, "rb") as file:
        region = FileRegion(file, 4, 3000)
        for version in (4, 12, 16):
            parts = encode_response_wire(ApiKey.FETCH, version, 5,
                                         fetch_response([b"inline", region, None]))
            assert sum(p is region for p in parts) == 1
            wire = b"".join(p.read() if p is region else bytes(p) for p in parts)
            expected = encode_response(ApiKey.FETCH, version, 5,
                                       fetch_response([b"inline", b"R" * 3000, None]))
            assert wire == sized(expected), version
