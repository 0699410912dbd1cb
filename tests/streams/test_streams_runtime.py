"""KafkaStreams against a real server: operators and windowed counts equal
a plain-Python model over the input as the broker stored it; a table with a
tombstone; state restored from the changelog into an empty state directory;
the internal topics' configs; a static instance closed with leave_group
out of its group at once; a clear error for inputs that are not
co-partitioned.
"""
from __future__ import annotations

import collections
import time

import pyarrow.compute as pc
import pytest
from harness import create, wait_until

from kafkalite.client import (AdminClient, ConfigResource, Consumer, OFFSET_BEGINNING, Producer,
                              ResourceType, TopicPartition)
from kafkalite.errors import KafkaError
from kafkalite.streams import (Consumed, KafkaStreams, Materialized, Produced, Serdes,
                               StreamsBuilder, TimeWindows, TopologyException)

S, L = Serdes.string(), Serdes.long()


def produce(server, topic, records) -> None:
    """(key, value, timestamp) records, string keys and long values."""
    p = Producer(server.config())
    for k, v, ts in records:
        p.produce(topic, v.to_bytes(8, "big", signed=True), k.encode(), timestamp=ts)
    assert p.flush(10) == 0
    p.close()


def read(server, topic, partitions, isolation="read_committed") -> list:
    """Every record of ``topic`` as (partition, key bytes, value bytes, ts),
    read to the high watermark (past the last transaction's markers, which
    are written after commit_transaction returns)."""
    c = Consumer(server.config(**{"isolation.level": isolation}))
    ends_of = Consumer(server.config())
    try:
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)]
        c.assign(tps)
        ends = {tp.partition: ends_of.get_watermark_offsets(tp)[1] for tp in tps}
        out, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline and any(
                tp.offset < ends[tp.partition] for tp in c.position(tps)):
            out += [(m.partition(), m.key(), m.value(), m.timestamp()[1])
                    for m in c.consume(10_000, 0.2)]
        return out
    finally:
        c.close()
        ends_of.close()


def open_transactions(server, topic, partitions) -> str:
    """What an assertion about read_committed output should say when it
    fails: the producers with a transaction still open in ``topic`` (seen
    once under full-suite load: a partition's redone output not visible)."""
    from kafkalite.client import AdminClient
    admin = AdminClient(server.config())
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        found = admin.describe_producers(tps)
        return "open transactions: " + repr([
            (tp.partition, s) for tp in tps for s in found[tp].result()
            if s.current_transaction_start_offset >= 0])
    finally:
        admin.close()


def run_until_caught_up(streams: KafkaStreams, server, timeout=30.0, started=False) -> None:
    """Start (unless ``started``), wait until the group committed the end of
    every input (repartition topics included), close."""
    if not started:
        streams.start()
    topics = {name: streams.partitions[sub] for name, sub in
              streams.topology.source_topics(streams.application_id).items()}
    c = Consumer(server.config(**{"group.id": streams.application_id}))
    try:
        tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        deadline = time.monotonic() + timeout
        matched = 0
        while True:
            # read again each time: repartition topics grow while the inputs are
            # processed; twice in a row, as the ends are read before the commits
            ends = [c.get_watermark_offsets(tp)[1] for tp in tps]
            committed = [tp.offset for tp in c.committed(tps)]
            matched = matched + 1 if committed == ends else 0
            if matched == 2:
                break
            assert streams.state != KafkaStreams.ERROR, streams.error
            assert time.monotonic() < deadline, (
                f"the application did not catch up: committed {committed}, ends {ends}")
            time.sleep(0.2)
    finally:
        c.close()
        streams.close()
    assert streams.error is None


def wait_running(streams, condition, what, timeout: float = 60.0):
    """Until ``condition()`` holds (its value); fails at once, with the
    error, if the application failed meanwhile."""
    def check():
        assert streams.state != KafkaStreams.ERROR, streams.error
        return condition()
    return wait_until(check, timeout, what)


def config(server, tmp_path, app, **extra) -> dict:
    return {"application.id": app, "bootstrap.servers": server.bootstrap,
            "state.dir": str(tmp_path / "state"), "commit.interval.ms": 100, **extra}


