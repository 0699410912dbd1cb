#!/usr/bin/env python
"""Spark connector benchmark: a kafkalite topic as a DataFrame, next to the
ceiling of Spark's Python data source API, the same records in a Parquet
file and a naive per-record source, in one warm SparkSession (local[2]) and
one run.

    python benchmarks/bench_spark.py                     # 10M records of 100 bytes, 4 partitions
    python benchmarks/bench_spark.py --records 2000000   # smaller
    python benchmarks/bench_spark.py --quick             # seconds of work; the smoke test

What is measured (rows/s: wall time of the Spark action):

1. ``count()``, ``groupBy("key").count()`` and a full scan
   (``count(value), sum(length(value))``, which reads every value) through
   three sources, side by side: ``--rounds`` rounds, the order of the
   sources rotating, the median of each reported with every run:
   - the ``kafkalite`` source (Arrow batches decoded in Cython, kafkalite_spark);
   - the ceiling: a Python data source yielding ready-made Arrow batches of
     the same rows (the batches the kafkalite source yields, memory-mapped
     from Arrow IPC files): what any source behind Spark's Python data
     source API can reach; target: kafkalite at 0.95x of it;
   - the same records in a Parquet file written with pyarrow (Spark's
     native reader; it answers ``count()`` from row-group metadata).
   Beside rows/s, the CPU time a row cost the Spark JVM with its Python
   workers plus the kafkalite server (/proc): on a machine other work loads,
   wall time swings, the CPU a row costs much less; the ceiling's CPU a row
   over kafkalite's is the rows/s ratio a CPU-bound, otherwise idle machine
   would show.
   - ``history``: kafkalite_spark.read_with_history, the same records with
     all but the last ``--history-tail-pct`` percent of each partition in an
     Iceberg copy made by the Connect Iceberg sink (record format ``kafka``,
     an in-process worker, SQLite catalog): Spark's Parquet reader for the
     copy, the tail read on the driver (``history_source``: the same with
     the tail through the kafkalite source, ``driver_read_max_bytes=0``,
     the way before the driver read); target: 0.5x Parquet. The
     sink's copying speed (rows/s, the first record to the table's offsets
     reaching the end) is reported too. ``--history-tail-pct -1`` skips it.
1b. The kafkalite source with a user schema of only the columns the query needs.
1c. Filter pushdown: ``count()`` of the last 1% of each partition's offsets
   (``offset >= ...``, pushed into the planned ranges) against the ceiling
   source with the same filter (Spark reads every row and filters).
3. The same queries through a naive Python data source that makes one Python
   tuple per record (Consumer.consume + tuples), what a connector without the
   Arrow path does (``--naive-records`` of them, one round).
5. The ``kafkalite`` sink writing a cached DataFrame (``--sink-records`` rows
   of ``--value-bytes``, as many Spark partitions as topic partitions) to a
   topic: the default at-least-once sink against ``exactlyOnce=true`` (a
   transaction per task, committed by the driver), alternating, the median
   of ``--sink-repeats`` runs each (on a loaded machine single runs swing by
   2x); and the wall time of a 1,000-row write in
   each mode, the fixed cost a small micro-batch pays. The exactly-once
   output is then counted through a read_committed read.

Targets (informational, as every benchmark here): kafkalite at least 0.95x
the ceiling, 50% of Parquet's rows/s, and at least 3x the naive source. The
exit status is 0 whenever the run completed.
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

import common  # noqa: E402
import report  # noqa: E402
from report import Results, human_bytes, say  # noqa: E402

TOPIC = "bench-spark"
TARGET_VS_PARQUET = 0.5
TARGET_VS_CEILING = 0.95
TARGET_VS_NAIVE = 3.0
HEADERS = ["#", "Figure", "kafkalite", "Baseline / peer", "vs base", "Target", "Met"]
QUICK = {"records": 40_000, "keys": 100, "naive_records": 40_000, "sink_records": 40_000,
         "rounds": 1, "sink_repeats": 1}
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


# ---- the ceiling: ready-made Arrow batches ------------------------------------------------

def ceiling_source_class():
    """A Python data source doing the least a Python source can: it yields
    the batches the kafkalite source would yield (the same rows, in Spark's
    Kafka schema), already made, memory-mapped from Arrow IPC files. Spark's
    cost of taking Arrow batches from Python is all it measures: the ceiling
    of any source behind Spark's Python data source API."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class CeilingReader(DataSourceReader):
        def __init__(self, options):
            self.dir = options["dir"]
            self.partitions_ = int(options["partitions"])

        def partitions(self):
            return [InputPartition(p) for p in range(self.partitions_)]

        def read(self, partition):
            import pyarrow as pa
            f = pa.ipc.open_file(pa.memory_map(os.path.join(self.dir, f"{partition.value}.arrow")))
            for i in range(f.num_record_batches):
                yield f.get_batch(i)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls):
            return "arrow_ceiling"

        def schema(self):
            from kafkalite_spark.source import SCHEMA
            return SCHEMA

        def reader(self, schema):
            return CeilingReader(self.options)

    return CeilingSource


