#!/usr/bin/env python
"""Spark connector benchmark: a kafkalite topic as a DataFrame, next to the
same records in a Parquet file and next to a naive per-record source, in
one warm SparkSession (local[2]) and one run.

    python benchmarks/bench_spark.py                     # 10M records of 100 bytes, 4 partitions
    python benchmarks/bench_spark.py --records 2000000   # smaller
    python benchmarks/bench_spark.py --quick             # seconds of work; the smoke test

What is measured, each as rows/s of one run (wall time of the Spark action):

1. ``count()`` and ``groupBy("key").count()`` through the ``kafkalite``
   source (Arrow batches decoded in Cython, kafkalite_spark).
2. The same two queries over the same records in a Parquet file written with
   pyarrow (from what the native consumer reads, in Spark's Kafka schema).
   Spark answers a Parquet ``count()`` from the row-group metadata without
   reading a column, so the ``scan`` figure (``sum(length(value))``, which reads
   every value) is added as the like-for-like full read on both sources.
3. The same queries through a naive Python data source that makes one Python
   tuple per record (Consumer.consume + tuples), what a connector without the
   Arrow path does.
5. The ``kafkalite`` sink writing a cached DataFrame (``--sink-records`` rows
   of ``--value-bytes``, as many Spark partitions as topic partitions) to a
   topic: the default at-least-once sink against ``exactlyOnce=true`` (a
   transaction per task, committed by the driver), alternating, the median
   of ``--sink-repeats`` runs each (on a loaded machine single runs swing by
   2x); and the wall time of a 1,000-row write in
   each mode, the fixed cost a small micro-batch pays. The exactly-once
   output is then counted through a read_committed read.

Targets (informational, as every benchmark here): kafkalite at least 50% of
Parquet's rows/s, and at least 3x the naive source. The exit status is 0
whenever the run completed.
"""
from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
from statistics import median
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(REPO / "spark") not in sys.path:   # kafkalite_spark from a checkout that is not installed
    sys.path.insert(0, str(REPO / "spark"))

import report  # noqa: E402
from report import Results, human_bytes, say  # noqa: E402

TOPIC = "bench-spark"
TARGET_VS_PARQUET = 0.5
TARGET_VS_NAIVE = 3.0
HEADERS = ["#", "Figure", "kafkalite", "Baseline / peer", "vs base", "Target", "Met"]
QUICK = {"records": 40_000, "keys": 100, "naive_records": 40_000, "sink_records": 40_000,
         "sink_repeats": 1}
PRODUCE_CHUNK = 200_000
SMALL_WRITE = 1_000          # rows of the sink's small write (a small micro-batch)


# ---- the naive source: one Python tuple per record ---------------------------------------

def naive_source_class():
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class NaiveReader(DataSourceReader):
        def __init__(self, options):
            self.bootstrap = options["bootstrap"]
            self.ends = [int(x) for x in options["ends"].split(",")]

        def partitions(self):
            return [InputPartition((p, end)) for p, end in enumerate(self.ends)]

        def read(self, partition):
            from kafkalite.client import Consumer, TopicPartition
            p, end = partition.value
            c = Consumer({"bootstrap.servers": self.bootstrap})
            utc = datetime.timezone.utc
            try:
                c.assign([TopicPartition(TOPIC, p, 0)])
                pos = 0
                while pos < end:
                    for m in c.consume(10_000, 5.0):
                        if m.offset() >= end:
                            pos = end
                            break
                        ts_type, ts = m.timestamp()
                        yield (m.key(), m.value(), m.topic(), m.partition(), m.offset(),
                               datetime.datetime.fromtimestamp(ts / 1000, utc), ts_type - 1)
                        pos = m.offset() + 1
            finally:
                c.close()

    class NaiveSource(DataSource):
        @classmethod
        def name(cls):
            return "kafkalite_naive"

        def schema(self):
            return ("key binary, value binary, topic string, partition int, offset long, "
                    "timestamp timestamp, timestampType int")

        def reader(self, schema):
            return NaiveReader(self.options)

    return NaiveSource


# ---- data ------------------------------------------------------------------------------

