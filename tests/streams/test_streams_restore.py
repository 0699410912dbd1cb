"""Checkpoint files and restore progress (restore.py) against a real server.

A task whose state directory holds a checkpoint restores only the changelog's
tail from the checkpointed offset; the StateRestoreListener hears where each
store's restore starts and ends and how many records each batch restored;
the results equal a plain-Python model over the whole input (counts per key
and tumbling-window counts: a window store kept from an earlier run is
indexed again before its tail is restored). Under exactly_once_v2 no
checkpoint exists while the tasks process (a kill -9 then restores the whole
changelog), and a clean close writes one.
"""
from __future__ import annotations

import collections
import glob
import os
import time

import pytest
from harness import create, wait_until
from test_streams_exactly_once import (check, create_topics, outputs, start_app, stop_app,
                                       wait_caught_up)
from test_streams_runtime import (config, long_of, produce, read, run_until_caught_up,
                                  wait_running)

from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder, TimeWindows)
from kafkalite.streams.restore import (StateRestoreListener, read_checkpoint, read_progress,
                                       write_checkpoint)

S, L = Serdes.string(), Serdes.long()
PARTS = 2


class Recorder(StateRestoreListener):
    def __init__(self):
        self.starts, self.batches, self.ends = {}, collections.Counter(), {}

    def on_restore_start(self, tp, store, start, end):
        self.starts[(tp.topic, tp.partition)] = (store, start, end)

    def on_batch_restored(self, tp, store, batch_end_offset, n):
        assert batch_end_offset < self.starts[(tp.topic, tp.partition)][2]
        self.batches[(tp.topic, tp.partition)] += n

    def on_restore_end(self, tp, store, total):
        self.ends[(tp.topic, tp.partition)] = total


def test_checkpoint_file_round_trip_and_bad_files(tmp_path):
    offsets = {("app-counts-changelog", 0): 12, ("app-w-changelog", 0): 7}
    write_checkpoint(str(tmp_path), offsets)
    assert read_checkpoint(str(tmp_path)) == offsets
    assert (tmp_path / ".checkpoint").read_text().split("\n")[:2] == ["0", "2"]
    for bad in ("", "1\n1\nt 0 5\n", "0\n2\nt 0 5\n", "0\nx\n", "0\n1\nt zero 5\n"):
        (tmp_path / ".checkpoint").write_text(bad)
        assert read_checkpoint(str(tmp_path)) == {}, bad
    assert read_checkpoint(str(tmp_path / "none")) == {}


