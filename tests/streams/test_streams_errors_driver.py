"""Exception handlers and the dead-letter queue in the TopologyTestDriver:
poison records (bytes the serde cannot read, values a per-record or a
columnar function fails on) go to the DLQ with KIP-1034's headers and the
rest of their batch is processed once (counts equal the model); log_and_fail
stops with StreamsException; a callable handler decides per record.
"""
from __future__ import annotations

import collections

import pyarrow.compute as pc
import pytest

from kafkalite.streams import (Consumed, Produced, Serdes, StreamsBuilder, TopologyTestDriver)
from kafkalite.streams.errors import StreamsException

S, L, B = Serdes.string(), Serdes.long(), Serdes.bytes()


def long_bytes(v: int) -> bytes:
    return v.to_bytes(8, "big", signed=True)


def build():
    """in (string keys, long values) -> map_values(per record, fails on 13)
    -> count per key, and a columnar 100 // value (fails on 0) -> out."""
    b = StreamsBuilder()
    s = b.stream("in", Consumed.with_(S, L))

    def no_13(v):
        if v == 13:
            raise ValueError("13 is unlucky")
        return v

    s.map_values(no_13).group_by_key().count().to_stream().to("counts", Produced.with_(S, L))
    s.map_values(pc.divide(pc.scalar(100), pc.field("value"))).to("out", Produced.with_(S, L))
    return b.build()


def headers_of(record) -> dict:
    return {k: v.decode() for k, v in record[3]}


def test_poison_records_go_to_the_dlq_and_the_batch_goes_on():
    config = {"application.id": "app", "deserialization.exception.handler": "log_and_continue",
              "processing.exception.handler": "LogAndContinueProcessingExceptionHandler",
              "errors.dead.letter.queue.topic.name": "dlq"}
    values = [5, 13, b"bad", 7, 0, 13, 20, b"\x00", 4]
    raw = [(f"k{i % 2}".encode(), v if isinstance(v, bytes) else long_bytes(v), 100 + i)
           for i, v in enumerate(values)]
    with TopologyTestDriver(build(), config) as d:
        d.create_input_topic("in", B, B).pipe_record_list(raw)
        good = [(f"k{i % 2}", v) for i, v in enumerate(values) if not isinstance(v, bytes)]
        want_counts = collections.Counter(k for k, v in good if v != 13)
        assert d.create_output_topic("counts", S, L).read_key_values_to_map() == want_counts
        assert d.create_output_topic("out", S, L).read_key_values_to_list() == [
            (k, 100 // v) for k, v in good if v != 0]
        dlq = d.create_output_topic("dlq", B, B).read_records_with_headers()
        # the deserialization errors first (the source), then the nodes' in order
        assert [(r[0], r[1], r[2]) for r in dlq] == [raw[2], raw[7], raw[1], raw[5], raw[4]]
        h = [headers_of(r) for r in dlq]
        assert [x["__streams.errors.offset"] for x in h] == ["2", "7", "1", "5", "4"]
        assert all(x["__streams.errors.topic"] == "in" and x["__streams.errors.partition"] == "0"
                   for x in h)
        assert h[0]["__streams.errors.exception"].endswith("SerializationException")
        assert h[2]["__streams.errors.exception"] == "builtins.ValueError"
        assert h[2]["__streams.errors.message"] == "13 is unlucky"
        assert "no_13" in h[2]["__streams.errors.stacktrace"]
        assert "ArrowInvalid" in h[4]["__streams.errors.exception"]
        assert d.metrics()["dropped_records"] == 5


def test_log_and_fail_stops_with_streams_exception():
    with TopologyTestDriver(build(), {"application.id": "app"}) as d:
        with pytest.raises(StreamsException, match="deserialization error in task 0_0 at in-0 "
                                                   "offset 1"):
            d.create_input_topic("in", B, B).pipe_record_list(
                [(b"k", long_bytes(1), 1), (b"k", b"xx", 2)])
    with TopologyTestDriver(build(), {"application.id": "app",
                                      "deserialization.exception.handler": "log_and_continue"}) \
            as d:
        with pytest.raises(StreamsException, match="processing error .* offset 0.*unlucky"):
            d.create_input_topic("in", S, L).pipe_input("k", 13, 1)


def test_a_callable_handler_decides_per_record():
    seen = []

    def handler(context, exc):
        seen.append((context.kind, context.offset, context.node))
        return "continue" if context.offset < 3 else "fail"

    with TopologyTestDriver(build(), {"application.id": "app",
                                      "processing.exception.handler": handler}) as d:
        topic = d.create_input_topic("in", S, L)
        topic.pipe_record_list([("a", 13, 1), ("a", 1, 2), ("a", 0, 3)])
        assert seen[0][:2] == ("processing", 0) and seen[1][:2] == ("processing", 2)
        with pytest.raises(StreamsException):
            topic.pipe_input("a", 13, 4)
    with pytest.raises(ValueError, match="log_and_fail, log_and_continue or a callable"):
        TopologyTestDriver(build(), {"processing.exception.handler": "ignore_all"})
