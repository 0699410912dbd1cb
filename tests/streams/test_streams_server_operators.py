"""Every DSL operator against a real server, beside the driver's models
(test_streams_driver.py): the same per-record and columnar topologies of
every stateless operator (peek/foreach, filter, filter_not, map_values,
select_key, flat_map, flat_map_values, split/branch, merge), and count,
reduce and aggregate (per key, after group_by through a repartition topic,
after an explicit repartition) and a hopping windowed count with late
records within and beyond the grace period, under both processing
guarantees. The outputs, read read_committed from the broker, equal the
plain-Python models over the same input.
"""
from __future__ import annotations

import collections
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from harness import create
from test_streams_driver import (OPERATOR_OUTPUTS, build_columnar, build_per_record,
                                 model_windowed, operators_model)
from test_streams_runtime import config, produce, read, run_until_caught_up

from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Serdes, StreamsBuilder,
                               TimeWindows)

S, L = Serdes.string(), Serdes.long()


def today() -> int:
    """A timestamp of now, whole seconds: retention.ms would delete a log of
    old timestamps while it is read."""
    return int(time.time()) * 1000


def decode(rows, key_serde=S, value_serde=L) -> list[tuple]:
    """(partition, key bytes, value bytes, ts) rows -> (key, value, ts)."""
    if not rows:
        return []
    keys = key_serde.deserialize(pa.array([r[1] for r in rows], pa.binary())).to_pylist()
    values = value_serde.deserialize(pa.array([r[2] for r in rows], pa.binary())).to_pylist()
    return [(k, v, r[3]) for k, v, r in zip(keys, values, rows)]


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
@pytest.mark.parametrize("build", [build_per_record, build_columnar])
def test_stateless_operators_equal_the_drivers_model(server, topic_name, tmp_path, build,
                                                     guarantee):
    # one partition everywhere, so that each output's order is the model's
    src, base = topic_name, today()
    create(server, src, 1)
    for name in OPERATOR_OUTPUTS:
        create(server, f"{src}-{name}", 1)
    recs = [(f"k{i % 5}", i, base + i) for i in range(300)]
    produce(server, src, recs)
    seen = []
    b = StreamsBuilder()
    build(b.stream(src, Consumed.with_(S, L)), seen, lambda name: f"{src}-{name}")
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": guarantee})), server)
    for name, want in operators_model(recs).items():
        got = decode(read(server, f"{src}-{name}", 1))
        if name == "merged":  # a merge interleaves by batch, not by timestamp
            got = sorted(got, key=lambda r: r[2])
        assert got == want, name
    assert seen == [(k, v) for k, v, _ in recs]


def latest(rows) -> dict:
    return {k: v for k, v, _ in rows}


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_aggregations_and_hopping_windows_equal_the_model(server, topic_name, tmp_path,
                                                          guarantee):
    src, base = topic_name, today()
    size, advance, grace = 10_000, 5_000, 3_000
    create(server, src, 1)
    outs = ("count", "sum", "max", "agg", "rekeyed", "hop")
    for name in outs:
        create(server, f"{src}-{name}", 1)
    # out of order: every 7th record 12 s behind, past the grace of some windows
    recs = [(f"k{i % 7}", i, base + 1_000 * i - (12_000 if i % 7 == 3 else 0))
            for i in range(200)]
    produce(server, src, recs)
    b = StreamsBuilder()
    s = b.stream(src, Consumed.with_(S, L))
    g = s.group_by_key()
    g.count(Materialized.as_("counts")).to_stream().to(f"{src}-count")
    g.reduce("sum").to_stream().to(f"{src}-sum")
    g.reduce(lambda a, v: max(a, v), Materialized.with_(None, L)).to_stream().to(f"{src}-max")
    g.aggregate(lambda: 0, lambda k, v, agg: agg + v % 3,
                Materialized.with_(None, L)).to_stream().to(f"{src}-agg")
    s.select_key(pc.utf8_slice_codeunits(pc.field("key"), 0, 1)).repartition() \
        .group_by_key().count().to_stream().to(f"{src}-rekeyed")
    windows = TimeWindows.of_size_and_grace(size, grace).advance_by(advance)
    g.windowed_by(windows).count(Materialized.as_("hop")).to_stream().to(f"{src}-hop")
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": guarantee})), server)

    by_key = collections.defaultdict(list)
    for k, v, _ in recs:
        by_key[k].append(v)
    assert latest(decode(read(server, f"{src}-count", 1))) == {
        k: len(vs) for k, vs in by_key.items()}
    assert latest(decode(read(server, f"{src}-sum", 1))) == {
        k: sum(vs) for k, vs in by_key.items()}
    assert latest(decode(read(server, f"{src}-max", 1))) == {
        k: max(vs) for k, vs in by_key.items()}
    assert latest(decode(read(server, f"{src}-agg", 1))) == {
        k: sum(v % 3 for v in vs) for k, vs in by_key.items()}
    assert latest(decode(read(server, f"{src}-rekeyed", 1))) == {"k": len(recs)}
    # one input partition: stream time is the log order's, as in the model
    counts, dropped = model_windowed(recs, size, advance, grace)
    assert dropped > 0, "the input has records beyond grace"
    hop = decode(read(server, f"{src}-hop", 1), Serdes.time_windowed(S))
    assert {(w["key"], w["start"]): v for w, v, _ in hop} == counts
