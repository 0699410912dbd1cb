"""How fast kafkalite Streams restores state, beside a plain read of the same changelog.

    python benchmarks/bench_streams_restore.py              # 1,000,000 changelog records
    python benchmarks/bench_streams_restore.py --quick      # what a smoke run needs

Figures, each beside its ceiling measured in the same run on the same broker:

1. restore rate: a count store's changelog (``--records`` records over
   ``--keys`` keys, 4 partitions, 8-byte values, written straight to
   ``<application.id>-counts-changelog``) restored by a KafkaStreams
   instance with an empty state directory, in records/s from the first
   on_restore_start to the last on_restore_end of a StateRestoreListener;
   for RocksDB and in-memory stores. Ceiling: one Consumer reading the same
   four partitions from the start to the end (consume_batch, nothing done
   with the records).
2. restore from a checkpoint: the same instance's state directory again
   after a clean close, with ``--tail`` more changelog records written by
   "another instance": records restored and seconds, beside the full
   restore's.
3. resume after kill -9: three instances (processes) of one application
   count per key over 6 partitions while input arrives; one is killed with
   SIGKILL; the seconds until every one of its partitions' committed offsets
   moves again (detection, rebalance, restore of its stores, first commit).
   Its floor: ``session.timeout.ms`` (the group notices a dead static member
   only then), printed beside it.

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback

import numpy as np

import common
import report
from report import Results, say

from kafkalite import launcher

HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]
PARTITIONS = 4
SESSION_MS = 6000


def admin_create(server, topics: dict, compact=()) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for f in admin.create_topics([
                NewTopic(t, n, config={"cleanup.policy": "compact"} if t in compact else {})
                for t, n in topics.items()]).values():
            f.result()
    finally:
        admin.close()


def fill_changelog(server, topic, records, keys, first_key=0) -> None:
    """``records`` count updates (8-byte big-endian values) over ``keys``
    keys, each key's records in its own partition (as a task writes them)."""
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap})
    names = [b"key-%08d" % i for i in range(first_key, first_key + keys)]
    step = 10_000
    for start in range(0, records, step):
        n = min(step, records - start)
        idx = np.arange(start, start + n) % keys
        values = (np.arange(start, start + n) // keys + 1).astype(">i8").view(np.uint8) \
            .reshape(n, 8)
        p.produce_batch(topic, values, [names[i] for i in idx])
    assert p.flush(300) == 0
    p.close()


def plain_read(server, topic) -> float:
    """records/s of one consumer reading ``topic`` start to end."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap})
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    try:
        ends = [c.get_watermark_offsets(tp)[1] for tp in tps]
        start = time.perf_counter()
        c.assign(tps)
        n = 0
        while any(tp.offset < e for tp, e in zip(c.position(tps), ends)):
            n += c.consume_batch(0.2).num_rows
        return n / (time.perf_counter() - start)
    finally:
        c.close()


def topology(source: str, sink: str):
    from kafkalite.streams import Materialized, Produced, Serdes, StreamsBuilder
    b = StreamsBuilder()
    b.stream(source).group_by_key().count(Materialized.as_("counts")).to_stream().to(
        sink, Produced.with_(Serdes.bytes(), Serdes.long()))
    return b.build()


def timed_restore(server, work, app, state, store_kind) -> tuple[int, float]:
    """(records restored, seconds) of one instance's start on ``state``."""
    from kafkalite.streams import KafkaStreams
    from kafkalite.streams.restore import StateRestoreListener

    class Clock(StateRestoreListener):
        first = last = None
        ended = 0

        def on_restore_start(self, tp, store, start, end):
            self.first = self.first or time.perf_counter()

        def on_restore_end(self, tp, store, total):
            self.last = time.perf_counter()
            self.ended += 1

    clock = Clock()
    streams = KafkaStreams(topology(f"{app}-in", f"{app}-out"), {
        "application.id": app, "bootstrap.servers": server.bootstrap,
        "state.dir": os.path.join(work, state), "default.dsl.store": store_kind,
        "commit.interval.ms": 1000})
    streams.set_global_state_restore_listener(clock)
    streams.start()
    try:
        deadline = time.monotonic() + 600
        while clock.ended < PARTITIONS:
            if streams.state == KafkaStreams.ERROR or time.monotonic() > deadline:
                raise RuntimeError(f"restore did not finish: {streams.error!r}")
            time.sleep(0.005)
    finally:
        streams.close()
    return streams.restored_records, clock.last - clock.first


# ---- resume after kill -9 -------------------------------------------------------------

def instance_main(bootstrap, app, source, state, name) -> None:
    """One instance (``--instance``): runs until SIGTERM."""
    from kafkalite.streams import KafkaStreams
    streams = KafkaStreams(topology(source, f"{source}-out"), {
        "application.id": app, "bootstrap.servers": bootstrap, "state.dir": state,
        "instance.id": name, "commit.interval.ms": 100,
        "consumer.session.timeout.ms": SESSION_MS, "consumer.heartbeat.interval.ms": 1000})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    print("started", flush=True)
    while not stop.wait(0.1) and streams.state != KafkaStreams.ERROR:
        pass
    streams.close()


def resume_after_kill(server, work, keys) -> tuple[float, list]:
    """Seconds from the SIGKILL until each of the victim's partitions'
    committed offsets moved again; the victim's partitions."""
    from kafkalite.client import AdminClient, Consumer, Producer, TopicPartition
    app, source, parts = "resume", "resume-in", 6
    admin_create(server, {source: parts, f"{source}-out": parts})
    stop = threading.Event()

    def feed():
        p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        rng = np.random.default_rng(1)
        names = [b"key-%08d" % i for i in range(keys)]
        while not stop.is_set():
            idx = rng.integers(0, keys, 2000)
            p.produce_batch(source, [b"v" * 20] * 2000, [names[i] for i in idx])
            p.poll(0)
            time.sleep(0.02)
        p.flush(30)
        p.close()

    feeder = threading.Thread(target=feed)
    feeder.start()
    procs = {}
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": app})
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for name in ("i1", "i2", "i3"):
            procs[name] = subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--instance", server.bootstrap, app,
                 source, os.path.join(work, f"resume-{name}"), name],
                stdout=subprocess.PIPE, text=True, env=launcher.package_env())
            assert procs[name].stdout.readline().strip() == "started"
        deadline = time.monotonic() + 120
        while True:
            desc = admin.describe_consumer_groups([app])[app]
            d = desc.result() if desc.exception() is None else None
            if d is not None and d.state == "Stable" and len(d.members) == 3 and all(
                    m.assignment for m in d.members):
                break
            assert time.monotonic() < deadline, "three instances never shared the partitions"
            time.sleep(0.2)
        victim = next(sorted(tp.partition for tp in m.assignment) for m in d.members
                      if (m.group_instance_id or "").endswith("-i2"))
        time.sleep(5)           # state to restore
        tps = [TopicPartition(source, p) for p in victim]
        before = [tp.offset for tp in c.committed(tps)]
        killed = time.perf_counter()
        procs["i2"].kill()
        procs["i2"].wait()
        while True:
            now = [tp.offset for tp in c.committed(tps)]
            if all(a > b for a, b in zip(now, before)):
                return time.perf_counter() - killed, victim
            assert time.perf_counter() - killed < 120, "the victim's tasks never resumed"
            time.sleep(0.02)
    finally:
        stop.set()
        feeder.join()
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            proc.stdout.close()
        c.close()
        admin.close()


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="changelog records")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    p.add_argument("--tail", type=int, default=20_000,
                   help="changelog records written after the checkpoint")
    p.add_argument("--workers", type=int, default=2)
    common.add_dirs(p)
    common.add_quick(p, "50,000 changelog records, 5,000 keys, a 2,000-record tail")
    args = common.parse(p, argv, quick={"records": 50_000, "keys": 5_000, "tail": 2_000})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--instance"]:
        instance_main(*argv[1:])
        return 0
    args = parse_args(argv)
    out_dir, work = report.make_dirs("streams_restore", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    say("kafkalite Streams restore benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  changelog  {args.records:,} records, {args.keys:,} keys, {PARTITIONS} partitions")
    report.say_load(info)
    res = Results()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=args.workers)
    started = time.perf_counter()
    fig = {}
    try:
        server.start()
        for kind in ("rocksdb", "in_memory"):
            app = f"restore-{kind.replace('_', '-')}"
            changelog = f"{app}-counts-changelog"
            admin_create(server, {f"{app}-in": PARTITIONS, f"{app}-out": PARTITIONS,
                                  changelog: PARTITIONS}, compact=(changelog,))
            fill_changelog(server, changelog, args.records, args.keys)
            fig[("plain", kind)] = plain_read(server, changelog)
            n, secs = timed_restore(server, work, app, "state", kind)
            assert n == args.records, (n, args.records)
            fig[("full", kind)] = (n, secs)
            say(f"  {kind}: restored {n:,} in {secs:.2f} s = {n / secs:,.0f} records/s; "
                f"plain read {fig[('plain', kind)]:,.0f} records/s")
            if kind == "rocksdb":
                fill_changelog(server, changelog, args.tail, args.keys)
                n, secs = timed_restore(server, work, app, "state", kind)
                fig["tail"] = (n, secs)
                say(f"  rocksdb from its checkpoint: restored {n:,} in {secs:.2f} s")
        fig["resume"], victim = resume_after_kill(server, work, args.keys)
        say(f"  resume after kill -9 of 1 of 3 instances (partitions {victim}): "
            f"{fig['resume']:.2f} s; session.timeout.ms {SESSION_MS / 1000:.1f} s")
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    for n, kind in enumerate(("rocksdb", "in_memory"), 1):
        base = f"plain_read_{kind}"
        res.add(base, n, "plain consume of the changelog (ceiling)", fig[("plain", kind)],
                "records/s")
        count, secs = fig[("full", kind)]
        res.add(f"restore_{kind}", n, f"restore rate, {kind} store", count / secs, "records/s",
                baseline_key=base)
    full_n, full_s = fig[("full", "rocksdb")]
    tail_n, tail_s = fig["tail"]
    res.add("restore_full_seconds", 3, f"full restore, {full_n:,} records", full_s, "s")
    res.add("restore_tail_seconds", 3, f"restore from checkpoint, {tail_n:,} records", tail_s,
            "s", baseline_key="restore_full_seconds")
    res.add("session_timeout", 4, "session.timeout.ms (floor)", SESSION_MS / 1000, "s")
    res.add("resume_after_kill", 4, "resume after kill -9 of 1 of 3 instances", fig["resume"],
            "s", baseline_key="session_timeout")
    report.write_tables(out_dir, "kafkalite Streams restore", res, HEADERS, elapsed=elapsed,
                        info=info, settings=vars(args),
                        units={"records/s": "changelog records per second", "s": "seconds"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
