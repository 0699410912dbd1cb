"""The one-pass Produce path's own codec (ext/produce_wire.pyx) against the
generic one: ``read_produce`` gives exactly what ``decode_request`` gives
for every frame it takes, and takes nothing of another kind (it returns
None, and the generic codec serves it); ``write_produce_answer`` gives the
bytes ``encode_response_wire`` gives, at every version it writes."""
from __future__ import annotations

import random

import pytest

from kafkalite._ext.produce_wire import read_produce, write_produce_answer
from kafkalite.protocol import ApiKey, ProtocolError, decode_request, encode_request
from kafkalite.protocol.codec import encode_response_wire

VERSIONS = range(3, 13)
NAMES = ["t", "orders", "ünïcode-topic", "x" * 200, ""]


def _body(rng) -> dict:
    topics = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
        # past 127 partitions a compact count takes two bytes
        # a length of 70,000 takes three varint bytes
        count = rng.choice([0, 1, 1, 2, 5, 130])
        sizes = [0, 1, 61, 200] if count > 2 else [0, 1, 61, 200, 70_000]
        topics.append({"name": rng.choice(NAMES), "partition_data": [
            {"index": rng.choice([0, 1, 7, 2**31 - 1, -1]),
             "records": rng.randbytes(rng.choice(sizes))}
            for _ in range(count)]})
    return {"transactional_id": None, "acks": rng.choice([-1, 0, 1, 2, -32768]),
            "timeout_ms": rng.choice([0, 30_000, -1]), "topic_data": topics}


def _expected(frame) -> tuple:
    """What read_produce must give: the generic decode's, in its shape."""
    header, body = decode_request(bytearray(frame), ignore_trailing=True)
    return (header.api_version, header.correlation_id, body["acks"],
            [(t["name"], [(p["index"], bytes(p["records"])) for p in t["partition_data"]])
             for t in body["topic_data"]])


def _plain(read) -> tuple | None:
    if read is None:
        return None
    version, cid, acks, topics = read
    return (version, cid, acks, [(name, [(i, bytes(r)) for i, r in parts])
                                 for name, parts in topics])


@pytest.mark.parametrize("version", VERSIONS)
def test_common_requests_read_as_the_generic_codec(version):
    rng = random.Random(version)
    for _ in range(60):
        frame = bytearray(encode_request(ApiKey.PRODUCE, version, rng.randint(-2**31, 2**31 - 1),
                                         rng.choice([None, "", "rdkafka", "a" * 300]),
                                         _body(rng)))
        read = read_produce(frame)
        assert _plain(read) == _expected(frame)
        # records are views of the frame itself, writable: the log patches them in place
        for _, parts in read[3]:
            for _, records in parts:
                assert type(records) is memoryview and not records.readonly
                if len(records):
                    assert records.obj is frame


def _uncommon(version: int) -> list:
    """(why, frame) of Produce requests the one-pass path leaves to the full one."""
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": b"r" * 70}]}]}
    frame = bytearray(encode_request(ApiKey.PRODUCE, version, 9, "c", body))
    cases = [
        ("transactional", encode_request(ApiKey.PRODUCE, version, 9, "c",
                                         body | {"transactional_id": "tx"})),
        ("null records", encode_request(ApiKey.PRODUCE, version, 9, "c", body | {"topic_data": [
            {"name": "t", "partition_data": [{"index": 0, "records": None}]}]})),
        ("non-ASCII client id", encode_request(ApiKey.PRODUCE, version, 9, "clïent", body)),
        ("a trailing byte", frame + b"\x00"),
    ]
    if version >= 9:
        cases.append(("request principal", encode_request(
            ApiKey.PRODUCE, version, 9, "c", body | {"request_principal": "User:x"})))
        tagged = bytearray(frame)
        header_tags = 10 + 1           # api key, version, correlation id, client id "c"
        tagged[header_tags:header_tags + 1] = b"\x01\x07\x01\x00"   # one unknown header tag
        cases.append(("a header tag", tagged))
    cases += [(f"cut to {n} bytes", frame[:n]) for n in range(len(frame))]
    return cases


@pytest.mark.parametrize("version", VERSIONS)
def test_other_requests_are_left_to_the_generic_codec(version):
    for why, frame in _uncommon(version):
        assert read_produce(bytearray(frame)) is None, why
    other = encode_request(ApiKey.FETCH, 12, 1, "c", {"topics": []})
    assert read_produce(bytearray(other)) is None
    for outside in (2, 13):
        frame = encode_request(ApiKey.PRODUCE, outside, 1, "c", {
            "transactional_id": None, "acks": 1, "timeout_ms": 5, "topic_data": []})
        assert read_produce(bytearray(frame)) is None


@pytest.mark.parametrize("version", VERSIONS)
def test_damaged_requests_are_read_as_the_generic_codec_or_left_to_it(version):
    rng = random.Random(100 + version)
    for _ in range(300):
        frame = bytearray(encode_request(ApiKey.PRODUCE, version, 5, "c", _body(rng)))
        for _ in range(rng.randint(1, 3)):
            frame[rng.randrange(len(frame))] = rng.randrange(256)
        read = read_produce(frame)
        if read is None:
            continue
        # whatever it takes, the generic codec decodes the same, of the kind it takes
        try:
            header, body = decode_request(bytearray(frame))
        except ProtocolError as exc:
            pytest.fail(f"read a frame the generic codec refuses ({exc}): {bytes(frame)!r}")
        assert header.api_key == ApiKey.PRODUCE and body["transactional_id"] is None
        assert not body["request_principal"]
        assert _plain(read) == _expected(frame)


def _answer(rng) -> list:
    return [(rng.choice(NAMES), [
        (rng.choice([0, 3, 2**31 - 1, -2**31]), rng.choice([0, 1, 2**62, 2**63 - 1]),
         rng.choice([-1, 1_700_000_000_000]), rng.choice([-1, 0, 12345]))
        for _ in range(rng.choice([0, 1, 1, 2, 130]))])
        for _ in range(rng.choice([0, 1, 1, 2, 3]))]


@pytest.mark.parametrize("version", VERSIONS)
def test_answers_write_as_the_generic_codec(version):
    rng = random.Random(200 + version)
    for _ in range(60):
        answer, cid = _answer(rng), rng.randint(-2**31, 2**31 - 1)
        body = {"responses": [{"name": name, "partition_responses": [
            {"index": i, "error_code": 0, "base_offset": base, "log_append_time_ms": at,
             "log_start_offset": start, "record_errors": [], "error_message": None}
            for i, base, at, start in parts]} for name, parts in answer],
            "throttle_time_ms": 0}
        written = write_produce_answer(version, cid, answer)
        assert type(written) is bytearray
        assert bytes(written) == bytes(encode_response_wire(ApiKey.PRODUCE, version, cid, body)[0])


def test_an_answer_it_cannot_write_is_refused():
    with pytest.raises(ValueError):
        write_produce_answer(13, 1, [])
    with pytest.raises(OverflowError):
        write_produce_answer(9, 1, [("t", [(2**31, 0, -1, 0)])])
