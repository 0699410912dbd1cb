#!/usr/bin/env python
"""Iceberg topic commit lag under a steady produce rate: how long after a
record is produced its partition leader's table holds it, beside the
topic's iceberg.target.lag.ms (the commit schedule's own bound).

    python benchmarks/bench_iceberg_commit_lag.py              # 50,000 records/s, 30 s, 3 rounds
    python benchmarks/bench_iceberg_commit_lag.py --quick      # seconds: a smoke run

Each round starts a fresh server (2 workers) with a topic of
``--partitions`` partitions made an Iceberg topic (``iceberg.mode
key_value``, ``iceberg.target.lag.ms`` ``--target-lag-ms``), then one
producer (kafkalite's, ``Producer.produce_batch``) sends ``--rate``
records/s of ``--value-bytes`` B spread evenly over the partitions, paced
every 10 ms, for ``--warmup`` s and then ``--duration`` s measured. A
thread reads the table's latest snapshot from the node's catalog every
50 ms (each snapshot's summary says, per partition, the next offset the
table holds). A call's records are committed at the first read whose
offsets cover them: its commit lag is that read's time less the time the
call was made (so it includes the producer's and the broker's share,
a few ms, and up to 50 ms of the reads' own spacing). After the run the
benchmark waits until the table holds every record.

Printed: the commit lag's median, p99 and max over the measured calls
beside the target lag, the records/s produced beside the rate asked, and
each round's machine state. Exit status 0 whenever the run completed: a
figure is never a failure.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import common  # noqa: E402  (benchmarks/: the script's own directory)
from report import say  # noqa: E402

TOPIC = "bench-commit-lag"
PACE_S = 0.010          # the producer sends what fell due every 10 ms
POLL_S = 0.050          # the table's snapshot read every 50 ms


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=__import__("argparse")
                      .ArgumentDefaultsHelpFormatter)
    p.add_argument("--rate", type=int, default=50_000, help="records/s produced")
    p.add_argument("--duration", type=float, default=30.0, help="seconds measured")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds produced first, not counted")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--target-lag-ms", type=int, default=1000,
                   help="the topic's iceberg.target.lag.ms")
    common.add_rounds(p, 3, help="rounds, a fresh server each")
    common.add_quick(p, "5,000 records/s for 3 s after 1 s, 1 round: a smoke run")
    common.add_json(p)
    p.add_argument("--work-dir", default=None, help="parent of the temporary data directories")
    return common.parse(p, argv, quick={"rate": 5_000, "duration": 3.0, "warmup": 1.0,
                                        "rounds": 1})


class SnapshotReader(threading.Thread):
    """Reads the table's committed offsets every POLL_S: (time, {partition:
    next offset}) for each read that found a newer snapshot."""

    def __init__(self, data_dir: str):
        super().__init__(daemon=True)
        self.data_dir = data_dir
        self.seen: list[tuple[float, dict]] = []
        self.stop = threading.Event()
        self.errors = 0

    def run(self) -> None:
        from kafkalite.storage.iceberg.topic_table import (NAMESPACE, committed_offsets,
                                                          open_catalog)
        catalog = None
        last = None
        while not self.stop.wait(POLL_S):
            try:
                if catalog is None:
                    catalog = open_catalog(os.path.join(self.data_dir, "iceberg"))
                offsets = committed_offsets(catalog.load_table((NAMESPACE, TOPIC)))
            except Exception:       # noqa: BLE001 -- no table yet, or a read mid-commit
                self.errors += 1
                continue
            if offsets != last:
                self.seen.append((time.monotonic(), offsets))
                last = offsets

    def committed_at(self, partition: int, count: int) -> float | None:
        """The first read at which ``partition`` held ``count`` records."""
        for at, offsets in self.seen:
            if offsets.get(partition, 0) >= count:
                return at
        return None


def one_round(args, work: str) -> dict:
    from kafkalite.client import AdminClient, NewTopic, Producer
    from kafkalite.launcher import ServerProcess
    data = tempfile.mkdtemp(prefix="commit-lag-", dir=work)
    server = ServerProcess(os.path.join(data, "data"), workers=2).start()
    reader = None
    try:
        admin = AdminClient({"bootstrap.servers": server.bootstrap})
        configs = {"iceberg.mode": "key_value",
                   "iceberg.target.lag.ms": str(args.target_lag_ms)}
        for f in admin.create_topics([NewTopic(TOPIC, args.partitions,
                                               config=configs)]).values():
            f.result()
        admin.close()
        values = [(b"%010d" % i + b"x" * args.value_bytes)[:args.value_bytes]
                  for i in range(4096)]
        keys = [b"key-%04d" % i for i in range(4096)]
        failed: list = []
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
        reader = SnapshotReader(server.data_dir)
        reader.start()
        sent = [0] * args.partitions
        # (made at, partition, the partition's records by then, the call's records)
        calls: list[tuple[float, int, int, int]] = []
        total = 0
        t0 = time.monotonic()
        measure_from = t0 + args.warmup
        end = measure_from + args.duration
        part = 0
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = int((now - t0) * args.rate) - total
            while due > 0:
                n = min(due, len(values))
                producer.produce_batch(TOPIC, values[:n], keys[:n], partition=part,
                                       on_delivery=lambda err, _: err and failed.append(err))
                sent[part] += n
                total += n
                due -= n
                if now >= measure_from:
                    calls.append((now, part, sent[part], n))
                part = (part + 1) % args.partitions
            producer.poll(0)
            time.sleep(max(0.0, PACE_S - (time.monotonic() - now)))
        produced_s = time.monotonic() - t0
        if producer.flush(120) or failed:
            raise RuntimeError(f"the producer did not deliver every record: {failed[:1]}")
        producer.close()
        deadline = time.monotonic() + 120 + args.target_lag_ms / 1000
        want = {p: sent[p] for p in range(args.partitions)}
        while (not reader.seen or reader.seen[-1][1] != want) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        reader.stop.set()
        reader.join(10)
        if not reader.seen or reader.seen[-1][1] != want:
            raise RuntimeError(f"the table holds {reader.seen[-1][1] if reader.seen else {}}, "
                               f"not {want}, 120 s after the last record")
        lags = [reader.committed_at(p, count) - at for at, p, count, _ in calls]
        measured = sum(n for _, _, _, n in calls)
        return {"lags_ms": [lag * 1000 for lag in lags], "records": total,
                "measured_records": measured, "seconds": produced_s,
                "rate": measured / args.duration, "snapshots": len(reader.seen),
                "read_errors": reader.errors}
    finally:
        if reader is not None:
            reader.stop.set()
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    work = tempfile.mkdtemp(prefix="bench-commit-lag-", dir=args.work_dir)
    try:
        say(f"Iceberg topic commit lag: {args.rate:,} records/s of {args.value_bytes} B over "
            f"{args.partitions} partitions, {args.warmup:g} s + {args.duration:g} s measured, "
            f"iceberg.target.lag.ms {args.target_lag_ms}, {args.rounds} round(s), a fresh "
            f"server each")
        rounds = common.alternating(["kafkalite"], args.rounds, lambda _: one_round(args, work))
        results = rounds.values["kafkalite"]
        rows = []
        for i, r in enumerate(results):
            lags = r["lags_ms"]
            say(f"round {i + 1}: {r['rate']:,.0f} records/s produced, {r['snapshots']} "
                f"snapshots read; commit lag median {statistics.median(lags):,.0f} ms, p99 "
                f"{common.percentile(lags, 0.99):,.0f} ms, max {max(lags):,.0f} ms over "
                f"{len(lags):,} calls")
            rows += [
                common.Row(f"round {i + 1}: commit lag, median", statistics.median(lags), "ms",
                           args.target_lag_ms, "iceberg.target.lag.ms"),
                common.Row(f"round {i + 1}: commit lag, p99", common.percentile(lags, 0.99), "ms",
                           args.target_lag_ms, "iceberg.target.lag.ms"),
                common.Row(f"round {i + 1}: commit lag, max", max(lags), "ms",
                           args.target_lag_ms, "iceberg.target.lag.ms"),
                common.Row(f"round {i + 1}: records/s produced", r["rate"], "records/s",
                           args.rate, "the rate asked"),
            ]
        common.say_table(rows)
        common.say_load(rounds)
        if args.json:
            common.write_json(args.json, {
                "rate": args.rate, "duration": args.duration, "warmup": args.warmup,
                "partitions": args.partitions, "value_bytes": args.value_bytes,
                "target_lag_ms": args.target_lag_ms,
                "rounds": [{k: v for k, v in r.items() if k != "lags_ms"} | {
                    "lag_ms_median": statistics.median(r["lags_ms"]),
                    "lag_ms_p99": common.percentile(r["lags_ms"], 0.99),
                    "lag_ms_max": max(r["lags_ms"]), "calls": len(r["lags_ms"])}
                    for r in results]}, rounds=rounds)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