# ---- data ------------------------------------------------------------------------------

def fill_topic(server, args, first: int = 0, last: int | None = None) -> None:
    """``records`` records (value_bytes each, keys from a pool of ``keys``)
    spread evenly over the partitions, through Producer.produce_batch; only
    those of each partition's [first, last) when given (the topic is
    created with the first)."""
    from kafkalite.client import AdminClient, NewTopic, Producer
    if first == 0:
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
    last = per if last is None else last
    prog = report.Progress("produce", (last - first) * args.partitions * args.value_bytes)
    done = 0
    for part in range(args.partitions):
        for start in range(first, last, PRODUCE_CHUNK):
            n = min(PRODUCE_CHUNK, last - start)
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


def write_copies(server, args, path: str, ceiling_dir: str) -> int:
    """The topic as the native consumer reads it, in Spark's Kafka schema:
    to one Parquet file (pyarrow defaults: snappy, 1M-row row groups) and,
    for the ceiling source, to one Arrow IPC file per partition holding the
    batches exactly as the consumer handed them (what the kafkalite source
    yields, ready-made)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kafkalite.client import Consumer, TopicPartition
    from kafkalite_spark.source import ARROW_SCHEMA, to_spark
    per = args.records // args.partitions
    rows = 0
    os.makedirs(ceiling_dir, exist_ok=True)
    with pq.ParquetWriter(path, ARROW_SCHEMA) as w:
        for part in range(args.partitions):
            c = Consumer({"bootstrap.servers": server.bootstrap,
                          "max.partition.fetch.bytes": 16 << 20})
            got = 0
            try:
                c.assign([TopicPartition(TOPIC, part, 0)])
                with pa.ipc.new_file(os.path.join(ceiling_dir, f"{part}.arrow"),
                                     ARROW_SCHEMA) as ipc:
                    deadline = time.monotonic() + 600
                    while got < per and time.monotonic() < deadline:
                        b = c.consume_batch(1.0)
                        if b.num_rows:
                            b = to_spark(b)
                            w.write_batch(b, row_group_size=1 << 20)
                            ipc.write_batch(b)
                            got += b.num_rows
            finally:
                c.close()
            rows += got
    return rows


ICEBERG_TABLE = "bench.records"


def copy_to_iceberg(server, args, work: str, copied: int) -> dict:
    """The topic's first ``copied`` records of each partition copied to an
    Iceberg table by the Connect Iceberg sink (record format ``kafka``) in
    an in-process worker; the worker is stopped once the table's offsets
    reach them. The catalog's properties, and the sink's rows/s."""
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.connectors.iceberg import sql_catalog, table_offsets
    from kafkalite.connect.offsets import FileOffsetStore
    from pyiceberg.exceptions import NoSuchTableError
    catalog = {"uri": f"sqlite:///{work}/catalog.db", "warehouse": f"file://{work}/warehouse"}
    cat = sql_catalog("kafkalite", **catalog)
    want = {(TOPIC, p): copied for p in range(args.partitions)}
    # the sink commits on the worker's offset flush: --quick's few records
    # would wait most of a 5 s interval for it
    worker = Worker({"bootstrap.servers": server.bootstrap,
                     "offset.flush.interval.ms": 500 if args.quick else 5000,
                     "consumer.max.poll.records": 10_000},
                    FileOffsetStore(os.path.join(work, "connect-offsets.json")))
    worker.start()
    herder = Herder(worker)
    bytes_converter = "org.apache.kafka.connect.converters.ByteArrayConverter"
    prog = report.Progress("iceberg copy", copied * args.partitions * args.value_bytes)
    try:
        start = time.perf_counter()
        herder.put_connector_config("copy", {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": TOPIC, "iceberg.tables": ICEBERG_TABLE,
            "iceberg.catalog.uri": catalog["uri"],
            "iceberg.catalog.warehouse": catalog["warehouse"],
            "iceberg.tables.record-format": "kafka", "key.converter": bytes_converter,
            "value.converter": bytes_converter, "flush.size": str(args.history_flush_size)},
            False)
        while True:
            try:
                have = table_offsets(cat.load_table(ICEBERG_TABLE), "connect-copy")
            except NoSuchTableError:
                have = {}
            prog.update(sum(have.values()) * args.value_bytes)
            if have == want:
                break
            if any(v > copied for v in have.values()):
                raise RuntimeError(f"the sink copied past {copied}: {have}")
            st = herder.status("copy")
            if any(t["state"] == "FAILED" for t in st["tasks"]):
                raise RuntimeError(st["tasks"][0]["trace"])
            time.sleep(0.2)
        dt = time.perf_counter() - start
        prog.finish(copied * args.partitions * args.value_bytes)
    finally:
        herder.stop()
        worker.stop()
    return {"catalog": catalog, "rows_per_s": copied * args.partitions / dt, "seconds": dt}


# ---- measuring ---------------------------------------------------------------------------

def measure(label: str, action) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = action()
    dt = time.perf_counter() - t0
    say(f"  {label:<44} {dt:8.2f} s")
    return dt, out


QUERIES = (("count", "count()"), ("group", "groupBy(key).count()"),
           ("scan", "scan sum(length(value))"))


def run_query(op: str, df, n: int) -> None:
    """Runs query ``op`` on ``df`` and checks its answer over ``n`` records."""
    if op == "count":
        got = df.count()
    elif op == "group":
        got = sum(r["count"] for r in df.groupBy("key").count().collect())
    else:
        got = df.selectExpr("count(value) AS n", "sum(length(value)) AS s").collect()[0]["n"]
    if got != n:
        raise RuntimeError(f"{op} read {got} records, not {n}")


def tree_cpu(root: int) -> float:
    """CPU seconds used so far by process ``root`` and every process under
    it (live ones, plus the children they reaped): Linux /proc. A child is
    listed under the thread that started it: the JVM starts its Python
    workers' daemon from a thread other than its main one."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            tids = os.listdir(f"/proc/{pid}/task")
        except (FileNotFoundError, ProcessLookupError):
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
            except (FileNotFoundError, ProcessLookupError):
                pass   # a thread that ended meanwhile
        total += sum(int(x) for x in fields[11:15]) / tick   # utime stime cutime cstime
    return total


