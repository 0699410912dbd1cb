#!/usr/bin/env python
"""The Iceberg sink's commit lag: how long after a record is produced a
pyiceberg reader of the sink's table sees it, under a steady produce rate,
beside the worker's ``offset.flush.interval.ms`` (the commit schedule).

    python benchmarks/bench_connect_iceberg_lag.py              # 5,000 records/s, 20 s, 3 rounds
    python benchmarks/bench_connect_iceberg_lag.py --quick      # seconds: a smoke run

Each round: a fresh topic of one partition and an IcebergSinkConnector
(JsonConverter with schemas, the bench rows of connect_iceberg_formats.py,
a standalone worker in this process, ``--flush-interval-ms``), then one
producer (kafkalite's ``produce_batch``) sends ``--rate`` records/s paced
every 10 ms, ``--warmup`` s first and then ``--duration`` s measured. A
thread reads the table's current snapshot every 50 ms (its summary holds
the next offset the table has): a produce call's records are visible at
the first read whose offset covers them, and their lag is that read's
time less the call's (so it includes the producer's and the broker's
share, a few ms, and up to 50 ms of the reads' spacing). Also printed:
how long after the table the group's committed offset covers them (the
offsets a consumer-lag monitor sees), and the snapshots made.

Printed: the lag's median, p99 and max over the measured calls, each
round's load. Exit status 0 whenever the run completed.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import threading
import time

import common
from connect_iceberg_formats import encoded, rows_of
from report import say

from kafkalite import launcher

POLL_S = 0.050
PACE_S = 0.010


def parse_args(argv):
    p = common.parser(__doc__)
    p.add_argument("--rate", type=int, default=5_000, help="records/s produced")
    p.add_argument("--duration", type=float, default=20.0, help="seconds measured")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds produced first, not counted")
    p.add_argument("--flush-interval-ms", type=int, default=1000,
                   help="the worker's offset.flush.interval.ms")
    common.add_rounds(p, 3)
    common.add_quick(p, "2,000 records/s for 3 s after 1 s, 1 round: a smoke run")
    p.add_argument("--work-dir", default=None)
    return common.parse(p, argv, quick={"rate": 2_000, "duration": 3.0, "warmup": 1.0,
                                        "rounds": 1})


class Reader(threading.Thread):
    """Every POLL_S: the table's next offset (from its snapshot's summary)
    and the group's committed one, with the time each first grew."""

    def __init__(self, server, catalog, table, group, topic):
        super().__init__(daemon=True)
        self.server, self.catalog, self.table, self.group, self.topic = \
            server, catalog, table, group, topic
        self.table_seen: list[tuple[float, int]] = []
        self.group_seen: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self):
        from pyiceberg.exceptions import NoSuchTableError

        from kafkalite.client import AdminClient
        admin = AdminClient({"bootstrap.servers": self.server.bootstrap})
        key = "kafka.connect.offsets." + self.group
        try:
            while not self.stop.wait(POLL_S):
                now = time.perf_counter()
                try:
                    snap = self.catalog.load_table(self.table).current_snapshot()
                except NoSuchTableError:
                    snap = None
                if snap is not None and key in snap.summary.additional_properties:
                    off = json.loads(snap.summary.additional_properties[key])[self.topic]["0"]
                    if not self.table_seen or off > self.table_seen[-1][1]:
                        self.table_seen.append((now, off))
                got = [tp.offset for tp in admin.list_consumer_group_offsets(self.group).result()
                       if tp.topic == self.topic and tp.offset > 0]
                if got and (not self.group_seen or got[0] > self.group_seen[-1][1]):
                    self.group_seen.append((now, got[0]))
        finally:
            admin.close()


def lags(calls, seen) -> list[float]:
    """Each measured call's lag: the first read covering its last offset."""
    out, i = [], 0
    for t, end, measured in calls:
        while i < len(seen) and seen[i][1] < end:
            i += 1
        if i == len(seen):
            break
        if measured:
            out.append(seen[i][0] - t)
    return out


def one_round(server, work, args, r):
    from kafkalite.client import Producer
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.connectors.iceberg import sql_catalog
    from kafkalite.connect.offsets import FileOffsetStore
    from bench_connect import create_topic
    topic, table, name = f"lag-{r}", f"lag.round{r}", f"lag-round{r}"
    create_topic(server, topic)
    uri, wh = f"sqlite:///{work}/catalog.db", "file://" + os.path.join(work, "warehouse")
    per_tick = max(1, int(args.rate * PACE_S))
    values = encoded("json", rows_of(per_tick), topic, "")
    worker = Worker({"bootstrap.servers": server.bootstrap,
                     "offset.flush.interval.ms": args.flush_interval_ms},
                    FileOffsetStore(os.path.join(work, f"offsets-{r}.json")))
    worker.start()
    herder = Herder(worker)
    reader = Reader(server, sql_catalog("kafkalite", uri=uri, warehouse=wh), table,
                    f"connect-{name}", topic)
    p = Producer({"bootstrap.servers": server.bootstrap})
    calls, sent = [], 0
    try:
        herder.put_connector_config(name, {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": topic, "iceberg.tables": table, "iceberg.catalog.uri": uri,
            "iceberg.catalog.warehouse": wh}, False)
        reader.start()
        start = time.perf_counter()
        end = start + args.warmup + args.duration
        tick = start
        while tick < end:
            now = time.perf_counter()
            if now < tick:
                time.sleep(tick - now)
            t = time.perf_counter()
            p.produce_batch(topic, values, partition=0)
            sent += len(values)
            calls.append((t, sent, t >= start + args.warmup))
            tick += PACE_S
        p.flush(60)
        deadline = time.perf_counter() + 120
        while time.perf_counter() < deadline and (
                not reader.group_seen or reader.group_seen[-1][1] < sent):
            time.sleep(0.1)
    finally:
        reader.stop.set()
        reader.join(10)
        p.close()
        herder.stop()
        worker.stop()
    return lags(calls, reader.table_seen), lags(calls, reader.group_seen), \
        len(reader.table_seen), sent / (calls[-1][0] - calls[0][0])


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work = os.path.join(args.work_dir or "/tmp", f"iceberg-lag-{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2).start()
    try:
        for r in range(1, args.rounds + 1):
            load = os.getloadavg()
            table, group, snaps, rate = one_round(server, work, args, r)

            def ms(xs, q):
                return "-" if not xs else f"{common.percentile(xs, q / 100) * 1000:,.0f}"
            say(f"round {r}: table lag median {ms(table, 50)} ms, p99 {ms(table, 99)} ms, "
                f"max {ms(table, 100)} ms; group lag median {ms(group, 50)} ms, "
                f"p99 {ms(group, 99)} ms; {snaps} snapshots seen, {rate:,.0f} records/s "
                f"produced; offset.flush.interval.ms {args.flush_interval_ms} "
                f"(load {' '.join(f'{x:.2f}' for x in load)})")
            if table:
                say(f"  table lag mean {statistics.mean(table) * 1000:,.0f} ms over "
                    f"{len(table)} produce calls")
    finally:
        server.stop()
        server.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
