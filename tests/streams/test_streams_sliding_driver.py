"""Sliding windows in the TopologyTestDriver: count / aggregate on
``windowed_by(SlidingWindows)`` against a plain-Python model of what Kafka's
sliding windows mean (KIP-450): the windows of a key are the left window
[t - d, t] of each record ([0, d] for records before d) and the right window
[t + 1, t + 1 + d] of each record that a later record falls within; each
holds the records whose timestamps lie in it. Records arrive out of order;
late ones (t + 1 + d <= stream time - grace) are dropped and counted.
"""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Serdes, SlidingWindows, StreamsBuilder,
                               Suppressed, TopologyException, TopologyTestDriver)

S, L, J = Serdes.string(), Serdes.long(), Serdes.json()
W = Serdes.time_windowed(S)


def model_sliding(records, d):
    """{(key, start): (records in [start, start + d] as a sorted list,
    their latest timestamp)} of every window the records define."""
    by_key: dict = {}
    for k, v, t in records:
        if k is not None and v is not None:
            by_key.setdefault(k, []).append((t, v))
    out = {}
    for k, recs in by_key.items():
        times = sorted(t for t, _ in recs)
        starts = {max(0, t - d) for t in times}
        starts |= {t + 1 for t in times if any(t < q <= t + 1 + d for q in times)}
        for s in starts:
            inside = [(t, v) for t, v in recs if s <= t <= s + d]
            out[(k, s)] = (sorted(v for _, v in inside), max(t for t, _ in inside))
    return out


def build(kind, windows, store_type="in_memory"):
    b = StreamsBuilder()
    grouped = b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows)
    m = Materialized.as_("w", store_type)
    if kind == "count":
        table = grouped.count(m)
    else:
        table = grouped.aggregate(list, lambda k, v, a: sorted(a + [v]), m)
    table.to_stream().to("out")
    return b.build()


def table_of(topic):
    out = {}
    for k, v, t in topic.read_records_to_list():
        out[(k["key"], k["start"])] = (v, t)
    return out


records_st = st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 9),
                                st.integers(0, 120)), max_size=50)


@settings(max_examples=40, deadline=None)
@given(records_st, st.sampled_from([1, 5, 20, 50]), st.sampled_from(["count", "aggregate"]),
       st.integers(1, 10), st.sampled_from(["in_memory", "rocksdb"]))
def test_sliding_windows_match_the_model(records, d, kind, batch, store_type):
    # grace longer than the input's span: no window closes, every record counts
    topo = build(kind, SlidingWindows.of_time_difference_and_grace(d, 1000), store_type)
    with TopologyTestDriver(topo, {"application.id": "app"}) as dr:
        topic = dr.create_input_topic("in", S, L)
        for i in range(0, len(records), batch):
            topic.pipe_record_list(records[i:i + batch])
        model = model_sliding(records, d)
        if kind == "count":
            model = {w: (len(vs), t) for w, (vs, t) in model.items()}
        assert table_of(dr.create_output_topic("out", W, L if kind == "count" else J)) == model
        held = {}
        for composite, vt in dr.get_window_store("w").all():
            held[(composite[:-8].decode(), struct.unpack(">q", composite[-8:])[0])] = \
                (vt["value"], vt["timestamp"])
        assert held == model
        assert dr.metrics()["dropped_records"] == 0


def test_late_records_and_closed_windows():
    topo = build("count", SlidingWindows.of_time_difference_and_grace(10, 5))
    with TopologyTestDriver(topo, {"application.id": "app"}) as dr:
        topic = dr.create_input_topic("in", S, L)
        out = dr.create_output_topic("out", W, L)
        topic.pipe_input("a", 1, 30)
        topic.pipe_input("a", 1, 35)
        assert [(r[0]["start"], r[1], r[2]) for r in out.read_records_to_list()] == \
            [(20, 1, 30), (31, 1, 35), (25, 2, 35)]    # 30's right window, then 35's left
        topic.pipe_input("a", 1, 50)        # stream time 50: windows ending before 45 closed
        out.read_records_to_list()
        topic.pipe_input("a", 1, 34)        # close time 50 - 5 = 45, and 34 + 1 + 10 <= 45
        assert dr.metrics()["dropped_records"] == 1
        topic.pipe_input("a", 1, 36)        # 36 + 11 = 47 > 45: taken where windows are open
        # [31, 41] and its own left window [26, 36] end before 45: two updates
        # dropped ([20, 30] and [25, 35] are past retention 2 * 10 + 5)
        assert out.read_records_to_list() == []
        assert dr.metrics()["dropped_records"] == 3
        topic.pipe_input("a", 1, 44)
        # [40, 50] (50's left window) takes it; 35's right window [36, 46] is made
        # for it, its own right window [45, 55] copies [40, 50] before the update;
        # its left window [34, 44] is closed
        assert [(r[0]["start"], r[1], r[2]) for r in out.read_records_to_list()] == \
            [(40, 2, 50), (36, 1, 44), (45, 1, 50)]
        assert dr.metrics()["dropped_records"] == 4
        topic.pipe_input("a", 1, 45)
        # its left window [35, 45] ends at the close time: still open (Kafka's
        # end >= close), built from [31, 41] as Kafka builds it
        assert [(r[0]["start"], r[1], r[2]) for r in out.read_records_to_list()] == \
            [(36, 2, 45), (40, 3, 50), (45, 2, 50), (35, 2, 45), (46, 1, 50)]
        assert dr.metrics()["dropped_records"] == 4


def test_sliding_windows_refuse_bad_arguments():
    with pytest.raises(ValueError):
        SlidingWindows.of_time_difference_and_grace(0, 5)
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key().windowed_by(
        SlidingWindows.of_time_difference_and_grace(10, 5))
    with pytest.raises(ValueError, match="2 \\* time difference \\+ grace \\(25 ms\\)"):
        grouped.count(Materialized.as_("w").with_retention(24))
    with pytest.raises(TopologyException, match="sliding"):
        grouped.count().suppress(Suppressed.until_window_closes())