def run_side_by_side(sources: dict, rounds: int, res: Results, test, cpu_roots=()) -> None:
    """Each query on every source (name -> (make_df, records)), ``rounds``
    times, the sources' order rotating from round to round so that each sees
    the same machine; the median rows/s of each goes into ``res``, and the
    median CPU time a row cost in ``cpu_roots`` (the Spark JVM with its
    Python workers, the kafkalite server): on a machine others load, what a
    source costs shows there better than in wall time."""
    names = list(sources)
    for op, title in QUERIES:
        runs: dict[str, list] = {name: [] for name in names}
        cpu: dict[str, list] = {name: [] for name in names}
        for i in range(rounds):
            for name in names[i % len(names):] + names[:i % len(names)]:
                make_df, n = sources[name]
                before = sum(tree_cpu(r) for r in cpu_roots)
                dt, _ = measure(f"{name}: {title}, round {i + 1}",
                                lambda: run_query(op, make_df(), n))
                runs[name].append(n / dt)
                cpu[name].append((sum(tree_cpu(r) for r in cpu_roots) - before) / n * 1e9)
        for name in names:
            res.add(f"{name}_{op}", test, f"{name}: {title}", median(runs[name]), "records/s",
                    runs=runs[name])
        if cpu_roots:
            for name in names:
                res.add(f"{name}_{op}_cpu", test, f"{name}: {title}, CPU a row",
                        median(cpu[name]), "ns", runs=cpu[name])


