"""Joins in the TopologyTestDriver against plain-Python models: stream-table
inner and left (columnar and per-record joiners), stream-stream windowed
inner and left with grace and late records (hypothesis over interleavings
of the two sides), a side whose key changed is repartitioned first, and
the co-partitioning check's error.
"""
from __future__ import annotations

import collections
import random

import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, JoinWindows, Materialized, Produced, Serdes,
                               StreamsBuilder, TopologyException, TopologyTestDriver)

S, L = Serdes.string(), Serdes.long()


def test_stream_table_inner_and_left_join_match_the_model():
    events = [("u1", 1, 10), ("u2", 2, 11), ("u9", 3, 12), (None, 4, 13), ("u1", None, 14),
              ("u3", 5, 20), ("u1", 6, 30), ("u2", 7, 31)]
    table_updates = {15: [("u3", 300)], 25: [("u1", None)]}     # before the event at ts > key
    b = StreamsBuilder()
    s = b.stream("events", Consumed.with_(S, L))
    t = b.table("users", Consumed.with_(S, L), Materialized.as_("users"))
    s.join(t, pc.field("left_value") * 1000 + pc.field("right_value")).to(
        "inner-col", Produced.with_(S, L))
    s.join(t, lambda lv, rv: lv * 1000 + rv).to("inner-rec", Produced.with_(S, L))
    s.left_join(t, lambda lv, rv: lv * 1000 + (rv if rv is not None else 999)).to(
        "left-rec", Produced.with_(S, L))
    s.left_join(t, pc.field("left_value") * 1000 + pc.field("right_value")).to(
        "left-col", Produced.with_(S, L))
    topo = b.build()
    assert len(topo.subtopologies()) == 1, "the join and its table share one task"
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        ev, us = d.create_input_topic("events", S, L), d.create_input_topic("users", S, L)
        us.pipe_record_list([("u1", 100, 1), ("u2", 200, 2)])
        table = {"u1": 100, "u2": 200}
        model = collections.defaultdict(list)
        for k, v, ts in events:
            for at in [a for a in sorted(table_updates) if a < ts]:
                for uk, uv in table_updates.pop(at):
                    us.pipe_input(uk, uv, at)
                    table.pop(uk) if uv is None else table.__setitem__(uk, uv)
            ev.pipe_input(k, v, ts)
            if v is None:
                continue
            r = table.get(k)
            if k is not None and r is not None:
                model["inner-col"].append((k, v * 1000 + r, ts))
                model["inner-rec"].append((k, v * 1000 + r, ts))
            model["left-rec"].append((k, v * 1000 + (999 if r is None else r), ts))
            model["left-col"].append((k, None if r is None else v * 1000 + r, ts))
        for name, want in model.items():
            assert d.create_output_topic(name, S, L).read_records_to_list() == want, name


def model_stream_join(records, before, after, grace, outer, joiner):
    """Kafka's windowed stream-stream join, record by record (joins.py)."""
    retention = before + after + grace
    stream_time, stores, pending, out, dropped = -1, {"L": [], "R": []}, {}, [], 0
    for n, (side, k, v, ts) in enumerate(records):
        if k is None:
            if side == "L" and outer:
                out.append((k, joiner(v, None), ts))
            continue
        stream_time = max(stream_time, ts)
        if ts <= stream_time - retention:
            dropped += 1
            continue
        lo, hi = (before, after) if side == "L" else (after, before)
        other = stores["R" if side == "L" else "L"]
        matches = [(m, ok, ov, ot) for m, ok, ov, ot in other if ok == k
                   and ts - lo <= ot <= ts + hi and ot > stream_time - retention]
        for m, _, ov, ot in matches:
            out.append((k, joiner(v, ov) if side == "L" else joiner(ov, v), max(ts, ot)))
            if side == "R" and m in pending and stream_time <= ot + after + grace:
                del pending[m]
        if side == "L" and outer and not matches:
            pending[n] = (k, v, ts)
        stores[side].append((n, k, v, ts))
        for m in [m for m, (_, _, t) in pending.items() if t + after + grace < stream_time]:
            pk, pv, pt = pending.pop(m)
            out.append((pk, joiner(pv, None), pt))
    return sorted(out, key=repr), dropped


# time moves on 3 ms a record, with jitter: records within and beyond grace
side_st = st.lists(st.tuples(st.sampled_from("LR"), st.sampled_from(["a", "b", "c", None]),
                             st.integers(0, 99), st.integers(-30, 10)), max_size=60).map(
    lambda rs: [(s, k, v, max(0, 3 * i + j)) for i, (s, k, v, j) in enumerate(rs)])


@settings(max_examples=60, deadline=None)
@given(side_st, st.sampled_from([(10, 10), (0, 15), (20, 5)]), st.sampled_from([0, 10]),
       st.booleans(), st.integers(1, 6))
