"""Session windows in the TopologyTestDriver, against a plain-Python model of
Kafka's KStreamSessionWindowAggregate: count / reduce / aggregate on
``windowed_by(SessionWindows)``, sessions merging when a record bridges
two, late records (the session they would make ends before stream time -
grace) dropped and counted, retention by session end, the changelog, and
Kafka's session-windowed key (key + end + start) on the output topic.
"""
from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Serdes, SessionWindows, StreamsBuilder,
                               Suppressed, TopologyException, TopologyTestDriver)

S, L, J = Serdes.string(), Serdes.long(), Serdes.json()
SW = Serdes.session_windowed(S)


def model_sessions(records, gap, grace, retention, init, fold, merge):
    """Record by record: -> (the output table {(key, start, end): value},
    the sessions the store holds at the end, dropped records)."""
    sessions, table, stream_time, dropped = {}, {}, -1, 0
    for k, v, t in records:
        if k is None or v is None:
            continue
        stream_time = max(stream_time, t)
        own = sessions.setdefault(k, {})
        found = sorted(w for w in own if w[1] >= t - gap and w[0] <= t + gap
                       and w[1] > stream_time - retention)
        start = end = t
        agg = init()
        for w in found:
            agg = merge(agg, own[w])
            start, end = min(start, w[0]), max(end, w[1])
        if end < stream_time - grace:
            dropped += 1
            continue
        for w in found:
            del own[w]
            table.pop((k,) + w, None)
        own[(start, end)] = table[(k, start, end)] = fold(v, agg)
    live = {(k,) + w: a for k, own in sessions.items() for w, a in own.items()
            if w[1] > stream_time - retention}
    return table, live, dropped


KINDS = {
    "count": (lambda: 0, lambda v, a: a + 1, lambda a, b: a + b),
    "sum": (lambda: None, lambda v, a: v if a is None else a + v,
            lambda a, b: b if a is None else a + b),
    "aggregate": (list, lambda v, a: a + [v], lambda a, b: a + b),
}


def build(kind, windows, store_type="in_memory", retention=None):
    b = StreamsBuilder()
    grouped = b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows)
    m = Materialized.as_("s", store_type)
    if retention is not None:
        m = m.with_retention(retention)
    if kind == "count":
        table, vs = grouped.count(m), L
    elif kind == "sum":
        table, vs = grouped.reduce("sum", m.with_value_serde(L)), L
    else:
        table, vs = grouped.aggregate(list, lambda k, v, a: a + [v],
                                      lambda k, a1, a2: a1 + a2, m), J
    table.to_stream().to("out")
    return b.build(), vs


def table_of(topic) -> dict:
    """{(key, start, end): latest value} of a session-windowed topic."""
    out = {}
    for k, v in topic.read_key_values_to_list():
        w = (k["key"], k["start"], k["end"])
        if v is None:
            out.pop(w, None)
        else:
            out[w] = v
    return out


def store_sessions(store):
    out = {}
    for composite, v in store.all():
        end, start = struct.unpack(">qq", composite[-16:])
        out[(composite[:-16].decode(), start, end)] = v
    return out


def test_a_record_bridging_two_sessions_merges_them():
    # retention gap + grace = 15: [0, 0] is still held at stream time 10
    topo, _ = build("count", SessionWindows.of_inactivity_gap_and_grace(5, 10))
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        out = d.create_output_topic("out", SW, L)
        topic.pipe_input("a", 1, 0)
        topic.pipe_input("a", 1, 10)
        assert [(r[0]["start"], r[0]["end"], r[1], r[2]) for r in out.read_records_to_list()] \
            == [(0, 0, 1, 0), (10, 10, 1, 10)]
        topic.pipe_input("a", 1, 5)     # within 5 of both: one session [0, 10]
        assert [(r[0]["key"], r[0]["start"], r[0]["end"], r[1], r[2])
                for r in out.read_records_to_list()] == \
            [("a", 0, 0, None, 0), ("a", 10, 10, None, 10), ("a", 0, 10, 3, 10)]
        assert store_sessions(d.get_session_store("s")) == {("a", 0, 10): 3}
        # the wire key is Kafka's: key + end + start, big-endian
        topic.pipe_input("b", 1, 12)
        raw = d.topics["out"][-1][0]
        assert raw == b"b" + struct.pack(">qq", 12, 12)
        topic.pipe_input("a", 1, 30)    # stream time 30: [0, 10] is closed (ends before 20)
        topic.pipe_input("a", 1, 16)    # within 5 of nothing, would end at 16 < 20: late
        assert d.metrics()["dropped_records"] == 1
        topic.pipe_input("a", 1, 30)
        assert table_of(out)[("a", 30, 30)] == 2