RATIOS = (("ceiling", TARGET_VS_CEILING), ("parquet", TARGET_VS_PARQUET),
          ("naive", TARGET_VS_NAIVE))


def add_ratios(res: Results, prefix: str = "kafkalite", test=4, ratios=RATIOS) -> None:
    for op, _ in QUERIES:
        for peer, target in ratios:
            a, b = res.get(f"{prefix}_{op}"), res.get(f"{peer}_{op}")
            if a and b:
                res.add(f"{prefix}_vs_{peer}_{op}", test, f"{prefix} / {peer}: {op}", a / b,
                        "ratio", target=target, target_text=f">= {target:g}x",
                        meets=a / b >= target)
        # the rows/s ratio a machine with no other work would give, CPU-bound
        a, b = res.get(f"{prefix}_{op}_cpu"), res.get(f"ceiling_{op}_cpu")
        if a and b:
            res.add(f"{prefix}_vs_ceiling_{op}_by_cpu", test,
                    f"{prefix} / ceiling: {op}, by CPU a row", b / a, "ratio")


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
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    for ax, (op, title) in zip(axes, QUERIES):
        rows = [("Parquet", res.get(f"parquet_{op}"), "#999999"),
                ("ceiling", res.get(f"ceiling_{op}"), "#2ca02c"),
                ("kafkalite", res.get(f"kafkalite_{op}"), "#1f77b4"),
                ("naive tuples", res.get(f"naive_{op}"), "#ff7f0e"),
                ("history", res.get(f"history_{op}"), "#9467bd"),
                ("history,\ntail by source", res.get(f"history_source_{op}"), "#c5b0d5")]
        rows = [r for r in rows if r[1]]
        vals = [r[1] / 1e6 for r in rows]
        bars = ax.bar(range(len(rows)), vals, color=[r[2] for r in rows])
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r[0] for r in rows])
        ax.set_title(f"{title} (M rows/s)", fontsize=10)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:.2f}", (b.get_x() + b.get_width() / 2, v), ha="center",
                        va="bottom", fontsize=8)
        if res.get(f"ceiling_{op}"):
            ax.axhline(TARGET_VS_CEILING * res.get(f"ceiling_{op}") / 1e6, color="green",
                       linestyle=":", linewidth=1, label="95% of the ceiling")
        if res.get(f"parquet_{op}"):
            ax.axhline(TARGET_VS_PARQUET * res.get(f"parquet_{op}") / 1e6, color="red",
                       linestyle="--", linewidth=1, label="50% of Parquet")
        if res.get(f"ceiling_{op}") or res.get(f"parquet_{op}"):
            ax.legend(fontsize=8)
        ax.set_ylim(0, max(vals) * 1.25 if vals else 1)
    fig.suptitle(f"kafkalite Spark source, {args.records:,} records of {args.value_bytes} bytes "
                 f"over {args.partitions} partitions, local[2]")
    report.save_figure(plt, fig, path)
    return True


# ---- main ------------------------------------------------------------------------------