def long_of(b: bytes) -> int:
    return int.from_bytes(b, "big", signed=True)


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
def test_operators_and_windowed_count_equal_the_model(server, topic_name, tmp_path, guarantee):
    src = topic_name
    create(server, src, 2)
    for out in ("f", "c", "w"):
        create(server, f"{src}-{out}", 2)
    # timestamps of today: retention.ms would delete a log of 1970's at once
    base = int(time.time()) // 10 * 10_000
    records = [(f"k{i % 9}", i, base + 1000 * (i // 3) - (5000 if i % 17 == 0 else 0))
               for i in range(400)]
    produce(server, src, records)
    windows = TimeWindows.of_size_and_grace(10_000, 3_000)
    b = StreamsBuilder()
    s = b.stream(src, Consumed.with_(S, L))
    s.filter(pc.greater(pc.field("value"), 100)).map_values(lambda v: v * 2).to(
        f"{src}-f", Produced.with_(S, L))
    s.group_by(lambda k, v: f"m{v % 4}").count().to_stream().to(f"{src}-c",
                                                                Produced.with_(S, L))
    s.group_by_key().windowed_by(windows).count(Materialized.as_("w")).to_stream().to(
        f"{src}-w", Produced.with_(S, L))
    app = f"{src}-app"
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, app, **{
        "processing.guarantee": guarantee})), server)

    stored = read(server, src, 2)
    assert len(stored) == len(records)
    # stateless: every record over 100, doubled
    got = collections.Counter((k, long_of(v)) for _, k, v, _ in read(server, f"{src}-f", 2))
    assert got == collections.Counter((k.encode(), v * 2) for k, v, _ in records if v > 100)
    # count through the repartition topic: latest value per key
    latest = {k: long_of(v) for _, k, v, _ in read(server, f"{src}-c", 2)}
    assert latest == {f"m{m}".encode(): sum(1 for _, v, _ in records if v % 4 == m)
                      for m in range(4)}
    # windowed count: stream time is per task (input partition), in log order
    model, dropped = collections.Counter(), 0
    for part in range(2):
        stream_time = -1
        for p, k, v, ts in stored:
            if p != part:
                continue
            stream_time = max(stream_time, ts)
            start = ts - ts % 10_000
            if start + 10_000 > stream_time - 3_000:
                model[(k, start)] += 1
            else:
                dropped += 1
    assert dropped > 0, "the input has records beyond grace"
    windowed = {(k[:-8], long_of(k[-8:])): long_of(v) for _, k, v, _ in
                read(server, f"{src}-w", 2)}
    assert windowed == dict(model)
    names = {r[0] for r in AdminClient(server.config()).list_topics(timeout=10).topics.items()}
    assert f"{app}-w-changelog" in names
    assert any(n.startswith(app) and n.endswith("-repartition") for n in names)


def test_restore_from_changelog_into_an_empty_state_dir(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 3)
    create(server, f"{src}-out", 3)
    now = int(time.time() * 1000)
    first = [(f"k{i % 11}", i, now + i) for i in range(300)]
    second = [(f"k{i % 13}", i, now + i) for i in range(300, 700)]

    def app(state):
        b = StreamsBuilder()
        b.stream(src, Consumed.with_(S, L)).group_by_key().count(
            Materialized.as_("counts")).to_stream().to(f"{src}-out", Produced.with_(S, L))
        return KafkaStreams(b.build(), {
            "application.id": f"{src}-app", "bootstrap.servers": server.bootstrap,
            "state.dir": str(tmp_path / state), "processing.guarantee": "exactly_once_v2"})

    produce(server, src, first)
    run_until_caught_up(app("one"), server)
    produce(server, src, second)
    again = app("two")      # an empty state directory: the counts come from the changelog
    run_until_caught_up(again, server)
    assert again.restored_records >= 11
    model = collections.Counter(k.encode() for k, _, _ in first + second)
    latest = {k: long_of(v) for _, k, v, _ in read(server, f"{src}-out", 3)}
    assert latest == dict(model)
    # the changelog: compacted, one partition per input partition
    admin = AdminClient(server.config())
    try:
        changelog = f"{src}-app-counts-changelog"
        assert len(admin.list_topics(timeout=10).topics[changelog].partitions) == 3
        res = ConfigResource(ResourceType.TOPIC, changelog)
        configs = admin.describe_configs([res])[res].result()
        assert configs["cleanup.policy"].value == "compact"
    finally:
        admin.close()