def test_one_batch_forwards_only_what_outlives_it_and_expired_sessions_do_not_merge():
    topo, _ = build("count", SessionWindows.of_inactivity_gap_and_grace(5, 10))
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        out = d.create_output_topic("out", SW, L)
        topic.pipe_record_list([("c", 1, 100), ("c", 1, 110), ("c", 1, 105)])
        # [100, 100] and [110, 110] were made and merged within the batch
        assert [(r[0]["start"], r[0]["end"], r[1]) for r in out.read_records_to_list()] == \
            [(100, 110, 3)]
    topo, _ = build("count", SessionWindows.of_inactivity_gap_and_grace(5, 0))
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        out = d.create_output_topic("out", SW, L)
        # retention gap + grace = 5: at stream time 10, [0, 0] has left the store,
        # so a record at 5 does not bring it back into a session
        topic.pipe_input("a", 1, 0)
        topic.pipe_input("a", 1, 10)
        topic.pipe_input("a", 1, 5)
        assert table_of(out) == {("a", 0, 0): 1, ("a", 5, 10): 2}
        topic.pipe_record_list([("b", 1, 20), ("b", 1, 30), ("b", 1, 25)])   # in one batch too
        assert table_of(out) == {("b", 20, 20): 1, ("b", 25, 30): 2}


def test_retention_below_gap_plus_grace_is_refused_and_suppress_too():
    b = StreamsBuilder()
    grouped = b.stream("in").group_by_key().windowed_by(
        SessionWindows.of_inactivity_gap_and_grace(100, 30))
    with pytest.raises(ValueError, match="inactivity gap \\+ grace \\(130 ms\\)"):
        grouped.count(Materialized.as_("s").with_retention(129))
    with pytest.raises(TopologyException, match="session-"):
        grouped.count().suppress(Suppressed.until_window_closes())
    with pytest.raises(ValueError):
        SessionWindows.of_inactivity_gap_and_grace(0, 1)


records_st = st.lists(st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 9),
                                st.integers(0, 150)), max_size=60)


@settings(max_examples=40, deadline=None)
@given(records_st, st.sampled_from(["count", "sum", "aggregate"]), st.sampled_from([1, 10, 40]),
       st.sampled_from([0, 25]), st.sampled_from([None, 100]), st.integers(1, 12),
       st.sampled_from(["in_memory", "rocksdb"]))
def test_sessions_match_the_model(records, kind, gap, grace, extra, batch, store_type):
    retention = gap + grace + (extra or 0)
    windows = SessionWindows.of_inactivity_gap_and_grace(gap, grace)
    topo, vs = build(kind, windows, store_type, None if extra is None else retention)
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        for i in range(0, len(records), batch):
            topic.pipe_record_list(records[i:i + batch])
        table, live, dropped = model_sessions(records, gap, grace, retention, *KINDS[kind])
        assert table_of(d.create_output_topic("out", SW, vs)) == table
        assert store_sessions(d.get_session_store("s")) == live
        assert d.metrics()["dropped_records"] == dropped
        assert table_of(d.create_output_topic("app-s-changelog", SW, vs)) == live, \
            "the changelog holds the live sessions, the rest tombstoned"


def test_a_store_restored_from_its_changelog_carries_on_as_one_run():
    windows = SessionWindows.of_inactivity_gap_and_grace(10, 20)
    recs = [("a", 1, t) for t in (0, 8, 30, 19, 55, 41, 47, 100, 70, 90)]
    topo, _ = build("count", windows)
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        topic.pipe_record_list(recs[:5])
        log = list(d.topics["app-s-changelog"])
        stream_time = d.tasks[0].stream_times()
    topo, _ = build("count", windows)
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        d.get_session_store("s").restore([r[0] for r in log],
                                         pa.array([r[1] for r in log], pa.binary()))
        d.tasks[0].resume(stream_time)
        d.create_input_topic("in", S, L).pipe_record_list(recs[5:])
        _, live, _ = model_sessions(recs, 10, 20, 30, *KINDS["count"])
        assert store_sessions(d.get_session_store("s")) == live
