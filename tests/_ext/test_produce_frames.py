"""The Produce frames of a read buffer answered in one call
(ext/produce_frames.pyx), on a real replica manager and its files: the
frames it takes are answered in request order with the one-pass path's
frames and appended; it stops before a frame that is not a Produce, that
is incomplete (the rest of it in the next read) or whose size is out of
bounds, and after a Produce the path does not answer with a frame (not
the common kind: None; a refused batch: a body; a fault: the exception),
handing that frame back; acks 0 queues nothing; each request answered is
timed into the stats."""
from __future__ import annotations

import struct

import pytest

from kafkalite._ext.produce_frames import ProduceFrames, answer_one_frame
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.config import ServerConfig
from kafkalite.server.metrics import RequestStats
from kafkalite.server.network.requests import NO_RESPONSE
from kafkalite.server.replica.replica_manager import ReplicaManager

MAX_REQUEST_BYTES = 1 << 20


@pytest.fixture
def rm(tmp_path):
    rm = ReplicaManager(0, str(tmp_path), ServerConfig(data_dir=str(tmp_path)).log_config)
    for p in range(3):
        assert rm.become_leader({"topic": "t", "partition": p, "topic_id": None,
                                 "leader_epoch": 1, "configs": {}})["error"] == 0
    yield rm
    rm.shutdown()


def _frames_of(rm) -> ProduceFrames:
    return ProduceFrames(rm.produce_frame_at_once, NO_RESPONSE, 3, 12, MAX_REQUEST_BYTES)


def _produce(correlation: int, partition: int = 0, acks: int = 1, version: int = 9,
             records: bytes | None = None, transactional_id=None, topic: str = "t") -> bytes:
    if records is None:
        b = RecordBatchBuilder()
        b.append(1_700_000_000_000, None, b"v%d" % correlation)
        records = bytes(b.build())
    body = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": partition, "records": records}]}]}
    frame = encode_request(ApiKey.PRODUCE, version, correlation, "client", body)
    return struct.pack(">i", len(frame)) + frame


def _answers(out: list, version: int = 9) -> list:
    """(correlation id, partition, error code, base offset) of each answer frame."""
    got = []
    for frame in out:
        size, = struct.unpack_from(">i", frame)
        assert size == len(frame) - 4
        correlation, body = decode_response(ApiKey.PRODUCE, version, bytes(frame[4:]))
        p = body["responses"][0]["partition_responses"][0]
        got.append((correlation, p["index"], p["error_code"], p["base_offset"]))
    return got