def fill_topic(server, args) -> None:
    """``records`` records (value_bytes each, keys from a pool of ``keys``)
    spread evenly over the partitions, through Producer.produce_batch."""
    from kafkalite.client import AdminClient, NewTopic, Producer
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, args.partitions)]).values():
        f.result()
    admin.close()
    rng = __import__("random").Random(42)
    # every value distinct (a 10-digit sequence number, then random bytes), so
    # Parquet cannot shrink the values column to a dictionary of a few
    tails = [bytes(rng.getrandbits(8) for _ in range(max(args.value_bytes - 10, 0)))
             for _ in range(997)]
    keys = [b"key-%06d" % k for k in range(args.keys)]
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    failed = []
    per = args.records // args.partitions
    prog = report.Progress("produce", args.records * args.value_bytes)
    done = 0
    for part in range(args.partitions):
        for start in range(0, per, PRODUCE_CHUNK):
            n = min(PRODUCE_CHUNK, per - start)
            base = part * per + start
            p.produce_batch(TOPIC, [(b"%010d" % (base + i) + tails[(base + i) % 997])
                                    [:args.value_bytes] for i in range(n)],
                            [keys[(base + i) % args.keys] for i in range(n)], partition=part,
                            on_delivery=lambda err, _: err and failed.append(err))
            done += n
            prog.update(done * args.value_bytes)
    if p.flush(600) or failed:
        raise RuntimeError(f"the producer did not deliver every record: {failed[:1]}")
    p.close()
    prog.finish(done * args.value_bytes)


def write_parquet(server, args, path: str) -> int:
    """The topic as the native consumer reads it, in Spark's Kafka schema, to
    Parquet (pyarrow defaults: snappy, 1M-row row groups)."""
    import pyarrow.parquet as pq

    from kafkalite.client import Consumer, TopicPartition
    from kafkalite_spark.source import ARROW_SCHEMA, to_spark
    per = args.records // args.partitions
    c = Consumer({"bootstrap.servers": server.bootstrap, "max.partition.fetch.bytes": 16 << 20})
    rows = 0
    try:
        c.assign([TopicPartition(TOPIC, p, 0) for p in range(args.partitions)])
        with pq.ParquetWriter(path, ARROW_SCHEMA) as w:
            deadline = time.monotonic() + 600
            while rows < per * args.partitions and time.monotonic() < deadline:
                b = c.consume_batch(1.0)
                if b.num_rows:
                    w.write_batch(to_spark(b), row_group_size=1 << 20)
                    rows += b.num_rows
    finally:
        c.close()
    return rows


# ---- measuring ---------------------------------------------------------------------------

def measure(label: str, action) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = action()
    dt = time.perf_counter() - t0
    say(f"  {label:<44} {dt:8.2f} s")
    return dt, out


def run_queries(spark, name: str, make_df, n: int, res: Results, test: int,
                base: str | None, target, target_text) -> None:
    df_count = make_df()
    dt, got = measure(f"{name}: count()", df_count.count)
    if got != n:
        raise RuntimeError(f"{name} count() = {got}, expected {n}")
    _add(res, f"{name}_count", test, f"{name}: count()", n / dt, base and f"{base}_count",
         target, target_text)
    dt, groups = measure(f"{name}: groupBy(key).count()",
                         lambda: make_df().groupBy("key").count().collect())
    if sum(r["count"] for r in groups) != n:
        raise RuntimeError(f"{name} groupBy(key).count() does not add up to {n}")
    _add(res, f"{name}_group", test, f"{name}: groupBy(key).count()", n / dt,
         base and f"{base}_group", target, target_text)
    dt, total = measure(f"{name}: scan sum(length(value))",
                        lambda: make_df().selectExpr("sum(length(value)) AS s").collect()[0]["s"])
    _add(res, f"{name}_scan", test, f"{name}: scan sum(length(value))", n / dt,
         base and f"{base}_scan", target, target_text)


def _add(res, key, test, label, value, baseline, target, target_text):
    meets = None
    if target is not None and baseline is not None and res.get(baseline):
        meets = value / res.get(baseline) >= target
    res.add(key, test, label, value, "records/s", baseline_key=baseline,
            target=target, target_text=target_text, meets=meets)


def add_ratios(res: Results) -> None:
    for op in ("count", "group", "scan"):
        for peer, target in (("parquet", TARGET_VS_PARQUET), ("naive", TARGET_VS_NAIVE)):
            a, b = res.get(f"kafkalite_{op}"), res.get(f"{peer}_{op}")
            if a and b:
                meets = a / b >= target
                res.add(f"kafkalite_vs_{peer}_{op}", 4, f"kafkalite / {peer}: {op}", a / b,
                        "ratio", target=target, target_text=f">= {target:g}x", meets=meets)


