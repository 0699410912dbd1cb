"""Records values travel in frames of their own, uncopied."""
from __future__ import annotations

import struct

import zmq

from kafkalite.protocol import ApiKey, decode_request, decode_response, encode_request, encode_response


def produce_body(records):
    a, b, c = records
    return {"acks": -1, "timeout_ms": 1000, "topic_data": [
        {"name": "orders", "partition_data": [{"index": 0, "records": a}, {"index": 1, "records": b}]},
        {"name": "audit", "partition_data": [{"index": 7, "records": c}]},
    ]}


def decoded_records(body):
    return [p["records"] for t in body["topic_data"] for p in t["partition_data"]]


def test_produce_request_carries_three_frames_in_order_and_decodes_to_the_same_objects():
    records = [b"batch-one" * 10, bytearray(b"batch-two"), memoryview(b"batch-three")]
    for version in (3, 8, 9, 10):
        frames: list = []
        frame = encode_request(ApiKey.PRODUCE, version, 5, "producer-1", produce_body(records),
                               records_out=frames)
        assert len(frames) == 3
        assert all(got is sent for got, sent in zip(frames, records))
        assert b"batch" not in frame
        header, body = decode_request(frame, records_in=frames)
        assert header.api_key is ApiKey.PRODUCE and header.correlation_id == 5
        assert all(got is sent for got, sent in zip(decoded_records(body), records))


def test_frame_index_is_an_int32_even_in_flexible_versions_and_none_stays_none():
    frames: list = []
    body = {"topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": None},
                                                          {"index": 1, "records": b"x"}]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", body, records_out=frames)
    assert frames == [b"x"]
    # ... partition 0: index, -1, no tags; partition 1: index, frame 0, no tags; ...
    partition_0 = struct.pack(">i", 0) + struct.pack(">i", -1) + b"\x00"
    partition_1 = struct.pack(">i", 1) + struct.pack(">i", 0) + b"\x00"
    assert partition_0 + partition_1 in frame
    assert decoded_records(decode_request(frame, records_in=frames)[1]) == [None, b"x"]


def test_frames_appended_after_existing_items_index_the_whole_list():
    frames: list = [b"already-there"]
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", produce_body([b"a", b"b", b"c"]), records_out=frames)
    assert frames == [b"already-there", b"a", b"b", b"c"]
    assert decoded_records(decode_request(frame, records_in=frames)[1]) == [b"a", b"b", b"c"]


def test_fetch_response_records_in_frames():
    data = [b"\x00" * 70, b"\x01" * 90]
    body = {"responses": [{"topic": "t", "partitions": [
        {"partition_index": 0, "high_watermark": 10, "records": data[0]},
        {"partition_index": 1, "high_watermark": 20, "records": data[1]},
        {"partition_index": 2, "error_code": 1, "records": None},
    ]}]}
    for version in (4, 11, 12, 16):
        frames: list = []
        frame = encode_response(ApiKey.FETCH, version, 3, body, records_out=frames)
        assert frames == data
        _, decoded = decode_response(ApiKey.FETCH, version, frame, records_in=frames)
        got = [p["records"] for p in decoded["responses"][0]["partitions"]]
        assert got[0] is data[0] and got[1] is data[1] and got[2] is None


def test_zmq_frames_survive_a_real_socket_uncopied():
    context = zmq.Context.instance()
    sender, receiver = context.socket(zmq.PAIR), context.socket(zmq.PAIR)
    try:
        receiver.bind("inproc://kafkalite-protocol-records")
        sender.connect("inproc://kafkalite-protocol-records")
        batches = [b"A" * 5000, b"B" * 3, b"C" * 70000]
        frames: list = []
        request = encode_request(ApiKey.PRODUCE, 9, 42, "zmq-client", produce_body(batches),
                                 records_out=frames)
        sender.send_multipart([request, *frames], copy=False)
        parts = receiver.recv_multipart(copy=False)
        header, body = decode_request(parts[0].buffer, records_in=parts[1:])
        assert header.correlation_id == 42
        got = decoded_records(body)
        assert all(g is p for g, p in zip(got, parts[1:]))
        assert [g.bytes for g in got] == batches
    finally:
        sender.close(linger=0)
        receiver.close(linger=0)


def test_without_frames_records_decode_as_views_of_the_input():
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "c", produce_body([b"a" * 100, b"b", b"c"]))
    _, body = decode_request(frame)
    first = decoded_records(body)[0]
    assert isinstance(first, memoryview) and first.obj is frame
    assert first == b"a" * 100