EPILOG = """\
the source against the ceiling alone (issue 71's target, kafkalite at 0.95x
of the ceiling on count, groupBy and scan; on a quiet machine, three rounds):
  python benchmarks/bench_spark.py --rounds 3 --naive-records 0 \\
      --sink-repeats 0 --history-tail-pct -1
  then read the 'kafkalite / ceiling' rows (by rows/s and by CPU a row) of
  the table, or results.json; check the load average it prints at the start
  and the end (uptime): on a loaded machine the rows/s ratios swing by +-0.2
"""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults in the options' help, the epilog's lines as written."""

def parse_args(argv):
    p = argparse.ArgumentParser(description="kafkalite Spark connector benchmark",
                                epilog=EPILOG, formatter_class=_HelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000, help="records in the topic")
    p.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    common.add_rounds(p, 3, help="rounds of the side-by-side queries (test 1), the sources' "
                                 "order rotating from round to round (kafkalite, ceiling, "
                                 "parquet; then ceiling, parquet, kafkalite; ...); medians "
                                 "are reported")
    p.add_argument("--naive-records", type=int, default=1_000_000,
                   help="records the naive source reads (its rows/s is what counts, so a "
                        "smaller share keeps the run short; 0 skips it)")
    p.add_argument("--sink-records", type=int, default=2_000_000,
                   help="rows each sink run writes (test 5)")
    p.add_argument("--sink-repeats", type=int, default=3,
                   help="runs of each sink mode, alternating; the median is reported "
                        "(0 skips test 5)")
    p.add_argument("--history-tail-pct", type=float, default=1.0,
                   help="percent of each partition's records left out of the Iceberg copy "
                        "that read_with_history reads (-1 skips the history read)")
    p.add_argument("--history-flush-size", type=int, default=500_000,
                   help="the Iceberg sink's flush.size (records a table commit holds at most)")
    common.add_quick(p, "tiny sizes and no warm-up: shows that every step runs (the smoke "
                     "test); no figure to quote")
    p.add_argument("--work-dir", default=None, help="parent of the temporary data directory")
    p.add_argument("--output-dir", default=None,
                   help="where results go (default benchmarks/results/spark-<timestamp>)")
    args = common.parse(p, argv, quick=QUICK)
    if args.records < args.partitions or args.partitions < 1:
        p.error("need --records >= --partitions >= 1")
    args.records -= args.records % args.partitions
    args.naive_records = min(args.naive_records, args.records)
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
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        print(f"bench_spark: {exc}", file=sys.stderr)
        return 2
    from kafkalite.launcher import ServerProcess

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
    own_session = False
    started = time.perf_counter()
    try:
        server = ServerProcess(os.path.join(work, "data"), workers=2).start()
        per = args.records // args.partitions
        history = None
        if args.history_tail_pct >= 0:
            copied = per - int(per * args.history_tail_pct / 100)
            fill_topic(server, args, 0, copied)
            say(f"Iceberg copy of {copied:,} records a partition (Connect Iceberg sink, "
                f"record format kafka)")
            history = copy_to_iceberg(server, args, work, copied)
            say(f"  {history['seconds']:.1f} s, {history['rows_per_s'] / 1e3:.0f} k rows/s")
            res.add("iceberg_sink_kafka_format", 0, "Iceberg sink (kafka format): copy",
                    history["rows_per_s"], "records/s")
            if copied < per:
                fill_topic(server, args, copied, per)
        else:
            fill_topic(server, args)
        parquet = os.path.join(work, "records.parquet")
        rows = write_copies(server, args, parquet, os.path.join(work, "ceiling"))
        if rows != args.records:
            raise RuntimeError(f"the consumer read {rows} records, not {args.records}")
        say(f"  parquet file {human_bytes(os.path.getsize(parquet))}")
        spark, own_session = common.spark_session("kafkalite-bench")
        kafkalite_spark.register(spark)
        spark.dataSource.register(naive_source_class())
        spark.dataSource.register(ceiling_source_class())
        naive_per = args.naive_records // args.partitions

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

        ceiling_dir = os.path.join(work, "ceiling")

        def ceiling_df():
            return (spark.read.format("arrow_ceiling").option("dir", ceiling_dir)
                    .option("partitions", args.partitions).load())

        def history_df(**extra):
            return kafkalite_spark.read_with_history(
                spark, ICEBERG_TABLE, history["catalog"], connector="copy", subscribe=TOPIC,
                **extra,
                **{"kafkalite.bootstrap.servers": server.bootstrap})

        # warm-up: JVM, Python workers and code paths of every source, small ranges.
        # --quick's figures show only that every step runs (the smoke test), and
        # its warm-up was a quarter of the run
        if args.quick:
            say("warm-up skipped (--quick: the figures only show that every step runs)")
        else:
            say("warm-up")
            warm = min(per, 20_000)
            kafkalite_df(warm).groupBy("key").count().collect()
            if args.naive_records:
                naive_df(min(warm, naive_per)).groupBy("key").count().collect()
            spark.read.parquet(parquet).groupBy("key").count().collect()
            ceiling_df().count()
            if history is not None:
                history_df().groupBy("key").count().collect()
                history_df(driver_read_max_bytes=0).groupBy("key").count().collect()
        say()
        say(f"[1] kafkalite source, the ceiling source and Parquet, side by side, "
            f"{args.rounds} rounds")
        sources = {"kafkalite": (kafkalite_df, args.records),
                   "ceiling": (ceiling_df, args.records),
                   "parquet": (lambda: spark.read.parquet(parquet), args.records)}
        if history is not None:
            sources["history"] = (history_df, args.records)
            sources["history_source"] = (lambda: history_df(driver_read_max_bytes=0),
                                         args.records)
        run_side_by_side(sources, args.rounds, res, 1,
                         cpu_roots=(spark.sparkContext._gateway.proc.pid, server.proc.pid))
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
        say("[1c] filter pushdown: count() of the last 1% of every partition's offsets")
        tail = per - max(per // 100, 1)
        for name, make_df in (("kafkalite", kafkalite_df), ("ceiling", ceiling_df)):
            dt, got = measure(f"{name}: count() where offset >= {tail:,}",
                              lambda: make_df().where(f"offset >= {tail}").count())
            if got != (per - tail) * args.partitions:
                raise RuntimeError(f"{name}: the offset filter kept {got} rows")
            res.add(f"{name}_pushdown_count", "1c",
                    f"{name}: count() where offset >= {tail:,} (1%)", dt * 1000, "ms")
        res.figures["kafkalite_pushdown_count"]["baseline"] = "ceiling_pushdown_count"
        if args.naive_records:
            say("[3] naive source (one Python tuple per record), one round")
            run_side_by_side({"naive": (lambda: naive_df(naive_per), args.naive_records)}, 1,
                             res, 3)
        add_ratios(res)
        if history is not None:
            add_ratios(res, prefix="history", ratios=(("parquet", TARGET_VS_PARQUET),))
            add_ratios(res, prefix="history_source", ratios=(("parquet", TARGET_VS_PARQUET),))
        if args.sink_repeats:
            say("[5] kafkalite sink: at-least-once and exactlyOnce")
            run_sink(spark, server, args, res)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception:
        traceback.print_exc()
        return 1
    finally:
        if own_session:
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
               "ms": "milliseconds of wall time",
               "ns": "CPU nanoseconds a row: the Spark JVM with its Python workers and the "
                     "kafkalite server"},
        targets={"kafkalite_vs_ceiling": TARGET_VS_CEILING,
                 "kafkalite_vs_parquet": TARGET_VS_PARQUET, "kafkalite_vs_naive": TARGET_VS_NAIVE},
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
                f"one warm session\n")
        f.write("- Spark answers a Parquet count() from row-group metadata; the scan rows "
                "(count(value), sum(length(value))) compare full reads\n")
        f.write(f"- test 1: {args.rounds} rounds, the sources' order rotating, medians (every "
                f"run in results.json); the ceiling is a Python data source yielding the "
                f"kafkalite source's Arrow batches ready-made; 'CPU a row' is the CPU time of "
                f"the Spark JVM with its Python workers plus the kafkalite server\n")
        if args.sink_repeats:
            f.write(f"- sink: {args.sink_records:,} cached rows per write, {args.partitions} "
                    f"tasks, median of {args.sink_repeats} alternating runs per mode\n")
        f.write("\n" + report.markdown_table(rows, HEADERS) + "\n")
    report.finish(out_dir, lambda png: plot(res, png, args), elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