def run_sink(spark, server, args, res: Results) -> None:
    """Test 5: the same cached rows through the at-least-once and the
    exactly-once sink, alternating so that both see the same machine."""
    from kafkalite.client import AdminClient, Consumer, NewTopic, TopicPartition
    topics = {"alo": "bench-sink-alo", "eo": "bench-sink-eo"}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for f in admin.create_topics([NewTopic(t, args.partitions) for t in topics.values()]).values():
        f.result()
    admin.close()
    n = args.sink_records
    df = spark.range(n, numPartitions=args.partitions).selectExpr(
        f"CAST(id % {args.keys} AS STRING) AS key",
        f"CONCAT(LPAD(CAST(id AS STRING), 10, '0'), REPEAT('x', {max(args.value_bytes - 10, 0)}))"
        " AS value").cache()
    if df.count() != n:
        raise RuntimeError("the cached DataFrame lost rows")

    def save(mode: str, frame=df):
        w = (frame.write.format("kafkalite").mode("append")
             .option("kafkalite.bootstrap.servers", server.bootstrap)
             .option("topic", topics[mode]))
        if mode == "eo":
            w = w.option("exactlyOnce", "true")
        return w.save()

    # warm-up: the Python workers of the write path, both modes
    warm = min(n, 10_000)
    for mode in topics:
        save(mode, df.limit(warm))
    runs: dict[str, list] = {"alo": [], "eo": []}
    small: dict[str, list] = {"alo": [], "eo": []}
    tiny = spark.range(SMALL_WRITE, numPartitions=args.partitions).selectExpr(
        "CAST(id AS STRING) AS value").cache()
    tiny.count()
    for i in range(args.sink_repeats):
        for mode, label in (("alo", "at-least-once"), ("eo", "exactlyOnce")):
            dt, _ = measure(f"sink {label}, run {i + 1}", lambda: save(mode))
            runs[mode].append(n / dt)
            # what a small micro-batch pays: the fixed cost of a write job
            dt, _ = measure(f"sink {label}, {SMALL_WRITE:,} rows, run {i + 1}",
                            lambda: save(mode, tiny))
            small[mode].append(dt * 1000)
    df.unpersist()
    tiny.unpersist()
    visible = (spark.read.format("kafkalite")
               .option("kafkalite.bootstrap.servers", server.bootstrap)
               .option("subscribe", topics["eo"])
               .option("kafkalite.isolation.level", "read_committed").load().count())
    want = (n + SMALL_WRITE) * args.sink_repeats + warm
    if visible != want:
        raise RuntimeError(f"read_committed sees {visible} rows of the exactly-once writes, "
                           f"not {want}")
    # the exactly-once topic holds transactions: their commit markers take offsets
    c = Consumer({"bootstrap.servers": server.bootstrap})
    ends = sum(c.get_watermark_offsets(TopicPartition(topics["eo"], p))[1]
               for p in range(args.partitions))
    c.close()
    if ends <= visible:
        raise RuntimeError("the exactly-once writes left no commit markers")
    res.add("sink_at_least_once", 5, "sink at-least-once: write", median(runs["alo"]), "records/s",
            runs=runs["alo"])
    res.add("sink_exactly_once", 5, "sink exactlyOnce: write", median(runs["eo"]), "records/s",
            baseline_key="sink_at_least_once", runs=runs["eo"])
    res.add("sink_exactly_once_vs_at_least_once", 5, "sink exactlyOnce / at-least-once",
            median(runs["eo"]) / median(runs["alo"]), "ratio")
    res.add("sink_small_at_least_once", 5, f"sink at-least-once: {SMALL_WRITE:,}-row write",
            median(small["alo"]), "ms", runs=small["alo"])
    res.add("sink_small_exactly_once", 5, f"sink exactlyOnce: {SMALL_WRITE:,}-row write",
            median(small["eo"]), "ms", baseline_key="sink_small_at_least_once", runs=small["eo"])


# ---- plot ------------------------------------------------------------------------------