def test_stream_stream_join_matches_the_model(records, window, grace, outer, chunk):
    check_stream_join(records, window, grace, outer, chunk)


@pytest.mark.parametrize("seed", range(4))
def test_stream_stream_join_long_input_matches_the_model(seed):
    rnd = random.Random(seed)
    records = [(rnd.choice("LR"), rnd.choice(["a", "b", "c", "d"]), rnd.randrange(100),
                max(0, 3 * i + rnd.randint(-40, 10))) for i in range(400)]
    check_stream_join(records, [(10, 10), (0, 15), (20, 5), (7, 7)][seed], 5 * (seed % 2),
                      seed >= 2, 1 + seed)


def check_stream_join(records, window, grace, outer, chunk):
    before, after = window
    windows = JoinWindows(before, after, grace)

    def joiner(lv, rv):
        return lv * 1000 + (rv if rv is not None else 999)

    b = StreamsBuilder()
    left = b.stream("left", Consumed.with_(S, L))
    right = b.stream("right", Consumed.with_(S, L))
    (left.left_join if outer else left.join)(right, joiner, windows).to(
        "out", Produced.with_(S, L))
    with TopologyTestDriver(b.build(), {"application.id": "app",
                                        "default.dsl.store": "in_memory"}) as d:
        topics = {"L": d.create_input_topic("left", S, L),
                  "R": d.create_input_topic("right", S, L)}
        # runs of one side piped as one batch (up to ``chunk`` records)
        i = 0
        while i < len(records):
            j = i
            while j < len(records) and j - i < chunk and records[j][0] == records[i][0]:
                j += 1
            topics[records[i][0]].pipe_record_list([r[1:] for r in records[i:j]])
            i = j
        got = sorted(d.create_output_topic("out", S, L).read_records_to_list(), key=repr)
        want, dropped = model_stream_join(records, before, after, grace, outer, joiner)
        assert got == want
        assert d.metrics()["dropped_records"] == dropped


def test_columnar_stream_stream_joiner_and_a_rekeyed_side_is_repartitioned():
    b = StreamsBuilder()
    left = b.stream("left", Consumed.with_(S, L)).select_key(lambda k, v: f"k{v % 3}")
    right = b.stream("right", Consumed.with_(S, L))
    left.join(right, pc.field("left_value") + pc.field("right_value"),
              JoinWindows.of_time_difference_and_grace(50, 0)).to("out", Produced.with_(S, L))
    topo = b.build()
    assert any(t.endswith("-left-repartition") for t in topo.internal_topics)
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        d.create_input_topic("right", S, L).pipe_record_list(
            [("k0", 1000, 100), ("k1", 2000, 100)])
        d.create_input_topic("left", S, L).pipe_record_list(
            [("x", 3, 120), ("y", 4, 130), ("z", 5, 200)])
        assert d.create_output_topic("out", S, L).read_records_to_list() == [
            ("k0", 1003, 120), ("k1", 2004, 130)]


def test_join_errors_are_clear():
    b = StreamsBuilder()
    s, other = b.stream("a"), b.stream("b")
    with pytest.raises(TopologyException, match="needs JoinWindows"):
        s.join(other, lambda a, c: a)
    t = b.table("t").filter(lambda k, v: True)
    with pytest.raises(TopologyException, match="materialized, non-windowed table"):
        s.join(t, lambda a, c: a)
    b = StreamsBuilder()
    b.stream("a").join(b.table("t"), lambda a, c: a).to("out")
    with pytest.raises(TopologyException, match="not co-partitioned: a has 4 partitions, "
                                                "t has 2 partitions.*a join"):
        b.build().check_copartitioning({"a": 4, "t": 2}, "app")


def test_left_join_emits_a_lonely_left_record_only_after_its_window_closes():
    """Left at 100, after 10, grace 0: a right record at 110 still joins it
    (stream time 110 is not past 100 + 10); no left-only result is ever
    forwarded for it. A left at 200 that nothing joins comes out once
    stream time passes 210."""
    b = StreamsBuilder()
    b.stream("left", Consumed.with_(S, L)).left_join(
        b.stream("right", Consumed.with_(S, L)), lambda lv, rv: lv * 1000 + (rv or 0),
        JoinWindows(10, 10, 0)).to("out", Produced.with_(S, L))
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        left, right = d.create_input_topic("left", S, L), d.create_input_topic("right", S, L)
        out = d.create_output_topic("out", S, L)
        left.pipe_input("a", 1, 100)
        left.pipe_input("b", 2, 110)
        right.pipe_input("a", 7, 110)
        assert out.read_records_to_list() == [("a", 1007, 110)]
        left.pipe_input("c", 3, 200)
        left.pipe_input("c", 4, 210)
        assert out.read_records_to_list() == [("b", 2000, 110)]   # stream time 210 > 120
        left.pipe_input("d", 5, 211)
        assert out.read_records_to_list() == [("c", 3000, 200)]
