#!/usr/bin/env python
"""Produce requests a producer sends for records spread over many partitions.

    python benchmarks/bench_produce_requests.py [--partitions 100] [--rate 5000] [--quick]

One server (two workers) and one topic of ``--partitions`` partitions. For
each ``linger.ms`` in ``--lingers``, kafkalite's producer (its default
link, TCP) and confluent-kafka's (through the Kafka listener) each send
``--rate`` records/s of ``--value-bytes`` for ``--seconds``, round-robin
over the partitions, acks=1. The figure is the Produce requests the
server answered meanwhile (its own metrics, ``/metrics``'s
``kafka_network_requestmetrics_requests_total{request="Produce"}``), as
requests/s and records a request; and the CPU time the server's workers
took meanwhile (utime + stime of their processes, /proc/<pid>/stat) per
Produce request: with records spread this thin nearly every request
carries one-record batches, so it is the worker's cost of a one-record
Produce end to end (decode, log append, response; issue 46). Each request
costs both ends a request path and a socket write; a producer that lets
each partition's batch linger on its own sends one per batch. Nothing
here fails on timing.

Prints a table and writes results.json and results.md to ``--output-dir``
(default benchmarks/results/produce-requests-<timestamp>).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import report  # noqa: E402
from report import Results, machine_info, say  # noqa: E402

from kafkalite.client import AdminClient, NewTopic, Producer  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

TOPIC = "produce-requests"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
QUICK = {"seconds": 1.0, "rate": 2000}
PRODUCE_SAMPLE = 'kafka_network_requestmetrics_requests_total{request="Produce"}'


def produce_requests(srv: ServerProcess) -> float:
    """Produce requests the server has answered so far."""
    text = urllib.request.urlopen(srv.info["metrics"], timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(PRODUCE_SAMPLE))


def settled_requests(srv: ServerProcess, timeout: float = 10.0) -> float:
    """The count once two scrapes 0.5 s apart agree (workers report theirs
    to the supervisor now and then)."""
    deadline = time.monotonic() + timeout
    last = produce_requests(srv)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = produce_requests(srv)
        if now == last:
            return now
        last = now
    return last


def workers_cpu_seconds(srv: ServerProcess) -> float:
    """utime + stime of the server's workers so far (fields 14 and 15 of
    /proc/<pid>/stat), where Produce requests are served."""
    total = 0
    for pid in srv.worker_pids():
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLOCK_TICKS


def kafkalite_producer(srv: ServerProcess, linger_ms: float):
    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": 1, "linger.ms": linger_ms})
    return p.produce, p.poll, p.flush, p.close


def confluent_producer(srv: ServerProcess, linger_ms: float):
    from confluent_kafka import Producer as CkProducer
    p = CkProducer({"bootstrap.servers": srv.kafka_bootstrap, "acks": 1,
                    "linger.ms": linger_ms})
    return p.produce, p.poll, p.flush, lambda: None


def run(make, srv: ServerProcess, linger_ms: float, partitions: int, rate: int,
        seconds: float, value: bytes) -> tuple[int, float, float]:
    """(records sent, Produce requests the server answered for them, the
    workers' CPU seconds meanwhile)."""
    produce, poll, flush, close = make(srv, linger_ms)
    try:
        produce(TOPIC, value, partition=0)          # connect and learn the leaders first
        flush(30)
        before = settled_requests(srv)
        cpu_before = workers_cpu_seconds(srv)
        t0, n = time.perf_counter(), 0
        while (elapsed := time.perf_counter() - t0) < seconds:
            due = int(elapsed * rate)
            while n < due:
                produce(TOPIC, value, partition=n % partitions)
                n += 1
            poll(0)
            time.sleep(0.0002)
        if flush(60) != 0:
            raise RuntimeError("records were not delivered in 60 s")
        requests = settled_requests(srv) - before
        return n, requests, workers_cpu_seconds(srv) - cpu_before
    finally:
        close()


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rate", type=int, default=5000, help="records/s (default 5000)")
    ap.add_argument("--seconds", type=float, default=5.0, help="per producer and linger.ms")
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--lingers", default="1,5", help="linger.ms values (default 1,5)")
    common.add_quick(ap, "1 s at 2,000 records/s (a smoke run)")
    ap.add_argument("--work-dir", help="where the temporary data directory goes")
    ap.add_argument("--output-dir", help="where results go")
    args = common.parse(ap, argv, quick=QUICK)
    out_dir, work = report.make_dirs("produce-requests", args.output_dir, args.work_dir)
    info = machine_info(work)
    started = time.perf_counter()
    say(f"produce requests: {args.rate:,} records/s of {args.value_bytes} B over "
        f"{args.partitions} partitions, {args.seconds:g} s each, linger.ms {args.lingers}")
    res = Results()
    srv = None
    try:
        srv = ServerProcess(os.path.join(work, "data"), workers=2).start()
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        try:
            admin.create_topics([NewTopic(TOPIC, args.partitions)])[TOPIC].result(60)
        finally:
            admin.close()
        value = b"x" * args.value_bytes
        for linger in (float(x) for x in args.lingers.split(",")):
            for name, make in (("confluent", confluent_producer), ("kafkalite", kafkalite_producer)):
                n, requests, cpu = run(make, srv, linger, args.partitions, args.rate, args.seconds,
                                  value)
                key = f"{name}_linger{linger:g}"
                res.add(f"{key}_requests_per_s", 1,
                        f"{name}, linger.ms {linger:g}: Produce requests/s",
                        round(requests / args.seconds, 1), "requests/s",
                        baseline_key=None if name == "confluent"
                        else f"confluent_linger{linger:g}_requests_per_s")
                res.add(f"{key}_records_per_request", 1,
                        f"{name}, linger.ms {linger:g}: records a request",
                        round(n / max(requests, 1), 2), "records",
                        baseline_key=None if name == "confluent"
                        else f"confluent_linger{linger:g}_records_per_request")
                res.add(f"{key}_worker_cpu_us_per_request", 1,
                        f"{name}, linger.ms {linger:g}: workers' CPU a Produce request",
                        round(cpu / max(requests, 1) * 1e6, 1), "us",
                        baseline_key=None if name == "confluent"
                        else f"confluent_linger{linger:g}_worker_cpu_us_per_request")
    finally:
        if srv is not None:
            srv.stop()
            srv.kill()
        shutil.rmtree(work, ignore_errors=True)
    report.machine_info_at_end(info)
    settings = {k: v for k, v in vars(args).items() if k not in ("output_dir", "work_dir")}
    report.write_tables(out_dir, "Produce requests over many partitions", res,
                        ["test", "figure", "value", "confluent-kafka", "ratio", "target", "met"],
                        elapsed=time.perf_counter() - started, info=info, settings=settings,
                        units={"requests/s": "Produce requests answered a second",
                               "records": "records a Produce request",
                               "us": "microseconds of the workers' CPU time"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