def plot(res: Results, path: str, args) -> bool:
    plt = report.pyplot()
    if plt is None:
        return False
    ops = [("count", "count()"), ("group", "groupBy(key).count()"),
           ("scan", "scan sum(length(value))")]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8))
    for ax, (op, title) in zip(axes, ops):
        rows = [("Parquet", res.get(f"parquet_{op}"), "#999999"),
                ("kafkalite", res.get(f"kafkalite_{op}"), "#1f77b4"),
                ("naive tuples", res.get(f"naive_{op}"), "#ff7f0e")]
        rows = [r for r in rows if r[1]]
        vals = [r[1] / 1e6 for r in rows]
        bars = ax.bar(range(len(rows)), vals, color=[r[2] for r in rows])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r[0] for r in rows])
        ax.set_title(f"{title} (M rows/s)", fontsize=10)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center",
                        va="bottom", fontsize=8)
        if res.get(f"parquet_{op}"):
            ax.axhline(TARGET_VS_PARQUET * res.get(f"parquet_{op}") / 1e6, color="red",
                       linestyle="--", linewidth=1, label="50% of Parquet")
            ax.legend(fontsize=8)
        ax.set_ylim(0, max(vals) * 1.25 if vals else 1)
    fig.suptitle(f"kafkalite Spark source, {args.records:,} records of {args.value_bytes} bytes "
                 f"over {args.partitions} partitions, local[2]")
    report.save_figure(plt, fig, path)
    return True


