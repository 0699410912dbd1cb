#!/usr/bin/env python
"""Example Spark job: events per key over event-time windows, topic to topic.

    python spark/windowed_counts.py            # starts a kafkalite server, fills 'clicks', runs
    python spark/windowed_counts.py --stream   # the same as a streaming query (available-now)
    python spark/windowed_counts.py --bootstrap 127.0.0.1:9092   # against a running server

Reads the topic ``clicks`` (key: user, record timestamp: event time), counts
the clicks of every user in 1-minute tumbling windows of event time, and
writes one record per (user, window) to ``click-counts``: key = user, value
= JSON ``{"user", "window_start", "window_end", "clicks"}``. Without
--bootstrap it runs its own server in a temporary directory (kafkalite's
launcher, as the tests do) and generates the clicks; at the end it prints
what landed in ``click-counts``, read back with the native consumer.
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)           # kafkalite_spark, also when kafkalite is not installed
try:
    import kafkalite_spark
    from pyspark.sql import SparkSession, functions as F
except ModuleNotFoundError as exc:
    if exc.name != "pyspark":
        raise
    sys.exit(f"windowed_counts.py: {exc}")   # the extra to install, in one line

SOURCE, SINK = "clicks", "click-counts"
WINDOW = "1 minute"
T0_MS = 1_700_000_000_000    # 2023-11-14 22:13:20 UTC


def fill(bootstrap: str, users: int, clicks: int) -> None:
    """Create both topics and write ``clicks`` clicks spread over 5 minutes."""
    from kafkalite.client import AdminClient, NewTopic, Producer
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(SOURCE, 2), NewTopic(SINK, 1)]).values():
        f.result()
    admin.close()
    rng = random.Random(7)
    p = Producer({"bootstrap.servers": bootstrap})
    for _ in range(clicks):
        user = b"user-%d" % rng.randrange(users)
        p.produce(SOURCE, b'{"page": "/home"}', user, timestamp=T0_MS + rng.randrange(300_000))
    if p.flush(30):
        raise RuntimeError("not every click was delivered")
    p.close()


def counts(clicks):
    """Clicks per user per 1-minute event-time window, as sink rows (key, value)."""
    return (clicks.select(F.col("key").cast("string").alias("user"), "timestamp")
            .groupBy(F.window("timestamp", WINDOW), "user").count()
            .select(F.col("user").alias("key"),
                    F.to_json(F.struct("user",
                                       F.col("window.start").alias("window_start"),
                                       F.col("window.end").alias("window_end"),
                                       F.col("count").alias("clicks"))).alias("value")))


def run(spark, bootstrap: str, stream: bool, checkpoint: str) -> None:
    if not stream:
        clicks = (spark.read.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
                  .option("subscribe", SOURCE).load())
        (counts(clicks).write.format("kafkalite").mode("append")
         .option("kafkalite.bootstrap.servers", bootstrap).option("topic", SINK).save())
        return
    clicks = (spark.readStream.format("kafkalite").option("kafkalite.bootstrap.servers", bootstrap)
              .option("subscribe", SOURCE).option("startingOffsets", "earliest").load())
    # A streaming sink of a Python data source takes appends only: a window is
    # written once the watermark (latest event time - 30 s) has passed its end,
    # so the newest window waits for later clicks.
    query = (counts(clicks.withWatermark("timestamp", "30 seconds")).writeStream
             .format("kafkalite").outputMode("append")
             .option("kafkalite.bootstrap.servers", bootstrap).option("topic", SINK)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


def show(bootstrap: str, limit: int) -> int:
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap})
    try:
        c.assign([TopicPartition(SINK, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 10
        while time.monotonic() < deadline:
            batch = c.consume(10_000, 0.5)
            if not batch and got:
                break
            got += batch
    finally:
        c.close()
    for m in sorted(got, key=lambda m: m.value())[:limit]:
        print(f"  {m.key().decode():<8} {m.value().decode()}")
    print(f"{len(got)} records in {SINK!r}")
    return len(got)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", help="a running server's bootstrap endpoint (default: start "
                                        "one and generate the clicks)")
    ap.add_argument("--stream", action="store_true", help="run as a streaming query")
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--clicks", type=int, default=5_000)
    args = ap.parse_args(argv)
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        sys.exit("windowed_counts.py: Spark needs a Java runtime (17+) on PATH or in JAVA_HOME; "
                 "tools/install-system-deps installs one")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")])

    work = tempfile.mkdtemp(prefix="kafkalite-windowed-counts-")
    server = None
    if args.bootstrap is None:
        from kafkalite.launcher import ServerProcess
        server = ServerProcess(os.path.join(work, "data")).start()
        bootstrap = server.bootstrap
        fill(bootstrap, args.users, args.clicks)
        print(f"kafkalite server at {bootstrap}; {args.clicks} clicks in {SOURCE!r}")
    else:
        bootstrap = args.bootstrap
    spark = (SparkSession.builder.master("local[2]").appName("windowed-counts")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        kafkalite_spark.register(spark)
        run(spark, bootstrap, args.stream, os.path.join(work, "checkpoint"))
        show(bootstrap, 10)
    finally:
        spark.stop()
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
