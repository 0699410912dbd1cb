"""What kafkalite Streams processes, beside quixstreams on the same broker and input.

    python benchmarks/bench_streams.py                     # 1,000,000 records, a few minutes
    python benchmarks/bench_streams.py --quick             # what a smoke run needs
    python benchmarks/bench_streams.py --records 10000000  # the issue's size
    python benchmarks/bench_streams.py --records 10000000 --kinds stateful \
        --guarantees exactly_once_v2 --impls columnar,quix  # one figure and its peer

One input topic of ``--records`` records (100-byte values, ``--keys``
distinct keys, 4 partitions), written once; each figure is one application
(its own application.id / consumer group) reading it from the beginning
with one instance, timed from start until it has processed the input and
closed (group join, restore of empty stores and the last commit included),
in records of input per second:

1. stateless: filter (about half the records) + map_values (the first 50
   bytes) to an output topic;
2. stateful: a count per key (RocksDB store with its changelog) to an
   output topic;

3. join: each record joined with a table of ``--keys`` 20-byte values (read
   from a compacted-style topic, one record per key, in the same run) into
   the first 50 bytes + the table's value: kafkalite only (quixstreams has no
   stream-table join to compare with);

each under at_least_once and exactly_once_v2, for kafkalite Streams
columnar (pyarrow.compute expressions; the count is columnar anyway),
kafkalite Streams per record (Python lambdas; the count as
``aggregate(lambda: 0, lambda k, v, a: a + 1)``) and quixstreams (through
the Kafka listener, its default RocksDB state, ``app.run(count=...)`` over
the first ``--quix-records`` records of the same topic: it is about 100x
slower, and the rate is what is compared).
Targets (issue 20): columnar >= 20x quixstreams on the stateful count,
per record >= 2x.

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback

import numpy as np

import report
from report import Results, say

from kafkalite.server import launcher

HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]
PARTITIONS = 4
GUARANTEES = {"at_least_once": "at-least-once", "exactly_once_v2": "exactly-once"}
KINDS = ("stateless", "stateful", "join")


def create_topic(server, name: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        admin.create_topics([NewTopic(name, PARTITIONS)])[name].result()
    finally:
        admin.close()


def fill(server, topic: str, records: int, keys: int) -> None:
    """``records`` 100-byte values over ``keys`` keys, produce_batch of 10,000."""
    from kafkalite.client import Producer
    rng = np.random.default_rng(20)
    p = Producer({"bootstrap.servers": server.bootstrap})
    key_names = [b"key-%08d" % i for i in range(keys)]
    step = 10_000
    for start in range(0, records, step):
        n = min(step, records - start)
        values = rng.integers(ord("a"), ord("z") + 1, size=(n, 100), dtype=np.uint8)
        idx = rng.integers(0, keys, size=n)
        p.produce_batch(topic, values, [key_names[i] for i in idx])
    assert p.flush(300) == 0
    p.close()


def fill_table(server, topic: str, keys: int) -> None:
    """One 20-byte value per key (the join's table)."""
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap})
    for start in range(0, keys, 10_000):
        n = min(10_000, keys - start)
        p.produce_batch(topic, [b"user-%015d" % i for i in range(start, start + n)],
                        [b"key-%08d" % i for i in range(start, start + n)])
    assert p.flush(300) == 0
    p.close()


def kafkalite_topology(kind: str, columnar: bool, source: str, sink: str):
    import pyarrow.compute as pc

    from kafkalite.streams import Materialized, Produced, Serdes, StreamsBuilder
    b = StreamsBuilder()
    s = b.stream(source)
    if kind == "join":
        table = b.table("table", materialized=Materialized.as_("table"))
        joiner = pc.binary_join_element_wise(
            pc.binary_slice(pc.field("left_value"), 0, 50), pc.field("right_value"), b"") \
            if columnar else (lambda lv, rv: lv[:50] + rv)
        s.join(table, joiner).to(sink)
    elif kind == "stateless":
        if columnar:
            s = s.filter(pc.less(pc.binary_slice(pc.field("value"), 0, 1), b"n")) \
                .map_values(pc.binary_slice(pc.field("value"), 0, 50))
        else:
            s = s.filter(lambda k, v: v[0] < 110).map_values(lambda v: v[:50])
        s.to(sink)
    else:
        g = s.group_by_key()
        table = g.count() if columnar else g.aggregate(
            lambda: 0, lambda k, v, a: a + 1, Materialized.with_(None, Serdes.long()))
        table.to_stream().to(sink, Produced.with_(Serdes.bytes(), Serdes.long()))
    return b.build()


def run_kafkalite(server, work, source, records, kind, columnar, guarantee, tag,
                  table_records=0) -> float:
    from kafkalite.streams import KafkaStreams
    sink = f"out-{tag}"
    create_topic(server, sink)
    streams = KafkaStreams(kafkalite_topology(kind, columnar, source, sink), {
        "application.id": f"bench-{tag}", "bootstrap.servers": server.bootstrap,
        "processing.guarantee": guarantee, "state.dir": os.path.join(work, f"state-{tag}"),
        "commit.interval.ms": 100 if guarantee == "exactly_once_v2" else 1000})
    start = time.perf_counter()
    streams.start()
    try:
        while streams.metrics()["processed"] < records + table_records:
            if streams.state == KafkaStreams.ERROR:
                raise RuntimeError(f"{tag}: {streams.error!r}")
            time.sleep(0.01)
    finally:
        streams.close()
    return records / (time.perf_counter() - start)