def test_pipelined_requests_are_answered_in_order_in_one_call(rm):
    frames = _frames_of(rm)
    rbuf = bytearray(b"".join(_produce(c, partition=c % 3) for c in range(1, 10)))
    out, stats = [], RequestStats()
    assert frames.serve(rbuf, out, stats) == (len(rbuf), None, None)
    assert _answers(out) == [(c, c % 3, 0, (c - 1) // 3) for c in range(1, 10)]
    assert frames.served == 9
    assert stats.by_api[ApiKey.PRODUCE][0] == 9
    assert [rm.partitions[("t", p)].log.high_watermark for p in range(3)] == [3, 3, 3]


def test_a_frame_split_across_reads_is_answered_once_complete(rm):
    frames = _frames_of(rm)
    whole = _produce(1) + _produce(2)
    first, rest = whole[:len(whole) - 7], whole[len(whole) - 7:]
    rbuf = bytearray(first)
    out = []
    consumed, payload, _ = frames.serve(rbuf, out, None)
    # the first request answered; the second waits for the rest of its bytes
    assert (consumed, payload) == (len(_produce(1)), None)
    assert _answers(out) == [(1, 0, 0, 0)]
    del rbuf[:consumed]
    rbuf += rest
    assert frames.serve(rbuf, out, None) == (len(rbuf), None, None)
    assert _answers(out) == [(1, 0, 0, 0), (2, 0, 0, 1)]
    # and the size prefix itself split
    rbuf = bytearray(_produce(3)[:3])
    assert frames.serve(rbuf, out, None) == (0, None, None)


def test_it_stops_before_a_frame_that_is_not_a_produce_or_is_out_of_bounds(rm):
    frames = _frames_of(rm)
    api_versions = encode_request(ApiKey.API_VERSIONS, 0, 5, "client", {})
    head = _produce(1)
    for other in (struct.pack(">i", len(api_versions)) + api_versions,
                  struct.pack(">i", MAX_REQUEST_BYTES + 1) + b"\x00" * 8,
                  struct.pack(">i", -1) + b"\xff" * 8,
                  _produce(2, version=2)):          # a version the path does not take
        rbuf = bytearray(head + other)
        out = []
        assert frames.serve(rbuf, out, None) == (len(head), None, None)
        assert len(out) == 1


def test_it_hands_back_the_produce_the_path_did_not_answer_with_a_frame(rm):
    frames = _frames_of(rm)
    not_common = _produce(2, transactional_id="tx")
    refused = _produce(3, records=b"\x00" * 70)      # not a batch: the log refuses it
    for second, expected in ((not_common, None), (refused, dict)):
        rbuf = bytearray(_produce(1) + second + _produce(4))
        out = []
        consumed, payload, result = frames.serve(rbuf, out, None)
        assert consumed == len(_produce(1)) + len(second)
        assert bytes(payload) == second[4:] and type(payload) is bytearray
        assert result is None if expected is None else type(result) is expected
        assert len(out) == 1    # the fourth request is left in the buffer, unread

    def failing(payload):
        raise RuntimeError("the path failed")
    rbuf = bytearray(_produce(5))
    consumed, payload, result = ProduceFrames(failing, NO_RESPONSE, 3, 12, MAX_REQUEST_BYTES) \
        .serve(rbuf, [], None)
    assert consumed == len(rbuf) and isinstance(result, RuntimeError)


def test_acks_0_is_appended_and_answers_nothing(rm):
    frames = _frames_of(rm)
    rbuf = bytearray(_produce(1, acks=0) + _produce(2))
    out = []
    assert frames.serve(rbuf, out, None) == (len(rbuf), None, None)
    assert _answers(out) == [(2, 0, 0, 1)]
    assert frames.served == 2


def _one_partition(records: bytes, partition: int = 0, topic: str = "t") -> tuple:
    return (topic, [(partition, memoryview(bytearray(records)))])


def _general(rm, payload):
    raise AssertionError("a one-partition request went to the general path")


def test_one_partition_requests_it_may_not_take_are_left_untouched(rm):
    """answer_one_frame takes what produce_at_once.qualifying takes of a
    one-partition request, and leaves the rest to the full path with
    nothing appended: its checks are qualifying's, written again in C."""
    from kafkalite.server.replica.produce_at_once import _answer_one_slowly, qualifying
    assert rm.become_leader({"topic": "r", "partition": 0, "topic_id": None, "leader_epoch": 1,
                             "configs": {}, "replicas": [0, 1], "isr": [0, 1]})["error"] == 0
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"in a transaction")
    b.set_producer(2000, 0, 0, transactional=True)
    transactional = bytes(b.build())
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"plain")
    plain = bytes(b.build())
    cases = [
        (1, _one_partition(transactional)),        # no transactional id to verify it by
        (1, _one_partition(plain, partition=7)),   # not led here
        (1, _one_partition(plain[:40])),           # shorter than a batch header
        (2, _one_partition(plain)),                # acks Kafka refuses
        (-1, _one_partition(plain, topic="r")),    # a follower to wait for
    ]
    for acks, topic in cases:
        name, ((index, records),) = topic
        assert qualifying(rm, acks, [(name, [(index, records)])]) is None
        frame = _produce(1, partition=index, acks=acks, records=bytes(records), topic=name)[4:]
        assert answer_one_frame(rm, bytearray(frame), NO_RESPONSE, _answer_one_slowly,
                                _general) is None, (acks, topic)
    assert all(part.log.log_end_offset == 0 for part in rm.partitions.values())
    # and what it takes: acks -1 on a partition that is its own ISR
    answer = answer_one_frame(rm, bytearray(_produce(7, acks=-1, records=plain)[4:]),
                              NO_RESPONSE, _answer_one_slowly, _general)
    assert _answers([answer]) == [(7, 0, 0, 0)]


def _batch_of(value: bytes) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, value)
    return bytes(b.build())


