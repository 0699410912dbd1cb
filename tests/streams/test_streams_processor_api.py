"""The Processor API in the TopologyTestDriver and on a real server: a
processor with a state store, punctuators on stream time (fired as Kafka
fires them: on the first record, then each time stream time reaches the
next interval, missed ones skipped) and on wall-clock time (the driver's
clock), against a plain-Python model.
"""
from __future__ import annotations

import time

import pytest
from harness import create
from test_streams_runtime import config, long_of, produce, read, run_until_caught_up

from kafkalite.streams import (Consumed, KafkaStreams, Processor, Produced, PunctuationType,
                               Serdes, Stores, StreamsBuilder, TopologyException,
                               TopologyTestDriver)

S, L = Serdes.string(), Serdes.long()


class SumPerKey(Processor):
    """Keeps a running sum per key in store "sums"; forwards each record's
    new sum; every 100 ms of stream time forwards ("total@<t>", grand
    total); every 1000 ms of wall-clock time ("tick@<t>", records seen)."""

    def init(self, context):
        self.context = context
        self.sums = context.get_state_store("sums")
        self.seen = 0
        context.schedule(100, PunctuationType.STREAM_TIME, self.total)
        context.schedule(1000, PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record):
        k = record.key.encode()
        new = (self.sums.get(k) or 0) + record.value
        self.sums.put(k, new)
        self.seen += 1
        self.context.forward(record.with_value(new))

    def total(self, stream_time):
        grand = sum(v for _, v in self.sums.all())
        self.context.forward(type(self).record(f"total@{stream_time}", grand, stream_time))

    def tick(self, now):
        self.context.forward(type(self).record(f"tick@{now}", self.seen, now))

    @staticmethod
    def record(key, value, ts):
        from kafkalite.streams import Record
        return Record(key, value, ts)


def model(records):
    sums, out, stream_time, due = {}, [], -1, None
    for k, v, ts in records:
        sums[k] = sums.get(k, 0) + v
        out.append((k, sums[k], ts))
        if ts > stream_time:
            stream_time = ts
            if due is None or ts >= due:
                base = ts if due is None else due
                due = base + 100 * ((ts - base) // 100 + 1)
                out.append((f"total@{ts}", sum(sums.values()), ts))
    return out


def build():
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder("sums", L, "in_memory"))
    b.stream("in", Consumed.with_(S, L)).process(SumPerKey, "sums").to(
        "out", Produced.with_(S, L))
    return b.build()


def test_processor_with_store_and_stream_time_punctuation_matches_the_model():
    # stream time moves 37 ms a record, jumps 450 ms once (punctuations skipped), some late
    records = [(f"k{i % 3}", i, 10 + 37 * i + (450 if i > 30 else 0) - (60 if i % 5 == 0 else 0))
               for i in range(60)]
    with TopologyTestDriver(build(), {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        for i in range(0, len(records), 1):
            topic.pipe_record_list(records[i:i + 1])
        assert d.create_output_topic("out", S, L).read_records_to_list() == model(records)
        assert dict(d.get_key_value_store("sums").all()) == {
            f"k{j}".encode(): sum(v for k, v, _ in records if k == f"k{j}") for j in range(3)}
        # the changelog holds the store
        log = d.create_output_topic("app-sums-changelog", S, L).read_key_values_to_map()
        assert log == {k.decode(): v for k, v in d.get_key_value_store("sums").all()}


def test_wall_clock_punctuation_follows_the_drivers_clock():
    with TopologyTestDriver(build(), {"application.id": "app"},
                            initial_wall_clock_time_ms=5_000) as d:
        topic, out = d.create_input_topic("in", S, L), d.create_output_topic("out", S, L)
        topic.pipe_input("a", 1, 0)         # the processor is created: ticks due at 6000, ...
        out.read_records_to_list()
        d.advance_wall_clock_time(999)
        assert out.is_empty()
        d.advance_wall_clock_time(1)
        assert out.read_records_to_list() == [("tick@6000", 1, 6000)]
        topic.pipe_input("a", 1, 1)
        out.read_records_to_list()
        d.advance_wall_clock_time(3_500)    # 9500: one tick, not three
        assert out.read_records_to_list() == [("tick@9500", 2, 9500)]
        d.advance_wall_clock_time(100)      # missed intervals skipped: next due at 10000
        assert out.is_empty()
        d.advance_wall_clock_time(400)
        assert out.read_records_to_list() == [("tick@10000", 2, 10000)]


def test_a_processor_needs_its_stores_named():
    b = StreamsBuilder()
    with pytest.raises(TopologyException, match="no store named 'sums'"):
        b.stream("in").process(SumPerKey, "sums")
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder("other", L))
    b.stream("in", Consumed.with_(S, L)).process(SumPerKey, "other")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        with pytest.raises(Exception, match="not connected to store 'sums'"):
            d.create_input_topic("in", S, L).pipe_input("a", 1, 0)


def test_processor_on_a_real_server(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 1)
    create(server, f"{src}-out", 1)
    base = int(time.time()) // 10 * 10_000
    records = [(f"k{i % 3}", i, base + 37 * i) for i in range(50)]
    produce(server, src, records)
    b = StreamsBuilder()
    b.add_state_store(Stores.key_value_store_builder("sums", L))
    b.stream(src, Consumed.with_(S, L)).process(SumPerKey, "sums").filter(
        lambda k, v: not k.startswith("tick@")).to(f"{src}-out", Produced.with_(S, L))
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app")), server)
    # (timestamps not compared: the runtime produces a batch with one timestamp,
    # produce_batch's; the punctuations' keys carry the stream time instead)
    got = [(k.decode(), long_of(v)) for _, k, v, _ in read(server, f"{src}-out", 1)]
    assert got == [r[:2] for r in model(records)]
    assert sum(k.startswith("total@") for k, _ in got) > 10
