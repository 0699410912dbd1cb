"""Streams phase 2 against a real server: window-store retention (the
changelog keeps only live windows, expired ones tombstoned), joins,
suppression and the dead-letter queue, each against a plain-Python model
over the input as the broker stored it.
"""
from __future__ import annotations

import collections
import time

import pyarrow.compute as pc

from harness import create
from test_streams_runtime import (PlantedFailure, config, long_of, produce, read,
                                  run_through_one_abort, run_until_caught_up, wait_running)

from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.streams import (Consumed, JoinWindows, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder, Suppressed, TimeWindows)

S, L = Serdes.string(), Serdes.long()


def latest_of(rows) -> dict:
    out = {}
    for _, k, v, _ in rows:
        out[k] = v
    return {k: v for k, v in out.items() if v is not None}


def test_window_retention_tombstones_expired_windows_in_the_changelog(server, topic_name,
                                                                       tmp_path):
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-out", 2)
    base = int(time.time()) // 10 * 10_000
    size, grace = 1_000, 200
    records = [(f"k{i % 5}", 1, base + 97 * i - (300 if i % 11 == 0 else 0)) for i in range(600)]
    produce(server, src, records)
    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(size, grace)).count(Materialized.as_("w")) \
        .to_stream().to(f"{src}-out", Produced.with_(S, L))
    app = f"{src}-app"
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, app)), server)
    # the model: per partition (task), stream time in log order
    counts, live = collections.Counter(), {}
    for part in range(2):
        stream_time, mine = -1, collections.Counter()
        for p, k, _, ts in read(server, src, 2):
            if p != part:
                continue
            stream_time = max(stream_time, ts)
            start = ts - ts % size
            if start + size > stream_time - grace:
                mine[(k, start)] += 1
        counts.update(mine)
        live.update({w: c for w, c in mine.items() if w[1] > stream_time - size - grace})
    window = lambda k: (k[:-8], long_of(k[-8:]))   # noqa: E731
    out = {window(k): long_of(v) for k, v in latest_of(read(server, f"{src}-out", 2)).items()}
    assert out == dict(counts)
    changelog = read(server, f"{app}-w-changelog", 2)
    assert {window(k): long_of(v) for k, v in latest_of(changelog).items()} == live
    assert sum(v is None for _, _, v, _ in changelog) == len(counts) - len(live) > 0


def test_stream_table_and_stream_stream_joins(server, topic_name, tmp_path):
    """Enrichment against a table loaded first (left join, per-record
    joiner) and a windowed inner stream-stream join (columnar joiner) whose
    timestamps all lie within grace, so that the joined pairs do not depend
    on how the two sides' batches interleave: every pair with |dt| <= 1 s."""
    src = topic_name
    for t in ("users", "clicks", "views", "enriched", "pairs"):
        create(server, f"{src}-{t}", 2)
    now = int(time.time() * 1000)
    users = [(f"u{i}", 100 * i, now) for i in range(8)]
    produce(server, f"{src}-users", users)
    b = StreamsBuilder()
    table = b.table(f"{src}-users", Consumed.with_(S, L), Materialized.as_("users"))
    clicks = b.stream(f"{src}-clicks", Consumed.with_(S, L))
    clicks.left_join(table, lambda lv, rv: lv + (rv if rv is not None else -1)).to(
        f"{src}-enriched", Produced.with_(S, L))
    views = b.stream(f"{src}-views", Consumed.with_(S, L))
    clicks.join(views, pc.field("left_value") * 1000 + pc.field("right_value"),
                JoinWindows.of_time_difference_and_grace(1_000, 60_000)).to(
        f"{src}-pairs", Produced.with_(S, L))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app"))
    streams.start()
    try:
        wait_running(streams, lambda: streams.metrics()["processed"] >= len(users),
                     "the users table read")
        clicks_in = [(f"u{i % 11}", i, now + 37 * i) for i in range(120)]
        views_in = [(f"u{i % 11}", i, now + 41 * i) for i in range(110)]
        produce(server, f"{src}-clicks", clicks_in)
        produce(server, f"{src}-views", views_in)
        total = len(users) + len(clicks_in) + len(views_in)
        wait_running(streams, lambda: streams.metrics()["processed"] >= total,
                     "every record processed")
    finally:
        streams.close()
    assert streams.error is None
    table_model = {k: v for k, v, _ in users}
    enriched = collections.Counter((k, long_of(v)) for _, k, v, _ in
                                   read(server, f"{src}-enriched", 2))
    assert enriched == collections.Counter((k.encode(), v + table_model.get(k, -1))
                                           for k, v, _ in clicks_in)
    pairs = collections.Counter((k, long_of(v)) for _, k, v, _ in read(server, f"{src}-pairs", 2))
    assert pairs == collections.Counter(
        (ck.encode(), cv * 1000 + vv) for ck, cv, ct in clicks_in for vk, vv, vt in views_in
        if ck == vk and abs(ct - vt) <= 1_000)
    assert sum(pairs.values()) > 50


