#!/usr/bin/env python
"""A windowed count per key as a persistent SQL query (kafkalite.sql's
CREATE TABLE ... AS SELECT ... WINDOW TUMBLING ... GROUP BY, issue 76's
speed item) beside the same count in the Streams DSL's columnar path,
on the same topic, in the same run.

    python benchmarks/bench_sql_windowed.py                  # 1,000,000 records, 3 rounds
    python benchmarks/bench_sql_windowed.py --quick          # 20,000 records, 1 round

A two-worker server gets a topic of --partitions partitions and --records
records of 100 bytes over --keys keys. Each round runs, taking turns
going first, three Streams applications over the whole topic under
exactly_once_v2 (commit.interval.ms 100), each in this process with one
stream thread and its own application.id, timed from start until it has
processed every record (its repartition topic's too) and closed:

- dsl: ``stream.group_by_key().windowed_by(TimeWindows(1 min, grace 24 h))
  .count().to_stream().to(out)``, the DSL's columnar count;
- sql: the topology the query runner builds for ``SELECT key AS k,
  COUNT(*) AS n FROM t WINDOW TUMBLING (SIZE 1 MINUTE) GROUP BY key``
  (windowed.AggregatePlan: COUNT(*) alone by the record key, so the DSL's
  count, then JSON values out), the same grace;
- sql_expr: the same grouped by ``decode(key)``, an expression: through a
  repartition topic (DuckDB per batch, aggregate_columns).

Figures: input records a second, and CPU per input record, both of this
process (the application) and of the server's process tree (the broker
work the application causes: its fetches, produces, transactions, the
repartition topic). The issue's target: sql at least dsl's throughput.
A benchmark never fails on timing.
"""
from __future__ import annotations

import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402
from report import say  # noqa: E402

from kafkalite.bench import measure  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

QUICK = dict(records=20_000, keys=1_000, rounds=1)
TOPIC = "bench-windowed"
SIDES = ("dsl", "sql", "sql_expr")
SELECTS = {"sql": "SELECT key AS k, COUNT(*) AS n FROM {t} WINDOW TUMBLING (SIZE 1 MINUTE) "
                  "GROUP BY key",
           "sql_expr": "SELECT decode(key) AS k, COUNT(*) AS n FROM {t} WINDOW TUMBLING "
                       "(SIZE 1 MINUTE) GROUP BY decode(key)"}
GRACE_MS = 24 * 3600 * 1000


def produce(bootstrap: str, args) -> None:
    import numpy as np

    from kafkalite.client import AdminClient, NewTopic, Producer
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, args.partitions, 1)])[TOPIC].result()
    admin.close()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = np.random.default_rng(76)
    for start in range(0, args.records, 50_000):
        n = min(50_000, args.records - start)
        keys = [b"key-%d" % k for k in rng.integers(0, args.keys, n)]
        values = rng.integers(ord("a"), ord("z") + 1, (n, 100), dtype=np.uint8)
        producer.produce_batch(TOPIC, values, keys=keys)   # each to its key's partition
        producer.flush()


def topology(side: str, sink: str):
    from kafkalite.streams import Produced, Serdes, StreamsBuilder, TimeWindows
    if side == "dsl":
        b = StreamsBuilder()
        (b.stream(TOPIC).group_by_key()
         .windowed_by(TimeWindows.of_size_and_grace(60_000, GRACE_MS)).count()
         .to_stream().to(sink, Produced.with_(Serdes.bytes(), Serdes.long())))
        return b.build()
    from kafkalite.sql.windowed import AggregatePlan
    return AggregatePlan(SELECTS[side].format(t=f'"{TOPIC}"'), TOPIC).topology(sink)


