#!/usr/bin/env python
"""Tiered storage's copy lag under a steady producer (issue 71, item 4):
does the copier keep up, after a restart with the store down?

    python benchmarks/bench_tiered_lag.py --producer-rate 1 --runs 3
    python benchmarks/bench_tiered_lag.py --producer-rate 2 --runs 3
    python benchmarks/bench_tiered_lag.py --quick                 # under a minute

Each run: moto's S3 server on a thread of this process (as the tests run
it; --store-latency-ms holds each request that long first, as a store
farther away than memory) and a kafkalite server (one worker) tiering to
it; a topic with
``remote.storage.enable=true`` and --segment-bytes segments (1 MiB); the
store goes down, the server is restarted with the store down, and a
confluent-kafka producer sends --producer-rate MB/s of 1,000-byte random
values (acks=all) for --down-s seconds; then the store comes back and the
producer goes on for --up-s seconds. Every --sample-s the worker's
RemoteCopyLagBytes (``/metrics``: the rolled segments not copied yet) is
read; the run prints it over time, the time from the store's return to
the lag first at two segments or less ("caught up"), the lag over the
last third of the run (its steady state: flat and at most a few segments
when the copier keeps up, growing when it falls behind), and the store's
requests while it was up, per segment copied.

A benchmark never fails on timing: the exit status is 0 whenever the run
completed.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402
from report import say  # noqa: E402

MiB = 1 << 20
VALUE_BYTES = 1000
TOPIC = "bench-lag"
QUICK = dict(down_s=8.0, up_s=25.0, runs=1)
_LAG = re.compile(r'^kafka_server_brokertopicmetrics_remotecopylag(bytes|segments)\{[^}]*'
                  r'topic="' + TOPIC + r'"[^}]*\} ([0-9.e+]+)$', re.M)


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


def copy_lag(server) -> tuple[float, float] | None:
    """(bytes, segments) of RemoteCopyLag, None while the metric is not there."""
    try:
        with urllib.request.urlopen(server.info["metrics"], timeout=10) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    found = {kind: float(v) for kind, v in _LAG.findall(text)}
    return (found["bytes"], found["segments"]) if len(found) == 2 else None


class Producer(threading.Thread):
    """Sends ``rate`` MB/s of 1,000-byte values to TOPIC, paced each 50 ms,
    until ``stop`` is set."""

    def __init__(self, bootstrap: str, rate_mb: float):
        super().__init__(daemon=True)
        self.bootstrap, self.rate = bootstrap, rate_mb * 1_000_000
        self.stop = threading.Event()
        self.sent = 0
        self.failed = 0

    def run(self) -> None:
        import confluent_kafka as ck
        producer = ck.Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20,
                                "acks": "all", "queue.buffering.max.kbytes": 64 * 1024})
        values = [os.urandom(VALUE_BYTES) for _ in range(64)]
        t0 = time.monotonic()

        def done(err, _msg):
            if err is not None:
                self.failed += 1
        while not self.stop.is_set():
            due = int((time.monotonic() - t0) * self.rate / VALUE_BYTES)
            while self.sent < due:
                try:
                    producer.produce(TOPIC, values[self.sent % 64], on_delivery=done)
                    self.sent += 1
                except BufferError:
                    break
            producer.poll(0.05)
        producer.flush(30)


def one_run(work: str, args, run: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafkalite.launcher import ServerProcess
    from moto_s3 import moto_s3_server
    counts: dict[str, int] = {}     # "METHOD what": the store's requests while it was up
    counting = threading.Event()

    def count(method, path):
        if args.store_latency_ms:
            time.sleep(args.store_latency_ms / 1000)    # every request, before the store sees it
        if counting.is_set():
            what = ("segment.log" if path.endswith("/segment.log") else
                    "indexes" if path.endswith("/indexes") else
                    "metadata" if "__remote_log_metadata" in path else "other")
            key = f"{method} {what}"
            counts[key] = counts.get(key, 0) + 1
    with moto_s3_server("bench") as s3:
        s3.on_request = count
        config = os.path.join(work, f"server-{run}.toml")
        with open(config, "w") as f:
            f.write('"remote.log.storage.system.enable" = true\n'
                    f'remote_log_storage_s3_bucket = "bench"\n'
                    f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n')
        server = ServerProcess(os.path.join(work, f"server-{run}"), workers=1,
                               extra_args=["--config", config]).start()
        samples: list[tuple[float, float, float]] = []
        try:
            admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
            admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config={
                "remote.storage.enable": "true", "segment.bytes": str(args.segment_bytes),
                "local.retention.bytes": str(4 * args.segment_bytes)})])[TOPIC].result(30)
            s3.stop()                           # the store goes down ...
            server.stop()
            server.start()                      # ... and the server restarts without it
            producer = Producer(server.kafka_bootstrap, args.producer_rate)
            producer.start()
            t0 = time.monotonic()
            back = t0 + args.down_s
            end = back + args.up_s
            while (now := time.monotonic()) < end:
                if now >= back and not s3.running:
                    s3.start()                  # the store is back
                    counting.set()
                lag = copy_lag(server)
                if lag is not None:
                    samples.append((now - back, lag[0], lag[1]))
                time.sleep(args.sample_s)
            producer.stop.set()
            producer.join(60)
        finally:
            server.stop()
    return {"samples": samples, "requests": dict(counts), "sent": producer.sent,
            "failed": producer.failed, "load": load()}


def summary(r: dict, args) -> dict:
    seg = args.segment_bytes
    up = [(t, b, s) for t, b, s in r["samples"] if t >= 0]
    caught = next((t for t, b, s in up if b <= 2 * seg), None)
    # how fast the backlog went once the copies resumed (after the copies'
    # backoff, which decides when): from the peak to caught up
    peak_t, peak_b = max(((t, b) for t, b, _ in up), key=lambda x: x[1], default=(0, 0))
    after = [(t, b) for t, b, _ in up if t > peak_t and b <= 2 * seg]
    drain = (peak_b - after[0][1]) / MiB / (after[0][0] - peak_t) if after else None
    tail = [b for t, b, s in up if t >= args.up_s * 2 / 3]
    # each copy ends with its segment.log PUT; the bucket-wide DeleteObjects
    # (a POST) are the metadata's versions written over
    segments = max(1, r["requests"].get("PUT segment.log", 0))
    metadata = sum(n for k, n in r["requests"].items() if "metadata" in k or k == "POST other")
    return {"peak_mib": max((b for _, b, _ in r["samples"]), default=0) / MiB,
            "caught_up_s": caught,
            "tail_mean_mib": statistics.mean(tail) / MiB if tail else None,
            "tail_max_mib": max(tail) / MiB if tail else None,
            "segments_copied": segments, "drain_mib_s": drain,
            "requests_per_segment": sum(r["requests"].values()) / segments,
            "metadata_per_segment": metadata / segments}


def main(argv=None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--producer-rate", type=float, default=1.0, help="MB/s")
    parser.add_argument("--segment-bytes", type=int, default=MiB)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--down-s", type=float, default=20.0)
    parser.add_argument("--up-s", type=float, default=90.0)
    parser.add_argument("--sample-s", type=float, default=2.0)
    parser.add_argument("--store-latency-ms", type=float, default=0.0,
                        help="hold each request to the store this long (a store farther "
                             "away than this process's memory, as S3 is)")
    common.add_rounds(parser, 3, flag="--runs", help="runs")
    common.add_quick(parser, "8 s down, 25 s up, one run")
    parser.add_argument("--work-dir", default=None)
    common.add_json(parser, "--output", help="write the figures as JSON here")
    args = common.parse(parser, argv, quick=QUICK)
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # moto's request log
    say(f"bench_tiered_lag: {args.producer_rate:g} MB/s into {args.partitions} partition(s), "
        f"{args.segment_bytes / MiB:g} MiB segments; the store down {args.down_s:g} s across "
        f"a restart, then up {args.up_s:g} s; {args.store_latency_ms:g} ms added to each of "
        f"the store's requests; {args.runs} run(s); load {load()} "
        f"({os.cpu_count()} CPUs)")
    results = []
    work = tempfile.mkdtemp(prefix="kafkalite-bench-tiered-lag-", dir=args.work_dir)
    try:
        for run in range(args.runs):
            say(f"  run {run + 1}: load {load()}")
            r = one_run(work, args, run)
            s = summary(r, args)
            line = []
            for t, b, n in r["samples"]:
                if not line or t - line[-1][0] >= 10 or t == r["samples"][-1][0]:
                    line.append((t, b, n))
            say("    lag (s after the store came back: MiB): " + ", ".join(
                f"{t:+.0f}: {b / MiB:.1f}" for t, b, _ in line))
            say(f"    {r['sent'] * VALUE_BYTES / 1e6:.0f} MB sent ({r['failed']} failed); "
                f"peak lag {s['peak_mib']:.1f} MiB; caught up "
                + ("never" if s["caught_up_s"] is None else f"{s['caught_up_s']:.0f} s")
                + " after the store came back"
                + ("" if s["drain_mib_s"] is None else
                   f" (the backlog drained at {s['drain_mib_s']:.1f} MiB/s or more)")
                + "; last third: lag "
                + ("n/a" if s["tail_mean_mib"] is None else
                   f"{s['tail_mean_mib']:.1f} MiB mean, {s['tail_max_mib']:.1f} max")
                + f"; {s['segments_copied']} segments copied while the store was up, "
                f"{s['requests_per_segment']:.2f} requests a segment, of which "
                f"{s['metadata_per_segment']:.2f} the metadata's ({r['requests']}); "
                f"load {r['load']}")
            results.append({**s, "requests": r["requests"], "load": r["load"],
                            "samples": r["samples"]})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.output:
        common.write_json(args.output, {"settings": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
