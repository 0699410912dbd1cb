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

import os
import shutil
import sys
import tempfile
import time
import timeit
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite import launcher

import common

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
    parser = common.parser(__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a round")
    common.add_rounds(parser, 5, help="rounds per server")
    parser.add_argument("--batch", type=int, default=10, help="values per produce_batch call")
    common.add_quick(parser, "2 rounds of 1 s")
    common.add_json(parser)
    args = common.parse(parser, argv, quick={"seconds": 1.0, "rounds": 2})
    root = tempfile.mkdtemp(prefix="kafkalite-bench-metrics-")
    servers = {
        "metrics on": launcher.ServerProcess(os.path.join(root, "on"), workers=1),
        "metrics off": launcher.ServerProcess(os.path.join(root, "off"), workers=1,
                                              extra_args=["--metrics-port", "-1"]),
    }
    counted = {"records": 0.0, "requests": 0.0}

    def round_of(name: str) -> float:
        if name == "metrics on":
            before = produce_requests(servers[name])
        rate = produce_for(servers[name], args.seconds, args.batch)
        if name == "metrics on":
            counted["requests"] += produce_requests(servers[name]) - before
            counted["records"] += rate * args.seconds
        return rate
    try:
        for server in servers.values():
            server.start()
            admin = AdminClient({"bootstrap.servers": server.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 1)])[TOPIC].result()
            admin.close()
            produce_for(server, 0.5, args.batch)        # warm-up: connections, metadata
        rounds = common.alternating(list(servers), args.rounds, round_of)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
    rates = rounds.values
    figures = {name: rounds.median(name) for name in servers}
    common.say(f"produce, {args.batch} x 100-byte values a produce_batch call, acks=1, "
               f"one partition; median of {args.rounds} rounds of {args.seconds:g} s")
    for name, rate in rates.items():
        common.say(f"  {name:12} rounds: {', '.join(f'{x:,.0f}' for x in rate)} records/s")
    per_request = timeit.timeit(
        "ctx_started = perf_counter(); stats.observe(0, perf_counter() - ctx_started)",
        setup="from time import perf_counter\nfrom kafkalite.server.metrics import RequestStats\n"
              "stats = RequestStats()", number=200_000) / 200_000
    rows = [common.Row("produce, median round", figures["metrics on"], "records/s",
                       figures["metrics off"], "metrics off"),
            common.Row("per request: timing and histogram, in-process", per_request * 1e6, "us",
                       fmt=".2f")]
    if counted["requests"]:
        # read from the metrics-on server's own counter (a second behind: a rough figure)
        rows.append(common.Row("records per Produce request (about)",
                               counted["records"] / counted["requests"]))
    common.say_table(rows)
    common.say_load(rounds)
    if args.json:
        common.write_json(args.json, {"settings": vars(args), "records_per_s": figures,
                                      "rounds": rates}, rounds=rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
