"""Window-store retention, suppression and several columnar aggregates at
once (aggregate_columns) in the TopologyTestDriver, against plain-Python
models: a windowed count's store stays bounded on a long input
(windows past stream time - retention leave the store and are tombstoned in
the changelog); ``suppress(until_window_closes)`` emits each window's final
count once, after stream time passes its end + grace.

The long input's size is ``STREAMS_RETENTION_RECORDS`` (default 6000; a
soak: 1_000_000).
"""
from __future__ import annotations

import collections
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (BufferConfig, Consumed, Materialized, Produced, Serdes,
                               StreamsBuilder, Suppressed, TimeWindows, TopologyTestDriver)

S, L = Serdes.string(), Serdes.long()
W = Serdes.time_windowed(S)


def model_windows(records, size, advance, grace, retention=None):
    """Kafka's windowed count, record by record: -> (every window's final
    count, the windows the store still holds at the end, stream time)."""
    counts, stream_time = collections.Counter(), -1
    for k, _, ts in records:
        if k is None:
            continue
        stream_time = max(stream_time, ts)
        start = max(0, ts - size + advance) // advance * advance
        while start <= ts:
            if start + size > stream_time - grace:
                counts[(k, start)] += 1
            start += advance
    retention = size + grace if retention is None else retention
    live = {w: c for w, c in counts.items() if w[1] > stream_time - retention}
    return dict(counts), live, stream_time


def test_windowed_store_stays_bounded_on_a_long_input():
    n = int(os.environ.get("STREAMS_RETENTION_RECORDS", "6000"))
    size, grace, keys = 100, 30, 20
    windows = TimeWindows.of_size_and_grace(size, grace)
    # time moves forward 7 ms a record, with every 13th record 90 ms late
    recs = [(f"k{i % keys}", 1, 7 * i - (90 if i % 13 == 0 else 0)) for i in range(n)]
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows).count(
        Materialized.as_("w", "in_memory")).to_stream().to("out")
    peak = 0
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        store = d.get_window_store("w")
        for i in range(0, n, 50):
            topic.pipe_record_list(recs[i:i + 50])
            peak = max(peak, store.approximate_num_entries(), len(store.all()))
        counts, live, _ = model_windows(recs, size, size, grace)
        # live windows span retention (size + grace) + one batch's advance of stream time
        bound = keys * ((size + grace + 50 * 7) // size + 2)
        assert peak <= bound, f"the store grew to {peak} windows (bound {bound})"
        assert len(counts) > 5 * bound, "the input spans many more windows than the bound"
        assert {(split[0].decode(), split[1]): v for split, v in store.fetch_all()} == live
        assert store.expired == len(counts) - len(live)
        # every window's updates reached the output; the changelog keeps only live ones
        out = d.create_output_topic("out", W, L).read_records_to_list()
        assert {(r[0]["key"], r[0]["start"]): r[1] for r in out} == counts
        log = {}
        for k, v in d.create_output_topic("app-w-changelog", W, L).read_key_values_to_list():
            log[(k["key"], k["start"])] = v
        assert {w: v for w, v in log.items() if v is not None} == live
        assert sum(v is None for v in log.values()) == len(counts) - len(live), \
            "every expired window is tombstoned in the changelog"


records_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 9),
                                st.integers(0, 400)), max_size=80)


@settings(max_examples=30, deadline=None)
@given(records_st, st.sampled_from([(20, 20), (20, 10), (30, 7)]), st.sampled_from([0, 15]),
       st.sampled_from([None, 0, 60]))
def test_retention_matches_the_model(records, window, grace, extra):
    size, advance = window
    retention = None if extra is None else size + grace + extra
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    m = Materialized.as_("w", "in_memory")
    if retention is not None:
        m = m.with_retention(retention)
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows).count(m) \
        .to_stream().to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        for i in range(0, len(records), 9):
            topic.pipe_record_list(records[i:i + 9])
        counts, live, _ = model_windows(records, size, advance, grace, retention)
        store = d.get_window_store("w")
        assert {(k.decode(), s): v for (k, s), v in store.fetch_all()} == live
        out = d.create_output_topic("out", W, L).read_records_to_list()
        assert {(r[0]["key"], r[0]["start"]): r[1] for r in out} == counts


def test_retention_below_size_plus_grace_is_refused():
    b = StreamsBuilder()
    with pytest.raises(ValueError, match="at least the window size \\+ grace \\(130 ms\\)"):
        b.stream("in").group_by_key().windowed_by(TimeWindows.of_size_and_grace(100, 30)) \
            .count(Materialized.as_("w").with_retention(129))


def model_suppressed(records, size, advance, grace):
    """Each window's final count, once, in the order windows close: a
    window closes when the largest timestamp of the records the count took
    reaches its end + grace."""
    counts, stream_time, taken_time, emitted = collections.Counter(), -1, -1, []
    for k, _, ts in records:
        if k is None:
            continue
        stream_time = max(stream_time, ts)
        start = max(0, ts - size + advance) // advance * advance
        took = False
        while start <= ts:
            if start + size > stream_time - grace:
                counts[(k, start)] += 1
                took = True
            start += advance
        if took:
            taken_time = max(taken_time, ts)
    for w in sorted(counts, key=lambda w: (w[1], w[0])):
        if w[1] + size + grace <= taken_time:
            emitted.append((w, counts[w]))
    return emitted


