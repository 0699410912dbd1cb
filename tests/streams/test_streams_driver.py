"""The Streams DSL in the TopologyTestDriver (no broker): every operator,
columnar and per record, against a model computed in plain Python over the
same input; counts, reduces, aggregates, tumbling and hopping windows with
late records within and beyond grace, a table with tombstones.
"""
from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Produced, Serdes, StreamsBuilder,
                               TimeWindows, TopologyException, TopologyTestDriver, columnar)

S, L = Serdes.string(), Serdes.long()
records_st = st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", None]),
                                st.integers(0, 50), st.integers(0, 200)), max_size=60)


def run(build, records, outputs, value_serde=L, store_type="in_memory"):
    """Pipe (key, value, ts) records into "in" (string keys, long values) of
    the topology ``build(stream)`` makes; -> {output: [(k, v, ts)]}."""
    b = StreamsBuilder()
    build(b.stream("in", Consumed.with_(S, value_serde)))
    with TopologyTestDriver(b.build(), {"application.id": "app",
                                        "default.dsl.store": store_type}) as d:
        topic = d.create_input_topic("in", S, value_serde)
        # piped in chunks, so that batches meet state from earlier batches
        for i in range(0, len(records), 7):
            topic.pipe_record_list(records[i:i + 7])
        return {name: d.create_output_topic(name, kser, vser).read_records_to_list()
                for name, (kser, vser) in outputs.items()}, d.metrics()


OPERATOR_OUTPUTS = ("f", "m", "k", "fm", "fmv", "even", "odd", "rest", "merged", "fn")


def operators_model(recs) -> dict:
    """What build_per_record / build_columnar write to each output, in order
    (``merged``: sorted by timestamp)."""
    model = {
        "f": [(k, v, t) for k, v, t in recs if v % 3 == 0],
        "fn": [(k, v, t) for k, v, t in recs if v % 3 != 0],
        "m": [(k, v * 10, t) for k, v, t in recs],
        "k": [(f"{k}-{v % 2}", v, t) for k, v, t in recs],
        "fm": [(k2, v2, t) for k, v, t in recs for k2, v2 in [(k, v), (k + "x", v + 1)]],
        "fmv": [(k, v2, t) for k, v, t in recs for v2 in range(v % 3)],
        "even": [(k, v, t) for k, v, t in recs if v % 2 == 0],
        "odd": [(k, v, t) for k, v, t in recs if v % 2 == 1 and v % 5 == 0],
        "rest": [(k, v, t) for k, v, t in recs if v % 2 == 1 and v % 5 != 0],
    }
    model["merged"] = sorted(model["even"] + model["odd"], key=lambda r: r[2])
    return model


def build_per_record(s, seen: list, out=lambda name: name) -> None:
    """Every stateless operator with per-record functions, into ``out(name)``
    for each of OPERATOR_OUTPUTS; peek appends (key, value) to ``seen``.
    Also run against a real server: test_streams_server_operators.py."""
    s.peek(lambda k, v: seen.append((k, v)))
    s.filter(lambda k, v: v % 3 == 0).to(out("f"))
    s.filter_not(lambda k, v: v % 3 == 0).to(out("fn"))
    s.map_values(lambda v: v * 10).to(out("m"))
    s.select_key(lambda k, v: f"{k}-{v % 2}").to(out("k"))
    s.flat_map(lambda k, v: [(k, v), (k + "x", v + 1)]).to(out("fm"))
    s.flat_map_values(lambda v: range(v % 3)).to(out("fmv"))
    even, odd, rest = s.split().branch(lambda k, v: v % 2 == 0) \
        .branch(lambda k, v: v % 5 == 0).default_branch()
    even.to(out("even"))
    odd.to(out("odd"))
    rest.to(out("rest"))
    even.merge(odd).to(out("merged"))


