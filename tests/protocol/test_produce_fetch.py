"""The compiled ProduceRequest and FetchRequest decoders and ProduceResponse
and FetchResponse encoders (ext/produce_fetch.pyx, installed by
kafkalite/protocol/ext_codecs.py) give exactly what the generated codec
gives: the same dicts field for field (a FetchRequest topic's partitions
as a FetchPartitionList equal to them), the same bytes (a FetchResponse
topic's FetchedPartitions as its dicts'), the same ProtocolError for
malformed input and bad bodies."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite._ext.produce_fetch import (FetchedPartitions, FetchPartitionList,
                                          FetchRequestDecoder, FetchResponseEncoder,
                                          ProduceRequestDecoder, ProduceResponseEncoder)
from kafkalite.protocol import ApiKey, ProtocolError
from kafkalite.protocol.codec import _compile, _decode_body, _encode_body, _REQUEST_CODECS, _RESPONSE_CODECS
from kafkalite.protocol.compiler import CompiledMessage
from kafkalite.protocol.ext_codecs import (FETCH_REQUEST_VERSIONS, FETCH_RESPONSE_VERSIONS,
                                           PRODUCE_REQUEST_VERSIONS,
                                           PRODUCE_RESPONSE_VERSIONS, install)
from kafkalite.protocol.messages import REQUESTS, RESPONSES

PRODUCE = REQUESTS[ApiKey.PRODUCE]
PRODUCE_RESPONSE = RESPONSES[ApiKey.PRODUCE]
FETCH = RESPONSES[ApiKey.FETCH]
EXAMPLES = settings(max_examples=15, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def codecs(message, version: int, frames: bool) -> tuple[CompiledMessage, CompiledMessage]:
    """(generated, twin) codecs of ``message`` at ``version``."""
    generated = CompiledMessage(message, version, frames)
    twin = CompiledMessage(message, version, frames)
    assert install(twin)
    return generated, twin


def plain(value):
    """``value`` with memoryviews as ("memoryview", bytes): comparable, and
    a twin giving bytes where the generated code gives a view shows."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, memoryview):
        return ("memoryview", value.tobytes())
    return value


def decoded(codec: CompiledMessage, frame: bytes, records_in=None):
    view = memoryview(frame)
    try:
        return "ok", plain(_decode_body(codec, view, 0, len(view), records_in, None))
    except ProtocolError as exc:
        return "error", str(exc)


def encoded(codec: CompiledMessage, body, records_out=None):
    out: list = []
    try:
        _encode_body(codec, body, out, records_out)
    except ProtocolError as exc:
        return "error", str(exc), None
    return "ok", b"".join(_part_bytes(p) for p in out), out


def _part_bytes(part) -> bytes:
    if hasattr(part, "sendfile"):       # a file region: where it stands, and its length
        return b"<region of %d bytes>" % part.length
    return bytes(part)