def test_suppressed_windowed_count_emits_each_final_count_once(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-out", 2)
    base = int(time.time()) // 10 * 10_000
    size, grace = 1_000, 300
    records = [(f"k{i % 4}", 1, base + 61 * i - (500 if i % 7 == 0 else 0)) for i in range(300)]
    produce(server, src, records)
    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(size, grace)).count() \
        .suppress(Suppressed.until_window_closes()).to_stream() \
        .to(f"{src}-out", Produced.with_(S, L))
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": "exactly_once_v2"})), server)
    want = {}
    for part in range(2):
        counts, stream_time, taken = collections.Counter(), -1, -1
        for p, k, _, ts in read(server, src, 2):
            if p != part:
                continue
            stream_time = max(stream_time, ts)
            start = ts - ts % size
            if start + size > stream_time - grace:
                counts[(k, start)] += 1
                taken = max(taken, ts)
        want.update({w: c for w, c in counts.items() if w[1] + size + grace <= taken})
    out = [((k[:-8], long_of(k[-8:])), long_of(v)) for _, k, v, _ in read(server, f"{src}-out", 2)]
    assert len(out) == len(want) > 10, "each closed window once"
    assert dict(out) == want


def test_poison_records_go_to_the_dead_letter_queue(server, topic_name, tmp_path):
    """A value the long serde cannot read and one the topology raises on:
    both land in the DLQ topic (created by the application) with headers
    naming the error, topic, partition and offset; the counts of every other
    record equal the model, under exactly-once."""
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-counts", 2)
    now = int(time.time() * 1000)
    p = Producer(server.config())
    sent = []
    for i in range(200):
        value = b"oops" if i == 77 else (13 if i == 150 else 100 + i).to_bytes(8, "big")
        # a key's records in one partition (the latest count per key is the total)
        p.produce(src, value, f"k{i % 5}".encode(), partition=i % 5 % 2, timestamp=now + i)
        sent.append((f"k{i % 5}", value, i % 5 % 2))
    assert p.flush(10) == 0
    p.close()

    def no_13(v):
        if v == 13:
            raise ValueError("13 is unlucky")
        return v

    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).map_values(no_13).group_by_key().count() \
        .to_stream().to(f"{src}-counts", Produced.with_(S, L))
    dlq = f"{src}-dlq"
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": "exactly_once_v2",
        "deserialization.exception.handler": "log_and_continue",
        "processing.exception.handler": "log_and_continue",
        "errors.dead.letter.queue.topic.name": dlq})), server)
    counts = latest_of(read(server, f"{src}-counts", 2))
    want = collections.Counter(k.encode() for i, (k, _, _) in enumerate(sent) if i not in (77, 150))
    assert {k: long_of(v) for k, v in counts.items()} == want
    c = Consumer(server.config(**{"isolation.level": "read_committed"}))
    try:
        c.assign([TopicPartition(dlq, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < deadline:
            got += c.consume(10, 0.2)
    finally:
        c.close()
    by_offset = {}
    for m in got:
        h = {k: v.decode() for k, v in m.headers()}
        assert h["__streams.errors.topic"] == src
        by_offset[(int(h["__streams.errors.partition"]), m.value())] = (m.key(), h)
    assert set(by_offset) == {(sent[77][2], b"oops"), (sent[150][2], (13).to_bytes(8, "big"))}
    key, h = by_offset[(sent[77][2], b"oops")]
    assert key == b"k2" and h["__streams.errors.offset"] == str(
        sum(1 for _, _, part in sent[:77] if part == sent[77][2]))
    assert h["__streams.errors.exception"].endswith("SerializationException")
    key, h = by_offset[(sent[150][2], (13).to_bytes(8, "big"))]
    assert key == b"k0" and h["__streams.errors.offset"] == str(
        sum(1 for _, _, part in sent[:150] if part == sent[150][2]))
    assert h["__streams.errors.message"] == "13 is unlucky"


def test_stream_time_survives_a_restart_in_the_commit_metadata(server, topic_name, tmp_path):
    """A windowed count run twice, each time into an empty state directory:
    the second run resumes the task's stream time from the committed
    offsets' metadata, so its late records are dropped as one uninterrupted
    run drops them (without it, stream time starts again and the late
    records are counted: more than the model)."""
    src = topic_name
    create(server, src, 1)
    create(server, f"{src}-out", 1)
    base = int(time.time()) // 10 * 10_000
    first = [("k", 1, base + 1_000 * i) for i in range(30)]                 # stream time +29 s
    second = [("k", 1, base + 2_000), ("k", 1, base + 29_500), ("k", 1, base + 31_000)]

    def app(state):
        b = StreamsBuilder()
        b.stream(src, Consumed.with_(S, L)).group_by_key().windowed_by(
            TimeWindows.of_size_and_grace(5_000, 1_000)).count(Materialized.as_("w")) \
            .to_stream().to(f"{src}-out", Produced.with_(S, L))
        return KafkaStreams(b.build(), config(server, tmp_path / state, f"{src}-app", **{
            "processing.guarantee": "exactly_once_v2"}))

    produce(server, src, first)
    run_until_caught_up(app("one"), server)
    produce(server, src, second)
    run_until_caught_up(app("two"), server)
    counts, stream_time = collections.Counter(), -1
    for _, k, _, ts in read(server, src, 1):
        stream_time = max(stream_time, ts)
        start = ts - ts % 5_000
        if start + 5_000 > stream_time - 1_000:
            counts[(k, start)] += 1
    out = {(k[:-8], long_of(k[-8:])): long_of(v) for k, v in
           latest_of(read(server, f"{src}-out", 1)).items()}
    assert out == dict(counts)


def test_an_aborted_transaction_rewinds_stream_time_too(server, topic_name, tmp_path):
    """exactly_once_v2, a planted KafkaError after a record far in the future
    was processed in the same transaction: the abort rewinds the input, the
    store and the stream time (from the commit), so the redone records are
    not judged late against the aborted record's time (without the rewind of
    stream time, they are dropped and the counts fall below the model)."""
    src = topic_name
    create(server, src, 1)
    create(server, f"{src}-out", 1)
    base = int(time.time()) // 10 * 10_000
    records = [("k", i, base + 10 * i) for i in range(200)]
    records += [("k", i, base + (60_000 if i == 250 else 10 * i)) for i in range(200, 400)]
    fail_once = PlantedFailure()

    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).map_values(fail_once).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(1_000, 0)).count().to_stream().to(
        f"{src}-out", Produced.with_(S, L))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 60_000}))
    run_through_one_abort(streams, server, src, records, fail_once)
    counts, stream_time = collections.Counter(), -1
    for _, k, _, ts in read(server, src, 1):
        stream_time = max(stream_time, ts)
        start = ts - ts % 1_000
        if start + 1_000 > stream_time:
            counts[(k, start)] += 1
    out = {(k[:-8], long_of(k[-8:])): long_of(v) for k, v in
           latest_of(read(server, f"{src}-out", 1)).items()}
    assert out == dict(counts)
