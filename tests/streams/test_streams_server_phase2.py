"""Streams phase 2 against a real server: window-store retention (the
changelog keeps only live windows, expired ones tombstoned), joins,
suppression and the dead-letter queue, each against a plain-Python model
over the input as the broker stored it.
"""
from __future__ import annotations

import collections
import time

from harness import create
from test_streams_runtime import config, long_of, produce, read, run_until_caught_up

from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder, TimeWindows)

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
