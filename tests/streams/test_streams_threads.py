"""num.stream.threads > 1 against a real server: two stream threads of one
KafkaStreams share the input's partitions (each a member of the group),
both process records, an interactive query sees the stores of both, and
the counts (exactly_once_v2) equal the model.
"""
from __future__ import annotations

import collections
import time

from harness import create
from test_streams_runtime import (config, long_of, produce, read, run_until_caught_up,
                                  wait_running)

from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder)

S, L = Serdes.string(), Serdes.long()


def test_two_stream_threads_share_the_partitions(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 4)
    create(server, f"{src}-out", 4)
    now = int(time.time() * 1000)
    records = [(f"k{i % 23}", i, now + i) for i in range(2000)]
    produce(server, src, records)
    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).group_by_key().count(
        Materialized.as_("counts")).to_stream().to(f"{src}-out", Produced.with_(S, L))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "num.stream.threads": 2, "processing.guarantee": "exactly_once_v2"}))
    assert len(streams.threads) == 2
    model = collections.Counter(k for k, _, _ in records)
    streams.start()
    try:
        wait_running(streams, lambda: (
            len(streams.tasks) == 4 and all(len(t.tasks) == 2 for t in streams.threads)
            and dict(streams.store("counts").all()) == {k.encode(): n for k, n in model.items()}),
            lambda: f"two tasks a thread, every record counted: "
                    f"{ {t.instance: sorted(t.tasks) for t in streams.threads} }")
        assert streams.store("counts").get(b"k0") == model["k0"]
    finally:
        run_until_caught_up(streams, server, started=True)
    assert all(t.metrics()["commits"] > 0 for t in streams.threads)
    assert streams.state == KafkaStreams.NOT_RUNNING
    latest = {}
    for _, k, v, _ in read(server, f"{src}-out", 4):
        latest[k] = long_of(v)
    assert latest == {k.encode(): n for k, n in model.items()}