def changelog_records(server, topic, partition, start) -> int:
    """Records (not markers) of a changelog partition from ``start``."""
    c = Consumer(server.config(**{"isolation.level": "read_committed"}))
    try:
        tp = TopicPartition(topic, partition, start)
        end = c.get_watermark_offsets(tp)[1]
        c.assign([tp])
        n, deadline = 0, time.monotonic() + 20
        while c.position([tp])[0].offset < end and time.monotonic() < deadline:
            n += c.consume_batch(0.2).num_rows
        return n
    finally:
        c.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_restart_restores_only_the_changelog_tail(server, topic_name, tmp_path, guarantee):
    src = topic_name
    create(server, src, PARTS)
    for out in ("c", "w"):
        create(server, f"{src}-{out}", PARTS)
    base = int(time.time()) // 10 * 10_000
    batches = [[(f"k{i % 7}", i, base + 100 * i) for i in range(n, n + 200)]
               for n in (0, 200, 400, 600)]

    def streams(state):
        b = StreamsBuilder()
        s = b.stream(src, Consumed.with_(S, L))
        s.group_by_key().count(Materialized.as_("counts")).to_stream().to(
            f"{src}-c", Produced.with_(S, L))
        s.group_by_key().windowed_by(TimeWindows.of_size_and_grace(5_000, 0)).count(
            Materialized.as_("w")).to_stream().to(f"{src}-w", Produced.with_(S, L))
        return KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
            "state.dir": str(tmp_path / state), "processing.guarantee": guarantee}))

    app = f"{src}-app"
    changelogs = [f"{app}-counts-changelog", f"{app}-w-changelog"]
    produce(server, src, batches[0])
    first = streams("a")
    run_until_caught_up(first, server)
    saved = {}
    for p in range(PARTS):
        saved.update(read_checkpoint(str(tmp_path / "a" / app / f"0_{p}")))
    # a clean close checkpoints every changelog partition at its end
    assert set(saved) == {(t, p) for t in changelogs for p in range(PARTS)}
    ends = Consumer(server.config())
    assert all(ends.get_watermark_offsets(TopicPartition(t, p))[1] == o
               for (t, p), o in saved.items())
    ends.close()
    # another instance (an empty state directory) carries on: restores it all
    produce(server, src, batches[1])
    second = streams("b")
    run_until_caught_up(second, server)
    tail = sum(changelog_records(server, t, p, o) for (t, p), o in saved.items())
    assert 0 < tail < second.restored_records + tail
    # the first state directory again: only what the second instance wrote
    produce(server, src, batches[2])
    third = streams("a")
    heard = Recorder()
    third.set_global_state_restore_listener(heard)
    run_until_caught_up(third, server)
    assert third.restored_records == tail, (third.restored_records, tail)
    assert {k: v[1] for k, v in heard.starts.items()} == saved
    assert heard.ends == heard.batches and sum(heard.ends.values()) == tail
    progress = read_progress(str(tmp_path / "a" / app / "0_0"))
    assert set(progress) == {"counts", "w"} and all(e["done"] for e in progress.values())
    assert third.restore_progress.tasks["0_0"] == progress
    # and again, with nothing to restore: the windows the database holds
    # must expire as the new records' stream time passes them
    produce(server, src, batches[3])
    fourth = streams("a")
    run_until_caught_up(fourth, server)
    assert fourth.restored_records == 0

    records = [r for batch in batches for r in batch]
    latest = {k: long_of(v) for _, k, v, _ in read(server, f"{src}-c", PARTS)}
    assert latest == {k.encode(): n for k, n in
                      collections.Counter(k for k, _, _ in records).items()}
    windowed = {(k[:-8], long_of(k[-8:])): long_of(v) for _, k, v, _ in
                read(server, f"{src}-w", PARTS)}
    assert windowed == dict(collections.Counter(
        (k.encode(), ts - ts % 5_000) for k, _, ts in records))
    # retention (size + grace): every window that ended before its task's
    # stream time was dropped and tombstoned, also those the fourth run
    # found in its database (indexed again)
    stream_time = collections.defaultdict(int)
    for part, _, _, ts in read(server, src, PARTS):
        stream_time[part] = max(stream_time[part], ts)
    last = {}
    for part, k, v, _ in read(server, f"{app}-w-changelog", PARTS):
        last[(part, k)] = v
    live = sorted(long_of(k[-8:]) - base for (part, k), v in last.items()
                  if v is not None and long_of(k[-8:]) < stream_time[part] - 5_000 + 1)
    assert not live, f"windows past retention still held (starts - base): {live}"


def changelog_end(server, topic, partitions=4) -> int:
    """The sum of ``topic``'s high watermarks (0 while it does not exist)."""
    c = Consumer(server.config())
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p))[1]
                   for p in range(partitions))
    except Exception:       # noqa: BLE001 -- not created yet
        return 0
    finally:
        c.close()


def wait_changelog_past(server, topic, end, timeout=60.0) -> int:
    """Wait until the app's changelog went past ``end`` (it processed and
    committed): fixed sleeps were too short for a loaded machine."""
    return wait_until(lambda: (now := changelog_end(server, topic)) > end and now, timeout,
                      f"{topic} to go past {end}", interval=0.2)


def task_dirs(state, app) -> list:
    return sorted(glob.glob(os.path.join(str(state), app, "0_*")))