@settings(max_examples=30, deadline=None)
@given(records_st, st.sampled_from([(20, 20), (30, 10)]), st.sampled_from([0, 15]))
def test_suppress_until_window_closes_emits_each_final_count_once(records, window, grace):
    size, advance = window
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows).count() \
        .suppress(Suppressed.until_window_closes(BufferConfig.unbounded())) \
        .to_stream().to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, L)
        for i in range(0, len(records), 9):
            topic.pipe_record_list(records[i:i + 9])
        out = d.create_output_topic("out", W, L).read_records_to_list()
        got = [((r[0]["key"], r[0]["start"]), r[1]) for r in out]
        want = model_suppressed(records, size, advance, grace)
        assert sorted(got, key=lambda g: (g[0][1], g[0][0])) == want
        assert len({g[0] for g in got}) == len(got), "a window emitted twice"


def test_suppress_waits_for_window_end_plus_grace():
    windows = TimeWindows.of_size_and_grace(100, 20)
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).group_by_key().windowed_by(windows).count() \
        .suppress(Suppressed.until_window_closes()).to_stream().to("out")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        i, o = d.create_input_topic("in", S, L), d.create_output_topic("out", W, L)
        i.pipe_record_list([("a", 1, 10), ("a", 1, 50), ("b", 1, 99), ("a", 1, 119)])
        assert o.is_empty()              # [0,100) closes at 120
        i.pipe_input("a", 1, 115)        # late but within grace: counted
        assert o.is_empty()
        i.pipe_input("c", 1, 120)
        assert [(r[0]["key"], r[0]["start"], r[1]) for r in o.read_records_to_list()] == [
            ("a", 0, 2), ("b", 0, 1)]
        i.pipe_input("a", 1, 60)         # beyond grace: dropped, nothing more
        i.pipe_input("c", 1, 400)
        assert [(r[0]["key"], r[0]["start"], r[1]) for r in o.read_records_to_list()] == [
            ("a", 100, 2), ("c", 100, 1)]


def test_suppress_needs_a_windowed_table():
    b = StreamsBuilder()
    with pytest.raises(Exception, match="needs a windowed table"):
        b.stream("in").group_by_key().count().suppress(Suppressed.until_window_closes())


def model_columns(records, size, advance):
    """(key, window start) -> {count, count x, sum x, min x, max s} of the
    records of each window (no grace needed: the input is in time order)."""
    out = {}
    for k, v, ts in records:
        start = max(0, ts - size + advance) // advance * advance
        while start <= ts:
            a = out.setdefault((k, start), {"a0": 0, "a1": 0, "a2": None, "a3": None,
                                            "a4": None})
            a["a0"] += 1
            if v["x"] is not None:
                a["a1"] += 1
                a["a2"] = v["x"] if a["a2"] is None else a["a2"] + v["x"]
                a["a3"] = v["x"] if a["a3"] is None else min(a["a3"], v["x"])
            a["a4"] = v["s"] if a["a4"] is None else max(a["a4"], v["s"])
            start += advance
    return out


def test_aggregate_columns_is_several_aggregates_of_a_struct_value_per_window():
    """Columnar count, count of a field's non-nulls, sum, min and max at once
    (the SQL layer's windowed aggregates): the latest update of each window
    equals the model, its key the time-windowed key, across batches."""
    recs = [(f"k{i % 3}", {"x": None if i % 5 == 0 else i - 20, "s": f"s{i % 7}"}, 10 * i)
            for i in range(200)]
    b = StreamsBuilder()
    (b.stream("in", Consumed.with_(S, Serdes.json())).group_by_key()
     .windowed_by(TimeWindows.of_size_and_grace(100, 1000).advance_by(50))
     .aggregate_columns([(None, "count"), ("x", "count"), ("x", "sum"), ("x", "min"),
                         ("s", "max")])
     .to_stream().to("out", Produced.with_(S, Serdes.json())))
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        topic = d.create_input_topic("in", S, Serdes.json())
        for i in range(0, len(recs), 37):
            topic.pipe_record_list(recs[i:i + 37])
        latest = {(k["key"], k["start"]): v for k, v in
                  d.create_output_topic("out", W, Serdes.json()).read_key_values_to_list()}
    assert latest == model_columns(recs, 100, 50)
    with pytest.raises(ValueError, match="not 'avg'"):
        StreamsBuilder().stream("in").group_by_key().aggregate_columns([("x", "avg")])


def test_a_struct_serde_round_trips_the_aggregates_of_a_store():
    """Serdes.struct (aggregate_columns' stores' changelog values, written a
    column at a time): every field type, nulls in a field and a null row,
    read back as written; a field of another type is refused."""
    import pyarrow as pa
    t = pa.struct([("a0", pa.int64()), ("a1", pa.float64()), ("a2", pa.string()),
                   ("a3", pa.bool_())])
    rows = [{"a0": 1, "a1": 2.5, "a2": "h\u00e9llo", "a3": True}, None,
            {"a0": None, "a1": None, "a2": None, "a3": None},
            {"a0": -5, "a1": -0.1, "a2": "", "a3": False}]
    serde = Serdes.struct(t)
    assert serde.deserialize(serde.serialize(serde.to_column(rows))).to_pylist() == rows
    with pytest.raises(ValueError, match="not timestamp"):
        Serdes.struct(pa.struct([("a0", pa.timestamp("ms"))]))