def build_columnar(s, seen: list, out=lambda name: name) -> None:
    """build_per_record's operators with pyarrow.compute expressions and
    @columnar functions; foreach appends (key, value) to ``seen``."""
    value = pc.field("value")
    s.foreach(columnar(lambda b: seen.extend(zip(b.column("key").to_pylist(),
                                                 b.column("value").to_pylist()))))
    s.filter(pc.equal(pc.divide(value, 3) * 3, value)).to(out("f"))
    s.filter_not(pc.equal(pc.divide(value, 3) * 3, value)).to(out("fn"))
    s.map_values(pc.multiply(value, 10)).to(out("m"))
    s.select_key(pc.binary_join_element_wise(
        pc.field("key"), pc.bit_wise_and(value, 1).cast(pa.string()), "-")).to(out("k"))

    @columnar
    def pairs(b):
        k, v = b.column("key"), b.column("value")
        kx = pc.binary_join_element_wise(k, "x", "")
        n = b.num_rows
        structs = pa.StructArray.from_arrays(
            [pa.concat_arrays([k, kx.cast(pa.string())]),
             pa.concat_arrays([v, pc.add(v, 1)])], ["key", "value"])
        order = [j for i in range(n) for j in (i, i + n)]
        return pa.ListArray.from_arrays(pa.array(range(0, 2 * n + 1, 2), pa.int32()),
                                        structs.take(pa.array(order)))
    s.flat_map(pairs).to(out("fm"))
    s.flat_map_values(columnar(lambda b: pa.array(
        [list(range(v % 3)) for v in b.column("value").to_pylist()],
        pa.list_(pa.int64())))).to(out("fmv"))
    even, odd, rest = s.split().branch(pc.equal(pc.bit_wise_and(value, 1), 0)) \
        .branch(pc.equal(pc.subtract(value, pc.multiply(pc.divide(value, 5), 5)), 0)) \
        .default_branch()
    even.to(out("even"))
    odd.to(out("odd"))
    rest.to(out("rest"))
    even.merge(odd).to(out("merged"))


def test_stateless_operators_columnar_and_per_record_match_the_model():
    recs = [(f"k{i % 5}", i, 1000 + i) for i in range(100)]
    out = {name: (S, L) for name in OPERATOR_OUTPUTS}
    model = operators_model(recs)
    for build in (build_per_record, build_columnar):
        seen = []
        got, _ = run(lambda s: build(s, seen), recs, out)
        for name, want in model.items():
            if name == "merged":   # a merge interleaves by batch, not by timestamp
                assert sorted(got[name], key=lambda r: r[2]) == want, (build.__name__, name)
            else:
                assert got[name] == want, (build.__name__, name)
        assert seen == [(k, v) for k, v, _ in recs]


def model_counts(records):
    counts = collections.Counter()
    for k, v, _ in records:
        if k is not None and v is not None:
            counts[k] += 1
    return dict(counts)


def latest(out):
    final = {}
    for k, v, _ in out:
        final[k] = v
    return final


@settings(max_examples=25, deadline=None)
@given(records_st)
def test_count_reduce_aggregate_match_the_model(records):
    def build(s):
        g = s.group_by_key()
        g.count(Materialized.as_("counts")).to_stream().to("count")
        g.reduce("sum").to_stream().to("sum")
        g.reduce(lambda a, b: max(a, b), Materialized.with_(None, L)).to_stream().to("max")
        g.aggregate(lambda: 0, lambda k, v, agg: agg + 1,
                    Materialized.with_(None, L)).to_stream().to("agg")
        s.group_by(pc.utf8_slice_codeunits(pc.field("key"), 0, 0)).count().to_stream() \
            .to("all")
    got, _ = run(build, records, {"count": (S, L), "sum": (S, L), "max": (S, L),
                                  "agg": (S, L), "all": (S, L)})
    counts = model_counts(records)
    sums, maxes = collections.Counter(), {}
    for k, v, _ in records:
        if k is not None:
            sums[k] += v
            maxes[k] = max(maxes.get(k, v), v)
    assert latest(got["count"]) == counts
    assert latest(got["agg"]) == counts
    assert latest(got["sum"]) == dict(sums)
    assert latest(got["max"]) == maxes
    assert latest(got["all"]) == ({"": sum(counts.values())} if counts else {})


def model_windowed(records, size, advance, grace):
    """Kafka's rule, record by record: stream time is the largest timestamp
    so far; a record counts in window [s, s+size) while s+size > stream
    time - grace."""
    counts, dropped, stream_time = collections.Counter(), 0, -1
    for k, _, ts in records:
        if k is None:
            continue
        stream_time = max(stream_time, ts)
        start = max(0, ts - size + advance) // advance * advance
        while start <= ts:
            if start + size > stream_time - grace:
                counts[(k, start)] += 1
            else:
                dropped += 1
            start += advance
    return dict(counts), dropped


@settings(max_examples=25, deadline=None)
@given(records_st, st.sampled_from([(10, 10), (10, 5), (30, 10), (7, 3)]),
       st.sampled_from([0, 5, 20]))
def test_windowed_count_matches_the_model_with_late_records(records, window, grace):
    size, advance = window
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    got, metrics = run(lambda s: s.group_by_key().windowed_by(windows).count()
                       .to_stream().to("w"), records,
                       {"w": (Serdes.time_windowed(S), L)})
    counts, dropped = model_windowed(records, size, advance, grace)
    assert {(r[0]["key"], r[0]["start"]): r[1] for r in got["w"]} == counts
    assert metrics["dropped_records"] == dropped