def run(side: str, n: int, srv, work: str, args) -> dict:
    from kafkalite.streams import KafkaStreams
    tag = f"{side}-{n}".replace("_", "-")
    streams = KafkaStreams(topology(side, f"out-{tag}"), {
        "application.id": f"bench-{tag}", "bootstrap.servers": srv.bootstrap,
        "processing.guarantee": "exactly_once_v2", "commit.interval.ms": 100,
        "state.dir": os.path.join(work, f"state-{tag}")})
    # the repartitioned side processes each record twice: read, then again
    # from its repartition topic
    expected = args.records * (2 if side == "sql_expr" else 1)
    cpu0, server0 = _self_cpu(), measure.tree_seconds(measure.process_table(), [srv.proc.pid])
    t0 = time.perf_counter()
    streams.start()
    try:
        while streams.metrics()["processed"] < expected:
            if streams.state == KafkaStreams.ERROR:
                raise RuntimeError(f"{tag}: {streams.error!r}")
            time.sleep(0.01)
    finally:
        streams.close()
    seconds = time.perf_counter() - t0
    server = measure.tree_seconds(measure.process_table(), [srv.proc.pid]) - server0
    return {"seconds": seconds, "app_cpu_s": _self_cpu() - cpu0, "server_cpu_s": server}


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main(argv=None) -> int:
    p = common.parser(__doc__)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys (default: 10,000)")
    p.add_argument("--partitions", type=int, default=4)
    common.add_quick(p, "20,000 records, 1,000 keys, 1 round: checks that the benchmark works")
    common.add_rounds(p, 3)
    common.add_json(p)
    args = common.parse(p, argv, QUICK)
    with tempfile.TemporaryDirectory(prefix="bench-sql-windowed-") as work:
        srv = ServerProcess(os.path.join(work, "data")).start(timeout=120)
        try:
            t0 = time.perf_counter()
            produce(srv.bootstrap, args)
            say(f"produced {args.records:,} records of 100 bytes over {args.keys:,} keys in "
                f"{time.perf_counter() - t0:.1f} s")
            count = iter(range(1_000_000))
            rounds = common.alternating(SIDES, args.rounds,
                                        lambda side: run(side, next(count), srv, work, args))
        finally:
            srv.stop()
    common.say_load(rounds)
    report(rounds, args)
    return 0


def report(rounds, args) -> None:
    figures = {}
    for side in SIDES:
        runs = rounds.values[side]
        figures[f"{side}_records_per_s"] = [args.records / r["seconds"] for r in runs]
        figures[f"{side}_app_cpu_us_per_record"] = [r["app_cpu_s"] / args.records * 1e6
                                                    for r in runs]
        figures[f"{side}_server_cpu_us_per_record"] = [r["server_cpu_s"] / args.records * 1e6
                                                       for r in runs]
        for key, unit in (("records_per_s", " rec/s"), ("app_cpu_us_per_record", " us"),
                          ("server_cpu_us_per_record", " us")):
            common.say_runs(f"{side} {key.replace('_', ' ')}", figures[f"{side}_{key}"],
                            unit, fmt=",.1f")
    med = {k: statistics.median(v) for k, v in figures.items()}
    rows = [common.Row(f"windowed count per key, {args.records:,} records",
                       med["sql_records_per_s"], "rec/s", med["dsl_records_per_s"],
                       "Streams DSL columnar", ">= 1x",
                       med["sql_records_per_s"] >= med["dsl_records_per_s"]),
            common.Row("the same, GROUP BY an expression (repartitioned)",
                       med["sql_expr_records_per_s"], "rec/s", med["dsl_records_per_s"],
                       "Streams DSL columnar")]
    for where in ("app", "server"):
        key = f"{where}_cpu_us_per_record"
        rows += [common.Row(f"{where} CPU per record, {side}", med[f"{side}_{key}"], "us",
                            med[f"dsl_{key}"], "Streams DSL columnar", fmt=".2f")
                 for side in ("sql", "sql_expr")]
    common.say_table(rows)
    if args.json:
        common.write_json(args.json, figures, rounds=rounds)


if __name__ == "__main__":
    sys.exit(main())
