"""Standby replicas (num.standby.replicas) against a real server: two
instances of one application (in-memory stores, so that nothing but a
standby can spare a full restore) each keep a standby of the other's tasks,
fed from the changelogs; when one instance leaves, the other's standbys
become its active tasks and restore only what they had not read, fewer
records than the changelog holds; without standbys the same migration
restores every changelog record (the contrast that shows the test can
fail). With RocksDB stores the same holds, and the instance that left
checkpointed its standbys where they got to. The final counts equal the model either way.
"""
from __future__ import annotations

import collections
import time

import pytest
from harness import create, wait_until
from test_streams_runtime import config, long_of, produce, read, run_until_caught_up

from kafkalite.client import Consumer, TopicPartition
from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder)
from kafkalite.streams.restore import delete_checkpoint, read_checkpoint

S, L = Serdes.string(), Serdes.long()
PARTS = 4


def committed(server, app, topic) -> int:
    c = Consumer(server.config(**{"group.id": app}))
    try:
        return sum(max(tp.offset, 0) for tp in c.committed(
            [TopicPartition(topic, p) for p in range(PARTS)]))
    finally:
        c.close()


@pytest.mark.parametrize("replicas,store", [(1, "in_memory"), (0, "in_memory"),
                                            (1, "rocksdb")])
def test_migration_onto_a_standby_restores_only_the_tail(server, topic_name, tmp_path,
                                                          replicas, store):
    src = topic_name
    create(server, src, PARTS)
    create(server, f"{src}-out", PARTS)

    def instance(name):
        b = StreamsBuilder()
        b.stream(src, Consumed.with_(S, L)).group_by_key().count(
            Materialized.as_("counts")).to_stream().to(f"{src}-out", Produced.with_(S, L))
        return KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
            "state.dir": str(tmp_path / name), "default.dsl.store": store,
            "num.standby.replicas": replicas, "standby.refresh.ms": 200,
            "commit.interval.ms": 100}))

    now = int(time.time() * 1000)
    records = [(f"k{i % 97}", i, now + i) for i in range(3000)]
    produce(server, src, records[:2000])
    one, two = instance("one"), instance("two")
    one.start()
    two.start()
    try:
        wait_until(lambda: len(one.tasks) == len(two.tasks) == 2, 60,
                   "both instances active")
        wait_until(lambda: committed(server, f"{src}-app", src) == 2000, 60,
                   "the input counted")
        moved = set(one.tasks)
        kept = set(two.tasks)
        if replicas:
            # two's standbys of one's tasks have read their changelogs
            wait_until(lambda: set(two.standbys) == moved, 60, "standbys")
            wait_until(lambda: all(
                offset > 0 for task in list(two.standbys.values())
                for offset in (task.restored_to or {0: 0}).values()), 60, "standbys fed")
            if store == "rocksdb":
                # one may have checkpointed two's tasks when it gave them up
                # at the first rebalance: only the standbys' own count here
                wait_until(lambda: set(one.standbys) == kept, 60, "one's standbys")
                for s, p in kept:
                    delete_checkpoint(str(tmp_path / "one" / f"{src}-app" / f"{s}_{p}"))
        else:
            assert not two.standbys
    finally:
        one.close()
    assert one.error is None
    produce(server, src, records[2000:])
    run_until_caught_up(two, server, started=True)
    progress = [two.restore_progress.tasks[f"{s}_{p}"]["counts"] for s, p in moved]
    restored = sum(e["restored"] for e in progress)
    changelog = sum(e["end"] for e in progress)     # nothing compacted away yet: from 0
    assert changelog > 0
    if replicas:
        assert restored < changelog, (restored, changelog)
        assert all(e["start"] > 0 for e in progress), progress
    else:
        assert restored == changelog and all(e["start"] == 0 for e in progress), progress
    latest = {}
    for _, k, v, _ in read(server, f"{src}-out", PARTS):
        latest[k] = long_of(v)
    assert latest == {k.encode(): n for k, n in
                      collections.Counter(k for k, _, _ in records).items()}
    if store == "rocksdb":
        # one's standbys of two's tasks were checkpointed where they got to
        for s, p in kept:
            got = read_checkpoint(str(tmp_path / "one" / f"{src}-app" / f"{s}_{p}"))
            assert got and all(o > 0 for o in got.values()), (s, p, got)