def _many(correlation: int, parts: list, acks: int = 1, version: int = 9) -> bytearray:
    """A Produce frame (no size prefix) of topic "t"'s ``parts``: [(index, records)]."""
    body = {"transactional_id": None, "acks": acks, "timeout_ms": 1000,
            "topic_data": [{"name": "t", "partition_data": [
                {"index": index, "records": records} for index, records in parts]}]}
    return bytearray(encode_request(ApiKey.PRODUCE, version, correlation, "client", body))


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_a_request_of_several_partitions_is_answered_in_c(rm, version):
    """A request of several partitions, each a run of batches (the native
    producer's, issue 72), is appended and answered by answer_one_frame's C
    pass, not the general path, with the frame the generic encoder writes;
    a batch the log refuses there is answered by the Python rest of the
    request, the other partitions appended."""
    from kafkalite.protocol.codec import encode_response_wire
    from kafkalite.server.replica.produce_at_once import _answer_one_slowly, _answer_rows_slowly
    run = _batch_of(b"a") + _batch_of(b"b") + _batch_of(b"c")
    frame = _many(5, [(0, run), (2, _batch_of(b"d")), (1, run)], version=version)
    answer = answer_one_frame(rm, frame, NO_RESPONSE, _answer_one_slowly, _general,
                              _answer_rows_slowly)
    want = {"responses": [{"name": "t", "partition_responses": [
        {"index": index, "error_code": 0, "base_offset": 0, "log_append_time_ms": -1,
         "log_start_offset": 0, "record_errors": [], "error_message": None}
        for index in (0, 2, 1)]}], "throttle_time_ms": 0}
    assert bytes(answer) == bytes(encode_response_wire(ApiKey.PRODUCE, version, 5, want)[0])
    assert [rm.partitions[("t", p)].log.log_end_offset for p in range(3)] == [3, 3, 1]
    # acks 0: appended, nothing to answer
    assert answer_one_frame(rm, _many(6, [(0, run), (1, run)], acks=0, version=version),
                            NO_RESPONSE, _answer_one_slowly, _general,
                            _answer_rows_slowly) is NO_RESPONSE
    damaged = bytearray(_batch_of(b"e"))
    damaged[-1] ^= 0xFF                         # CRC mismatch: the log refuses it
    body = answer_one_frame(rm, _many(7, [(0, run), (1, bytes(damaged)), (2, run)],
                                      version=version),
                            NO_RESPONSE, _answer_one_slowly, _general, _answer_rows_slowly)
    errors = [(p["index"], p["error_code"], p["base_offset"])
              for p in body["responses"][0]["partition_responses"]]
    assert errors == [(0, 0, 6), (1, 2, -1), (2, 0, 1)]       # 2: CORRUPT_MESSAGE
    assert [rm.partitions[("t", p)].log.log_end_offset for p in range(3)] == [9, 6, 4]


def test_a_request_of_more_partitions_than_the_stack_rows_is_answered_in_c(tmp_path):
    """Past 128 partitions (a producer behind sends a run of every
    partition the worker leads) the rows are read on the heap: still one C
    pass, the generic encoder's answer."""
    from kafkalite.protocol.codec import encode_response_wire
    from kafkalite.server.replica.produce_at_once import _answer_one_slowly, _answer_rows_slowly
    rm = ReplicaManager(0, str(tmp_path), ServerConfig(data_dir=str(tmp_path)).log_config)
    try:
        for p in range(150):
            assert rm.become_leader({"topic": "t", "partition": p, "topic_id": None,
                                     "leader_epoch": 1, "configs": {}})["error"] == 0
        run = _batch_of(b"a") + _batch_of(b"b")
        answer = answer_one_frame(rm, _many(9, [(p, run) for p in reversed(range(150))]),
                                  NO_RESPONSE, _answer_one_slowly, _general, _answer_rows_slowly)
        want = {"responses": [{"name": "t", "partition_responses": [
            {"index": p, "error_code": 0, "base_offset": 0, "log_append_time_ms": -1,
             "log_start_offset": 0, "record_errors": [], "error_message": None}
            for p in reversed(range(150))]}], "throttle_time_ms": 0}
        assert bytes(answer) == bytes(encode_response_wire(ApiKey.PRODUCE, 9, 9, want)[0])
        assert all(part.log.log_end_offset == 2 for part in rm.partitions.values())
    finally:
        rm.shutdown()