@pytest.mark.parametrize("version", PRODUCE_REQUEST_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_the_broker_codec_runs_the_twins(version, frames):
    """A schema change (new field, default, nullability) stops the twin
    from being installed: this fails until ext/produce_fetch.pyx is reviewed."""
    produce = _REQUEST_CODECS.get((ApiKey.PRODUCE, version, frames)) or _compile(
        _REQUEST_CODECS, REQUESTS, ApiKey.PRODUCE, version, frames)
    assert isinstance(produce.decode, ProduceRequestDecoder)


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_the_broker_codec_runs_the_fetch_twin(version, frames):
    fetch = _RESPONSE_CODECS.get((ApiKey.FETCH, version, frames)) or _compile(
        _RESPONSE_CODECS, RESPONSES, ApiKey.FETCH, version, frames)
    assert isinstance(fetch.encode, FetchResponseEncoder)


# Records of 0-300 bytes cross the one/two-byte varint edge (127/128), and
# now and then 16 KiB+ needs three; topic names are any unicode.
_LARGE = st.integers(16380, 16390).map(lambda n: bytes([n % 251]) * n)
_RECORDS = st.none() | st.binary(max_size=300) | _LARGE
_TOPIC = st.text(max_size=20)


def produce_body(flexible: bool):
    partition = st.fixed_dictionaries({"index": st.integers(-(1 << 31), (1 << 31) - 1), "records": _RECORDS})
    topic = st.fixed_dictionaries({"name": _TOPIC, "partition_data": st.lists(partition, max_size=25)})
    fields = {
        "transactional_id": st.none() | _TOPIC,
        "acks": st.integers(-(1 << 15), (1 << 15) - 1),
        "timeout_ms": st.integers(-(1 << 31), (1 << 31) - 1),
        "topic_data": st.lists(topic, max_size=6),
    }
    if flexible:   # a tagged field: the twin leaves the request to the generated code
        fields["request_principal"] = st.none() | st.none() | st.none() | _TOPIC
    return st.fixed_dictionaries(fields)


def produce_frame(version: int, frames: bool, body) -> tuple[bytes, list | None]:
    encoder = CompiledMessage(PRODUCE, version, frames)
    out: list = []
    records = [] if frames else None
    encoder.encode(body, out.append, records)
    return b"".join(out), records


@pytest.mark.parametrize("version", PRODUCE_REQUEST_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_produce_request_decodes_as_the_generated_codec(version, data):
    body = data.draw(produce_body(PRODUCE.is_flexible(version)))
    for frames in (False, True):
        generated, twin = codecs(PRODUCE, version, frames)
        frame, records = produce_frame(version, frames, body)
        want = decoded(generated, frame, records)
        assert want[0] == "ok"
        assert decoded(twin, frame, records) == want


def _produce_samples() -> list[dict]:
    """Requests with null, empty and full records, in the middle and last
    (a length checked one byte short only shows at the end of the input)."""
    return [
        {"transactional_id": "tx-\u00e9", "acks": -1, "timeout_ms": 30000, "topic_data": [
            {"name": "t\u00f6pic-\U0001F600", "partition_data": [
                {"index": 0, "records": bytes(range(200))}, {"index": 7, "records": None},
                {"index": 2, "records": b""}]},
            {"name": "", "partition_data": []},
        ]},
        {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": "bench", "partition_data": [{"index": 3, "records": b"r" * 130}]},
        ]},
    ]


def _produce_sample(version: int) -> dict:
    return _produce_samples()[0]


@pytest.mark.parametrize("version", PRODUCE_REQUEST_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_every_truncation_of_a_produce_request_fails_as_the_generated_codec(version, frames):
    generated, twin = codecs(PRODUCE, version, frames)
    for sample in _produce_samples():
        frame, records = produce_frame(version, frames, sample)
        for cut in range(len(frame)):
            want = decoded(generated, frame[:cut], records)
            assert want[0] == "error"
            assert decoded(twin, frame[:cut], records) == want, cut


@pytest.mark.parametrize("version", PRODUCE_REQUEST_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_corrupt_produce_requests_decode_as_the_generated_codec(version, frames):
    """Each byte one more or less, or set to values that inflate a count or
    length, make it negative or null, or break UTF-8: the twin's answer is
    the generated code's, error or body."""
    generated, twin = codecs(PRODUCE, version, frames)
    for sample in _produce_samples():
        frame, records = produce_frame(version, frames, sample)
        for at in range(len(frame)):
            for byte in {0x00, 0x01, 0x7F, 0x80, 0xC3, 0xFE, 0xFF, (frame[at] + 1) & 0xFF, (frame[at] - 1) & 0xFF}:
                bad = frame[:at] + bytes([byte]) + frame[at + 1:]
                assert decoded(twin, bad, records) == decoded(generated, bad, records), (at, byte)


def _not_called(*args):
    raise AssertionError("the twin left this to the generated code")


@pytest.mark.parametrize("version", PRODUCE_REQUEST_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_the_produce_twin_decodes_a_client_request_itself(version, frames):
    """Not a twin that always hands over: a request as clients send them
    (no tagged fields) is decoded without the generated code."""
    generated, twin = codecs(PRODUCE, version, frames)
    frame, records = produce_frame(version, frames, _produce_sample(version))
    principal = next(f for f in PRODUCE.fields if f.name == "request_principal").default(version)
    alone = ProduceRequestDecoder(PRODUCE.is_flexible(version), frames, principal, _not_called)
    view = memoryview(frame)
    body, pos = alone(view, 0, len(view), records)
    assert pos == len(frame)
    assert plain(body) == decoded(generated, frame, records)[1]


def test_a_produce_request_with_unknown_tags_decodes_as_the_generated_codec():
    generated, twin = codecs(PRODUCE, 9, False)
    frame, _ = produce_frame(9, False, _produce_sample(9))
    # the request's own (last) tagged section: one unknown tag 5 of 2 bytes
    tagged = frame[:-1] + b"\x01\x05\x02ab"
    want = decoded(generated, tagged)
    assert want[0] == "ok"
    assert decoded(twin, tagged) == want


# ---------------------------------------------------------------- Fetch

_I16 = st.integers(-(1 << 15), (1 << 15) - 1)
_I32 = st.integers(-(1 << 31), (1 << 31) - 1)
_I64 = st.integers(-(1 << 63), (1 << 63) - 1)


def _fetch_records():
    return (st.none() | st.binary(max_size=300) | _LARGE
            | st.binary(max_size=200).map(memoryview) | st.binary(max_size=50).map(bytearray))


def fetch_body(version: int):
    aborted = st.fixed_dictionaries({"producer_id": _I64, "first_offset": _I64})
    partition = {
        "partition_index": _I32, "error_code": _I16, "high_watermark": _I64,
        "last_stable_offset": _I64, "log_start_offset": _I64,
        "aborted_transactions": st.none() | st.lists(aborted, max_size=3),
        "preferred_read_replica": _I32, "records": _fetch_records(),
    }
    optional = {}
    if version >= 12:      # tagged fields, set now and then: left to the generated code
        leader = st.fixed_dictionaries({"leader_id": _I32, "leader_epoch": _I32})
        optional["current_leader"] = st.just({}) | leader
        optional["diverging_epoch"] = st.just({}) | st.fixed_dictionaries({"epoch": _I32, "end_offset": _I64})
    topic = st.fixed_dictionaries({
        "topic": _TOPIC, "topic_id": st.uuids(),
        "partitions": st.lists(st.fixed_dictionaries(partition, optional=optional), max_size=25),
    })
    top_optional = {}
    if version >= 16:
        endpoint = st.fixed_dictionaries({"node_id": _I32, "host": _TOPIC, "port": _I32, "rack": st.none()})
        top_optional["node_endpoints"] = st.just([]) | st.lists(endpoint, max_size=2)
    return st.fixed_dictionaries({
        "throttle_time_ms": _I32, "error_code": _I16, "session_id": _I32,
        "responses": st.lists(topic, max_size=6),
    }, optional=top_optional)


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_fetch_response_encodes_as_the_generated_codec(version, data):
    body = data.draw(fetch_body(version))
    generated, twin = codecs(FETCH, version, False)
    want = encoded(generated, body)
    assert want[0] == "ok"
    got = encoded(twin, body)
    assert got[:2] == want[:2]
    # each records value is a part of its own, as given (a file region is
    # written by sendfile, a batch uncopied)
    given_records = [p.get("records") for t in body["responses"] for p in t["partitions"]]
    for records in given_records:
        if records is not None:
            assert any(part is records for part in got[2])

    generated, twin = codecs(FETCH, version, True)
    want_frames: list = []
    got_frames: list = []
    want = encoded(generated, body, want_frames)
    assert encoded(twin, body, got_frames)[:2] == want[:2]
    assert len(got_frames) == len(want_frames)
    assert all(a is b for a, b in zip(got_frames, want_frames))


class _FileRegion:
    """A records value not in memory, as storage.segment.FileRegion."""

    def __init__(self, length):
        self.length = length

    def sendfile(self, fd):
        raise AssertionError("not sent here")


def _fetch_sample() -> dict:
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 12, "responses": [
        {"topic": "t\u00f6pic", "topic_id": uuid.UUID(int=7), "partitions": [
            {"partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
             "log_start_offset": 0, "aborted_transactions": None, "records": b"x" * 130},
            {"partition_index": 1, "high_watermark": 3, "records": None},
        ]},
    ]}


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
@pytest.mark.parametrize("frames", [False, True])
def test_the_fetch_twin_encodes_a_broker_answer_itself(version, frames):
    generated, _ = codecs(FETCH, version, frames)
    alone = FetchResponseEncoder(version, FETCH.is_flexible(version), frames, _not_called, _not_called)
    want_frames: list = []
    got_frames: list = []
    want = encoded(generated, _fetch_sample(), want_frames if frames else None)
    parts: list = []
    alone(_fetch_sample(), parts.append, got_frames if frames else None)
    assert b"".join(parts) == want[1]
    assert got_frames == want_frames


# (what is wrong, a change to the sample): the generated code's error, or
# its bytes, whichever it gives, is the twin's
_BAD_BODIES = [
    ("unknown top-level key", lambda b: b.update(throttle_ms=1)),
    ("unknown partition key", lambda b: b["responses"][0]["partitions"][0].update(offset=1)),
    ("unknown aborted transaction key", lambda b: b["responses"][0]["partitions"][0].update(
        aborted_transactions=[{"producer_id": 1, "first_offset": 2, "x": 3}])),
    ("int16 out of range", lambda b: b["responses"][0]["partitions"][0].update(error_code=1 << 15)),
    ("int64 out of range", lambda b: b["responses"][0]["partitions"][1].update(high_watermark=1 << 63)),
    ("None for an int", lambda b: b["responses"][0]["partitions"][0].update(partition_index=None)),
    ("float for an int", lambda b: b.update(throttle_time_ms=1.5)),
    ("bool for an int", lambda b: b.update(throttle_time_ms=True)),
    ("bytes topic name", lambda b: b["responses"][0].update(topic=b"raw")),
    ("topic name past Kafka's cap", lambda b: b["responses"][0].update(topic="\u00e9" * 20000)),
    ("unpaired surrogate in a topic", lambda b: b["responses"][0].update(topic="\ud800")),
    ("records not bytes-like", lambda b: b["responses"][0]["partitions"][0].update(records=12)),
    ("records as a str", lambda b: b["responses"][0]["partitions"][0].update(records="abc")),
    ("records as a file region", lambda b: b["responses"][0]["partitions"][0].update(records=_FileRegion(99))),
    ("a file region of a negative length", lambda b: b["responses"][0]["partitions"][0].update(
        records=_FileRegion(-5))),
    ("a topic id as 16 bytes", lambda b: b["responses"][0].update(topic_id=bytes(range(16)))),
    ("a topic id of 3 bytes", lambda b: b["responses"][0].update(topic_id=b"abc")),
    ("partitions as a tuple", lambda b: b["responses"][0].update(partitions=())),
    ("a partition as a list", lambda b: b["responses"][0]["partitions"].append([1])),
    ("node endpoints as a tuple", lambda b: b.update(node_endpoints=())),
]


@pytest.mark.parametrize("version", FETCH_RESPONSE_VERSIONS)
@pytest.mark.parametrize("what, change", _BAD_BODIES, ids=[w for w, _ in _BAD_BODIES])
def test_odd_fetch_bodies_encode_or_fail_as_the_generated_codec(version, what, change):
    body = _fetch_sample()
    change(body)
    generated, twin = codecs(FETCH, version, False)
    want = encoded(generated, body)
    assert encoded(twin, body)[:2] == want[:2]
    generated, twin = codecs(FETCH, version, True)
    want_frames: list = []
    got_frames: list = []
    want = encoded(generated, body, want_frames)
    assert encoded(twin, body, got_frames)[:2] == want[:2]
    assert got_frames == want_frames


# ---------------------------------------------------------------- Produce's answer

@pytest.mark.parametrize("version", PRODUCE_RESPONSE_VERSIONS)
def test_the_broker_codec_runs_the_produce_response_twin(version):
    produce = _RESPONSE_CODECS.get((ApiKey.PRODUCE, version, False)) or _compile(
        _RESPONSE_CODECS, RESPONSES, ApiKey.PRODUCE, version, False)
    assert isinstance(produce.encode, ProduceResponseEncoder)


def produce_response_body(version: int):
    partition = {"index": _I32, "error_code": _I16, "base_offset": _I64,
                 "log_append_time_ms": _I64}
    if version >= 5:
        partition["log_start_offset"] = _I64
    if version >= 8:
        error = st.fixed_dictionaries({"batch_index": _I32,
                                       "batch_index_error_message": st.none() | _TOPIC})
        partition["record_errors"] = st.lists(error, max_size=3)
        partition["error_message"] = st.none() | _TOPIC
    optional = {}
    if version >= 10:      # a tagged field, set now and then: left to the generated code
        optional["current_leader"] = st.just({}) | st.fixed_dictionaries(
            {"leader_id": _I32, "leader_epoch": _I32})
    topic = st.fixed_dictionaries({
        "name": _TOPIC,
        "partition_responses": st.lists(st.fixed_dictionaries(partition, optional=optional),
                                        max_size=25)})
    top_optional = {}
    if version >= 10:
        endpoint = st.fixed_dictionaries({"node_id": _I32, "host": _TOPIC, "port": _I32,
                                          "rack": st.none() | _TOPIC})
        top_optional["node_endpoints"] = st.just([]) | st.lists(endpoint, max_size=2)
    return st.fixed_dictionaries({"responses": st.lists(topic, max_size=6),
                                  "throttle_time_ms": _I32}, optional=top_optional)


@pytest.mark.parametrize("version", PRODUCE_RESPONSE_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_produce_response_encodes_as_the_generated_codec(version, data):
    body = data.draw(produce_response_body(version))
    generated, twin = codecs(PRODUCE_RESPONSE, version, False)
    want = encoded(generated, body)
    assert want[0] == "ok"
    assert encoded(twin, body)[:2] == want[:2]


def _produce_response_sample(version: int) -> dict:
    partition = {"index": 3, "error_code": 0, "base_offset": 12_345, "log_append_time_ms": -1}
    if version >= 5:
        partition["log_start_offset"] = 0
    if version >= 8:
        partition["record_errors"] = [{"batch_index": 0, "batch_index_error_message": "t\u00f6o big"}]
        partition["error_message"] = None
    return {"responses": [{"name": "t\u00f6pic", "partition_responses": [
        partition, {"index": 4, "error_code": 6}]}], "throttle_time_ms": 0}


@pytest.mark.parametrize("version", PRODUCE_RESPONSE_VERSIONS)
def test_the_produce_response_twin_encodes_a_broker_answer_itself(version):
    generated, _ = codecs(PRODUCE_RESPONSE, version, False)
    alone = ProduceResponseEncoder(version, PRODUCE_RESPONSE.is_flexible(version), _not_called)
    parts: list = []
    alone(_produce_response_sample(version), parts.append, None)
    assert b"".join(parts) == encoded(generated, _produce_response_sample(version))[1]


_BAD_PRODUCE_ANSWERS = [
    ("unknown top-level key", lambda b: b.update(throttle=1)),
    ("unknown partition key", lambda b: b["responses"][0]["partition_responses"][0].update(
        offset=1)),
    ("a later version's key", lambda b: b["responses"][0]["partition_responses"][0].update(
        log_start_offset=5, error_message="x", current_leader={"leader_id": 1})),
    ("int16 out of range", lambda b: b["responses"][0]["partition_responses"][0].update(
        error_code=1 << 15)),
    ("int64 out of range", lambda b: b["responses"][0]["partition_responses"][1].update(
        base_offset=1 << 63)),
    ("None for an int", lambda b: b["responses"][0]["partition_responses"][0].update(index=None)),
    ("bool for an int", lambda b: b.update(throttle_time_ms=True)),
    ("bytes topic name", lambda b: b["responses"][0].update(name=b"raw")),
    ("topic name past Kafka's cap", lambda b: b["responses"][0].update(name="\u00e9" * 20000)),
    ("unpaired surrogate in a topic", lambda b: b["responses"][0].update(name="\ud800")),
    ("an error message as bytes", lambda b: b["responses"][0]["partition_responses"][0].update(
        error_message=b"raw")),
    ("partitions as a tuple", lambda b: b["responses"][0].update(partition_responses=())),
    ("a partition as a list", lambda b: b["responses"][0]["partition_responses"].append([1])),
    ("node endpoints as a tuple", lambda b: b.update(node_endpoints=())),
    ("a current leader set", lambda b: b["responses"][0]["partition_responses"][1].update(
        current_leader={"leader_id": 2, "leader_epoch": 7})),
]


@pytest.mark.parametrize("version", PRODUCE_RESPONSE_VERSIONS)
@pytest.mark.parametrize("what, change", _BAD_PRODUCE_ANSWERS,
                         ids=[w for w, _ in _BAD_PRODUCE_ANSWERS])
def test_odd_produce_answers_encode_or_fail_as_the_generated_codec(version, what, change):
    body = _produce_response_sample(version)
    change(body)
    generated, twin = codecs(PRODUCE_RESPONSE, version, False)
    assert encoded(twin, body)[:2] == encoded(generated, body)[:2]


# ---------------------------------------------------------------- FetchRequest

FETCH_REQUEST = REQUESTS[ApiKey.FETCH]


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
def test_the_broker_codec_runs_the_fetch_request_twin(version):
    fetch = _REQUEST_CODECS.get((ApiKey.FETCH, version, False)) or _compile(
        _REQUEST_CODECS, REQUESTS, ApiKey.FETCH, version, False)
    assert isinstance(fetch.decode, FetchRequestDecoder)


def fetch_request_body(version: int):
    partition = st.fixed_dictionaries({
        "partition": _I32, "current_leader_epoch": _I32, "fetch_offset": _I64,
        "last_fetched_epoch": _I32, "log_start_offset": _I64, "partition_max_bytes": _I32})
    topic = st.fixed_dictionaries({"topic": _TOPIC, "topic_id": st.uuids() | st.just(uuid.UUID(int=0)),
                                   "partitions": st.lists(partition, max_size=25)})
    forgotten = st.fixed_dictionaries({"topic": _TOPIC, "topic_id": st.uuids(),
                                       "partitions": st.lists(_I32, max_size=5)})
    optional = {}
    if version >= 12:      # tagged fields, set now and then: left to the generated code
        optional["cluster_id"] = st.none() | st.none() | _TOPIC
        optional["local_host"] = st.none() | st.none() | _TOPIC
    if version >= 15:
        optional["replica_state"] = st.just({}) | st.fixed_dictionaries(
            {"replica_id": _I32, "replica_epoch": _I64})
    return st.fixed_dictionaries({
        "replica_id": _I32, "max_wait_ms": _I32, "min_bytes": _I32, "max_bytes": _I32,
        "isolation_level": st.integers(-128, 127), "session_id": _I32, "session_epoch": _I32,
        "topics": st.lists(topic, max_size=5), "forgotten_topics_data": st.lists(forgotten, max_size=2),
        "rack_id": _TOPIC}, optional=optional)


def fetch_request_frame(version: int, body) -> bytes:
    out: list = []
    CompiledMessage(FETCH_REQUEST, version, False).encode(body, out.append, None)
    return b"".join(out)


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_fetch_request_decodes_as_the_generated_codec(version, data):
    body = data.draw(fetch_request_body(version))
    generated, twin = codecs(FETCH_REQUEST, version, False)
    frame = fetch_request_frame(version, body)
    want = decoded(generated, frame)
    assert want[0] == "ok"
    assert decoded(twin, frame) == want


def _fetch_request_sample() -> dict:
    return {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1, "max_bytes": 52428800,
            "isolation_level": 1, "session_id": 7, "session_epoch": 3,
            "topics": [{"topic": "t\u00f6pic", "topic_id": uuid.UUID(int=9), "partitions": [
                {"partition": p, "current_leader_epoch": 4, "fetch_offset": 10 ** p,
                 "last_fetched_epoch": 2, "log_start_offset": 0, "partition_max_bytes": 1 << 20}
                for p in range(3)]}, {"topic": "", "topic_id": uuid.UUID(int=0), "partitions": []}],
            "forgotten_topics_data": [{"topic": "gone", "topic_id": uuid.UUID(int=5),
                                       "partitions": [1, 2]}], "rack_id": "r1"}


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
def test_every_truncation_of_a_fetch_request_fails_as_the_generated_codec(version):
    generated, twin = codecs(FETCH_REQUEST, version, False)
    frame = fetch_request_frame(version, _fetch_request_sample())
    for cut in range(len(frame)):
        want = decoded(generated, frame[:cut])
        assert want[0] == "error"
        assert decoded(twin, frame[:cut]) == want, cut


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17])
def test_corrupt_fetch_requests_decode_as_the_generated_codec(version):
    generated, twin = codecs(FETCH_REQUEST, version, False)
    frame = fetch_request_frame(version, _fetch_request_sample())
    for at in range(len(frame)):
        for byte in {0x00, 0x01, 0x7F, 0x80, 0xC3, 0xFF, (frame[at] + 1) & 0xFF}:
            bad = frame[:at] + bytes([byte]) + frame[at + 1:]
            assert decoded(twin, bad) == decoded(generated, bad), (at, byte)


@pytest.mark.parametrize("version", FETCH_REQUEST_VERSIONS)
def test_the_fetch_request_twin_decodes_a_consumer_request_itself(version):
    """A consumer's request (no tagged fields) is decoded without the
    generated code, its partitions kept as C entries until asked for."""
    generated, _ = codecs(FETCH_REQUEST, version, False)
    template = decoded(generated, fetch_request_frame(version, {"max_wait_ms": 0, "min_bytes": 0}))[1]
    alone = FetchRequestDecoder(version, FETCH_REQUEST.is_flexible(version), template, _not_called)
    frame = fetch_request_frame(version, _fetch_request_sample())
    view = memoryview(frame)
    body, pos = alone(view, 0, len(view), None)
    assert pos == len(frame)
    assert type(body["topics"][0]["partitions"]) is FetchPartitionList
    assert plain(body) == decoded(generated, frame)[1]
    # a list's equal, read and iterated as one
    parts = body["topics"][0]["partitions"]
    assert len(parts) == 3 and parts[1]["partition"] == 1 and [p["partition"] for p in parts] == [0, 1, 2]


@pytest.mark.parametrize("version", [13, FETCH_REQUEST_VERSIONS[-1]])
def test_the_fetch_request_twin_makes_a_topic_id_once(version):
    """A consumer names the same topics in every Fetch: the twin makes each
    topic id's UUID once (a Python constructor, some 1.5 us) and gives the
    same object after; ids it has not seen still decode as the generated
    code's, and what it holds stays bounded (a stream of unknown ids)."""
    generated, twin = codecs(FETCH_REQUEST, version, False)
    frame = fetch_request_frame(version, _fetch_request_sample())
    first, again = (_decode_body(twin, memoryview(frame), 0, len(frame), None, None)
                    for _ in range(2))
    assert first["topics"][0]["topic_id"] == uuid.UUID(int=9)
    assert again["topics"][0]["topic_id"] is first["topics"][0]["topic_id"]
    assert again["forgotten_topics_data"][0]["topic_id"] is first["forgotten_topics_data"][0]["topic_id"]
    assert decoded(twin, frame) == decoded(generated, frame)
    at = frame.index(uuid.UUID(int=9).bytes)
    for n in range(5000):
        topic_id = uuid.UUID(int=(n + 1) << 64)
        other = frame[:at] + topic_id.bytes + frame[at + 16:]
        body = _decode_body(twin, memoryview(other), 0, len(other), None, None)
        assert body["topics"][0]["topic_id"] == topic_id
    from kafkalite._ext.produce_fetch import held_topic_ids
    assert held_topic_ids() <= 4096


def test_fetched_partitions_encode_as_their_dicts():
    """A response topic's FetchedPartitions (inline entries among dicts)
    encodes to the bytes of the list of dicts it stands for, in every
    version, both records modes, and through the generated code too."""
    from kafkalite._ext.fetch_state import LeaderStates, plan_full_fetch
    table = LeaderStates()
    for p in range(4):
        table.publish("t", p, 10 + p, 8 + p, p, 3)
    for read_committed in (False, True):
        idle = 8 if read_committed else 10      # the last stable offset, the high watermark
        request = [{"topic": "t", "topic_id": uuid.UUID(int=0), "partitions": FetchPartitionList.from_dicts(
            [{"partition": p, "fetch_offset": idle + p if p % 2 else 0, "current_leader_epoch": -1,
              "partition_max_bytes": 100} for p in range(4)])}]
        plan = plan_full_fetch(table, request, ["t"], read_committed, True)
        slow = plan.slow_topics[0]["partitions"]
        answered = [{"topic": "t", "topic_id": uuid.UUID(int=0), "partitions": [
            {"partition_index": p["partition"], "error_code": 0, "high_watermark": 99,
             "last_stable_offset": 99, "log_start_offset": 0, "aborted_transactions": None,
             "preferred_read_replica": -1, "records": b"x" * 5} for p in slow]}]
        topics = plan.merge(answered)
        fetched = topics[0]["partitions"]
        assert type(fetched) is FetchedPartitions and fetched.inline_count() == 2
        as_lists = [dict(t, partitions=list(t["partitions"])) for t in topics]
        for version in FETCH_RESPONSE_VERSIONS:
            for frames in (False, True):
                generated, twin = codecs(FETCH, version, frames)
                body = {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                        "responses": topics}
                want_frames, got_frames, gen_frames = [], [], []
                want = encoded(generated, dict(body, responses=as_lists),
                               want_frames if frames else None)
                assert encoded(twin, body, got_frames if frames else None)[:2] == want[:2]
                assert encoded(generated, body, gen_frames if frames else None)[:2] == want[:2]
                assert got_frames == want_frames == gen_frames