def test_table_tombstone_through_a_real_server(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 1)
    create(server, f"{src}-out", 1)
    p = Producer(server.config())
    for k, v in [("u1", b"alice"), ("u2", b"bob"), ("u1", None), ("u3", b"carol")]:
        p.produce(src, v, k.encode())
    assert p.flush(10) == 0
    p.close()
    b = StreamsBuilder()
    b.table(src, Consumed.with_(S, S), Materialized.as_("users")).map_values(str.upper) \
        .to_stream().to(f"{src}-out", Produced.with_(S, S))
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app"))
    streams.start()
    try:
        wait_running(streams, lambda: streams.metrics()["processed"] >= 4, "4 records processed")
        assert streams.store("users").all() == [(b"u2", "bob"), (b"u3", "carol")]
        assert streams.store("users").get(b"u1") is None
    finally:
        streams.close()
    out = [(k, v) for _, k, v, _ in read(server, f"{src}-out", 1)]
    assert out == [(b"u1", b"ALICE"), (b"u2", b"BOB"), (b"u1", None), (b"u3", b"CAROL")]


def test_a_static_instance_stays_in_the_group_unless_closed_with_leave_group(
        server, topic_name, tmp_path):
    src, app = topic_name, f"{topic_name}-app"
    create(server, src, 2)
    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, S)).map_values(str.upper).to(f"{src}-out",
                                                                 Produced.with_(S, S))
    admin = AdminClient(server.config())

    def members() -> list:
        return [m.group_instance_id
                for m in admin.describe_consumer_groups([app])[app].result(10).members]
    try:
        for leave in (False, True):
            streams = KafkaStreams(b.build(), config(server, tmp_path, app, **{
                "instance.id": "i1"}))
            streams.start()
            wait_running(streams, lambda: streams.state == KafkaStreams.RUNNING, "RUNNING")
            streams.close(leave_group=leave)
            if not leave:   # a static member's close keeps its place (KIP-345) ...
                assert members() == [f"{app}-i1"]
        # ... unless it leaves for good: removed at once, not after its session timeout
        wait_until(lambda: members() == [], 10, "the static instance to leave the group")
    finally:
        admin.close()


def test_inputs_not_copartitioned_are_refused_at_start(server, topic_name, tmp_path):
    create(server, topic_name + "-a", 4)
    create(server, topic_name + "-b", 2)
    b = StreamsBuilder()
    b.stream(topic_name + "-a").merge(b.stream(topic_name + "-b")).to(topic_name + "-out")
    streams = KafkaStreams(b.build(), config(server, tmp_path, topic_name))
    with pytest.raises(TopologyException, match="not co-partitioned"):
        streams.start()
    with pytest.raises(TopologyException, match="do not exist"):
        b2 = StreamsBuilder()
        b2.stream(topic_name + "-missing").to(topic_name + "-out")
        KafkaStreams(b2.build(), config(server, tmp_path, topic_name + "2")).start()


class PlantedFailure:
    """A per-record map function that raises a KafkaError on value 300,
    once, and remembers every value it sees after that (the redo)."""

    def __init__(self):
        self.failed, self.redone = [], set()

    def __call__(self, v):
        if v == 300 and not self.failed:
            self.failed.append(v)
            raise KafkaError("planted: the transaction cannot go on")
        if self.failed:
            self.redone.add(v)
        return v


