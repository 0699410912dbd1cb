"""What metrics cost on the produce path: the same load on a server with
metrics on (the default) and one with ``--metrics-port -1``, in one run.

    python benchmarks/bench_metrics.py               # about 1 minute
    python benchmarks/bench_metrics.py --quick       # a few seconds

Metrics add per request a timing (two clock reads, a histogram bucket) and
per partition appended or fetched a counter update; nothing per record. The
load: one native producer, ``produce_batch`` of ``--batch`` 100-byte values
with linger.ms 0 and acks=1, to a one-partition topic (the producer still
coalesces what queues while a request is in flight: the records per
Produce request are printed, from the metrics-on server's own counter).
Both servers run at once (one worker each) and take turns, ``--rounds``
rounds of ``--seconds`` each, so load from elsewhere on the machine falls
on both; the figure is the median round. The per-request cost alone is
also timed in-process. Timing never fails anything: this prints figures
(and ``--json``).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.server.node import launcher

VALUE = b"v" * 100
TOPIC = "bench-metrics"


def produce_for(server, seconds: float, batch: int) -> float:
    """Records/s of one producer sending ``batch`` values a call for ``seconds``."""
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 0, "acks": 1})
    try:
        values = [VALUE] * batch
        sent, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            p.produce_batch(TOPIC, values, partition=0)
            sent += batch
            p.poll(0)
        assert p.flush(60) == 0
        return sent / (time.perf_counter() - started)
    finally:
        p.close()


def produce_requests(server) -> float:
    """Produce requests the metrics-on server answered so far (waiting out
    the workers' once-a-second snapshots first)."""
    time.sleep(1.6)
    text = urllib.request.urlopen(server.info["metrics"], timeout=10).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "kafka_network_requestmetrics_requests_total"
               and s.labels.get("request") == "Produce")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per server")
    parser.add_argument("--batch", type=int, default=10, help="values per produce_batch call")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 1 s")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds = 1.0, 2
    root = tempfile.mkdtemp(prefix="kafkalite-bench-metrics-")
    servers = {
        "metrics on": launcher.ServerProcess(os.path.join(root, "on"), workers=1),
        "metrics off": launcher.ServerProcess(os.path.join(root, "off"), workers=1,
                                              extra_args=["--metrics-port", "-1"]),
    }
    rates: dict[str, list[float]] = {name: [] for name in servers}
    records = requests = 0.0
    try:
        for server in servers.values():
            server.start()
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result()
            admin.close()
            produce_for(server, 0.5, args.batch)        # warm-up: connections, metadata
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for name in order:
                if name == "metrics on":
                    before = produce_requests(servers[name])
                rate = produce_for(servers[name], args.seconds, args.batch)
                rates[name].append(rate)
                if name == "metrics on":
                    requests += produce_requests(servers[name]) - before
                    records += rate * args.seconds
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    figures = {name: statistics.median(r) for name, r in rates.items()}
    print(f"produce, {args.batch} x 100-byte values a produce_batch call, acks=1, one partition; "
          f"median of {args.rounds} rounds of {args.seconds:g} s")
    for name, rate in figures.items():
        print(f"  {name:12} {rate:12,.0f} records/s  (rounds: "
              f"{', '.join(f'{x:,.0f}' for x in rates[name])})")
    print(f"  on/off       {figures['metrics on'] / figures['metrics off']:.3f}")
    per_request = timeit.timeit(
        "ctx_started = perf_counter(); stats.observe(0, perf_counter() - ctx_started)",
        setup="from time import perf_counter\nfrom kafkalite.server.metrics import RequestStats\n"
              "stats = RequestStats()", number=200_000) / 200_000
    print(f"  per request: timing and histogram {per_request * 1e6:.2f} us in-process")
    if requests:
        # read from the metrics-on server's own counter (a second behind: a rough figure)
        print(f"  about {records / requests:,.0f} records per Produce request")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "records_per_s": figures, "rounds": rates}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
