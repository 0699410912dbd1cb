"""MirrorMaker 2 (kafkalite/connect/connectors/mirror.py, ``kafkalite mirror``)
between two real kafkalite servers, the mirror in its own process.

The checker (``check_mirror``) compares each source partition's records
with the target partition's: every source record present (by its value,
unique per record), first copies in source order, and duplicates counted;
each test first shows it catches a planted fault.
"""
import signal
import struct
import subprocess
import sys
import threading
import time

import pytest

from harness import ServerProcess, child_env, create, wait_until
from kafkalite.client import (OFFSET_BEGINNING, AdminClient, ConfigResource, Consumer,
                              NewPartitions, Producer, TopicPartition)
from kafkalite.connect.connectors.mirror import (MIRROR_HEADER, DefaultReplicationPolicy,
                                                 MirrorCheckpointTask, OffsetSyncStore)
from kafkalite.connect.connectors.mirror_records import (decode_checkpoint, decode_offset_sync,
                                                         encode_checkpoint, encode_heartbeat,
                                                         encode_offset_sync)
from kafkalite.connect.mirror_client import translate_offsets
from kafkalite.connect.offsets import KafkaOffsetStore


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    """Two servers: the source and the target."""
    a = ServerProcess(str(tmp_path_factory.mktemp("a") / "data")).start()
    try:
        b = ServerProcess(str(tmp_path_factory.mktemp("b") / "data")).start()
    except BaseException:
        a.kill()
        raise
    yield a, b
    for s in (a, b):
        if s.proc.poll() is None:
            assert s.stop() == 0
        s.kill()