def run_quix(server, work, source, records, kind, guarantee, tag) -> float:
    from quixstreams import Application
    from quixstreams.models import TopicConfig
    app = Application(
        broker_address=server.kafka_bootstrap, consumer_group=f"bench-{tag}",
        auto_offset_reset="earliest", processing_guarantee=GUARANTEES[guarantee],
        state_dir=os.path.join(work, f"quix-{tag}"), loglevel="WARNING",
        commit_interval=0.1 if guarantee == "exactly_once_v2" else 1.0)
    sdf = app.dataframe(app.topic(source, value_deserializer="bytes",
                                  key_deserializer="bytes"))
    if kind == "stateless":
        sdf = sdf.filter(lambda v: v[0] < 110).apply(lambda v: v[:50])
    else:
        def count(value, state):
            n = state.get("count", 0) + 1
            state.set("count", n)
            return n
        sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(app.topic(f"out-{tag}", value_serializer="json" if kind != "stateless"
                           else "bytes", key_serializer="bytes",
                           config=TopicConfig(num_partitions=PARTITIONS, replication_factor=1)))
    start = time.perf_counter()
    app.run(count=records, timeout=60)
    return records / (time.perf_counter() - start)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="input records")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    p.add_argument("--quix-records", type=int, default=100_000,
                   help="records quixstreams processes (a prefix of the same input)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-quix", action="store_true", help="kafkalite figures only")
    p.add_argument("--output-dir", default=None)
    p.add_argument("--work-dir", default=None)
    p.add_argument("--quick", action="store_true",
                   help="50,000 records, 5,000 keys, quixstreams over 10,000")
    p.add_argument("--kinds", default=",".join(KINDS), help="which applications")
    p.add_argument("--guarantees", default=",".join(GUARANTEES), help="which guarantees")
    p.add_argument("--impls", default="columnar,per_record,quix",
                   help="which implementations")
    args = p.parse_args(argv)
    args.kinds = [k for k in KINDS if k in args.kinds.split(",")]
    args.guarantees = [g for g in GUARANTEES if g in args.guarantees.split(",")]
    args.impls = [i for i in ("columnar", "per_record", "quix") if i in args.impls.split(",")]
    if args.quick:
        report.apply_quick(args, argv, {"records": 50_000, "keys": 5_000,
                                        "quix_records": 10_000})
    args.quix_records = min(args.quix_records, args.records)
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("streams", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    say("kafkalite Streams benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    if not args.no_quix:
        import quixstreams
        say(f"  peer       quixstreams {quixstreams.__version__} (Kafka listener)")
    say(f"  input      {args.records:,} records of 100 bytes, {args.keys:,} keys, "
        f"{PARTITIONS} partitions")
    report.say_load(info)
    res = Results()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=args.workers)
    started = time.perf_counter()
    figures = {}
    try:
        server.start()
        create_topic(server, "input")
        t = time.perf_counter()
        fill(server, "input", args.records, args.keys)
        if "join" in args.kinds:
            create_topic(server, "table")
            fill_table(server, "table", args.keys)
        say(f"  filled the input and the table in {time.perf_counter() - t:.1f} s")
        for kind in args.kinds:
            for guarantee in args.guarantees:
                for impl in args.impls:
                    if impl == "quix" and (args.no_quix or kind == "join"):
                        continue
                    tag = f"{kind}-{guarantee}-{impl}".replace("_", "-")
                    if impl == "quix":
                        rate = run_quix(server, work, "input", args.quix_records, kind,
                                        guarantee, tag)
                    else:
                        rate = run_kafkalite(server, work, "input", args.records, kind,
                                             impl == "columnar", guarantee, tag,
                                             args.keys if kind == "join" else 0)
                    figures[(kind, guarantee, impl)] = rate
                    say(f"  {tag}: {rate:,.0f} records/s")
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    labels = {"stateless": "filter + map_values", "stateful": "count per key",
              "join": "stream-table join"}
    impl_labels = {"columnar": "kafkalite columnar", "per_record": "kafkalite per record"}
    targets = {("stateful", "columnar"): 20, ("stateful", "per_record"): 2}
    for n, kind in enumerate(args.kinds, 1):
        for guarantee in args.guarantees:
            base = None
            if (kind, guarantee, "quix") in figures:
                base = f"{kind}_{guarantee}_quix"
                res.add(base, n, f"quixstreams, {labels[kind]}, {guarantee}",
                        figures[(kind, guarantee, "quix")], "records/s")
            for impl in ("columnar", "per_record"):
                if (kind, guarantee, impl) not in figures:
                    continue
                value = figures[(kind, guarantee, impl)]
                want = targets.get((kind, impl))
                meets = None
                if want and base:
                    meets = value / figures[(kind, guarantee, "quix")] >= want
                res.add(f"{kind}_{guarantee}_{impl}", n,
                        f"{impl_labels[impl]}, {labels[kind]}, {guarantee}", value,
                        "records/s", baseline_key=base,
                        target_text=f">= {want}x quixstreams" if want else "", meets=meets)
    rows = report.table_rows(res)
    say()
    say(report.text_table(rows, HEADERS))
    report.say_targets_met(res.targets_met())
    report.say_targets_informational()
    doc = report.results_doc("kafkalite streams", elapsed, info, vars(args),
                             {"records/s": "input records per second"}, {}, res)
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite Streams\n\n")
        f.write(report.markdown_table(rows, HEADERS))
    say(f"results in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