def run_through_one_abort(streams, server, src, records, planted: PlantedFailure,
                          timeout: float = 60.0) -> None:
    """Produce the first 200 records, start, produce the rest (value 300
    fails once: abort and rewind), and close once the redo went through
    every record -- a count of records processed cannot tell: how much of
    the failed batch it counts, and one partition can be done while the
    other is not."""
    produce(server, src, records[:200])
    streams.start()
    try:
        wait_running(streams, lambda: streams.metrics()["processed"] >= 200,
                     "the first 200 records processed", timeout)
        produce(server, src, records[200:])
        wait_running(streams, lambda: streams.metrics()["aborts"] >= 1
                     and len(planted.redone) >= len(records),
                     "an abort, then every record redone", timeout)
    finally:
        streams.close()
    assert streams.error is None and planted.failed == [300]


def test_a_failed_transaction_is_aborted_and_redone_exactly_once(server, topic_name, tmp_path):
    """exactly_once_v2: a failure inside a transaction (planted: a KafkaError
    from the topology on one record, once) aborts it, rewinds the input to
    the committed offsets and the store to its changelog, and does the work
    again: the committed output holds each record once and the counts equal
    the model; the aborted attempt's records are in the log
    (read_uncommitted sees them twice), which is what the check catches."""
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-copy", 2)
    create(server, f"{src}-counts", 2)
    now = int(time.time() * 1000)
    records = [(f"k{i % 7}", i, now + i) for i in range(400)]
    fail_once = PlantedFailure()

    b = StreamsBuilder()
    s = b.stream(src, Consumed.with_(S, L))
    s.map_values(fail_once).to(f"{src}-copy", Produced.with_(S, L))
    s.group_by_key().count().to_stream().to(f"{src}-counts", Produced.with_(S, L))
    # one transaction until the failure: the first 200 records' output is in it
    streams = KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app", **{
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 60_000}))
    run_through_one_abort(streams, server, src, records, fail_once)
    want = collections.Counter((k.encode(), v) for k, v, _ in records)
    uncommitted = collections.Counter((k, long_of(v)) for _, k, v, _ in
                                      read(server, f"{src}-copy", 2, "read_uncommitted"))
    assert uncommitted - want, "the aborted attempt left nothing in the log to catch"
    committed = collections.Counter((k, long_of(v)) for _, k, v, _ in
                                    read(server, f"{src}-copy", 2))
    assert committed == want, open_transactions(server, f"{src}-copy", 2)
    latest = {k: long_of(v) for _, k, v, _ in read(server, f"{src}-counts", 2)}
    assert latest == dict(collections.Counter(k.encode() for k, _, _ in records))


def test_outputs_keep_each_records_timestamp_and_headers(server, topic_name, tmp_path):
    """A record's output keeps its own timestamp and headers (Kafka Streams'
    rule), not one timestamp per produced batch."""
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-out", 2)
    base = int(time.time() * 1000) - 100_000
    p = Producer(server.config())
    for i in range(300):
        p.produce(src, i.to_bytes(8, "big", signed=True), f"k{i % 5}".encode(),
                  timestamp=base + 7 * i,
                  headers=[("trace", b"t%d" % i)] if i % 3 == 0 else None)
    assert p.flush(10) == 0
    p.close()
    b = StreamsBuilder()
    b.stream(src, Consumed.with_(S, L)).filter(pc.equal(pc.bit_wise_and(
        pc.field("value"), 1), 0)).map_values(lambda v: v * 10).to(
        f"{src}-out", Produced.with_(S, L))
    run_until_caught_up(KafkaStreams(b.build(), config(server, tmp_path, f"{src}-app")), server)
    c = Consumer(server.config())
    try:
        tps = [TopicPartition(f"{src}-out", q, OFFSET_BEGINNING) for q in range(2)]
        c.assign(tps)
        got, deadline = [], time.monotonic() + 20
        while len(got) < 150 and time.monotonic() < deadline:
            got += [(long_of(m.value()) // 10, m.timestamp()[1], m.headers())
                    for m in c.consume(1000, 0.2)]
    finally:
        c.close()
    want = [(i, base + 7 * i, [("trace", b"t%d" % i)] if i % 3 == 0 else None)
            for i in range(0, 300, 2)]
    assert sorted(got, key=lambda r: r[0]) == want