def test_exactly_once_no_checkpoint_while_processing(server, topic_name, tmp_path):
    """Under exactly_once_v2 the checkpoint is gone while tasks process; a
    kill -9 then leaves none, and the next run on the same state directory
    restores every changelog record; the output equals the model."""
    from test_streams_exactly_once import KEYS, InputFeed
    create_topics(server, topic_name)
    app_id, state = f"{topic_name}-app", tmp_path / "state"
    changelog = f"{app_id}-counts-changelog"
    feed = InputFeed(server, topic_name)
    try:
        proc = start_app(server, app_id, topic_name, state, "exactly_once_v2")
        wait_changelog_past(server, changelog, 0)
        stop_app(proc, kill=False)          # clean: checkpoints written
        assert task_dirs(state, app_id) and all(
            read_checkpoint(d) for d in task_dirs(state, app_id))
        proc = start_app(server, app_id, topic_name, state, "exactly_once_v2")
        wait_changelog_past(server, changelog, changelog_end(server, changelog))
        assert not any(read_checkpoint(d) for d in task_dirs(state, app_id)), \
            "a checkpoint exists while exactly-once tasks process"
        stop_app(proc, kill=True)
    finally:
        inputs = feed.stop()
    # one more chunk after the kill: the next run must process it, so that it
    # counts as caught up only once its tasks were assigned and restored (the
    # killed run may have committed all the feed wrote: restored 0 once, in a
    # loaded full run)
    more = [(f"k{j % KEYS}".encode(), b"%d" % (len(inputs) + j)) for j in range(50)]
    p = Producer(server.config())
    try:
        p.produce_batch(topic_name, [v for _, v in more], [k for k, _ in more])
        assert p.flush(30) == 0
    finally:
        p.close()
    inputs = inputs + more
    proc = start_app(server, app_id, topic_name, state, "exactly_once_v2")
    try:
        wait_caught_up(server, app_id, topic_name)
    finally:
        summary = stop_app(proc, kill=False)
    full = sum(changelog_records(server, changelog, p, OFFSET_BEGINNING) for p in range(4))
    assert summary["restored"] > 0 and summary["restored"] <= full
    views = outputs(server, topic_name)
    assert check(inputs, *views["read_committed"]) == []


def test_exactly_once_commit_leaves_rocksdb_to_the_checkpoint(server, topic_name, tmp_path):
    """A commit does not write the stores' write-back caches into RocksDB
    (the changelog is the durability; it cost a third of the exactly-once
    count's time at 3,000,000 records): the database is still empty once
    every record processed is committed, and a clean close (the checkpoint) writes every key
    with its count, which the next run reads back without a restore."""
    src = topic_name
    create(server, src, 1)
    create(server, f"{src}-c", 1)
    now = int(time.time() * 1000)      # not 1970: retention would delete the output
    records = [(f"k{i % 30}", i, now + i) for i in range(300)]
    produce(server, src, records)

    def streams():
        b = StreamsBuilder()
        b.stream(src, Consumed.with_(S, L)).group_by_key().count(
            Materialized.as_("counts")).to_stream().to(f"{src}-c", Produced.with_(S, L))
        return KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
            "processing.guarantee": "exactly_once_v2"}))

    app = streams()
    app.start()
    try:
        wait_running(app, lambda: app.metrics()["processed"] >= len(records),
                     "every record processed", 30)
        group = Consumer(server.config(**{"group.id": f"{src}-app"}))
        try:       # the processed records committed (a commit after the last put)
            wait_until(lambda: group.committed([TopicPartition(src, 0)])[0].offset
                       >= len(records), 30, "the processed records committed")
        finally:
            group.close()
        assert app.metrics()["commits"] >= 1
        store = next(iter(app.tasks.values())).stores["counts"]
        assert list(store._db.keys()) == [], "a commit wrote the cache into RocksDB"
        assert store.get(b"k7") == 10
    finally:
        app.close()
    again = streams()
    run_until_caught_up(again, server)
    assert again.restored_records == 0
    latest = {k: long_of(v) for _, k, v, _ in read(server, f"{src}-c", 1)}
    assert latest == {f"k{i}".encode(): 10 for i in range(30)}
    from rocksdict import Options, Rdict
    db = Rdict(str(tmp_path / "state" / f"{src}-app" / "0_0" / "counts"), Options(raw_mode=True))
    try:
        assert {k: long_of(v) for k, v in db.items()} == latest
    finally:
        db.close()