def test_late_records_within_and_beyond_grace():
    windows = TimeWindows.of_size_and_grace(100, 50)
    recs = [("a", 1, 10), ("a", 1, 250),     # stream time 250: [0,100) closed at 150
            ("a", 1, 120),                   # window [100,200): 200 > 200? no -> dropped
            ("a", 1, 210),
            ("a", 1, 20),                    # far too late
            ("a", 1, 260)]
    got, metrics = run(lambda s: s.group_by_key().windowed_by(windows).count(
        Materialized.as_("w")).to_stream().to("w"), recs, {"w": (Serdes.time_windowed(S), L)})
    final = {(r[0]["key"], r[0]["start"]): r[1] for r in got["w"]}
    assert final == {("a", 0): 1, ("a", 200): 3}
    assert metrics["dropped_records"] == 2
    # within grace: stream time 260, window [200,300) still open until 350
    recs2 = recs + [("a", 1, 299), ("a", 1, 340), ("a", 1, 230)]
    got, metrics = run(lambda s: s.group_by_key().windowed_by(windows).count()
                       .to_stream().to("w"), recs2, {"w": (Serdes.time_windowed(S), L)})
    final = {(r[0]["key"], r[0]["start"]): r[1] for r in got["w"]}
    assert final == {("a", 0): 1, ("a", 200): 5, ("a", 300): 1}
    assert metrics["dropped_records"] == 2


def test_table_tombstones_filter_map_values_and_store():
    b = StreamsBuilder()
    t = b.table("users", Consumed.with_(S, S), Materialized.as_("users-store"))
    t.filter(lambda k, v: not v.startswith("x")).map_values(str.upper).to_stream().to("out")
    t.to_stream().to("raw")
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        i = d.create_input_topic("users", S, S)
        i.pipe_record_list([("u1", "alice", 1), ("u2", "bob", 2), ("u1", None, 3),
                            ("u3", "xavier", 4), ("u2", "bobby", 5)])
        out = d.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("u1", "ALICE"), ("u2", "BOB"), ("u1", None), ("u3", None),
                       ("u2", "BOBBY")]
        raw = d.create_output_topic("raw", S, S).read_key_values_to_map()
        assert raw == {"u2": "bobby", "u3": "xavier"}
        store = d.get_key_value_store("users-store")
        assert store.all() == [(b"u2", "bobby"), (b"u3", "xavier")]
        # the changelog carries the tombstone's result: u1 is gone from it too
        log = d.create_output_topic("app-users-store-changelog", S, S).read_key_values_to_map()
        assert log == {"u2": "bobby", "u3": "xavier"}


@pytest.mark.parametrize("store_type", ["rocksdb", "in_memory"])
def test_stores_and_changelog_hold_the_counts(store_type):
    recs = [(f"k{i % 3}", i, i) for i in range(30)]
    b = StreamsBuilder()
    b.stream("in", Consumed.with_(S, L)).group_by_key().count(
        Materialized.as_("c", store_type))
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        d.create_input_topic("in", S, L).pipe_record_list(recs)
        assert d.get_key_value_store("c").all() == [(b"k0", 10), (b"k1", 10), (b"k2", 10)]
        assert d.create_output_topic("app-c-changelog", S, L).read_key_values_to_map() == {
            "k0": 10, "k1": 10, "k2": 10}


def test_repartition_topic_carries_typed_keys_between_subtopologies():
    b = StreamsBuilder()
    s = b.stream("in", Consumed.with_(S, L))
    s.group_by(lambda k, v: v % 4).count().to_stream().to("by-mod", Produced.with_(L, L))
    s.select_key(lambda k, v: v).repartition().map_values(lambda v: -v).to(
        "moved", Produced.with_(L, L))
    topo = b.build()
    assert len(topo.subtopologies()) == 3
    assert "Sub-topology: 2" in topo.describe()
    with TopologyTestDriver(topo, {"application.id": "app"}) as d:
        d.create_input_topic("in", S, L).pipe_record_list([("x", i, i) for i in range(10)])
        assert d.create_output_topic("by-mod", L, L).read_key_values_to_map() == {
            0: 3, 1: 3, 2: 2, 3: 2}
        assert d.create_output_topic("moved", L, L).read_key_values_to_list() == [
            (i, -i) for i in range(10)]


def test_copartitioning_is_checked_with_a_clear_error():
    b = StreamsBuilder()
    b.stream("a").merge(b.stream("b")).to("out")
    with pytest.raises(TopologyException, match="not co-partitioned: a has 4 partitions, "
                                                "b has 2 partitions"):
        b.build().check_copartitioning({"a": 4, "b": 2}, "app")