class Mirror:
    """``kafkalite mirror`` in a subprocess."""

    def __init__(self, source, target, topics, *args, source_bootstrap=None):
        self.args = [sys.executable, "-m", "kafkalite", "mirror",
                     "--source", source_bootstrap or source.bootstrap,
                     "--target", target.bootstrap, "--topics", topics, "--interval", "1",
                     "--offset-flush-ms", "300", *args]
        self.proc = None
        self.output = ""
        self.start()

    def start(self):
        self.proc = subprocess.Popen(self.args, env=child_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.proc.stdout.read()

    def stop(self):
        """Stop it (SIGTERM; once stopped, nothing more lands): its output."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if not self.proc.stdout.closed:
            self.output = self.proc.stdout.read().decode(errors="replace")
            self.proc.stdout.close()
        return self.output


def produce(server, topic, partition, start, count, ts0=1_700_000_000_000):
    p = Producer(server.config(**{"linger.ms": 5}))
    try:
        for i in range(start, start + count):
            p.produce(topic, value=f"{topic}:{partition}:{i}".encode(), key=f"k{i}".encode(),
                      partition=partition, timestamp=ts0 + i, headers=[("seq", str(i).encode())])
        assert p.flush(30) == 0
    finally:
        p.close(10)


def end_offsets(server, topic, partitions):
    admin = AdminClient(server.config())
    try:
        return admin.list_offsets({(topic, p): -1 for p in range(partitions)})
    except Exception:       # noqa: BLE001 -- not created yet
        return {}
    finally:
        admin.close()


def read_partitions(server, topic, partitions):
    """{partition: [Message]} of everything in ``topic`` now."""
    ends = end_offsets(server, topic, partitions)
    c = Consumer(server.config(**{"group.id": "reader", "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any(len(out[p]) < ends[(topic, p)] for p in out) and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if not m.error():
                    out[m.partition()].append(m)
        return out
    finally:
        c.close()


def check_mirror(source: dict, target: dict) -> dict:
    """source/target: {partition: [value]} in offset order. Missing source
    values, duplicates on the target, and partitions whose first copies are
    not in source order."""
    missing = dups = 0
    out_of_order = []
    for p, src in source.items():
        seen, firsts = set(), []
        for v in target.get(p, []):
            if v in seen:
                dups += 1
            else:
                seen.add(v)
                firsts.append(v)
        missing += sum(1 for v in src if v not in seen)
        pos = {v: i for i, v in enumerate(src)}
        order = [pos[v] for v in firsts if v in pos]
        if order != sorted(order):
            out_of_order.append(p)
    return {"missing": missing, "duplicates": dups, "out_of_order": out_of_order}


def values(parts: dict) -> dict:
    return {p: [m.value() for m in ms] for p, ms in parts.items()}


def test_offset_sync_and_checkpoint_formats_and_translation(clusters):
    """MM2's binary records round-trip; translation follows MM2's rule (a sync
    at the offset maps exactly, else the latest sync below + 1); a restart's
    sync of an upstream offset replaces the history from there."""
    k, v = encode_offset_sync("orders", 2, 170, 101)
    assert k == b"\x00\x06orders\x00\x00\x00\x02" and len(v) == 16
    assert decode_offset_sync(k, v) == ("orders", 2, 170, 101)
    k, v = encode_checkpoint("g1", "east.orders", 2, 170, 101)
    assert decode_checkpoint(k, v) == ("g1", "east.orders", 2, 170, 101)
    # checkpoints name the topic as the target has it (renameTopicPartition): a source
    # topic gets the source's prefix, one that came from the target its original name
    task = MirrorCheckpointTask()
    task.source_alias, task.target_alias = "east", "west"
    task.policy = DefaultReplicationPolicy()
    assert task.rename_topic("orders") == "east.orders"
    assert task.rename_topic("west.orders") == "orders"
    assert task.rename_topic("other.orders") == "east.other.orders"
    a, _ = clusters
    create(a, "mm2-offset-syncs.fmt.internal", 1)
    p = Producer(a.config())
    for up, down in ((0, 0), (100, 100), (199, 199), (100, 300)):
        key, value = encode_offset_sync("t", 0, up, down)
        p.produce("mm2-offset-syncs.fmt.internal", key=key, value=value)
    assert p.flush(30) == 0
    p.close(10)
    store = OffsetSyncStore(a.config(), "mm2-offset-syncs.fmt.internal")
    try:
        wait_until(lambda: store.read(0.3) or store.syncs.get(("t", 0)) == [(0, 0), (100, 300)],
                   30, lambda: f"the syncs read: {store.syncs}")
        assert store.translate("t", 0, 100) == 300
        assert store.translate("t", 0, 150) == 301
        assert store.translate("t", 0, 50) == 1
        assert store.translate("t", 1, 50) is None
    finally:
        store.close()


def test_mirror_records_configs_partitions_and_group_offsets(clusters):
    a, b = clusters
    create(a, "orders", 3, **{"retention.ms": "3600000"})
    for p in range(3):
        produce(a, "orders", p, 0, 300)
    admin_a, admin_b = AdminClient(a.config()), AdminClient(b.config())
    admin_a.alter_consumer_group_offsets(
        "g1", [TopicPartition("orders", p, 170) for p in range(3)]).result()
    m = Mirror(a, b, "orders", "--groups", "g1", "--source-alias", "A")
    try:
        wait_until(lambda: sum(end_offsets(b, "A.orders", 3).values()) == 900, 90,
                   lambda: f"900 records on A.orders: {end_offsets(b, 'A.orders', 3)}")
        got = read_partitions(b, "A.orders", 3)
        src = values(read_partitions(a, "orders", 3))
        # the checker catches a dropped and a reordered record before its passing run counts
        planted = values(got)
        planted[1] = planted[1][:50] + planted[1][51:]
        assert check_mirror(src, planted)["missing"] == 1
        planted = values(got)
        planted[2][10], planted[2][11] = planted[2][11], planted[2][10]
        assert check_mirror(src, planted)["out_of_order"] == [2]
        assert check_mirror(src, values(got)) == {"missing": 0, "duplicates": 0,
                                                  "out_of_order": []}
        for p, ms in got.items():
            for i, msg in enumerate(ms):
                assert msg.key() == f"k{i}".encode() and msg.partition() == p
                assert msg.timestamp()[1] == 1_700_000_000_000 + i
                assert list(msg.headers()) == [("seq", str(i).encode()), (MIRROR_HEADER, b"A")]
        cfg = admin_b.describe_configs([ConfigResource("topic", "A.orders")])
        assert next(iter(cfg.values())).result()["retention.ms"].value == "3600000"

        # the source grows a partition: the remote topic follows, its records arrive
        admin_a.create_partitions([NewPartitions("orders", 4)])["orders"].result()
        produce(a, "orders", 3, 0, 40)
        wait_until(lambda: end_offsets(b, "A.orders", 4).get(("A.orders", 3)) == 40, 90,
                   "the new partition mirrored")

        # checkpoints, and g1's offsets committed on the target (no member there)
        def translated():
            offs = {tp.partition: tp.offset for tp in
                    admin_b.list_consumer_group_offsets("g1").result() if tp.topic == "A.orders"}
            return offs if len(offs) == 3 else None
        offs = wait_until(translated, 60, "g1's translated offsets on the target")

        # the same poll that returns the checkpoint records commits the
        # translated offsets, before the worker has produced the records. Read
        # back in Kafka's Checkpoint layout (key: group, topic as int16-length
        # strings, partition int32; value: version int16, upstream and downstream
        # offsets int64, metadata), keyed by the topic as named on the target
        # (MirrorCheckpointTask.renameTopicPartition)
        def kafka_checkpoint(key, value):
            glen = struct.unpack_from(">h", key)[0]
            tlen = struct.unpack_from(">h", key, 2 + glen)[0]
            topic = key[4 + glen:4 + glen + tlen].decode()
            version, up, down = struct.unpack_from(">hqq", value)
            assert version == 0 and len(key) == 8 + glen + tlen
            return (key[2:2 + glen].decode(), topic,
                    struct.unpack_from(">i", key, 4 + glen + tlen)[0], up, down)

        def checkpointed():
            cps = read_partitions(b, "A.checkpoints.internal", 1)[0]
            latest = {}
            for c in cps:
                g, t, p, up, down = kafka_checkpoint(c.key(), c.value())
                latest[(g, t, p)] = (up, down)
            want = {("g1", "A.orders", p) for p in range(3)}
            return latest if want <= set(latest) and \
                all(latest[w][0] == 170 for w in want) else None
        latest = wait_until(checkpointed, 30, "g1's checkpoints of A.orders' three partitions")
        assert not any(t == "orders" for _, t, _ in latest), latest
        # RemoteClusterUtils.translateOffsets: the latest checkpoint of each partition
        translated_here = translate_offsets(b.config(), "A", "g1")
        got_cps = {(tp.topic, tp.partition): tp.offset for tp in translated_here}
        want_cps = {(t, p): down for (g, t, p), (_, down) in latest.items() if g == "g1"}
        assert got_cps == want_cps and {("A.orders", p) for p in range(3)} <= set(got_cps)
        assert got_cps[("A.orders", 0)] == offs[0]
        assert translate_offsets(b.config(), "A", "no-such-group") == []
        assert translate_offsets(b.config(), "nowhere", "g1") == []
        beats = read_partitions(b, "heartbeats", 1)[0]
        assert beats and beats[0].key() == encode_heartbeat("A", "target", 0)[0]
        # a consumer of g1 switched to the target resumes without a gap, re-reading at
        # most offset.lag.max (100) records before its committed offset
        c = Consumer(b.config(**{"group.id": "g1", "enable.auto.commit": False}))
        try:
            c.subscribe(["A.orders"])
            first = {}
            deadline = time.monotonic() + 60
            while len(first) < 3 and time.monotonic() < deadline:
                for msg in c.consume(1000, 0.5):
                    if not msg.error() and msg.partition() < 3:
                        first.setdefault(msg.partition(), int(msg.value().split(b":")[2]))
        finally:
            c.close()
        assert len(first) == 3, (first, offs)
        for p, i in first.items():
            assert i <= 170, f"partition {p}: resumed at {i}, after the committed 170 (a gap)"
            assert 170 - i <= 100, f"partition {p}: {170 - i} repeats"
    finally:
        out = m.stop()
        admin_a.close()
        admin_b.close()
    assert "Traceback" not in out, out


def test_mirror_kill9_and_restart_loses_nothing(clusters):
    """Records produced while the mirror runs; kill -9 of the mirror
    mid-run; a restart resumes from the stored source offsets: every source
    record on the target, in order, duplicates at most the records copied
    after the last offset commit before the kill (the at-least-once window)."""
    a, b = clusters
    create(a, "events", 2)
    stop = threading.Event()
    counts = [0, 0]

    def producer():
        while not stop.is_set():
            for p in range(2):
                produce(a, "events", p, counts[p], 200)
                counts[p] += 200
            time.sleep(0.05)
    t = threading.Thread(target=producer, daemon=True)
    t.start()
    m = Mirror(a, b, "events", "--source-alias", "K")
    try:
        wait_until(lambda: sum(end_offsets(b, "K.events", 2).values()) > 3000, 90,
                   "the mirror under way")
        m.kill9()
        ends = end_offsets(b, "K.events", 2)
        store = KafkaOffsetStore(b.config(), "mm2-offsets.K.internal", 5)
        store.start()
        try:
            stored = {p: (store.get("K->target.MirrorSourceConnector",
                                    {"cluster": "K", "topic": "events", "partition": p})
                          or {"offset": -1})["offset"] for p in range(2)}
        finally:
            store.stop()
        window = sum(ends[("K.events", p)] - (stored[p] + 1) for p in range(2))
        m.start()
        # the restarted mirror copies while records are still produced
        wait_until(lambda: sum(end_offsets(b, "K.events", 2).values()) > sum(ends.values()), 90,
                   "the restarted mirror under way")
        stop.set()
        t.join(60)
        total = sum(counts)
        src = values(read_partitions(a, "events", 2))
        # every source record on the target, not a count of records: the
        # re-sent window counts too (a loaded run's 3,400 duplicates reached
        # the count with 800 records still to copy, and the mirror was
        # stopped before it copied them)
        wait_until(lambda: check_mirror(src, values(read_partitions(b, "K.events", 2)))[
                   "missing"] == 0, 120,
                   lambda: f"{total} records mirrored: {end_offsets(b, 'K.events', 2)}")
        m.stop()            # any late duplicates land before the count
        got = values(read_partitions(b, "K.events", 2))
        planted = {p: [v for v in vs if v != src[0][len(src[0]) // 2]] for p, vs in got.items()}
        assert check_mirror(src, planted)["missing"] >= 1
        result = check_mirror(src, got)
        print(f"kill -9 run: {total} records, {result}, window {window}")
        assert result["missing"] == 0 and result["out_of_order"] == [], result
        assert result["duplicates"] <= window, (result, window, stored, ends)
        assert sum(len(v) for v in src.values()) == total
    finally:
        stop.set()
        t.join(60)
        out = m.stop()
    assert "Traceback" not in out, out


def test_mirrored_topic_is_not_mirrored_back(clusters):
    """A -> B, then B -> A: B's remote topic ``A.loop`` names A as its
    source, so it is not copied back to A (``B.A.loop``) while B's own topic
    is; under the identity policy the header stops the loop."""
    a, b = clusters
    create(a, "loop", 1)
    produce(a, "loop", 0, 0, 20)
    create(b, "local", 1)
    produce(b, "local", 0, 0, 5)
    create(a, "idt", 1)
    produce(a, "idt", 0, 0, 10)
    outs = []
    ab = Mirror(a, b, "loop", "--source-alias", "A", "--target-alias", "B")
    ab_id = Mirror(a, b, "idt", "--source-alias", "A2", "--target-alias", "B", "--identity")
    try:
        wait_until(lambda: end_offsets(b, "A.loop", 1).get(("A.loop", 0)) == 20, 90, "A.loop")
        wait_until(lambda: end_offsets(b, "idt", 1).get(("idt", 0)) == 10, 90, "idt on B")
    finally:
        outs += [ab.stop(), ab_id.stop()]
    ba = Mirror(b, a, ".*", "--source-alias", "B", "--target-alias", "A")
    produce(b, "idt", 0, 10, 1)       # written on B: this one goes to A's idt
    ba_id = Mirror(b, a, "idt", "--source-alias", "B2", "--target-alias", "A2", "--identity")
    try:
        wait_until(lambda: end_offsets(a, "B.local", 1).get(("B.local", 0)) == 5, 90,
                   "B.local on A (the reverse mirror works)")
        wait_until(lambda: end_offsets(a, "idt", 1).get(("idt", 0), 0) >= 11, 90,
                   "B's own record of idt on A")
        # a topic made on B now is mirrored by a later refresh of B's topics than the
        # one that found A.loop there
        create(b, "late", 1)
        produce(b, "late", 0, 0, 1)
        wait_until(lambda: end_offsets(a, "B.late", 1).get(("B.late", 0)) == 1, 90,
                   "B.late on A")
        admin = AdminClient(a.config())
        try:
            names = set(admin.list_topics(timeout=30).topics)
        finally:
            admin.close()
        assert "B.A.loop" not in names, names
        # the rest of idt on B came from A2 (its header says so): not copied back
        assert end_offsets(a, "idt", 1)[("idt", 0)] == 11
    finally:
        outs += [ba.stop(), ba_id.stop()]
    for out in outs:
        assert "Traceback" not in out, out


def test_mirror_from_a_source_reached_over_kafkas_protocol(clusters):
    """--source-protocol kafka (source.cluster.protocol=kafka): the source is
    read, described, and its groups' offsets listed through confluent-kafka
    against the source's Kafka listener, as from an Apache Kafka cluster;
    records, configs and translated group offsets arrive as over the native
    protocol."""
    a, b = clusters
    create(a, "payments", 2, **{"retention.ms": "7200000"})
    for p in range(2):
        produce(a, "payments", p, 0, 200)
    admin_a, admin_b = AdminClient(a.config()), AdminClient(b.config())
    admin_a.alter_consumer_group_offsets(
        "g2", [TopicPartition("payments", p, 120) for p in range(2)]).result()
    m = Mirror(a, b, "payments", "--groups", "g2", "--source-alias", "K",
               "--source-protocol", "kafka", source_bootstrap=a.kafka_bootstrap)
    try:
        wait_until(lambda: sum(end_offsets(b, "K.payments", 2).values()) == 400, 90,
                   lambda: f"400 records on K.payments: {end_offsets(b, 'K.payments', 2)}")
        got = read_partitions(b, "K.payments", 2)
        assert check_mirror(values(read_partitions(a, "payments", 2)), values(got)) == {
            "missing": 0, "duplicates": 0, "out_of_order": []}
        msg = got[1][7]
        assert (msg.key(), msg.timestamp()[1]) == (b"k7", 1_700_000_000_007)
        assert list(msg.headers()) == [("seq", b"7"), (MIRROR_HEADER, b"K")]
        cfg = admin_b.describe_configs([ConfigResource("topic", "K.payments")])
        assert next(iter(cfg.values())).result()["retention.ms"].value == "7200000"

        def translated():
            offs = {tp.partition: tp.offset for tp in
                    admin_b.list_consumer_group_offsets("g2").result()
                    if tp.topic == "K.payments"}
            return offs if len(offs) == 2 else None
        offs = wait_until(translated, 60, "g2's translated offsets on the target")
        # MM2's rule through the syncs the task wrote over Kafka's protocol: at most
        # offset.lag.max (100) records before the committed 120, never after it
        assert all(20 <= o <= 120 for o in offs.values()), offs
    finally:
        out = m.stop()
        admin_a.close()
        admin_b.close()
    assert "Traceback" not in out, out