# ---- main ------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="kafkalite Spark connector benchmark",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000, help="records in the topic")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument("--naive-records", type=int, default=None,
                   help="records the naive source reads (default: all; its rows/s is what "
                        "counts, so a smaller share keeps the run short)")
    p.add_argument("--sink-records", type=int, default=2_000_000,
                   help="rows each sink run writes (test 5)")
    p.add_argument("--sink-repeats", type=int, default=3,
                   help="runs of each sink mode, alternating; the median is reported")
    p.add_argument("--quick", action="store_true", help="tiny sizes for the smoke test")
    p.add_argument("--work-dir", default=None, help="parent of the temporary data directory")
    p.add_argument("--output-dir", default=None,
                   help="where results go (default benchmarks/results/spark-<timestamp>)")
    args = p.parse_args(argv)
    if args.quick:
        report.apply_quick(args, argv, QUICK)
    if args.records < args.partitions or args.partitions < 1:
        p.error("need --records >= --partitions >= 1")
    args.records -= args.records % args.partitions
    args.naive_records = min(args.naive_records or args.records, args.records)
    args.naive_records -= args.naive_records % args.partitions
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("bench_spark: needs a Java runtime (java on PATH or JAVA_HOME)", file=sys.stderr)
        return 2
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # Spark's Python workers import kafkalite_spark from here when it is not installed
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), str(REPO / "spark"), os.environ.get("PYTHONPATH", "")])
    try:
        import kafkalite_spark        # first: without pyspark it names the extra to install
        import pyspark
        from pyspark.sql import SparkSession
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        print(f"bench_spark: {exc}", file=sys.stderr)
        return 2
    from kafkalite.server.launcher import ServerProcess

    out_dir, work = report.make_dirs("spark", args.output_dir, args.work_dir)
    info = report.machine_info(work, extra={"pyspark": pyspark.__version__})
    say("kafkalite Spark connector benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    report.say_memory(info)
    say(f"  Python     {info['python']}, pyspark {pyspark.__version__}, local[2]")
    report.say_load(info)
    say(f"  data       {args.records:,} records of {args.value_bytes} bytes, {args.partitions} "
        f"partitions, {args.keys:,} keys; naive source reads {args.naive_records:,}")
    say(f"  data dir   {work}")
    say(f"  output     {out_dir}")
    say()

    res = Results()
    server = spark = None
    started = time.perf_counter()
    try:
        server = ServerProcess(os.path.join(work, "data"), workers=2).start()
        fill_topic(server, args)
        parquet = os.path.join(work, "records.parquet")
        rows = write_parquet(server, args, parquet)
        if rows != args.records:
            raise RuntimeError(f"the consumer read {rows} records, not {args.records}")
        say(f"  parquet file {human_bytes(os.path.getsize(parquet))}")
        spark = (SparkSession.builder.master("local[2]").appName("kafkalite-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4")
                 .config("spark.driver.memory", "2g")
                 .config("spark.python.worker.reuse", "true")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        kafkalite_spark.register(spark)
        spark.dataSource.register(naive_source_class())
        per, naive_per = args.records // args.partitions, args.naive_records // args.partitions

        def kafkalite_df(end=None, schema=None):
            r = (spark.read.format("kafkalite") if schema is None else
                 spark.read.format("kafkalite").schema(schema))
            r = (r
                 .option("kafkalite.bootstrap.servers", server.bootstrap)
                 .option("subscribe", TOPIC))
            if end is not None:
                import json
                r = r.option("endingOffsets", json.dumps(
                    {TOPIC: {str(p): end for p in range(args.partitions)}}))
            return r.load()

        def naive_df(end):
            return (spark.read.format("kafkalite_naive").option("bootstrap", server.bootstrap)
                    .option("ends", ",".join([str(end)] * args.partitions)).load())

        # warm-up: JVM, Python workers and code paths of every source, small ranges
        say("warm-up")
        warm = min(per, 20_000)
        kafkalite_df(warm).groupBy("key").count().collect()
        naive_df(min(warm, naive_per)).groupBy("key").count().collect()
        spark.read.parquet(parquet).groupBy("key").count().collect()
        say()
        say("[1] kafkalite source")
        run_queries(spark, "kafkalite", kafkalite_df, args.records, res, 1, None, None, "")
        say("[1b] kafkalite source with a user schema of the columns the query needs")
        dt, got = measure("kafkalite, schema 'offset': count()",
                          lambda: kafkalite_df(schema="offset bigint").count())
        res.add("kafkalite_pruned_count", "1b", "kafkalite, schema 'offset': count()",
                args.records / dt, "records/s", baseline_key="parquet_count")
        dt, groups = measure("kafkalite, schema 'key': groupBy(key).count()",
                             lambda: kafkalite_df(schema="key binary").groupBy("key").count()
                             .collect())
        if got != args.records or sum(r["count"] for r in groups) != args.records:
            raise RuntimeError("a pruned read lost records")
        res.add("kafkalite_pruned_group", "1b", "kafkalite, schema 'key': groupBy(key).count()",
                args.records / dt, "records/s", baseline_key="parquet_group")
        say("[2] Parquet file (pyarrow-written) in the same session")
        run_queries(spark, "parquet", lambda: spark.read.parquet(parquet), args.records, res, 2,
                    None, None, "")
        say("[3] naive source (one Python tuple per record)")
        run_queries(spark, "naive", lambda: naive_df(naive_per), args.naive_records, res, 3,
                    None, None, "")
        add_ratios(res)
        say("[5] kafkalite sink: at-least-once and exactlyOnce")
        run_sink(spark, server, args, res)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        if spark is not None:
            spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    report.machine_info_at_end(info)

    rows = report.table_rows(res)
    say()
    say(report.text_table(rows, HEADERS))
    say()
    report.say_targets_met(res.targets_met())
    report.say_targets_informational()
    say("note: Spark answers a Parquet count() from row-group metadata without reading a "
        "column; the scan rows compare full reads")
    doc = report.results_doc(
        "kafkalite Spark connector", elapsed, info, dict(vars(args)),
        units={"records/s": "records (rows) per second", "ratio": "dimensionless",
               "ms": "milliseconds of wall time"},
        targets={"kafkalite_vs_parquet": TARGET_VS_PARQUET, "kafkalite_vs_naive": TARGET_VS_NAIVE},
        res=res)
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite Spark connector benchmark\n\n")
        f.write(f"- command: `{doc['command']}`\n- date: {doc['timestamp']}\n")
        f.write(f"- CPU: {info['cpu_model']}, {info['logical_cores']} logical cores; Python "
                f"{info['python']}; pyspark {pyspark.__version__}, local[2]; load average at "
                f"start {info['load_average_at_start']}\n")
        f.write(f"- {args.records:,} records of {args.value_bytes} bytes over {args.partitions} "
                f"partitions, {args.keys:,} keys; the naive source read {args.naive_records:,}; "
                f"one run each in a warm session\n")
        f.write("- Spark answers a Parquet count() from row-group metadata; the scan rows "
                "(sum(length(value))) compare full reads\n")
        f.write(f"- sink: {args.sink_records:,} cached rows per write, {args.partitions} tasks, "
                f"median of {args.sink_repeats} alternating runs per mode\n")
        f.write("\n" + report.markdown_table(rows, HEADERS) + "\n")
    report.finish(out_dir, lambda png: plot(res, png, args), elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
