"""Streams phase 3 against a real server: session and sliding windowed
counts over two partitions against the driver tests' models per task, and a
GlobalKTable whose topic is not co-partitioned with the stream, bootstrapped
before the stream is read and kept up to date while the application runs.
"""
from __future__ import annotations

import time

from harness import create
from test_streams_runtime import (config, long_of, produce, read, run_until_caught_up,
                                  wait_running)
from test_streams_sessions_driver import KINDS, model_sessions
from test_streams_sliding_driver import model_sliding

from kafkalite.client import Producer
from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               SessionWindows, SlidingWindows, StreamsBuilder)

S, L = Serdes.string(), Serdes.long()


def latest_of(rows) -> dict:
    out = {}
    for _, k, v, _ in rows:
        out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def per_partition(server, src, partitions=2):
    rows = read(server, src, partitions)
    return [[(k.decode(), long_of(v), ts) for p, k, v, ts in rows if p == part]
            for part in range(partitions)]


def test_session_and_sliding_counts_through_a_real_server(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 2)
    for suffix in ("sessions", "sliding"):
        create(server, f"{src}-{suffix}", 2)
    base = int(time.time()) // 10 * 10_000
    # bursts per key with quiet gaps, some records late
    records = [(f"k{i % 4}", 1, base + (i // 8) * 90 + (i % 8) * 7 - (60 if i % 13 == 0 else 0))
               for i in range(400)]
    produce(server, src, records)
    gap, grace, diff = 50, 100, 40
    b = StreamsBuilder()
    grouped = b.stream(src, Consumed.with_(S, L)).group_by_key()
    grouped.windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap, grace)).count(
        Materialized.as_("sessions")).to_stream().to(f"{src}-sessions", Produced.with_(S, L))
    grouped.windowed_by(SlidingWindows.of_time_difference_and_grace(diff, 10**6)).count(
        Materialized.as_("sliding")).to_stream().to(f"{src}-sliding", Produced.with_(S, L))
    app = f"{src}-app"
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, app)), server)
    sessions, sliding = {}, {}
    for recs in per_partition(server, src):
        sessions.update(model_sessions(recs, gap, grace, gap + grace, *KINDS["count"])[0])
        sliding.update({w: len(vs) for w, (vs, _) in model_sliding(recs, diff).items()})
    out = {(k[:-16].decode(), long_of(k[-8:]), long_of(k[-16:-8])): long_of(v)
           for k, v in latest_of(read(server, f"{src}-sessions", 2)).items()}
    assert out == sessions
    out = {(k[:-8].decode(), long_of(k[-8:])): long_of(v)
           for k, v in latest_of(read(server, f"{src}-sliding", 2)).items()}
    assert out == sliding


def test_global_table_bootstrapped_and_kept_up_to_date(server, topic_name, tmp_path):
    products, orders = f"{topic_name}-products", f"{topic_name}-orders"
    create(server, products, 3)         # not co-partitioned with the orders: global
    create(server, orders, 2)
    create(server, f"{topic_name}-out", 2)
    p = Producer(server.config())

    def send(topic, pairs):
        for k, v in pairs:
            p.produce(topic, None if v is None else v.encode(), k.encode())
        assert p.flush(10) == 0

    send(products, [(f"p{i}", f"name{i}") for i in range(30)])
    # read at the start: joined only if the table was read whole before the stream
    send(orders, [(f"early{i}", f"p{i}") for i in range(6, 30, 3)])
    b = StreamsBuilder()
    g = b.global_table(products, Consumed.with_(S, S), Materialized.as_("products"))
    b.stream(orders, Consumed.with_(S, S)).left_join(
        g, lambda order, product: product, lambda product, name: f"{product}={name}") \
        .to(f"{topic_name}-out", Produced.with_(S, S))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{topic_name}-app"))
    try:
        streams.start()
        wait_running(streams, lambda: streams.global_records >= 30, "the global table read")
        assert streams.store("products").get(b"p7") == "name7"
        # while running: a rename, a delete, then orders that must see both
        send(products, [("p3", "renamed"), ("p4", None)])
        wait_running(streams, lambda: streams.global_records >= 32,
                     "the rename and the delete read")
        send(orders, [(f"o{i}", f"p{i % 6}") for i in range(12)])
        names = {f"p{i}": f"name{i}" for i in range(30)}
        names["p3"], names["p4"] = "renamed", None
        want = {f"o{i}": f"p{i % 6}={names[f'p{i % 6}']}" for i in range(12)}
        want.update({f"early{i}": f"p{i}=name{i}" for i in range(6, 30, 3)})
        def output():
            return {k.decode(): v.decode() for k, v in
                    latest_of(read(server, f"{topic_name}-out", 2)).items()}
        wait_running(streams, lambda: len(output()) == len(want), "every order joined")
        assert output() == want
    finally:
        streams.close()
        p.close()
    assert streams.error is None


def test_table_table_outer_join_through_a_real_server(server, topic_name, tmp_path):
    left, right, out_topic = f"{topic_name}-l", f"{topic_name}-r", f"{topic_name}-out"
    for t in (left, right, out_topic):
        create(server, t, 2)
    p = Producer(server.config())
    final = ({}, {})
    for i in range(300):
        side, k = i % 2, f"k{i * 7 % 23}"
        v = None if i % 5 == 0 else f"v{i}"
        p.produce((left, right)[side], None if v is None else v.encode(), k.encode())
        final[side][k] = v
    assert p.flush(10) == 0
    b = StreamsBuilder()
    lt = b.table(left, Consumed.with_(S, S), Materialized.as_("l"))
    rt = b.table(right, Consumed.with_(S, S), Materialized.as_("r"))
    lt.outer_join(rt, lambda a, c: f"{a}+{c}").to_stream().to(out_topic, Produced.with_(S, S))
    topology = b.build()
    cfg = config(server, tmp_path, f"{topic_name}-app", **{"processing.guarantee":
                                                            "exactly_once_v2"})
    run_until_caught_up(KafkaStreams(topology, cfg), server)
    assert {b"k1", b"k2", b"k3"} <= set(latest_of(read(server, out_topic, 2)))
    # a second run (stores, the join's included, restored from the changelogs):
    # results that disappear are tombstoned
    for k in ("k1", "k2", "k3"):
        for side in (0, 1):
            p.produce((left, right)[side], None, k.encode())
            final[side][k] = None
    assert p.flush(10) == 0
    p.close()
    run_until_caught_up(KafkaStreams(topology, {**cfg, "state.dir": str(tmp_path / "s2")}),
                        server)
    keys = set(final[0]) | set(final[1])
    want = {k: f"{final[0].get(k)}+{final[1].get(k)}" for k in keys
            if final[0].get(k) is not None or final[1].get(k) is not None}
    got = {k.decode(): v.decode() for k, v in latest_of(read(server, out_topic, 2)).items()}
    assert got == want
